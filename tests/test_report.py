"""tests/report.py, the suite's command with a JSON report that .ci/run adds up: same output and
exit code as `python3 -m unittest`, and a report that counts each outcome."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import unittest
from typing import Any, Dict, List, Tuple

from tests.fakecluster import ENVIRONMENT
from tests.report import read_totals
from tests.toolprocess import image_python

ROOT = pathlib.Path(__file__).resolve().parent.parent

EVERY_OUTCOME = textwrap.dedent(
    """
    import unittest


    class Outcomes(unittest.TestCase):
        def test_pass(self):
            pass

        def test_fail(self):
            self.assertEqual(1, 2)

        def test_error(self):
            raise RuntimeError("boom")

        @unittest.skip("not here")
        def test_skip(self):
            pass

        @unittest.expectedFailure
        def test_expected_failure(self):
            self.fail()

        @unittest.expectedFailure
        def test_unexpected_success(self):
            pass

        def test_subtests(self):
            for number in range(3):
                with self.subTest(number=number):
                    self.assertLess(number, 1)


    class BrokenFixture(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            raise RuntimeError("fixture")

        def test_never_runs(self):
            pass
    """
)


def python_module(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m ARGV` from the project's root, with the environment the tests were loaded with."""
    return subprocess.run(
        [image_python(), "-m", *argv], cwd=str(ROOT), env=ENVIRONMENT, capture_output=True, text=True, timeout=60
    )


ALL_PASS = "import unittest\n\n\nclass Fine(unittest.TestCase):\n    def test_one(self):\n        pass\n"


class ReportRunnerTest(unittest.TestCase):
    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def run_both(self, module: str) -> Tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str], Any]:
        """The plain unittest command and the report runner on one test module: (plain, reported, report)."""
        with tempfile.TemporaryDirectory() as root:
            (pathlib.Path(root) / "test_sample.py").write_text(module)
            discover = ["discover", "-s", root, "-t", root]
            report = pathlib.Path(root) / "report.json"
            plain = python_module("unittest", *discover)
            reported = python_module("tests.report", "--json", str(report), *discover)
            return plain, reported, json.loads(report.read_text()) if report.exists() else None

    @staticmethod
    def outcomes(report: Dict[str, Any]) -> List[Tuple[str, str]]:
        return [(test["id"], test["outcome"]) for test in report["tests"]]

    def test_every_outcome_is_counted_once_per_test(self) -> None:
        plain, reported, report = self.run_both(EVERY_OUTCOME)
        self.assertEqual(reported.returncode, plain.returncode)
        self.assertEqual(reported.returncode, 1)
        summary = "FAILED (failures=3, errors=2, skipped=1, expected failures=1, unexpected successes=1)"
        self.assertEqual(plain.stderr.splitlines()[-1], summary)
        self.assertEqual(reported.stderr.splitlines()[-1], summary)
        self.assertFalse(report["successful"])
        ran = [line for line in plain.stderr.splitlines() if line.startswith("Ran ")]
        self.assertEqual(len(ran), 1)
        runs = int(ran[0].split()[1])  # 7, but 6 on Python 3.12.1, where a skipped test did not count
        self.assertEqual(
            report["totals"],
            dict(tests=runs, passed=1, failed=2, errors=2, skipped=1, expected_failures=1, unexpected_successes=1),
        )
        self.assertEqual(
            self.outcomes(report),
            [
                ("test_sample.Outcomes.test_error", "error"),
                ("test_sample.Outcomes.test_expected_failure", "expected_failure"),
                ("test_sample.Outcomes.test_fail", "failed"),
                ("test_sample.Outcomes.test_pass", "passed"),
                ("test_sample.Outcomes.test_skip", "skipped"),
                ("test_sample.Outcomes.test_subtests", "failed"),
                ("test_sample.Outcomes.test_unexpected_success", "unexpected_success"),
                ("setUpClass (test_sample.BrokenFixture)", "error"),
            ],
        )
        details = {test["id"].replace("test_sample.Outcomes.", ""): test.get("detail", "") for test in report["tests"]}
        self.assertNotIn("detail", report["tests"][3])  # a pass has none
        self.assertIn("RuntimeError: boom", details["test_error"])
        self.assertIn("AssertionError: 1 != 2", details["test_fail"])
        self.assertEqual(details["test_skip"], "not here")
        self.assertIn("(number=1)", details["test_subtests"])
        self.assertIn("RuntimeError: fixture", details["setUpClass (test_sample.BrokenFixture)"])
        self.assertEqual(report["argv"][:3], ["python3 -m unittest", "discover", "-s"])
        self.assertEqual(report["python"], ".".join(map(str, sys.version_info[:3])))

    def test_a_passing_run_and_the_totals_ci_reads(self) -> None:
        plain, reported, report = self.run_both(ALL_PASS)
        self.assertEqual((plain.returncode, reported.returncode), (0, 0))
        self.assertEqual(reported.stderr.splitlines()[-1], "OK")
        self.assertTrue(report["successful"])
        self.assertEqual(self.outcomes(report), [("test_sample.Fine.test_one", "passed")])
        with tempfile.TemporaryDirectory() as root:
            path = pathlib.Path(root) / "report.json"
            path.write_text(json.dumps(report))
            self.assertEqual(read_totals(str(path)), (1, 0, 0))
            totals = dict(report["totals"], passed=4, failed=1, errors=2, unexpected_successes=3, expected_failures=5)
            path.write_text(json.dumps(dict(report, totals=totals)))
            self.assertEqual(read_totals(str(path)), (9, 6, 0))
            read = python_module("tests.report", "--read", str(path))
            self.assertEqual((read.returncode, read.stdout), (0, "9 6 0\n"))
            not_a_count = json.dumps(dict(report, totals=dict(totals, failed=True)))
            for broken in ("{", "[]", '{"totals": {"passed": 1}}', not_a_count):
                path.write_text(broken)
                with self.subTest(broken=broken), self.assertRaises(ValueError):
                    read_totals(str(path))
            read = python_module("tests.report", "--read", str(path))
            self.assertEqual(read.returncode, 2)
            self.assertIn("unreadable report", read.stderr)

    def test_no_tests_exits_as_unittest_does(self) -> None:
        plain, reported, report = self.run_both("")
        self.assertEqual(reported.returncode, plain.returncode)  # 5 since Python 3.12, 0 before
        self.assertEqual(report["totals"]["tests"], 0)


if __name__ == "__main__":
    unittest.main()
