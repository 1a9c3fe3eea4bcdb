"""Constants: limits, names, exit codes and tables that every layer below reads; the version."""

from __future__ import annotations

import os
import signal
import typing
from typing import Any, Dict, NamedTuple, Optional, Tuple

__version__ = "0.2.0"


def _terminated_early(signum: int, frame: Any) -> None:
    """SIGTERM while this file is still being read, before main() takes the signal over: nothing
    has been done yet, so the run ends at once as an interrupted one does (130) and says so."""
    os.write(2, b"rl-batch-demo: interrupted before it started; nothing was done\n")
    os._exit(130)


if __name__ == "__main__":  # not on import: a program that imports this file keeps its own handlers
    signal.signal(signal.SIGTERM, _terminated_early)


# Constants ####################################################################
# Limits, names, exit codes and tables that every section below reads. Uses nothing of this
# file, only Python: a constant is a fact or a choice, written once.


DEFAULT_COUNT = 10
MAX_COUNT = 20  # keeps first runs small, as the guide does; not a product limit
MAX_COUNT_LARGE = 1000
MAX_ROUNDS = 10
DEFAULT_IMAGE = "python:3.12-alpine"
DEFAULT_RUNTIME = "cube"
NO_RUNTIME = "none"
DEFAULT_JOB_DEADLINE_SECONDS = 240
CLIENT_GRACE_SECONDS = 30  # the client waits this much longer than the Job's own deadline
CLEANUP_WAIT_SECONDS = 120
# The garbage collector deletes a Job's pods within the controller manager's client rate, kubeAPIQPS
# 20 (burst 30) by default (pkg/controller/apis/config/v1alpha1/defaults.go), and each pod costs it
# about 3 requests: a live GET of the pod, a live GET of its owner, then the DELETE
# (pkg/controller/garbagecollector/garbagecollector.go attemptToDeleteItem, isDangling): about 7 pods
# a second, so 1,000 pods take 150 s or more, and cleanup waits for a Job that much longer than
# CLEANUP_WAIT_SECONDS.
GC_REQUESTS_PER_POD = 3
KUBE_API_QPS = 20
GC_PODS_PER_SECOND = KUBE_API_QPS / GC_REQUESTS_PER_POD  # 6.67
MAX_INFRA_RETRIES = 10  # --infra-retries' largest K: each lost attempt is a pod more per episode
MAX_WAIT_SECONDS = 7 * 24 * 3600  # the longest --timeout or --kubectl-timeout accepted
REQUEST_TIMEOUT = "30s"
KUBECTL_PROCESS_TIMEOUT = 60.0
# A create's kubectl started before its input is known (Kubectl.prepare) is used only this young:
# `create --raw` opens its request before it reads its input, and REQUEST_TIMEOUT counts from there.
PREPARED_CALL_MAX_AGE = 20.0
WATCH_BUFFER_LIMIT = 16 * 2**20  # a watch event larger than this is taken for garbage
LOG_CROSSCHECK_LIMIT = 20  # up to this many episodes, logs and termination messages must agree
EVENT_LINE_LIMIT = 64 * 1024  # a longer line from a pod is noise: never decoded, never parsed
REWARD_LIMIT = 1e15  # a custom worker's |reward| above this is refused: sums of 1,000 stay finite
EVENTS_PER_EPISODE_LIMIT = 32  # more events than this from one pod invalidate the episode
KEPT_EVENTS = ("ready", "reward")  # the events the validation reads: each one's first line is kept, the rest counted
KEPT_EVENT_BYTES_LIMIT = 64 * 2**20  # bytes of those lines a run holds in memory, all pods together
INFO_MEMORY_LIMIT = 64 * 1024  # bytes of memory a reward's parsed `info` may take; a larger one is dropped
LOG_FILE_LIMIT = 8 * 2**20  # bytes of each <pod>.log kept on disk; the rest is counted, not saved
# Bytes of everything a run writes for its pods (LogBudgets, its ledger): the <pod>.log files, and the
# pod-made strings of pods.json and events.txt; past it only the ready and reward lines are saved.
LOG_DIR_BUDGET = 256 * 2**20
TERMINATION_MESSAGE_LIMIT = 4096  # the kubelet keeps the LAST 4,096 bytes a container wrote there
LOG_SELECTOR_PODS = 10  # up to this many pods, one `kubectl logs -l`: within client-go's burst of 10 requests
# The last line the episode's launcher prints, after the artifacts it framed (docs/own-episodes.md):
# a followed log (LogFollower) that printed it is whole once its pod has ended, so its read can stop
# without waiting for the kubelet to end the stream (it looks every 5 s: kuberuntime/logs/logs.go
# waitLogs, stateCheckPeriod). An episode that prints it itself only cuts its own log short.
LOG_END_LINE = b"rl-demo-end 1"
LOG_READ_PROCESSES = 8  # beyond that, `kubectl logs POD` for each pod, this many at once
CALL_STDERR_LIMIT = 4096  # of a failed call's stderr, kept in kubectl-calls.json

