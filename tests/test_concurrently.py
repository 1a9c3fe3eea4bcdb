"""The suite's own runner (tests/concurrently.py): concurrent tests really run at once, beside
the serial ones, and every outcome reaches the runner's result in a stable order."""

from __future__ import annotations

import os
import threading
import unittest
import unittest.mock
from typing import List, Type

from tests import concurrently


def sample_classes(barrier: threading.Barrier, threads_seen: List[int]) -> List[Type[unittest.TestCase]]:
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

    return [Beside, WithClassFixture, Serial]


class Recorded(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.started: List[str] = []

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        self.started.append(test.id().rsplit(".", 1)[-1])


class BesideSuiteTest(unittest.TestCase):
    def run_sample(self, threads: str, barrier_parties: int = 2) -> tuple[Recorded, List[int]]:
        barrier = threading.Barrier(barrier_parties, timeout=10)
        threads_seen: List[int] = []
        loader = unittest.TestLoader()
        suite = unittest.TestSuite(loader.loadTestsFromTestCase(cls) for cls in sample_classes(barrier, threads_seen))
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
        ]
        self.assertEqual(result.started, serial + beside)
        self.assertEqual(result.testsRun, 8)
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
        self.assertEqual(result.testsRun, 8)
        self.assertEqual(result.started[:2], ["test_a_meets_b", "test_b_meets_a"])
        self.assertEqual({abs(ident) for ident in threads_seen}, {threading.get_ident()})
        self.assertEqual(len(result.failures), 2)

    def test_a_bad_thread_count_is_refused(self) -> None:
        with (
            unittest.mock.patch.dict(os.environ, {concurrently.THREADS_ENV: "many"}),
            self.assertRaises(SystemExit) as raised,
        ):
            concurrently.threads()
        self.assertIn(concurrently.THREADS_ENV, str(raised.exception))


if __name__ == "__main__":
    unittest.main()
