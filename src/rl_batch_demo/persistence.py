"""Persistence: the receipt and the output files, written atomically."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import json
import os
import re
import shlex
import threading
import typing
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from .constants import (
    ARTIFACT_DIRECTORY_BYTES,
    ARTIFACT_FRAME_TAG,
    ARTIFACT_FRAMES_LIMIT,
    ARTIFACTS_PER_EPISODE_LIMIT,
    CONFIGMAP_OBJECT_LIMIT,
    EVENT_LINE_LIMIT,
    EXIT_USAGE,
    LOG_DIR_BUDGET,
    LOG_END_LINE,
    LOG_FILE_LIMIT,
    RUN_FILES,
)
from .core_basics import _reject_constant, dig, job_name_for, schema_problem, short_repr
from .core_cluster import EventScanner, artifact_directories, artifact_name_problem, parse_artifact_frame, pod_list
from .core_guide import NOT_ROUNDS
from .core_reports import render_events_text, render_timeline_svg
from .errors import DemoError
from .records import (
    ArtifactEntry,
    ArtifactFrame,
    JsonObject,
    KubeObject,
    LogBudgets,
    PodAccount,
    PodLog,
    Receipt,
    Results,
    RewardLine,
    StartedRound,
)
from .status import say_stderr

# Persistence: receipt and output files ########################################
# Files written atomically, read back and checked: receipt, logs, results, input files. Uses the
# pure core and the status lines.


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so no reader ever sees half a file. A lone
    surrogate (a byte of a path or flag that is not UTF-8) is written as its escape, \\udcff."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(temporary, "x", encoding="utf-8", errors="backslashreplace") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


_PREFIX = rb"^\[pod/([^/\]]+)/[^\]]+\] ?"
_EMBEDDED_PREFIX = rb"\[pod/([^/\]]+)/[^\]]+\] "
# `kubectl logs -l --ignore-errors`: a pod whose log request failed gets this unprefixed line on
# stdout instead of ending the read (kubectl pkg/cmd/logs/logs.go sequentialConsumeRequest, or
# consumeWithRetry from 1.36: `"error: " + err.Error() + "\n"`, err being the server's message).
_KUBECTL_LOG_ERROR = b"error: "
PREFIX_LIMIT = 512  # bytes of kubectl's "[pod/NAME/CONTAINER] ": a pod name is at most 253, a container's 63


def _named_write_error(error: OSError, path: Path) -> OSError:
    """A failed write names its file: a full disk's error (ENOSPC) from write() carries none."""
    return error if error.filename else OSError(error.errno, error.strerror, str(path))


# What a pod's artifact names can make the file system answer: the episode's fault, not the run's.
_ARTIFACT_PATH_ERRORS = (errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.ENOTEMPTY)


@dataclasses.dataclass
class _ArtifactFile:
    """The artifact whose frames are arriving: its temporary file in its directory (both open)."""

    name: str
    total: int
    sha256: str
    directory: int  # a descriptor of the directory it goes to
    temporary: str  # its name there until it is whole
    descriptor: int
    hasher: Any
    next: int = 0  # the frame expected next
    size: int = 0