# Your own episodes: --worker, --tasks, --max-failed-episodes (README: "Plugging in a real model").
# The API server refuses a ConfigMap whose data's values take more than 1 MiB (core.MaxSecretSize,
# pkg/apis/core/validation ValidateConfigMap), and any request body over 3 MiB (MaxRequestBodyBytes).
CONFIGMAP_OBJECT_LIMIT = 2**20
CONFIGMAP_REQUEST_LIMIT = 3 * 2**20
TASKS_KEY = "tasks.jsonl"  # the ConfigMap key (/demo/tasks.jsonl): one task per line, line i for index i
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"  # on every pod of an Indexed Job
INDEX_LABEL = INDEX_ANNOTATION  # the same key as a label too, from Kubernetes 1.28 (PodIndexLabel)
# Per-index backoff limits (backoffLimitPerIndex, maxFailedIndexes), the JobBackoffLimitPerIndex
# feature: alpha and off by default in 1.28 (the API server drops the fields), beta and on by
# default in 1.29 to 1.32, GA in 1.33; a 1.27 API server does not know the fields at all, and
# strict validation refuses them (pkg/features/kube_features.go).
PER_INDEX_BACKOFF = (
    "per-index backoff limits (Kubernetes 1.29 or later, where the JobBackoffLimitPerIndex feature gate is on by "
    "default: beta in 1.29 to 1.32, GA from 1.33)"
)
PER_INDEX_BACKOFF_INSTEAD = (
    "; run without --max-failed-episodes and --failed-episode-reward (any failed episode then fails the run)"
)
# Infrastructure retries (--infra-retries K): the Job's own podFailurePolicy, never a resubmission.
# The job controller matches a failed pod against the rules in order, the first match deciding
# (kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go, matchPodFailurePolicy): a
# DisruptionTarget condition (eviction, preemption, the taint manager or PodGC deleting a pod of a
# lost node) is Counted against the index's backoffLimitPerIndex K, so it is retried at most K
# times (Ignore would retry it without bound); any non-zero exit code fails the Job (FailJob), or
# with --max-failed-episodes only its index (FailIndex), so a worker's own failure is never
# retried. A pod that failed without an exit code and without DisruptionTarget matches no rule
# and is Counted too (getMatchingContainerFromList skips containers without a terminated state):
# the client proves each replaced pod was lost to the infrastructure (infra_loss). The fields need
# per-index backoff limits (1.29+) and podFailurePolicy with FailIndex (beta and on by default from
# 1.26, FailIndex from 1.29 with JobBackoffLimitPerIndex, GA 1.31; a 1.25 API server drops it, as
# the alpha gate is off) and the pods' DisruptionTarget condition (PodDisruptionConditions, on by
# default from 1.26, GA 1.31); podFailurePolicy needs restartPolicy Never, which the Job has.
POD_FAILURE_POLICY = (
    "pod failure policies (podFailurePolicy with FailIndex and the pods' DisruptionTarget condition: Kubernetes "
    "1.29 or later, with per-index backoff limits)"
)
INFRA_RETRIES_INSTEAD = "; run without --infra-retries (an episode lost to the infrastructure then fails the run)"
# The Job fields the tool may set that older API servers do not know, with what needs them.
JOB_FIELD_NEEDS = {
    "spec.backoffLimitPerIndex": (
        PER_INDEX_BACKOFF,
        "--max-failed-episodes and --failed-episode-reward",
        PER_INDEX_BACKOFF_INSTEAD,
    ),
    "spec.maxFailedIndexes": (PER_INDEX_BACKOFF, "--max-failed-episodes", PER_INDEX_BACKOFF_INSTEAD),
    "spec.podFailurePolicy": (POD_FAILURE_POLICY, "--infra-retries", INFRA_RETRIES_INSTEAD),
    "spec.completionMode": ("Indexed Jobs (Kubernetes 1.24)", "--tasks and --max-failed-episodes", ""),
}
# Whose a failed episode's failure is (rewards.jsonl's and failed_episodes' failure_kind). Only a loss
# the cluster proves is the infrastructure's (core_cluster.failure_kind): everything else, the
# episode's exit code, a kill, its events, its own deadline, is the episode's, so a policy that
# crashes can never be masked like a lost node (--max-failed-episodes sets aside only the
# infrastructure's) and is scored as --failed-episode-reward R instead.
FAILURE_EPISODE = "episode"
# A pod past its own activeDeadlineSeconds (--episode-timeout): the kubelet fails it, phase Failed
# and this status reason (pkg/kubelet/active_deadline.go; kubelet_pods.go generateAPIPodStatus).
POD_DEADLINE_REASON = "DeadlineExceeded"
# A round stopped before its Job ended (--stop-after K, or stream_batch's loop left): wait_for_job's
# observation carries this in place of the job controller's condition; the run deletes the Job.
JOB_STOPPED = "Stopped"
EPISODE_DEADLINE_MARGIN_SECONDS = 30  # --episode-timeout's default: the Job's deadline less a tenth, at most this
FAILURE_INFRASTRUCTURE = "infrastructure"
# --tags (tags= in Python): the caller's own metadata, a policy version or a step, carried as given by
# every rewards.jsonl line, results.json and the JUnit properties; bounded, since every line repeats it.
TAGS_LIMIT = 2048  # bytes of the tags as JSON
TAG_KEYS_LIMIT = 32
INFO_LIMIT = 16 * 1024  # bytes of a reward event's `info` (as JSON) kept in rewards.jsonl


