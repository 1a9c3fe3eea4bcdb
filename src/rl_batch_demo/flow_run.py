"""Flows: one run, its cleanup, and the guide's experiment (reproduce)."""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .constants import (
    CLEANUP_WAIT_SECONDS,
    CLUSTERQUEUE_RESOURCE,
    DEFAULT_EPHEMERAL_STORAGE,
    DEFAULT_SERVICEACCOUNT,
    DEFAULT_WORKSPACE_SIZE,
    EVERY_NAMESPACE,
    EXIT_CLUSTER,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_THRESHOLD,
    EXIT_TIMEOUT,
    GC_PODS_PER_SECOND,
    INFRA_RETRIES_INSTEAD,
    JOB_STOPPED,
    JUNIT_SUITE_NAME,
    KUEUE_GROUP,
    LOCAL_QUEUE_NAME,
    LOCALQUEUE_RESOURCE,
    LOG_CROSSCHECK_LIMIT,
    PER_INDEX_BACKOFF,
    PER_INDEX_BACKOFF_INSTEAD,
    POD_FAILURE_POLICY,
    REWARDS_FILE,
    RULES_REVIEW_PATH,
    RUN_FILES,
    SERVICEACCOUNT_PERMISSIONS,
    SERVICEACCOUNT_WAIT,
)
from .core_basics import (
    collection_path,
    configmap_manifest,
    dig,
    job_name_for,
    job_parallelism,
    local_queue_manifest,
    namespace_manifest,
    pod_belongs_to,
    pod_selector,
    required_uid,
    round_job_manifest,
    served_kueue_version,
    strict_refusal,
    task_id_of,
)
from .core_clocks import KubeletReading, count_runtime_operations, expected_operations
from .core_cluster import (
    OUT_OF_SERVICE_TAINT,
    _attempt_order,
    creation_time,
    ended_pods_selector,
    final_pods_from_watch,
    first_to_end,
    foreign_manager,
    infra_loss,
    latest_warning,
    log_wanted,
    lost_node_note,
    node_state,
    pod_index,
    split_pods_and_events,
    stopped_round_pods,
    template_changes,
    unread_pods_selector,
    vanished_attempts,
    whose_failure,
    with_watched_pods,
)
from .core_guide import _WORDS, REPRODUCE_GROUPS, guide_table, render_guide_table
from .core_permissions import (
    _asks,
    access_review_list,
    denied_permissions,
    eligible_nodes,
    episode_room,
    granted_by_rules,
    named_runtimeclass,
    plan_cleanup,
    preflight_findings,
    receipt_jobs,
    receipt_names_problem,
    rules_review,
    serviceaccount_finding,
)
from .core_reports import (
    MetricRun,
    junit_suites,
    metrics_labels,
    printable,
    render_junit_xml,
    render_metrics_of_runs,
)
from .core_validation import (
    ARTIFACT_ROTATION_HINT,
    ROUND_COMPLETE,
    ROUND_STOPPED,
    analyse_round,
    assemble_results,
    batch_figures,
    classify_round,
    failure_line,
    graded_reward,
    provisional_episode,
    reconciling_lines,
    retracting_lines,
    retraction_of,
    reward_line,
    round_inspect_hint,
    round_stopper,
    set_attempts,
    stands_as_reward,
)
from .errors import DemoError, EpisodeInvalid, JobRefused, KubectlFailure, KubectlTimeout, kubectl_message
from .flow_job import (
    LogFollower,
    OwnedCreator,
    logs_by_selector,
    prepare_measured_image,
    read_kubelet_metrics,
    read_logs,
    refuse_changed_pod,
    wait_for_job,
)
from .kubectl import InBackground, Kubectl, WatchStream, concurrently, make_kubectl
from .persistence import (
    RewardsWriter,
    _uid_from_job_json,
    read_receipt,
    rounds_on_disk,
    saved_results,
    write_atomic,
    write_events,
    write_job,
    write_job_submitted,
    write_json,
    write_pods,
    write_receipt,
)
from .records import (
    ArtifactEntry,
    AutoParallelism,
    EpisodeRow,
    JUnitSuite,
    KubeletFigures,
    KubeObject,
    LogBudgets,
    LostAttempt,
    PodLog,
    Read,
    Receipt,
    ReceiptJob,
    ReproduceReport,
    Results,
    RewardLine,
    RoundCollected,
    RoundResult,
    RunSettings,
)
from .status import Progress, say_stderr

# Flow: one run ################################################################
# BatchRun: preflight, namespace, warm-up, then each measured round, to results. Uses everything
# above.