class ArtifactSink:
    """One pod's artifact frames on their way to DIR/artifacts/<pod>/ (docs/own-episodes.md).

    Frames are streamed: each one's bytes go to a temporary file and its hash as it arrives, so no
    artifact is ever held whole, and count against the episode's own budget (--max-artifact-bytes),
    never against what other pods may spend. An artifact whose frames all came, in order, with the
    sha256 they claim, is renamed into place; the first frame that breaks a rule stops the rest of
    the pod's frames, and its partial file is removed. Nothing is written outside the pod's
    directory: names are checked (artifact_name_problem), every directory is opened without
    following a symlink (O_NOFOLLOW, relative to its parent's descriptor), files are created
    exclusively and renamed within their directory."""

    def __init__(self, root: Path, pod: str, budgets: LogBudgets, account: Optional[PodAccount] = None) -> None:
        self.root = root
        self.pod = pod
        self.budgets = budgets
        self.account = budgets.account() if account is None else account  # the pod's: its allowance
        self.saved: Dict[str, ArtifactEntry] = {}
        self.error = ""
        self.missing = False  # the error is frames that never came (rotation, most likely)
        self.frames = 0
        self.directories: Set[str] = set()  # the directories its artifact names made, under its folder
        self.current: Optional[_ArtifactFile] = None

    def frame(self, raw: bytes) -> None:
        if self.error:
            return
        self.frames += 1
        if self.frames > ARTIFACT_FRAMES_LIMIT:
            return self._fail(f"it sent more than {ARTIFACT_FRAMES_LIMIT:,} artifact frames")
        try:
            frame = parse_artifact_frame(raw)
        except ValueError as error:
            return self._fail(f"its artifact frame {self.frames} {error}")
        current, label = self.current, short_repr(frame.name)
        if current is not None and frame.name != current.name:
            return self._missing(current, f"a frame of {label} came before them")
        if current is None:
            if frame.name in self.saved:
                return self._fail(f"frame {frame.seq} of artifact {label} came after the artifact was complete")
            if frame.seq:
                self.missing = True
                return self._fail(f"frames 0 to {frame.seq - 1} of the {frame.total} of artifact {label} are missing")
            if len(self.saved) >= ARTIFACTS_PER_EPISODE_LIMIT:
                return self._fail(f"it sent more than {ARTIFACTS_PER_EPISODE_LIMIT} artifacts")
            current = self._open(frame)
            if current is None:
                return None
        elif frame.seq < current.next:
            return self._fail(f"frame {frame.seq} of artifact {label} came after frame {current.next - 1}")
        elif frame.seq > current.next:
            self.missing = True
            return self._fail(f"frames {current.next} to {frame.seq - 1} of artifact {label} are missing")
        elif (frame.total, frame.sha256) != (current.total, current.sha256):
            return self._fail(f"frame {frame.seq} of artifact {label} changes its total or sha256")
        self._append(current, frame.data)
        if not self.error and current.next == current.total:
            self._complete(current)
        return None

    def _open(self, frame: ArtifactFrame) -> Optional[_ArtifactFile]:
        import hashlib  # noqa: PLC0415 - only a run whose pods send artifacts needs it

        problem = artifact_name_problem(frame.name, self.saved)
        if problem:
            self._fail(f"its artifact frame {self.frames} names an artifact {short_repr(frame.name)} that {problem}")
            return None
        *parents, base = frame.name.split("/")
        new = [path for path in artifact_directories([frame.name]) if path not in self.directories]
        # its directories counted before they exist, so a failure cannot undo them
        if not self.account.take_artifact(len(new) * ARTIFACT_DIRECTORY_BYTES):
            self._fail(
                f"its artifacts are over the --max-artifact-bytes budget of {self.budgets.artifact_bytes:,} bytes per "
                f"episode (artifact {short_repr(frame.name)} would make {len(new)} more directories, "
                f"{ARTIFACT_DIRECTORY_BYTES:,} bytes each, after {len(self.directories)})"
            )
            return None
        self.directories.update(new)
        directory = -1
        try:
            directory = self._directory([self.pod, *parents])
            # Its first 100 bytes (whole characters): a file name holds 255 bytes, not characters.
            temporary = f".{base.encode('utf-8')[:100].decode('utf-8', 'ignore')}.{os.urandom(4).hex()}.part"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            descriptor = os.open(temporary, flags, 0o644, dir_fd=directory)
        except OSError as error:
            if directory >= 0:
                os.close(directory)
            self._path_error(error, frame.name)
            return None
        self.current = _ArtifactFile(
            frame.name, frame.total, frame.sha256, directory, temporary, descriptor, hashlib.sha256()
        )
        return self.current

    def _directory(self, parts: Sequence[str]) -> int:
        """A descriptor of DIR/artifacts/<parts...>, each created if missing, none a symlink."""
        self.root.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for part in parts:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=descriptor)
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=descriptor)
                os.close(descriptor)
                descriptor = inner
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor

    def _append(self, current: _ArtifactFile, data: bytes) -> None:
        if not self.account.take_artifact(len(data)):
            return self._fail(
                f"its artifacts are over the --max-artifact-bytes budget of {self.budgets.artifact_bytes:,} bytes "
                f"per episode (at frame {current.next} of {short_repr(current.name)})"
            )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(current.descriptor, view) :]
        except OSError as error:
            self.discard()
            raise _named_write_error(error, self.root / self.pod / current.name) from None
        current.hasher.update(data)
        current.size += len(data)
        current.next += 1
        return None

    def _complete(self, current: _ArtifactFile) -> None:
        digest = current.hasher.hexdigest()
        if digest != current.sha256:
            return self._fail(
                f"the data of artifact {short_repr(current.name)} has sha256 {digest[:12]}..., not the "
                f"{current.sha256[:12]}... its frames claim"
            )
        base = current.name.rsplit("/", 1)[-1]
        try:
            os.close(current.descriptor)
            current.descriptor = -1
            os.replace(current.temporary, base, src_dir_fd=current.directory, dst_dir_fd=current.directory)
        except OSError as error:
            self._path_error(error, current.name)
            return None
        os.close(current.directory)
        self.current = None
        self.saved[current.name] = {"name": current.name, "bytes": current.size, "sha256": digest}
        return None

    def _path_error(self, error: OSError, name: str) -> None:
        if error.errno not in _ARTIFACT_PATH_ERRORS:
            self.discard()
            raise _named_write_error(error, self.root / self.pod / name) from None
        self._fail(f"its artifact {short_repr(name)} cannot be saved there ({error.strerror})")

    def _missing(self, current: _ArtifactFile, why: str) -> None:
        self.missing = True
        self._fail(
            f"frames {current.next} to {current.total - 1} of artifact {short_repr(current.name)} are missing ({why})"
        )

    def _fail(self, error: str) -> None:
        self.error = self.error or error
        self.discard()

    def discard(self) -> None:
        """Remove the partial artifact, if any."""
        current, self.current = self.current, None
        if current is None:
            return
        with contextlib.suppress(OSError):
            if current.descriptor >= 0:
                os.close(current.descriptor)
        with contextlib.suppress(OSError):
            os.unlink(current.temporary, dir_fd=current.directory)
        with contextlib.suppress(OSError):
            os.close(current.directory)

    def finish(self, log: PodLog) -> None:
        """The log has ended: an artifact still arriving lacks its last frames."""
        if self.current is not None:
            self._missing(self.current, "its log ended")
        log.artifacts, log.artifact_error, log.artifact_frames_missing = dict(self.saved), self.error, self.missing


