"""One episode of your own: read this episode's task, act, emit `ready` and `reward`.

    rl-batch-demo run --worker my_worker.py --tasks tasks.jsonl --output DIR

Its tasks, one JSON object per line of tasks.jsonl (the shape of docs/own-episodes.md):

    {"id": "add-1", "question": "2 + 3", "expected": 5}

A task without a field act() reads (NEEDS) fails its episode, naming the field, rather than
scoring it 0. Every episode can read /demo/, every line of tasks.jsonl included: to keep the
answer from the code under test, run with --private-fields expected and grade on your machine
with --grader grader.py, a file of your own such as

    def grade(task, info):  # on the client, with the whole task
        return 1.0 if info["answer"] == task["expected"] else 0.0

(this worker then reports reward 0.0 and its answer; the grader's reward replaces it).

The event protocol (what rl-batch-demo checks):
* one `ready` event once the environment is prepared, then one `reward` event;
* each carries `event`, `at` (time.time() on the node) and `episode_id` (the pod's name,
  from the EPISODE_ID environment variable);
* `reward` is a finite number, int or float, never a boolean; every other field of the reward
  event is kept as the episode's `info` in DIR/rewards.jsonl (keep it small: it is capped);
* events are JSON lines on stdout and, all of them, in the termination message
  (/dev/termination-log, at most 4096 bytes; when they do not fit, leave it empty and the log
  alone counts), so that one `kubectl get pods` can return every reward;
* exit 0 after the reward event, whatever the reward: a crash, a non-zero exit, a restart or a
  missing reward event fails the episode by its own doing (failure_kind "episode"): the run fails,
  or with --failed-episode-reward R scores it R; it is never masked like a lost node.

Artifacts (a patch, a trajectory): write files under $RL_DEMO_ARTIFACTS; whatever is left there
when this worker exits is sent for it (the launcher that runs it), or send_artifacts() prints
each as frames on stdout (lines "rl-demo-artifact 1 SEQ TOTAL SHA256 NAME DATA", base64) and
returns the manifest [{name, bytes, sha256}] that the reward event carries as `artifacts`. The
tool saves them as DIR/artifacts/<pod>/<name>, byte for byte, within --max-artifact-bytes (1 MiB
by default) per episode; a missing, altered or unlisted one fails the episode.

Runs as UID 1000 with the standard library of the image's Python; /demo is read-only, the
episode's own emptyDir is /workspace and goes with the pod: send or upload what you keep.
"""

import time

STARTED_AT = time.time()  # before the other imports, so that the figures show their cost

import json  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

