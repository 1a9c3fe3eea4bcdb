"""The suite's own runner (tests/concurrently.py): concurrent tests really run at once, beside
the serial ones, and every outcome reaches the runner's result in a stable order."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import types
import unittest
import unittest.mock
from pathlib import Path
from typing import List, Optional, Tuple, Type

from tests import concurrently, tiers


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

    def test_a_bad_thread_count_is_refused(self) -> None:
        patcher = unittest.mock.patch.dict(os.environ, {concurrently.THREADS_ENV: "many"})
        patcher.start()
        self.addCleanup(patcher.stop)
        with self.assertRaises(SystemExit) as raised:
            concurrently.threads()
        self.assertIn(concurrently.THREADS_ENV, str(raised.exception))


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
