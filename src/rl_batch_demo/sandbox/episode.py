"""One RL episode: prepare a workspace, confirm the bug, apply a fix, test, emit the reward.

Events go to stdout as JSON lines (the container log) and, trimmed to the kubelet's 4 KiB
limit, to the termination message, so one `kubectl get pods` returns every reward.

The reward comes from a structured report, not from the test process's exit code: the tests
run in a child process under RUNNER_SOURCE, which gets the test source from this worker (never
from the workspace), compiles the code under test from shipping.py's bytes, and writes which
tests ran, how each ended and where both modules came from to a pipe only that child holds.
Reward 1 needs that report, exactly the three ShippingTest tests, all passed, from the runner's
own copy, exit code 0 and an unchanged test file; anything else is reward 0 with a `reason`.
The worker always emits one `reward` event, then exits non-zero unless the reward is 1.
"""

import time

STARTED_AT = time.time()  # the first statement: "first_statement_at" in the ready event

import os  # noqa: E402  (already loaded by the interpreter's start: costs nothing)


def proc_clocks(proc):
    """(process start, kernel boot, disagreement), epoch seconds by the node's clock, from /proc
    alone: the process's starttime (clock ticks since boot, /proc/self/stat field 22) on the
    kernel's boot clock (/proc/uptime), so a stepped wall clock cannot move it. None where /proc is
    unreadable. When /proc/uptime is shorter than the process's start after boot, it is not the
    kernel's (LXCFS and Sysbox make it the container's age, but leave /proc/self/stat on the host's
    boot clock): both times are None, and the disagreement holds the two readings.
    RL_DEMO_PROC names another /proc, for tests and simulations only."""
    try:
        with open(proc + "/uptime") as uptime_file:
            uptime = float(uptime_file.read().split()[0])
        booted = time.time() - uptime
    except (OSError, ValueError, IndexError):
        return None, None, None
    try:
        with open(proc + "/self/stat") as stat_file:
            stat = stat_file.read()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # fields after "pid (comm) ": state is field 3
        hertz = os.sysconf("SC_CLK_TCK")
        after_boot = ticks / hertz
    except (OSError, ValueError, IndexError, ZeroDivisionError):
        return None, booted, None
    if after_boot > uptime + 2 / hertz:  # both are truncated to a tick: two ticks of slack
        return None, None, {"uptime_seconds": uptime, "started_after_boot_seconds": after_boot}
    return booted + after_boot, booted, None


PROCESS_STARTED_AT, KERNEL_BOOTED_AT, PROC_CLOCKS_DISAGREE = proc_clocks(os.environ.get("RL_DEMO_PROC", "/proc"))

import hashlib  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

IMPORTS_DONE_AT = time.time()

