"""The fake cluster behind an HTTP API server, for the real kubectl: a whole run, end to end.

The fake cluster (tests/fakecluster.py) holds the objects in its store and runs the Job
controller, the scheduler and the kubelet; its `kubectl` is a program that answers from that
store. `ApiCluster` answers the real kubectl's HTTP requests from the same store instead, on
127.0.0.1: discovery and the OpenAPI documents (the recording server's, tests/recordingserver.py),
a get by name, a list (label and field selectors), a watch from a list's resourceVersion, a
Table where kubectl asks for one (a `get` printed for people), the pods' logs (followed too),
and the creates. A create goes through the fake kubectl's own `create` (a process), which
validates the object as the fake does and starts a Job's controller. Every request is recorded
with its arrival and the end of its answer (RecordingServer.taken), so a benchmark sees what
kubectl asked and when.

bench/bench.py `--only real-kubectl` runs the tool and the guide's script through it with a cold
discovery cache, as on a fresh CI runner; tests/test_kubectl_contract.py's WholeRunContract runs
a whole run through every kubectl minor against it. What it does not model: authentication,
admission webhooks, API priority and fairness, deletes (a run's `cleanup` is the fake kubectl's),
and any latency but this machine's (the fake's objects are files; a create is a process of the
fake, about 50 ms). A change made between a client's list and its watch comes as MODIFIED, where
an API server says ADDED for an object created meanwhile (the tool and kubectl treat both alike).
Standard library only, as the fake is."""

from __future__ import annotations

import importlib
import json
import os
import queue
import re
import shutil
import subprocess
import threading
import time
import types
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from tests.fakecluster import FakeCluster, fake_module
from tests.recordingserver import GROUP_VERSIONS, Answer, Recorded, RecordingServer, status_answer

WATCH_POLL_SECONDS = 0.01  # how often a watch reads the store's change log: the API server's is a push
TABLE_ACCEPT = "as=Table"

# The reason in the fake's "Error from server (REASON): ..." and the HTTP status an API server
# sends with it (apimachinery pkg/api/errors).
STATUS_CODES = {
    "AlreadyExists": 409,
    "Conflict": 409,
    "Forbidden": 403,
    "Invalid": 422,
    "BadRequest": 400,
    "NotFound": 404,
    "MethodNotAllowed": 405,
    "Timeout": 504,
    "TooManyRequests": 429,
}


def _resources() -> Dict[Tuple[str, str], Tuple[str, bool]]:
    """(group version, resource) -> (kind, namespaced), from the discovery documents served."""
    found = {}
    for group_version, resources in GROUP_VERSIONS.items():
        for resource in resources:
            if "/" not in resource["name"]:
                found[(group_version, resource["name"])] = (resource["kind"], resource["namespaced"])
    return found


RESOURCES = _resources()


