"""Pure core: sandbox clocks, image pulls and the kubelet's histograms."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .constants import (
    CLOCK_TICK_SLACK,
    CONTAINER_NAME,
    HANDLER_SANDBOX,
    HANDLER_SANDBOX_FAMILY,
    HANDLER_SANDBOX_IMPLAUSIBLE,
    KUBELET_OPERATIONS,
    METRICS_LINE_LIMIT,
    METRICS_SAMPLES_LIMIT,
    OPERATION_BUCKETS_START,
    TIMESTAMP_SLACK,
)
from .core_basics import dig, finite_number, parse_timestamp
from .errors import EpisodeInvalid
from .records import (
    Bucket,
    ImageCache,
    ImagePull,
    JsonObject,
    KubeObject,
    NodeOperations,
    OperationFigures,
    Operations,
    PodRow,
    RuntimeOperations,
)

# Pure core: sandbox clocks, image pulls, kubelet histograms ###################
# The sandbox's own start-up stamps, the kubelet's Pulled events and its runtime histograms.
# Uses the constants, errors, records and numbers above.


_GO_DURATION_PART = r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)"
_GO_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_DURATION_UNITS.update(dict.fromkeys(("\u00b5s", "\u03bcs"), 1e-6))  # Go reads micro as both µ and μ


def parse_go_duration(text: str) -> float:
    """A Go time.Duration as printed by %v ("1.5s", "734ms", "2m3.5s", "1h2m", "500µs", "12ns",
    "0s") in seconds, exactly as Go's ParseDuration reads it; ValueError for anything else."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f"not a Go duration: {text!r}")
    total, position = 0.0, 0
    while position < len(body):
        match = re.compile(_GO_DURATION_PART).match(body, position)
        if not match or match.group(1) in ("", "."):
            raise ValueError(f"not a Go duration: {text!r}")
        total += float(match.group(1)) * _GO_DURATION_UNITS[match.group(2)]
        position = match.end()
    if not math.isfinite(total):
        raise ValueError(f"not a Go duration: {text!r}")
    return -total if text[:1] == "-" else total


_GO_QUOTED = r'"(?:[^"\\]|\\.)*"'
_PULLED_CACHED = r"^Container image " + _GO_QUOTED + r" already present on machine"
_PULLED_IMAGE = (
    r"^Successfully pulled image " + _GO_QUOTED + r" in (\S+)(?: \((\S+) including waiting\))?"
    r"(?:\. Image size: [0-9]+ bytes\.)?$"
)


def involves_pod(event: KubeObject, pod: KubeObject) -> bool:
    """Whether a core/v1 Event is about this very pod (its name, and its UID when the event has one)."""
    involved = event.get("involvedObject") if isinstance(event, dict) else None
    if not isinstance(involved, dict) or involved.get("kind", "Pod") != "Pod":
        return False
    metadata = pod.get("metadata") or {}
    if involved.get("name") != metadata.get("name"):
        return False
    uid = involved.get("uid")
    return not uid or not metadata.get("uid") or uid == metadata.get("uid")


def events_by_pod(events: List[KubeObject]) -> Dict[str, List[KubeObject]]:
    grouped: Dict[str, List[KubeObject]] = {}
    for event in events:
        involved = event.get("involvedObject") if isinstance(event, dict) else None
        if (
            isinstance(involved, dict)
            and involved.get("kind", "Pod") == "Pod"
            and isinstance(involved.get("name"), str)
        ):
            grouped.setdefault(involved["name"], []).append(event)
    return grouped


def scheduled_event_time(
    events: List[KubeObject], pod: KubeObject, created_at: float, finished_at: Optional[float]
) -> Optional[float]:
    """The scheduler's `Scheduled` event time for this pod (events.k8s.io `eventTime`,
    microseconds), if it exists and falls inside the pod's life; else None."""
    times = []
    for event in events:
        if event.get("reason") != "Scheduled" or not involves_pod(event, pod):
            continue
        try:
            moment = parse_timestamp(str(event.get("eventTime")))  # a missing or malformed one is no stamp
        except ValueError:
            continue
        if created_at - 1.0 <= moment and (finished_at is None or moment <= finished_at + 1.0):
            times.append(moment)
    return min(times) if times else None


