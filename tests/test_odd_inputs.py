"""Odd bytes and numbers in what a user hands in (paths, flags, tasks, receipts, results files), and
exit codes that keep their meaning (a bug is 3, an early SIGTERM is 130): each ends in one line and
its documented exit code, never a traceback that skips the --cleanup policy (docs/faults.md)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import unittest
import unittest.mock
from pathlib import Path
from typing import Any

import rl_batch_demo as demo
from tests.callplan import CONTEXT, SERVER, CallPlanTestCase, RunPlan
from tests.clusterobjects import JOB_CREATED_AT, NAMESPACE, NAMESPACE_UID, RUN_ID, Batch
from tests.fakecluster import ENVIRONMENT
from tests.toolprocess import image_python

SCRIPT = str(Path(demo.__file__).resolve())
ODD_BYTE = os.fsdecode(b"\xff")  # a byte that is not UTF-8, as Python hands it over: "\udcff"


class OddBytesTest(CallPlanTestCase):
    """A byte that is not UTF-8 in --output or --image reaches every report escaped, and the run
    still ends as it would have, its cleanup policy kept."""

    def test_an_output_path_that_is_not_utf8_reaches_the_step_summary(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run(), *plan.cleanup())
        summary = self.root / "summary.md"
        output = self.root / f"out{ODD_BYTE}"
        with unittest.mock.patch.dict(os.environ, {"GITHUB_STEP_SUMMARY": str(summary)}):
            result = self.tool(
                *("run", "--count", "2", "--output", str(output), "--cleanup", "always"),
                *("--threshold", "batch_to_all_ready_seconds=0.001", "--metrics-file", str(self.root / "m.prom")),
            )
        self.assert_fails(result, demo.EXIT_THRESHOLD, "latency budget breached", "out\\udcff")
        text = summary.read_text(encoding="utf-8")  # strict: valid UTF-8
        self.assertIn("### rl-batch-demo: failed (exit 5)", text)
        self.assertIn("out\\udcff", text)
        self.assertIn(f"deleted namespace {NAMESPACE}", result.stderr)  # the cleanup policy ran
        self.assertIn("rl_batch_demo_exit_code", (self.root / "m.prom").read_text(encoding="utf-8"))

    def test_an_image_that_is_not_utf8_reaches_the_metrics_file(self) -> None:
        image = f"python:3.12{ODD_BYTE}"
        plan = RunPlan(Batch(count=2, image=image))
        self.expect(*plan.run(), *plan.cleanup())
        metrics = self.root / "m.prom"
        result = self.tool(
            *("run", "--count", "2", "--output", str(self.out()), "--image", image, "--cleanup", "always"),
            *("--metrics-file", str(metrics), "--junit", str(self.root / "junit.xml")),
        )
        self.assertEqual(result.code, 0, result)
        self.assertIn('image="python:3.12\\\\udcff"', metrics.read_text(encoding="utf-8"))
        self.assertIn("udcff", self.read_json("results.json")["image"].encode("unicode_escape").decode())


class OddNumbersTest(CallPlanTestCase):
    """A number no double holds, wherever a file hands one in: exit 2 and one line."""

    def test_a_task_number_beyond_a_double(self) -> None:
        for text in ('{"x": 1e400}', '{"id": 1}\n{"x": [-1.5E999]}'):
            with self.subTest(text=text):
                tasks = self.root / "tasks.jsonl"
                tasks.write_text(text + "\n")
                result = self.tool("run", "--tasks", str(tasks), "--output", str(self.out()), "--dry-run")
                self.assertEqual(result.code, demo.EXIT_USAGE, result)
                self.assertNotIn("Traceback", result.stderr)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertIn("beyond the range of a double", result.stderr)
                self.assertFalse(self.out().exists())

    def test_compare_refuses_a_hand_edited_number(self) -> None:
        results = self.finished_results()
        for key, value, problem in (
            ("episodes", 10**400, "episodes is an integer beyond a float's range"),
            ("batch_to_all_ready_seconds", "1e400", "not a finite number"),
        ):
            with self.subTest(key=key):
                edited = self.root / f"edited-{key}"
                edited.mkdir()
                text = json.dumps({**results, key: "PLACEHOLDER"}).replace('"PLACEHOLDER"', str(value))
                (edited / "results.json").write_text(text)
                for style in ("text", "markdown", "json", "guide"):
                    result = self.tool("compare", str(self.out()), str(edited), "--format", style)
                    self.assert_fails(result, demo.EXIT_USAGE, problem)

    def test_compare_ratios_a_float_cannot_hold_are_shown_as_none(self) -> None:
        results = self.finished_results()
        edited = self.root / "edited"
        edited.mkdir()
        phases = dict(results["phases"])
        phases["import_to_ready_seconds"] = {**phases["import_to_ready_seconds"], "p50": 1e308}
        (edited / "results.json").write_text(json.dumps({**results, "phases": phases}))
        result = self.tool("compare", str(self.out()), str(edited), "--format", "json")
        self.assertEqual(result.code, 0, result)
        [row] = [row for row in json.loads(result.stdout)["figures"] if row["figure"] == "import_to_ready_seconds:p50"]
        self.assertEqual((row["values"][1], row["ratios"][1]), (1e308, None))

    def test_compare_markdown_escapes_a_pipe_in_a_run_name(self) -> None:
        self.finished_results()
        named = self.root / "a|b"
        self.out().rename(named)
        result = self.tool("compare", str(named), str(named), "--format", "markdown")
        self.assertEqual(result.code, 0, result)
        header = result.stdout.splitlines()[0]
        self.assertIn("a\\|b", header)
        self.assertEqual(header.count(" | "), 2, header)  # three cells: figure and the two runs

    def finished_results(self) -> Any:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        self.run_ok("run", "--count", "2", "--output", str(self.out()))
        return self.read_json("results.json")


class OddReceiptTest(CallPlanTestCase):
    """A receipt edited by hand: a number no float holds, a name ending in a newline. Each is
    refused before any kubectl call."""

    def setUp(self) -> None:
        super().setUp()
        self.out().mkdir()
        receipt = demo.Receipt(
            context=CONTEXT,
            namespace=NAMESPACE,
            run_id=RUN_ID,
            server=SERVER,
            kubeconfig=None,
            kubectl=self.stub.kubectl,
            created_at=JOB_CREATED_AT - 5,
            tool_version=None,
            uid=NAMESPACE_UID,
            jobs=[{"name": "rollout", "uid": Batch().uid}],
        )
        demo.write_receipt(self.out(), receipt)
        self.written = self.receipt()

    def edit_receipt(self, **changes: Any) -> None:
        (self.out() / "receipt.json").write_text(json.dumps({**self.written, **changes}))

    def cleanup(self) -> Any:
        return self.tool("cleanup", "--output", str(self.out()))

    def assert_refused(self, *fragments: str) -> None:
        self.assert_fails(self.cleanup(), demo.EXIT_REFUSED, *fragments, "nothing was deleted")

    def test_a_receipt_with_a_400_digit_or_non_finite_time(self) -> None:
        for created_at in ("1" + "0" * 400, "1e400", "NaN"):
            with self.subTest(created_at=created_at[:8]):
                receipt = json.dumps({**self.written, "created_at": "PLACEHOLDER"})
                (self.out() / "receipt.json").write_text(receipt.replace('"PLACEHOLDER"', created_at))
                self.assert_fails(self.cleanup(), demo.EXIT_USAGE, "created_at is a number, not a finite number")
                self.assertEqual(self.stub.calls(), [])

    def test_a_name_ending_in_a_newline_is_refused_never_taken_for_absent(self) -> None:
        for field, value, fragment in (
            ("jobs", [{"name": "rollout\n", "uid": None}], "not a name this tool gives"),
            ("namespace", NAMESPACE + "\n", "not one this tool creates"),
        ):
            with self.subTest(field=field):
                self.edit_receipt(**{field: value})
                self.assert_refused(fragment)
                self.assertEqual(self.stub.calls(), [])

    def test_a_digest_ending_in_a_newline_is_no_digest(self) -> None:
        with self.assertRaises(demo.argparse.ArgumentTypeError):
            demo.pinned_image_arg("python@sha256:" + "0" * 64 + "\n")


class OutputDirectoryTest(CallPlanTestCase):
    def test_an_output_below_a_file_says_why_it_cannot_be_created(self) -> None:
        blocker = self.root / "passwd"
        blocker.write_text("root:x:0:0\n")
        for argv in (["--dry-run"], []):
            with self.subTest(argv=argv):
                if not argv:
                    self.expect(RunPlan().cluster.config_view())
                result = self.tool("run", "--output", str(blocker / "x"), *argv)
                line = self.assert_fails(result, demo.EXIT_USAGE, f"{blocker} is not a directory")
                self.assertNotIn("exists", line)


class ExitCodeTest(CallPlanTestCase):
    def test_a_bug_exits_3_as_error_json_says(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        with unittest.mock.patch.object(demo, "assemble_results", side_effect=ZeroDivisionError("oops")):
            result = self.tool("run", "--count", "2", "--output", str(self.out()))
        self.assertEqual(result.code, demo.EXIT_CLUSTER, result)
        self.assertEqual(self.read_json("error.json")["exit_code"], demo.EXIT_CLUSTER)
        self.assertIn("Traceback", result.stderr)  # a bug's traceback, for the report
        [line] = [line for line in result.stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("unexpected error (a bug in rl-batch-demo): ZeroDivisionError('oops')", line)

    def test_a_sigterm_before_parsing_ends_with_130_and_a_line(self) -> None:
        """main() takes SIGTERM over first: one arriving while the command line is read is a Ctrl-C."""
        driver = textwrap.dedent(
            """
            import os, signal, sys
            import rl_batch_demo as demo
            parser = demo.build_parser
            def slow_parser(*args, **kwargs):
                os.kill(os.getpid(), signal.SIGTERM)
                return parser(*args, **kwargs)
            demo.build_parser = slow_parser
            sys.exit(demo.main(["--version"]))
            """
        )
        result = self.python(driver)
        self.assertEqual((result.returncode, result.stderr), (demo.EXIT_INTERRUPTED, "rl-batch-demo: interrupted\n"))
        self.assertEqual(result.stdout, "")

    def test_a_sigterm_while_the_file_is_read_ends_with_130_and_a_line(self) -> None:
        """Run as a script, the file takes SIGTERM over before anything else: one arriving while its
        definitions run (here: at its first dataclass, which compiles generated code) ends at once."""
        driver = textwrap.dedent(
            """
            import os, runpy, signal, sys
            # what the file imports, imported now: none of their code runs once the file runs
            import argparse, asyncio, codecs, contextlib, dataclasses, datetime, functools, json, math
            import copy, errno, queue, re, shlex, shutil, subprocess, threading, time, typing, pathlib, urllib.parse
            script = sys.argv[1]
            seen = []
            def hook(event, args):
                if event != "compile" or len(args) < 2 or len(seen) > 1:
                    return
                if args[1] == script or (seen and args[1] == "<string>"):  # the file, then its first dataclass
                    seen.append(args[1])
                if len(seen) == 2:
                    os.kill(os.getpid(), signal.SIGTERM)
            sys.addaudithook(hook)
            sys.argv = [script, "--version"]
            runpy.run_path(script, run_name="__main__")
            """
        )
        result = self.python(driver, SCRIPT)
        self.assertEqual(result.returncode, demo.EXIT_INTERRUPTED, result)
        self.assertEqual(result.stderr, "rl-batch-demo: interrupted before it started; nothing was done\n")
        self.assertEqual(result.stdout, "")

    def python(self, code: str, *argv: str) -> subprocess.CompletedProcess[str]:
        root = str(Path(SCRIPT).parent)
        return subprocess.run(
            [image_python(), "-c", code, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=root,
            env={"PATH": ENVIRONMENT.get("PATH", os.defpath), "PYTHONPATH": root},
        )


if __name__ == "__main__":
    unittest.main()