WORKSPACE = pathlib.Path(os.environ.get("RL_DEMO_WORKSPACE", "/workspace"))
TERMINATION_LOG = pathlib.Path(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"))
ARTIFACTS = pathlib.Path(os.environ.get("RL_DEMO_ARTIFACTS", str(WORKSPACE / "artifacts")))  # sent by send_artifacts
TERMINATION_LIMIT = 4096
EPISODE_ID = os.environ["EPISODE_ID"]
DEFAULT_TEST_TIMEOUT = 20.0  # seconds per test run; RL_DEMO_TEST_TIMEOUT overrides it
REPORT_LIMIT = 65536  # bytes of runner report read; more is treated as undecodable
EXPECTED_TESTS = (
    "test_shipping.ShippingTest.test_below",
    "test_shipping.ShippingTest.test_boundary",
    "test_shipping.ShippingTest.test_above",
)
OUTCOMES = ("passed", "failed", "error", "skipped", "expected_failure", "unexpected_success", "unfinished")
MAX_REPORTED_TESTS = 10  # the `tests` field is bounded so the reward event always fits 4 KiB
MAX_NAME = 100
MAX_REASON = 300
MAX_ORIGIN = 200
CODE_FILE = WORKSPACE / "shipping.py"  # the code under test, graded from this file's bytes alone
TEST_ORIGIN = "runner stdin"  # test_shipping's origin: compiled from the source the runner got on stdin
GRADED_MODULES = ("shipping", "test_shipping")

BUGGY_SOURCE = "def shipping(total):\n    return 0 if total > 99 else 10\n"
TEST_SOURCE = "\n".join(
    [
        "import unittest",
        "",
        "from shipping import shipping",
        "",
        "",
        "class ShippingTest(unittest.TestCase):",
        "    def test_below(self):",
        "        self.assertEqual(shipping(98), 10)",
        "",
        "    def test_boundary(self):",
        "        self.assertEqual(shipping(99), 0)",
        "",
        "    def test_above(self):",
        "        self.assertEqual(shipping(100), 0)",
        "",
        "",
        "if __name__ == '__main__':",
        "    unittest.main()",
        "",
    ]
)
TEST_SHA256 = hashlib.sha256(TEST_SOURCE.encode()).hexdigest()
EXPECTED_TEST_MODULE = {"origin": TEST_ORIGIN, "sha256": TEST_SHA256}

# The test runner (runner.py beside this file; RUNNER_SOURCE, at the end of this file, is its text),
# started once, right after `ready`, as `python -B -I -S -c RUNNER_SOURCE TEST_SHA256 STATUS_FD
# GROUP GROUP` in the workspace (-S: the tests need the standard library alone, not the image's
# site-packages and their .pth files). Once its imports are done it forks one child per run
# (TestRunner): the baseline, then the tests of the fixed code, each from the same clean state a
# fresh interpreter would have, with the interpreter's start and unittest's imports paid once; it
# says "forked" on STATUS_FD, and only then does the worker start the baseline. The runner process
# itself runs no code from the workspace; it writes each run's exit code to STATUS_FD as that
# child ends (a pipe any process of the user can reach through /proc, like the report's: see
# "What it does not protect against").
#
# Channel: each run's report goes to the write end of an os.pipe() the worker creates for that run
# and hands only to the runner (one GROUP of stdin, stdout, stderr and report descriptors a run),
# which passes it to that run's child alone; the worker closes its own copy at once, and the
# child makes the descriptor non-inheritable, so processes the tests start do not get it. On
# stdin, a pipe only the worker holds, comes one JSON line when the run is due: a one-time nonce,
# which must come back in the report, the test source and the path of the code under test. The
# child checks the test source against TEST_SHA256 from its command line before anything from the
# workspace is read. The worker accepts exactly one JSON document, so a fake report written next
# to the real one makes the whole report undecodable.
#
# The two graded modules are never looked up by name: test_shipping is compiled from the source
# that came on stdin (origin "runner stdin"), shipping from the bytes of the one file the worker
# named (origin: that path), each registered in sys.modules under its name before the tests
# import it. No .pyc is read for either, so a test_shipping/ or shipping/ package, a planted
# __pycache__/*.pyc (-B stops writing bytecode, not reading it) or a compiled extension beside
# them is never run in their place. The report names each module's origin and the sha256 of
# what was compiled under its name.
#
# What this protects against: os._exit(0) or sys.exit(0) before or while the tests run (no
# report, or one that says so), printing fake unittest output (stdout and stderr are never
# parsed), skipping or adding tests (the report names every test that ran), files left in the
# workspace or elsewhere beforehand (the pipe has no path and exists only for this run; another
# process of the same user could reopen it through /proc/PID/fd, but it lacks the nonce), files
# that shadow the test module or the code under test (above), and modules in the workspace that
# shadow the runner's own imports (-I keeps the workspace off sys.path, and ignores PYTHON*
# variables, user site-packages, sitecustomize and .pth files there, until the runner has read
# its stdin and imported everything it needs).
#
# What it does not protect against: code the tests import runs inside this very process, so it
# can always forge the outcome: patch unittest or the result class, find the descriptor in
# /proc/self/fd and the nonce in this module's frames, write a report that decodes and then
# os._exit(0), or write its exit code to the runner's status pipe. The report is evidence that
# this runner finished, not proof of a correct fix.


EVENTS = []


class EpisodeFailed(Exception):
    """Reward 0 for a known reason (a timeout, a runner that could not start)."""

    def __init__(self, reason, output=""):
        super().__init__(reason)
        self.reason = reason
        self.output = output


class Terminated(BaseException):
    """SIGTERM (the Job's deadline, a deleted pod): still emit the reward event."""


class TestRun:
    """One run of test_shipping.py under the runner: exit code, output and the runner's report."""

    def __init__(self, exit_code, stdout, stderr, report, nonce):
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.report = report  # bytes read from the pipe, b"" when the runner wrote nothing
        self.nonce = nonce


def emit(event, **fields):
    record = dict(fields, event=event, at=time.time(), episode_id=EPISODE_ID)
    EVENTS.append(record)
    print(json.dumps(record, sort_keys=True), flush=True)
    write_termination_message()


def termination_text(events):
    return "".join(json.dumps(record, sort_keys=True) + "\n" for record in events)


def write_termination_message():
    events = [dict(record) for record in EVENTS]
    text = termination_text(events)
    while len(text.encode()) > TERMINATION_LIMIT:
        last = events[-1]
        output = last.get("tests_output", "")
        if not output:
            return
        excess = len(text.encode()) - TERMINATION_LIMIT
        last["tests_output"] = output[excess + 64 :]
        last["tests_output_truncated"] = True
        text = termination_text(events)
    try:  # noqa: SIM105 (contextlib.suppress would be one more import in the sandbox)
        TERMINATION_LOG.write_text(text)
    except OSError:
        pass  # no termination log outside Kubernetes, or a runtime without one


def printable(text, limit):
    """Untrusted text made short and ASCII, so the reward event's size stays bounded."""
    text = "".join(c if " " <= c <= "~" else "?" for c in str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def decode(data):
    """(text, whether it was valid UTF-8); undecodable bytes become U+FFFD instead of an error."""
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), False


def test_timeout():
    text = os.environ.get("RL_DEMO_TEST_TIMEOUT", "")
    if not text:
        return DEFAULT_TEST_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise EpisodeFailed("RL_DEMO_TEST_TIMEOUT must be a positive number of seconds, not " + printable(text, 40))
    return value


def close_quietly(fd):
    try:  # noqa: SIM105 (contextlib.suppress would be one more import in the sandbox)
        os.close(fd)
    except OSError:
        pass


class ReportReader:
    """Drains the report pipe while the tests run, so a large report never blocks the runner;
    keeps the first REPORT_LIMIT + 1 bytes."""

    def __init__(self, fd):
        self.fd = fd
        self.chunks = []
        self.size = 0
        self.thread = threading.Thread(target=self.drain, daemon=True)
        self.thread.start()

    def drain(self):
        try:
            while True:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return
                if self.size <= REPORT_LIMIT:
                    self.chunks.append(chunk)
                    self.size += len(chunk)
        except OSError:
            return

    def report(self):
        # After the run ends its data is already in the pipe; a process it left holding the
        # write end must not stall the worker, so wait briefly and take what arrived.
        self.thread.join(timeout=2)
        if not self.thread.is_alive():
            close_quietly(self.fd)  # else the thread still owns it; the worker is about to exit
        return b"".join(list(self.chunks))


class Output:
    """All that a run's stdout or stderr carries until its end, read in a thread."""

    def __init__(self, fd):
        self.fd = fd
        self.chunks = []
        self.thread = threading.Thread(target=self.drain, daemon=True)
        self.thread.start()

    def drain(self):
        try:
            while True:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    break
                self.chunks.append(chunk)
        except OSError:
            pass
        close_quietly(self.fd)

    def ended_by(self, deadline):
        self.thread.join(max(0.0, deadline - time.monotonic()))
        return not self.thread.is_alive()

    def data(self):
        return b"".join(list(self.chunks))


class ExitCodes:
    """The runner's status lines, read in a thread: "forked" once every run's child exists, then
    "RUN EXITCODE" as each run's process ends."""

    def __init__(self, fd):
        self.fd = fd
        self.codes = {}
        self.forked = False
        self.ended = False
        self.changed = threading.Condition()
        threading.Thread(target=self.drain, daemon=True).start()

    def drain(self):
        pending = b""
        try:
            while True:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    break
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    with self.changed:
                        if line == b"forked":
                            self.forked = True
                        else:
                            number, code = (int(field) for field in line.split())
                            self.codes.setdefault(number, code)
                        self.changed.notify_all()
        except (OSError, ValueError):
            pass
        close_quietly(self.fd)
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def of(self, number, deadline):
        """The run's exit code; None when the runner ended without one; TIMED_OUT past the deadline."""
        return self.wait(lambda: number in self.codes, deadline, lambda: self.codes.get(number))

    def all_forked(self, deadline):
        """True once the runner says every run's child exists; False when it ended first."""
        return self.wait(lambda: self.forked, deadline, lambda: self.forked)

    def wait(self, done, deadline, answer):
        with self.changed:
            while not done() and not self.ended:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return TIMED_OUT
                self.changed.wait(remaining)
            return answer()


TIMED_OUT = object()


class TestRunner:
    """The test runner (RUNNER_SOURCE's serve), started once before the baseline: it forks one
    child per run from its clean state, so each run starts as from a fresh interpreter, the
    interpreter and unittest's imports paid once. Each run has pipes of its own: stdin (the one
    JSON line), stdout, stderr and the report channel; the runner writes each run's exit code to
    a status pipe as its process ends."""

    RUNS = 2  # the baseline, then the tests of the fixed code

    def __init__(self):
        self.runs, child_ends, groups = [], [], []
        for _ in range(self.RUNS):
            (in_r, in_w), (out_r, out_w), (err_r, err_w), (report_r, report_w) = (os.pipe() for _ in range(4))
            self.runs.append((in_w, out_r, err_r, report_r))
            child_ends.append((in_r, out_w, err_w, report_w))
            groups.append(",".join(str(fd) for fd in child_ends[-1]))
        status_r, status_w = os.pipe()
        passed = [fd for ends in child_ends for fd in ends] + [status_w]
        self.used = 0
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-B", "-I", "-S", "-c", RUNNER_SOURCE, TEST_SHA256, str(status_w), *groups],
                cwd=str(WORKSPACE),
                stdin=subprocess.DEVNULL,
                stdout=child_ends[0][1],  # what the runner itself prints (it cannot start) is the first run's
                stderr=child_ends[0][2],
                pass_fds=passed,
                start_new_session=True,
            )
        except OSError as error:
            for fd in [fd for ends in self.runs for fd in ends] + [status_r]:
                close_quietly(fd)
            self.runs = []
            raise EpisodeFailed(f"could not start the tests: {error}") from None
        finally:
            for fd in passed:
                close_quietly(fd)
        try:
            self.exit_codes = ExitCodes(status_r)
        except BaseException:  # SIGTERM (Terminated) right after the start: nothing of it left running
            self.stop()
            raise

    def run(self, timeout):
        """One run: the tests against CODE_FILE as it is now, within `timeout` seconds."""
        in_w, out_r, err_r, report_r = self.runs[self.used]
        number, self.used = self.used, self.used + 1
        deadline = time.monotonic() + timeout
        nonce = os.urandom(16).hex()
        stdout, stderr, reader = Output(out_r), Output(err_r), ReportReader(report_r)
        try:
            # the first run starts once the second's child exists: nothing it does can reach that one's
            # start, which is the runner's state from before any run
            forked = self.exit_codes.all_forked(deadline) if number == 0 else True
            if forked is True:
                message = {"nonce": nonce, "test_source": TEST_SOURCE, "code_path": str(CODE_FILE)}
                try:  # a few hundred bytes into an empty pipe: never blocks, unless another process filled it
                    os.set_blocking(in_w, False)
                    data = (json.dumps(message) + "\n").encode()
                    while data:
                        data = data[os.write(in_w, data) :]
                except OSError:
                    pass  # a run that ended without reading it, or a pipe someone else filled: its end says why
            close_quietly(in_w)
            ended = forked is not TIMED_OUT and stdout.ended_by(deadline) and stderr.ended_by(deadline)
            exit_code = self.exit_codes.of(number, deadline) if ended else TIMED_OUT
            if exit_code is TIMED_OUT:
                self.stop()
                output, _ = decode(stderr.data())
                raise EpisodeFailed(f"timeout after {timeout:g} s", output)
        except BaseException:
            self.stop()
            raise
        if exit_code is None:  # no status for this run: the runner itself ended (could not start, killed)
            code = self.ended_code()
            output, _ = decode(stderr.data())
            raise EpisodeFailed(f"the test runner ended (exit code {code}) before the run's end was known", output)
        return TestRun(exit_code, stdout.data(), stderr.data(), reader.report(), nonce)

    def ended_code(self):
        try:
            return self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.stop()
            return self.process.wait()

    def stop(self):
        """The runner, its runs and whatever they started: killed (the runner leads its own session,
        whose id stays its pid while any process of the session lives, even once it is reaped)."""
        try:  # noqa: SIM105 (contextlib.suppress would be one more import in the sandbox)
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.process.kill()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def close(self):
        """After the last run (or a failed one): the runs never made end with the runner."""
        for in_w, out_r, err_r, report_r in self.runs[self.used :]:
            for fd in (in_w, out_r, err_r, report_r):
                close_quietly(fd)
        self.runs = self.runs[: self.used]
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=0.5)  # it exits as its last run ends
            except subprocess.TimeoutExpired:
                self.stop()