def image_pull_of(events: List[KubeObject], pod: KubeObject) -> ImagePull:
    """The episode container's image state from the kubelet's `Pulled` events: cached, pulled
    (with the pull's seconds, as the kubelet measured them), or unknown; never assumed."""
    for event in events:
        if event.get("reason") != "Pulled" or not involves_pod(event, pod):
            continue
        field_path = dig(event, "involvedObject", "fieldPath")
        if isinstance(field_path, str) and field_path and f"{{{CONTAINER_NAME}}}" not in field_path:
            continue  # another container's image
        message = str(event.get("message") or "")
        if re.match(_PULLED_CACHED, message):
            return {"state": "cached", "seconds": None}
        match = re.match(_PULLED_IMAGE, message)
        if match:
            try:
                seconds = parse_go_duration(match.group(1))
                waiting = parse_go_duration(match.group(2)) if match.group(2) else None
            except ValueError:
                continue
            if seconds < 0 or (waiting is not None and waiting < 0):
                continue
            return {"state": "pulled", "seconds": seconds, "seconds_including_waiting": waiting}
    return {"state": "unknown", "seconds": None}


def image_cache_counts(rows: Sequence[PodRow]) -> ImageCache:
    states = [row["image_pull"]["state"] for row in rows]
    pulls = states.count("cached"), states.count("pulled")
    return {"cached": pulls[0], "pulled": pulls[1], "unknown": len(states) - sum(pulls)}


def cache_state_of(counts: ImageCache) -> str:
    """The guide's `cache_state`, measured: "cached" or "pulled" when every episode says so,
    "mixed" when both occurred, else "unknown" (an episode without a Pulled event proves nothing)."""
    if counts.get("cached") and counts.get("pulled"):
        return "mixed"
    known = [state for state in ("cached", "pulled") if counts.get(state)]
    if len(known) == 1 and not counts.get("unknown"):
        return known[0]
    return "unknown"


@dataclasses.dataclass(frozen=True)
class SandboxClocks:
    """What a ready event says about the sandbox's own start, bounded to the pod's life."""

    process_started_at: Optional[float] = None
    first_statement_at: Optional[float] = None
    imports_done_at: Optional[float] = None
    kernel_booted_at: Optional[float] = None  # a sandbox kernel's only
    kernel: Optional[str] = None
    note: Optional[str] = None  # why the /proc figures are unknown although the sandbox gave them


# Why a sandbox's boot clock (/proc) and its wall clock cannot both be right: LXCFS and Sysbox make
# /proc/uptime the container's age but leave /proc/self/stat's start on the host's boot clock
# (lxc/lxcfs proc_fuse.c proc_uptime_read); a sandbox restored from a snapshot keeps its old boot.
_CLOCKS_DISAGREE = (
    "the sandbox's boot clock and its wall clock disagree (a virtualised /proc/uptime, as LXCFS and Sysbox "
    "give, or a sandbox restored from a snapshot), so its process start and kernel boot are unknown"
)


def _stamp(value: float, decimals: int = 3) -> str:
    """A number a pod reported, in a note: to `decimals` places, or to six digits when it is absurd (1e300)."""
    return f"{value:.{decimals}f}" if abs(value) < 1e11 else f"{value:.6g}"


