"""The suite's own runner (tests/concurrently.py): concurrent tests really run at once, beside
the serial ones, and every outcome reaches the runner's result in a stable order."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import types
import unittest
import unittest.mock
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Type

from tests import concurrently, tiers
from tests.fakecluster import ENVIRONMENT
from tests.toolprocess import image_python


def sample_classes(
    barrier: threading.Barrier, beside_barrier: threading.Barrier, threads_seen: List[int]
) -> List[Type[unittest.TestCase]]:
    """Built per test, so discovery never collects them as tests of their own."""

    class Beside(unittest.TestCase):
        runs_concurrently = True

        def test_a_meets_b(self) -> None:
            threads_seen.append(threading.get_ident())
            barrier.wait()  # only passes when test_b runs at the same time

        def test_b_meets_a(self) -> None:
            threads_seen.append(threading.get_ident())
            barrier.wait()

        def test_c_fails(self) -> None:
            self.fail("planned failure")

        def test_d_errors(self) -> None:
            raise RuntimeError("planned error")

        def test_e_skips(self) -> None:
            self.skipTest("planned skip")

        def test_f_subtests(self) -> None:
            for number in (1, 2):
                with self.subTest(number=number):
                    self.assertEqual(number, 1)

        def test_g_meets_the_serial_test(self) -> None:
            beside_barrier.wait()  # only passes while Serial.test_serial runs

    class WithClassFixture(unittest.TestCase):
        runs_concurrently = True  # but a class fixture keeps it serial
        set_up = 0

        @classmethod
        def setUpClass(cls) -> None:
            cls.set_up += 1

        def test_fixture_ran(self) -> None:
            self.assertEqual(self.set_up, 1)
            threads_seen.append(-threading.get_ident())

    class Serial(unittest.TestCase):
        def test_serial(self) -> None:
            threads_seen.append(-threading.get_ident())
            beside_barrier.wait()

    return [Beside, WithClassFixture, Serial]


def short(test: unittest.TestCase) -> str:
    return test.id().rsplit(".", 1)[-1]


class Recorded(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.started: List[str] = []
        self.stopped: List[str] = []
        self.succeeded: List[str] = []

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        self.started.append(short(test))

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        self.stopped.append(short(test))

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self.succeeded.append(short(test))


class StallDumpTest(unittest.TestCase):
    runs_concurrently = True  # only a subprocess

    def test_a_test_alone_for_the_stall_time_has_every_stack_printed(self) -> None:
        """A test started, then nothing more for STALL_SECONDS (here 0.25 s, and 0.25 s of
        REARM_SECONDS): the stacks are on stderr, the waiting function's name among them, and the
        process goes on to its end."""
        code = (
            "import time\n"
            "from tests import concurrently\n"
            "concurrently.STALL_SECONDS = 0.25\n"
            "concurrently.REARM_SECONDS = 0.25\n"
            "def a_test_that_waits():\n"
            "    concurrently.Recorder().startTest(None)\n"
            "    time.sleep(1.5)\n"
            "a_test_that_waits()\n"
            "print('went on')\n"
        )
        root = Path(__file__).resolve().parent.parent
        done = subprocess.run(
            [image_python(), "-c", code], cwd=str(root), env=ENVIRONMENT, capture_output=True, text=True, timeout=60
        )
        self.assertEqual((done.returncode, done.stdout), (0, "went on\n"), done.stderr)
        self.assertIn("Timeout (0:00:00.500000)!", done.stderr)
        self.assertIn("a_test_that_waits", done.stderr)

    def test_a_start_arms_the_timer_again_only_once_its_last_arming_is_rearm_seconds_old(self) -> None:
        """Starts at these times (seconds) arm it at these (REARM_SECONDS 5): each arming is for
        STALL_SECONDS + REARM_SECONDS, so the stacks come between 40 and 45 s after the last start."""
        self.assertEqual(concurrently.REARM_SECONDS, 5.0)
        timer = concurrently.StallTimer()
        starts = [100.0, 100.1, 104.9, 105.0, 105.2, 200.0, 204.99]
        self.assertEqual([start for start in starts if timer.due(start)], [100.0, 105.0, 200.0])


class AstParseTest(unittest.TestCase):
    """ast.parse one thread at a time, while the suite's threads run (serialise_ast_parse)."""

    def test_a_parse_waits_for_the_one_in_progress(self) -> None:
        concurrently.serialise_ast_parse()
        concurrently.serialise_ast_parse()  # once only: the lock is not taken twice
        parsed = threading.Event()

        def parse() -> None:
            ast.parse("x = 1")
            parsed.set()

        with concurrently._AST_PARSE_LOCK:  # as a parse in another thread holds it
            thread = threading.Thread(target=parse)
            thread.start()
            self.assertFalse(parsed.wait(0.05))
        thread.join(10)
        self.assertTrue(parsed.is_set())


