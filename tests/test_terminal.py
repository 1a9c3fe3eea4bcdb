"""Output fits the terminal's habits, end to end in-process against a call plan: a rewriting
progress line only on a terminal, and no escape sequence at all under TERM=dumb, with NO_COLOR,
or without a terminal."""

from __future__ import annotations

import contextlib
import io
import os
import unittest
import unittest.mock
from typing import Dict

import rl_batch_demo as demo
from tests.callplan import CallPlanTestCase, Result, RunPlan
from tests.clusterobjects import Batch


class Terminal(io.StringIO):
    """stderr as a terminal (or not) would be: only isatty differs."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class TerminalHabitsTest(CallPlanTestCase):
    def run_on(self, tty: bool, environ: Dict[str, str]) -> Result:
        """A two-episode run with stderr on a terminal (or not) and `environ` added."""
        self.fresh_stub()
        self.expect(*RunPlan(Batch(count=2)).run())
        out, err = io.StringIO(), Terminal(tty)
        environment = unittest.mock.patch.dict(os.environ, environ)
        with environment, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = demo.main(["run", "--count", "2", "--output", str(self.out())])
        self.verify_plan()
        result = Result(code, out.getvalue(), err.getvalue())
        self.assertEqual(code, 0, result)
        return result

    def test_a_terminal_gets_the_rewriting_line(self) -> None:
        result = self.run_on(True, {"TERM": "xterm-256color", "COLUMNS": "120"})
        self.assertIn("\r\033[K", result.stderr)
        self.assertRegex(result.stderr, r"2 created, 0 running, 2 succeeded, 0 failed; \d+\.\d s elapsed, \d+ s left; ")

    def test_no_escape_sequence_at_all_otherwise(self) -> None:
        for tty, environ in (
            (True, {"TERM": "dumb"}),
            (True, {"TERM": "xterm-256color", "NO_COLOR": "1"}),
            (False, {"TERM": "xterm-256color"}),
        ):
            with self.subTest(tty=tty, environ=environ):
                result = self.run_on(tty, environ)
                for stream in (result.stdout, result.stderr):
                    self.assertNotIn("\033", stream)
                    self.assertNotIn("\r", stream)
                self.assertRegex(
                    result.stderr,
                    r"2 created, \d+ running, \d+ succeeded, 0 failed; \d+\.\d s elapsed, \d+ s left; agc-rl-",
                )
                self.assertIn("verdict: 2/2 episodes valid", result.stdout)


if __name__ == "__main__":
    unittest.main()
