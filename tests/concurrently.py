"""Run the tests that only wait for other processes in threads, beside the rest.

The end-to-end tests (the tool or a worker as a subprocess, a fake cluster's controller running
pods) spend most of their time waiting for those processes, while the in-process tests keep one
core busy. Discovery (tests/__init__.py) takes every test of a class that says
`runs_concurrently = True` out of the serial order and runs them RL_DEMO_TEST_THREADS at a time
(default 3; 1 runs them one after another before the rest) in background threads, while the
other tests run one by one in the main thread as usual.

Such a class must be immune to what the main thread's tests change for the whole process
(os.environ, the working directory, sys.stdout, module attributes patched with unittest.mock): it
builds every subprocess's environment from tests.fakecluster.ENVIRONMENT (os.environ as it was
when the tests were loaded), never from os.environ, and passes it as env=; it uses absolute paths only (the working
directory changes), writes nothing to sys.stdout or sys.stderr (they are redirected), patches
nothing, reads an rl_batch_demo attribute a main-thread test patches only as it was at import
(e.g. LOG_FILE_LIMIT), and reads and writes only its own scratch directory. A class that needs more stays in
the main thread (runs_concurrently = False).

Each test reports into a recorder; once the main thread's tests are done, the recorders are
replayed into the runner's result in the suite's order, so the output reads as if those tests
had run one by one after the others. Running one module (`python3 -m unittest tests.test_run`)
or under pytest, everything runs serially as usual.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import sys
import threading
import unittest
from typing import Any, Iterator, List, Tuple

THREADS_ENV = "RL_DEMO_TEST_THREADS"
DEFAULT_THREADS = 3


def threads() -> int:
    try:
        return max(1, int(os.environ.get(THREADS_ENV, DEFAULT_THREADS)))
    except ValueError:
        raise SystemExit(f"{THREADS_ENV} must be a whole number, not {os.environ[THREADS_ENV]!r}") from None


def flatten(suite: unittest.TestSuite) -> Iterator[unittest.TestCase]:
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from flatten(test)
        else:
            yield test


def _has_fixtures(test: unittest.TestCase) -> bool:
    """Class or module fixtures: a thread runs one test, not a class or a module."""
    cls = type(test)
    module = sys.modules.get(cls.__module__)
    return (
        cls.setUpClass.__func__ is not unittest.TestCase.setUpClass.__func__  # type: ignore[attr-defined]
        or cls.tearDownClass.__func__ is not unittest.TestCase.tearDownClass.__func__  # type: ignore[attr-defined]
        or hasattr(module, "setUpModule")
        or hasattr(module, "tearDownModule")
    )


def runs_concurrently(test: unittest.TestCase) -> bool:
    """Marked by its class, and without class or module fixtures."""
    return bool(getattr(test, "runs_concurrently", False)) and not _has_fixtures(test)


class Recorder(unittest.TestResult):
    """Every call a test makes on its result, kept to be replayed on the real one."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[Tuple[str, Tuple[Any, ...]]] = []

    def _keep(name: str) -> Any:  # type: ignore[misc]
        def keep(self: Recorder, *args: Any) -> None:
            self.calls.append((name, args))

        keep.__name__ = name
        return keep

    startTest = _keep("startTest")
    stopTest = _keep("stopTest")
    addSuccess = _keep("addSuccess")
    addFailure = _keep("addFailure")
    addError = _keep("addError")
    addSkip = _keep("addSkip")
    addExpectedFailure = _keep("addExpectedFailure")
    addUnexpectedSuccess = _keep("addUnexpectedSuccess")
    addSubTest = _keep("addSubTest")
    addDuration = _keep("addDuration")  # Python 3.12+
    del _keep

    def replay(self, result: unittest.TestResult) -> None:
        for name, args in self.calls:
            method = getattr(result, name, None)
            if method is not None:  # addDuration before 3.12
                method(*args)


BACKGROUND_NICENESS = 10


def lower_this_threads_priority() -> None:
    """Run this background thread, and every process it starts, at a lower CPU priority, so the
    main thread's tests (the longest chain) are not slowed by the ones beside them. On Linux a
    thread has its own nice value, which the processes it forks inherit; elsewhere, nothing."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICENESS)


class Background:
    """Daemon threads that run tests from a queue, each into its own Recorder (a Future). Ctrl-C
    in the main thread abandons them (a daemon thread does not hold up the exit); `stop()` lets
    the running tests finish and starts no more."""

    def __init__(self, tests: List[unittest.TestCase], count: int) -> None:
        self.futures: List[concurrent.futures.Future[Recorder]] = [concurrent.futures.Future() for _ in tests]
        self.pending: queue.Queue[Tuple[unittest.TestCase, concurrent.futures.Future[Recorder]]] = queue.Queue()
        for test, future in zip(tests, self.futures):
            self.pending.put((test, future))
        self.stopping = threading.Event()
        for number in range(count):
            threading.Thread(target=self._work, name=f"beside-{number}", daemon=True).start()

    def _work(self) -> None:
        lower_this_threads_priority()
        while not self.stopping.is_set():
            try:
                test, future = self.pending.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            recorder = Recorder()
            try:
                test(recorder)
            except BaseException as error:  # a bug of this runner, not a test failure: say it
                future.set_exception(error)
            else:
                future.set_result(recorder)

    def stop(self) -> None:
        self.stopping.set()
        for future in self.futures:
            future.cancel()  # only those not started


class BesideSuite(unittest.TestSuite):
    """The concurrent tests in background threads while the serial suite runs in this one;
    the concurrent tests' results follow the serial ones', in the concurrent tests' order."""

    def __init__(self, concurrent_tests: List[unittest.TestCase], serial: unittest.TestSuite) -> None:
        super().__init__([*concurrent_tests, serial])
        self.concurrent_tests = concurrent_tests
        self.serial = serial

    def run(self, result: unittest.TestResult, debug: bool = False) -> unittest.TestResult:  # type: ignore[override]
        if debug or threads() == 1 or not self.concurrent_tests:
            for test in [*self.concurrent_tests, self.serial]:
                if result.shouldStop:
                    break
                test.debug() if debug else test(result)
            return result
        background = Background(self.concurrent_tests, threads())
        try:
            self.serial(result)
            for future in background.futures:
                if result.shouldStop:  # failfast, or Ctrl-C with -c: no more tests start
                    background.stop()
                if future.cancelled():
                    continue
                future.result().replay(result)
        except KeyboardInterrupt:
            running = sum(1 for future in background.futures if future.running())
            sys.stderr.write(f"\ninterrupted: abandoning {running} test(s) running in the background\n")
            raise
        finally:
            background.stop()
        return result


def beside(suite: unittest.TestSuite) -> unittest.TestSuite:
    """The same tests: those that may run concurrently beside the rest, which keep their order."""
    concurrent_tests, serial_tests = [], []
    for test in flatten(suite):
        (concurrent_tests if runs_concurrently(test) else serial_tests).append(test)
    return BesideSuite(concurrent_tests, unittest.TestSuite(serial_tests))
