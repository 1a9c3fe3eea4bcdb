"""The documents' shape: README.md starts where a newcomer starts and stays short, the reference
lives under docs/, every link and anchor resolves, README.zh-CN.md follows the same path in
Chinese with full-width punctuation, and the field tables list exactly the keys of the files the
tool writes. (Their command lines: tests/test_readme_help.py; the no-cluster command end to end:
tests/test_demo.py.)"""

from __future__ import annotations

import re
import unittest
from typing import Any, Dict, List, Optional, Set, Tuple

import rl_batch_demo as demo
from tests import records
from tests.test_readme_help import ROOT, TEST_COMMAND, code_blocks, documents, name

DEMO_COMMAND = "python3 tests/fakecluster.py demo"
README_LINE_BUDGET = 300
CJK = re.compile(r"[\u3400-\u9fff]")


def headings(text: str) -> List[Tuple[int, str]]:
    """(level, title) of every Markdown heading outside code blocks."""
    found = []
    inside = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside and re.match(r"#{1,6} ", line):
            level, title = line.split(" ", 1)
            found.append((len(level), title.strip()))
    return found


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (letters of every
    script kept), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(text: str) -> set:
    seen: Dict[str, int] = {}
    result = set()
    for _, title in headings(text):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(text: str) -> List[str]:
    """Link and image targets outside code blocks."""
    inside = False
    targets = []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside:
            targets += re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line))
    return targets


def section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def commands(text: str) -> List[str]:
    """The command lines of a section's sh blocks, comments dropped."""
    return [line.split("  #")[0].strip() for language, lines in code_blocks(text) if language == "sh" for line in lines]


class LinksTest(unittest.TestCase):
    def test_every_link_and_anchor_resolves(self) -> None:
        checked = 0
        for path in documents():
            for target in links(path.read_text(encoding="utf-8")):
                if re.match(r"[a-z]+:", target):
                    continue  # https: and the like
                file_part, _, anchor = target.partition("#")
                destination = (path.parent / file_part).resolve() if file_part else path
                self.assertTrue(destination.exists(), f"{name(path)}: link to a missing {target}")
                if anchor:
                    self.assertIn(
                        anchor, anchors(destination.read_text(encoding="utf-8")), f"{name(path)}: no #{anchor}"
                    )
                checked += 1
        self.assertGreater(checked, 60)

    def test_the_readme_links_every_reference_document_and_each_links_back(self) -> None:
        readme = set(links((ROOT / "README.md").read_text(encoding="utf-8")))
        docs = sorted((ROOT / "docs").glob("*.md"))
        self.assertGreaterEqual(len(docs), 8)
        for doc in docs:
            self.assertIn(f"docs/{doc.name}", {target.partition("#")[0] for target in readme}, doc.name)
            self.assertIn("../README.md", links(doc.read_text(encoding="utf-8")), doc.name)

    def test_the_readmes_link_each_other(self) -> None:
        self.assertIn("README.zh-CN.md", links((ROOT / "README.md").read_text(encoding="utf-8")))
        self.assertIn("README.md", links((ROOT / "README.zh-CN.md").read_text(encoding="utf-8")))

    def test_the_readme_sections_the_tool_cites_exist(self) -> None:
        """rl_batch_demo.py points its readers at README sections by name."""
        source = (ROOT / "rl_batch_demo.py").read_text(encoding="utf-8")
        cited = set(re.findall(r"README(?::|'s) \"([^\"]+)\"", source))
        titles = {title for _, title in headings((ROOT / "README.md").read_text(encoding="utf-8"))}
        self.assertEqual(cited - titles, set())


class ReadmeShapeTest(unittest.TestCase):
    """README.md: what it is, set up, the no-cluster try, the real cluster; then pointers."""

    def setUp(self) -> None:
        self.text = (ROOT / "README.md").read_text(encoding="utf-8")

    def test_short(self) -> None:
        self.assertLessEqual(len(self.text.splitlines()), README_LINE_BUDGET)

    def test_a_newcomers_order(self) -> None:
        titles = [title for level, title in headings(self.text) if level == 2]
        self.assertEqual(titles[:4], ["Contents", "Set up", "Try it without a cluster", "On a real cluster"])
        self.assertLess(self.text.index("## Contents"), 2000, "the table of contents is near the top")

    def test_the_contents_link_every_section(self) -> None:
        contents = section(self.text, "Contents")
        targets = {target[1:] for target in links(contents) if target.startswith("#")}
        for _, title in headings(self.text)[1:]:
            if title != "Contents":
                self.assertIn(slug(title), targets, f"the contents lack {title!r}")

    def test_set_up_is_install_then_the_tests(self) -> None:
        self.assertEqual(commands(section(self.text, "Set up")), ["pip install .", TEST_COMMAND])

    def test_the_no_cluster_try_is_one_command(self) -> None:
        self.assertEqual(commands(section(self.text, "Try it without a cluster")), [DEMO_COMMAND])

    def test_the_real_cluster_path_is_check_run_cleanup(self) -> None:
        lines = commands(section(self.text, "On a real cluster"))
        tool = [line.split()[2] for line in lines if line.startswith("python3 rl_batch_demo.py ")]
        self.assertEqual(tool, ["check", "run", "cleanup"])