class RunFiles(NamedTuple):
    """The names of what a run writes in its output directory (a round's, a warm-up's and the
    probe's Job files in that Job's directory), each spelt here once; docs/outputs.md's Files
    table lists each of them and nothing else with a fixed name (tests/test_docs.py checks)."""

    receipt: str = "receipt.json"
    job_submitted: str = "job-submitted.json"
    job: str = "job.json"
    pods: str = "pods.json"
    events: str = "events.txt"
    artifacts: str = "artifacts"  # a directory: one folder per episode
    # a directory: the artifacts of a failed, lost or retracted episode, moved out of the way of
    # a trainer that globs artifacts/
    artifacts_set_aside: str = "artifacts-set-aside"
    results: str = "results.json"
    rewards: str = "rewards.jsonl"
    timeline: str = "timeline.svg"
    kubectl_calls: str = "kubectl-calls.json"
    error: str = "error.json"
    warmup: str = "warmup"  # a directory: each warm-up Job's, and the warm-up block
    warmup_block: str = "warmup.json"  # in the warm-up directory


RUN_FILES = RunFiles()
REWARDS_FILE = RUN_FILES.rewards
BUILTIN_WORKER = "built-in"

# Artifacts (docs/own-episodes.md, "Artifacts"): files a worker writes under RL_DEMO_ARTIFACTS, sent
# as framed, hashed chunks through its log (the channel the run reads already: no exec, no `kubectl
# cp`, no object store), saved as DIR/artifacts/<pod>/<name> and listed by the reward event's
# `artifacts` manifest.
LAUNCHER_KEY = "launcher.py"  # the ConfigMap's key (and /demo/ file) of the pod's command, sandbox/launcher.py
ARTIFACTS_REFUSED_FIELD = "artifacts_refused"  # the launcher's list of files it could not send: the episode fails
ARTIFACTS_REFUSED_COUNT_FIELD = "artifacts_refused_count"  # how many in all, when it lists only the first 16
ARTIFACTS_ENV = "RL_DEMO_ARTIFACTS"
ARTIFACTS_DIR = "/workspace/artifacts"  # inside the episode's emptyDir: it goes with the pod
MAX_ARTIFACT_BYTES_ENV = "RL_DEMO_MAX_ARTIFACT_BYTES"  # the budget, told to the worker too
# --private-fields, told to the worker (comma-separated): a field it reads that is private is the
# client's grader's to use, not missing (the template fails a task that lacks a field it needs)
PRIVATE_FIELDS_ENV = "RL_DEMO_PRIVATE_FIELDS"
DEFAULT_MAX_ARTIFACT_BYTES = 2**20  # --max-artifact-bytes: the bytes of one episode's artifacts, decoded
# The largest --max-artifact-bytes: its base64 frames (4/3 of it) stay well under the kubelet's
# default containerLogMaxSize of 10 MiB, past which `kubectl logs` returns only the current file.
MAX_ARTIFACT_BYTES_LIMIT = 4 * 2**20
ARTIFACTS_PER_EPISODE_LIMIT = 64
ARTIFACT_NAME_LIMIT = 255  # bytes of an artifact's relative name, UTF-8
ARTIFACT_NAME_DEPTH_LIMIT = 8  # "/"-separated segments of an artifact's name: at most 7 directories deep
# What each directory an episode's artifact names make costs its --max-artifact-bytes budget: one
# block of a directory on ext4 and XFS (4 KiB), so that names cannot buy disk with no bytes listed.
ARTIFACT_DIRECTORY_BYTES = 4096
# The kubelet's default containerLogMaxSize (pkg/kubelet/apis/config/v1beta1/defaults.go: 10Mi):
# a container's log file is rotated only once it is this large, and `kubectl logs` then returns
# only the current file (pkg/kubelet/kuberuntime/logs/logs.go).
CONTAINER_LOG_MAX_SIZE = 10 * 2**20
ARTIFACT_FRAME_DATA = 24 * 1024  # bytes of an artifact a frame carries at most (32 KiB of base64)
ARTIFACT_FRAMES_LIMIT = 4096  # frames of one episode: more invalidate it
ARTIFACT_FRAME_TAG = b"rl-demo-artifact 1 "  # a frame line: TAG SEQ TOTAL SHA256 NAME(base64url) DATA(base64)
# The built-in worker's reward event names where its tests came from (`modules`): the runner's own
# copy, given on its stdin, with the payload's TEST_SHA256 (tests/test_worker_grade.py checks both).
BUILTIN_TEST_MODULE = {
    "origin": "runner stdin",
    "sha256": "b7c043fc5be7621e78434454b15ad720d958d26656e72d3ccbb0dc1d761147eb",
}