def _proc_clocks_note(ready_event: JsonObject) -> Optional[str]:
    """The worker's own finding that /proc/uptime is shorter than its process's start after boot
    (`proc_clocks_disagree`: the two readings), as a note of this tool's words; None without one."""
    found = ready_event.get("proc_clocks_disagree")
    if not isinstance(found, dict):
        return None
    uptime = finite_number(found.get("uptime_seconds"))
    after_boot = finite_number(found.get("started_after_boot_seconds"))
    if uptime is None or after_boot is None:
        return f"its ready event's proc_clocks_disagree is malformed; {_CLOCKS_DISAGREE}"
    return (
        f"its /proc/uptime ({_stamp(uptime, 2)} s) is shorter than its process's start after boot "
        f"({_stamp(after_boot, 2)} s, /proc/self/stat): {_CLOCKS_DISAGREE}"
    )


def sandbox_clocks(
    name: str,
    ready_event: JsonObject,
    created_at: float,
    ready_at: float,
    inspect: str,
    finished_at: Optional[float] = None,
) -> SandboxClocks:
    """The self-reported start-up stamps of one episode, or EpisodeInvalid for an impossible one.

    The wall-clock stamps (the first statement, the imports) must lie in [pod creation - 1 s, ready]
    (ready itself is bound to the container's finish + 1 s by the caller), in the order the process
    lives them. The /proc stamps (process start, kernel boot) come from the sandbox's boot clock. A
    process start inside the pod's life (creation - 1 s .. the container's finish + 1 s) bounds ready
    from below: a ready before it is refused. Otherwise, when the worker found /proc inconsistent, the
    process start falls outside the pod's life or after the first statement (two ticks of slack), or
    the kernel booted after the process started, the boot and wall clocks disagree, and both /proc
    stamps are unknown, with a note: an episode never fails for that. A ready event without
    `first_statement_at` comes from an older worker, whose `process_started_at` was its first
    statement: read that way, its /proc figures are null."""
    invalid = functools.partial(EpisodeInvalid, name, inspect=inspect)  # the rule this episode breaks
    process_started_at = finite_number(ready_event.get("process_started_at"))
    booted_at = finite_number(ready_event.get("kernel_booted_at"))
    first_statement_key = "first_statement_at" if "first_statement_at" in ready_event else "process_started_at"
    first_statement_at = finite_number(ready_event.get(first_statement_key))
    if first_statement_key == "process_started_at":
        process_started_at, booted_at = None, None
    imports_done_at = finite_number(ready_event.get("imports_done_at"))
    for label, stamp in ((first_statement_key, first_statement_at), ("imports_done_at", imports_done_at)):
        if stamp is not None and not created_at - 1.0 <= stamp <= ready_at:
            raise invalid(
                f"its ready event's {label} ({stamp:.3f}) is outside the pod's life before ready "
                f"({created_at:.0f} - 1 s .. {ready_at:.3f}); check clock synchronisation between the API "
                "server and the nodes"
            )
    if first_statement_at is not None and imports_done_at is not None and imports_done_at < first_statement_at:
        raise invalid("its ready event says the imports finished before the process started")
    note = _proc_clocks_note(ready_event) if first_statement_key == "first_statement_at" else None
    if note is None and process_started_at is not None:
        life_ends = (finished_at if finished_at is not None else ready_at) + TIMESTAMP_SLACK
        if not created_at - 1.0 <= process_started_at <= life_ends:
            where = (
                "before the pod's creation" if process_started_at < created_at - 1.0 else "after the container's end"
            )
            note = f"its process start by /proc ({_stamp(process_started_at)}) is {where}: {_CLOCKS_DISAGREE}"
        elif ready_at < process_started_at - CLOCK_TICK_SLACK:
            raise invalid(
                f"its ready event ({ready_at:.3f}) is earlier than its own process's start ({process_started_at:.3f}, "
                "/proc, inside the pod's life): a ready is never earlier than the process that reports it; its "
                "clock was stepped back, or the ready is forged"
            )
        elif first_statement_at is not None and process_started_at > first_statement_at + CLOCK_TICK_SLACK:
            start = _stamp(process_started_at)
            note = f"its process start by /proc ({start}) is after its first statement: {_CLOCKS_DISAGREE}"
    reference = process_started_at if process_started_at is not None else first_statement_at
    if note is None and booted_at is not None and reference is not None and booted_at > reference:
        note = (
            f"its kernel booted ({_stamp(booted_at)}) after its process started ({reference:.3f}): {_CLOCKS_DISAGREE}"
        )
    if note is not None:
        return SandboxClocks(None, first_statement_at, imports_done_at, None, None, note)
    kernel = None
    if booted_at is not None:
        kernel = "sandbox" if reference is not None and created_at - 1.0 <= booted_at else "shared"
    sandbox_booted_at = booted_at if kernel == "sandbox" else None
    return SandboxClocks(process_started_at, first_statement_at, imports_done_at, sandbox_booted_at, kernel)


