#!/usr/bin/env python3
"""A strict test fake of ``kubectl`` v1.32 backed by a fake cluster on disk.

This script stands in for ``kubectl`` in the tests of ``rl_batch_demo.py``.
It implements only the verbs and flags that tool needs, and it implements them
the way kubectl v1.32 does (same flag syntax, same messages, same exit codes),
so that the tool is tested against a cluster that behaves like a real one, not
against a stub that agrees with whatever the tool sends.

What it documents about the tool's expectations
------------------------------------------------
Accepted commands (everything else is rejected like kubectl rejects it, with a
message on stderr and exit status 1; this script never runs a real kubectl):

* global flags anywhere: ``--kubeconfig``, ``--context``, ``--request-timeout``,
  ``-n/--namespace`` (``--flag=value``, ``--flag value``, ``-nNS``, ``-n=NS``)
* ``config current-context``
* ``version [-o json]``
* ``get TYPE[,TYPE...] [NAME...] [-o json|name] [-l SEL] [--ignore-not-found]
  [-w] [--output-watch-events] [--chunk-size N]``
* ``create -f - [-o json|name]`` (Namespace, ConfigMap, Job,
  SelfSubjectAccessReview)
* ``delete job|namespace NAME [--cascade=...] [--wait=...] [--ignore-not-found]``
* ``logs POD [-c C]`` and ``logs -l SEL [-c C] [--prefix] [--tail N]
  [--max-log-requests N] [--ignore-errors]``

Where the behaviour of real kubectl differs from a naive expectation the fake
follows kubectl, e.g. ``logs -l`` shows only the last 10 lines per pod unless
``--tail`` is given, an unknown ``--context`` fails with ``Error in
configuration: context was not found for specified context: X``, errors of
``create -f -`` read ``Error from server (AlreadyExists): error when creating
"STDIN": namespaces "x" already exists``, and ``-o json`` output is indented
by 4 spaces with sorted keys.

Design
------
The cluster is a directory (env ``FAKE_KUBECTL_STATE``):

``cluster.json``
    static configuration written by ``tests/fakecluster.py``: contexts, the
    required kubeconfig path, RBAC denials, the server address.
``db.json``
    every API object, keyed ``Kind/namespace/name``, plus a global
    resourceVersion counter and a table of pending deletions (objects that
    carry a deletionTimestamp and vanish at a given time).  Each write is a
    read-modify-write under ``fcntl.flock`` on ``lock`` and replaces the file
    atomically (temp file + rename), so readers never need the lock and never
    see torn state.
``calls.jsonl``
    one ``{"event": "call", ...}`` line per invocation, appended (under flock)
    before anything else happens, and one ``{"event": "done", ...}`` line with
    exit status, stdin and end time when the invocation ends normally.
``logs/NS/POD.log``
    container logs.  ``work/NS/POD/`` holds the episode script, workspace and
    termination-log of each simulated container.
``controllers/``
    one marker per background Job controller (``TOKEN.json`` while it runs,
    ``TOKEN.pid``, ``TOKEN.log`` with its stdout/stderr) and ``NS__JOB.stats.json``
    with its record (peak number of simultaneously running episodes).
``fault_counters.json``
    how many times each ``api_errors`` / ``hang`` rule has fired.

``create`` of a Job stores it and starts a detached controller process (this
same script, with env ``FAKE_KUBECTL_CONTROLLER``), which plays the Job
controller, the scheduler and the kubelet: it creates pods one by one (never
more than ``parallelism`` at once), runs each episode for real with the
ConfigMap's ``episode.py``, and writes pod/job status and events like a
v1.32 cluster.  It exits when the Job is finished or gone, when the state
directory disappears, or after ``FAKE_KUBECTL_CONTROLLER_MAX_SECONDS``
(default 600).

Faults (env ``FAKE_KUBECTL_FAULTS``, a JSON object) are listed in
``FAULT_KEYS`` and ``EPISODE_MODES`` below and described in the docstring of
``tests/fakecluster.py``.  Unknown fault names are rejected so that a typo in
a test cannot silently disable a fault.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

CLIENT_GIT_VERSION = "v1.32.4"
DEFAULT_SERVER_VERSION = "v1.32.0"
KUSTOMIZE_VERSION = "v5.5.0"
POLL_SECONDS = 0.02
VANISH_SECONDS = 0.3
DELETE_WAIT_CAP_SECONDS = 300.0
FAKE_USER = "fake-user"
DEFAULT_SERVER = "127.0.0.1:6443"
POD_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
MAX_TERMINATION_MESSAGE = 4096
STATE_ENV = "FAKE_KUBECTL_STATE"
FAULTS_ENV = "FAKE_KUBECTL_FAULTS"
CONTROLLER_ENV = "FAKE_KUBECTL_CONTROLLER"
CONTROLLER_MAX_ENV = "FAKE_KUBECTL_CONTROLLER_MAX_SECONDS"

FAULT_KEYS = {
    "episode",
    "logs_unavailable",
    "deadline_seconds",
    "episode_seconds",
    "api_errors",
    "hang",
    "watch_ends_early",
    "namespace_stuck",
    "legacy_labels",
    "server_version",
}
EPISODE_MODES = {
    "exit1",
    "duplicate_ready",
    "drop_reward",
    "noise",
    "malformed",
    "skew",
    "restart",
    "evict",
    "replace",
    "pending",
    "no_message",
    "message_mismatch",
    "wrong_id",
}
API_ERRORS = {
    "500": "Error from server (InternalError): {ctx}Internal error occurred: fake injected fault",
    "403": "Error from server (Forbidden): {ctx}{forbidden}",
    "429": "Error from server (TooManyRequests): {ctx}the server has received too many requests "
    "and has asked us to try again later",
    "503": "Error from server (ServiceUnavailable): {ctx}the server is currently unable to handle the request",
    "refused": "The connection to the server {server} was refused - did you specify the right host or port?",
    "timeout": "Unable to connect to the server: net/http: request canceled "
    "(Client.Timeout exceeded while awaiting headers)",
}

# Commands of the real kubectl that this fake does not implement: they are
# rejected with kubectl's "unknown command" wording plus a hint.
REAL_COMMANDS = {
    "alpha",
    "annotate",
    "api-resources",
    "api-versions",
    "apply",
    "attach",
    "auth",
    "autoscale",
    "certificate",
    "cluster-info",
    "completion",
    "cordon",
    "cp",
    "debug",
    "describe",
    "diff",
    "drain",
    "edit",
    "events",
    "exec",
    "explain",
    "expose",
    "help",
    "kustomize",
    "label",
    "options",
    "patch",
    "plugin",
    "port-forward",
    "proxy",
    "replace",
    "rollout",
    "run",
    "scale",
    "set",
    "taint",
    "top",
    "uncordon",
    "wait",
}


# --------------------------------------------------------------------------- errors


class KubectlError(Exception):
    """An error that kubectl prints on stderr before exiting with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def not_supported(what: str) -> KubectlError:
    return KubectlError(f"error: fake_kubectl does not support {what}")


# --------------------------------------------------------------------------- small helpers


def job_condition(kind: str, reason: str, message: str, t: str) -> dict:
    """A Job status condition as the job controller writes it."""
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": t,
        "lastTransitionTime": t,
    }


def now_ts(t: Optional[float] = None) -> str:
    """RFC 3339 UTC timestamp with second resolution, truncated like the API server."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def parse_ts(s: str) -> float:
    import calendar

    return float(calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ")))


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(POD_NAME_CHARS) for _ in range(n))


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


def write_json_atomic(path: str, data: Any) -> None:
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def read_json(path: str, default: Any = None) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default


@contextlib.contextmanager
def flocked(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def append_jsonl(path: str, record: dict) -> None:
    line = json.dumps(record) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        f.write(line)
        f.flush()


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
    def api_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"

    @property
    def qualified(self) -> str:
        """``jobs.batch`` / ``pods``: used in API error messages."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def name_prefix(self) -> str:
        """``job.batch`` / ``pod``: used by ``-o name``."""
        return f"{self.singular}.{self.group}" if self.group else self.singular


RESOURCES = [
    ResType("namespaces", "namespace", "Namespace", "", False, ("ns",)),
    ResType("runtimeclasses", "runtimeclass", "RuntimeClass", "node.k8s.io", False, ()),
    ResType("jobs", "job", "Job", "batch", True, ()),
    ResType("pods", "pod", "Pod", "", True, ("po",)),
    ResType("events", "event", "Event", "", True, ("ev",)),
    ResType("configmaps", "configmap", "ConfigMap", "", True, ("cm",)),
    ResType("nodes", "node", "Node", "", False, ("no",)),
]
BY_KIND = {rt.kind: rt for rt in RESOURCES}
CREATABLE = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Job": "batch/v1",
    "SelfSubjectAccessReview": "authorization.k8s.io/v1",
}


def lookup_type(text: str) -> Optional[ResType]:
    t = text.lower()
    for rt in RESOURCES:
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


def obj_key(kind: str, namespace: Optional[str], name: str) -> str:
    return f"{kind}/{namespace or ''}/{name}"


def key_of(obj: dict) -> str:
    md = obj["metadata"]
    return obj_key(obj["kind"], md.get("namespace"), md["name"])


# --------------------------------------------------------------------------- the store


def _gone(db: dict, now: float) -> Tuple[set, set]:
    gone = {k for k, t in db.get("vanish", {}).items() if t <= now}
    gone_ns = {k.split("/")[2] for k in gone if k.startswith("Namespace/")}
    return gone, gone_ns


def view_objects(db: dict, now: float) -> Dict[str, dict]:
    """The objects as the API server shows them at ``now`` (pending deletions applied)."""
    gone, gone_ns = _gone(db, now)
    if not gone:
        return db["objects"]
    return {k: o for k, o in db["objects"].items() if k not in gone and o["metadata"].get("namespace") not in gone_ns}


class Tx:
    """A read-modify-write transaction on db.json (held under the store lock)."""

    def __init__(self, db: dict, now: float) -> None:
        self.db = db
        self.now = now
        self.dirty = False
        gone, gone_ns = _gone(db, now)
        if gone:
            objs = db["objects"]
            for k in list(objs):
                if k in gone or objs[k]["metadata"].get("namespace") in gone_ns:
                    del objs[k]
            for k in gone:
                db["vanish"].pop(k, None)
            self.dirty = True

    @property
    def objects(self) -> Dict[str, dict]:
        return self.db["objects"]

    def get(self, kind: str, namespace: Optional[str], name: str) -> Optional[dict]:
        return self.objects.get(obj_key(kind, namespace, name))

    def list(self, kind: str, namespace: Optional[str] = None) -> List[dict]:
        out = [
            o
            for o in self.objects.values()
            if o["kind"] == kind and (namespace is None or o["metadata"].get("namespace") == namespace)
        ]
        return sorted(out, key=lambda o: o["metadata"]["name"])

    def bump(self) -> str:
        self.db["rv"] += 1
        self.dirty = True
        return str(self.db["rv"])

    def put(self, obj: dict) -> dict:
        obj["metadata"]["resourceVersion"] = self.bump()
        self.objects[key_of(obj)] = obj
        return obj

    def remove(self, obj: dict) -> None:
        key = key_of(obj)
        if self.objects.pop(key, None) is not None:
            self.db["vanish"].pop(key, None)
            self.bump()

    def vanish_later(self, obj: dict, delay: float = VANISH_SECONDS) -> None:
        """Mark ``obj`` as being deleted; it disappears ``delay`` seconds later."""
        obj["metadata"].setdefault("deletionTimestamp", now_ts(self.now))
        obj["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        self.put(obj)
        self.db["vanish"][key_of(obj)] = self.now + delay

    def is_vanishing(self, obj: dict) -> bool:
        return key_of(obj) in self.db["vanish"]


class Store:
    def __init__(self, state: str) -> None:
        self.state = state
        self.db_path = os.path.join(state, "db.json")
        self.lock_path = os.path.join(state, "lock")

    def read_raw(self) -> dict:
        db = read_json(self.db_path)
        if db is None:
            raise KubectlError(
                f"error: fake_kubectl: state dir {self.state!r} is not initialised (use tests/fakecluster.py)"
            )
        return db

    def snapshot(self) -> Dict[str, dict]:
        return view_objects(self.read_raw(), time.time())

    def stat_token(self) -> Tuple[int, int]:
        st = os.stat(self.db_path)
        return st.st_ino, st.st_mtime_ns

    @contextlib.contextmanager
    def tx(self) -> Iterator[Tx]:
        with flocked(self.lock_path):
            db = self.read_raw()
            t = Tx(db, time.time())
            yield t
            if t.dirty:
                write_json_atomic(self.db_path, db)


def init_state(
    state: str,
    *,
    contexts: List[str],
    current_context: Optional[str],
    kubeconfig: Optional[str],
    forbidden: List[List[str]],
    runtimeclasses: Dict[str, dict],
    nodes: List[dict],
    server: str = DEFAULT_SERVER,
) -> None:
    """Create a fresh fake cluster in ``state`` (called by tests/fakecluster.py)."""
    for sub in ("logs", "work", "controllers"):
        os.makedirs(os.path.join(state, sub), exist_ok=True)
    write_json_atomic(
        os.path.join(state, "cluster.json"),
        {
            "contexts": list(contexts),
            "current_context": current_context,
            "kubeconfig": kubeconfig,
            "forbidden": [list(f) for f in forbidden],
            "server": server,
        },
    )
    boot = time.time() - 3600
    db: dict = {"rv": 1000, "objects": {}, "vanish": {}}

    def put(obj: dict) -> None:
        db["rv"] += 1
        md = obj["metadata"]
        md.setdefault("uid", str(uuid.uuid4()))
        md.setdefault("creationTimestamp", now_ts(boot))
        md["resourceVersion"] = str(db["rv"])
        db["objects"][key_of(obj)] = obj

    for ns in ("default", "kube-node-lease", "kube-public", "kube-system"):
        put(new_namespace(ns))
    for name, spec in sorted(runtimeclasses.items()):
        rc = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": name},
            "handler": spec.get("handler", name),
        }
        for field in ("overhead", "scheduling"):
            if field in spec:
                rc[field] = copy.deepcopy(spec[field])
        put(rc)
    for node in nodes:
        put(make_node(node))
    write_json_atomic(os.path.join(state, "db.json"), db)
    with open(os.path.join(state, "calls.jsonl"), "a", encoding="utf-8"):
        pass