class RoundRewards:
    """One measured round's lines of rewards.jsonl (docs/outputs.md): each episode's as soon as the
    pod watch shows its pod terminated (provisional_episode), in the order they are known; once the
    round is analysed, the lines that make the file agree with it (reconciling_lines); when the
    round fails or the run stops before that, a retraction of each reward line it wrote.

    An episode of a Job that is not Indexed is numbered by its pod's place in creation order,
    settled only once the watch has shown all of the Job's pods: until then its line waits (with
    parallelism below the count, until the last pod is created)."""

    def __init__(self, writer: RewardsWriter, settings: RunSettings, round_number: int, round_dir: Path) -> None:
        self.writer = writer
        self.settings = settings
        self.round_number = round_number
        self.round_dir = round_dir
        self.job_name = ""
        self.job_uid = ""
        self.job_created_at = 0.0
        self.submitted = 0.0  # the client's monotonic clock just before the Job's create
        self.pods: Dict[str, KubeObject] = {}  # each of the Job's pods as last watched
        self.positions: Dict[str, int] = {}  # not Indexed: each pod's place in creation order, once all are seen
        self.waiting: Dict[str, KubeObject] = {}  # not Indexed: terminated pods whose place is not settled yet
        self.last: Dict[str, RewardLine] = {}  # each pod's last line, in the order of their first
        self.reward_known: Dict[str, float] = {}  # the monotonic clock when each pod's reward line was known
        self.indexed = settings.indexed  # until job_created reads the Job
        # The round's LogFollower: a terminated pod whose reward event lists artifacts gets its line
        # only once each of them is saved and hash-checked under DIR/artifacts/<pod>/ (held till then)
        self.follower: Optional[LogFollower] = None
        self.held: Dict[str, KubeObject] = {}
        self.lock = threading.RLock()  # the watch's thread and the log readers' threads
        self.grades: Dict[str, float] = {}  # with a grader: each graded pod's reward
        # --stop-after K: the pods whose reward came once K stood (ended beyond the first K): no
        # line, stopped with the episodes still running, so exactly K rewards stand
        self.beyond: Set[str] = set()

    def standing(self) -> int:
        """How many of the round's episodes have a reward that stands (--stop-after counts them):
        a validated reward as known when its pod ended, or a failure scored by --failed-episode-reward."""
        return sum(1 for line in self.last.values() if stands_as_reward(line))

    def job_created(self, job: KubeObject, submitted: float) -> None:
        self.job_name, self.job_uid = str(job["metadata"]["name"]), str(job["metadata"]["uid"])
        # every measured Job is Indexed: its episodes are numbered by completion index as each ends
        self.indexed = self.settings.indexed or dig(job, "spec", "completionMode") == "Indexed"
        self.job_created_at = creation_time(job, "the Job")
        self.submitted = submitted

    def _inspect(self, name: str) -> str:
        return f"{self.round_dir}/{name}.log and pods.json"

    def _identity(self, name: str) -> Tuple[Optional[int], Any]:
        """An episode's index and task id, as far as the watched pods tell (None: not known)."""
        index = self.positions.get(name)
        pod = self.pods.get(name)
        if self.indexed and pod is not None:
            try:
                index = pod_index(pod, self.settings.count, self._inspect(name))
            except EpisodeInvalid:
                index = None
        tasks = self.settings.tasks
        if index is not None and tasks is not None and index < len(tasks):
            return index, task_id_of(tasks[index], index)
        return index, index

    def pod_seen(self, pod: KubeObject) -> None:
        """wait_for_job's hook: each pod as the watch delivers it."""
        with self.lock:
            self._pod_seen(pod)

    def log_progress(self, name: str) -> None:
        """LogFollower's hook: an artifact of this pod was saved (or refused), or its read ended."""
        with self.lock:
            pod = self.held.pop(name, None)
            if pod is not None:
                judged = self._judge(name, pod)
                self._write([judged] if judged is not None else [], time.monotonic())

    def _pod_seen(self, pod: KubeObject) -> None:
        metadata = pod.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("labels"), dict):
            return
        name = metadata.get("name")
        if not isinstance(name, str) or not name or name in self.last or not pod_belongs_to(pod, self.job_uid):
            return
        new = name not in self.pods
        self.pods[name] = pod
        known = time.monotonic()
        self.held.pop(name, None)
        if self.indexed:
            judged = [self._judge(name, pod)]
        else:
            if dig(pod, "status", "phase") in ("Succeeded", "Failed"):
                self.waiting[name] = pod
            if new and len(self.pods) >= self.settings.count:
                order = sorted(
                    self.pods, key=lambda each: (str(self.pods[each]["metadata"].get("creationTimestamp") or ""), each)
                )
                self.positions = {each: position for position, each in enumerate(order)}
            judged = (
                [self._judge(waiting, self.waiting.pop(waiting)) for waiting in list(self.waiting)]
                if self.positions
                else []
            )
        self._write([line for line in judged if line is not None], known)  # the pods that waited: one fsync

    def _judge(self, name: str, pod: KubeObject) -> Optional[RewardLine]:
        """The pod's line, if its verdict is known (provisional_episode)."""
        settings = self.settings
        known_at = time.time()
        index, task_id = self._identity(name)
        if settings.infra_retries and infra_loss(pod):
            return None  # its index may run again: the analysis gives a last attempt lost too its line
        lost = self._lost_before(name, index)
        try:
            row = provisional_episode(
                pod,
                settings.count,
                self.indexed,
                self.job_created_at,
                settings.builtin_worker,
                self._inspect(name),
                settings.max_artifact_bytes,
            )
        except EpisodeInvalid as invalid:
            return self._failure(index, task_id, name, invalid.rule, known_at, lost)
        if row is None:
            return None
        if row["artifacts"]:
            arrived = self._artifacts_arrived(name, row["artifacts"])
            if arrived is None:
                self.held[name] = pod
                return None
            if arrived:
                return failure_line(self.round_number, index, task_id, name, arrived, known_at, lost)
        assert index is not None  # Indexed: its annotation is valid; else its place is settled
        row["round"], row["job"], row["index"], row["task_id"] = self.round_number, self.job_name, index, task_id
        set_attempts(row, lost)
        return self.graded(reward_line(row, known_at))

    def graded(self, line: RewardLine) -> RewardLine:
        """With a grader (grade=, --grader), the line's reward is the grader's, the pod's kept as
        pod_reward; graded once per pod, so the round's rows get the same reward (grade_rows)."""
        if self.settings.grade is None:
            return line
        if line["pod"] not in self.grades:
            self.grades[line["pod"]] = graded_reward(self.settings, line)
        line["pod_reward"], line["reward"] = line["reward"], self.grades[line["pod"]]  # type: ignore[typeddict-item]
        return line

    def grade_rows(self, rows: List[EpisodeRow], figures: RoundResult) -> None:
        """The analysed round's rows graded as their lines were (graded), and its reward figures
        made again from the graded rewards, before its lines are reconciled."""
        if self.settings.grade is None:
            return
        for row in rows:
            line = self.graded(reward_line(row, time.time()))
            row["pod_reward"], row["reward"] = line["pod_reward"], line["reward"]  # type: ignore[typeddict-item]
        again = batch_figures(rows, figures["failed_episodes"])
        for key in ("reward_sum", "reward_mean", "reward_min", "reward_max"):
            figures[key] = again[key]

    def _failure(
        self, index: Optional[int], task_id: Any, name: str, rule: str, known_at: float, lost: List[LostAttempt]
    ) -> RewardLine:
        """A failed episode's line: whose failure it is, from its pod as last watched, and with
        --failed-episode-reward its score when the failure is the episode's own."""
        kind = whose_failure(self.pods.get(name))
        reward = self.settings.failed_episode_reward
        return failure_line(self.round_number, index, task_id, name, rule, known_at, lost, kind, reward)

    def _artifacts_arrived(self, name: str, listed: List[ArtifactEntry]) -> Optional[str]:
        """ "" once every artifact the reward event lists is saved as listed; the rule its frames
        broke; None while that is not known yet (the line waits: the round's analysis decides
        when no read brings them)."""
        state = self.follower.artifacts_of(name) if self.follower is not None else None
        if state is None:
            return None
        saved, error, missing = state
        if error:  # in the words of the round's analysis (episode_artifacts)
            return f"its artifacts did not arrive whole: {error}" + (f"; {ARTIFACT_ROTATION_HINT}" if missing else "")
        if all(saved.get(entry["name"]) == entry for entry in listed):
            return ""
        return None

    def _lost_before(self, name: str, index: Optional[int]) -> List[LostAttempt]:
        """--infra-retries: the watched pods of this pod's index that the infrastructure lost, as
        episode_attempts lists them (a replacement is created only once its predecessor has
        failed, podReplacementPolicy Failed, so the watch has shown them all by now)."""
        if not self.settings.infra_retries or index is None:
            return []
        lost = []
        for other, pod in self.pods.items():
            if other == name or not infra_loss(pod):
                continue
            try:
                same = pod_index(pod, self.settings.count, self._inspect(other)) == index
                if same:
                    lost.append(
                        (
                            _attempt_order(pod),
                            LostAttempt(pod=other, cause=infra_loss(pod), created_at=creation_time(pod, "a pod")),
                        )
                    )
            except (EpisodeInvalid, DemoError, KeyError, TypeError, ValueError):
                continue
        return [attempt for _, attempt in sorted(lost, key=lambda entry: entry[0])]

    def _write(self, lines: List[RewardLine], known: float) -> None:
        limit, kept = self.settings.stop_after, []
        for line in lines:  # recorded first: a line on disk is always one the run can retract
            first = line["pod"] not in self.last
            if limit is not None and first and stands_as_reward(line) and self.standing() >= limit:
                self.beyond.add(line["pod"])  # --stop-after K keeps the first K: this one is stopped
                continue
            self.last[line["pod"]] = line
            if stands_as_reward(line):
                self.reward_known.setdefault(line["pod"], known)
            kept.append(line)
        self.writer.append(kept)

    def failures(self) -> Dict[str, str]:
        """The failure lines written so far, by pod: final (provisional_episode)."""
        return {
            pod: line["failure"]
            for pod, line in self.last.items()
            if line["failure"] is not None and not line["retracted"]
        }

    def analysed(self, rows: List[EpisodeRow], figures: RoundResult) -> None:
        """The round's analysis stands: append what the file lacks, and time its first reward."""
        with self.lock:
            self.held.clear()
            self._analysed(rows, figures)

    def set_aside_artifacts(self, keep: Set[str]) -> None:
        """Move the artifacts of this round's pods whose episode does not stand (failed, set
        aside, lost, or retracted with its round) from DIR/artifacts/<pod>/ to
        DIR/artifacts-set-aside/<pod>/: kept for inspection, never found by a trainer that globs
        DIR/artifacts/. Best effort: the run's own outcome is what counts."""
        root = self.settings.output / RUN_FILES.artifacts
        for name in sorted(set(self.pods) | set(self.last)):
            source = root / name
            if name in keep or not source.is_dir() or source.is_symlink():
                continue
            target = self.settings.output / RUN_FILES.artifacts_set_aside / name
            with contextlib.suppress(OSError):
                target.parent.mkdir(exist_ok=True)
                if not target.exists():
                    os.replace(source, target)

    def _analysed(self, rows: List[EpisodeRow], figures: RoundResult) -> None:
        self.set_aside_artifacts({row["pod"] for row in rows})
        known_at, known = time.time(), time.monotonic()
        self._write(reconciling_lines(self.last, rows, figures["failed_episodes"], known_at), known)
        first = min((self.reward_known[row["pod"]] for row in rows if row["pod"] in self.reward_known), default=None)
        if first is not None:  # every validated episode has its reward line by now
            figures["client_first_reward_seconds"] = first - self.submitted

    def failed(self, error: BaseException) -> None:
        """The round failed, or the run stopped, before its analysis accepted it: retract its
        reward lines (the episode the failure names with its own rule). Best effort: the error
        that got here is the one the run reports."""
        with self.lock:
            self.held.clear()
            self._failed(error)

    def _failed(self, error: BaseException) -> None:
        self.set_aside_artifacts(set())
        if isinstance(error, KeyboardInterrupt):
            failure = "the run was interrupted before its round was validated"
        elif isinstance(error, DemoError):
            failure = f"its round failed: {error}"
        else:
            failure = f"the run stopped before its round was validated ({error!r})"
        known_at = time.time()
        lines: List[RewardLine] = []
        named = error.pod if isinstance(error, EpisodeInvalid) else None
        if isinstance(error, EpisodeInvalid):
            own = self.last.get(error.pod)
            if own is None:
                index, task_id = self._identity(error.pod)
                lost = self._lost_before(error.pod, index)
                line = self._failure(index, task_id, error.pod, error.rule, known_at, lost)
                line["reward"] = None  # its round failed: no score stands
                lines.append(line)
            elif stands_as_reward(own):
                lines.append(retraction_of(own, error.rule, known_at, whose_failure(self.pods.get(error.pod))))
        kinds = {name: whose_failure(pod) for name, pod in self.pods.items()}
        lines += [line for line in retracting_lines(self.last, failure, known_at, kinds) if line["pod"] != named]
        with contextlib.suppress(Exception):  # a disk that failed already, or the caller's on_reward
            self._write(lines, time.monotonic())


def read_kueue_group(kubectl: Kubectl) -> KubeObject:
    """The API server's discovery document of Kueue's group (an APIGroup: its versions and the
    preferred one), in one request without discovery (`get --raw`); NotFound where Kueue is not
    installed."""
    path = f"/apis/{KUEUE_GROUP}"
    return kubectl.decode_json(kubectl.run(["get", "--raw", path], read_only=True), f"get --raw {path}")