# The episode container's resources: the Job manifest and `check`'s capacity sum read these.
POD_REQUESTS = {"cpu": "100m", "memory": "64Mi"}
POD_LIMITS = {"cpu": "500m", "memory": "128Mi"}
# The pod's own disk (--ephemeral-storage, --workspace-size). Without an ephemeral-storage limit a
# worker that fills the disk drives its node into DiskPressure, and the kubelet's node-pressure
# eviction then evicts it (and other tenants' pods) with DisruptionTarget, which --infra-retries'
# podFailurePolicy would Count as a loss of the infrastructure. With a limit the kubelet evicts only
# this pod, at its own limit (pkg/kubelet/eviction/eviction_manager.go localStorageEviction:
# emptyDirLimitEviction, podEphemeralStorageLimitEviction, containerEphemeralStorageLimitEviction,
# without DisruptionTarget). The request equals the limit, so the scheduler reserves what the pod
# may use. The container's log files count against it too (the kubelet keeps up to 5 files of
# containerLogMaxSize 10 MiB), so the default leaves room for them beside /workspace.
DEFAULT_EPHEMERAL_STORAGE = "512Mi"  # --ephemeral-storage: the episode container's request and limit
DEFAULT_WORKSPACE_SIZE = "256Mi"  # --workspace-size: the sizeLimit of /workspace's emptyDir
EPHEMERAL_STORAGE = "ephemeral-storage"
WORKSPACE_VOLUME = "workspace"

NAMESPACE_PREFIX = "agc-rl-"
RUN_LABEL = "agc-demo-run"
APP_LABEL_VALUE = "rl-batch-demo"
PSA_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
CONFIGMAP_NAME = "episode"
CONTAINER_NAME = "episode"
DEFAULT_SERVICEACCOUNT = "default"  # the account the episode pods run as (its token is not mounted)
JOB_NAME = "rollout"
UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_UID_LABEL = "controller-uid"  # clusters older than Kubernetes 1.27

EXIT_OK = 0
EXIT_EPISODE = 1
EXIT_USAGE = 2
EXIT_CLUSTER = 3
EXIT_TIMEOUT = 4
EXIT_THRESHOLD = 5
EXIT_REFUSED = 6
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """\
exit codes:
  0    success
  1    an episode failed or its results did not validate
  2    usage error or bad input (flags, output directory, receipt)
  3    cluster or kubectl error (missing kubectl, unreachable, forbidden, API error)
  4    timeout (the Job, a kubectl call, or a deletion did not finish in time)
  5    the run was valid but a --threshold was breached
  6    refused: an ownership check failed, nothing was deleted
  130  interrupted (Ctrl-C or SIGTERM)
"""

# The figures a --threshold may guard: top-level numbers of results.json. A budget a pod must not
# be able to game guards one it cannot forge (FIGURE_SOURCES): the cluster's or the client's.
THRESHOLD_METRICS = (
    "batch_to_all_ready_seconds",
    "batch_to_all_rewards_seconds",
    "batch_to_all_started_seconds",
    "batch_to_all_finished_seconds",
    "client_job_complete_seconds",
    "pod_to_ready_p50_seconds",
    "pod_to_ready_p95_seconds",
    "pod_to_ready_max_seconds",
)

# Per-episode phases, in the order an episode lives through them, each with its label.
PHASE_LABELS = {
    "pod_to_scheduled_seconds": "pod created -> scheduled",
    "pod_to_kernel_boot_seconds": "pod created -> sandbox kernel booted",
    "kernel_boot_to_process_start_seconds": "sandbox kernel boot -> process start",
    "pod_to_container_started_seconds": "pod created -> container started",
    "pod_to_process_start_seconds": "pod created -> process started",
    "interpreter_start_seconds": "process start -> first statement",
    "python_import_seconds": "Python module import",
    "import_to_ready_seconds": "import done -> application ready",
    "pod_to_ready_seconds": "pod created -> application ready",
    "pod_observed_to_ready_seconds": "pod first seen -> application ready",
    "ready_to_reward_seconds": "ready -> reward (the task)",
    "reward_to_finished_seconds": "reward -> container finished",
}
PHASES = tuple(PHASE_LABELS)

# The clocks a figure is read from (docs/figures.md, "The clocks"), each with its resolution in
# seconds: the API server's stamps (creationTimestamp, conditions) are whole seconds, truncated; a
# container's startedAt/finishedAt are the node's container runtime's (CRI ContainerStatus, copied by
# the kubelet's toKubeContainerStatus), whole seconds once serialised as metav1.Time; the
# scheduler's eventTime is microseconds; /proc's start times are clock ticks.
CLOCK_API = "API server"
CLOCK_RUNTIME = "runtime"  # the node's container runtime (CRI)
CLOCK_SCHEDULER = "scheduler"
CLOCK_TICKS = "kernel ticks"
CLOCK_NODE = "node"
CLOCK_CLIENT = "client"
CLOCK_RESOLUTION = {
    **{CLOCK_API: 1.0, CLOCK_RUNTIME: 1.0, CLOCK_SCHEDULER: 1e-6},
    **{CLOCK_TICKS: 0.01, CLOCK_NODE: 1e-6, CLOCK_CLIENT: 1e-6},
}
TIMESTAMP_SLACK = 1.0  # whole-second stamps, possibly of different API-server replicas (or nodes): 1 s apart