class _PodLogFile:
    """One pod's log on its way to ROUND_DIR/<pod>.log: a temporary file renamed when complete.

    Its text is saved up to LOG_FILE_LIMIT and while the run's disk budget lasts; past either,
    it is scanned and counted, not saved, except the lines the validation reads (the first
    `ready` and `reward`), which are saved whole wherever they come, after a marker line."""

    FLUSH_BYTES = 16 * 1024

    def __init__(self, path: Path, budgets: LogBudgets, pod: str = "") -> None:
        self.path = path
        self.temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        self.budgets = budgets
        self.account = budgets.account()  # what its text and its artifacts may still take
        self.buffer = bytearray()
        self.scanner = EventScanner(budgets)
        self.pod = pod
        self.artifacts: Optional[ArtifactSink] = None  # from its first artifact frame on
        self.frame_lines = 0
        self.saved = 0  # bytes in the file or its buffer
        self.dropped = 0
        self.skipped = 0  # of them, since the last line saved past the limits
        self.cut_by = ""  # which limit stopped the text: "" while none has
        self.cut_at = 0  # bytes of text saved when it did

    def text(self, data: bytes) -> None:
        """Bytes that are no line to scan (the pieces of an over-long line), or a line scanned."""
        granted = self._room(len(data)) if not self.cut_by else 0
        self._write(data[:granted])
        self.dropped += len(data) - granted
        self.skipped += len(data) - granted

    def line(self, body: bytes, ended: bool) -> None:
        """One line (a log's last one may lack its newline): scanned, then saved within the
        limits; a kept event line is saved whole even past them."""
        data = body + b"\n" if ended else body
        if self.budgets.artifacts is not None and self.pod and body.startswith(ARTIFACT_FRAME_TAG):
            self.frame(body)
            return
        if not self.scanner.line(body):
            self.text(data)
            return
        if not self.cut_by and self._room(len(data), whole=True) == len(data):
            self._write(data)
            return
        # past a cut: the line from the ledger's reserve (its memory side paid for it when kept),
        # its marker as a note (left out only when both sides are spent)
        marker = (
            f"[rl-batch-demo: {self.skipped:,} bytes not saved before this line]\n".encode() if self.skipped else b""
        )
        if marker and not self.budgets.take_note(len(marker)):
            marker = b""
        self.budgets.take_reserved(len(data))
        self._write(marker + data)
        self.skipped = 0

    def frame(self, body: bytes) -> None:
        """An artifact frame: to its file under DIR/artifacts/<pod>/, not to <pod>.log (whose
        text it would double); the log says how many lines went there."""
        self.scanner.lines += 1
        self.frame_lines += 1
        if self.artifacts is None:
            assert self.budgets.artifacts is not None
            self.artifacts = ArtifactSink(self.budgets.artifacts, self.pod, self.budgets, self.account)
        self.artifacts.frame(body)

    def _room(self, wanted: int, whole: bool = False) -> int:
        """How many of `wanted` bytes may still be saved (all or none when `whole`); once fewer,
        which limit it was."""
        granted, limit = self.account.take_text(wanted, whole)
        if limit:
            self.cut_at = self.saved + granted
            self.cut_by = (
                f"each <pod>.log keeps {LOG_FILE_LIMIT:,} bytes"
                if limit == "file"
                else f"the run's logs reached their budget of {LOG_DIR_BUDGET:,} bytes"
            )
        return granted

    def _write(self, data: bytes) -> None:
        self.buffer += data
        self.saved += len(data)
        if len(self.buffer) >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.buffer or not self.temporary.exists():
            try:
                self._append(bytes(self.buffer))
            except OSError as error:
                raise _named_write_error(error, self.path) from None
            self.buffer.clear()

    def _append(self, data: bytes) -> None:
        with open(self.temporary, "ab") as stream:
            stream.write(data)

    def finish(self) -> PodLog:
        notes = []
        if self.frame_lines:
            where = f"{self.budgets.artifacts}/{self.pod}/"
            notes.append(f"[rl-batch-demo: {self.frame_lines:,} artifact frame lines went to {where}]\n".encode())
        if self.dropped:
            notes.append(
                f"[rl-batch-demo: log truncated at {self.cut_at} bytes ({self.cut_by}); {self.dropped} more bytes "
                "were read and scanned for events but not saved; its ready and reward lines were saved]\n".encode()
            )
        for note in notes:  # the ledger's too: every byte the run writes for a pod counts
            if self.budgets.take_note(len(note)):
                self.buffer += note
                self.saved += len(note)
        self.flush()
        os.replace(self.temporary, self.path)
        log = self.scanner.pod_log(self.saved, self.dropped)
        if self.artifacts is not None:
            self.artifacts.finish(log)
        return log

    def discard(self) -> None:
        if self.artifacts is not None:
            self.artifacts.discard()
        with contextlib.suppress(OSError):
            os.unlink(self.temporary)


