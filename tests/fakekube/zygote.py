"""A fork server for the fake's kubectl calls: one process that has imported the fake once, and
forks a copy of itself for each call, so that a call costs a fork instead of an interpreter's
start and 25 ms of imports (the suite makes about 200 calls; each took 29 ms of CPU on the
project's machine, most of it imports).

The call is still a process of its own, as the real kubectl's is: ``bin/kubectl`` (tests/fakecluster.py)
starts ``tests/fake_kubectl.py``, and when ``FAKE_KUBECTL_ZYGOTE`` names this server's socket,
that process (the client, `call`) hands the server its argv, environment, working directory and
its three standard streams (the descriptors themselves, SCM_RIGHTS), waits, and exits as the copy
did. So the tool reads and writes the same pipes, waits on the process it started and signals it:

* SIGTERM, SIGINT and SIGHUP sent to the client are passed on to the copy, which handles them as
  the fake does (its SIGTERM handler, KeyboardInterrupt), and the client ends as the copy ended,
  killed by the same signal when it was;
* a client killed outright (SIGKILL) takes its copy with it: the server watches each client
  through a pidfd and kills the copy at once, so no output comes from a kubectl that is gone;
* the copy records the client's process ID as its own (`CLIENT_PID`, in calls.jsonl and in the
  memcache line), the ID the tool knows.

Where the server is not there (not started, gone, or an old kernel or Python without pidfds), the
client runs the fake itself, as without a server: the fork server only makes calls cheaper, never
different. The Job controller (FAKE_KUBECTL_CONTROLLER) always runs as its own process.

The client imports only built-in modules: it is what every call still starts."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Dict, List, NoReturn, Optional, Tuple

ZYGOTE_ENV = "FAKE_KUBECTL_ZYGOTE"  # the server's socket, set by tests/fakecluster.py
SERVE_ENV = "FAKE_KUBECTL_ZYGOTE_SERVE"  # set for the server itself: the socket to listen on
FORWARDED_SIGNALS = (15, 2, 1)  # SIGTERM, SIGINT, SIGHUP (Linux numbers; the server is Linux-only)
CLIENT_PID: List[int] = []  # in a copy: the client's process ID, the one the tool started
_HEADER = 8  # bytes of a length or a number on the socket


def kubectl_pid() -> int:
    """The process ID of this kubectl call as the tool knows it: the client's, in a copy."""
    return CLIENT_PID[0] if CLIENT_PID else os.getpid()


def _exactly(sock: object, size: int) -> Optional[bytes]:
    data = b""
    while len(data) < size:
        piece = sock.recv(size - len(data))  # type: ignore[attr-defined]
        if not piece:
            return None
        data += piece
    return data


