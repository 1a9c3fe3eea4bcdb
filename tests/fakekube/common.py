"""Vocabulary shared by every part of the fake: errors, constants, JSON and time helpers,
the API resource types kubectl's discovery knows, and label selectors.

Only cheap standard modules are imported here: every kubectl call loads this module."""

from __future__ import annotations

import json
import os
import re
import time

# typing for the annotations only (postponed, never evaluated): not imported by each kubectl call (2 ms)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, List, Optional, Tuple

CLIENT_GIT_VERSION = "v1.32.4"
DEFAULT_SERVER_VERSION = "v1.32.0"
KUSTOMIZE_VERSION = "v5.5.0"
POLL_SECONDS = 0.02
POD_PIDS_FILE = "pods.pids"  # each pod's first process (its session), one a line: FakeCluster.close kills them
FAKE_USER = "fake-user"
DEFAULT_SERVER = "127.0.0.1:6443"
# The fake's container runtime names itself, as every CRI runtime does in its Version answer
# (RuntimeName: "containerd", "cri-o"); the kubelet puts that name in each containerID,
# "<runtime>://<id>" (kubernetes/kubernetes pkg/kubelet/container/runtime.go ContainerID.String,
# the type being kuberuntime_manager.go's runtimeName), and in the node's containerRuntimeVersion,
# "<runtime>://<version>" (pkg/kubelet/nodestatus/setters.go VersionInfo). The tool reads it to know
# that a run was a simulation (rl_batch_demo.py SIMULATED_RUNTIME).
RUNTIME_NAME = "rl-batch-demo-simulation"
RUNTIME_VERSION = "1.0.0"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
STATE_ENV = "FAKE_KUBECTL_STATE"
FAULTS_ENV = "FAKE_KUBECTL_FAULTS"
CONTROLLER_ENV = "FAKE_KUBECTL_CONTROLLER"
CONTROLLER_MAX_ENV = "FAKE_KUBECTL_CONTROLLER_MAX_SECONDS"
# The executable entry (tests/fake_kubectl.py): the Job controller is started as a copy of it.
ENTRY_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_kubectl.py")


class KubectlError(Exception):
    """An error that kubectl prints on stderr before exiting with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def not_supported(what: str) -> KubectlError:
    """A request real kubectl would accept but the tool never sends, so the fake refuses it."""
    return KubectlError(f"error: fake_kubectl does not support {what}")


# --------------------------------------------------------------------------- time, ids, JSON


def unquoted(text: str) -> str:
    """urllib.parse.unquote(text), importing urllib.parse (and ipaddress with it: 3 ms of a call's
    start) only when something in it is escaped."""
    if "%" not in text:
        return text
    import urllib.parse

    return urllib.parse.unquote(text)


def query_pairs(query: str) -> List[Tuple[str, str]]:
    """urllib.parse.parse_qsl(query) (blank values dropped, as its default), importing urllib.parse
    only when something in it is escaped."""
    if "%" in query or "+" in query:
        import urllib.parse

        return urllib.parse.parse_qsl(query)
    pairs = []
    for item in query.split("&"):
        name, equals, value = item.partition("=")
        if equals and value:
            pairs.append((name, value))
    return pairs


def now_ts(t: Optional[float] = None) -> str:
    """RFC 3339 UTC timestamp with second resolution, truncated like the API server."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def new_uid() -> str:
    """A random (version 4) UUID string, without importing uuid."""
    h = bytearray(os.urandom(16))
    h[6] = (h[6] & 0x0F) | 0x40
    h[8] = (h[8] & 0x3F) | 0x80
    x = h.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def sorted_obj(value: Any) -> Any:
    """Deep copy with dict keys sorted, as Go prints map[string]interface{}."""
    if isinstance(value, dict):
        return {k: sorted_obj(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_obj(v) for v in value]
    return value


def go_json(value: Any, indent: int = 4) -> str:
    """JSON the way kubectl prints it: UTF-8, HTML characters escaped."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def deep_copy(value: Any) -> Any:
    """A copy of a JSON value (cheaper to import than copy.deepcopy)."""
    return json.loads(json.dumps(value))


def write_json_atomic(path: str, data: Any) -> None:
    write_text_atomic(path, json.dumps(data))


def write_text_atomic(path: str, text: str) -> None:
    """Write via a temp file and rename, so a reader sees the old or the new file, never a torn one."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def read_json(path: str, default: Any = None) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def append_line(path: str, line: str) -> None:
    """Append one line under flock (one write() call, so concurrent appenders never interleave)."""
    import fcntl

    with open(path, "a", encoding="utf-8") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        f.write(line)
        f.flush()


def log_path(state: str, namespace: str, pod: str) -> str:
    """Where the kubelet keeps a pod's container log."""
    return os.path.join(state, "logs", namespace, pod + ".log")


def out(text: str) -> None:
    import sys

    sys.stdout.write(text)
    sys.stdout.flush()


# Where err() writes instead of sys.stderr: tests.fakecluster.run_fake_in_process's own stream,
# so that nothing else the test process prints meanwhile (a warning) reads as the fake's words.
ERROR_STREAM: Any = None


def err(text: str) -> None:
    import sys

    stream = sys.stderr if ERROR_STREAM is None else ERROR_STREAM
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()


def print_json(obj: Any) -> None:
    out(go_json(sorted_obj(obj)) + "\n")


_QUANTITY_SUFFIX = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(q: Any) -> float:
    """Parse a Kubernetes resource quantity ("250m", "768Mi", "2", "1e3")."""
    if isinstance(q, (int, float)):
        return float(q)
    m = re.fullmatch(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)", str(q).strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression: {q!r}")
    number = float(m.group(1)) * (10.0 ** int(m.group(2)) if m.group(2) else 1.0)
    return number * _QUANTITY_SUFFIX[m.group(3)]


