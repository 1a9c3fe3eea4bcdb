"""Every line the tool prints to a terminal fits its width (COLUMNS, else the terminal's size,
else 80), counted in display cells (a CJK character takes two); tables narrow and wrap by
column, never inside a figure; output that is not a terminal keeps full lines. Pure tables at
80 and 60 columns, English and Chinese, then a whole run in-process against a call plan."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import unicodedata
import unittest
import unittest.mock
from typing import Any, Dict, List

import rl_batch_demo as demo
from tests.callplan import CallPlanTestCase, Result, RunPlan
from tests.clusterobjects import Batch
from tests.test_reproduce import synthetic_results
from tests.test_summary import summary_results

WIDTHS = (80, 60)


def cells(line: str) -> int:
    """Display cells of a line, counted independently of the tool: East Asian wide and
    full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in line)


def operation(seconds: float) -> Dict[str, Any]:
    bucket = [0.5, 1.0]
    return {
        "count": 10,
        "mean_seconds": seconds,
        "p50_seconds": seconds,
        "p95_seconds": seconds,
        "p50_bucket": bucket,
        "p95_bucket": bucket,
    }


def busy_results() -> Dict[str, Any]:
    """A summary with everything that makes it long: 100 episodes (p99 and mean), a negative
    median with its note, kubelet runtime operations with a note, a long digest and a note."""
    results = summary_results()
    results["pods"] = [dict(row) for _ in range(25) for row in results["pods"]]
    results["phases"] = {**results["phases"], "reward_to_finished_seconds": demo.summarise([-1.3, -1.2, 1.1])}
    pooled = {**demo.no_operations(), "RunPodSandbox": operation(0.61), "CreateContainer": operation(0.02)}
    results["runtime_operations"] = {
        "handler": "cube",
        "pooled": pooled,
        "nodes": {"node-a": {**pooled, "note": "its counters were reset during the run; left out of the pooled"}},
        "sandbox_crosscheck": {"handler_figures": operation(0.0001), "note": "implausibly small " * 6},
    }
    results["image_ids"] = ["docker.io/library/python@sha256:" + "5924371973d2eef8" * 4]
    results["notes"] = ["the Job's pods were created by a queue's admission, so every figure counts from it " * 2]
    return results


class SummaryWidthTest(unittest.TestCase):
    def test_every_line_fits_80_and_60_columns(self) -> None:
        for width in WIDTHS:
            for name, results in (("few", summary_results()), ("busy", busy_results())):
                with self.subTest(width=width, results=name):
                    text = demo.render_summary(results, [("results", "out/results.json")], width=width)
                    for line in text.splitlines():
                        self.assertLessEqual(cells(line), width, line)

    def test_figures_stay_whole_on_their_row(self) -> None:
        """A row's values are on its first line, whole and in order; its label, read down its
        column, is the label."""
        results = busy_results()
        for width in WIDTHS:
            with self.subTest(width=width):
                lines = demo.render_summary(results, width=width).splitlines()
                header = next(i for i, line in enumerate(lines) if line.startswith("phase"))
                for phase in ("python_import_seconds", "reward_to_finished_seconds", "import_to_ready_seconds"):
                    label = demo.PHASE_LABELS[phase]
                    stats = results["phases"][phase]
                    shown = [demo.figure_text(stats[stat], phase) for stat in ("p50", "p95", "max")]
                    pattern = r"\s+".join(re.escape(text) for text in shown)
                    first, found = next(
                        (i, match)
                        for i in range(header, len(lines))
                        if (match := re.search(pattern, lines[i]))
                        and label.startswith(lines[i][: match.start()].strip())
                    )
                    column = found.start()
                    down = [lines[first][:column].strip()]
                    for line in lines[first + 1 :]:
                        if " ".join(down) == label or not label.startswith(" ".join([*down, line[:column].strip()])):
                            break
                        down.append(line[:column].strip())
                    self.assertEqual(" ".join(down), label, lines[first : first + 3])

    def test_a_file_or_a_log_keeps_full_lines(self) -> None:
        results = busy_results()
        full = demo.render_summary(results)
        self.assertEqual(full, demo.render_summary(results, width=None))
        self.assertIn("phase (per episode)                        p50      p95      max      p99     mean  clock", full)
        self.assertTrue(any(cells(line) > 80 for line in full.splitlines()))


class OtherTablesWidthTest(unittest.TestCase):
    def test_compare_fits(self) -> None:
        runs = [("rl-parallel-10", synthetic_results()), ("rl-sequential-10", synthetic_results())]
        rows = demo.comparison(runs)
        names = [name for name, _ in runs]
        wide = demo.render_comparison(names, rows, "text")
        self.assertTrue(any(cells(line) > 60 for line in wide.splitlines()))
        for width in WIDTHS:
            with self.subTest(width=width):
                text = demo.render_comparison(names, rows, "text", width)
                for line in text.splitlines():
                    self.assertLessEqual(cells(line), width, line)
                self.assertIn("1.32 s", text)  # python_import p50, whole

    def test_the_guide_table_fits_in_english_and_chinese(self) -> None:
        for lang in ("en", "zh"):
            runs = [(name, synthetic_results()) for name in ("parallel", "sequential", "warm")]
            table = demo.guide_table(runs, lang, reference=True)  # seven columns, as reproduce's
            for width in WIDTHS:
                with self.subTest(lang=lang, width=width):
                    text = demo.render_guide_table(table, "text", width)
                    for line in text.splitlines():
                        self.assertLessEqual(cells(line), width, line)
                    if lang == "zh":
                        self.assertRegex(text, "[\u4e00-\u9fff]")