# Each stamp a figure starts or ends at (the pods[] rows' `*_at` keys, the worker's, the client's),
# by its clock: the one place that says where a figure's ends come from. batch_start is the Job's
# creationTimestamp, scheduled_at the Scheduled event's eventTime (the PodScheduled condition's:
# below); client_job_complete_seconds itself is timed on the client's monotonic clock.
STAMP_CLOCKS = {
    **dict.fromkeys(("batch_start", "created_at"), CLOCK_API),
    **dict.fromkeys(("container_started_at", "finished_at"), CLOCK_RUNTIME),
    "scheduled_at": CLOCK_SCHEDULER,
    **dict.fromkeys(("kernel_booted_at", "process_started_at"), CLOCK_TICKS),
    **dict.fromkeys(("first_statement_at", "imports_done_at", "ready_at", "reward_at"), CLOCK_NODE),
    **dict.fromkeys(("observed_first_seen_at", "client_submitted_at", "client_observed_complete_at"), CLOCK_CLIENT),
}

# Who measured each stamp: the client itself, the cluster (the API server, the scheduler, the node's
# container runtime), or the pod, whose reports the code inside the sandbox can forge (a reward's
# time is bounded only from above, by the container's finish). A figure is as forgeable as its
# least trusted end (FIGURE_SOURCES).
SOURCE_CLIENT = "client"
SOURCE_CLUSTER = "cluster"
SOURCE_POD = "pod"
STAMP_SOURCES = {
    stamp: SOURCE_CLIENT
    if clock == CLOCK_CLIENT
    else SOURCE_CLUSTER
    if clock in (CLOCK_API, CLOCK_RUNTIME, CLOCK_SCHEDULER)
    else SOURCE_POD
    for stamp, clock in STAMP_CLOCKS.items()
}

# Every figure the summary prints: (its start stamp, its end stamp, why it can read negative, None
# where it cannot). The summary, the CI step summary, the verdict and the guide's table format
# each figure from its clocks (FIGURE_CLOCKS: figure_text, clock_text).
_SKEW = "the node's clock is behind the API server's"
FIGURE_STAMPS: Dict[str, Tuple[str, str, Optional[str]]] = {
    "batch_to_all_ready_seconds": ("batch_start", "ready_at", _SKEW),
    "batch_to_all_rewards_seconds": ("batch_start", "reward_at", _SKEW),
    "batch_to_all_started_seconds": ("batch_start", "container_started_at", _SKEW),  # the runtime's: the node's
    "batch_to_all_finished_seconds": ("batch_start", "finished_at", _SKEW),
    "client_job_complete_seconds": ("client_submitted_at", "client_observed_complete_at", None),  # monotonic
    "pod_to_ready_p50_seconds": ("created_at", "ready_at", _SKEW),
    "pod_to_ready_p95_seconds": ("created_at", "ready_at", _SKEW),
    "pod_to_ready_max_seconds": ("created_at", "ready_at", _SKEW),
    # The PodScheduled condition is the API server's own stamp at binding (pkg/registry/core/pod/storage
    # storage.go setPodNodeAndMetadata), whole seconds like the creation: one clock truncated cannot
    # reverse their order, so a negative figure from it means two API-server replicas' clocks.
    "pod_to_scheduled_seconds": (
        "created_at",
        "scheduled_at",
        "from the PodScheduled condition (the API server's stamp at binding, whole seconds) two API-server replicas' "
        "clocks disagree; from a Scheduled event (its eventTime is the scheduler's clock) the scheduler's clock is "
        "behind the API server's",
    ),
    "pod_to_kernel_boot_seconds": ("created_at", "kernel_booted_at", _SKEW),
    "kernel_boot_to_process_start_seconds": ("kernel_booted_at", "process_started_at", None),  # ticks of one boot
    "pod_to_container_started_seconds": (
        "created_at",
        "container_started_at",
        "startedAt is the node's container runtime's stamp and creationTimestamp the API server's, and their "
        "clocks disagree",
    ),
    "pod_to_process_start_seconds": ("created_at", "process_started_at", _SKEW),
    "interpreter_start_seconds": (
        "process_started_at",
        "first_statement_at",
        "the process start is counted in 10 ms clock ticks, so a first statement in its tick can read before it",
    ),
    "python_import_seconds": ("first_statement_at", "imports_done_at", "the node's wall clock was stepped back"),
    "import_to_ready_seconds": ("imports_done_at", "ready_at", "the node's wall clock was stepped back"),
    "pod_to_ready_seconds": ("created_at", "ready_at", _SKEW),
    "pod_observed_to_ready_seconds": (
        "observed_first_seen_at",
        "ready_at",
        "the client saw the pod only after it was ready, or the node's clock is behind the client's",
    ),
    "ready_to_reward_seconds": ("ready_at", "reward_at", "the node's wall clock was stepped back"),
    "reward_to_finished_seconds": (
        "reward_at",
        "finished_at",
        "finishedAt is truncated to the second, so a reward in the container's last second reads as after it",
    ),
}
FIGURE_CLOCKS = {
    figure: (STAMP_CLOCKS[start], STAMP_CLOCKS[end], why) for figure, (start, end, why) in FIGURE_STAMPS.items()
}
_TRUST = (SOURCE_POD, SOURCE_CLUSTER, SOURCE_CLIENT)  # the first one a figure's ends hold names its source
FIGURE_SOURCES = {
    **{
        figure: next(source for source in _TRUST if source in (STAMP_SOURCES[start], STAMP_SOURCES[end]))
        for figure, (start, end, _) in FIGURE_STAMPS.items()
    },
    "runtime_operations": SOURCE_CLUSTER,  # the kubelets' histograms
    "client_first_reward_seconds": SOURCE_CLIENT,  # when the client knew it (the reward itself is the pod's)
    # --infra-retries: between two creationTimestamps of an episode's pods (API server, whole seconds)
    **dict.fromkeys(("retry_seconds", "retry_seconds_sum", "retry_seconds_max"), SOURCE_CLUSTER),
}
# pod_to_scheduled_seconds when no episode had a Scheduled event: the PodScheduled condition's stamp.
SCHEDULED_BY_CONDITION = (
    CLOCK_API,
    CLOCK_API,
    "the condition, like creationTimestamp, is the API server's stamp (set when it binds the pod to its node), both "
    "whole seconds, which one clock cannot put out of order: two API-server replicas' clocks disagree",
)
# A queued Job's wait for admission (docs/figures.md, "Queued Jobs"): the control plane's, the client's.
QUEUE_FIGURES = ("admission_wait_seconds", "client_admission_wait_seconds")
SUMMARY_WIDTH = 120  # columns that the summary's notes and the guide's table keep to off a terminal (logs, files)
TERMINAL_COLUMNS_UNKNOWN = 80  # a terminal's width when neither COLUMNS nor the terminal says it
TABLE_COLUMN_MIN = 10  # a table's column is narrowed to fit its width, below this only if it must
TABLE_COLUMN_NARROWEST = 4  # never below this: two wide characters, or one and its closing mark
# The container runtime name the tests' fake cluster reports (tests/fakekube): a run whose episodes
# ran on it is a simulation on one machine, and its timeline says so.
SIMULATED_RUNTIME = "rl-batch-demo-simulation"
MANY_SAMPLES = 100  # from this many samples on, the summary adds each phase's p99 and mean