def parse_duration(value: str) -> Optional[float]:
    """--request-timeout: "0" (none), "30" (seconds) or a Go duration ("1m30s")."""
    if re.fullmatch(r"-?\d+", value):
        seconds = float(int(value))
    else:
        parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", value)
        sign = -1.0 if value.startswith("-") else 1.0
        body = value.lstrip("+-")
        if not parts or "".join(a + b for a, b in parts) != body:
            raise KubectlError(
                "error: Invalid timeout value. Timeout must be a single integer in seconds, or an "
                "integer followed by a corresponding time unit (e.g. 1s | 2m | 3h)"
            )
        scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
        seconds = sign * sum(float(a) * scale[b] for a, b in parts)
    return seconds if seconds > 0 else None


# --------------------------------------------------------------------------- resource types


class ResType:
    """One API resource as kubectl's discovery knows it."""

    def __init__(
        self, resource: str, singular: str, kind: str, group: str, namespaced: bool, aliases: Tuple[str, ...]
    ) -> None:
        self.resource = resource
        self.singular = singular
        self.kind = kind
        self.group = group
        self.namespaced = namespaced
        self.aliases = aliases

    @property
    def qualified(self) -> str:
        """``jobs.batch`` / ``pods``: used in API error messages."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def name_prefix(self) -> str:
        """``job.batch`` / ``pod``: used in ``delete``'s message."""
        return f"{self.singular}.{self.group}" if self.group else self.singular


RESOURCES = [
    ResType("namespaces", "namespace", "Namespace", "", False, ("ns",)),
    ResType("runtimeclasses", "runtimeclass", "RuntimeClass", "node.k8s.io", False, ()),
    ResType("jobs", "job", "Job", "batch", True, ()),
    ResType("pods", "pod", "Pod", "", True, ("po",)),
    ResType("events", "event", "Event", "", True, ("ev",)),
    ResType("configmaps", "configmap", "ConfigMap", "", True, ("cm",)),
    ResType("serviceaccounts", "serviceaccount", "ServiceAccount", "", True, ("sa",)),
    ResType("nodes", "node", "Node", "", False, ("no",)),
    # Kueue's CRDs, served only where fault ``queue`` installs Kueue (kueue_versions)
    ResType("localqueues", "localqueue", "LocalQueue", "kueue.x-k8s.io", True, ("queue", "queues", "lq")),
    ResType("clusterqueues", "clusterqueue", "ClusterQueue", "kueue.x-k8s.io", False, ("cq",)),
]
KUEUE_GROUP = "kueue.x-k8s.io"
# The kueue.x-k8s.io versions this process's API server serves, preferred first (commands.py
# Invocation sets them from fault ``queue``): none, and discovery knows no Kueue kind.
SERVED_KUEUE_VERSIONS: List[str] = []


