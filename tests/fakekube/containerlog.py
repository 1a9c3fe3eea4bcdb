"""What a node does with a container's output before `kubectl logs` and the pod's status show it.

The fake's worker writes its stdout and stderr, as bytes, to one file (controller.py); these
functions turn that into what the real node serves:

* containerd's CRI logger (containerd internal/cri/io/logger.go, ``redirectLogs`` and
  ``readLine``) writes one record per line: the line without its ``\\n`` and without a ``\\r``
  right before it (CRLF becomes LF), a line longer than ``max_container_log_line_size`` (16 KiB
  by default) cut into partial (``P``) records, and a last line without ``\\n`` as a partial
  record (W18 in REAL_CLUSTER_FACTS.md);
* the kubelet rotates the file once it is larger than ``containerLogMaxSize`` (10 MiB by default,
  5 files kept: kubernetes/kubernetes pkg/kubelet/logs/container_log_manager.go ``rotateLogs``,
  defaults in pkg/kubelet/apis/config/v1beta1/defaults.go), and ``kubectl logs`` only ever gets
  the current file (pkg/kubelet/kuberuntime/logs/logs.go, "rotated logs" are not read: W6). The
  kubelet looks every 10 s, so a real current file holds at least what the fake's does: the
  fake starts a new file as soon as the next record would pass the limit;
* the kubelet's ``ReadLogs`` rejoins the records (logs.go ``parseCRILog``: a partial record's
  content is written without a newline, a full one with ``\\n``);
* the termination message is the LAST 4,096 bytes of the file (kuberuntime_container.go
  ``getTerminationMessage`` -> pkg/util/tail ``ReadAtMost``, "from the end": W5), then the status
  manager keeps the first ``MaxPodTerminationMessageLogLength`` (12 KiB) / (containers + init
  containers) bytes of each (pkg/kubelet/status/status_manager.go ``normalizeStatus``).
"""

from __future__ import annotations

# typing for the annotations only (postponed, never evaluated): not imported by each kubectl call (2 ms)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Tuple


CRI_MAX_LINE = 16 * 1024  # containerd's max_container_log_line_size (CRI plugin config default)
CONTAINER_LOG_MAX_SIZE = 10 * 2**20  # the kubelet's containerLogMaxSize default, "10Mi"
# A record in the file is "<RFC3339Nano time> <stream> <tag> <content>\n": about this much more
# than its content (containerd logger.go writeLineBuffer).
RECORD_OVERHEAD = len("2026-01-01T00:00:00.000000000Z stdout F ") + 1
MAX_CONTAINER_TERMINATION_MESSAGE = 4096  # kubecontainer.MaxContainerTerminationMessageLength
MAX_POD_TERMINATION_MESSAGE = 12 * 1024  # kubecontainer.MaxPodTerminationMessageLogLength

if TYPE_CHECKING:
    Record = Tuple[bool, bytes]  # (partial, content)


def cri_records(output: bytes, max_line: int = CRI_MAX_LINE) -> List[Record]:
    """The records containerd writes for one stream's bytes (logger.go redirectLogs)."""
    records: List[Record] = []
    *lines, last = output.split(b"\n")  # last: after the last "\n", a line without one (or b"")
    for number, written in enumerate([*lines, last]):
        ended = number < len(lines)
        rest = written[:-1] if ended and written.endswith(b"\r") else written  # readLine drops "\r\n" whole
        if not rest and not ended:
            break
        while len(rest) > max_line:
            records.append((True, rest[:max_line]))
            rest = rest[max_line:]
        records.append((not ended, rest))
    return records


def current_file(records: List[Record], max_size: int = CONTAINER_LOG_MAX_SIZE) -> List[Record]:
    """The records of the file the kubelet has not rotated away (the only one kubectl reads)."""
    start, size = 0, 0
    for index, (_, content) in enumerate(records):
        grown = size + len(content) + RECORD_OVERHEAD
        if size and grown > max_size:
            start, grown = index, len(content) + RECORD_OVERHEAD
        size = grown
    return records[start:]


def read_logs(records: List[Record]) -> bytes:
    """What the kubelet serves for these records (logs.go ReadLogs, parseCRILog)."""
    return b"".join(content if partial else content + b"\n" for partial, content in records)


def served_log(output: bytes, max_size: int = CONTAINER_LOG_MAX_SIZE) -> bytes:
    """A container's output as `kubectl logs` returns it."""
    return read_logs(current_file(cri_records(output), max_size))


def termination_message(written: bytes, containers: int) -> str:
    """The pod status's message for what a container wrote to its termination-message file."""
    tail = written[-MAX_CONTAINER_TERMINATION_MESSAGE:]
    kept = tail[: MAX_POD_TERMINATION_MESSAGE // max(1, containers)]
    return kept.decode("utf-8", errors="replace")  # the API server's JSON carries UTF-8 only