COMPARE_FIGURES = (
    ("episodes", "episodes"),
    ("parallelism", "parallelism"),
    ("rounds", "rounds"),
    ("batch_to_all_ready_seconds", "all ready"),
    ("batch_to_all_rewards_seconds", "all rewards"),
    ("batch_to_all_finished_seconds", "all finished (cluster)"),
    ("client_job_complete_seconds", "client saw Complete"),
    ("pod_to_ready_p50_seconds", "pod->ready p50"),
    ("pod_to_ready_p95_seconds", "pod->ready p95"),
)

TimelineStep = Tuple[str, str, str, str, str]  # name, meaning, colour, start key, end key
TIMELINE_BARS: Tuple[TimelineStep, ...] = (
    ("waiting", "Job created -> pod created", "#c9ced6", "batch_start", "created_at"),
    ("pod start", "pod created -> container started", "#f2a541", "created_at", "container_started_at"),
    ("Python start", "container started -> ready", "#5b8def", "container_started_at", "ready_at"),
    ("task", "ready -> reward", "#3fb27f", "ready_at", "reward_at"),
    ("exit", "reward -> container finished", "#9b6bd6", "reward_at", "finished_at"),
)

# Thinner strips under an episode's bars, drawn where the sandbox reported its own clocks:
# (name, meaning, colour, start keys (the first known one), end key).
TIMELINE_DETAIL_BARS = (
    ("sandbox boot", "pod created -> sandbox kernel booted", "#d1495b", ("created_at",), "kernel_booted_at"),
    (
        "process start",
        "kernel booted (else pod created) -> process started",
        "#edae49",
        ("kernel_booted_at", "created_at"),
        "process_started_at",
    ),
)

