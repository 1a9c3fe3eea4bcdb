"""Each node's kubelet ``/metrics`` (``get --raw /api/v1/nodes/NODE/proxy/metrics``).

The controller (controller.py) records, when it starts a pod, the runtime operations the
kubelet would have timed for it in ``kubelet/NODE.jsonl`` of the state directory: one
RunPodSandbox (0.7..0.8 s, by the RuntimeClass's handler), one CreateContainer (0.015 s) and
one StartContainer (0.18 s), and one PullImage for a pod whose image was pulled (its pull's
seconds).  ``metrics_text`` renders the Prometheus text of a node's histograms: a start-up
baseline (so the counters start non-zero) plus every recorded observation.

RunPodSandbox is in two families, as kubernetes/kubernetes pkg/kubelet/kuberuntime/
instrumented_services.go ``RunPodSandbox`` records it: ``recordOperation`` (deferred with its
start time) observes the true duration in ``kubelet_runtime_operations_duration_seconds
{operation_type="run_podsandbox"}`` (buckets ``ExponentialBuckets(.005, 2.5, 14)``, no handler
label, pkg/kubelet/metrics/metrics.go ``RuntimeOperationsDuration``), and
``kubelet_run_podsandbox_duration_seconds{runtime_handler}`` (``DefBuckets``,
``RunPodSandboxDuration``) gets ``defer ...Observe(metrics.SinceInSeconds(startTime))``, whose
argument Go evaluates at the defer statement: a few microseconds on every kubelet before 1.36
(the node's ``nodeInfo.kubeletVersion``; fixed by kubernetes/kubernetes#135749, ``ObserveSince``).

Faults: ``kubelet_foreign_pods: N`` adds N operations of pods that are not this run's (every
family) on each reading after a node's first; ``kubelet_restart: true`` restarts the kubelet
between a node's first and second reading: the later readings lose the baseline and every
operation recorded before it (the counters go down)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from .common import append_line

SANDBOX_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
OPERATION_BUCKETS = tuple(0.005 * 2.5**i for i in range(14))  # prometheus.ExponentialBuckets(.005, 2.5, 14)
CREATE_SECONDS = 0.015
START_SECONDS = 0.18
BASELINE = 25  # operations of each kind the kubelet timed before the test (per handler for sandboxes)
BASELINE_SECONDS = {"sandbox": 0.6, "create_container": 0.02, "start_container": 0.2, "pull_image": 3.0}
FOREIGN_SECONDS = {"sandbox": 1.5, "create_container": 0.03, "start_container": 0.3, "pull_image": 4.0}
DEFER_BUG_SECONDS = 2e-6  # what SinceInSeconds(startTime) gives right after startTime := time.Now()
FIXED_IN = (1, 36)  # kubernetes/kubernetes#135749


def kubelet_dir(state: str) -> str:
    return os.path.join(state, "kubelet")


def sandbox_seconds(pod: str) -> float:
    """A pod's RunPodSandbox duration: 0.7..0.8 s, fixed by its name."""
    return round(0.7 + int(hashlib.sha256(pod.encode()).hexdigest()[:8], 16) % 100 / 1000, 3)


def record_runtime_operations(state: str, sim: Any, runtime_class: Optional[str], view: Any) -> None:
    """The operations the node's kubelet timed for this pod (also kept in the pod's record)."""
    rc = view.get("RuntimeClass", None, runtime_class) if runtime_class else None
    handler = str((rc or {}).get("handler", "")) if runtime_class else ""
    ops: List[Tuple[str, float]] = [
        ("sandbox", sandbox_seconds(sim.name)),
        ("create_container", CREATE_SECONDS),
        ("start_container", START_SECONDS),
    ]
    pull = sim.record.get("pull")
    if isinstance(pull, dict):
        ops.append(("pull_image", float(pull["seconds"])))
    sim.record["kubelet"] = {"node": sim.node, "handler": handler, **dict(ops)}
    os.makedirs(kubelet_dir(state), exist_ok=True)
    lines = "".join(
        json.dumps({"op": op, "seconds": seconds, "handler": handler, "pod": sim.name}) + "\n" for op, seconds in ops
    )
    append_line(os.path.join(kubelet_dir(state), f"{sim.node}.jsonl"), lines)