# Kubelet histograms (`run --kubelet-metrics`) ---------------------------------
#
# The kubelet's /metrics is read through the API server before the first Job and after the
# last; each histogram is subtracted bucket by bucket (as ClusterLoader2 does) and its quantiles
# interpolated within a bucket (as Prometheus' histogram_quantile does). The text is untrusted:
# only the wanted families are kept, long lines are ignored, and the samples kept are bounded.

_METRIC_LINE = r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?[0-9]+)?\s*$"
_METRIC_LABEL = r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)'
_LABEL_ESCAPE = r"\\(.)"


def parse_metric_line(line: str) -> Optional[Tuple[str, Dict[str, str], float]]:
    """One sample of the Prometheus text format: name, labels, value; None for a comment, a
    blank line or anything malformed."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    match = re.match(_METRIC_LINE, stripped)
    if not match:
        return None
    labels: Dict[str, str] = {}
    label_text = (match.group(2) or "").strip()
    position = 0
    while position < len(label_text):
        label = re.compile(_METRIC_LABEL).match(label_text, position)
        if not label or label.end() == position:
            return None
        escaped = label.group(2)
        labels[label.group(1)] = re.sub(_LABEL_ESCAPE, lambda m: "\n" if m.group(1) == "n" else m.group(1), escaped)
        position = label.end()
    try:
        value = float(match.group(3))
    except ValueError:
        return None
    return match.group(1), labels, value


class MetricsScanner:
    """Reads a /metrics text as it streams in, keeping only samples of the wanted families."""

    def __init__(self, families: Iterable[str]) -> None:
        self.families = tuple(sorted(set(families)))
        self.prefixes = tuple(family.encode() for family in self.families)
        self.samples: List[Tuple[str, Dict[str, str], float]] = []
        self.buffer = b""
        self.skipping = False  # inside a line longer than METRICS_LINE_LIMIT
        self.long_lines = 0
        self.error = ""

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for raw in lines:
            if self.skipping:
                self.skipping = False
                continue
            self._line(raw)
        if len(self.buffer) > METRICS_LINE_LIMIT:
            self.buffer, self.skipping = b"", True
            self.long_lines += 1

    def _line(self, raw: bytes) -> None:
        if len(raw) > METRICS_LINE_LIMIT:
            self.long_lines += 1
            return
        if not raw.startswith(self.prefixes) or self.error:
            return
        sample = parse_metric_line(raw.decode("utf-8", "replace"))
        if sample is None:
            return
        if len(self.samples) >= METRICS_SAMPLES_LIMIT:
            self.error = f"more than {METRICS_SAMPLES_LIMIT} samples of the kubelet's runtime histograms"
            return
        self.samples.append(sample)

    def finish(self) -> List[Tuple[str, Dict[str, str], float]]:
        if self.buffer and not self.skipping:
            self._line(self.buffer)
        self.buffer = b""
        return self.samples


@dataclasses.dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (the last one +Inf), with the sum and count."""

    buckets: Tuple[Tuple[float, float], ...]
    sum: float
    count: float