def file_sha256(path):
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def reported_tests(run):
    """(the report's entries as [name, outcome] pairs, or None; its `modules` field, bounded;
    the reason it is unusable, or None)."""
    if not run.report:
        return None, {}, f"tests exited {run.exit_code} but the runner reported nothing"
    if len(run.report) > REPORT_LIMIT:
        return None, {}, f"test report too large (over {REPORT_LIMIT // 1024} KiB)"
    try:
        report = json.loads(run.report.decode("utf-8"))
        if not isinstance(report, dict) or not isinstance(report.get("tests"), list):
            raise ValueError("not a report")
        entries = report["tests"]
        pairs = []
        for entry in entries:
            if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
                raise ValueError("not a test entry")
            pairs.append((entry[0], entry[1] if entry[1] in OUTCOMES else "invalid"))
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, {}, "test report undecodable"
    if report.get("nonce") != run.nonce:
        return None, {}, "test report not written by the runner (wrong nonce)"
    modules = modules_field(report.get("modules"))
    if report.get("error") is not None:
        return pairs, modules, "runner error: " + printable(report["error"], 200)
    return pairs, modules, None


def modules_field(reported):
    """name -> {origin, sha256} of the two graded modules as the runner reports them, bounded:
    where each came from and the sha256 of the source compiled under its name (None: unknown)."""
    modules = {}
    for name in GRADED_MODULES:
        entry = reported.get(name) if isinstance(reported, dict) else None
        entry = entry if isinstance(entry, dict) else {}
        modules[name] = {
            key: printable(entry[key], MAX_ORIGIN) if isinstance(entry.get(key), str) else None
            for key in ("origin", "sha256")
        }
    return modules


