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

import ast
import concurrent.futures
import contextlib
import faulthandler
import marshal
import os
import queue
import struct
import sys
import threading
import time
import unittest
from typing import Any, Dict, Iterator, List, Optional, Tuple

THREADS_ENV = "RL_DEMO_TEST_THREADS"
DEFAULT_THREADS = 3
PROCESSES_ENV = "RL_DEMO_TEST_PROCESSES"
DEFAULT_PROCESSES = 2  # the serial tests in this process and a forked one: the project's machine has 2 cores


def threads() -> int:
    try:
        return max(1, int(os.environ.get(THREADS_ENV, DEFAULT_THREADS)))
    except ValueError:
        raise SystemExit(f"{THREADS_ENV} must be a whole number, not {os.environ[THREADS_ENV]!r}") from None


def processes() -> int:
    try:
        return max(1, min(2, int(os.environ.get(PROCESSES_ENV, DEFAULT_PROCESSES))))
    except ValueError:
        raise SystemExit(f"{PROCESSES_ENV} must be 1 or 2, not {os.environ[PROCESSES_ENV]!r}") from None


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


STALL_SECONDS = 40.0
REARM_SECONDS = 5.0


class StallTimer:
    """When a test's start arms the timer again (`due`): once its last arming is REARM_SECONDS old."""

    def __init__(self) -> None:
        self.armed_at = float("-inf")  # time.monotonic() of the last arming, shared by every thread

    def due(self, now: float) -> bool:
        if now - self.armed_at < REARM_SECONDS:
            return False
        self.armed_at = now  # two threads at once arm twice, which is harmless
        return True


_STALL_TIMER = StallTimer()


def arm_stall_dump() -> None:
    """Called as each test starts: once no test has started for STALL_SECONDS (up to
    REARM_SECONDS more), faulthandler prints every thread's stack to stderr ("Timeout (0:00:45)!"
    first), and the suite goes on. A hang then names itself in the log it happens in (a run of
    the README's command once took 82 s instead of 25 and left nothing to say which test
    waited). One timer a process, armed again at a start only when its last arming is
    REARM_SECONDS old, for STALL_SECONDS + REARM_SECONDS: so it fires between STALL_SECONDS and
    STALL_SECONDS + REARM_SECONDS after the last start, only when one test is all that still runs
    for that long. Not at every start: faulthandler cancels its timer by waiting, the GIL held,
    for its thread to end, and with both cores busy that was 0.6 s of the suite's main process
    (py-spy --gil) over its 959 starts. faulthandler's watchdog is a C thread, not one of
    threading's, so it never stops the fork."""
    if not _STALL_TIMER.due(time.monotonic()):
        return
    with contextlib.suppress(ValueError, OSError, AttributeError, RuntimeError):
        faulthandler.dump_traceback_later(STALL_SECONDS + REARM_SECONDS, repeat=False, file=sys.__stderr__, exit=False)


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

    def startTest(self, test: unittest.TestCase) -> None:  # type: ignore[override]
        arm_stall_dump()
        self.calls.append(("startTest", (test,)))

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
        self.started = 0
        self.widen(count)

    def widen(self, count: int) -> None:
        """`count` more threads take from the same queue."""
        for number in range(self.started, self.started + count):
            threading.Thread(target=self._work, name=f"beside-{number}", daemon=True).start()
        self.started += count

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


class ChildProcessFailure(AssertionError):
    """A failure in the forked process (its traceback as text): a failure here too."""


class ChildProcessError_(Exception):
    """An error in the forked process (its traceback as text), or the process ending early."""


class _RemoteSubTest(unittest.case._SubTest):  # type: ignore[name-defined,misc]
    def __init__(self, test: unittest.TestCase, description: str) -> None:
        super().__init__(test, None, {})
        self.description = description

    def _subDescription(self) -> str:
        return self.description


