"""Test-side helper for the fake kubectl (``tests/fake_kubectl.py``, package ``tests/fakekube``).

``FakeCluster`` builds a fake Kubernetes cluster in a temporary directory and
a ``bin`` directory whose only entry is a ``kubectl`` wrapper that runs the
fake.  A test runs the tool with ``cluster.env()`` (PATH is *only* that bin
directory, so a real kubectl can never be reached) and then inspects what the
tool did: the argv of every kubectl call, the stored API objects, the
container logs, the controller's record of how many episodes ran at once.

Typical use::

    cluster = FakeCluster(pathlib.Path(tmp), faults={"episode": {"1": "exit1"}})
    try:
        proc = subprocess.run([sys.executable, "rl_batch_demo.py", ...], env=cluster.env(), ...)
        cluster.wait_idle()
        jobs = cluster.objects("Job", "rl-demo")
        calls = cluster.calls()
    finally:
        cluster.close()

The cluster
-----------
* contexts ``("fake-ctx",)``, current context ``"fake-ctx"``; ``kubeconfig``
  (a path) makes the contexts reachable only through ``--kubeconfig PATH`` or
  ``KUBECONFIG=PATH`` (a minimal kubeconfig file is written there if missing).
* namespaces ``default``, ``kube-system``, ``kube-public``, ``kube-node-lease``.
* RuntimeClass ``cube`` (handler ``cube``, overhead cpu 250m / memory 768Mi),
  nodes ``node-a`` and ``node-b`` (64 CPUs, 256Gi, schedulable).
* ``pods``: other workloads' Running pods, each bound to a node with its requests
  (``{"name", "namespace", "node", "requests"}``): the scheduler counts them against the
  node's allocatable, and ``get pods --all-namespaces`` lists them.
* ``forbidden``: (verb, resource) pairs the fake user may not do, e.g.
  ``("create", "jobs")`` or ``("get", "pods/log")``; they answer
  SelfSubjectAccessReviews with ``allowed: false`` and make the matching
  requests fail with ``Error from server (Forbidden)``.

Faults (``faults=`` or ``set_faults``; passed to kubectl in env
``FAKE_KUBECTL_FAULTS``; a background Job controller keeps the faults of the
``create`` call that started it)
------
``episode``: ``{"INDEX": MODE or [MODES]}`` by pod creation order (0-based);
    MODE is one of ``exit1``, ``duplicate_ready``, ``drop_reward``, ``noise``,
    ``malformed``, ``skew``, ``restart``, ``evict``, ``preempt``, ``rejected``, ``replace``, ``pending``,
    ``no_message``, ``message_mismatch``, ``wrong_id``, ``ignore_sigterm``; ``disk_limit`` (the
    kubelet evicts the pod over its own ephemeral-storage limit: no DisruptionTarget) and
    ``disk_pressure_own`` (the node ran low on disk and the message names the episode container's
    use over its request: DisruptionTarget), both from pkg/kubelet/eviction/eviction_manager.go.
``pods_wait_for_pod_watch``: SECONDS at most: no container starts before a watch of the
    namespace's pods has printed its list, the order of a real cluster, where a pod's sandbox
    takes seconds to start and a watch a fraction of one (controller.waiting_for_pod_watch).
``no_pod_failure_policy``: the API server drops ``spec.podFailurePolicy`` (its gate off).
``pod_failure_backoff_seconds``: the job controller's first backoff before it replaces a failed
    pod of an index (default 10 s, as the real one's; doubled for each further failure).
``logs_unavailable``: ``[INDEX, ...]`` pods whose logs cannot be read.
``no_pod_index_label``: the job controller of Kubernetes before 1.28 (no PodIndexLabel): an
    Indexed Job's pods carry their completion index as an annotation only, not as a label.
``stand_in_artifacts``: with ``stand_in_worker``, each pod also sends the built-in worker's two
    artifacts (framed in its log, listed by its reward event), so every log is read.
``log_bytes_per_second``: each log response is written at this rate; with ``--request-timeout``
    a response that needs longer ends there, as kubectl's does (commands.transfer).
``container_log_max_size``: the kubelet's ``containerLogMaxSize`` in bytes (default 10 MiB):
    ``kubectl logs`` returns only the current file (tests/fakekube/containerlog.py).
``deadline_seconds``: overrides the Job's activeDeadlineSeconds (real seconds).
``episode_seconds``: extra time each pod stays Running after its worker ends.
``api_errors``: ``[{"match": "create Namespace", "times": 1, "error": "500",
    "after_apply": false}]``; errors ``500 403 429 503 refused timeout``; match
    is ``"VERB TARGET"`` (``create KIND``, ``get job``, ``get pods,events``,
    ``logs``, ``delete job``, ``config view``, ``version``; resource
    aliases are normalised, a bare verb matches every request of that verb);
    without ``times`` the rule fires forever. With ``"retry_after": SECONDS`` the answer
    carries Retry-After, and kubectl itself waits and asks again (up to 10 times), so the
    caller sees the later answer.
``hang``: ``{"match": ..., "seconds": 30}`` (or a list): sleep before
    answering; with a shorter ``--request-timeout`` the call fails after that
    timeout with kubectl's client-timeout message.
``watch_ends_early``, ``namespace_stuck``, ``legacy_labels``: booleans.
``unreachable``: true (the API server refuses every connection) or N (the first N calls that
    contact it are refused, then it answers): each call prints what kubectl v1.32 prints then,
    client-go's klog lines and all (tests/fakekube/commands.py, connection_refused).
``server_version``: e.g. ``"v1.26.0"``; before v1.29 the API server drops ``backoffLimitPerIndex``
    and ``maxFailedIndexes`` (1.28: the feature gate is off by default), and before v1.28 strict
    validation refuses them (``strict decoding error: unknown field ...``).
``client_version``: the kubectl minor the fake plays where wordings differ (``logs`` of a missing pod).

The control plane as it is (issue 19):
``watch_gap``: seconds between a single object's GET and its watch (``get KIND NAME -w``), whose
    first event kubectl drops: a change in that window is never printed.
``watch_error``: ``["jobs", ...]``: those resources' watches end with an ERROR event (410 Expired).
``watch_garbage``: ``{"jobs": "not_utf8" | "odd_shape"}``: after the list, those watches print bytes
that are not UTF-8, or each object again with `status.conditions` a string, and go on.
``serviceaccount_delay``: seconds after a namespace's creation before its ``default``
    ServiceAccount exists; until then ServiceAccount admission refuses its pods (FailedCreate).
``rules_review``: ``"incomplete"``: a webhook authorizer beside RBAC: the SelfSubjectRulesReview
    says `incomplete: true`, so a run asks its access reviews.
``queue``: Kueue installed: ``{"admit_after": SECONDS (null: never), "versions": ["v1beta1"],
    "cluster_queues": ["team-a"], "manage_jobs_without_queue_name": false}``: its CRDs served in
    those versions (``get --raw /apis/kueue.x-k8s.io``, LocalQueue creates), its webhook suspends
    only a Job labelled ``kueue.x-k8s.io/queue-name`` (or, with manage_jobs_without_queue_name,
    an unlabelled one too), and it resumes after admit_after only a labelled Job whose LocalQueue
    exists in its namespace and points at an existing ClusterQueue; any other stays suspended
    forever (Kueue docs, "Run a Kubernetes Job", "Setup manageJobsWithoutQueueName"; Kueue
    pkg/controller/core/workload_controller.go, "LocalQueue X doesn't exist").
``admission``: ``["managed_by", "sidecar", "security_context", "pod_sidecar", "queue"]``: mutating
    admission of the Job (apiserver.py admit_job).
``termination_grace_seconds``: a failed Job's pods' grace period (else the pod's
    terminationGracePeriodSeconds); Failed comes only after every pod has stopped, FailureTarget at
    once. Episode mode ``ignore_sigterm``: the pod's worker ignores SIGTERM and never ends by itself.
``mixed_digests``: ``["node-b", ...]`` nodes whose copy of a tag is another build: their
    pods report another ``imageID`` digest for it (an image given by digest always reports
    that digest).

The scheduler honours the pod's ``nodeSelector`` (the RuntimeClass's ``scheduling`` is merged
into it at pod creation, as the RuntimeClass admission controller does) against the nodes'
labels, which include ``kubernetes.io/hostname``.

Logs and termination messages are what a real node serves (tests/fakekube/containerlog.py):
CRLF becomes LF, only the current (unrotated) log file is returned, and a termination message is
the last 4 KiB its container wrote. ``logs -l`` reads the pods one after another in random order,
paced by client-go's token bucket (5 a second after a burst of 10), as kubectl does.

Indexed Jobs (``completionMode: Indexed``): one pod per index, lowest pending index first,
named ``JOB-INDEX-xxxxx``, with the index annotation and label and env JOB_COMPLETION_INDEX;
with ``backoffLimitPerIndex`` a failed index is failed for good (``status.failedIndexes``),
``maxFailedIndexes`` exceeded ends the Job (``MaxFailedIndexesExceeded``), and an ended Job
with failed indexes is ``Failed`` (``FailedIndexes``).  ``episode`` faults stay by creation
order, which is index order while parallelism lets every pending index start (a retried or
replaced index gets the next creation index).  The worker finds the ConfigMap's
``tasks.jsonl`` through env RL_DEMO_TASKS.
``node_lost``: ``{"node": NAME, "after": SECONDS, "toleration_seconds": 300, "then": null | "delete"
    | "out_of_service", "then_after": SECONDS}``: that node's kubelet stops answering SECONDS after a
    pod started there: the pod stays Running (nothing sets its phase), the Node turns Ready Unknown
    with the unreachable taints and the pod Ready False (node lifecycle controller, MarkPodsNotReady);
    the taint manager deletes it after toleration_seconds (DefaultTolerationSeconds), and it stays
    Terminating; PodGC marks it Failed only once the Node is deleted (gcOrphaned) or tainted
    node.kubernetes.io/out-of-service (gcTerminating), ``then`` after ``then_after`` s. Its log cannot
    be read (no kubelet); a foreground delete of its Job waits for it (controller.py lose, tick_lost).
``old_job_api``: the API server drops ``backoffLimitPerIndex`` and ``maxFailedIndexes`` (a
    server without the JobBackoffLimitPerIndex feature), so backoffLimit defaults to 6, and the
    podFailurePolicy's FailIndex rules with them (pkg/registry/batch/job/strategy.go
    PrepareForCreate); ``server_version`` v1.28 does the same, and before 1.28 a FailIndex rule
    is refused (422, an unsupported action).

Sandbox start-up (``pod_records`` shows what the fake decided for each pod):
``scheduled_event_time``: ``"event_time"`` (default: the scheduler's events.k8s.io Event, with
    a microsecond ``eventTime`` and null first/lastTimestamp) or ``"legacy"`` (no eventTime).
``image_pull``: the kubelet's Pulled events: ``"cached"`` (default, "already present on
    machine"), ``"pulled"`` (every pod pulls: 1.234 s + 0.1 s x (creation index % 5), 0.25 s
    more including waiting), ``"mixed"`` (odd creation indexes pulled), ``"missing"`` (odd
    creation indexes have no Pulled event).
``sandbox_kernel``: true: each pod gets a /proc of its own kernel (env RL_DEMO_PROC) booted
    0.3 s after its creationTimestamp (the container starts only after that); the worker's
    start ticks put its process start a recorded ``kernel_boot_to_process_start_seconds``
    after the boot.  Without it the worker sees the host's kernel ("shared").
``lxcfs``: true: each pod gets the /proc of a runc container under LXCFS or Sysbox (env
    RL_DEMO_PROC): /proc/uptime is the container's age, /proc/self/stat's starttime stays on the
    host's boot clock (three days of ticks), so the two disagree.
Kubelet ``/metrics`` (``get --raw /api/v1/nodes/NODE/proxy/metrics``; tests/fakekube/kubelet.py):
    per pod one RunPodSandbox (0.7..0.8 s), CreateContainer (0.015 s), StartContainer (0.18 s)
    and, if pulled, PullImage, on top of a non-zero baseline; ``kubelet_observations``.  The
    handler family ``kubelet_run_podsandbox_duration_seconds`` holds microseconds unless the
    node's ``kubelet_version`` (a ``nodes`` entry's key; default v1.32.0) is 1.36 or later.
``kubelet_foreign_pods``: N operations of other pods per family on each reading after a
    node's first.  ``kubelet_restart``: true: the kubelet restarts after a node's first
    reading (later readings have lower counters).

Command line (no cluster needed; README.md, "Try it without a cluster")
------------
``python3 tests/fakecluster.py demo [--count N] [--output DIR]``: a fake cluster in a temporary
    directory, ``rl_batch_demo.py run --count N --output DIR`` against it (PATH holding only the
    fake kubectl, as in the tests), ``cleanup --output DIR``, then the fake is stopped and removed;
    DIR (default ``rl-fake-demo``) keeps the results; the exit code is the tool's.
``python3 tests/fakecluster.py env DIR``: a fake cluster under DIR, and the shell lines that put
    its kubectl first on PATH, for exploring by hand.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib.util
import io
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from types import ModuleType
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

FAKE_KUBECTL = pathlib.Path(__file__).resolve().with_name("fake_kubectl.py")

DEFAULT_RUNTIMECLASSES: Dict[str, dict] = {
    "cube": {"handler": "cube", "overhead": {"podFixed": {"cpu": "250m", "memory": "768Mi"}}},
}
DEFAULT_NODES: List[dict] = [
    {"name": "node-a", "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    {"name": "node-b", "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
]

# os.environ as it was when the tests were loaded: tests running in threads beside tests that
# patch os.environ build their subprocesses' environments from this (tests/concurrently.py).
ENVIRONMENT: Dict[str, str] = dict(os.environ)


# the fork server's environment variables, as tests/fakekube/zygote.py names them (its own
# module, os and sys only; this file also runs as a script, from tests/)
try:
    from tests.fakekube.zygote import SERVE_ENV, ZYGOTE_ENV
except ImportError:
    from fakekube.zygote import SERVE_ENV, ZYGOTE_ENV  # type: ignore[no-redef]

FORK_SERVER_SWITCH = "RL_DEMO_FAKE_FORK_SERVER"  # "0": every fake kubectl call starts its own interpreter
_FORK_SERVERS: Dict[int, Tuple[str, subprocess.Popen[bytes]]] = {}  # test process ID -> its fork server
_FORK_SERVER_LOCK = threading.Lock()


def fork_server() -> Optional[str]:
    """The socket of this test process's fork server for the fake's calls (tests/fakekube/zygote.py),
    started on first use: None where it cannot run (not Linux, no os.pidfd_open) or is switched
    off (RL_DEMO_FAKE_FORK_SERVER=0, as .ci/run's end-to-end pass does, so the plain path stays
    tested). A call made before the server listens runs the fake itself. The server ends when this
    process does (its stdin, a pipe only this process holds, closes) once its calls have ended. A
    process forked from this one (tests/concurrently.py Forked) starts its own."""
    if ENVIRONMENT.get(FORK_SERVER_SWITCH) == "0" or not hasattr(os, "pidfd_open"):  # Linux only
        return None
    with _FORK_SERVER_LOCK:
        if os.getpid() not in _FORK_SERVERS:
            directory = tempfile.mkdtemp(prefix="rl-fake-forks-")
            path = os.path.join(directory, "socket")
            server = subprocess.Popen(
                [sys.executable, "-S", str(FAKE_KUBECTL)],
                env={**ENVIRONMENT, SERVE_ENV: path, "PYTHONDONTWRITEBYTECODE": ""},
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # not in the terminal's process group: a Ctrl-C reaches calls through clients
            )
            owner = os.getpid()

            def stop() -> None:
                if os.getpid() == owner and server.stdin is not None:
                    with contextlib.suppress(OSError):
                        server.stdin.close()
                    # at once, unless a call still runs: then subprocess warns that the server is
                    # still running, which names a call a test left behind
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        server.wait(2)
                    shutil.rmtree(directory, ignore_errors=True)

            atexit.register(stop)
            _FORK_SERVERS[os.getpid()] = (path, server)
        return _FORK_SERVERS[os.getpid()][0]


def fork_server_pid() -> Optional[int]:
    """The process ID of this test process's fork server, once fork_server() started it."""
    with _FORK_SERVER_LOCK:
        entry = _FORK_SERVERS.get(os.getpid())
    return entry[1].pid if entry else None