def histogram_from_samples(
    samples: List[Tuple[str, Dict[str, str], float]], family: str, label: str, value: str
) -> Optional[Histogram]:
    """The family's series whose `label` equals `value`, added up (None when there is none);
    ValueError when the series are not a well-formed histogram."""
    buckets: Dict[float, float] = {}
    total = count = 0.0
    seen = False
    for name, labels, number in samples:
        if labels.get(label) != value:
            continue
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{name} has the value {number!r}")
        if name == family + "_bucket":
            bound = float(labels.get("le", "nan"))
            if math.isnan(bound):
                raise ValueError(f"{name} has a bucket without a numeric le")
            buckets[bound] = buckets.get(bound, 0.0) + number
        elif name == family + "_sum":
            total += number
        elif name == family + "_count":
            count += number
        else:
            continue
        seen = True
    if not seen:
        return None
    ordered = tuple(sorted(buckets.items()))
    if not ordered or ordered[-1][0] != math.inf:
        raise ValueError(f"{family} has no +Inf bucket")
    if any(later[1] < earlier[1] for earlier, later in zip(ordered, ordered[1:])) or ordered[-1][1] != count:
        raise ValueError(f"{family}'s buckets are not cumulative")
    return Histogram(ordered, total, count)


def subtract_histograms(after: Histogram, before: Optional[Histogram]) -> Histogram:
    """What happened between two readings of one histogram, bucket by bucket; ValueError when a
    counter went down (the kubelet restarted) or the bucket bounds changed."""
    if before is None:
        return after
    if [bound for bound, _ in after.buckets] != [bound for bound, _ in before.buckets]:
        raise ValueError("its bucket bounds changed between the two readings")
    buckets = tuple((bound, count - earlier) for (bound, count), (_, earlier) in zip(after.buckets, before.buckets))
    if any(count < 0 for _, count in buckets) or after.count < before.count or after.sum < before.sum:
        raise ValueError("a counter went down between the two readings (the kubelet restarted?)")
    return Histogram(buckets, after.sum - before.sum, after.count - before.count)


def add_histograms(histograms: List[Histogram]) -> Histogram:
    """Histograms of identical bucket bounds added; ValueError when the bounds differ."""
    first = histograms[0]
    for other in histograms[1:]:
        if [bound for bound, _ in other.buckets] != [bound for bound, _ in first.buckets]:
            raise ValueError("the nodes' bucket bounds differ")
    buckets = tuple(
        (bound, sum(h.buckets[index][1] for h in histograms)) for index, (bound, _) in enumerate(first.buckets)
    )
    return Histogram(buckets, sum(h.sum for h in histograms), sum(h.count for h in histograms))


def histogram_quantile(q: float, histogram: Histogram) -> Optional[Tuple[float, Tuple[float, float]]]:
    """Prometheus' histogram_quantile: the rank's bucket and a linear interpolation inside it.
    The lowest bucket starts at 0; a rank in the +Inf bucket gives the highest finite bound (and
    the bucket (that bound, +Inf)). None when there are no observations."""
    buckets = histogram.buckets
    if len(buckets) < 2 or histogram.count <= 0:
        return None
    rank = q * buckets[-1][1]
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if index == len(buckets) - 1:
        return buckets[-2][0], (buckets[-2][0], math.inf)
    upper, count = buckets[index]
    if index == 0 and upper <= 0:
        return upper, (upper, upper)
    lower = 0.0
    if index > 0:
        lower = buckets[index - 1][0]
        count -= buckets[index - 1][1]
        rank -= buckets[index - 1][1]
    return lower + (upper - lower) * (rank / count if count else 0.0), (lower, upper)