class BesideSuiteTest(unittest.TestCase):
    def run_sample(self, threads: str, barrier_parties: int = 2) -> Tuple[Recorded, List[int]]:
        barrier = threading.Barrier(barrier_parties, timeout=10)
        beside_barrier = threading.Barrier(barrier_parties, timeout=10)
        threads_seen: List[int] = []
        loader = unittest.TestLoader()
        classes = sample_classes(barrier, beside_barrier, threads_seen)
        suite = unittest.TestSuite(loader.loadTestsFromTestCase(cls) for cls in classes)
        result = Recorded()
        with unittest.mock.patch.dict(os.environ, {concurrently.THREADS_ENV: threads}):
            concurrently.beside(suite).run(result)
        return result, threads_seen

    def test_concurrent_tests_run_at_once_and_report_after_the_serial_ones(self) -> None:
        result, threads_seen = self.run_sample("3")
        serial = ["test_fixture_ran", "test_serial"]
        beside = [
            "test_a_meets_b",
            "test_b_meets_a",
            "test_c_fails",
            "test_d_errors",
            "test_e_skips",
            "test_f_subtests",
            "test_g_meets_the_serial_test",
        ]
        self.assertEqual(result.started, serial + beside)
        self.assertEqual(result.stopped, serial + beside)
        self.assertEqual(
            result.succeeded, [*serial, "test_a_meets_b", "test_b_meets_a", "test_g_meets_the_serial_test"]
        )
        self.assertEqual(result.testsRun, 9)
        self.assertEqual(
            [test.id().rsplit(".", 1)[-1] for test, _ in result.failures],
            ["test_c_fails", "test_f_subtests (number=2)"],
        )
        self.assertEqual([test.id().rsplit(".", 1)[-1] for test, _ in result.errors], ["test_d_errors"])
        self.assertEqual([reason for _, reason in result.skipped], ["planned skip"])
        self.assertIn("planned failure", result.failures[0][1])
        main = threading.get_ident()
        self.assertEqual([ident for ident in threads_seen if ident < 0], [-main, -main])  # serial: this thread
        beside_threads = [ident for ident in threads_seen if ident > 0]
        self.assertEqual(len(set(beside_threads)), 2)
        self.assertNotIn(main, beside_threads)

    def test_one_thread_runs_everything_in_order_in_this_thread(self) -> None:
        result, threads_seen = self.run_sample("1", barrier_parties=1)
        self.assertEqual(result.testsRun, 9)
        self.assertEqual(result.started[:2], ["test_a_meets_b", "test_b_meets_a"])
        self.assertEqual(len(result.succeeded), 5)
        self.assertEqual({abs(ident) for ident in threads_seen}, {threading.get_ident()})
        self.assertEqual(len(result.failures), 2)

    def test_ctrl_c_abandons_the_background_tests(self) -> None:
        release = threading.Event()
        finished: List[bool] = []

        class Waits(unittest.TestCase):
            runs_concurrently = True

            def test_waits(self) -> None:
                finished.append(release.wait(timeout=10))

        class Interrupted(unittest.TestCase):
            def test_ctrl_c(self) -> None:
                raise KeyboardInterrupt

        loader = unittest.TestLoader()
        suite = unittest.TestSuite(loader.loadTestsFromTestCase(cls) for cls in (Waits, Interrupted))
        stderr = io.StringIO()
        threads = unittest.mock.patch.dict(os.environ, {concurrently.THREADS_ENV: "2"})  # whatever the suite's
        with threads, contextlib.redirect_stderr(stderr), self.assertRaises(KeyboardInterrupt):
            concurrently.beside(suite).run(unittest.TestResult())
        self.assertEqual(finished, [], "the runner waited for the background test")
        self.assertIn("abandoning 1 test(s) running in the background", stderr.getvalue())
        release.set()

    def test_module_fixtures_keep_a_marked_class_serial(self) -> None:
        module = types.ModuleType("sample_with_module_fixture")
        module.setUpModule = lambda: None  # type: ignore[attr-defined]

        class Marked(unittest.TestCase):
            runs_concurrently = True

            def test_it(self) -> None:
                pass

        Marked.__module__ = module.__name__
        with unittest.mock.patch.dict(sys.modules, {module.__name__: module}):
            self.assertFalse(concurrently.runs_concurrently(Marked("test_it")))
        self.assertTrue(concurrently.runs_concurrently(Marked("test_it")))

    def test_discovery_puts_the_marked_classes_beside_the_rest(self) -> None:
        root = Path(__file__).resolve().parents[1]
        # the freshness check is not this test's (the suite made it before it ran): 0.2 s less
        with unittest.mock.patch("tests.stale_file", return_value=None):
            found = unittest.TestLoader().discover(str(root / "tests"), top_level_dir=str(root))
        [suite] = [part for part in found if isinstance(part, concurrently.BesideSuite)]  # tests/__init__.py's
        beside = {test.id() for test in suite.concurrent_tests}
        serial = {test.id() for test in concurrently.flatten(suite.serial)}
        self.assertIn("tests.test_run.RunEndToEndTest.test_parallel_ten", beside)
        transcript = "tests.test_flows.TranscriptTest.test_ten_episode_run_makes_these_ten_calls_in_six_steps"
        self.assertIn(transcript, serial)
        replay = "tests.test_kubectl_replay.ReplayTest.test_every_argument_list_is_accepted_by_real_kubectl"
        self.assertIn(replay, serial)  # patches os.environ: never beside
        self.assertFalse(beside & serial)

    def test_a_bad_process_count_is_refused(self) -> None:
        with (
            unittest.mock.patch.dict(os.environ, {concurrently.PROCESSES_ENV: "many"}),
            self.assertRaises(SystemExit) as raised,
        ):
            concurrently.processes()
        self.assertIn(concurrently.PROCESSES_ENV, str(raised.exception))

    def test_a_bad_thread_count_is_refused(self) -> None:
        patcher = unittest.mock.patch.dict(os.environ, {concurrently.THREADS_ENV: "many"})
        patcher.start()
        self.addCleanup(patcher.stop)
        with self.assertRaises(SystemExit) as raised:
            concurrently.threads()
        self.assertIn(concurrently.THREADS_ENV, str(raised.exception))