# The kubelet's runtime histograms (`run --kubelet-metrics`), named as the guide names them:
# (family, label, label value). All four come from the family recordOperation observes when each
# call returns (pkg/kubelet/kuberuntime/instrumented_services.go); it has no runtime-handler label,
# so other pods' sandboxes on a node count as foreign, as for the other operations.
KubeletOperation = typing.Literal["RunPodSandbox", "CreateContainer", "StartContainer", "PullImage"]
KUBELET_OPERATIONS: Tuple[Tuple[KubeletOperation, str, str, str], ...] = (
    ("RunPodSandbox", "kubelet_runtime_operations_duration_seconds", "operation_type", "run_podsandbox"),
    ("CreateContainer", "kubelet_runtime_operations_duration_seconds", "operation_type", "create_container"),
    ("StartContainer", "kubelet_runtime_operations_duration_seconds", "operation_type", "start_container"),
    ("PullImage", "kubelet_runtime_operations_duration_seconds", "operation_type", "pull_image"),
)
# RunPodSandbox by the RuntimeClass's handler: only a cross-check. Up to 1.35 the kubelet records it
# with `defer ...Observe(metrics.SinceInSeconds(startTime))`, whose argument Go evaluates when the
# defer statement runs, so every sample is a few microseconds (kubernetes/kubernetes#135749 fixed it
# with ObserveSince, first released in 1.36).
HANDLER_SANDBOX_FAMILY = "kubelet_run_podsandbox_duration_seconds"
HANDLER_SANDBOX = "RunPodSandbox by handler"  # its histogram's key in a KubeletReading
HANDLER_SANDBOX_IMPLAUSIBLE = 0.1  # a handler mean below this fraction of run_podsandbox's is the defer bug
OPERATION_BUCKETS_START = 0.005  # the runtime operations' lowest bucket: ExponentialBuckets(.005, 2.5, 14)
KUBELET_METRICS_PERMISSIONS = (
    ("get", "nodes", "", "proxy", False),  # the kubelet's /metrics through the API server (also allows exec!)
    ("list", "nodes", "", "", False),  # which nodes may run an episode, read before the Job exists
)
# `run --parallelism auto`: what the eligible nodes hold, and what already runs there, in every
# namespace. The scheduler counts a node's pods that are not terminated (its informer's field
# selector: kubernetes/kubernetes pkg/scheduler/scheduler.go newPodInformer): `check` lists those;
# the run reads the nodes and every pod in one call (a field selector would apply to the nodes too,
# which have no status.phase), which keeps a 10-episode run within 10 kubectl processes.
CAPACITY_PERMISSIONS = (("list", "nodes", "", "", False), ("list", "pods", "", "", False))
NON_TERMINATED_PODS = ("--all-namespaces", "--field-selector=status.phase!=Succeeded,status.phase!=Failed")
EVERY_NAMESPACE = ("--all-namespaces",)
METRICS_LINE_LIMIT = 64 * 1024  # a longer line of a kubelet's /metrics is ignored
METRICS_SAMPLES_LIMIT = 20000  # samples kept per node from the wanted families; more is garbage
KUBELET_READ_THREADS = 16  # nodes read at once
CLOCK_TICK_SLACK = 0.02  # /proc's process start is in clock ticks (1/CLK_TCK, usually 10 ms): two ticks' slack

# (verb, resource, group, subresource, namespaced): what a run and its cleanup do.
REQUIRED_PERMISSIONS = (
    ("create", "namespaces", "", "", False),
    ("get", "namespaces", "", "", False),
    ("delete", "namespaces", "", "", False),
    ("create", "configmaps", "", "", True),
    ("create", "jobs", "batch", "", True),
    ("get", "jobs", "batch", "", True),
    ("watch", "jobs", "batch", "", True),
    ("delete", "jobs", "batch", "", True),
    ("list", "pods", "", "", True),
    ("watch", "pods", "", "", True),
    ("get", "pods", "", "", True),  # `kubectl logs POD` GETs the pod before its log (kubectl logs.go Complete)
    ("get", "pods", "", "log", True),
    ("list", "events", "", "", True),
    ("list", "jobs", "batch", "", True),  # the Job's watch is a list watch by name (wait_for_job)
)
# The watch for the namespace's default ServiceAccount (BatchRun.wait_for_service_account): reviewed
# always, needed never: without them the run goes on without that wait, and says so.
SERVICEACCOUNT_PERMISSIONS = (("list", "serviceaccounts", "", "", True), ("watch", "serviceaccounts", "", "", True))
SERVICEACCOUNT_WAIT = "ServiceAccount wait"  # the finding that says whether the run may wait for the account
# `run --warmup` lists the nodes to put one episode on each (and `check` lists them for its capacity).
NODE_LIST_PERMISSION = ("list", "nodes", "", "", False)

# Kueue (--queue CLUSTERQUEUE). Kueue manages only a Job labelled kueue.x-k8s.io/queue-name with the
# name of a LocalQueue in the Job's own namespace (Kueue docs, "Run a Kubernetes Job"); a labelled
# Job whose namespace has no such LocalQueue stays suspended ("LocalQueue X doesn't exist": Kueue
# pkg/controller/core/workload_controller.go), and with manageJobsWithoutQueueName true an
# unlabelled Job is suspended and never admitted (Kueue docs, "Setup manageJobsWithoutQueueName").
# Every run makes a fresh namespace, so with --queue it creates its own LocalQueue there, pointing
# at the ClusterQueue given, in the version the API server prefers of those this tool knows.
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # LocalQueue's versions this tool writes, newest first
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
LOCAL_QUEUE_NAME = "rl-batch-demo"
LOCALQUEUE_RESOURCE = "localqueues.kueue.x-k8s.io"
CLUSTERQUEUE_RESOURCE = "clusterqueues.kueue.x-k8s.io"
LOCALQUEUE_PERMISSIONS = (
    ("create", "localqueues", KUEUE_GROUP, "", True),
    ("get", "localqueues", KUEUE_GROUP, "", True),  # adoption after an ambiguous create, and cleanup
    ("delete", "localqueues", KUEUE_GROUP, "", True),
)

# The run's preflight asks for its rules first, in one request: where they prove every permission,
# no access review is sent (core_permissions.granted_by_rules).
RULES_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
RULES_REVIEW_REASON = "allowed by a rule of the SelfSubjectRulesReview"
RUNTIMECLASS_PERMISSION = ("get", "runtimeclasses", "node.k8s.io", "", False)
# --parallelism auto lists the RuntimeClasses with the nodes and their pods, in one process
RUNTIMECLASS_LIST_PERMISSION = ("list", "runtimeclasses", "node.k8s.io", "", False)

