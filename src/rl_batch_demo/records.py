"""Typed records: the settings, rows and files that the layers pass between them."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, TypedDict

from .constants import (
    BUILTIN_WORKER,
    CLIENT_GRACE_SECONDS,
    DEFAULT_EPHEMERAL_STORAGE,
    DEFAULT_MAX_ARTIFACT_BYTES,
    DEFAULT_WORKSPACE_SIZE,
    EPISODE_DEADLINE_MARGIN_SECONDS,
    KEPT_EVENT_BYTES_LIMIT,
    LOG_DIR_BUDGET,
    LOG_FILE_LIMIT,
)

# Typed records ################################################################
# The records the layers hand each other: timings, a run's settings, the receipt, what a round
# observed and collected, and the schema of results.json and the files beside it. Uses the
# constants and the errors.

# Kubernetes objects and what a pod or a user hands in stay loose JSON, each under its own name.
KubeObject = Dict[str, Any]  # an object as kubectl prints it, or a manifest: a Job, a pod, an event, a node
JsonObject = Dict[str, Any]  # JSON whose keys are not this tool's: a task, a worker's event, its info


@dataclasses.dataclass(frozen=True)
class Timing:
    """Every wait of the tool in one place, so that tests shrink them all and never sleep."""

    retry_delays: Tuple[float, ...] = (0.5, 1.0, 2.0)  # backoff for reads that are safe to repeat
    retry_budget_seconds: float = 20.0  # no retry starts later than this after the first attempt
    watch_tick_seconds: float = 0.5  # longest wait for a watch event before the loop looks around
    poll_interval: float = 1.0  # polling the Job once its watch has ended early
    blocked_check_seconds: float = 20.0  # with no pod by then, look for a FailedCreate event
    final_pods_grace_seconds: float = 0.25  # after Complete, for the pod watch to show every pod final
    # after the decision, for the logs followed while the pods ran to end by themselves (a stopped
    # pod's stream ends with its container; the kubelet notices an exited one within 5 s)
    follow_grace_seconds: float = 6.0
    serviceaccount_wait_seconds: float = 10.0  # after the namespace's create, for its default ServiceAccount
    cleanup_first_poll: float = 0.25  # deletion polls start here and double ...
    cleanup_max_poll: float = 2.0  # ... up to this
    interrupt_save_timeout: float = 5.0  # each kubectl call that saves diagnostics after Ctrl-C
    progress_log_interval: float = 1.0  # at most one progress line a second in a log


TIMING = Timing()  # flows read it when they start; tests replace it


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What a `run` was asked to do, read from the command line once, before any work starts."""

    output: Path
    count: int
    parallelism: int
    rounds: int
    image: str
    runtime: Optional[str]  # None: the cluster's default runtime, no RuntimeClass
    deadline_seconds: int  # the Job's activeDeadlineSeconds
    cleanup_policy: str
    thresholds: Dict[str, float]
    quiet: bool
    json_summary: bool
    kubectl_timeout: float
    worker_source: str  # what every episode runs: the built-in worker, or --worker's text
    # the launcher that runs it in the pod and sends what it leaves under RL_DEMO_ARTIFACTS
    # (sandbox/launcher.py; "": the worker is the pod's command itself)
    launcher_source: str = ""
    worker_file: Optional[str] = None  # --worker's file name (never its path); None: the built-in worker
    tasks: Optional[Tuple[JsonObject, ...]] = None  # --tasks: one per episode, in index order
    max_failed_episodes: int = 0  # --max-failed-episodes: infrastructure failures set aside, at most this many
    failed_episode_reward: Optional[float] = None  # --failed-episode-reward R: an episode's own failure scores R
    episode_timeout: Optional[int] = None  # --episode-timeout: each pod's activeDeadlineSeconds; None: the default
    stop_after: Optional[int] = None  # --stop-after K: a round stops once K episodes have a standing reward
    tags: JsonObject = dataclasses.field(default_factory=dict)  # --tags: carried as given by rows, results, JUnit
    private_fields: Tuple[str, ...] = ()  # --private-fields: task fields kept out of the ConfigMap, for the grader
    infra_retries: int = 0  # --infra-retries: attempts of an episode lost to the infrastructure, beyond the first
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES  # --max-artifact-bytes: per episode
    ephemeral_storage: str = DEFAULT_EPHEMERAL_STORAGE  # --ephemeral-storage: the container's request and limit
    workspace_size: str = DEFAULT_WORKSPACE_SIZE  # --workspace-size: /workspace's sizeLimit
    kubelet_metrics: bool = False  # read the kubelet's runtime histograms (needs get nodes/proxy)
    queue: Optional[str] = None  # --queue: the Kueue ClusterQueue the run's LocalQueue points at
    parallelism_auto: bool = False  # --parallelism auto: the preflight sets parallelism from the nodes' room
    warmup: bool = False  # --warmup: one episode on each eligible node before the measured rounds
    pin_image: Optional[str] = None  # --pin-image: None off, "" resolve the digest, else repo@sha256:...
    dry_run: bool = False  # write the manifests, contact no cluster
    junit: Optional[str] = None  # --junit FILE
    metrics_file: Optional[str] = None  # --metrics-file FILE
    # The Python API's seams (run_batch, stream_batch); the command line leaves them unset.
    # on_reward (docs/outputs.md, "rewards.jsonl"): told of every line of rewards.jsonl, retractions
    # too, once it is on disk, in the thread that waits for the Job.
    on_reward: Optional[Callable[[RewardLine], None]] = dataclasses.field(default=None, compare=False, repr=False)
    # stop: once set (by another thread), the run stops as on Ctrl-C: diagnostics saved, --cleanup kept.
    stop: Optional[threading.Event] = dataclasses.field(default=None, compare=False, repr=False)
    # finish_early: once set (stream_batch's loop was left), the round stops as --stop-after stops it:
    # the episodes that ended are validated and kept, the rest stopped, no further round started.
    finish_early: Optional[threading.Event] = dataclasses.field(default=None, compare=False, repr=False)
    # grade (grade= in Python, --grader FILE.py): each validated episode's reward, from its whole task (private
    # fields too) and its row, on the client as the row is known; the pod's own reward is kept as pod_reward.
    grade: Optional[Callable[[JsonObject, RewardLine], Any]] = dataclasses.field(
        default=None, compare=False, repr=False
    )
    grader_name: Optional[str] = None  # --grader's file name, or the callable's name; None: the pod's reward stands

    @property
    def builtin_worker(self) -> bool:
        """The built-in task's own rules (reward 1, baseline fails, tests pass) apply only to it."""
        return self.worker_file is None

    @property
    def worker_name(self) -> str:
        """results.json's `worker`: the --worker file's name, else "built-in"."""
        return self.worker_file or BUILTIN_WORKER

    @property
    def indexed(self) -> bool:
        """An Indexed Job: each episode has a task index, failed episodes may be tolerated, or an
        episode may be retried (its attempts share its index)."""
        return (
            self.tasks is not None
            or self.max_failed_episodes > 0
            or self.infra_retries > 0
            or self.failed_episode_reward is not None
            or self.stop_after is not None  # a stopped round's episodes are those that ended: by their index
        )

    @property
    def given_image(self) -> str:
        """The image before any digest is resolved: --pin-image's digest when given, else --image."""
        return self.pin_image or self.image

    @property
    def public_tasks(self) -> Optional[Tuple[JsonObject, ...]]:
        """The tasks as the ConfigMap holds them, every episode can read: without --private-fields."""
        if self.tasks is None or not self.private_fields:
            return self.tasks
        return tuple({k: v for k, v in task.items() if k not in self.private_fields} for task in self.tasks)

    @property
    def episode_deadline_seconds(self) -> int:
        """Each episode pod's own activeDeadlineSeconds: --episode-timeout, else a little under the
        Job's (a tenth less, at most 30 s less), so that a hung episode fails alone, as its own
        failure, before the Job's deadline would stop every episode."""
        if self.episode_timeout is not None:
            return self.episode_timeout
        return max(1, self.deadline_seconds - min(EPISODE_DEADLINE_MARGIN_SECONDS, max(1, self.deadline_seconds // 10)))

    @property
    def client_wait_seconds(self) -> int:
        return self.deadline_seconds + CLIENT_GRACE_SECONDS

    def round_dir(self, round_number: int) -> Path:
        return self.output if self.rounds == 1 else self.output / f"round-{round_number}"


class ReceiptJob(TypedDict):
    name: str
    uid: Optional[str]  # None until the create answered


class ReceiptLocalQueue(TypedDict):  # --queue: the run's Kueue LocalQueue in its namespace
    name: str
    cluster_queue: str  # the ClusterQueue it points at
    uid: Optional[str]  # None until the create answered


class _Receipt(TypedDict):
    context: str
    server: Optional[str]
    namespace: str
    run_id: str
    kubeconfig: Optional[str]
    kubectl: Optional[str]
    created_at: Optional[float]
    tool_version: Optional[str]
    jobs: List[ReceiptJob]


class Receipt(_Receipt, total=False):
    """receipt.json, and the run's one record of it: everything cleanup needs to reach the same
    cluster and prove ownership. Written before the first mutation and rewritten as soon as each
    UID is known; write_receipt and read_receipt (persistence) are its one writer and reader, and
    the reader checks it against this record as results.json is checked (schema_problem).
    Receipts of the guide's script (context, namespace, uid, run_id, job_uid) load too."""

    uid: str  # the namespace's, once it exists (the guide's key)
    local_queue: ReceiptLocalQueue  # --queue: the run's LocalQueue, its ClusterQueue and (once created) UID
    job_uid: str  # the guide's key: the one Job's UID


@dataclasses.dataclass
class RoundObservation:
    """What the client saw while it waited for one Job (client clock)."""

    job: KubeObject  # the Job as last seen
    condition: Optional[str]  # "Complete" or "Failed"; None when the wait ended without one
    condition_seen_wall: Optional[float] = None  # when the condition reached the client
    condition_seen_monotonic: Optional[float] = None
    pod_sightings: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)  # see record_pod_sighting
    blocked: str = ""  # why the Job cannot create pods, e.g. a Pod Security rejection
    last_pods: Dict[str, KubeObject] = dataclasses.field(default_factory=dict)  # each pod as last watched
    pod_deleted: bool = False  # the pod watch reported a deletion
    queued: bool = False  # the Job was created suspended (a queue such as Kueue admits it later)
    admitted_seen_monotonic: Optional[float] = None  # when the client saw a queued Job resumed
    # pods still Running on a node that stopped answering (unanswered_node): pod -> node, and each
    # such node's state as read when it was first seen so (node_state)
    lost_pods: Dict[str, str] = dataclasses.field(default_factory=dict)
    node_states: Dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RoundCollected:
    """Everything read about one finished round: the input of `analyse_round`."""

    round_number: int
    job_name: str
    job: KubeObject  # as created (its UID and creation time)
    observation: RoundObservation
    pods: List[KubeObject]  # the Job's own pods, by its UID label
    logs: Dict[str, Optional[PodLog]]  # None: unreadable (see log_errors)
    log_errors: Dict[str, str]
    count: int  # episodes requested
    round_dir: Path
    submitted_wall: float  # client clock just before the create
    submitted_monotonic: float
    indexed: bool = False  # an Indexed Job: each pod's index is its completion-index annotation
    task_ids: Optional[List[Any]] = None  # --tasks: each index's task_id
    builtin_worker: bool = True  # the built-in task's rules apply
    max_failed_episodes: int = 0
    failed_episode_reward: Optional[float] = None  # --failed-episode-reward: episode failures score it
    stopped: bool = False  # stopped early (JOB_STOPPED): `pods` are the episodes that had ended ...
    stopped_pods: List[KubeObject] = dataclasses.field(default_factory=list)  # ... these the rest, stopped
    stopped_by: str = ""  # why: "--stop-after K", or "stream_batch's loop was left"
    events: List[KubeObject] = dataclasses.field(default_factory=list)  # the namespace's, same listing
    infra_retries: int = 0  # --infra-retries K: an index may have up to K pods lost before its last
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES
    # The failures rewards.jsonl already holds, by pod (RoundRewards: provisional_episode's verdict
    # as the pod watch saw it end): final, so the analysis fails these episodes with the same cause.
    provisional_failures: Dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class PodLog:
    """What one pod printed, as far as the tool keeps it in memory: the first line of each of
    KEPT_EVENTS, as the bytes it printed (parsed again only when the episode is validated, so a
    line that swells when parsed costs its bytes, not its objects), and how many events of each
    kind it printed; not its text (that goes to <pod>.log on disk, up to LOG_FILE_LIMIT)."""

    kept: Dict[str, bytes] = dataclasses.field(default_factory=dict)  # "ready", "reward": its first line
    counts: Dict[str, int] = dataclasses.field(default_factory=dict)  # events by name: KEPT_EVENTS and "other"
    error: str = ""  # the first bad event line, if any
    lines: int = 0
    long_lines: int = 0  # lines over EVENT_LINE_LIMIT, ignored as noise
    saved_bytes: int = 0
    dropped_bytes: int = 0  # beyond LOG_FILE_LIMIT or the run's LOG_DIR_BUDGET: counted, not saved
    # Its artifact frames (see ArtifactSink): each artifact saved whole, checked against its frames'
    # sha256, as {name, bytes, sha256}; the first frame that broke a rule; whether frames were missing.
    artifacts: Dict[str, ArtifactEntry] = dataclasses.field(default_factory=dict)
    artifact_error: str = ""
    artifact_frames_missing: bool = False


@dataclasses.dataclass(frozen=True)
class ArtifactFrame:
    """One line of a pod's artifact frames, parsed (parse_artifact_frame): the `seq`-th of the
    `total` frames of the artifact `name`, whose whole bytes have `sha256`; `data`, its piece."""

    name: str
    seq: int
    total: int
    sha256: str
    data: bytes


@dataclasses.dataclass(eq=False)
class LogBudgets:
    """The run's one ledger of what its pods may make it keep, shared by every thread that reads
    logs, with a disk side and a memory side.

    The disk side holds LOG_DIR_BUDGET for every byte the tool writes for pods: the <pod>.log
    text, the kept event lines and the notes saved past a cut, and the pod-made strings of
    pods.json and events.txt. Of it, `reserve` (as much as the memory side) is kept for what is
    always saved: each kept line was paid from `memory` when it was kept, so the reserve can
    always pay for writing it, and a marker or a closing note is paid from both sides at once
    (take_note); the rest, `disk`, is the text's, spent as it comes (take_disk). So the two never
    overdraw: what the run writes for pods is at most disk + reserve. The memory side holds
    KEPT_EVENT_BYTES_LIMIT for the kept event lines. Each pod's own limits, its <pod>.log's
    LOG_FILE_LIMIT and its episode's artifact allowance, are its account of this ledger
    (account(): a PodAccount), so every byte budget of a run is kept here."""

    disk: int = LOG_DIR_BUDGET - KEPT_EVENT_BYTES_LIMIT
    memory: int = KEPT_EVENT_BYTES_LIMIT
    reserve: int = -1  # -1: as much as `memory`
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    # A pod-made string of pods.json or events.txt, by what it is of, as granted once (granted_text):
    # a file written again spends nothing again.
    granted: Dict[Tuple[str, ...], str] = dataclasses.field(default_factory=dict)
    # Where the pods' artifact frames are saved (DIR/artifacts; None: frames are left in <pod>.log
    # as text), and each episode's budget for them (--max-artifact-bytes). Their bytes take none
    # of `disk`: each episode has its own allowance, so no pod's output costs another's artifacts,
    # and all of them together are at most the episodes times that allowance.
    artifacts: Optional[Path] = None
    artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES
    spends_from: Optional[LogBudgets] = None  # a view (saving_artifacts_in): the run's budgets it spends

    def saving_artifacts_in(self, root: Path) -> LogBudgets:
        """These budgets, spent as before, with the artifacts saved under `root` instead (a
        warm-up's or the probe's: they are no episode of results.json, so not in DIR/artifacts)."""
        return LogBudgets(artifacts=root, artifact_bytes=self.artifact_bytes, spends_from=self.spends_from or self)

    def __post_init__(self) -> None:
        if self.reserve < 0:
            self.reserve = self.memory

    def take_reserved(self, wanted: int) -> None:
        """Disk for a kept line saved past a cut: its bytes were paid from `memory` when it was
        kept, so the reserve holds them (never below zero)."""
        if self.spends_from is not None:
            return self.spends_from.take_reserved(wanted)
        with self.lock:
            assert wanted <= self.reserve, "a kept line the memory side did not pay for"
            self.reserve -= wanted
        return None

    def take_note(self, wanted: int) -> bool:
        """All of `wanted` bytes for a line the tool adds (a marker, a closing note): from the
        text's disk while it lasts, else from both the memory side and the reserve; or none."""
        if self.spends_from is not None:
            return self.spends_from.take_note(wanted)
        with self.lock:
            if wanted <= self.disk:
                self.disk -= wanted
                return True
            if wanted > min(self.memory, self.reserve):
                return False
            self.memory -= wanted
            self.reserve -= wanted
            return True

    def granted_text(self, key: Tuple[str, ...], text: str, cut_note: str) -> str:
        """A pod-made string for pods.json or events.txt, as much of it as the text's disk grants
        (the first time; the same answer after), ending with `cut_note` when it was cut."""
        if self.spends_from is not None:
            return self.spends_from.granted_text(key, text, cut_note)
        import hashlib  # noqa: PLC0415 - only what writes pods.json or events.txt needs it

        key = (*key, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())  # the same text again
        with self.lock:
            if key in self.granted:
                return self.granted[key]
        data = text.encode("utf-8", "surrogatepass")
        granted = self.take_disk(len(data))
        if granted < len(data):
            room = max(0, granted - len(cut_note.encode()))
            text = data[:room].decode("utf-8", "ignore") + (cut_note if granted >= len(cut_note.encode()) else "")
        with self.lock:
            return self.granted.setdefault(key, text)

    def take_disk(self, wanted: int, whole: bool = False) -> int:
        """Up to `wanted` bytes of disk (all or none when `whole`): what is granted."""
        if self.spends_from is not None:
            return self.spends_from.take_disk(wanted, whole)
        with self.lock:
            granted = max(0, min(wanted, self.disk))
            granted = 0 if whole and granted < wanted else granted
            self.disk -= granted
            return granted

    def take_memory(self, wanted: int) -> bool:
        """All of `wanted` bytes of memory, or none."""
        if self.spends_from is not None:
            return self.spends_from.take_memory(wanted)
        with self.lock:
            if wanted > self.memory:
                return False
            self.memory -= wanted
            return True

    def account(self) -> PodAccount:
        """One pod's account of this ledger: what its <pod>.log and its artifacts may still take."""
        return PodAccount(self, LOG_FILE_LIMIT, self.artifact_bytes)


@dataclasses.dataclass(eq=False)
class PodAccount:
    """One pod's share of the run's ledger (LogBudgets.account), kept by the one thread that
    reads its log: its <pod>.log text up to LOG_FILE_LIMIT, each byte also from the ledger's disk
    side while that lasts; and its artifacts up to the episode's own allowance
    (--max-artifact-bytes), which takes nothing from the disk side."""

    ledger: LogBudgets
    text_room: int  # bytes its <pod>.log text may still take
    artifact_room: int  # bytes its artifacts (and their directories) may still take

    def take_text(self, wanted: int, whole: bool = False) -> Tuple[int, str]:
        """Up to `wanted` bytes of text (all or none when `whole`): what is granted, and when it is
        less, which limit held it back ("file": LOG_FILE_LIMIT, "run": the ledger's disk side)."""
        room = self.text_room
        granted = self.ledger.take_disk(min(room, wanted), whole=whole) if room >= (wanted if whole else 0) else 0
        self.text_room -= granted
        if granted == wanted:
            return granted, ""
        return granted, "file" if room < wanted and granted == (0 if whole else room) else "run"

    def take_artifact(self, wanted: int) -> bool:
        """All of `wanted` bytes of the episode's artifact allowance, or none."""
        if wanted > self.artifact_room:
            return False
        self.artifact_room -= wanted
        return True


# The schema of results.json (and rewards.jsonl, warmup.json, reproduce's report.json) as TypedDicts:
# plain dicts at run time, every key checked by mypy. The writer builds them, every reader reads
# them, a file read back is checked against them first (schema_problem), and the documents' field
# tables list exactly their keys (docs/development.md, "Field tables").
class _ImagePull(TypedDict):
    state: str  # "cached", "pulled" or "unknown"
    seconds: Optional[float]


class ImagePull(_ImagePull, total=False):
    seconds_including_waiting: Optional[float]  # only when pulled


class LostAttempt(TypedDict):  # an episode's pod lost to the infrastructure and replaced (--infra-retries)
    pod: str
    cause: str  # its DisruptionTarget condition's reason and message, or its eviction (infra_loss)
    created_at: float  # its creationTimestamp (API server, whole seconds)


class ArtifactEntry(TypedDict):  # a file an episode made, saved as DIR/artifacts/<pod>/<name>
    name: str  # its path relative to the worker's RL_DEMO_ARTIFACTS, "/"-separated
    bytes: int
    sha256: str  # of its bytes, hex


class PodArtifacts(TypedDict, total=False):  # absent from the results of versions before artifacts
    artifacts: List[ArtifactEntry]  # sorted by name; saved and checked against the reward event's manifest


class PodInfo(TypedDict, total=False):  # absent from the results of versions before issue 25
    info: JsonObject  # the reward event's other fields, as rewards.jsonl's line has them (bounded: INFO_LIMIT)
    pod_reward: float  # with a grader: the reward the pod reported; `reward` is then the grader's
    # None: a row of pods[] is a validated episode, as in its rewards.jsonl line; a failed one is
    # in failed_episodes[] with its FAILURE_EPISODE or FAILURE_INFRASTRUCTURE
    failure_kind: Optional[str]


class EpisodeFigures(TypedDict):  # a pod's own figures: each its end stamp less its start (FIGURE_STAMPS)
    pod_to_ready_seconds: float
    pod_to_scheduled_seconds: Optional[float]
    pod_to_container_started_seconds: Optional[float]
    python_import_seconds: Optional[float]
    import_to_ready_seconds: Optional[float]
    ready_to_reward_seconds: float
    reward_to_finished_seconds: Optional[float]
    pod_observed_to_ready_seconds: Optional[float]
    pod_to_process_start_seconds: Optional[float]
    pod_to_kernel_boot_seconds: Optional[float]
    kernel_boot_to_process_start_seconds: Optional[float]
    interpreter_start_seconds: Optional[float]


class PodRow(PodArtifacts, PodInfo, EpisodeFigures):  # one validated episode's figures: a row of results.json's `pods`
    pod: str
    node: Optional[str]
    image_id: Optional[str]
    reward: float  # as the worker printed it: the built-in task's integer 1 stays an integer
    batch_to_ready_seconds: float
    batch_to_reward_seconds: float
    overhead: Optional[KubeObject]
    created_at: float
    scheduled_at: Optional[float]
    container_started_at: Optional[float]
    ready_at: float
    reward_at: float
    finished_at: Optional[float]
    observed_first_seen_at: Optional[float]
    observed_running_at: Optional[float]
    observed_succeeded_at: Optional[float]
    batch_start: float  # the Job's creation: the origin of the batch_to_* figures
    round: int
    job: str
    index: int  # the completion index (Indexed Jobs), else the pod's place in creation order
    task_id: Any  # the task's "id", else the index
    scheduled_source: Optional[str]  # "event" (Scheduled, microseconds) or "condition" (whole seconds)
    process_started_at: Optional[float]  # /proc/self/stat starttime on the kernel's boot clock
    first_statement_at: Optional[float]  # the worker's first statement (node wall clock)
    kernel_booted_at: Optional[float]  # only for a sandbox kernel (kernel == "sandbox")
    kernel: Optional[str]  # "sandbox", "shared", or None when the sandbox did not say (or its clocks disagree)
    clock_note: Optional[str]  # why the /proc figures are unknown though the sandbox reported them (this tool's words)
    image_pull: ImagePull
    container_runtime: Optional[str]  # the CRI runtime's name in containerID: containerd, cri-o, ...
    log_notes: List[str]  # how its events were read, when not plainly (a message cut at the front, a rotated log)
    attempts: int  # pods that ran the episode: 1, plus one for each lost to the infrastructure (--infra-retries)
    lost_attempts: List[LostAttempt]  # the pods before its last, in creation order
    retry_seconds: float  # first attempt's pod created -> last attempt's pod created (0 with one attempt)


class EpisodeRow(PodRow, total=False):  # a row as analysed
    pass


class PhaseStats(TypedDict):
    samples: int
    p50: float
    p95: float
    max: float


class _FailedEpisode(TypedDict):  # set aside (--max-failed-episodes) or scored (--failed-episode-reward)
    pod: str
    index: Optional[int]
    task_id: Any
    round: int
    job: str
    cause: str
    attempts: int  # as in pods[]: its last pod's attempt
    lost_attempts: List[LostAttempt]


class FailedEpisode(_FailedEpisode, total=False):  # both absent from the results of versions before failure kinds
    failure_kind: str  # FAILURE_EPISODE or FAILURE_INFRASTRUCTURE (constants)
    reward: Optional[float]  # --failed-episode-reward's R for an episode failure it scored; None: set aside


class BatchFigures(TypedDict):  # the guide's whole-batch figures, of one round or of the whole run
    episodes: int
    successful_episodes: int
    reward_sum: float
    batch_to_all_ready_seconds: float
    batch_to_all_rewards_seconds: float
    batch_to_all_started_seconds: Optional[float]  # the cluster's: null when a container's startedAt is missing
    batch_to_all_finished_seconds: Optional[float]  # the cluster's: null when a container's finishedAt is missing
    pod_to_ready_p50_seconds: float
    pod_to_ready_p95_seconds: float
    pod_to_ready_max_seconds: float
    reward_mean: Optional[float]
    reward_min: Optional[float]
    reward_max: Optional[float]
    masked_episodes: int  # failed, set aside under --max-failed-episodes: no reward figure counts them
    lost_attempts: int  # the validated episodes' pods lost to the infrastructure and replaced (--infra-retries)
    retry_seconds_sum: float  # what retries added to the validated episodes: their retry_seconds summed
    retry_seconds_max: float  # and the longest


class JobTimes(TypedDict):  # a round's Job (a run's: the slowest, first and last round's)
    failed_episodes: List[FailedEpisode]
    client_job_complete_seconds: float
    client_submitted_at: float
    client_observed_complete_at: Optional[float]
    job_created_at: float
    job_admitted_at: Optional[float]  # its creation unless a queue held it suspended; None: the Job does not say
    admission_wait_seconds: Optional[float]  # job_admitted_at - job_created_at
    client_admission_wait_seconds: Optional[float]  # None unless the Job was created suspended
    job_complete_at: Optional[float]
    job_success_criteria_met_at: Optional[float]


class LogFigures(TypedDict):  # how the episodes' output was read (of one round, or of the whole run)
    pods_without_termination_message: int  # their logs alone carried their events
    log_bytes_not_saved: int  # read and scanned, not saved: past LOG_FILE_LIMIT or the run's LOG_DIR_BUDGET


class FirstReward(TypedDict, total=False):  # a measured round's (warm-up and probe Jobs write no rewards)
    client_first_reward_seconds: float  # absent from the results of versions before rewards.jsonl was streamed


class LostNodes(TypedDict, total=False):  # only when a node of the round's pods stopped answering
    lost_nodes: Dict[str, str]  # node -> its state as first read (node_state), for its pods stayed Running


class StoppedEpisode(TypedDict):  # an episode stopped by --stop-after (or a stream left early): in no figure
    pod: Optional[str]  # None: the Job had not created its pod yet (an Indexed Job's index never seen)
    ended: bool  # its pod had ended, after the first K (--stop-after K keeps exactly K): its reward not counted
    index: Optional[int]
    task_id: Any
    round: int
    job: str


class StoppedFigures(TypedDict, total=False):  # absent from the results of versions before --stop-after
    stopped_episodes: List[StoppedEpisode]  # the round's episodes it did not keep (StoppedEpisode): in no figure
    stopped_by: Optional[str]  # why the round (at the top level: the first round) stopped early; None: it did not


class ScoredFigures(TypedDict, total=False):  # absent from the results of versions before failure kinds
    scored_episodes: int  # failed by their own doing, scored as --failed-episode-reward R: the reward figures count R


class RoundResult(
    BatchFigures, ScoredFigures, StoppedFigures, JobTimes, FirstReward, LogFigures, LostNodes
):  # a row of round_results; a warm-up's or probe's Job too
    round: int
    job: str
    job_uid: str


class WarmupNode(TypedDict):
    job: str
    job_uid: str
    pod: str
    pod_to_ready_seconds: float
    image_id: Optional[str]
    image_pull: str  # the episode's image_pull state


class Warmup(TypedDict):  # results.json's `warmup`, also warmup/warmup.json
    nodes: List[str]
    per_node: Dict[str, WarmupNode]
    image: str
    pod_to_ready_max_seconds: float


class _PreparedImage(TypedDict):  # what --warmup and --pin-image settled before the measured rounds
    image_pinned: Optional[str]
    warmup: Optional[Warmup]


class PreparedImage(_PreparedImage, total=False):
    image_pinned_from: Dict[str, Optional[str]]  # --pin-image only: node -> the imageID read there


Bucket = List[Optional[float]]  # [lower, upper]; upper None for +Inf


class OperationFigures(TypedDict):
    count: int
    mean_seconds: Optional[float]
    p50_seconds: Optional[float]
    p95_seconds: Optional[float]
    p50_bucket: Optional[Bucket]
    p95_bucket: Optional[Bucket]


class Operations(TypedDict):  # the guide's runtime operations (KUBELET_OPERATIONS), pooled or on one node
    RunPodSandbox: Optional[OperationFigures]
    CreateContainer: Optional[OperationFigures]
    StartContainer: Optional[OperationFigures]
    PullImage: Optional[OperationFigures]


class NodeOperations(Operations):
    foreign_operations: int
    note: str


class SandboxCrosscheck(TypedDict):  # RunPodSandbox by the handler (HANDLER_SANDBOX_FAMILY), pooled
    handler_figures: Optional[OperationFigures]
    note: str  # "" unless it is implausibly small beside run_podsandbox's (kubelets before 1.36)


class RuntimeOperations(TypedDict):
    handler: str
    pooled: Operations
    nodes: Dict[str, NodeOperations]
    sandbox_crosscheck: SandboxCrosscheck


class KubeletFigures(TypedDict, total=False):
    runtime_operations: RuntimeOperations  # --kubelet-metrics only


class ImageCache(TypedDict):
    cached: int
    pulled: int
    unknown: int


class AutoParallelism(TypedDict, total=False):  # run --parallelism auto only
    parallelism_capacity: int  # episodes the eligible nodes could start at once when the run began


# results.json
class FailurePolicy(TypedDict, total=False):  # absent from the results of versions before failure kinds
    failed_episode_reward: Optional[float]  # --failed-episode-reward R, or None
    stop_after: Optional[int]  # --stop-after K, or None
    tags: JsonObject  # --tags, as given ({} without)
    grader: Optional[str]  # --grader's file name (grade= in Python: the callable's name); None: the pods' rewards
    private_fields: List[str]  # --private-fields: the task fields no episode could read


class Results(
    BatchFigures,
    ScoredFigures,
    StoppedFigures,
    FailurePolicy,
    JobTimes,
    FirstReward,
    LogFigures,
    PreparedImage,
    KubeletFigures,
    AutoParallelism,
):
    figure_sources: Dict[str, str]  # FIGURE_SOURCES: who measured each figure (client, cluster or pod)
    notes: List[str]  # what a reader must know to read the figures right (figure_notes), also in the summary
    max_failed_episodes: int
    infra_retries: int  # --infra-retries K
    worker: str
    tasks: Optional[int]
    context: str
    namespace: str
    run_id: str
    image: str
    runtime: Optional[str]
    parallelism: int
    rounds: int
    episodes_per_round: int
    cache_state: str
    image_cache: ImageCache
    phases: Dict[str, Optional[PhaseStats]]  # one per PHASES
    nodes: Dict[str, int]
    image_ids: List[str]
    container_runtimes: List[str]  # distinct, as the kubelet names them in containerID
    round_results: List[RoundResult]
    tool_version: str
    pods: List[PodRow]


class _RewardLine(TypedDict):  # rewards.jsonl: a failed episode has info None, its failure and failure_kind, and
    # reward None, or --failed-episode-reward's R for a failure of the episode's own doing
    round: int
    index: Optional[int]
    task_id: Any
    pod: str
    reward: Optional[float]
    info: Optional[JsonObject]
    failure: Optional[str]
    failure_kind: Optional[str]  # a failure's: FAILURE_EPISODE or FAILURE_INFRASTRUCTURE; None for a reward
    known_at: float  # client wall clock, epoch seconds: when the tool knew this verdict, just before writing it
    retracted: bool  # a later check rejected this pod's earlier reward line: `failure` says which
    attempts: int  # as in results.json's pods[]: 1, plus the episode's pods lost to the infrastructure before it
    lost_attempts: List[LostAttempt]
    artifacts: Optional[List[ArtifactEntry]]  # the reward event's manifest, sorted by name; None for a failure


class RewardLine(_RewardLine, total=False):  # absent from the lines of versions before issue 25
    tags: JsonObject  # --tags, as given ({} without): RewardsWriter sets it on every line
    pod_reward: float  # with a grader: the reward the pod reported; `reward` is then the grader's


class GuideRow(TypedDict):
    row: str
    cells: List[str]


class GuideReference(TypedDict):
    date: str
    conditions: List[str]


class _GuideTable(TypedDict):  # the guide's section 六 table (compare --format guide, report.json)
    lang: str
    header: List[str]
    rows: List[GuideRow]


class GuideTable(_GuideTable, total=False):
    reference: GuideReference  # --reference guide


class _ReproduceGroup(TypedDict):
    name: str
    directory: str
    argv: List[str]
    exit_code: Optional[int]  # None while it runs


class ReproduceGroup(_ReproduceGroup, total=False):
    error: str  # why its run failed
    namespace: Optional[str]  # from its receipt, once its run ended


class _ReproduceReport(TypedDict):  # reproduce's report.json
    context: str
    image: str
    image_pinned: Optional[str]
    count: int
    rounds: int
    groups: List[ReproduceGroup]
    complete: bool
    tool_version: str


class ReproduceReport(_ReproduceReport, total=False):
    table: Optional[GuideTable]  # once the experiment ended (None: no group finished)


class ComparisonRow(TypedDict):  # compare --format json's figures
    figure: str
    label: str
    values: List[Optional[float]]  # as each results.json holds it
    ratios: List[Optional[float]]
    texts: List[str]  # each value as the table shows it: as precise as its clocks
    clock: Optional[str]  # the clocks it comes from (clocks_text); None for a count or a kubelet mean
    resolution_seconds: Optional[float]  # the coarser clock's resolution; None for a count or a kubelet mean


class StartedRound(TypedDict):  # a round that started, as it was left on disk (for JUnit)
    round: int
    job: str
    pods: Optional[List[KubeObject]]
    job_object: Optional[KubeObject]


class JUnitCase(TypedDict):
    classname: str
    name: str
    time: float
    whole_seconds: bool  # `time` is between two whole-second stamps (or none): written without decimals
    outcome: str  # "passed", "failure", "error" or "skipped"
    message: str
    text: str


class JUnitSuite(TypedDict):
    round: Optional[int]
    job: Optional[str]
    time: float
    whole_seconds: bool  # as JUnitCase's
    cases: List[JUnitCase]


@dataclasses.dataclass(frozen=True)
class Read:
    """One preflight read: its value (None: the object does not exist), or why it failed."""

    value: Any = None
    failure: str = ""  # kubectl's first line when the read failed


@dataclasses.dataclass(frozen=True)
class Finding:
    """One preflight finding: `check` prints every one, `run` stops at the first that is not ok."""

    name: str
    ok: bool
    detail: str
    problem: str = ""  # what `check`'s verdict lists when not ok
    stop: str = ""  # the sentence `run` stops with when not ok


# A one-episode Job before the measured rounds (a warm-up or the probe), run by the batch: its name,
# directory and manifest, and where an interruption saves the namespace's events; its rows and figures.
OneEpisodeJob = Callable[[str, Path, KubeObject, Path], Tuple[List[EpisodeRow], RoundResult]]
