"""Call-plan tests: the tool runs in-process against a kubectl stub that answers only planned calls.

The model is ruby-build's test/stubs/stub. Each test gets

* a temporary `bin/` holding only `kubectl`, a two-line wrapper that execs tests/kubectl_stub.py
  with `python -S -E` (fast to start), and an environment sealed to it: PATH is that directory
  alone, nothing else is inherited, so no real kubectl can ever be reached;
* a plan: the kubectl calls the test expects, in order, each with the exact argv after `kubectl`,
  its stdin (checked), and the stdout, stderr and exit code to answer; a watch answers a stream
  of chunks. `Call` is one entry; `RunPlan` builds the calls of a whole `run` from a
  `tests.clusterobjects.Batch`, so every answer comes from one consistent description;
* `rl_batch_demo.main([...])` run in-process with stdout and stderr captured, its run id fixed
  (`RUN_ID`) and every wait of `rl_batch_demo.TIMING` shrunk, so nothing sleeps;
* a teardown that fails on any call the plan did not expect and on any planned call never made.

    plan = RunPlan(Batch(count=2))
    self.expect(*plan.run())
    result = self.tool("run", "--count", "2", "--output", str(self.out()))
    self.assertEqual(result.code, 0, result)
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import json
import marshal
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest
import unittest.mock
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import rl_batch_demo as demo
from tests import kubectl_stub, records
from tests.clusterobjects import (
    NAMESPACE,
    RUN_ID,
    Batch,
    access_reviews,
    configmap_object,
    kubernetes_list,
    namespace_object,
    runtimeclass_object,
    serviceaccount_object,
)
from tests.fakecluster import write_executable
from tests.stubprocess import spawner, stub_processes

STUB = Path(__file__).resolve().with_name("kubectl_stub.py")
CONTEXT = "stub-ctx"
SERVER = "https://api.stub.invalid:6443"

# What kubectl prints for each kind of failure (the API server's Status, as kubectl words it).
ERR_INTERNAL_CREATE = (
    'Error from server (InternalError): error when creating "STDIN": Internal error occurred: '
    "etcdserver: request timed out"
)
ERR_INTERNAL = "Error from server (InternalError): Internal error occurred: etcdserver: request timed out"
ERR_TOO_MANY = (
    "Error from server (TooManyRequests): the server has received too many requests and has asked us to try again later"
)
ERR_UNAVAILABLE = "Error from server (ServiceUnavailable): the server is currently unable to handle the request"
ERR_REFUSED = "The connection to the server api.stub.invalid:6443 was refused - did you specify the right host or port?"


def err_unreachable(kind: str, host: str = "api.stub.invalid:6443", dialed: str = "10.0.0.9:6443") -> str:
    """kubectl v1.32's whole stderr when nothing listens at the API server (no discovery cache):
    client-go's klog lines, then its message, by kind of call: "get" (one resource type), "review"
    (`create --validate=false`), "create" (`--validate=strict` of a List) and "create one" (of one
    object). tests/test_kubectl_errors.py
    holds these texts as measured and checks the fake and the real kubectl against them."""
    api = f"https://{host}/api?timeout=30s"
    dial = f"dial tcp {dialed}: connect: connection refused"
    line = (
        'E1201 14:29:34.166386    8886 memcache.go:265] "Unhandled Error" err="couldn\'t get current server API '
        f'group list: Get \\"{api}\\": {dial}"'
    )
    if kind == "get":
        return "\n".join([line] * 5 + [ERR_REFUSED.replace("api.stub.invalid:6443", host)])
    if kind == "review":
        return f'{line}\nerror: unable to recognize "STDIN": Get "{api}": {dial}'
    download = "failed to download openapi: " if kind == "create one" else ""
    return (
        f'error: error validating "STDIN": error validating data: {download}Get "https://{host}/openapi/v2?'
        f'timeout=30s": {dial}; if you choose to ignore these errors, turn validation off with --validate=false'
    )


ERR_NO_CURRENT_CONTEXT = "error: current-context must exist in order to minify"  # also: no kubeconfig file at all
ERR_CLIENT_TIMEOUT = (
    "Unable to connect to the server: net/http: request canceled (Client.Timeout exceeded while awaiting headers)"
)


def err_forbidden(verb: str, resource: str, group: str = "", namespace: str = NAMESPACE, creating: bool = False) -> str:
    """kubectl's words for an RBAC refusal (403)."""
    creating_text = 'error when creating "STDIN": ' if creating else ""
    qualified = f"{resource}.{group}" if group else resource
    where = f' in the namespace "{namespace}"' if namespace else ""
    return (
        f'Error from server (Forbidden): {creating_text}{qualified} is forbidden: User "dev" cannot {verb} '
        f'resource "{resource}" in API group "{group}"{where}'
    )


def err_already_exists(resource: str, name: str) -> str:
    return f'Error from server (AlreadyExists): error when creating "STDIN": {resource} "{name}" already exists'


def err_log_unreadable(pod: str) -> str:
    return f"Error from server (InternalError): Internal error occurred: failed to read log of pod {pod}"


def as_json(obj: Any) -> str:
    """kubectl's -o json: indented, one object per document."""
    return indented_json(obj, 4) + "\n"


_ENCODE_STRING = json.encoder.encode_basestring_ascii  # the C encoder's, as json.dumps uses it


def indented_json(obj: Any, indent: int) -> str:
    """Exactly json.dumps(obj, indent=indent), faster: an indent makes json.dumps take its pure
    Python encoder, one generator per level, which was a fifth of the call-plan tests' CPU. Each
    string and number is still encoded by the json module; anything else (a key that is not a
    string, a value of another type) is left to json.dumps itself."""
    parts: List[str] = []

    def put(value: Any, depth: int) -> None:
        if isinstance(value, str):
            parts.append(_ENCODE_STRING(value))
        elif isinstance(value, dict):
            if not value:
                parts.append("{}")
                return
            inner = "\n" + " " * (indent * (depth + 1))
            first = True
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(key)
                parts.append(("{" if first else ",") + inner + _ENCODE_STRING(key) + ": ")
                first = False
                put(item, depth + 1)
            parts.append("\n" + " " * (indent * depth) + "}")
        elif isinstance(value, (list, tuple)):
            if not value:
                parts.append("[]")
                return
            inner = "\n" + " " * (indent * (depth + 1))
            for position, item in enumerate(value):
                parts.append(("[" if position == 0 else ",") + inner)
                put(item, depth + 1)
            parts.append("\n" + " " * (indent * depth) + "]")
        elif value is None or isinstance(value, (bool, int, float)):
            parts.append(json.dumps(value))
        else:
            raise TypeError(type(value))

    try:
        put(obj, 0)
    except TypeError:
        return json.dumps(obj, indent=indent)
    return "".join(parts)