_TRANSIENT_MARKERS = (
    "connection refused",
    "was refused",
    "connection reset",
    "i/o timeout",
    "tls handshake timeout",
    "(toomanyrequests)",
    "too many requests",
    "(internalerror)",
    "(serviceunavailable)",
    "the server is currently unable to handle the request",
    "(timeout)",
    "etcdserver: request timed out",
    "(servertimeout)",
    "context deadline exceeded",
    "unable to connect to the server",
    "client.timeout exceeded",
    "http2: client connection lost",
    "unexpected eof",
    "bad gateway",
    "gateway timeout",
)

# A request refused outright never reached storage: repeating a create after it is safe.
_NOT_APPLIED_MARKERS = ("connection refused", "was refused", "(toomanyrequests)", "too many requests")

# Lines of kubectl's stderr that are not its message: client-go's klog lines, logged while a call
# goes on (`E1201 14:29:34.166386    8886 memcache.go:265] ...`: k8s.io/klog/v2's header), and the
# API server's warnings (`Warning: ...`, client-go rest/warnings.go). kubectl's own message, from
# cmdutil.CheckErr (kubectl pkg/cmd/util/helpers.go), is the first line after them.
_KLOG_LINE = r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ [^\s\]]+:\d+\] "
_WARNING_PREFIX = "Warning: "

# kubectl's words when no HTTP answer came: the server is unreachable, and why. StandardErrorMessage
# for a *url.Error (kubectl pkg/cmd/util/helpers.go); `create -f` when the API's discovery failed
# (cli-runtime pkg/resource/mapper.go), when validation could not download the OpenAPI document
# (kubectl pkg/cmd/util/helpers.go, pkg/validation), or when the create itself could not connect
# (cmdutil.AddSourceToErr wraps the *url.Error).
_UNREACHABLE_MESSAGES = (
    r"^The connection to the server (?P<host>\S+) was (?P<reason>refused) - did you specify the right host or port\?$",
    r"^Unable to connect to the server: (?P<reason>.+)$",
    r'^error: unable to recognize "[^"]*": Get "(?P<url>[^"]+)": (?P<reason>.+)$',
    r'^error: error validating "[^"]*": error validating data: (?:failed to download openapi: )?Get "(?P<url>[^"]+)": '
    r"(?P<reason>.+); if you choose to ignore these errors, turn validation off with --validate=false$",
    r'^(?:error: )?error when \w+ "[^"]*": \w+ "(?P<url>[^"]+)": (?P<reason>dial tcp .+)$',
)

# kubectl's words when an HTTP server answered, but 404 to the paths every Kubernetes API server
# serves: a proxy, or another web server at the context's URL. client-go's generic NotFound (a 404
# without a metav1.Status body: "the server could not find the requested resource",
# k8s.io/apimachinery pkg/api/errors NewGenericServerResponse) for the discovery of /api and /apis
# (client-go discovery/cached/memory memcache.go), for the OpenAPI document `create -f -` validates
# against, and for /version (`kubectl version`). Seen with the real kubectl 1.32 against
# tests/recordingserver.py answering every path 404 (tests/test_kubectl_contract.py).
_GENERIC_NOT_FOUND = "the server could not find the requested resource"
_NOT_AN_API_SERVER_MARKERS = (
    f"couldn't get current server API group list: {_GENERIC_NOT_FOUND}",
    # kubectl 1.37 logs the same discovery failure as a structured klog line (seen with 1.37.1)
    f'"Couldn\'t get current server API group list" err="{_GENERIC_NOT_FOUND}"',
    f"error validating data: {_GENERIC_NOT_FOUND}",
    f"failed to download openapi: {_GENERIC_NOT_FOUND}",
)


# Regular expressions are kept as their source: `re` compiles each on first use and caches it, so that
# `--help` compiles none.
_RFC3339 = r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|z|[+-]\d{2}:\d{2})$"

_QUANTITY = r"^([0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)$"

# Decimal suffixes, then the binary ones: Ki = 2**10 up to Pi = 2**50.
_QUANTITY_SUFFIXES = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_QUANTITY_SUFFIXES.update({prefix + "i": 2.0 ** (10 * power) for power, prefix in enumerate("KMGTP", 1)})

# CI reports (--junit, --metrics-file) and the kubectl plugin.
JUNIT_SUITE_NAME = "rl-batch-demo"

JUNIT_MESSAGE_LIMIT = 1000  # characters of a message attribute; the element's text holds all of it

# XML 1.0 allows tab, newline, carriage return and these ranges; anything else is shown escaped.
_XML_FORBIDDEN = "[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"

METRICS_PREFIX = "rl_batch_demo_"

# kubectl runs `kubectl rl-batch-demo` as the executable kubectl-rl_batch_demo on PATH.
PLUGIN_COMMAND = "kubectl rl-batch-demo"

PLUGIN_FILE_NAMES = ("kubectl-rl_batch_demo", "kubectl-rl_batch_demo.py")

INSTALLED_COMMAND = "rl-batch-demo"