class InFlight(typing.NamedTuple):
    """Where an interruption saves the diagnostics of what is in flight: the directory of the
    Job being run (the output directory before the first), and that Job once it is created."""

    directory: Path
    job: Optional[KubeObject] = None


class BatchRun:
    """One `run`: preflight, namespace and ConfigMap, then one Job per round, each waited for,
    collected, saved and analysed. Keeps just enough state to save diagnostics when interrupted."""

    def __init__(self, kubectl: Kubectl, receipt: Receipt, settings: RunSettings, progress: Progress) -> None:
        self.kubectl = kubectl
        self.receipt = receipt
        self.settings = settings
        self.progress = progress
        self.creator = OwnedCreator(kubectl, receipt["run_id"])
        self.run_id = receipt["run_id"]
        self.namespace = receipt["namespace"]
        self.create_sent = False  # from the first create request on, the cluster may hold this run's objects
        self.namespace_created = False  # from the first create on, it may exist
        # what an interruption saves, and where (save_after_interrupt); None once a Job's
        # diagnostics are on disk, so a Ctrl-C after (between rounds, while publishing) never
        # writes over them
        self.in_flight: Optional[InFlight] = InFlight(settings.output)
        self.runtimeclass: Optional[KubeObject] = None  # as read by the preflight
        self.capacity: Optional[int] = None  # with --parallelism auto: the nodes' room, as the preflight read it
        self.kueue_version: Optional[str] = None  # with --queue: the LocalQueue version the API server serves
        self.watches_account = True  # the preflight found list and watch serviceaccounts granted
        self.account_watch: Optional[WatchStream] = None  # started by the preflight, ended once the account is seen
        self.receipt_lock = threading.Lock()  # warm-up Jobs run in threads, one receipt
        # what all of the run's pods may make it keep, on disk and in memory, and where their artifacts go
        self.log_budgets = LogBudgets(
            artifacts=settings.output / RUN_FILES.artifacts, artifact_bytes=settings.max_artifact_bytes
        )
        # set on Ctrl-C (Jobs waited for in other threads stop waiting), or by the API's caller
        self.stop = settings.stop or threading.Event()
        self.rewards = RewardsWriter(settings.output / REWARDS_FILE, settings.on_reward, settings.tags)
        self.measuring = False  # a measured round's Job is being waited for: an early finish stops it
        self.done = threading.Event()  # execute() has returned or raised
        if settings.finish_early is not None:
            threading.Thread(target=self.relay_early_finish, name="rl-batch-demo early finish", daemon=True).start()

    def finishing_early(self) -> bool:
        return self.settings.finish_early is not None and self.settings.finish_early.is_set()

    def relay_early_finish(self) -> None:
        """An early finish asked for (stream_batch's loop left) outside a measured round (preflight,
        warm-up, between Jobs) has nothing to keep: it stops the run as a Ctrl-C would."""
        early = self.settings.finish_early
        assert early is not None
        while not self.done.wait(0.25):
            if early.is_set() and not self.measuring:
                self.stop.set()
                return

    def execute(self) -> Results:
        try:
            return self.execute_steps()
        finally:
            self.done.set()

    def execute_steps(self) -> Results:
        try:
            self.preflight()
            try:
                self.stop_if_asked()
            except BaseException:
                self.end_service_account_watch()
                raise
            self.create_namespace()
        except BaseException:
            self.kubectl.cancel_prepared()  # the creates they were started for will not be made
            raise
        image, prepared = prepare_measured_image(
            self.kubectl, self.settings, self.namespace, self.run_id, self.run_one_episode_job, self.stop
        )
        kubelets_before = self.read_kubelets_before() if self.settings.kubelet_metrics else None
        self.rewards.open()  # empty until the first measured round's first verdict
        played: List[Tuple[List[EpisodeRow], RoundResult]] = []
        try:
            for round_number in range(1, self.settings.rounds + 1):
                if played and self.finishing_early():  # a stream left early: the rounds played stand
                    break
                played.append(self.run_round(round_number, image))
        finally:
            self.rewards.close()
            self.measuring = False
        rows = [row for round_rows, _ in played for row in round_rows]
        rounds = [figures for _, figures in played]
        kubelet: KubeletFigures = {}
        if kubelets_before is not None:
            expected = expected_operations(rows)
            after = (
                read_kubelet_metrics(self.kubectl, sorted(expected), self.runtime_handler) if kubelets_before else {}
            )
            kubelet["runtime_operations"] = count_runtime_operations(
                kubelets_before, after, self.runtime_handler, expected
            )
        context = self.kubectl.context or ""
        capacity: Optional[AutoParallelism] = None if self.capacity is None else {"parallelism_capacity": self.capacity}
        return assemble_results(
            self.settings, context, self.namespace, self.run_id, rows, rounds, prepared, kubelet, capacity
        )

    @property
    def runtime_handler(self) -> str:
        """The `runtime_handler` label of the kubelet's RunPodSandbox histogram ("" without a RuntimeClass)."""
        return str((self.runtimeclass or {}).get("handler") or "")

    def read_kubelets_before(self) -> Dict[str, KubeletReading]:
        """Every node that may run an episode (`check`'s eligible nodes), read before the Job exists."""
        try:
            nodes = eligible_nodes(self.kubectl.get_list("nodes"), self.runtimeclass)
        except DemoError as error:  # best effort: the run goes on, and every node's figures say why
            say_stderr(f"warning: --kubelet-metrics cannot list the nodes ({error}); no runtime operations")
            return {}
        names = [str(dig(node, "metadata", "name") or "") for node in nodes]
        return read_kubelet_metrics(self.kubectl, [name for name in names if name], self.runtime_handler)

    def preflight(self) -> None:
        """The cheap part of `check`: the RuntimeClass exists and every permission is granted;
        with --parallelism auto, also the nodes and what runs on them, for the Job's parallelism."""
        runtime = self.settings.runtime
        kubelet_metrics, auto = self.settings.kubelet_metrics, self.settings.parallelism_auto
        queue = self.settings.queue
        reviews = access_review_list(
            self.namespace,
            runtime is not None,
            kubelet_metrics,
            self.settings.warmup,
            capacity=auto,
            local_queue=queue is not None,
        )

        def attempt(read: Callable[[], Any]) -> Read:  # a refused read is the permission finding's to name
            try:
                return Read(read())
            except KubectlFailure as failure:
                if failure.unreachable:  # every read fails alike: one line says why
                    raise
                return Read(failure=failure.first_line)

        reads: List[Callable[[], Any]] = [lambda: self.kubectl.runtimeclass(runtime)] if runtime is not None else []
        if auto:  # one listing: the RuntimeClass too, so a 10-episode run keeps its 10 processes
            kinds = "runtimeclasses,nodes,pods" if runtime is not None else "nodes,pods"
            reads = [lambda: attempt(lambda: self.kubectl.get_list(kinds, flags=EVERY_NAMESPACE))]
        kueue_reads: List[Callable[[], Any]] = (
            [
                lambda: attempt(lambda: read_kueue_group(self.kubectl)),
                lambda: attempt(lambda: self.kubectl.get(CLUSTERQUEUE_RESOURCE, queue or "")),
            ]
            if queue is not None
            else []
        )
        # The namespace's ServiceAccount is watched from here, before the namespace exists (a list
        # of a namespace that does not exist is empty, not an error, by design: kubernetes/kubernetes
        # issue 75537; its watch then sees the account's creation):
        # its kubectl starts beside the preflight's reads instead of beside the namespace's create,
        # so its start is not part of that step. It creates nothing; a preflight that fails, or
        # denies list and watch serviceaccounts, ends it.
        self.account_watch = self.watch_service_account()
        # The namespace's create follows the preflight: its kubectl starts beside the preflight's
        # reads and waits for its input (Kubectl.prepare), so its start is not part of that step.
        self.kubectl.prepare_create()
        try:
            answers = concurrently([*reads, *kueue_reads, lambda: self.review_access(reviews)])
        except BaseException:
            self.end_service_account_watch()
            raise
        kueue, cluster_queue = (answers[len(reads)], answers[len(reads) + 1]) if queue is not None else (None, None)
        if kueue is not None and not kueue.failure:
            self.kueue_version = served_kueue_version(kueue.value)
        runtimeclass = Read(answers[0]) if runtime is not None and not auto else None
        if runtime is not None and auto and not answers[0].failure:  # a failed listing: set_parallelism says why
            runtimeclass = Read(named_runtimeclass(answers[0].value, runtime))
        self.runtimeclass = runtimeclass.value if runtimeclass is not None else None
        findings = preflight_findings(
            context=self.kubectl.context or "",
            server=self.receipt["server"],
            runtime=runtime,
            runtimeclass=runtimeclass,
            reviews=Read(answers[-1]),
            kubelet_metrics=kubelet_metrics,
            capacity=auto,
            queue=queue,
            kueue=kueue,
            cluster_queue=cluster_queue,
        )
        for finding in findings:
            if not finding.ok:
                self.end_service_account_watch()
                raise DemoError(finding.stop, EXIT_CLUSTER)
        account_reviews = [review for review in answers[-1] if _asks(review, SERVICEACCOUNT_PERMISSIONS)]
        self.watches_account = not denied_permissions(account_reviews)
        if not self.watches_account:
            self.end_service_account_watch()
            say_stderr(f"warning: {SERVICEACCOUNT_WAIT}: {serviceaccount_finding(account_reviews).detail}")
        if auto:
            self.set_parallelism(answers[0])

    def review_access(self, reviews: KubeObject) -> List[KubeObject]:
        """The access reviews' answers: from the rules review of the run's namespace where its
        rules prove every permission (one request, no discovery: a cold kubectl cache costs it
        nothing, and the 17 or so access reviews, sent one after another, are not sent); else,
        after it, from the access reviews themselves, which decide whatever the rules could not
        prove (granted_by_rules). A refused rules review (an old server, a policy) is no verdict:
        the access reviews are asked instead."""
        try:
            rules: Optional[KubeObject] = self.kubectl.create_raw(
                RULES_REVIEW_PATH, rules_review(self.namespace), review=True
            )
        except KubectlFailure as failure:
            if failure.unreachable:
                raise
            rules = None
        proven = granted_by_rules(rules, reviews)
        return proven if proven is not None else self.kubectl.create(reviews, review=True)

    def set_parallelism(self, listing: Read) -> None:
        """--parallelism auto: as many episodes at once as the eligible nodes have room for now
        (episode_room, as `check` counts it), at most the count; none is refused."""
        if listing.failure:
            raise DemoError(
                f"--parallelism auto cannot list the nodes and the pods of every namespace: {listing.failure}",
                EXIT_CLUSTER,
            )
        nodes = [item for item in listing.value if item.get("kind") == "Node"]
        pods = [item for item in listing.value if item.get("kind") == "Pod"]
        count = self.settings.count
        try:
            room, text = episode_room(self.runtimeclass, nodes, pods, self.settings.ephemeral_storage)
        except ValueError as error:
            raise DemoError(f"--parallelism auto cannot count the nodes' room ({error})", EXIT_CLUSTER) from None
        if room < 1:
            raise DemoError(
                f"--parallelism auto: not even one episode fits now: {text}; free some room, or pass --parallelism P "
                "to let the episodes wait for it (nothing was created)",
                EXIT_CLUSTER,
            )
        self.capacity = room
        say_stderr(f"parallelism auto: {self.parallelism} of {count} episodes at once ({text})")

    @property
    def parallelism(self) -> int:
        """The Job's (job_parallelism), derived from the settings and the room the preflight read."""
        return job_parallelism(self.settings, self.capacity)

    def create_namespace(self) -> None:
        """The namespace and the ConfigMap with the worker, in one create, while a watch waits for
        the namespace's `default` ServiceAccount (see wait_for_service_account)."""
        self.create_sent = True
        self.namespace_created = True  # from here on it may exist, even if the create reports failure
        manifests = [
            namespace_manifest(self.namespace, self.run_id),
            configmap_manifest(
                self.namespace,
                self.run_id,
                self.settings.worker_source,
                self.settings.public_tasks,
                self.settings.launcher_source,
            ),
        ]
        resources = ["namespace", "configmap"]
        if self.settings.queue is not None and self.kueue_version is not None:  # --queue: its LocalQueue too
            manifests.append(local_queue_manifest(self.namespace, self.run_id, self.settings.queue, self.kueue_version))
            resources.append(LOCALQUEUE_RESOURCE)
            self.receipt["local_queue"] = {"name": LOCAL_QUEUE_NAME, "cluster_queue": self.settings.queue, "uid": None}
            write_receipt(self.settings.output, self.receipt)  # before the create, as the namespace's name
        watch = self.account_watch
        # the first Job's create follows: its kubectl starts beside this create (Kubectl.prepare)
        self.kubectl.prepare_create_raw(collection_path("Job", self.namespace))
        try:
            try:
                namespace, _, *local_queue = self.creator.create_together(manifests, resources)
            except DemoError as error:
                settled = self.creator.settled.get(("Namespace", self.namespace))
                if settled is None:
                    self.namespace_created = isinstance(error, KubectlTimeout) or (
                        isinstance(error, KubectlFailure) and error.transient
                    )
                else:
                    self.record_namespace(settled)
                raise
            if local_queue and "local_queue" in self.receipt:
                self.receipt["local_queue"]["uid"] = str(local_queue[0]["metadata"]["uid"])
            self.record_namespace(namespace)
            if watch is not None:
                self.wait_for_service_account(watch)
        finally:
            self.end_service_account_watch()  # the Job's create waits for it no longer

    def watch_service_account(self) -> WatchStream:
        """The watch of the namespace's `default` ServiceAccount (wait_for_service_account), as
        long as the preflight's reads may take (with their retries), then the namespace's create,
        then the wait for the account after it."""
        timing = self.kubectl.timing
        seconds = 2 * self.kubectl.process_timeout + timing.retry_budget_seconds + timing.serviceaccount_wait_seconds
        by_name = ["serviceaccounts", "--field-selector", f"metadata.name={DEFAULT_SERVICEACCOUNT}"]
        return self.kubectl.watch("serviceaccount", by_name, self.namespace, queue.Queue(), seconds)

    def end_service_account_watch(self) -> None:
        if self.account_watch is not None:
            self.account_watch.end()
            self.account_watch = None

    def wait_for_service_account(self, watch: WatchStream) -> None:
        """Until the namespace's `default` ServiceAccount exists, a pod of it is refused:
        ServiceAccount admission looks it up for about 1.5 s, then the job controller records
        FailedCreate and backs off (plugin/pkg/admission/serviceaccount/admission.go; the
        serviceaccounts controller creates it soon after the namespace), which would count in
        the first Job's figures. So the first Job is created once it is seen, by the watch started
        with the preflight (no process more, no wait when it came meanwhile); after
        Timing.serviceaccount_wait_seconds the run goes on without it, and says so."""
        limit = time.monotonic() + self.kubectl.timing.serviceaccount_wait_seconds
        sink = watch.sink
        while True:
            try:
                _, _, _, event = sink.get(timeout=max(0.0, min(limit - time.monotonic(), 0.5)))
            except queue.Empty:
                if time.monotonic() < limit:
                    continue
                reason = f"it did not appear within {self.kubectl.timing.serviceaccount_wait_seconds:g} s"
                break
            if event is None:
                reason = f"its watch ended ({kubectl_message(watch.stderr) if watch.stderr else 'no message'})"
                break
            obj = event.get("object")
            named = isinstance(obj, dict) and dig(obj, "metadata", "name") == DEFAULT_SERVICEACCOUNT
            if event.get("type") in ("ADDED", "MODIFIED") and named:
                return
        say_stderr(
            f"warning: the namespace's {DEFAULT_SERVICEACCOUNT} ServiceAccount is not there yet ({reason}); the Job "
            "is created anyway, and its pods wait for the account (ServiceAccount admission)"
        )

    def record_namespace(self, namespace: KubeObject) -> None:
        self.receipt["uid"] = namespace["metadata"]["uid"]
        write_receipt(self.settings.output, self.receipt)
        say_stderr(f"Test namespace: {self.namespace}")

    def run_round(self, round_number: int, image: str) -> Tuple[List[EpisodeRow], RoundResult]:
        """One measured round: its Job runs `image`; an interruption saves its diagnostics."""
        name = job_name_for(round_number, self.settings.rounds)
        round_dir = self.settings.round_dir(round_number)
        self.in_flight = InFlight(round_dir)
        manifest = round_job_manifest(self.settings, name, self.namespace, self.run_id, image, self.parallelism)
        rewards = RoundRewards(self.rewards, self.settings, round_number, round_dir)
        self.measuring = True
        try:
            rows, figures = self.run_job(
                round_number, name, round_dir, manifest, self.settings.count, self.progress, rewards
            )
        except BaseException as error:
            rewards.failed(error)
            raise
        finally:
            self.measuring = False
        try:
            rewards.grade_rows(rows, figures)
        except BaseException as error:
            rewards.failed(error)
            raise
        rewards.analysed(rows, figures)
        return rows, figures

    def run_one_episode_job(
        self, name: str, job_dir: Path, manifest: KubeObject, interrupt_dir: Path
    ) -> Tuple[List[EpisodeRow], RoundResult]:
        """A warm-up or probe Job (see OneEpisodeJob), without a progress line."""
        self.in_flight = InFlight(interrupt_dir)
        return self.run_job(0, name, job_dir, manifest, 1, Progress(enabled=False))

    def stop_if_asked(self) -> None:
        """Before the next create: a stop asked for from another thread (the API's) is a Ctrl-C."""
        if self.stop.is_set() or self.finishing_early():
            raise KeyboardInterrupt

    def stopped_by(self, rewards: RoundRewards) -> Optional[str]:
        """Why a measured round stops before its Job ends, once it should: --stop-after K reached,
        or stream_batch's loop left (the episodes that ended are kept); None while it goes on."""
        if self.finishing_early():
            return "stream_batch's loop was left"
        stop_after = self.settings.stop_after
        if stop_after is not None and rewards.standing() >= stop_after:
            return f"--stop-after {stop_after}: {stop_after} episodes had a standing reward"
        return None

    def run_job(
        self,
        round_number: int,
        name: str,
        round_dir: Path,
        manifest: KubeObject,
        count: int,
        progress: Progress,
        rewards: Optional[RoundRewards] = None,
    ) -> Tuple[List[EpisodeRow], RoundResult]:
        """Create one Job, wait for it (telling `rewards` of its pods), save every diagnostic, then
        analyse it. A warm-up's or the probe's artifacts (round 0) stay in its own directory."""
        settings = self.settings
        budgets = (
            self.log_budgets if round_number else self.log_budgets.saving_artifacts_in(round_dir / RUN_FILES.artifacts)
        )
        self.stop_if_asked()
        write_job_submitted(round_dir, manifest)
        entry: ReceiptJob = {"name": name, "uid": None}
        with self.receipt_lock:
            self.receipt["jobs"].append(entry)
            write_receipt(settings.output, self.receipt)
        submitted_wall, submitted = time.time(), time.monotonic()
        try:
            job = self.creator.create(manifest, "job")
        except KubectlFailure as failure:
            refusal = strict_refusal(failure.stderr, f"{self.namespace}/{name}", settings.infra_retries > 0)
            if refusal is None:
                raise
            raise DemoError(refusal, EXIT_CLUSTER) from None
        if round_number and self.in_flight is not None:  # a measured round: what an interruption saves
            self.in_flight = self.in_flight._replace(job=job)
        with self.receipt_lock:
            entry["uid"] = job["metadata"]["uid"]
            write_receipt(settings.output, self.receipt)
        self.refuse_dropped_fields(manifest, job)
        deadline = submitted + settings.client_wait_seconds
        pod_spec = manifest["spec"]["template"]["spec"]
        selector = pod_selector(job)
        # each pod's log read while it runs (LogFollower), so its row's files are on disk with its
        # row and a pod the job controller stops keeps what it printed
        follower = LogFollower(
            self.kubectl,
            self.namespace,
            selector,
            count,
            round_dir,
            budgets,
            2 * settings.client_wait_seconds + 60,  # a queued Job waits, then has the whole wait again
            settings.infra_retries,
            on_progress=rewards.log_progress if rewards is not None else None,
        )

        def pod_seen(pod: KubeObject) -> None:
            follower.pod_seen(pod)  # first: a pod that ended starts its set's read before its row is judged
            if rewards is not None:
                rewards.pod_seen(pod)

        try:
            self.refuse_changed_job(pod_spec, job)
            if rewards is not None:
                rewards.follower = follower
                rewards.job_created(job, submitted)
            stop_reasons: List[str] = []

            def enough() -> bool:  # --stop-after, or a stream left early: a measured round only
                reason = self.stopped_by(rewards) if rewards is not None else None
                if reason:
                    stop_reasons.append(reason)
                return reason is not None

            observation = wait_for_job(
                self.kubectl,
                self.namespace,
                job,
                deadline,
                submitted,
                progress,
                self.stop,
                on_pod=pod_seen,
                pod_spec=pod_spec,
                run_seconds=settings.client_wait_seconds,
                enough=enough if rewards is not None else None,
            )

            # When the watch proved every pod final, only the events are left to list: that listing
            # starts now, beside the wait for the followed logs to end (the run's step after the
            # decision, 0.03 s of the bench's 10 episodes before); its answer is written below, in
            # the same order as before (pods.json, then events.txt, then any log read after).
            def list_events() -> List[KubeObject]:
                return self.kubectl.get_list("events", namespace=self.namespace)

            proved_final = final_pods_from_watch(observation, job["metadata"]["uid"])
            events_listing = InBackground(list_events) if proved_final is not None else None
            early = observation.condition == JOB_STOPPED  # the pods still running end only with the Job's deletion
            complete = classify_round(observation) == ROUND_COMPLETE
            followed = follower.finish(self.kubectl.timing.follow_grace_seconds, self.stop, early, complete)
        except JobRefused as refused:
            follower.stop()
            raise DemoError(f"{refused.what}; {self.delete_refused_job(name)}", refused.exit_code) from None
        except BaseException:
            follower.stop()
            raise
        write_job(round_dir, observation.job)
        outcome = classify_round(observation)
        all_logs = count <= LOG_CROSSCHECK_LIMIT or outcome != ROUND_COMPLETE
        selector = pod_selector(job)
        log_selector: Optional[str] = selector  # matches exactly the pods whose logs are read
        watched = proved_final  # the observation stays as wait_for_job returned it (its watches ended)
        stopped = outcome == ROUND_STOPPED
        stop_after = settings.stop_after if rewards is not None else None
        # A Job that completed with more episodes than --stop-after K: every episode ended before
        # the stop took effect (or before their lines were known: the pod watch can lag the Job's),
        # so the first K are kept from the pods as finally read, and the rest stopped all the same
        # (no line, in no figure): exactly K stand, as with a stop.
        completed_beyond = outcome == ROUND_COMPLETE and stop_after is not None and count > stop_after
        if completed_beyond and rewards is not None:
            stopped = True
            stop_reasons.append(self.stopped_by(rewards) or f"--stop-after {stop_after}: the Job completed first")
        stopped_pods: List[KubeObject] = []

        def keep_first(ended: List[KubeObject]) -> List[KubeObject]:
            # exactly the first K standing rewards: an episode that ended without a line (beyond
            # K, or its verdict not known from its status) is stopped with the rest, so
            # rewards.jsonl and results.json hold the same K episodes
            nonlocal stopped_pods, log_selector
            if rewards is None or stop_after is None:
                return ended
            known = {pod: stands_as_reward(line) for pod, line in rewards.last.items()}
            kept, beyond = first_to_end(ended, known, stop_after)
            stopped_pods = [*stopped_pods, *beyond]
            log_selector = ended_pods_selector(selector, kept, stopped_pods)
            return kept

        if stopped and not completed_beyond:  # the episodes that ended are read and analysed; the rest go with the Job
            watched, stopped_pods = stopped_round_pods(observation, job["metadata"]["uid"])
            log_selector = ended_pods_selector(selector, watched, stopped_pods)
            watched = keep_first(watched)  # with --stop-after: its selector too
        elif completed_beyond and watched is not None:
            watched = keep_first(watched)
        # The diagnostics first: pods.json and events.txt are on disk before any log is written,
        # so a disk that the logs fill still leaves them.
        saved = threading.Event()

        def save_events(listing: List[KubeObject]) -> List[KubeObject]:
            try:
                events = split_pods_and_events(listing, job)[1]
                write_events(round_dir, events, budgets)
                return events
            finally:
                saved.set()  # the logs wait for it, whatever happened here

        def read(pods: List[KubeObject]) -> Tuple[Dict[str, Optional[PodLog]], Dict[str, str]]:
            lost = [pod for pod in pods if settings.infra_retries and infra_loss(pod)]
            if lost:  # a pod lost to the infrastructure is judged by its status alone
                pods = [pod for pod in pods if not infra_loss(pod)]
            if follower.failed_to_save:  # the disk: nothing more is read, the run stops on it
                return {}, {}
            wanted = {pod["metadata"]["name"] for pod in pods if all_logs or log_wanted(pod)}
            have: Dict[str, Optional[PodLog]] = {name: log for name, log in followed.items() if name in wanted}
            rest = [pod for pod in pods if pod["metadata"]["name"] not in have]
            # what the reads while the pods ran proved whole is kept; the rest is read as before,
            # by a selector of their completion indexes when some were (a pod watch that lagged
            # the Job's showed few pods started before the decision: one `logs -l` for the rest,
            # not a process each; CI saw 19 processes for 10 episodes)
            chosen = log_selector
            if have and log_selector is not None:
                read_already = [pod for pod in pods if pod["metadata"]["name"] in followed]
                chosen = unread_pods_selector(selector, rest, [*read_already, *stopped_pods])
            logs, errors = read_logs(
                self.kubectl, self.namespace, rest, chosen, all_logs, round_dir, budgets, saved, lost
            )
            return {**have, **logs}, errors

        if watched is not None:  # the events listing and the logs at once, the logs written after the events
            pods = watched
            write_pods(round_dir, pods, budgets)
            events_call = events_listing or InBackground(list_events)  # started above, unless the watch proved less
            events, (logs, log_errors) = concurrently([lambda: save_events(events_call.result()), lambda: read(pods)])
        else:  # one listing of both, then the logs of the pods it names
            listing = self.kubectl.get_list("pods,events", namespace=self.namespace)
            listed = pods = split_pods_and_events(listing, job)[0]
            if completed_beyond:  # the pods the watch had not shown ended, as listed now
                pods = keep_first(pods)
            # pods.json: every pod the Job had, those deleted since (a failed Job's stopped pods)
            # as the watch last saw them
            write_pods(round_dir, with_watched_pods(pods, observation, job), budgets)
            events = save_events(listing)
            try:  # as the watch checks each pod it shows: one it did not show is checked here,
                # every pod listed (those --stop-after leaves out too)
                for pod in listed:
                    refuse_changed_pod(pod_spec, pod, f"{self.namespace}/{name}")
            except JobRefused as refused:
                deleted = self.delete_refused_job(name, "and none of its episodes counts")
                where = f"inspect {round_dir / 'pods.json'} and events.txt"
                raise DemoError(f"{refused.what}; {deleted}; {where}", refused.exit_code) from None
            logs, log_errors = read(pods)
        follower.raise_failure()  # a disk the followed logs filled: after pods.json and events.txt
        saved_logs: Dict[str, Optional[PodLog]] = {**followed, **logs}  # on disk, the followed ones too
        if stopped:  # every pod the Job had, those stopped too; then the Job goes, its pods first
            write_pods(round_dir, [*pods, *stopped_pods], budgets)
            if outcome == ROUND_STOPPED:  # a Job that completed has nothing left running
                self.delete_stopped_job(name, stop_reasons[0] if stop_reasons else "stopped early")
        if settings.infra_retries:  # a lost pod the cluster deleted (preempted, evicted by the API) is an attempt too
            vanished = vanished_attempts(observation, pods, job["metadata"]["uid"])
            if vanished:
                pods = sorted([*pods, *vanished], key=_attempt_order)
                write_pods(round_dir, with_watched_pods(pods, observation, job), budgets)
        self.in_flight = None  # this Job's diagnostics are all on disk
        where = f"{self.namespace}/{name}"
        warning = latest_warning(events, [name] + [pod["metadata"]["name"] for pod in pods])
        stopper = round_stopper(outcome, observation, where, settings, warning, round_inspect_hint(round_dir))
        if stopper is not None:
            raise stopper
        collected = RoundCollected(
            round_number=round_number,
            job_name=name,
            job=job,
            observation=observation,
            pods=pods,
            logs=logs,
            log_errors=log_errors,
            count=count,
            round_dir=round_dir,
            submitted_wall=submitted_wall,
            submitted_monotonic=submitted,
            # every measured Job is Indexed: its episodes are numbered by completion index
            indexed=settings.indexed or dig(job, "spec", "completionMode") == "Indexed",
            task_ids=[task_id_of(task, i) for i, task in enumerate(settings.tasks)] if settings.tasks else None,
            builtin_worker=settings.builtin_worker,
            max_failed_episodes=settings.max_failed_episodes,
            failed_episode_reward=settings.failed_episode_reward,
            events=events,
            infra_retries=settings.infra_retries,
            max_artifact_bytes=settings.max_artifact_bytes,
            stopped=stopped,
            stopped_pods=stopped_pods,
            stopped_by=stop_reasons[0] if stop_reasons else "",
            provisional_failures=rewards.failures() if rewards is not None else {},
        )
        try:
            rows, figures = analyse_round(collected, where)
        except EpisodeInvalid:  # the round fails: every pod's log beside its error, as the guide keeps them
            self.save_missing_logs(pods, saved_logs, round_dir, selector)
            raise
        set_aside = {entry["pod"] for entry in figures["failed_episodes"]}
        set_aside_pods = [pod for pod in pods if pod["metadata"]["name"] in set_aside]
        self.save_missing_logs(set_aside_pods, saved_logs, round_dir)
        return rows, figures

    def save_missing_logs(
        self, pods: List[KubeObject], logs: Dict[str, Optional[PodLog]], round_dir: Path, selector: str = ""
    ) -> None:
        """The logs of these pods that the round did not read (beyond the cross-check limit, a
        termination message stood for them): saved for inspection, best effort. `selector`
        matches every one of `pods`: when none was read, read_logs may use it."""
        missing = [pod for pod in pods if pod["metadata"]["name"] not in logs]
        chosen = selector if selector and len(missing) == len(pods) else None
        with contextlib.suppress(DemoError):
            read_logs(self.kubectl, self.namespace, missing, chosen, True, round_dir, self.log_budgets)

    def refuse_dropped_fields(self, manifest: KubeObject, job: KubeObject) -> None:
        """Stop when the API server dropped a Job field it does not know (Indexed mode, per-index
        backoff limits, the pod failure policy): without them, failed episodes would be retried
        (backoffLimit's default is 6) or all episodes would run the same task. The Job is deleted
        at once so no pod retries."""
        dropped = [
            key
            for key in ("completionMode", "backoffLimitPerIndex", "maxFailedIndexes", "podFailurePolicy")
            if key in manifest["spec"]
            and dig(job, "spec", key) != manifest["spec"][key]
            # a run whose episodes need no index reads its logs one pod at a time without it
            and (key != "completionMode" or self.settings.indexed)
        ]
        if not dropped:
            return
        stored_policy = dig(job, "spec", "podFailurePolicy")
        if "podFailurePolicy" in dropped and isinstance(stored_policy, dict):
            # a 1.28 API server (JobBackoffLimitPerIndex off) keeps the policy but drops its FailIndex
            # rules with the per-index fields (pkg/registry/batch/job/strategy.go PrepareForCreate)
            kept = {str(rule.get("action")) for rule in stored_policy.get("rules") or [] if isinstance(rule, dict)}
            sent = [str(rule["action"]) for rule in manifest["spec"]["podFailurePolicy"]["rules"]]
            missing = sorted({action for action in sent if action not in kept})
            where = f"podFailurePolicy's {', '.join(missing)} rule" if missing else "podFailurePolicy as sent"
            dropped = [where if key == "podFailurePolicy" else key for key in dropped]
        name = manifest["metadata"]["name"]
        deleted = self.delete_refused_job(name, "before any episode could be retried")
        retries = "podFailurePolicy" in manifest["spec"]
        needs, instead = (
            ("Indexed Jobs (completionMode Indexed, Kubernetes 1.24), which --tasks needs", "")
            if "completionMode" in dropped
            else (f"{POD_FAILURE_POLICY}, which --infra-retries needs", INFRA_RETRIES_INSTEAD)
            if retries
            else (f"{PER_INDEX_BACKOFF}, which --max-failed-episodes needs", PER_INDEX_BACKOFF_INSTEAD)
        )
        raise DemoError(
            f"the cluster does not support {needs}: the created Job {self.namespace}/{name} lacks "
            f"spec.{', spec.'.join(dropped)}; {deleted}{instead}",
            EXIT_CLUSTER,
        )

    def refuse_changed_job(self, pod_spec: KubeObject, job: KubeObject) -> None:
        """What the API server stored, read back from the create's answer: a Job another
        controller runs (spec.managedBy: MultiKueue), or whose pod template a mutating webhook
        changed (a sidecar, another image, command or security context), is not what the run
        measures (JobRefused)."""
        where = f"{self.namespace}/{job['metadata']['name']}"
        manager = foreign_manager(job)
        if manager is not None:
            raise JobRefused(
                f"Job {where} is managed by {manager} (spec.managedBy, set by MultiKueue or a webhook), not by the "
                "job controller, so its pods would run elsewhere and unmeasured; run it in a namespace the queue "
                "does not manage"
            )
        changes = template_changes(pod_spec, dig(job, "spec", "template", "spec") or {})
        if changes:
            raise JobRefused(f"the cluster changed what Job {where} runs (a mutating webhook): {'; '.join(changes)}")

    def delete_stopped_job(self, name: str, reason: str) -> None:
        """A round stopped early: delete its Job, the run's own (created by this run, its UID in the
        receipt, in the run's namespace), foreground, so the job controller's pods go first and no
        pod is created any more; not waited for (--cleanup, or `cleanup`, waits for the namespace).
        A failed delete leaves the stopped episodes running: the run says so and goes on."""
        try:
            self.kubectl.run(["delete", "job", name, "--cascade=foreground", "--wait=false"], namespace=self.namespace)
            say_stderr(f"stopped early ({reason}): Job {self.namespace}/{name} deleted with its pods")
        except DemoError as error:
            say_stderr(
                f"warning: stopped early ({reason}), but deleting Job {self.namespace}/{name} failed ({error}); its "
                "remaining episodes may still run: run cleanup"
            )

    def delete_refused_job(self, name: str, before: str = "before its episodes could be measured") -> str:
        """Delete a Job the run created and will not wait for (it is the run's own: its UID is in the
        receipt); what happened, for the message."""
        try:
            self.kubectl.run(["delete", "job", name, "--cascade=foreground", "--wait=false"], namespace=self.namespace)
            return f"it was deleted at once, {before}"
        except DemoError as error:
            return f"deleting the Job failed ({error}); run cleanup now"

    def save_after_interrupt(self, in_flight: Optional[InFlight]) -> None:
        """Save what can be read within a few seconds of what was in flight (the batch's
        in_flight when it was interrupted): the Job, pods, events and logs."""
        kubectl, namespace = self.kubectl, self.namespace
        if not self.namespace_created or in_flight is None:  # nothing created, or all saved already
            return
        round_dir, job = in_flight
        quick = kubectl.timing.interrupt_save_timeout
        try:
            items = kubectl.get_list("pods,events", namespace=namespace, retries=(), timeout=quick)
            pods, events = split_pods_and_events(items, job)
            write_events(round_dir, events, self.log_budgets)
            if job is None:
                return
            live = kubectl.get("job", job["metadata"]["name"], namespace, retries=(), timeout=quick)
            if live is not None:
                write_job(round_dir, live)
            write_pods(round_dir, pods, self.log_budgets)
            names = [pod["metadata"]["name"] for pod in pods]
            logs_by_selector(kubectl, namespace, pod_selector(job), names, round_dir, quick, self.log_budgets)
        except DemoError as error:
            say_stderr(f"warning: could not save every diagnostic after the interruption: {error}")