def module_groups(tests: List[unittest.TestCase]) -> List[List[unittest.TestCase]]:
    """The serial tests by module, in order: the unit each process claims, so a module's or a
    class's fixtures run in one process, around all of its tests."""
    groups: Dict[str, List[unittest.TestCase]] = {}
    for test in tests:
        groups.setdefault(type(test).__module__, []).append(test)
    return list(groups.values())


class Claims:
    """The modules still to run, as 2-byte numbers in a pipe that both processes read: a read of
    2 bytes takes one module whole (the pipe was filled before the fork, at most 64 KiB), so each
    process takes the next module when it is free, and the two stay busy until the end."""

    def __init__(self, count: int) -> None:
        self.read_end, write_end = os.pipe()
        os.write(write_end, b"".join(struct.pack(">H", number) for number in range(count)))
        os.close(write_end)

    def next(self) -> Optional[int]:
        data = os.read(self.read_end, 2)
        return struct.unpack(">H", data)[0] if len(data) == 2 else None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.read_end)


def _encode(recorder: Recorder, index: Dict[int, int]) -> List[Tuple[Any, ...]]:
    """A Recorder's calls as plain data: each test by its place in the serial list, each
    exception as the text the runner would print (tracebacks do not cross a pipe)."""
    calls: List[Tuple[Any, ...]] = []
    for name, args in recorder.calls:
        test = index.get(id(args[0])) if args else None
        if test is None:
            continue
        if name in ("addFailure", "addError", "addExpectedFailure"):
            calls.append((name, test, recorder._exc_info_to_string(args[1], args[0])))  # type: ignore[attr-defined]
        elif name == "addSubTest":
            err = args[2]
            if err is not None:  # a subtest that passed changes nothing in the result
                kind = "failure" if issubclass(err[0], args[0].failureException) else "error"
                text = recorder._exc_info_to_string(err, args[1])  # type: ignore[attr-defined]
                calls.append((name, test, args[1]._subDescription(), kind, text))
        elif name in ("addSkip", "addDuration"):
            calls.append((name, test, args[1]))
        else:
            calls.append((name, test))
    return calls


class Forked:
    """The serial tests' second process: forked before any thread starts, it claims modules as
    this one does, runs them into a Recorder, and sends what it recorded through a pipe once it
    is done; `replay` puts that on the runner's result. It ends with os._exit: the atexit
    handlers and the scratch directories are the parent's."""

    def __init__(self, tests: List[unittest.TestCase], groups: List[List[unittest.TestCase]], claims: Claims) -> None:
        self.tests = tests
        read_end, write_end = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child
            os.close(read_end)
            code = 1
            try:
                recorder = Recorder()
                run_claimed(groups, claims, recorder)
                index = {id(test): number for number, test in enumerate(tests)}
                data = marshal.dumps(_encode(recorder, index))
                with os.fdopen(write_end, "wb") as stream:
                    stream.write(data)
                code = 0
            except BaseException:  # Ctrl-C, or a bug here: the parent says so for every test not reported
                pass
            finally:
                os._exit(code)
        os.close(write_end)
        self.read_end = read_end

    def replay(self, result: unittest.TestResult) -> None:
        with os.fdopen(self.read_end, "rb") as stream:
            data = stream.read()
        status = os.waitpid(self.pid, 0)[1]
        try:
            calls = marshal.loads(data) if data else None
        except (EOFError, ValueError, TypeError):
            calls = None
        if calls is None:
            test = _ProcessEnded(f"the second test process ended without its results ({_status(status)})")
            test(result)
            return
        for call in calls:
            name, test = call[0], self.tests[call[1]]
            if name in ("addFailure", "addExpectedFailure"):
                getattr(result, name)(test, (ChildProcessFailure, ChildProcessFailure(call[2]), None))
            elif name == "addError":
                result.addError(test, (ChildProcessError_, ChildProcessError_(call[2]), None))
            elif name == "addSubTest":
                kind = ChildProcessFailure if call[3] == "failure" else ChildProcessError_
                result.addSubTest(test, _RemoteSubTest(test, call[2]), (kind, kind(call[4]), None))
            else:
                method = getattr(result, name, None)
                if method is not None:  # addDuration before 3.12
                    method(test, *call[2:])

    def abandon(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, 15)
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self.read_end)