# Run in a fresh interpreter (a fork needs this thread alone): two modules of serial tests and a
# concurrent one. Each module's first test marks it, then waits until the other module is marked,
# so the two modules must run at once, one in each process (each mark holds its process's pid).
# Both modules fail, skip and err alike; "crash": the forked process dies in its module.
FORK_SAMPLE = """
import json, os, sys, time, types, unittest
from tests import concurrently
marks, crash, parent = sys.argv[1], sys.argv[2] == "crash", os.getpid()
def make(module, other):
    def meets(self):
        with open(os.path.join(marks, module), "w") as stream:
            stream.write(str(os.getpid()))
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(marks, other)) and time.monotonic() < deadline:
            time.sleep(0.01)
        if crash and os.getpid() != parent:
            os._exit(3)
    def fails(self):
        self.fail("planned failure in " + module)
    def subtests(self):
        for number in (1, 2):
            with self.subTest(number=number):
                self.assertEqual(number, 1)
    def skips(self):
        self.skipTest("planned skip")
    def errs(self):
        raise RuntimeError("planned error")
    sys.modules[module] = types.ModuleType(module)
    body = dict(test_a_meets=meets, test_b_fails=fails, test_c_subtests=subtests, test_d_skips=skips, test_e_errs=errs)
    return type("Sample", (unittest.TestCase,), dict(body, __module__=module))
beside = type("Beside", (unittest.TestCase,), dict(runs_concurrently=True, test_it=lambda self: None))
loader = unittest.TestLoader()
classes = (make("first", "second"), make("second", "first"), beside)
suite = unittest.TestSuite(loader.loadTestsFromTestCase(cls) for cls in classes)
result = unittest.TestResult()
concurrently.beside(suite).run(result)
print(json.dumps({
    "run": result.testsRun,
    "failures": sorted([test.id(), text] for test, text in result.failures),
    "errors": sorted([test.id(), text] for test, text in result.errors),
    "skipped": sorted([test.id(), reason] for test, reason in result.skipped),
    "pid": parent,
}))
"""