def _reading_number(state: str, node: str) -> Tuple[int, int]:
    """(this reading's number from 1, lines of the node's record before it) for ``node``;
    the record of the first reading is kept, for kubelet_restart."""
    os.makedirs(kubelet_dir(state), exist_ok=True)
    path = os.path.join(kubelet_dir(state), f"{node}.reads.json")
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            with open(path, encoding="utf-8") as f:
                reads = json.load(f)
        except (OSError, ValueError):
            reads = {"count": 0, "first_lines": 0}
        reads["count"] += 1
        if reads["count"] == 1:
            reads["first_lines"] = len(_observations(state, node))
        with open(path, "w", encoding="utf-8") as f:
            json.dump(reads, f)
        return reads["count"], reads["first_lines"]
    finally:
        os.close(fd)


def _observations(state: str, node: str) -> List[dict]:
    try:
        with open(os.path.join(kubelet_dir(state), f"{node}.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []


def kubelet_minor(version: str) -> Tuple[int, int]:
    """(major, minor) of a kubeletVersion such as ``v1.32.0``."""
    major, minor = version.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def metrics_text(state: str, node: str, handlers: List[str], faults: dict, kubelet_version: str) -> str:
    number, first_lines = _reading_number(state, node)
    observed = _observations(state, node)
    series: Dict[Tuple[str, str], List[float]] = {}  # (op, handler) -> durations
    restarted = bool(faults.get("kubelet_restart")) and number > 1
    if restarted:
        observed = observed[first_lines:]
    else:
        for op, seconds in BASELINE_SECONDS.items():
            for handler in handlers if op == "sandbox" else [""]:
                series.setdefault((op, handler), []).extend([seconds] * BASELINE)
    foreign = int(faults.get("kubelet_foreign_pods") or 0) * (number - 1)
    for op, seconds in FOREIGN_SECONDS.items():
        if foreign:
            series.setdefault((op, handlers[0] if op == "sandbox" and handlers else ""), []).extend([seconds] * foreign)
    for o in observed:
        series.setdefault((o["op"], o["handler"] if o["op"] == "sandbox" else ""), []).append(float(o["seconds"]))
    # every handler's sandboxes in one run_podsandbox series; the handler family as this kubelet observes it
    operations: Dict[str, List[float]] = {}
    by_handler: Dict[str, List[float]] = {}
    fixed = kubelet_minor(kubelet_version) >= FIXED_IN
    for (op, handler), values in sorted(series.items()):
        if op == "sandbox":
            operations.setdefault("run_podsandbox", []).extend(values)
            by_handler[handler] = values if fixed else [DEFER_BUG_SECONDS] * len(values)
        else:
            operations[op] = values
    out = [
        "# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox",
        "# TYPE kubelet_running_pods gauge",
        "kubelet_running_pods 3",
        "# HELP kubelet_run_podsandbox_duration_seconds [ALPHA] Duration in seconds of the run_podsandbox "
        "operations. Broken down by RuntimeClass.Handler.",
        "# TYPE kubelet_run_podsandbox_duration_seconds histogram",
    ]
    for handler, values in sorted(by_handler.items()):
        out += _histogram(
            "kubelet_run_podsandbox_duration_seconds", f'runtime_handler="{handler}"', values, SANDBOX_BUCKETS
        )
    out += [
        "# HELP kubelet_runtime_operations_duration_seconds [ALPHA] Duration in seconds of runtime operations. "
        "Broken down by operation type.",
        "# TYPE kubelet_runtime_operations_duration_seconds histogram",
    ]
    for op, values in sorted(operations.items()):
        out += _histogram(
            "kubelet_runtime_operations_duration_seconds", f'operation_type="{op}"', values, OPERATION_BUCKETS
        )
    out += [
        "# HELP kubelet_runtime_operations_total [ALPHA] Cumulative number of runtime operations by operation type.",
        "# TYPE kubelet_runtime_operations_total counter",
    ]
    for op, values in sorted(operations.items()):
        out.append(f'kubelet_runtime_operations_total{{operation_type="{op}"}} {len(values)}')
    return "\n".join(out) + "\n"


def _le(bound: float) -> str:
    return repr(float(bound)).rstrip("0").rstrip(".") if float(bound) != int(bound) else str(int(bound))


def _histogram(name: str, label: str, values: List[float], buckets: Tuple[float, ...]) -> List[str]:
    lines = []
    for bound in buckets:
        count = sum(1 for v in values if v <= bound + 1e-12)
        lines.append(f'{name}_bucket{{{label},le="{_le(bound)}"}} {count}')
    lines.append(f'{name}_bucket{{{label},le="+Inf"}} {len(values)}')
    lines.append(f"{name}_sum{{{label}}} {round(sum(values), 9)!r}")
    lines.append(f"{name}_count{{{label}}} {len(values)}")
    return lines