def write_executable(path: pathlib.Path, text: str) -> None:
    """Write an executable script through a short-lived `sh`, never through a file descriptor of
    this process: a subprocess forked by another thread (tests/concurrently.py) at that moment
    would inherit the descriptor until its own exec, and an exec of the new script meanwhile
    fails with "Text file busy" (ETXTBSY)."""
    subprocess.run(
        ["/bin/sh", "-c", 'umask 022 && cat > "$1" && chmod 755 "$1"', "sh", str(path)],
        input=text.encode("utf-8"),
        env={"PATH": ENVIRONMENT.get("PATH") or os.defpath},  # os.environ may be a test's, without cat
        check=True,
        timeout=30,
    )


_FAKE_MODULE: Dict[str, ModuleType] = {}
_FAKE_MODULE_LOCK = threading.Lock()


def fake_module() -> ModuleType:
    """fake_kubectl.py loaded as a module: it exposes ``init_state`` and ``Store`` of
    tests/fakekube/store.py, which owns the on-disk format."""
    with _FAKE_MODULE_LOCK:  # tests run in threads (tests/concurrently.py): load it once
        if "module" not in _FAKE_MODULE:
            _FAKE_MODULE["module"] = _load_fake_module()
    return _FAKE_MODULE["module"]


def _load_fake_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_fake_kubectl_impl", str(FAKE_KUBECTL))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_fake_in_process(
    argv: Sequence[str], *, env: Dict[str, str], input: Optional[str] = None
) -> subprocess.CompletedProcess[str]:
    """`kubectl ARGV` answered by the fake's own `main` in this process, as its process would
    answer it (exit code, stdout, stderr, the call recorded in calls.jsonl), for the tests of
    the fake's words and refusals, where a process per call (30 ms of CPU each) buys nothing.
    It swaps os.environ, sys.stdin, sys.stdout and the SIGTERM handler while it runs, so only a
    test of the main thread may use it (runs_concurrently = False: tests/concurrently.py); the
    fake's stderr is a stream of its own (fakekube.common.ERROR_STREAM), never sys.stderr, which
    a warning from elsewhere may reach meanwhile. A call the fake answers by starting its
    controller (a Job's create) needs the process."""
    if threading.current_thread() is not threading.main_thread():
        raise AssertionError("run_fake_in_process swaps os.environ and sys.std*: main thread only")
    main = fake_module().main
    common = sys.modules["fakekube.common"]  # the fake's own, as fake_module() loaded it
    stdout, stderr = io.BytesIO(), io.StringIO()
    saved = (dict(os.environ), sys.stdin, sys.stdout, signal.getsignal(signal.SIGTERM))
    os.environ.clear()
    os.environ.update(env)
    streams = [
        io.TextIOWrapper(io.BytesIO((input or "").encode("utf-8")), encoding="utf-8"),
        io.TextIOWrapper(stdout, encoding="utf-8", write_through=True),
    ]
    sys.stdin, sys.stdout = streams
    common.ERROR_STREAM = stderr
    try:
        code = main(list(argv))
    finally:
        for stream in streams:
            stream.flush()
            stream.detach()  # the bytes stay readable: a wrapper closes its buffer when collected
        common.ERROR_STREAM = None
        os.environ.clear()
        os.environ.update(saved[0])
        sys.stdin, sys.stdout = saved[1], saved[2]
        signal.signal(signal.SIGTERM, saved[3])
    return subprocess.CompletedProcess(
        ["kubectl", *argv], code, stdout.getvalue().decode("utf-8", "replace"), stderr.getvalue()
    )