class SecondProcessTest(unittest.TestCase):
    """The serial tests run in this process and a forked one, each claiming whole modules; what
    the forked one recorded reaches the runner's result as if it had run here."""

    runs_concurrently = True  # a subprocess and its own scratch directory

    def sample(self, mode: str) -> Tuple[Dict[str, Any], Path]:
        scratch = tempfile.TemporaryDirectory(prefix="rl-fork-sample-")
        self.addCleanup(scratch.cleanup)
        marks = Path(scratch.name)
        root = Path(__file__).resolve().parents[1]
        # the sample's own settings, not the suite's (RL_DEMO_TEST_THREADS=1 runs everything serially, no fork)
        own = (concurrently.PROCESSES_ENV, concurrently.THREADS_ENV)
        environment = {key: value for key, value in ENVIRONMENT.items() if key not in own}
        done = subprocess.run(
            [image_python(), "-c", FORK_SAMPLE, str(marks), mode],
            cwd=str(root), env=environment, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout), marks

    def test_the_second_process_runs_a_module_and_its_outcomes_are_reported(self) -> None:
        outcome, marks = self.sample("report")
        pids = {int((marks / module).read_text()) for module in ("first", "second")}
        self.assertEqual(len(pids), 2)  # one module in each process
        self.assertIn(outcome["pid"], pids)
        self.assertEqual(outcome["run"], 11)
        failures = [test for test, _ in outcome["failures"]]
        self.assertEqual(
            failures,
            [
                "first.Sample.test_b_fails",
                "first.Sample.test_c_subtests (number=2)",
                "second.Sample.test_b_fails",
                "second.Sample.test_c_subtests (number=2)",
            ],
        )
        for (test, text), module in zip(outcome["failures"][::2], ("first", "second")):
            self.assertIn(f"planned failure in {module}", text, test)
        for _, text in outcome["failures"][1::2]:
            self.assertIn("AssertionError: 2 != 1", text)  # its traceback, as text
        self.assertEqual(
            [test for test, _ in outcome["errors"]], ["first.Sample.test_e_errs", "second.Sample.test_e_errs"]
        )
        for _, text in outcome["errors"]:
            self.assertIn("RuntimeError: planned error", text)
        self.assertEqual([reason for _, reason in outcome["skipped"]], ["planned skip", "planned skip"])

    def test_a_second_process_that_dies_is_an_error_not_a_silent_pass(self) -> None:
        outcome, _ = self.sample("crash")
        ended = [text for test, text in outcome["errors"] if "second_process_reported" in test]
        self.assertEqual(len(ended), 1, outcome)
        self.assertIn("the second test process ended without its results (exit 3)", ended[0])
        self.assertEqual(len(outcome["failures"]), 2)  # the parent's module, as it ran


class EndToEndTierTest(unittest.TestCase):
    """tests/tiers.py: an end-to-end class or method is skipped, with the line naming the
    variable, unless RL_DEMO_END_TO_END=1; then it runs as it is."""

    def outcome(self, value: Optional[str]) -> unittest.TestResult:
        environment = {} if value is None else {tiers.END_TO_END_ENV: value}
        with unittest.mock.patch.dict(os.environ, environment, clear=False):
            if value is None:
                os.environ.pop(tiers.END_TO_END_ENV, None)

            @tiers.end_to_end
            class Marked(unittest.TestCase):
                def test_it(self) -> None:
                    self.assertTrue(True)

            class Partly(unittest.TestCase):
                @tiers.end_to_end
                def test_it(self) -> None:
                    raise AssertionError("ran")

        result = unittest.TestResult()
        unittest.TestSuite([Marked("test_it"), Partly("test_it")]).run(result)
        return result

    def test_skipped_without_the_variable_run_with_it(self) -> None:
        skipped = self.outcome(None)
        self.assertEqual((len(skipped.skipped), len(skipped.failures)), (2, 0))  # not testsRun: 3.12 counts no skip
        self.assertIn(f"set {tiers.END_TO_END_ENV}=1", skipped.skipped[0][1])
        ran = self.outcome("1")
        self.assertEqual((len(ran.skipped), len(ran.failures)), (0, 1))  # Partly's method ran, and failed


if __name__ == "__main__":
    unittest.main()
