"""Flows: one Job from create to decision, and the warm-up with the pinned image."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import queue
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .constants import (
    CONTAINER_NAME,
    EXIT_CLUSTER,
    EXIT_EPISODE,
    EXIT_REFUSED,
    HANDLER_SANDBOX_FAMILY,
    INDEX_LABEL,
    JOB_STOPPED,
    KUBELET_OPERATIONS,
    KUBELET_READ_THREADS,
    LOG_READ_PROCESSES,
    LOG_SELECTOR_PODS,
    RUN_LABEL,
)
from .core_basics import (
    create_path,
    dig,
    is_int,
    one_episode_job_manifest,
    parse_json_documents,
    pod_belongs_to,
    pod_selector,
    required_uid,
)
from .core_clocks import _NODE_NAME, KubeletReading, MetricsScanner, kubelet_reading
from .core_cluster import (
    _true_condition,
    declares_artifacts,
    final_pods_from_watch,
    job_condition,
    job_suspended,
    lost_node_note,
    message_needs_log,
    node_state,
    pod_counts,
    record_pod_sighting,
    template_changes,
    termination_message,
    unanswered_node,
    watched_object_problem,
)
from .core_guide import HOSTNAME_LABEL, PROBE_JOB_NAME, WARMUP_DIR, WARMUP_JOB_PREFIX, pinned_image, warmup_job_manifest
from .core_permissions import eligible_nodes
from .errors import DemoError, JobRefused, KubectlFailure, KubectlTimeout
from .kubectl import Kubectl, concurrently
from .persistence import EpisodeLogReader, write_empty_log, write_warmup_block
from .records import (
    ArtifactEntry,
    EpisodeRow,
    KubeObject,
    LogBudgets,
    OneEpisodeJob,
    PodLog,
    PreparedImage,
    RoundObservation,
    RoundResult,
    RunSettings,
    Warmup,
    WarmupNode,
)
from .status import Progress, say_stderr

# Flow: one Job ################################################################
# Create without repeating, watch a Job to its end, read its pods' logs, save diagnostics. Uses
# everything above.


class OwnedCreator:
    """Creates the run's objects without ever blindly repeating a create.

    A request that never reached the server is retried; an ambiguous failure (timeout, reset,
    500) or AlreadyExists is answered by looking the object up and adopting it only if this
    run's label proves it is ours."""

    def __init__(self, kubectl: Kubectl, run_id: str) -> None:
        self.kubectl = kubectl
        self.run_id = run_id
        self.settled: Dict[Tuple[str, str], KubeObject] = {}  # (kind, name) -> created or adopted

    def create_together(self, manifests: List[KubeObject], resources: List[str]) -> List[KubeObject]:
        """Create several objects with one `kubectl create` of a List. kubectl creates them in
        order and goes on past a failure, so after one each object missing from its answer is
        settled on its own by the rules of `create` (see the class)."""
        failure: Optional[DemoError] = None
        answered: List[KubeObject] = []
        try:
            answered = self.kubectl.create({"apiVersion": "v1", "kind": "List", "items": manifests})
        except KubectlFailure as error:
            failure = error
            with contextlib.suppress(ValueError, RecursionError):
                answered = parse_json_documents(error.stdout)
        except KubectlTimeout as error:
            failure = error
        objects = []
        names = [(item.get("kind"), dig(item, "metadata", "name")) for item in answered]
        for manifest, resource in zip(manifests, resources):
            kind, name = manifest["kind"], manifest["metadata"]["name"]
            match = answered[names.index((kind, name))] if (kind, name) in names else None
            if match is not None:
                required_uid(match, f"the created {kind} {name}")
            elif failure is None:
                raise DemoError(f"kubectl create printed no {kind} {name}; inspect kubectl-calls.json", EXIT_CLUSTER)
            elif isinstance(failure, KubectlFailure) and failure.not_applied:
                match = self.create(manifest, resource)
            elif isinstance(failure, KubectlFailure) and not (failure.already_exists or failure.transient):
                raise failure
            else:
                reason = failure.first_line if isinstance(failure, KubectlFailure) else str(failure)
                match = self.adopt(manifest, resource, reason)
            self.settled[(kind, name)] = match
            objects.append(match)
        return objects

    def create(self, manifest: KubeObject, resource: str) -> KubeObject:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        delays = list(self.kubectl.timing.retry_delays)
        while True:
            try:
                created = self.kubectl.create_raw(create_path(manifest), manifest)
                required_uid(created, f"the created {kind} {name}")
                return created
            except KubectlTimeout as timeout:
                return self.adopt(manifest, resource, str(timeout))
            except KubectlFailure as failure:
                if failure.not_applied and delays:
                    self.kubectl.note(f"warning: retrying the create of {kind} {name} after: {failure.first_line}")
                    time.sleep(delays.pop(0))
                    continue
                if not (failure.already_exists or failure.transient):
                    raise
                return self.adopt(manifest, resource, failure.first_line)

    def adopt(self, manifest: KubeObject, resource: str, failure: str) -> KubeObject:
        """After an ambiguous create: the object if it exists and carries this run's label."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        live = self.kubectl.get(resource, name, manifest["metadata"].get("namespace"))
        if live is None:
            raise DemoError(
                f"creating {kind} {name} failed ({failure}) and it does not exist; "
                "nothing was repeated; run cleanup, then try again",
                EXIT_CLUSTER,
            )
        owner = dig(live, "metadata", "labels", RUN_LABEL)
        if owner != self.run_id:
            raise DemoError(
                f"{kind} {name} already exists and is not this run's (label {RUN_LABEL}={owner!r}); "
                "it was left untouched",
                EXIT_REFUSED,
            )
        required_uid(live, f"the {kind} {name}")
        say_stderr(f"warning: adopted {kind} {name} after an ambiguous create ({failure})")
        return live


def refuse_changed_pod(pod_spec: KubeObject, pod: Any, label: str) -> None:
    """JobRefused when the cluster changed what this pod of Job `label` runs from the pod spec
    the run submitted (a sidecar injected at the pod's creation, a container changed): checked on
    each pod as the watch first shows it, and on each pod listed after the decision (a pod watch
    that lagged the Job's showed none: CI saw such a run exit 0)."""
    changes = template_changes(pod_spec, (pod.get("spec") or {}) if isinstance(pod, dict) else {})
    if changes:
        name = dig(pod, "metadata", "name")
        raise JobRefused(f"the cluster changed what pod {name} of Job {label} runs: " + "; ".join(changes))


class JobWatch:
    """What wait_for_job knows of one Job and its pods, changed only by `take` (one event of
    either watch): pure, so table tests drive it without threads or processes (the pod hook
    aside, which the caller gives).

    A Job created suspended (`job`, as the API server stored it) waits in its queue; once
    resumed it has `run_seconds` more (activeDeadlineSeconds counts from then), so the client's
    `deadline` moves. `pod_spec` is the pod spec the run submitted: a pod that runs something else
    (a sidecar injected, a container changed) raises JobRefused. `on_pod` is told of each pod as
    the watch delivers it."""

    def __init__(
        self,
        job: KubeObject,
        deadline: float,
        run_seconds: float = 0.0,
        pod_spec: Optional[KubeObject] = None,
        on_pod: Optional[Callable[[KubeObject], None]] = None,
        label: str = "",
        read_node: Optional[Callable[[str], str]] = None,
    ) -> None:
        self.live = job
        self.job_uid = str(job["metadata"]["uid"])
        self.label = label or f"{job['metadata'].get('namespace')}/{job['metadata']['name']}"
        self.queued = job_suspended(job)
        self.deadline = deadline
        self.run_seconds = run_seconds
        self.pod_spec = pod_spec
        self.on_pod = on_pod
        self.sightings: Dict[str, Dict[str, Any]] = {}
        self.last_pods: Dict[str, KubeObject] = {}
        self.deleted = False  # a pod was deleted during the watch
        self.pods_doubtful = False  # the pod watch sent an object of a shape no API server sends
        self.admitted_seen: Optional[float] = None
        self.job_stream_open = self.pod_stream_open = True
        self.watch_error = ""  # an ERROR event of the Job's watch (410 Expired: its resourceVersion too old)
        self.read_node = read_node  # a node's state (node_state), read once per node by the caller's kubectl
        self.lost_pods: Dict[str, str] = {}  # pods still Running on a node that stopped answering -> the node
        self.node_states: Dict[str, str] = {}

    def take(self, tag: str, wall: float, clock: float, event: Optional[KubeObject], decided: bool = False) -> None:
        """One event of the Job's watch (`tag` "job") or the pods' ("pods"), None when that watch
        ended; `wall` and `clock` its arrival on the client's clocks. Before the decision, the
        Job's deletion raises DemoError; after it (`decided`), only the Job's new states count."""
        if event is None:
            if tag == "job":
                self.job_stream_open = False
            else:
                self.pod_stream_open = False  # the Job's watch, or polling, still says when it ends
            return
        kind, obj = event.get("type"), event.get("object")
        if tag == "pods":
            self._pod_event(kind, obj, wall)
        elif kind == "DELETED" and not decided:
            raise DemoError(
                f"Job {self.label} was deleted while the run waited for it; inspect events.txt", EXIT_EPISODE
            )
        elif kind == "ERROR" and not decided:
            status = obj if isinstance(obj, dict) else {}
            self.watch_error = f"ERROR {status.get('code')}: {status.get('reason')}: {status.get('message')}"
        elif kind in (("MODIFIED",) if decided else ("ADDED", "MODIFIED")) and not watched_object_problem(obj):
            assert isinstance(obj, dict)  # watched_object_problem: a dict of the Job's shape
            self.take_job(obj, clock)

    def take_job(self, obj: KubeObject, clock: float) -> None:
        """The Job as now seen (an event, or a poll); a queued Job's resumption moves the deadline."""
        self.live = obj
        if self.queued and self.admitted_seen is None and not job_suspended(obj):
            self.admitted_seen = clock
            self.deadline = max(self.deadline, clock + self.run_seconds)

    def _pod_event(self, kind: Any, pod: Any, wall: float) -> None:
        if kind in ("ADDED", "MODIFIED", "DELETED") and watched_object_problem(pod):
            self.pods_doubtful = True  # an event it could not read: the pods are listed once the Job ends
            return
        pod_name = dig(pod, "metadata", "name") if isinstance(pod, dict) else None
        if kind in ("ADDED", "MODIFIED"):
            if isinstance(pod_name, str) and pod_name and pod_name not in self.last_pods and self.pod_spec is not None:
                refuse_changed_pod(self.pod_spec, pod, self.label)
            record_pod_sighting(self.sightings, pod, wall)
            if isinstance(pod_name, str) and pod_name:
                self.last_pods[pod_name] = pod
                self._watch_node(pod_name, pod)
                if self.on_pod is not None:
                    self.on_pod(pod)
        elif kind == "DELETED":
            self.deleted = True
            if isinstance(pod_name, str) and pod_name:  # the pod's state at its deletion (its final one)
                self.last_pods[pod_name] = pod

    def _watch_node(self, pod_name: str, pod: KubeObject) -> None:
        """A pod whose node stopped answering (unanswered_node): its node read once, for its
        state in the progress line and in the failure; a pod that ended since is no longer lost."""
        node = unanswered_node(pod)
        if not node:
            self.lost_pods.pop(pod_name, None)
            return
        self.lost_pods[pod_name] = node
        if node not in self.node_states:
            self.node_states[node] = self.read_node(node) if self.read_node is not None else node_state(node, None)

    @property
    def condition(self) -> Optional[str]:
        """The job controller's decision, once the Job shows one (job_condition)."""
        return job_condition(self.live)

    def observation(
        self,
        condition: Optional[str] = None,
        wall: Optional[float] = None,
        clock: Optional[float] = None,
        blocked: str = "",
    ) -> RoundObservation:
        return RoundObservation(
            self.live,
            condition,
            wall,
            clock,
            self.sightings,
            blocked,
            self.last_pods,
            self.deleted or self.pods_doubtful,
            self.queued,
            self.admitted_seen,
            dict(self.lost_pods),
            dict(self.node_states),
        )

    def settled(self, condition: str) -> bool:
        """After the decision, whether nothing more is worth waiting for: the Job has its terminal
        condition (Complete after SuccessCriteriaMet, Failed after FailureTarget: job.json then
        shows both) and, after a success, the pods as watched prove their final state (the two
        watches are separate streams: the pods' last events may arrive just after the Job's,
        which spares the listing of every pod, see final_pods_from_watch); after a failure, every
        pod as watched has ended, as many as the Job counted, so each ended pod's verdict is
        streamed (rewards.jsonl) before the round's failure retracts it. A watch that ended brings
        nothing more either."""
        terminal = "Complete" if condition == "Complete" else "Failed"
        ended = bool(_true_condition(self.live, (terminal,))) or not self.job_stream_open
        if self.deleted or not self.pod_stream_open:
            return ended
        if condition == "Complete":
            return ended and final_pods_from_watch(self.observation(condition), self.job_uid) is not None
        phases = [dig(pod, "status", "phase") for pod in self.last_pods.values()]
        status = self.live.get("status") or {}
        counts: List[Any] = [status.get("succeeded"), status.get("failed")]
        counted = sum(value for value in counts if is_int(value))
        return ended and all(phase in ("Succeeded", "Failed") for phase in phases) and len(phases) >= counted

    def every_counted_pod_seen(self) -> bool:
        """Whether the pod watch has shown at least as many of the Job's pods as the Job counts
        (active, succeeded, failed, as it last showed them), or brings nothing more. A round
        stopped early (--stop-after) lists no pods: pods.json is the pods as watched, and a watch
        that started after the pods existed sends its first listing all at once, the pods that
        ended first among them."""
        if not self.pod_stream_open:
            return True
        status = self.live.get("status") or {}
        counts: List[Any] = [status.get("active"), status.get("succeeded"), status.get("failed")]
        counted: int = sum(value for value in counts if is_int(value))
        shown = sum(1 for pod in self.last_pods.values() if pod_belongs_to(pod, self.job_uid))
        return shown >= counted


def wait_for_job(
    kubectl: Kubectl,
    namespace: str,
    job: KubeObject,
    deadline: float,
    submitted: float,
    progress: Progress,
    stop: Optional[threading.Event] = None,
    on_pod: Optional[Callable[[KubeObject], None]] = None,
    pod_spec: Optional[KubeObject] = None,
    run_seconds: float = 0.0,
    enough: Optional[Callable[[], bool]] = None,
) -> RoundObservation:
    """Watch the Job (and its pods) until the job controller decides (job_condition); poll if the
    Job's watch ends early. What the events mean is JobWatch's; this loop owns the watches, the
    polls, the progress line and the time.

    The Job's watch is a list watch by name (`get jobs --field-selector metadata.name=NAME`): it
    prints every event, where a single object's watch drops its first one (kubectl get.go watch()),
    and with it a change made between its GET and its watch, such as a quick Job's Complete. The
    events carry the client clock of their arrival, so the decision is seen within milliseconds of
    the API server sending it. `on_pod` is told of each pod as the watch delivers it (RoundRewards:
    a terminated pod's reward is known from its status). A Job created suspended (`job`, as the API
    server stored it) waits in its queue, shown as queued; once resumed it has `run_seconds` more
    (activeDeadlineSeconds counts from then). `pod_spec` is the pod spec the run submitted: a pod
    that runs something else (a sidecar injected, a container changed) raises JobRefused. `enough`
    (--stop-after, a stream left early): once it says so, before the job controller decided, the
    wait ends with the condition JOB_STOPPED, the pods as watched then."""
    timing = kubectl.timing
    name = job["metadata"]["name"]
    label = f"{namespace}/{name}"

    def read_node(node: str) -> str:
        try:
            return node_state(node, kubectl.get("node", node))
        except KubectlFailure as failure:  # get nodes denied: the pod's signs alone are named
            return node_state(node, None, failure.first_line)
        except KubectlTimeout as timeout:
            return node_state(node, None, str(timeout))

    state = JobWatch(job, deadline, run_seconds, pod_spec, on_pod, label, read_node)
    sink: queue.Queue[Any] = queue.Queue()
    seconds = max(1.0, deadline - time.monotonic()) + (run_seconds if state.queued else 0.0) + 5
    by_name = ["jobs", "--field-selector", f"metadata.name={name}"]
    watches = [kubectl.watch("job", by_name, namespace, sink, seconds)]
    watches.append(kubectl.watch("pods", ["pods", "-l", pod_selector(job)], namespace, sink, seconds))
    next_poll = 0.0
    next_blocked_check = submitted + timing.blocked_check_seconds

    def finished(condition: str, wall: float, clock: float) -> RoundObservation:
        """The job controller decided: take in the events already received, then wait a moment
        for more while JobWatch.settled says so. The decision's own arrival is what the figures
        keep."""
        grace_ends = time.monotonic() + timing.final_pods_grace_seconds
        while True:
            remaining = grace_ends - time.monotonic()
            waiting = not state.settled(condition) and remaining > 0
            try:
                tag, received_at, received_clock, event = sink.get(timeout=remaining) if waiting else sink.get_nowait()
            except queue.Empty:
                counts = pod_counts(state.sightings, state.live)
                progress.update(label, clock - submitted, counts, state.deadline - clock)  # the last
                return state.observation(condition, wall, clock)
            state.take(tag, received_at, received_clock, event, decided=True)

    def stopped(wall: float, clock: float) -> RoundObservation:
        """`enough` said so: take in the events already received first (the loop asks between two
        events, and a watch's first listing arrives at once), then wait a moment for any pod the
        Job counts that the pod watch has not shown yet, so that pods.json names every pod it
        stops. A decision that arrives meanwhile is the round's (a Job that completed first)."""
        grace_ends = clock + timing.final_pods_grace_seconds
        while True:
            if state.condition is not None:
                return finished(state.condition, wall, clock)
            remaining = grace_ends - time.monotonic()
            if remaining <= 0:  # a stream that never pauses still ends the wait
                return state.observation(JOB_STOPPED, wall, clock)
            try:
                waiting = not state.every_counted_pod_seen()
                tag, received_at, received_clock, event = sink.get(timeout=remaining) if waiting else sink.get_nowait()
            except queue.Empty:
                return state.observation(JOB_STOPPED, wall, clock)
            state.take(tag, received_at, received_clock, event)

    try:
        while True:
            if stop is not None and stop.is_set():  # the run was interrupted while this thread waited
                raise KeyboardInterrupt
            condition = state.condition
            now = time.monotonic()
            if condition is not None:
                return finished(condition, time.time(), now)
            if now >= state.deadline:
                return state.observation()
            if enough is not None and enough():
                return stopped(time.time(), now)
            timeout = min(timing.watch_tick_seconds, state.deadline - now)
            if not state.job_stream_open:
                timeout = min(timeout, max(0.0, next_poll - now))
            try:
                tag, wall, clock, event = sink.get(timeout=max(timeout, 0.0))
            except queue.Empty:
                tag = None
            shape = watched_object_problem(event.get("object")) if tag == "job" and event is not None else ""
            if shape and event is not None and event.get("type") in ("ADDED", "MODIFIED"):
                state.watch_error = f"an object of an unexpected shape: {shape}"  # read no more of it: poll
                watches[0].stop()
                event = None
            if tag == "job" and event is None and not state.job_stream_open:
                continue  # the end of a watch the run had stopped reading
            if tag is not None:
                state.take(tag, wall, clock, event)
                if tag == "job" and event is None:
                    progress.finish()
                    lines = [line for line in watches[0].stderr.splitlines() if line.strip()]
                    # the watch's own error event, what it printed instead of events, kubectl's error
                    reason = state.watch_error or watches[0].garbled or (lines[-1] if lines else "no message")
                    say_stderr(
                        f"warning: the watch of Job {label} ended early ({reason}); "
                        f"polling every {timing.poll_interval:g} s"
                    )
                elif tag == "job" and state.condition is not None:
                    return finished(state.condition, wall, clock)
            if not state.job_stream_open and time.monotonic() >= next_poll:
                polled = kubectl.get("job", name, namespace)
                if polled is None:
                    raise DemoError(f"Job {label} disappeared while the run waited for it", EXIT_EPISODE)
                shape = watched_object_problem(polled)
                if shape:
                    raise DemoError(
                        f"kubectl printed Job {label} with an unexpected shape ({shape}); run kubectl -n {namespace} "
                        f"get job {name} -o json to see it",
                        EXIT_CLUSTER,
                    )
                state.take_job(polled, time.monotonic())
                next_poll = time.monotonic() + timing.poll_interval
            live = state.live
            waiting_for_pods = not state.sightings and not pod_counts({}, live)["created"] and not job_suspended(live)
            if waiting_for_pods and time.monotonic() >= next_blocked_check:
                blocked = creation_blocked(kubectl, namespace, name)
                if blocked:
                    return state.observation(blocked=blocked)
                next_blocked_check = time.monotonic() + timing.blocked_check_seconds
            now = time.monotonic()
            counts, note = pod_counts(state.sightings, live), lost_node_note(state.lost_pods, state.node_states)
            progress.update(label, now - submitted, counts, state.deadline - now, job_suspended(live), note)
    finally:
        for watch in watches:  # both end at once, and the round's next calls wait for neither
            watch.end()
        progress.finish()


@dataclasses.dataclass
class FollowedRead:
    """One `kubectl logs -f` of a set of the Job's pods (LogFollower)."""

    pods: List[str]  # the pods it reads (the selector may match a replaced attempt too: not read)
    reader: EpisodeLogReader
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    process: Optional[subprocess.Popen[bytes]] = None
    ended_by_us: bool = False  # stopped once every log it reads was whole (or at the wait's end)
    failed: str = ""  # why kubectl stopped, when it stopped on an error
    logs: Dict[str, PodLog] = dataclasses.field(default_factory=dict)
    error: Optional[BaseException] = None  # a disk's failure while saving: the run's, raised by finish


def container_started(pod: KubeObject) -> bool:
    """Whether the episode container has started (running or terminated): only then can its log
    be followed. The kubelet refuses the log of a container still waiting (`is waiting to start`,
    kubelet_pods.go validateContainerLogStatus), and the API server that of a pod with no node
    (`does not have a host assigned`, pkg/registry/core/pod/strategy.go LogLocation)."""
    for status in dig(pod, "status", "containerStatuses") or []:
        if isinstance(status, dict) and status.get("name") == CONTAINER_NAME:
            state = status.get("state") or {}
            return isinstance(state, dict) and ("running" in state or "terminated" in state)
    return False


def follow_args(selector: str, streams: int) -> List[str]:
    """A followed read of the pods `selector` matches, up to `streams` at once (LogFollower; no
    --request-timeout: it would end each stream's transfer)."""
    args = ["logs", "-f", "-l", selector, "-c", CONTAINER_NAME, "--prefix", "--tail=-1", "--ignore-errors"]
    return [*args, f"--max-log-requests={streams}"]


class LogFollower:
    """Reads the Job's pods' logs while they run, so each pod's output (its artifacts above all)
    is saved as it ends, and a pod the job controller stops and deletes keeps what it printed:
    once its object is gone its log cannot be read (the API server looks the pod up first,
    pkg/registry/core/pod/strategy.go LogLocation; the kubelet removes a deleted pod's containers
    with their logs, kuberuntime_container.go removeContainer -> removeContainerLog).

    Each read is one `kubectl logs -f -l SELECTOR,INDEX in (...)` of up to LOG_SELECTOR_PODS
    started pods, chosen by their completion-index label (Kubernetes 1.28+: every measured Job is
    Indexed). kubectl lists the pods once and follows each log in parallel (logs.go
    parallelConsumeRequest, at most --max-log-requests streams); with --ignore-errors a stream that
    fails prints `error: ...` and the others go on, on every minor from 1.27 to 1.37 (from 1.36,
    consumeWithRetry does not retry with it). A set is started once it has LOG_SELECTOR_PODS pods,
    once every pod of the Job has started, or at once when one of its pods is being deleted (its
    log goes with its object). A pod that ends before its set is full starts the set early only
    when the round's reads stay within ceil(count / LOG_SELECTOR_PODS) with every pod still to
    come in full sets (`spare_read`); otherwise its set waits for the pods still to start, the
    pod's log staying readable meanwhile (a finished pod is deleted only with its Job). So a
    10-episode round has one read, a round of N pods ceil(N/10), and a pod the Job makes beyond
    its count (an infrastructure retry's replacement) one read more. A pod without the label, or
    that no read proved whole, is read after the decision as before (read_logs).

    `pod_seen` is wait_for_job's hook (the watch's thread); each read runs in a thread of its own;
    `on_progress(pod)` is told of each saved artifact, end line and finished read (RoundRewards)."""

    def __init__(
        self,
        kubectl: Kubectl,
        namespace: str,
        selector: str,
        count: int,
        round_dir: Path,
        budgets: LogBudgets,
        seconds: float,
        retries: int = 0,
        on_progress: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.kubectl = kubectl
        self.namespace = namespace
        self.selector = selector
        self.count = count
        self.round_dir = round_dir
        self.budgets = budgets
        self.seconds = seconds  # each read's limit: the round's client wait
        self.streams = LOG_SELECTOR_PODS * (1 + retries)  # an index's attempts share its label
        self.on_progress = on_progress
        self.lock = threading.RLock()
        self.waiting: Dict[str, int] = {}  # started pods not followed yet -> their completion index
        self.read_of: Dict[str, FollowedRead] = {}
        self.reads: List[FollowedRead] = []
        self.ended: Set[str] = set()  # pods the watch has shown terminated
        self.closed = False

    def pod_seen(self, pod: KubeObject) -> None:
        metadata = pod.get("metadata") or {}
        name = metadata.get("name")
        label = str(dig(metadata, "labels", INDEX_LABEL))
        if not isinstance(name, str) or not name or not re.fullmatch(r"[0-9]{1,9}", label):
            return
        ending = dig(pod, "status", "phase") in ("Succeeded", "Failed")
        with self.lock:
            if ending:
                self.ended.add(name)
            read = self.read_of.get(name)
            if read is not None:
                if ending:
                    self._end_if_whole(read)
                return
            if self.closed or not container_started(pod):
                return
            self.waiting[name] = int(label)
            if (
                len(self.waiting) >= LOG_SELECTOR_PODS
                or metadata.get("deletionTimestamp")
                or len(self.read_of) + len(self.waiting) >= self.count
                or (ending and self.spare_read())
            ):
                self._follow()

    def spare_read(self) -> bool:
        """Whether a read of the waiting pods now, not full, still leaves room for every pod yet
        to start in full sets within the round's ceil(count / LOG_SELECTOR_PODS) reads."""
        budget = -(-self.count // LOG_SELECTOR_PODS)
        still_to_start = max(0, self.count - len(self.read_of) - len(self.waiting))
        return len(self.reads) + 1 + -(-still_to_start // LOG_SELECTOR_PODS) <= budget

    def _follow(self) -> None:
        names = sorted(self.waiting, key=lambda each: (self.waiting[each], each))
        indexes = ",".join(str(index) for index in sorted(set(self.waiting.values())))
        self.waiting.clear()
        read = FollowedRead(names, EpisodeLogReader(self.round_dir, names, budgets=self.budgets, errors_inline=True))
        read.reader.on_progress = functools.partial(self._progress, read)
        for name in names:
            self.read_of[name] = read
        self.reads.append(read)
        args = follow_args(f"{self.selector},{INDEX_LABEL} in ({indexes})", self.streams)
        threading.Thread(target=self._run, args=(read, args), daemon=True).start()

    def _run(self, read: FollowedRead, args: List[str]) -> None:
        def started(process: subprocess.Popen[bytes]) -> None:
            with self.lock:
                read.process = process
                if read.ended_by_us:  # finish() came first
                    process.terminate()

        try:
            self.kubectl.stream(
                args,
                read.reader.feed,
                namespace=self.namespace,
                timeout=self.seconds,
                request_timeout=None,
                on_start=started,
            )
        except (KubectlFailure, KubectlTimeout) as failure:
            if not read.ended_by_us:
                read.failed = failure.first_line if isinstance(failure, KubectlFailure) else str(failure)
        except BaseException as error:  # a disk's failure: finish() raises it in the run's thread
            read.error = error
        try:
            read.logs = read.reader.finish()
        except BaseException as error:  # as above
            read.reader.discard()
            read.error = read.error or error
        read.done.set()
        for name in read.pods:
            self._tell(name)

    def _progress(self, read: FollowedRead, name: str) -> None:
        with self.lock:
            if name in self.ended:
                self._end_if_whole(read)
        self._tell(name)

    def _tell(self, name: str) -> None:
        if self.on_progress is not None:
            self.on_progress(name)

    def _end_if_whole(self, read: FollowedRead) -> None:
        """Stop a read once each of its pods has ended and printed the end line: nothing more can
        come, and the kubelet would hold each stream open for up to 5 s more."""
        if not read.ended_by_us and all(name in self.ended and name in read.reader.ended for name in read.pods):
            read.ended_by_us = True
            if read.process is not None:
                read.process.terminate()

    def artifacts_of(self, name: str) -> Optional[Tuple[Dict[str, ArtifactEntry], str, bool]]:
        """A followed pod's artifacts saved so far, the rule its frames broke ("" if none), and
        whether that rule is frames that never came; None when no read follows it."""
        with self.lock:
            read = self.read_of.get(name)
        if read is None:
            return None
        return read.reader.artifacts_of(name)

    def finish(
        self, grace: float, stop: Optional[threading.Event] = None, early: bool = False, complete: bool = False
    ) -> Dict[str, PodLog]:
        """After the decision: follow what started but was never followed, give the reads up to
        `grace` seconds to end (a stopped pod's stream ends when its container does), end the rest,
        and return the logs proven whole. A log is whole when its read ended by itself without
        kubectl's error for it, or when its pod ended and printed the end line. A `stop` asked for
        meanwhile (Ctrl-C, a stream_batch loop left) ends every read at once (KeyboardInterrupt).

        `early`: the round stopped before its Job ended (--stop-after, a stream left early), so
        a read whose pods still run would last until the Job's deletion: each read is given the
        grace only until every pod of it that ended has printed its end line (what the round
        keeps is then whole), not until its stream ends.

        `complete`: the Job completed, so every pod has ended (the job controller declares
        Complete only with no active pod: pkg/controller/job/job_controller.go syncJob,
        `complete = succeeded >= completions && active == 0`) and none is deleted before the Job
        (a terminated pod stays until the garbage collector deletes it with its Job, or podgc's
        threshold of 12,500 terminated pods): what started but was never followed (a pod watch
        that lagged the Job's) is left to the reads after the decision, one `logs -l` with the
        pods never seen started, not a process more (read_logs; CI saw a late `logs -f` of one
        pod and nine `logs POD`). A Job that failed deletes its active pods with their logs
        (syncJob's deleteActivePods): there, what started is followed at once, as before."""
        with self.lock:
            self.closed = True
            if self.waiting and not complete:
                self._follow()
            self.waiting.clear()
            reads = list(self.reads)
        until = time.monotonic() + grace

        def enough_of(read: FollowedRead) -> bool:
            with self.lock:
                return early and all(name in read.reader.ended for name in read.pods if name in self.ended)

        for read in reads:
            while not read.done.wait(0.0 if enough_of(read) else max(0.0, min(0.1, until - time.monotonic()))):
                if enough_of(read):
                    break
                if stop is not None and stop.is_set():
                    self.stop()
                    raise KeyboardInterrupt
                if time.monotonic() >= until:
                    break
        for read in reads:
            with self.lock:
                if not read.done.is_set():
                    read.ended_by_us = True
                    if read.process is not None:
                        read.process.terminate()
        for read in reads:
            read.done.wait(5.0)
        logs: Dict[str, PodLog] = {}
        for read in reads:
            natural = read.done.is_set() and not read.ended_by_us and not read.failed
            for name in read.pods:
                whole = natural or (name in self.ended and name in read.reader.ended)
                if whole and name in read.logs and name not in read.reader.doubtful:
                    logs[name] = read.logs[name]
        return logs

    @property
    def failed_to_save(self) -> bool:
        return any(read.error is not None for read in self.reads)

    def raise_failure(self) -> None:
        """A read's failure to save (a full disk), raised once the round's other diagnostics are
        on disk: the run stops on it, as when any log cannot be saved."""
        for read in self.reads:
            if read.error is not None:
                raise read.error

    def stop(self) -> None:
        """End every read at once (the run stops): what they saved stays."""
        with self.lock:
            self.closed = True
            for read in self.reads:
                read.ended_by_us = True
                if read.process is not None and read.process.poll() is None:
                    read.process.terminate()


def creation_blocked(kubectl: Kubectl, namespace: str, name: str) -> str:
    """Why the Job has made no pod yet, if the cluster refused them (FailedCreate: a Pod
    Security rejection, a quota, a missing RuntimeClass); empty if nothing says so."""
    refusals = [
        event
        for event in kubectl.get_list("events", namespace=namespace)
        if event.get("kind", "Event") == "Event"
        and event.get("reason") == "FailedCreate"
        and dig(event, "involvedObject", "name") == name
    ]
    return " ".join(str(refusals[-1].get("message", "")).split()) if refusals else ""


def logs_by_selector(
    kubectl: Kubectl,
    namespace: str,
    selector: str,
    pod_names: Sequence[str],
    round_dir: Path,
    timeout: Optional[float] = None,
    budgets: Optional[LogBudgets] = None,
    gate: Optional[threading.Event] = None,
    ignored: Sequence[str] = (),
) -> Dict[str, PodLog]:
    """The logs of the pods the selector matches, in one streamed call, saved as <pod>.log for
    the named pods. kubectl reads them one after another, each request through client-go's token
    bucket (5 a second after a burst of 10), so this suits up to LOG_SELECTOR_PODS pods. A single
    unreadable log makes kubectl stop with an error; the pods it printed before that are kept.
    `ignored`: pods the selector matches too whose logs are not wanted (lost to the
    infrastructure: a rejected or evicted pod's log may be unreadable); with them, kubectl goes on
    past a failed request (--ignore-errors) and EpisodeLogReader judges its error line.
    `timeout`: the whole call's limit (after Ctrl-C); without it, the call ends only when it has
    printed nothing for the kubectl timeout (see Kubectl.stream)."""
    args = ["logs", "-l", selector, "-c", CONTAINER_NAME, "--prefix", "--tail=-1"]
    ignored = [name for name in ignored if name not in pod_names]
    if ignored:
        args.append("--ignore-errors")
    reader = EpisodeLogReader(round_dir, pod_names, budgets=budgets, gate=gate, ignored=ignored)
    complete = True
    try:
        kubectl.stream(
            args, reader.feed, namespace=namespace, timeout=timeout, request_timeout=None, idle=timeout is None
        )
    except (KubectlFailure, KubectlTimeout):
        complete = False  # the per-pod reads that follow say which logs cannot be read
    except BaseException:
        reader.discard()
        raise
    logs = reader.finish()
    doubtful = set(reader.doubtful)
    if not complete and reader.order:
        doubtful.add(reader.order[-1])  # the pod being printed when kubectl stopped may be cut short
    return {name: log for name, log in logs.items() if name not in doubtful}


def log_of(
    kubectl: Kubectl,
    namespace: str,
    name: str,
    round_dir: Path,
    budgets: Optional[LogBudgets] = None,
    gate: Optional[threading.Event] = None,
) -> PodLog:
    """One pod's log, streamed into <pod>.log."""
    reader = EpisodeLogReader(round_dir, [name], single_pod=name, budgets=budgets, gate=gate)
    try:
        kubectl.stream(
            ["logs", name, "-c", CONTAINER_NAME], reader.feed, namespace=namespace, request_timeout=None, idle=True
        )
    except BaseException:
        reader.discard()
        raise
    return reader.finish().get(name) or PodLog()


def read_logs(
    kubectl: Kubectl,
    namespace: str,
    pods: List[KubeObject],
    selector: Optional[str],
    all_pods: bool,
    round_dir: Path,
    budgets: Optional[LogBudgets] = None,
    gate: Optional[threading.Event] = None,
    lost: Sequence[KubeObject] = (),
) -> Tuple[Dict[str, Optional[PodLog]], Dict[str, str]]:
    """The pods' container logs, in time that grows gently with their number, with a bounded
    number of kubectl processes at once (LOG_READ_PROCESSES; each has its own token bucket):

    * up to LOG_SELECTOR_PODS pods, one `kubectl logs -l` of `selector` (which matches exactly
      `pods` and `lost`; None: never);
    * beyond that, in an Indexed Job whose pods carry the completion-index label (1.28+: every
      measured Job is Indexed), one `logs -l` per set of up to LOG_SELECTOR_PODS indexes
      (`SELECTOR,INDEX in (0,1,...)`);
    * then each pod those calls missed (an unreadable log stops a selector read), or every pod
      of a Job without the label, with its own `kubectl logs POD`.

    `lost`: the Job's pods lost to the infrastructure (--infra-retries), whose logs are not read
    but which the selectors match too (a replacement shares its index): a selector that matches
    one runs with --ignore-errors, their output and errors ignored (logs_by_selector), so a lost
    pod whose log cannot be served costs no process more.

    Beyond the cross-check limit (`all_pods` False), only pods whose termination message cannot
    carry their events, or lists artifacts (their frames travel in the log alone), are read.
    `gate`: set once the round's other diagnostics are on disk; no log is written before."""
    wanted = [
        pod["metadata"]["name"]
        for pod in pods
        if all_pods or message_needs_log(termination_message(pod)) or declares_artifacts(termination_message(pod))
    ]
    logs: Dict[str, Optional[PodLog]] = {}
    errors: Dict[str, str] = {}
    budgets = budgets or LogBudgets()
    sets: List[Tuple[str, List[str], List[str]]] = []  # (selector, the pods wanted, the lost pods it matches too)
    lost_names = [pod["metadata"]["name"] for pod in lost]
    if selector is not None and len(wanted) > 1 and len(pods) <= LOG_SELECTOR_PODS:
        sets.append((selector, wanted, lost_names))
    elif selector is not None and len(wanted) > 1:
        labels = {pod["metadata"]["name"]: dig(pod["metadata"], "labels", INDEX_LABEL) for pod in [*pods, *lost]}
        if all(re.fullmatch(r"[0-9]+", str(labels[name])) for name in wanted):
            by_index = sorted(wanted, key=lambda name: int(str(labels[name])))
            for start in range(0, len(by_index), LOG_SELECTOR_PODS):
                names = by_index[start : start + LOG_SELECTOR_PODS]
                chosen = {str(labels[name]) for name in names}
                indexes = ",".join(sorted(chosen, key=int))
                # a lost pod without a valid label is matched by no index set
                matched_lost = [name for name in lost_names if str(labels[name]) in chosen]
                sets.append((f"{selector},{INDEX_LABEL} in ({indexes})", names, matched_lost))

    def read_set(chosen: str, names: List[str], ignored: List[str]) -> None:
        logs.update(
            logs_by_selector(kubectl, namespace, chosen, names, round_dir, budgets=budgets, gate=gate, ignored=ignored)
        )

    def read_pod(name: str) -> None:
        try:
            logs[name] = log_of(kubectl, namespace, name, round_dir, budgets, gate)
        except (KubectlFailure, KubectlTimeout) as failure:
            logs[name] = None
            errors[name] = failure.first_line if isinstance(failure, KubectlFailure) else str(failure)
            if gate is not None:
                gate.wait()
            write_empty_log(round_dir, name)

    in_pool([functools.partial(read_set, *entry) for entry in sets])
    in_pool([functools.partial(read_pod, name) for name in wanted if name not in logs])
    return {name: logs[name] for name in wanted if name in logs}, errors


def in_pool(tasks: Sequence[Callable[[], None]], limit: int = LOG_READ_PROCESSES) -> None:
    """Run the tasks, at most `limit` at once; the first that raised raises here."""
    pending: queue.Queue[Callable[[], None]] = queue.Queue()
    for task in tasks:
        pending.put(task)

    def work() -> None:
        while True:
            try:
                task = pending.get_nowait()
            except queue.Empty:
                return
            task()

    if tasks:
        concurrently([work] * min(limit, len(tasks)))


def read_kubelet_metrics(kubectl: Kubectl, nodes: Sequence[str], handler: str) -> Dict[str, KubeletReading]:
    """Each node's runtime histograms through the API server's node proxy, nodes read in
    parallel (at most KUBELET_READ_THREADS kubectl processes at once). Best effort: a node that
    cannot be read gets its reason, and the run goes on."""
    readings = {node: KubeletReading({}, "not a valid node name") for node in nodes if not re.match(_NODE_NAME, node)}
    families = {HANDLER_SANDBOX_FAMILY, *(family for _, family, _, _ in KUBELET_OPERATIONS)}

    def read(node: str) -> None:
        scanner = MetricsScanner(families)
        try:
            kubectl.stream(["get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics"], scanner.feed)
            readings[node] = kubelet_reading(scanner.finish(), handler, scanner.error)
        except DemoError as error:
            readings[node] = KubeletReading({}, str(error).splitlines()[0] if str(error) else "failed")

    in_pool([functools.partial(read, node) for node in nodes if node not in readings], KUBELET_READ_THREADS)
    return dict(sorted(readings.items()))


# Flow: warm-up and the pinned image ###########################################
# One-episode Jobs before the measured rounds, run by the caller's runner, and the digest they
# ran. Uses everything above.


def warm_up(
    kubectl: Kubectl,
    settings: RunSettings,
    namespace: str,
    run_id: str,
    run_job: OneEpisodeJob,
    stop: threading.Event,
) -> Tuple[Dict[str, Optional[str]], Warmup]:
    """One one-episode Job per eligible node (`check`'s rule), all at once, each pinned to its
    node by a nodeSelector on its hostname label; returns node -> imageID and results.json's
    `warmup` block. Any failure stops the run, its diagnostics kept in DIR/warmup/. On Ctrl-C,
    `stop` makes the waits end (closing their watches) before the interrupt goes on."""
    runtime = settings.runtime
    nodes, runtimeclass = concurrently(
        [
            lambda: kubectl.get_list("nodes"),
            lambda: kubectl.runtimeclass(runtime) if runtime is not None else None,
        ]
    )
    eligible = sorted(eligible_nodes(nodes, runtimeclass), key=lambda node: str(node["metadata"]["name"]))
    if not eligible:
        raise DemoError(
            f"no node is eligible for the warm-up (Ready, schedulable, matching RuntimeClass {runtime}'s node "
            "selector and tolerations); run `check` to see why",
            EXIT_CLUSTER,
        )
    warm_dir = settings.output / WARMUP_DIR
    tasks: List[Callable[[], Tuple[List[EpisodeRow], RoundResult]]] = []
    plan = []
    for number, node in enumerate(eligible, 1):
        node_name = str(node["metadata"]["name"])
        hostname = str(dig(node["metadata"], "labels", HOSTNAME_LABEL) or node_name)
        name = f"{WARMUP_JOB_PREFIX}-{number}"
        manifest = warmup_job_manifest(settings, name, namespace, run_id, node_name, hostname)
        plan.append((name, node_name))
        tasks.append(functools.partial(run_job, name, warm_dir / name, manifest, warm_dir))  # see OneEpisodeJob
    if not settings.quiet:
        say_stderr(f"warm-up: one episode on each of {len(plan)} node(s): {', '.join(node for _, node in plan)}")
    answers = concurrently(tasks, stop, kubectl.timing.interrupt_save_timeout)
    image_ids: Dict[str, Optional[str]] = {}
    per_node: Dict[str, WarmupNode] = {}
    for (name, node_name), (rows, figures) in zip(plan, answers):
        row = rows[0]
        if row["node"] != node_name:
            raise DemoError(
                f"warm-up Job {namespace}/{name} was meant for node {node_name} but ran on {row['node']}; "
                f"inspect {warm_dir / name}/pods.json",
                EXIT_CLUSTER,
            )
        image_ids[node_name] = row["image_id"]
        per_node[node_name] = {
            "job": name,
            "job_uid": figures["job_uid"],
            "pod": row["pod"],
            "pod_to_ready_seconds": row["pod_to_ready_seconds"],
            "image_id": row["image_id"],
            "image_pull": row["image_pull"]["state"],
        }
    block: Warmup = {
        "nodes": [node for _, node in plan],
        "per_node": per_node,
        "image": settings.given_image,
        "pod_to_ready_max_seconds": max(entry["pod_to_ready_seconds"] for entry in per_node.values()),
    }
    write_warmup_block(settings.output, block)
    return image_ids, block


def prepare_measured_image(
    kubectl: Kubectl,
    settings: RunSettings,
    namespace: str,
    run_id: str,
    run_job: OneEpisodeJob,
    stop: threading.Event,
) -> Tuple[str, PreparedImage]:
    """--warmup and --pin-image, before the first measured Job: the warm-up episodes, then the
    image the measured Jobs run (the digest given, or resolved from what the warm-up's or a
    one-episode probe Job's nodes ran, else --image) and results.json's `warmup` and `image_pinned`."""
    prepared: PreparedImage = {"image_pinned": settings.pin_image or None, "warmup": None}
    image_ids: Dict[str, Optional[str]] = {}
    where = ""
    if settings.warmup:
        image_ids, prepared["warmup"] = warm_up(kubectl, settings, namespace, run_id, run_job, stop)
        where = f"{settings.output / WARMUP_DIR}/*/pods.json"
    if settings.pin_image != "":
        return settings.given_image, prepared
    if not settings.warmup:  # without a warm-up, one one-episode Job tells which digest the cluster runs
        probe_dir = settings.output / PROBE_JOB_NAME
        manifest = one_episode_job_manifest(settings, PROBE_JOB_NAME, namespace, run_id)
        rows, _ = run_job(PROBE_JOB_NAME, probe_dir, manifest, probe_dir)
        image_ids = {str(rows[0]["node"] or "(unknown)"): rows[0]["image_id"]}
        where = f"{probe_dir}/pods.json"
    pinned = pinned_image(settings.image, image_ids, where)
    prepared["image_pinned"], prepared["image_pinned_from"] = pinned, image_ids
    if not settings.quiet:
        say_stderr(f"image pinned: {pinned}")
    return pinned, prepared