def new_namespace(name: str, labels: Optional[dict] = None) -> dict:
    lab = dict(labels or {})
    lab["kubernetes.io/metadata.name"] = name
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": lab},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def make_node(spec: dict) -> dict:
    """A Node object from a full object or the shorthand
    ``{"name", "allocatable", "unschedulable", "labels", "ready"}``."""
    if "metadata" in spec:
        node = copy.deepcopy(spec)
        node.setdefault("apiVersion", "v1")
        node.setdefault("kind", "Node")
        return node
    name = spec["name"]
    alloc = dict(spec.get("allocatable") or {"cpu": "64", "memory": "256Gi", "pods": "110"})
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    labels.update(spec.get("labels") or {})
    ready = spec.get("ready", True)
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if spec.get("unschedulable") else {},
        "status": {
            "allocatable": alloc,
            "capacity": dict(alloc),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status" if ready else "not ready",
                    "lastHeartbeatTime": now_ts(),
                    "lastTransitionTime": now_ts(),
                }
            ],
            "nodeInfo": {
                "kubeletVersion": DEFAULT_SERVER_VERSION,
                "containerRuntimeVersion": "containerd://1.7.24",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    if spec.get("taints"):
        node["spec"]["taints"] = copy.deepcopy(spec["taints"])
    return node


# --------------------------------------------------------------------------- faults


def load_faults() -> dict:
    raw = os.environ.get(FAULTS_ENV, "").strip()
    if not raw:
        return {}
    try:
        faults = json.loads(raw)
    except ValueError as e:
        raise KubectlError(f"error: fake_kubectl: {FAULTS_ENV} is not valid JSON: {e}") from None
    if not isinstance(faults, dict):
        raise KubectlError(f"error: fake_kubectl: {FAULTS_ENV} must be a JSON object")
    unknown = set(faults) - FAULT_KEYS
    if unknown:
        raise KubectlError(f"error: fake_kubectl: unknown fault(s) {sorted(unknown)}; known: {sorted(FAULT_KEYS)}")
    for idx, mode in (faults.get("episode") or {}).items():
        modes = mode if isinstance(mode, list) else [mode]
        bad = [m for m in modes if m not in EPISODE_MODES]
        if bad or not str(idx).isdigit():
            raise KubectlError(
                f"error: fake_kubectl: bad episode fault {idx!r}: {mode!r}; known modes: {sorted(EPISODE_MODES)}"
            )
    for rule in faults.get("api_errors") or []:
        if str(rule.get("error")) not in API_ERRORS or "match" not in rule:
            raise KubectlError(f"error: fake_kubectl: bad api_errors rule {rule!r}; errors: {sorted(API_ERRORS)}")
    return faults


def episode_modes(faults: dict, index: int) -> List[str]:
    mode = (faults.get("episode") or {}).get(str(index))
    if mode is None:
        return []
    return list(mode) if isinstance(mode, list) else [mode]


def _canon_target(word: str) -> str:
    """Normalise the resource part of a fault ``match`` ("job" -> "jobs")."""
    parts = []
    for piece in word.split(","):
        rt = lookup_type(piece)
        if rt is not None:
            parts.append(rt.resource)
        elif piece.lower() in {k.lower() for k in CREATABLE}:
            parts.append(piece.lower())
        else:
            parts.append(piece.lower())
    return ",".join(parts)


def op_matches(match: str, op: Tuple[str, str]) -> bool:
    words = match.split(None, 1)
    if not words or words[0] != op[0]:
        return False
    if len(words) == 1:
        return True
    return _canon_target(words[1].strip()) == _canon_target(op[1])


class FaultCounters:
    """Counts how often each api_errors/hang rule fired (persisted in the state dir)."""

    def __init__(self, state: str) -> None:
        self.path = os.path.join(state, "fault_counters.json")
        self.lock = os.path.join(state, "fault_counters.lock")

    def take(self, rule_id: str, times: Optional[int]) -> bool:
        with flocked(self.lock):
            counts = read_json(self.path, {})
            used = counts.get(rule_id, 0)
            if times is not None and used >= int(times):
                return False
            counts[rule_id] = used + 1
            write_json_atomic(self.path, counts)
            return True


# --------------------------------------------------------------------------- flag parsing


class Flag:
    def __init__(
        self,
        name: str,
        short: Optional[str] = None,
        kind: str = "string",
        noopt: Optional[str] = None,
        multi: bool = False,
    ) -> None:
        self.name = name
        self.short = short
        self.kind = kind  # "string" | "bool" | "int"
        self.noopt = noopt  # value used when given without "=value" (like pflag NoOptDefVal)
        self.multi = multi


GLOBAL_FLAGS = [Flag("kubeconfig"), Flag("context"), Flag("request-timeout"), Flag("namespace", "n")]
COMMAND_FLAGS: Dict[str, List[Flag]] = {
    "get": [
        Flag("output", "o"),
        Flag("selector", "l"),
        Flag("ignore-not-found", kind="bool"),
        Flag("watch", "w", kind="bool"),
        Flag("output-watch-events", kind="bool"),
        Flag("chunk-size", kind="int"),
    ],
    "create": [Flag("filename", "f", multi=True), Flag("output", "o")],
    "delete": [Flag("cascade", noopt="background"), Flag("wait", kind="bool"), Flag("ignore-not-found", kind="bool")],
    "logs": [
        Flag("container", "c"),
        Flag("selector", "l"),
        Flag("prefix", kind="bool"),
        Flag("tail", kind="int"),
        Flag("max-log-requests", kind="int"),
        Flag("ignore-errors", kind="bool"),
    ],
    "version": [Flag("output", "o")],
    "config current-context": [],
    "config view": [Flag("minify", kind="bool"), Flag("output", "o")],
}
_BOOL_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_BOOL_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def usage_hint(cmdpath: str) -> str:
    return f"See 'kubectl {cmdpath} --help' for usage." if cmdpath else "See 'kubectl --help' for usage."


def _convert(flag: Flag, raw: str, shown: str, cmdpath: str) -> Any:
    if flag.kind == "bool":
        if raw in _BOOL_TRUE:
            return True
        if raw in _BOOL_FALSE:
            return False
        raise KubectlError(
            f'error: invalid argument "{raw}" for "{shown}" flag: strconv.ParseBool: '
            f'parsing "{raw}": invalid syntax\n{usage_hint(cmdpath)}'
        )
    if flag.kind == "int":
        if re.fullmatch(r"[+-]?\d+", raw):
            return int(raw)
        raise KubectlError(
            f'error: invalid argument "{raw}" for "{shown}" flag: strconv.ParseInt: '
            f'parsing "{raw}": invalid syntax\n{usage_hint(cmdpath)}'
        )
    return raw


def parse_flags(args: List[str], flags: List[Flag], cmdpath: str) -> Tuple[Dict[str, Any], List[str]]:
    """pflag-compatible parsing: flags and positionals may be interleaved."""
    by_long = {f.name: f for f in flags}
    by_short = {f.short: f for f in flags if f.short}
    values: Dict[str, Any] = {}
    positional: List[str] = []

    def store(flag: Flag, value: Any) -> None:
        if flag.multi:
            values.setdefault(flag.name, []).append(value)
        else:
            values[flag.name] = value

    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--":
            positional.extend(args[i:])
            break
        if a.startswith("--") and len(a) > 2:
            name, eq, val = a[2:].partition("=")
            flag = by_long.get(name)
            if flag is None:
                raise KubectlError(f"error: unknown flag: --{name}\n{usage_hint(cmdpath)}")
            if eq:
                store(flag, _convert(flag, val, "--" + name, cmdpath))
            elif flag.kind == "bool":
                store(flag, True)
            elif flag.noopt is not None:
                store(flag, flag.noopt)
            elif i < len(args):
                store(flag, _convert(flag, args[i], "--" + name, cmdpath))
                i += 1
            else:
                raise KubectlError(f"error: flag needs an argument: --{name}\n{usage_hint(cmdpath)}")
        elif a.startswith("-") and len(a) > 1:
            chars = a[1:]
            j = 0
            while j < len(chars):
                c = chars[j]
                flag = by_short.get(c)
                if flag is None:
                    raise KubectlError(f"error: unknown shorthand flag: '{c}' in -{chars}\n{usage_hint(cmdpath)}")
                rest = chars[j + 1 :]
                if flag.kind == "bool":
                    if rest.startswith("="):
                        store(flag, _convert(flag, rest[1:], "-" + c, cmdpath))
                        break
                    store(flag, True)
                    j += 1
                    continue
                if rest.startswith("="):
                    store(flag, _convert(flag, rest[1:], "-" + c, cmdpath))
                elif rest:
                    store(flag, _convert(flag, rest, "-" + c, cmdpath))
                elif i < len(args):
                    store(flag, _convert(flag, args[i], "-" + c, cmdpath))
                    i += 1
                else:
                    raise KubectlError(f"error: flag needs an argument: '{c}' in -{c}\n{usage_hint(cmdpath)}")
                break
        else:
            positional.append(a)
    return values, positional


def split_command(argv: List[str]) -> Tuple[Optional[str], List[str]]:
    """Find the command word; flags before it must be known global flags."""
    by_long = {f.name: f for f in GLOBAL_FLAGS}
    by_short = {f.short: f for f in GLOBAL_FLAGS if f.short}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and len(a) > 2:
            name, eq, _ = a[2:].partition("=")
            if name not in by_long:
                raise KubectlError(f"Error: flags cannot be placed before plugin name: {a}")
            i += 1 if eq else 2
        elif a.startswith("-") and len(a) > 1:
            c = a[1]
            if c not in by_short:
                raise KubectlError(f"Error: flags cannot be placed before plugin name: {a}")
            i += 1 if len(a) > 2 else 2
        else:
            return a, argv[:i] + argv[i + 1 :]
    return None, list(argv)


# --------------------------------------------------------------------------- label selectors


def parse_selector(text: str) -> List[Tuple[str, str, List[str]]]:
    """``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``; comma = AND."""
    reqs: List[Tuple[str, str, List[str]]] = []
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


def selector_matches(reqs: List[Tuple[str, str, List[str]]], labels: Optional[dict]) -> bool:
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


# --------------------------------------------------------------------------- invocation context


class Invocation:
    """Everything one kubectl process needs: flags, cluster config, store, faults."""

    def __init__(self, state: str, cmdpath: str, flags: Dict[str, Any], faults: dict) -> None:
        self.state = state
        self.cmdpath = cmdpath
        self.flags = flags
        self.faults = faults
        self.store = Store(state)
        self.cluster = read_json(os.path.join(state, "cluster.json"), None)
        if self.cluster is None:
            raise KubectlError(f"error: fake_kubectl: state dir {state!r} is not initialised")
        self.server = self.cluster.get("server", DEFAULT_SERVER)
        self.namespace_flag: Optional[str] = flags.get("namespace")
        self.namespace = self.namespace_flag or "default"
        timeout = flags.get("request-timeout")
        self.request_timeout = parse_duration(timeout) if timeout is not None else None
        self.counters = FaultCounters(state)
        self.contexts, self.current_context = self._load_kubeconfig()

    def _load_kubeconfig(self) -> Tuple[List[str], Optional[str]]:
        required = self.cluster.get("kubeconfig")
        flag = self.flags.get("kubeconfig")
        if flag is not None and flag != "":
            if not os.path.exists(flag):
                raise KubectlError(f"error: stat {flag}: no such file or directory")
            known = required is None or os.path.realpath(flag) == os.path.realpath(required)
        elif os.environ.get("KUBECONFIG"):
            paths = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
            known = required is None or any(os.path.realpath(p) == os.path.realpath(required) for p in paths)
        else:
            known = required is None
        if not known:
            return [], None
        return list(self.cluster.get("contexts") or []), self.cluster.get("current_context")

    def check_context(self, needs_server: bool = True) -> str:
        ctx = self.flags.get("context") or ""
        if ctx:
            if ctx not in self.contexts:
                raise KubectlError(f"Error in configuration: context was not found for specified context: {ctx}")
            return ctx
        if self.current_context and self.current_context in self.contexts:
            return self.current_context
        if needs_server:
            raise KubectlError(
                "The connection to the server localhost:8080 was refused - did you specify the right host or port?"
            )
        return ""

    # -- faults ------------------------------------------------------------

    def api_call(
        self,
        op: Tuple[str, str],
        *,
        verb: str = "",
        rt: Optional[ResType] = None,
        name: str = "",
        namespace: str = "",
        create_ctx: str = "",
        apply: Optional[Callable[[], None]] = None,
        rbac: bool = True,
    ) -> None:
        """Apply hang/api_errors faults for one API request, then RBAC.

        ``apply`` performs the request; it runs before an ``after_apply`` error."""
        self._maybe_hang(op)
        rules = self.faults.get("api_errors") or []
        after: Optional[KubectlError] = None
        for idx, rule in enumerate(rules):
            if not op_matches(str(rule["match"]), op):
                continue
            rule_id = f"api_errors[{idx}]:{json.dumps(rule, sort_keys=True)}"
            if not self.counters.take(rule_id, rule.get("times")):
                continue
            err = self._fault_error(str(rule["error"]), verb or op[0], rt, name, namespace, create_ctx)
            if rule.get("after_apply"):
                after = err
                break
            raise err
        if rbac and rt is not None and verb:
            self.check_rbac(verb, rt.resource, rt, name, namespace, create_ctx)
        if apply is not None:
            apply()
        if after is not None:
            raise after

    def _maybe_hang(self, op: Tuple[str, str]) -> None:
        hang = self.faults.get("hang")
        rules = hang if isinstance(hang, list) else ([hang] if hang else [])
        for idx, rule in enumerate(rules):
            if not op_matches(str(rule.get("match", "")), op):
                continue
            rule_id = f"hang[{idx}]:{json.dumps(rule, sort_keys=True)}"
            if not self.counters.take(rule_id, rule.get("times")):
                continue
            seconds = float(rule.get("seconds", 30))
            if self.request_timeout is not None and self.request_timeout < seconds:
                time.sleep(self.request_timeout)
                raise KubectlError(API_ERRORS["timeout"])
            time.sleep(seconds)

    def _fault_error(
        self, code: str, verb: str, rt: Optional[ResType], name: str, namespace: str, create_ctx: str
    ) -> KubectlError:
        forbidden = ""
        if code == "403":
            forbidden = forbidden_text(verb, rt.resource if rt else "unknown", rt, name, namespace)
        msg = API_ERRORS[code].format(ctx=create_ctx, forbidden=forbidden, server=self.server)
        return KubectlError(msg)

    def check_rbac(
        self, verb: str, resource: str, rt: Optional[ResType], name: str, namespace: str, create_ctx: str = ""
    ) -> None:
        if is_forbidden(self.cluster, verb, resource):
            raise KubectlError(
                "Error from server (Forbidden): " + create_ctx + forbidden_text(verb, resource, rt, name, namespace)
            )


def is_forbidden(cluster: dict, verb: str, resource: str) -> bool:
    res = resource.split("/")
    base = res[0].split(".")[0]
    full = base + ("/" + res[1] if len(res) > 1 else "")
    for fverb, fres in cluster.get("forbidden") or []:
        fparts = fres.split("/")
        fbase = fparts[0].split(".")[0]
        ffull = fbase + ("/" + fparts[1] if len(fparts) > 1 else "")
        if fverb in (verb, "*") and ffull in (full, "*"):
            return True
    return False


def forbidden_text(verb: str, resource: str, rt: Optional[ResType], name: str, namespace: str) -> str:
    base = rt.qualified if rt else resource
    what = f'{base} "{name}"' if name else base
    group = rt.group if rt else ""
    namespaced = rt.namespaced if rt else True
    scope = f'in the namespace "{namespace}"' if namespaced and namespace else "at the cluster scope"
    return f'{what} is forbidden: User "{FAKE_USER}" cannot {verb} resource "{resource}" in API group "{group}" {scope}'


# --------------------------------------------------------------------------- printing


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def print_json(obj: Any) -> None:
    out(go_json(sorted_obj(obj)) + "\n")


def age(ts: Optional[str]) -> str:
    if not ts:
        return "<unknown>"
    secs = max(0, int(time.time() - parse_ts(ts)))
    if secs < 120:
        return f"{secs}s"
    if secs < 3600 * 3:
        return f"{secs // 60}m"
    return f"{secs // 3600}h"


def table_row(rt: ResType, o: dict) -> List[str]:
    md = o["metadata"]
    st = o.get("status") or {}
    if rt.kind == "Pod":
        cs = st.get("containerStatuses") or []
        ready = sum(1 for c in cs if c.get("ready"))
        phase = st.get("reason") or st.get("phase", "Pending")
        if md.get("deletionTimestamp"):
            phase = "Terminating"
        elif cs and "terminated" in (cs[0].get("state") or {}):
            phase = cs[0]["state"]["terminated"].get("reason", phase)
        restarts = sum(c.get("restartCount", 0) for c in cs)
        n = len(o.get("spec", {}).get("containers", []))
        return [md["name"], f"{ready}/{n}", phase, str(restarts), age(md.get("creationTimestamp"))]
    if rt.kind == "Job":
        conds = {c["type"]: c for c in st.get("conditions") or [] if c.get("status") == "True"}
        status = "Complete" if "Complete" in conds else "Failed" if "Failed" in conds else "Running"
        comp = f"{st.get('succeeded', 0)}/{o.get('spec', {}).get('completions', 1)}"
        return [md["name"], status, comp, age(st.get("startTime")), age(md.get("creationTimestamp"))]
    if rt.kind == "Namespace":
        return [md["name"], st.get("phase", "Active"), age(md.get("creationTimestamp"))]
    if rt.kind == "Node":
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])
        status = "Ready" if ready else "NotReady"
        if (o.get("spec") or {}).get("unschedulable"):
            status += ",SchedulingDisabled"
        return [
            md["name"],
            status,
            "<none>",
            age(md.get("creationTimestamp")),
            (st.get("nodeInfo") or {}).get("kubeletVersion", ""),
        ]
    if rt.kind == "RuntimeClass":
        return [md["name"], o.get("handler", ""), age(md.get("creationTimestamp"))]
    if rt.kind == "ConfigMap":
        return [md["name"], str(len(o.get("data") or {})), age(md.get("creationTimestamp"))]
    if rt.kind == "Event":
        inv = o.get("involvedObject") or {}
        return [
            age(o.get("lastTimestamp")),
            o.get("type", ""),
            o.get("reason", ""),
            f"{inv.get('kind', '').lower()}/{inv.get('name', '')}",
            o.get("message", ""),
        ]
    return [md["name"]]


