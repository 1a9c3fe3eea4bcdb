"""A call-plan kubectl: answers exactly the calls a test planned, and nothing else.

Modelled on ruby-build's test/stubs/stub. The test (tests/callplan.py) writes a plan, a JSON
list of expected calls, into the directory named by $KUBECTL_STUB_DIR and puts a `kubectl`
wrapper that execs this file first and alone on PATH. Each invocation:

1. takes the lock (fcntl.flock on DIR/lock), finds the first planned entry not yet consumed
   whose "argv" equals its own argv (everything after `kubectl`; a watch's --request-timeout,
   the time the client has left, may be lower by the seconds passed since the test planned
   it: see `matches`), marks it consumed in DIR/consumed and appends its call (argv, stdin,
   entry index, problem) to DIR/calls;
2. for a call that no entry matches, or whose stdin differs from the entry's, prints
   "kubectl stub: ..." on stderr and exits 1; the test's teardown fails on such a record;
3. otherwise answers as planned: waits for "wait_for" signals and "sleep" seconds, writes
   "stdout" and "stderr" and exits with "exit"; a watch ("chunks") writes each chunk after its
   own "wait_for" and "delay", then exits, or with "hold" stays open until killed. A chunk with
   a "snapshot" [PATH, LINES, NAME] first waits (at most SNAPSHOT_WAIT_LIMIT) until the file PATH
   holds LINES newline-terminated lines and copies what it holds then to DIR/snapshots/NAME
   (nothing when it does not exist): how a test reads a file the tool writes while it waits.

An entry with a "name" raises the signal NAME.started when it is matched and NAME.done once its
answer is written (DIR/signals/...), so one process can wait for another: the Job watch's
Complete event waits until the pod watch has sent its events, as a real API server's order
would have it. A signal that has not come after SIGNAL_WAIT_LIMIT is a problem like an
unexpected call: recorded in DIR/calls, so the test fails instead of passing 20 s late. An
entry with "repeat" answers any number of calls after the first.

Started as `python -S -E kubectl_stub.py ARGS`, so it imports only what it needs, fast: its
state (DIR/plan, DIR/consumed, DIR/calls) is in `marshal` format, which needs no import, and
json is imported only to compare a create's stdin. DIR/plan.json is the same plan for people,
written when a test's plan fails (CallPlanTestCase.verify_plan).

The same logic also answers in-process (tests/stubprocess.py, what the call-plan tests use
unless RL_DEMO_STUB_PROCESSES=1): `main` is given an `Invocation`, what one call reads and
writes (its environment, stdin, stdout, stderr, and how it sleeps), which for a process is
its own. The state is shared through the same files and lock either way.
"""

from __future__ import annotations

import _thread
import fcntl
import marshal
import os
import sys
import time

STUB_DIR_ENV = "KUBECTL_STUB_DIR"
SIGNAL_WAIT_LIMIT = 20.0  # a signal that never comes is a test bug: give up and say so
SIGNAL_WAIT_ENV = "KUBECTL_STUB_SIGNAL_WAIT_SECONDS"  # the stub's own tests shorten it
HOLD_LIMIT = 120.0  # a held watch the tool forgot to kill ends by itself
SNAPSHOT_WAIT_LIMIT = 5.0  # a file that does not fill in time is copied as it is: the test says why


class Invocation:
    """What one call of the stub reads and writes: by default this process's environment,
    stdin, stdout and stderr, and time.sleep; tests/stubprocess.py passes its pipes and a sleep
    that a kill interrupts. (A plain class: this file imports nothing it can do without.)"""

    def __init__(
        self,
        environ: object = None,
        read_stdin: object = None,
        out: object = None,
        err: object = None,
        sleep: object = None,
        signalled: object = None,
        await_signal: object = None,
    ) -> None:
        self.environ = os.environ if environ is None else environ
        self.read_stdin = read_stdin or sys.stdin.read
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.sleep = sleep or time.sleep
        # A process polls for another's signal file; calls answered in one process
        # (tests/stubprocess.py) are woken when one is raised instead, so that waiting costs
        # the test process no CPU while its tool runs.
        self.signalled = signalled or (lambda: None)
        self.await_signal = await_signal or (lambda: self.sleep(0.002))


def load(path: str, default: object) -> object:
    try:
        with open(path, "rb") as stream:
            return marshal.load(stream)
    except FileNotFoundError:
        return default