def tests_field(pairs):
    """name -> outcome for the reward event (a failure wins over a pass for a repeated name), bounded."""
    tests = {}
    for reported, outcome in pairs:
        name = printable(reported, MAX_NAME)
        if name not in tests and len(tests) >= MAX_REPORTED_TESTS:
            continue
        if tests.get(name, "passed") == "passed":
            tests[name] = outcome
    return tests


def short(name):
    return name.split(".", 1)[-1] if name.startswith("test_shipping.") else name


def grade(run, file_unchanged):
    """(reward, reason, tests, modules): reward 1 only for the runner's report of exactly the three
    named tests, all passed, run from the runner's own copy against shipping.py's bytes, exit code
    0, an unchanged test file and output that decodes."""
    pairs, modules, problem = reported_tests(run)
    reason = "test file changed" if not file_unchanged else problem or grade_problem(run, pairs, modules)
    return (0 if reason else 1), reason, tests_field(pairs or []), modules


def grade_problem(run, pairs, modules):
    """Why a decodable report of the runner earns nothing, or None."""
    if modules["test_shipping"] != EXPECTED_TEST_MODULE:
        origin = modules["test_shipping"]["origin"]
        return printable(f"the tests did not run from the runner's own copy (origin {origin})", MAX_REASON)
    if modules["shipping"]["origin"] != str(CODE_FILE):
        origin = modules["shipping"]["origin"]
        return printable(f"the code under test is not {CODE_FILE.name} (origin {origin})", MAX_REASON)
    names = [name for name, _ in pairs]
    missing = [short(name) for name in EXPECTED_TESTS if name not in names]
    unexpected = sorted({short(name) for name in names if name not in EXPECTED_TESTS})
    repeated = sorted({short(name) for name in names if name in EXPECTED_TESTS and names.count(name) > 1})
    if missing or unexpected or repeated:
        parts = []
        for label, items in (("missing", missing), ("unexpected", unexpected), ("ran more than once", repeated)):
            if items:
                parts.append(label + " " + ", ".join(items))
        return printable("not exactly the three named tests ran: " + "; ".join(parts), MAX_REASON)
    bad = [f"{short(name)} {outcome}" for name, outcome in pairs if outcome != "passed"]
    if bad:
        return printable(", ".join(bad), MAX_REASON)
    if run.exit_code != 0:
        return f"tests exited {run.exit_code} although the runner reported every test passed"
    if not (decode(run.stdout)[1] and decode(run.stderr)[1]):
        return "test output undecodable (not UTF-8)"
    return None