IMPORTS_DONE_AT = time.time()
EPISODE_ID = os.environ["EPISODE_ID"]
INDEX = int(os.environ.get("JOB_COMPLETION_INDEX", "0"))  # set by Kubernetes in an Indexed Job
TASKS = pathlib.Path(os.environ.get("RL_DEMO_TASKS", "/demo/tasks.jsonl"))  # from --tasks
WORKSPACE = pathlib.Path(os.environ.get("RL_DEMO_WORKSPACE", "/workspace"))
ARTIFACTS = pathlib.Path(os.environ.get("RL_DEMO_ARTIFACTS", str(WORKSPACE / "artifacts")))
TERMINATION_LOG = pathlib.Path(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"))
TERMINATION_LIMIT = 4096
FRAME_DATA = 24 * 1024  # bytes of an artifact per frame (one log line of about 33 KB)
EVENTS = []
# --private-fields, as the tool tells them: a private field is the client's grader's, not missing
PRIVATE = set(filter(None, os.environ.get("RL_DEMO_PRIVATE_FIELDS", "").split(",")))
# the task fields this worker reads: act()'s, and grade()'s "expected" unless it is kept private
NEEDS = ("question",) + (() if "expected" in PRIVATE else ("expected",))


def read_task():
    """Line INDEX (from 0) of /demo/tasks.jsonl: this episode's task; {} without --tasks."""
    if not TASKS.exists():
        return {}
    return json.loads(TASKS.read_text(encoding="utf-8").splitlines()[INDEX])


def emit(event, **fields):
    """One event: a JSON line on stdout, and every event so far in the termination message."""
    record = dict(fields, event=event, at=time.time(), episode_id=EPISODE_ID)
    EVENTS.append(record)
    print(json.dumps(record, sort_keys=True), flush=True)
    text = "".join(json.dumps(each, sort_keys=True) + "\n" for each in EVENTS)
    if len(text.encode()) > TERMINATION_LIMIT:
        text = ""  # Kubernetes would cut it mid-line; an empty message defers to the log
    try:  # noqa: SIM105 (contextlib.suppress would be one more import in the sandbox)
        TERMINATION_LOG.write_text(text)
    except OSError:
        pass  # no termination log outside Kubernetes


def send_artifacts():
    """Each regular file under ARTIFACTS (symlinks skipped, never followed) as frames on stdout,
    sorted by name; returns the manifest for the reward event."""
    import base64  # noqa: PLC0415 - only a worker that sends artifacts needs them
    import hashlib  # noqa: PLC0415 - only a worker that sends artifacts needs them

    files = sorted(
        (path.relative_to(ARTIFACTS).as_posix(), path)
        for path in ARTIFACTS.rglob("*")
        if not path.is_symlink() and path.is_file()  # rglob never enters a symlinked directory
    )
    manifest = []
    for name, path in files:
        data = path.read_bytes()  # small files; stream a large one in FRAME_DATA pieces instead
        sha256, total = hashlib.sha256(data).hexdigest(), max(1, -(-len(data) // FRAME_DATA))
        label = base64.urlsafe_b64encode(name.encode()).decode()
        for seq in range(total):
            chunk = base64.b64encode(data[seq * FRAME_DATA : (seq + 1) * FRAME_DATA]).decode()
            print(f"rl-demo-artifact 1 {seq} {total} {sha256} {label} {chunk}")
        manifest.append({"name": name, "bytes": len(data), "sha256": sha256})
    sys.stdout.flush()
    return manifest


def act(task):
    """The stand-in for your model and its tool calls: here, work out "A OP B" (+, - or *)."""
    a, op, b = task["question"].split()
    return {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def grade(task, answer):
    """Your reward rule: (reward, info). info's fields end up in rewards.jsonl. With `expected`
    kept private (--private-fields expected), the client's --grader grades `answer` instead."""
    if "expected" in PRIVATE:
        return 0.0, {"answer": answer}
    correct = answer == task["expected"]
    return (1.0 if correct else 0.0), {"answer": answer, "correct": correct}


def refuse(text):
    """Fail the episode (exit 1) saying why, on stderr and in the termination message."""
    print(text, file=sys.stderr, flush=True)
    try:  # noqa: SIM105 (contextlib.suppress would be one more import in the sandbox)
        TERMINATION_LOG.write_text(text + "\n")
    except OSError:
        pass  # no termination log outside Kubernetes
    return 1


def main():
    task = read_task()
    missing = [field for field in NEEDS if field not in task]
    if missing:  # a task of another shape: fail, named, never a silent reward of 0
        return refuse(f"task {INDEX} lacks the field(s) {', '.join(missing)} this worker reads")
    WORKSPACE.joinpath("task.json").write_text(json.dumps(task))  # prepare the environment
    emit("ready", process_started_at=STARTED_AT, imports_done_at=IMPORTS_DONE_AT)
    try:
        answer = act(task)
        reward, info = grade(task, answer)
    except Exception as error:  # the episode ran but the work failed: a reward of 0, with the reason
        answer, reward, info = None, 0.0, {"reason": f"{type(error).__name__}: {error}"[:300]}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)  # a trajectory for the trainer: DIR/artifacts/<pod>/
    trajectory = {"task": task, "answer": answer, "reward": reward}
    ARTIFACTS.joinpath("trajectory.json").write_text(json.dumps(trajectory, sort_keys=True))
    emit("reward", reward=reward, artifacts=send_artifacts(), **info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