class EpisodeLogReader:
    """Reads `kubectl logs` output as it streams (bytes, split on b"\\n" only, as kubectl
    prefixes only there): per pod, the events (kept, bounded) and the text (saved to <pod>.log
    within its limits, see _PodLogFile). Only pods named in the Job's listing get a file, so
    nothing a pod prints can choose a file name."""

    def __init__(
        self,
        round_dir: Path,
        pod_names: Iterable[str],
        single_pod: Optional[str] = None,
        budgets: Optional[LogBudgets] = None,
        gate: Optional[threading.Event] = None,
        ignored: Iterable[str] = (),
        errors_inline: bool = False,
        on_progress: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.round_dir = round_dir
        self.allowed = set(pod_names)
        # Pods the selector also matches whose logs nobody wants (lost to the infrastructure): with
        # them the read runs with --ignore-errors, and kubectl's error lines are judged here.
        self.ignored = set(ignored) - self.allowed
        self.last_pod: Optional[str] = None  # the pod whose line came last
        self.error_in_last_line: Dict[str, bool] = {}  # --ignore-errors: kubectl's error may be glued there
        self.single_pod = single_pod  # `kubectl logs POD`: no prefixes, every line is this pod's
        self.budgets = budgets or LogBudgets()
        self.files: Dict[str, _PodLogFile] = {}
        self.order: List[str] = []  # pods in the order their first line arrived
        self.doubtful: Set[str] = set()  # pods whose lines another pod's text may have swallowed
        self.partial = bytearray()
        self.long_line_pod: Optional[str] = None  # inside an over-long line of this pod ("" if unknown)
        self.long_line_tail = b""  # its last bytes, where a prefix cut by a chunk's end begins
        self.gate = gate  # no file is written before it is set (kubectl's output waits in the pipe)
        # --ignore-errors without lost pods (a followed read, LogFollower): kubectl's error lines
        # are judged too, so a pod whose stream failed is read again
        self.errors_inline = errors_inline
        # told a pod's name when one of its artifacts is saved or refused, or its end line came
        self.on_progress = on_progress
        self.ended: Set[str] = set()  # pods whose log printed its end line (LOG_END_LINE, its last)

    def _file(self, name: Optional[str]) -> Optional[_PodLogFile]:
        if name is None or name not in self.allowed:
            return None
        if name not in self.files:
            if self.gate is not None:
                self.gate.wait()
            self.round_dir.mkdir(parents=True, exist_ok=True)
            self.files[name] = _PodLogFile(self.round_dir / f"{name}.log", self.budgets, name)
            self.order.append(name)
        return self.files[name]

    def _check_glued(self, name: Optional[str], body: bytes) -> None:
        """kubectl writes a pod's last line without a newline as it came, so the next pod's first
        prefixed line is glued onto it, however long that last line is; and a pod can print such
        text itself. Either way both pods' logs are in doubt here, and are read again one by one.
        Every piece of every line passes here, an over-long line's too."""
        if self.single_pod is not None or b"[pod/" not in body:
            return
        for match in re.finditer(_EMBEDDED_PREFIX, body):
            glued = match.group(1).decode("utf-8", "replace")
            if glued in self.allowed:
                self.doubtful.add(glued)
                if name:
                    self.doubtful.add(name)

    def _split(self, line: bytes) -> Tuple[Optional[str], bytes]:
        if self.single_pod is not None:
            return self.single_pod, line
        match = re.match(_PREFIX, line)
        if not match:
            if (self.ignored or self.errors_inline) and line.startswith(_KUBECTL_LOG_ERROR):
                self._kubectl_error(line)
            return None, line  # not a pod's line (kubectl's own warning or error): dropped
        name = match.group(1).decode("utf-8", "replace")
        self.last_pod = name
        if self.ignored:
            self.error_in_last_line[name] = _KUBECTL_LOG_ERROR in line
        return name, line[match.end() :]

    def _kubectl_error(self, line: bytes) -> None:
        """With --ignore-errors, kubectl's line for a log request that failed. The kubelet's and
        the API server's messages name the pod (`container "episode" in pod "NAME" is not
        available`, kubelet_pods.go validateContainerLogStatus; a node's URL .../containerLogs/
        NS/NAME/...): a lost pod's is expected, a wanted pod's log is read again by itself. One
        that names none may have cut short the pod printed just before it."""
        text = line.decode("utf-8", "replace")
        named = {
            name
            for name in self.allowed | self.ignored
            if re.search(rf"(?<![A-Za-z0-9.-]){re.escape(name)}(?![A-Za-z0-9.-])", text)
        }
        if named:
            self.doubtful.update(named & self.allowed)
        elif self.last_pod in self.allowed:
            self.doubtful.add(str(self.last_pod))

    def feed(self, chunk: bytes) -> None:
        *lines, rest = chunk.split(b"\n")
        for line in lines:
            self._piece(line, True)
        self._piece(rest, False)

    def _piece(self, piece: bytes, ends_line: bool) -> None:
        if self.long_line_pod is not None:  # the rest of an over-long line: to the file, never kept
            self._check_glued(self.long_line_pod, self.long_line_tail + piece)
            if self.ignored and self.long_line_pod:
                self.error_in_last_line[self.long_line_pod] = _KUBECTL_LOG_ERROR in self.long_line_tail + piece
            self.long_line_tail = (self.long_line_tail + piece)[-PREFIX_LIMIT:]
            target = self._file(self.long_line_pod)
            if target is not None:
                target.text(piece + (b"\n" if ends_line else b""))
                if ends_line:
                    target.scanner.long_line()
            if ends_line:
                self.long_line_pod = None
            return
        self.partial += piece
        if not ends_line and len(self.partial) <= EVENT_LINE_LIMIT + PREFIX_LIMIT:
            return
        name, body = self._split(bytes(self.partial))
        self.partial.clear()
        target = self._file(name)
        self._check_glued(name, body)
        if not ends_line:  # over-long: stream the rest of this line to the file, never keep it
            self.long_line_pod = name if name is not None else ""
            self.long_line_tail = body[-PREFIX_LIMIT:]
            if target is not None:
                target.text(body)
            return
        if target is not None:
            frames = target.frame_lines
            target.line(body, True)
            assert name is not None
            if body == LOG_END_LINE:
                self.ended.add(name)
            if self.on_progress is not None and (frames != target.frame_lines or body == LOG_END_LINE):
                self.on_progress(name)

    def artifacts_of(self, name: str) -> Tuple[Dict[str, ArtifactEntry], str, bool]:
        """The artifacts of this pod saved so far (each whole and hash-checked), the first rule
        its frames broke ("" while none), and whether that rule is frames that never came."""
        log_file = self.files.get(name)
        sink = log_file.artifacts if log_file is not None else None
        return (dict(sink.saved), sink.error, sink.missing) if sink is not None else ({}, "", False)

    def finish(self) -> Dict[str, PodLog]:
        """Every pod that printed something: its PodLog, its file complete on disk."""
        if self.partial:
            name, body = self._split(bytes(self.partial))
            self.partial.clear()
            target = self._file(name)
            self._check_glued(name, body)
            if target is not None:
                target.line(body, False)
        elif self.long_line_pod is not None:
            target = self._file(self.long_line_pod)
            if target is not None:
                target.scanner.long_line()
        self.long_line_pod = None
        # kubectl writes a pod's last line without a newline as it came: an error line for the next
        # request is then glued onto it, in that pod's text
        self.doubtful.update(name for name, glued in self.error_in_last_line.items() if glued and name in self.allowed)
        return {name: log_file.finish() for name, log_file in sorted(self.files.items())}

    def discard(self) -> None:
        for log_file in self.files.values():
            log_file.discard()


INPUT_FILE_LIMIT = 64 * 2**20  # a --worker or --tasks file larger than this is not read at all


def read_input_file(path: Path, flag: str) -> bytes:
    """The bytes of a --worker or --tasks file; a missing or huge one is bad input."""
    try:
        size = path.stat().st_size
        if size > INPUT_FILE_LIMIT:
            raise DemoError(
                f"{flag} {path} is {size:,} bytes; the ConfigMap that carries it cannot exceed the API server's "
                f"1 MiB ({CONFIGMAP_OBJECT_LIMIT:,} bytes) object size limit",
                EXIT_USAGE,
            )
        return path.read_bytes()
    except OSError as error:
        raise DemoError(f"cannot read {flag} {path}: {error.strerror or error}", EXIT_USAGE) from None


POD_TEXT_CUT = " [rl-batch-demo: cut here: the run's budget for what its pods make it write is spent]"


def pods_listing_within(pods: List[KubeObject], budgets: LogBudgets) -> KubeObject:
    """pods.json's listing, each termination message (the pod's own text, up to 4 KiB a container)
    as much as the ledger's disk side grants it (LogBudgets.granted_text), so pods.json counts
    against the run's budget for what pods make it write."""
    items = []
    for pod in pods:
        saved = pod
        status: KubeObject = pod["status"] if isinstance(pod.get("status"), dict) else {}
        uid = str(dig(pod, "metadata", "uid") or dig(pod, "metadata", "name"))
        for field in ("initContainerStatuses", "containerStatuses"):
            statuses = status.get(field)
            for position, container in enumerate(statuses if isinstance(statuses, list) else []):
                for when in ("state", "lastState"):
                    state = container.get(when) if isinstance(container, dict) else None
                    terminated = state.get("terminated") if isinstance(state, dict) else None
                    message = terminated.get("message") if isinstance(terminated, dict) else None
                    if not isinstance(message, str) or not message:
                        continue
                    key = ("pod", uid, field, str(container.get("name")), when)
                    granted = budgets.granted_text(key, message, POD_TEXT_CUT)
                    if granted != message:
                        saved = copy.deepcopy(saved) if saved is pod else saved
                        saved["status"][field][position][when]["terminated"]["message"] = granted
        items.append(saved)
    return pod_list(items)


def events_text_within(events: List[KubeObject], budgets: LogBudgets) -> str:
    """events.txt, each event's message as much as the ledger's disk side grants it."""
    kept = []
    for event in events:
        message = event.get("message")
        if isinstance(message, str) and message:
            metadata = event.get("metadata") or {}
            key = ("event", str(metadata.get("uid") or metadata.get("name")))
            granted = budgets.granted_text(key, message, POD_TEXT_CUT)
            kept.append(event if granted == message else {**event, "message": granted})
            continue
        kept.append(event)
    return render_events_text(kept)


def save_if_possible(path: Path, data: Any) -> None:
    """A diagnostic written on the way out: when the disk itself is the failure, say so and go on
    to the cleanup rather than stop there."""
    try:
        write_json(path, data)
    except OSError as error:
        say_stderr(f"warning: could not write {path} ({error.strerror or error})")


# The files of a run's directory are written here, and only here, under RUN_FILES' names.


def write_manifests(output: Path, manifests: List[Tuple[str, KubeObject]]) -> None:
    """A dry run's manifests, each under its numbered file name."""
    for file_name, manifest in manifests:
        write_json(output / file_name, manifest)


def write_results_files(output: Path, results: Results) -> None:
    """results.json and timeline.svg, once the run is analysed."""
    write_json(output / RUN_FILES.results, results)
    write_atomic(output / RUN_FILES.timeline, render_timeline_svg(results))


def save_kubectl_calls(output: Path, calls: Any) -> None:
    save_if_possible(output / RUN_FILES.kubectl_calls, calls)


def save_error(output: Path, message: str, exit_code: int, at: float) -> None:
    save_if_possible(output / RUN_FILES.error, {"message": message, "exit_code": exit_code, "at": at})


def write_job_submitted(job_dir: Path, manifest: KubeObject) -> None:
    write_json(job_dir / RUN_FILES.job_submitted, manifest)


def write_job(job_dir: Path, job: KubeObject) -> None:
    write_json(job_dir / RUN_FILES.job, job)


def write_pods(job_dir: Path, pods: List[KubeObject], budgets: LogBudgets) -> None:
    write_json(job_dir / RUN_FILES.pods, pods_listing_within(pods, budgets))


def write_events(job_dir: Path, events: List[KubeObject], budgets: LogBudgets) -> None:
    write_atomic(job_dir / RUN_FILES.events, events_text_within(events, budgets))


def write_empty_log(job_dir: Path, pod: str) -> None:
    """The log of a pod that could not be read: there, and empty."""
    write_atomic(job_dir / f"{pod}.log", "")


def write_warmup_block(output: Path, block: Any) -> None:
    write_json(output / RUN_FILES.warmup / RUN_FILES.warmup_block, block)


def write_receipt(output: Path, receipt: Receipt) -> None:
    data: Receipt = {**receipt}
    data.pop("job_uid", None)
    jobs = receipt["jobs"]
    if len(jobs) == 1 and jobs[0]["uid"]:
        data["job_uid"] = str(jobs[0]["uid"])  # the guide's key, kept for older tooling
    elif not jobs and receipt.get("job_uid"):
        data["job_uid"] = receipt["job_uid"]  # a guide-era receipt's one Job
    write_json(output / RUN_FILES.receipt, data)


# What a receipt of the guide's script lacks (it has only context, namespace, uid, run_id and job_uid).
_GUIDE_RECEIPT_LACKS = ("server", "kubeconfig", "kubectl", "created_at", "tool_version")


def read_receipt(output: Path) -> Receipt:
    """receipt.json, checked against the Receipt record as results.json is checked: a malformed
    one is bad input, named with the key and the file to inspect."""
    path = output / RUN_FILES.receipt
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DemoError(
            f"no receipt at {path}: this is not the output directory of a run that reached the cluster; check --output",
            EXIT_USAGE,
        ) from None
    except (OSError, ValueError, RecursionError) as error:
        raise DemoError(f"cannot read the receipt {path} ({error}); inspect the file", EXIT_USAGE) from None
    if isinstance(data, dict):
        jobs = data.get("jobs") or []
        if isinstance(jobs, list):  # a Job whose create never answered may lack its uid
            jobs = [{"uid": None, **job} if isinstance(job, dict) else job for job in jobs]
        data = {**{key: None for key in _GUIDE_RECEIPT_LACKS}, **data, "jobs": jobs}
        for key in ("server", "kubeconfig", "kubectl", "tool_version", "uid", "job_uid"):
            if data.get(key) == "":  # "" is no value
                data[key] = None
        for key in ("uid", "job_uid"):  # the guide's keys: absent, or a UID
            if data.get(key) is None:
                data.pop(key, None)
    problem = schema_problem(data, Receipt)
    if problem:
        raise DemoError(f"the receipt {path} is not one this tool writes: {problem}; inspect the file", EXIT_USAGE)
    receipt: Receipt = data
    if receipt["created_at"] is not None:
        receipt["created_at"] = float(receipt["created_at"])  # a whole number of seconds, as written back
    return receipt


def refuse_existing_output(output: Path) -> None:
    """An output directory that exists (a symlink too) is refused, before any work: no earlier
    result is ever overwritten."""
    if output.exists() or output.is_symlink():
        raise DemoError(
            f"output directory {output} already exists (earlier results are never overwritten); choose a new --output",
            EXIT_USAGE,
        )


def claim_output(output: Path) -> None:
    refuse_existing_output(output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.mkdir()
    except OSError as error:
        refuse_existing_output(output)  # created in the meantime
        blocking = next((parent for parent in output.parents if parent.exists()), None)
        why = error.strerror or str(error)
        if blocking is not None and not blocking.is_dir():  # mkdir's "File exists" names no culprit
            why = f"{blocking} is not a directory"
        raise DemoError(f"cannot create the output directory {output} ({why})", EXIT_USAGE) from None


# What a run writes into its directory before its first create: all a failed preflight leaves.
PREFLIGHT_FILES = (RUN_FILES.receipt, RUN_FILES.kubectl_calls, RUN_FILES.error)


def release_output(output: Path) -> None:
    """After a run that created nothing in the cluster (its preflight failed), remove the files it
    wrote and the directory, so that the same --output works again. Anything else found there
    (written by someone else meanwhile) keeps the directory as it is."""
    with contextlib.suppress(OSError):
        for name in PREFLIGHT_FILES:
            with contextlib.suppress(FileNotFoundError):
                (output / name).unlink()
        output.rmdir()


class RewardsWriter:
    """DIR/rewards.jsonl, appended to as verdicts are known and never rewritten (docs/outputs.md).

    Each line is one write of its whole text to a file opened for appending, and a batch of lines
    is fsynced before anyone is told of them (`on_reward`, the Python API's seam), so a reader
    (`tail -f`) sees the lines in the order they were known, and after a crash only the last line
    can be incomplete: it lacks its newline, and a reader skips it. After a failed write nothing
    more is written: the run ends with that error (an OSError naming the file)."""

    def __init__(
        self,
        path: Path,
        on_reward: Optional[Callable[[RewardLine], None]] = None,
        tags: Optional[JsonObject] = None,
    ) -> None:
        self.path = path
        self.on_reward = on_reward
        self.tags = dict(tags or {})  # --tags: on every line, as given
        self.descriptor: Optional[int] = None
        self.failed = False
        self.lock = threading.Lock()  # one writer at a time, whichever thread knows a verdict

    def open(self) -> None:
        """Create the file, empty, where the run's output directory (fresh, claimed) has none."""
        try:
            self.descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)  # the file's name survives a crash too
            finally:
                os.close(directory)
        except OSError as error:
            raise OSError(error.errno, error.strerror, str(self.path)) from None

    def append(self, lines: Sequence[RewardLine]) -> None:
        if not lines:
            return
        with self.lock:
            if self.descriptor is None or self.failed:
                raise OSError(errno.EIO, "an earlier write failed" if self.failed else "not open", str(self.path))
            try:
                for line in lines:
                    line["tags"] = self.tags
                    data = (json.dumps(line, sort_keys=True, allow_nan=False) + "\n").encode()
                    while data:
                        data = data[os.write(self.descriptor, data) :]
                os.fsync(self.descriptor)
            except OSError as error:
                self.failed = True
                raise OSError(error.errno, error.strerror, str(self.path)) from None
        if self.on_reward is not None:
            for line in lines:
                # the caller's own copy (its tags too): the run keeps its record of each pod
                self.on_reward({**line, "tags": json.loads(json.dumps(self.tags))})

    def close(self) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None


def read_reward_lines(path: Path) -> List[RewardLine]:
    """rewards.jsonl as a reader should take it (docs/outputs.md), at any moment of a run or after
    it: every complete line, in order; a last piece without its newline (a write going on, or a
    crash mid-write) is not a line yet. A line that is not one of this tool's is bad input."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DemoError(f"cannot read {path} ({error.strerror or error})", EXIT_USAGE) from None
    lines: List[RewardLine] = []
    for number, raw in enumerate(data[: data.rfind(b"\n") + 1].split(b"\n")[:-1], 1):
        try:
            value = json.loads(raw.decode("utf-8", "replace"), parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            value = None
        problem = schema_problem(value, RewardLine) if isinstance(value, dict) else "not a JSON object"
        if problem:
            raise DemoError(f"{path} line {number} is not a rewards line of this tool: {problem}", EXIT_USAGE)
        lines.append(typing.cast(RewardLine, value))
    return lines


def load_results(directory: Path) -> Results:
    """A run's results.json, checked against the schema before anything reads it: a missing,
    unreadable, hand-edited or foreign file is bad input, named with the key to inspect."""
    path = directory / RUN_FILES.results
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except FileNotFoundError:
        raise DemoError(f"no results at {path}: that run did not finish successfully", EXIT_USAGE) from None
    except (OSError, ValueError, RecursionError) as error:
        raise DemoError(f"cannot read {path} ({error})", EXIT_USAGE) from None
    problem = schema_problem(data, Results)
    if problem:
        raise DemoError(f"{path} is not a results file of this tool: {problem}; inspect the file", EXIT_USAGE)
    return typing.cast(Results, data)


def saved_results(directory: Optional[Path]) -> Optional[Results]:
    """The results.json a run of this tool just wrote in `directory`, or None when there is none
    (the run did not get that far, or `directory` is not the run's)."""
    try:
        return load_results(directory) if directory is not None else None
    except DemoError:
        return None


def _read_json_file(path: Path) -> Any:
    """A JSON file this run wrote, or None when it is absent or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def rounds_on_disk(output: Path, rounds: int) -> List[StartedRound]:
    """Every round the receipt records as started, with the pods and Job it saved (None if absent)."""
    receipt = _read_json_file(output / RUN_FILES.receipt)
    jobs = receipt.get("jobs") if isinstance(receipt, dict) else None
    if isinstance(jobs, list):  # warm-up and probe Jobs are no rounds
        jobs = [job for job in jobs if not (isinstance(job, dict) and str(job.get("name")).startswith(NOT_ROUNDS))]
    started: List[StartedRound] = []
    for number, job in enumerate(jobs if isinstance(jobs, list) else [], 1):
        round_dir = output if rounds == 1 else output / f"round-{number}"
        name = job.get("name") if isinstance(job, dict) else None
        listing = _read_json_file(round_dir / RUN_FILES.pods)
        items = listing.get("items") if isinstance(listing, dict) else None
        job_object = _read_json_file(round_dir / RUN_FILES.job)
        started.append(
            {
                "round": number,
                "job": str(name or job_name_for(number, rounds)),
                "pods": [pod for pod in items if isinstance(pod, dict)] if isinstance(items, list) else None,
                "job_object": job_object if isinstance(job_object, dict) else None,
            }
        )
    return started


def append_step_summary(markdown: str) -> None:
    """A Markdown section for the CI job page when GitHub Actions provides GITHUB_STEP_SUMMARY."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8", errors="backslashreplace") as stream:
            stream.write(markdown)
    except OSError as error:
        say_stderr(f"warning: could not append to GITHUB_STEP_SUMMARY ({error.strerror})")


def cleanup_command(tool: str, output: Path) -> str:
    """The command that cleans up `output`, started the way the user started this tool (`tool`)."""
    return f"{tool} cleanup --output {shlex.quote(str(output))}"


def _uid_from_job_json(output: Path) -> Optional[str]:
    try:
        return str(json.loads((output / RUN_FILES.job).read_text(encoding="utf-8"))["metadata"]["uid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