# Flow: cleanup ################################################################
# Delete exactly what a run created, after the ownership proof. Uses everything above but the
# run's flow.


def _wait_until_absent(
    kubectl: Kubectl, kind: str, name: str, namespace: Optional[str], seconds: float, uid: Optional[str] = None
) -> Optional[KubeObject]:
    """None once the object is gone, else its last state when the wait ran out.

    Polls at 0.25 s, doubling up to 2 s: most deletions finish within a second, and a long one
    costs no more than one kubectl call every 2 s. Once the first poll shows it still there, a
    watch of its name (one process) ends the wait at its DELETED event (of `uid`, when known),
    so the end is seen when it comes, not at the next poll: a trainer's step that cleans up waits
    for the deletion, not for the schedule. The polls stay the proof that needs no watch: an
    object gone before the watch's first listing shows no event, and a watch that is denied
    (list and watch namespaces are cluster-wide rights) or ends leaves the polls alone."""
    deadline = time.monotonic() + seconds
    interval = kubectl.timing.cleanup_first_poll
    plural = {"job": "jobs", "namespace": "namespaces"}[kind]
    events: queue.Queue[Any] = queue.Queue()
    stream: Optional[WatchStream] = None
    watching = False
    try:
        while True:
            live = kubectl.get(kind, name, namespace)
            if live is None:
                return None
            if time.monotonic() >= deadline:
                return live
            if stream is None:
                by_name = [plural, "--field-selector", f"metadata.name={name}"]
                stream = kubectl.watch(kind, by_name, namespace or "", events, max(1.0, deadline - time.monotonic()))
                watching = True
            pause = min(interval, max(0.0, deadline - time.monotonic()))
            if watching:
                pause_ends = time.monotonic() + pause
                while watching:
                    try:
                        event = events.get(timeout=max(0.0, pause_ends - time.monotonic()))[3]
                    except queue.Empty:
                        break
                    if event is None:  # the watch ended (denied, or its request's time): the polls go on
                        watching = False
                        time.sleep(max(0.0, pause_ends - time.monotonic()))
                    elif event.get("type") == "DELETED" and uid in (None, dig(event, "object", "metadata", "uid")):
                        return None
            else:
                time.sleep(pause)
            interval = min(interval * 2, kubectl.timing.cleanup_max_poll)
    finally:
        if stream is not None:
            stream.end()


