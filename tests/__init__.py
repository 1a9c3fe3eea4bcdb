"""The suite. `python3 -m unittest discover -s tests -t .` runs it all; the end-to-end tests
that only wait for subprocesses run a few at a time beside the rest (tests/concurrently.py).

The tests import the generated rl_batch_demo.py, so users run exactly what is tested. Before
anything runs, the suite checks that the file is what src/rl_batch_demo/ generates: a stale file
would silently be what every test tests, so then the suite is one failing test with the build's
own message, and nothing else runs.

The tests' scratch directories (tempfile's, in this process and, through TMPDIR, in every process
it starts) go to a RAM-backed file system when there is one (`ram_scratch`): the tool syncs each
file it writes and each line it appends (fsync), and the tests create and remove thousands of
files. On a journalling disk that is time in the kernel and waits for the disk (on the project's
machine, at load average 10 to 15: tests.test_flows, tests.test_flow_faults and tests.test_logs
took 41 and 54 s with their scratch on ext4, 21 and 23 s on tmpfs, 4.5 to 5.4 s of system CPU
against 1.9 to 2.5 s), while the tool does the same work either way."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import py_compile
import sys
import tempfile
import threading
import unittest
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parent.parent
RAM_DIRECTORY = "/dev/shm"  # Linux's POSIX shared memory, a tmpfs on most systems
RAM_ROOM = 1 << 30  # bytes free it needs: Docker's default 64 MiB /dev/shm is too small, and is not used


def ram_scratch() -> Optional[str]:
    """RAM_DIRECTORY made TMPDIR (before tests.fakecluster copies the environment for the
    subprocesses), when TMPDIR is not set already (then that is where the tests write, as in the
    processes this suite starts) and RAM_DIRECTORY is a tmpfs, writable, with executables allowed
    (the tests write and run kubectl wrappers) and RAM_ROOM free. The directory itself, not one
    made in it: its path is about as long as /tmp's, and some tests show paths on 60 columns.
    Each test removes its own scratch directory, as under /tmp."""
    if os.environ.get("TMPDIR") or not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            fields = [line.split() for line in mounts]
        options = [f[3].split(",") for f in fields if len(f) > 3 and f[1] == RAM_DIRECTORY and f[2] == "tmpfs"]
        stat = os.statvfs(RAM_DIRECTORY)
    except OSError:
        return None
    if not options or {"noexec", "ro"} & set(options[-1]) or stat.f_bavail * stat.f_frsize < RAM_ROOM:
        return None
    if not os.access(RAM_DIRECTORY, os.W_OK | os.X_OK):
        return None
    os.environ["TMPDIR"] = tempfile.tempdir = RAM_DIRECTORY
    return RAM_DIRECTORY


ram_scratch()

from tests.concurrently import beside  # noqa: E402 - after TMPDIR is set
from tests.toolprocess import cached_bytecode, fresh_bytecode  # noqa: E402

cached_bytecode()  # before any test imports rl_batch_demo, which then reads it instead of compiling 11k lines


def suite_sources() -> List[Path]:
    """The suite's own Python files and the build script, which every run imports: 32k lines that
    cost 0.45 s to compile, before any test runs, on the project's machine."""
    return [*sorted((ROOT / "tests").rglob("*.py")), ROOT / "tools" / "build.py"]


def compile_sources(sources: List[Path]) -> None:
    """Bytecode for `sources` (`suite_sources`), where the import system reads it (`__pycache__/`
    beside each, ignored by git), for each file whose bytecode is missing or stale (the import
    system's own test: tests.toolprocess.fresh_bytecode). The machine's environment
    may set PYTHONDONTWRITEBYTECODE, and then no run would ever read it, so each would compile the
    tests again; this writes only the tests' own, never the tool's workspace or a pod's
    (tests/toolprocess.py keeps the tool's the same way). A file that cannot be compiled is left to
    its import, which names the error."""
    for source in sources:
        if fresh_bytecode(Path(importlib.util.cache_from_source(str(source))), source):
            continue
        with contextlib.suppress(py_compile.PyCompileError, OSError, ValueError):
            py_compile.compile(str(source), doraise=True)


class Preparation:
    """The freshness check and the tests' bytecode, made in a child process while this one finds
    the tests: discovery and the check are the suite's first second, one core busy and the other
    idle. The child sends the check's answer through a pipe first, then compiles the bytecode the
    next run will read. When the process has threads already (a fork would copy their locks) or
    the fork fails, `stale` makes the check in this process, and nothing is compiled."""

    def __init__(self) -> None:
        self.pid = 0
        self.answer = -1
        if threading.active_count() > 1 or not hasattr(os, "fork"):
            return
        try:
            reading, writing = os.pipe()
            self.pid = os.fork()
        except OSError:
            return
        if self.pid == 0:  # the child: nothing it does may reach the parent's tests or files
            code = 0
            try:
                os.close(reading)
                os.write(writing, (stale_file() or "").encode("utf-8", "surrogateescape") + b"\0")
                os.close(writing)
                compile_sources(suite_sources())
            except BaseException:  # the parent makes the check itself when no answer came
                code = 1
            os._exit(code)
        os.close(writing)
        self.answer = reading

    def stale(self) -> Optional[str]:
        """stale_file()'s answer, the child's when it sent one."""
        sent = b""
        if self.answer >= 0:
            with open(self.answer, "rb") as stream:  # until the child has sent it, or ended
                sent = stream.read()
            self.answer = -1
        if not sent.endswith(b"\0"):
            return stale_file()
        return sent[:-1].decode("utf-8", "surrogateescape") or None

    def reap(self) -> None:
        if self.pid > 0:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, 0)
            self.pid = 0


def stale_file() -> Optional[str]:
    """tools/build.py's sentence when rl_batch_demo.py is not what the sources generate, else None."""
    spec = importlib.util.spec_from_file_location("_rl_batch_demo_build", ROOT / "tools" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    try:
        fresh = "".join(piece.text for piece in build.generate())
    except (build.BuildError, SyntaxError, OSError) as error:
        return f"tools/build.py cannot generate rl_batch_demo.py: {error}"
    if build.TARGET.read_text(encoding="utf-8") != fresh:
        return f"rl_batch_demo.py is not what src/rl_batch_demo/ generates: {build.FIX}."
    return None


def load_tests(loader: unittest.TestLoader, standard_tests: unittest.TestSuite, pattern: str) -> unittest.TestSuite:
    """The package's tests, found as discovery finds them, the end-to-end ones beside the rest;
    only the freshness failure when rl_batch_demo.py is stale (the tests found are then dropped:
    none of them runs)."""
    preparation = Preparation()  # the check, in a child process while this one imports the tests
    atexit.register(preparation.reap)
    standard_tests.addTests(loader.discover(start_dir=os.path.dirname(__file__), pattern=pattern or "test*.py"))
    stale = preparation.stale()
    if stale is not None:

        class FreshFile(unittest.TestCase):  # made here, so that discovery never collects it otherwise
            def test_rl_batch_demo_py_is_generated_from_src(self) -> None:
                self.fail(stale)

        return unittest.TestSuite([FreshFile("test_rl_batch_demo_py_is_generated_from_src")])
    return beside(standard_tests)