def _field(obj: Dict[str, Any], dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def field_selector(text: str) -> List[Tuple[str, str, bool]]:
    """`metadata.name=X,status.phase!=Y`: (field, value, equal) each; an API server knows only a
    few fields per kind, kubectl sends only those."""
    terms = []
    for term in filter(None, text.split(",")):
        negated = "!=" in term
        key, _, value = term.partition("!=" if negated else "=")
        terms.append((key, value.lstrip("="), not negated))
    return terms


class ApiCluster(RecordingServer):
    """A RecordingServer whose routes answer from `cluster`'s store; a context manager, as its
    base. `kubeconfig(directory)` writes a kubeconfig that points the real kubectl at it."""

    def __init__(self, cluster: FakeCluster, pods_niced: bool = False, pods_cpus: Optional[Set[int]] = None) -> None:
        super().__init__()
        self.cluster = cluster
        self.state = str(cluster.state_dir)
        fake = fake_module()
        self.store = fake.Store(self.state)
        # the fake's package as fake_module() put it on the path, as the fake's process imports it
        self.fake = importlib.import_module("fakekube.commands")
        self.common = importlib.import_module("fakekube.common")
        self.apiserver = importlib.import_module("fakekube.apiserver")
        self.closing = threading.Event()
        # `pods_niced`: every create runs at the lowest CPU priority, which the Job's controller and
        # its pods inherit: on a cluster they run on other machines, here they would take the cores
        # of the client a benchmark measures (bench/bench.py --only real-kubectl)
        nice = shutil.which("nice") if pods_niced else None
        self.nice = [nice, "-n", "19"] if nice else []
        # `pods_cpus`: every create runs on these cores, which the controller and its pods inherit
        # (bench/bench.py --pods-core: the nodes' cores apart from the client's and the server's)
        self.pods_cpus = pods_cpus
        for prefix in (r"/api/(?P<gv>v1)", r"/apis/(?P<gv>[^/]+/[^/]+)"):
            self.route("GET", prefix + r"/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?", self.read)
            self.route("GET", prefix + r"/namespaces/(?P<ns>[^/]+)/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?", self.read)
            self.route("POST", prefix + r"/(?P<res>[^/]+)", self.create)
            self.route("POST", prefix + r"/namespaces/(?P<ns>[^/]+)/(?P<res>[^/]+)", self.create)
            self.route("DELETE", prefix + r"/(?P<res>[^/]+)/(?P<name>[^/]+)", self.delete)
            self.route("DELETE", prefix + r"/namespaces/(?P<ns>[^/]+)/(?P<res>[^/]+)/(?P<name>[^/]+)", self.delete)
        self.route("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log", self.log)

    def __exit__(self, *exc: Any) -> None:
        self.closing.set()  # the watches and followed logs end at their next look
        super().__exit__(*exc)

    # -- reads --------------------------------------------------------------------------

    def kind_of(self, match: re.Match[str]) -> Optional[Tuple[str, bool]]:
        return RESOURCES.get((match.group("gv"), match.group("res")))

    def rv(self) -> str:
        try:
            with open(self.store.rv_path, encoding="utf-8") as f:
                return f.read().strip() or "1"
        except FileNotFoundError:
            return "1"

    def read(self, record: Recorded, match: re.Match[str]) -> Answer:
        found = self.kind_of(match)
        if found is None:
            return status_answer(404, "NotFound", "the server could not find the requested resource")
        kind, namespaced = found
        namespace = match.groupdict().get("ns")
        if namespaced != (namespace is not None):
            return status_answer(404, "NotFound", "the server could not find the requested resource")
        if kind == "ServiceAccount":
            self.apiserver.settle_serviceaccounts(self.store)  # a namespace's default account, when due
        name = match.group("name")
        table = TABLE_ACCEPT in record.headers.get("accept", "")
        if name is not None:
            obj = self.store.get(kind, namespace, name)
            if obj is None:
                group = match.group("gv").rpartition("/")[0]
                what = match.group("res") + ("." + group if group else "")
                return status_answer(
                    404, "NotFound", f'{what} "{name}" not found', {"name": name, "kind": match.group("res")}
                )
            return Answer(200, self.table(kind, [obj]) if table else obj)
        selector = (
            self.common.parse_selector(record.query["labelSelector"]) if "labelSelector" in record.query else None
        )
        fields = field_selector(record.query.get("fieldSelector", ""))

        def wanted(obj: Dict[str, Any]) -> bool:
            if not self.common.matches(obj, kind, namespace, None, selector):
                return False
            return all((_field(obj, key) == value) == equal for key, value, equal in fields)

        if record.query.get("watch") in ("true", "1"):
            since = int(record.query.get("resourceVersion") or 0)
            timeout = float(record.query.get("timeoutSeconds") or 1800)
            return Answer(200, chunks=self.watch(kind, namespace, wanted, since, timeout))
        rv = self.rv()
        items = [obj for obj in self.store.list(kind, namespace) if wanted(obj)]
        if table:
            return Answer(200, self.table(kind, items))
        version = match.group("gv")
        return Answer(
            200, {"kind": kind + "List", "apiVersion": version, "metadata": {"resourceVersion": rv}, "items": items}
        )

    def watch(
        self, kind: str, namespace: Optional[str], wanted: Any, since: int, timeout: float
    ) -> Iterator[Tuple[float, bytes]]:
        """A watch from resourceVersion `since`: each change after it, as the fake's own watch
        finds them (fakekube/commands.py watch_objects: the store's change log), until the
        client's timeoutSeconds, the server's close or the cluster's end."""
        follower = self.store.follow({kind}, namespace)
        ends = time.monotonic() + timeout

        def current(key: str, now: float) -> Optional[Dict[str, Any]]:
            obj = follower.objects.get(key)
            if obj is None or follower.is_gone(key, now) or not wanted(obj):
                return None
            return obj

        def event(kind_of_event: str, obj: Dict[str, Any]) -> Tuple[float, bytes]:
            return 0.0, (json.dumps({"type": kind_of_event, "object": obj}) + "\n").encode()

        try:
            now = time.time()
            seen = {key: obj for key, obj in follower.visible(now).items() if current(key, now) is not None}
            # what changed between the client's list and this watch: a watch from that version misses nothing
            newer = [obj for obj in seen.values() if int(obj["metadata"].get("resourceVersion") or 0) > since]
            for obj in sorted(newer, key=lambda o: int(o["metadata"].get("resourceVersion") or 0)):
                yield event("MODIFIED", obj)
            due_done: set = set()
            while not self.closing.is_set() and time.monotonic() < ends and os.path.isdir(self.state):
                time.sleep(WATCH_POLL_SECONDS)
                if kind == "ServiceAccount":
                    self.apiserver.settle_serviceaccounts(self.store)
                for kind_of_event, obj in self.fake.watch_changes(follower, seen, current, due_done):
                    yield event(kind_of_event, obj)
        finally:
            follower.close()

    def table(self, kind: str, objects: List[Dict[str, Any]]) -> Dict[str, Any]:
        """A meta.k8s.io/v1 Table of `objects`, each row with its whole object (kubectl's
        --sort-by sorts by it): the columns the API server prints for the guide's two human
        gets, `get runtimeclass NAME` and `get events`; a name and an age for the rest."""
        now = time.time()

        def age(obj: Dict[str, Any]) -> str:
            return self.fake.since(obj["metadata"].get("creationTimestamp"), now)

        def column(name: str) -> Dict[str, Any]:
            return {"name": name, "type": "string", "format": "", "description": "", "priority": 0}

        if kind == "RuntimeClass":
            columns = ["Name", "Handler", "Age"]
            rows = [[o["metadata"]["name"], o.get("handler", ""), age(o)] for o in objects]
        elif kind == "Event":
            columns = ["Last Seen", "Type", "Reason", "Object", "Message"]
            rows = []
            for o in objects:
                involved = o.get("involvedObject") or {}
                seen = o.get("lastTimestamp") or o.get("eventTime") or o["metadata"].get("creationTimestamp")
                what = f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"
                rows.append(
                    [self.fake.since(seen, now), o.get("type", ""), o.get("reason", ""), what, o.get("message", "")]
                )
        else:
            columns = ["Name", "Age"]
            rows = [[o["metadata"]["name"], age(o)] for o in objects]
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": self.rv()},
            "columnDefinitions": [column(name) for name in columns],
            "rows": [{"cells": cells, "object": obj} for cells, obj in zip(rows, objects)],
        }

    def log(self, record: Recorded, match: re.Match[str]) -> Answer:
        """A container's log as the kubelet serves it, through the fake's own readers
        (fakekube/commands.py read_pod_log, follow_pod_log): whole, or followed until the
        container ends or the pod is gone."""
        namespace, name = match.group("ns"), match.group("name")
        pod = self.store.get("Pod", namespace, name)
        if pod is None:
            return status_answer(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        container = record.query.get("container") or pod["spec"]["containers"][0]["name"]
        invocation = types.SimpleNamespace(state=self.state, namespace=namespace, store=self.store, faults={})
        try:
            text = self.fake.read_pod_log(invocation, pod, container, None, set())
        except self.common.KubectlError as refused:
            return self.refusal(str(refused))
        if record.query.get("follow") not in ("true", "1"):
            return Answer(200, text, "text/plain")
        pieces: queue.Queue[Optional[bytes]] = queue.Queue()

        def follow() -> None:
            try:
                self.fake.follow_pod_log(invocation, pod, container, None, set(), b"", pieces.put)
            except self.common.KubectlError:
                pass  # the stream ends: kubectl reports what it carried
            finally:
                pieces.put(None)

        threading.Thread(target=follow, daemon=True, name=f"log-{name}").start()

        def stream() -> Iterator[Tuple[float, bytes]]:
            while not self.closing.is_set():
                try:
                    piece = pieces.get(timeout=0.5)
                except queue.Empty:
                    continue
                if piece is None:
                    return
                yield 0.0, piece

        return Answer(200, chunks=stream(), content_type="text/plain")

    # -- writes -------------------------------------------------------------------------

    def create(self, record: Recorded, match: re.Match[str]) -> Answer:
        """A create, through the fake kubectl's own (its validation, its controller for a Job):
        the review of the caller's rules as `create --raw`, everything else as `create -f -`."""
        path = record.path
        if match.group("res") == "selfsubjectrulesreviews":
            argv = ["create", "--raw", path, "-f", "-"]
        elif self.kind_of(match) is None:
            return status_answer(404, "NotFound", "the server could not find the requested resource")
        else:
            argv = ["create", "-f", "-", "-o", "json", "--validate=false"]
            if match.groupdict().get("ns"):
                argv.append(f"--namespace={match.group('ns')}")
        cpus = self.pods_cpus
        done = subprocess.run(
            [*self.nice, str(self.cluster.bin_dir / "kubectl"), *argv],
            input=record.body,
            env=self.cluster.env(),
            capture_output=True,
            timeout=60,
            check=False,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        if done.returncode != 0:
            return self.refusal(done.stderr.decode("utf-8", "replace"))
        return Answer(201, done.stdout)

    def delete(self, record: Recorded, match: re.Match[str]) -> Answer:
        """A delete, through the fake kubectl's own (`delete KIND NAME --wait=false`; a Job's with
        the body's propagationPolicy, which cleanup sends as Foreground): the object as it stays
        while it goes (a Job's foreground deletion, a namespace Terminating), or a Status once gone,
        as the API server answers (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/delete.go)."""
        found = self.kind_of(match)
        if found is None:
            return status_answer(404, "NotFound", "the server could not find the requested resource")
        kind, namespaced = found
        namespace, name = match.groupdict().get("ns"), match.group("name")
        if namespaced != (namespace is not None):
            return status_answer(404, "NotFound", "the server could not find the requested resource")
        argv = ["delete", match.group("res"), name, "--wait=false"]
        try:
            options = json.loads(record.body or b"{}")
        except ValueError:
            return status_answer(400, "BadRequest", "the body is not JSON DeleteOptions")
        policy = str(options.get("propagationPolicy") or "Background").lower() if isinstance(options, dict) else ""
        if kind == "Job":
            argv.append(f"--cascade={policy}")
        if namespace:
            argv.append(f"--namespace={namespace}")
        done = subprocess.run(
            [str(self.cluster.bin_dir / "kubectl"), *argv],
            env=self.cluster.env(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            return self.refusal(done.stderr.decode("utf-8", "replace"))
        left = self.store.get(kind, namespace, name)
        if left is not None:
            return Answer(200, left)
        gone = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
        return Answer(200, dict(gone, details={"name": name, "kind": match.group("res")}))

    @staticmethod
    def refusal(stderr: str) -> Answer:
        """The fake's `Error from server (REASON): MESSAGE` as the API server's Status."""
        first = (stderr.strip().splitlines() or ["error"])[0]
        found = re.match(r"Error from server \((\w+)\): (?:error when creating \"STDIN\": )?(.*)", first)
        if found is None:
            return status_answer(500, "InternalError", first)
        reason, message = found.groups()
        return status_answer(STATUS_CODES.get(reason, 500), reason, message)

    def kubeconfig(self, directory: Any, contexts: Any = ("fake-ctx",), current: str = "fake-ctx") -> Any:
        """A kubeconfig whose contexts point the real kubectl at this server."""
        return super().kubeconfig(directory, contexts, current)