# The plans read in this process, by path: (the file's inode, size and mtime, the plan). The
# calls answered in the test process (tests/stubprocess.py) read the same plan hundreds of times
# a test (a median plan is 140 KB: the pods' JSON of every planned watch), 250 MB in the call-plan
# modules, so a plan is read again only when its file changed. The test replaces the file on
# each change (os.replace: a new inode) and a plan only grows, so a changed plan never has the
# key of the one before. The plan is only read, never changed, by the calls that share it. Only
# the last few plans are kept (a test's plan is done with once it ends): kept for every test, the
# call-plan modules alone held 147 of them, tens of MB that each collection of garbage walks.
_PLANS: dict = {}
_PLANS_KEPT = 8
_PLANS_LOCK = _thread.allocate_lock()  # _thread, not threading: a stub process imports no more


def load_plan(path: str) -> list:
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return []
    key = (status.st_ino, status.st_size, status.st_mtime_ns)
    known = _PLANS.get(path)
    if known is not None and known[0] == key:
        return known[1]
    plan = load(path, [])
    assert isinstance(plan, list)
    with _PLANS_LOCK:
        _PLANS.pop(path, None)  # the newest last: the oldest is the first to go
        _PLANS[path] = (key, plan)
        while len(_PLANS) > _PLANS_KEPT:
            del _PLANS[next(iter(_PLANS))]
    return plan


def record(directory: str, entry: object) -> None:
    with open(os.path.join(directory, "calls"), "ab") as stream:
        marshal.dump(entry, stream)


TIMEOUT_FLAG = "--request-timeout="


