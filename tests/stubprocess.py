"""The call-plan stub answered in-process: a stand-in for the process `subprocess.Popen` starts.

Each call-plan test makes about ten kubectl calls, and a stub process costs an interpreter start
(about 9 ms of CPU) and a scheduling round trip, which together made most of the fast tier's
wall time. `spawner(wrapper)` is a drop-in for `subprocess.Popen` (the tool's `Kubectl.spawner`):
a call whose executable is the stub's wrapper is answered by a thread of this process, running
tests/kubectl_stub.py's own `main` (the same claim of the plan, under the same lock, the same
answers and signals), and anything else is a real process. `RL_DEMO_STUB_PROCESSES=1` makes the
call-plan tests use real stub processes again (`.ci/run`'s end-to-end pass sets it), so the
process boundary stays tested.

What the tool relies on behaves as for a process, as `subprocess.Popen` documents it:

* stdout and stderr are real pipes (os.pipe), read by the tool with os.read or communicate();
  the answer is written into them as the stub process would print it (UTF-8), and they reach
  end of file when the call ends, or at once when it is killed;
* stdin (`stdin=PIPE`) is a real pipe too; the call reads it to its end as the stub does;
* terminate() and kill() end a call that is still running, wherever it waits (a held watch, a
  planned sleep, a signal it waits for, a full pipe), and it then exits with -SIGTERM or -SIGKILL,
  as the stub, which sets no handler, does; a call that has ended ignores them;
* wait(timeout) and communicate(input, timeout) raise subprocess.TimeoutExpired after `timeout`,
  and may be called again; communicate() translates newlines in text mode as Popen does;
* returncode is set by poll() and wait(), once the call has ended.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import shutil
import signal
import subprocess
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Tuple

from tests import kubectl_stub

STUB_PROCESSES_ENV = "RL_DEMO_STUB_PROCESSES"  # "1": the call-plan tests start real stub processes
WRITE_POLL_SECONDS = 0.01  # how often a write blocked on a full pipe checks for a kill
# The calls answered in this process wait for each other's signals on one condition, notified
# whenever one is raised or a call is killed; SIGNAL_SLICE bounds each wait, so a signal raised
# by a stub process (the process tier) is still seen.
_SIGNALS = threading.Condition()
SIGNAL_SLICE = 0.05


def _signalled() -> None:
    with _SIGNALS:
        _SIGNALS.notify_all()


def stub_processes() -> bool:
    """Whether the call-plan tests run the stub as processes (from the environment the tests were
    loaded with: a test's sealed os.environ never holds it)."""
    from tests.fakecluster import ENVIRONMENT

    return ENVIRONMENT.get(STUB_PROCESSES_ENV) == "1"


class Killed(BaseException):
    """The call was sent a signal: it ends where it is, as a process would."""


class StubProcess:
    """One kubectl call answered by the stub's logic in a thread, with the surface of a
    `subprocess.Popen` the tool uses (see the module's docstring)."""

    def __init__(
        self,
        args: List[str],
        *,
        stdin: Optional[int] = None,
        stdout: Optional[int] = None,
        stderr: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        text: Optional[bool] = None,
    ) -> None:
        piped = stdout == subprocess.PIPE and stderr == subprocess.PIPE
        if not piped or stdin not in (None, subprocess.DEVNULL, subprocess.PIPE):
            raise TypeError("the in-process stub answers only with stdout and stderr piped, stdin piped or not")
        self.args = list(args)
        self.pid = None  # no process: nothing to signal outside this object
        self.returncode: Optional[int] = None
        self.text_mode = bool(encoding or errors or text)
        self.encoding = encoding or "utf-8"  # the locale's, in this suite's environments
        self.errors = errors or "strict"
        self._environ = dict(os.environ if env is None else env)  # the child's copy, as it starts
        self._lock = threading.Lock()
        self._signal: Optional[int] = None
        self._killed = threading.Event()
        self._exited = threading.Event()
        self._exit_code = 0
        self._communicating: List[threading.Thread] = []
        self._output: List[bytearray] = [bytearray(), bytearray()]
        out_read, self._out_write = os.pipe()
        err_read, self._err_write = os.pipe()
        self._in_read: Optional[int] = None
        self.stdin: Any = None
        if stdin == subprocess.PIPE:
            self._in_read, in_write = os.pipe()
            self.stdin = open(in_write, "wb")  # noqa: SIM115 (closed by communicate or __exit__, as Popen's)
            if self.text_mode:
                self.stdin = io.TextIOWrapper(self.stdin, write_through=True, encoding=encoding, errors=errors)
        for descriptor in (self._out_write, self._err_write):
            os.set_blocking(descriptor, False)  # so that a kill can end a write to a full pipe
        self.stdout: Any = open(out_read, "rb")  # noqa: SIM115 (closed by the tool, as Popen's)
        self.stderr: Any = open(err_read, "rb")  # noqa: SIM115
        if self.text_mode:
            self.stdout = io.TextIOWrapper(self.stdout, encoding=encoding, errors=errors)
            self.stderr = io.TextIOWrapper(self.stderr, encoding=encoding, errors=errors)
        self._thread = threading.Thread(target=self._run, name=f"stub-{' '.join(args[1:3])}", daemon=True)
        self._thread.start()

    # -- the call, in its thread ---------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        if self._killed.wait(seconds):
            raise Killed

    def _await_signal(self) -> None:
        """Until any call of this process raises a signal, or SIGNAL_SLICE passes (the caller
        looks for its own, and its deadline); a kill ends the wait as it ends a sleep."""
        with _SIGNALS:
            _SIGNALS.wait(SIGNAL_SLICE)
        if self._killed.is_set():
            raise Killed

    def _write(self, descriptor: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._killed.is_set():
                raise Killed
            try:
                view = view[os.write(descriptor, view) :]
            except BlockingIOError:  # the pipe is full: wait for the reader, or for a kill
                select.select([], [descriptor], [], WRITE_POLL_SECONDS)

    def _read_stdin(self) -> str:
        """The stub's sys.stdin.read(): to the end of the pipe, decoded as its stdin decodes."""
        if self._in_read is None:
            return ""
        data = bytearray()
        os.set_blocking(self._in_read, False)
        while True:
            if self._killed.is_set():
                raise Killed
            try:
                chunk = os.read(self._in_read, 65536)
            except BlockingIOError:
                select.select([self._in_read], [], [], WRITE_POLL_SECONDS)
                continue
            if not chunk:
                return io.TextIOWrapper(io.BytesIO(bytes(data)), encoding="utf-8", errors="surrogateescape").read()
            data += chunk

    def _run(self) -> None:
        code = 1
        try:
            call = kubectl_stub.Invocation(
                environ=self._environ,
                read_stdin=self._read_stdin,
                out=_Stream(self, self._out_write, "surrogateescape"),
                err=_Stream(self, self._err_write, "backslashreplace"),
                sleep=self._sleep,
                signalled=_signalled,
                await_signal=self._await_signal,
            )
            code = kubectl_stub.main(self.args[1:], call)
        except Killed:
            pass
        except SystemExit as exit:
            code = 0 if exit.code is None else exit.code if isinstance(exit.code, int) else 1
        except BaseException:  # a bug of the stub: its traceback on stderr and exit 1, as a process
            with contextlib.suppress(Killed, OSError):
                self._write(self._err_write, traceback.format_exc().encode("utf-8", "replace"))
        finally:
            for descriptor in (self._out_write, self._err_write, self._in_read):
                if descriptor is not None:
                    os.close(descriptor)  # end of file for the tool, as when a process exits
            with self._lock:
                self._exit_code = -self._signal if self._signal is not None else code
                self._exited.set()

    # -- the Popen surface ---------------------------------------------------------------

    def poll(self) -> Optional[int]:
        if self._exited.is_set():
            self.returncode = self._exit_code
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
        return self.poll()  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        """Any signal ends the call (the stub sets no handler); an ended call ignores it."""
        with self._lock:
            if self._exited.is_set() or self._signal is not None:
                return
            self._signal = sig
            self._killed.set()
        _signalled()  # a call waiting for a signal ends at once

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: Optional[float] = None) -> Any:
        """Popen.communicate: writes `input` and closes stdin, reads both pipes to their end, waits."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._communicating:
            if self.stdin is not None:
                data = input.encode(self.encoding, self.errors) if self.text_mode and input is not None else input
                raw = self.stdin.buffer if self.text_mode else self.stdin
                self._communicating.append(threading.Thread(target=_feed, args=(raw, data or b""), daemon=True))
            for stream, into in zip((self.stdout, self.stderr), self._output):
                raw = stream.buffer if self.text_mode else stream
                self._communicating.append(threading.Thread(target=_drain, args=(raw, into), daemon=True))
            for thread in self._communicating:
                thread.start()
        for thread in self._communicating:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self.stdout.close()
        self.stderr.close()
        out, err = (bytes(data) for data in self._output)
        if self.text_mode:  # Popen._translate_newlines
            return tuple(
                data.decode(self.encoding, self.errors).replace("\r\n", "\n").replace("\r", "\n") for data in (out, err)
            )
        return out, err

    def __enter__(self) -> StubProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        """As Popen's: the pipes closed and the call waited for (its writes have ended by then)."""
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.stdin.close()
        self.wait()
        for thread in self._communicating:
            thread.join()
        self.stdout.close()
        self.stderr.close()


class _Stream:
    """The stub's sys.stdout or sys.stderr, into a pipe: text encoded as the stub process encodes
    it (its sealed environment names no locale, so UTF-8, with `errors` as Python's own streams)."""

    def __init__(self, process: StubProcess, descriptor: int, errors: str) -> None:
        self.process, self.descriptor, self.errors = process, descriptor, errors
        self.buffer = _Bytes(process, descriptor)  # as sys.stdout.buffer: bytes as they are

    def write(self, text: str) -> int:
        self.process._write(self.descriptor, text.encode("utf-8", self.errors))
        return len(text)

    def flush(self) -> None:
        pass  # written at once


class _Bytes:
    """The binary side of a _Stream (sys.stdout.buffer), into the same pipe."""

    def __init__(self, process: StubProcess, descriptor: int) -> None:
        self.process, self.descriptor = process, descriptor

    def write(self, data: bytes) -> int:
        self.process._write(self.descriptor, data)
        return len(data)

    def flush(self) -> None:
        pass  # written at once


def _feed(stream: Any, data: bytes) -> None:
    try:
        if data:
            stream.write(data)
        stream.close()
    except (BrokenPipeError, ValueError):  # the call ended without reading it all, as with a process
        pass


def _drain(stream: Any, into: bytearray) -> None:
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            return
        into.extend(chunk)


def _file_identity(path: str) -> Optional[Tuple[int, int]]:
    """The file a path names once its links are followed, as exec follows them: its device and
    inode, from one stat (os.path.realpath makes one lstat per component of the path: most of the
    time this spawner took for each call)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def spawner(wrapper: Path) -> Callable[..., Any]:
    """A `subprocess.Popen` that answers in-process every call whose executable is `wrapper` (the
    stub's kubectl, or a link to it), resolved as exec resolves it (PATH of the call's
    environment), and starts every other program as a process."""
    stub = _file_identity(str(wrapper))

    def spawn(args: List[str], **options: Any) -> Any:
        search = (options.get("env") or os.environ).get("PATH", os.defpath)
        path = args[0] if os.sep in args[0] else shutil.which(args[0], path=search)
        if path and _file_identity(path) == stub and os.access(path, os.X_OK):
            return StubProcess(args, **options)
        return subprocess.Popen(args, **options)

    return spawn
