"""The episode's launcher: the pod's command (`python -B -S /demo/launcher.py`: the standard
library alone, so the image's site-packages and their .pth files cost it nothing), mounted from
the ConfigMap beside the worker (/demo/episode.py, the built-in one or --worker's, which runs as
`python -B` with the image's site-packages).

It runs the worker, passes its output on line by line, and once it has exited sends whatever the
worker left under RL_DEMO_ARTIFACTS that it did not send itself (send_artifacts), so artifacts
need no call: each file as frames on stdout ("rl-demo-artifact 1 SEQ TOTAL SHA256 NAME DATA",
docs/own-episodes.md), the worker's reward event then printed (held back until now) and rewritten
in the termination message with those files added to its `artifacts` list. Files are found with
lstat and never followed: a symlink or anything else that is not a regular file is skipped with a
line on stderr, as send_artifacts skips it. The same rules as the client's decide what is sent:
its names (UTF-8, the rules of artifact_name_problem), at most 64 files, and the episode's budget
(RL_DEMO_MAX_ARTIFACT_BYTES, each directory the names make costing 4,096 bytes of it; 0 asks for
none). A file it cannot send (unreadable, a name the client would refuse, past 64 files or past
the budget, which is judged by its size before any of it is read) is listed in the reward event's
`artifacts_refused` ({name, why}; the first 16, then `artifacts_refused_count`), which fails the
episode with a cause that names them. Its last line is "rl-demo-end 1": the tool knows the log is
whole.

SIGTERM (the kubelet stopping the pod) is passed on to the worker; the launcher then ends as the
worker did (a signal's exit code stays 128 + N). Standard library only, any Python 3.9+.
"""

# Each pod pays for every import here before its worker starts, so only what every pod needs:
# binascii (built in) rather than base64, os.posix_spawn rather than subprocess (which brings
# selectors, threading, locale), and hashlib (OpenSSL) only once a file is left to send.
import binascii
import json
import os
import signal
import stat
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "episode.py")
WORKSPACE = os.environ.get("RL_DEMO_WORKSPACE", "/workspace")
ARTIFACTS = os.environ.get("RL_DEMO_ARTIFACTS", os.path.join(WORKSPACE, "artifacts"))
TERMINATION_LOG = os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log")
TERMINATION_LIMIT = 4096
FRAME_DATA = 24 * 1024
MAX_ARTIFACTS = 64
MAX_NAME = 255  # bytes of UTF-8
MAX_DEPTH = 8  # "/"-separated segments of a name
DIRECTORY_BYTES = 4096  # what each directory the names make costs the budget, as the client counts it
REFUSED_LISTED = 16  # entries of artifacts_refused; past them artifacts_refused_count says how many
LINE_LIMIT = 64 * 1024  # a longer line is passed on as it comes, never held or parsed
END_LINE = b"rl-demo-end 1\n"
URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64.urlsafe_b64encode's alphabet


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
        if entries and prefix.count("/") >= MAX_DEPTH:  # its files' names would be refused: not walked deeper
            found.append((prefix.rstrip("/"), directory, f"what it holds would have more than {MAX_DEPTH} segments"))
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


def name_key(name):
    """The name as a filesystem that ignores case or Unicode normalisation sees it."""
    import unicodedata  # noqa: PLC0415 - only a worker that leaves files needs it: the pod starts sooner

    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def name_problem(name, taken):
    """What the client refuses in an artifact's name ("" if nothing): the rules of its
    artifact_name_problem (docs/own-episodes.md, "Names"), so that a name is sent exactly when the
    client would save it. `taken`: name_key -> path of every path the names before it made."""
    import unicodedata  # noqa: PLC0415 - only a worker that leaves files needs it: the pod starts sooner

    if any("\ud800" <= char <= "\udfff" for char in name):
        return "is not UTF-8"  # a byte of it is not: os.scandir gave it as a lone surrogate
    if len(name.encode("utf-8")) > MAX_NAME:
        return f"is longer than {MAX_NAME} bytes"
    if any(char < " " or "\x7f" <= char <= "\x9f" for char in name):
        return "has a control character"
    if any(unicodedata.category(char) in ("Cf", "Zl", "Zp") for char in name):
        return "has a character that file browsers and terminals do not show as itself"
    if "\\" in name:
        return "has a backslash"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' segment"
    if len(parts) > MAX_DEPTH:
        return f"has {len(parts)} segments, more than {MAX_DEPTH}"
    if any(part.startswith("-") for part in parts):
        return "has a segment that starts with '-'"
    for depth in range(1, len(parts) + 1):
        path = "/".join(parts[:depth])
        if taken.get(name_key(path), path) != path:
            return "is the path of an earlier artifact on a filesystem that ignores case or Unicode normalisation"
    return ""