def agent_action(source):
    """The deterministic stand-in for a coding agent's action; a real model plugs in here."""
    return source.replace("total > 99", "total >= 99")


def on_sigterm(signum, frame):
    raise Terminated(f"terminated by signal {signum}")


def write_artifact(name, data):
    """A file for the trainer: under ARTIFACTS, sent after the episode (send_artifacts)."""
    path = ARTIFACTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def save_patch(before, after):
    """The agent's action as a unified diff of shipping.py (patch.diff, an artifact)."""
    import difflib  # noqa: PLC0415 - after `ready`: the measured import phase stays the guide's

    lines = difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a/shipping.py", "b/shipping.py")
    write_artifact("patch.diff", "".join(lines).encode())


# Artifacts travel through the log, the channel the tool reads anyway: each file under ARTIFACTS
# (symlinks and other non-regular files skipped, never followed) as lines
# "rl-demo-artifact 1 SEQ TOTAL SHA256 NAME DATA": frame SEQ (from 0) of TOTAL, the whole file's
# sha256, its relative name in URL-safe base64 and up to FRAME_DATA bytes of it in base64. The
# reward event's `artifacts` lists each file's {name, bytes, sha256}, sorted by name: the tool
# saves what the frames carry and checks it against that list (docs/own-episodes.md, "Artifacts").
FRAME_DATA = 24 * 1024
MAX_ARTIFACTS = 64
END_LINE = "rl-demo-end 1"  # the log's last line: the client knows it is whole (LOG_END_LINE)
MAX_ARTIFACT_NAME = 255