class ShellLinesTest(unittest.TestCase):
    def test_a_word_that_fills_its_line_still_breaks_within_the_width(self) -> None:
        """A path exactly as wide as a line's room, then more words: the break's ` \\` fits too
        (seen: the rules review's path, 53 characters after a 6-column indent, at 60 columns)."""
        path = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
        for width in range(56, 64):
            command = f"kubectl --context=c create --raw {path} -f -"
            with self.subTest(width=width):
                text = demo.shell_lines(command, width, comment="# exit 0, 0.100 s")
                for line in text.splitlines():
                    self.assertLessEqual(cells(line), width, text)
                joined = text.replace("\\\n", "")
                self.assertEqual(shlex.split(joined.split("  # ")[0]), shlex.split(command), text)


class HelpWidthTest(unittest.TestCase):
    @staticmethod
    def help_text(command: List[str], stream: io.StringIO, columns: int) -> str:
        environment = unittest.mock.patch.dict(os.environ, {"COLUMNS": str(columns)})
        with environment, contextlib.redirect_stdout(stream), contextlib.suppress(SystemExit):
            demo.main([*command, "--help"])
        return stream.getvalue()

    def test_every_help_fits_a_terminal_and_a_pipe_keeps_argparse_s_lines(self) -> None:
        for command in ([], ["run"], ["check"], ["compare"], ["reproduce"], ["cleanup"]):
            for width in WIDTHS:
                with self.subTest(command=command, width=width):
                    text = self.help_text(command, Terminal(True), width)
                    self.assertIn("usage:", text)
                    for line in text.splitlines():
                        self.assertLessEqual(cells(line), width, line)
        piped = self.help_text(["run"], io.StringIO(), 60)
        self.assertIn("Create a namespace, a ConfigMap with the episode worker and a Job of N episodes; wait", piped)


class Terminal(io.StringIO):
    """A stream that says whether it is a terminal: only isatty differs."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def shown_lines(text: str) -> List[str]:
    """What a terminal shows: each rewritten progress line as its last state."""
    return [line.split("\r")[-1].replace("\033[K", "") for line in text.split("\n")]


class RunWidthTest(CallPlanTestCase):
    def run_on(self, tty: bool, columns: str, *argv: str) -> Result:
        self.fresh_stub()
        self.expect(*RunPlan(Batch(count=2)).run())
        out, err = Terminal(tty), Terminal(tty)
        environment = unittest.mock.patch.dict(os.environ, {"TERM": "xterm-256color", "COLUMNS": columns})
        with environment, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = demo.main(["run", "--count", "2", "--output", str(self.out()), *argv])
        self.verify_plan()
        result = Result(code, out.getvalue(), err.getvalue())
        self.assertEqual(code, 0, result)
        return result

    def test_a_run_on_a_terminal_fits_it(self) -> None:
        for width in WIDTHS:
            with self.subTest(width=width):
                result = self.run_on(True, str(width))
                for line in shown_lines(result.stdout) + shown_lines(result.stderr):
                    self.assertLessEqual(cells(line), width, line)
                # the cleanup command on lines of its own, broken between words as a shell joins them
                lines = shown_lines(result.stderr)
                first = next(i for i, line in enumerate(lines) if line.startswith("  python3 "))
                last = next(i for i in range(first, len(lines)) if not lines[i].endswith(" \\"))
                self.assertGreater(last, first, lines[first:])  # broken, with a backslash-newline
                command = " ".join(line.rstrip("\\") for line in lines[first : last + 1])
                self.assertEqual(
                    shlex.split(command), ["python3", "rl_batch_demo.py", "cleanup", "--output", str(self.out())]
                )

    def test_each_verbose_call_fits_and_reads_back_as_its_command(self) -> None:
        result = self.run_on(True, "60", "-v")
        lines = shown_lines(result.stderr)
        for line in lines:
            self.assertLessEqual(cells(line), 60, line)
        # each call read back as a shell reads it: backslash-newlines removed, then split into words
        blocks, block = [], []
        for number, line in enumerate(lines):
            if line.startswith("+ ") or block:
                block.append(line)
                if not line.endswith("\\"):
                    joined = "\n".join(block).replace("\\\n", "")
                    if "  # " not in joined:  # the comment did not fit: it has a line of its own
                        joined += lines[number + 1]
                    blocks.append(joined)
                    block = []
        shown = []
        for text in blocks:
            command, comment = text[2:].split("  # ")
            self.assertRegex(comment.strip(), r"^exit -?\d+, \d+\.\d{3} s$", text)  # -15: a watch it ended
            shown.append(shlex.split(command))
        recorded = json.loads((self.out() / "kubectl-calls.json").read_text())
        self.assertEqual(sorted(words[1:] for words in shown), sorted(call["argv"] for call in recorded))

    def test_a_log_keeps_full_lines_whatever_columns_says(self) -> None:
        result = self.run_on(False, "60")
        lines = result.stdout.splitlines() + result.stderr.splitlines()
        self.assertTrue(any(cells(line) > 60 for line in lines))
        self.assertIn("is kept; delete it with: ", result.stderr)  # one line, as before


if __name__ == "__main__":
    unittest.main()