# One planned call #############################################################


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Part of a watch's stream, written after `wait_for` (a signal) and `delay` seconds; with a
    `snapshot` (path, lines, name), once that file holds that many lines (or the stub gave up
    waiting): KubectlStub.snapshot(name) is then what it held, read while the tool waited."""

    data: str
    wait_for: Optional[str] = None
    delay: float = 0.0
    snapshot: Optional[Tuple[str, int, str]] = None


def watch_event(kind: str, obj: Dict[str, Any], **options: Any) -> Chunk:
    """One `--output-watch-events` event: {"type": ADDED|MODIFIED|DELETED, "object": ...}."""
    return Chunk(as_json({"type": kind, "object": obj}), **options)


@dataclasses.dataclass(frozen=True)
class Call:
    """A planned kubectl call: its argv after `kubectl` and the answer the stub gives."""

    argv: List[str]
    stdout: str = ""
    stderr: str = ""
    exit: int = 0
    stdin_json: Any = None  # the JSON the call must send on stdin (creates)
    chunks: Sequence[Chunk] = ()  # a watch's stream
    hold: bool = False  # a watch that stays open until the tool kills it
    sleep: float = 0.0  # answer this late (a hanging kubectl)
    name: str = ""  # signals NAME.started and NAME.done for other calls to wait for
    wait_for: str = ""  # answer only once this signal exists
    repeat: bool = False  # answer every further call with the same argv too
    optional: bool = False  # the tool may end it before it starts (a watch closed at once): not left over
    # A watch's --request-timeout is the time the client has left (rl_batch_demo.wait_for_job):
    # the stub also accepts fewer seconds, by at most those passed since expect() planned it.
    counts_down: bool = False

    def failing(self, stderr: str, exit: int = 1, stdout: str = "") -> Call:
        """The same call answered with an error (kubectl prints the server's message, exit 1)."""
        return dataclasses.replace(self, stdout=stdout, stderr=stderr + "\n", exit=exit, chunks=(), hold=False)

    def to_json(self) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"argv": list(self.argv), "stdout": self.stdout, "stderr": self.stderr}
        entry["exit"] = self.exit
        if self.stdin_json is not None:
            entry["stdin_json"] = self.stdin_json
        if self.chunks:
            entry["chunks"] = [dataclasses.asdict(chunk) for chunk in self.chunks]
        for key in ("hold", "sleep", "name", "wait_for", "repeat"):
            if getattr(self, key):
                entry[key] = getattr(self, key)
        return entry


def kubectl_args(
    *args: str,
    namespace: Optional[str] = None,
    context: Optional[str] = CONTEXT,
    request_timeout: Optional[str] = "30s",
    kubeconfig: Optional[str] = None,
) -> List[str]:
    """The argv the tool builds: --kubeconfig, --context, --request-timeout, --namespace, then the verb."""
    argv = []
    if kubeconfig:
        argv.append(f"--kubeconfig={kubeconfig}")
    if context:
        argv.append(f"--context={context}")
    if request_timeout:
        argv.append(f"--request-timeout={request_timeout}")
    if namespace:
        argv.append(f"--namespace={namespace}")
    return argv + list(args)