def _status(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    return f"killed by signal {-code}" if code < 0 else f"exit {code}"


class _ProcessEnded(unittest.TestCase):
    def __init__(self, reason: str) -> None:
        super().__init__("test_the_second_process_reported")
        self.reason = reason

    def test_the_second_process_reported(self) -> None:
        raise ChildProcessError_(self.reason)


def run_claimed(groups: List[List[unittest.TestCase]], claims: Claims, result: unittest.TestResult) -> None:
    """Run the modules this process claims, one after another, each as a suite of its own
    (its fixtures around it), until none is left."""
    while not result.shouldStop:
        number = claims.next()
        if number is None:
            return
        unittest.TestSuite(groups[number])(result)


def prepare_for_fork() -> None:
    """What each test process makes once and removes at its exit (the call-plan stub's kubectl
    wrapper, the image's python), made here before the fork, so the child, which ends without
    running atexit handlers, shares them and leaves nothing behind."""
    # imported here: the runner needs neither otherwise
    from tests.callplan import stub_wrapper
    from tests.toolprocess import image_python

    stub_wrapper()
    image_python()


_AST_PARSE_LOCK = threading.Lock()


def serialise_ast_parse() -> None:
    """ast.parse one thread at a time. CPython keeps the depth of the tree it is turning into
    Python objects in one field per interpreter, which every thread shares, and checks it when
    done, so two threads parsing at once can fail with "SystemError: AST constructor recursion
    depth mismatch (before=72, after=34)" (python/cpython#106905; seen here on 3.11.7, in a
    main-thread test's parse while a background test parsed). The tests parse sources (the
    layers, the writers of a run's files, the README's code) and traceback formatting does too."""
    parse = ast.parse
    if getattr(parse, "serialised", False):
        return

    def serialised(*args: Any, **kwargs: Any) -> Any:
        with _AST_PARSE_LOCK:
            return parse(*args, **kwargs)

    serialised.serialised = True  # type: ignore[attr-defined]
    ast.parse = serialised  # type: ignore[assignment]


def can_fork() -> bool:
    """Forking is safe only with this thread alone: a lock another thread holds stays held in the child."""
    return hasattr(os, "fork") and threading.active_count() == 1


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
        serialise_ast_parse()  # before the threads (and the fork) start
        serial = list(self.serial)
        forked: Optional[Forked] = None
        claims: Optional[Claims] = None
        groups = module_groups(serial)
        if processes() > 1 and len(groups) > 1 and can_fork():
            prepare_for_fork()
            claims = Claims(len(groups))
            forked = Forked(serial, groups, claims)  # before the background threads start
        background = Background(self.concurrent_tests, threads())
        start_test = result.startTest

        def started(test: unittest.TestCase) -> None:
            arm_stall_dump()
            start_test(test)

        result.startTest = started  # type: ignore[method-assign]
        try:
            if claims is not None and forked is not None:
                run_claimed(groups, claims, result)
                claims.close()
                forked.replay(result)
                forked = None
            else:
                self.serial(result)
            # The in-process tests are done: the cores they used take more of those beside them
            # (each waits mostly for its subprocesses), so the suite does not end on a few of them.
            background.widen(threads())
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
            result.startTest = start_test  # type: ignore[method-assign]
            with contextlib.suppress(AttributeError):
                faulthandler.cancel_dump_traceback_later()
            background.stop()
            if forked is not None:
                forked.abandon()
            if claims is not None:
                claims.close()
        return result


def beside(suite: unittest.TestSuite) -> unittest.TestSuite:
    """The same tests: those that may run concurrently beside the rest, which keep their order."""
    concurrent_tests, serial_tests = [], []
    for test in flatten(suite):
        (concurrent_tests if runs_concurrently(test) else serial_tests).append(test)
    return BesideSuite(concurrent_tests, unittest.TestSuite(serial_tests))