def take(name, taken, directories):
    """Count an artifact's name as sent: its paths for name_problem, its directories for the budget."""
    parts = name.split("/")
    for depth in range(1, len(parts) + 1):
        path = "/".join(parts[:depth])
        taken.setdefault(name_key(path), path)
        if depth < len(parts):
            directories.add(path)


def read_within(path, room, over):
    """(the file's bytes as FRAME_DATA pieces, "") if it has at most `room` bytes, else (None, why);
    `over` says why when it has more ("{size}" in it becomes its size). Its size comes from the
    opened descriptor (O_NOFOLLOW), so a file past the budget is never read. What is read is held
    (at most the budget, 4 MiB) because every frame carries the whole file's sha256: the frames
    and the digest are of the same bytes. A file whose size or mtime changes while it is read
    (still written by something the worker left running) is refused, never cut."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)  # O_NONBLOCK: a FIFO put in its place cannot hang the launcher
    except OSError as error:
        return None, "it cannot be read: " + str(error.strerror)
    try:
        before = os.fstat(descriptor)
        if not stat.S_ISREG(before.st_mode):
            return None, "it is no longer a regular file"
        if before.st_size > room:
            return None, over.replace("{size}", f"{before.st_size:,}")
        pieces, size = [], 0
        while size < before.st_size:
            piece = os.read(descriptor, min(FRAME_DATA, before.st_size - size))
            if not piece:
                break
            pieces.append(piece)
            size += len(piece)
        after = os.fstat(descriptor)
        if size != before.st_size or os.read(descriptor, 1) or after.st_mtime_ns != before.st_mtime_ns:
            return None, "it changed while it was read"
        return pieces, ""
    except OSError as error:
        return None, "it cannot be read: " + str(error.strerror)
    finally:
        os.close(descriptor)


def printable(text, limit=200):
    text = "".join(c if " " <= c <= "~" else "?" for c in str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(name):
    """A name for artifacts_refused: as it is (a byte that is not UTF-8 as \\xNN), at most 100 characters."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return text if len(text) <= 100 else text[:97] + "..."


