"""The kubectl seam: every call to kubectl, its retries, budgets and watches."""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import json
import math
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .constants import (
    CALL_STDERR_LIMIT,
    EXIT_CLUSTER,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    KUBECTL_PROCESS_TIMEOUT,
    PREPARED_CALL_MAX_AGE,
    REQUEST_TIMEOUT,
    WATCH_BUFFER_LIMIT,
)
from .core_basics import dig, parse_json_documents, short_repr, url_segment
from .core_reports import _display_width, fit_lines, printable
from .errors import DemoError, KubectlFailure, KubectlTimeout, kubectl_message
from .records import TIMING, KubeObject, Receipt, Timing
from .status import clear_progress, shell_lines, terminal_width

# The kubectl seam #############################################################
# Every subprocess this tool starts goes through `Kubectl`: calls recorded, reads retried,
# watches streamed. Uses the pure core's parsing and the status lines.


class WatchStream:
    """A `kubectl get -w -o json --output-watch-events` process read as a stream.

    A reader thread decodes the concatenated JSON events and puts (tag, wall time, monotonic
    time, event) on a shared queue, stamped when the bytes arrived; event None marks the end."""

    def __init__(
        self,
        tag: str,
        process: subprocess.Popen[bytes],
        sink: queue.Queue[Any],
        record: Dict[str, Any],
        on_close: Callable[[], None] = lambda: None,
        closing: Optional[List[threading.Thread]] = None,
        end_seconds: float = 5.0,
    ) -> None:
        self.tag = tag
        self.end_seconds = end_seconds  # close(): the SIGTERM's grace before SIGKILL
        self.process = process
        self.sink = sink
        self.record = record  # its entry in kubectl-calls.json, completed by close()
        self.on_close = on_close  # told once the record is complete (-v shows the call)
        self.closing = closing if closing is not None else []  # end()'s threads (Kubectl.closing)
        self.started = time.monotonic()
        self.stopped: Optional[float] = None  # when stop() asked it to end
        self.stderr = ""  # kubectl's message, once the stream has ended
        self.garbled = ""  # what ended the stream when its bytes were no watch events, in words
        self.thread = threading.Thread(target=self._read, name=f"watch-{tag}", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        decoder = json.JSONDecoder()
        text_decoder = codecs.getincrementaldecoder("utf-8")()
        buffer = ""
        descriptor = self.process.stdout.fileno()
        while True:
            chunk = os.read(descriptor, 65536)
            received_at, received_clock = time.time(), time.monotonic()
            if not chunk:
                break
            try:
                buffer += text_decoder.decode(chunk)
            except UnicodeDecodeError as error:  # kubectl's encoder writes UTF-8 only: something else spoke
                where = short_repr(error.object[error.start : error.start + 8])
                return self._garbled(f"bytes that are not UTF-8 ({error.reason} at {where})")
            while True:
                buffer = buffer.lstrip()
                if not buffer:
                    break
                try:
                    event, end = decoder.raw_decode(buffer)
                except (json.JSONDecodeError, RecursionError):
                    if buffer.startswith("{") and len(buffer) < WATCH_BUFFER_LIMIT:
                        break  # incomplete: wait for more bytes
                    return self._garbled(f"text that is not a JSON watch event ({short_repr(buffer[:40])})")
                buffer = buffer[end:]
                if isinstance(event, dict):
                    self.sink.put((self.tag, received_at, received_clock, event))
        if self.process.stderr is not None:
            self.stderr = self.process.stderr.read(4096).decode("utf-8", "replace").strip()
        self.sink.put((self.tag, time.time(), time.monotonic(), None))

    def _garbled(self, what: str) -> None:
        """End the stream, so the waiter falls back to polling, saying what it printed."""
        self.garbled = f"it printed {what}"
        self.process.kill()
        self.sink.put((self.tag, time.time(), time.monotonic(), None))

    def stop(self) -> None:
        """Ask the stream's kubectl to end (SIGTERM) without waiting for it: streams stopped
        together end together, and close() then waits for each."""
        if self.stopped is None:
            self.stopped = time.monotonic()
            if self.process.poll() is None:
                with contextlib.suppress(OSError):
                    self.process.terminate()

    def end(self) -> None:
        """close() without waiting for it: the stream is asked to end now, and a thread waits for
        its process and completes its record (joined by Kubectl.wait_for_ended_watches before
        kubectl-calls.json is written), so the run's next call starts at once."""
        self.stop()
        thread = threading.Thread(target=self.close, name=f"close-{self.tag}", daemon=True)
        thread.start()
        self.closing.append(thread)

    def close(self) -> None:
        self.stop()
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=self.end_seconds)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.thread.join(timeout=5)
        self.record["seconds"] = round((self.stopped or time.monotonic()) - self.started, 3)
        self.record["exit"] = self.process.returncode  # negative: ended by this tool's signal
        if self.stderr:
            self.record["stderr"] = self.stderr[-CALL_STDERR_LIMIT:]
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None and not self.thread.is_alive():
                stream.close()
        self.on_close()


