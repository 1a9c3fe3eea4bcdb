"""The fake API server's storage: one file per object, a resourceVersion counter, pending
deletions and an append-only change log.

Layout of the state directory (env ``FAKE_KUBECTL_STATE``)::

    objects/KIND/NAMESPACE/NAME.json   one API object (cluster-scoped kinds use NAMESPACE "_cluster",
                                       which no namespace can be called: "_" is not valid in a DNS label)
    rv                                 the last resourceVersion handed out (global, increasing)
    vanish.json                        pending deletions: {"Kind/ns/name": unix time it vanishes}
    changes.jsonl                      one line per committed change, in resourceVersion order
    lock                               the writers' flock

Writers (``Store.tx()``) hold the flock, so at most one transaction runs at a time; a
transaction costs what it touches, not the size of the cluster.  At commit it writes its
objects (each by temp file + rename), then ``vanish.json``, then appends its change lines,
then the counter.  Readers never take the lock: every file they open is complete, and an
object whose deletion time has passed (or whose namespace's has) is hidden from them even
before a later transaction removes its file.

A change line is ``RV <TAB> put|delete <TAB> KEY <TAB> VANISH_AT <TAB> OBJECT_JSON``.  A
``Follower`` (``get -w`` and the Job controller) reads the objects once, then tails the log
from the offset it noted before reading them, so it sees every later change exactly once
and never re-reads the store; the key comes first so a follower skips kinds it does not
watch without parsing the object.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from .common import (
    CLUSTER_SCOPED,
    RESOURCES,
    read_json,
    write_json_atomic,
    write_text_atomic,
)

# typing for the annotations only (postponed, never evaluated): not imported by each kubectl call (2 ms)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

CLUSTER_DIR = "_cluster"
VANISH_SECONDS = 0.05  # a deleted object lingers this long (Terminating), then is gone
ALL_KINDS = [rt.kind for rt in RESOURCES]


def obj_key(kind: str, namespace: Optional[str], name: str) -> str:
    return f"{kind}/{namespace or ''}/{name}"


def key_of(obj: dict) -> str:
    md = obj["metadata"]
    return obj_key(obj["kind"], md.get("namespace"), md["name"])


def split_key(key: str) -> Tuple[str, str, str]:
    kind, ns, name = key.split("/", 2)
    return kind, ns, name


def gone(vanish: Dict[str, float], now: float, key: str, namespace: Optional[str]) -> bool:
    """Whether the object ``key`` has vanished at ``now`` (itself or through its namespace)."""
    t = vanish.get(key)
    if t is not None and t <= now:
        return True
    if namespace:
        t = vanish.get(obj_key("Namespace", None, namespace))
        if t is not None and t <= now:
            return True
    return False


class Store:
    """Lock-free reads of the objects, and write transactions."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.root = os.path.join(state, "objects")
        self.rv_path = os.path.join(state, "rv")
        self.vanish_path = os.path.join(state, "vanish.json")
        self.log_path = os.path.join(state, "changes.jsonl")
        self.lock_path = os.path.join(state, "lock")

    # -- files -----------------------------------------------------------------------------

    def path(self, kind: str, namespace: Optional[str], name: str) -> str:
        ns = CLUSTER_DIR if kind in CLUSTER_SCOPED else namespace or ""
        return os.path.join(self.root, kind, ns, name + ".json")

    def read(self, kind: str, namespace: Optional[str], name: str) -> Optional[dict]:
        """The stored object, pending deletion or not."""
        return read_json(self.path(kind, namespace, name))

    def read_all(self, kind: str, namespace: Optional[str] = None) -> List[dict]:
        """Every stored object of ``kind`` (in ``namespace``, or in any), by namespace and name."""
        kind_dir = os.path.join(self.root, kind)
        if kind in CLUSTER_SCOPED:
            dirs = [CLUSTER_DIR]
        elif namespace is not None:
            dirs = [namespace]
        else:
            try:
                dirs = sorted(os.listdir(kind_dir))
            except FileNotFoundError:
                return []
        found = []
        for d in dirs:
            path = os.path.join(kind_dir, d)
            try:
                names = sorted(os.listdir(path))
            except FileNotFoundError:
                continue
            for fn in names:
                if fn.endswith(".json"):
                    obj = read_json(os.path.join(path, fn))
                    if obj is not None:  # removed since the listing
                        found.append(obj)
        return found

    def pending_deletions(self) -> Dict[str, float]:
        return read_json(self.vanish_path, None) or {}

    # -- reads as the API server answers them ---------------------------------------------

    def get(self, kind: str, namespace: Optional[str], name: str) -> Optional[dict]:
        vanish = self.pending_deletions()
        obj = self.read(kind, namespace, name)
        if obj is None or gone(vanish, time.time(), key_of(obj), obj["metadata"].get("namespace")):
            return None
        return obj

    def list(self, kind: str, namespace: Optional[str] = None) -> List[dict]:
        vanish = self.pending_deletions()
        objs = self.read_all(kind, namespace)
        if not vanish:
            return objs
        now = time.time()
        return [o for o in objs if not gone(vanish, now, key_of(o), o["metadata"].get("namespace"))]

    def snapshot(self) -> Dict[str, dict]:
        """Every visible object, keyed ``Kind/namespace/name``."""
        return {key_of(o): o for kind in ALL_KINDS for o in self.list(kind)}

    # -- writes ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def tx(self) -> Iterator[Tx]:
        """A write transaction; nothing is written if the block raises."""
        import fcntl

        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            t = Tx(self, time.time())
            yield t
            t.commit()
        finally:
            os.close(fd)

    def follow(self, kinds: Optional[Set[str]] = None, namespace: Optional[str] = None) -> Follower:
        return Follower(self, kinds, namespace)