def send_left(out, sent):
    """Frame every file left under ARTIFACTS and not in `sent` (the worker's own manifest):
    (the entries sent, the ones refused)."""
    entries, refused = [], []
    if not os.path.isdir(ARTIFACTS) or os.path.islink(ARTIFACTS):
        return entries, refused
    limit = budget()
    if not limit:  # --max-artifact-bytes 0 asks for none: nothing is sent, nothing refused
        return entries, refused
    sent = [entry for entry in sent if isinstance(entry, dict) and isinstance(entry.get("name"), str)]
    names = {entry["name"] for entry in sent}
    taken, directories = {}, set()
    for entry in sent:
        take(entry["name"], taken, directories)
    spent = sum(entry.get("bytes", 0) for entry in sent if type(entry.get("bytes")) is int)
    spent += len(directories) * DIRECTORY_BYTES
    count = len(names)
    for name, path, found in left_files(ARTIFACTS):
        if name in names:
            continue
        pieces = None
        new = {"/".join(name.split("/")[:depth]) for depth in range(1, name.count("/") + 1)} - directories
        cost = len(new) * DIRECTORY_BYTES
        problem = found or name_problem(name, taken)
        if not problem and count >= MAX_ARTIFACTS:
            problem = f"more than {MAX_ARTIFACTS} artifacts"
        if not problem:
            plural = "directory" if len(new) == 1 else "directories"
            made = f" and {len(new)} new {plural} ({DIRECTORY_BYTES:,} bytes each)" if new else ""
            left = max(0, limit - spent)
            over = f"{{size}} bytes{made}, over the budget of {limit:,} bytes per episode ({left:,} left)"
            pieces, problem = read_within(path, limit - spent - cost, over)
        if problem:
            refused.append({"name": shown(name), "why": problem})
            continue
        import hashlib  # noqa: PLC0415 (see the imports: a worker that leaves no file never pays for it)

        digest = hashlib.sha256()
        for piece in pieces:
            digest.update(piece)
        sha256, size = digest.hexdigest(), sum(map(len, pieces))
        label = binascii.b2a_base64(name.encode(), newline=False).translate(URLSAFE).decode()
        for seq, piece in enumerate(pieces or [b""]):
            chunk = binascii.b2a_base64(piece, newline=False).decode()
            out.write(f"rl-demo-artifact 1 {seq} {max(1, len(pieces))} {sha256} {label} {chunk}\n".encode())
        out.flush()
        entries.append({"name": name, "bytes": size, "sha256": sha256})
        take(name, taken, directories)
        spent += size + cost
        count += 1
    return entries, refused


def with_left_files(event, out):
    """The worker's reward event with the files it left sent (their frames on `out`) and added to
    its `artifacts`, those refused listed; `event` itself when it left none."""
    listed = event.get("artifacts") if isinstance(event.get("artifacts"), list) else []
    entries, refused = send_left(out, listed)
    if not (entries or refused):
        return event
    new = dict(event, artifacts=sorted([*listed, *entries], key=lambda entry: str(entry.get("name"))))
    if refused:  # bounded, so the reward event stays one short line however many were left
        new["artifacts_refused"] = refused[:REFUSED_LISTED]
        if len(refused) > REFUSED_LISTED:
            new["artifacts_refused_count"] = len(refused)
    return new


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
    read_end, write_end = os.pipe()  # both not inheritable (PEP 446): the worker gets fd 1 alone
    actions = [(os.POSIX_SPAWN_DUP2, write_end, 1)]
    # The worker starts with no signal blocked and SIGTERM's default action, whatever this process
    # inherited (a signal mask survives exec: a runtime's or a wrapper's blocked SIGTERM would make
    # the Job's stop unheard by both).
    worker = os.posix_spawn(
        sys.executable,
        [sys.executable, "-B", WORKER, *sys.argv[1:]],
        dict(os.environ, RL_DEMO_LAUNCHED="1"),  # a copy of the built-in worker leaves the end line to this
        file_actions=actions,
        setsigmask=(),
        setsigdef=(signal.SIGTERM,),
    )
    os.close(write_end)
    reaped = []

    def pass_on(number, frame):  # once the worker is reaped its pid may be another's: never signalled
        if not reaped:
            try:  # noqa: SIM105 (contextlib would be one more import in the sandbox)
                os.kill(worker, signal.SIGTERM)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, pass_on)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one that came while blocked: passed on now
    output = os.fdopen(read_end, "rb")
    held = []  # the worker's reward event lines: printed once its left files are sent
    continuing = False  # inside a line longer than LINE_LIMIT: passed on piece by piece
    for piece in iter(lambda: output.readline(LINE_LIMIT + 1), b""):
        if not continuing and reward_event(piece) is not None:
            held.append(piece if piece.endswith(b"\n") else piece + b"\n")  # a line of its own when printed
        else:
            out.write(piece)
            out.flush()
            continuing = not piece.endswith(b"\n")
    if continuing:  # the worker's last line lacks its newline: the frames and the end line start their own
        out.write(b"\n")
    output.close()
    code = os.waitstatus_to_exitcode(os.waitpid(worker, 0)[1])  # -N: ended by signal N
    reaped.append(code)
    if held:
        event = reward_event(held[-1])
        new = with_left_files(event, out)
        if new is not event:
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