def matches(entry: dict, argv: list[str]) -> bool:
    """The entry's argv exactly; for an entry that "counts_down_since" (a watch whose
    --request-timeout is the time the client has left), its timeout may be lower by at most the
    whole seconds passed since the test planned it, never higher."""
    if entry["argv"] == argv:
        return True
    since = entry.get("counts_down_since")
    if since is None or len(argv) != len(entry["argv"]):
        return False
    passed = int(-(-(time.monotonic() - since) // 1))  # whole seconds, rounded up
    for planned, sent in zip(entry["argv"], argv):
        if planned == sent:
            continue
        if not (planned.startswith(TIMEOUT_FLAG) and sent.startswith(TIMEOUT_FLAG) and sent.endswith("s")):
            return False
        try:
            most, given = int(planned[len(TIMEOUT_FLAG) : -1]), int(sent[len(TIMEOUT_FLAG) : -1])
        except ValueError:
            return False
        if not most - passed <= given <= most:
            return False
    return True


def save_consumed(path: str, consumed: list[int]) -> None:
    """The plan's consumed entries (indexes), replaced whole: called under the plan's lock."""
    with open(path + ".tmp", "wb") as stream:
        marshal.dump(consumed, stream)
    os.replace(path + ".tmp", path)


def claim(directory: str, argv: list[str], stdin: str | None) -> tuple[int | None, dict, str]:
    """The planned entry for this call (index, entry) or the problem with it, recorded under the lock."""
    with open(os.path.join(directory, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        plan = load_plan(os.path.join(directory, "plan"))
        consumed_path = os.path.join(directory, "consumed")
        consumed = load(consumed_path, [])
        assert isinstance(plan, list) and isinstance(consumed, list)
        index = next(
            (i for i, entry in enumerate(plan) if matches(entry, argv) and (i not in consumed or entry.get("repeat"))),
            None,
        )
        problem = ""
        entry: dict = {}
        if index is None:
            problem = "unexpected call: kubectl " + " ".join(argv)
        else:
            entry = plan[index]
            if index not in consumed:
                consumed.append(index)
                save_consumed(consumed_path, consumed)
            problem = stdin_problem(entry, stdin)
            problem = problem and f"{problem} (kubectl {' '.join(argv)})"
        record(
            directory, {"argv": argv, "stdin": stdin, "entry": index, "problem": problem or None, "pid": os.getpid()}
        )
    return index, entry, problem


def stdin_problem(entry: dict, stdin: str | None) -> str:
    if "stdin_json" in entry:
        import json

        # one JSON document, or several one after another (the run's objects): then their list
        decoder, documents, text = json.JSONDecoder(), [], (stdin or "").strip()
        try:
            while text:
                document, end = decoder.raw_decode(text)
                documents.append(document)
                text = text[end:].strip()
        except ValueError:
            return "stdin is not JSON: " + (stdin or "")[:200]
        sent = documents[0] if len(documents) == 1 else documents
        if not documents or sent != entry["stdin_json"]:
            return "stdin differs from the plan: " + json.dumps(sent, sort_keys=True)[:400]
    if "stdin" in entry and stdin != entry["stdin"]:
        return "stdin differs from the plan: " + (stdin or "")[:400]
    return ""


def raise_signal(directory: str, name: str, call: Invocation) -> None:
    call.sleep(0)  # a call killed meanwhile ends here (tests/stubprocess.py), as a killed process writes nothing more
    signals = os.path.join(directory, "signals")
    os.makedirs(signals, exist_ok=True)
    with open(os.path.join(signals, name), "w"):
        pass
    call.signalled()


def wait_for(directory: str, name: str | None, argv: list[str], call: Invocation) -> None:
    """Until another call raises the signal `name`. One that never comes is a problem of the
    plan (or of the tool's order of calls): recorded like an unexpected call, so the test's
    teardown fails on it instead of the call merely failing after SIGNAL_WAIT_LIMIT."""
    if not name:
        return
    path = os.path.join(directory, "signals", name)
    deadline = time.monotonic() + float(call.environ.get(SIGNAL_WAIT_ENV) or SIGNAL_WAIT_LIMIT)
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            problem = f"signal {name} never came (kubectl {' '.join(argv)})"
            with open(os.path.join(directory, "lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                entry = {"argv": argv, "stdin": None, "entry": None, "problem": problem, "pid": os.getpid()}
                record(directory, dict(entry, signal=name))
            call.err.write(f"kubectl stub: {problem}\n")
            call.err.flush()
            raise SystemExit(1)
        call.await_signal()


def snapshot(directory: str, spec: list | None, call: Invocation) -> None:
    if not spec:
        return
    path, lines, name = spec
    deadline = time.monotonic() + SNAPSHOT_WAIT_LIMIT
    while True:
        try:
            with open(path, "rb") as stream:
                data: bytes | None = stream.read()
        except FileNotFoundError:
            data = None
        if (data is not None and data.count(b"\n") >= lines) or time.monotonic() > deadline:
            break
        call.sleep(0.002)
    call.sleep(0)  # a call killed meanwhile ends here, as in raise_signal
    folder = os.path.join(directory, "snapshots")
    os.makedirs(folder, exist_ok=True)
    if data is not None:
        with open(os.path.join(folder, name), "wb") as stream:
            stream.write(data)


def answer(directory: str, entry: dict, argv: list[str], call: Invocation) -> int:
    name = entry.get("name")
    if name:
        raise_signal(directory, name + ".started", call)
    wait_for(directory, entry.get("wait_for"), argv, call)
    if entry.get("sleep"):
        call.sleep(entry["sleep"])
    out = call.out
    for chunk in entry.get("chunks") or []:
        wait_for(directory, chunk.get("wait_for"), argv, call)
        snapshot(directory, chunk.get("snapshot"), call)
        if chunk.get("delay"):
            call.sleep(chunk["delay"])
        # bytes as planned: a lone surrogate (surrogateescape) is the byte that is not UTF-8
        out.buffer.write(chunk.get("data", "").encode("utf-8", "surrogateescape"))
        out.buffer.flush()
    out.write(entry.get("stdout", ""))
    out.flush()
    call.err.write(entry.get("stderr", ""))
    call.err.flush()
    if name:
        raise_signal(directory, name + ".done", call)
    if entry.get("hold"):
        call.sleep(HOLD_LIMIT)  # until the tool ends the watch with a signal
    return int(entry.get("exit", 0))


def main(argv: list[str], call: Invocation | None = None) -> int:
    """One call: `argv` after `kubectl`; `call` what it reads and writes (this process's own by
    default)."""
    call = call or Invocation()
    directory = call.environ.get(STUB_DIR_ENV)
    if not directory:
        call.err.write(f"kubectl stub: {STUB_DIR_ENV} is not set\n")
        call.err.flush()
        return 1
    stdin = call.read_stdin() if "-f" in argv and argv[argv.index("-f") + 1 : argv.index("-f") + 2] == ["-"] else None
    # A call killed while it read (a prepared create the tool cancels, then closes its stdin)
    # ends here, claiming nothing, as a killed process does nothing more (tests/stubprocess.py).
    call.sleep(0)
    _, entry, problem = claim(directory, argv, stdin)
    if problem:
        call.err.write(f"kubectl stub: {problem}\n")
        call.err.flush()
        return 1
    return answer(directory, entry, argv, call)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