class FakeCluster:
    """A fake cluster on disk plus a ``kubectl`` on a private PATH."""

    def __init__(
        self,
        root: pathlib.Path,
        *,
        contexts: Sequence[str] = ("fake-ctx",),
        current_context: Optional[str] = "fake-ctx",
        kubeconfig: Optional[str] = None,
        runtimeclasses: Optional[Dict[str, dict]] = None,
        nodes: Optional[List[dict]] = None,
        forbidden: Iterable[Tuple[str, str]] = (),
        faults: Optional[dict] = None,
        server: str = "127.0.0.1:6443",  # host:port, as kubectl names it in its messages
        pods: Sequence[dict] = (),  # other workloads' Running pods, bound to nodes (apiserver.make_running_pod)
    ) -> None:
        root = pathlib.Path(root)
        root.mkdir(parents=True, exist_ok=True)
        self._base = pathlib.Path(tempfile.mkdtemp(prefix="fakecluster-", dir=str(root)))
        self.state_dir = self._base / "state"
        self.bin_dir = self._base / "bin"
        self.state_dir.mkdir()
        self.bin_dir.mkdir()
        self.kubeconfig = kubeconfig
        self.contexts = list(contexts)
        self.server = server
        self._faults: dict = dict(faults or {})
        if kubeconfig is not None and not os.path.exists(kubeconfig):
            self._write_kubeconfig(pathlib.Path(kubeconfig))
        fake_module().init_state(
            str(self.state_dir),
            contexts=self.contexts,
            current_context=current_context,
            kubeconfig=os.path.abspath(kubeconfig) if kubeconfig is not None else None,
            forbidden=[list(f) for f in forbidden],
            runtimeclasses=DEFAULT_RUNTIMECLASSES if runtimeclasses is None else runtimeclasses,
            nodes=DEFAULT_NODES if nodes is None else nodes,
            server=server,
            pods=list(pods),
        )
        wrapper = self.bin_dir / "kubectl"
        # Start-up time matters: every kubectl call of a test starts the fake.  -S skips
        # site-packages (the fake needs only the standard library), and the fake may cache its
        # modules' bytecode (tests/fakekube/__pycache__, ignored by git) even where the
        # environment sets PYTHONDONTWRITEBYTECODE, which would recompile them on every call.
        write_executable(
            wrapper, f'#!/bin/sh\nPYTHONDONTWRITEBYTECODE= exec "{sys.executable}" -S "{FAKE_KUBECTL}" "$@"\n'
        )

    def _write_kubeconfig(self, path: pathlib.Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            "apiVersion: v1",
            "kind: Config",
            "clusters:",
            "- name: fake",
            "  cluster:",
            f"    server: https://{self.server}",
            "contexts:",
        ]
        for ctx in self.contexts:
            lines += [f"- name: {ctx}", "  context:", "    cluster: fake", "    user: fake-user"]
        lines += ["users:", "- name: fake-user", "  user:", "    token: fake"]
        path.write_text("\n".join(lines) + "\n")

    # -- environment -----------------------------------------------------------------

    def env(self) -> Dict[str, str]:
        """Environment for running the tool against this cluster."""
        # not os.environ: tests/concurrently.py; without KUBECONFIG and KUBECTL (which the tool
        # prefers to PATH), so that a real cluster and a real kubectl can never be reached
        env = {k: v for k, v in ENVIRONMENT.items() if k not in ("KUBECONFIG", "KUBECTL")}
        env["PATH"] = str(self.bin_dir)
        env["FAKE_KUBECTL_STATE"] = str(self.state_dir)
        env["FAKE_KUBECTL_FAULTS"] = json.dumps(self._faults)
        server = fork_server()
        if server is not None:
            env[ZYGOTE_ENV] = server
        return env

    def set_faults(self, faults: dict) -> None:
        self._faults = dict(faults)

    # -- what happened ------------------------------------------------------------------

    def _call_lines(self) -> List[dict]:
        path = self.state_dir / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def calls(self) -> List[List[str]]:
        """argv (without "kubectl") of every kubectl invocation, in order."""
        return [rec["argv"] for rec in self._call_lines() if rec.get("event") == "call"]

    def call_records(self) -> List[Dict[str, Any]]:
        """Every invocation: argv, start, end (None if killed), rc, stdin (None if not read)."""
        done = {rec["id"]: rec for rec in self._call_lines() if rec.get("event") == "done"}
        result = []
        for rec in self._call_lines():
            if rec.get("event") != "call":
                continue
            d = done.get(rec["id"], {})
            result.append(
                {
                    "argv": rec["argv"],
                    "start": rec["start"],
                    "end": d.get("end"),
                    "rc": d.get("rc"),
                    "stdin": d.get("stdin"),
                    "pid": rec.get("pid"),
                }
            )
        return result

    def objects(self, kind: str, namespace: Optional[str] = None) -> List[dict]:
        """Stored objects of ``kind`` ("Namespace", "Job", "Pod", "ConfigMap", "Event", ...)."""
        found = [
            o
            for o in fake_module().Store(str(self.state_dir)).list(kind, namespace)
            if namespace is None or o["metadata"].get("namespace") == namespace
        ]
        return sorted(found, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    def pod_log(self, namespace: str, pod: str) -> str:
        """The container log of ``pod`` (after fault transforms)."""
        return (self.state_dir / "logs" / namespace / (pod + ".log")).read_text()

    def max_concurrent_pods(self, namespace: str, job: str) -> int:
        """The controller's record of the peak number of simultaneously running episodes."""
        path = self.state_dir / "controllers" / f"{namespace}__{job}.stats.json"
        if not path.exists():
            return 0
        return int(json.loads(path.read_text()).get("max_concurrent", 0))

    def job_completed_at(self, namespace: str, job: str) -> float:
        """Client-clock time at which the controller made the Job's Complete condition visible."""
        path = self.state_dir / "controllers" / f"{namespace}__{job}.stats.json"
        return float(json.loads(path.read_text())["completed_at"])

    def job_decided_at(self, namespace: str, job: str) -> float:
        """Client-clock time at which the controller made its decision (SuccessCriteriaMet) visible,
        a moment before Complete."""
        path = self.state_dir / "controllers" / f"{namespace}__{job}.stats.json"
        return float(json.loads(path.read_text())["decided_at"])

    def pod_records(self, namespace: str, job: str) -> Dict[str, dict]:
        """Per pod, what the controller decided: ``scheduled_event_time`` (epoch seconds or None),
        ``pull`` ("cached", None for no Pulled event, or the pull's seconds), ``kernel``
        (fault sandbox_kernel), ``kubelet`` (its node, handler and runtime operation seconds),
        ``started_at`` (its container's process spawned) and ``terminated_at`` (just before its
        terminated status was written), both client clock."""
        path = self.state_dir / "controllers" / f"{namespace}__{job}.stats.json"
        return dict(json.loads(path.read_text()).get("records") or {})

    def kubelet_observations(self, node: str) -> List[dict]:
        """The runtime operations the fake kubelet of ``node`` timed for this test's pods
        (``op``: sandbox, create_container, start_container, pull_image; ``seconds``)."""
        path = self.state_dir / "kubelet" / f"{node}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def controller_logs(self) -> str:
        """stdout/stderr of every background controller (for debugging failures)."""
        parts = []
        for p in sorted((self.state_dir / "controllers").glob("*.log")):
            parts.append(f"--- {p.name}\n{p.read_text(errors='replace')}")
        return "\n".join(parts)

    # -- lifecycle -----------------------------------------------------------------------

    def _controllers(self) -> List[Tuple[pathlib.Path, Optional[int]]]:
        result = []
        cdir = self.state_dir / "controllers"
        if not cdir.exists():
            return result
        for marker in cdir.glob("*.json"):
            if marker.name.endswith(".stats.json"):
                continue
            pid_file = marker.with_suffix(".pid")
            pid = None
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().strip())
            result.append((marker, pid))
        return result

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            pass
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True

    def _busy(self) -> List[str]:
        busy = []
        for marker, pid in self._controllers():
            if not marker.exists():
                continue
            if pid is None:
                try:
                    young = time.time() - marker.stat().st_mtime < 10
                except OSError:
                    continue
                if young:
                    busy.append(marker.stem)
            elif self._alive(pid):
                busy.append(marker.stem)
        return busy

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every background Job controller has exited."""
        deadline = time.monotonic() + timeout
        while True:
            busy = self._busy()
            if not busy:
                return
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"fake cluster controllers still running after {timeout}s: {busy}\n"
                    + self.controller_logs()[-4000:]
                )
            time.sleep(0.02)

    def close(self) -> None:
        """Kill leftover controllers and their episodes, then remove the temp dirs. A pod runs in
        a session of its own (its container), which the controller's SIGKILL does not reach, so
        each pod the controllers started (state/pods.pids) is killed too: a pod that ignores
        SIGTERM would otherwise sleep on after the test (the fake's `ignore_sigterm`, an hour)."""
        for marker, pid in self._controllers():
            if pid is not None and marker.exists() and self._alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
        pod_pids = fake_module().POD_PIDS_FILE  # the fake's own name for it (this file also runs as a script)
        with contextlib.suppress(OSError):
            for line in (self.state_dir / pod_pids).read_text().split():
                self._kill_pod(int(line))
        shutil.rmtree(self._base, ignore_errors=True)

    def _kill_pod(self, pid: int) -> None:
        """The pod's session, if that pid is still one of this cluster's pods (its interpreter
        lives under this cluster's state directory): never a process that reused the pid."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as stream:
                command = stream.read().split(b"\0")
        except OSError:
            return
        if not command or not command[0].startswith(os.fsencode(str(self.state_dir)) + b"/"):
            return
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)

    def __enter__(self) -> FakeCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


TOOL = FAKE_KUBECTL.parent.parent / "rl_batch_demo.py"
DEMO_OUTPUT = "rl-fake-demo"  # not a name the README's real-cluster commands use
SIMULATION = "a simulated cluster: episodes run here; its figures describe no real cluster"


def shown(argv: Sequence[str]) -> str:
    """A tool command line as the README shows it: `python3 rl_batch_demo.py ...`."""
    return " ".join(["python3", "rl_batch_demo.py", *(shlex.quote(arg) for arg in argv)])


def run_tool(argv: Sequence[str], env: Dict[str, str]) -> int:
    """The tool as a user runs it, its output going straight to this terminal. Ctrl-C reaches the
    tool too (same process group): it saves its diagnostics and exits 130, which this waits for."""
    print(f"$ {shown(argv)}", file=sys.stderr, flush=True)
    process = subprocess.Popen([sys.executable, str(TOOL), *argv], env=env)
    while True:
        try:
            return process.wait()
        except KeyboardInterrupt:
            continue  # the tool handles it; stopping the fake under it would lose its diagnostics


def demo(count: str, output: str) -> int:
    """Start a fake cluster in a temporary directory, run a batch against it, clean the run up and
    stop the fake: the README's first try without a cluster. Returns the tool's exit code (the
    run's, or the cleanup's when the run succeeded and the cleanup did not)."""
    results = pathlib.Path(output)
    existed = results.exists()  # the tool refuses it; then nothing in it is this demo's to touch
    with tempfile.TemporaryDirectory(prefix="rl-fake-cluster-") as scratch:
        cluster = FakeCluster(pathlib.Path(scratch))
        try:
            # each line within 80 columns, as the tool's own on a terminal (a path is not broken)
            print(f"# {SIMULATION}\n# its state: {cluster.state_dir}", file=sys.stderr, flush=True)
            code = run_tool(["run", "--count", count, "--output", output], cluster.env())
            if not existed and _receipt_kubectl(results) == str(cluster.bin_dir / "kubectl"):
                cleaned = run_tool(["cleanup", "--output", output], cluster.env())  # what the run created
                code = code or cleaned
            with contextlib.suppress(AssertionError):  # close() kills whatever is still running
                cluster.wait_idle(timeout=10)
        finally:
            cluster.close()
    if existed:
        pass  # the tool said why
    elif (results / "results.json").exists():
        print(f"results: {results / 'results.json'} (every figure),")
        print(f"         {results / 'timeline.svg'} (the run as a picture),")
        print(f"         {results / 'rewards.jsonl'} (one reward per episode);")
        print("         docs/outputs.md describes every file")
    elif results.is_dir():
        print(f"no results.json: the run did not succeed; its diagnostics are in {results}")
        print("(error.json says why)")
    print("the fake cluster is stopped and removed;")
    print("for a real cluster, see the README's next section")
    return code


def _receipt_kubectl(output: pathlib.Path) -> Optional[str]:
    """The kubectl a run's receipt pins, if it wrote one: the demo cleans up only a run of its own fake."""
    try:
        return str(json.loads((output / "receipt.json").read_text(encoding="utf-8"))["kubectl"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 tests/fakecluster.py",
        description="The tests' fake cluster, for trying rl_batch_demo.py without a cluster. " + SIMULATION + ".",
        allow_abbrev=False,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    run = commands.add_parser(
        "demo",
        help="start a fake cluster, run a batch against it, clean up and stop it",
        description="Start a fake cluster in a temporary directory, run "
        f"`{shown(['run', '--count', 'N', '--output', 'DIR'])}` against it (PATH holding only the fake "
        "kubectl), clean the run up and stop the fake. The exit code is the tool's.",
        allow_abbrev=False,
    )
    run.add_argument("--count", default="10", metavar="N", help="episodes (default 10; the tool checks it)")
    run.add_argument(
        "--output",
        default=DEMO_OUTPUT,
        metavar="DIR",
        help=f"new directory for the run's results (default {DEMO_OUTPUT}; an existing one is refused)",
    )
    env = commands.add_parser(
        "env",
        help="make a fake cluster under DIR and print the shell lines that put its kubectl first on PATH",
        description="Make a fake cluster under DIR and print the shell lines that put its kubectl first "
        'on PATH, for exploring by hand: eval "$(python3 tests/fakecluster.py env DIR)". It stays until '
        "DIR is removed.",
        allow_abbrev=False,
    )
    env.add_argument("dir", metavar="DIR")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python3 tests/fakecluster.py demo`` (the README's no-cluster try) or ``env DIR``."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return demo(args.count, args.output)
    cluster = FakeCluster(pathlib.Path(args.dir).resolve())
    print(f'export PATH={shlex.quote(str(cluster.bin_dir))}:"$PATH"')
    print(f"export FAKE_KUBECTL_STATE={shlex.quote(str(cluster.state_dir))}")
    print("unset KUBECONFIG KUBECTL FAKE_KUBECTL_FAULTS")
    print(f"# {SIMULATION}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