def job_pod_count(job: Optional[KubeObject]) -> int:
    """How many pods a Job may have: its completions, or the pods its status counts if more."""
    spec, status = ((job or {}).get(key) or {} for key in ("spec", "status"))

    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    return max(count(spec.get("completions")), sum(count(status.get(key)) for key in ("active", "succeeded", "failed")))


def cleanup_wait_seconds(base: float, pods: int) -> float:
    """How long cleanup waits for a deletion: `base`, plus the garbage collector's time for `pods`."""
    return base + pods / GC_PODS_PER_SECOND


def _stuck_namespace_detail(namespace: KubeObject) -> str:
    finalizers = {
        *(namespace.get("spec", {}).get("finalizers") or []),
        *(namespace.get("metadata", {}).get("finalizers") or []),
    }
    messages = [
        f"{c.get('type')}: {c.get('message')}"
        for c in namespace.get("status", {}).get("conditions", []) or []
        if c.get("status") == "True" and c.get("message")
    ]
    return ", ".join([f"finalizers {sorted(finalizers) or 'none'}", *(["; ".join(messages)] if messages else [])])


def _stuck_on_lost_nodes(kubectl: Kubectl, job: KubeObject, namespace: str) -> str:
    """Why a Job's deletion waits, when its pods are stuck Terminating on nodes that no longer
    answer (best effort: "" when the pods or nodes cannot be read, or none is so): no kubelet
    there confirms their end, so only PodGC removes them, once the Node is deleted or tainted
    out-of-service (pkg/controller/podgc/gc_controller.go gcOrphaned, gcTerminating)."""
    try:
        pods = kubectl.get_list("pods", namespace, ["-l", pod_selector(job)])
        stuck = [pod for pod in pods if dig(pod, "metadata", "deletionTimestamp")]
        nodes = sorted({str(dig(pod, "spec", "nodeName")) for pod in stuck if dig(pod, "spec", "nodeName")})
        states = {node: kubectl.get("node", node) for node in nodes}
    except (KubectlFailure, KubectlTimeout, ValueError):
        return ""
    lost = {}
    for node, live in states.items():
        ready = [c for c in dig(live or {}, "status", "conditions") or [] if c.get("type") == "Ready"]
        if live is not None and not (ready and ready[0].get("status") == "True"):
            lost[node] = node_state(node, live)
    names = {
        str(pod["metadata"]["name"]): str(pod["spec"]["nodeName"])
        for pod in stuck
        if dig(pod, "spec", "nodeName") in lost
    }
    if not names:
        return ""
    return (
        f": {lost_node_note(names, lost).replace(' still Running there', ' stuck Terminating there')}, where no "
        f"kubelet answers to confirm its end; it goes only once the Node is deleted or tainted "
        f"{OUT_OF_SERVICE_TAINT} (PodGC)"
    )


