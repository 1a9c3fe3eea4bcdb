"""The READMEs and `--help` cannot drift apart: every command and flag that README.md or
README.zh-CN.md shows for this tool exists in the corresponding `--help` output."""

from __future__ import annotations

import contextlib
import io
import re
import unittest
from pathlib import Path

import rl_batch_demo as demo

ROOT = Path(demo.__file__).resolve().parent
READMES = ("README.md", "README.zh-CN.md")

# `python3 rl_batch_demo.py run`, `rl-batch-demo run`, `kubectl rl-batch-demo run`
INVOCATION = re.compile(r"(?:rl_batch_demo\.py|(?<![\w./-])rl-batch-demo)((?:\s+--?[\w-]+)*)\s+([a-z][a-z-]*)\b(.*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def help_text(*command: str) -> str:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.suppress(SystemExit):
        demo.build_parser().parse_args([*command, "--help"])
    return stdout.getvalue()


def code_lines(text: str) -> list[str]:
    """Lines of fenced code blocks, with backslash continuations joined."""
    lines: list[str] = []
    inside = False
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return lines


def table_mentions(text: str) -> list[tuple[str, list[str]]]:
    """(command, flags) from README.md's "Commands and flags" tables: the commands table's first
    cells (`check [--count N] ...`) and the `run` flags table's first cells (`--count N`)."""
    section = text.split("### Commands and flags", 1)[1].split("\n### ", 1)[0]
    commands_table, run_table = section.split("`run` flags:", 1)
    mentions = []
    for line in commands_table.splitlines():
        if line.startswith("| `"):
            cell = line.split("|")[1]
            command = re.findall(r"`([a-z][a-z-]*)", cell)[0]
            mentions.append((command, FLAG.findall(cell)))
    for line in run_table.splitlines():
        if line.startswith("| `"):
            mentions.append(("run", FLAG.findall(line.split("|")[1])))
    return mentions


class ReadmeMatchesHelpTest(unittest.TestCase):
    def setUp(self) -> None:
        self.top = help_text()
        self.commands = re.findall(r"^    ([a-z][a-z-]*)\s", self.top, re.MULTILINE)
        self.assertEqual(sorted(self.commands), ["check", "cleanup", "compare", "reproduce", "run", "show-worker"])

    def assert_in_help(self, where: str, command: str, flags: list[str]) -> None:
        self.assertIn(command, self.commands, f"{where}: command {command!r} is not in --help")
        text = help_text(command)
        for flag in flags:
            found = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
            self.assertTrue(found, f"{where}: {flag} is not in `{command} --help`")

    def test_code_blocks(self) -> None:
        for name in READMES:
            invocations = 0
            for line in code_lines((ROOT / name).read_text(encoding="utf-8")):
                for match in INVOCATION.finditer(line):
                    before, command, after = match.groups()
                    for flag in FLAG.findall(before):
                        self.assertIn(flag, self.top, f"{name}: {flag} is not in --help")
                    self.assert_in_help(f"{name}: {line.strip()}", command, FLAG.findall(after))
                    invocations += 1
            with self.subTest(readme=name):
                self.assertGreaterEqual(invocations, 8, f"{name}: the extraction found too few commands")

    def test_the_commands_and_flags_tables(self) -> None:
        mentions = table_mentions((ROOT / "README.md").read_text(encoding="utf-8"))
        self.assertGreaterEqual(len(mentions), 18)
        for command, flags in mentions:
            self.assert_in_help(f"README.md table: {command}", command, flags)

    def test_every_run_flag_is_in_the_readme_table(self) -> None:
        """The other direction: a new `run` flag needs its row."""
        documented = {
            flag
            for command, flags in table_mentions((ROOT / "README.md").read_text())
            for flag in flags
            if command == "run"
        }
        offered = set(FLAG.findall(help_text("run"))) - {"--help"}
        self.assertEqual(offered - documented, set())

    def test_the_readmes_link_each_other(self) -> None:
        self.assertIn("(README.zh-CN.md)", (ROOT / "README.md").read_text(encoding="utf-8"))
        self.assertIn("(README.md)", (ROOT / "README.zh-CN.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    unittest.main()