class InBackground:
    """One kubectl call started now, in a thread of its own: `result()` waits for it and gives
    its result, or raises what it raised, in the caller's thread, so a call made early reads
    no differently from one made then. A result never asked for is dropped (the call's process
    ends by itself; Ctrl-C stops it with the other children)."""

    def __init__(self, task: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self._task = task
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            self._value = self._task()
        except BaseException as error:  # handed to the caller's thread by result()
            self._error = error

    def join(self, timeout: Optional[float] = None) -> None:
        self._thread.join(timeout)

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def concurrently(
    tasks: Sequence[Callable[[], Any]], stop: Optional[threading.Event] = None, grace: float = 0.0
) -> List[Any]:
    """Run independent kubectl calls at once (each is its own process); their results in order.

    The first task that raised, in task order, raises here once all have ended, so a failure
    reads the same as it would have one call after another. Tasks that wait on Jobs pass the
    `stop` they watch: on Ctrl-C it is set, and their threads get `grace` seconds to end their
    waits (closing their watches) before the interrupt goes on."""
    if len(tasks) == 1:
        return [tasks[0]()]
    calls = [InBackground(task) for task in tasks]
    try:
        for call in calls:
            call.join()
    except KeyboardInterrupt:
        if stop is not None:
            stop.set()
            deadline = time.monotonic() + grace
            for call in calls:
                call.join(max(0.0, deadline - time.monotonic()))
        raise
    return [call.result() for call in calls]  # all have ended: the first error in task order raises


class _Watchdog:
    """Kills a process once its deadline passes, `seconds` after it started or after the last
    `postpone`."""

    def __init__(self, process: subprocess.Popen[bytes], seconds: float) -> None:
        self.process, self.seconds = process, seconds
        self.deadline = time.monotonic() + seconds
        self.fired, self.stopped = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._watch, name="kubectl-watchdog", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopped.wait(max(0.0, self.deadline - time.monotonic())):
            if time.monotonic() >= self.deadline:
                self.fired.set()
                with contextlib.suppress(OSError):
                    self.process.kill()
                return

    def postpone(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)


def _drain(stream: Any, into: bytearray) -> None:
    """Read a pipe to its end, keeping at most CALL_STDERR_LIMIT bytes of it."""
    while True:
        chunk = stream.read(65536)
        if not chunk:
            return
        into.extend(chunk)
        del into[: max(0, len(into) - CALL_STDERR_LIMIT)]


@dataclasses.dataclass
class PreparedCall:
    """A create's kubectl started before its input is known (Kubectl.prepare), waiting for it."""

    argv: List[str]
    process: subprocess.Popen[str]
    record: Dict[str, Any]  # its entry in kubectl-calls.json, from its start
    started: float  # time.monotonic() at its start


@dataclasses.dataclass(eq=False)
class Kubectl:
    """Runs kubectl with the run's fixed context, kubeconfig and timeouts, and records calls.

    Built complete: the context is resolved before (`cluster_identity`, then `with_context`), and
    nothing is changed afterwards; a call that needs a shorter timeout says so itself. Reads that
    are safe to repeat are retried on transient failures with a short, bounded backoff; nothing
    else is ever repeated here. Retries are quiet: with `verbose` (-v) every call is shown as it
    ends, and every retry."""

    executable: str
    context: Optional[str]
    kubeconfig: Optional[str]
    kubeconfig_from: str = ""  # where `kubeconfig` came from, for a message: "--kubeconfig", ...
    server: Optional[str] = None  # the context's API server, once known, named when it is unreachable
    verbose: bool = False
    process_timeout: float = KUBECTL_PROCESS_TIMEOUT
    timing: Timing = dataclasses.field(default_factory=lambda: TIMING)  # TIMING as it is when built
    calls: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # kubectl-calls.json
    origin: float = dataclasses.field(default_factory=time.monotonic)  # "started" in the call record
    children: Set[subprocess.Popen[Any]] = dataclasses.field(default_factory=set)  # running now
    # argv -> a create's kubectl started before its input (prepare): the next call of that argv uses it
    prepared: Dict[Tuple[str, ...], PreparedCall] = dataclasses.field(default_factory=dict)
    closing: List[threading.Thread] = dataclasses.field(default_factory=list)  # watches ending (WatchStream.end)
    # Starts each kubectl process, called as subprocess.Popen is: the call-plan tests pass one
    # that answers the call in-process, through real pipes, so that its hundreds of calls cost no
    # interpreter start each; every other use is subprocess.Popen itself.
    spawner: Callable[..., subprocess.Popen[Any]] = subprocess.Popen

    def __post_init__(self) -> None:
        # A list of kubeconfig files (as $KUBECONFIG allows) can only travel in the environment.
        kubeconfig = self.kubeconfig
        self.environment = dict(os.environ, KUBECONFIG=kubeconfig) if kubeconfig and os.pathsep in kubeconfig else None

    def with_context(self, context: str, server: Optional[str] = None) -> Kubectl:
        """The same kubectl bound to one context (and its API server, when known), sharing the call record."""
        return dataclasses.replace(self, context=context, server=server or self.server)

    def argv(
        self, args: Sequence[str], namespace: Optional[str] = None, request_timeout: Optional[str] = REQUEST_TIMEOUT
    ) -> List[str]:
        argv = [self.executable]
        if self.kubeconfig and os.pathsep not in self.kubeconfig:
            argv.append(f"--kubeconfig={self.kubeconfig}")
        if self.context:
            argv.append(f"--context={self.context}")
        if request_timeout:
            argv.append(f"--request-timeout={request_timeout}")
        if namespace:
            argv.append(f"--namespace={namespace}")
        return argv + list(args)

    def _record(self, argv: List[str], started: float, **extra: Any) -> Dict[str, Any]:
        """The call's entry in kubectl-calls.json, completed as the call goes on."""
        record: Dict[str, Any] = {"argv": argv[1:], "started": round(started - self.origin, 3), **extra}
        self.calls.append(record)
        return record

    def note(self, message: str, command: Optional[str] = None, comment: str = "") -> None:
        """A line on stderr that only -v shows (a retry; a call: `command` and its `comment`),
        wrapped to a terminal's width (a command broken between its words, as a shell reads it)."""
        if self.verbose:
            width = terminal_width(sys.stderr)
            text = printable(message) if command is None else printable(f"{message}{command}  {comment}")
            if width is not None and command is not None and _display_width(text) > width:
                text = shell_lines(printable(command), width, printable(message), printable(comment))
            elif width is not None:
                text = fit_lines(text, width)
            clear_progress(sys.stderr)
            sys.stderr.write(text + "\n")  # one write: calls end in several threads
            sys.stderr.flush()

    def _ended(self, argv: List[str], record: Dict[str, Any]) -> None:
        """With -v, the call as a shell would read it and how it ended, once it has."""
        if "error" in record:
            ending = "no answer, killed" if record["error"] == "timeout" else f"not started: {record['error']}"
        elif "cancelled" in record:
            ending = f"prepared, never given its input ({record['cancelled']}), killed"
        else:
            ending = f"exit {record.get('exit')}"
        self.note("+ ", shlex.join(argv), f"# {ending}, {record.get('seconds', 0):.3f} s")

    def _not_started(self, record: Dict[str, Any], error: OSError) -> DemoError:
        record["error"] = str(error)
        return DemoError(
            f"cannot start kubectl ({self.executable!r}: {error.strerror or error}); install kubectl, "
            "or pass --kubectl PATH or set KUBECTL",
            EXIT_CLUSTER,
        )

    def _timed_out(self, record: Dict[str, Any], argv: List[str], seconds: float) -> KubectlTimeout:
        record["error"] = "timeout"
        server = f" {self.server}" if self.server else ""
        named = f" of context {self.context}" if self.context else ""
        probe = shlex.join(["kubectl", *(["--context", self.context] if self.context else []), "cluster-info"])
        return KubectlTimeout(
            f"`{shlex.join(['kubectl', *argv[1:]])}` did not answer within {seconds:g} s; "
            f"check that the API server{server}{named} is reachable (`{probe}`)",
            EXIT_TIMEOUT,
        )

    def _start(self, argv: List[str], record: Dict[str, Any]) -> subprocess.Popen[bytes]:
        """A kubectl whose output is read as it arrives (as bytes), known to `stop_children`."""
        try:
            process = self.spawner(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.environment
            )
        except OSError as error:
            failure = self._not_started(record, error)
            self._ended(argv, record)
            raise failure from None
        self.children.add(process)
        return process

    def _retry_or_raise(self, failure: KubectlFailure, delays: List[float], first_attempt: float) -> None:
        """After a failed read: wait and return when it is transient and the retry budget allows
        another attempt; else raise it."""
        if not (delays and failure.transient) or time.monotonic() - first_attempt > self.timing.retry_budget_seconds:
            raise failure
        self.note(f"warning: retrying `{failure.command}` after a transient failure: {failure.first_line}")
        time.sleep(delays.pop(0))

    def _spawn_text(self, argv: List[str], stdin: bool) -> subprocess.Popen[str]:
        return self.spawner(
            argv,
            stdin=subprocess.PIPE if stdin else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            errors="replace",
            env=self.environment,
        )

    def _run_process(
        self, argv: List[str], stdin: Optional[str], timeout: float, started: Optional[subprocess.Popen[str]] = None
    ) -> subprocess.CompletedProcess[str]:
        """subprocess.run, with the process known to `stop_children` while it runs; `started`: the
        process already running (a prepared call), given its input now."""
        with started or self._spawn_text(argv, stdin is not None) as process:
            self.children.add(process)
            try:
                stdout, stderr = process.communicate(stdin, timeout=timeout)
            except BaseException:  # a timeout, or Ctrl-C in this thread: the call ends with it
                process.kill()
                process.wait()
                raise
            finally:
                self.children.discard(process)
        return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)

    def prepare(self, args: Sequence[str], namespace: Optional[str] = None) -> None:
        """Start now the kubectl of a create whose input is known only later, so that its start
        (about 50 ms of a core, kubectl's own) is not part of the step that sends it: the next
        call of the same argv with an input is given this process instead of starting one.

        Until its input comes it creates nothing: `create -f -` sends no request but discovery
        before it has read its input (1.32: GET /version), and `create --raw PATH -f -` opens its
        POST and waits to send the body (client-go streams it); that no request but discovery is
        completed and nothing created before the input, on every kubectl minor, is
        tests/test_kubectl_contract.py's. One never used is ended by
        `cancel_prepared` before it has its input, with SIGKILL: a POST without its body, which the
        API server drops. A call prepared more than PREPARED_CALL_MAX_AGE ago is replaced by a new
        process when made, as its request timeout runs from its start."""
        argv = self.argv(args, namespace)
        if tuple(argv) in self.prepared:
            return
        started = time.monotonic()
        try:
            process = self._spawn_text(argv, True)
        except OSError:
            return  # the call itself reports it, when it is made
        self.children.add(process)
        record = self._record(argv, started, prepared=True)
        self.prepared[tuple(argv)] = PreparedCall(argv, process, record, started)

    def _take_prepared(self, argv: List[str]) -> Optional[PreparedCall]:
        prepared = self.prepared.pop(tuple(argv), None)
        if prepared is not None and time.monotonic() - prepared.started > PREPARED_CALL_MAX_AGE:
            self._cancel(prepared, "too old")
            return None
        return prepared

    def cancel_prepared(self) -> None:
        """End every prepared call not made (the run stopped before it): none was given its input."""
        while self.prepared:
            self._cancel(self.prepared.popitem()[1], "not needed")

    def _cancel(self, prepared: PreparedCall, why: str) -> None:
        process = prepared.process
        with contextlib.suppress(OSError):
            process.kill()  # before its input: nothing it could create was sent
        # its pipes closed: a stub answering in-process sees them end; a SIGKILL cannot be ignored,
        # so the wait is bounded only against a kernel that never reaps (no traceback from a finally)
        with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired):
            process.communicate(timeout=5)
        self.children.discard(process)
        prepared.record.update(cancelled=why, seconds=round(time.monotonic() - prepared.started, 3))
        self._ended(prepared.argv, prepared.record)

    def wait_for_ended_watches(self, seconds: float = 10.0) -> None:
        """Until every watch ended with WatchStream.end has ended, its record complete (each
        given `seconds`: a stream's close() is bounded by its SIGKILL after 5 s)."""
        for thread in list(self.closing):
            thread.join(timeout=seconds)

    def stop_children(self) -> None:
        """End every kubectl still running (calls made at once in other threads, streams), so an
        interruption leaves none behind: SIGTERM first, SIGKILL after a second."""
        running = [process for process in list(self.children) if process.poll() is None]
        for process in running:
            with contextlib.suppress(OSError):
                process.terminate()
        for process in running:
            try:
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    process.kill()

    def _once(self, argv: List[str], stdin: Optional[str], timeout: float) -> subprocess.CompletedProcess[str]:
        prepared = self._take_prepared(argv) if stdin is not None else None
        if prepared is not None:  # its record counts from its start; "input_at" is when it was given its input
            started, record = prepared.started, prepared.record
            record["input_at"] = round(time.monotonic() - self.origin, 3)
        else:
            started = time.monotonic()
            record = self._record(argv, started)
        try:
            completed = self._run_process(argv, stdin, timeout, prepared.process if prepared is not None else None)
        except OSError as error:
            raise self._not_started(record, error) from None
        except subprocess.TimeoutExpired:
            raise self._timed_out(record, argv, timeout) from None
        finally:
            record["seconds"] = round(time.monotonic() - started, 3)
            if "error" in record:
                self._ended(argv, record)
        record["exit"] = completed.returncode
        self._ended(argv, record)
        if completed.returncode != 0:
            record["stderr"] = completed.stderr[-CALL_STDERR_LIMIT:]
        return completed

    def run(
        self,
        args: Sequence[str],
        *,
        namespace: Optional[str] = None,
        stdin: Optional[str] = None,
        read_only: bool = False,
        timeout: Optional[float] = None,
        retries: Optional[Sequence[float]] = None,
    ) -> str:
        argv = self.argv(args, namespace)
        delays = list(self.timing.retry_delays if retries is None else retries) if read_only else []
        first_attempt = time.monotonic()
        while True:
            completed = self._once(argv, stdin, timeout or self.process_timeout)
            if completed.returncode == 0:
                return completed.stdout
            failure = KubectlFailure(argv, completed.returncode, completed.stderr, completed.stdout, self.server)
            self._retry_or_raise(failure, delays, first_attempt)

    def stream(
        self,
        args: Sequence[str],
        consume: Callable[[bytes], None],
        *,
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
        request_timeout: Optional[str] = REQUEST_TIMEOUT,
        idle: bool = False,
        on_start: Optional[Callable[[subprocess.Popen[bytes]], None]] = None,
    ) -> None:
        """A read whose output may be large (logs): handed to consume as bytes, chunk by chunk as
        it arrives, never held whole. Repeated after a transient failure only while nothing has
        been consumed; kubectl's stderr is kept up to CALL_STDERR_LIMIT.

        `request_timeout` None gives kubectl no --request-timeout: client-go makes it the HTTP
        client's timeout (rest.Config.Timeout -> http.Client.Timeout), which also covers reading
        the response, so it would end a large log's transfer. With `idle`, the call ends when it
        has printed nothing for `timeout` seconds, however long it keeps printing; else
        `timeout` seconds after it started. `on_start` is given each process as it starts (a
        followed log's reader ends it once every log it follows is whole)."""
        argv = self.argv(args, namespace, request_timeout)
        delays = list(self.timing.retry_delays)
        first_attempt = time.monotonic()
        limit = timeout or self.process_timeout
        while True:
            started = time.monotonic()
            record = self._record(argv, started)
            process = self._start(argv, record)
            assert process.stdout is not None and process.stderr is not None
            if on_start is not None:
                on_start(process)
            stderr = bytearray()
            stderr_reader = threading.Thread(target=_drain, args=(process.stderr, stderr), daemon=True)
            stderr_reader.start()
            watchdog = _Watchdog(process, limit)
            consumed = 0
            try:
                descriptor = process.stdout.fileno()
                while True:
                    chunk = os.read(descriptor, 65536)
                    if not chunk:
                        break
                    if idle:
                        watchdog.postpone()
                    consumed += len(chunk)
                    consume(chunk)
                returncode = process.wait()
            finally:
                watchdog.stop()
                if process.poll() is None:
                    process.kill()
                    process.wait()
                stderr_reader.join(timeout=5)
                process.stdout.close()
                process.stderr.close()
                self.children.discard(process)
                record["seconds"] = round(time.monotonic() - started, 3)
            record["exit"] = returncode
            if watchdog.fired.is_set() and returncode < 0:
                timed_out = self._timed_out(record, argv, limit)
                self._ended(argv, record)
                raise timed_out
            self._ended(argv, record)
            if returncode == 0:
                return
            text = stderr.decode("utf-8", "replace")
            record["stderr"] = text[-CALL_STDERR_LIMIT:]
            failure = KubectlFailure(argv, returncode, text, server=self.server)
            if consumed:  # what was consumed cannot be taken back: never repeated
                raise failure
            self._retry_or_raise(failure, delays, first_attempt)

    def cluster_identity(self) -> Tuple[str, Optional[str]]:
        """The context to use (--context, else the current one, read once) and its API server URL,
        from the kubeconfig alone: `config view --minify` needs no cluster."""
        argv = self.argv(["config", "view", "--minify", "-o", "json"], request_timeout=None)
        completed = self._once(argv, None, self.process_timeout)
        if completed.returncode != 0:
            raise DemoError(self.no_context(kubectl_message(completed.stderr)), EXIT_USAGE)
        config = self.decode_json(completed.stdout, "config view")
        context = self.context or config.get("current-context")
        if not isinstance(context, str) or not context:
            raise DemoError("the kubeconfig names no current context; pass --context", EXIT_USAGE)
        clusters = config.get("clusters") or [{}]
        server = dig(clusters[0] if isinstance(clusters[0], dict) else {}, "cluster", "server")
        return context, server if isinstance(server, str) else None

    def no_context(self, message: str) -> str:
        """Why `config view --minify` found no context (kubectl's `message`), with its own fix.

        kubectl reads a kubeconfig file that does not exist as an empty one (client-go
        tools/clientcmd/config.go, PathOptions.GetStartingConfig), so "current-context must exist"
        (client-go tools/clientcmd/api/helpers.go, MinifyConfig) means no file, or a file without a
        current context, and "cannot locate context X" may mean no file too: whether a file exists is
        read here first, from the files kubectl was given, as kubectl chooses them (an explicit
        file, else $KUBECONFIG's list, else ~/.kube/config)."""
        wanted = re.match(r"^error: cannot locate context (.+)$", message)
        if not wanted and message != "error: current-context must exist in order to minify":
            return f"cannot read the kubeconfig ({message}); check --kubeconfig, $KUBECONFIG or ~/.kube/config"
        files = self.kubeconfig.split(os.pathsep) if self.kubeconfig else [os.path.expanduser("~/.kube/config")]
        if not any(os.path.exists(path) for path in files):
            if self.kubeconfig_from == "--kubeconfig":
                return f"the kubeconfig file {files[0]} does not exist; check --kubeconfig"
            if self.kubeconfig_from == "$KUBECONFIG":
                return (
                    f"no file in $KUBECONFIG exists ({', '.join(files)}); check $KUBECONFIG, or pass --kubeconfig FILE"
                )
            if self.kubeconfig_from:
                return (
                    f"the kubeconfig file {files[0]} ({self.kubeconfig_from}) no longer exists; pass --kubeconfig FILE"
                )
            return (
                "no kubeconfig: ~/.kube/config does not exist and $KUBECONFIG is not set; write one with your "
                "cluster's tool (for example `kind export kubeconfig`, `aws eks update-kubeconfig`, `gcloud container "
                "clusters get-credentials`), or pass --kubeconfig FILE"
            )
        if wanted and self.context:
            return (
                f"context {wanted.group(1)} is not in the kubeconfig; check --context "
                "(`kubectl config get-contexts` lists the contexts)"
            )
        if wanted:
            return (
                f"the kubeconfig's current context {wanted.group(1)} is not defined in it; pass --context, "
                "or choose one with `kubectl config use-context NAME`"
            )
        return (
            f"the kubeconfig ({', '.join(files)}) sets no current context; pass --context, or choose one with "
            "`kubectl config use-context NAME` (`kubectl config get-contexts` lists them)"
        )

    def get(self, kind: str, name: str, namespace: Optional[str] = None, **kwargs: Any) -> Optional[KubeObject]:
        """The live object, or None when it does not exist."""
        raw = self.run(
            ["get", kind, name, "--ignore-not-found", "-o", "json"], namespace=namespace, read_only=True, **kwargs
        )
        if not raw.strip():
            return None
        return self.decode_json(raw, f"get {kind} {name}")

    def get_list(
        self, kinds: str, namespace: Optional[str] = None, flags: Sequence[str] = (), **kwargs: Any
    ) -> List[KubeObject]:
        """Every object of `kinds` (in `namespace`; `flags` may widen or narrow that: --all-namespaces,
        --field-selector), as one List that kubectl assembles from the server's pages of 500."""
        raw = self.run(["get", kinds, *flags, "-o", "json"], namespace=namespace, read_only=True, **kwargs)
        try:
            return parse_json_documents(raw)
        except ValueError as error:
            raise DemoError(
                f"kubectl get {kinds} printed output that is not JSON objects ({error})", EXIT_CLUSTER
            ) from None

    def create(self, manifest: KubeObject, review: bool = False) -> List[KubeObject]:
        """Create objects (one, or a List of several, answered as one document each).

        The run's own objects are validated server-side, strictly (`--validate=strict`: an
        unknown field is an error). Access reviews (review=True) are never stored, so they skip
        validation and, with it, kubectl's OpenAPI download; being read-only, they are retried.
        The input is create_input's."""
        raw = self.run(self.create_args(review), stdin=self.create_input(manifest, review), read_only=review)
        try:
            created = parse_json_documents(raw)
        except ValueError as error:
            raise DemoError(f"kubectl create printed output that is not JSON ({error})", EXIT_CLUSTER) from None
        if not created:
            raise DemoError(f"kubectl create of {manifest.get('kind')} printed no object", EXIT_CLUSTER)
        return created

    @staticmethod
    def create_args(review: bool = False) -> List[str]:
        """`create`'s arguments: what `prepare_create` starts is what `create` would."""
        return ["create", "-f", "-", "-o", "json", "--validate=false" if review else "--validate=strict"]

    def prepare_create(self) -> None:
        """The kubectl of the next `create` of the run's own objects, started now (see prepare)."""
        self.prepare(self.create_args())

    @staticmethod
    def create_raw_args(path: str) -> List[str]:
        return ["create", "--raw", path, "-f", "-"]

    def prepare_create_raw(self, path: str) -> None:
        """The kubectl of the next `create_raw` to `path`, started now (see prepare)."""
        self.prepare(self.create_raw_args(path))

    @staticmethod
    def create_input(manifest: KubeObject, review: bool = False) -> str:
        """What `create -f -` reads: the manifest; the run's own objects of a List (review=False)
        as one JSON document each, one after another. kubectl reads a stream of documents as it
        reads a List's items (cli-runtime StreamVisitor, then each created in order, going on
        past a failure), but a List, which has no OpenAPI v3 path, it validates client-side
        against /openapi/v2, several MB on a real cluster and cached nowhere, on every run; a
        document of `v1` it leaves to the server's strict validation, once the group's OpenAPI v3
        document (cached) says the server can (from kubectl 1.29; up to 1.28 it downloads
        /openapi/v2 for any object). The contract tests show both on every minor."""
        if review or manifest.get("kind") != "List":
            return json.dumps(manifest)
        return "\n".join(json.dumps(item) for item in manifest.get("items") or [])

    def create_raw(self, path: str, manifest: KubeObject, review: bool = False) -> KubeObject:
        """Create one object with `create --raw PATH -f -`: one POST of the manifest to `path`
        with the kubeconfig's credentials, and no discovery nor OpenAPI download, which a cold
        kubectl cache (a fresh CI runner) pays before any other create (kubectl
        pkg/cmd/create/create.go RunCreate: --raw goes to rawhttp.RawPost, past the builder and
        its RESTMapper). The server's answer, the stored object, is printed as it is. A review
        (review=True: the rules review) is never stored, so it is retried as a read."""
        raw = self.run(self.create_raw_args(path), stdin=json.dumps(manifest), read_only=review)
        return self.decode_json(raw, f"create --raw {path.split('?', 1)[0]}")

    def get_raw(self, path: str, **kwargs: Any) -> str:
        """`get --raw PATH`: one GET, no discovery (kubectl pkg/cmd/get/get.go, rawhttp.RawGet),
        the body as it is; a read, so retried on transient failures."""
        return self.run(["get", "--raw", path], read_only=True, **kwargs)

    def runtimeclass(self, name: str) -> Optional[KubeObject]:
        """The RuntimeClass `name`, or None when the API server answers that it does not exist:
        one GET of its path (RuntimeClasses are cluster-scoped, node.k8s.io/v1 from Kubernetes
        1.20), which needs no discovery. The raw read prints no object for a missing one and exits
        1 with the server's NotFound status (apimachinery errors.NewNotFound: `<resource>.<group>
        "<name>" not found`); any other failure is raised as it is."""
        try:
            raw = self.get_raw(f"/apis/node.k8s.io/v1/runtimeclasses/{url_segment(name)}")
        except KubectlFailure as failure:
            if failure.first_line == f'Error from server (NotFound): runtimeclasses.node.k8s.io "{name}" not found':
                return None
            raise
        return self.decode_json(raw, f"get runtimeclass {name}")

    @staticmethod
    def decode_json(raw: str, what: str) -> KubeObject:
        """kubectl's output as one JSON object, or an error naming the call that printed it."""
        try:
            decoded = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as error:
            detail = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deeply"
            raise DemoError(f"kubectl {what} printed output that is not JSON ({detail})", EXIT_CLUSTER) from None
        if not isinstance(decoded, dict):
            raise DemoError(f"kubectl {what} printed JSON that is not an object", EXIT_CLUSTER)
        return decoded

    def watch(
        self, tag: str, args: Sequence[str], namespace: str, sink: queue.Queue[Any], seconds: float
    ) -> WatchStream:
        """Start a watch whose request lives as long as the client is prepared to wait."""
        argv = self.argv(
            ["get", *args, "-o", "json", "--output-watch-events", "--watch"],
            namespace,
            request_timeout=f"{math.ceil(seconds)}s",
        )
        record = self._record(argv, time.monotonic(), watch=True)
        process = self._start(argv, record)  # WatchStream.close ends it; stop_children too, after Ctrl-C
        return WatchStream(tag, process, sink, record, lambda: self._ended(argv, record), self.closing)