def operation_figures(histogram: Histogram) -> OperationFigures:
    """count, the exact mean (sum / count), and p50 / p95 with the bucket each falls in."""
    quantiles: List[Tuple[Optional[float], Optional[Bucket]]] = []
    for q in (0.5, 0.95):
        quantile = histogram_quantile(q, histogram)
        value, (lower, upper) = quantile or (math.nan, (math.nan, math.nan))
        finite = math.isfinite(value) and math.isfinite(lower)  # never NaN or Infinity in JSON; +Inf: null
        quantiles.append((value, [lower, upper if math.isfinite(upper) else None]) if finite else (None, None))
    return {
        "count": round(histogram.count),
        "mean_seconds": finite_number(histogram.sum / histogram.count) if histogram.count > 0 else None,
        "p50_seconds": quantiles[0][0],
        "p50_bucket": quantiles[0][1],
        "p95_seconds": quantiles[1][0],
        "p95_bucket": quantiles[1][1],
    }


@dataclasses.dataclass
class KubeletReading:
    """One node's runtime histograms at one moment (None: the operation never happened there),
    or why they could not be read."""

    histograms: Dict[str, Optional[Histogram]]
    error: str = ""


def kubelet_reading(samples: List[Tuple[str, Dict[str, str], float]], handler: str, error: str = "") -> KubeletReading:
    """The guide's four operations out of one node's samples, and the handler's RunPodSandbox
    histogram beside them (HANDLER_SANDBOX, the cross-check)."""
    if error:
        return KubeletReading({}, error)
    histograms: Dict[str, Optional[Histogram]] = {}
    try:
        for operation, family, label, value in KUBELET_OPERATIONS:
            histograms[operation] = histogram_from_samples(samples, family, label, value)
        by_handler = histogram_from_samples(samples, HANDLER_SANDBOX_FAMILY, "runtime_handler", handler)
        histograms[HANDLER_SANDBOX] = by_handler
    except ValueError as failure:
        return KubeletReading({}, f"its metrics are malformed ({failure})")
    return KubeletReading(histograms)


def no_operations() -> Operations:
    return {"RunPodSandbox": None, "CreateContainer": None, "StartContainer": None, "PullImage": None}


def count_runtime_operations(
    before: Dict[str, KubeletReading],
    after: Dict[str, KubeletReading],
    handler: str,
    expected: Dict[str, Dict[str, Optional[int]]],
) -> RuntimeOperations:
    """results.json's `runtime_operations`: per node and pooled, what the kubelet's histograms
    gained between the two readings. `expected` is this run's operations per node and operation
    (None: not known, e.g. pulls of pods whose Pulled event is missing); the rest are foreign:
    these counters are node-wide. The handler's RunPodSandbox histogram is pooled beside them
    as a cross-check (sandbox_crosscheck)."""
    nodes: Dict[str, NodeOperations] = {}
    series = [*(operation for operation, *_ in KUBELET_OPERATIONS), HANDLER_SANDBOX]
    deltas: Dict[str, List[Histogram]] = {name: [] for name in series}
    for node in sorted(expected):
        entry: NodeOperations = {**no_operations(), "foreign_operations": 0, "note": ""}
        nodes[node] = entry
        first, last = before.get(node), after.get(node)
        if first is None:
            entry["note"] = "not read before the run (it was not an eligible node then)"
            continue
        if first.error or last is None or last.error:
            entry["note"] = (
                f"could not be read: {(first.error or (last.error if last else '')) or 'not read after the run'}"
            )
            continue
        node_deltas: Dict[str, Histogram] = {}
        try:
            for name in series:
                later = last.histograms.get(name)
                earlier = first.histograms.get(name)
                if later is None:
                    if earlier is not None:
                        raise ValueError("a histogram disappeared between the two readings (the kubelet restarted?)")
                    continue
                node_deltas[name] = subtract_histograms(later, earlier)
        except ValueError as failure:
            entry["note"] = f"figures void: {failure}"
            continue
        if HANDLER_SANDBOX in node_deltas:
            deltas[HANDLER_SANDBOX].append(node_deltas[HANDLER_SANDBOX])
        notes = []
        for operation, *_ in KUBELET_OPERATIONS:
            delta = node_deltas.get(operation)
            figures = operation_figures(delta if delta is not None else Histogram((), 0.0, 0.0))  # none: count 0
            entry[operation] = figures
            if delta is not None:
                deltas[operation].append(delta)
            count = figures["count"]
            mine = expected[node].get(operation)
            if mine is None:
                notes.append(f"{operation}: {count} operations, how many were this run's is unknown")
            elif count > mine:
                entry["foreign_operations"] += count - mine
                notes.append(f"{operation}: {count - mine} of {count} operations were not this run's")
            elif count < mine:
                notes.append(f"{operation}: {count} operations for {mine} of this run's episodes")
        entry["note"] = "; ".join(notes)
    pooled = no_operations()
    pooled_series: Dict[str, Optional[OperationFigures]] = {}
    for name in series:
        pooled_series[name] = None
        if deltas[name]:
            with contextlib.suppress(ValueError):  # else each node's own figures stand: no mixed bucket bounds
                pooled_series[name] = operation_figures(add_histograms(deltas[name]))
    for operation, *_ in KUBELET_OPERATIONS:
        pooled[operation] = pooled_series[operation]
    by_handler = pooled_series[HANDLER_SANDBOX]
    return {
        "handler": handler,
        "pooled": pooled,
        "nodes": nodes,
        "sandbox_crosscheck": {
            "handler_figures": by_handler,
            "note": sandbox_crosscheck_note(pooled["RunPodSandbox"], by_handler, handler),
        },
    }