def kueue_versions(faults: dict) -> List[str]:
    """Fault ``queue`` installs Kueue: ``{"versions": [...]}`` served, preferred first (default
    ``["v1beta1"]``; newer Kueue releases serve ``v1beta2`` and prefer it)."""
    queue = faults.get("queue")
    if not isinstance(queue, dict):
        return []
    return [str(version) for version in queue.get("versions") or ["v1beta1"]]


BY_KIND = {rt.kind: rt for rt in RESOURCES}
CLUSTER_SCOPED = {rt.kind for rt in RESOURCES if not rt.namespaced}
# Kinds ``create -f -`` accepts, with their apiVersion.
CREATABLE = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Job": "batch/v1",
    "SelfSubjectAccessReview": "authorization.k8s.io/v1",
}


def lookup_type(text: str) -> Optional[ResType]:
    t = text.lower()
    for rt in RESOURCES:
        if rt.group == KUEUE_GROUP and not SERVED_KUEUE_VERSIONS:
            continue
        names = {rt.resource, rt.singular, *rt.aliases}
        if rt.group:
            names |= {f"{rt.resource}.{rt.group}", f"{rt.singular}.{rt.group}"}
        if t in names:
            return rt
    return None


def resolve_type(text: str) -> ResType:
    rt = lookup_type(text)
    if rt is None:
        raise KubectlError(f'error: the server doesn\'t have a resource type "{text}"')
    return rt


def not_found(rt: ResType, name: str) -> str:
    return f'Error from server (NotFound): {rt.qualified} "{name}" not found'


# --------------------------------------------------------------------------- label selectors

if TYPE_CHECKING:
    Selector = List[Tuple[str, str, List[str]]]


def parse_selector(text: str) -> Selector:
    """``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``; comma = AND."""
    reqs: Selector = []
    parts: List[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    key_re = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
    for part in parts:
        p = part.strip()
        if not p:
            if text.strip():
                raise KubectlError(f"error: found '', expected: identifier after ',' in \"{text}\"")
            continue
        m = re.fullmatch(rf"({key_re})\s*(==|=|!=)\s*(\S*)", p)
        if m:
            op = "!=" if m.group(3) == "!=" else "="
            reqs.append((m.group(1), op, [m.group(4)]))
            continue
        m = re.fullmatch(rf"({key_re})\s+(in|notin)\s*\(([^)]*)\)", p)
        if m:
            reqs.append((m.group(1), m.group(3), [v.strip() for v in m.group(4).split(",")]))
            continue
        m = re.fullmatch(rf"(!?)\s*({key_re})", p)
        if m:
            reqs.append((m.group(3), "!" if m.group(1) else "exists", []))
            continue
        raise KubectlError(f"error: unable to parse requirement: found '{p}' in selector \"{text}\"")
    return reqs


def selector_matches(reqs: Selector, labels: Optional[dict]) -> bool:
    labels = labels or {}
    for key, op, vals in reqs:
        has = key in labels
        val = labels.get(key)
        if op == "=" and not (has and val == vals[0]):
            return False
        if op == "!=" and has and val == vals[0]:
            return False
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
        if op == "in" and not (has and val in vals):
            return False
        if op == "notin" and has and val in vals:
            return False
    return True


def matches(obj: dict, kind: str, namespace: Optional[str], name: Optional[str], selector: Optional[Selector]) -> bool:
    """Whether ``obj`` is of ``kind``, in ``namespace`` (None: any), named ``name`` (None: any)
    and labelled to match ``selector`` (None: any)."""
    md = obj["metadata"]
    return (
        obj["kind"] == kind
        and (namespace is None or md.get("namespace") == namespace)
        and (name is None or md["name"] == name)
        and (selector is None or selector_matches(selector, md.get("labels")))
    )