def cleanup_run(
    kubectl: Kubectl,
    receipt: Receipt,
    output: Path,
    say: Callable[[str], None],
    wait_seconds: float = CLEANUP_WAIT_SECONDS,
) -> None:
    """Delete exactly what the run created, after proving it is the run's; never touch finalizers."""
    namespace = receipt["namespace"]
    names_problem = receipt_names_problem(receipt)
    if names_problem:
        raise DemoError(
            f"refusing to clean up: {names_problem}; nothing was deleted; inspect receipt.json", EXIT_REFUSED
        )
    current_server = kubectl.cluster_identity()[1] if receipt["server"] else None
    live_namespace = kubectl.get("namespace", namespace)
    if live_namespace is not None:
        required_uid(live_namespace, f"namespace {namespace}")
    jobs = receipt_jobs(receipt, _uid_from_job_json(output))
    live_jobs = {job["name"]: kubectl.get("job", job["name"], namespace) for job in jobs} if live_namespace else {}
    queue = receipt.get("local_queue")
    live_queue = kubectl.get(LOCALQUEUE_RESOURCE, queue["name"], namespace) if queue and live_namespace else None
    plan = plan_cleanup(receipt, jobs, kubectl.context, current_server, live_namespace, live_jobs, live_queue)
    if plan.refusal:
        raise DemoError(plan.refusal, EXIT_REFUSED)
    if plan.namespace_absent:
        say(f"namespace {namespace} is already absent; nothing to delete")
        return
    if plan.adopted_namespace_uid:
        say(f"the receipt has no namespace UID; namespace {namespace} carries this run's labels, so it is this run's")
        receipt["uid"] = plan.adopted_namespace_uid
        write_receipt(output, receipt)
    pods = {name: job_pod_count(live_jobs.get(name)) for name in plan.jobs}
    for name in plan.jobs:
        try:
            kubectl.run(["delete", "job", name, "--cascade=foreground", "--wait=false"], namespace=namespace)
        except KubectlFailure as failure:  # gone since it was read: a round stopped early deletes its own Job
            if not failure.not_found:
                raise
            say(f"Job {namespace}/{name} is already gone")
            continue
        job_wait = cleanup_wait_seconds(wait_seconds, pods[name])
        job_uid = dig(live_jobs.get(name) or {}, "metadata", "uid")
        remaining = _wait_until_absent(kubectl, "job", name, namespace, job_wait, job_uid)
        if remaining is not None:
            stuck = _stuck_on_lost_nodes(kubectl, remaining, namespace)
            raise DemoError(
                f"Job {namespace}/{name} and its pods are still terminating after "
                f"{job_wait:g} s{stuck}; inspect `kubectl -n {namespace} get job,pods` and run cleanup again",
                EXIT_TIMEOUT,
            )
        say(f"deleted Job {namespace}/{name} and its pods")
    if plan.local_queue is not None:  # its Jobs are gone: Kueue holds no workload of it any more
        kubectl.run(["delete", LOCALQUEUE_RESOURCE, plan.local_queue, "--wait=false"], namespace=namespace)
        say(f"deleted LocalQueue {namespace}/{plan.local_queue}")
    kubectl.run(["delete", "namespace", namespace, "--wait=false"])
    namespace_wait = cleanup_wait_seconds(wait_seconds, sum(pods.values()))
    remaining = _wait_until_absent(kubectl, "namespace", namespace, None, namespace_wait, receipt.get("uid"))
    if remaining is not None:
        raise DemoError(
            f"namespace {namespace} is still Terminating after {namespace_wait:g} s "
            f"({_stuck_namespace_detail(remaining)}); inspect `kubectl get namespace {namespace} -o yaml` "
            "and what remains in it; finalizers are never removed by this tool",
            EXIT_TIMEOUT,
        )
    say(f"deleted namespace {namespace}")