class ChineseReadmeTest(unittest.TestCase):
    """README.zh-CN.md: the same path, in Chinese, with Chinese punctuation."""

    def setUp(self) -> None:
        self.text = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")

    def test_the_same_path(self) -> None:
        titles = [title for level, title in headings(self.text) if level == 2]
        self.assertEqual(titles[:4], ["目录", "安装与测试", "不用集群试一试", "在真实集群上"])
        self.assertEqual(commands(section(self.text, "安装与测试")), ["pip install .", TEST_COMMAND])
        self.assertEqual(commands(section(self.text, "不用集群试一试")), [DEMO_COMMAND])
        real = [line.split()[2] for line in commands(section(self.text, "在真实集群上")) if line.startswith("python3 ")]
        self.assertEqual([real[0], real[-1]], ["check", "cleanup"])
        self.assertIn("run", real)

    def test_the_contents_link_every_section(self) -> None:
        targets = {target[1:] for target in links(section(self.text, "目录")) if target.startswith("#")}
        for level, title in headings(self.text)[1:]:
            if level == 2 and title != "目录":
                self.assertIn(slug(title), targets, f"the contents lack {title!r}")

    def test_full_width_punctuation_in_chinese_prose(self) -> None:
        """In a line of Chinese prose, outside code, the full-width marks: never ASCII , . : ; ( ) ! ?"""
        inside = False
        checked = 0
        for number, line in enumerate(self.text.splitlines(), 1):
            if line.lstrip().startswith("```"):
                inside = not inside
                continue
            if inside or not CJK.search(line):
                continue
            bare = re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`]*`", "``", line))
            ascii_marks = re.findall(r".?[,;:()!?].?|(?<=[\u3400-\u9fff])\.", bare)
            self.assertEqual(ascii_marks, [], f"README.zh-CN.md line {number}: ASCII punctuation in Chinese prose")
            checked += 1
        self.assertGreater(checked, 60)


FIELD_TABLE = re.compile(r"\| `([^`]+)` field \|")


def field_tables(text: str) -> List[Tuple[str, Set[str]]]:
    """(the record a table names, the keys of its first column) of every field table: a table
    whose first header cell is `RECORD` field (docs/development.md, "Field tables")."""
    tables = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        match = FIELD_TABLE.match(line)
        if match:
            keys: Set[str] = set()
            for row in lines[number + 2 :]:
                if not row.startswith("|"):
                    break
                keys |= {key.rstrip("[]") for key in re.findall(r"`([^`]+)`", row.split("|")[1])}
            tables.append((match.group(1), keys))
    return tables


def step(kind: Any, segment: str) -> Any:
    """The type one segment of a record's path leads to: `key`, `key[]` (each item of the list
    under key) or an upper-case placeholder (any key of a dict, or of a record whose keys all
    hold the same type)."""
    kind = records.unwrapped(kind)
    key, items = (segment[:-2], True) if segment.endswith("[]") else (segment, False)
    if key.isupper() and not records.is_record(kind):
        kind = records.typing.get_args(kind)[-1]
    elif key.isupper():
        [kind] = set(records.fields(kind).values())
    else:
        kind = records.fields(kind)[key]
    kind = records.unwrapped(kind)
    return records.unwrapped(records.typing.get_args(kind)[0]) if items else kind


def resolve(label: str) -> Optional[Any]:
    """The record a field table names: a file (results.json) or a path in one (pods[].image_pull);
    None unless exactly one file holds a record there."""
    if label in records.FILES:
        return records.FILES[label]
    found = []
    for record in records.FILES.values():
        try:
            kind = record
            for segment in label.split("."):
                kind = step(kind, segment)
        except (KeyError, IndexError, ValueError):
            continue
        if records.is_record(kind):
            found.append(kind)
    return found[0] if len(found) == 1 else None