TABLE_HEADERS = {
    "Pod": ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
    "Job": ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
    "Namespace": ["NAME", "STATUS", "AGE"],
    "Node": ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
    "RuntimeClass": ["NAME", "HANDLER", "AGE"],
    "ConfigMap": ["NAME", "DATA", "AGE"],
    "Event": ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
}


def print_table(rt: ResType, objs: List[dict], with_kind: bool) -> None:
    rows = [TABLE_HEADERS.get(rt.kind, ["NAME"])]
    for o in objs:
        row = table_row(rt, o)
        if with_kind and rt.kind != "Event":
            row[0] = f"{rt.name_prefix}/{row[0]}"
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    out("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- commands: config, version


def cmd_config(inv: Invocation, positional: List[str]) -> int:
    # like kubectl, this reads the kubeconfig only: --context is not validated here
    inv.api_call(("config", "current-context"))
    if not inv.current_context:
        raise KubectlError("error: current-context is not set")
    out(inv.current_context + "\n")
    return 0


def cmd_config_view(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    """``config view --minify -o json``: the kubeconfig reduced to one context (the --context
    flag's, else the current one), with its cluster's server and the user's secret redacted."""
    if positional:
        raise KubectlError(f"error: unexpected arguments: [{' '.join(positional)}]")
    if not flags.get("minify") or flags.get("output") != "json":
        raise not_supported("config view without --minify -o json")
    inv.api_call(("config", "view"))
    ctx = inv.flags.get("context") or inv.current_context
    if not ctx:
        raise KubectlError("error: current-context must exist in order to minify")
    if ctx not in inv.contexts:
        raise KubectlError(f"error: cannot locate context {ctx}")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": "fake-cluster", "cluster": {"server": f"https://{inv.server}"}}],
        "users": [{"name": "fake-user", "user": {"token": "REDACTED"}}],
        "contexts": [{"name": ctx, "context": {"cluster": "fake-cluster", "user": "fake-user"}}],
        "current-context": ctx,
    }
    out(json.dumps(config, indent=4) + "\n")
    return 0


def cmd_version(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    if positional:
        raise KubectlError(f"error: extra arguments: [{' '.join(positional)}]")
    fmt = flags.get("output", "")
    if fmt not in ("", "json"):
        if fmt == "yaml":
            raise not_supported("version -o yaml")
        raise KubectlError("error: --output must be 'yaml' or 'json'")
    client = {
        "major": "1",
        "minor": "32",
        "gitVersion": CLIENT_GIT_VERSION,
        "gitCommit": "59526cd4867447956156ae3a602fcbac5f2fd9e1",
        "gitTreeState": "clean",
        "buildDate": "2025-04-22T16:03:51Z",
        "goVersion": "go1.23.6",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
    sv = str(inv.faults.get("server_version") or DEFAULT_SERVER_VERSION)
    m = re.match(r"v?(\d+)\.(\d+)", sv)
    server = {
        "major": m.group(1) if m else "1",
        "minor": m.group(2) if m else "32",
        "gitVersion": sv,
        "gitCommit": "70d3cc986aa8221cd1dfb1121852688902d3bf53",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T17:59:15Z",
        "goVersion": "go1.23.3",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
    result: Dict[str, Any] = {"clientVersion": client, "kustomizeVersion": KUSTOMIZE_VERSION}
    try:
        inv.check_context()
        inv.api_call(("version", "version"))
    except KubectlError:
        if fmt == "json":
            out(json.dumps(result, indent=2) + "\n")
        else:
            out(f"Client Version: {CLIENT_GIT_VERSION}\nKustomize Version: {KUSTOMIZE_VERSION}\n")
        raise
    result["serverVersion"] = server
    if fmt == "json":
        out(json.dumps(result, indent=2) + "\n")
    else:
        out(f"Client Version: {CLIENT_GIT_VERSION}\nKustomize Version: {KUSTOMIZE_VERSION}\nServer Version: {sv}\n")
    return 0


# --------------------------------------------------------------------------- command: get

PRINTER_ERROR = (
    'error: unable to match a printer suitable for the output format "{fmt}", allowed formats are: json,name'
)


def select_objects(
    objs: Dict[str, dict],
    rt: ResType,
    namespace: str,
    name: Optional[str],
    selector: Optional[List[Tuple[str, str, List[str]]]],
) -> List[dict]:
    found = []
    for o in objs.values():
        if o["kind"] != rt.kind:
            continue
        md = o["metadata"]
        if rt.namespaced and md.get("namespace") != namespace:
            continue
        if name is not None and md["name"] != name:
            continue
        if selector is not None and not selector_matches(selector, md.get("labels")):
            continue
        found.append(o)
    return sorted(found, key=lambda o: o["metadata"]["name"])


def not_found(rt: ResType, name: str) -> str:
    return f'Error from server (NotFound): {rt.qualified} "{name}" not found'


def cmd_get(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    if not positional:
        raise KubectlError(
            'You must specify the type of resource to get. Use "kubectl api-resources" for a complete '
            'list of supported resources.\n\nerror: Required resource not specified.\nUse "kubectl '
            'explain <resource>" for a detailed description of that resource (e.g. kubectl explain '
            "pods).\nSee 'kubectl get -h' for help and examples"
        )
    fmt = flags.get("output", "")
    sel_text = flags.get("selector")
    watch = bool(flags.get("watch"))
    ignore_nf = bool(flags.get("ignore-not-found"))
    # TYPE[,TYPE] NAME... or TYPE/NAME...
    if "/" in positional[0]:
        type_words, requests = [], []
        for p in positional:
            if "/" not in p:
                raise KubectlError(
                    "error: there is no need to specify a resource type as a separate argument when "
                    "passing arguments in resource/name form (e.g. 'kubectl get resource/<resource_name>' "
                    "instead of 'kubectl get resource resource/<resource_name>'"
                )
            t, n = p.split("/", 1)
            type_words.append(t)
            requests.append((t, n))
    else:
        type_words = positional[0].split(",")
        names = positional[1:]
        requests = [(t, n) for t in type_words for n in names] if names else [(t, None) for t in type_words]
    has_names = any(n is not None for _, n in requests)
    if has_names and sel_text is not None:
        raise KubectlError("error: name cannot be provided when a selector is specified")
    if watch:
        if len(set(t.lower() for t in type_words)) > 1:
            raise KubectlError("error: you may only specify a single resource type")
        if len(requests) > 1:
            raise KubectlError(
                "error: watch is only supported on individual resources and resource "
                f"collections, but {len(requests)} resources were found"
            )
    inv.check_context()
    op_target = ",".join(sorted(set(type_words), key=type_words.index))
    if "/" in positional[0]:
        op_target = positional[0].split("/", 1)[0]
    # faults first (the request would fail before discovery answers), then discovery, then RBAC.
    first_rt = lookup_type(requests[0][0])
    first_name = requests[0][1] or ""
    inv.api_call(
        ("get", op_target),
        verb="get" if first_name else ("watch" if watch else "list"),
        rt=first_rt,
        name=first_name,
        namespace=inv.namespace,
        rbac=False,
    )
    rts = [(resolve_type(t), n) for t, n in requests]
    if fmt not in ("", "json", "name"):
        raise KubectlError(PRINTER_ERROR.format(fmt=fmt))
    selector = parse_selector(sel_text) if sel_text is not None else None
    for rt, n in rts:
        verb = "get" if n is not None else ("watch" if watch else "list")
        inv.check_rbac(verb, rt.resource, rt, n or "", inv.namespace)
        if watch and n is None:
            inv.check_rbac("list", rt.resource, rt, "", inv.namespace)
    if watch:
        rt, n = rts[0]
        return watch_objects(inv, rt, n, selector, fmt, bool(flags.get("output-watch-events")))

    objs = inv.store.snapshot()
    found: List[Tuple[ResType, dict]] = []
    errors: List[str] = []
    for rt, n in rts:
        matched = select_objects(objs, rt, inv.namespace, n, selector)
        if n is not None and not matched and not ignore_nf:
            errors.append(not_found(rt, n))
        found.extend((rt, o) for o in matched)
    single = len(rts) == 1 and rts[0][1] is not None
    if fmt == "json":
        if not found and ignore_nf:
            pass
        elif single and len(found) == 1:
            print_json(found[0][1])
        elif not (single and not found):
            print_json(
                {
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": [o for _, o in found],
                    "metadata": {"resourceVersion": ""},
                }
            )
    elif fmt == "name":
        for rt, o in found:
            out(f"{rt.name_prefix}/{o['metadata']['name']}\n")
    else:
        if not found and not errors and not (ignore_nf and has_names):
            rt0 = rts[0][0]
            if rt0.namespaced:
                err(f"No resources found in {inv.namespace} namespace.")
            else:
                err("No resources found")
        multi_type = len({rt.kind for rt, _ in rts}) > 1
        seen_kinds: List[str] = []
        for rt, _ in rts:
            if rt.kind in seen_kinds:
                continue
            seen_kinds.append(rt.kind)
            group = [o for r, o in found if r.kind == rt.kind]
            if group:
                print_table(rt, group, multi_type)
    if errors:
        raise KubectlError("\n".join(errors))
    return 0


def watch_objects(
    inv: Invocation,
    rt: ResType,
    name: Optional[str],
    selector: Optional[List[Tuple[str, str, List[str]]]],
    fmt: str,
    with_events: bool,
) -> int:
    """``get -w``: initial ADDED events, then poll the store for changes."""
    start = time.monotonic()
    seen: Dict[str, dict] = {}

    def emit(kind: str, obj: dict) -> None:
        if fmt == "json":
            body = sorted_obj(obj)
            out(go_json({"type": kind, "object": body} if with_events else body) + "\n")
        elif fmt == "name":
            out(f"{rt.name_prefix}/{obj['metadata']['name']}\n")
        else:
            out("   ".join(table_row(rt, obj)) + "\n")

    def current() -> Dict[str, dict]:
        return {key_of(o): o for o in select_objects(inv.store.snapshot(), rt, inv.namespace, name, selector)}

    initial = current()
    if not initial and fmt == "" and name is None:
        err(f"No resources found in {inv.namespace} namespace." if rt.namespaced else "No resources found")
    for key, obj in initial.items():
        emit("ADDED", obj)
        seen[key] = obj
    if inv.faults.get("watch_ends_early"):
        return 0
    token = None
    pending_vanish = True
    while True:
        time.sleep(POLL_SECONDS)
        if inv.request_timeout is not None and time.monotonic() - start >= inv.request_timeout:
            return 0
        if not os.path.isdir(inv.state):
            return 0
        try:
            new_token = inv.store.stat_token()
            if new_token == token and not pending_vanish:
                continue
            db = inv.store.read_raw()
        except (OSError, KubectlError, ValueError):
            continue
        token = new_token
        pending_vanish = bool(db.get("vanish"))
        now = {key_of(o): o for o in select_objects(view_objects(db, time.time()), rt, inv.namespace, name, selector)}
        changes = []
        for key, obj in now.items():
            old = seen.get(key)
            if old is None:
                changes.append(("ADDED", obj))
            elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                changes.append(("MODIFIED", obj))
        changes.sort(key=lambda c: int(c[1]["metadata"].get("resourceVersion") or 0))
        for key in [k for k in seen if k not in now]:
            changes.append(("DELETED", seen[key]))
        for kind, obj in changes:
            emit(kind, obj)
        seen = now


# --------------------------------------------------------------------------- command: create

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def invalid(kind: str, name: str, problems: List[str]) -> KubectlError:
    if len(problems) == 1:
        return KubectlError(f'The {kind} "{name}" is invalid: {problems[0]}')
    return KubectlError(f'The {kind} "{name}" is invalid: \n' + "\n".join(f"* {p}" for p in problems))


def validate_metadata(obj: dict, label_name: bool) -> List[str]:
    md = obj["metadata"]
    name = md.get("name", "")
    problems = []
    if not name:
        problems.append("metadata.name: Required value: name or generateName is required")
    elif label_name and (len(name) > 63 or not DNS1123_LABEL.fullmatch(name)):
        problems.append(
            f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 label must '
            "consist of lower case alphanumeric characters or '-', and must start and end "
            "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        )
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        problems.append(
            f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
            "consist of lower case alphanumeric characters, '-' or '.', and must start and "
            "end with an alphanumeric character (e.g. 'example.com', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    for where, labels in (("metadata.labels", md.get("labels") or {}),):
        for v in labels.values():
            if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.fullmatch(v):
                problems.append(
                    f'{where}: Invalid value: "{v}": a valid label must be an empty string '
                    "or consist of alphanumeric characters, '-', '_' or '.', and must start "
                    "and end with an alphanumeric character"
                )
    return problems


def pod_security_violations(spec: dict) -> List[str]:
    """The checks of the ``restricted`` Pod Security Standard that matter here."""
    psc = spec.get("securityContext") or {}
    out_: List[str] = []
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    bad_ape, bad_caps, bad_nonroot, bad_seccomp, privileged, root_uid = [], [], [], [], [], []
    for c in containers:
        sc = c.get("securityContext") or {}
        n = c.get("name", "")
        if sc.get("privileged"):
            privileged.append(n)
        if sc.get("allowPrivilegeEscalation") is not False:
            bad_ape.append(n)
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or any(a != "NET_BIND_SERVICE" for a in caps.get("add") or []):
            bad_caps.append(n)
        nonroot = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if nonroot is not True:
            bad_nonroot.append(n)
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            root_uid.append(n)
        sp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if sp not in ("RuntimeDefault", "Localhost"):
            bad_seccomp.append(n)

    def names(ns: List[str]) -> str:
        return ", ".join(f'"{x}"' for x in ns)

    if privileged:
        out_.append(f"privileged (container {names(privileged)} must not set securityContext.privileged=true)")
    if bad_ape:
        out_.append(
            f"allowPrivilegeEscalation != false (container {names(bad_ape)} must set "
            "securityContext.allowPrivilegeEscalation=false)"
        )
    if bad_caps:
        out_.append(
            f"unrestricted capabilities (container {names(bad_caps)} must set "
            'securityContext.capabilities.drop=["ALL"])'
        )
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out_.append(f'restricted volume types (volume "{v.get("name")}" uses restricted volume type "hostPath")')
    if bad_nonroot:
        out_.append(
            f"runAsNonRoot != true (pod or container {names(bad_nonroot)} must set securityContext.runAsNonRoot=true)"
        )
    if root_uid:
        out_.append(f"runAsUser=0 (container {names(root_uid)} must not set runAsUser=0)")
    if bad_seccomp:
        out_.append(
            f"seccompProfile (pod or container {names(bad_seccomp)} must set "
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
        )
    return out_


def namespace_enforces_restricted(ns_obj: Optional[dict]) -> bool:
    labels = (ns_obj or {}).get("metadata", {}).get("labels") or {}
    return labels.get("pod-security.kubernetes.io/enforce") == "restricted"


def job_labels(uid: str, name: str, legacy: bool) -> Dict[str, str]:
    if legacy:
        return {"controller-uid": uid, "job-name": name}
    return {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }


def default_container(c: dict) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = c.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    c.setdefault("resources", {})


def default_pod_spec(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for c in spec.get("initContainers") or []:
        default_container(c)
    for c in spec.get("containers") or []:
        default_container(c)


def prepare_job(obj: dict, uid: str, legacy: bool) -> List[str]:
    """API-server defaulting and validation of a batch/v1 Job; returns problems."""
    name = obj["metadata"].get("name", "")
    problems = validate_metadata(obj, label_name=True)
    spec = obj.setdefault("spec", {})
    template = spec.setdefault("template", {})
    pspec = template.setdefault("spec", {})
    if pspec.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append('spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"')
    containers = pspec.get("containers") or []
    if not containers:
        problems.append("spec.template.spec.containers: Required value")
    for i, c in enumerate(containers):
        if not c.get("name"):
            problems.append(f"spec.template.spec.containers[{i}].name: Required value")
        if not c.get("image"):
            problems.append(f"spec.template.spec.containers[{i}].image: Required value")
    for field in ("completions", "parallelism", "backoffLimit", "activeDeadlineSeconds"):
        v = spec.get(field)
        if v is not None and (not isinstance(v, int) or v < (1 if field == "activeDeadlineSeconds" else 0)):
            problems.append(
                f"spec.{field}: Invalid value: {json.dumps(v)}: must be greater than or "
                "equal to " + ("1" if field == "activeDeadlineSeconds" else "0")
            )
    if problems:
        return problems
    labels = job_labels(uid, name, legacy)
    sel_key = "controller-uid" if legacy else "batch.kubernetes.io/controller-uid"
    spec["selector"] = {"matchLabels": {sel_key: uid}}
    tmeta = template.setdefault("metadata", {})
    tlabels = dict(tmeta.get("labels") or {})
    tlabels.update(labels)
    tmeta["labels"] = tlabels
    tmeta.setdefault("creationTimestamp", None)
    if not obj["metadata"].get("labels"):
        obj["metadata"]["labels"] = dict(labels)
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    default_pod_spec(pspec)
    obj["metadata"]["generation"] = 1
    obj["status"] = {}
    return []


def cmd_create(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    files = flags.get("filename") or []
    if positional:
        raise KubectlError(f"Unexpected args: [{' '.join(positional)}]\nSee 'kubectl create -h' for help and examples")
    if not files:
        raise KubectlError("error: must specify one of -f and -k")
    if files.count("-") > 1:
        raise KubectlError("error: standard input cannot be used for multiple arguments")
    for f in files:
        if f != "-":
            if not os.path.exists(f):
                raise KubectlError(f'error: the path "{f}" does not exist')
            raise not_supported("create -f FILE (only -f - is implemented)")
    fmt = flags.get("output", "")
    if fmt not in ("", "json", "name"):
        raise KubectlError(PRINTER_ERROR.format(fmt=fmt))
    stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
    inv.check_context()
    if not stdin.strip():
        raise KubectlError("error: no objects passed to create")
    try:
        doc = json.loads(stdin)
    except ValueError as e:
        raise KubectlError(f"error: error parsing STDIN: error converting YAML to JSON: {e}") from None
    if not isinstance(doc, dict):
        raise KubectlError(
            "error: error parsing STDIN: json: cannot unmarshal into Go value of type map[string]interface {}"
        )
    items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else [doc]
    if not items:
        raise KubectlError("error: no objects passed to create")
    errors: List[str] = []
    for item in items:
        try:
            created = create_one(inv, item)
        except KubectlError as e:
            errors.append(e.message)
            continue
        if fmt == "json":
            print_json(created)
        elif fmt == "name":
            rt = BY_KIND.get(created["kind"])
            prefix = rt.name_prefix if rt else "selfsubjectaccessreview.authorization.k8s.io"
            out(f"{prefix}/{created['metadata'].get('name', '')}\n")
        else:
            rt = BY_KIND.get(created["kind"])
            prefix = rt.name_prefix if rt else "selfsubjectaccessreview.authorization.k8s.io"
            out(f"{prefix}/{created['metadata'].get('name', '')} created\n")
    if errors:
        raise KubectlError("\n".join(errors))
    return 0


def create_one(inv: Invocation, obj: dict) -> dict:
    if not isinstance(obj, dict):
        raise KubectlError('error: unable to decode "STDIN": object is not a JSON object')
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if not kind:
        raise KubectlError(f"error: unable to decode \"STDIN\": Object 'Kind' is missing in '{json.dumps(obj)}'")
    if not api_version:
        raise KubectlError(f"error: unable to decode \"STDIN\": Object 'apiVersion' is missing in '{json.dumps(obj)}'")
    obj = copy.deepcopy(obj)
    md = obj.setdefault("metadata", {})
    name = md.get("name", "")
    if CREATABLE.get(kind) != api_version:
        real_kinds = {
            "Pod": "v1",
            "RuntimeClass": "node.k8s.io/v1",
            "Node": "v1",
            "Event": "v1",
            "Secret": "v1",
            "Service": "v1",
            "ServiceAccount": "v1",
            "Deployment": "apps/v1",
            "Role": "rbac.authorization.k8s.io/v1",
            "ResourceQuota": "v1",
            "LimitRange": "v1",
            "RoleBinding": "rbac.authorization.k8s.io/v1",
            "PersistentVolumeClaim": "v1",
        }
        if real_kinds.get(kind) == api_version:
            raise not_supported(f"creating kind {kind!r}")
        raise KubectlError(
            f'error: resource mapping not found for name: "{name}" namespace: "{md.get("namespace", "")}" '
            f'from "STDIN": no matches for kind "{kind}" in version "{api_version}"\n'
            "ensure CRDs are installed first"
        )
    if kind == "SelfSubjectAccessReview":
        return create_ssar(inv, obj)
    rt = BY_KIND[kind]
    ctx = 'error when creating "STDIN": '
    if rt.namespaced:
        obj_ns = md.get("namespace")
        if obj_ns and inv.namespace_flag and obj_ns != inv.namespace_flag:
            raise KubectlError(
                f'error: the namespace from the provided object "{obj_ns}" does not match '
                f'the namespace "{inv.namespace_flag}". You must pass '
                f"'--namespace={obj_ns}' to perform this operation."
            )
        md["namespace"] = obj_ns or inv.namespace
    else:
        md.pop("namespace", None)
    namespace = md.get("namespace", "")
    result: Dict[str, dict] = {}

    def apply() -> None:
        result["obj"] = store_new_object(inv, rt, obj, ctx)

    inv.api_call(("create", kind), verb="create", rt=rt, name="", namespace=namespace, create_ctx=ctx, apply=apply)
    return result["obj"]


def store_new_object(inv: Invocation, rt: ResType, obj: dict, ctx: str) -> dict:
    md = obj["metadata"]
    name = md.get("name", "")
    if md.get("resourceVersion"):
        raise KubectlError(
            f"Error from server (BadRequest): {ctx}resourceVersion should not be set on objects to be created"
        )
    uid = str(uuid.uuid4())
    legacy = bool(inv.faults.get("legacy_labels"))
    if rt.kind == "Job":
        problems = prepare_job(obj, uid, legacy)
    elif rt.kind == "Namespace":
        problems = validate_metadata(obj, label_name=True)
    else:
        problems = validate_metadata(obj, label_name=False)
        size = sum(len(k) + len(str(v)) for k, v in (obj.get("data") or {}).items())
        if size > 1048576:
            problems.append("[]: Too long: must have at most 1048576 bytes")
    if problems:
        raise invalid(rt.kind, name, problems)
    warnings: List[str] = []
    with inv.store.tx() as tx:
        if rt.namespaced:
            ns_obj = tx.get("Namespace", None, md["namespace"])
            if ns_obj is None:
                raise KubectlError(f'Error from server (NotFound): {ctx}namespaces "{md["namespace"]}" not found')
            if ns_obj["metadata"].get("deletionTimestamp"):
                raise KubectlError(
                    f'Error from server (Forbidden): {ctx}{rt.qualified} "{name}" is forbidden: unable to '
                    f"create new content in namespace {md['namespace']} because it is being terminated"
                )
            if rt.kind == "Job" and namespace_enforces_restricted(ns_obj):
                v = pod_security_violations(obj["spec"]["template"]["spec"])
                if v:
                    warnings.append(f'Warning: would violate PodSecurity "restricted:latest": {", ".join(v)}')
        existing = tx.get(rt.kind, md.get("namespace"), name)
        if existing is not None:
            raise KubectlError(f'Error from server (AlreadyExists): {ctx}{rt.qualified} "{name}" already exists')
        md["uid"] = uid
        md["creationTimestamp"] = now_ts(tx.now)
        if rt.kind == "Namespace":
            labels = dict(md.get("labels") or {})
            labels["kubernetes.io/metadata.name"] = name
            md["labels"] = labels
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        tx.put(obj)
        created = copy.deepcopy(obj)
    for w in warnings:
        err(w)
    if rt.kind == "Job":
        spawn_controller(inv.state, md["namespace"], name, uid)
    return created


def create_ssar(inv: Invocation, obj: dict) -> dict:
    attrs = (obj.get("spec") or {}).get("resourceAttributes") or {}
    verb = attrs.get("verb", "")
    resource = attrs.get("resource", "")
    if attrs.get("subresource"):
        resource = f"{resource}/{attrs['subresource']}"
    ctx = 'error when creating "STDIN": '
    result: Dict[str, dict] = {}

    def apply() -> None:
        allowed = not is_forbidden(inv.cluster, verb, resource)
        out_obj = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "metadata": {"creationTimestamp": None},
            "spec": copy.deepcopy(obj.get("spec") or {}),
            "status": {"allowed": allowed},
        }
        if allowed:
            out_obj["status"]["reason"] = (
                f'RBAC: allowed by ClusterRoleBinding "fake-admin" of ClusterRole "cluster-admin" to User "{FAKE_USER}"'
            )
        else:
            out_obj["status"]["reason"] = "fake cluster: denied by the test's forbidden list"
        result["obj"] = out_obj

    inv.api_call(("create", "SelfSubjectAccessReview"), create_ctx=ctx, apply=apply)
    return result["obj"]


def spawn_controller(state: str, namespace: str, job: str, uid: str) -> None:
    """Start the detached Job controller/kubelet simulation for one Job."""
    cdir = os.path.join(state, "controllers")
    os.makedirs(cdir, exist_ok=True)
    token = f"{namespace}__{job}__{uid[:8]}"
    write_json_atomic(
        os.path.join(cdir, token + ".json"), {"namespace": namespace, "job": job, "uid": uid, "started": time.time()}
    )
    env = dict(os.environ)
    env[CONTROLLER_ENV] = json.dumps({"namespace": namespace, "job": job, "uid": uid, "token": token})
    env[STATE_ENV] = state
    with open(os.path.join(cdir, token + ".log"), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-B", os.path.abspath(__file__)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=state,
            start_new_session=True,
            close_fds=True,
        )
    with open(os.path.join(cdir, token + ".pid"), "w", encoding="utf-8") as f:
        f.write(str(proc.pid))
    # Detached on purpose: this kubectl process exits without waiting for it.  Marking it as
    # reaped keeps Python from warning "subprocess is still running" at exit.
    proc.returncode = 0


# --------------------------------------------------------------------------- command: delete


def cmd_delete(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    if not positional:
        raise KubectlError(
            "error: You must provide one or more resources by argument or filename.\n"
            "Example resource specifications include:\n   '-f rsrc.yaml'\n"
            "   '--filename=rsrc.json'\n   '<resource> <name>'\n   '<resource>'"
        )
    cascade = flags.get("cascade", "background")
    if cascade in ("true", "false"):
        err(
            f"warning: --cascade={cascade} is deprecated (boolean value) and can be replaced with "
            f"--cascade={'background' if cascade == 'true' else 'orphan'}."
        )
        cascade = "background" if cascade == "true" else "orphan"
    if cascade not in ("background", "foreground", "orphan"):
        raise KubectlError(f'error: invalid cascade value ({cascade}). Must be "background", "foreground", or "orphan"')
    wait = flags.get("wait", True)
    ignore_nf = bool(flags.get("ignore-not-found"))
    if "/" in positional[0]:
        pairs = []
        for p in positional:
            t, _, n = p.partition("/")
            pairs.append((t, n))
    else:
        if len(positional) < 2:
            raise not_supported("delete without a resource name (delete TYPE NAME)")
        pairs = [(positional[0], n) for n in positional[1:]]
    inv.check_context()
    errors: List[str] = []
    deleted: List[Tuple[ResType, str]] = []
    for t, n in pairs:
        rt = lookup_type(t)
        result: Dict[str, bool] = {}

        def apply(rt: Optional[ResType] = rt, n: str = n, result: Dict[str, bool] = result) -> None:
            assert rt is not None
            result["deleted"] = delete_object(inv, rt, n, cascade)

        try:
            if rt is None:
                inv.api_call(("delete", t))
                resolve_type(t)
            assert rt is not None
            if rt.kind not in ("Job", "Namespace"):
                raise not_supported(f"delete {rt.resource}")
            inv.api_call(
                ("delete", t),
                verb="delete",
                rt=rt,
                name=n,
                namespace=inv.namespace if rt.namespaced else "",
                apply=apply,
            )
        except KubectlError as e:
            errors.append(e.message)
            continue
        if result.get("deleted"):
            out(f'{rt.name_prefix} "{n}" deleted\n')
            deleted.append((rt, n))
        elif not ignore_nf:
            errors.append(not_found(rt, n))
    if wait:
        for rt, n in deleted:
            wait_gone(inv, rt, n)
    if errors:
        raise KubectlError("\n".join(errors))
    return 0


def delete_object(inv: Invocation, rt: ResType, name: str, cascade: str) -> bool:
    """Perform a delete; returns False if the object does not exist."""
    ns = inv.namespace if rt.namespaced else None
    with inv.store.tx() as tx:
        obj = tx.get(rt.kind, ns, name)
        if obj is None:
            return False
        if rt.kind == "Namespace":
            if name in ("default", "kube-system", "kube-public"):
                raise KubectlError(
                    f'Error from server (Forbidden): namespaces "{name}" is forbidden: '
                    "this namespace may not be deleted"
                )
            if obj["metadata"].get("deletionTimestamp"):
                raise KubectlError(
                    f'Error from server (Conflict): Operation cannot be fulfilled on namespaces "{name}": '
                    "The system is ensuring all content is removed from this namespace.  Upon completion, "
                    "this namespace will automatically be purged by the system."
                )
            delete_namespace(tx, obj, bool(inv.faults.get("namespace_stuck")))
        else:
            delete_job(tx, obj, cascade)
    return True


def delete_namespace(tx: Tx, obj: dict, stuck: bool) -> None:
    name = obj["metadata"]["name"]
    obj["metadata"]["deletionTimestamp"] = now_ts(tx.now)
    obj["status"] = {"phase": "Terminating"}
    if not stuck:
        tx.vanish_later(obj)
        return
    # Stuck: pods keep their job-tracking finalizer and stay Terminating, so the namespace
    # never goes away -- the classic "namespace stuck in Terminating".
    remaining = 0
    for o in list(tx.objects.values()):
        if o["metadata"].get("namespace") != name:
            continue
        if o["kind"] == "Pod":
            o["metadata"].setdefault("deletionTimestamp", now_ts(tx.now))
            o["metadata"]["deletionGracePeriodSeconds"] = 0
            fins = o["metadata"].setdefault("finalizers", [])
            if JOB_TRACKING_FINALIZER not in fins:
                fins.append(JOB_TRACKING_FINALIZER)
            tx.put(o)
            remaining += 1
        else:
            tx.remove(o)
    t = now_ts(tx.now)
    obj["status"]["conditions"] = [
        {
            "type": "NamespaceDeletionDiscoveryFailure",
            "status": "False",
            "reason": "ResourcesDiscovered",
            "message": "All resources successfully discovered",
            "lastTransitionTime": t,
        },
        {
            "type": "NamespaceContentRemaining",
            "status": "True",
            "reason": "SomeResourcesRemain",
            "message": f"Some resources are remaining: pods. has {remaining} resource instances",
            "lastTransitionTime": t,
        },
        {
            "type": "NamespaceFinalizersRemaining",
            "status": "True",
            "reason": "SomeFinalizersRemain",
            "message": f"Some content in the namespace has finalizers remaining: {JOB_TRACKING_FINALIZER} "
            f"in {remaining} resource instances",
            "lastTransitionTime": t,
        },
    ]
    obj["spec"] = {"finalizers": ["kubernetes"]}
    tx.put(obj)


def delete_job(tx: Tx, job: dict, cascade: str) -> None:
    ns = job["metadata"]["namespace"]
    uid = job["metadata"]["uid"]
    pods = [
        p for p in tx.list("Pod", ns) if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
    ]
    if cascade == "orphan":
        for p in pods:
            p["metadata"]["ownerReferences"] = [r for r in p["metadata"]["ownerReferences"] if r.get("uid") != uid]
            tx.put(p)
        tx.remove(job)
    elif cascade == "foreground":
        for p in pods:
            tx.remove(p)
        job["metadata"]["finalizers"] = ["foregroundDeletion"]
        tx.vanish_later(job)
    else:
        for p in pods:
            p["metadata"].pop("finalizers", None)
            tx.vanish_later(p, 0.1)
        tx.remove(job)


def wait_gone(inv: Invocation, rt: ResType, name: str) -> None:
    ns = inv.namespace if rt.namespaced else None
    deadline = time.monotonic() + DELETE_WAIT_CAP_SECONDS
    while time.monotonic() < deadline:
        objs = inv.store.snapshot()
        if obj_key(rt.kind, ns, name) not in objs:
            return
        time.sleep(POLL_SECONDS)
    raise KubectlError(f"error: timed out waiting for the condition on {rt.resource}/{name}")


# --------------------------------------------------------------------------- command: logs


def log_path(state: str, namespace: str, pod: str) -> str:
    return os.path.join(state, "logs", namespace, pod + ".log")


def cmd_logs(inv: Invocation, flags: Dict[str, Any], positional: List[str]) -> int:
    sel_text = flags.get("selector")
    container = flags.get("container")
    if sel_text is not None and positional:
        raise KubectlError(
            "error: only a selector (-l) or a POD name is allowed\nSee 'kubectl logs -h' for help and examples"
        )
    if sel_text is None and not 1 <= len(positional) <= 2:
        raise KubectlError(
            "error: expected 'logs [-f] [-p] (POD | TYPE/NAME) [-c CONTAINER]'.\n"
            "POD or TYPE/NAME is a required argument for the logs command\n"
            "See 'kubectl logs -h' for help and examples"
        )
    if len(positional) == 2:
        if container:
            raise KubectlError(
                "error: only one of -c or an inline [CONTAINER] arg is allowed\n"
                "See 'kubectl logs -h' for help and examples"
            )
        container = positional[1]
    tail = flags.get("tail", -1)
    if sel_text is not None and "tail" not in flags:
        tail = 10
    inv.check_context()
    objs = inv.store.snapshot()
    prt = BY_KIND["Pod"]
    if sel_text is not None:
        inv.api_call(("logs", "logs"), verb="get", rt=prt, namespace=inv.namespace, rbac=False)
        selector = parse_selector(sel_text)
        pods = select_objects(objs, prt, inv.namespace, None, selector)
        if not pods:
            err(f"No resources found in {inv.namespace} namespace.")
            return 0
    else:
        target = positional[0]
        if "/" in target:
            t, _, n = target.partition("/")
            if lookup_type(t) is not prt:
                raise not_supported(f"logs {t}/NAME (only pods)")
            target = n
        inv.api_call(("logs", "logs"), verb="get", rt=prt, name=target, namespace=inv.namespace, rbac=False)
        pods = select_objects(objs, prt, inv.namespace, target, None)
        if not pods:
            raise KubectlError(not_found(prt, target))
    index_of = pod_indices(inv.state)
    unavailable = {int(i) for i in inv.faults.get("logs_unavailable") or []}
    for pod in pods:
        name = pod["metadata"]["name"]
        inv.check_rbac("get", "pods/log", prt, name, inv.namespace)
        try:
            text = read_pod_log(inv, pod, container, index_of.get((inv.namespace, name)), unavailable)
        except KubectlError as e:
            if flags.get("ignore-errors") and sel_text is not None:
                msg = e.message
                if msg.startswith("Error from server ("):
                    msg = msg.split("): ", 1)[-1]
                out("error: " + msg + "\n")
                continue
            raise
        lines = text.splitlines(keepends=True)
        if tail is not None and tail >= 0:
            lines = lines[-tail:] if tail else []
        cname = container or pod["spec"]["containers"][0]["name"]
        if flags.get("prefix"):
            lines = [f"[pod/{name}/{cname}] {ln}" for ln in lines]
        out("".join(lines))
    return 0


def pod_indices(state: str) -> Dict[Tuple[str, str], int]:
    """(namespace, pod) -> creation index within its job, from the controllers' records."""
    result: Dict[Tuple[str, str], int] = {}
    cdir = os.path.join(state, "controllers")
    try:
        names = os.listdir(cdir)
    except OSError:
        return result
    for fn in names:
        if fn.endswith(".stats.json"):
            rec = read_json(os.path.join(cdir, fn), {}) or {}
            for i, pod in enumerate(rec.get("pods") or []):
                result[(rec.get("namespace", ""), pod)] = i
    return result


def read_pod_log(inv: Invocation, pod: dict, container: Optional[str], index: Optional[int], unavailable: set) -> str:
    name = pod["metadata"]["name"]
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    if container is None and len(names) > 1:
        raise KubectlError(
            f"error: a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
        )
    if container is not None and container not in names:
        raise KubectlError(f"Error from server (BadRequest): container {container} is not valid for pod {name}")
    cname = container or names[0]
    if index is not None and index in unavailable:
        raise KubectlError(
            f"Error from server (InternalError): Internal error occurred: failed to read log of pod {name}"
        )
    path = log_path(inv.state, inv.namespace, name)
    started = any(
        "running" in (c.get("state") or {}) or "terminated" in (c.get("state") or {})
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    )
    if not started and not os.path.exists(path):
        raise KubectlError(
            f'Error from server (BadRequest): container "{cname}" in pod "{name}" is '
            "waiting to start: ContainerCreating"
        )
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


# --------------------------------------------------------------------------- the simulated controller


class PodSim:
    """One pod of a Job as the job controller + scheduler + kubelet see it."""

    def __init__(self, index: int, name: str, modes: List[str]) -> None:
        self.index = index
        self.name = name
        self.modes = modes
        self.stage = "created"  # created|unschedulable|scheduled|running|finishing|done
        self.outcome = ""  # Succeeded|Failed|Replaced
        self.proc: Optional[subprocess.Popen] = None
        self.node: Optional[str] = None
        self.started = 0.0
        self.finished_worker = 0.0
        self.next_try = 0.0
        self.workdir = ""
        self.mount_reported = False


class JobController:
    def __init__(self, state: str, namespace: str, job: str, uid: str, token: str, faults: dict) -> None:
        self.state = state
        self.ns = namespace
        self.job_name = job
        self.uid = uid
        self.token = token
        self.faults = faults
        self.store = Store(state)
        self.sims: List[PodSim] = []
        self.created = 0
        self.peak = 0
        self.started = time.time()
        self.max_seconds = float(os.environ.get(CONTROLLER_MAX_ENV, "600"))
        self.next_create_try = 0.0
        self.failed_create_reported = False
        self.rr = 0
        self.image_ids: Dict[str, str] = {}
        self.stats_path = os.path.join(state, "controllers", f"{namespace}__{job}.stats.json")
        self.pod_names: List[str] = []
        self.completed_at: Optional[float] = None

    # -- helpers -------------------------------------------------------------

    def job(self) -> Optional[dict]:
        objs = self.store.snapshot()
        j = objs.get(obj_key("Job", self.ns, self.job_name))
        if j is None or j["metadata"].get("uid") != self.uid:
            return None
        return j

    def write_stats(self) -> None:
        write_json_atomic(
            self.stats_path,
            {
                "namespace": self.ns,
                "job": self.job_name,
                "uid": self.uid,
                "max_concurrent": self.peak,
                "pods": self.pod_names,
                "completed_at": self.completed_at,
            },
        )

    def event(
        self,
        tx: Tx,
        involved: dict,
        reason: str,
        message: str,
        etype: str = "Normal",
        component: str = "job-controller",
        field_path: Optional[str] = None,
    ) -> None:
        md = involved["metadata"]
        t = now_ts(tx.now)
        inv_ref = {
            "kind": involved["kind"],
            "name": md["name"],
            "namespace": md.get("namespace", self.ns),
            "uid": md.get("uid", ""),
            "apiVersion": involved.get("apiVersion", "v1"),
            "resourceVersion": md.get("resourceVersion", ""),
        }
        if field_path:
            inv_ref["fieldPath"] = field_path
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{md['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": self.ns,
                "creationTimestamp": t,
                "uid": str(uuid.uuid4()),
            },
            "involvedObject": inv_ref,
            "reason": reason,
            "message": message,
            "type": etype,
            "firstTimestamp": t,
            "lastTimestamp": t,
            "count": 1,
            "source": {"component": component}
            if component != "kubelet"
            else {"component": "kubelet", "host": self.sim_node_for(md["name"]) or ""},
            "reportingComponent": component,
            "reportingInstance": "",
        }
        tx.put(ev)

    def sim_node_for(self, pod: str) -> Optional[str]:
        for s in self.sims:
            if s.name == pod:
                return s.node
        return None

    def image_id(self, image: str) -> str:
        if image not in self.image_ids:
            repo = image.split("@", maxsplit=1)[0]
            last = repo.rsplit("/", 1)[-1]
            if ":" in last:
                repo = repo[: len(repo) - len(last)] + last.split(":")[0]
            first = repo.split("/")[0]
            if "/" not in repo:
                repo = "docker.io/library/" + repo
            elif "." not in first and ":" not in first and first != "localhost":
                repo = "docker.io/" + repo
            self.image_ids[image] = f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"
        return self.image_ids[image]

    def update_pod(self, sim: PodSim, fn: Callable[[Tx, dict], None]) -> bool:
        """Apply ``fn`` to the stored pod; False if the pod is gone."""
        with self.store.tx() as tx:
            pod = tx.get("Pod", self.ns, sim.name)
            if pod is None:
                return False
            fn(tx, pod)
            tx.put(pod)
            return True

    # -- main loop -------------------------------------------------------------

    def run(self) -> None:
        job = self.job()
        if job is None:
            return
        spec = job["spec"]
        self.completions = int(spec.get("completions", 1))
        self.parallelism = int(spec.get("parallelism", 1))
        self.backoff_limit = int(spec.get("backoffLimit", 6))
        deadline = self.faults.get("deadline_seconds", spec.get("activeDeadlineSeconds"))
        self.deadline = float(deadline) if deadline is not None else None
        self.template = job["spec"]["template"]
        self.write_stats()
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            j["status"] = {
                "startTime": now_ts(self.started),
                "active": 0,
                "ready": 0,
                "terminating": 0,
                "uncountedTerminatedPods": {},
            }
            tx.put(self.clean_status(j))
        try:
            while True:
                if not os.path.isdir(self.state) or time.time() - self.started > self.max_seconds:
                    return
                if not self.tick():
                    return
                time.sleep(POLL_SECONDS)
        finally:
            for sim in self.sims:
                self.kill(sim)

    def tick(self) -> bool:
        job = self.job()
        now = time.time()
        if job is None or job["metadata"].get("deletionTimestamp"):
            return False
        ns_obj = self.store.snapshot().get(obj_key("Namespace", None, self.ns))
        if ns_obj is None or ns_obj["metadata"].get("deletionTimestamp"):
            return False
        if self.deadline is not None and now - self.started >= self.deadline:
            self.finish_failed("DeadlineExceeded", "Job was active longer than specified deadline")
            return False
        for sim in self.sims:
            if sim.stage != "done":
                self.advance(sim, now)
        running = sum(1 for s in self.sims if s.stage in ("running", "finishing"))
        if running > self.peak:
            self.peak = running
            self.write_stats()
        succeeded = sum(1 for s in self.sims if s.outcome == "Succeeded")
        failed = sum(1 for s in self.sims if s.outcome == "Failed")
        if failed > self.backoff_limit:
            self.finish_failed("BackoffLimitExceeded", "Job has reached the specified backoff limit")
            return False
        if succeeded >= self.completions:
            self.finish_complete()
            return False
        active = [s for s in self.sims if s.stage != "done"]
        want = min(self.parallelism, self.completions - succeeded) - len(active)
        if want > 0 and now >= self.next_create_try:
            for _ in range(want):
                if not self.create_pod():
                    self.next_create_try = now + 1.0
                    break
        self.sync_status()
        return True

    def clean_status(self, job: dict) -> dict:
        st = job["status"]
        for k in ("active", "succeeded", "failed"):
            if not st.get(k):
                st.pop(k, None)
        return job

    def sync_status(self) -> None:
        active = sum(1 for s in self.sims if s.stage != "done")
        ready = sum(1 for s in self.sims if s.stage in ("running", "finishing"))
        succeeded = sum(1 for s in self.sims if s.outcome == "Succeeded")
        failed = sum(1 for s in self.sims if s.outcome == "Failed")
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            st = j.setdefault("status", {})
            new = dict(st)
            new.update(
                {
                    "active": active,
                    "ready": ready,
                    "succeeded": succeeded,
                    "failed": failed,
                    "terminating": 0,
                    "uncountedTerminatedPods": {},
                }
            )
            for k in ("active", "succeeded", "failed"):
                if not new.get(k):
                    new.pop(k, None)
            if new != st:
                j["status"] = new
                tx.put(j)

    # -- pod creation ------------------------------------------------------------

    def create_pod(self) -> bool:
        name = f"{self.job_name}-{random_suffix()}"
        tpl = copy.deepcopy(self.template)
        pspec = tpl.get("spec") or {}
        with self.store.tx() as tx:
            job = tx.get("Job", self.ns, self.job_name)
            ns_obj = tx.get("Namespace", None, self.ns)
            if (
                job is None
                or job["metadata"].get("deletionTimestamp")
                or ns_obj is None
                or ns_obj["metadata"].get("deletionTimestamp")
            ):
                return False
            problem = None
            if namespace_enforces_restricted(ns_obj):
                v = pod_security_violations(pspec)
                if v:
                    problem = (
                        f'Error creating: pods "{name}" is forbidden: violates PodSecurity '
                        f'"restricted:latest": {", ".join(v)}'
                    )
            rc_name = pspec.get("runtimeClassName")
            rc = tx.get("RuntimeClass", None, rc_name) if rc_name else None
            if problem is None and rc_name and rc is None:
                problem = (
                    f'Error creating: pods "{name}" is forbidden: pod rejected: RuntimeClass "{rc_name}" not found'
                )
            if problem is not None:
                if not self.failed_create_reported:
                    self.event(tx, job, "FailedCreate", problem, "Warning")
                    self.failed_create_reported = True
                return False
            labels = dict((tpl.get("metadata") or {}).get("labels") or {})
            labels.update(job_labels(self.uid, self.job_name, bool(self.faults.get("legacy_labels"))))
            meta = {
                "name": name,
                "namespace": self.ns,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": now_ts(tx.now),
                "labels": labels,
                "generateName": f"{self.job_name}-",
                "finalizers": [JOB_TRACKING_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": self.job_name,
                        "uid": self.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            }
            annotations = (tpl.get("metadata") or {}).get("annotations")
            if annotations:
                meta["annotations"] = dict(annotations)
            spec = copy.deepcopy(pspec)
            default_pod_spec(spec)
            spec.setdefault("serviceAccountName", "default")
            spec.setdefault("serviceAccount", spec["serviceAccountName"])
            spec.setdefault("enableServiceLinks", True)
            spec.setdefault("priority", 0)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
            spec.setdefault(
                "tolerations",
                [
                    {
                        "key": "node.kubernetes.io/not-ready",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    },
                    {
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    },
                ],
            )
            if rc is not None and (rc.get("overhead") or {}).get("podFixed"):
                spec["overhead"] = copy.deepcopy(rc["overhead"]["podFixed"])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": spec,
                "status": {"phase": "Pending", "qosClass": qos_class(spec)},
            }
            tx.put(pod)
            self.event(tx, job, "SuccessfulCreate", f"Created pod: {name}")
        sim = PodSim(self.created, name, episode_modes(self.faults, self.created))
        self.created += 1
        self.sims.append(sim)
        self.pod_names.append(name)
        self.write_stats()
        return True

    # -- pod lifecycle ---------------------------------------------------------------

    def advance(self, sim: PodSim, now: float) -> None:
        if sim.stage in ("created", "unschedulable"):
            if now >= sim.next_try:
                self.schedule(sim, now)
        elif sim.stage == "scheduled":
            if now >= sim.next_try:
                self.start(sim, now)
        elif sim.stage == "running" and sim.proc is not None and sim.proc.poll() is not None:
            sim.finished_worker = now
            sim.stage = "finishing"
        if sim.stage == "finishing":
            extra = float(self.faults.get("episode_seconds") or 0)
            if now - sim.finished_worker >= extra:
                self.finish(sim)

    def schedule(self, sim: PodSim, now: float) -> None:
        snap = self.store.snapshot()
        pod = snap.get(obj_key("Pod", self.ns, sim.name))
        if pod is None:
            sim.stage, sim.outcome = "done", "Failed"
            return
        reason = None
        node_name = None
        if "pending" in sim.modes:
            nodes = [o for o in snap.values() if o["kind"] == "Node"]
            reason = (
                f"0/{len(nodes)} nodes are available: {len(nodes)} Insufficient cpu. preemption: "
                f"0/{len(nodes)} nodes are available: {len(nodes)} No preemption victims found "
                "for incoming pod."
            )
        else:
            node_name, reason = self.pick_node(snap, pod)
        if node_name is None:
            sim.next_try = now + 1.0
            first = sim.stage == "created"
            sim.stage = "unschedulable"
            if first:

                def mark(tx: Tx, p: dict) -> None:
                    p["status"]["conditions"] = [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": reason,
                            "lastProbeTime": None,
                            "lastTransitionTime": now_ts(tx.now),
                        }
                    ]
                    self.event(tx, p, "FailedScheduling", reason or "", "Warning", "default-scheduler")

                self.update_pod(sim, mark)
            return
        sim.node = node_name

        def bind(tx: Tx, p: dict) -> None:
            p["spec"]["nodeName"] = node_name
            p["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now_ts(tx.now)}
            ]
            self.event(
                tx,
                p,
                "Scheduled",
                f"Successfully assigned {self.ns}/{sim.name} to {node_name}",
                "Normal",
                "default-scheduler",
            )

        if self.update_pod(sim, bind):
            sim.stage = "scheduled"
            sim.next_try = 0.0
        else:
            sim.stage, sim.outcome = "done", "Failed"

    def pick_node(self, snap: Dict[str, dict], pod: dict) -> Tuple[Optional[str], Optional[str]]:
        nodes = sorted((o for o in snap.values() if o["kind"] == "Node"), key=lambda o: o["metadata"]["name"])
        if not nodes:
            return None, "no nodes available to schedule pods"
        need = pod_requests(pod["spec"])
        reasons: Dict[str, int] = {}
        fits = []
        for node in nodes:
            if (node.get("spec") or {}).get("unschedulable"):
                reasons["node(s) were unschedulable"] = reasons.get("node(s) were unschedulable", 0) + 1
                continue
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
            if not ready:
                reasons["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"] = (
                    reasons.get("node(s) had untolerated taint {node.kubernetes.io/not-ready: }", 0) + 1
                )
                continue
            alloc = (node.get("status") or {}).get("allocatable") or {}
            used = {"cpu": 0.0, "memory": 0.0}
            for o in snap.values():
                if (
                    o["kind"] == "Pod"
                    and o["spec"].get("nodeName") == node["metadata"]["name"]
                    and (o.get("status") or {}).get("phase") in ("Pending", "Running")
                ):
                    r = pod_requests(o["spec"])
                    used["cpu"] += r["cpu"]
                    used["memory"] += r["memory"]
            short = [
                res
                for res in ("cpu", "memory")
                if res in alloc and used[res] + need[res] > parse_quantity(alloc[res]) + 1e-9
            ]
            if short:
                for res in short:
                    reasons[f"Insufficient {res}"] = reasons.get(f"Insufficient {res}", 0) + 1
                continue
            fits.append(node["metadata"]["name"])
        if not fits:
            detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            return None, (
                f"0/{len(nodes)} nodes are available: {detail}. preemption: 0/{len(nodes)} "
                "nodes are available: No preemption victims found for incoming pod."
            )
        choice = fits[self.rr % len(fits)]
        self.rr += 1
        return choice, None

    def start(self, sim: PodSim, now: float) -> None:
        snap = self.store.snapshot()
        pod = snap.get(obj_key("Pod", self.ns, sim.name))
        if pod is None:
            sim.stage, sim.outcome = "done", "Failed"
            return
        spec = pod["spec"]
        container = spec["containers"][0]
        script = None
        problem = None
        for vol in spec.get("volumes") or []:
            cm_ref = vol.get("configMap")
            if not cm_ref:
                continue
            cm = snap.get(obj_key("ConfigMap", self.ns, cm_ref.get("name", "")))
            if cm is None:
                problem = (
                    f'MountVolume.SetUp failed for volume "{vol.get("name")}" : '
                    f'configmap "{cm_ref.get("name")}" not found'
                )
                break
            data = cm.get("data") or {}
            if "episode.py" in data:
                script = data["episode.py"]
            elif len(data) == 1:
                script = next(iter(data.values()))
        if problem is None and script is None:
            problem = (
                "fake_kubectl: the pod template mounts no ConfigMap with an episode.py key, so "
                "there is no episode to run"
            )
        if problem is not None:
            sim.next_try = now + 1.0
            if not sim.mount_reported:
                sim.mount_reported = True
                self.update_pod(
                    sim, lambda tx, p: self.event(tx, p, "FailedMount", problem or "", "Warning", "kubelet")
                )
            return
        sim.workdir = os.path.join(self.state, "work", self.ns, sim.name)
        workspace = os.path.join(sim.workdir, "workspace")
        os.makedirs(workspace, exist_ok=True)
        script_path = os.path.join(sim.workdir, "episode.py")
        with open(script_path, "w", encoding="utf-8") as f:
            f.write(script or "")
        term_path = os.path.join(sim.workdir, "termination-log")
        open(term_path, "w").close()
        env = {"EPISODE_ID": sim.name, "HOSTNAME": sim.name}
        for e in container.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("fieldRef"):
                val = resolve_field_ref(pod, e["valueFrom"]["fieldRef"].get("fieldPath", ""), sim.node)
                if val is not None:
                    env[e["name"]] = val
        env.update(
            {
                "RL_DEMO_WORKSPACE": workspace,
                "RL_DEMO_TERMINATION_LOG": term_path,
                "PATH": os.environ.get("PATH", os.defpath),
            }
        )
        if "wrong_id" in sim.modes:
            env["EPISODE_ID"] = "someone-else"
        lp = log_path(self.state, self.ns, sim.name)
        os.makedirs(os.path.dirname(lp), exist_ok=True)
        image = container.get("image", "")

        def running(tx: Tx, p: dict) -> None:
            t = now_ts(tx.now)
            for reason, msg in (
                ("Pulled", f'Container image "{image}" already present on machine'),
                ("Created", f"Created container: {container['name']}"),
                ("Started", f"Started container {container['name']}"),
            ):
                self.event(
                    tx, p, reason, msg, "Normal", "kubelet", field_path=f"spec.containers{{{container['name']}}}"
                )
            ip = f"10.244.{random.randint(0, 3)}.{random.randint(2, 254)}"
            host_ip = f"172.18.0.{2 + int(hashlib.md5((sim.node or '').encode()).hexdigest(), 16) % 200}"
            p["status"].update(
                {
                    "phase": "Running",
                    "startTime": t,
                    "hostIP": host_ip,
                    "hostIPs": [{"ip": host_ip}],
                    "podIP": ip,
                    "podIPs": [{"ip": ip}],
                    "conditions": [
                        {
                            "type": "PodReadyToStartContainers",
                            "status": "True",
                            "lastProbeTime": None,
                            "lastTransitionTime": t,
                        },
                        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
                        {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
                        {"type": "ContainersReady", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
                        *[c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"],
                    ],
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "image": image,
                            "imageID": self.image_id(image),
                            "containerID": "containerd://" + hashlib.sha256(sim.name.encode()).hexdigest(),
                            "restartCount": 0,
                            "ready": True,
                            "started": True,
                            "state": {"running": {"startedAt": t}},
                            "lastState": {},
                        }
                    ],
                }
            )

        sim.started = now
        with open(lp, "wb") as log:
            sim.proc = subprocess.Popen(
                [sys.executable, "-B", script_path],
                cwd=workspace,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=True,
            )
        if not self.update_pod(sim, running):
            self.kill(sim)
            sim.stage, sim.outcome = "done", "Failed"
            return
        sim.stage = "running"

    def kill(self, sim: PodSim) -> None:
        if sim.proc is not None and sim.proc.poll() is None:
            try:
                sim.proc.kill()
                sim.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def finish(self, sim: PodSim) -> None:
        """The worker has exited: publish log, termination message and final pod status."""
        rc = sim.proc.returncode if sim.proc is not None else 1
        lp = log_path(self.state, self.ns, sim.name)
        with open(lp, encoding="utf-8", errors="replace") as f:
            log = f.read()
        term_path = os.path.join(sim.workdir, "termination-log")
        with open(term_path, "rb") as f:
            message = f.read(MAX_TERMINATION_MESSAGE).decode("utf-8", errors="replace")
        log, message, rc = apply_episode_faults(sim.modes, log, message, rc)
        snap = self.store.snapshot()
        pod = snap.get(obj_key("Pod", self.ns, sim.name))
        container = pod["spec"]["containers"][0] if pod else {}
        if not message and rc != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = "\n".join(log.splitlines()[-80:])[-2048:]
        tmp = lp + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(log)
        os.replace(tmp, lp)
        evicted = "evict" in sim.modes
        replaced = "replace" in sim.modes
        phase = "Succeeded" if rc == 0 and not evicted else "Failed"
        if replaced:
            phase = "Failed"
            rc = 137
        sim.outcome = "Replaced" if replaced else phase
        image = container.get("image", "")
        started = now_ts(sim.started)

        def final(tx: Tx, p: dict) -> None:
            t = now_ts(tx.now)
            st = p["status"]
            st["phase"] = phase
            reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
            conds = []
            for old in st.get("conditions") or []:
                c = dict(old)
                if c["type"] in ("Ready", "ContainersReady", "PodReadyToStartContainers"):
                    c.update({"status": "False", "lastTransitionTime": t})
                    if c["type"] != "PodReadyToStartContainers":
                        c["reason"] = reason
                conds.append(c)
            if evicted:
                st["reason"] = "Evicted"
                st["message"] = "The node was low on resource: memory."
                conds.insert(
                    0,
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "TerminationByKubelet",
                        "message": "The node was low on resource: memory.",
                        "lastProbeTime": None,
                        "lastTransitionTime": t,
                    },
                )
                st.pop("containerStatuses", None)
            else:
                term: Dict[str, Any] = {
                    "exitCode": rc,
                    "reason": "Completed" if rc == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": t,
                    "containerID": "containerd://" + hashlib.sha256(sim.name.encode()).hexdigest(),
                }
                if message:
                    term["message"] = message
                cstat: Dict[str, Any] = {
                    "name": container.get("name", "episode"),
                    "image": image,
                    "imageID": self.image_id(image),
                    "containerID": term["containerID"],
                    "restartCount": 0,
                    "ready": False,
                    "started": False,
                    "state": {"terminated": term},
                    "lastState": {},
                }
                if "restart" in sim.modes:
                    cstat["restartCount"] = 1
                    cstat["lastState"] = {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "startedAt": started,
                            "finishedAt": started,
                            "containerID": term["containerID"],
                        }
                    }
                st["containerStatuses"] = [cstat]
            if replaced:
                p["metadata"]["deletionTimestamp"] = t
                p["metadata"]["deletionGracePeriodSeconds"] = 30
                conds.insert(
                    0,
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "DeletionByTaintManager",
                        "message": "Taint manager: deleting due to NoExecute taint",
                        "lastProbeTime": None,
                        "lastTransitionTime": t,
                    },
                )
                self.event(
                    tx,
                    p,
                    "Killing",
                    f"Stopping container {container.get('name', 'episode')}",
                    "Normal",
                    "kubelet",
                    field_path=f"spec.containers{{{container.get('name', 'episode')}}}",
                )
            st["conditions"] = conds

        self.update_pod(sim, final)
        self.update_pod(sim, lambda tx, p: p["metadata"].pop("finalizers", None))
        sim.stage = "done"

    # -- job end ---------------------------------------------------------------------

    def finish_complete(self) -> None:
        self.sync_status()
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            t = now_ts(tx.now)
            j["status"]["conditions"] = [
                job_condition(
                    "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods", t
                )
            ]
            tx.put(self.clean_status(j))
        time.sleep(POLL_SECONDS)
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            t = now_ts(tx.now)
            j["status"]["conditions"].append(
                job_condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods", t)
            )
            j["status"]["completionTime"] = t
            j["status"]["ready"] = 0
            j["status"].pop("active", None)
            tx.put(j)
            self.event(tx, j, "Completed", "Job completed")
        self.completed_at = time.time()  # the moment Complete became visible, for bench/bench.py
        self.write_stats()

    def finish_failed(self, reason: str, message: str) -> None:
        for sim in self.sims:
            self.kill(sim)
        extra_failed = 0
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            t = now_ts(tx.now)
            for sim in self.sims:
                if sim.stage == "done":
                    continue
                sim.stage, sim.outcome = "done", "Failed"
                extra_failed += 1
                p = tx.get("Pod", self.ns, sim.name)
                if p is not None:
                    p["metadata"].pop("finalizers", None)
                    p["status"]["phase"] = "Failed"
                    tx.vanish_later(p)
            st = j["status"]
            st["failed"] = sum(1 for s in self.sims if s.outcome == "Failed")
            st["active"] = 0
            st["ready"] = 0
            st["conditions"] = [job_condition("FailureTarget", reason, message, t)]
            tx.put(self.clean_status(j))
            self.event(tx, j, reason, message, "Warning")
        time.sleep(POLL_SECONDS)
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            t = now_ts(tx.now)
            j["status"]["conditions"].append(job_condition("Failed", reason, message, t))
            tx.put(j)


def qos_class(spec: dict) -> str:
    reqs, lims, any_set = [], [], False
    for c in spec.get("containers") or []:
        r = c.get("resources") or {}
        reqs.append(r.get("requests") or {})
        lims.append(r.get("limits") or {})
        any_set = any_set or bool(r.get("requests") or r.get("limits"))
    if not any_set:
        return "BestEffort"
    guaranteed = all(
        set(lim) >= {"cpu", "memory"} and all(req.get(k, lim[k]) == lim[k] for k in ("cpu", "memory"))
        for req, lim in zip(reqs, lims)
    )
    return "Guaranteed" if guaranteed else "Burstable"


def pod_requests(spec: dict) -> Dict[str, float]:
    total = {"cpu": 0.0, "memory": 0.0}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        req = dict(res.get("limits") or {})
        req.update(res.get("requests") or {})
        for k in total:
            if k in req:
                total[k] += parse_quantity(req[k])
    for k, v in (spec.get("overhead") or {}).items():
        if k in total:
            total[k] += parse_quantity(v)
    return total


def resolve_field_ref(pod: dict, path: str, node: Optional[str]) -> Optional[str]:
    md = pod["metadata"]
    simple = {
        "metadata.name": md["name"],
        "metadata.namespace": md.get("namespace"),
        "metadata.uid": md.get("uid"),
        "spec.nodeName": node,
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
        "status.hostIP": "172.18.0.2",
        "status.podIP": "10.244.0.2",
    }
    if path in simple:
        return simple[path]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return (md.get(m.group(1)) or {}).get(m.group(2))
    return None


def _json_line(line: str) -> Optional[dict]:
    try:
        v = json.loads(line)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def apply_episode_faults(modes: List[str], log: str, message: str, rc: int) -> Tuple[str, str, int]:
    """Transform the real worker's outputs according to the episode fault modes."""

    def lines_of(text: str) -> List[str]:
        return text.splitlines()

    def join(lines: List[str], original: str) -> str:
        if not lines:
            return ""
        return "\n".join(lines) + ("\n" if original.endswith("\n") or original == "" else "")

    def per_text(text: str, fn: Callable[[List[str]], List[str]]) -> str:
        return join(fn(lines_of(text)), text)

    def dup_ready(lines: List[str]) -> List[str]:
        for i, ln in enumerate(lines):
            v = _json_line(ln)
            if v is not None and v.get("event") == "ready":
                return [*lines[: i + 1], ln, *lines[i + 1 :]]
        return lines

    def drop_reward(lines: List[str]) -> List[str]:
        return [ln for ln in lines if (_json_line(ln) or {}).get("event") != "reward"]

    def skew(lines: List[str]) -> List[str]:
        res = []
        for ln in lines:
            v = _json_line(ln)
            if v is not None and isinstance(v.get("at"), (int, float)) and not isinstance(v.get("at"), bool):
                v["at"] = v["at"] - 3600
                res.append(json.dumps(v))
            else:
                res.append(ln)
        return res

    def zero_reward(lines: List[str]) -> List[str]:
        res = []
        for ln in lines:
            v = _json_line(ln)
            if v is not None and v.get("event") == "reward":
                v["reward"] = 0
                res.append(json.dumps(v))
            else:
                res.append(ln)
        return res

    for mode in modes:
        if mode == "exit1":
            rc = 1
        elif mode == "duplicate_ready":
            log, message = per_text(log, dup_ready), per_text(message, dup_ready)
        elif mode == "drop_reward":
            log, message = per_text(log, drop_reward), per_text(message, drop_reward)
        elif mode == "noise":
            log = "WARNING: fake runtime noise\n" + log
        elif mode == "malformed":
            bad = '{"event": "reward", "at": '
            log = log + ("" if log.endswith("\n") or not log else "\n") + bad + "\n"
            message = message + ("" if message.endswith("\n") or not message else "\n") + bad + "\n"
        elif mode == "skew":
            log, message = per_text(log, skew), per_text(message, skew)
        elif mode == "no_message":
            message = ""
        elif mode == "message_mismatch":
            message = per_text(message, zero_reward)
    raw = message.encode("utf-8")
    if len(raw) > MAX_TERMINATION_MESSAGE:
        message = raw[:MAX_TERMINATION_MESSAGE].decode("utf-8", errors="ignore")
    return log, message, rc


def run_controller(spec_json: str) -> int:
    spec = json.loads(spec_json)
    state = os.environ.get(STATE_ENV, "")
    token = spec["token"]
    marker = os.path.join(state, "controllers", token + ".json")
    try:
        faults = load_faults()
    except KubectlError as e:
        print(e.message, file=sys.stderr)
        faults = {}
    ctl = JobController(state, spec["namespace"], spec["job"], spec["uid"], token, faults)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        ctl.run()
    finally:
        with contextlib.suppress(OSError):
            ctl.write_stats()
        with contextlib.suppress(OSError):
            os.remove(marker)
    return 0


# --------------------------------------------------------------------------- entry point


def dispatch(argv: List[str], state: str, faults: dict) -> int:
    command, rest = split_command(argv)
    if command is None:
        # no command (perhaps only global flags): kubectl prints its help and exits 0
        out("kubectl controls the Kubernetes cluster manager (fake_kubectl test double).\n")
        return 0
    if command == "config":
        sub, sub_rest = split_command(rest)
        if sub is None:
            raise KubectlError('error: fake_kubectl supports only "kubectl config current-context"')
        if sub == "view":
            flags, positional = parse_flags(sub_rest, GLOBAL_FLAGS + COMMAND_FLAGS["config view"], "config view")
            return cmd_config_view(Invocation(state, "config view", flags, faults), flags, positional)
        if sub != "current-context":
            known = {
                "delete-cluster",
                "delete-context",
                "delete-user",
                "get-clusters",
                "get-contexts",
                "get-users",
                "rename-context",
                "set",
                "set-cluster",
                "set-context",
                "set-credentials",
                "unset",
                "use-context",
            }
            if sub in known:
                raise not_supported(f"kubectl config {sub}")
            raise KubectlError(f"error: unknown command \"{sub}\"\nSee 'kubectl config -h' for help and examples")
        cmdpath = "config current-context"
        flags, positional = parse_flags(sub_rest, GLOBAL_FLAGS + COMMAND_FLAGS[cmdpath], cmdpath)
        inv = Invocation(state, cmdpath, flags, faults)
        return cmd_config(inv, positional)
    if command not in COMMAND_FLAGS:
        if command in REAL_COMMANDS:
            raise KubectlError(
                f'error: unknown command "{command}" for "kubectl"\n'
                f'(fake_kubectl: "{command}" is a real kubectl command that this fake '
                "does not implement)"
            )
        raise KubectlError(f'error: unknown command "{command}" for "kubectl"')
    flags, positional = parse_flags(rest, GLOBAL_FLAGS + COMMAND_FLAGS[command], command)
    inv = Invocation(state, command, flags, faults)
    if command == "get":
        return cmd_get(inv, flags, positional)
    if command == "create":
        return cmd_create(inv, flags, positional)
    if command == "delete":
        return cmd_delete(inv, flags, positional)
    if command == "logs":
        return cmd_logs(inv, flags, positional)
    if command == "version":
        return cmd_version(inv, flags, positional)
    raise KubectlError(f'error: unknown command "{command}" for "kubectl"')


class _StdinRecorder:
    """Wraps sys.stdin so the text read can be recorded in calls.jsonl."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.text: Optional[str] = None

    def read(self, *a: Any) -> str:
        data = self.inner.read(*a)
        self.text = (self.text or "") + data
        return data

    def isatty(self) -> bool:
        try:
            return self.inner.isatty()
        except (AttributeError, ValueError):
            return False


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get(CONTROLLER_ENV):
        return run_controller(os.environ[CONTROLLER_ENV])
    state = os.environ.get(STATE_ENV, "")
    if not state or not os.path.isdir(state):
        err(
            f"error: fake_kubectl: {STATE_ENV} is not set to an existing directory "
            "(this is the test fake of kubectl; see tests/fakecluster.py)"
        )
        return 1
    call_id = uuid.uuid4().hex
    calls = os.path.join(state, "calls.jsonl")
    append_jsonl(calls, {"event": "call", "id": call_id, "argv": argv, "start": time.time(), "pid": os.getpid()})
    recorder = _StdinRecorder(sys.stdin)
    sys.stdin = recorder  # type: ignore[assignment]
    rc = 1

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        faults = load_faults()
        rc = dispatch(argv, state, faults)
    except KubectlError as e:
        err(e.message)
        rc = e.code
    except BrokenPipeError:
        rc = 0
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:
        rc = 130
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        with contextlib.suppress(OSError):
            append_jsonl(calls, {"event": "done", "id": call_id, "end": time.time(), "rc": rc, "stdin": recorder.text})
    return rc


if __name__ == "__main__":
    sys.exit(main())
