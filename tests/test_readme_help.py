"""The READMEs, the reference documents under docs/ and the programs cannot drift apart.

Every command line that README.md, README.zh-CN.md or a docs/*.md file shows in a code block is
exercised here, or by the test named:

* this tool's command lines are parsed by its real parser (`build_parser`), every flag spelt out
  in full (argparse alone would accept a prefix); then `run` runs for real with `--dry-run` (every
  check of its flags and files, no cluster) and `show-worker` runs for real; `check`, `cleanup`,
  `compare` and `reproduce` need a cluster or earlier runs, so they are parsed only (tests/test_run.py
  and tests/test_reproduce.py run them against the fake cluster);
* `python3 tests/fakecluster.py ...` is parsed by the fake cluster's own parser, and the README's
  no-cluster command runs end to end in tests/test_demo.py;
* `kubectl ...` is parsed by kubectl's command line as the fake models it (tests/fakekube/cli.py:
  pflag rules and kubectl v1.32's flags of the commands the tool runs);
* the test command is the one .ci/run runs (through tests/report.py, with the same arguments);
* the rest is listed in UNCHECKED with the reason; a line that is none of these fails.

Every flag named in inline code exists in the program it belongs to, and every flag the tool
offers is documented in docs/commands.md."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import rl_batch_demo as demo
from tests import fakecluster, report
from tests.fakekube import cli as fake_kubectl
from tests.fakekube.common import KubectlError
from tests.toolprocess import image_python

ROOT = Path(demo.__file__).resolve().parent
COMMANDS_DOC = ROOT / "docs" / "commands.md"
TEST_COMMAND = "python3 -m unittest discover -s tests -t ."
SUBCOMMANDS = ("check", "cleanup", "compare", "reproduce", "run", "show-worker")

# Command lines of the docs that no test can run or parse, each with the reason (a full match of
# the line). Every entry must still match some line, so the list cannot outlive the docs.
UNCHECKED: Dict[str, str] = {
    r"pip install \.": "installs this clone with setuptools from a package index; "
    "test_the_installed_commands_exist checks the two commands it installs",
    r"export KUBECONFIG=\S+": "points kubectl at the reader's own cluster",
    r"printf %s\\n \{.*\}": "writes the README's sample tasks; tests/test_own_episodes.py "
    "runs it and the template on the tasks it writes (TemplateWorkerTest)",
    r"cat \S+/(results\.json|rewards\.jsonl)": "prints a file the run before it wrote; tests/test_demo.py "
    "reads the demo's results.json, tests/test_own_episodes.py checks the documented rewards.jsonl",
}

# Flags of programs other than the tool, its fakes and its benchmark, named in the docs' prose.
OTHER_FLAGS: Dict[str, Dict[str, str]] = {
    "kubectl": {
        "--dry-run": "`kubectl apply --dry-run=server`, run by the reader on the tool's --dry-run manifests; "
        "the tool never runs apply, so the fake kubectl does not model it",
    },
    "ruff": {"--check": "`ruff format --check`, run by .ci/run"},
    "mypy": {"--strict": "`mypy --strict`, run by .ci/run"},
    "curl": {"--data-binary": "pushing the metrics file to a Pushgateway"},
    "node_exporter": {"--collector.textfile.directory": "the textfile collector's directory"},
}

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9.-]*[a-z0-9]")
TOOL_PREFIX = re.compile(r"^(?:python3 rl_batch_demo\.py|kubectl rl-batch-demo|rl-batch-demo)(?:\s|$)")
SHELL_OPERATORS = {">", ">>", "|", "&&", "||", ";", "2>", "2>&1"}


def assert_ci_runs_the_test_command(test: unittest.TestCase) -> None:
    """.ci/run runs TEST_COMMAND through tests/report.py, which hands the same arguments to
    unittest's own command line (they are its default too) and writes the JSON report CI counts."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    arguments = TEST_COMMAND.split("python3 -m unittest ", 1)[1]
    test.assertIn(f'\npython3 -m tests.report --json "$logs/report-default.json" {arguments} 2>&1\n', ci)
    test.assertEqual(" ".join(report.DEFAULT_ARGUMENTS), arguments)


def documents() -> List[Path]:
    """Every document a reader can reach: both READMEs and everything under docs/."""
    return [ROOT / "README.md", ROOT / "README.zh-CN.md", *sorted((ROOT / "docs").glob("*.md"))]


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def code_blocks(text: str) -> Iterator[Tuple[str, List[str]]]:
    """(language, lines) of each fenced code block, backslash continuations joined."""
    language: Optional[str] = None
    lines: List[str] = []
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if language is None:
                language, lines = line.strip()[3:].strip(), []
            else:
                yield language, lines
                language = None
            continue
        if language is None:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^\s*```.*?^\s*```[^\n]*$", "", text, flags=re.MULTILINE | re.DOTALL)