# Flow: the guide's experiment (reproduce) #####################################
# Each group's settings and the experiment's reports. Uses everything above but the run's flow.


def reproduce_group_dirs(output: Path) -> List[Path]:
    """The group directories of a `reproduce` output that hold a receipt, in the guide's order."""
    return [output / name for name in REPRODUCE_GROUPS if (output / name / RUN_FILES.receipt).is_file()]


def reproduce_column_name(group: str, count: int, lang: str) -> str:
    names = {
        "en": {
            "parallel": f"{count} in parallel",
            "sequential": "one at a time",
            "warm": f"{count} in parallel after per-node warm-up",
        },
        "zh": {"parallel": f"{count} 路并行", "sequential": "单并发", "warm": f"逐节点预热后 {count} 路并行"},
    }
    return names[lang][group]


def reproduce_group_argv(args: argparse.Namespace, context: str, group: str, pinned: Optional[str]) -> List[str]:
    """One group's `run` of the experiment, in DIR/<group>, as report.json records it and as the
    group runs it (the command line's run_settings parses it): the first resolves the image digest,
    the others run that digest, one at a time, or after a warm-up in K rounds."""
    argv = [
        "run",
        "--output", str(Path(args.output) / group),
        "--count", str(args.count),
        "--image", args.image,
        "--runtime", args.runtime,
        "--timeout", str(args.timeout),
        "--kubectl-timeout", str(args.kubectl_timeout),
        "--context", context,
        "--cleanup", args.cleanup,
    ]  # fmt: skip
    for flag, value in (("--kubeconfig", args.kubeconfig), ("--kubectl", args.kubectl)):
        if value:
            argv += [flag, value]
    for flag, value, default in (
        ("--ephemeral-storage", args.ephemeral_storage, DEFAULT_EPHEMERAL_STORAGE),
        ("--workspace-size", args.workspace_size, DEFAULT_WORKSPACE_SIZE),
    ):
        if value != default:  # given: the groups ran with it
            argv += [flag, value]
    argv += [
        flag for flag in ("--quiet", "--allow-large", "--kubelet-metrics") if vars(args)[flag[2:].replace("-", "_")]
    ]
    for metric, limit in sorted(dict(args.threshold or []).items()):
        argv += ["--threshold", f"{metric}={limit!r}"]
    if group == "parallel":
        argv.append("--pin-image")
    elif group == "sequential":
        argv += ["--parallelism", "1", f"--pin-image={pinned}"]
    else:
        argv += ["--warmup", "--rounds", str(args.rounds), f"--pin-image={pinned}"]
    return argv


