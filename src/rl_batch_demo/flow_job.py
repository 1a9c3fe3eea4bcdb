"""Flows: one Job from create to decision, and the warm-up with the pinned image."""

from __future__ import annotations

import contextlib
import functools
import queue
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .constants import (
    CONTAINER_NAME,
    EXIT_CLUSTER,
    EXIT_EPISODE,
    EXIT_REFUSED,
    HANDLER_SANDBOX_FAMILY,
    INDEX_LABEL,
    KUBELET_OPERATIONS,
    KUBELET_READ_THREADS,
    LOG_READ_PROCESSES,
    LOG_SELECTOR_PODS,
    RUN_LABEL,
)
from .core_basics import dig, is_int, one_episode_job_manifest, parse_json_documents, pod_selector, required_uid
from .core_clocks import _NODE_NAME, KubeletReading, MetricsScanner, kubelet_reading
from .core_cluster import (
    _true_condition,
    declares_artifacts,
    final_pods_from_watch,
    job_condition,
    job_suspended,
    message_needs_log,
    pod_counts,
    record_pod_sighting,
    template_changes,
    termination_message,
    watched_object_problem,
)
from .core_guide import HOSTNAME_LABEL, PROBE_JOB_NAME, WARMUP_DIR, WARMUP_JOB_PREFIX, pinned_image, warmup_job_manifest
from .core_permissions import eligible_nodes
from .errors import DemoError, JobRefused, KubectlFailure, KubectlTimeout
from .kubectl import Kubectl, concurrently
from .persistence import EpisodeLogReader, write_empty_log, write_warmup_block
from .records import (
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
                created = self.kubectl.create(manifest)[0]
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
) -> RoundObservation:
    """Watch the Job (and its pods) until the job controller decides (job_condition); poll if the
    Job's watch ends early.

    The Job's watch is a list watch by name (`get jobs --field-selector metadata.name=NAME`): it
    prints every event, where a single object's watch drops its first one (kubectl get.go watch()),
    and with it a change made between its GET and its watch, such as a quick Job's Complete. The
    events carry the client clock of their arrival, so the decision is seen within milliseconds of
    the API server sending it. `on_pod` is told of each pod as the watch delivers it (RoundRewards:
    a terminated pod's reward is known from its status). A Job created suspended (`job`, as the API
    server stored it) waits in its queue, shown as queued; once resumed it has `run_seconds` more
    (activeDeadlineSeconds counts from then). `pod_spec` is the pod spec the run submitted: a pod
    that runs something else (a sidecar injected, a container changed) raises JobRefused."""
    timing = kubectl.timing
    name = job["metadata"]["name"]
    sink: queue.Queue[Any] = queue.Queue()
    queued = job_suspended(job)
    seconds = max(1.0, deadline - time.monotonic()) + (run_seconds if queued else 0.0) + 5
    by_name = ["jobs", "--field-selector", f"metadata.name={name}"]
    watches = [kubectl.watch("job", by_name, namespace, sink, seconds)]
    watches.append(kubectl.watch("pods", ["pods", "-l", pod_selector(job)], namespace, sink, seconds))
    sightings: Dict[str, Dict[str, Any]] = {}
    last_pods: Dict[str, KubeObject] = {}
    deleted = False
    pods_doubtful = False  # the pod watch sent an object of a shape no API server sends
    live = job
    admitted_seen: Optional[float] = None
    job_stream_open = pod_stream_open = True
    watch_error = ""  # an ERROR event of the Job's watch (410 Expired: its resourceVersion too old)
    next_poll = 0.0
    next_blocked_check = submitted + timing.blocked_check_seconds
    label = f"{namespace}/{name}"
    job_uid = job["metadata"]["uid"]

    def pod_event(event: KubeObject, wall: float) -> None:
        nonlocal deleted, pods_doubtful
        pod = event.get("object")
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and watched_object_problem(pod):
            pods_doubtful = True  # an event it could not read: the pods are listed once the Job ends
            return
        pod_name = dig(pod, "metadata", "name") if isinstance(pod, dict) else None
        if event.get("type") in ("ADDED", "MODIFIED"):
            if isinstance(pod_name, str) and pod_name and pod_name not in last_pods and pod_spec is not None:
                changes = template_changes(pod_spec, (pod.get("spec") or {}) if isinstance(pod, dict) else {})
                if changes:
                    raise JobRefused(
                        f"the cluster changed what pod {pod_name} of Job {label} runs: " + "; ".join(changes)
                    )
            record_pod_sighting(sightings, pod, wall)
            if isinstance(pod_name, str) and pod_name:
                last_pods[pod_name] = pod  # type: ignore[assignment]
                if on_pod is not None:
                    on_pod(pod)  # type: ignore[arg-type]
        elif event.get("type") == "DELETED":
            deleted = True
            if isinstance(pod_name, str) and pod_name:  # the pod's state at its deletion (its final one)
                last_pods[pod_name] = pod  # type: ignore[assignment]

    def take_job(obj: KubeObject, clock: float) -> None:
        """The Job as now seen; a queued Job's resumption moves the client's deadline."""
        nonlocal live, admitted_seen, deadline
        live = obj
        if queued and admitted_seen is None and not job_suspended(live):
            admitted_seen = clock
            deadline = max(deadline, clock + run_seconds)

    def observation(
        condition: Optional[str] = None, wall: Optional[float] = None, clock: Optional[float] = None, blocked: str = ""
    ) -> RoundObservation:
        return RoundObservation(
            live, condition, wall, clock, sightings, blocked, last_pods, deleted or pods_doubtful, queued, admitted_seen
        )

    def finished(condition: str, wall: float, clock: float) -> RoundObservation:
        """The job controller decided: take in the events already received, then report. Wait a
        moment for more while the Job lacks its terminal condition (Complete after
        SuccessCriteriaMet, Failed after FailureTarget: job.json then shows both) or, after a
        success, the pods as watched do not yet prove their final state: the two watches are
        separate streams, and the pods' last events may arrive just after the Job's, which spares
        the listing of every pod (see final_pods_from_watch); after a failure, while a watched pod
        has not yet ended. The decision's own arrival is what the figures keep."""
        nonlocal pod_stream_open, job_stream_open
        grace_ends = time.monotonic() + timing.final_pods_grace_seconds
        terminal = "Complete" if condition == "Complete" else "Failed"

        def observed() -> RoundObservation:
            return observation(condition, wall, clock)

        def settled() -> bool:  # nothing more to wait for: it all came, or never will
            ended = bool(_true_condition(live, (terminal,))) or not job_stream_open
            if deleted or not pod_stream_open:
                return ended
            if condition == "Complete":
                return ended and final_pods_from_watch(observed(), job_uid) is not None
            # a failure: every pod as watched has ended, and as many as the Job counted, so each
            # ended pod's verdict is streamed (rewards.jsonl) before the round's failure retracts
            # it, whichever watch came first (a counted pod since deleted costs the grace)
            phases = [dig(pod, "status", "phase") for pod in last_pods.values()]
            status = live.get("status") or {}
            counts: List[Any] = [status.get("succeeded"), status.get("failed")]
            counted = sum(value for value in counts if is_int(value))
            return ended and all(phase in ("Succeeded", "Failed") for phase in phases) and len(phases) >= counted

        while True:
            remaining = grace_ends - time.monotonic()
            waiting = not settled() and remaining > 0
            try:
                tag, received_at, received_clock, event = sink.get(timeout=remaining) if waiting else sink.get_nowait()
            except queue.Empty:
                progress.update(label, clock - submitted, pod_counts(sightings, live), deadline - clock)  # the last
                return observed()
            if tag == "job" and event is None:
                job_stream_open = False
            elif tag == "job" and event.get("type") == "MODIFIED" and not watched_object_problem(event.get("object")):
                take_job(event["object"], received_clock)
            elif tag == "pods" and event is None:
                pod_stream_open = False
            elif tag == "pods":
                pod_event(event, received_at)

    try:
        while True:
            if stop is not None and stop.is_set():  # the run was interrupted while this thread waited
                raise KeyboardInterrupt
            condition = job_condition(live)
            now = time.monotonic()
            if condition is not None:
                return finished(condition, time.time(), now)
            if now >= deadline:
                return observation()
            timeout = min(timing.watch_tick_seconds, deadline - now)
            if not job_stream_open:
                timeout = min(timeout, max(0.0, next_poll - now))
            try:
                tag, wall, clock, event = sink.get(timeout=max(timeout, 0.0))
            except queue.Empty:
                tag = None
            shape = watched_object_problem(event.get("object")) if tag == "job" and event is not None else ""
            if shape and event is not None and event.get("type") in ("ADDED", "MODIFIED"):
                watch_error = f"an object of an unexpected shape: {shape}"  # read no more of it: poll
                watches[0].stop()
                event = None
            if tag == "job":
                if event is None:
                    if not job_stream_open:
                        continue  # the end of a watch the run had stopped reading
                    job_stream_open = False
                    progress.finish()
                    lines = [line for line in watches[0].stderr.splitlines() if line.strip()]
                    reason = watch_error or watches[0].garbled or (lines[-1] if lines else "no message")
                    say_stderr(
                        f"warning: the watch of Job {label} ended early ({reason}); "
                        f"polling every {timing.poll_interval:g} s"
                    )
                elif event.get("type") == "DELETED":
                    raise DemoError(
                        f"Job {label} was deleted while the run waited for it; inspect events.txt", EXIT_EPISODE
                    )
                elif event.get("type") == "ERROR":
                    status = event.get("object") if isinstance(event.get("object"), dict) else {}
                    watch_error = f"ERROR {status.get('code')}: {status.get('reason')}: {status.get('message')}"
                elif event.get("type") in ("ADDED", "MODIFIED") and isinstance(event.get("object"), dict):
                    take_job(event["object"], clock)
                    condition = job_condition(live)
                    if condition is not None:
                        return finished(condition, wall, clock)
            elif tag == "pods":
                if event is None:
                    pod_stream_open = False  # the Job's watch, or polling, still says when it ends
                else:
                    pod_event(event, wall)
            if not job_stream_open and time.monotonic() >= next_poll:
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
                take_job(polled, time.monotonic())
                next_poll = time.monotonic() + timing.poll_interval
            waiting_for_pods = not sightings and not pod_counts({}, live)["created"] and not job_suspended(live)
            if waiting_for_pods and time.monotonic() >= next_blocked_check:
                blocked = creation_blocked(kubectl, namespace, name)
                if blocked:
                    return observation(blocked=blocked)
                next_blocked_check = time.monotonic() + timing.blocked_check_seconds
            now = time.monotonic()
            progress.update(label, now - submitted, pod_counts(sightings, live), deadline - now, job_suspended(live))
    finally:
        for watch in watches:  # both end at once, and the round's next calls wait for neither
            watch.end()
        progress.finish()


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
            lambda: kubectl.get("runtimeclass", runtime) if runtime is not None else None,
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
