"""The episode's launcher: the pod's command (`python -B /demo/launcher.py`), mounted from the
ConfigMap beside the worker (/demo/episode.py, the built-in one or --worker's).

It runs the worker, passes its output on line by line, and once it has exited sends whatever the
worker left under RL_DEMO_ARTIFACTS that it did not send itself (send_artifacts), so artifacts
need no call: each file as frames on stdout ("rl-demo-artifact 1 SEQ TOTAL SHA256 NAME DATA",
docs/own-episodes.md), the worker's reward event then printed (held back until now) and rewritten
in the termination message with those files added to its `artifacts` list. Files are found with
lstat and never followed: a symlink or anything else that is not a regular file is skipped with a
line on stderr, as send_artifacts skips it; a file that cannot be read, one past the episode's
budget (RL_DEMO_MAX_ARTIFACT_BYTES) or past 64 files is not sent but listed in the reward event's
`artifacts_refused` ({name, why}), which fails the episode with a cause that names them. Its last
line is "rl-demo-end 1": the tool knows the log is whole.

SIGTERM (the kubelet stopping the pod) is passed on to the worker; the launcher then ends as the
worker did (a signal's exit code stays 128 + N). Standard library only, any Python 3.9+.
"""

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "episode.py")
WORKSPACE = os.environ.get("RL_DEMO_WORKSPACE", "/workspace")
ARTIFACTS = os.environ.get("RL_DEMO_ARTIFACTS", os.path.join(WORKSPACE, "artifacts"))
TERMINATION_LOG = os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log")
TERMINATION_LIMIT = 4096
FRAME_DATA = 24 * 1024
MAX_ARTIFACTS = 64
MAX_NAME = 255
LINE_LIMIT = 64 * 1024  # a longer line is passed on as it comes, never held or parsed
END_LINE = b"rl-demo-end 1\n"


def budget():
    try:
        return max(0, int(os.environ.get("RL_DEMO_MAX_ARTIFACT_BYTES", "")))
    except ValueError:
        return 2**20


def reward_event(line):
    """The event of a line that is the worker's reward event (a JSON object), else None."""
    if len(line) > LINE_LIMIT or not line.lstrip().startswith(b"{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and event.get("event") == "reward" else None


def left_files(root):
    """(name, path, problem) of each entry under root, by name; problem "" for a regular file."""
    found = []
    pending = [(root, "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            if prefix:
                found.append((prefix.rstrip("/"), directory, "its directory cannot be read: " + str(error.strerror)))
            continue
        for entry in entries:
            name = prefix + entry.name
            if entry.is_symlink() or not (entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)):
                # never followed, as send_artifacts skips it: no file of the episode's own
                print("artifact skipped (not a regular file): " + printable(name), file=sys.stderr)
            elif entry.is_dir(follow_symlinks=False):
                pending.append((entry.path, name + "/"))
            else:
                found.append((name, entry.path, ""))
    return sorted(found)


def read_file(path):
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as stream:
        return stream.read()


def printable(text, limit=200):
    text = "".join(c if " " <= c <= "~" else "?" for c in str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def send_left(out, sent):
    """Frame every file left under ARTIFACTS and not in `sent` (the worker's own manifest):
    (the entries sent, the ones refused)."""
    entries, refused = [], []
    spent = sum(entry.get("bytes", 0) for entry in sent if isinstance(entry, dict))
    names = {entry.get("name") for entry in sent if isinstance(entry, dict)}
    count = len(names)
    if not os.path.isdir(ARTIFACTS) or os.path.islink(ARTIFACTS):
        return entries, refused
    for name, path, found in left_files(ARTIFACTS):
        problem = found
        if name in names:
            continue
        if not problem and (len(name.encode("utf-8", "replace")) > MAX_NAME or printable(name, MAX_NAME + 1) != name):
            problem = "its name is not printable ASCII of at most 255 bytes"
        data = b""
        if not problem:
            try:
                data = read_file(path)
            except OSError as error:
                problem = "it cannot be read: " + str(error.strerror)
        if not problem and count >= MAX_ARTIFACTS:
            problem = f"more than {MAX_ARTIFACTS} artifacts"
        if not problem and spent + len(data) > budget():
            problem = f"over the budget of {budget()} bytes per episode"
        if problem:
            refused.append({"name": printable(name), "why": problem})
            continue
        digest, total = hashlib.sha256(data).hexdigest(), max(1, -(-len(data) // FRAME_DATA))
        label = base64.urlsafe_b64encode(name.encode()).decode()
        for seq in range(total):
            chunk = base64.b64encode(data[seq * FRAME_DATA : (seq + 1) * FRAME_DATA]).decode()
            out.write(f"rl-demo-artifact 1 {seq} {total} {digest} {label} {chunk}\n".encode())
        out.flush()
        entries.append({"name": name, "bytes": len(data), "sha256": digest})
        spent += len(data)
        count += 1
    return entries, refused


def rewrite_termination_message(old, new):
    """The termination message with the worker's reward event replaced by `new` (emptied if it no
    longer fits: the log then counts alone)."""
    try:
        with open(TERMINATION_LOG, "rb") as stream:
            lines = stream.read().splitlines()
    except OSError:
        return
    text = b""
    for line in lines:
        event = reward_event(line)
        same = event is not None and event.get("at") == old.get("at")
        text += (json.dumps(new, sort_keys=True).encode() if same else line) + b"\n"
    try:
        with open(TERMINATION_LOG, "wb") as stream:
            stream.write(text if len(text) <= TERMINATION_LIMIT else b"")
    except OSError:
        pass


def main():
    out = sys.stdout.buffer
    worker = subprocess.Popen([sys.executable, "-B", WORKER, *sys.argv[1:]], stdout=subprocess.PIPE)
    signal.signal(signal.SIGTERM, lambda number, frame: worker.send_signal(signal.SIGTERM))
    held = []  # the worker's reward event lines: printed once its left files are sent
    continuing = False  # inside a line longer than LINE_LIMIT: passed on piece by piece
    for piece in iter(lambda: worker.stdout.readline(LINE_LIMIT + 1), b""):
        if not continuing and reward_event(piece) is not None:
            held.append(piece if piece.endswith(b"\n") else piece + b"\n")
        else:
            out.write(piece)
            out.flush()
        continuing = not piece.endswith(b"\n")
    if continuing:  # the worker's last line lacks its newline: the frames and the end line start their own
        out.write(b"\n")
    code = worker.wait()
    if held:
        event = reward_event(held[-1])
        listed = event.get("artifacts") if isinstance(event.get("artifacts"), list) else []
        entries, refused = send_left(out, listed)
        if entries or refused:
            new = dict(event, artifacts=sorted([*listed, *entries], key=lambda entry: str(entry.get("name"))))
            if refused:
                new["artifacts_refused"] = refused
            held[-1] = json.dumps(new, sort_keys=True).encode() + b"\n"
            rewrite_termination_message(event, new)
        for line in held:
            out.write(line)
    out.write(END_LINE)
    out.flush()
    if code < 0:  # ended by a signal: end by the same one, so the runtime reports 128 + N
        try:  # noqa: SIM105 (contextlib would be one more import in the sandbox)
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP keep their default action anyway
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default action is not to end the process
    return code


if __name__ == "__main__":
    sys.exit(main())