def _exact_seconds(value: float) -> str:
    """A kubelet histogram's mean in the unit that suits it, to three significant digits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-6:.3g} \u00b5s"


def sandbox_crosscheck_note(
    sandbox: Optional[OperationFigures], by_handler: Optional[OperationFigures], handler: str
) -> str:
    """What the handler's RunPodSandbox histogram says beside run_podsandbox's: "" when it agrees
    or says nothing; a sentence when its mean is implausibly small while the other's is not (the
    defer bug of kubelets before 1.36, HANDLER_SANDBOX_FAMILY)."""
    mean = sandbox["mean_seconds"] if sandbox else None
    handler_mean = by_handler["mean_seconds"] if by_handler else None
    if mean is None or handler_mean is None or mean < OPERATION_BUCKETS_START:
        return ""
    if handler_mean >= mean * HANDLER_SANDBOX_IMPLAUSIBLE:
        return ""
    return (
        f"{HANDLER_SANDBOX_FAMILY}{{runtime_handler={json.dumps(handler)}}} averages {_exact_seconds(handler_mean)} "
        f"against {_exact_seconds(mean)} for kubelet_runtime_operations_duration_seconds{{operation_type="
        '"run_podsandbox"}: kubelets before 1.36 observe the former when RunPodSandbox starts (kubernetes/kubernetes'
        "#135749), so RunPodSandbox is read from the latter, which counts every handler's sandboxes"
    )


def expected_operations(rows: Sequence[PodRow]) -> Dict[str, Dict[str, Optional[int]]]:
    """This run's own runtime operations per node: one sandbox, one create and one start per
    episode; one pull per episode whose image was pulled (unknown when any episode's is unknown)."""
    expected: Dict[str, Dict[str, Optional[int]]] = {}
    for row in rows:
        node = row["node"]
        if not node:
            continue
        entry = expected.setdefault(node, {operation: 0 for operation, *_ in KUBELET_OPERATIONS})
        for operation in ("RunPodSandbox", "CreateContainer", "StartContainer"):
            entry[operation] = (entry[operation] or 0) + 1
        state = row["image_pull"]["state"]
        if state == "unknown" or entry["PullImage"] is None:
            entry["PullImage"] = None
        elif state == "pulled":
            entry["PullImage"] += 1
    return expected


_NODE_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
