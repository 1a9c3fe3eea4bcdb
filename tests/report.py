"""The suite's command with a machine-readable report, for CI.

    python3 -m tests.report --json REPORT.json [UNITTEST ARGUMENTS]

runs `python3 -m unittest UNITTEST ARGUMENTS` (default: `discover -s tests -t .`, the README's
test command) through unittest's own command line, prints the same output, exits with the same
code, and writes REPORT.json (atomically) once the tests have run:

    {"python": "3.11.7", "argv": [...], "seconds": 25.1, "successful": true,
     "totals": {"tests": 384, "passed": 382, "failed": 0, "errors": 0, "skipped": 2,
                "expected_failures": 0, "unexpected_successes": 0},
     "tests": [{"id": "tests.test_run.CheckTest.test_ready_cluster", "outcome": "passed"}, ...]}

`tests` is sorted by id; an outcome is one of OUTCOMES, and every outcome but "passed" carries
a `detail` (the traceback or the skip reason). A test with a failing subtest is "failed" (or
"error"), counted once. An error outside any test (a class or module fixture, an import) is an
entry of its own with outcome "error": it counts in `errors` and not in `tests`, as in unittest.

    python3 -m tests.report --read REPORT.json

prints "PASSED FAILED SKIPPED" on one line (failed: failures, errors and unexpected successes;
passed includes expected failures), which is what .ci/run adds up; exit 2 for a missing or
malformed report.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
import traceback
import unittest
from typing import Any, Dict, List, Optional, Sequence, Tuple

OUTCOMES = ("passed", "failed", "error", "skipped", "expected_failure", "unexpected_success")
DEFAULT_ARGUMENTS = ("discover", "-s", "tests", "-t", ".")
EXIT_BAD_REPORT = 2
# A later outcome of the same test replaces an earlier one only when it is worse.
_RANK = {"passed": 0, "skipped": 1, "expected_failure": 1, "unexpected_success": 2, "failed": 3, "error": 4}


def _text(error: Tuple[Any, Any, Any]) -> str:
    return "".join(traceback.format_exception(*error))


class RecordingResult(unittest.TextTestResult):
    """unittest's text result that also keeps one outcome per test id."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: Dict[str, Tuple[str, Optional[str]]] = {}
        self.outside: List[Tuple[str, str]] = []  # errors in fixtures and imports

    def _note(self, test: unittest.TestCase, outcome: str, detail: Optional[str] = None) -> None:
        if not isinstance(test, unittest.TestCase):  # unittest's _ErrorHolder: a failed fixture
            self.outside.append((str(test), detail or ""))
            return
        previous = self.outcomes.get(test.id())
        if previous is None or _RANK[outcome] > _RANK[previous[0]]:
            self.outcomes[test.id()] = (outcome, detail)

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._note(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._note(test, "failed", _text(err))

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._note(test, "error", _text(err))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._note(test, "skipped", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._note(test, "expected_failure", _text(err))

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._note(test, "unexpected_success", "passed although marked expectedFailure")

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            outcome = "failed" if issubclass(err[0], test.failureException) else "error"
            self._note(test, outcome, f"{subtest.id()}\n{_text(err)}")

    def report(self, argv: Sequence[str], seconds: float) -> Dict[str, Any]:
        tests = [
            dict({"id": name, "outcome": outcome}, **({} if detail is None else {"detail": detail}))
            for name, (outcome, detail) in sorted(self.outcomes.items())
        ]
        tests += [{"id": name, "outcome": "error", "detail": detail} for name, detail in sorted(self.outside)]
        counts = {outcome: sum(1 for test in tests if test["outcome"] == outcome) for outcome in OUTCOMES}
        return {
            "python": platform.python_version(),
            "argv": list(argv),
            "seconds": round(seconds, 3),
            "successful": self.wasSuccessful(),
            "totals": {
                "tests": self.testsRun,
                "passed": counts["passed"],
                "failed": counts["failed"],
                "errors": counts["error"],
                "skipped": counts["skipped"],
                "expected_failures": counts["expected_failure"],
                "unexpected_successes": counts["unexpected_success"],
            },
            "tests": tests,
        }


def write_atomic(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".report-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def runner_writing(path: str, argv: Sequence[str]) -> type:
    """A TextTestRunner class (unittest.main instantiates it with the command line's -v, -f, -b...)
    that writes the report to `path` after the run."""

    class ReportingRunner(unittest.TextTestRunner):
        resultclass = RecordingResult

        def run(self, test: Any) -> unittest.TestResult:
            started = time.monotonic()
            result = super().run(test)
            assert isinstance(result, RecordingResult)
            report = result.report(argv, time.monotonic() - started)
            write_atomic(path, json.dumps(report, indent=1, sort_keys=True, allow_nan=False) + "\n")
            return result

    return ReportingRunner


def read_totals(path: str) -> Tuple[int, int, int]:
    """(passed, failed, skipped) of a report, as .ci/run counts them; ValueError if malformed."""
    with open(path, encoding="utf-8") as stream:
        report = json.load(stream)
    totals = report["totals"] if isinstance(report, dict) else None
    keys = ("passed", "failed", "errors", "skipped", "expected_failures", "unexpected_successes")
    if not isinstance(totals, dict) or not all(type(totals.get(key)) is int for key in keys):
        raise ValueError(f"{path} has no totals")
    passed = totals["passed"] + totals["expected_failures"]
    failed = totals["failed"] + totals["errors"] + totals["unexpected_successes"]
    return passed, failed, totals["skipped"]


USAGE = "usage: python3 -m tests.report --json REPORT.json [UNITTEST ARGUMENTS] | --read REPORT.json"


def main(argv: Sequence[str]) -> int:
    if len(argv) == 2 and argv[0] == "--read":
        try:
            print(*read_totals(argv[1]))
        except (OSError, ValueError, KeyError) as error:  # json.JSONDecodeError is a ValueError
            print(f"tests.report: unreadable report {argv[1]}: {error}", file=sys.stderr)
            return EXIT_BAD_REPORT
        return 0
    if len(argv) < 2 or argv[0] != "--json":
        print(USAGE, file=sys.stderr)
        return EXIT_BAD_REPORT
    path, arguments = argv[1], list(argv[2:]) or list(DEFAULT_ARGUMENTS)
    command = ["python3 -m unittest", *arguments]
    # unittest's own command line, so options, output and exit codes are exactly unittest's.
    unittest.main(module=None, argv=command, testRunner=runner_writing(path, command))
    raise AssertionError("unittest.main returned")  # it always exits


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