def call(path: str) -> Optional[int]:
    """In the client: the call made by a copy in the server, and the client's exit status; None
    when there is no server to make it (then the client runs the fake itself)."""
    import _signal
    import _socket
    import marshal

    copy: List[int] = []
    pending: List[int] = []

    def forward(signum: int, frame: object) -> None:
        if copy:
            try:  # noqa: SIM105 - contextlib would cost the client, which every call starts, 2 ms of imports
                os.kill(copy[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    # before anything else: the copy's output can reach the tool before this process runs on, and a
    # signal the tool sends then is the copy's to handle
    previous = {signum: _signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}

    def here() -> None:
        """No copy makes the call: this process makes it, with the signals' handlers as they were,
        each signal that came meanwhile delivered again."""
        for signum, handler in previous.items():
            _signal.signal(signum, handler)
        for signum in pending:
            os.kill(os.getpid(), signum)

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = marshal.dumps((sys.argv, dict(os.environ), os.getcwd()))
        message = len(request).to_bytes(_HEADER, "little") + request
        streams = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
        sent = sock.sendmsg([message], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, streams)])
        if sent < len(message):
            sock.sendall(message[sent:])
    except OSError:
        sock.close()
        here()
        return None  # no server (or a stream closed): nothing was started
    answer = _exactly(sock, _HEADER)
    if answer is None:
        here()
        return None  # the server made no copy: run here
    copy.append(int.from_bytes(answer, "little"))
    for signum in pending:
        forward(signum, None)
    status = _exactly(sock, _HEADER)
    if status is None:
        os.write(2, b"error: fake_kubectl: the fork server went away during the call (tests/fakekube/zygote.py)\n")
        return 1
    wait_status = int.from_bytes(status, "little")
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        _signal.signal(signum, _signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum
    return os.WEXITSTATUS(wait_status)


# --------------------------------------------------------------------------- the server


def preload() -> None:
    """What a call imports, imported once here, before any fork."""
    import calendar  # noqa: F401
    import fcntl  # noqa: F401
    import random  # noqa: F401 - random reseeds itself in each fork (os.register_at_fork)
    import signal  # noqa: F401
    import subprocess  # noqa: F401
    import threading  # noqa: F401
    import urllib.parse  # noqa: F401

    from . import apiserver, cli, commands, common, containerlog, faults, kubelet, store  # noqa: F401


def _standard_streams(template: Dict[str, Tuple[str, str]]) -> None:
    """sys.stdin, stdout and stderr made again on descriptors 0, 1 and 2, as the interpreter
    makes them at its start (Python/pylifecycle.c create_stdio): newline "\\n", stderr always
    line-buffered, stdout only on a terminal; the encodings are the server's."""
    import io

    def stream(fd: int, name: str) -> io.TextIOWrapper:
        encoding, errors = template[name]
        buffered = open(fd, "rb" if fd == 0 else "wb", buffering=-1, closefd=False)  # noqa: SIM115 - sys's own
        line_buffering = fd == 2 or (fd == 1 and os.isatty(fd))
        return io.TextIOWrapper(buffered, encoding=encoding, errors=errors, newline="\n", line_buffering=line_buffering)  # type: ignore[arg-type]

    sys.stdin, sys.stdout, sys.stderr = stream(0, "stdin"), stream(1, "stdout"), stream(2, "stderr")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def finish(main: Callable[[], int]) -> NoReturn:
    """In a copy: `sys.exit(main())` and the interpreter's end as Python/pylifecycle.c makes it
    (Py_FinalizeEx: wait for the threads that are not daemons, run the atexit functions, flush
    stdout and stderr, 120 when stdout's flush fails) up to where it frees every object. That last
    step writes to every page the copy shares with the server, and cost 8 ms of each call's 10."""
    import atexit
    import contextlib
    import threading

    try:
        code = main()
    except SystemExit as exiting:
        code = exiting.code  # type: ignore[assignment]
    except BaseException:  # printed as the interpreter prints an uncaught one
        sys.excepthook(*sys.exc_info())
        code = 1
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        status = 120
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(status)


def _peer_pid(conn: object) -> int:
    import socket

    credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # type: ignore[attr-defined]
    return int.from_bytes(credentials[:4], sys.byteorder)


def serve(path: str) -> bool:
    """Serve calls on `path` until the test process closes this process's stdin, then until the
    calls running end. Returns True in a copy, set up as the call's process (argv, environment,
    working directory, standard streams): the caller then runs the fake; False in the server once
    it is done."""
    import contextlib
    import gc
    import select
    import signal
    import socket
    import time

    preload()
    names = ("stdin", "stdout", "stderr")
    template = {name: (getattr(sys, name).encoding, getattr(sys, name).errors) for name in names}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    os.set_blocking(woken, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake)
    poller = select.poll()
    for fd in (listener.fileno(), woken, 0):
        poller.register(fd, select.POLLIN)
    copies: Dict[int, Tuple[socket.socket, int]] = {}  # copy's pid -> (its client's connection, the client's pidfd)
    watched: Dict[int, int] = {}  # client's pidfd -> copy's pid
    accepting = True
    gc.freeze()  # the objects made so far are never collected: a copy's collections leave their pages shared
    while accepting or copies:
        for fd, _ in poller.poll():
            if fd == 0:
                if not os.read(0, 512):  # the test process closed its end: no more calls
                    accepting = False
                    poller.unregister(0)
                    poller.unregister(listener.fileno())
                    listener.close()
                    with contextlib.suppress(OSError):  # the test process may have removed it at its exit
                        os.unlink(path)
            elif accepting and fd == listener.fileno():
                conn, _ = listener.accept()
                call = _receive(conn)
                if call is None:
                    conn.close()
                    continue
                argv, env, cwd, streams = call
                try:
                    client = _peer_pid(conn)
                    pidfd = os.pidfd_open(client)
                except OSError:  # the client is gone already
                    for stream in streams:
                        os.close(stream)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for other, other_pidfd in copies.values():
                        other.close()
                        os.close(other_pidfd)
                    for other in (woken, wake, pidfd):
                        os.close(other)
                    listener.close()
                    conn.close()
                    for target, stream in enumerate(streams):
                        os.dup2(stream, target)
                    for stream in streams:
                        if stream > 2:
                            os.close(stream)
                    os.environ.clear()
                    os.environ.update(env)
                    time.tzset()  # TZ, as a new process reads it
                    os.chdir(cwd)
                    sys.argv = argv
                    CLIENT_PID.append(client)
                    _standard_streams(template)
                    return True
                for stream in streams:
                    os.close(stream)
                copies[pid] = (conn, pidfd)
                watched[pidfd] = pid
                poller.register(pidfd, select.POLLIN)
                with contextlib.suppress(OSError):  # the client is gone: its pidfd says so next
                    conn.sendall(pid.to_bytes(_HEADER, "little"))
            elif fd == woken:
                while True:
                    try:
                        if not os.read(woken, 512):
                            break
                    except BlockingIOError:
                        break
                _reap(copies, watched, poller)
            elif fd in watched and select.select([fd], [], [], 0)[0]:
                # a client ended: its copy goes with it, as a killed kubectl's output stops. Asked
                # again: this batch's event may be of a pidfd that _reap closed, its number since
                # given to a new client's
                poller.unregister(fd)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(watched.pop(fd), signal.SIGKILL)
        _reap(copies, watched, poller)
    return False


def _receive(conn: object) -> Optional[Tuple[List[str], Dict[str, str], str, List[int]]]:
    import marshal
    import socket

    try:
        first, ancillary, _, _ = conn.recvmsg(_HEADER, socket.CMSG_SPACE(3 * 4))  # type: ignore[attr-defined]
        streams = [
            int.from_bytes(data[i : i + 4], sys.byteorder)
            for level, kind, data in ancillary
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
            for i in range(0, len(data) - len(data) % 4, 4)
        ]
        if len(first) < _HEADER:
            rest = _exactly(conn, _HEADER - len(first))
            first += rest or b""
        body = _exactly(conn, int.from_bytes(first, "little")) if len(first) == _HEADER else None
    except OSError:
        return None
    if body is None or len(streams) != 3:
        for stream in streams:
            os.close(stream)
        return None
    argv, env, cwd = marshal.loads(body)
    return argv, env, cwd, streams


def _reap(copies: Dict[int, Tuple[object, int]], watched: Dict[int, int], poller: object) -> None:
    """Each copy that ended: its wait status to its client, which then exits the same way."""
    import contextlib

    while copies:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        entry = copies.pop(pid, None)
        if entry is None:
            continue
        conn, pidfd = entry
        if watched.pop(pidfd, None) is not None:
            poller.unregister(pidfd)  # type: ignore[attr-defined]
        os.close(pidfd)
        with contextlib.suppress(OSError):
            conn.sendall(status.to_bytes(_HEADER, "little"))  # type: ignore[attr-defined]
        conn.close()  # type: ignore[attr-defined]