class RunFilesTest(unittest.TestCase):
    """docs/outputs.md's Files table mirrors RUN_FILES, the one record of the run directory's
    names: each name the record spells is listed, and each fixed name listed is the record's."""

    def test_the_files_table_lists_exactly_the_records_names(self) -> None:
        table = section((ROOT / "docs" / "outputs.md").read_text(encoding="utf-8"), "Files")
        cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
        listed = set()
        for cell in cells:
            for entry in re.findall(r"`([^`]+)`", cell):
                # a segment with a placeholder (<pod>, round-K) is a pattern, not a fixed name
                listed |= {part for part in entry.strip("/").split("/") if "<" not in part and not part.endswith("-K")}
        self.assertGreater(len(cells), 10)
        named = set(demo.RUN_FILES) | {demo.PROBE_JOB_NAME}  # the probe Job's files are in a directory of its name
        self.assertEqual(sorted(named - listed), [], "names of RUN_FILES that docs/outputs.md's Files table lacks")
        self.assertEqual(sorted(listed - named), [], "names docs/outputs.md's Files table lists that RUN_FILES lacks")


class FieldTablesTest(unittest.TestCase):
    """Each record of every file the tool writes (results.json, rewards.jsonl, receipt.json,
    report.json) has its field tables, and they list exactly its keys."""

    def test_the_tables_list_exactly_the_schemas_keys(self) -> None:
        documented: Dict[Any, Set[str]] = {}
        where: Dict[Any, List[str]] = {}
        for path in documents():
            document = name(path)
            for label, keys in field_tables(path.read_text(encoding="utf-8")):
                record = resolve(label)
                self.assertIsNotNone(record, f"{document}: no record of the schema is `{label}`")
                documented.setdefault(record, set()).update(keys)
                where.setdefault(record, []).append(f"{document} `{label}`")
        expected = [record for root in records.FILES.values() for record in records.reachable(root)]
        self.assertGreater(len(set(expected)), 15)
        for record in expected:
            keys = set(records.fields(record))
            self.assertTrue(record in documented, f"no field table describes {record.__name__} ({sorted(keys)})")
            tables = ", ".join(where[record])
            self.assertEqual(sorted(keys - documented[record]), [], f"keys of {record.__name__} {tables} lack")
            self.assertEqual(sorted(documented[record] - keys), [], f"{tables} list keys {record.__name__} lacks")
        self.assertEqual(set(documented) - set(expected), set())

    def test_the_tables_are_found(self) -> None:
        """The reader of the tables fails on a table it would miss or misread."""
        text = "## x\n\n| `pods[]` field | a |\n| --- | --- |\n| `pod`, `node` | b |\n| `image_pull` | c |\n\nd\n"
        self.assertEqual(field_tables(text), [("pods[]", {"pod", "node", "image_pull"})])
        self.assertIs(resolve("pods[].image_pull"), records.demo.ImagePull)
        self.assertIs(resolve("runtime_operations.nodes.NODE"), records.demo.NodeOperations)
        self.assertIs(resolve("runtime_operations.pooled.OPERATION"), records.demo.OperationFigures)
        self.assertIsNone(resolve("pods[].no_such_key"))

    def test_the_chinese_readme_names_only_real_keys(self) -> None:
        """README.zh-CN.md summarises results.json: every key its tables name is one of the schema's."""
        text = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
        every_key = {
            key
            for root in records.FILES.values()
            for record in records.reachable(root)
            for key in records.fields(record)
        }
        named: Set[str] = set()
        for row in text.splitlines():
            if row.startswith("| `"):
                named |= {key.rstrip("[]") for key in re.findall(r"`([a-z][a-z0-9_]*(?:\[\])?)`", row.split("|")[1])}
        self.assertGreater(len(named), 15)
        self.assertEqual(named - every_key, set())


class FigureSourcesTest(unittest.TestCase):
    """docs/figures.md marks every figure with who measured it, exactly as FIGURE_SOURCES (and
    results.json's figure_sources) does: the figure tables' "measured by" column."""

    def test_every_figure_is_marked_as_the_tool_marks_it(self) -> None:
        lines = (ROOT / "docs" / "figures.md").read_text(encoding="utf-8").splitlines()
        marked: Dict[str, str] = {}
        for number, line in enumerate(lines):
            if not (FIELD_TABLE.match(line) and line.rstrip().endswith("| measured by |")):
                continue
            for row in lines[number + 2 :]:
                if not row.startswith("|"):
                    break
                cells = [cell.strip() for cell in row.strip("|").split("|")]
                for key in re.findall(r"`([^`]+)`", cells[0]):
                    if key in records.demo.FIGURE_SOURCES:
                        marked[key] = cells[-1]
        self.assertEqual(marked, records.demo.FIGURE_SOURCES)
        self.assertEqual(set(records.demo.FIGURE_SOURCES.values()), {"client", "cluster", "pod"})


if __name__ == "__main__":
    unittest.main()