def kubeconfig_view(context: str = CONTEXT, server: str = SERVER) -> Dict[str, Any]:
    """`kubectl config view --minify -o json`: the current context and its cluster only."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": "stub-cluster", "cluster": {"server": server}}],
        "users": [{"name": "dev", "user": {"token": "REDACTED"}}],
        "contexts": [{"name": context, "context": {"cluster": "stub-cluster", "user": "dev"}}],
        "current-context": context,
    }


class Cluster:
    """Calls against one context (and kubeconfig): the argv the tool builds, the answers given."""

    def __init__(self, context: str = CONTEXT, server: str = SERVER, kubeconfig: Optional[str] = None) -> None:
        self.context = context
        self.server = server
        self.kubeconfig = kubeconfig

    def args(self, *args: str, **options: Any) -> List[str]:
        return kubectl_args(*args, context=self.context, kubeconfig=self.kubeconfig, **options)

    def config_view(self, bound: bool = False) -> Call:
        """Read once at the start (unbound: the current context) and by cleanup (bound to the receipt's)."""
        argv = kubectl_args(
            "config",
            "view",
            "--minify",
            "-o",
            "json",
            context=self.context if bound else None,
            request_timeout=None,
            kubeconfig=self.kubeconfig,
        )
        return Call(argv, stdout=as_json(kubeconfig_view(self.context, self.server)))

    def get(self, kind: str, name: str, answer: Optional[Dict[str, Any]], namespace: Optional[str] = None) -> Call:
        """`get KIND NAME --ignore-not-found -o json`: the object, or nothing when absent."""
        argv = self.args("get", kind, name, "--ignore-not-found", "-o", "json", namespace=namespace)
        return Call(argv, stdout=as_json(answer) if answer is not None else "")

    def get_list(
        self, kinds: str, items: List[Dict[str, Any]], namespace: Optional[str] = NAMESPACE, flags: Sequence[str] = ()
    ) -> Call:
        argv = self.args("get", kinds, *flags, "-o", "json", namespace=namespace)
        return Call(argv, stdout=as_json(kubernetes_list(items)))

    def running_pods(self, items: List[Dict[str, Any]]) -> Call:
        """The pods of every namespace that are not terminated (`check`, `run --parallelism auto`)."""
        return self.get_list("pods", items, namespace=None, flags=demo.NON_TERMINATED_PODS)

    def create(self, manifest: Any, answer: Any, validate: str = "strict") -> Call:
        """`create -f - -o json --validate=...` with the manifest on stdin (a list: one JSON
        document each, as the run sends its objects); answers the created object, or for a
        List each created object as its own document, as kubectl prints them."""
        argv = self.args("create", "-f", "-", "-o", "json", f"--validate={validate}")
        stdout = "".join(as_json(item) for item in answer) if isinstance(answer, list) else as_json(answer)
        return Call(argv, stdout=stdout, stdin_json=manifest)

    def create_raw(self, manifest: Dict[str, Any], answer: Dict[str, Any]) -> Call:
        """`create --raw PATH -f -` of one of the run's objects: the manifest on stdin, POSTed to
        its collection (create_path); answers the stored object as the server wrote it."""
        argv = self.args("create", "--raw", demo.create_path(manifest), "-f", "-")
        return Call(argv, stdout=json.dumps(answer), stdin_json=manifest)

    def get_runtimeclass(self, name: str, answer: Optional[Dict[str, Any]]) -> Call:
        """`get --raw` of the RuntimeClass: the object, or the server's NotFound, exit 1."""
        argv = self.args("get", "--raw", f"/apis/node.k8s.io/v1/runtimeclasses/{name}")
        if answer is None:
            missing = f'Error from server (NotFound): runtimeclasses.node.k8s.io "{name}" not found\n'
            return Call(argv, exit=1, stderr=missing)
        return Call(argv, stdout=json.dumps(answer))

    def watch(
        self,
        args: Sequence[str],
        chunks: Sequence[Chunk],
        seconds: int,
        name: str,
        hold: bool = True,
        namespace: Optional[str] = NAMESPACE,
    ) -> Call:
        argv = self.args(
            "get",
            *args,
            "-o",
            "json",
            "--output-watch-events",
            "--watch",
            namespace=namespace,
            request_timeout=f"{seconds}s",
        )
        return Call(argv, chunks=tuple(chunks), hold=hold, name=name, counts_down=True)

    def logs_by_selector(self, selector: str, text: str, ignore_errors: bool = False) -> Call:
        """Up to 10 pods' logs at once (no --request-timeout: it would limit each log's transfer);
        `ignore_errors`: the selector matches pods lost to the infrastructure too."""
        argv = self.args(
            "logs", "-l", selector, "-c", demo.CONTAINER_NAME, "--prefix", "--tail=-1",
            *(["--ignore-errors"] if ignore_errors else []), namespace=NAMESPACE, request_timeout=None,
        )  # fmt: skip
        return Call(argv, stdout=text)

    def follow_logs(self, selector: str, text: str, streams: int = demo.LOG_SELECTOR_PODS) -> Call:
        """A set of pods' logs followed while they run (LogFollower): in parallel, a failed stream
        an `error:` line (--ignore-errors), up to `streams` at once."""
        argv = self.args(
            "logs", "-f", "-l", selector, "-c", demo.CONTAINER_NAME, "--prefix", "--tail=-1", "--ignore-errors",
            f"--max-log-requests={streams}", namespace=NAMESPACE, request_timeout=None,
        )  # fmt: skip
        return Call(argv, stdout=text)

    def logs_of(self, pod: str, text: str) -> Call:
        argv = self.args("logs", pod, "-c", demo.CONTAINER_NAME, namespace=NAMESPACE, request_timeout=None)
        return Call(argv, stdout=text)

    def delete(self, kind: str, name: str, *flags: str, namespace: Optional[str] = None) -> Call:
        return Call(self.args("delete", kind, name, *flags, namespace=namespace))

    def rules_review(self, reviews: Dict[str, Any], denied: tuple = (), incomplete: bool = False) -> Call:
        """The run's rules review (`create --raw` of a SelfSubjectRulesReview of its namespace):
        cluster-admin's one rule of wildcards, or, with `denied` (verb, resource) pairs, one rule
        for each other permission of `reviews` (access_review_list), as RBAC lists a narrower
        role's; `incomplete`: a webhook authorizer beside RBAC, which cannot list its rules."""
        rules: List[Dict[str, Any]] = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
        if denied:
            rules = []
            for review in reviews["items"]:
                attributes = review["spec"]["resourceAttributes"]
                sub = attributes.get("subresource")
                resource = attributes["resource"] + (f"/{sub}" if sub else "")
                if (attributes["verb"], resource) not in denied:
                    rules.append(
                        {"verbs": [attributes["verb"]], "apiGroups": [attributes["group"]], "resources": [resource]}
                    )
        manifest = demo.rules_review(NAMESPACE)
        status = {"resourceRules": rules, "nonResourceRules": [], "incomplete": incomplete}
        argv = self.args("create", "--raw", demo.RULES_REVIEW_PATH, "-f", "-")
        return Call(argv, stdout=json.dumps({**manifest, "status": status}), stdin_json=manifest)

    def access_reviews(
        self, namespace: str, with_runtimeclass: bool, denied: tuple = (), lists_nodes: bool = False
    ) -> Call:
        return self.create(  # never stored: no validation, as the tool asks
            demo.access_review_list(namespace, with_runtimeclass, lists_nodes=lists_nodes),
            kubernetes_list(access_reviews(namespace, with_runtimeclass, denied, lists_nodes)),
            validate="false",
        )


# The calls of a whole run #####################################################


class RunPlan:
    """Every kubectl call of `run` (and `cleanup`), built from the batches of its rounds.

    `run()` is the happy path; its parts are separate methods, so a fault test replaces one
    call and keeps the rest, and reads as the sequence the tool goes through."""

    def __init__(
        self,
        *batches: Batch,
        cluster: Optional[Cluster] = None,
        runtime: Optional[str] = "cube",
        deadline_seconds: int = demo.DEFAULT_JOB_DEADLINE_SECONDS,
    ) -> None:
        self.batches = list(batches) or [Batch()]
        self.cluster = cluster or Cluster()
        self.runtime = runtime
        self.deadline_seconds = deadline_seconds

    @property
    def batch(self) -> Batch:
        return self.batches[0]

    # -- preflight and creates --------------------------------------------------------

    def preflight(self, denied: tuple = ()) -> List[Call]:
        calls = [self.cluster.config_view()]
        if self.runtime is not None:
            calls.append(self.get_runtimeclass())
        reviews = demo.access_review_list(NAMESPACE, self.runtime is not None)
        calls.append(self.cluster.rules_review(reviews, denied))
        if denied:  # the rules prove not every permission: the access reviews decide
            calls.append(self.cluster.access_reviews(NAMESPACE, self.runtime is not None, denied))
        return calls

    def get_runtimeclass(self, exists: bool = True) -> Call:
        assert self.runtime is not None
        return self.cluster.get_runtimeclass(self.runtime, runtimeclass_object(self.runtime) if exists else None)

    def create_namespace_and_configmap(self) -> Call:
        """One `create` of two JSON documents: the namespace, then the ConfigMap with the worker."""
        manifests = [
            demo.namespace_manifest(NAMESPACE, RUN_ID),
            demo.configmap_manifest(NAMESPACE, RUN_ID, demo.WORKER_SOURCE, None),
        ]
        created = self.cluster.create(manifests, [namespace_object(), configmap_object()])
        return dataclasses.replace(created, name="namespace")

    def serviceaccount_watch(
        self, present: bool = True, ended_early: bool = False, kubectl_timeout: float = demo.KUBECTL_PROCESS_TIMEOUT
    ) -> Call:
        """The watch of the namespace's default ServiceAccount, started with the preflight (before
        the namespace exists) and lasting as long as the preflight's reads (with their retries)
        and the namespace's create may take (`kubectl_timeout` each) and the wait for the account:
        the account ADDED once the namespace exists (`present`), else nothing; held until the tool
        ends it. `ended_early`: the create fails, and the tool may end the watch before it starts."""
        timing = demo.TIMING
        seconds = math.ceil(2 * kubectl_timeout + timing.retry_budget_seconds + timing.serviceaccount_wait_seconds)
        chunks = [watch_event("ADDED", serviceaccount_object(), wait_for="namespace.done")] if present else []
        by_name = ["serviceaccounts", "--field-selector", f"metadata.name={demo.DEFAULT_SERVICEACCOUNT}"]
        watch = self.cluster.watch(by_name, chunks, seconds, "serviceaccount")
        return dataclasses.replace(watch, optional=ended_early)

    def refused_watch(self, kubectl_timeout: float = demo.KUBECTL_PROCESS_TIMEOUT) -> Call:
        """The account's watch of a run whose preflight fails: started beside the preflight's
        reads, before any namespace exists, and ended by the refusal (perhaps before it started)."""
        return self.serviceaccount_watch(present=False, ended_early=True, kubectl_timeout=kubectl_timeout)

    def create_namespace(self) -> Call:
        """The namespace alone: after a combined create that never reached the server."""
        return self.cluster.create_raw(demo.namespace_manifest(NAMESPACE, RUN_ID), namespace_object())

    def create_configmap(self) -> Call:
        return self.cluster.create_raw(
            demo.configmap_manifest(NAMESPACE, RUN_ID, demo.WORKER_SOURCE, None),
            configmap_object(),
        )

    def create_job(self, batch: Optional[Batch] = None) -> Call:
        batch = batch or self.batch
        return self.cluster.create_raw(batch.manifest(), batch.job())

    def get_namespace(self, present: bool = True) -> Call:
        return self.cluster.get("namespace", NAMESPACE, namespace_object() if present else None)

    def get_configmap(self, present: bool = True) -> Call:
        return self.cluster.get("configmap", demo.CONFIGMAP_NAME, configmap_object() if present else None, NAMESPACE)

    def get_job(self, answer: Optional[Dict[str, Any]], batch: Optional[Batch] = None) -> Call:
        batch = batch or self.batch
        return self.cluster.get("job", batch.job_name, answer, NAMESPACE)

    def deletion_watch(
        self, kind: str, name: str, seconds: int, chunks: Sequence[Chunk] = (), hold: bool = True
    ) -> Call:
        """cleanup's watch of what it deleted (`job` or `namespace`), started once a poll shows it
        still there; its --request-timeout is what is left of the wait (`seconds`, or fewer)."""
        plural = {"job": "jobs", "namespace": "namespaces"}[kind]
        namespace = NAMESPACE if kind == "job" else None
        by_name = [plural, "--field-selector", f"metadata.name={name}"]
        return self.cluster.watch(by_name, chunks, seconds, f"gone-{kind}-{name}", hold=hold, namespace=namespace)

    # -- waiting ------------------------------------------------------------------------

    @property
    def watch_seconds(self) -> int:
        """The watches' --request-timeout: the client's wait (deadline + 30 s) plus 5 s, rounded up."""
        return math.ceil(self.deadline_seconds + demo.CLIENT_GRACE_SECONDS + 5)

    def job_watch(
        self,
        batch: Optional[Batch] = None,
        final: Optional[Dict[str, Any]] = None,
        chunks: Optional[Sequence[Chunk]] = None,
        seconds: Optional[int] = None,
        **options: Any,
    ) -> Call:
        """The Job's watch: ADDED as created, then (once the pod watch has sent everything) its final
        state; or the `chunks` given. `seconds`: its --request-timeout, when not watch_seconds."""
        batch = batch or self.batch
        final = batch.final_job() if final is None else final
        if chunks is None:
            chunks = [
                watch_event("ADDED", batch.job_running()),
                # Sent once the pod watch has sent everything, as an API server orders them; the tool
                # may still read it first (separate streams), and then waits for the pods' last events.
                watch_event("MODIFIED", final, wait_for=f"pods-{batch.job_name}.done"),
            ]
        by_name = ["jobs", "--field-selector", f"metadata.name={batch.job_name}"]  # a list watch by name
        seconds = self.watch_seconds if seconds is None else seconds
        return self.cluster.watch(by_name, chunks, seconds, f"job-{batch.job_name}", **options)

    def pod_watch(
        self,
        batch: Optional[Batch] = None,
        chunks: Optional[Sequence[Chunk]] = None,
        seconds: Optional[int] = None,
        **options: Any,
    ) -> Call:
        """The pods' watch: each pod ADDED Pending, MODIFIED Running, MODIFIED in its final state."""
        batch = batch or self.batch
        if chunks is None:
            chunks = [watch_event("ADDED", batch.pod(episode, "pending")) for episode in batch.episodes]
            chunks += [watch_event("MODIFIED", batch.pod(episode, "running")) for episode in batch.episodes]
            chunks += [watch_event("MODIFIED", batch.pod(episode)) for episode in batch.episodes]
        chunks = list(chunks)
        if chunks:  # the Job's watch has started first, as the tool starts it first
            chunks[0] = dataclasses.replace(chunks[0], wait_for=f"job-{batch.job_name}.started")
        seconds = self.watch_seconds if seconds is None else seconds
        return self.cluster.watch(["pods", "-l", batch.selector], chunks, seconds, f"pods-{batch.job_name}", **options)

    # -- collecting ---------------------------------------------------------------------

    def pods_and_events(self, batch: Optional[Batch] = None) -> Call:
        """The listing of pods and events: when the pod watch does not prove the pods final."""
        batch = batch or self.batch
        return self.cluster.get_list("pods,events", [*batch.pods(), *batch.events()])

    def events(self, batch: Optional[Batch] = None) -> Call:
        """The events alone: the pod watch already holds every pod's final state."""
        batch = batch or self.batch
        return self.cluster.get_list("events", batch.events())

    @staticmethod
    def watch_is_final(batch: Batch) -> bool:
        """Whether the pods as last watched are provably their final state (docs/call-plan.md): the
        Job Complete, every pod terminal and none deleted."""
        status = batch.final_job().get("status") or {}
        complete = any(c.get("type") == "Complete" for c in status.get("conditions") or [])
        counted = (status.get("succeeded") or 0) + (status.get("failed") or 0) == len(batch.episodes)
        deleted = any(episode.deleted_at is not None for episode in batch.episodes)
        terminal = all(episode.phase in ("Succeeded", "Failed") for episode in batch.episodes)
        return complete and counted and terminal and not deleted

    def logs(self, batch: Optional[Batch] = None) -> Call:
        """Every pod's log with one `logs -l` (a batch of up to 10 episodes)."""
        batch = batch or self.batch
        return self.cluster.logs_by_selector(batch.selector, batch.prefixed_logs())

    def follow_sets(
        self, batch: Batch, watched: Optional[Sequence[Dict[str, Any]]] = None, complete: Optional[bool] = None
    ) -> List[List[Any]]:
        """The sets of episodes whose logs are followed while they run, as the default pod watch
        (pod_watch) delivers them: a set of labelled pods whose container has started closes at
        10 pods, when one of its pods is being deleted, once every pod has started, or when one of
        its pods ends and the round's reads stay within ceil(count / 10) with every pod still to
        start in full sets (docs/call-plan.md). What started but is in no set at the decision is
        followed then, unless the Job completed (`complete`, by default the batch's final Job's
        condition): then it is read with the rest after the decision."""
        if complete is None:
            complete = any(
                condition.get("type") == "Complete" and condition.get("status") == "True"
                for condition in (batch.final_job().get("status") or {}).get("conditions") or []
            )
        if watched is None:
            stages = [(episode, "running") for episode in batch.episodes] + [(e, "final") for e in batch.episodes]
            watched = [batch.pod(episode, stage) for episode, stage in stages]
        by_name = {episode.name: episode for episode in batch.episodes}
        sets: List[List[Any]] = []
        waiting: List[Any] = []
        followed: set = set()
        ended: set = set()
        for pod in watched:
            episode = by_name[pod["metadata"]["name"]]
            if episode.index is None or episode.unlabelled:
                continue
            ending = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if ending:
                ended.add(episode.name)
            if episode.name in followed or not demo.container_started(pod):
                continue
            if episode not in waiting:
                waiting.append(episode)
            deleting = bool(pod["metadata"].get("deletionTimestamp"))
            still_to_start = max(0, batch.count - len(followed) - len(waiting))
            per_read = demo.LOG_SELECTOR_PODS
            spare = len(sets) + 1 + -(-still_to_start // per_read) <= -(-batch.count // per_read)
            if (
                len(waiting) >= demo.LOG_SELECTOR_PODS
                or (ending and spare)
                or deleting
                or len(followed) + len(waiting) >= batch.count
            ):
                sets.append(sorted(waiting, key=lambda each: (int(str(each.index)), each.name)))
                followed.update(each.name for each in waiting)
                waiting = []
        if waiting and not complete:  # after the decision: what started but was never followed
            sets.append(sorted(waiting, key=lambda each: (int(str(each.index)), each.name)))
        return sets

    def follows(
        self, batch: Batch, watched: Optional[Sequence[Dict[str, Any]]] = None, complete: Optional[bool] = None
    ) -> List[Call]:
        """The calls that follow the pods' logs while they run (follow_sets), for the default pod
        watch or the pods in the order a test's watch delivers them (`watched`)."""
        calls = []
        for chosen in self.follow_sets(batch, watched, complete):
            indexes = ",".join(str(index) for index in sorted({int(str(episode.index)) for episode in chosen}))
            selector = f"{batch.selector},{demo.INDEX_LABEL} in ({indexes})"
            streams = demo.LOG_SELECTOR_PODS * (1 + batch.infra_retries)
            calls.append(self.cluster.follow_logs(selector, batch.prefixed_logs(chosen), streams))
        return calls

    def log_reads(
        self, batch: Batch, watched: Optional[Sequence[Dict[str, Any]]] = None, complete: Optional[bool] = None
    ) -> List[Call]:
        """The logs read after the decision: those no followed read brought (follow_sets: an
        episode that printed nothing, or was never followed); when nothing was followed, as
        before (unfollowed_log_reads). The rest (`unread`): up to 10, one `logs -l` of exactly
        their completion indexes; beyond, one per 10 indexes of those wanted; each by `logs POD`
        when one lacks the index label or shares its index with a followed pod, or only one is
        wanted (unread_pods_selector)."""
        followed = [
            episode for chosen in self.follow_sets(batch, watched, complete) for episode in chosen if episode.log
        ]
        if not followed:
            return self.unfollowed_log_reads(batch)
        lost = [e for e in batch.episodes if batch.infra_retries and demo.infra_loss(batch.pod(e))]
        unread = [episode for episode in batch.episodes if episode not in lost and episode not in followed]
        wanted = [
            episode
            for episode in unread
            if batch.count <= demo.LOG_CROSSCHECK_LIMIT or demo.log_wanted(batch.pod(episode))
        ]
        by_name = [self.cluster.logs_of(episode.name, episode.log) for episode in wanted]
        followed_indexes = {episode.index for episode in followed}
        if (
            len(wanted) < 2
            or any(episode.index is None or episode.unlabelled for episode in unread)
            or followed_indexes & {episode.index for episode in unread}
        ):
            return by_name
        sets = [unread] if len(unread) <= demo.LOG_SELECTOR_PODS else None
        if sets is None:
            by_index = sorted(wanted, key=lambda episode: int(str(episode.index)))
            sets = [
                by_index[start : start + demo.LOG_SELECTOR_PODS]
                for start in range(0, len(by_index), demo.LOG_SELECTOR_PODS)
            ]
        reads = []
        for chosen in sets:
            indexes = sorted({int(str(episode.index)) for episode in chosen})
            matched_lost = [episode for episode in lost if episode.index in indexes and not episode.unlabelled]
            selector = f"{batch.selector},{demo.INDEX_LABEL} in ({','.join(map(str, indexes))})"
            ignore_errors = bool(lost) if len(unread) <= demo.LOG_SELECTOR_PODS else bool(matched_lost)
            reads.append(
                self.cluster.logs_by_selector(selector, batch.prefixed_logs([*chosen, *matched_lost]), ignore_errors)
            )
        return reads

    def unfollowed_log_reads(self, batch: Batch) -> List[Call]:
        """The logs a round reads: up to the cross-check limit every pod's, with one `logs -l`
        up to 10 pods, else one `logs -l` per 10 completion indexes (every measured Job is
        Indexed; a pod without the index label, as on Kubernetes 1.27, is read by `logs POD`);
        beyond it, those of the pods whose termination message cannot carry their events (empty,
        or cut at the front). A pod lost to the infrastructure (--infra-retries) is never read,
        but a selector that matches it runs with --ignore-errors."""
        lost = [e for e in batch.episodes if batch.infra_retries and demo.infra_loss(batch.pod(e))]
        kept = [episode for episode in batch.episodes if episode not in lost]
        if 1 < batch.count <= demo.LOG_SELECTOR_PODS:
            return [self.cluster.logs_by_selector(batch.selector, batch.prefixed_logs(), bool(lost))]
        wanted = [
            episode
            for episode in kept
            if batch.count <= demo.LOG_CROSSCHECK_LIMIT or demo.message_needs_log(episode.message)
        ]
        if len(wanted) < 2 or any(episode.index is None or episode.unlabelled for episode in wanted):
            return [self.cluster.logs_of(episode.name, episode.log) for episode in wanted]
        by_index = sorted(wanted, key=lambda episode: int(str(episode.index)))
        reads = []
        for start in range(0, len(by_index), demo.LOG_SELECTOR_PODS):
            chosen = by_index[start : start + demo.LOG_SELECTOR_PODS]
            indexes = sorted({int(str(episode.index)) for episode in chosen})
            matched_lost = [episode for episode in lost if episode.index in indexes and not episode.unlabelled]
            selector = f"{batch.selector},{demo.INDEX_LABEL} in ({','.join(map(str, indexes))})"
            text = batch.prefixed_logs([*chosen, *matched_lost])
            reads.append(self.cluster.logs_by_selector(selector, text, bool(matched_lost)))
        return reads

    def round(self, batch: Batch) -> List[Call]:
        """Create one Job, watch it and its pods, then read the events and the logs at once (or,
        when the watch does not prove the pods final, list pods and events, then the logs)."""
        calls = [self.create_job(batch), self.job_watch(batch), self.pod_watch(batch)]
        calls.append(self.events(batch) if self.watch_is_final(batch) else self.pods_and_events(batch))
        # the logs followed while the pods ran are planned last (the stub matches calls by their
        # arguments), so the round's other calls keep their places
        return calls + self.log_reads(batch) + self.follows(batch)

    def run(self) -> List[Call]:
        """The whole happy path: preflight, namespace with ConfigMap (and the watch of its account,
        planned last: the stub matches calls by their arguments, so the rounds keep their places),
        then each round."""
        calls = [*self.preflight(), self.create_namespace_and_configmap()]
        for batch in self.batches:
            calls += self.round(batch)
        return [*calls, self.serviceaccount_watch()]

    # -- cleanup ------------------------------------------------------------------------

    def cleanup(self, jobs_present: bool = True, bound: bool = True) -> List[Call]:
        """Ownership reads, then each Job deleted (foreground) and gone, then the namespace."""
        calls = [self.cluster.config_view(bound=bound), self.get_namespace()]
        calls += [self.get_job(batch.job() if jobs_present else None, batch) for batch in self.batches]
        if jobs_present:
            for batch in self.batches:
                calls.append(
                    self.cluster.delete(
                        "job", batch.job_name, "--cascade=foreground", "--wait=false", namespace=NAMESPACE
                    )
                )
                calls.append(self.get_job(None, batch))
        calls += [self.cluster.delete("namespace", NAMESPACE, "--wait=false"), self.get_namespace(present=False)]
        return calls


# The stub on disk #############################################################


_WRAPPER: List[Path] = []
_WRAPPER_LOCK = threading.Lock()


def stub_wrapper() -> Path:
    """The one `kubectl` wrapper that execs the stub, written once per test process (the stub
    finds its plan through $KUBECTL_STUB_DIR); each stub's bin/kubectl is a link to it."""
    with _WRAPPER_LOCK:
        if not _WRAPPER:
            folder = Path(tempfile.mkdtemp(prefix="rl-plan-stub-"))
            atexit.register(shutil.rmtree, folder, True)
            write_executable(folder / "kubectl", f'#!/bin/sh\nexec "{sys.executable}" -S -E "{STUB}" "$@"\n')
            _WRAPPER.append(folder / "kubectl")
        return _WRAPPER[0]


def answered_in_process(make_kubectl: Callable[..., demo.Kubectl]) -> Callable[..., demo.Kubectl]:
    """`make_kubectl` whose Kubectl answers the stub's calls in this process (its `spawner`),
    through real pipes; any other program it runs is still a process."""

    def made(*args: Any, **kwargs: Any) -> demo.Kubectl:
        kubectl = make_kubectl(*args, **kwargs)
        kubectl.spawner = spawner(stub_wrapper())
        return kubectl

    return made


class KubectlStub:
    """A bin directory with the stub as `kubectl`, its plan, and the record of its calls."""

    def __init__(self, root: Path) -> None:
        self.directory = root / "state"
        self.bin_dir = root / "bin"
        self.directory.mkdir(parents=True)
        self.bin_dir.mkdir()
        self.plan: List[Call] = []
        self.planned_at: List[float] = []  # time.monotonic() when each call was planned
        self.plan_groups: List[int] = []  # the expect() that planned each call, counted from 1
        self.groups = 0
        self._write_plan()
        (self.bin_dir / "kubectl").symlink_to(stub_wrapper())

    @property
    def kubectl(self) -> str:
        return str(self.bin_dir / "kubectl")

    def env(self) -> Dict[str, str]:
        return {"PATH": str(self.bin_dir), "KUBECTL_STUB_DIR": str(self.directory)}

    def expect(self, *calls: Call) -> None:
        """Append calls to the plan. Signal names are local to one expect(): two runs planned
        one after the other each wait for their own watches."""
        self.retire_optional_calls_of_runs_made()
        self.groups += 1
        group = f"{self.groups}:"

        def local(name: Optional[str]) -> Optional[str]:
            return group + name if name else name

        planned_at = time.monotonic()  # the system-wide clock the stub reads too
        for call in calls:
            self.plan.append(
                dataclasses.replace(
                    call,
                    name=local(call.name) or "",
                    wait_for=local(call.wait_for) or "",
                    chunks=tuple(dataclasses.replace(chunk, wait_for=local(chunk.wait_for)) for chunk in call.chunks),
                )
            )
            self.planned_at.append(planned_at)
            self.plan_groups.append(self.groups)
        self._write_plan()

    def retire_optional_calls_of_runs_made(self) -> None:
        """An optional call of an earlier expect() whose run was made (one of its calls was) and
        did not make it (a watch the tool ended before it started) is never made later: marked
        consumed, so the next run's same call (a test's runs share the namespace's name) is not
        matched to it and given its answer. CI, with stub processes: the first run of
        test_missing_runtime_class_creates_nothing ended before its account watch started, and
        the second run's watch took that refused one's place, leaving its own planned."""
        import fcntl

        consumed_path = str(self.directory / "consumed")
        with open(self.directory / "lock", "w") as lock:  # the stub's claim's lock
            fcntl.flock(lock, fcntl.LOCK_EX)
            consumed = kubectl_stub.load(consumed_path, [])
            assert isinstance(consumed, list)
            made = {self.plan_groups[index] for index in consumed}
            retired = [
                index
                for index, call in enumerate(self.plan)
                if call.optional and index not in consumed and self.plan_groups[index] in made
            ]
            if retired:
                kubectl_stub.save_consumed(consumed_path, [*consumed, *retired])

    def _write_plan(self) -> None:
        entries = [call.to_json() for call in self.plan]
        for entry, call, planned_at in zip(entries, self.plan, self.planned_at):
            if call.counts_down:
                entry["counts_down_since"] = planned_at
        # What the stub reads, replaced whole (a new inode: kubectl_stub.load_plan's key).
        (self.directory / "plan.tmp").write_bytes(marshal.dumps(entries))
        os.replace(self.directory / "plan.tmp", self.directory / "plan")

    def write_readable_plan(self) -> Path:
        """DIR/plan.json, the plan for people: written when a test's plan fails (verify_plan), not
        on every change, which cost the call-plan tests a tenth of their CPU."""
        path = self.directory / "plan.json"
        entries = marshal.loads((self.directory / "plan").read_bytes())
        path.write_text(indented_json(entries, 1))
        return path

    def records(self) -> List[Dict[str, Any]]:
        """Every call the stub received, in order: argv, stdin, the plan entry it matched, a problem."""
        records = []
        with contextlib.suppress(FileNotFoundError), open(self.directory / "calls", "rb") as stream:
            while True:
                try:
                    records.append(marshal.load(stream))
                except EOFError:
                    break
        return records

    def calls(self) -> List[List[str]]:
        """The argv of each call made (a call's later record of a signal that never came aside)."""
        return [record["argv"] for record in self.records() if "signal" not in record]

    def problems(self) -> List[str]:
        return [record["problem"] for record in self.records() if record["problem"]]

    def snapshot(self, name: str) -> Optional[bytes]:
        """What a chunk's `snapshot` copied, or None when the file did not exist then."""
        path = self.directory / "snapshots" / name
        return path.read_bytes() if path.exists() else None

    def leftover(self) -> List[Call]:
        path = self.directory / "consumed"
        consumed = set(marshal.loads(path.read_bytes())) if path.exists() else set()
        return [call for index, call in enumerate(self.plan) if index not in consumed and not call.optional]


class MainThreadClock:
    """rl_batch_demo's `time` module for a test whose waits run in the main thread (cleanup's
    polls, on the tool's own schedule): there, sleep() returns at once, records what it was
    asked, and moves this clock on by as much, so monotonic() and time() read that much later,
    as after a real sleep, without the test waiting. Every other thread (the tool's watch
    readers, a test running beside it, tests/concurrently.py) gets the real clock and real sleeps,
    so it suits flows whose timed waits all run in the main thread."""

    def __init__(self) -> None:
        self.seconds: List[float] = []  # each sleep of the main thread, as asked
        self.offset = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def _main() -> bool:
        return threading.current_thread() is threading.main_thread()

    def sleep(self, seconds: float) -> None:
        if not self._main():
            time.sleep(seconds)
            return
        self.seconds.append(seconds)
        self.offset += max(0.0, seconds)
        time.sleep(0)  # let the other threads run, as a sleep would

    def monotonic(self) -> float:
        return time.monotonic() + (self.offset if self._main() else 0.0)

    def time(self) -> float:
        return time.time() + (self.offset if self._main() else 0.0)


# The test case ################################################################


class Result(NamedTuple):
    code: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


FAST = demo.Timing(
    retry_delays=(0.0, 0.0, 0.0),
    retry_budget_seconds=20.0,
    watch_tick_seconds=0.01,
    poll_interval=0.01,
    blocked_check_seconds=30.0,  # never within a test, unless a test asks for it
    # Ends once the watched pods prove final; a test whose pods never do sets its own. Long, so a
    # loaded host's pod stream read late never turns a planned path into the listing (CI once
    # read the Complete, then the pods' last events more than 0.5 s later).
    final_pods_grace_seconds=5.0,
    serviceaccount_wait_seconds=2.0,  # waited out only when a test plans no account
    cleanup_first_poll=0.0,
    cleanup_max_poll=0.0,
    interrupt_save_timeout=5.0,
    progress_log_interval=0.0,
)


class CallPlanTestCase(unittest.TestCase):
    """A sealed environment, a kubectl stub with an empty plan, a fixed run id, instant waits."""

    timing = FAST

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-plan-test-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)
        self.stub = KubectlStub(self.root / "stub")
        environment = unittest.mock.patch.dict(os.environ, self.stub.env(), clear=True)
        environment.start()
        self.addCleanup(environment.stop)
        for target, value in (("new_run_id", lambda: RUN_ID), ("TIMING", self.timing)):
            patcher = unittest.mock.patch.object(demo, target, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        if not stub_processes():  # the stub answers in this process (tests/stubprocess.py)
            patcher = unittest.mock.patch.object(demo, "make_kubectl", answered_in_process(demo.make_kubectl))
            patcher.start()
            self.addCleanup(patcher.stop)
        self.addCleanup(self.verify_plan)  # runs first: cleanups run last in, first out

    def verify_plan(self) -> None:
        problems = self.stub.problems()
        leftover = [" ".join(call.argv) for call in self.stub.leftover()]
        if problems or leftover:
            self.stub.write_readable_plan()
        self.assertEqual(problems, [], "kubectl calls the plan did not expect")
        self.assertEqual(leftover, [], "planned kubectl calls that were never made")

    def expect(self, *calls: Call) -> None:
        self.stub.expect(*calls)

    def fresh_stub(self) -> None:
        """A new stub, plan and output directory within the same test (for subTests)."""
        self.subtests = getattr(self, "subtests", 0) + 1
        self.root = self.root / f"sub-{self.subtests}"
        self.stub = KubectlStub(self.root / "stub")
        os.environ.update(self.stub.env())  # restored by setUp's patch

    def shorten_process_timeouts(self, hangs: Callable[[List[str], Optional[str]], bool], seconds: float = 0.5) -> None:
        """The kubectl calls that `hangs(argv, stdin)` picks (a planned hang, Call.sleep) are
        killed after `seconds` whatever --kubectl-timeout says, as the tool would kill them, but
        without the test waiting for the real timeout; every other call keeps its own timeout,
        however slow a loaded machine makes it. Messages still name the tool's own timeout. Only this
        plan's calls (its context): the patch is on the class, which a concurrent test's Kubectl
        (the contract tests', in a background thread) uses too."""
        original = demo.Kubectl._run_process

        def run_process(
            kubectl: demo.Kubectl, argv: List[str], stdin: Optional[str], timeout: float, started: Any = None
        ) -> Any:
            planned = f"--context={CONTEXT}" in argv and hangs(argv[1:], stdin)
            return original(kubectl, argv, stdin, min(timeout, seconds) if planned else timeout, started)

        patcher = unittest.mock.patch.object(demo.Kubectl, "_run_process", run_process)
        patcher.start()
        self.addCleanup(patcher.stop)

    def set_timing(self, **changes: Any) -> None:
        """This test's waits: the fast ones with some changed (e.g. blocked_check_seconds)."""
        patcher = unittest.mock.patch.object(demo, "TIMING", dataclasses.replace(self.timing, **changes))
        patcher.start()
        self.addCleanup(patcher.stop)

    def tool(self, *argv: str) -> Result:
        """rl_batch_demo.main(argv) in this process, its stdout and stderr captured."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = demo.main(list(argv))
            except SystemExit as exit:  # argparse
                code = int(exit.code or 0)
        return Result(code, out.getvalue(), err.getvalue())

    def run_ok(self, *argv: str) -> Result:
        result = self.tool(*argv)
        self.assertEqual(result.code, 0, result)
        self.assertNotIn("Traceback", result.stderr)
        self.assertNotIn("rl-batch-demo: error:", result.stderr)
        return result

    def assert_fails(self, result: Result, exit_code: int, *fragments: str) -> str:
        """Exit code and exactly one `rl-batch-demo: error:` line holding every fragment; the line."""
        self.assertEqual(result.code, exit_code, result)
        self.assertNotIn("Traceback", result.stderr)
        error_lines = [line for line in result.stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertEqual(len(error_lines), 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, error_lines[0])
        return error_lines[0]

    def out(self, name: str = "out") -> Path:
        return self.root / name

    def read_json(self, name: str, directory: str = "out") -> Any:
        return json.loads((self.out(directory) / name).read_text())

    def receipt(self, directory: str = "out") -> Dict[str, Any]:
        return records.written(self, self.out(directory) / "receipt.json", demo.Receipt)

    def results(self, directory: str = "out") -> Dict[str, Any]:
        return records.written_results(self, self.out(directory))

    def recorded_calls(self, directory: str = "out") -> List[Dict[str, Any]]:
        """The tool's own record of its calls (kubectl-calls.json)."""
        return self.read_json("kubectl-calls.json", directory)