def reproduce_junit(
    output: Path, report: ReproduceReport, failure: Optional[DemoError], thresholds: Dict[str, float]
) -> str:
    """The experiment as one JUnit file: every group's suites (one per round, and a case per
    --threshold, as `run --junit` writes them), each test case's classname naming its group, so
    names stay unique."""
    suites: List[JUnitSuite] = []
    for entry in report["groups"]:
        group_dir = output / entry["directory"]
        results = saved_results(group_dir)
        rounds = report["rounds"] if entry["name"] == "warm" else 1
        started = rounds_on_disk(group_dir, rounds) if results is None else []
        error = None
        if entry.get("exit_code") not in (EXIT_OK, None) or (entry.get("exit_code") is None and failure):
            error = (int(entry.get("exit_code") or EXIT_INTERRUPTED), str(entry.get("error") or failure), None)
        for suite in junit_suites(results, started, thresholds, error):
            for case in suite["cases"]:
                case["classname"] = f"{JUNIT_SUITE_NAME}.{entry['name']}.{case['classname'].split('.', 1)[-1]}"
            suites.append(suite)
    if not suites and failure is not None:
        suites = junit_suites(None, [], {}, (failure.exit_code, str(failure), None))
    return render_junit_xml(
        suites, {"context": str(report.get("context")), "image_pinned": str(report.get("image_pinned"))}
    )


def reproduce_metrics(
    output: Path, report: ReproduceReport, settings_of: Callable[[Sequence[str]], RunSettings], finished_at: float
) -> str:
    """The experiment as one --metrics-file: each group's samples as `run --metrics-file` writes
    them, labelled with its group (a group still running when the experiment stopped: exit 130);
    `settings_of` reads a group's settings from the command line report.json records."""
    runs: List[MetricRun] = []
    for entry in report["groups"]:
        labels = metrics_labels(settings_of(entry["argv"]))
        code = entry.get("exit_code")
        results = saved_results(output / entry["directory"])
        runs.append(({**labels, "group": entry["name"]}, results, EXIT_INTERRUPTED if code is None else code))
    return render_metrics_of_runs(runs, finished_at)


def reproduce_verdict(output: Path, report: ReproduceReport) -> str:
    """One line: the groups that finished, the episodes that validated, what failed, where the report is."""
    finished = [entry for entry in report["groups"] if entry.get("exit_code") in (EXIT_OK, EXIT_THRESHOLD)]
    figures = [results for results in (saved_results(output / entry["directory"]) for entry in finished) if results]
    valid = sum(int(results.get("successful_episodes") or 0) for results in figures)
    episodes = sum(int(results.get("episodes") or 0) for results in figures)
    text = f"verdict: {len(finished)}/{len(REPRODUCE_GROUPS)} groups finished, {valid}/{episodes} episodes valid"
    breached = [entry["name"] for entry in finished if entry["exit_code"] == EXIT_THRESHOLD]
    if breached:
        text += f"; latency budget breached in {', '.join(breached)} (exit {EXIT_THRESHOLD})"
    if not report["complete"] and report["groups"]:
        last = report["groups"][-1]
        how = "interrupted" if last.get("exit_code") is None else f"exit {last['exit_code']}"
        text += f"; stopped at group {last['name']} ({how})"
    files = [output / "report.md"] if (output / "report.md").is_file() else []
    return text + f"; report {' and '.join(str(path) for path in [*files, output / 'report.json'])}"


def write_reproduce_report(output: Path, report: ReproduceReport, lang: str, reference: bool) -> Optional[str]:
    """report.json always; with every group's results, report.md and the table (returned)."""
    finished = [
        (reproduce_column_name(g["name"], report["count"], lang), saved_results(output / g["name"]))
        for g in report["groups"]
        if g["exit_code"] in (EXIT_OK, EXIT_THRESHOLD)  # validated, over budget or not
    ]
    columns = [(name, results) for name, results in finished if results is not None]
    table = guide_table(columns, lang, reference) if columns else None
    report["table"] = table
    write_json(output / "report.json", report)
    if table is None:
        return None
    text = render_guide_table(table, "text")
    words = _WORDS[lang]
    intro = words["report_intro"].format(
        image=f"`{markdown_code(report['image'])}`",
        pinned=f"`{markdown_code(report['image_pinned'] or '-')}`",
        context=f"`{markdown_code(report['context'])}`",
        count=report["count"],
    )
    lines = [words["report_title"], "", intro, "", words["report_header"], "| --- | --- | --- | --- |"]
    for group in report["groups"]:
        lines.append(
            f"| {group['name']} | {markdown_code(group['directory'])} | {group['exit_code']} | "
            f"{markdown_code(group.get('namespace') or '-')} |"
        )
    lines += ["", render_guide_table(table, "markdown")]
    if not report["complete"]:
        lines.append(words["report_early"] + "\n")
    write_atomic(output / "report.md", "\n".join(lines))
    return text


def markdown_code(text: Any) -> str:
    """Text for a Markdown table cell: printable, without pipes or backticks."""
    return printable(str(text)).replace("|", "\\|").replace("`", "'")


def cleanup_reproduce(args: argparse.Namespace, groups: List[Path]) -> int:
    """`cleanup --output DIR` of a reproduce directory: every group with a receipt, in order;
    the exit code is the worst of them."""
    worst = EXIT_OK
    if not groups:
        print(f"no group of the experiment in {args.output} reached the cluster; nothing to delete")
    for group_dir in groups:
        try:
            receipt = read_receipt(group_dir)
            cleanup_run(make_kubectl(args, receipt), receipt, group_dir, print, wait_seconds=args.timeout)
        except DemoError as error:
            print(f"rl-batch-demo: error: {group_dir.name}: {printable(str(error))}", file=sys.stderr)
            worst = max(worst, error.exit_code)
    if worst != EXIT_OK:
        raise DemoError(f"cleanup of {args.output} did not finish for every group (see above)", worst)
    return EXIT_OK