def inline_code(text: str) -> List[str]:
    """Inline code spans of the prose (a span may wrap onto the next line), whitespace collapsed."""
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose(text))]


def parsers() -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    parser = demo.build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return parser, dict(action.choices)
    raise AssertionError("the tool's parser has no subcommands")


def options(parser: argparse.ArgumentParser) -> Set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def flag_names(tokens: Sequence[str]) -> List[str]:
    return [token.split("=", 1)[0] for token in tokens if token.startswith("--") and len(token) > 2]


def command_of(argv: Sequence[str]) -> Optional[str]:
    return next((token for token in argv if not token.startswith("-")), None)


def kubectl_flags() -> Set[str]:
    """Every long flag of kubectl as the fake models it, global and per command."""
    flags = list(fake_kubectl.GLOBAL_FLAGS)
    for command_flags in fake_kubectl.COMMAND_FLAGS.values():
        flags += command_flags
    return {"--" + flag.name for flag in flags}


def bench_flags(script: str = "bench/bench.py") -> Set[str]:
    """bench/bench.py's flags (or another script's: tools/build.py), from its --help (its parser
    lives inside its main)."""
    result = subprocess.run(
        [image_python(), str(ROOT / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=fakecluster.ENVIRONMENT,
    )
    return set(FLAG.findall(result.stdout))


class DocumentCommandsTest(unittest.TestCase):
    """Every code block's command lines, run or parsed by their program."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.top, cls.subparsers = parsers()
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-docs-")
        cls.addClassCleanup(scratch.cleanup)
        cls.scratch = Path(scratch.name)
        # The files the documented `run --worker my_worker.py --tasks tasks.jsonl` reads: the
        # worker `show-worker --template > my_worker.py` writes, and docs/own-episodes.md's tasks.
        template = io.StringIO()
        with contextlib.redirect_stdout(template):
            assert demo.main(["show-worker", "--template"]) == 0
        own = (ROOT / "docs" / "own-episodes.md").read_text(encoding="utf-8")
        tasks = next("\n".join(lines) + "\n" for language, lines in code_blocks(own) if language == "jsonl")
        cls.inputs = {"my_worker.py": template.getvalue(), "tasks.jsonl": tasks}

    def setUp(self) -> None:
        self.unchecked_used: Set[str] = set()
        self.checked = 0

    # -- the programs ---------------------------------------------------------------------

    def check_tool(self, where: str, argv: List[str]) -> None:
        command = command_of(argv)
        self.assertIn(command, SUBCOMMANDS, f"{where}: no such command")
        assert command is not None
        before = argv[: argv.index(command)]
        for flag in flag_names(before):
            self.assertIn(flag, options(self.top), f"{where}: {flag} is not an option of the tool")
        for flag in flag_names(argv[argv.index(command) + 1 :]):
            self.assertIn(flag, options(self.subparsers[command]), f"{where}: `{command}` has no {flag}")
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors):
            try:
                demo.build_parser().parse_args(argv)
            except SystemExit:
                self.fail(f"{where}: the tool's parser refuses it: {errors.getvalue().strip()}")
        if command == "run":
            self.run_in_scratch(where, [*argv, "--dry-run"])
        elif command == "show-worker":
            out = self.run_in_scratch(where, argv)
            compile(out, "show-worker output", "exec")  # it is saved and run as a worker
        self.checked += 1

    def run_in_scratch(self, where: str, argv: List[str]) -> str:
        """demo.main(argv) in a directory of its own, with the inputs the docs' commands read; an
        absolute path the docs show (`--output /tmp/...`) is moved into that directory, so the
        test writes nowhere else."""
        directory = Path(tempfile.mkdtemp(dir=self.scratch))
        for file_name, text in self.inputs.items():
            (directory / file_name).write_text(text, encoding="utf-8")
        argv = [str(directory / arg.lstrip("/")) if arg.startswith("/") else arg for arg in argv]
        out, err = io.StringIO(), io.StringIO()
        previous = os.getcwd()
        os.chdir(directory)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = demo.main(argv)
        except SystemExit as stop:
            code = int(stop.code or 0)
        finally:
            os.chdir(previous)
        self.assertEqual(code, 0, f"{where}: `{shlex.join(argv)}` exits {code}: {err.getvalue().strip()}")
        return out.getvalue()

    def check_fakecluster(self, where: str, argv: List[str]) -> None:
        parser = fakecluster.build_parser()
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors):
            try:
                parser.parse_args(argv)
            except SystemExit:
                self.fail(f"{where}: tests/fakecluster.py refuses it: {errors.getvalue().strip()}")
        self.checked += 1

    def check_kubectl(self, where: str, argv: List[str]) -> None:
        try:
            command, rest = fake_kubectl.split_command(argv)
            self.assertIn(command, fake_kubectl.COMMAND_FLAGS, f"{where}: kubectl {command} is not modelled")
            assert command is not None
            fake_kubectl.parse_flags(rest, fake_kubectl.GLOBAL_FLAGS + fake_kubectl.COMMAND_FLAGS[command], command)
        except KubectlError as error:
            self.fail(f"{where}: kubectl refuses it: {error.message}")
        self.checked += 1

    def check_shell_line(self, where: str, line: str) -> None:
        tokens = shlex.split(line, comments=True)
        if not tokens:
            return
        cut = next((i for i, token in enumerate(tokens) if token in SHELL_OPERATORS), len(tokens))
        tokens = tokens[:cut]
        words = " ".join(tokens)
        if tokens[0] == "eval" and len(tokens) == 2 and re.fullmatch(r"\$\((.*)\)", tokens[1]):
            return self.check_shell_line(where, tokens[1][2:-1])
        if TOOL_PREFIX.match(words):
            skip = 1 if tokens[0] == "rl-batch-demo" else 2
            return self.check_tool(where, tokens[skip:])
        if tokens[:2] == ["python3", "tests/fakecluster.py"]:
            return self.check_fakecluster(where, tokens[2:])
        if tokens[0] == "kubectl":
            return self.check_kubectl(where, tokens[1:])
        if words == TEST_COMMAND:
            assert_ci_runs_the_test_command(self)
            self.checked += 1
            return None
        for pattern in UNCHECKED:
            if re.fullmatch(pattern, words):
                self.unchecked_used.add(pattern)
                return None
        self.fail(f"{where}: a command line no test checks: {line!r} (check it, or list it in UNCHECKED)")
        return None

    # -- the tests ----------------------------------------------------------------------

    def test_every_code_block_says_its_language(self) -> None:
        for path in documents():
            lines = path.read_text(encoding="utf-8").splitlines()
            fences = [line.strip() for line in lines if line.strip().startswith("```")]
            openings = fences[0::2]
            self.assertEqual(len(fences) % 2, 0, f"{name(path)}: an unclosed code block")
            for opening in openings:
                self.assertNotEqual(opening, "```", f"{name(path)}: a code block without a language (sh, text, ...)")

    def test_command_lines(self) -> None:
        per_document: Dict[str, int] = {}
        for path in documents():
            before = self.checked
            for language, lines in code_blocks(path.read_text(encoding="utf-8")):
                for line in lines:
                    where = f"{name(path)}: {line.strip()}"
                    if language == "sh":
                        self.check_shell_line(where, line)
                    elif language == "yaml":  # a CI job's step: the tool's command line inside
                        found = re.search(r"python3 rl_batch_demo\.py (.*)$", line)
                        if found:
                            self.check_tool(where, shlex.split(found.group(1)))
                    else:
                        self.assertIsNone(TOOL_PREFIX.match(line.strip()), f"{where}: a command in a {language} block")
            per_document[name(path)] = self.checked - before
        self.assertGreaterEqual(per_document["README.md"], 12, per_document)
        self.assertGreaterEqual(per_document["README.zh-CN.md"], 12, per_document)
        self.assertEqual(set(UNCHECKED) - self.unchecked_used, set(), "UNCHECKED entries no document uses")

    def test_the_test_command_is_the_one_ci_runs(self) -> None:
        assert_ci_runs_the_test_command(self)
        for readme in ("README.md", "README.zh-CN.md"):
            lines = [line for _, block in code_blocks((ROOT / readme).read_text(encoding="utf-8")) for line in block]
            self.assertTrue(any(line.split("#")[0].strip() == TEST_COMMAND for line in lines), readme)

    def test_the_installed_commands_exist(self) -> None:
        """`pip install .` installs pyproject.toml's [project.scripts]: each names a function here."""
        text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
        section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
        scripts = dict(re.findall(r'^([\w-]+) = "rl_batch_demo:(\w+)"$', section, re.MULTILINE))
        self.assertEqual(set(scripts), {"rl-batch-demo", "kubectl-rl_batch_demo"})
        for function in scripts.values():
            self.assertTrue(callable(getattr(demo, function, None)), function)
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        for script in scripts:
            self.assertIn(f"`{script}`", readme)


class InlineFlagsTest(unittest.TestCase):
    """A flag named in the prose exists in the program it belongs to."""

    def test_every_flag_in_inline_code_exists(self) -> None:
        top, subparsers = parsers()
        tool = {command: options(parser) for command, parser in subparsers.items()}
        known = {
            "tool": options(top).union(*tool.values()),
            "fakecluster": options(fakecluster.build_parser()).union(
                *(options(sub) for sub in parsers_of(fakecluster.build_parser()).values())
            ),
            "bench": bench_flags(),
            "build": bench_flags("tools/build.py"),
            "kubectl": kubectl_flags() | set(OTHER_FLAGS["kubectl"]),
        }
        anything = set().union(*known.values(), *(set(flags) for flags in OTHER_FLAGS.values()))
        spans = 0
        for path in documents():
            for span in inline_code(path.read_text(encoding="utf-8")):
                flags = flag_names(FLAG.findall(span))
                if not flags:
                    continue
                spans += 1
                words = span.split()
                if TOOL_PREFIX.match(span):
                    words = words[1:] if words[0] == "rl-batch-demo" else words[2:]
                if words and words[0] in tool:
                    allowed = tool[words[0]]
                elif TOOL_PREFIX.match(span):
                    allowed = options(top)
                elif span.startswith("python3 tests/fakecluster.py"):
                    allowed = known["fakecluster"]
                elif span.startswith("python3 bench/bench.py"):
                    allowed = known["bench"]
                elif span.startswith("python3 tools/build.py"):
                    allowed = known["build"]
                elif span.startswith("python3 -m tests.report"):
                    allowed = set(FLAG.findall(report.USAGE))  # its own two; unittest's come after them
                elif words[0] in OTHER_FLAGS and words[0] != "kubectl":
                    allowed = set(OTHER_FLAGS[words[0]])
                elif words[0] == "kubectl":
                    allowed = known["kubectl"]
                else:  # a bare flag (`--cascade=foreground`) or a kubectl call without its name
                    allowed = anything
                for flag in flags:
                    self.assertIn(flag, allowed, f"{name(path)}: `{span}` names {flag}, which does not exist")
        self.assertGreater(spans, 100)


def parsers_of(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def table_rows(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.startswith("| `")]


def first_cell(row: str) -> str:
    return re.split(r"(?<!\\)\|", row)[1]


class CommandsReferenceTest(unittest.TestCase):
    """docs/commands.md's tables and the tool's parser name the same commands and flags."""

    def setUp(self) -> None:
        self.text = COMMANDS_DOC.read_text(encoding="utf-8")
        self.top, self.subparsers = parsers()
        self.assertEqual(sorted(self.subparsers), list(SUBCOMMANDS))
        rows = table_rows(section(self.text, "Commands"))
        self.commands = {re.findall(r"`([a-z][a-z-]*)", first_cell(row))[0]: row for row in rows}
        self.run_rows = table_rows(section(self.text, "`run` flags"))
        self.cluster_rows = table_rows(section(self.text, "Cluster flags"))

    def test_every_documented_flag_exists(self) -> None:
        self.assertEqual(sorted(self.commands), list(SUBCOMMANDS))
        for command, row in self.commands.items():
            for flag in flag_names(FLAG.findall(first_cell(row))):
                self.assertIn(flag, options(self.subparsers[command]), f"docs/commands.md: `{command}` has no {flag}")
        self.assertGreaterEqual(len(self.run_rows), 20)
        for row in self.run_rows:
            for flag in flag_names(FLAG.findall(first_cell(row))):
                self.assertIn(flag, options(self.subparsers["run"]), f"docs/commands.md: `run` has no {flag}")
        for row in self.cluster_rows:
            for flag in flag_names(FLAG.findall(first_cell(row))):
                for command in ("check", "cleanup", "reproduce", "run"):
                    self.assertIn(flag, options(self.subparsers[command]), f"{command} lacks cluster flag {flag}")

    def test_every_flag_the_tool_offers_is_documented(self) -> None:
        """The other direction: a new flag needs its place in docs/commands.md."""
        cluster = {flag for row in self.cluster_rows for flag in flag_names(FLAG.findall(first_cell(row)))}
        self.assertEqual(len(cluster), 5)
        for command, parser in self.subparsers.items():
            row = self.commands[command]
            documented = set(flag_names(FLAG.findall(row)))
            if "cluster flags" in row:
                documented |= cluster
            if command == "run":
                documented |= {flag for line in self.run_rows for flag in flag_names(FLAG.findall(first_cell(line)))}
                documented |= cluster
            offered = {option for option in options(parser) if option.startswith("--")} - {"--help"}
            self.assertEqual(offered - documented, set(), f"docs/commands.md does not document `{command}`'s")
        self.assertIn("`python3 rl_batch_demo.py --version`", self.text)
        self.assertEqual(options(self.top), {"-h", "--help", "--version"})

    def test_every_threshold_metric_is_listed(self) -> None:
        listed = re.findall(r"`(\w+_seconds)`", self.text.split("Threshold metrics", 1)[1].split("\n\n", 1)[0])
        self.assertEqual(set(listed), set(demo.THRESHOLD_METRICS))


if __name__ == "__main__":
    unittest.main()