def artifact_files(root):
    """(name, path) of each regular file under root, sorted by name; what cannot be sent is skipped."""
    found = []
    pending = [(str(root), "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            name = prefix + entry.name
            if entry.is_symlink() or not (entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)):
                print("artifact skipped (not a regular file): " + printable(name, 200), file=sys.stderr)
            elif entry.is_dir(follow_symlinks=False):
                pending.append((entry.path, name + "/"))
            elif printable(name, MAX_ARTIFACT_NAME + 1) != name or "\\" in name or len(name) > MAX_ARTIFACT_NAME:
                print("artifact skipped (its name): " + printable(name, 200), file=sys.stderr)
            else:
                found.append((name, entry.path))
    found.sort()
    if len(found) > MAX_ARTIFACTS:
        print(f"artifacts skipped: {len(found) - MAX_ARTIFACTS} beyond the first {MAX_ARTIFACTS}", file=sys.stderr)
    return found[:MAX_ARTIFACTS]


def read_chunks(path):
    """The file's bytes in FRAME_DATA pieces, opened without following a symlink."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as stream:
        while True:
            chunk = stream.read(FRAME_DATA)
            if not chunk:
                return
            yield chunk


def send_artifacts():
    """Print every artifact's frames on stdout; return the manifest for the reward event."""
    import base64  # noqa: PLC0415 - after `ready`: the measured import phase stays the guide's

    manifest = []
    for name, path in artifact_files(ARTIFACTS):
        digest, size = hashlib.sha256(), 0
        for chunk in read_chunks(path):
            digest.update(chunk)
            size += len(chunk)
        sha256, total = digest.hexdigest(), max(1, -(-size // FRAME_DATA))
        label = base64.urlsafe_b64encode(name.encode()).decode()
        chunks = read_chunks(path) if size else iter([b""])
        for seq, chunk in enumerate(chunks):
            data = base64.b64encode(chunk).decode()
            print(f"rl-demo-artifact 1 {seq} {total} {sha256} {label} {data}")
        sys.stdout.flush()
        manifest.append({"name": name, "bytes": size, "sha256": sha256})
    return manifest


def episode(fields):
    """Fill in the reward event's fields; raise EpisodeFailed (or anything) for reward 0."""
    timeout = test_timeout()
    CODE_FILE.write_text(BUGGY_SOURCE, encoding="utf-8")
    WORKSPACE.joinpath("test_shipping.py").write_bytes(TEST_SOURCE.encode())
    emit(
        "ready",
        process_started_at=PROCESS_STARTED_AT,
        kernel_booted_at=KERNEL_BOOTED_AT,
        proc_clocks_disagree=PROC_CLOCKS_DISAGREE,
        first_statement_at=STARTED_AT,
        imports_done_at=IMPORTS_DONE_AT,
    )
    runner = TestRunner()
    try:
        try:
            baseline = runner.run(timeout)
        except EpisodeFailed as failure:
            raise EpisodeFailed("baseline: " + failure.reason) from None
        fields["baseline_exit"] = baseline.exit_code
        source = CODE_FILE.read_text(encoding="utf-8")
        fixed = agent_action(source)
        CODE_FILE.write_text(fixed, encoding="utf-8")
        save_patch(source, fixed)
        test_file = WORKSPACE.joinpath("test_shipping.py")
        unchanged_before = file_sha256(test_file) == TEST_SHA256
        try:
            run = runner.run(timeout)
        except EpisodeFailed as failure:
            if unchanged_before:
                raise
            fields["tests_output"] = failure.output
            raise EpisodeFailed("test file changed") from None
    finally:
        runner.close()
    unchanged = unchanged_before and file_sha256(test_file) == TEST_SHA256
    fields["tests_exit"] = run.exit_code
    fields["tests_output"], _ = decode(run.stderr)
    write_artifact("tests-output.txt", run.stderr)  # whole: the reward event's copy may be trimmed
    fields["reward"], reason, fields["tests"], fields["modules"] = grade(run, unchanged)
    if reason is not None:
        fields["reason"] = reason


def main():
    fields = {"reward": 0, "baseline_exit": None, "tests_exit": None, "tests_output": "", "tests": {}, "modules": {}}
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        episode(fields)
    except EpisodeFailed as failure:
        fields["reward"], fields["reason"] = 0, printable(failure.reason, MAX_REASON)
        fields["tests_output"] = fields["tests_output"] or failure.output
    except Terminated as error:
        fields["reward"], fields["reason"] = 0, str(error)
    except BaseException as error:  # whatever happens, the episode ends with a reward event
        fields["reward"] = 0
        fields["reason"] = printable(f"worker error: {type(error).__name__}: {error}", MAX_REASON)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if fields["reward"] != 1:
        fields["reward"] = 0
        fields.setdefault("reason", "no reward")
    try:
        if os.environ.get("RL_DEMO_MAX_ARTIFACT_BYTES") != "0":  # --max-artifact-bytes 0: none wanted
            fields["artifacts"] = send_artifacts()
    except OSError as error:  # none listed: the client then refuses any frame already sent
        print("artifacts not sent: " + printable(error, MAX_REASON), file=sys.stderr)
    emit("reward", **fields)
    if os.environ.get("RL_DEMO_LAUNCHED") != "1":  # the pod's command: nothing runs after this line
        print(END_LINE, flush=True)
    if fields["baseline_exit"] == 0:
        print("baseline must fail the boundary test", file=sys.stderr)
        return 1
    if fields["reward"] != 1:
        print("patched code failed its tests: " + fields["reason"], file=sys.stderr)
        return 1
    return 0


# Last, so that every line above keeps its number in a pod's traceback: tools/build.py replaces this
# statement with runner.py's text as a string literal (the runner runs as `python -c`, so its own
# tracebacks say `<string>`, line N: runner.py's line N).
RUNNER_SOURCE = pathlib.Path(__file__).with_name("runner.py").read_text(encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