def make_kubectl(args: argparse.Namespace, receipt: Optional[Receipt] = None) -> Kubectl:
    """kubectl from --kubectl, then $KUBECTL, then the receipt, then PATH; bound to the context
    from --context, else the receipt's, else the kubeconfig's current one (read once)."""
    executable = args.kubectl or os.environ.get("KUBECTL") or (receipt["kubectl"] if receipt else None) or "kubectl"
    if os.sep in executable:
        executable = os.path.abspath(executable)  # cleanup may run from another directory
    elif receipt is None:
        executable = shutil.which(executable) or executable  # pin the binary the run used
    if args.kubeconfig:
        kubeconfig: Optional[str] = os.path.abspath(args.kubeconfig)
        kubeconfig_from = "--kubeconfig"
    elif receipt is not None:
        kubeconfig, kubeconfig_from = receipt["kubeconfig"], "recorded in receipt.json"
    else:  # record $KUBECONFIG too, so cleanup from another shell reaches the same cluster
        paths = [os.path.abspath(path) for path in os.environ.get("KUBECONFIG", "").split(os.pathsep) if path]
        kubeconfig, kubeconfig_from = os.pathsep.join(paths) or None, "$KUBECONFIG"
    return Kubectl(
        executable,
        context=args.context or (receipt["context"] if receipt else None),
        kubeconfig=kubeconfig,
        kubeconfig_from=kubeconfig_from if kubeconfig else "",
        verbose=args.verbose,
        process_timeout=args.kubectl_timeout,
    )