class Tx:
    """One transaction: reads see its own writes; pending deletions that are due are carried
    out first."""

    def __init__(self, store: Store, now: float) -> None:
        self.store = store
        self.now = now
        with open(store.rv_path, encoding="utf-8") as f:
            self.rv = self._rv0 = int(f.read())
        self.vanish = store.pending_deletions()
        self._vanish_dirty = False
        self._writes: Dict[str, Optional[dict]] = {}  # key -> object, or None once removed
        self._last: Dict[str, int] = {}  # key -> resourceVersion of its last change here
        due = sorted(k for k, t in self.vanish.items() if t <= now)
        for key in due:
            kind, ns, name = split_key(key)
            if kind == "Namespace":
                for o in self.in_namespace(name):
                    self.remove(o)
            obj = self.get(kind, ns, name)
            if obj is not None:
                self.remove(obj)
            self.vanish.pop(key, None)
            self._vanish_dirty = True

    # -- reads ---------------------------------------------------------------------------------

    def get(self, kind: str, namespace: Optional[str], name: str) -> Optional[dict]:
        key = obj_key(kind, namespace, name)
        if key in self._writes:
            return self._writes[key]
        return self.store.read(kind, namespace, name)

    def list(self, kind: str, namespace: Optional[str] = None) -> List[dict]:
        found = {key_of(o): o for o in self.store.read_all(kind, namespace)}
        for key, obj in self._writes.items():
            k, ns, _ = split_key(key)
            if k == kind and (namespace is None or ns == namespace):
                found[key] = obj  # type: ignore[assignment]
        return sorted((o for o in found.values() if o is not None), key=lambda o: o["metadata"]["name"])

    def in_namespace(self, namespace: str) -> List[dict]:
        return [o for rt in RESOURCES if rt.namespaced for o in self.list(rt.kind, namespace)]

    # -- writes --------------------------------------------------------------------------------

    def bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def put(self, obj: dict) -> dict:
        obj["metadata"]["resourceVersion"] = self.bump()
        key = key_of(obj)
        self._writes[key] = obj
        self._last[key] = self.rv
        return obj

    def remove(self, obj: dict) -> None:
        key = key_of(obj)
        md = obj["metadata"]
        if self.get(obj["kind"], md.get("namespace"), md["name"]) is None:
            return
        self._writes[key] = None
        self._last[key] = int(self.bump())
        if self.vanish.pop(key, None) is not None:
            self._vanish_dirty = True

    def vanish_later(self, obj: dict, delay: float = VANISH_SECONDS) -> None:
        """Mark ``obj`` as being deleted; it disappears ``delay`` seconds later."""
        from .common import now_ts

        obj["metadata"].setdefault("deletionTimestamp", now_ts(self.now))
        obj["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        self.vanish[key_of(obj)] = self.now + delay
        self._vanish_dirty = True
        self.put(obj)

    def commit(self) -> None:
        store = self.store
        lines = []
        for key, rv in sorted(self._last.items(), key=lambda item: item[1]):
            kind, ns, name = split_key(key)
            path = store.path(kind, ns, name)
            obj = self._writes[key]
            if obj is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                if kind == "Pod":
                    # A removed pod's log is gone with it: the API server looks the pod up before it
                    # asks the kubelet for its log (pkg/registry/core/pod/strategy.go LogLocation ->
                    # getPod), and the kubelet removes a deleted pod's containers with their log files
                    # (pkg/kubelet/kuberuntime/kuberuntime_container.go removeContainer ->
                    # removeContainerLog). Only a reader that followed it while it ran keeps it.
                    from .common import log_path

                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(log_path(store.state, ns or "", name))
                lines.append(f"{rv}\tdelete\t{key}\t\t\n")
                continue
            text = json.dumps(obj)
            try:
                write_text_atomic(path, text)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                write_text_atomic(path, text)
            vanish_at = self.vanish.get(key)
            lines.append(f"{rv}\tput\t{key}\t{'' if vanish_at is None else repr(vanish_at)}\t{text}\n")
        if self._vanish_dirty:
            write_json_atomic(store.vanish_path, self.vanish)
        if lines:
            with open(store.log_path, "a", encoding="utf-8") as f:
                f.write("".join(lines))
        if self.rv != self._rv0:
            with open(store.rv_path, "w", encoding="utf-8") as f:
                f.write(str(self.rv))


class Follower:
    """An in-memory copy of some of the objects, kept current by tailing the change log."""

    def __init__(self, store: Store, kinds: Optional[Set[str]], namespace: Optional[str]) -> None:
        self.kinds = set(ALL_KINDS) if kinds is None else set(kinds)
        self.namespace = namespace
        # The offset first, then the files: a change committed in between is seen twice (and
        # applied once, by resourceVersion), never missed.
        self._log = open(store.log_path, "rb")  # noqa: SIM115 -- kept open to tail
        end = self._log.seek(0, os.SEEK_END)
        self._buf = b""
        # The end may fall inside a line another process is appending: Linux's page cache grows
        # a file's size page by page as one write() copies (generic_perform_write), so a large
        # commit's line can be seen half written. Its rest is no change of its own (its object's
        # file was written before the line, and is read below): skipped up to its newline.
        self._mid_line = end > 0 and os.pread(self._log.fileno(), 1, end - 1) != b"\n"
        self.vanish = store.pending_deletions()
        self.objects: Dict[str, dict] = {}
        for kind in sorted(self.kinds):
            for obj in store.read_all(kind, None if kind in CLUSTER_SCOPED else namespace):
                self.objects[key_of(obj)] = obj

    def close(self) -> None:
        self._log.close()

    def _wanted(self, key: str) -> bool:
        kind, ns, _ = split_key(key)
        return kind in self.kinds and (self.namespace is None or kind in CLUSTER_SCOPED or ns == self.namespace)

    def poll(self) -> List[str]:
        """Apply the changes committed since the last poll; returns the keys that changed."""
        data = self._log.read()
        if not data:
            return []
        if self._mid_line:
            newline = data.find(b"\n")
            if newline < 0:
                return []
            data, self._mid_line = data[newline + 1 :], False
        data = self._buf + data
        cut = data.rfind(b"\n") + 1
        self._buf = data[cut:]
        changed = []
        for raw in data[:cut].splitlines():
            rv_text, op, key, vanish_at, body = raw.decode("utf-8").split("\t", 4)
            if op == "delete":
                self.vanish.pop(key, None)
            elif vanish_at:
                self.vanish[key] = float(vanish_at)
            if not self._wanted(key):
                continue
            rv = int(rv_text)
            cur = self.objects.get(key)
            if cur is not None and int(cur["metadata"].get("resourceVersion") or 0) >= rv:
                continue
            if op == "put":
                self.objects[key] = json.loads(body)
                changed.append(key)
            elif cur is not None:
                del self.objects[key]
                changed.append(key)
        return changed

    def is_gone(self, key: str, now: float) -> bool:
        return gone(self.vanish, now, key, split_key(key)[1])

    def get(self, kind: str, namespace: Optional[str], name: str, now: Optional[float] = None) -> Optional[dict]:
        key = obj_key(kind, namespace, name)
        obj = self.objects.get(key)
        if obj is None or self.is_gone(key, time.time() if now is None else now):
            return None
        return obj

    def visible(self, now: Optional[float] = None) -> Dict[str, dict]:
        t = time.time() if now is None else now
        if not self.vanish:
            return self.objects
        return {k: o for k, o in self.objects.items() if not self.is_gone(k, t)}


def init_state(
    state: str,
    *,
    contexts: List[str],
    current_context: Optional[str],
    kubeconfig: Optional[str],
    forbidden: List[List[str]],
    runtimeclasses: Dict[str, dict],
    nodes: List[dict],
    server: Optional[str] = None,
    pods: Sequence[dict] = (),
) -> None:
    """Create a fresh fake cluster in ``state`` (called by tests/fakecluster.py); ``pods``: pods
    of other workloads already bound to nodes (apiserver.make_running_pod's shorthand)."""
    from .apiserver import make_node, make_running_pod, make_runtimeclass, new_namespace, serviceaccount_object
    from .common import DEFAULT_SERVER, new_uid, now_ts

    for sub in ("objects", "logs", "work", "controllers"):
        os.makedirs(os.path.join(state, sub), exist_ok=True)
    write_json_atomic(
        os.path.join(state, "cluster.json"),
        {
            "contexts": list(contexts),
            "current_context": current_context,
            "kubeconfig": kubeconfig,
            "forbidden": [list(f) for f in forbidden],
            "server": server or DEFAULT_SERVER,
        },
    )
    store = Store(state)
    with open(store.rv_path, "w", encoding="utf-8") as f:
        f.write("1000")
    for name in (store.log_path, os.path.join(state, "calls.jsonl")):
        with open(name, "a", encoding="utf-8"):
            pass
    boot = time.time() - 3600
    system = ("default", "kube-node-lease", "kube-public", "kube-system")
    objs = [new_namespace(ns) for ns in system] + [serviceaccount_object(ns, boot) for ns in system]
    objs += [make_runtimeclass(name, spec) for name, spec in sorted(runtimeclasses.items())]
    objs += [make_node(node) for node in nodes]
    objs += [new_namespace(ns) for ns in sorted({pod.get("namespace", "default") for pod in pods} - {"default"})]
    objs += [make_running_pod(pod) for pod in pods]
    with store.tx() as tx:
        for obj in objs:
            md = obj["metadata"]
            md.setdefault("uid", new_uid())
            md.setdefault("creationTimestamp", now_ts(boot))
            tx.put(obj)
