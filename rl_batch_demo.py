#!/usr/bin/env python3
"""rl-batch-demo: how fast does a Kubernetes cluster prepare N isolated RL-rollout sandboxes?

Submits one Job of N pods, each an "episode" that prepares its own workspace, confirms a
boundary test fails, applies a fix, re-runs the tests and reports a reward. Then it collects
every reward, validates every episode, and reports honest timing figures: whole-batch
latencies, per-pod start-up percentiles and per-phase breakdowns.

It is one file with no dependencies beyond Python 3.9+ and kubectl: copy it anywhere.

Usage:
    python3 rl_batch_demo.py check     [--count N] [--runtime R] [--image I] [--kubelet-metrics]
    python3 rl_batch_demo.py run       --output DIR [--count N] [--parallelism P|auto] [--rounds K]
                                       [--image I] [--runtime R|none] [--cleanup POLICY]
                                       [--worker FILE.py] [--tasks FILE.jsonl] [--max-failed-episodes K]
                                       [--warmup] [--pin-image[=DIGEST]] [--kubelet-metrics]
                                       [--junit FILE] [--metrics-file FILE]
    python3 rl_batch_demo.py reproduce --output DIR [--count N] [--rounds K] [--junit FILE]
    python3 rl_batch_demo.py cleanup   --output DIR
    python3 rl_batch_demo.py compare   DIR [DIR ...] [--format text|markdown|json|guide] [--lang en|zh]
    python3 rl_batch_demo.py show-worker [--template]

From Python (docs/trainer.md): `import rl_batch_demo as rbd`, then `rbd.run_batch(DIR, count=N,
cleanup="always", ...)` (run's flags with underscores) returns `.results` and `.rewards`, and
`rbd.stream_batch(DIR, ...)` yields each rewards.jsonl row as it is written; errors raise
rbd.DemoError with the exit code below.

Saved as `kubectl-rl_batch_demo` on PATH, it is also the kubectl plugin `kubectl rl-batch-demo`.
Everything a pod prints is untrusted input: read as bytes, bounded, escaped before it is shown.

Every run works in its own namespace (agc-rl-<12 hex>) and writes receipt.json before it
creates anything, so `cleanup` can later delete exactly what the run created, after checking
UIDs and labels, and nothing else.

Exit codes (see --help): 0 success, 1 episode failed or invalid, 2 usage or bad input,
3 cluster or kubectl error, 4 timeout, 5 threshold breached, 6 refused, 130 interrupted.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import datetime
import errno
import functools
import json
import math
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence, Set, Tuple, TypedDict

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
# The garbage collector deletes a Job's pods at the controller manager's client rate, kubeAPIQPS 20
# (burst 30) by default (pkg/controller/apis/config/v1alpha1/defaults.go): 1,000 pods take 50 s or
# more, so cleanup waits for a Job that much longer than CLEANUP_WAIT_SECONDS.
GC_PODS_PER_SECOND = 20
MAX_INFRA_RETRIES = 10  # --infra-retries' largest K: each lost attempt is a pod more per episode
MAX_WAIT_SECONDS = 7 * 24 * 3600  # the longest --timeout or --kubectl-timeout accepted
REQUEST_TIMEOUT = "30s"
KUBECTL_PROCESS_TIMEOUT = 60.0
WATCH_BUFFER_LIMIT = 16 * 2**20  # a watch event larger than this is taken for garbage
LOG_CROSSCHECK_LIMIT = 20  # up to this many episodes, logs and termination messages must agree
EVENT_LINE_LIMIT = 64 * 1024  # a longer line from a pod is noise: never decoded, never parsed
REWARD_LIMIT = 1e15  # a custom worker's |reward| above this is refused: sums of 1,000 stay finite
EVENTS_PER_EPISODE_LIMIT = 32  # more events than this from one pod invalidate the episode
KEPT_EVENTS = ("ready", "reward")  # the events the validation reads: each one's first line is kept, the rest counted
KEPT_EVENT_BYTES_LIMIT = 64 * 2**20  # bytes of those lines a run holds in memory, all pods together
INFO_MEMORY_LIMIT = 64 * 1024  # bytes of memory a reward's parsed `info` may take; a larger one is dropped
LOG_FILE_LIMIT = 8 * 2**20  # bytes of each <pod>.log kept on disk; the rest is counted, not saved
LOG_DIR_BUDGET = 256 * 2**20  # bytes of all <pod>.log files of a run together; past it only event lines are saved
TERMINATION_MESSAGE_LIMIT = 4096  # the kubelet keeps the LAST 4,096 bytes a container wrote there
LOG_SELECTOR_PODS = 10  # up to this many pods, one `kubectl logs -l`: within client-go's burst of 10 requests
LOG_READ_PROCESSES = 8  # beyond that, `kubectl logs POD` for each pod, this many at once
CALL_STDERR_LIMIT = 4096  # of a failed call's stderr, kept in kubectl-calls.json

# Your own episodes: --worker, --tasks, --max-failed-episodes (README: "Plugging in a real model").
CONFIGMAP_OBJECT_LIMIT = 2**20  # the API server refuses a ConfigMap over 1 MiB; etcd's object limit is alike
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
PER_INDEX_BACKOFF_INSTEAD = "; run without --max-failed-episodes (any failed episode then fails the run)"
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
    "spec.backoffLimitPerIndex": (PER_INDEX_BACKOFF, "--max-failed-episodes", PER_INDEX_BACKOFF_INSTEAD),
    "spec.maxFailedIndexes": (PER_INDEX_BACKOFF, "--max-failed-episodes", PER_INDEX_BACKOFF_INSTEAD),
    "spec.podFailurePolicy": (POD_FAILURE_POLICY, "--infra-retries", INFRA_RETRIES_INSTEAD),
    "spec.completionMode": ("Indexed Jobs (Kubernetes 1.24)", "--tasks and --max-failed-episodes", ""),
}
INFO_LIMIT = 16 * 1024  # bytes of a reward event's `info` (as JSON) kept in rewards.jsonl
REWARDS_FILE = "rewards.jsonl"
BUILTIN_WORKER = "built-in"

# Artifacts (docs/own-episodes.md, "Artifacts"): files a worker writes under RL_DEMO_ARTIFACTS, sent
# as framed, hashed chunks through its log (the channel the run reads already: no exec, no `kubectl
# cp`, no object store), saved as DIR/artifacts/<pod>/<name> and listed by the reward event's
# `artifacts` manifest.
ARTIFACTS_ENV = "RL_DEMO_ARTIFACTS"
ARTIFACTS_DIR = "/workspace/artifacts"  # inside the episode's emptyDir: it goes with the pod
MAX_ARTIFACT_BYTES_ENV = "RL_DEMO_MAX_ARTIFACT_BYTES"  # the budget, told to the worker too
DEFAULT_MAX_ARTIFACT_BYTES = 2**20  # --max-artifact-bytes: the bytes of one episode's artifacts, decoded
# The largest --max-artifact-bytes: its base64 frames (4/3 of it) stay well under the kubelet's
# default containerLogMaxSize of 10 MiB, past which `kubectl logs` returns only the current file.
MAX_ARTIFACT_BYTES_LIMIT = 4 * 2**20
ARTIFACTS_PER_EPISODE_LIMIT = 64
ARTIFACT_NAME_LIMIT = 255  # bytes of an artifact's relative name, UTF-8
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
    "pod_to_scheduled_seconds": ("created_at", "scheduled_at", "the scheduler's clock is behind the API server's"),
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
    "the condition is the scheduler's stamp and creationTimestamp the API server's, and their clocks disagree",
)
# A queued Job's wait for admission (docs/figures.md, "Queued Jobs"): the control plane's, the client's.
QUEUE_FIGURES = ("admission_wait_seconds", "client_admission_wait_seconds")
SUMMARY_WIDTH = 120  # terminal columns that the summary's notes and the guide's table keep to
TABLE_COLUMN_MIN = 10  # a table's column is narrowed to fit SUMMARY_WIDTH, never below this
# The container runtime name the tests' fake cluster reports (tests/fakekube): a run whose episodes
# ran on it is a simulation on one machine, and its timeline says so.
SIMULATED_RUNTIME = "rl-batch-demo-simulation"
MANY_SAMPLES = 100  # from this many samples on, the summary adds each phase's p99 and mean

COMPARE_FIGURES = (
    ("episodes", "episodes"),
    ("parallelism", "parallelism"),
    ("rounds", "rounds"),
    ("batch_to_all_ready_seconds", "all ready (s)"),
    ("batch_to_all_rewards_seconds", "all rewards (s)"),
    ("batch_to_all_finished_seconds", "all finished (s, cluster)"),
    ("client_job_complete_seconds", "client saw Complete (s)"),
    ("pod_to_ready_p50_seconds", "pod->ready p50 (s)"),
    ("pod_to_ready_p95_seconds", "pod->ready p95 (s)"),
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


# Errors #######################################################################
# The one user-facing error type, DemoError with its exit code (main() catches it), and its kinds.
# Uses the constants.


class DemoError(Exception):
    """An expected failure: one sentence for the user and the exit code that classifies it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def bug_message(bug: BaseException) -> str:
    """An unexpected exception, a bug, as error.json, the CI reports and stderr name it (exit 3)."""
    return f"unexpected error (a bug in rl-batch-demo): {bug!r}"


class EpisodeInvalid(DemoError):
    """An episode broke one of the validation rules."""

    def __init__(self, pod: str, rule: str, inspect: str) -> None:
        super().__init__(f"episode {pod}: {rule}; inspect {inspect}", EXIT_EPISODE)
        self.pod = pod
        self.rule = rule
        self.inspect = inspect


class EventParseError(ValueError):
    """A line that claims to be an event but is not a valid one."""


def kubectl_message(stderr: str) -> str:
    """kubectl's own message in its stderr: the first line that is neither a klog line nor a
    server warning (the last line when there is nothing else)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    own = (line for line in lines if not (re.match(_KLOG_LINE, line) or line.startswith(_WARNING_PREFIX)))
    return next(own, lines[-1] if lines else "(no message)")


def unreachable_reason(message: str) -> Optional[Tuple[str, str]]:
    """(host, reason) when kubectl's message says no answer came from the API server (host "" when
    the message does not name it); None for any other message. A dial error is shortened to its
    cause: "dial tcp 10.0.0.1:6443: connect: connection refused" becomes "connection refused"."""
    for pattern in _UNREACHABLE_MESSAGES:
        match = re.match(pattern, message)
        if match:
            found = match.groupdict()
            reason = found["reason"]
            if reason == "refused" or reason.startswith("dial tcp"):
                reason = "connection refused" if reason == "refused" else reason.rsplit(": ", 1)[-1]
            host = found.get("host") or re.sub(r"^\w+://([^/]+).*$", r"\1", found.get("url") or "")
            lookup = re.search(r"\blookup (\S+?)(?: on \S+)?: no such host$", message)
            return host or (lookup.group(1) if lookup else ""), reason
    return None


def unreachable_message(server: Optional[str], context: Optional[str], reason: str) -> str:
    """One line for an API server that did not answer: which server, which context, what to check."""
    where = f"the API server {server}" if server else "the API server"
    named = f" of context {context}" if context else ""
    probe = shlex.join(["kubectl", *(["--context", context] if context else []), "cluster-info"])
    if "x509:" in reason or reason.startswith("tls: failed to verify"):
        return (
            f"cannot verify {where}{named} ({reason}); check the certificate-authority of the context's "
            f"cluster in the kubeconfig, or `{probe}`"
        )
    return f"cannot reach {where}{named} ({reason}); check the network/VPN and that the cluster runs, or `{probe}`"


class KubectlFailure(DemoError):
    """kubectl ran and exited non-zero. When no answer came from the API server, the message says
    so in one line naming the server (`server`, else the host kubectl names) and the context."""

    def __init__(
        self, argv: Sequence[str], returncode: int, stderr: str, stdout: str = "", server: Optional[str] = None
    ) -> None:
        self.stderr = stderr
        self.stdout = stdout
        self.first_line = kubectl_message(stderr)
        self.command = shlex.join(["kubectl", *argv[1:]])
        unreachable = unreachable_reason(self.first_line)
        self.unreachable = unreachable is not None
        if unreachable is not None:
            context = next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--context=")), None)
            message = unreachable_message(server or unreachable[0], context, unreachable[1])
        else:
            message = f"`{self.command}` failed (exit {returncode}): {self.first_line}"
        super().__init__(message, EXIT_CLUSTER)

    @property
    def transient(self) -> bool:
        lowered = self.stderr.lower()
        return any(marker in lowered for marker in _TRANSIENT_MARKERS)

    @property
    def not_applied(self) -> bool:
        lowered = self.stderr.lower()
        return any(marker in lowered for marker in _NOT_APPLIED_MARKERS)

    @property
    def already_exists(self) -> bool:
        return "(AlreadyExists)" in self.stderr


class KubectlTimeout(DemoError):
    """kubectl did not answer within its process timeout; whether the request took effect is unknown."""


class JobRefused(DemoError):
    """The cluster changed what the run's Job runs, or gave it to another controller: the run deletes
    its Job and stops, since what it would measure is not what it asked for."""

    def __init__(self, what: str) -> None:
        super().__init__(what, EXIT_CLUSTER)
        self.what = what


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
    worker_file: Optional[str] = None  # --worker's file name (never its path); None: the built-in worker
    tasks: Optional[Tuple[JsonObject, ...]] = None  # --tasks: one per episode, in index order
    max_failed_episodes: int = 0  # --max-failed-episodes
    infra_retries: int = 0  # --infra-retries: attempts of an episode lost to the infrastructure, beyond the first
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES  # --max-artifact-bytes: per episode
    kubelet_metrics: bool = False  # read the kubelet's runtime histograms (needs get nodes/proxy)
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
        return self.tasks is not None or self.max_failed_episodes > 0 or self.infra_retries > 0

    @property
    def given_image(self) -> str:
        """The image before any digest is resolved: --pin-image's digest when given, else --image."""
        return self.pin_image or self.image

    @property
    def client_wait_seconds(self) -> int:
        return self.deadline_seconds + CLIENT_GRACE_SECONDS

    def round_dir(self, round_number: int) -> Path:
        return self.output if self.rounds == 1 else self.output / f"round-{round_number}"


@dataclasses.dataclass
class JobReceipt:
    name: str
    uid: Optional[str] = None  # None until the create answered


class ReceiptJob(TypedDict):
    name: str
    uid: Optional[str]  # None until the create answered


class _ReceiptFile(TypedDict):  # receipt.json, as Receipt.to_json writes it
    context: str
    server: Optional[str]
    namespace: str
    run_id: str
    kubeconfig: Optional[str]
    kubectl: Optional[str]
    created_at: Optional[float]
    tool_version: Optional[str]
    jobs: List[ReceiptJob]


class ReceiptFile(_ReceiptFile, total=False):
    uid: str  # the namespace's, once it exists (the guide's key)
    job_uid: str  # the guide's key: the one Job's UID


@dataclasses.dataclass
class Receipt:
    """receipt.json: everything cleanup needs to reach the same cluster and prove ownership.

    Written before the first mutation and rewritten as soon as each UID is known. Receipts of
    the guide's script (context, namespace, uid, run_id, job_uid) load too."""

    context: str
    namespace: str
    run_id: str
    server: Optional[str] = None
    kubeconfig: Optional[str] = None
    kubectl: Optional[str] = None
    created_at: Optional[float] = None
    tool_version: Optional[str] = None
    namespace_uid: Optional[str] = None  # "uid" on disk, the guide's key
    jobs: List[JobReceipt] = dataclasses.field(default_factory=list)
    guide_job_uid: Optional[str] = None  # "job_uid" of a receipt without a jobs list

    def to_json(self) -> ReceiptFile:
        data: ReceiptFile = {
            "context": self.context,
            "server": self.server,
            "namespace": self.namespace,
            "run_id": self.run_id,
            "kubeconfig": self.kubeconfig,
            "kubectl": self.kubectl,
            "created_at": self.created_at,
            "tool_version": self.tool_version,
            "jobs": [{"name": job.name, "uid": job.uid} for job in self.jobs],
        }
        if self.namespace_uid is not None:
            data["uid"] = self.namespace_uid
        if len(self.jobs) == 1 and self.jobs[0].uid:
            data["job_uid"] = self.jobs[0].uid  # the guide's key, kept for older tooling
        elif self.guide_job_uid:
            data["job_uid"] = self.guide_job_uid
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> Receipt:
        """A receipt read back; a malformed one is bad input, named with the file to inspect."""
        if not isinstance(data, dict) or not all(
            isinstance(data.get(key), str) for key in ("context", "namespace", "run_id")
        ):
            raise DemoError(f"the receipt {where} lacks context, namespace or run_id; inspect the file", EXIT_USAGE)
        jobs = data.get("jobs") or []
        if not isinstance(jobs, list) or not all(
            isinstance(job, dict) and isinstance(job.get("name"), str) and isinstance(job.get("uid"), (str, type(None)))
            for job in jobs
        ):
            raise DemoError(f"the receipt {where} has a malformed 'jobs' list; inspect the file", EXIT_USAGE)

        def text(key: str) -> Optional[str]:
            value = data.get(key)
            return value if isinstance(value, str) and value else None

        created_at = data.get("created_at")
        if created_at is not None:  # a number of seconds a float holds, or none: it is written back as JSON
            try:
                created_at = float(created_at) if type(created_at) in (int, float) else math.nan
            except OverflowError:
                created_at = math.nan
            if not math.isfinite(created_at):
                raise DemoError(
                    f"the receipt {where} has a created_at that is not a number of seconds; inspect the file",
                    EXIT_USAGE,
                )
        return cls(
            context=data["context"],
            namespace=data["namespace"],
            run_id=data["run_id"],
            server=text("server"),
            kubeconfig=text("kubeconfig"),
            kubectl=text("kubectl"),
            created_at=created_at,
            tool_version=text("tool_version"),
            namespace_uid=text("uid"),
            jobs=[JobReceipt(job["name"], job.get("uid")) for job in jobs],
            guide_job_uid=None if jobs else text("job_uid"),
        )


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
    events: List[KubeObject] = dataclasses.field(default_factory=list)  # the namespace's, same listing
    infra_retries: int = 0  # --infra-retries K: an index may have up to K pods lost before its last
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES


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
    """What a run may still spend on what pods print, shared by every thread that reads logs:
    bytes of <pod>.log text on disk (LOG_DIR_BUDGET) and bytes of kept event lines in memory
    (KEPT_EVENT_BYTES_LIMIT)."""

    disk: int = LOG_DIR_BUDGET
    memory: int = KEPT_EVENT_BYTES_LIMIT
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
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


class PodRow(PodArtifacts):  # one validated episode's figures: a row of results.json's `pods`
    pod: str
    node: Optional[str]
    image_id: Optional[str]
    reward: float  # as the worker printed it: the built-in task's integer 1 stays an integer
    pod_to_ready_seconds: float
    batch_to_ready_seconds: float
    batch_to_reward_seconds: float
    pod_to_scheduled_seconds: Optional[float]
    pod_to_container_started_seconds: Optional[float]
    python_import_seconds: Optional[float]
    import_to_ready_seconds: Optional[float]
    ready_to_reward_seconds: float
    reward_to_finished_seconds: Optional[float]
    pod_observed_to_ready_seconds: Optional[float]
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
    pod_to_process_start_seconds: Optional[float]
    pod_to_kernel_boot_seconds: Optional[float]
    kernel_boot_to_process_start_seconds: Optional[float]
    interpreter_start_seconds: Optional[float]
    image_pull: ImagePull
    container_runtime: Optional[str]  # the CRI runtime's name in containerID: containerd, cri-o, ...
    log_notes: List[str]  # how its events were read, when not plainly (a message cut at the front, a rotated log)
    attempts: int  # pods that ran the episode: 1, plus one for each lost to the infrastructure (--infra-retries)
    lost_attempts: List[LostAttempt]  # the pods before its last, in creation order
    retry_seconds: float  # first attempt's pod created -> last attempt's pod created (0 with one attempt)


class EpisodeRow(PodRow, total=False):  # a row as analysed; pod_row leaves its info to rewards.jsonl
    info: JsonObject  # the reward event's other fields: untrusted, possibly large


class PhaseStats(TypedDict):
    samples: int
    p50: float
    p95: float
    max: float


class FailedEpisode(TypedDict):  # set aside under --max-failed-episodes
    pod: str
    index: Optional[int]
    task_id: Any
    round: int
    job: str
    cause: str
    attempts: int  # as in pods[]: its last pod's attempt
    lost_attempts: List[LostAttempt]


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


class RoundResult(
    BatchFigures, JobTimes, FirstReward, LogFigures
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
class Results(BatchFigures, JobTimes, FirstReward, LogFigures, PreparedImage, KubeletFigures, AutoParallelism):
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


class RewardLine(TypedDict):  # rewards.jsonl: a failed episode has reward and info None, and its failure
    round: int
    index: Optional[int]
    task_id: Any
    pod: str
    reward: Optional[float]
    info: Optional[JsonObject]
    failure: Optional[str]
    known_at: float  # client wall clock, epoch seconds: when the tool knew this verdict, just before writing it
    retracted: bool  # a later check rejected this pod's earlier reward line: `failure` says which
    attempts: int  # as in results.json's pods[]: 1, plus the episode's pods lost to the infrastructure before it
    lost_attempts: List[LostAttempt]
    artifacts: Optional[List[ArtifactEntry]]  # the reward event's manifest, sorted by name; None for a failure


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
    values: List[Optional[float]]
    ratios: List[Optional[float]]


class StartedRound(TypedDict):  # a round that started, as it was left on disk (for JUnit)
    round: int
    job: str
    pods: Optional[List[KubeObject]]
    job_object: Optional[KubeObject]


class JUnitCase(TypedDict):
    classname: str
    name: str
    time: float
    outcome: str  # "passed", "failure", "error" or "skipped"
    message: str
    text: str


class JUnitSuite(TypedDict):
    round: Optional[int]
    job: Optional[str]
    time: float
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


# Pure core: time, numbers, JSON ###############################################
# Timestamps, percentiles, quantities and JSON read strictly; no I/O from here to the timeline
# picture. Uses the constants.


def parse_timestamp(text: str) -> float:
    """Kubernetes RFC 3339 time (usually whole seconds, 'Z') to epoch seconds."""
    match = re.match(_RFC3339, text.strip())
    if not match:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction = float(match.group(7)) if match.group(7) else 0.0
    zone = match.group(8)
    offset = 0
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    moment = datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.timezone.utc)
    return moment.timestamp() + fraction - offset


def optional_timestamp(text: Optional[str]) -> Optional[float]:
    return parse_timestamp(text) if text else None


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks, exactly as the guide's script computes it."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    index = (len(ordered) - 1) * q
    low, high = math.floor(index), math.ceil(index)
    return ordered[low] + (ordered[high] - ordered[low]) * (index - low)


def summarise(values: Iterable[Optional[float]]) -> Optional[PhaseStats]:
    """p50/p95/max of the known values; None when no episode has the figure."""
    known = [value for value in values if value is not None]
    if not known:
        return None
    return {"samples": len(known), "p50": percentile(known, 0.5), "p95": percentile(known, 0.95), "max": max(known)}


def difference(later: Optional[float], earlier: Optional[float]) -> Optional[float]:
    if later is None or earlier is None:
        return None
    return later - earlier


def max_known(values: Iterable[Optional[float]]) -> Optional[float]:
    """The largest of the values that are known; None when none is."""
    return max((value for value in values if value is not None), default=None)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent as a float, refused where a float cannot hold it
    (1e400 would be read as infinity, which no JSON file can carry on)."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:40]} is beyond the range of a double")
    return number


def finite_number(value: Any) -> Optional[float]:
    """A finite JSON number as a float, else None: never a boolean, never an overflow."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def json_number(value: object) -> Optional[float]:
    """A JSON number as it is (an integer stays one), else None: never a boolean."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def json_stat(stats: Optional[Mapping[str, object]], name: str) -> Optional[float]:
    """One number of a record (a phase's p50, ...), or None when the record or the number is absent."""
    return json_number(stats.get(name)) if stats else None


def is_int(value: Any, expected: Optional[int] = None) -> bool:
    """An integer exactly (a JSON true or 1.0 is not one), equal to expected when given."""
    return type(value) is int and (expected is None or value == expected)


def json_memory(value: Any) -> int:
    """About how many bytes of memory a parsed JSON value takes: what a pod's short text can
    grow into once parsed (`[[]]` nested in a list takes about 30 times its bytes)."""
    total, pending = 0, [value]
    while pending:  # a loop, not recursion: the value may be nested as deeply as the parser allows
        item = pending.pop()
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            pending += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            pending += item
    return total


def short_repr(value: Any, limit: int = 60) -> str:
    """A pod's value for a message: repr-escaped (no control character survives), and short."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_kind(value: Any) -> str:
    kinds = ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "a list"), (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


@functools.cache
def schema_shape(schema: Any) -> Tuple[str, Any]:
    """What a schema type asks of a JSON value, worked out once per type: ("any", None),
    ("optional", X), ("record", (fields, required keys)) for a TypedDict, ("list", X),
    ("dict", X), or the scalar's name ("int", "float", "str", "bool")."""
    if schema is Any:
        return "any", None
    origin, args = typing.get_origin(schema), typing.get_args(schema)
    if origin is typing.Union:  # Optional[X], the schema's only union
        return "optional", next(arg for arg in args if arg is not type(None))
    if hasattr(schema, "__required_keys__"):
        return "record", (typing.get_type_hints(schema), schema.__required_keys__)
    if origin in (list, dict):
        return origin.__name__, args[-1]
    return schema.__name__, None


def schema_problem(value: Any, schema: Any) -> str:
    """Where JSON read back departs from its record type (a TypedDict above), "" where it does not:
    the first missing key or value of the wrong type, by its path (pods[3].image_pull.state), so a
    hand-edited or foreign file is named, never a traceback. Keys the schema does not know are
    left alone, for they are never read."""
    problem = _departure(value, schema)
    return "" if problem is None else f"{problem[0] or 'the top level'} {problem[1]}"


def _departure(value: Any, schema: Any) -> Optional[Tuple[str, str]]:
    """(path, what is wrong there) of the first departure; the path is built only then."""
    shape, inner = schema_shape(schema)
    if shape == "any" or (shape == "optional" and value is None):
        return None
    if shape == "optional":
        return _departure(value, inner)
    if shape in ("record", "dict", "list") and not isinstance(value, list if shape == "list" else dict):
        return "", f"is {json_kind(value)}, not {'a list' if shape == 'list' else 'an object'}"
    if shape == "record":
        fields, required = inner
        for name, kind in fields.items():
            problem = _departure(value[name], kind) if name in value else None
            if problem is None and name not in value and name in required:
                problem = "", "is missing"
            if problem is not None:
                return _within(name, problem)
        return None
    if shape in ("list", "dict"):
        for name, item in enumerate(value) if shape == "list" else value.items():
            problem = _departure(item, inner)
            if problem is not None:
                return _within(f"[{name if shape == 'list' else short_repr(name)}]", problem)
        return None
    if shape == "float":
        fits = finite_number(value) is not None
    elif shape == "int" and is_int(value) and finite_number(value) is None:  # figures are computed from it
        return "", "is an integer beyond a float's range"
    else:
        fits = is_int(value) if shape == "int" else type(value).__name__ == shape  # str, bool
    if fits:
        return None
    expected = {"int": "an integer", "float": "a finite number", "str": "a string", "bool": "true or false"}[shape]
    return "", f"is {json_kind(value)}, not {expected}"


def _within(segment: str, problem: Tuple[str, str]) -> Tuple[str, str]:
    path, text = problem
    return segment + ("." if path[:1] not in ("", "[") else "") + path, text


def parse_quantity(text: str) -> float:
    """A Kubernetes resource quantity ('250m', '768Mi', '64') as a plain number."""
    match = re.match(_QUANTITY, str(text).strip())
    if not match or match.group(2) not in _QUANTITY_SUFFIXES:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(match.group(1)) * _QUANTITY_SUFFIXES[match.group(2)]


def parse_json_documents(text: str) -> List[KubeObject]:
    """Objects printed one after another (as `kubectl create -o json` does), Lists flattened."""
    decoder = json.JSONDecoder()
    documents: List[KubeObject] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return documents
        document, position = decoder.raw_decode(text, position)
        items = document.get("items") if isinstance(document, dict) and document.get("kind") == "List" else [document]
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ValueError("expected JSON objects")
        documents.extend(items)


def file_fingerprint() -> str:
    """A short hash of this very file, so every copy of the tool is identifiable."""
    try:
        import hashlib  # noqa: PLC0415 - only --version and results need it; keeps --help fast

        return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    except OSError:
        return "unknown"


def tool_version() -> str:
    """The version results, receipts and reports record: the release and this file's hash."""
    return f"{__version__}+{file_fingerprint()}"


# Pure core: manifests #########################################################
# The objects a run creates (namespace, ConfigMap, Job) and the inputs they carry (worker, tasks),
# checked. Uses the sections above.


def new_run_id() -> str:
    """12 random hex digits: the run's identity in its namespace name and labels."""
    return os.urandom(6).hex()


def job_name_for(round_number: int, rounds: int) -> str:
    return JOB_NAME if rounds == 1 else f"{JOB_NAME}-{round_number}"


def namespace_manifest(namespace: str, run_id: str) -> KubeObject:
    """The run's own namespace; the restricted Pod Security level makes the cluster itself
    guarantee that episodes stay unprivileged."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {
                RUN_LABEL: run_id,
                "app.kubernetes.io/managed-by": APP_LABEL_VALUE,
                PSA_ENFORCE_LABEL: "restricted",
            },
        },
    }


def configmap_manifest(
    namespace: str, run_id: str, worker_source: str, tasks: Optional[Sequence[JsonObject]] = None
) -> KubeObject:
    """The worker (the built-in one unless --worker) and, with --tasks, every task: one object."""
    manifest: KubeObject = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP_NAME, "namespace": namespace, "labels": {RUN_LABEL: run_id}},
        "data": {"episode.py": worker_source},
    }
    if tasks is not None:
        manifest["data"][TASKS_KEY] = tasks_text(tasks)
    return manifest


def tasks_text(tasks: Sequence[JsonObject]) -> str:
    """/demo/tasks.jsonl: line i (from 0) is index i's task, re-serialised as one ASCII line."""
    return "".join(json.dumps(task, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n" for task in tasks)


def utf8_text(data: bytes, what: str) -> str:
    """An input file's bytes as UTF-8 text; else bad input, naming the first line that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DemoError(f"{what} line {line} is not UTF-8", EXIT_USAGE) from None


def parse_tasks(data: bytes, where: str) -> List[JsonObject]:
    """A --tasks file: one JSON object per line, nothing else; the error names the line."""
    lines = utf8_text(data, f"--tasks {where}").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    if not lines:
        raise DemoError(f"--tasks {where} is empty; it needs one JSON object per line, one per episode", EXIT_USAGE)
    tasks = []
    for number, line in enumerate(lines, 1):
        try:
            task = json.loads(line, parse_constant=_reject_constant, parse_float=_finite_float)
        except RecursionError:
            raise DemoError(f"--tasks {where} line {number} is nested too deeply", EXIT_USAGE) from None
        except ValueError as error:
            detail = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
            raise DemoError(
                f"--tasks {where} line {number} is not JSON ({detail[:120]}); the file needs one JSON object per line",
                EXIT_USAGE,
            ) from None
        if not isinstance(task, dict):
            raise DemoError(
                f"--tasks {where} line {number} is a JSON {type(task).__name__}, not an object; "
                "the file needs one JSON object per line",
                EXIT_USAGE,
            )
        tasks.append(task)
    return tasks


def task_id_of(task: Optional[JsonObject], index: int) -> Any:
    return task["id"] if task is not None and "id" in task else index


def check_worker_source(data: bytes, where: str) -> str:
    """A --worker file's text, once it decodes as UTF-8 and compiles as Python. It is compiled from
    its bytes, as Python reads a script (a UTF-8 BOM and a coding declaration count), and kept as
    it is, a BOM included, for the pod's Python to read the same way. A file that Python could not
    compile (a NUL byte, nesting deeper than its parser or compiler goes) is bad input, exit 2."""
    source = utf8_text(data, f"--worker {where}")
    nul = data.find(b"\0")
    if nul >= 0:
        line = data[:nul].count(b"\n") + 1
        raise DemoError(f"--worker {where} line {line} has a NUL byte, which Python refuses in source code", EXIT_USAGE)
    try:
        compile(data, where, "exec", dont_inherit=True)
    except SyntaxError as error:
        at = f" line {error.lineno}" if error.lineno else ""
        raise DemoError(f"--worker {where}{at} does not compile as Python: {error.msg}", EXIT_USAGE) from None
    except (RecursionError, MemoryError) as error:  # the parser's or the compiler's stack, by version
        raise DemoError(
            f"--worker {where} is nested too deeply for Python to compile ({type(error).__name__}); "
            "the pod's Python would refuse it too",
            EXIT_USAGE,
        ) from None
    except ValueError as error:
        raise DemoError(f"--worker {where} does not compile as Python: {error}", EXIT_USAGE) from None
    return source


def configmap_size_problem(manifest: KubeObject) -> str:
    """Why the ConfigMap would be refused for its size, or empty: its JSON must stay under the
    API server's 1 MiB object limit (metadata the server adds comes on top, so stay well below)."""
    size = len(json.dumps(manifest, separators=(",", ":")).encode("utf-8"))
    if size < CONFIGMAP_OBJECT_LIMIT:
        return ""
    return (
        f"the ConfigMap with the worker and the tasks would be {size:,} bytes as JSON, over the API server's "
        f"1 MiB ({CONFIGMAP_OBJECT_LIMIT:,} bytes) object size limit for a ConfigMap; shorten the tasks "
        "(put large inputs in an image or object storage and reference them)"
    )


def job_manifest(
    *,
    name: str,
    namespace: str,
    run_id: str,
    count: int,
    parallelism: int,
    image: str,
    runtime: Optional[str],
    deadline_seconds: int,
    indexed: bool = False,
    max_failed_episodes: int = 0,
    infra_retries: int = 0,
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
) -> KubeObject:
    """The guide's Job: one pod per episode, no retries, unprivileged, bounded in time.

    Its worker is told where to write its artifacts (ARTIFACTS_ENV, in the episode's emptyDir)
    and their budget (MAX_ARTIFACT_BYTES_ENV).

    Indexed (with --tasks, --max-failed-episodes or --infra-retries), each pod's completion index
    picks its task. With --max-failed-episodes K, a failed index is never retried
    (backoffLimitPerIndex 0) and the others go on until more than K failed (maxFailedIndexes, at
    most N); backoffLimit is then left out, since it counts every failure of the Job. With
    --infra-retries R, an index whose pod was lost to the infrastructure runs again up to R times
    (backoffLimitPerIndex R, podFailurePolicy: see POD_FAILURE_POLICY), and one whose worker
    failed never does."""
    pod_spec: KubeObject = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": True},
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python", "-B", "/demo/episode.py"],
                "env": [
                    {"name": "EPISODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": ARTIFACTS_ENV, "value": ARTIFACTS_DIR},
                    {"name": MAX_ARTIFACT_BYTES_ENV, "value": str(max_artifact_bytes)},
                ],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "resources": {"requests": dict(POD_REQUESTS), "limits": dict(POD_LIMITS)},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [
                    {"name": "script", "mountPath": "/demo", "readOnly": True},
                    {"name": "workspace", "mountPath": "/workspace"},
                ],
            }
        ],
        "volumes": [{"name": "script", "configMap": {"name": CONFIGMAP_NAME}}, {"name": "workspace", "emptyDir": {}}],
    }
    if runtime is not None:
        pod_spec["runtimeClassName"] = runtime
    manifest: KubeObject = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {RUN_LABEL: run_id, "app": APP_LABEL_VALUE}},
        "spec": {
            "completions": count,
            "parallelism": parallelism,
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_seconds,
            "template": {"metadata": {"labels": {"app": APP_LABEL_VALUE, RUN_LABEL: run_id}}, "spec": pod_spec},
        },
    }
    spec = manifest["spec"]
    if indexed or max_failed_episodes > 0 or infra_retries > 0:
        spec["completionMode"] = "Indexed"
    if max_failed_episodes > 0:
        del spec["backoffLimit"]
        spec.update(backoffLimitPerIndex=0, maxFailedIndexes=min(max_failed_episodes, count))
    if infra_retries > 0:
        spec.pop("backoffLimit", None)
        spec.update(backoffLimitPerIndex=infra_retries, podFailurePolicy=pod_failure_policy(max_failed_episodes > 0))
    return manifest


def pod_failure_policy(fail_index: bool) -> KubeObject:
    """--infra-retries' rules, first match first: a pod with DisruptionTarget counts against its
    index's backoffLimitPerIndex (so it is retried, a bounded number of times); any non-zero exit
    code of the episode container fails the Job, or with --max-failed-episodes only its index."""
    return {
        "rules": [
            {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {
                "action": "FailIndex" if fail_index else "FailJob",
                "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "NotIn", "values": [0]},
            },
        ]
    }


def job_parallelism(settings: RunSettings, capacity: Optional[int]) -> int:
    """The Job's parallelism: the settings', or with --parallelism auto the nodes' room (`capacity`,
    as the preflight counted it), at most the count."""
    return settings.parallelism if capacity is None else min(capacity, settings.count)


def round_job_manifest(
    settings: RunSettings, name: str, namespace: str, run_id: str, image: str, parallelism: Optional[int] = None
) -> KubeObject:
    """A measured round's Job: the settings' episodes, running `image` (the pinned digest, if
    any), `parallelism` at once (--parallelism auto's choice; else the settings').

    Always Indexed, whatever the flags: each pod then carries its completion index, as a label
    from Kubernetes 1.28, so the logs of a large round are read by sets of indexes, one process
    per LOG_SELECTOR_PODS pods (read_logs), not one per pod. The pods run as in the guide's
    NonIndexed Job (same template, same backoffLimit 0); the episodes are numbered by the index
    only where it picks the task (RunSettings.indexed)."""
    return job_manifest(
        name=name,
        namespace=namespace,
        run_id=run_id,
        count=settings.count,
        parallelism=settings.parallelism if parallelism is None else parallelism,
        image=image,
        runtime=settings.runtime,
        deadline_seconds=settings.deadline_seconds,
        indexed=True,
        max_failed_episodes=settings.max_failed_episodes,
        infra_retries=settings.infra_retries,
        max_artifact_bytes=settings.max_artifact_bytes,
    )


def one_episode_job_manifest(settings: RunSettings, name: str, namespace: str, run_id: str) -> KubeObject:
    """A Job of one episode (a warm-up or the probe), without tasks, running the image as given, before
    any digest is resolved."""
    one_episode = dataclasses.replace(
        settings, count=1, parallelism=1, tasks=None, max_failed_episodes=0, infra_retries=0
    )
    return round_job_manifest(one_episode, name, namespace, run_id, settings.given_image)


_UNKNOWN_FIELD = r'unknown field "([^"]+)"'


def strict_refusal(stderr: str, where: str, infra_retries: bool = False) -> Optional[str]:
    """The one line for a create that strict validation refused because the API server does not
    know a field the tool set (`strict decoding error: unknown field "spec.backoffLimitPerIndex"`:
    a Kubernetes 1.27 API server): which Kubernetes version it needs; None for any other failure.
    `infra_retries`: --infra-retries set the per-index fields (with or without --max-failed-episodes)."""
    if "strict decoding error" not in stderr:
        return None
    fields = sorted(set(re.findall(_UNKNOWN_FIELD, stderr)))
    known = [field for field in fields if field in JOB_FIELD_NEEDS]
    if not known:
        return None
    needs, flags, instead = JOB_FIELD_NEEDS[known[0]]
    if infra_retries and flags == "--max-failed-episodes":
        flags, instead = "--infra-retries (and --max-failed-episodes, if given)", INFRA_RETRIES_INSTEAD
    these = "these fields, set for {}, need" if len(fields) > 1 else "this field, set for {}, needs"
    return (
        f"the cluster's API server does not know {', '.join(fields)}, so it refused Job {where}; "
        f"{these.format(flags)} {needs}; nothing of this Job was created{instead}"
    )


def required_uid(obj: KubeObject, what: str) -> str:
    """The object's metadata.uid; the tool proves ownership with it, so a missing one is an error."""
    uid = (obj.get("metadata") or {}).get("uid") if isinstance(obj, dict) else None
    if not isinstance(uid, str) or not uid:
        raise DemoError(
            f"kubectl returned {what} without metadata.uid; inspect the API server's response", EXIT_CLUSTER
        )
    return uid


def pod_selector(job: KubeObject) -> str:
    """The label selector of the Job's own pods: its UID label, never its name alone."""
    match_labels = ((job.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    uid = required_uid(job, "a Job")
    for label in (UID_LABEL, LEGACY_UID_LABEL):
        if match_labels.get(label) == uid:
            return f"{label}={uid}"
    return f"{UID_LABEL}={uid}"


def pod_belongs_to(pod: KubeObject, job_uid: str) -> bool:
    labels = pod.get("metadata", {}).get("labels", {})
    return job_uid in (labels.get(UID_LABEL), labels.get(LEGACY_UID_LABEL))


# Pure core: what the cluster reports ##########################################
# Conditions, pod failures, indexes and sightings, read out of the API server's objects. Uses
# the sections above.


def creation_time(obj: KubeObject, what: str) -> float:
    """An object's creationTimestamp as epoch seconds; unreadable means the cluster's answer is wrong."""
    text = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return parse_timestamp(str(text))
    except ValueError:
        raise DemoError(f"{what} has no readable creationTimestamp ({text!r})", EXIT_CLUSTER) from None


def _container_status(pod: KubeObject) -> KubeObject:
    for status in pod.get("status", {}).get("containerStatuses", []) or []:
        if status.get("name") == CONTAINER_NAME:
            return dict(status)
    return {}


def container_runtime_name(container_status: KubeObject) -> Optional[str]:
    """The CRI runtime that ran a container, as the kubelet names it in `containerID`
    (`<runtime>://<id>`: kubelet/container/runtime.go ContainerID.String, the type being the
    runtime's own RuntimeName from its Version call): containerd, cri-o, ... (None if absent)."""
    match = re.match(r"^([a-z0-9][a-z0-9._-]{0,62})://", str(container_status.get("containerID") or ""))
    return match.group(1) if match else None


def _true_condition(obj: KubeObject, types: Tuple[str, ...]) -> KubeObject:
    """The first of the object's conditions that is True and of one of these types, or {}."""
    for condition in obj.get("status", {}).get("conditions", []) or []:
        if condition.get("type") in types and condition.get("status") == "True":
            return dict(condition)
    return {}


def _condition_time(obj: KubeObject, condition_type: str) -> Optional[float]:
    return optional_timestamp(_true_condition(obj, (condition_type,)).get("lastTransitionTime"))


# The job controller's decision comes before its terminal condition: since Kubernetes 1.31 it
# writes SuccessCriteriaMet or FailureTarget first, and Complete or Failed only once every pod has
# terminated (job_controller.go, delayTerminalCondition and enactJobFinished; kubernetes/kubernetes
# #125510), so a pod that ignores SIGTERM holds Failed back by its whole grace period. The first of
# the two is final: the tool decides on it.
SUCCESS_CONDITIONS = ("Complete", "SuccessCriteriaMet")
FAILURE_CONDITIONS = ("Failed", "FailureTarget")


def job_condition(job: KubeObject) -> Optional[str]:
    """The job controller's decision, "Complete" or "Failed" (see SUCCESS_CONDITIONS); None before it."""
    condition = _true_condition(job, SUCCESS_CONDITIONS + FAILURE_CONDITIONS)
    if not condition:
        return None
    return "Complete" if condition["type"] in SUCCESS_CONDITIONS else "Failed"


def failed_condition_text(job: KubeObject) -> str:
    """The Job's Failed (or FailureTarget) condition for a sentence: its reason and message."""
    condition = _true_condition(job, FAILURE_CONDITIONS)
    if not condition:
        return "no Failed condition"
    reason = condition.get("reason") or "unknown reason"
    return f"{reason}: {condition['message']}" if condition.get("message") else str(reason)


def failed_condition_reason(job: KubeObject) -> Optional[str]:
    """The Job's Failed (or FailureTarget) condition's reason alone, to decide on (e.g.
    FailedIndexes); None without one."""
    condition = _true_condition(job, FAILURE_CONDITIONS)
    if not condition:
        return None
    return condition["reason"] if isinstance(condition.get("reason"), str) else ""


# Queues. Kueue's webhook creates a Job suspended (spec.suspend) and its controller resumes it once
# the Job's Workload is admitted, perhaps never (Kueue docs, "Run a Kubernetes Job"; "Troubleshooting
# Jobs"); the job controller then writes the Suspended condition False (reason JobResumed) and sets
# startTime anew, from which activeDeadlineSeconds counts (job_controller.go, syncJob). MultiKueue
# hands the Job to another controller through spec.managedBy (GA in 1.35), and the job controller
# leaves a Job managed by another alone. A mutating webhook may add a sidecar or change what a
# container runs.
JOB_CONTROLLER_NAME = "kubernetes.io/job-controller"  # spec.managedBy of a Job the job controller runs


def job_suspended(job: KubeObject) -> bool:
    return (job.get("spec") or {}).get("suspend") is True


def job_admitted_at(job: KubeObject) -> Optional[float]:
    """When the job controller let a suspended Job run (its clock, whole seconds): the Suspended
    condition's turn to False, else the startTime it set on resuming; None while it says neither."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Suspended" and condition.get("status") == "False":
            return optional_timestamp(condition.get("lastTransitionTime"))
    return None if job_suspended(job) else optional_timestamp((job.get("status") or {}).get("startTime"))


def foreign_manager(job: KubeObject) -> Optional[str]:
    """The controller named by the Job's spec.managedBy when it is not the job controller (MultiKueue's
    kueue.x-k8s.io/multikueue): that one runs the Job, elsewhere, and the tool cannot measure it."""
    managed_by = (job.get("spec") or {}).get("managedBy")
    return str(managed_by) if managed_by not in (None, "", JOB_CONTROLLER_NAME) else None


# Fields a webhook may add to a securityContext that loosen it (any field the run set counts if changed).
_LOOSENING = {"privileged": True, "allowPrivilegeEscalation": True, "runAsUser": 0, "runAsGroup": 0}
_UNCONFINED = ("seccompProfile", "appArmorProfile")


def _security_changes(where: str, ours: Any, theirs: Any) -> List[str]:
    """What a webhook changed in a securityContext: a field the run set with another value or
    removed, or a field added that loosens it (privileged, privilege escalation, root, added
    capabilities, an unconfined profile, an unmasked /proc). A field added that only confines
    more (a RuntimeDefault seccomp profile, SELinux labels, procMount Default) is no change: managed
    clusters add them to every pod."""
    ours = dict(ours) if isinstance(ours, dict) else {}
    theirs = dict(theirs) if isinstance(theirs, dict) else {}
    changes = [
        f"{where}.{key} {short_repr(value)} became {short_repr(theirs.get(key))}"
        for key, value in ours.items()
        if theirs.get(key) != value
    ]
    added = [(key, value) for key, value in theirs.items() if key not in ours and _loosens(key, value)]
    changes += [f"{where}.{key} {short_repr(value)} was added" for key, value in added]
    return changes


def _loosens(key: str, value: Any) -> bool:
    """Whether a securityContext field the run did not set loosens it when added (see _security_changes)."""
    if key in _LOOSENING:
        wanted = _LOOSENING[key]
        return type(value) is type(wanted) and value == wanted  # True is not the user ID 1, nor 0 False
    if key == "capabilities":
        return isinstance(value, dict) and bool(value.get("add"))
    if key in _UNCONFINED:
        return isinstance(value, dict) and value.get("type") == "Unconfined"
    return key == "procMount" and value != "Default"


def template_changes(submitted: KubeObject, stored: KubeObject) -> List[str]:
    """What differs between the pod spec the run submitted and one the cluster stored (the Job's
    template, or a pod's spec) in what runs: containers added or removed (a sidecar), a container's
    image, command or args, its or the pod's securityContext loosened (_security_changes), the
    runtimeClassName. Fields the API server defaults (pull policy, termination message path, ...)
    are not compared."""
    changes = []
    for key in ("initContainers", "containers"):
        ours = {c.get("name"): c for c in submitted.get(key) or []}
        theirs = {c.get("name"): c for c in stored.get(key) or [] if isinstance(c, dict)}
        changes += [f"{key} {short_repr(name)} added" for name in theirs if name not in ours]
        changes += [f"{key} {short_repr(name)} removed" for name in ours if name not in theirs]
        for name, container in ours.items():
            other = theirs.get(name)
            if other is None:
                continue
            changes += [
                f"container {name}'s {field} {short_repr(container.get(field))} became {short_repr(other.get(field))}"
                for field in ("image", "command", "args")
                if container.get(field) != other.get(field)
            ]
            where = f"container {name}'s securityContext"
            changes += _security_changes(where, container.get("securityContext"), other.get("securityContext"))
    changes += _security_changes(
        "the pod's securityContext", submitted.get("securityContext"), stored.get("securityContext")
    )
    if submitted.get("runtimeClassName") != stored.get("runtimeClassName"):
        changes.append(
            f"runtimeClassName {short_repr(submitted.get('runtimeClassName'))} became "
            f"{short_repr(stored.get('runtimeClassName'))}"
        )
    return changes


_INDEX = r"^(0|[1-9][0-9]{0,8})$"
_INDEX_RANGE = r"^(0|[1-9][0-9]{0,8})-(0|[1-9][0-9]{0,8})$"


def parse_index_set(text: Any) -> List[int]:
    """An Indexed Job's status.failedIndexes or completedIndexes ("1,3-5"), sorted; ValueError if malformed."""
    if text is None or text == "":
        return []
    if not isinstance(text, str):
        raise ValueError(f"an index list is a string, not {short_repr(text)}")
    indexes: List[int] = []
    for part in text.split(","):
        single, span = re.match(_INDEX, part), re.match(_INDEX_RANGE, part)
        if single:
            indexes.append(int(part))
        elif span and int(span.group(1)) <= int(span.group(2)) <= int(span.group(1)) + MAX_COUNT_LARGE:
            indexes.extend(range(int(span.group(1)), int(span.group(2)) + 1))
        else:
            raise ValueError(f"{short_repr(part)} is not an index or a range of indexes")
    return sorted(set(indexes))


def pod_index(pod: KubeObject, count: int, inspect: str) -> int:
    """An Indexed Job's pod's completion index, from its annotation: a decimal in [0, count)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_ANNOTATION)
    if not isinstance(text, str) or not re.match(_INDEX, text) or not int(text) < count:
        raise EpisodeInvalid(
            str(pod["metadata"]["name"]),
            f"its {INDEX_ANNOTATION} annotation is {short_repr(text)}, not an index in 0..{count - 1}",
            inspect,
        )
    return int(text)


def _phase_failure(pod: KubeObject) -> str:
    status = pod.get("status", {})
    terminated = _container_status(pod).get("state", {}).get("terminated") or {}
    detail = f"exit code {terminated['exitCode']}" if "exitCode" in terminated else "no exit code"
    reason = status.get("reason") or terminated.get("reason")
    return f"the pod ended in phase {status.get('phase')} ({detail}{', ' + reason if reason else ''})"


def pod_failure(pod: KubeObject) -> Tuple[int, str]:
    """Why the pod cannot be a valid episode, by the first rule it breaks, with the rule's rank
    (0 evicted, 1 failed on its own, 2 deleted or replaced mid-run: a failed Job's controller
    deletes the others); (3, "") for a pod that broke none of them."""
    status, metadata = pod.get("status", {}), pod["metadata"]
    deleted = metadata.get("deletionTimestamp")
    if status.get("reason") == "Evicted":
        return 0, f"the pod was evicted ({status.get('message', 'no message')})"
    if status.get("phase") == "Failed" and not deleted:
        return 1, _phase_failure(pod)
    if deleted:
        disruption = [
            f"{c.get('reason')}: {c.get('message')}"
            for c in status.get("conditions", []) or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ]
        detail = f"; {disruption[0]}" if disruption else ""
        return 2, f"the pod was deleted mid-run (deletionTimestamp {deleted}{detail})"
    return 3, ""


def pod_count_problem(pods: List[KubeObject], count: int, inspect: str, replaced: int = 0) -> Optional[DemoError]:
    """The error when the Job's pods are not one per requested episode, else None. `pods`: each
    episode's last attempt; `replaced`: the pods lost to the infrastructure before them
    (--infra-retries), which episode_attempts accounted for one by one."""
    if len(pods) == count:
        return None
    names = ", ".join(sorted(pod["metadata"]["name"] for pod in pods)) or "none"
    besides = f" besides the {replaced} it replaced after the infrastructure lost them" if replaced else ""
    return DemoError(
        f"the Job has {len(pods)} pods{besides} but {count} episodes were requested "
        f"(pods: {names}); a pod was added, replaced or lost; inspect {inspect}",
        EXIT_EPISODE,
    )


INFRA_CAUSE_LIMIT = 300  # characters of a lost pod's condition message kept in its cause


def infra_loss(pod: KubeObject) -> str:
    """Why the infrastructure lost this failed pod, in the cluster's words: its DisruptionTarget
    condition (eviction, preemption, the taint manager or PodGC deleting it with its node: the
    condition's reason says which), its status reason Evicted (the kubelet's node-pressure
    eviction, on clusters without the condition), or the kubelet's admission refusal (a status
    reason, and no container ever ran); "" for a pod that did not fail, or failed any other way
    (its own exit code, a deletion by someone else)."""
    status = pod.get("status")
    if not isinstance(status, dict) or status.get("phase") != "Failed":
        return ""
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and (condition.get("type"), condition.get("status")) == (
            "DisruptionTarget",
            "True",
        ):
            text = f"DisruptionTarget {condition.get('reason')}: {condition.get('message')}"
            return re.sub(r"[\x00-\x1f\x7f]", "?", text[:INFRA_CAUSE_LIMIT])
    if status.get("reason") == "Evicted":
        return re.sub(r"[\x00-\x1f\x7f]", "?", f"evicted: {status.get('message', 'no message')}"[:INFRA_CAUSE_LIMIT])
    if status.get("reason") and not _container_ran(status):  # refused by the kubelet's admission
        text = f"rejected by the kubelet before any container ran ({status.get('reason')}: {status.get('message')})"
        return re.sub(r"[\x00-\x1f\x7f]", "?", text[:INFRA_CAUSE_LIMIT])
    return ""


def _container_ran(status: KubeObject) -> bool:
    """Whether any container of the pod started (running, or terminated now or before). A pod the
    kubelet refused at admission (pkg/kubelet/kubelet.go rejectPod: phase Failed, the admit
    handler's reason such as OutOfcpu, NodeAffinity or UnexpectedAdmissionError) ran none, so
    nothing of the episode's own doing failed it: retrying it cannot bias the rewards."""
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if not isinstance(container, dict):
            return True  # unreadable: not proven unstarted
        states = [container.get("state") or {}, container.get("lastState") or {}]
        if container.get("started") or any(state.get("running") or state.get("terminated") for state in states):
            return True
    return False


INDEX_FAILURE_COUNT_ANNOTATION = "batch.kubernetes.io/job-index-failure-count"  # on each pod, with backoffLimitPerIndex


def _attempt_order(pod: KubeObject) -> Tuple[int, str, str]:
    """An index's pods in the order the job controller made them: by the index's failures before
    each (the annotation it sets on every pod of a Job with backoffLimitPerIndex, job_controller.go
    addIndexFailureCountAnnotation), then creationTimestamp (whole seconds: two attempts of a
    second tie there), then name."""
    metadata = pod["metadata"]
    count = (metadata.get("annotations") or {}).get(INDEX_FAILURE_COUNT_ANNOTATION)
    failures = int(count) if isinstance(count, str) and re.fullmatch(r"[0-9]{1,6}", count) else 0
    return failures, str(metadata.get("creationTimestamp") or ""), str(metadata["name"])


def episode_attempts(
    pods: List[KubeObject], count: int, infra_retries: int, inspect: str
) -> Tuple[List[KubeObject], Dict[str, List[LostAttempt]]]:
    """--infra-retries K: each episode's last attempt (in the listing's order) and, by its pod's
    name, the pods of its completion index that the Job replaced before it. Every replaced pod
    must be one the infrastructure lost (infra_loss), at most K of them per index, all created
    no later than the last attempt; otherwise the round fails naming the pod, since a retried
    failure of the episode's own doing would bias the rewards. With K = 0, the pods as they are.

    The last attempt is the index's one pod that was not lost; when all were lost (more losses
    than K allowed), the latest of them, which analyse_round then fails with the losses' causes."""
    if not infra_retries:
        return pods, {}
    groups: Dict[int, List[KubeObject]] = {}
    for pod in pods:
        name = str(pod["metadata"]["name"])
        groups.setdefault(pod_index(pod, count, f"{inspect} ({name})"), []).append(pod)
    last: Dict[str, List[LostAttempt]] = {}
    for index, group in groups.items():
        kept = sorted((pod for pod in group if not infra_loss(pod)), key=_attempt_order)
        lost = sorted((pod for pod in group if infra_loss(pod)), key=_attempt_order)
        if len(kept) > 1:  # name one that did not succeed: the one the Job should not have replaced
            first = next((pod for pod in kept if (pod.get("status") or {}).get("phase") != "Succeeded"), kept[0])
            then = next(pod for pod in kept if pod is not first)
            rule = pod_failure(first)[1] or f"it ended in phase {(first.get('status') or {}).get('phase')}"
            raise EpisodeInvalid(
                str(first["metadata"]["name"]),
                f"{rule}, and the Job ran its index {index} again (pod {then['metadata']['name']}); only a pod lost "
                "to the infrastructure (DisruptionTarget, Evicted) may be retried, never an episode's own failure",
                inspect,
            )
        final = kept[0] if kept else lost.pop()
        late = [pod for pod in lost if _attempt_order(pod)[:2] > _attempt_order(final)[:2]]
        if late:
            raise EpisodeInvalid(
                str(late[0]["metadata"]["name"]),
                f"it was created after pod {final['metadata']['name']}, the last attempt of index {index}",
                inspect,
            )
        if len(lost) > infra_retries:
            raise EpisodeInvalid(
                str(final["metadata"]["name"]),
                f"the Job replaced {len(lost)} pods of its index {index}, more than --infra-retries {infra_retries}",
                inspect,
            )
        counted = _attempt_order(final)[0]  # the failures of the index the job controller counted before it
        if counted > len(lost):  # gone before the pod watch could show them: nothing proves them lost
            raise EpisodeInvalid(
                str(final["metadata"]["name"]),
                f"the job controller counted {counted} failed pod(s) of its index {index} before it, and the run saw "
                f"{len(lost)}: the others were gone before the pod watch could prove them lost to the infrastructure",
                inspect,
            )
        last[str(final["metadata"]["name"])] = [
            {"pod": str(pod["metadata"]["name"]), "cause": infra_loss(pod), "created_at": creation_time(pod, "a pod")}
            for pod in lost
        ]
    finals = [pod for pod in pods if str(pod["metadata"]["name"]) in last]
    return finals, last


def vanished_attempts(observation: RoundObservation, pods: List[KubeObject], job_uid: str) -> List[KubeObject]:
    """The Job's pods the watch last saw Failed and lost to the infrastructure that the listing
    no longer has: a preempted pod, or one evicted through the eviction API, is deleted, and
    goes once the job controller has counted it (its finalizer removed), so only the watch still
    knows the attempt (as it was last seen)."""
    listed = {pod["metadata"]["name"] for pod in pods}
    return [
        pod
        for name, pod in observation.last_pods.items()
        if name not in listed and pod_belongs_to(pod, job_uid) and infra_loss(pod)
    ]


def episode_failure(pod: KubeObject, lost: Sequence[LostAttempt], infra_retries: int) -> Tuple[int, str]:
    """pod_failure, told of the episode's attempts: a last attempt that the infrastructure lost
    too used up --infra-retries; one that failed otherwise says which attempt it was."""
    rank, rule = pod_failure(pod)
    if rule and infra_retries and infra_loss(pod):
        causes = "; ".join(attempt["cause"] for attempt in lost)
        rule = (
            f"{rule}, the last of its {len(lost) + 1} attempts, all lost to the infrastructure: more than "
            f"--infra-retries {infra_retries} allows{' (before: ' + causes + ')' if causes else ''}"
        )
    elif rule and lost:
        rule = f"{rule} (its attempt {len(lost) + 1}, after {len(lost)} lost to the infrastructure)"
    return rank, rule


def termination_message(pod: KubeObject) -> str:
    terminated = _container_status(pod).get("state", {}).get("terminated") or {}
    return str(terminated.get("message") or "")


def split_pods_and_events(
    items: List[KubeObject], job: Optional[KubeObject]
) -> Tuple[List[KubeObject], List[KubeObject]]:
    """From one `get pods,events` listing: the Job's pods (by its UID label, in creation order)
    and every event of the namespace."""
    uid = job["metadata"]["uid"] if job else None
    pods = [
        item
        for item in items
        if item.get("kind") == "Pod"
        and isinstance(item.get("metadata"), dict)
        and isinstance(item["metadata"].get("name"), str)
        and uid
        and pod_belongs_to(item, uid)
    ]
    pods.sort(key=lambda pod: (pod["metadata"].get("creationTimestamp", ""), pod["metadata"]["name"]))
    events = [item for item in items if item.get("kind") == "Event"]
    return pods, events


def pod_list(pods: List[KubeObject]) -> KubeObject:
    return {"apiVersion": "v1", "kind": "List", "items": pods}


def record_pod_sighting(sightings: Dict[str, Dict[str, Any]], pod: Any, wall: float) -> None:
    """Stamp a pod's first sighting and each phase's first sighting with the client's clock."""
    name = ((pod.get("metadata") or {}).get("name") if isinstance(pod, dict) else None) or ""
    if not name:
        return
    record = sightings.setdefault(name, {"first_seen_at": wall})
    phase = pod.get("status", {}).get("phase") or "Pending"
    record["phase"] = phase
    record.setdefault(phase, wall)


JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


def final_pods_from_watch(observation: RoundObservation, job_uid: str) -> Optional[List[KubeObject]]:
    """The Job's pods in their final state as the pod watch delivered them, when that provably
    is their final state; else None, and the caller lists them.

    The proof: the Job is Complete and has counted every pod (succeeded + failed equals the pods
    seen, nothing left in uncountedTerminatedPods); every pod was last seen terminal (Succeeded
    or Failed: a terminal pod's status never changes again), not being deleted, and, where the
    cluster tracks Job pods with a finalizer, with that finalizer removed (the controller's last
    write to it); no pod was deleted during the watch."""
    job = observation.job
    status = job.get("status") or {}
    if observation.condition != "Complete" or observation.pod_deleted or not observation.last_pods:
        return None
    uncounted = status.get("uncountedTerminatedPods") or {}
    if any(bool(uncounted.get(key)) for key in ("succeeded", "failed")):
        return None
    counts: List[Any] = [status.get("succeeded"), status.get("failed")]
    counted = sum(value for value in counts if is_int(value))
    pods = list(observation.last_pods.values())
    if counted != len(pods):
        return None
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if not pod_belongs_to(pod, job_uid) or metadata.get("deletionTimestamp"):
            return None
        if JOB_TRACKING_FINALIZER in (metadata.get("finalizers") or []):
            return None
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            return None
    pods.sort(key=lambda pod: (pod["metadata"].get("creationTimestamp", ""), pod["metadata"]["name"]))
    return pods


def pod_counts(sightings: Dict[str, Dict[str, Any]], job: KubeObject) -> Dict[str, int]:
    """Progress counts from the pod watch, or from the Job's status when no pod was seen."""
    if sightings:
        phases = [record.get("phase") for record in sightings.values()]
        return {
            "created": len(sightings),
            "running": phases.count("Running"),
            "succeeded": phases.count("Succeeded"),
            "failed": phases.count("Failed"),
        }
    status = job.get("status", {})
    active, succeeded, failed = (int(status.get(key, 0) or 0) for key in ("active", "succeeded", "failed"))
    return {
        "created": active + succeeded + failed,
        "running": int(status.get("ready", 0) or 0),
        "succeeded": succeeded,
        "failed": failed,
    }


def latest_warning(events: List[KubeObject], names: Iterable[str]) -> str:
    """The newest Warning event about the Job or its pods, e.g. a FailedCreate from Pod Security
    admission, so a stuck Job's error says why; empty when there is none."""
    wanted = set(names)
    warnings = [
        event
        for event in events
        if event.get("type") == "Warning"
        and (event.get("involvedObject") or {}).get("name") in wanted
        and event.get("reason") not in ("DeadlineExceeded", "BackoffLimitExceeded")  # the outcome, not a cause
    ]
    if not warnings:
        return ""
    newest = max(warnings, key=lambda e: e.get("lastTimestamp") or e["metadata"].get("creationTimestamp") or "")
    message = " ".join(str(newest.get("message", "")).split())
    return f"; latest warning: {newest.get('reason')}: {message}"


# Pure core: logs and events ###################################################
# A pod's output (untrusted) scanned for the worker's events, line by line, bounded. Uses the
# constants, errors, records and numbers above.


def parse_event_line(text: str) -> Optional[JsonObject]:
    """One line of a pod's output: its event, None for noise, or EventParseError.

    Lines that are not JSON event objects (a warning from Python or the runtime, a structured
    log line without an "event" key) are noise; a line that mentions "event" but is broken
    (including NaN, Infinity, nesting too deep, an integer too long), or an event without a
    finite numeric time, is an error."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        event = json.loads(stripped, parse_constant=_reject_constant)
    except (RecursionError, ValueError) as error:  # JSONDecodeError, NaN or Infinity, an integer of too many digits
        if '"event"' not in stripped:
            return None
        detail = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
        detail = "nested too deeply" if isinstance(error, RecursionError) else detail[:120]
        raise EventParseError(f"is a malformed JSON event ({detail})") from None
    if not isinstance(event, dict) or "event" not in event:
        return None
    if not isinstance(event["event"], str):
        raise EventParseError("has an 'event' that is not a name")
    if finite_number(event.get("at")) is None:
        raise EventParseError(f"({short_repr(event['event'])}) has no finite numeric 'at' time")
    return event


class EventScanner:
    """Finds the worker's events in one episode's output, line by line, keeping only the first
    line of each of KEPT_EVENTS as bytes and counting the rest, so memory stays bounded whatever
    the pod prints (`budget`: the run's memory for kept lines, shared by every pod)."""

    def __init__(self, budget: Optional[LogBudgets] = None) -> None:
        self.kept: Dict[str, bytes] = {}
        self.counts: Dict[str, int] = {}
        self.budget = budget
        self.error = ""  # the first bad event line; later lines are only counted
        self.lines = 0
        self.long_lines = 0  # lines over EVENT_LINE_LIMIT, ignored as noise

    def line(self, raw: bytes) -> bool:
        """Scan one line; True when it is kept (the first of its kind of KEPT_EVENTS)."""
        self.lines += 1
        if self.error:
            return False
        if len(raw) > EVENT_LINE_LIMIT:
            self.long_lines += 1
            return False
        try:
            event = parse_event_line(raw.decode("utf-8", "replace"))
        except EventParseError as error:
            self.error = f"line {self.lines} {error}"
            return False
        if event is None:
            return False
        if sum(self.counts.values()) >= EVENTS_PER_EPISODE_LIMIT:
            self.error = f"has more than {EVENTS_PER_EPISODE_LIMIT} events"
            return False
        name = event["event"] if event["event"] in KEPT_EVENTS else "other"
        self.counts[name] = self.counts.get(name, 0) + 1
        if name == "other" or name in self.kept:
            return False
        if self.budget is not None and not self.budget.take_memory(len(raw)):
            self.error = f"line {self.lines} is past the run's {KEPT_EVENT_BYTES_LIMIT:,} bytes for kept event lines"
            return False
        self.kept[name] = bytes(raw)
        return True

    def long_line(self) -> None:
        self.lines += 1
        self.long_lines += 1

    def pod_log(self, saved_bytes: int = 0, dropped_bytes: int = 0) -> PodLog:
        return PodLog(self.kept, self.counts, self.error, self.lines, self.long_lines, saved_bytes, dropped_bytes)


def scan_text(text: str) -> PodLog:
    """A whole text's events (a termination message), read as a log is: split on newlines only,
    as kubectl splits a log, so a carriage return or U+2028 inside a line cannot start another
    event."""
    scanner = EventScanner()
    for raw in text.encode("utf-8", "surrogatepass").split(b"\n"):
        scanner.line(raw)
    return scanner.pod_log()


def logged_events(log: PodLog) -> List[JsonObject]:
    """The kept events, parsed again: each as many times as the pod printed one of its name (the
    first one's fields stand for the others, which no rule reads), ready before reward."""
    events = []
    for name in KEPT_EVENTS:
        raw = log.kept.get(name)
        event = parse_event_line(raw.decode("utf-8", "replace")) if raw is not None else None
        events += [event] * log.counts.get(name, 0) if event is not None else []
    return events


def parse_events(text: str) -> List[JsonObject]:
    """The kept events of a whole text, or EventParseError for its first bad event line."""
    log = scan_text(text)
    if log.error:
        raise EventParseError(log.error)
    return logged_events(log)


_ARTIFACT_FRAME = rb"rl-demo-artifact 1 ([0-9]{1,9}) ([0-9]{1,9}) ([0-9a-f]{64}) ([A-Za-z0-9_-]+=*) ([A-Za-z0-9+/]*=*)"


def artifact_name_problem(name: str) -> str:
    """What makes an artifact's name unsafe to save under DIR/artifacts/<pod>/ ("" if nothing):
    it must be relative, "/"-separated, without empty, `.` or `..` segments, backslashes, NUL or
    other control characters, and at most ARTIFACT_NAME_LIMIT bytes of UTF-8."""
    if not name:
        return "is empty"
    if len(name.encode("utf-8", "surrogatepass")) > ARTIFACT_NAME_LIMIT:
        return f"is longer than {ARTIFACT_NAME_LIMIT} bytes"
    if any(char < " " or "\x7f" <= char <= "\x9f" or "\ud800" <= char <= "\udfff" for char in name):
        return "has a control character"
    if name.startswith("/"):
        return "is absolute"
    if "\\" in name:
        return "has a backslash"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "has an empty, '.' or '..' segment"
    return ""


def parse_artifact_frame(raw: bytes) -> ArtifactFrame:
    """A frame line (ARTIFACT_FRAME_TAG ...), checked alone; ValueError says how it is malformed.
    Whether it fits its neighbours (order, total, hash) is ArtifactSink's to check."""
    import binascii  # noqa: PLC0415 - only a run whose pods send artifacts needs it

    match = re.fullmatch(_ARTIFACT_FRAME, raw)
    if not match:
        raise ValueError("is not a well-formed artifact frame")
    seq, total = int(match.group(1)), int(match.group(2))
    if not seq < total <= ARTIFACT_FRAMES_LIMIT:
        raise ValueError(f"says it is frame {seq} of {total} (frames count from 0, at most {ARTIFACT_FRAMES_LIMIT})")
    encoded_name, encoded_data = match.group(4), match.group(5)
    try:
        if len(encoded_name) % 4 or len(encoded_data) % 4:
            raise binascii.Error("incorrect padding")
        name_bytes = binascii.a2b_base64(encoded_name.replace(b"-", b"+").replace(b"_", b"/"))
        data = binascii.a2b_base64(encoded_data)
    except binascii.Error:
        raise ValueError("is not well-formed base64") from None
    try:
        name = name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"names an artifact that is not UTF-8 ({short_repr(name_bytes)})") from None
    problem = artifact_name_problem(name)
    if problem:
        raise ValueError(f"names an artifact {short_repr(name)} that {problem}")
    if len(data) > ARTIFACT_FRAME_DATA:
        raise ValueError(f"carries {len(data):,} bytes, more than a frame's {ARTIFACT_FRAME_DATA:,}")
    return ArtifactFrame(name, seq, total, match.group(3).decode(), data)


def declares_artifacts(message: str) -> bool:
    """Whether a termination message's reward event lists artifacts: then its pod's log must be
    read, whatever the count, for the frames travel only there."""
    log = scan_text(message)
    reward = log.kept.get("reward")
    if log.error or reward is None:
        return False
    event = parse_event_line(reward.decode("utf-8", "replace"))
    return bool(event and event.get("artifacts"))


def message_cut_at_front(message: str) -> bool:
    """Whether the kubelet may have cut the termination message's beginning: it keeps the last
    TERMINATION_MESSAGE_LIMIT bytes a container wrote (kuberuntime_container.go
    getTerminationMessage -> tail.ReadAtMost), so a message of that length may start mid-line (a
    character it cut through arrives as U+FFFD, three bytes each)."""
    return len(message.encode("utf-8", "surrogatepass")) >= TERMINATION_MESSAGE_LIMIT


def message_needs_log(message: str) -> bool:
    """A termination message that cannot carry the episode's events alone: empty (some runtimes
    never share the file), or possibly cut at the front."""
    return not message.strip() or message_cut_at_front(message)


def complete_lines(message: str) -> str:
    """A message cut at the front without its first line, which may be the end of a longer one."""
    return message.partition("\n")[2]


def comparable_events(events: List[JsonObject]) -> List[JsonObject]:
    """Events without the test output, which the termination message may have trimmed."""
    ignored = ("tests_output", "tests_output_truncated")
    return [{k: v for k, v in event.items() if k not in ignored} for event in events]


def describe_event_difference(log_events: List[JsonObject], message_events: List[JsonObject]) -> str:
    """What differs between the log's events and the termination message's, in words."""
    log_side, message_side = comparable_events(log_events), comparable_events(message_events)
    names = sorted({str(e.get("event")) for e in log_side} | {str(e.get("event")) for e in message_side})
    for name in names:
        in_log = sum(1 for e in log_side if e.get("event") == name)
        in_message = sum(1 for e in message_side if e.get("event") == name)
        if in_log != in_message:
            return f"the log has {in_log} {short_repr(name)} events, the termination message {in_message}"
    for log_event, message_event in zip(log_side, message_side):
        if log_event.get("event") != message_event.get("event"):
            return "the two report the same events in a different order"
        for key in sorted(set(log_event) | set(message_event)):
            if log_event.get(key, "(absent)") != message_event.get(key, "(absent)"):
                return (
                    f"their {short_repr(log_event.get('event'))} events differ in {short_repr(key)}: the log has "
                    f"{short_repr(log_event.get(key, '(absent)'))}, the termination message "
                    f"{short_repr(message_event.get(key, '(absent)'))}"
                )
    return "they differ"


# Pure core: sandbox clocks, image pulls, kubelet histograms ###################
# The sandbox's own start-up stamps, the kubelet's Pulled events and its runtime histograms.
# Uses the constants, errors, records and numbers above.


_GO_DURATION_PART = r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)"
_GO_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_DURATION_UNITS.update(dict.fromkeys(("\u00b5s", "\u03bcs"), 1e-6))  # Go reads micro as both µ and μ


def parse_go_duration(text: str) -> float:
    """A Go time.Duration as printed by %v ("1.5s", "734ms", "2m3.5s", "1h2m", "500µs", "12ns",
    "0s") in seconds, exactly as Go's ParseDuration reads it; ValueError for anything else."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f"not a Go duration: {text!r}")
    total, position = 0.0, 0
    while position < len(body):
        match = re.compile(_GO_DURATION_PART).match(body, position)
        if not match or match.group(1) in ("", "."):
            raise ValueError(f"not a Go duration: {text!r}")
        total += float(match.group(1)) * _GO_DURATION_UNITS[match.group(2)]
        position = match.end()
    if not math.isfinite(total):
        raise ValueError(f"not a Go duration: {text!r}")
    return -total if text[:1] == "-" else total


_GO_QUOTED = r'"(?:[^"\\]|\\.)*"'
_PULLED_CACHED = r"^Container image " + _GO_QUOTED + r" already present on machine"
_PULLED_IMAGE = (
    r"^Successfully pulled image " + _GO_QUOTED + r" in (\S+)(?: \((\S+) including waiting\))?"
    r"(?:\. Image size: [0-9]+ bytes\.)?$"
)


def involves_pod(event: KubeObject, pod: KubeObject) -> bool:
    """Whether a core/v1 Event is about this very pod (its name, and its UID when the event has one)."""
    involved = event.get("involvedObject") if isinstance(event, dict) else None
    if not isinstance(involved, dict) or involved.get("kind", "Pod") != "Pod":
        return False
    metadata = pod.get("metadata") or {}
    if involved.get("name") != metadata.get("name"):
        return False
    uid = involved.get("uid")
    return not uid or not metadata.get("uid") or uid == metadata.get("uid")


def events_by_pod(events: List[KubeObject]) -> Dict[str, List[KubeObject]]:
    grouped: Dict[str, List[KubeObject]] = {}
    for event in events:
        involved = event.get("involvedObject") if isinstance(event, dict) else None
        if (
            isinstance(involved, dict)
            and involved.get("kind", "Pod") == "Pod"
            and isinstance(involved.get("name"), str)
        ):
            grouped.setdefault(involved["name"], []).append(event)
    return grouped


def scheduled_event_time(
    events: List[KubeObject], pod: KubeObject, created_at: float, finished_at: Optional[float]
) -> Optional[float]:
    """The scheduler's `Scheduled` event time for this pod (events.k8s.io `eventTime`,
    microseconds), if it exists and falls inside the pod's life; else None."""
    times = []
    for event in events:
        if event.get("reason") != "Scheduled" or not involves_pod(event, pod):
            continue
        try:
            moment = parse_timestamp(str(event.get("eventTime")))  # a missing or malformed one is no stamp
        except ValueError:
            continue
        if created_at - 1.0 <= moment and (finished_at is None or moment <= finished_at + 1.0):
            times.append(moment)
    return min(times) if times else None


def image_pull_of(events: List[KubeObject], pod: KubeObject) -> ImagePull:
    """The episode container's image state from the kubelet's `Pulled` events: cached, pulled
    (with the pull's seconds, as the kubelet measured them), or unknown; never assumed."""
    for event in events:
        if event.get("reason") != "Pulled" or not involves_pod(event, pod):
            continue
        field_path = (event.get("involvedObject") or {}).get("fieldPath")
        if isinstance(field_path, str) and field_path and f"{{{CONTAINER_NAME}}}" not in field_path:
            continue  # another container's image
        message = str(event.get("message") or "")
        if re.match(_PULLED_CACHED, message):
            return {"state": "cached", "seconds": None}
        match = re.match(_PULLED_IMAGE, message)
        if match:
            try:
                seconds = parse_go_duration(match.group(1))
                waiting = parse_go_duration(match.group(2)) if match.group(2) else None
            except ValueError:
                continue
            if seconds < 0 or (waiting is not None and waiting < 0):
                continue
            return {"state": "pulled", "seconds": seconds, "seconds_including_waiting": waiting}
    return {"state": "unknown", "seconds": None}


def image_cache_counts(rows: Sequence[PodRow]) -> ImageCache:
    states = [row["image_pull"]["state"] for row in rows]
    pulls = states.count("cached"), states.count("pulled")
    return {"cached": pulls[0], "pulled": pulls[1], "unknown": len(states) - sum(pulls)}


def cache_state_of(counts: ImageCache) -> str:
    """The guide's `cache_state`, measured: "cached" or "pulled" when every episode says so,
    "mixed" when both occurred, else "unknown" (an episode without a Pulled event proves nothing)."""
    if counts.get("cached") and counts.get("pulled"):
        return "mixed"
    known = [state for state in ("cached", "pulled") if counts.get(state)]
    if len(known) == 1 and not counts.get("unknown"):
        return known[0]
    return "unknown"


@dataclasses.dataclass(frozen=True)
class SandboxClocks:
    """What a ready event says about the sandbox's own start, bounded to the pod's life."""

    process_started_at: Optional[float] = None
    first_statement_at: Optional[float] = None
    imports_done_at: Optional[float] = None
    kernel_booted_at: Optional[float] = None  # a sandbox kernel's only
    kernel: Optional[str] = None
    note: Optional[str] = None  # why the /proc figures are unknown although the sandbox gave them


# Why a sandbox's boot clock (/proc) and its wall clock cannot both be right: LXCFS and Sysbox make
# /proc/uptime the container's age but leave /proc/self/stat's start on the host's boot clock
# (lxc/lxcfs proc_fuse.c proc_uptime_read); a sandbox restored from a snapshot keeps its old boot.
_CLOCKS_DISAGREE = (
    "the sandbox's boot clock and its wall clock disagree (a virtualised /proc/uptime, as LXCFS and Sysbox "
    "give, or a sandbox restored from a snapshot), so its process start and kernel boot are unknown"
)


def _stamp(value: float, decimals: int = 3) -> str:
    """A number a pod reported, in a note: to `decimals` places, or to six digits when it is absurd (1e300)."""
    return f"{value:.{decimals}f}" if abs(value) < 1e11 else f"{value:.6g}"


def _proc_clocks_note(ready_event: JsonObject) -> Optional[str]:
    """The worker's own finding that /proc/uptime is shorter than its process's start after boot
    (`proc_clocks_disagree`: the two readings), as a note of this tool's words; None without one."""
    found = ready_event.get("proc_clocks_disagree")
    if not isinstance(found, dict):
        return None
    uptime = finite_number(found.get("uptime_seconds"))
    after_boot = finite_number(found.get("started_after_boot_seconds"))
    if uptime is None or after_boot is None:
        return f"its ready event's proc_clocks_disagree is malformed; {_CLOCKS_DISAGREE}"
    return (
        f"its /proc/uptime ({_stamp(uptime, 2)} s) is shorter than its process's start after boot "
        f"({_stamp(after_boot, 2)} s, /proc/self/stat): {_CLOCKS_DISAGREE}"
    )


def sandbox_clocks(
    name: str,
    ready_event: JsonObject,
    created_at: float,
    ready_at: float,
    inspect: str,
    finished_at: Optional[float] = None,
) -> SandboxClocks:
    """The self-reported start-up stamps of one episode, or EpisodeInvalid for an impossible one.

    The wall-clock stamps (the first statement, the imports) must lie in [pod creation - 1 s, ready]
    (ready itself is bound to the container's finish + 1 s by the caller), in the order the process
    lives them. The /proc stamps (process start, kernel boot) come from the sandbox's boot clock. A
    process start inside the pod's life (creation - 1 s .. the container's finish + 1 s) bounds ready
    from below: a ready before it is refused. Otherwise, when the worker found /proc inconsistent, the
    process start falls outside the pod's life or after the first statement (two ticks of slack), or
    the kernel booted after the process started, the boot and wall clocks disagree, and both /proc
    stamps are unknown, with a note: an episode never fails for that. A ready event without
    `first_statement_at` comes from an older worker, whose `process_started_at` was its first
    statement: read that way, its /proc figures are null."""
    invalid = functools.partial(EpisodeInvalid, name, inspect=inspect)  # the rule this episode breaks
    process_started_at = finite_number(ready_event.get("process_started_at"))
    booted_at = finite_number(ready_event.get("kernel_booted_at"))
    first_statement_key = "first_statement_at" if "first_statement_at" in ready_event else "process_started_at"
    first_statement_at = finite_number(ready_event.get(first_statement_key))
    if first_statement_key == "process_started_at":
        process_started_at, booted_at = None, None
    imports_done_at = finite_number(ready_event.get("imports_done_at"))
    for label, stamp in ((first_statement_key, first_statement_at), ("imports_done_at", imports_done_at)):
        if stamp is not None and not created_at - 1.0 <= stamp <= ready_at:
            raise invalid(
                f"its ready event's {label} ({stamp:.3f}) is outside the pod's life before ready "
                f"({created_at:.0f} - 1 s .. {ready_at:.3f}); check clock synchronisation between the API "
                "server and the nodes"
            )
    if first_statement_at is not None and imports_done_at is not None and imports_done_at < first_statement_at:
        raise invalid("its ready event says the imports finished before the process started")
    note = _proc_clocks_note(ready_event) if first_statement_key == "first_statement_at" else None
    if note is None and process_started_at is not None:
        life_ends = (finished_at if finished_at is not None else ready_at) + TIMESTAMP_SLACK
        if not created_at - 1.0 <= process_started_at <= life_ends:
            where = (
                "before the pod's creation" if process_started_at < created_at - 1.0 else "after the container's end"
            )
            note = f"its process start by /proc ({_stamp(process_started_at)}) is {where}: {_CLOCKS_DISAGREE}"
        elif ready_at < process_started_at - CLOCK_TICK_SLACK:
            raise invalid(
                f"its ready event ({ready_at:.3f}) is earlier than its own process's start ({process_started_at:.3f}, "
                "/proc, inside the pod's life): a ready is never earlier than the process that reports it; its "
                "clock was stepped back, or the ready is forged"
            )
        elif first_statement_at is not None and process_started_at > first_statement_at + CLOCK_TICK_SLACK:
            start = _stamp(process_started_at)
            note = f"its process start by /proc ({start}) is after its first statement: {_CLOCKS_DISAGREE}"
    reference = process_started_at if process_started_at is not None else first_statement_at
    if note is None and booted_at is not None and reference is not None and booted_at > reference:
        note = (
            f"its kernel booted ({_stamp(booted_at)}) after its process started ({reference:.3f}): {_CLOCKS_DISAGREE}"
        )
    if note is not None:
        return SandboxClocks(None, first_statement_at, imports_done_at, None, None, note)
    kernel = None
    if booted_at is not None:
        kernel = "sandbox" if reference is not None and created_at - 1.0 <= booted_at else "shared"
    sandbox_booted_at = booted_at if kernel == "sandbox" else None
    return SandboxClocks(process_started_at, first_statement_at, imports_done_at, sandbox_booted_at, kernel)


# Kubelet histograms (`run --kubelet-metrics`) ---------------------------------
#
# The kubelet's /metrics is read through the API server before the first Job and after the
# last; each histogram is subtracted bucket by bucket (as ClusterLoader2 does) and its quantiles
# interpolated within a bucket (as Prometheus' histogram_quantile does). The text is untrusted:
# only the wanted families are kept, long lines are ignored, and the samples kept are bounded.

_METRIC_LINE = r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?[0-9]+)?\s*$"
_METRIC_LABEL = r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)'
_LABEL_ESCAPE = r"\\(.)"


def parse_metric_line(line: str) -> Optional[Tuple[str, Dict[str, str], float]]:
    """One sample of the Prometheus text format: name, labels, value; None for a comment, a
    blank line or anything malformed."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    match = re.match(_METRIC_LINE, stripped)
    if not match:
        return None
    labels: Dict[str, str] = {}
    label_text = (match.group(2) or "").strip()
    position = 0
    while position < len(label_text):
        label = re.compile(_METRIC_LABEL).match(label_text, position)
        if not label or label.end() == position:
            return None
        escaped = label.group(2)
        labels[label.group(1)] = re.sub(_LABEL_ESCAPE, lambda m: "\n" if m.group(1) == "n" else m.group(1), escaped)
        position = label.end()
    try:
        value = float(match.group(3))
    except ValueError:
        return None
    return match.group(1), labels, value


class MetricsScanner:
    """Reads a /metrics text as it streams in, keeping only samples of the wanted families."""

    def __init__(self, families: Iterable[str]) -> None:
        self.families = tuple(sorted(set(families)))
        self.prefixes = tuple(family.encode() for family in self.families)
        self.samples: List[Tuple[str, Dict[str, str], float]] = []
        self.buffer = b""
        self.skipping = False  # inside a line longer than METRICS_LINE_LIMIT
        self.long_lines = 0
        self.error = ""

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for raw in lines:
            if self.skipping:
                self.skipping = False
                continue
            self._line(raw)
        if len(self.buffer) > METRICS_LINE_LIMIT:
            self.buffer, self.skipping = b"", True
            self.long_lines += 1

    def _line(self, raw: bytes) -> None:
        if len(raw) > METRICS_LINE_LIMIT:
            self.long_lines += 1
            return
        if not raw.startswith(self.prefixes) or self.error:
            return
        sample = parse_metric_line(raw.decode("utf-8", "replace"))
        if sample is None:
            return
        if len(self.samples) >= METRICS_SAMPLES_LIMIT:
            self.error = f"more than {METRICS_SAMPLES_LIMIT} samples of the kubelet's runtime histograms"
            return
        self.samples.append(sample)

    def finish(self) -> List[Tuple[str, Dict[str, str], float]]:
        if self.buffer and not self.skipping:
            self._line(self.buffer)
        self.buffer = b""
        return self.samples


@dataclasses.dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (the last one +Inf), with the sum and count."""

    buckets: Tuple[Tuple[float, float], ...]
    sum: float
    count: float


def histogram_from_samples(
    samples: List[Tuple[str, Dict[str, str], float]], family: str, label: str, value: str
) -> Optional[Histogram]:
    """The family's series whose `label` equals `value`, added up (None when there is none);
    ValueError when the series are not a well-formed histogram."""
    buckets: Dict[float, float] = {}
    total = count = 0.0
    seen = False
    for name, labels, number in samples:
        if labels.get(label) != value:
            continue
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{name} has the value {number!r}")
        if name == family + "_bucket":
            bound = float(labels.get("le", "nan"))
            if math.isnan(bound):
                raise ValueError(f"{name} has a bucket without a numeric le")
            buckets[bound] = buckets.get(bound, 0.0) + number
        elif name == family + "_sum":
            total += number
        elif name == family + "_count":
            count += number
        else:
            continue
        seen = True
    if not seen:
        return None
    ordered = tuple(sorted(buckets.items()))
    if not ordered or ordered[-1][0] != math.inf:
        raise ValueError(f"{family} has no +Inf bucket")
    if any(later[1] < earlier[1] for earlier, later in zip(ordered, ordered[1:])) or ordered[-1][1] != count:
        raise ValueError(f"{family}'s buckets are not cumulative")
    return Histogram(ordered, total, count)


def subtract_histograms(after: Histogram, before: Optional[Histogram]) -> Histogram:
    """What happened between two readings of one histogram, bucket by bucket; ValueError when a
    counter went down (the kubelet restarted) or the bucket bounds changed."""
    if before is None:
        return after
    if [bound for bound, _ in after.buckets] != [bound for bound, _ in before.buckets]:
        raise ValueError("its bucket bounds changed between the two readings")
    buckets = tuple((bound, count - earlier) for (bound, count), (_, earlier) in zip(after.buckets, before.buckets))
    if any(count < 0 for _, count in buckets) or after.count < before.count or after.sum < before.sum:
        raise ValueError("a counter went down between the two readings (the kubelet restarted?)")
    return Histogram(buckets, after.sum - before.sum, after.count - before.count)


def add_histograms(histograms: List[Histogram]) -> Histogram:
    """Histograms of identical bucket bounds added; ValueError when the bounds differ."""
    first = histograms[0]
    for other in histograms[1:]:
        if [bound for bound, _ in other.buckets] != [bound for bound, _ in first.buckets]:
            raise ValueError("the nodes' bucket bounds differ")
    buckets = tuple(
        (bound, sum(h.buckets[index][1] for h in histograms)) for index, (bound, _) in enumerate(first.buckets)
    )
    return Histogram(buckets, sum(h.sum for h in histograms), sum(h.count for h in histograms))


def histogram_quantile(q: float, histogram: Histogram) -> Optional[Tuple[float, Tuple[float, float]]]:
    """Prometheus' histogram_quantile: the rank's bucket and a linear interpolation inside it.
    The lowest bucket starts at 0; a rank in the +Inf bucket gives the highest finite bound (and
    the bucket (that bound, +Inf)). None when there are no observations."""
    buckets = histogram.buckets
    if len(buckets) < 2 or histogram.count <= 0:
        return None
    rank = q * buckets[-1][1]
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if index == len(buckets) - 1:
        return buckets[-2][0], (buckets[-2][0], math.inf)
    upper, count = buckets[index]
    if index == 0 and upper <= 0:
        return upper, (upper, upper)
    lower = 0.0
    if index > 0:
        lower = buckets[index - 1][0]
        count -= buckets[index - 1][1]
        rank -= buckets[index - 1][1]
    return lower + (upper - lower) * (rank / count if count else 0.0), (lower, upper)


def operation_figures(histogram: Histogram) -> OperationFigures:
    """count, the exact mean (sum / count), and p50 / p95 with the bucket each falls in."""
    quantiles: List[Tuple[Optional[float], Optional[Bucket]]] = []
    for q in (0.5, 0.95):
        quantile = histogram_quantile(q, histogram)
        value, (lower, upper) = quantile or (math.nan, (math.nan, math.nan))
        finite = math.isfinite(value) and math.isfinite(lower)  # never NaN or Infinity in JSON; +Inf: null
        quantiles.append((value, [lower, upper if math.isfinite(upper) else None]) if finite else (None, None))
    return {
        "count": round(histogram.count),
        "mean_seconds": finite_number(histogram.sum / histogram.count) if histogram.count > 0 else None,
        "p50_seconds": quantiles[0][0],
        "p50_bucket": quantiles[0][1],
        "p95_seconds": quantiles[1][0],
        "p95_bucket": quantiles[1][1],
    }


@dataclasses.dataclass
class KubeletReading:
    """One node's runtime histograms at one moment (None: the operation never happened there),
    or why they could not be read."""

    histograms: Dict[str, Optional[Histogram]]
    error: str = ""


def kubelet_reading(samples: List[Tuple[str, Dict[str, str], float]], handler: str, error: str = "") -> KubeletReading:
    """The guide's four operations out of one node's samples, and the handler's RunPodSandbox
    histogram beside them (HANDLER_SANDBOX, the cross-check)."""
    if error:
        return KubeletReading({}, error)
    histograms: Dict[str, Optional[Histogram]] = {}
    try:
        for operation, family, label, value in KUBELET_OPERATIONS:
            histograms[operation] = histogram_from_samples(samples, family, label, value)
        by_handler = histogram_from_samples(samples, HANDLER_SANDBOX_FAMILY, "runtime_handler", handler)
        histograms[HANDLER_SANDBOX] = by_handler
    except ValueError as failure:
        return KubeletReading({}, f"its metrics are malformed ({failure})")
    return KubeletReading(histograms)


def no_operations() -> Operations:
    return {"RunPodSandbox": None, "CreateContainer": None, "StartContainer": None, "PullImage": None}


def runtime_operations(
    before: Dict[str, KubeletReading],
    after: Dict[str, KubeletReading],
    handler: str,
    expected: Dict[str, Dict[str, Optional[int]]],
) -> RuntimeOperations:
    """results.json's `runtime_operations`: per node and pooled, what the kubelet's histograms
    gained between the two readings. `expected` is this run's operations per node and operation
    (None: not known, e.g. pulls of pods whose Pulled event is missing); the rest are foreign:
    these counters are node-wide. The handler's RunPodSandbox histogram is pooled beside them
    as a cross-check (sandbox_crosscheck)."""
    nodes: Dict[str, NodeOperations] = {}
    series = [*(operation for operation, *_ in KUBELET_OPERATIONS), HANDLER_SANDBOX]
    deltas: Dict[str, List[Histogram]] = {name: [] for name in series}
    for node in sorted(expected):
        entry: NodeOperations = {**no_operations(), "foreign_operations": 0, "note": ""}
        nodes[node] = entry
        first, last = before.get(node), after.get(node)
        if first is None:
            entry["note"] = "not read before the run (it was not an eligible node then)"
            continue
        if first.error or last is None or last.error:
            entry["note"] = (
                f"could not be read: {(first.error or (last.error if last else '')) or 'not read after the run'}"
            )
            continue
        node_deltas: Dict[str, Histogram] = {}
        try:
            for name in series:
                later = last.histograms.get(name)
                earlier = first.histograms.get(name)
                if later is None:
                    if earlier is not None:
                        raise ValueError("a histogram disappeared between the two readings (the kubelet restarted?)")
                    continue
                node_deltas[name] = subtract_histograms(later, earlier)
        except ValueError as failure:
            entry["note"] = f"figures void: {failure}"
            continue
        if HANDLER_SANDBOX in node_deltas:
            deltas[HANDLER_SANDBOX].append(node_deltas[HANDLER_SANDBOX])
        notes = []
        for operation, *_ in KUBELET_OPERATIONS:
            delta = node_deltas.get(operation)
            figures = operation_figures(delta if delta is not None else Histogram((), 0.0, 0.0))  # none: count 0
            entry[operation] = figures
            if delta is not None:
                deltas[operation].append(delta)
            count = figures["count"]
            mine = expected[node].get(operation)
            if mine is None:
                notes.append(f"{operation}: {count} operations, how many were this run's is unknown")
            elif count > mine:
                entry["foreign_operations"] += count - mine
                notes.append(f"{operation}: {count - mine} of {count} operations were not this run's")
            elif count < mine:
                notes.append(f"{operation}: {count} operations for {mine} of this run's episodes")
        entry["note"] = "; ".join(notes)
    pooled = no_operations()
    pooled_series: Dict[str, Optional[OperationFigures]] = {}
    for name in series:
        pooled_series[name] = None
        if deltas[name]:
            with contextlib.suppress(ValueError):  # else each node's own figures stand: no mixed bucket bounds
                pooled_series[name] = operation_figures(add_histograms(deltas[name]))
    for operation, *_ in KUBELET_OPERATIONS:
        pooled[operation] = pooled_series[operation]
    by_handler = pooled_series[HANDLER_SANDBOX]
    return {
        "handler": handler,
        "pooled": pooled,
        "nodes": nodes,
        "sandbox_crosscheck": {
            "handler_figures": by_handler,
            "note": sandbox_crosscheck_note(pooled["RunPodSandbox"], by_handler, handler),
        },
    }


def _exact_seconds(value: float) -> str:
    """A kubelet histogram's mean in the unit that suits it, to three significant digits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-6:.3g} \u00b5s"


def sandbox_crosscheck_note(
    sandbox: Optional[OperationFigures], by_handler: Optional[OperationFigures], handler: str
) -> str:
    """What the handler's RunPodSandbox histogram says beside run_podsandbox's: "" when it agrees
    or says nothing; a sentence when its mean is implausibly small while the other's is not (the
    defer bug of kubelets before 1.36, HANDLER_SANDBOX_FAMILY)."""
    mean = sandbox["mean_seconds"] if sandbox else None
    handler_mean = by_handler["mean_seconds"] if by_handler else None
    if mean is None or handler_mean is None or mean < OPERATION_BUCKETS_START:
        return ""
    if handler_mean >= mean * HANDLER_SANDBOX_IMPLAUSIBLE:
        return ""
    return (
        f"{HANDLER_SANDBOX_FAMILY}{{runtime_handler={json.dumps(handler)}}} averages {_exact_seconds(handler_mean)} "
        f"against {_exact_seconds(mean)} for kubelet_runtime_operations_duration_seconds{{operation_type="
        '"run_podsandbox"}: kubelets before 1.36 observe the former when RunPodSandbox starts (kubernetes/kubernetes'
        "#135749), so RunPodSandbox is read from the latter, which counts every handler's sandboxes"
    )


def expected_operations(rows: Sequence[PodRow]) -> Dict[str, Dict[str, Optional[int]]]:
    """This run's own runtime operations per node: one sandbox, one create and one start per
    episode; one pull per episode whose image was pulled (unknown when any episode's is unknown)."""
    expected: Dict[str, Dict[str, Optional[int]]] = {}
    for row in rows:
        node = row["node"]
        if not node:
            continue
        entry = expected.setdefault(node, {operation: 0 for operation, *_ in KUBELET_OPERATIONS})
        for operation in ("RunPodSandbox", "CreateContainer", "StartContainer"):
            entry[operation] = (entry[operation] or 0) + 1
        state = row["image_pull"]["state"]
        if state == "unknown" or entry["PullImage"] is None:
            entry["PullImage"] = None
        elif state == "pulled":
            entry["PullImage"] += 1
    return expected


_NODE_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"


# Pure core: validation and figures ############################################
# Every rule an episode must pass, a round's outcome, its rows and figures, results.json. Uses
# the sections above.


def check_pod_set(
    pods: List[KubeObject],
    count: int,
    inspect: str,
    lost: Optional[Mapping[str, List[LostAttempt]]] = None,
    infra_retries: int = 0,
) -> None:
    """Name the root cause first (see pod_failure's ranks), then a bare count mismatch. `pods`:
    each episode's last attempt, `lost` the attempts before (episode_attempts)."""
    lost = lost or {}
    broken = [
        (episode_failure(pod, lost.get(pod["metadata"]["name"], []), infra_retries), pod["metadata"]["name"])
        for pod in pods
    ]
    (_, rule), name = min(broken, key=lambda entry: entry[0][0], default=((3, ""), ""))  # the first of the lowest rank
    if rule:
        raise EpisodeInvalid(name, rule, inspect)
    problem = pod_count_problem(pods, count, inspect, sum(len(attempts) for attempts in lost.values()))
    if problem is not None:
        raise problem


def episode_events(
    pod_name: str, log: Optional[PodLog], log_error: Optional[str], message_text: str, crosscheck: bool, inspect: str
) -> Tuple[List[JsonObject], List[str]]:
    """The episode's events from the log and the termination message, which must agree, and
    notes on how they were read when it was not plainly.

    A message the kubelet may have cut at the front counts by its complete lines alone, which
    must then end the log's events. A log that lacks the message's first events looks rotated
    (`kubectl logs` returns only the kubelet's current file): the message's events count."""
    invalid = functools.partial(EpisodeInvalid, pod_name, inspect=inspect)  # the rule this episode breaks
    notes: List[str] = []
    cut = bool(message_text.strip()) and message_cut_at_front(message_text)
    if cut:
        message_text = complete_lines(message_text)
        notes.append(
            f"its termination message was cut at the front (the kubelet keeps its last {TERMINATION_MESSAGE_LIMIT:,} "
            "bytes): its first line was set aside"
        )
    message = scan_text(message_text) if message_text.strip() else None
    if message is not None and message.error:
        raise invalid(f"its termination message has a bad event: {message.error}")
    message_events = logged_events(message) if message is not None else None
    if log is None:
        if crosscheck or message_events is None or cut:
            raise invalid(f"its log could not be read ({log_error})")
        return message_events, notes
    if log.error:
        raise invalid(f"its log has a bad event: {log.error}")
    log_events = logged_events(log)
    rotation = (
        "the kubelet rotates a container's log file at 10 MiB by default and `kubectl logs` returns only the "
        "current file"
    )
    if message is None:
        if log.counts.get("reward") and not log.counts.get("ready"):
            raise invalid(
                f"its log has a reward event but no ready event before it, and no termination message: the log looks "
                f"rotated ({rotation}); keep the episode's output smaller, or its events in the termination message"
            )
        return log_events, notes
    in_log, in_message = comparable_events(log_events), comparable_events(message_events or [])
    others = (log.counts.get("other", 0), message.counts.get("other", 0))
    if cut and in_log[len(in_log) - len(in_message) :] == in_message:
        return log_events, notes  # the message's complete lines end the log's events
    if not cut and in_log == in_message and others[0] == others[1]:
        return log_events, notes
    lacks_ready = not log.counts.get("ready") and message.counts.get("ready")
    if not cut and lacks_ready and in_message[len(in_message) - len(in_log) :] == in_log:
        lost = len(in_message) - len(in_log)
        notes.append(
            f"its log lacks the first {lost} of the termination message's events, its ready event among them, and "
            f"looks rotated ({rotation}): the termination message's events were used"
        )
        return message_events or [], notes
    difference = describe_event_difference(log_events, message_events or [])
    if in_log == in_message:
        difference = f"the log has {others[0]} other events, the termination message {others[1]}"
    if cut:
        difference += "; the termination message was cut at the front, and its complete lines do not end the log"
    raise invalid(f"its log and its termination message report different events ({difference})")


def validate_episode(
    pod: KubeObject,
    events: List[JsonObject],
    job_created_at: float,
    sighting: Optional[Dict[str, float]],
    inspect: str,
    builtin_worker: bool = True,
    pod_events: Optional[List[KubeObject]] = None,
    batch_start: Optional[float] = None,
) -> EpisodeRow:
    """Check one episode against every rule and return its row of figures.

    A custom worker (--worker) is held to every rule but the built-in task's own: its reward
    is any finite number, and no baseline or test exit is required. `pod_events` are the
    cluster's events about this pod (Scheduled, Pulled), from the listing already read.
    `batch_start`: where the batch figures start, the Job's admission when a queue held it (its
    creation by default)."""
    batch_start = job_created_at if batch_start is None else batch_start
    name = pod["metadata"]["name"]
    invalid = functools.partial(EpisodeInvalid, name, inspect=inspect)  # the rule this episode breaks
    status = pod.get("status", {})
    container = _container_status(pod)
    terminated = container.get("state", {}).get("terminated") or {}
    if status.get("phase") != "Succeeded":
        raise invalid(_phase_failure(pod))
    if container.get("restartCount", 0) != 0:
        raise invalid(f"the container restarted {short_repr(container['restartCount'])} times")
    if not is_int(terminated.get("exitCode"), 0):
        raise invalid(f"the container exit code is {short_repr(terminated.get('exitCode'))}, not 0")
    ready = [event for event in events if event["event"] == "ready"]
    reward = [event for event in events if event["event"] == "reward"]
    if len(ready) != 1 or len(reward) != 1:
        raise invalid(f"expected one ready and one reward event, found {len(ready)} ready and {len(reward)} reward")
    ready_event, reward_event = ready[0], reward[0]
    if ready_event.get("episode_id") != name or reward_event.get("episode_id") != name:
        raise invalid(
            f"its events carry episode_id {short_repr(ready_event.get('episode_id'))} / "
            f"{short_repr(reward_event.get('episode_id'))}, not the pod name"
        )
    custom_reward = finite_number(reward_event.get("reward"))
    if not builtin_worker and (custom_reward is None or abs(custom_reward) > REWARD_LIMIT):
        raise invalid(
            f"its reward {short_repr(reward_event.get('reward'))} is not a finite number within +-{REWARD_LIMIT:g}"
        )
    if builtin_worker and not (is_int(reward_event.get("reward"), 1) and is_int(reward_event.get("tests_exit"), 0)):
        raise invalid(
            f"reward {short_repr(reward_event.get('reward'))} with tests exit "
            f"{short_repr(reward_event.get('tests_exit'))}; the fixed code must pass its tests "
            "(reward the integer 1, tests exit the integer 0)"
        )
    baseline_exit = reward_event.get("baseline_exit")
    if builtin_worker and (not is_int(baseline_exit) or baseline_exit == 0):
        raise invalid(
            f"the unfixed baseline's tests exit is {short_repr(baseline_exit)}; it must fail (a non-zero integer)"
        )
    modules = reward_event.get("modules")
    test_module = modules.get("test_shipping") if isinstance(modules, dict) else None
    if builtin_worker and test_module != BUILTIN_TEST_MODULE:
        raise invalid(
            f"its reward event does not show the built-in tests run from the runner's own copy (modules.test_shipping "
            f"is {short_repr(test_module)}, not origin {BUILTIN_TEST_MODULE['origin']!r} with sha256 "
            f"{BUILTIN_TEST_MODULE['sha256'][:12]}...)"
        )
    created_at = parse_timestamp(pod["metadata"]["creationTimestamp"])
    ready_at = float(ready_event["at"])
    reward_at = float(reward_event["at"])
    # Whole-second creationTimestamps, possibly of two API-server replicas: each a second of slack.
    if not (job_created_at - TIMESTAMP_SLACK <= created_at and created_at - TIMESTAMP_SLACK <= ready_at <= reward_at):
        raise invalid(
            "timestamps out of order (Job creation <= pod creation <= ready <= reward, the first two whole seconds "
            f"and 1 s apart at most, fails: {job_created_at:.3f}, {created_at:.3f}, {ready_at:.3f}, "
            f"{reward_at:.3f}); check clock synchronisation between the API server and the nodes"
        )
    scheduled_at = _condition_time(pod, "PodScheduled")
    started_at = optional_timestamp(terminated.get("startedAt"))
    finished_at = optional_timestamp(terminated.get("finishedAt"))
    # startedAt and finishedAt are the node's container runtime's, truncated to the second.
    if finished_at is not None and reward_at > finished_at + TIMESTAMP_SLACK:
        raise invalid(
            f"its reward ({reward_at:.3f}) is later than the container's finish ({finished_at:.0f}, the node's "
            "container runtime's stamp); the clock the worker reads runs ahead of its node's: check the clock "
            "synchronisation of the node and, for a VM sandbox, of its guest"
        )
    if started_at is not None and ready_at < started_at - TIMESTAMP_SLACK:
        raise invalid(
            f"its ready event ({ready_at:.3f}) is earlier than its container's start ({started_at:.0f}, the node's "
            "container runtime's stamp); the clock the worker reads runs behind its node's: check the clock "
            "synchronisation of the node and, for a VM sandbox, of its guest"
        )
    clocks = sandbox_clocks(name, ready_event, created_at, ready_at, inspect, finished_at)
    imports_done_at = clocks.imports_done_at
    event_scheduled_at = scheduled_event_time(pod_events or [], pod, created_at, finished_at)
    scheduled_source = "event" if event_scheduled_at is not None else ("condition" if scheduled_at else None)
    scheduled_at = event_scheduled_at if event_scheduled_at is not None else scheduled_at
    sandbox = clocks.kernel_booted_at
    first_seen_at = sighting.get("first_seen_at") if sighting else None
    return EpisodeRow(
        pod=name,
        node=pod.get("spec", {}).get("nodeName"),
        image_id=container.get("imageID"),
        container_runtime=container_runtime_name(container),
        reward=reward_event["reward"],
        pod_to_ready_seconds=ready_at - created_at,
        batch_to_ready_seconds=ready_at - batch_start,
        batch_to_reward_seconds=reward_at - batch_start,
        pod_to_scheduled_seconds=difference(scheduled_at, created_at),
        pod_to_container_started_seconds=difference(started_at, created_at),
        python_import_seconds=difference(imports_done_at, clocks.first_statement_at),
        import_to_ready_seconds=difference(ready_at, imports_done_at),
        ready_to_reward_seconds=reward_at - ready_at,
        reward_to_finished_seconds=difference(finished_at, reward_at),
        pod_observed_to_ready_seconds=difference(ready_at, first_seen_at),
        overhead=pod.get("spec", {}).get("overhead"),
        created_at=created_at,
        scheduled_at=scheduled_at,
        container_started_at=started_at,
        ready_at=ready_at,
        reward_at=reward_at,
        finished_at=finished_at,
        observed_first_seen_at=first_seen_at,
        observed_running_at=sighting.get("Running") if sighting else None,
        observed_succeeded_at=sighting.get("Succeeded") if sighting else None,
        batch_start=batch_start,
        round=1,
        job=JOB_NAME,
        index=0,
        task_id=None,
        info=reward_info(reward_event),
        scheduled_source=scheduled_source,
        process_started_at=clocks.process_started_at,
        first_statement_at=clocks.first_statement_at,
        kernel_booted_at=sandbox,
        kernel=clocks.kernel,
        clock_note=clocks.note,
        pod_to_process_start_seconds=difference(clocks.process_started_at, created_at),
        pod_to_kernel_boot_seconds=difference(sandbox, created_at),
        kernel_boot_to_process_start_seconds=difference(clocks.process_started_at, sandbox),
        interpreter_start_seconds=difference(clocks.first_statement_at, clocks.process_started_at),
        image_pull=image_pull_of(pod_events or [], pod),
        log_notes=[],
        attempts=1,
        lost_attempts=[],
        retry_seconds=0.0,
    )


def reward_info(reward_event: JsonObject) -> JsonObject:
    """The reward event's other fields (the episode's `info`), or a note when they are too large."""
    info = {k: v for k, v in reward_event.items() if k not in ("event", "at", "episode_id", "reward", "artifacts")}
    size = len(json.dumps(info, sort_keys=True, allow_nan=False))
    if size > INFO_LIMIT:
        return {"info_dropped": f"{size} bytes of JSON, over the {INFO_LIMIT}-byte limit of rewards.jsonl"}
    memory = json_memory(info)  # every row keeps its info until rewards.jsonl is written
    if memory > INFO_MEMORY_LIMIT:
        return {"info_dropped": f"{memory} bytes in memory once parsed, over the {INFO_MEMORY_LIMIT}-byte limit"}
    return info


ARTIFACT_ROTATION_HINT = (
    "frames are missing from its log: the kubelet rotates a container's log file at 10 MiB by default and `kubectl "
    "logs` returns only the current file, so the likely cause is rotation; keep the episode's output and artifacts "
    "smaller"
)


def artifact_manifest(value: Any, budget: int) -> List[ArtifactEntry]:
    """The reward event's `artifacts`, checked (ValueError says which rule it breaks): a list of
    {name, bytes, sha256}, each name safe (artifact_name_problem), sorted by name and each once, at
    most ARTIFACTS_PER_EPISODE_LIMIT, their bytes within `budget` (--max-artifact-bytes)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"its reward event's artifacts is {json_kind(value)}, not a list")
    if len(value) > ARTIFACTS_PER_EPISODE_LIMIT:
        raise ValueError(f"its reward event lists {len(value)} artifacts, more than {ARTIFACTS_PER_EPISODE_LIMIT}")
    entries: List[ArtifactEntry] = []
    for item in value:
        name = item.get("name") if isinstance(item, dict) else None
        size = item.get("bytes") if isinstance(item, dict) else None
        digest = item.get("sha256") if isinstance(item, dict) else None
        if not (isinstance(name, str) and type(size) is int and size >= 0 and isinstance(digest, str)):
            raise ValueError(
                f"its reward event lists an artifact {short_repr(item)} that is not {{name, bytes, sha256}}"
            )
        problem = artifact_name_problem(name)
        if problem:
            raise ValueError(f"its reward event lists an artifact {short_repr(name)} whose name {problem}")
        if not re.fullmatch("[0-9a-f]{64}", digest):
            raise ValueError(
                f"its artifact {short_repr(name)} has a sha256 {short_repr(digest)} that is not 64 hex digits"
            )
        entries.append({"name": name, "bytes": size, "sha256": digest})
    names = [entry["name"] for entry in entries]
    if names != sorted(set(names)):
        raise ValueError("its reward event's artifacts are not sorted by name, each listed once")
    total = sum(entry["bytes"] for entry in entries)
    if total > budget:
        raise ValueError(
            f"its artifacts take {total:,} bytes, over the --max-artifact-bytes budget of {budget:,} bytes per episode"
        )
    return entries


def episode_artifacts(
    pod_name: str,
    events: List[JsonObject],
    log: Optional[PodLog],
    log_error: Optional[str],
    budget: int,
    inspect: str,
    received: bool = True,
) -> List[ArtifactEntry]:
    """A validated episode's artifacts: its reward event's manifest, and (`received`) each of them
    saved from its log's frames, whole, with the bytes and sha256 the manifest lists, and nothing
    else. Else the rule it breaks (EpisodeInvalid)."""
    invalid = functools.partial(EpisodeInvalid, pod_name, inspect=inspect)
    reward = next(event for event in events if event["event"] == "reward")
    try:
        declared = artifact_manifest(reward.get("artifacts"), budget)
    except ValueError as error:
        raise invalid(str(error)) from None
    if not received:
        return declared
    if log is None:
        if declared:
            raise invalid(f"its artifacts could not be read: its log could not be read ({log_error})")
        return []
    if log.artifact_error:
        hint = f"; {ARTIFACT_ROTATION_HINT}" if log.artifact_frames_missing else ""
        raise invalid(f"its artifacts did not arrive whole: {log.artifact_error}{hint}")
    for entry in declared:
        got = log.artifacts.get(entry["name"])
        if got is None:
            raise invalid(
                f"its artifact {short_repr(entry['name'])} never arrived: no frame of it is in its log; "
                f"{ARTIFACT_ROTATION_HINT}"
            )
        if got != entry:
            raise invalid(
                f"its artifact {short_repr(entry['name'])} arrived as {got['bytes']:,} bytes with sha256 "
                f"{got['sha256'][:12]}..., but its reward event lists {entry['bytes']:,} bytes with sha256 "
                f"{entry['sha256'][:12]}..."
            )
    extra = sorted(set(log.artifacts) - {entry["name"] for entry in declared})
    if extra:
        raise invalid(f"it sent an artifact {short_repr(extra[0])} that its reward event does not list")
    return declared


def reward_line(row: EpisodeRow, known_at: float) -> RewardLine:
    """A validated episode's line of rewards.jsonl: its reward and the reward event's other fields."""
    return {
        "round": row["round"],
        "index": row["index"],
        "task_id": row["task_id"],
        "pod": row["pod"],
        "reward": row["reward"],
        "info": row.get("info", {}),
        "failure": None,
        "known_at": known_at,
        "retracted": False,
        "attempts": row["attempts"],
        "lost_attempts": row["lost_attempts"],
        "artifacts": row.get("artifacts", []),
    }


def failure_line(
    round_number: int,
    index: Optional[int],
    task_id: Any,
    pod: str,
    failure: str,
    known_at: float,
    lost: Sequence[LostAttempt] = (),
) -> RewardLine:
    """A failed episode's line: reward and info null and its failure, so a trainer can mask it.
    `lost`: the episode's pods lost to the infrastructure before this one (--infra-retries)."""
    return {
        "round": round_number,
        "index": index,
        "task_id": task_id,
        "pod": pod,
        "reward": None,
        "info": None,
        "failure": failure,
        "known_at": known_at,
        "retracted": False,
        "attempts": len(lost) + 1,
        "lost_attempts": list(lost),
        "artifacts": None,
    }


def retraction_of(line: RewardLine, failure: str, known_at: float) -> RewardLine:
    """The line that withdraws a pod's earlier reward line: a later check rejected the episode."""
    retraction = failure_line(
        line["round"], line["index"], line["task_id"], line["pod"], failure, known_at, line["lost_attempts"]
    )
    retraction["retracted"] = True
    return retraction


def stands_as_reward(line: Optional[RewardLine]) -> bool:
    """Whether a pod's last line is a reward (a reader's rule: the last line of a pod is its verdict)."""
    return line is not None and line["failure"] is None and not line["retracted"]


def _index_order(line: RewardLine) -> Tuple[int, int, str]:
    return line["round"], line["index"] if line["index"] is not None else -1, line["pod"]


def reconciling_lines(
    last: Mapping[str, RewardLine], rows: Sequence[EpisodeRow], failed: Sequence[FailedEpisode], known_at: float
) -> List[RewardLine]:
    """The lines that make rewards.jsonl agree with an analysed round, given each pod's last line
    so far (`last`, by pod): a reward line for each validated episode without one, a failure line
    for each failed episode without a line, and a retraction of each reward line the analysis did
    not accept (its episode failed, or its pod is not among the Job's pods), in index order. With
    no line written yet, these are the round's lines as a whole file would hold them."""
    lines = [reward_line(row, known_at) for row in rows if not stands_as_reward(last.get(row["pod"]))]
    for entry in failed:
        previous = last.get(entry["pod"])
        if previous is None:
            lines.append(
                failure_line(
                    entry["round"],
                    entry["index"],
                    entry["task_id"],
                    entry["pod"],
                    entry["cause"],
                    known_at,
                    entry["lost_attempts"],
                )
            )
        elif stands_as_reward(previous):
            lines.append(retraction_of(previous, entry["cause"], known_at))
    analysed = {row["pod"] for row in rows} | {entry["pod"] for entry in failed}
    lines += [
        retraction_of(line, "its pod is not one of the Job's pods once the round was analysed", known_at)
        for pod, line in last.items()
        if pod not in analysed and stands_as_reward(line)
    ]
    return sorted(lines, key=_index_order)


def retracting_lines(last: Mapping[str, RewardLine], failure: str, known_at: float) -> List[RewardLine]:
    """When a round fails (or the run stops) before its analysis accepted it: a retraction of each
    of its reward lines, in the order they were written, with `failure` as the reason."""
    return [retraction_of(line, failure, known_at) for line in last.values() if stands_as_reward(line)]


def batch_figures(rows: List[EpisodeRow], failed: int = 0) -> BatchFigures:
    """The guide's whole-batch figures for one set of episodes (`failed`: left out, --max-failed-episodes),
    with the rewards' mean, min and max beside the guide's reward_sum. `rows` is never empty."""
    startup = [row["pod_to_ready_seconds"] for row in rows]
    rewards = [row["reward"] for row in rows]

    def latest(ends: List[Optional[float]]) -> Optional[float]:  # the cluster's stamps: every episode's, else unknown
        known = [end for end in ends if end is not None]
        return max(known) if len(known) == len(ends) else None

    return {
        "episodes": len(rows) + failed,
        "successful_episodes": len(rows),
        "masked_episodes": failed,
        "reward_sum": sum(rewards),
        "batch_to_all_ready_seconds": max(row["batch_to_ready_seconds"] for row in rows),
        "batch_to_all_rewards_seconds": max(row["batch_to_reward_seconds"] for row in rows),
        "batch_to_all_started_seconds": latest([difference(r["container_started_at"], r["batch_start"]) for r in rows]),
        "batch_to_all_finished_seconds": latest([difference(r["finished_at"], r["batch_start"]) for r in rows]),
        "pod_to_ready_p50_seconds": percentile(startup, 0.5),
        "pod_to_ready_p95_seconds": percentile(startup, 0.95),
        "pod_to_ready_max_seconds": max(startup),
        "reward_mean": math.fsum(rewards) / len(rewards),  # |r| <= 1e15: no overflow
        "reward_min": min(rewards),
        "reward_max": max(rewards),
        "lost_attempts": sum(len(row["lost_attempts"]) for row in rows),
        "retry_seconds_sum": math.fsum(row["retry_seconds"] for row in rows),
        "retry_seconds_max": max(row["retry_seconds"] for row in rows),
    }


def figure_notes(figures: BatchFigures, rows: Sequence[PodRow], max_failed_episodes: int) -> List[str]:
    """results.json's `notes`, in this tool's words: episodes masked under --max-failed-episodes
    (the reward figures leave them out), and episodes whose sandbox clocks disagree."""
    notes = []
    masked = figures["masked_episodes"]
    if masked:
        notes.append(
            f"{masked} of {figures['episodes']} episodes masked: they failed and were set aside under "
            f"--max-failed-episodes {max_failed_episodes}, so reward_sum ({figures['reward_sum']!r}) and reward_mean "
            f"({figures['reward_mean']!r}) are over the {figures['successful_episodes']} unmasked episodes only, and "
            "a policy that crashes instead of earning 0 raises the mean; failed_episodes names each masked "
            "episode, and rewards.jsonl gives it reward null"
        )
    if figures["lost_attempts"]:
        retried = sum(1 for row in rows if row["lost_attempts"])
        notes.append(
            f"{figures['lost_attempts']} pod(s) lost to the infrastructure were replaced (--infra-retries), in "
            f"{retried} of {figures['successful_episodes']} validated episodes: the retries added "
            f"{figures['retry_seconds_sum']:g} s in all, at most {figures['retry_seconds_max']:g} s to one episode "
            "(first pod created -> last pod created), and the batch figures include them; pods[].lost_attempts names "
            "each lost pod and its cause"
        )
    disagree = [row for row in rows if row["clock_note"]]
    if disagree:
        notes.append(
            f"{len(disagree)} of {len(rows)} episodes' sandbox clocks disagree, so their process start and kernel "
            f"boot are unknown, the rest of each episode standing (pods[].clock_note; {disagree[0]['pod']}: "
            f"{disagree[0]['clock_note']})"
        )
    return notes


def phase_table(rows: List[EpisodeRow]) -> Dict[str, Optional[PhaseStats]]:
    return {phase: summarise(json_number(row.get(phase)) for row in rows) for phase in PHASES}


def node_spread(rows: List[EpisodeRow]) -> Dict[str, int]:
    spread: Dict[str, int] = {}
    for row in rows:
        node = row["node"] or "(unknown)"
        spread[node] = spread.get(node, 0) + 1
    return dict(sorted(spread.items()))


ROUND_COMPLETE = "complete"  # the Job is Complete: validate, then report
ROUND_FAILED = "failed"  # the Job is Failed: validate (to name the episode), then fail
ROUND_DEADLINE = "deadline"  # the Job hit its activeDeadlineSeconds
ROUND_BLOCKED = "blocked"  # the cluster refused to create the Job's pods
ROUND_TIMEOUT = "timeout"  # the client's wait ran out without a Job condition
ROUND_NOT_ADMITTED = "not-admitted"  # the client's wait ran out while the Job was still suspended (queued)
ROUND_FAILED_INDEXES = "failed-indexes"  # Failed (FailedIndexes): every index ran, at most maxFailedIndexes failed


def classify_round(observation: RoundObservation) -> str:
    """How a round ended, from what the client observed."""
    if observation.blocked:
        return ROUND_BLOCKED
    if observation.condition is None and observation.queued and observation.admitted_seen_monotonic is None:
        return ROUND_NOT_ADMITTED
    if observation.condition is None:
        return ROUND_TIMEOUT
    if observation.condition == "Failed" and failed_condition_reason(observation.job) == "FailedIndexes":
        return ROUND_FAILED_INDEXES  # analysed like a complete round; analyse_round checks the count
    if observation.condition == "Failed":
        return ROUND_DEADLINE if "DeadlineExceeded" in failed_condition_text(observation.job) else ROUND_FAILED
    return ROUND_COMPLETE


def round_stopper(
    outcome: str, observation: RoundObservation, where: str, settings: RunSettings, warning: str, inspect: str
) -> Optional[DemoError]:
    """The error that ends a round before any episode is validated, if its outcome is one."""
    if outcome == ROUND_BLOCKED:
        hint = " (the namespace enforces Pod Security 'restricted')" if "PodSecurity" in observation.blocked else ""
        return DemoError(
            f"Job {where} cannot create its pods: {observation.blocked}{hint}; inspect {inspect}, then run cleanup",
            EXIT_CLUSTER,
        )
    if outcome == ROUND_NOT_ADMITTED:
        return DemoError(
            f"Job {where} was never admitted: it stayed suspended (spec.suspend, set by a queue such as Kueue) for "
            f"{settings.client_wait_seconds} s; see why its queue holds it (for Kueue: `kubectl -n "
            f"{where.split('/', 1)[0]} get workloads`), or raise --timeout; inspect {inspect}, then run cleanup",
            EXIT_TIMEOUT,
        )
    if outcome == ROUND_TIMEOUT:
        counts = pod_counts(observation.pod_sightings, observation.job)
        return DemoError(
            f"Job {where} did not finish within {settings.client_wait_seconds} s"
            f"{' of its admission' if observation.queued else ''} "
            f"({counts['created']} pods created, {counts['running']} running, {counts['succeeded']} succeeded"
            f"{warning}); inspect {inspect}, then run cleanup",
            EXIT_TIMEOUT,
        )
    if outcome == ROUND_DEADLINE:
        return DemoError(
            f"Job {where} hit its deadline of {settings.deadline_seconds} s "
            f"(activeDeadlineSeconds{warning}); inspect {inspect} for pending or slow pods, then run cleanup",
            EXIT_TIMEOUT,
        )
    return None


def round_inspect_hint(round_dir: Path) -> str:
    return f"{round_dir}/pods.json, events.txt and the episode logs"


def analyse_round(collected: RoundCollected, where: str) -> Tuple[List[EpisodeRow], RoundResult]:
    """A finished round's rows and figures, or the first rule it breaks (EpisodeInvalid).

    Every pod is validated on complete data: its status, its events from the log and the
    termination message (which must agree for small runs), its clocks."""
    inspect = round_inspect_hint(collected.round_dir)
    tolerated = collected.max_failed_episodes  # with K > 0, up to K failed episodes are set aside
    retries = collected.infra_retries
    pods, lost = episode_attempts(collected.pods, collected.count, retries, inspect)
    if not tolerated:
        check_pod_set(pods, collected.count, inspect, lost, retries)
    job_created_at = creation_time(collected.job, "the Job")
    crosscheck = collected.count <= LOG_CROSSCHECK_LIMIT
    observation = collected.observation
    # A queued Job's figures start when it was admitted: its wait in the queue is its own figure.
    admitted_at = job_admitted_at(observation.job) if observation.queued else job_created_at
    admitted_seen = observation.admitted_seen_monotonic
    cluster_events = events_by_pod(collected.events)
    rows = []
    failed: List[Tuple[EpisodeInvalid, Optional[int]]] = []
    for position, pod in enumerate(pods):
        name = pod["metadata"]["name"]
        pod_inspect = f"{collected.round_dir}/{name}.log and pods.json"
        index: Optional[int] = None if collected.indexed else position
        try:
            if collected.indexed:
                index = pod_index(pod, collected.count, pod_inspect)
            rule = episode_failure(pod, lost.get(name, []), retries)[1] if tolerated else ""
            if rule:
                raise EpisodeInvalid(name, rule, pod_inspect)
            events, notes = episode_events(
                name,
                collected.logs.get(name),
                collected.log_errors.get(name, "not read"),
                termination_message(pod),
                crosscheck,
                pod_inspect,
            )
            row = validate_episode(
                pod,
                events,
                job_created_at,
                observation.pod_sightings.get(name),
                pod_inspect,
                collected.builtin_worker,
                pod_events=cluster_events.get(name, []),
                batch_start=admitted_at,
            )
            row["artifacts"] = episode_artifacts(
                name,
                events,
                collected.logs.get(name),
                collected.log_errors.get(name, "not read"),
                collected.max_artifact_bytes,
                pod_inspect,
            )
        except (KeyError, TypeError, ValueError) as error:
            shape = EpisodeInvalid(name, f"its pod status or events have an unexpected shape ({error!r})", pod_inspect)
            if not tolerated:
                raise shape from None
            failed.append((shape, index))
            continue
        except EpisodeInvalid as invalid:
            if not tolerated:
                raise
            failed.append((invalid, index))
            continue
        row["round"], row["job"], row["log_notes"] = collected.round_number, collected.job_name, notes
        row["index"] = position if index is None else index
        row["task_id"] = task_id_for(collected, row["index"])
        set_attempts(row, lost.get(name, []))
        rows.append(row)
    set_aside = check_failed_episodes(collected, pods, rows, failed, where, inspect, lost)
    if observation.condition != "Complete" and not set_aside:
        raise DemoError(
            f"Job {where} failed ({failed_condition_text(observation.job)}) although every episode validated; "
            f"inspect {inspect}",
            EXIT_EPISODE,
        )
    assert observation.condition_seen_monotonic is not None
    figures = RoundResult(
        **batch_figures(rows, len(failed)),
        **FirstReward(),  # a measured round's, once its rewards are written (RoundRewards.analysed)
        failed_episodes=[
            {
                "pod": invalid.pod,
                "index": index,
                "task_id": task_id_for(collected, index),
                "round": collected.round_number,
                "job": collected.job_name,
                "cause": invalid.rule,
                "attempts": len(lost.get(invalid.pod, [])) + 1,
                "lost_attempts": lost.get(invalid.pod, []),
            }
            for invalid, index in failed
        ],
        round=collected.round_number,
        job=collected.job_name,
        job_uid=collected.job["metadata"]["uid"],
        client_job_complete_seconds=observation.condition_seen_monotonic - collected.submitted_monotonic,
        client_submitted_at=collected.submitted_wall,
        client_observed_complete_at=observation.condition_seen_wall,
        job_created_at=job_created_at,
        job_admitted_at=admitted_at,
        admission_wait_seconds=difference(admitted_at, job_created_at),
        client_admission_wait_seconds=None if admitted_seen is None else admitted_seen - collected.submitted_monotonic,
        job_complete_at=_condition_time(observation.job, "Complete"),
        job_success_criteria_met_at=_condition_time(observation.job, "SuccessCriteriaMet"),
        **log_figures(collected, pods),
    )
    return rows, figures


def set_attempts(row: EpisodeRow, lost: List[LostAttempt]) -> None:
    """A validated episode's attempts: its lost pods, and the time from the first one's creation to
    its own pod's (what the retries added to it)."""
    row["attempts"], row["lost_attempts"] = len(lost) + 1, lost
    row["retry_seconds"] = max(0.0, row["created_at"] - lost[0]["created_at"]) if lost else 0.0


def log_figures(collected: RoundCollected, pods: Optional[List[KubeObject]] = None) -> LogFigures:
    """`pods`: the episodes' last attempts. Only a pod that succeeded counts as one without a
    termination message: its log alone carried its events (the runtime shares no file); a failed
    or lost pod's status is its verdict, and a killed worker leaves no message on any runtime."""
    return {
        "pods_without_termination_message": sum(
            1
            for pod in (collected.pods if pods is None else pods)
            if (pod.get("status") or {}).get("phase") == "Succeeded" and not termination_message(pod).strip()
        ),
        "log_bytes_not_saved": sum(log.dropped_bytes for log in collected.logs.values() if log is not None),
    }


def provisional_episode(
    pod: KubeObject,
    count: int,
    indexed: bool,
    job_created_at: float,
    builtin_worker: bool,
    inspect: str,
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
) -> Optional[EpisodeRow]:
    """An episode's verdict as soon as the pod watch shows its pod terminated: its row, or the rule
    it breaks (EpisodeInvalid), judged as analyse_round judges it but from the pod's status and its
    termination message alone (the log and the cluster's events are read once the Job has ended).
    None while it cannot be judged: the pod has not terminated, or it succeeded without a
    termination message that can carry its events (some runtimes leave none, and the kubelet may
    cut a long one at the front: its log decides, once read). The row's round,
    job, index and task_id are the caller's to set.

    A failure found here is final (the same rules see the same status and message later); a
    reward is provisional: the log may disagree, its artifacts (the manifest's promise) may not
    arrive whole, the pod may be deleted, the round may fail."""
    name = str(pod["metadata"]["name"])
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        return None
    try:
        if indexed:
            pod_index(pod, count, inspect)
        rule = pod_failure(pod)[1]  # a Failed pod breaks one of its rules
        if rule:
            raise EpisodeInvalid(name, rule, inspect)
        message = termination_message(pod)
        if message_needs_log(message):  # empty, or cut at the front by the kubelet: its log decides
            return None
        events, _ = episode_events(name, None, "not read yet", message, False, inspect)
        row = validate_episode(pod, events, job_created_at, None, inspect, builtin_worker)
        # the manifest it promises; its files arrive with its log, once the Job has ended
        row["artifacts"] = episode_artifacts(name, events, None, None, max_artifact_bytes, inspect, received=False)
        return row
    except (KeyError, TypeError, ValueError) as error:
        raise EpisodeInvalid(name, f"its pod status or events have an unexpected shape ({error!r})", inspect) from None


def task_id_for(collected: RoundCollected, index: Optional[int]) -> Any:
    if index is None:
        return None
    if collected.task_ids is not None and 0 <= index < len(collected.task_ids):
        return collected.task_ids[index]
    return index


def check_failed_episodes(
    collected: RoundCollected,
    pods: List[KubeObject],
    rows: List[EpisodeRow],
    failed: List[Tuple[EpisodeInvalid, Optional[int]]],
    where: str,
    inspect: str,
    lost: Optional[Mapping[str, List[LostAttempt]]] = None,
) -> bool:
    """With --max-failed-episodes K: fail the round as before when more than K episodes failed,
    when pods are missing or share an index, or when the Job's own list of failed indexes names
    an episode that validated. True when the Job's FailedIndexes verdict is accounted for."""
    tolerated = collected.max_failed_episodes
    if len(failed) > tolerated:
        first = failed[0][0]
        raise EpisodeInvalid(
            first.pod,
            f"{first.rule} ({len(failed)} episodes failed, more than --max-failed-episodes {tolerated})",
            first.inspect,
        )
    replaced = sum(len(attempts) for attempts in (lost or {}).values())
    problem = pod_count_problem(pods, collected.count, inspect, replaced) if tolerated else None
    if problem is not None:
        raise problem
    indexes = [row["index"] for row in rows] + [index for _, index in failed if index is not None]
    repeated = sorted({index for index in indexes if indexes.count(index) > 1})
    if collected.indexed and repeated:
        raise DemoError(
            f"Job {where} has more than one pod for completion index {repeated[0]}; inspect {inspect}", EXIT_EPISODE
        )
    if not rows and failed:
        raise DemoError(
            f"every episode of Job {where} failed ({len(failed)}, within --max-failed-episodes {tolerated}), so "
            f"there is no reward to report; the first: {failed[0][0]}",
            EXIT_EPISODE,
        )
    observation = collected.observation
    if not (
        failed and observation.condition == "Failed" and failed_condition_reason(observation.job) == "FailedIndexes"
    ):
        return False
    status = observation.job.get("status") or {}
    try:
        job_failed = parse_index_set(status.get("failedIndexes"))
    except ValueError as error:
        raise DemoError(f"Job {where} reports unreadable status.failedIndexes: {error}", EXIT_CLUSTER) from None
    ours = {index for _, index in failed}
    validated = sorted(index for index in job_failed if index not in ours)
    if validated:
        raise DemoError(
            f"Job {where} lists index {validated[0]} in status.failedIndexes, but that episode validated; "
            f"inspect {inspect}",
            EXIT_EPISODE,
        )
    return True


def assemble_results(
    settings: RunSettings,
    context: str,
    namespace: str,
    run_id: str,
    rows: List[EpisodeRow],
    rounds: List[RoundResult],
    prepared: Optional[PreparedImage] = None,
    kubelet: Optional[KubeletFigures] = None,
    capacity: Optional[AutoParallelism] = None,
) -> Results:
    """results.json: the guide's fields first, then phases, nodes, rounds and absolute stamps;
    `prepared`: the warm-up and the pinned image (none without --warmup and --pin-image);
    `kubelet`: the runtime operations (only with --kubelet-metrics); `capacity`: the nodes'
    room (only with --parallelism auto, whose parallelism is that room, at most the count)."""
    failed = [entry for figures in rounds for entry in figures["failed_episodes"]]
    first_rewards = [r["client_first_reward_seconds"] for r in rounds if "client_first_reward_seconds" in r]
    first_reward: FirstReward = {"client_first_reward_seconds": max(first_rewards)} if first_rewards else {}
    figures = batch_figures(rows, len(failed))
    return Results(
        **figures,
        **first_reward,
        figure_sources=dict(sorted(FIGURE_SOURCES.items())),
        notes=figure_notes(figures, rows, settings.max_failed_episodes),
        **(prepared or {"image_pinned": None, "warmup": None}),
        **(kubelet or {}),
        **(capacity or {}),
        failed_episodes=failed,
        max_failed_episodes=settings.max_failed_episodes,
        infra_retries=settings.infra_retries,
        pods_without_termination_message=sum(r["pods_without_termination_message"] for r in rounds),
        log_bytes_not_saved=sum(r["log_bytes_not_saved"] for r in rounds),
        worker=settings.worker_name,
        tasks=len(settings.tasks) if settings.tasks is not None else None,
        context=context,
        namespace=namespace,
        run_id=run_id,
        image=settings.image,
        runtime=settings.runtime,
        parallelism=job_parallelism(settings, None if capacity is None else capacity["parallelism_capacity"]),
        rounds=settings.rounds,
        episodes_per_round=settings.count,
        cache_state=cache_state_of(image_cache_counts(rows)),
        image_cache=image_cache_counts(rows),
        client_job_complete_seconds=max(r["client_job_complete_seconds"] for r in rounds),
        client_submitted_at=rounds[0]["client_submitted_at"],
        client_observed_complete_at=rounds[-1]["client_observed_complete_at"],
        job_created_at=rounds[0]["job_created_at"],
        job_admitted_at=rounds[0]["job_admitted_at"],
        admission_wait_seconds=max_known(r["admission_wait_seconds"] for r in rounds),
        client_admission_wait_seconds=max_known(r["client_admission_wait_seconds"] for r in rounds),
        job_complete_at=rounds[-1]["job_complete_at"],
        job_success_criteria_met_at=rounds[-1]["job_success_criteria_met_at"],
        phases=phase_table(rows),
        nodes=node_spread(rows),
        image_ids=sorted({row["image_id"] for row in rows if row["image_id"]}),
        container_runtimes=sorted({row["container_runtime"] for row in rows if row["container_runtime"]}),
        round_results=rounds,
        tool_version=tool_version(),
        pods=[pod_row(row) for row in rows],
    )


def pod_row(row: EpisodeRow) -> PodRow:
    """A row as results.json keeps it: its `info` (untrusted, possibly large) stays in rewards.jsonl."""
    copy = row.copy()
    copy.pop("info", None)
    return copy


def check_thresholds(results: Results, thresholds: Dict[str, float]) -> List[str]:
    """Every breached latency budget, in a stable order."""
    breaches = []
    for metric, limit in sorted(thresholds.items()):
        value = json_number(results.get(metric))
        if value is None:  # a budget is never met by a figure nobody measured
            breaches.append(f"{metric} is unknown (an episode lacks its stamp), so it cannot be held to {limit:g} s")
        elif value > limit:
            breaches.append(f"{metric} = {value:.3f} s > {limit:g} s")
    return breaches


# Pure core: permissions and capacity ##########################################
# What `check` and the preflight decide from access reviews, nodes and the RuntimeClass. Uses
# the records and the numbers above.


def permission_name(verb: str, resource: str, group: str, subresource: str, *_: object) -> str:
    name = f"{resource}.{group}" if group else resource
    return f"{verb} {name}/{subresource}" if subresource else f"{verb} {name}"


def access_review_list(
    namespace: str,
    with_runtimeclass: bool,
    kubelet_metrics: bool = False,
    lists_nodes: bool = False,
    capacity: bool = False,
) -> KubeObject:
    """One SelfSubjectAccessReview per permission the command needs (`lists_nodes`: `run --warmup`
    and `check` list the nodes; `capacity`: `run --parallelism auto` reads the nodes' room), each
    asked once."""
    runtimeclass = RUNTIMECLASS_LIST_PERMISSION if capacity else RUNTIMECLASS_PERMISSION
    permissions = list(REQUIRED_PERMISSIONS) + ([runtimeclass] if with_runtimeclass else [])
    permissions += list(SERVICEACCOUNT_PERMISSIONS)
    permissions += list(KUBELET_METRICS_PERMISSIONS) if kubelet_metrics else []
    permissions += [permission for permission in CAPACITY_PERMISSIONS if capacity and permission not in permissions]
    permissions += [NODE_LIST_PERMISSION] if lists_nodes and NODE_LIST_PERMISSION not in permissions else []
    items = []
    for verb, resource, group, subresource, namespaced in permissions:
        attributes = {"verb": verb, "resource": resource, "group": group}
        if subresource:
            attributes["subresource"] = subresource
        if namespaced:
            attributes["namespace"] = namespace
        items.append(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def denied_permissions(reviews: List[KubeObject]) -> List[str]:
    denied = [review for review in reviews if review.get("status", {}).get("allowed") is not True]
    asked = [review.get("spec", {}).get("resourceAttributes", {}) for review in denied]
    return sorted(
        permission_name(a.get("verb", "?"), a.get("resource", "?"), a.get("group", ""), a.get("subresource", ""))
        for a in asked
    )


def _tolerates(taint: KubeObject, tolerations: List[KubeObject]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def named_runtimeclass(items: List[KubeObject], name: str) -> Optional[KubeObject]:
    """The RuntimeClass `name` of a listing of several kinds (`kind` on each item), or None where
    it has none: what `get runtimeclass NAME --ignore-not-found` would have said."""
    for item in items:
        if item.get("kind") == "RuntimeClass" and (item.get("metadata") or {}).get("name") == name:
            return item
    return None


def eligible_nodes(nodes: List[KubeObject], runtimeclass: Optional[KubeObject]) -> List[KubeObject]:
    """Ready, schedulable nodes that the RuntimeClass's scheduling rules admit."""
    scheduling = (runtimeclass or {}).get("scheduling") or {}
    selector = scheduling.get("nodeSelector") or {}
    tolerations = scheduling.get("tolerations") or []
    eligible = []
    for node in nodes:
        if node.get("spec", {}).get("unschedulable"):
            continue
        conditions = {c.get("type"): c.get("status") for c in node.get("status", {}).get("conditions", []) or []}
        if conditions.get("Ready", "True") != "True":
            continue
        labels = node.get("metadata", {}).get("labels", {}) or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            continue
        taints = [
            t for t in node.get("spec", {}).get("taints", []) or [] if t.get("effect") in ("NoSchedule", "NoExecute")
        ]
        if all(_tolerates(taint, tolerations) for taint in taints):
            eligible.append(node)
    return eligible


_RESOURCES = ("cpu", "memory")


def pod_requests(pod: KubeObject) -> Dict[str, float]:
    """The CPU and memory a pod holds on its node, as the scheduler counts it: its containers'
    requests summed, or what its init containers need if that is more (a sidecar, an init
    container with restartPolicy Always, counts for the pod's whole life), the pod-level requests
    where they are set, then the RuntimeClass's overhead (spec.overhead). As kubernetes/kubernetes
    staging/src/k8s.io/component-helpers/resource/helpers.go PodRequests computes it."""
    spec = pod.get("spec") or {}

    def requested(resources: Any) -> Dict[str, float]:
        asked = (resources or {}).get("requests") or {} if isinstance(resources, dict) else {}
        return {resource: parse_quantity(str(asked.get(resource, "0"))) for resource in _RESOURCES}

    total = dict.fromkeys(_RESOURCES, 0.0)
    for container in spec.get("containers") or []:
        total = {resource: total[resource] + value for resource, value in requested(container.get("resources")).items()}
    sidecars, init_peak = dict.fromkeys(_RESOURCES, 0.0), dict.fromkeys(_RESOURCES, 0.0)
    for container in spec.get("initContainers") or []:
        own = requested(container.get("resources"))
        if container.get("restartPolicy") == "Always":
            total = {resource: total[resource] + own[resource] for resource in _RESOURCES}
            sidecars = {resource: sidecars[resource] + own[resource] for resource in _RESOURCES}
            using = sidecars
        else:
            using = {resource: own[resource] + sidecars[resource] for resource in _RESOURCES}
        init_peak = {resource: max(init_peak[resource], using[resource]) for resource in _RESOURCES}
    total = {resource: max(total[resource], init_peak[resource]) for resource in _RESOURCES}
    pod_level = ((spec.get("resources") or {}).get("requests") or {}) if isinstance(spec.get("resources"), dict) else {}
    total.update(
        {resource: parse_quantity(str(pod_level[resource])) for resource in _RESOURCES if resource in pod_level}
    )
    overhead = spec.get("overhead") or {}
    return {resource: total[resource] + parse_quantity(str(overhead.get(resource, "0"))) for resource in _RESOURCES}


def episode_room(
    runtimeclass: Optional[KubeObject], nodes: List[KubeObject], pods: Optional[List[KubeObject]]
) -> Tuple[int, str]:
    """How many episodes the eligible nodes can start at once, and the sum in words: on each node,
    its allocatable CPU, memory and pod slots less what its pods that are not terminated request
    (`pods` None: unknown, nothing subtracted), in whole episodes of the Job's requests plus the
    RuntimeClass's overhead; the nodes' rooms added up (a pod runs on one node, never across two).
    `check` and `run --parallelism auto` both read this."""
    overhead = ((runtimeclass or {}).get("overhead") or {}).get("podFixed") or {}
    extra = {resource: parse_quantity(overhead.get(resource, "0")) for resource in _RESOURCES}
    need = {resource: parse_quantity(POD_REQUESTS[resource]) + extra[resource] for resource in _RESOURCES}
    eligible = eligible_nodes(nodes, runtimeclass)
    names = {str((node.get("metadata") or {}).get("name")) for node in eligible}
    used: Dict[str, Dict[str, float]] = {name: dict.fromkeys(_RESOURCES, 0.0) for name in names}
    running = dict.fromkeys(names, 0)
    for pod in pods or []:
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        if node_name in names and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            running[node_name] += 1
            used[node_name] = {r: used[node_name][r] + v for r, v in pod_requests(pod).items()}
    room = 0
    have = dict.fromkeys(_RESOURCES, 0.0)
    for node in eligible:
        name = str((node.get("metadata") or {}).get("name"))
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        free = {
            resource: parse_quantity(allocatable.get(resource, "0")) - used[name][resource] for resource in _RESOURCES
        }
        have = {resource: have[resource] + parse_quantity(allocatable.get(resource, "0")) for resource in _RESOURCES}
        fits = min(math.floor(free[resource] / need[resource] + 1e-9) for resource in _RESOURCES)
        if "pods" in allocatable:
            fits = min(fits, int(parse_quantity(allocatable["pods"])) - running[name])
        room += max(fits, 0)
    taken = {resource: sum(node_used[resource] for node_used in used.values()) for resource in _RESOURCES}
    there = (
        " (before what already runs there)"
        if pods is None
        else f", {taken['cpu']:.1f} CPU and {taken['memory'] / 2**30:.1f} GiB of it requested by "
        f"{sum(running.values())} pod{'s' if sum(running.values()) != 1 else ''} already there"
    )
    text = (
        f"{len(eligible)} eligible node{'s' if len(eligible) != 1 else ''} have {have['cpu']:.1f} CPU and "
        f"{have['memory'] / 2**30:.1f} GiB allocatable{there}: room for {room} episode{'s' if room != 1 else ''} "
        f"at once, each {need['cpu']:.2f} CPU and {need['memory'] / 2**30:.2f} GiB with the RuntimeClass's overhead"
    )
    return room, text


def capacity_verdict(
    count: int, runtimeclass: Optional[KubeObject], nodes: List[KubeObject], pods: Optional[List[KubeObject]] = None
) -> Tuple[bool, str]:
    """Whether N episodes fit the eligible nodes at once (episode_room), in words."""
    overhead = ((runtimeclass or {}).get("overhead") or {}).get("podFixed") or {}
    extra = {resource: parse_quantity(overhead.get(resource, "0")) for resource in _RESOURCES}
    need = {resource: count * (parse_quantity(POD_REQUESTS[resource]) + extra[resource]) for resource in _RESOURCES}
    room, room_text = episode_room(runtimeclass, nodes, pods)
    text = (
        f"{count} pods need {need['cpu']:.1f} CPU and {need['memory'] / 2**30:.1f} GiB including "
        f"{count * extra['memory'] / 2**30:.1f} GiB of RuntimeClass overhead; {room_text}"
    )
    return room >= count, text


def preflight_findings(
    *,
    context: str,
    server: Optional[str],
    runtime: Optional[str],
    runtimeclass: Optional[Read] = None,
    reviews: Optional[Read] = None,
    version: Optional[Read] = None,
    nodes: Optional[Read] = None,
    pods: Optional[Read] = None,
    image: Optional[str] = None,
    count: int = DEFAULT_COUNT,
    kubelet_metrics: bool = False,
    capacity: bool = False,
) -> List[Finding]:
    """Everything the reads say about running the batch, in `check`'s order. A read that a
    command did not make (None) gives no finding; `run` reads only the RuntimeClass and the
    access reviews (with --parallelism auto, `capacity`: whether it may read the nodes' room)."""

    def failed(what: str, read: Read) -> Finding:
        return Finding(
            what,
            False,
            f"failed: {read.failure}",
            problem=f"cannot {what} ({read.failure})",
            stop=f"cannot {what} in context {context} ({read.failure}); `check` shows every finding "
            "(nothing was created)",
        )

    findings = [Finding("context", True, f"{context} (API server {server or 'unknown'})")]
    if version is not None:
        if version.failure:
            findings.append(failed("read the server version", version))
        else:
            git_version = ((version.value or {}).get("serverVersion") or {}).get("gitVersion", "unknown")
            findings.append(Finding("server version", True, str(git_version)))
    runtimeclass_known = runtime is None
    if runtime is None:
        findings.append(Finding("runtime", True, "none (the cluster's default runtime; no RuntimeClass)"))
    elif runtimeclass is not None:
        if runtimeclass.failure:
            findings.append(failed(f"read RuntimeClass {runtime}", runtimeclass))
        elif runtimeclass.value is None:
            findings.append(
                Finding(
                    f"RuntimeClass {runtime}",
                    False,
                    "missing",
                    problem=f"RuntimeClass {runtime!r} does not exist",
                    stop=f"RuntimeClass {runtime!r} does not exist in context {context}; list them with "
                    "`kubectl get runtimeclass`, pass --runtime NAME, or --runtime none for the default runtime",
                )
            )
        else:
            runtimeclass_known = True
            scheduling = runtimeclass.value.get("scheduling") or {}
            overhead = json.dumps((runtimeclass.value.get("overhead") or {}).get("podFixed") or {}, sort_keys=True)
            selector = json.dumps(scheduling.get("nodeSelector") or {}, sort_keys=True)
            detail = f"handler {runtimeclass.value.get('handler')}, overhead {overhead}, nodeSelector {selector}, "
            tolerations = f"tolerations {len(scheduling.get('tolerations') or [])}"
            findings.append(Finding(f"RuntimeClass {runtime}", True, detail + tolerations))
    if image is not None:
        findings.append(Finding("image", True, f"{image} (pulled by the nodes; not checked from here)"))
    if nodes is not None:
        if nodes.failure:
            findings.append(failed("list nodes", nodes))
        elif runtimeclass_known:
            running = pods.value if pods is not None and not pods.failure else None
            try:
                fits, text = capacity_verdict(count, runtimeclass.value if runtimeclass else None, nodes.value, running)
            except ValueError as error:
                fits, text = False, f"cannot be computed ({error})"
            if pods is not None and pods.failure:
                text += f"; what runs there is unknown (cannot list the pods of every namespace: {pods.failure})"
            findings.append(
                Finding("capacity", fits, text, problem="not enough allocatable capacity on eligible nodes")
            )
    if reviews is not None:
        if reviews.failure:
            findings.append(failed("review permissions", reviews))
        else:
            kubelet_reviews = [r for r in reviews.value if kubelet_metrics and _asks(r, KUBELET_METRICS_PERMISSIONS)]
            capacity_reviews = [r for r in reviews.value if capacity and _is_capacity_review(r)]
            account_reviews = [r for r in reviews.value if _asks(r, SERVICEACCOUNT_PERMISSIONS)]
            others = [r for r in reviews.value if r not in kubelet_reviews + capacity_reviews + account_reviews]
            denied = denied_permissions(others)
            findings.append(
                Finding(
                    "permissions",
                    not denied,
                    "all granted" if not denied else "denied: " + ", ".join(denied),
                    problem="missing permissions: " + ", ".join(denied),
                    stop=f"context {context} lacks permissions this run needs: {', '.join(denied)}; "
                    "ask the cluster admin or use another context (nothing was created)",
                )
            )
            findings.append(serviceaccount_finding(account_reviews))
            if kubelet_metrics:
                findings.append(kubelet_metrics_finding(context, kubelet_reviews))
            if capacity:
                findings.append(capacity_permissions_finding(context, capacity_reviews))
    return findings


def _asks(review: KubeObject, permissions: Sequence[Tuple[str, str, str, str, bool]]) -> bool:
    """Whether an access review asks for one of these permissions."""
    attributes = (review.get("spec") or {}).get("resourceAttributes") or {}
    return any(
        (attributes.get("verb"), attributes.get("resource"), attributes.get("subresource", "")) == (verb, resource, sub)
        for verb, resource, _, sub, _ in permissions
    )


def serviceaccount_finding(reviews: List[KubeObject]) -> Finding:
    """Whether the run may watch for the namespace's default ServiceAccount before its first Job;
    never a problem: without it the run only skips that wait."""
    denied = denied_permissions(reviews) if reviews else [permission_name(*p) for p in SERVICEACCOUNT_PERMISSIONS]
    return Finding(
        SERVICEACCOUNT_WAIT,
        True,
        "granted: list, watch serviceaccounts (the first Job waits for the namespace's default ServiceAccount)"
        if not denied
        else f"denied: {', '.join(denied)}; a run creates its first Job without waiting for the namespace's default "
        "ServiceAccount, so that Job's figures may include the wait for it",
    )


def _is_capacity_review(review: KubeObject) -> bool:
    """A review of what --parallelism auto reads: list nodes, list pods in every namespace."""
    attributes = (review.get("spec") or {}).get("resourceAttributes") or {}
    asked = (attributes.get("verb"), attributes.get("resource"), "namespace" in attributes)
    return any(asked == (verb, resource, False) for verb, resource, *_ in CAPACITY_PERMISSIONS)


def capacity_permissions_finding(context: str, reviews: List[KubeObject]) -> Finding:
    """Whether --parallelism auto may read the nodes and what runs on them: list nodes, and list
    pods in every namespace (the requests of other namespaces' pods take room too)."""
    denied = denied_permissions(reviews) if reviews else [permission_name(*p) for p in CAPACITY_PERMISSIONS]
    named = ", ".join(f"{name} (every namespace)" if name == "list pods" else name for name in denied)
    return Finding(
        "parallelism auto",
        not denied,
        "granted: list nodes, list pods in every namespace" if not denied else f"denied: {named}",
        problem=f"--parallelism auto lacks: {named}",
        stop=f"--parallelism auto needs {named} in context {context} (what the nodes hold and what already runs "
        "there); pass --parallelism P instead, or ask the cluster admin (nothing was created)",
    )


def kubelet_metrics_finding(context: str, reviews: List[KubeObject]) -> Finding:
    """Whether --kubelet-metrics may read the kubelets' /metrics: get nodes/proxy (a powerful
    permission: it also allows exec into any pod on the node) and list nodes."""
    denied = denied_permissions(reviews) if reviews else [permission_name(*p) for p in KUBELET_METRICS_PERMISSIONS]
    return Finding(
        "kubelet metrics",
        not denied,
        "granted: get nodes/proxy (powerful: it also allows exec into pods on the node), list nodes"
        if not denied
        else "denied: " + ", ".join(denied),
        problem="--kubelet-metrics lacks: " + ", ".join(denied),
        stop=f"--kubelet-metrics needs {', '.join(denied)} in context {context} (the kubelets' /metrics through "
        "the API server); run without --kubelet-metrics, or ask the cluster admin (nothing was created)",
    )


# Pure core: ownership proof ##################################################
# What cleanup may delete, decided from the receipt and live reads alone. Uses the records and
# the numbers above.


@dataclasses.dataclass(frozen=True)
class CleanupPlan:
    """What cleanup may delete, or why it must refuse; decided from the receipt and live reads only."""

    refusal: Optional[str] = None  # set: delete nothing, exit EXIT_REFUSED with this sentence
    namespace_absent: bool = False
    adopted_namespace_uid: Optional[str] = None  # the receipt lacked it; the run's labels prove it
    jobs: Tuple[str, ...] = ()  # live Jobs proven to be the run's, deleted in this order


def receipt_jobs(receipt: Receipt, job_json_uid: Optional[str]) -> List[JobReceipt]:
    """The Jobs a receipt names; a guide-era receipt names the one Job by its job_uid or job.json."""
    if receipt.jobs:
        return list(receipt.jobs)
    return [JobReceipt(JOB_NAME, receipt.guide_job_uid or job_json_uid)]


# Anchored by \Z, for `$` also matches before a final newline: "rollout\n" is no name of this tool's.
_RUN_NAMESPACE = r"^agc-rl-[0-9a-f]{12}\Z"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z"


def receipt_names_problem(receipt: Receipt) -> str:
    """Why a receipt's names cannot be this tool's (they go into kubectl's argument lists), or ""."""
    if not re.match(_RUN_NAMESPACE, receipt.namespace):
        return (
            f"the receipt names namespace {short_repr(receipt.namespace)}, not one this tool creates (agc-rl-<12 hex>)"
        )
    for job in receipt.jobs:
        if not re.match(_DNS_LABEL, job.name):
            return f"the receipt names Job {short_repr(job.name)}, not a name this tool gives"
    return ""


def plan_cleanup(
    receipt: Receipt,
    jobs: List[JobReceipt],
    current_context: Optional[str],
    current_server: Optional[str],
    live_namespace: Optional[KubeObject],
    live_jobs: Dict[str, Optional[KubeObject]],
) -> CleanupPlan:
    """Prove that the namespace and every live Job are this run's: the same API server, the
    namespace's UID and run label, each Job's UID (or, without one recorded, its run label)."""
    namespace = receipt.namespace
    if receipt.server and current_server != receipt.server:
        return CleanupPlan(
            refusal=f"refusing to clean up: the run used the API server {receipt.server}, but context "
            f"{current_context} now points at {current_server}; use the kubeconfig the run used (--kubeconfig); "
            "nothing was deleted"
        )
    if live_namespace is None:
        return CleanupPlan(namespace_absent=True)
    live_uid = (live_namespace.get("metadata") or {}).get("uid")
    labels = (live_namespace.get("metadata") or {}).get("labels") or {}
    live_label = labels.get(RUN_LABEL)
    recorded_uid = receipt.namespace_uid
    adopted = None
    if not recorded_uid:
        # The run stopped while creating the namespace. Its random run id in the label, set by
        # this tool, proves the namespace is the run's; anything else is refused.
        if live_label != receipt.run_id or labels.get("app.kubernetes.io/managed-by") != APP_LABEL_VALUE:
            return CleanupPlan(
                refusal=f"namespace {namespace} exists but the receipt has no namespace UID and the namespace "
                f"lacks this run's labels, so ownership cannot be proven; nothing was deleted; inspect "
                f"`kubectl get namespace {namespace} -o yaml`"
            )
        adopted = recorded_uid = live_uid
    if live_uid != recorded_uid or live_label != receipt.run_id:
        return CleanupPlan(
            refusal=f"refusing to clean up namespace {namespace}: its UID {live_uid} / label "
            f"{RUN_LABEL}={live_label} do not match the receipt ({recorded_uid} / {receipt.run_id}); "
            "nothing was deleted"
        )
    doomed = []
    for job in jobs:
        live_job = live_jobs.get(job.name)
        if live_job is None:
            continue
        job_uid = (live_job.get("metadata") or {}).get("uid")
        job_label = ((live_job.get("metadata") or {}).get("labels") or {}).get(RUN_LABEL)
        if not (job_uid == job.uid if job.uid else job_label == receipt.run_id):
            return CleanupPlan(
                refusal=f"refusing to clean up: Job {namespace}/{job.name} has UID {job_uid}, not the "
                f"one this run recorded ({job.uid}); nothing was deleted"
            )
        doomed.append(job.name)
    return CleanupPlan(adopted_namespace_uid=adopted, jobs=tuple(doomed))


# Pure core: reports ###########################################################
# The summary, CI reports (JUnit, Prometheus) and comparisons, as text, every pod string escaped.
# Uses the sections above.


# Lone surrogates too: a path or flag with a byte that is not UTF-8 reaches Python as one (\udcff).
_UNPRINTABLE = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def _escaped(match: re.Match[str]) -> str:
    """A character shown as its Python escape (\\x1b, \\u202e): visible, and inert."""
    return match.group().encode("unicode_escape").decode("ascii")


def printable(text: str, keep_newlines: bool = False) -> str:
    """Text for a terminal or a CI log with every control character (and bidirectional override)
    escaped, so nothing a pod printed can move the cursor, recolour the screen or forge a line."""
    if not keep_newlines:
        text = text.replace("\n", "\\n")
    return re.sub(_UNPRINTABLE, _escaped, text.replace("\t", " "))


def _display_width(text: str) -> int:
    """Terminal columns of a text: East Asian wide and full-width characters take two."""
    import unicodedata  # noqa: PLC0415 - only tables need it; keeps --help fast

    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


_WIDE = "\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef"  # CJK characters and punctuation, full-width forms
# A line breaks before a wide character (with the closing marks after it), or before a run of others.
_LINE_BREAKS = rf"[{_WIDE}][\uff0c\u3002\uff1b\uff1a\u3001\uff09\u300d\u300f\uff01\uff1f),.;:!?\]]*\s*|[^{_WIDE}]+"


def _tokens(text: str) -> List[str]:
    """Where a line may break: at spaces, and between wide characters (Chinese breaks anywhere,
    but never before its closing punctuation)."""
    return [token for word in re.findall(r"\S+\s*|\s+", text) for token in re.findall(_LINE_BREAKS, word)]


def _name_parts(word: str) -> List[str]:
    """Where a word too long for a line may break: after each _ - / inside a name."""
    return re.findall(r"[!-~]+?[_/-](?=[!-~])|\S+\s*|\s+", word)


def _wrap_pieces(token: str, room: int) -> List[str]:
    """A token as it fits `room` columns: whole, else in _name_parts, a part still too long
    broken anywhere."""
    if _display_width(token.rstrip()) <= room:
        return [token]
    return [
        part for run in _name_parts(token) for part in (list(run) if _display_width(run.rstrip()) > room else [run])
    ]


def wrap_text(text: str, width: int, indent: str = "") -> List[str]:
    """`text` in lines of at most `width` terminal columns (CJK characters count two), broken at
    spaces and between wide characters, else inside a too long name (_wrap_pieces); lines after
    the first start with `indent`."""
    lines: List[str] = []
    line = ""
    for token in _tokens(text):
        for piece in _wrap_pieces(token, width - len(indent)):
            if line.strip() and _display_width((line + piece).rstrip()) > width:
                lines.append(line.rstrip())
                line = indent
            line += piece
    if line.strip() or not lines:
        lines.append(line.rstrip())
    return lines


def _longest_piece(text: str) -> int:
    """The narrowest a column holding `text` can be without breaking a name inside its parts."""
    return max((_display_width(part.rstrip()) for token in _tokens(text) for part in _name_parts(token)), default=0)


def markdown_literal(text: str) -> str:
    """Text shown verbatim in Markdown (a GitHub step summary): a fenced block whose fence is
    longer than any run of backticks inside, so no heading, link or image can be added."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{printable(text)}\n{fence}\n"


def _number(value: float, decimals: int) -> str:
    """`value` to `decimals` places, without the sign of a value that rounds to zero ("-0.0")."""
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _seconds(value: Optional[float]) -> str:
    """A duration from a fine clock (the client's, the node's, the kubelet's), to three significant
    digits: milliseconds below a second ("752 ms", "71.1 ms", "0.7 ms"), else seconds ("1.42 s")."""
    if value is None:
        return "-"
    if abs(value) < 0.9995:
        return f"{_number(value * 1000, 0 if abs(value) >= 0.09995 else 1)} ms"
    return f"{_number(value, 2)} s"


Clocks = Tuple[str, str, Optional[str]]  # a FIGURE_CLOCKS entry: start, end, why it can read negative


def _resolution(clocks: Clocks) -> float:
    return max(CLOCK_RESOLUTION[clocks[0]], CLOCK_RESOLUTION[clocks[1]])


def clocked_text(value: Optional[float], clocks: Clocks) -> str:
    """A value as precise as its clocks, never more: whole seconds between two whole-second stamps
    (of one clock or two: "0 s", never "0.0 ms"), tenths of a second where a whole-second stamp meets a finer clock (as
    the guide prints them), 10 ms steps for clock ticks, else _seconds."""
    if value is None:
        return "-"
    resolution = _resolution(clocks)
    if resolution >= 1:
        whole = min(CLOCK_RESOLUTION[clocks[0]], CLOCK_RESOLUTION[clocks[1]]) >= 1  # two whole-second stamps
        return f"{_number(value, 0 if whole else 1)} s"
    if resolution >= 0.01:
        return f"{_number(round(value * 100) * 10.0, 0)} ms" if abs(value) < 0.995 else f"{_number(value, 2)} s"
    return _seconds(value)


def figure_text(value: Optional[float], figure: str) -> str:
    """A figure of FIGURE_CLOCKS as precise as its clocks (clocked_text)."""
    return clocked_text(value, FIGURE_CLOCKS[figure])


def _exact_duration(seconds: float) -> str:
    """A clock's resolution or a histogram bucket's bound, exactly as defined: "0 s", "10 ms", "12.5 ms", "1 s"."""
    return f"{seconds:g} s" if seconds == 0 or seconds >= 1 else f"{seconds * 1000:g} ms"


def clocks_text(clocks: Clocks) -> str:
    """Which clocks a value comes from and the resolution that limits it: "API server, 1 s clock",
    "node clock", or for a value that mixes two clocks "mixed: API server 1 s + node"."""
    start, end, _ = clocks
    if start == end:
        resolution = CLOCK_RESOLUTION[start]
        return f"{start}, {_exact_duration(resolution)} clock" if resolution >= 0.01 else f"{start} clock"
    coarse = _resolution(clocks)
    named = [
        f"{clock} {_exact_duration(coarse)}" if CLOCK_RESOLUTION[clock] == coarse >= 0.01 else clock
        for clock in (start, end)
    ]
    return "mixed: " + " + ".join(named)


def clock_text(figure: str) -> str:
    """The clocks of a figure of FIGURE_CLOCKS (clocks_text)."""
    return clocks_text(FIGURE_CLOCKS[figure])


def _figure_table(
    header: Sequence[str],
    rows: Sequence[Tuple[str, Clocks, Sequence[Optional[float]]]],
    sources: Optional[Sequence[str]] = None,
) -> List[str]:
    """Lines of figures: a label, each value formatted by its clocks, who measured it (`sources`,
    when given: FIGURE_SOURCES), then its clocks; a row with a negative value is marked "*", and a
    note under the table says why it can be."""
    cells = [[label, *(clocked_text(value, clocks) for value in values)] for label, clocks, values in rows]
    width = max(len(line[0]) for line in [list(header), *cells]) + 1
    value_widths = [max(len(line[i]) + 2 for line in [list(header), *cells]) for i in range(1, len(header))]
    by = [f"  {source:<{max(len(s) for s in [*sources, 'by'])}}" for source in ["by", *sources]] if sources else []
    lines = [
        "".join([f"{header[0]:<{width}}", *(f"{h:>{w}}" for h, w in zip(header[1:], value_widths)), *by[:1], "  clock"])
    ]
    notes: List[str] = []
    for number, ((label, clocks, _), line) in enumerate(zip(rows, cells)):
        negative = any(text.startswith("-") and text != "-" for text in line[1:])
        lines.append(
            "".join([f"{label:<{width}}", *(f"{text:>{w}}" for text, w in zip(line[1:], value_widths))])
            + (by[number + 1] if by else "")
            + f"  {clocks_text(clocks)}{' *' if negative else ''}"
        )
        if negative:
            why = clocks[2] or "its clock cannot give a negative value: results.json was changed"
            notes += wrap_text(f"* {label}: negative because {why}", SUMMARY_WIDTH, "  ")
    return lines + notes


def _many_sample_figures(results: Results, phase: str) -> Tuple[Optional[float], Optional[float]]:
    """(p99, mean) of a phase over the episodes' rows, when there are MANY_SAMPLES of them."""
    values = [value for row in results.get("pods") or [] if (value := finite_number(row.get(phase))) is not None]
    if len(values) < MANY_SAMPLES:
        return None, None
    return percentile(values, 0.99), math.fsum(values) / len(values)


def verdict_line(results: Results, breaches: Sequence[str] = ()) -> str:
    """One line: how many episodes validated, the reward, the two batch figures, and what failed."""
    left_out = len(results.get("failed_episodes") or [])
    valid = f"{results['successful_episodes']}/{results['episodes']} episodes valid"
    if left_out:
        valid += f" ({left_out} left out under --max-failed-episodes {results.get('max_failed_episodes')})"
    text = (
        f"verdict: {valid}, reward_sum {results['reward_sum']}; all ready "
        f"{figure_text(results.get('batch_to_all_ready_seconds'), 'batch_to_all_ready_seconds')}, all rewards "
        f"{figure_text(results.get('batch_to_all_rewards_seconds'), 'batch_to_all_rewards_seconds')}"
    )
    if breaches:
        text += f"; latency budget breached (exit {EXIT_THRESHOLD}): {'; '.join(breaches)}"
    return text


def render_summary(results: Results, files: Sequence[Tuple[str, str]] = (), breaches: Sequence[str] = ()) -> str:
    """The terminal summary: headline figures, then one line per phase (p50, p95, max; p99 and
    mean from MANY_SAMPLES on), each formatted by its clocks and naming them; notes for negative
    values; where the files are (`files`: what, path); the verdict last."""
    lines = [
        f"namespace {results['namespace']}  context {results['context']}  "
        f"runtime {results['runtime'] or '(none)'}  image {results['image']}",
        f"episodes {results.get('episodes_per_round', results['episodes'])} x {results['rounds']} round(s), "
        "parallelism "
        f"{results['parallelism']}: {results['successful_episodes']} succeeded, reward sum "
        f"{results['reward_sum']}",
    ]
    if results.get("worker", BUILTIN_WORKER) != BUILTIN_WORKER:
        lines.append(
            f"worker {results['worker']}: reward mean {results.get('reward_mean')!r}, "
            f"min {results.get('reward_min')!r}, max {results.get('reward_max')!r} (rewards.jsonl)"
        )
    for note in results.get("notes") or []:
        lines += wrap_text(f"note: {note}", SUMMARY_WIDTH, "  ")
    queued_for, client_queued_for = (json_number(results.get(key)) for key in QUEUE_FIGURES)
    if client_queued_for is not None or (queued_for or 0) > 0:
        api_wait = "unknown" if queued_for is None else f"{queued_for:.0f} s"
        lines.append(
            f"queued: {api_wait} from Job created to admitted (job controller's clock, whole seconds; the client "
            f"saw {_seconds(client_queued_for)}); the batch figures count from the admission"
        )
    lines.append("")
    batch = [
        ("Job created -> all episodes ready", "batch_to_all_ready_seconds"),
        ("Job created -> all rewards", "batch_to_all_rewards_seconds"),
        ("Job created -> all containers started", "batch_to_all_started_seconds"),
        ("Job created -> all containers finished", "batch_to_all_finished_seconds"),
        ("client submit -> Job Complete observed", "client_job_complete_seconds"),
    ]
    lines += _figure_table(
        ["batch figure", "value"],
        [(label, FIGURE_CLOCKS[key], [json_number(results.get(key))]) for label, key in batch],
        [FIGURE_SOURCES[key] for _, key in batch],
    )
    many = {phase: _many_sample_figures(results, phase) for phase in PHASES}
    extra = any(p99 is not None for p99, _ in many.values())
    sources = [row.get("scheduled_source") for row in results.get("pods") or []]
    rows = []
    for phase in PHASES:
        stats = results["phases"].get(phase)
        values = [json_stat(stats, stat) for stat in ("p50", "p95", "max")] + (list(many[phase]) if extra else [])
        clocks = FIGURE_CLOCKS[phase]
        if phase == "pod_to_scheduled_seconds" and "condition" in sources and "event" not in sources:
            clocks = SCHEDULED_BY_CONDITION
        rows.append((PHASE_LABELS[phase], clocks, values))
    header = ["phase (per episode)", "p50", "p95", "max"] + (["p99", "mean"] if extra else [])
    lines += ["", *_figure_table(header, rows)]
    lines += startup_source_lines(results)
    lines += output_source_lines(results)
    lines += runtime_operation_lines(results.get("runtime_operations"))
    nodes = ", ".join(f"{node}: {episodes}" for node, episodes in results["nodes"].items())
    lines += ["", f"nodes: {nodes}", f"image IDs: {', '.join(results['image_ids']) or '-'}"]
    if results.get("image_pinned"):
        lines.append(f"image pinned: {results['image_pinned']}")
    warmup = results.get("warmup")
    for node, warm in sorted((warmup["per_node"] if warmup else {}).items()):
        ready = figure_text(warm.get("pod_to_ready_seconds"), "pod_to_ready_seconds")
        lines.append(f"warm-up {node}: ready {ready}, image {warm.get('image_pull')}")
    if files:
        lines += ["", *(f"{what}: {path}" for what, path in files)]
    lines.append(verdict_line(results, breaches))
    return "\n".join(lines) + "\n"


def startup_source_lines(results: Results) -> List[str]:
    """Where the start-up rows came from: the image cache, the scheduling clock, the kernel."""
    rows = results.get("pods") or []
    lines = [""]
    cache = results.get("image_cache")
    if cache:
        pulls = [seconds for row in rows if (seconds := row["image_pull"]["seconds"]) is not None]
        pulled = f" (pull p50 {_seconds(percentile(pulls, 0.5))})" if pulls else ""
        lines.append(
            f"image cache (kubelet Pulled events): {cache.get('cached', 0)} cached, {cache.get('pulled', 0)} "
            f"pulled{pulled}, {cache.get('unknown', 0)} unknown: cache_state {results.get('cache_state')}"
        )
    sources = [row.get("scheduled_source") for row in rows]
    kernels = [row.get("kernel") for row in rows]
    lines.append(
        f"scheduled from: {sources.count('event')} Scheduled events (microseconds), "
        f"{sources.count('condition')} PodScheduled conditions (whole seconds)"
    )
    disagree = sum(1 for row in rows if row.get("clock_note"))
    lines += wrap_text(
        f"kernel: {kernels.count('sandbox')} booted in the sandbox, {kernels.count('shared')} shared (booted before "
        f"the pod, or restored from a snapshot), {kernels.count(None)} unknown"
        + (f" ({disagree} whose clocks disagree: pods[].clock_note)" if disagree else ""),
        SUMMARY_WIDTH,
        "  ",
    )
    return lines


def output_source_lines(results: Results) -> List[str]:
    """How the episodes' output was read, when not all plainly: pods without a termination
    message, episodes read with a note, pod output that was not saved."""
    missing = results.get("pods_without_termination_message", 0)
    noted = sum(1 for row in results.get("pods") or [] if row.get("log_notes"))
    not_saved = results.get("log_bytes_not_saved", 0)
    lines = []
    if missing or noted:
        lines += wrap_text(
            f"episode output: {missing} pod(s) succeeded without a termination message (their logs alone carried "
            f"their events), {noted} episode(s) read with a note (pods[].log_notes in results.json)",
            SUMMARY_WIDTH,
            "  ",
        )
    if not_saved:
        lines += wrap_text(
            f"pod logs: {not_saved:,} bytes read but not saved (each <pod>.log keeps {LOG_FILE_LIMIT:,} bytes, a run's "
            f"logs {LOG_DIR_BUDGET:,} in all); every ready and reward line was saved",
            SUMMARY_WIDTH,
            "  ",
        )
    return lines


def _bucket_text(bucket: Any) -> str:
    if not bucket:
        return "-"
    lower, upper = bucket
    return f"({_exact_duration(lower)}, {_exact_duration(upper) if upper is not None else '+Inf'}]"


def runtime_operation_lines(operations: Optional[RuntimeOperations]) -> List[str]:
    """The kubelet's runtime histograms (--kubelet-metrics): counts, exact means, and each
    quantile with the bucket it lies in; an interpolated value is never more precise than that."""
    if not operations:
        return []
    lines = [
        "",
        f"{'runtime operation (kubelet)':<44}"
        f"{'count':>7}{'mean':>11}{'p50 ~':>11}  {'p50 bucket':<20}{'p95 ~':>10}  p95 bucket",
    ]
    pooled = operations.get("pooled") or {}
    crosscheck = operations.get("sandbox_crosscheck")
    handler = f"{HANDLER_SANDBOX} {operations.get('handler') or '(default)'} (cross-check)"
    rows = [(operation, pooled.get(operation)) for operation, *_ in KUBELET_OPERATIONS]
    for label, figures in [*rows, (handler, crosscheck["handler_figures"] if crosscheck else None)]:
        if not figures:
            lines.append(f"{label:<44}{'-':>7}")
            continue
        lines.append(
            f"{label:<44}{figures['count']:>7}{_seconds(figures['mean_seconds']):>11}"
            f"{_seconds(figures['p50_seconds']):>11}  {_bucket_text(figures['p50_bucket']):<20}"
            f"{_seconds(figures['p95_seconds']):>10}  {_bucket_text(figures['p95_bucket'])}"
        )
    if crosscheck and crosscheck["note"]:
        lines += wrap_text(f"  note: {crosscheck['note']}", SUMMARY_WIDTH, "    ")
    for node, entry in sorted((operations.get("nodes") or {}).items()):
        if entry.get("note"):
            lines.append(f"  node {node}: {entry['note']}")
    lines.append("  (node-wide counters, read before and after the run; quantiles interpolated within buckets)")
    return lines


def headline(results: Results) -> Dict[str, object]:
    """The guide's JSON summary: results without the per-episode rows."""
    return {key: value for key, value in results.items() if key != "pods"}


def markdown_summary(results: Results) -> str:
    """A table for CI step summaries (GITHUB_STEP_SUMMARY)."""
    lines = [
        f"### rl-batch-demo: {results['successful_episodes']}/{results['episodes']} episodes, "
        f"reward sum {results['reward_sum']}",
        "",
        "| figure | value | measured by | clock |",
        "| --- | --- | --- | --- |",
    ]
    for key in THRESHOLD_METRICS:
        value = figure_text(json_number(results.get(key)), key)
        lines.append(f"| {key} | {value} | {FIGURE_SOURCES[key]} | {clock_text(key)} |")
    lines += [
        f"| runtime | {results['runtime'] or '(none)'} | | |",
        f"| parallelism | {results['parallelism']} | | |",
        f"| namespace | {results['namespace']} | | |",
    ]
    return "\n".join(lines) + "\n"


def render_events_text(events: List[KubeObject]) -> str:
    """Events as a table sorted by creation time, like `kubectl get events --sort-by`."""

    def key(event: KubeObject) -> Tuple[str, str]:
        return (event.get("metadata", {}).get("creationTimestamp") or "", event.get("metadata", {}).get("name", ""))

    lines = ["CREATED               TYPE     REASON                 OBJECT                              MESSAGE"]
    for event in sorted(events, key=key):
        involved = event.get("involvedObject", {})
        lines.append(
            f"{event.get('metadata', {}).get('creationTimestamp', '-'):<22}"
            f"{event.get('type', '-'):<9}{event.get('reason', '-'):<23}"
            f"{(involved.get('kind', '?').lower() + '/' + involved.get('name', '?')):<36}"
            f"{' '.join(str(event.get('message', '')).split())}"
        )
    return "\n".join(lines) + "\n"


def _ratio(value: float, base: float) -> Optional[float]:
    try:
        return finite_number(value / base)
    except OverflowError:  # a hand-edited integer beyond a float's range
        return None


def comparison(runs: List[Tuple[str, Results]]) -> List[ComparisonRow]:
    """One row per figure: each run's value and its ratio to the first run's."""
    figures = list(COMPARE_FIGURES)
    figures += [(f"{phase}:{stat}", f"{PHASE_LABELS[phase]} {stat} (s)") for phase in PHASES for stat in ("p50", "p95")]
    figures += [(f"runtime_operations:{name}", f"{name} mean (s, kubelet)") for name, *_ in KUBELET_OPERATIONS]
    rows: List[ComparisonRow] = []
    for key, label in figures:
        values: List[Optional[float]] = []
        for _, results in runs:
            if key.startswith("runtime_operations:"):
                operations = results.get("runtime_operations")
                pooled = operations["pooled"].get(key.split(":")[1]) if operations else None
                values.append(json_number(pooled.get("mean_seconds")) if isinstance(pooled, dict) else None)
            elif ":" in key:
                phase, stat = key.split(":")
                stats = (results.get("phases") or {}).get(phase)
                values.append(json_number(stats.get(stat)) if stats else None)
            else:
                values.append(json_number(results.get(key, 1 if key == "rounds" else None)))
        base = values[0]
        # A ratio only means something between two positive durations, and only when a float holds it.
        ratios = [
            None if (base is None or base <= 0 or value is None or value < 0) else _ratio(value, base)
            for value in values
        ]
        rows.append({"figure": key, "label": label, "values": values, "ratios": ratios})
    return rows


def render_comparison(names: List[str], rows: List[ComparisonRow], style: str) -> str:
    def cell(value: Optional[float], ratio: Optional[float], first: bool) -> str:
        if value is None:
            return "-"
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        return text if first or ratio is None else f"{text} (x{ratio:.2f})"

    table = [
        [row["label"]] + [cell(v, r, i == 0) for i, (v, r) in enumerate(zip(row["values"], row["ratios"]))]
        for row in rows
    ]
    return render_table([["figure", *names], *table], style)


def render_table(lines: List[List[Any]], style: str, width: Optional[int] = None) -> str:
    """A header line and rows as aligned text or Markdown; every cell made printable (a column
    name may be a directory name), Markdown cells with their pipes escaped. Text wider than
    `width` terminal columns (CJK characters count two) has its widest columns narrowed and
    their cells wrapped, each row then followed by an empty line so that rows stay apart."""
    cells = [[printable(str(cell)) for cell in line] for line in lines]
    if style == "markdown":
        escaped = [[cell.replace("\\", "\\\\").replace("|", "\\|") for cell in line] for line in cells]
        out = ["| " + " | ".join(escaped[0]) + " |", "|" + " --- |" * len(escaped[0])]
        out += ["| " + " | ".join(line) + " |" for line in escaped[1:]]
        return "\n".join(out) + "\n"
    natural = [max(_display_width(line[i]) for line in cells) for i in range(len(cells[0]))]
    widths = list(natural)
    words = [max(_longest_piece(line[i]) for line in cells) for i in range(len(widths))]
    for limits in ([max(TABLE_COLUMN_MIN, word) for word in words], [TABLE_COLUMN_MIN] * len(widths)):
        floor = [min(limit, column) for limit, column in zip(limits, natural)]  # no name broken, if possible
        while width is not None and sum(widths) + 2 * (len(widths) - 1) > width and widths != floor:
            widest = max((i for i in range(len(widths)) if widths[i] > floor[i]), key=lambda i: widths[i])
            widths[widest] -= 1
    wrapped = widths != natural
    out = []
    for line in cells:
        parts = [wrap_text(cell, column) for cell, column in zip(line, widths)]
        for row in range(max(len(part) for part in parts)):
            texts = [part[row] if row < len(part) else "" for part in parts]
            out.append("  ".join(text + " " * (column - _display_width(text)) for text, column in zip(texts, widths)))
            out[-1] = out[-1].rstrip()
        if wrapped:
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# CI reports: JUnit XML and the Prometheus text format ------------------------
#
# A run's outcome as test suites: plain dicts first (junit_suites), serialised once at the edge
# (render_junit_xml). Pod content is untrusted: every string is cleaned of what XML 1.0 forbids
# and escaped by ElementTree; every metrics label value is escaped per the exposition format.


def xml_safe(text: Any) -> str:
    """Text that XML 1.0 can carry: forbidden control characters become visible escapes."""
    return re.sub(_XML_FORBIDDEN, _escaped, str(text))


def _finite_seconds(value: Any) -> float:
    """A duration for a `time` attribute: finite and not negative, else 0."""
    number = finite_number(value)
    return number if number is not None and number >= 0 else 0.0


def _pod_seconds(pod: KubeObject) -> float:
    """Pod created (API server) -> container finished (the node's runtime), whole seconds (0 if unknown)."""
    try:
        created = optional_timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
        terminated = (_container_status(pod).get("state") or {}).get("terminated") or {}
        finished = optional_timestamp(terminated.get("finishedAt"))
    except (AttributeError, TypeError, ValueError):
        return 0.0
    return _finite_seconds(difference(finished, created))


def _job_seconds(job: Optional[KubeObject]) -> float:
    """Job created -> its Complete or Failed condition, API server clock, whole seconds (0 if unknown)."""
    if not job:
        return 0.0
    try:
        created = optional_timestamp((job.get("metadata") or {}).get("creationTimestamp"))
        ended = _condition_time(job, "Complete") or _condition_time(job, "Failed")
    except (AttributeError, TypeError, ValueError):
        return 0.0
    return _finite_seconds(difference(ended, created))


def _case(
    classname: str, name: str, seconds: float, outcome: str = "passed", message: str = "", text: str = ""
) -> JUnitCase:
    return {"classname": classname, "name": name, "time": seconds, "outcome": outcome, "message": message, "text": text}


def junit_suites(
    results: Optional[Results],
    rounds: List[StartedRound],
    thresholds: Dict[str, float],
    error: Optional[Tuple[int, str, Optional[str]]],
) -> List[JUnitSuite]:
    """A run as JUnit suites: one per round, one test case per episode, named after its pod.

    `results` is results.json when the run got that far; otherwise `rounds` holds what each
    started round left on disk ({"round", "job", "pods" or None, "job_object" or None}).
    `error` is (exit code, message, the pod an EpisodeInvalid names) when the run failed.
    Rounds before the one in progress validated (the run moved on); in the round in progress the
    invalid episode is a failure and the rest are skipped (not judged); any other failure is one
    error case named "run". One case per --threshold follows the episodes of the last suite."""
    suites: List[JUnitSuite] = []
    if results is not None:
        for figures in results["round_results"]:  # one per round, even for one round
            number, job = figures["round"], figures["job"]
            classname = f"{JUNIT_SUITE_NAME}.{job}"
            cases = []
            for row in results.get("pods") or []:
                if row.get("round", 1) == number:
                    taken = _finite_seconds(difference(row.get("finished_at"), row.get("created_at")))
                    cases.append(_case(classname, str(row["pod"]), taken))
                    for lost in row.get("lost_attempts") or []:  # --infra-retries: run again, not judged
                        why = f"lost to the infrastructure and run again as {row['pod']}: {lost.get('cause')}"
                        cases.append(_case(classname, str(lost.get("pod")), 0.0, "skipped", why))
            # set aside under --max-failed-episodes: not judged, and the run did not fail for them
            for entry in results.get("failed_episodes") or []:
                if entry.get("round", 1) == number:
                    why = f"left out of the figures (--max-failed-episodes): {entry.get('cause')}"
                    cases.append(_case(classname, str(entry.get("pod")), 0.0, "skipped", why))
            seconds = _finite_seconds(figures.get("client_job_complete_seconds"))
            suites.append({"round": number, "job": job, "time": seconds, "cases": cases})
    else:
        for index, started in enumerate(rounds):
            in_progress = error is not None and index == len(rounds) - 1
            classname = f"{JUNIT_SUITE_NAME}.{started['job']}"
            cases = []
            for pod in started.get("pods") or []:
                name = str((pod.get("metadata") or {}).get("name") or "(unnamed pod)")
                if not in_progress and infra_loss(pod):  # --infra-retries ran its episode again
                    why = f"lost to the infrastructure and run again: {infra_loss(pod)}"
                    cases.append(_case(classname, name, _pod_seconds(pod), "skipped", why))
                elif not in_progress:
                    cases.append(_case(classname, name, _pod_seconds(pod)))
                elif error is not None and name == error[2]:
                    cases.append(_case(classname, name, _pod_seconds(pod), "failure", error[1], error[1]))
                elif error is not None and error[2] is not None:
                    reason = f"not judged: validation stops at the first invalid episode ({error[2]})"
                    cases.append(_case(classname, name, _pod_seconds(pod), "skipped", reason))
                else:
                    code = error[0] if error is not None else 0
                    how = "was interrupted" if code == EXIT_INTERRUPTED else f"stopped (exit {code})"
                    status = pod.get("status")
                    phase = (status.get("phase") if isinstance(status, dict) else None) or "unknown"
                    reason = f"not validated: the run {how} with this pod in phase {phase}"
                    cases.append(_case(classname, name, _pod_seconds(pod), "skipped", reason))
            seconds = _job_seconds(started.get("job_object"))
            suites.append({"round": started["round"], "job": started["job"], "time": seconds, "cases": cases})
    if not suites:
        suites.append({"round": None, "job": None, "time": 0.0, "cases": []})
    last = suites[-1]["cases"]
    episode_failed = error is not None and error[2] is not None and results is None
    if (
        episode_failed
        and error is not None
        and not any(case["outcome"] == "failure" for suite in suites for case in suite["cases"])
    ):  # the invalid pod is not in pods.json (it was never listed)
        job = suites[-1]["job"] or JOB_NAME
        last.append(_case(f"{JUNIT_SUITE_NAME}.{job}", str(error[2]), 0.0, "failure", error[1], error[1]))
    if error is not None and error[0] != EXIT_THRESHOLD and not episode_failed:
        last.append(_case(JUNIT_SUITE_NAME, "run", 0.0, "error", error[1], error[1]))
    for metric, limit in sorted(thresholds.items()):
        name = f"threshold {metric} <= {limit:g} s"
        classname = f"{JUNIT_SUITE_NAME}.thresholds"
        value = results.get(metric) if results is not None else None
        if results is None:
            last.append(_case(classname, name, 0.0, "skipped", "not judged: the run did not validate"))
        elif finite_number(value) is None:  # unknown: breached, as check_thresholds judges it
            [breach] = check_thresholds(results, {metric: limit})
            last.append(_case(classname, name, 0.0, "failure", f"latency budget breached: {breach}", breach))
        else:
            breaches = check_thresholds(results, {metric: limit})
            figure = f"{metric} = {value:.3f} s, budget {limit:g} s"
            if breaches:
                last.append(_case(classname, name, 0.0, "failure", f"latency budget breached: {breaches[0]}", figure))
            else:
                last.append(_case(classname, name, 0.0, text=figure))
    return suites


def render_junit_xml(suites: List[JUnitSuite], properties: Dict[str, str]) -> str:
    """JUnit XML as GitLab's test reports and GitHub's JUnit actions read it: <testsuites>, one
    <testsuite> per round, <testcase classname name time> with <failure>, <error> or <skipped>."""
    from xml.etree import ElementTree  # noqa: PLC0415 - only a run with --junit pays for this import

    def attributes(cases: List[JUnitCase], seconds: float) -> Dict[str, str]:  # of <testsuites> and <testsuite>
        outcomes = [case["outcome"] for case in cases]
        counted = {"tests": None, "failures": "failure", "errors": "error", "skipped": "skipped"}
        totals = {key: str(len(outcomes) if of is None else outcomes.count(of)) for key, of in counted.items()}
        return {"name": JUNIT_SUITE_NAME, **totals, "time": f"{seconds:.3f}"}

    def short(message: str) -> str:
        text = xml_safe(message)
        return text if len(text) <= JUNIT_MESSAGE_LIMIT else text[: JUNIT_MESSAGE_LIMIT - 3] + "..."

    every_case = [case for suite in suites for case in suite["cases"]]
    root = ElementTree.Element("testsuites", attributes(every_case, sum(suite["time"] for suite in suites)))
    seen: Dict[Tuple[str, str], int] = {}
    for suite in suites:
        cases = suite["cases"]
        element = ElementTree.SubElement(root, "testsuite", attributes(cases, suite["time"]))
        suite_properties = dict(properties)
        if suite["round"] is not None:
            suite_properties.update(round=str(suite["round"]), job=str(suite["job"]))
        holder = ElementTree.SubElement(element, "properties")
        for key, value in sorted(suite_properties.items()):
            ElementTree.SubElement(holder, "property", name=xml_safe(key), value=xml_safe(value))
        for case in cases:
            classname, name = xml_safe(case["classname"]), xml_safe(case["name"])
            seen[(classname, name)] = seen.get((classname, name), 0) + 1
            if seen[(classname, name)] > 1:  # test names must be unique
                name = f"{name} #{seen[(classname, name)]}"
            testcase = ElementTree.SubElement(
                element, "testcase", classname=classname, name=name, time=f"{case['time']:.3f}"
            )
            if case["outcome"] != "passed":  # <failure>, <error> or <skipped>; a skipped case has no text
                outcome = ElementTree.SubElement(testcase, case["outcome"], message=short(case["message"]))
                if case["outcome"] != "skipped":
                    outcome.text = xml_safe(case["text"])
            elif case["text"]:
                ElementTree.SubElement(testcase, "system-out").text = xml_safe(case["text"])
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def _metric_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _metric_label_value(value: Any) -> str:
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate as \udcff
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _metric_number(value: Any) -> Optional[str]:
    """A sample value as the exposition format writes it; None for what it must not carry (NaN, Inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return str(value)
    return repr(float(value)) if math.isfinite(value) else None


MetricRun = Tuple[Dict[str, str], Optional[Results], int]  # labels, results.json (None: not valid), exit code


def render_metrics(results: Optional[Results], labels: Dict[str, str], exit_code: int, finished_at: float) -> str:
    """One run's figures as rl_batch_demo_* gauges (render_metrics_of_runs)."""
    return render_metrics_of_runs([(labels, results, exit_code)], finished_at)


def _metric_families(
    results: Optional[Results], exit_code: int, finished_at: float
) -> List[Tuple[str, str, List[Tuple[Dict[str, str], Any]]]]:
    """(name suffix, help, samples (extra labels, value)) of one run: figures only when it
    validated; exit code and time always."""
    families: List[Tuple[str, str, List[Tuple[Dict[str, str], Any]]]] = [
        (
            "exit_code",
            "Exit code of the last run (0 success, 1 episode invalid, 4 timeout, 5 budget breached; see --help).",
            [({}, exit_code)],
        ),
        (
            "validated",
            "1 when every episode of the last run validated and results.json was written, else 0.",
            [({}, int(results is not None))],
        ),
        (
            "last_run_timestamp_seconds",
            "When the last run ended: client wall clock, epoch seconds.",
            [({}, finished_at)],
        ),
    ]
    if results is not None:
        families += [
            ("episodes", "Episodes run (episodes per round x rounds).", [({}, results.get("episodes"))]),
            ("successful_episodes", "Episodes that validated.", [({}, results.get("successful_episodes"))]),
            ("reward_sum", "Sum of the episodes' rewards.", [({}, results.get("reward_sum"))]),
        ]
        for metric in THRESHOLD_METRICS:
            families.append(
                (metric, f"results.json {metric}, seconds (see the README's figures).", [({}, results.get(metric))])
            )
        phases = results.get("phases") or {}
        for stat in ("p50", "p95", "max", "samples"):
            samples = [({"phase": phase[: -len("_seconds")]}, json_stat(phases.get(phase), stat)) for phase in PHASES]
            if stat == "samples":
                families.append(("phase_samples", "Episodes with a value for each phase.", samples))
            else:
                families.append((f"phase_{stat}_seconds", f"{stat} of each per-episode phase, seconds.", samples))
    return families


def render_metrics_of_runs(runs: Sequence[MetricRun], finished_at: float) -> str:
    """Runs' figures as rl_batch_demo_* gauges in the Prometheus text exposition format
    (node_exporter's textfile collector, a Pushgateway): HELP and TYPE, then each family's
    samples together, every run's (told apart by its labels: `reproduce` labels each group)."""
    families: Dict[str, Tuple[str, List[Tuple[Dict[str, str], Any]]]] = {}
    for labels, results, exit_code in runs:
        for suffix, help_text, samples in _metric_families(results, exit_code, finished_at):
            families.setdefault(suffix, (help_text, []))[1].extend(({**labels, **extra}, v) for extra, v in samples)
    lines = []
    for suffix, (help_text, samples) in families.items():
        written = [(merged, text) for merged, value in samples if (text := _metric_number(value)) is not None]
        if not written:
            continue
        name = METRICS_PREFIX + suffix
        lines.append(f"# HELP {name} {_metric_help(help_text)}")
        lines.append(f"# TYPE {name} gauge")
        for merged, text in written:
            label_text = ",".join(f'{key}="{_metric_label_value(merged[key])}"' for key in sorted(merged))
            lines.append(f"{name}{{{label_text}}} {text}")
    return "\n".join(lines) + "\n"


def metrics_labels(settings: RunSettings) -> Dict[str, str]:
    """The labels of a run's --metrics-file samples: what ran, so that series of runs compare."""
    return {
        "runtime": settings.runtime if settings.runtime is not None else NO_RUNTIME,
        "image": settings.image,
        "parallelism": "auto" if settings.parallelism_auto else str(settings.parallelism),
    }


# Pure core: timeline picture ##################################################
# timeline.svg from results.json. Uses the reports' escaping and the constants.


def _xml(text: str) -> str:
    """Text for the SVG: characters XML 1.0 forbids made visible escapes (`xml_safe`), markup escaped."""
    text = xml_safe(text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


TIMELINE_LABEL_WIDTH, TIMELINE_PLOT_WIDTH, TIMELINE_ROW_HEIGHT = 230, 760, 16


def _stamp_resolution(row: PodRow, key: str) -> float:
    """The resolution of one of a row's stamps (STAMP_CLOCKS): a PodScheduled condition is whole seconds."""
    if key == "scheduled_at" and row.get("scheduled_source") == "condition":
        return CLOCK_RESOLUTION[CLOCK_API]
    return CLOCK_RESOLUTION[STAMP_CLOCKS[key]]


def _timeline_step(
    row: PodRow, step: TimelineStep, top: float, height: float, origin: float, scale: float, later: Optional[float]
) -> Tuple[List[str], bool]:
    """One phase of one episode, drawn as a bar, or as a marker when it is shorter than its clocks
    can tell: within the resolution of its coarser stamp (less than a second against a
    whole-second stamp, or two whole-second stamps at most a second apart). A marker is a tick
    where the phase is known and a whisker across the window its whole-second end lies in (up to
    `later`, a finer stamp of a step that came after it), never a bar of the clock's second.
    Returns the SVG parts and whether a marker was drawn."""
    name, meaning, colour, start_key, end_key = step
    start, stop = row.get(start_key), row.get(end_key)
    if not isinstance(start, (int, float)) or not isinstance(stop, (int, float)):
        return [], False
    start_res, end_res = _stamp_resolution(row, start_key), _stamp_resolution(row, end_key)
    span = stop - start
    resolution = max(start_res, end_res)

    def x(at: float) -> float:
        return TIMELINE_LABEL_WIDTH + (at - origin) * scale

    css = "bar" if height > 4 else "detail"
    clocks = clocks_text((STAMP_CLOCKS[start_key], STAMP_CLOCKS[end_key], None))
    if span >= resolution and not (min(start_res, end_res) >= 1 and span <= resolution):
        return [
            f'<rect class="{css}" data-phase="{_xml(name)}" x="{x(start):.1f}" y="{top:.1f}" '
            f'width="{max(span * scale, 0.5):.1f}" height="{height:.1f}" fill="{colour}">'
            f"<title>{_xml(row['pod'])} {_xml(name)}: {span:.3f} s ({_xml(clocks)})</title></rect>"
        ], False
    if end_res >= 1:  # the end is truncated: it lies in its second, not before a finer start nor after `later`
        low = max(stop, start) if start_res < 1 else stop
        high = stop + end_res if later is None or later < low else min(stop + end_res, later)
        window, tick = (low, high), (start if start_res < 1 else stop)
    elif start_res >= 1:  # the start is truncated: somewhere in its second, before the end
        window, tick = (start, min(start + start_res, stop)), stop
    else:
        window, tick = (start, stop), stop
    middle = top + height / 2
    caps = "".join(
        f'<line x1="{x(at):.1f}" y1="{middle - 2:.1f}" x2="{x(at):.1f}" y2="{middle + 2:.1f}"/>' for at in window
    )
    return [
        f'<g class="marker" data-phase="{_xml(name)}" stroke="{colour}" stroke-width="1.5">'
        f"<title>{_xml(row['pod'])} {_xml(name)}: {_xml(meaning)} within {_exact_duration(resolution)} "
        f"({_xml(clocks)}): between {window[0] - origin:.3f} and {window[1] - origin:.3f} s</title>"
        f'<line x1="{x(tick):.1f}" y1="{top:.1f}" x2="{x(tick):.1f}" y2="{top + height:.1f}" stroke-width="2.5"/>'
        f'<line x1="{x(window[0]):.1f}" y1="{middle:.1f}" x2="{x(window[1]):.1f}" y2="{middle:.1f}"/>{caps}</g>'
    ], True


def _timeline_heading(results: Results, origin: float) -> List[str]:
    """What the picture shows: the headline figures; the context, namespace and date; and, when
    the episodes ran on the tests' fake cluster, that this is a simulation."""
    figures = ", ".join(
        f"{label} {figure_text(finite_number(results.get(key)), key)}"
        for label, key in (
            ("all ready", "batch_to_all_ready_seconds"),
            ("all rewards", "batch_to_all_rewards_seconds"),
            ("pod->ready p50", "pod_to_ready_p50_seconds"),
        )
    )
    when = datetime.datetime.fromtimestamp(origin, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    runtimes = results.get("container_runtimes") or []
    lines = [
        f"{results['episodes']} episodes, parallelism {results['parallelism']}, "
        f"runtime {results['runtime'] or '(none)'}: {figures}",
        f"context {results.get('context') or '-'}, namespace {results.get('namespace') or '-'}, "
        f"first Job created {when}" + (f", container runtime {', '.join(map(str, runtimes))}" if runtimes else ""),
    ]
    if SIMULATED_RUNTIME in runtimes:
        lines.append("SIMULATION: the tests' fake cluster ran these episodes on one machine; no real cluster")
    return lines


def render_timeline_svg(results: Results) -> str:
    """One row per episode, grouped by node, each phase on a shared seconds axis from the first
    Job's creation: a bar, or a marker where it is shorter than its clocks can tell; each round's
    Job marked. Plain SVG, so any browser shows it."""
    rows = sorted(
        results["pods"], key=lambda row: (row.get("node") or "", row.get("round", 1), row["created_at"], row["pod"])
    )
    origin = min(row["batch_start"] for row in rows)
    ends = [  # a whole-second end may lie up to its second later: its marker's whisker shows that
        end + (_stamp_resolution(row, step[4]) if _stamp_resolution(row, step[4]) >= 1 else 0)
        for row in rows
        for step in TIMELINE_BARS + TIMELINE_DETAIL_BARS
        if (end := json_number(row.get(step[4]))) is not None
    ]
    span = max(max(ends, default=origin) - origin, 1.0)
    scale = TIMELINE_PLOT_WIDTH / span
    nodes = sorted({row.get("node") or "(unknown)" for row in rows})
    rounds = sorted({(row.get("round", 1), row["batch_start"]) for row in rows})
    heading = _timeline_heading(results, origin)
    drawn: List[str] = []
    markers = False
    strips = set()
    y = 0.0  # rows are placed from 0, then moved under the heading and the legend
    for node in nodes:
        y += 18
        drawn.append(f'<text x="10" y="{y - 4:.0f}" font-weight="bold">node {_xml(node)}</text>')
        for row in (r for r in rows if (r.get("node") or "(unknown)") == node):
            drawn.append(f'<text x="10" y="{y + 12:.0f}">{_xml(row["pod"])}</text>')
            marks: List[str] = []  # drawn over the row's bars
            finer = [  # each bar's end, where its stamp is finer than a second
                json_number(row.get(end_key)) if _stamp_resolution(row, end_key) < 1 else None
                for *_, end_key in TIMELINE_BARS
            ]
            for index, step in enumerate(TIMELINE_BARS):
                # the first finer stamp after this step's end: its end came before it
                later = next((stamp for stamp in finer[index + 1 :] if stamp is not None), None)
                parts, marked = _timeline_step(row, step, y + 2, TIMELINE_ROW_HEIGHT - 4, origin, scale, later)
                (marks if marked else drawn).extend(parts)
            for name, meaning, colour, start_keys, end_key in TIMELINE_DETAIL_BARS:
                start_key = next((key for key in start_keys if row.get(key) is not None), start_keys[-1])
                step = (name, meaning, colour, start_key, end_key)
                parts, marked = _timeline_step(row, step, y + TIMELINE_ROW_HEIGHT - 4, 3, origin, scale, None)
                (marks if marked else drawn).extend(parts)
                strips.update([name] if parts else [])
            drawn += marks
            markers = markers or bool(marks)
            y += TIMELINE_ROW_HEIGHT
        y += 4
    legend = [(name, meaning, colour, "bar") for name, meaning, colour, _, _ in TIMELINE_BARS]
    legend += [
        (name, meaning, colour, "strip") for name, meaning, colour, _, _ in TIMELINE_DETAIL_BARS if name in strips
    ]
    if markers:
        legend.append(
            ("tick and whisker", "a phase shorter than its clocks can tell, and where it lies", "#444", "mark")
        )
    if len(rounds) > 1:
        legend.append(("round K", "that round's Job created (dashed)", "#888", "round"))
    legend_top = 14 + 18 * len(heading)
    top = legend_top + 16 * ((len(legend) + 1) // 2) + (22 if len(rounds) > 1 else 8)
    height = top + y + 60
    width = TIMELINE_LABEL_WIDTH + TIMELINE_PLOT_WIDTH + 30
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
        'font-family="sans-serif" font-size="11">',
        f"<title>{_xml(heading[0])}</title>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{_xml(heading[0])}</text>',
    ]
    for index, line in enumerate(heading[1:], 1):
        style = ' fill="#b00020" font-weight="bold"' if line.startswith("SIMULATION") else ""
        parts.append(f'<text x="10" y="{20 + 18 * index}" font-size="12"{style}>{_xml(line)}</text>')
    for index, (name, meaning, colour, kind) in enumerate(legend):
        lx, ly = 10 + (index % 2) * 505, legend_top + (index // 2) * 16
        if kind == "bar":
            parts.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{colour}"/>')
        elif kind == "strip":
            parts.append(f'<rect x="{lx}" y="{ly + 8}" width="12" height="4" fill="{colour}"/>')
        else:
            dash = ' stroke-dasharray="3,2"' if kind == "round" else ""
            parts.append(
                f'<line x1="{lx + 6}" y1="{ly}" x2="{lx + 6}" y2="{ly + 12}" stroke="{colour}" stroke-width="2"{dash}/>'
            )
            if kind == "mark":
                parts.append(f'<line x1="{lx}" y1="{ly + 6}" x2="{lx + 12}" y2="{ly + 6}" stroke="{colour}"/>')
        parts.append(f'<text x="{lx + 16}" y="{ly + 10}">{_xml(name)}: {_xml(meaning)}</text>')
    parts.append(f'<g transform="translate(0,{top:.0f})">')
    axis_y = y + 10
    if len(rounds) > 1:
        for number, started in rounds:
            rx = TIMELINE_LABEL_WIDTH + (started - origin) * scale
            parts.append(
                f'<line class="round" x1="{rx:.1f}" y1="-6" x2="{rx:.1f}" y2="{axis_y:.0f}" stroke="#888" '
                'stroke-dasharray="3,2"/>'
            )
            parts.append(f'<text x="{rx + 3:.1f}" y="-8" fill="#555">round {number}</text>')
    parts += drawn
    parts.append(
        f'<line x1="{TIMELINE_LABEL_WIDTH}" y1="{axis_y:.0f}" x2="{TIMELINE_LABEL_WIDTH + TIMELINE_PLOT_WIDTH}" '
        f'y2="{axis_y:.0f}" stroke="black"/>'
    )
    interval = _axis_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        tx = TIMELINE_LABEL_WIDTH + tick * scale
        parts.append(f'<line x1="{tx:.1f}" y1="{axis_y:.0f}" x2="{tx:.1f}" y2="{axis_y + 5:.0f}" stroke="black"/>')
        parts.append(f'<text x="{tx:.1f}" y="{axis_y + 18:.0f}" text-anchor="middle">{tick:g}</text>')
        tick += interval
    parts.append(
        f'<text x="{TIMELINE_LABEL_WIDTH + TIMELINE_PLOT_WIDTH / 2:.0f}" y="{axis_y + 34:.0f}" text-anchor="middle">'
        "seconds since the Job was created</text>"
    )
    parts += ["</g>", "</svg>"]
    return "\n".join(parts) + "\n"


def _axis_step(span: float) -> float:
    """A round tick interval giving at most 12 ticks, whatever the span."""
    for step in (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600):
        if span / step <= 12:
            return float(step)
    return float(math.ceil(span / 12 / 600) * 600)


# Pure core: warm-up, pinned image and the guide's table ######################
# Warm-up manifests, the pinned digest, and the guide's section 六 table from results. Uses the
# sections above.


WARMUP_DIR = "warmup"
WARMUP_JOB_PREFIX = "warmup"
PROBE_JOB_NAME = "probe"
WARMUP_NODE_KEY = "rl-batch-demo/warmup-node"  # label (name or hash) and annotation (full name)
HOSTNAME_LABEL = "kubernetes.io/hostname"
NOT_ROUNDS = (WARMUP_JOB_PREFIX + "-", PROBE_JOB_NAME)  # receipt Jobs that are not measured rounds
_LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
_DIGEST = r"@(sha256:[0-9a-f]{64})\Z"  # the repository digest of an imageID (repo@sha256:...)
REPRODUCE_GROUPS = ("parallel", "sequential", "warm")  # the guide's order, section 六

# The guide's published reference (section 六), kept as data: the three groups of 2026-09-21,
# each cell exactly as the guide prints it. Numbers are strings so that no digit is lost.
GUIDE_REFERENCE: JsonObject = {
    "date": "2026-09-21",
    "conditions": {
        "en": [
            "the same task script and timing definitions",
            "a fixed Python image digest",
            "the same Cube runtime and container resources",
            "one container per sandbox, its own emptyDir, limits 500m CPU / 128Mi memory",
            "scheduling limited to two 64 vCPU nodes",
            "every one of the 50 measured episodes hit the image cache",
            "order: 10 in parallel, one at a time, one warm-up episode on each node, three rounds of 10 in parallel",
        ],
        "zh": [  # the guide's own words, with full-width punctuation
            "同一任务脚本和计时口径",
            "固定的 Python 镜像 digest",
            "相同的 Cube 运行时和容器资源规格",
            "每个沙箱为单容器、独立 emptyDir，容器 CPU 限制为 500m、内存限制为 128Mi",
            "可调度范围固定为两个 64 vCPU 节点",
            "全部 50 个正式任务均命中镜像缓存",
            "执行顺序为 10 路并行、单并发，再在两个节点分别执行一次相同任务预热，最后运行三轮 10 路并行",
        ],
    },
    # Each group's name, in the guide's order; then each row of its table (GUIDE_ROWS), as the guide
    # has it: the unit (None: no figure), then one cell per group.
    "columns": [
        {"name": {"en": "10 in parallel", "zh": "10 路并行"}},
        {"name": {"en": "one at a time", "zh": "单并发"}},
        {"name": {"en": "10 in parallel after per-node warm-up", "zh": "逐节点预热后 10 路并行"}},
    ],
    "cells": {
        "scale": (None, (1, 10), (1, 10), (3, 10)),
        "completed": (None, ("10", "10", "1"), ("10", "10", "1"), ("30", "30", "1")),
        "run_pod_sandbox": ("ms", ["752", "765"], ["676", "709"], ["761", "835"]),
        "create_container": ("ms", ["15", "23"], ["14", "15"], ["14", "21"]),
        "start_container": ("ms", ["176", "211"], ["175", "209"], ["180", "265"]),
        "python_import": ("s", ["1.32", "1.33"], ["1.32", "1.35"], ["1.33", "1.37"]),
        "import_to_ready": ("ms", ["2.3", "28.8"], ["2.3", "2.7"], ["2.3", "2.7"]),
        "batch_ready": ("s", ["3.7"], ["93.1"], ["3.2", "3.5", "3.6"]),
        "pod_to_ready": ("s", ["3.7", "3.7"], ["3.3", "3.4"], ["3.4", "3.5"]),
        "all_rewards": ("s", ["8.4"], ["97.6"], ["7.9", "8.2", "8.2"]),
        "client_complete": ("s", ["12.7"], ["101.6"], ["12.9", "13.0", "12.2"]),
    },
}

# The guide's rows in its order: (key, English label, the guide's own Chinese label).
GUIDE_ROWS = (
    ("scale", "test scale (rounds x tasks)", "测试规模"),
    ("completed", "completed / rewards", "完成任务 / 返回奖励"),
    ("run_pod_sandbox", "RunPodSandbox: P50 / P95", "沙箱创建 RunPodSandbox:P50 / P95"),
    ("create_container", "CreateContainer: P50 / P95", "容器创建 CreateContainer:P50 / P95"),
    ("start_container", "StartContainer: P50 / P95", "容器启动 StartContainer:P50 / P95"),
    ("python_import", "Python module import: P50 / P95", "Python 模块导入:P50 / P95"),
    ("import_to_ready", "import done -> application ready: P50 / P95", "导入完成至应用 ready:P50 / P95"),
    ("batch_ready", "whole batch ready (incl. Python start)", "整批应用环境准备完成(含 Python 初始化)"),
    ("pod_to_ready", "per pod created -> application ready: P50 / P95", "单 Pod 创建至应用 ready:P50 / P95"),
    ("all_rewards", "all rewards produced", "整批奖励全部产生"),
    ("client_complete", "client saw Job complete", "客户端观察到 Job 完成"),
)
GUIDE_HEADER = {"en": "figure", "zh": "检查项"}
GUIDE_COLUMN_PREFIX = {"en": "guide: ", "zh": "指南:"}  # a reference column's header: never mistaken for a run

# Runtime rows: the kubelet's histogram (run --kubelet-metrics), else the closest in-sandbox
# figure (results.json `phases`), named, else "not measured".
_RUNTIME_ROWS = {
    "run_pod_sandbox": ("RunPodSandbox", ("pod_to_kernel_boot_seconds",)),
    "create_container": (
        "CreateContainer",
        ("kernel_boot_to_process_start_seconds", "pod_to_container_started_seconds"),
    ),
    "start_container": ("StartContainer", ("kernel_boot_to_process_start_seconds", "pod_to_container_started_seconds")),
}
_ZH_COUNT = "一二三四五六七八九十"
_TIMES = "\u00d7"  # the multiplication sign of the guide's "1 轮 TIMES 10 个任务"
# Each phrase of the guide's table and reproduce's report: (English, Chinese).
_PHRASES = {
    "ms": ("ms", "毫秒"),
    "s": ("s", "秒"),
    "about": ("about {}", "约 {}"),
    "rounds": ("{n} rounds: {}", "{n}轮:{}"),
    "not": ("not measured ({})", "未测量({})"),
    "stand_in": ("{} (stand-in: {})", "{}(近似:{})"),
    "buckets": ("{} (kubelet buckets {})", "{}(kubelet 分桶 {})"),
    "run": ("run {}", "运行 {}"),
    "combined": ("CreateContainer + StartContainer together", "CreateContainer 与 StartContainer 合计"),
    "completed": ("{} / {}, {}", "{} / {},{}"),
    "all": ("all rewards {}", "奖励均为 {}"),
    "sum": ("reward sum {}", "奖励合计 {}"),
    "whole_seconds": ("whole seconds", "整秒"),
    "reference": (
        "guide columns: published figures of {date}; conditions: {conditions}",
        "指南列：{date}发布的数据；条件：{conditions}。",
    ),
    "separator": ("; ", "；"),
    "report_title": (
        "# rl-batch-demo reproduce: the guide's section 六, one command",
        "# rl-batch-demo reproduce：一条命令重做指南第六节",
    ),
    "report_intro": (
        "Image {image}, run by digest {pinned} in every group; context {context}; {count} tasks per round.",
        "镜像 {image}，各组都按 digest {pinned} 运行；上下文 {context}；每轮 {count} 个任务。",
    ),
    "report_header": ("| group | directory | exit | namespace |", "| 组 | 目录 | 退出码 | 命名空间 |"),
    "report_early": (
        "The experiment stopped early: only the groups that finished are in the table.",
        "实验提前结束：表中只有已完成的组。",
    ),
}
_WORDS = {lang: {key: pair[i] for key, pair in _PHRASES.items()} for i, lang in enumerate(("en", "zh"))}


def warmup_label_value(node: str) -> str:
    """The node's name as a label value; a name longer than a label allows becomes its hash
    (the Job's annotation keeps the whole name)."""
    if len(node) <= 63 and re.match(_LABEL_VALUE, node):
        return node
    import hashlib  # noqa: PLC0415 - keeps --help fast

    return "sha256-" + hashlib.sha256(node.encode()).hexdigest()[:40]


def warmup_job_manifest(
    settings: RunSettings, name: str, namespace: str, run_id: str, node: str, hostname: str
) -> KubeObject:
    """A one-episode Job pinned to one node through the scheduler: a nodeSelector on its hostname
    label, so the RuntimeClass's admission and scheduling still apply."""
    manifest = one_episode_job_manifest(settings, name, namespace, run_id)
    value = warmup_label_value(node)
    for metadata in (manifest["metadata"], manifest["spec"]["template"]["metadata"]):
        metadata["labels"][WARMUP_NODE_KEY] = value
        metadata["annotations"] = {WARMUP_NODE_KEY: node}
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {HOSTNAME_LABEL: hostname}
    return manifest


def image_repository(image: str) -> str:
    """The image without its tag or digest: `python:3.12-alpine` -> `python`."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    last = last.split(":", 1)[0]
    return f"{head}/{last}" if head else last


def pinned_image(image: str, image_ids: Dict[str, Optional[str]], where: str) -> str:
    """`repo@sha256:...` of the image the nodes ran (node -> imageID); refuses when they
    report different digests for the same tag, or no digest at all."""
    digests: Dict[str, List[str]] = {}
    for node, image_id in sorted(image_ids.items()):
        digest = re.search(_DIGEST, image_id or "")
        if digest is None:
            raise DemoError(
                f"cannot pin image {image}: node {node} reports imageID {image_id!r}, without a repository "
                f"digest; inspect {where}, or pass --pin-image=REPO@sha256:DIGEST",
                EXIT_CLUSTER,
            )
        digests.setdefault(digest.group(1), []).append(node)
    if len(digests) > 1:
        named = "; ".join(f"{digest} on {', '.join(nodes)}" for digest, nodes in sorted(digests.items()))
        raise DemoError(
            f"the nodes ran different images for {image}: {named}; the measured rounds would not run one image, "
            f"so none was started; inspect {where}, make the nodes agree, or pass --pin-image=REPO@sha256:DIGEST",
            EXIT_CLUSTER,
        )
    if not digests:
        raise DemoError(f"cannot pin image {image}: no episode reported an imageID; inspect {where}", EXIT_CLUSTER)
    return f"{image_repository(image)}@{next(iter(digests))}"


def _guide_pair(values: Sequence[float], lang: str) -> str:
    """P50 / P95 in one unit, as the guide prints them: ms below a second, else seconds."""
    if max(values) < 1:
        scale, decimals, unit = 1000, 1 if min(values) < 0.01 else 0, "ms"
    else:
        scale, decimals, unit = 1, 2, "s"
    return " / ".join(f"{v * scale:.{decimals}f}" for v in values) + " " + _WORDS[lang][unit]


def _guide_scale(rounds: Any, tasks: Any, lang: str) -> str:
    if lang == "zh":
        return f"{rounds} 轮 {_TIMES} {tasks} 个任务"
    return f"{rounds} round{'s' if rounds != 1 else ''} x {tasks} tasks"


def _guide_rounds(values: Sequence[str], unit: str, lang: str) -> str:
    """A whole-batch figure, one per round: "about" one, or "K rounds" of them."""
    words = _WORDS[lang]
    text = " / ".join(values) + " " + words[unit]
    if len(values) == 1:
        return words["about"].format(text)
    n = _ZH_COUNT[len(values) - 1] if lang == "zh" and len(values) <= 10 else str(len(values))
    return words["rounds"].format(text, n=n)


def _guide_reference_cell(group: int, key: str, lang: str) -> str:
    words = _WORDS[lang]
    unit, *groups = GUIDE_REFERENCE["cells"][key]
    values = groups[group]
    if key == "scale":
        return _guide_scale(values[0], values[1], lang)
    if key == "completed":
        return words["completed"].format(*values[:2], words["all"].format(values[2]))
    if key in ("batch_ready", "all_rewards", "client_complete"):
        return _guide_rounds(values, unit, lang)
    return " / ".join(values) + " " + words[unit]


def _phase_pair(results: Results, phase: str) -> Optional[List[float]]:
    stats = (results.get("phases") or {}).get(phase)
    if not isinstance(stats, dict):
        return None
    values = [finite_number(stats.get("p50")), finite_number(stats.get("p95"))]
    return None if any(v is None for v in values) else [v for v in values if v is not None]


def _round_values(results: Results, key: str) -> List[float]:
    rounds = results.get("round_results") or []
    values = [finite_number(r.get(key)) for r in rounds if isinstance(r, dict)] if len(rounds) > 1 else []
    if values and all(v is not None for v in values):
        return [v for v in values if v is not None]
    top = finite_number(results.get(key))
    return [top] if top is not None else []


def _runtime_cell(results: Results, key: str, lang: str) -> str:
    words = _WORDS[lang]
    operation, stand_ins = _RUNTIME_ROWS[key]
    operations = results.get("runtime_operations")
    pooled = operations["pooled"].get(operation) if operations else None
    if isinstance(pooled, dict):
        values = [finite_number(pooled.get("p50_seconds")), finite_number(pooled.get("p95_seconds"))]
        if all(v is not None for v in values):
            text = _guide_pair([v for v in values if v is not None], lang)
            bounds = (pooled.get("p50_bucket"), pooled.get("p95_bucket"))
            buckets = [f"{b[0]}-{b[1]} s" for b in bounds if isinstance(b, list) and len(b) == 2]
            return words["buckets"].format(text, " / ".join(buckets)) if buckets else text
    for phase in stand_ins:
        pair = _phase_pair(results, phase)
        if pair is not None:
            name, text = phase, _guide_pair(pair, lang)
            if phase == "kernel_boot_to_process_start_seconds":
                name = f"{phase}, {words['combined']}"
            if phase == "pod_to_container_started_seconds":  # API server stamps: whole seconds
                text = f"{pair[0]:.0f} / {pair[1]:.0f} {words['s']}"
                name = f"{phase}, {words['whole_seconds']}"
            return words["stand_in"].format(text, name)
    return words["not"].format(words["run"].format("--kubelet-metrics"))


def guide_cells(results: Results, lang: str = "en") -> Dict[str, str]:
    """One run's column of the guide's table, from the tool's own figures."""
    words = _WORDS[lang]
    rounds = results.get("rounds") or 1
    tasks = results.get("episodes_per_round", results.get("episodes"))
    successful, episodes = results.get("successful_episodes"), results.get("episodes")
    reward = words["all"].format(1) if results.get("reward_sum") == successful else words["sum"]
    cells = {
        "scale": _guide_scale(rounds, tasks, lang),
        "completed": words["completed"].format(successful, episodes, reward.format(results.get("reward_sum"))),
    }
    for key in _RUNTIME_ROWS:
        cells[key] = _runtime_cell(results, key, lang)
    for key, phase in (("python_import", "python_import_seconds"), ("import_to_ready", "import_to_ready_seconds")):
        pair = _phase_pair(results, phase)
        cells[key] = _guide_pair(pair, lang) if pair else words["not"].format(phase)
    pod = [finite_number(results.get(f"pod_to_ready_{stat}_seconds")) for stat in ("p50", "p95")]
    cells["pod_to_ready"] = (  # whole-second pod creation: tenths of a second, never milliseconds
        " / ".join(f"{v:.1f}" for v in pod if v is not None) + " " + words["s"]
        if all(v is not None for v in pod)
        else "-"
    )
    for key, figure in (
        ("batch_ready", "batch_to_all_ready_seconds"),
        ("all_rewards", "batch_to_all_rewards_seconds"),
        ("client_complete", "client_job_complete_seconds"),
    ):
        values = _round_values(results, figure)
        cells[key] = _guide_rounds([f"{v:.1f}" for v in values], "s", lang) if values else "-"
    return cells


def guide_table(columns: List[Tuple[str, Results]], lang: str, reference: bool) -> GuideTable:
    """The guide's table: its rows in its order, one column per run, then (with `reference`)
    the guide's own published columns. Column names are the caller's; cells are the tool's."""
    header = [GUIDE_HEADER[lang]] + [name for name, _ in columns]
    cells = [guide_cells(results, lang) for _, results in columns]
    if reference:
        header += [GUIDE_COLUMN_PREFIX[lang] + column["name"][lang] for column in GUIDE_REFERENCE["columns"]]
    rows: List[GuideRow] = []
    for key, english, chinese in GUIDE_ROWS:
        row = [chinese if lang == "zh" else english] + [column[key] for column in cells]
        if reference:
            row += [_guide_reference_cell(group, key, lang) for group in range(len(GUIDE_REFERENCE["columns"]))]
        rows.append({"row": key, "cells": row})
    table: GuideTable = {"lang": lang, "header": header, "rows": rows}
    if reference:
        table["reference"] = {"date": GUIDE_REFERENCE["date"], "conditions": list(GUIDE_REFERENCE["conditions"][lang])}
    return table


def _guide_date(date: str, lang: str) -> str:
    """2026-09-21, or as the guide writes it: 2026 年 9 月 21 日."""
    if lang != "zh":
        return date
    year, month, day = date.split("-")
    return f"{year} 年 {int(month)} 月 {int(day)} 日"


def render_guide_table(table: GuideTable, style: str) -> str:
    """The guide's table as aligned text or Markdown (render_table; text fits SUMMARY_WIDTH
    columns or wraps), then its reference's conditions in the table's language."""
    lines = [table["header"]] + [row["cells"] for row in table["rows"]]
    text = render_table(lines, style, SUMMARY_WIDTH if style == "text" else None)
    reference = table.get("reference")
    if reference:
        words = _WORDS[table["lang"]]
        note = words["reference"].format(
            date=_guide_date(reference["date"], table["lang"]),
            conditions=words["separator"].join(reference["conditions"]),
        )
        note_lines = wrap_text(printable(note), SUMMARY_WIDTH) if style == "text" else [printable(note)]
        text += "\n" + "\n".join(note_lines) + "\n"
    return text


# Status on stderr #############################################################
# Warnings and the progress line: stderr only, stdout carries the summary. Uses the records and
# the reports' escaping.


def say_stderr(message: str) -> None:
    print(printable(message), file=sys.stderr, flush=True)


def rewrites_in_place(stream: Any, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether a status line may be rewritten in place (a carriage return and an erase-line
    escape): only on a terminal, not under TERM=dumb, and not with NO_COLOR set to any non-empty
    value (no-color.org); otherwise the output holds no escape sequence at all."""
    environ = os.environ if environ is None else environ
    if environ.get("TERM") == "dumb" or environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """One rewriting line on a terminal; in a log (or under TERM=dumb or NO_COLOR), a line per
    change, at most one a second (so 1,000 pods do not print 3,000 lines) plus the final state;
    silent with --quiet. Each says the counts, the time elapsed and the time left to the deadline."""

    def __init__(
        self,
        enabled: bool,
        stream: Any = None,
        log_interval: Optional[float] = None,
        environ: Optional[Mapping[str, str]] = None,
        columns: Optional[int] = None,
    ) -> None:
        self.enabled = enabled
        self.columns = columns  # the terminal's width; None: asked each time (it may be resized)
        self.log_interval = TIMING.progress_log_interval if log_interval is None else log_interval
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = rewrites_in_place(self.stream, environ)
        self.printed_state: Optional[str] = None
        self.pending: Optional[Tuple[str, str]] = None  # (state, line)
        self.printed_at = -math.inf
        self.dirty = False

    def update(
        self, label: str, elapsed: float, counts: Dict[str, int], left: Optional[float] = None, queued: bool = False
    ) -> None:
        """The counts of `label`'s pods, `elapsed` seconds since its submission, `left` seconds
        until the client stops waiting (None: no deadline to show); `queued`: the Job waits,
        suspended, for a queue to admit it."""
        if not self.enabled:
            return
        state = ", ".join(f"{counts.get(phase, 0)} {phase}" for phase in ("created", "running", "succeeded", "failed"))
        state = "queued: suspended until a queue admits it" if queued else state
        times = f"{elapsed:.1f} s elapsed" + (f", {max(left, 0.0):.0f} s left" if left is not None else "")
        if self.interactive:
            columns = self.columns or shutil.get_terminal_size().columns
            line = f"{label} ({times}): {state}"[: max(columns - 1, 20)]  # never wraps
            self.stream.write(f"\r\033[K{line}")
            self.stream.flush()
            self.dirty = True
            return
        if state == self.printed_state:
            self.pending = None
            return
        self.pending = (state, f"{label} ({times}): {state}\n")
        if time.monotonic() - self.printed_at >= self.log_interval:
            self._flush_pending()

    def _flush_pending(self) -> None:
        if self.pending is not None:
            self.printed_state, line = self.pending
            self.stream.write(line)
            self.stream.flush()
            self.printed_at = time.monotonic()
            self.pending = None

    def finish(self) -> None:
        if self.dirty:
            self.stream.write("\n")
            self.stream.flush()
            self.dirty = False
        self._flush_pending()


# The kubectl seam #############################################################
# Every subprocess this tool starts goes through `Kubectl`: calls recorded, reads retried,
# watches streamed. Uses the pure core's parsing and the status lines.


class WatchStream:
    """A `kubectl get -w -o json --output-watch-events` process read as a stream.

    A reader thread decodes the concatenated JSON events and puts (tag, wall time, monotonic
    time, event) on a shared queue, stamped when the bytes arrived; event None marks the end."""

    def __init__(
        self,
        tag: str,
        process: subprocess.Popen[bytes],
        sink: queue.Queue[Any],
        record: Dict[str, Any],
        on_close: Callable[[], None] = lambda: None,
        closing: Optional[List[threading.Thread]] = None,
    ) -> None:
        self.tag = tag
        self.process = process
        self.sink = sink
        self.record = record  # its entry in kubectl-calls.json, completed by close()
        self.on_close = on_close  # told once the record is complete (-v shows the call)
        self.closing = closing if closing is not None else []  # end()'s threads (Kubectl.closing)
        self.started = time.monotonic()
        self.stopped: Optional[float] = None  # when stop() asked it to end
        self.stderr = ""  # kubectl's message, once the stream has ended
        self.thread = threading.Thread(target=self._read, name=f"watch-{tag}", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        decoder = json.JSONDecoder()
        text_decoder = codecs.getincrementaldecoder("utf-8")()
        buffer = ""
        descriptor = self.process.stdout.fileno()
        while True:
            chunk = os.read(descriptor, 65536)
            received_at, received_clock = time.time(), time.monotonic()
            if not chunk:
                break
            buffer += text_decoder.decode(chunk)
            while True:
                buffer = buffer.lstrip()
                if not buffer:
                    break
                try:
                    event, end = decoder.raw_decode(buffer)
                except json.JSONDecodeError:
                    if buffer.startswith("{") and len(buffer) < WATCH_BUFFER_LIMIT:
                        break  # incomplete: wait for more bytes
                    self.process.kill()  # garbled: end the stream, so the waiter falls back to polling
                    self.sink.put((self.tag, time.time(), time.monotonic(), None))
                    return
                buffer = buffer[end:]
                if isinstance(event, dict):
                    self.sink.put((self.tag, received_at, received_clock, event))
        if self.process.stderr is not None:
            self.stderr = self.process.stderr.read(4096).decode("utf-8", "replace").strip()
        self.sink.put((self.tag, time.time(), time.monotonic(), None))

    def stop(self) -> None:
        """Ask the stream's kubectl to end (SIGTERM) without waiting for it: streams stopped
        together end together, and close() then waits for each."""
        if self.stopped is None:
            self.stopped = time.monotonic()
            if self.process.poll() is None:
                with contextlib.suppress(OSError):
                    self.process.terminate()

    def end(self) -> None:
        """close() without waiting for it: the stream is asked to end now, and a thread waits for
        its process and completes its record (joined by Kubectl.wait_for_ended_watches before
        kubectl-calls.json is written), so the run's next call starts at once."""
        self.stop()
        thread = threading.Thread(target=self.close, name=f"close-{self.tag}", daemon=True)
        thread.start()
        self.closing.append(thread)

    def close(self) -> None:
        self.stop()
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.thread.join(timeout=5)
        self.record["seconds"] = round((self.stopped or time.monotonic()) - self.started, 3)
        self.record["exit"] = self.process.returncode  # negative: ended by this tool's signal
        if self.stderr:
            self.record["stderr"] = self.stderr[-CALL_STDERR_LIMIT:]
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None and not self.thread.is_alive():
                stream.close()
        self.on_close()


def concurrently(
    tasks: Sequence[Callable[[], Any]], stop: Optional[threading.Event] = None, grace: float = 0.0
) -> List[Any]:
    """Run independent kubectl calls at once (each is its own process); their results in order.

    The first task that raised, in task order, raises here once all have ended, so a failure
    reads the same as it would have one call after another. Tasks that wait on Jobs pass the
    `stop` they watch: on Ctrl-C it is set, and their threads get `grace` seconds to end their
    waits (closing their watches) before the interrupt goes on."""
    if len(tasks) == 1:
        return [tasks[0]()]
    results: List[Any] = [None] * len(tasks)
    errors: List[Optional[BaseException]] = [None] * len(tasks)

    def work(index: int) -> None:
        try:
            results[index] = tasks[index]()
        except BaseException as error:  # handed to the caller's thread below
            errors[index] = error

    threads = [threading.Thread(target=work, args=(index,), daemon=True) for index in range(len(tasks))]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:
        if stop is not None:
            stop.set()
            deadline = time.monotonic() + grace
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        raise
    for error in errors:
        if error is not None:
            raise error
    return results


class _Watchdog:
    """Kills a process once its deadline passes, `seconds` after it started or after the last
    `postpone`."""

    def __init__(self, process: subprocess.Popen[bytes], seconds: float) -> None:
        self.process, self.seconds = process, seconds
        self.deadline = time.monotonic() + seconds
        self.fired, self.stopped = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._watch, name="kubectl-watchdog", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopped.wait(max(0.0, self.deadline - time.monotonic())):
            if time.monotonic() >= self.deadline:
                self.fired.set()
                with contextlib.suppress(OSError):
                    self.process.kill()
                return

    def postpone(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)


def _drain(stream: Any, into: bytearray) -> None:
    """Read a pipe to its end, keeping at most CALL_STDERR_LIMIT bytes of it."""
    while True:
        chunk = stream.read(65536)
        if not chunk:
            return
        into.extend(chunk)
        del into[: max(0, len(into) - CALL_STDERR_LIMIT)]


@dataclasses.dataclass(eq=False)
class Kubectl:
    """Runs kubectl with the run's fixed context, kubeconfig and timeouts, and records calls.

    Built complete: the context is resolved before (`cluster_identity`, then `with_context`), and
    nothing is changed afterwards; a call that needs a shorter timeout says so itself. Reads that
    are safe to repeat are retried on transient failures with a short, bounded backoff; nothing
    else is ever repeated here. Retries are quiet: with `verbose` (-v) every call is shown as it
    ends, and every retry."""

    executable: str
    context: Optional[str]
    kubeconfig: Optional[str]
    kubeconfig_from: str = ""  # where `kubeconfig` came from, for a message: "--kubeconfig", ...
    server: Optional[str] = None  # the context's API server, once known, named when it is unreachable
    verbose: bool = False
    process_timeout: float = KUBECTL_PROCESS_TIMEOUT
    timing: Timing = dataclasses.field(default_factory=lambda: TIMING)  # TIMING as it is when built
    calls: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # kubectl-calls.json
    origin: float = dataclasses.field(default_factory=time.monotonic)  # "started" in the call record
    children: Set[subprocess.Popen[Any]] = dataclasses.field(default_factory=set)  # running now
    closing: List[threading.Thread] = dataclasses.field(default_factory=list)  # watches ending (WatchStream.end)
    # Starts each kubectl process, called as subprocess.Popen is: the call-plan tests pass one
    # that answers the call in-process, through real pipes, so that its hundreds of calls cost no
    # interpreter start each; every other use is subprocess.Popen itself.
    spawner: Callable[..., subprocess.Popen[Any]] = subprocess.Popen

    def __post_init__(self) -> None:
        # A list of kubeconfig files (as $KUBECONFIG allows) can only travel in the environment.
        kubeconfig = self.kubeconfig
        self.environment = dict(os.environ, KUBECONFIG=kubeconfig) if kubeconfig and os.pathsep in kubeconfig else None

    def with_context(self, context: str, server: Optional[str] = None) -> Kubectl:
        """The same kubectl bound to one context (and its API server, when known), sharing the call record."""
        return dataclasses.replace(self, context=context, server=server or self.server)

    def argv(
        self, args: Sequence[str], namespace: Optional[str] = None, request_timeout: Optional[str] = REQUEST_TIMEOUT
    ) -> List[str]:
        argv = [self.executable]
        if self.kubeconfig and os.pathsep not in self.kubeconfig:
            argv.append(f"--kubeconfig={self.kubeconfig}")
        if self.context:
            argv.append(f"--context={self.context}")
        if request_timeout:
            argv.append(f"--request-timeout={request_timeout}")
        if namespace:
            argv.append(f"--namespace={namespace}")
        return argv + list(args)

    def _record(self, argv: List[str], started: float, **extra: Any) -> Dict[str, Any]:
        """The call's entry in kubectl-calls.json, completed as the call goes on."""
        record: Dict[str, Any] = {"argv": argv[1:], "started": round(started - self.origin, 3), **extra}
        self.calls.append(record)
        return record

    def note(self, message: str) -> None:
        """A line on stderr that only -v shows (a retry, a call)."""
        if self.verbose:
            sys.stderr.write(printable(message) + "\n")  # one write: calls end in several threads
            sys.stderr.flush()

    def _ended(self, argv: List[str], record: Dict[str, Any]) -> None:
        """With -v, the call as a shell would read it and how it ended, once it has."""
        if "error" in record:
            ending = "no answer, killed" if record["error"] == "timeout" else f"not started: {record['error']}"
        else:
            ending = f"exit {record.get('exit')}"
        self.note(f"+ {shlex.join(argv)}  # {ending}, {record.get('seconds', 0):.3f} s")

    def _not_started(self, record: Dict[str, Any], error: OSError) -> DemoError:
        record["error"] = str(error)
        return DemoError(
            f"cannot start kubectl ({self.executable!r}: {error.strerror or error}); install kubectl, "
            "or pass --kubectl PATH or set KUBECTL",
            EXIT_CLUSTER,
        )

    def _timed_out(self, record: Dict[str, Any], argv: List[str], seconds: float) -> KubectlTimeout:
        record["error"] = "timeout"
        server = f" {self.server}" if self.server else ""
        named = f" of context {self.context}" if self.context else ""
        probe = shlex.join(["kubectl", *(["--context", self.context] if self.context else []), "cluster-info"])
        return KubectlTimeout(
            f"`{shlex.join(['kubectl', *argv[1:]])}` did not answer within {seconds:g} s; "
            f"check that the API server{server}{named} is reachable (`{probe}`)",
            EXIT_TIMEOUT,
        )

    def _start(self, argv: List[str], record: Dict[str, Any]) -> subprocess.Popen[bytes]:
        """A kubectl whose output is read as it arrives (as bytes), known to `stop_children`."""
        try:
            process = self.spawner(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.environment
            )
        except OSError as error:
            failure = self._not_started(record, error)
            self._ended(argv, record)
            raise failure from None
        self.children.add(process)
        return process

    def _retry_or_raise(self, failure: KubectlFailure, delays: List[float], first_attempt: float) -> None:
        """After a failed read: wait and return when it is transient and the retry budget allows
        another attempt; else raise it."""
        if not (delays and failure.transient) or time.monotonic() - first_attempt > self.timing.retry_budget_seconds:
            raise failure
        self.note(f"warning: retrying `{failure.command}` after a transient failure: {failure.first_line}")
        time.sleep(delays.pop(0))

    def _run_process(self, argv: List[str], stdin: Optional[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """subprocess.run, with the process known to `stop_children` while it runs."""
        with self.spawner(
            argv,
            stdin=subprocess.PIPE if stdin is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            errors="replace",
            env=self.environment,
        ) as process:
            self.children.add(process)
            try:
                stdout, stderr = process.communicate(stdin, timeout=timeout)
            except BaseException:  # a timeout, or Ctrl-C in this thread: the call ends with it
                process.kill()
                process.wait()
                raise
            finally:
                self.children.discard(process)
        return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)

    def wait_for_ended_watches(self) -> None:
        """Until every watch ended with WatchStream.end has ended, its record complete."""
        for thread in list(self.closing):
            thread.join(timeout=10)

    def stop_children(self) -> None:
        """End every kubectl still running (calls made at once in other threads, streams), so an
        interruption leaves none behind: SIGTERM first, SIGKILL after a second."""
        running = [process for process in list(self.children) if process.poll() is None]
        for process in running:
            with contextlib.suppress(OSError):
                process.terminate()
        for process in running:
            try:
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    process.kill()

    def _once(self, argv: List[str], stdin: Optional[str], timeout: float) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        record = self._record(argv, started)
        try:
            completed = self._run_process(argv, stdin, timeout)
        except OSError as error:
            raise self._not_started(record, error) from None
        except subprocess.TimeoutExpired:
            raise self._timed_out(record, argv, timeout) from None
        finally:
            record["seconds"] = round(time.monotonic() - started, 3)
            if "error" in record:
                self._ended(argv, record)
        record["exit"] = completed.returncode
        self._ended(argv, record)
        if completed.returncode != 0:
            record["stderr"] = completed.stderr[-CALL_STDERR_LIMIT:]
        return completed

    def run(
        self,
        args: Sequence[str],
        *,
        namespace: Optional[str] = None,
        stdin: Optional[str] = None,
        read_only: bool = False,
        timeout: Optional[float] = None,
        retries: Optional[Sequence[float]] = None,
    ) -> str:
        argv = self.argv(args, namespace)
        delays = list(self.timing.retry_delays if retries is None else retries) if read_only else []
        first_attempt = time.monotonic()
        while True:
            completed = self._once(argv, stdin, timeout or self.process_timeout)
            if completed.returncode == 0:
                return completed.stdout
            failure = KubectlFailure(argv, completed.returncode, completed.stderr, completed.stdout, self.server)
            self._retry_or_raise(failure, delays, first_attempt)

    def stream(
        self,
        args: Sequence[str],
        consume: Callable[[bytes], None],
        *,
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
        request_timeout: Optional[str] = REQUEST_TIMEOUT,
        idle: bool = False,
    ) -> None:
        """A read whose output may be large (logs): handed to consume as bytes, chunk by chunk as
        it arrives, never held whole. Repeated after a transient failure only while nothing has
        been consumed; kubectl's stderr is kept up to CALL_STDERR_LIMIT.

        `request_timeout` None gives kubectl no --request-timeout: client-go makes it the HTTP
        client's timeout (rest.Config.Timeout -> http.Client.Timeout), which also covers reading
        the response, so it would end a large log's transfer. With `idle`, the call ends when it
        has printed nothing for `timeout` seconds, however long it keeps printing; else
        `timeout` seconds after it started."""
        argv = self.argv(args, namespace, request_timeout)
        delays = list(self.timing.retry_delays)
        first_attempt = time.monotonic()
        limit = timeout or self.process_timeout
        while True:
            started = time.monotonic()
            record = self._record(argv, started)
            process = self._start(argv, record)
            assert process.stdout is not None and process.stderr is not None
            stderr = bytearray()
            stderr_reader = threading.Thread(target=_drain, args=(process.stderr, stderr), daemon=True)
            stderr_reader.start()
            watchdog = _Watchdog(process, limit)
            consumed = 0
            try:
                descriptor = process.stdout.fileno()
                while True:
                    chunk = os.read(descriptor, 65536)
                    if not chunk:
                        break
                    if idle:
                        watchdog.postpone()
                    consumed += len(chunk)
                    consume(chunk)
                returncode = process.wait()
            finally:
                watchdog.stop()
                if process.poll() is None:
                    process.kill()
                    process.wait()
                stderr_reader.join(timeout=5)
                process.stdout.close()
                process.stderr.close()
                self.children.discard(process)
                record["seconds"] = round(time.monotonic() - started, 3)
            record["exit"] = returncode
            if watchdog.fired.is_set() and returncode < 0:
                timed_out = self._timed_out(record, argv, limit)
                self._ended(argv, record)
                raise timed_out
            self._ended(argv, record)
            if returncode == 0:
                return
            text = stderr.decode("utf-8", "replace")
            record["stderr"] = text[-CALL_STDERR_LIMIT:]
            failure = KubectlFailure(argv, returncode, text, server=self.server)
            if consumed:  # what was consumed cannot be taken back: never repeated
                raise failure
            self._retry_or_raise(failure, delays, first_attempt)

    def cluster_identity(self) -> Tuple[str, Optional[str]]:
        """The context to use (--context, else the current one, read once) and its API server URL,
        from the kubeconfig alone: `config view --minify` needs no cluster."""
        argv = self.argv(["config", "view", "--minify", "-o", "json"], request_timeout=None)
        completed = self._once(argv, None, self.process_timeout)
        if completed.returncode != 0:
            raise DemoError(self.no_context(kubectl_message(completed.stderr)), EXIT_USAGE)
        config = self.decode_json(completed.stdout, "config view")
        context = self.context or config.get("current-context")
        if not isinstance(context, str) or not context:
            raise DemoError("the kubeconfig names no current context; pass --context", EXIT_USAGE)
        clusters = config.get("clusters") or [{}]
        server = ((clusters[0] if isinstance(clusters[0], dict) else {}).get("cluster") or {}).get("server")
        return context, server if isinstance(server, str) else None

    def no_context(self, message: str) -> str:
        """Why `config view --minify` found no context (kubectl's `message`), with its own fix.

        kubectl reads a kubeconfig file that does not exist as an empty one (client-go
        tools/clientcmd/config.go, PathOptions.GetStartingConfig), so "current-context must exist"
        (client-go tools/clientcmd/api/helpers.go, MinifyConfig) means no file, or a file without a
        current context, and "cannot locate context X" may mean no file too: whether a file exists is
        read here first, from the files kubectl was given, as kubectl chooses them (an explicit
        file, else $KUBECONFIG's list, else ~/.kube/config)."""
        wanted = re.match(r"^error: cannot locate context (.+)$", message)
        if not wanted and message != "error: current-context must exist in order to minify":
            return f"cannot read the kubeconfig ({message}); check --kubeconfig, $KUBECONFIG or ~/.kube/config"
        files = self.kubeconfig.split(os.pathsep) if self.kubeconfig else [os.path.expanduser("~/.kube/config")]
        if not any(os.path.exists(path) for path in files):
            if self.kubeconfig_from == "--kubeconfig":
                return f"the kubeconfig file {files[0]} does not exist; check --kubeconfig"
            if self.kubeconfig_from == "$KUBECONFIG":
                return (
                    f"no file in $KUBECONFIG exists ({', '.join(files)}); check $KUBECONFIG, or pass --kubeconfig FILE"
                )
            if self.kubeconfig_from:
                return (
                    f"the kubeconfig file {files[0]} ({self.kubeconfig_from}) no longer exists; pass --kubeconfig FILE"
                )
            return (
                "no kubeconfig: ~/.kube/config does not exist and $KUBECONFIG is not set; write one with your "
                "cluster's tool (for example `kind export kubeconfig`, `aws eks update-kubeconfig`, `gcloud container "
                "clusters get-credentials`), or pass --kubeconfig FILE"
            )
        if wanted and self.context:
            return (
                f"context {wanted.group(1)} is not in the kubeconfig; check --context "
                "(`kubectl config get-contexts` lists the contexts)"
            )
        if wanted:
            return (
                f"the kubeconfig's current context {wanted.group(1)} is not defined in it; pass --context, "
                "or choose one with `kubectl config use-context NAME`"
            )
        return (
            f"the kubeconfig ({', '.join(files)}) sets no current context; pass --context, or choose one with "
            "`kubectl config use-context NAME` (`kubectl config get-contexts` lists them)"
        )

    def get(self, kind: str, name: str, namespace: Optional[str] = None, **kwargs: Any) -> Optional[KubeObject]:
        """The live object, or None when it does not exist."""
        raw = self.run(
            ["get", kind, name, "--ignore-not-found", "-o", "json"], namespace=namespace, read_only=True, **kwargs
        )
        if not raw.strip():
            return None
        return self.decode_json(raw, f"get {kind} {name}")

    def get_list(
        self, kinds: str, namespace: Optional[str] = None, flags: Sequence[str] = (), **kwargs: Any
    ) -> List[KubeObject]:
        """Every object of `kinds` (in `namespace`; `flags` may widen or narrow that: --all-namespaces,
        --field-selector), as one List that kubectl assembles from the server's pages of 500."""
        raw = self.run(["get", kinds, *flags, "-o", "json"], namespace=namespace, read_only=True, **kwargs)
        try:
            return parse_json_documents(raw)
        except ValueError as error:
            raise DemoError(
                f"kubectl get {kinds} printed output that is not JSON objects ({error})", EXIT_CLUSTER
            ) from None

    def create(self, manifest: KubeObject, review: bool = False) -> List[KubeObject]:
        """Create objects (one, or a List of several, answered as one document each).

        The run's own objects are validated server-side, strictly (`--validate=strict`: an
        unknown field is an error). Access reviews (review=True) are never stored, so they skip
        validation and, with it, kubectl's OpenAPI download; being read-only, they are retried."""
        args = ["create", "-f", "-", "-o", "json", "--validate=false" if review else "--validate=strict"]
        raw = self.run(args, stdin=json.dumps(manifest), read_only=review)
        try:
            created = parse_json_documents(raw)
        except ValueError as error:
            raise DemoError(f"kubectl create printed output that is not JSON ({error})", EXIT_CLUSTER) from None
        if not created:
            raise DemoError(f"kubectl create of {manifest.get('kind')} printed no object", EXIT_CLUSTER)
        return created

    @staticmethod
    def decode_json(raw: str, what: str) -> KubeObject:
        """kubectl's output as one JSON object, or an error naming the call that printed it."""
        try:
            decoded = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as error:
            detail = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deeply"
            raise DemoError(f"kubectl {what} printed output that is not JSON ({detail})", EXIT_CLUSTER) from None
        if not isinstance(decoded, dict):
            raise DemoError(f"kubectl {what} printed JSON that is not an object", EXIT_CLUSTER)
        return decoded

    def watch(
        self, tag: str, args: Sequence[str], namespace: str, sink: queue.Queue[Any], seconds: float
    ) -> WatchStream:
        """Start a watch whose request lives as long as the client is prepared to wait."""
        argv = self.argv(
            ["get", *args, "-o", "json", "--output-watch-events", "--watch"],
            namespace,
            request_timeout=f"{math.ceil(seconds)}s",
        )
        record = self._record(argv, time.monotonic(), watch=True)
        process = self._start(argv, record)  # WatchStream.close ends it; stop_children too, after Ctrl-C
        return WatchStream(tag, process, sink, record, lambda: self._ended(argv, record), self.closing)


def make_kubectl(args: argparse.Namespace, receipt: Optional[Receipt] = None) -> Kubectl:
    """kubectl from --kubectl, then $KUBECTL, then the receipt, then PATH; bound to the context
    from --context, else the receipt's, else the kubeconfig's current one (read once)."""
    executable = args.kubectl or os.environ.get("KUBECTL") or (receipt.kubectl if receipt else None) or "kubectl"
    if os.sep in executable:
        executable = os.path.abspath(executable)  # cleanup may run from another directory
    elif receipt is None:
        executable = shutil.which(executable) or executable  # pin the binary the run used
    if args.kubeconfig:
        kubeconfig: Optional[str] = os.path.abspath(args.kubeconfig)
        kubeconfig_from = "--kubeconfig"
    elif receipt is not None:
        kubeconfig, kubeconfig_from = receipt.kubeconfig, "recorded in receipt.json"
    else:  # record $KUBECONFIG too, so cleanup from another shell reaches the same cluster
        paths = [os.path.abspath(path) for path in os.environ.get("KUBECONFIG", "").split(os.pathsep) if path]
        kubeconfig, kubeconfig_from = os.pathsep.join(paths) or None, "$KUBECONFIG"
    return Kubectl(
        executable,
        context=args.context or (receipt.context if receipt else None),
        kubeconfig=kubeconfig,
        kubeconfig_from=kubeconfig_from if kubeconfig else "",
        verbose=args.verbose,
        process_timeout=args.kubectl_timeout,
    )


# Persistence: receipt and output files ########################################
# Files written atomically, read back and checked: receipt, logs, results, input files. Uses the
# pure core and the status lines.


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so no reader ever sees half a file. A lone
    surrogate (a byte of a path or flag that is not UTF-8) is written as its escape, \\udcff."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(temporary, "x", encoding="utf-8", errors="backslashreplace") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


_PREFIX = rb"^\[pod/([^/\]]+)/[^\]]+\] ?"
_EMBEDDED_PREFIX = rb"\[pod/([^/\]]+)/[^\]]+\] "
# `kubectl logs -l --ignore-errors`: a pod whose log request failed gets this unprefixed line on
# stdout instead of ending the read (kubectl pkg/cmd/logs/logs.go sequentialConsumeRequest, or
# consumeWithRetry from 1.36: `"error: " + err.Error() + "\n"`, err being the server's message).
_KUBECTL_LOG_ERROR = b"error: "
PREFIX_LIMIT = 512  # bytes of kubectl's "[pod/NAME/CONTAINER] ": a pod name is at most 253, a container's 63


def _named_write_error(error: OSError, path: Path) -> OSError:
    """A failed write names its file: a full disk's error (ENOSPC) from write() carries none."""
    return error if error.filename else OSError(error.errno, error.strerror, str(path))


# What a pod's artifact names can make the file system answer: the episode's fault, not the run's.
_ARTIFACT_PATH_ERRORS = (errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.ENOTEMPTY)


@dataclasses.dataclass
class _ArtifactFile:
    """The artifact whose frames are arriving: its temporary file in its directory (both open)."""

    name: str
    total: int
    sha256: str
    directory: int  # a descriptor of the directory it goes to
    temporary: str  # its name there until it is whole
    descriptor: int
    hasher: Any
    next: int = 0  # the frame expected next
    size: int = 0


class ArtifactSink:
    """One pod's artifact frames on their way to DIR/artifacts/<pod>/ (docs/own-episodes.md).

    Frames are streamed: each one's bytes go to a temporary file and its hash as it arrives, so no
    artifact is ever held whole, and count against the episode's own budget (--max-artifact-bytes),
    never against what other pods may spend. An artifact whose frames all came, in order, with the
    sha256 they claim, is renamed into place; the first frame that breaks a rule stops the rest of
    the pod's frames, and its partial file is removed. Nothing is written outside the pod's
    directory: names are checked (artifact_name_problem), every directory is opened without
    following a symlink (O_NOFOLLOW, relative to its parent's descriptor), files are created
    exclusively and renamed within their directory."""

    def __init__(self, root: Path, pod: str, budgets: LogBudgets) -> None:
        self.root = root
        self.pod = pod
        self.budgets = budgets
        self.saved: Dict[str, ArtifactEntry] = {}
        self.error = ""
        self.missing = False  # the error is frames that never came (rotation, most likely)
        self.frames = 0
        self.received = 0  # decoded bytes of this pod's frames so far
        self.current: Optional[_ArtifactFile] = None

    def frame(self, raw: bytes) -> None:
        if self.error:
            return
        self.frames += 1
        if self.frames > ARTIFACT_FRAMES_LIMIT:
            return self._fail(f"it sent more than {ARTIFACT_FRAMES_LIMIT:,} artifact frames")
        try:
            frame = parse_artifact_frame(raw)
        except ValueError as error:
            return self._fail(f"its artifact frame {self.frames} {error}")
        current, label = self.current, short_repr(frame.name)
        if current is not None and frame.name != current.name:
            return self._missing(current, f"a frame of {label} came before them")
        if current is None:
            if frame.name in self.saved:
                return self._fail(f"frame {frame.seq} of artifact {label} came after the artifact was complete")
            if frame.seq:
                self.missing = True
                return self._fail(f"frames 0 to {frame.seq - 1} of the {frame.total} of artifact {label} are missing")
            if len(self.saved) >= ARTIFACTS_PER_EPISODE_LIMIT:
                return self._fail(f"it sent more than {ARTIFACTS_PER_EPISODE_LIMIT} artifacts")
            current = self._open(frame)
            if current is None:
                return None
        elif frame.seq < current.next:
            return self._fail(f"frame {frame.seq} of artifact {label} came after frame {current.next - 1}")
        elif frame.seq > current.next:
            self.missing = True
            return self._fail(f"frames {current.next} to {frame.seq - 1} of artifact {label} are missing")
        elif (frame.total, frame.sha256) != (current.total, current.sha256):
            return self._fail(f"frame {frame.seq} of artifact {label} changes its total or sha256")
        self._append(current, frame.data)
        if not self.error and current.next == current.total:
            self._complete(current)
        return None

    def _open(self, frame: ArtifactFrame) -> Optional[_ArtifactFile]:
        import hashlib  # noqa: PLC0415 - only a run whose pods send artifacts needs it

        *parents, base = frame.name.split("/")
        directory = -1
        try:
            directory = self._directory([self.pod, *parents])
            temporary = f".{base[:100]}.{os.urandom(4).hex()}.part"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            descriptor = os.open(temporary, flags, 0o644, dir_fd=directory)
        except OSError as error:
            if directory >= 0:
                os.close(directory)
            self._path_error(error, frame.name)
            return None
        self.current = _ArtifactFile(
            frame.name, frame.total, frame.sha256, directory, temporary, descriptor, hashlib.sha256()
        )
        return self.current

    def _directory(self, parts: Sequence[str]) -> int:
        """A descriptor of DIR/artifacts/<parts...>, each created if missing, none a symlink."""
        self.root.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for part in parts:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=descriptor)
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=descriptor)
                os.close(descriptor)
                descriptor = inner
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor

    def _append(self, current: _ArtifactFile, data: bytes) -> None:
        if self.received + len(data) > self.budgets.artifact_bytes:
            return self._fail(
                f"its artifacts are over the --max-artifact-bytes budget of {self.budgets.artifact_bytes:,} bytes "
                f"per episode (at frame {current.next} of {short_repr(current.name)})"
            )
        self.received += len(data)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(current.descriptor, view) :]
        except OSError as error:
            self.discard()
            raise _named_write_error(error, self.root / self.pod / current.name) from None
        current.hasher.update(data)
        current.size += len(data)
        current.next += 1
        return None

    def _complete(self, current: _ArtifactFile) -> None:
        digest = current.hasher.hexdigest()
        if digest != current.sha256:
            return self._fail(
                f"the data of artifact {short_repr(current.name)} has sha256 {digest[:12]}..., not the "
                f"{current.sha256[:12]}... its frames claim"
            )
        base = current.name.rsplit("/", 1)[-1]
        try:
            os.close(current.descriptor)
            current.descriptor = -1
            os.replace(current.temporary, base, src_dir_fd=current.directory, dst_dir_fd=current.directory)
        except OSError as error:
            self._path_error(error, current.name)
            return None
        os.close(current.directory)
        self.current = None
        self.saved[current.name] = {"name": current.name, "bytes": current.size, "sha256": digest}
        return None

    def _path_error(self, error: OSError, name: str) -> None:
        if error.errno not in _ARTIFACT_PATH_ERRORS:
            self.discard()
            raise _named_write_error(error, self.root / self.pod / name) from None
        self._fail(f"its artifact {short_repr(name)} cannot be saved there ({error.strerror})")

    def _missing(self, current: _ArtifactFile, why: str) -> None:
        self.missing = True
        self._fail(
            f"frames {current.next} to {current.total - 1} of artifact {short_repr(current.name)} are missing ({why})"
        )

    def _fail(self, error: str) -> None:
        self.error = self.error or error
        self.discard()

    def discard(self) -> None:
        """Remove the partial artifact, if any."""
        current, self.current = self.current, None
        if current is None:
            return
        with contextlib.suppress(OSError):
            if current.descriptor >= 0:
                os.close(current.descriptor)
        with contextlib.suppress(OSError):
            os.unlink(current.temporary, dir_fd=current.directory)
        with contextlib.suppress(OSError):
            os.close(current.directory)

    def finish(self, log: PodLog) -> None:
        """The log has ended: an artifact still arriving lacks its last frames."""
        if self.current is not None:
            self._missing(self.current, "its log ended")
        log.artifacts, log.artifact_error, log.artifact_frames_missing = dict(self.saved), self.error, self.missing


class _PodLogFile:
    """One pod's log on its way to ROUND_DIR/<pod>.log: a temporary file renamed when complete.

    Its text is saved up to LOG_FILE_LIMIT and while the run's disk budget lasts; past either,
    it is scanned and counted, not saved, except the lines the validation reads (the first
    `ready` and `reward`), which are saved whole wherever they come, after a marker line."""

    FLUSH_BYTES = 16 * 1024

    def __init__(self, path: Path, budgets: LogBudgets, pod: str = "") -> None:
        self.path = path
        self.temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        self.budgets = budgets
        self.buffer = bytearray()
        self.scanner = EventScanner(budgets)
        self.pod = pod
        self.artifacts: Optional[ArtifactSink] = None  # from its first artifact frame on
        self.frame_lines = 0
        self.saved = 0  # bytes in the file or its buffer
        self.dropped = 0
        self.skipped = 0  # of them, since the last line saved past the limits
        self.cut_by = ""  # which limit stopped the text: "" while none has
        self.cut_at = 0  # bytes of text saved when it did

    def text(self, data: bytes) -> None:
        """Bytes that are no line to scan (the pieces of an over-long line), or a line scanned."""
        granted = self._room(len(data)) if not self.cut_by else 0
        self._write(data[:granted])
        self.dropped += len(data) - granted
        self.skipped += len(data) - granted

    def line(self, body: bytes, ended: bool) -> None:
        """One line (a log's last one may lack its newline): scanned, then saved within the
        limits; a kept event line is saved whole even past them."""
        data = body + b"\n" if ended else body
        if self.budgets.artifacts is not None and self.pod and body.startswith(ARTIFACT_FRAME_TAG):
            self.frame(body)
            return
        if not self.scanner.line(body):
            self.text(data)
            return
        if not self.cut_by and self._room(len(data), whole=True) == len(data):
            self._write(data)
            return
        marker = f"[rl-batch-demo: {self.skipped:,} bytes not saved before this line]\n" if self.skipped else ""
        self._write(marker.encode() + data)
        self.skipped = 0

    def frame(self, body: bytes) -> None:
        """An artifact frame: to its file under DIR/artifacts/<pod>/, not to <pod>.log (whose
        text it would double); the log says how many lines went there."""
        self.scanner.lines += 1
        self.frame_lines += 1
        if self.artifacts is None:
            assert self.budgets.artifacts is not None
            self.artifacts = ArtifactSink(self.budgets.artifacts, self.pod, self.budgets)
        self.artifacts.frame(body)

    def _room(self, wanted: int, whole: bool = False) -> int:
        """How many of `wanted` bytes may still be saved (all or none when `whole`); once fewer,
        which limit it was."""
        room = LOG_FILE_LIMIT - self.saved
        granted = self.budgets.take_disk(min(room, wanted), whole=whole) if room >= (wanted if whole else 0) else 0
        if granted < wanted:
            self.cut_at = self.saved + granted
            self.cut_by = (
                f"each <pod>.log keeps {LOG_FILE_LIMIT:,} bytes"
                if room < wanted and granted == (0 if whole else room)
                else f"the run's logs reached their budget of {LOG_DIR_BUDGET:,} bytes"
            )
        return granted

    def _write(self, data: bytes) -> None:
        self.buffer += data
        self.saved += len(data)
        if len(self.buffer) >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.buffer or not self.temporary.exists():
            try:
                self._append(bytes(self.buffer))
            except OSError as error:
                raise _named_write_error(error, self.path) from None
            self.buffer.clear()

    def _append(self, data: bytes) -> None:
        with open(self.temporary, "ab") as stream:
            stream.write(data)

    def finish(self) -> PodLog:
        if self.frame_lines:
            where = f"{self.budgets.artifacts}/{self.pod}/"
            self.buffer += f"[rl-batch-demo: {self.frame_lines:,} artifact frame lines went to {where}]\n".encode()
        if self.dropped:
            self.buffer += (
                f"[rl-batch-demo: log truncated at {self.cut_at} bytes ({self.cut_by}); {self.dropped} more bytes "
                "were read and scanned for events but not saved; its ready and reward lines were saved]\n"
            ).encode()
        self.flush()
        os.replace(self.temporary, self.path)
        log = self.scanner.pod_log(self.saved, self.dropped)
        if self.artifacts is not None:
            self.artifacts.finish(log)
        return log

    def discard(self) -> None:
        if self.artifacts is not None:
            self.artifacts.discard()
        with contextlib.suppress(OSError):
            os.unlink(self.temporary)


class EpisodeLogReader:
    """Reads `kubectl logs` output as it streams (bytes, split on b"\\n" only, as kubectl
    prefixes only there): per pod, the events (kept, bounded) and the text (saved to <pod>.log
    within its limits, see _PodLogFile). Only pods named in the Job's listing get a file, so
    nothing a pod prints can choose a file name."""

    def __init__(
        self,
        round_dir: Path,
        pod_names: Iterable[str],
        single_pod: Optional[str] = None,
        budgets: Optional[LogBudgets] = None,
        gate: Optional[threading.Event] = None,
        ignored: Iterable[str] = (),
    ) -> None:
        self.round_dir = round_dir
        self.allowed = set(pod_names)
        # Pods the selector also matches whose logs nobody wants (lost to the infrastructure): with
        # them the read runs with --ignore-errors, and kubectl's error lines are judged here.
        self.ignored = set(ignored) - self.allowed
        self.last_pod: Optional[str] = None  # the pod whose line came last
        self.error_in_last_line: Dict[str, bool] = {}  # --ignore-errors: kubectl's error may be glued there
        self.single_pod = single_pod  # `kubectl logs POD`: no prefixes, every line is this pod's
        self.budgets = budgets or LogBudgets()
        self.files: Dict[str, _PodLogFile] = {}
        self.order: List[str] = []  # pods in the order their first line arrived
        self.doubtful: Set[str] = set()  # pods whose lines another pod's text may have swallowed
        self.partial = bytearray()
        self.long_line_pod: Optional[str] = None  # inside an over-long line of this pod ("" if unknown)
        self.long_line_tail = b""  # its last bytes, where a prefix cut by a chunk's end begins
        self.gate = gate  # no file is written before it is set (kubectl's output waits in the pipe)

    def _file(self, name: Optional[str]) -> Optional[_PodLogFile]:
        if name is None or name not in self.allowed:
            return None
        if name not in self.files:
            if self.gate is not None:
                self.gate.wait()
            self.round_dir.mkdir(parents=True, exist_ok=True)
            self.files[name] = _PodLogFile(self.round_dir / f"{name}.log", self.budgets, name)
            self.order.append(name)
        return self.files[name]

    def _check_glued(self, name: Optional[str], body: bytes) -> None:
        """kubectl writes a pod's last line without a newline as it came, so the next pod's first
        prefixed line is glued onto it, however long that last line is; and a pod can print such
        text itself. Either way both pods' logs are in doubt here, and are read again one by one.
        Every piece of every line passes here, an over-long line's too."""
        if self.single_pod is not None or b"[pod/" not in body:
            return
        for match in re.finditer(_EMBEDDED_PREFIX, body):
            glued = match.group(1).decode("utf-8", "replace")
            if glued in self.allowed:
                self.doubtful.add(glued)
                if name:
                    self.doubtful.add(name)

    def _split(self, line: bytes) -> Tuple[Optional[str], bytes]:
        if self.single_pod is not None:
            return self.single_pod, line
        match = re.match(_PREFIX, line)
        if not match:
            if self.ignored and line.startswith(_KUBECTL_LOG_ERROR):
                self._kubectl_error(line)
            return None, line  # not a pod's line (kubectl's own warning or error): dropped
        name = match.group(1).decode("utf-8", "replace")
        self.last_pod = name
        if self.ignored:
            self.error_in_last_line[name] = _KUBECTL_LOG_ERROR in line
        return name, line[match.end() :]

    def _kubectl_error(self, line: bytes) -> None:
        """With --ignore-errors, kubectl's line for a log request that failed. The kubelet's and
        the API server's messages name the pod (`container "episode" in pod "NAME" is not
        available`, kubelet_pods.go validateContainerLogStatus; a node's URL .../containerLogs/
        NS/NAME/...): a lost pod's is expected, a wanted pod's log is read again by itself. One
        that names none may have cut short the pod printed just before it."""
        text = line.decode("utf-8", "replace")
        named = {
            name
            for name in self.allowed | self.ignored
            if re.search(rf"(?<![A-Za-z0-9.-]){re.escape(name)}(?![A-Za-z0-9.-])", text)
        }
        if named:
            self.doubtful.update(named & self.allowed)
        elif self.last_pod in self.allowed:
            self.doubtful.add(str(self.last_pod))

    def feed(self, chunk: bytes) -> None:
        *lines, rest = chunk.split(b"\n")
        for line in lines:
            self._piece(line, True)
        self._piece(rest, False)

    def _piece(self, piece: bytes, ends_line: bool) -> None:
        if self.long_line_pod is not None:  # the rest of an over-long line: to the file, never kept
            self._check_glued(self.long_line_pod, self.long_line_tail + piece)
            if self.ignored and self.long_line_pod:
                self.error_in_last_line[self.long_line_pod] = _KUBECTL_LOG_ERROR in self.long_line_tail + piece
            self.long_line_tail = (self.long_line_tail + piece)[-PREFIX_LIMIT:]
            target = self._file(self.long_line_pod)
            if target is not None:
                target.text(piece + (b"\n" if ends_line else b""))
                if ends_line:
                    target.scanner.long_line()
            if ends_line:
                self.long_line_pod = None
            return
        self.partial += piece
        if not ends_line and len(self.partial) <= EVENT_LINE_LIMIT + PREFIX_LIMIT:
            return
        name, body = self._split(bytes(self.partial))
        self.partial.clear()
        target = self._file(name)
        self._check_glued(name, body)
        if not ends_line:  # over-long: stream the rest of this line to the file, never keep it
            self.long_line_pod = name if name is not None else ""
            self.long_line_tail = body[-PREFIX_LIMIT:]
            if target is not None:
                target.text(body)
            return
        if target is not None:
            target.line(body, True)

    def finish(self) -> Dict[str, PodLog]:
        """Every pod that printed something: its PodLog, its file complete on disk."""
        if self.partial:
            name, body = self._split(bytes(self.partial))
            self.partial.clear()
            target = self._file(name)
            self._check_glued(name, body)
            if target is not None:
                target.line(body, False)
        elif self.long_line_pod is not None:
            target = self._file(self.long_line_pod)
            if target is not None:
                target.scanner.long_line()
        self.long_line_pod = None
        # kubectl writes a pod's last line without a newline as it came: an error line for the next
        # request is then glued onto it, in that pod's text
        self.doubtful.update(name for name, glued in self.error_in_last_line.items() if glued and name in self.allowed)
        return {name: log_file.finish() for name, log_file in sorted(self.files.items())}

    def discard(self) -> None:
        for log_file in self.files.values():
            log_file.discard()


INPUT_FILE_LIMIT = 64 * 2**20  # a --worker or --tasks file larger than this is not read at all


def read_input_file(path: Path, flag: str) -> bytes:
    """The bytes of a --worker or --tasks file; a missing or huge one is bad input."""
    try:
        size = path.stat().st_size
        if size > INPUT_FILE_LIMIT:
            raise DemoError(
                f"{flag} {path} is {size:,} bytes; the ConfigMap that carries it cannot exceed the API server's "
                f"1 MiB ({CONFIGMAP_OBJECT_LIMIT:,} bytes) object size limit",
                EXIT_USAGE,
            )
        return path.read_bytes()
    except OSError as error:
        raise DemoError(f"cannot read {flag} {path}: {error.strerror or error}", EXIT_USAGE) from None


def save_if_possible(path: Path, data: Any) -> None:
    """A diagnostic written on the way out: when the disk itself is the failure, say so and go on
    to the cleanup rather than stop there."""
    try:
        write_json(path, data)
    except OSError as error:
        say_stderr(f"warning: could not write {path} ({error.strerror or error})")


def write_receipt(output: Path, receipt: Receipt) -> None:
    write_json(output / "receipt.json", receipt.to_json())


def read_receipt(output: Path) -> Receipt:
    path = output / "receipt.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DemoError(
            f"no receipt at {path}: this is not the output directory of a run that reached the cluster; check --output",
            EXIT_USAGE,
        ) from None
    except (OSError, ValueError, RecursionError) as error:
        raise DemoError(f"cannot read the receipt {path} ({error}); inspect the file", EXIT_USAGE) from None
    return Receipt.from_json(data, str(path))


def refuse_existing_output(output: Path) -> None:
    """An output directory that exists (a symlink too) is refused, before any work: no earlier
    result is ever overwritten."""
    if output.exists() or output.is_symlink():
        raise DemoError(
            f"output directory {output} already exists; choose a new --output (earlier results are never overwritten)",
            EXIT_USAGE,
        )


def claim_output(output: Path) -> None:
    refuse_existing_output(output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.mkdir()
    except OSError as error:
        refuse_existing_output(output)  # created in the meantime
        blocking = next((parent for parent in output.parents if parent.exists()), None)
        why = error.strerror or str(error)
        if blocking is not None and not blocking.is_dir():  # mkdir's "File exists" names no culprit
            why = f"{blocking} is not a directory"
        raise DemoError(f"cannot create the output directory {output} ({why})", EXIT_USAGE) from None


# What a run writes into its directory before its first create: all a failed preflight leaves.
PREFLIGHT_FILES = ("receipt.json", "kubectl-calls.json", "error.json")


def release_output(output: Path) -> None:
    """After a run that created nothing in the cluster (its preflight failed), remove the files it
    wrote and the directory, so that the same --output works again. Anything else found there
    (written by someone else meanwhile) keeps the directory as it is."""
    with contextlib.suppress(OSError):
        for name in PREFLIGHT_FILES:
            with contextlib.suppress(FileNotFoundError):
                (output / name).unlink()
        output.rmdir()


class RewardsWriter:
    """DIR/rewards.jsonl, appended to as verdicts are known and never rewritten (docs/outputs.md).

    Each line is one write of its whole text to a file opened for appending, and a batch of lines
    is fsynced before anyone is told of them (`on_reward`, the Python API's seam), so a reader
    (`tail -f`) sees the lines in the order they were known, and after a crash only the last line
    can be incomplete: it lacks its newline, and a reader skips it. After a failed write nothing
    more is written: the run ends with that error (an OSError naming the file)."""

    def __init__(self, path: Path, on_reward: Optional[Callable[[RewardLine], None]] = None) -> None:
        self.path = path
        self.on_reward = on_reward
        self.descriptor: Optional[int] = None
        self.failed = False
        self.lock = threading.Lock()  # one writer at a time, whichever thread knows a verdict

    def open(self) -> None:
        """Create the file, empty, where the run's output directory (fresh, claimed) has none."""
        try:
            self.descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)  # the file's name survives a crash too
            finally:
                os.close(directory)
        except OSError as error:
            raise OSError(error.errno, error.strerror, str(self.path)) from None

    def append(self, lines: Sequence[RewardLine]) -> None:
        if not lines:
            return
        with self.lock:
            if self.descriptor is None or self.failed:
                raise OSError(errno.EIO, "an earlier write failed" if self.failed else "not open", str(self.path))
            try:
                for line in lines:
                    data = (json.dumps(line, sort_keys=True, allow_nan=False) + "\n").encode()
                    while data:
                        data = data[os.write(self.descriptor, data) :]
                os.fsync(self.descriptor)
            except OSError as error:
                self.failed = True
                raise OSError(error.errno, error.strerror, str(self.path)) from None
        if self.on_reward is not None:
            for line in lines:
                self.on_reward(line.copy())  # the caller's own copy: the run keeps its record of each pod

    def close(self) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None


def read_reward_lines(path: Path) -> List[RewardLine]:
    """rewards.jsonl as a reader should take it (docs/outputs.md), at any moment of a run or after
    it: every complete line, in order; a last piece without its newline (a write going on, or a
    crash mid-write) is not a line yet. A line that is not one of this tool's is bad input."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DemoError(f"cannot read {path} ({error.strerror or error})", EXIT_USAGE) from None
    lines: List[RewardLine] = []
    for number, raw in enumerate(data[: data.rfind(b"\n") + 1].split(b"\n")[:-1], 1):
        try:
            value = json.loads(raw.decode("utf-8", "replace"), parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            value = None
        problem = schema_problem(value, RewardLine) if isinstance(value, dict) else "not a JSON object"
        if problem:
            raise DemoError(f"{path} line {number} is not a rewards line of this tool: {problem}", EXIT_USAGE)
        lines.append(typing.cast(RewardLine, value))
    return lines


def load_results(directory: Path) -> Results:
    """A run's results.json, checked against the schema before anything reads it: a missing,
    unreadable, hand-edited or foreign file is bad input, named with the key to inspect."""
    path = directory / "results.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except FileNotFoundError:
        raise DemoError(f"no results at {path}: that run did not finish successfully", EXIT_USAGE) from None
    except (OSError, ValueError, RecursionError) as error:
        raise DemoError(f"cannot read {path} ({error})", EXIT_USAGE) from None
    problem = schema_problem(data, Results)
    if problem:
        raise DemoError(f"{path} is not a results file of this tool: {problem}; inspect the file", EXIT_USAGE)
    return typing.cast(Results, data)


def saved_results(directory: Optional[Path]) -> Optional[Results]:
    """The results.json a run of this tool just wrote in `directory`, or None when there is none
    (the run did not get that far, or `directory` is not the run's)."""
    try:
        return load_results(directory) if directory is not None else None
    except DemoError:
        return None


def _read_json_file(path: Path) -> Any:
    """A JSON file this run wrote, or None when it is absent or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def rounds_on_disk(output: Path, rounds: int) -> List[StartedRound]:
    """Every round the receipt records as started, with the pods and Job it saved (None if absent)."""
    receipt = _read_json_file(output / "receipt.json")
    jobs = receipt.get("jobs") if isinstance(receipt, dict) else None
    if isinstance(jobs, list):  # warm-up and probe Jobs are no rounds
        jobs = [job for job in jobs if not (isinstance(job, dict) and str(job.get("name")).startswith(NOT_ROUNDS))]
    started: List[StartedRound] = []
    for number, job in enumerate(jobs if isinstance(jobs, list) else [], 1):
        round_dir = output if rounds == 1 else output / f"round-{number}"
        name = job.get("name") if isinstance(job, dict) else None
        listing = _read_json_file(round_dir / "pods.json")
        items = listing.get("items") if isinstance(listing, dict) else None
        job_object = _read_json_file(round_dir / "job.json")
        started.append(
            {
                "round": number,
                "job": str(name or job_name_for(number, rounds)),
                "pods": [pod for pod in items if isinstance(pod, dict)] if isinstance(items, list) else None,
                "job_object": job_object if isinstance(job_object, dict) else None,
            }
        )
    return started


def append_step_summary(markdown: str) -> None:
    """A Markdown section for the CI job page when GitHub Actions provides GITHUB_STEP_SUMMARY."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8", errors="backslashreplace") as stream:
            stream.write(markdown)
    except OSError as error:
        say_stderr(f"warning: could not append to GITHUB_STEP_SUMMARY ({error.strerror})")


def cleanup_command(tool: str, output: Path) -> str:
    """The command that cleans up `output`, started the way the user started this tool (`tool`)."""
    return f"{tool} cleanup --output {shlex.quote(str(output))}"


def _uid_from_job_json(output: Path) -> Optional[str]:
    try:
        return str(json.loads((output / "job.json").read_text(encoding="utf-8"))["metadata"]["uid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
        names = [(item.get("kind"), (item.get("metadata") or {}).get("name")) for item in answered]
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
        owner = ((live.get("metadata") or {}).get("labels") or {}).get(RUN_LABEL)
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
    live = job
    admitted_seen: Optional[float] = None
    job_stream_open = pod_stream_open = True
    watch_error = ""  # an ERROR event of the Job's watch (410 Expired: its resourceVersion too old)
    next_poll = 0.0
    next_blocked_check = submitted + timing.blocked_check_seconds
    label = f"{namespace}/{name}"
    job_uid = job["metadata"]["uid"]

    def pod_event(event: KubeObject, wall: float) -> None:
        nonlocal deleted
        pod = event.get("object")
        pod_name = (pod.get("metadata") or {}).get("name") if isinstance(pod, dict) else None
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
            live, condition, wall, clock, sightings, blocked, last_pods, deleted, queued, admitted_seen
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
            phases = [(pod.get("status") or {}).get("phase") for pod in last_pods.values()]
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
            elif tag == "job" and event.get("type") == "MODIFIED" and isinstance(event.get("object"), dict):
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
            if tag == "job":
                if event is None:
                    job_stream_open = False
                    progress.finish()
                    lines = [line for line in watches[0].stderr.splitlines() if line.strip()]
                    reason = watch_error or (lines[-1] if lines else "no message")  # kubectl's error, or a crash's
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
        and (event.get("involvedObject") or {}).get("name") == name
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
        labels = {
            pod["metadata"]["name"]: (pod["metadata"].get("labels") or {}).get(INDEX_LABEL) for pod in [*pods, *lost]
        }
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
            write_atomic(round_dir / f"{name}.log", "")

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
        hostname = str((node["metadata"].get("labels") or {}).get(HOSTNAME_LABEL) or node_name)
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
    write_json(warm_dir / "warmup.json", block)
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

    def job_created(self, job: KubeObject, submitted: float) -> None:
        self.job_name, self.job_uid = str(job["metadata"]["name"]), str(job["metadata"]["uid"])
        self.job_created_at = creation_time(job, "the Job")
        self.submitted = submitted

    def _inspect(self, name: str) -> str:
        return f"{self.round_dir}/{name}.log and pods.json"

    def _identity(self, name: str) -> Tuple[Optional[int], Any]:
        """An episode's index and task id, as far as the watched pods tell (None: not known)."""
        index = self.positions.get(name)
        pod = self.pods.get(name)
        if self.settings.indexed and pod is not None:
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
        metadata = pod.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("labels"), dict):
            return
        name = metadata.get("name")
        if not isinstance(name, str) or not name or name in self.last or not pod_belongs_to(pod, self.job_uid):
            return
        new = name not in self.pods
        self.pods[name] = pod
        known = time.monotonic()
        if self.settings.indexed:
            judged = [self._judge(name, pod)]
        else:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
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
                settings.indexed,
                self.job_created_at,
                settings.builtin_worker,
                self._inspect(name),
                settings.max_artifact_bytes,
            )
        except EpisodeInvalid as invalid:
            return failure_line(self.round_number, index, task_id, name, invalid.rule, known_at, lost)
        if row is None:
            return None
        assert index is not None  # Indexed: its annotation is valid; else its place is settled
        row["round"], row["job"], row["index"], row["task_id"] = self.round_number, self.job_name, index, task_id
        set_attempts(row, lost)
        return reward_line(row, known_at)

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
        for line in lines:  # recorded first: a line on disk is always one the run can retract
            self.last[line["pod"]] = line
            if stands_as_reward(line):
                self.reward_known.setdefault(line["pod"], known)
        self.writer.append(lines)

    def analysed(self, rows: List[EpisodeRow], figures: RoundResult) -> None:
        """The round's analysis stands: append what the file lacks, and time its first reward."""
        known_at, known = time.time(), time.monotonic()
        self._write(reconciling_lines(self.last, rows, figures["failed_episodes"], known_at), known)
        first = min((self.reward_known[row["pod"]] for row in rows if row["pod"] in self.reward_known), default=None)
        if first is not None:  # every validated episode has its reward line by now
            figures["client_first_reward_seconds"] = first - self.submitted

    def failed(self, error: BaseException) -> None:
        """The round failed, or the run stopped, before its analysis accepted it: retract its
        reward lines (the episode the failure names with its own rule). Best effort: the error
        that got here is the one the run reports."""
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
                lines.append(failure_line(self.round_number, index, task_id, error.pod, error.rule, known_at, lost))
            elif stands_as_reward(own):
                lines.append(retraction_of(own, error.rule, known_at))
        lines += [line for line in retracting_lines(self.last, failure, known_at) if line["pod"] != named]
        with contextlib.suppress(Exception):  # a disk that failed already, or the caller's on_reward
            self._write(lines, time.monotonic())


class BatchRun:
    """One `run`: preflight, namespace and ConfigMap, then one Job per round, each waited for,
    collected, saved and analysed. Keeps just enough state to save diagnostics when interrupted."""

    def __init__(self, kubectl: Kubectl, receipt: Receipt, settings: RunSettings, progress: Progress) -> None:
        self.kubectl = kubectl
        self.receipt = receipt
        self.settings = settings
        self.progress = progress
        self.creator = OwnedCreator(kubectl, receipt.run_id)
        self.run_id = receipt.run_id
        self.namespace = receipt.namespace
        self.create_sent = False  # from the first create request on, the cluster may hold this run's objects
        self.namespace_created = False  # from the first create on, it may exist
        self.current_job: Optional[KubeObject] = None
        self.current_dir: Path = settings.output
        self.runtimeclass: Optional[KubeObject] = None  # as read by the preflight
        self.capacity: Optional[int] = None  # with --parallelism auto: the nodes' room, as the preflight read it
        self.watches_account = True  # the preflight found list and watch serviceaccounts granted
        self.receipt_lock = threading.Lock()  # warm-up Jobs run in threads, one receipt
        # what all of the run's pods may make it keep, on disk and in memory, and where their artifacts go
        self.log_budgets = LogBudgets(
            artifacts=settings.output / "artifacts", artifact_bytes=settings.max_artifact_bytes
        )
        # set on Ctrl-C (Jobs waited for in other threads stop waiting), or by the API's caller
        self.stop = settings.stop or threading.Event()
        self.rewards = RewardsWriter(settings.output / REWARDS_FILE, settings.on_reward)

    def execute(self) -> Results:
        self.preflight()
        self.stop_if_asked()
        self.create_namespace()
        image, prepared = prepare_measured_image(
            self.kubectl, self.settings, self.namespace, self.run_id, self.run_one_episode_job, self.stop
        )
        kubelets_before = self.read_kubelets_before() if self.settings.kubelet_metrics else None
        self.rewards.open()  # empty until the first measured round's first verdict
        try:
            played = [self.run_round(round_number, image) for round_number in range(1, self.settings.rounds + 1)]
        finally:
            self.rewards.close()
        rows = [row for round_rows, _ in played for row in round_rows]
        rounds = [figures for _, figures in played]
        kubelet: KubeletFigures = {}
        if kubelets_before is not None:
            expected = expected_operations(rows)
            after = (
                read_kubelet_metrics(self.kubectl, sorted(expected), self.runtime_handler) if kubelets_before else {}
            )
            kubelet["runtime_operations"] = runtime_operations(kubelets_before, after, self.runtime_handler, expected)
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
        names = [str((node.get("metadata") or {}).get("name") or "") for node in nodes]
        return read_kubelet_metrics(self.kubectl, [name for name in names if name], self.runtime_handler)

    def preflight(self) -> None:
        """The cheap part of `check`: the RuntimeClass exists and every permission is granted;
        with --parallelism auto, also the nodes and what runs on them, for the Job's parallelism."""
        runtime = self.settings.runtime
        kubelet_metrics, auto = self.settings.kubelet_metrics, self.settings.parallelism_auto
        reviews = access_review_list(
            self.namespace, runtime is not None, kubelet_metrics, self.settings.warmup, capacity=auto
        )

        def attempt(read: Callable[[], Any]) -> Read:  # a refused read is the permission finding's to name
            try:
                return Read(read())
            except KubectlFailure as failure:
                if failure.unreachable:  # every read fails alike: one line says why
                    raise
                return Read(failure=failure.first_line)

        reads: List[Callable[[], Any]] = (
            [lambda: self.kubectl.get("runtimeclass", runtime)] if runtime is not None else []
        )
        if auto:  # one listing: the RuntimeClass too, so a 10-episode run keeps its 10 processes
            kinds = "runtimeclasses,nodes,pods" if runtime is not None else "nodes,pods"
            reads = [lambda: attempt(lambda: self.kubectl.get_list(kinds, flags=EVERY_NAMESPACE))]
        answers = concurrently([*reads, lambda: self.kubectl.create(reviews, review=True)])
        runtimeclass = Read(answers[0]) if runtime is not None and not auto else None
        if runtime is not None and auto and not answers[0].failure:  # a failed listing: set_parallelism says why
            runtimeclass = Read(named_runtimeclass(answers[0].value, runtime))
        self.runtimeclass = runtimeclass.value if runtimeclass is not None else None
        findings = preflight_findings(
            context=self.kubectl.context or "",
            server=self.receipt.server,
            runtime=runtime,
            runtimeclass=runtimeclass,
            reviews=Read(answers[-1]),
            kubelet_metrics=kubelet_metrics,
            capacity=auto,
        )
        for finding in findings:
            if not finding.ok:
                raise DemoError(finding.stop, EXIT_CLUSTER)
        account_reviews = [review for review in answers[-1] if _asks(review, SERVICEACCOUNT_PERMISSIONS)]
        self.watches_account = not denied_permissions(account_reviews)
        if not self.watches_account:
            say_stderr(f"warning: {SERVICEACCOUNT_WAIT}: {serviceaccount_finding(account_reviews).detail}")
        if auto:
            self.set_parallelism(answers[0])

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
            room, text = episode_room(self.runtimeclass, nodes, pods)
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
            configmap_manifest(self.namespace, self.run_id, self.settings.worker_source, self.settings.tasks),
        ]
        sink: queue.Queue[Any] = queue.Queue()
        seconds = self.kubectl.process_timeout + self.kubectl.timing.serviceaccount_wait_seconds
        by_name = ["serviceaccounts", "--field-selector", f"metadata.name={DEFAULT_SERVICEACCOUNT}"]
        watch = (
            self.kubectl.watch("serviceaccount", by_name, self.namespace, sink, seconds)
            if self.watches_account
            else None
        )
        try:
            try:
                namespace, _ = self.creator.create_together(manifests, ["namespace", "configmap"])
            except DemoError as error:
                settled = self.creator.settled.get(("Namespace", self.namespace))
                if settled is None:
                    self.namespace_created = isinstance(error, KubectlTimeout) or (
                        isinstance(error, KubectlFailure) and error.transient
                    )
                else:
                    self.record_namespace(settled)
                raise
            self.record_namespace(namespace)
            if watch is not None:
                self.wait_for_service_account(sink, watch)
        finally:
            if watch is not None:
                watch.end()  # the Job's create waits for it no longer

    def wait_for_service_account(self, sink: queue.Queue[Any], watch: WatchStream) -> None:
        """Until the namespace's `default` ServiceAccount exists, a pod of it is refused:
        ServiceAccount admission looks it up for about 1.5 s, then the job controller records
        FailedCreate and backs off (plugin/pkg/admission/serviceaccount/admission.go; the
        serviceaccounts controller creates it soon after the namespace), which would count in
        the first Job's figures. So the first Job is created once it is seen, by the watch started
        with the namespace's create (no process more, no wait when it came meanwhile); after
        Timing.serviceaccount_wait_seconds the run goes on without it, and says so."""
        limit = time.monotonic() + self.kubectl.timing.serviceaccount_wait_seconds
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
            named = isinstance(obj, dict) and (obj.get("metadata") or {}).get("name") == DEFAULT_SERVICEACCOUNT
            if event.get("type") in ("ADDED", "MODIFIED") and named:
                return
        say_stderr(
            f"warning: the namespace's {DEFAULT_SERVICEACCOUNT} ServiceAccount is not there yet ({reason}); the Job "
            "is created anyway, and its pods wait for the account (ServiceAccount admission)"
        )

    def record_namespace(self, namespace: KubeObject) -> None:
        self.receipt.namespace_uid = namespace["metadata"]["uid"]
        write_receipt(self.settings.output, self.receipt)
        say_stderr(f"Test namespace: {self.namespace}")

    def run_round(self, round_number: int, image: str) -> Tuple[List[EpisodeRow], RoundResult]:
        """One measured round: its Job runs `image`; an interruption saves its diagnostics."""
        name = job_name_for(round_number, self.settings.rounds)
        round_dir = self.settings.round_dir(round_number)
        self.current_dir, self.current_job = round_dir, None
        manifest = round_job_manifest(self.settings, name, self.namespace, self.run_id, image, self.parallelism)
        rewards = RoundRewards(self.rewards, self.settings, round_number, round_dir)
        try:
            rows, figures = self.run_job(
                round_number, name, round_dir, manifest, self.settings.count, self.progress, rewards
            )
        except BaseException as error:
            rewards.failed(error)
            raise
        rewards.analysed(rows, figures)
        return rows, figures

    def run_one_episode_job(
        self, name: str, job_dir: Path, manifest: KubeObject, interrupt_dir: Path
    ) -> Tuple[List[EpisodeRow], RoundResult]:
        """A warm-up or probe Job (see OneEpisodeJob), without a progress line."""
        self.current_dir, self.current_job = interrupt_dir, None
        return self.run_job(0, name, job_dir, manifest, 1, Progress(enabled=False))

    def stop_if_asked(self) -> None:
        """Before the next create: a stop asked for from another thread (the API's) is a Ctrl-C."""
        if self.stop.is_set():
            raise KeyboardInterrupt

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
        budgets = self.log_budgets if round_number else self.log_budgets.saving_artifacts_in(round_dir / "artifacts")
        self.stop_if_asked()
        write_json(round_dir / "job-submitted.json", manifest)
        entry = JobReceipt(name)
        with self.receipt_lock:
            self.receipt.jobs.append(entry)
            write_receipt(settings.output, self.receipt)
        submitted_wall, submitted = time.time(), time.monotonic()
        try:
            job = self.creator.create(manifest, "job")
        except KubectlFailure as failure:
            refusal = strict_refusal(failure.stderr, f"{self.namespace}/{name}", settings.infra_retries > 0)
            if refusal is None:
                raise
            raise DemoError(refusal, EXIT_CLUSTER) from None
        if round_number:  # a measured round: what an interruption saves
            self.current_job = job
        with self.receipt_lock:
            entry.uid = job["metadata"]["uid"]
            write_receipt(settings.output, self.receipt)
        self.refuse_dropped_fields(manifest, job)
        deadline = submitted + settings.client_wait_seconds
        pod_spec = manifest["spec"]["template"]["spec"]
        try:
            self.refuse_changed_job(pod_spec, job)
            if rewards is not None:
                rewards.job_created(job, submitted)
            observation = wait_for_job(
                self.kubectl,
                self.namespace,
                job,
                deadline,
                submitted,
                progress,
                self.stop,
                on_pod=rewards.pod_seen if rewards is not None else None,
                pod_spec=pod_spec,
                run_seconds=settings.client_wait_seconds,
            )
        except JobRefused as refused:
            raise DemoError(f"{refused.what}; {self.delete_refused_job(name)}", refused.exit_code) from None
        write_json(round_dir / "job.json", observation.job)
        outcome = classify_round(observation)
        all_logs = count <= LOG_CROSSCHECK_LIMIT or outcome != ROUND_COMPLETE
        selector = pod_selector(job)
        watched = final_pods_from_watch(observation, job["metadata"]["uid"])
        # The diagnostics first: pods.json and events.txt are on disk before any log is written,
        # so a disk that the logs fill still leaves them.
        saved = threading.Event()

        def save_events(listing: List[KubeObject]) -> List[KubeObject]:
            try:
                events = split_pods_and_events(listing, job)[1]
                write_atomic(round_dir / "events.txt", render_events_text(events))
                return events
            finally:
                saved.set()  # the logs wait for it, whatever happened here

        def read(pods: List[KubeObject]) -> Tuple[Dict[str, Optional[PodLog]], Dict[str, str]]:
            lost = [pod for pod in pods if settings.infra_retries and infra_loss(pod)]
            if lost:  # a pod lost to the infrastructure is judged by its status alone
                pods = [pod for pod in pods if not infra_loss(pod)]
            return read_logs(self.kubectl, self.namespace, pods, selector, all_logs, round_dir, budgets, saved, lost)

        if watched is not None:  # the events listing and the logs at once, the logs written after the events
            pods = watched
            write_json(round_dir / "pods.json", pod_list(pods))
            events, (logs, log_errors) = concurrently(
                [lambda: save_events(self.kubectl.get_list("events", namespace=self.namespace)), lambda: read(pods)]
            )
        else:  # one listing of both, then the logs of the pods it names
            listing = self.kubectl.get_list("pods,events", namespace=self.namespace)
            pods = split_pods_and_events(listing, job)[0]
            write_json(round_dir / "pods.json", pod_list(pods))
            events = save_events(listing)
            logs, log_errors = read(pods)
        if settings.infra_retries:  # a lost pod the cluster deleted (preempted, evicted by the API) is an attempt too
            vanished = vanished_attempts(observation, pods, job["metadata"]["uid"])
            if vanished:
                pods = sorted([*pods, *vanished], key=_attempt_order)
                write_json(round_dir / "pods.json", pod_list(pods))
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
            indexed=settings.indexed,
            task_ids=[task_id_of(task, i) for i, task in enumerate(settings.tasks)] if settings.tasks else None,
            builtin_worker=settings.builtin_worker,
            max_failed_episodes=settings.max_failed_episodes,
            events=events,
            infra_retries=settings.infra_retries,
            max_artifact_bytes=settings.max_artifact_bytes,
        )
        try:
            rows, figures = analyse_round(collected, where)
        except EpisodeInvalid:  # the round fails: every pod's log beside its error, as the guide keeps them
            self.save_missing_logs(pods, logs, round_dir, selector)
            raise
        set_aside = {entry["pod"] for entry in figures["failed_episodes"]}
        self.save_missing_logs([pod for pod in pods if pod["metadata"]["name"] in set_aside], logs, round_dir)
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
            and (job.get("spec") or {}).get(key) != manifest["spec"][key]
            # a run whose episodes need no index reads its logs one pod at a time without it
            and (key != "completionMode" or self.settings.indexed)
        ]
        if not dropped:
            return
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
        changes = template_changes(pod_spec, ((job.get("spec") or {}).get("template") or {}).get("spec") or {})
        if changes:
            raise JobRefused(f"the cluster changed what Job {where} runs (a mutating webhook): {'; '.join(changes)}")

    def delete_refused_job(self, name: str, before: str = "before its episodes could be measured") -> str:
        """Delete a Job the run created and will not wait for (it is the run's own: its UID is in the
        receipt); what happened, for the message."""
        try:
            self.kubectl.run(["delete", "job", name, "--cascade=foreground", "--wait=false"], namespace=self.namespace)
            return f"it was deleted at once, {before}"
        except DemoError as error:
            return f"deleting the Job failed ({error}); run cleanup now"

    def save_after_interrupt(self) -> None:
        """Save what can be read within a few seconds: the Job, pods, events and logs."""
        if not self.namespace_created:
            return
        kubectl, namespace, job, round_dir = self.kubectl, self.namespace, self.current_job, self.current_dir
        quick = kubectl.timing.interrupt_save_timeout
        try:
            items = kubectl.get_list("pods,events", namespace=namespace, retries=(), timeout=quick)
            pods, events = split_pods_and_events(items, job)
            write_atomic(round_dir / "events.txt", render_events_text(events))
            if job is None:
                return
            live = kubectl.get("job", job["metadata"]["name"], namespace, retries=(), timeout=quick)
            if live is not None:
                write_json(round_dir / "job.json", live)
            write_json(round_dir / "pods.json", pod_list(pods))
            names = [pod["metadata"]["name"] for pod in pods]
            logs_by_selector(kubectl, namespace, pod_selector(job), names, round_dir, quick, self.log_budgets)
        except DemoError as error:
            say_stderr(f"warning: could not save every diagnostic after the interruption: {error}")


# Flow: cleanup ################################################################
# Delete exactly what a run created, after the ownership proof. Uses everything above but the
# run's flow.


def _wait_until_absent(
    kubectl: Kubectl, kind: str, name: str, namespace: Optional[str], seconds: float
) -> Optional[KubeObject]:
    """None once the object is gone, else its last state when the wait ran out.

    Polls at 0.25 s, doubling up to 2 s: most deletions finish within a second, and a long
    one costs no more than one kubectl call every 2 s."""
    deadline = time.monotonic() + seconds
    interval = kubectl.timing.cleanup_first_poll
    while True:
        live = kubectl.get(kind, name, namespace)
        if live is None:
            return None
        if time.monotonic() >= deadline:
            return live
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 2, kubectl.timing.cleanup_max_poll)


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


def cleanup_run(
    kubectl: Kubectl,
    receipt: Receipt,
    output: Path,
    say: Callable[[str], None],
    wait_seconds: float = CLEANUP_WAIT_SECONDS,
) -> None:
    """Delete exactly what the run created, after proving it is the run's; never touch finalizers."""
    namespace = receipt.namespace
    names_problem = receipt_names_problem(receipt)
    if names_problem:
        raise DemoError(
            f"refusing to clean up: {names_problem}; nothing was deleted; inspect receipt.json", EXIT_REFUSED
        )
    current_server = kubectl.cluster_identity()[1] if receipt.server else None
    live_namespace = kubectl.get("namespace", namespace)
    if live_namespace is not None:
        required_uid(live_namespace, f"namespace {namespace}")
    jobs = receipt_jobs(receipt, _uid_from_job_json(output))
    live_jobs = {job.name: kubectl.get("job", job.name, namespace) for job in jobs} if live_namespace else {}
    plan = plan_cleanup(receipt, jobs, kubectl.context, current_server, live_namespace, live_jobs)
    if plan.refusal:
        raise DemoError(plan.refusal, EXIT_REFUSED)
    if plan.namespace_absent:
        say(f"namespace {namespace} is already absent; nothing to delete")
        return
    if plan.adopted_namespace_uid:
        say(f"the receipt has no namespace UID; namespace {namespace} carries this run's labels, so it is this run's")
        receipt.namespace_uid = plan.adopted_namespace_uid
        write_receipt(output, receipt)
    pods = {name: job_pod_count(live_jobs.get(name)) for name in plan.jobs}
    for name in plan.jobs:
        kubectl.run(["delete", "job", name, "--cascade=foreground", "--wait=false"], namespace=namespace)
        job_wait = cleanup_wait_seconds(wait_seconds, pods[name])
        remaining = _wait_until_absent(kubectl, "job", name, namespace, job_wait)
        if remaining is not None:
            raise DemoError(
                f"Job {namespace}/{name} and its pods are still terminating after "
                f"{job_wait:g} s; inspect `kubectl -n {namespace} get job,pods` and run cleanup again",
                EXIT_TIMEOUT,
            )
        say(f"deleted Job {namespace}/{name} and its pods")
    kubectl.run(["delete", "namespace", namespace, "--wait=false"])
    namespace_wait = cleanup_wait_seconds(wait_seconds, sum(pods.values()))
    remaining = _wait_until_absent(kubectl, "namespace", namespace, None, namespace_wait)
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
    return [output / name for name in REPRODUCE_GROUPS if (output / name / "receipt.json").is_file()]


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


def reproduce_group_settings(base: RunSettings, group: str, pinned: Optional[str]) -> RunSettings:
    """One group's `run` of the experiment, in DIR/<group>: the first resolves the image digest,
    the others run that digest, one at a time, or after a warm-up in K rounds."""
    output = base.output / group
    if group == "parallel":
        return dataclasses.replace(base, output=output, rounds=1, pin_image="")
    if group == "sequential":
        return dataclasses.replace(base, output=output, rounds=1, parallelism=1, pin_image=pinned)
    return dataclasses.replace(base, output=output, warmup=True, pin_image=pinned)


def reproduce_group_argv(args: argparse.Namespace, context: str, group: str, pinned: Optional[str]) -> List[str]:
    """The `run` command line equivalent to one group's settings, as report.json records it."""
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


def reproduce_metrics(output: Path, report: ReproduceReport, base: RunSettings, finished_at: float) -> str:
    """The experiment as one --metrics-file: each group's samples as `run --metrics-file` writes
    them, labelled with its group (a group still running when the experiment stopped: exit 130)."""
    runs: List[MetricRun] = []
    for entry in report["groups"]:
        labels = metrics_labels(reproduce_group_settings(base, entry["name"], report["image_pinned"]))
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


# Commands #####################################################################
# One function per command, given typed settings and a kubectl; each returns an exit code or
# raises DemoError. Uses everything above.


def dry_run(settings: RunSettings, namespace: str, run_id: str, print_summary: bool = True) -> int:
    """Write the manifests a run would submit, numbered in the order they are created."""
    claim_output(settings.output)
    manifests = [
        ("00-namespace.json", namespace_manifest(namespace, run_id)),
        ("01-configmap.json", configmap_manifest(namespace, run_id, settings.worker_source, settings.tasks)),
    ]
    for round_number in range(1, settings.rounds + 1):
        name = job_name_for(round_number, settings.rounds)
        manifest = round_job_manifest(settings, name, namespace, run_id, settings.given_image)
        manifests.append((f"{1 + round_number:02d}-job-{name}.json", manifest))
    for file_name, manifest in manifests:
        write_json(settings.output / file_name, manifest)
    if print_summary:
        print(f"dry run: wrote {len(manifests)} manifests to {settings.output}; no cluster was contacted")
    return EXIT_OK


def cmd_run(settings: RunSettings, unbound: Kubectl, tool: str, print_summary: bool = True) -> int:
    """One batch: the receipt, then BatchRun, then the results, the cleanup it was asked for, and
    the command that cleans up what is kept (`tool`: how the user started this tool). `reproduce`
    runs it without the summary when it prints only its own (--quiet, --json), the Python API
    always (it prints nothing on stdout)."""
    output = settings.output
    refuse_existing_output(output)
    run_id = new_run_id()
    namespace = NAMESPACE_PREFIX + run_id
    if settings.dry_run:
        return dry_run(settings, namespace, run_id, print_summary)
    context, server = unbound.cluster_identity()
    kubectl = unbound.with_context(context, server)
    claim_output(output)
    receipt = Receipt(
        context=context,
        server=server,
        namespace=namespace,
        run_id=run_id,
        kubeconfig=kubectl.kubeconfig,
        kubectl=kubectl.executable,
        created_at=time.time(),
        tool_version=tool_version(),
    )
    write_receipt(output, receipt)
    progress = Progress(enabled=not settings.quiet, log_interval=kubectl.timing.progress_log_interval)
    batch = BatchRun(kubectl, receipt, settings, progress)
    error: Optional[DemoError] = None
    reraise: Optional[BaseException] = None  # raised as it is once the cleanup policy has run
    bug = False
    try:
        results = batch.execute()
        error = publish(results, settings, print_summary)
    except DemoError as failure:
        error = failure
    except OSError as failed_write:  # the output directory, not the cluster: a full disk, lost permissions
        error = DemoError(
            f"cannot write the run's output ({failed_write.strerror or failed_write}: {failed_write.filename}); "
            f"check the free space and permissions of {output}",
            EXIT_USAGE,
        )
    except Exception as unexpected:  # a bug: record it and clean up as asked, then let it show
        reraise, bug = unexpected, True
        error = DemoError(bug_message(unexpected), EXIT_CLUSTER)
    except BaseException as interruption:  # Ctrl-C, SIGTERM; through the API, what the caller's handler raised
        reraise = None if isinstance(interruption, KeyboardInterrupt) else interruption
        kubectl.stop_children()  # calls still running in other threads, or streams
        progress.finish()
        if batch.create_sent:
            say_stderr("interrupted: saving diagnostics (press Ctrl-C again to skip)")
        try:
            batch.save_after_interrupt()
        except KeyboardInterrupt:
            say_stderr("skipped saving diagnostics")
        where = f"diagnostics are in {output}" if batch.create_sent else "nothing was created in the cluster"
        error = DemoError(f"interrupted; {where}", EXIT_INTERRUPTED)
    finally:
        kubectl.wait_for_ended_watches()
        save_if_possible(output / "kubectl-calls.json", kubectl.calls)
    if error is not None:
        save_if_possible(
            output / "error.json", {"message": str(error), "exit_code": error.exit_code, "at": time.time()}
        )
        append_step_summary(f"### rl-batch-demo: failed (exit {error.exit_code})\n\n{markdown_literal(str(error))}")
    if error is not None and not bug and not batch.create_sent:
        release_output(output)  # nothing to clean up or inspect in the cluster: the same --output works again
        raise reraise or error
    cleaned = False
    validated = error is None or error.exit_code == EXIT_THRESHOLD
    if settings.cleanup_policy == "always" or (settings.cleanup_policy == "on-success" and validated):
        try:
            cleanup_run(kubectl, receipt, output, say_stderr)
            cleaned = True
        except DemoError as cleanup_error:
            if error is None:
                error = cleanup_error
            else:
                say_stderr(f"cleanup failed as well: {cleanup_error}")
        except KeyboardInterrupt:
            error = error or DemoError("interrupted during cleanup", EXIT_INTERRUPTED)
    if not cleaned and batch.namespace_created:
        say_stderr(f"namespace {namespace} is kept; delete it with: {cleanup_command(tool, output)}")
    if reraise is not None:
        raise reraise
    if error is not None:
        raise error
    return EXIT_OK


def publish(results: Results, settings: RunSettings, print_summary: bool = True) -> Optional[DemoError]:
    """Write results.json and timeline.svg, print the summary (unless the caller prints its own),
    and judge the thresholds."""
    output = settings.output
    write_json(output / "results.json", results)
    write_atomic(output / "timeline.svg", render_timeline_svg(results))
    breaches = check_thresholds(results, settings.thresholds)
    summary = (
        json.dumps(headline(results), indent=2, sort_keys=True, allow_nan=False) + "\n"
        if settings.json_summary
        else render_summary(results, summary_files(settings), breaches)
    )
    try:
        if print_summary:
            sys.stdout.write(printable(summary, keep_newlines=True))
            sys.stdout.flush()
    except BrokenPipeError:  # a closed reader must not stop the thresholds or the cleanup
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    append_step_summary(markdown_summary(results))
    if breaches:
        return DemoError(
            f"latency budget breached: {'; '.join(breaches)}; results are in {output / 'results.json'}",
            EXIT_THRESHOLD,
        )
    return None


def summary_files(settings: RunSettings) -> List[Tuple[str, str]]:
    """The summary's last lines but one: where the run's files are, and the reports it was asked for."""
    output = settings.output
    files = [
        ("results", f"{output / 'results.json'} (every figure; {output / REWARDS_FILE}: one reward per episode)"),
        ("timeline", str(output / "timeline.svg")),
    ]
    reports = [f"JUnit {settings.junit}"] if settings.junit else []
    reports += [f"metrics {settings.metrics_file}"] if settings.metrics_file else []
    if reports:
        files.append(("reports", ", ".join(reports) + " (written when the run ends)"))
    return files


def cmd_reproduce(args: argparse.Namespace, base: RunSettings, tool: str) -> int:
    """The guide's experiment: 10 in parallel, the same one at a time, then a warm-up episode on
    each node and K rounds in parallel; one image digest throughout; each group cleaned up once
    its diagnostics are saved; the guide's table and a verdict at the end (with --quiet or
    --json, nothing else on stdout). `base` holds what every group's run shares (see
    reproduce_group_settings); a breached --threshold lets the experiment go on."""
    output = base.output
    refuse_existing_output(output)
    context, _ = make_kubectl(args).cluster_identity()  # read once: every group runs in this context
    claim_output(output)
    report: ReproduceReport = {
        "context": context,
        "image": args.image,
        "image_pinned": None,
        "count": args.count,
        "rounds": args.rounds,
        "groups": [],
        "complete": False,
        "tool_version": tool_version(),
    }
    alone = args.quiet or args.json  # stdout: only the table and the verdict, or only the JSON
    failure: Optional[DemoError] = None
    try:
        for number, group in enumerate(REPRODUCE_GROUPS, 1):
            argv = reproduce_group_argv(args, context, group, report["image_pinned"])
            if not alone:
                say_stderr(f"reproduce: group {number}/{len(REPRODUCE_GROUPS)} ({group}): {shlex.join(argv)}")
            entry: ReproduceGroup = {"name": group, "directory": group, "argv": argv, "exit_code": None}
            report["groups"].append(entry)
            write_json(output / "report.json", report)
            settings = reproduce_group_settings(base, group, report["image_pinned"])
            try:
                entry["exit_code"] = cmd_run(settings, make_kubectl(args).with_context(context), tool, not alone)
            except DemoError as error:
                entry["exit_code"], entry["error"] = error.exit_code, str(error)
                failure = None if error.exit_code == EXIT_THRESHOLD else error  # over budget, yet valid
            receipt = _read_json_file(output / group / "receipt.json")
            entry["namespace"] = receipt.get("namespace") if isinstance(receipt, dict) else None
            if failure is not None:
                break
            if report["image_pinned"] is None:
                results = saved_results(output / group)
                report["image_pinned"] = results["image_pinned"] if results else None
                if not report["image_pinned"]:
                    failure = DemoError(
                        f"group {group} did not resolve an image digest; inspect {output / group}", EXIT_CLUSTER
                    )
                    break
        report["complete"] = failure is None
    except KeyboardInterrupt:
        write_reproduce_reports(args, base, report, DemoError("interrupted", EXIT_INTERRUPTED))
        raise
    finally:
        text = write_reproduce_report(output, report, args.lang, args.reference == "guide")
    problems = write_reproduce_reports(args, base, report, failure)
    verdict = reproduce_verdict(output, report)
    if args.json:
        sys.stdout.write(json.dumps({**report, "verdict": verdict}, indent=2, sort_keys=True, allow_nan=False) + "\n")
    else:
        if text is not None:
            sys.stdout.write(("" if alone else "\n") + printable(text, keep_newlines=True) + "\n")
        sys.stdout.write(printable(verdict) + "\n")
    sys.stdout.flush()
    if failure is not None:
        kept = "" if base.cleanup_policy == "always" else f"; clean up with: {cleanup_command(tool, output)}"
        raise DemoError(
            f"reproduce stopped at group {report['groups'][-1]['name']}: {failure}{kept}", failure.exit_code
        )
    if problems:
        raise DemoError(f"the experiment finished but {'; '.join(problems)}", EXIT_USAGE)
    breached = [entry for entry in report["groups"] if entry["exit_code"] == EXIT_THRESHOLD]
    if breached:
        named = "; ".join(f"{entry['name']}: {entry['error']}" for entry in breached)
        raise DemoError(f"latency budget breached in {named}", EXIT_THRESHOLD)
    return EXIT_OK


def write_reports(reports: Sequence[Tuple[str, Optional[str], Callable[[], str]]]) -> List[str]:
    """Write each report (what it is, its path or None when not asked for, its text) atomically,
    whatever the outcome of the run: a report that cannot be written is a warning, and the list
    of them is returned for the caller to judge."""
    problems = []
    for what, path, render in reports:
        if path:
            try:
                write_atomic(Path(path), render())
            except OSError as oops:
                problems.append(f"the {what} {path} could not be written ({oops.strerror or oops})")
    for problem in problems:
        say_stderr(f"warning: {problem}")
    return problems


def write_reproduce_reports(
    args: argparse.Namespace, base: RunSettings, report: ReproduceReport, failure: Optional[DemoError]
) -> List[str]:
    """The experiment's --junit and --metrics-file; returns what could not be written."""
    output = base.output
    return write_reports(
        [
            ("JUnit report", args.junit, lambda: reproduce_junit(output, report, failure, base.thresholds)),
            ("metrics file", args.metrics_file, lambda: reproduce_metrics(output, report, base, time.time())),
        ]
    )


def cmd_run_reported(settings: RunSettings, unbound: Kubectl, tool: str, print_summary: bool = True) -> int:
    """`run`, then its --junit and --metrics-file reports, written whatever the outcome:
    CI needs them most when the run failed. Reports never change the run's exit code,
    except that a report that cannot be written fails an otherwise successful run."""
    if settings.dry_run or not (settings.junit or settings.metrics_file):
        return cmd_run(settings, unbound, tool, print_summary)
    output = settings.output
    fresh = not (output.exists() or output.is_symlink())  # only then is what DIR holds this run's
    code = EXIT_OK
    stopped: Optional[BaseException] = None
    error: Optional[DemoError] = None
    try:
        code = cmd_run(settings, unbound, tool, print_summary)
    except DemoError as failure:
        stopped = error = failure
    except Exception as bug:  # a bug: the reports still say the run failed, then it shows
        stopped, error = bug, DemoError(bug_message(bug), EXIT_CLUSTER)
    except BaseException as interrupt:  # Ctrl-C, SIGTERM, or what the API's caller's own handler raised
        stopped, error = interrupt, DemoError("interrupted", EXIT_INTERRUPTED)
    problems = write_ci_reports(settings, output if fresh else None, error)
    if stopped is not None:
        raise stopped
    if problems:
        raise DemoError(f"the run succeeded but {'; '.join(problems)}", EXIT_USAGE)
    return code


def write_ci_reports(settings: RunSettings, output: Optional[Path], error: Optional[DemoError]) -> List[str]:
    """Write --junit and --metrics-file from what the run left in DIR (None: DIR was not this
    run's, so nothing in it is read). Returns what could not be written."""
    results = saved_results(output)
    exit_code = error.exit_code if error is not None else EXIT_OK

    def junit() -> str:
        started = rounds_on_disk(output, settings.rounds) if output is not None and results is None else []
        failure = None
        if error is not None:
            failure = (error.exit_code, str(error), error.pod if isinstance(error, EpisodeInvalid) else None)
        receipt = _read_json_file(output / "receipt.json") if output is not None else None
        properties = {"exit_code": str(exit_code)}
        if isinstance(receipt, dict):
            properties.update(namespace=str(receipt.get("namespace")), context=str(receipt.get("context")))
        return render_junit_xml(junit_suites(results, started, settings.thresholds, failure), properties)

    return write_reports(
        [
            ("JUnit report", settings.junit, junit),
            (
                "metrics file",
                settings.metrics_file,
                lambda: render_metrics(results, metrics_labels(settings), exit_code, time.time()),
            ),
        ]
    )


def cmd_show_worker(source: str) -> int:
    sys.stdout.write(source)
    sys.stdout.flush()
    return EXIT_OK


def cmd_cleanup(args: argparse.Namespace) -> int:
    output = Path(args.output)
    groups = reproduce_group_dirs(output)
    if not (output / "receipt.json").exists() and (groups or (output / "report.json").is_file()):
        return cleanup_reproduce(args, groups)  # the output of `reproduce`
    receipt = read_receipt(output)
    cleanup_run(make_kubectl(args, receipt), receipt, output, print, wait_seconds=args.timeout)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    """Can this cluster run the batch? Reads only; creates nothing but access reviews.

    A read that is forbidden or fails becomes one of the verdict's problems, so the verdict
    always lists everything that fails."""
    unbound = make_kubectl(args)
    context, server = unbound.cluster_identity()
    kubectl = unbound.with_context(context, server)
    runtime = None if args.runtime == NO_RUNTIME else args.runtime
    kubelet_metrics = args.kubelet_metrics

    def attempt(read: Callable[[], Any]) -> Read:
        try:
            return Read(read())
        except KubectlFailure as failure:
            if failure.unreachable:  # every read fails alike: one line says why
                raise
            return Read(failure=failure.first_line)

    reviews = access_review_list(NAMESPACE_PREFIX + "preflight", runtime is not None, kubelet_metrics, True)
    version, runtimeclass, nodes, pods, granted = concurrently(
        [
            lambda: attempt(
                lambda: kubectl.decode_json(kubectl.run(["version", "-o", "json"], read_only=True), "version")
            ),
            lambda: attempt(lambda: kubectl.get("runtimeclass", runtime)) if runtime is not None else None,
            lambda: attempt(lambda: kubectl.get_list("nodes")),
            lambda: attempt(lambda: kubectl.get_list("pods", flags=NON_TERMINATED_PODS)),  # what runs there
            lambda: attempt(lambda: kubectl.create(reviews, review=True)),
        ]
    )
    findings = preflight_findings(
        context=context,
        server=server,
        runtime=runtime,
        version=version,
        runtimeclass=runtimeclass,
        image=args.image,
        nodes=nodes,
        pods=pods,
        reviews=granted,
        count=args.count,
        kubelet_metrics=kubelet_metrics,
    )
    problems = [finding.problem for finding in findings if not finding.ok]
    verdict = f"NOT ready: {'; '.join(problems)}" if problems else f"ready to run {args.count} episodes"
    code = EXIT_CLUSTER if problems else EXIT_OK
    if args.json:
        report = {
            "context": context,
            "server": server,
            "count": args.count,
            "findings": [
                {"name": finding.name, "ok": finding.ok, "detail": finding.detail, "problem": finding.problem}
                for finding in findings
            ],
            "ready": not problems,
            "problems": problems,
            "verdict": verdict,
            "exit_code": code,
        }
        print(json.dumps(report, indent=2, sort_keys=True, allow_nan=False))
        return code
    for finding in findings:
        print(printable(f"{finding.name}: {finding.detail}"))
    print(printable(f"verdict: {verdict}"))
    return code


def cmd_compare(args: argparse.Namespace) -> int:
    runs = [(str(directory), load_results(Path(directory))) for directory in args.directories]
    counts = {results.get("episodes_per_round", results["episodes"]) for _, results in runs}
    if len(counts) > 1 and not args.allow_different_counts:
        raise DemoError(
            f"these runs have different episode counts ({', '.join(str(c) for c in sorted(counts))}); compare "
            "equal counts, as the guide advises, or pass --allow-different-counts",
            EXIT_USAGE,
        )
    if args.format == "guide":
        table = guide_table(runs, args.lang, args.reference == "guide")
        print(render_guide_table(table, "text"), end="")
        return EXIT_OK
    rows = comparison(runs)
    names = [name for name, _ in runs]
    if args.format == "json":
        print(json.dumps({"runs": names, "figures": rows}, indent=2, sort_keys=True, allow_nan=False))
    else:
        print(render_comparison(names, rows, args.format), end="")
    return EXIT_OK


# Command line #################################################################
# Flags to typed settings, checked before any work, and main(). Uses anything, the payload below
# included: it hands the worker's text to the commands.


def whole_number(minimum: int, limit: Optional[int] = None, unit: str = " seconds") -> Callable[[str], int]:
    """An argparse type: a whole number of at least `minimum` (0 or 1), and with `limit`, a number
    (of seconds, or of `unit`) no larger than that (a longer wait is a typo)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"{text!r} must be at least 1" if minimum else f"{text!r} must be 0 or more"
            )
        if limit is not None and value > limit:
            raise argparse.ArgumentTypeError(f"{text!r} is more than {limit}{unit}")
        return value

    return parse


def artifact_budget(text: str) -> int:
    """An argparse type: --max-artifact-bytes, a whole number of bytes or a quantity (512Ki, 2Mi),
    at most MAX_ARTIFACT_BYTES_LIMIT: more base64 in a log would near the kubelet's rotation."""
    try:
        value = parse_quantity(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes (such as 1048576 or 1Mi)") from None
    if not (value >= 0 and value == int(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes")
    if value > MAX_ARTIFACT_BYTES_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{text!r} is more than {MAX_ARTIFACT_BYTES_LIMIT:,} bytes (4Mi): their frames in the log would near the "
            "kubelet's 10 MiB log rotation, past which `kubectl logs` returns only the current file"
        )
    return int(value)


def threshold(text: str) -> Tuple[str, float]:
    metric, separator, limit = text.partition("=")
    if not separator:
        raise argparse.ArgumentTypeError(f"{text!r} is not METRIC=SECONDS")
    if metric not in THRESHOLD_METRICS:
        raise argparse.ArgumentTypeError(f"unknown metric {metric!r}; choose from {', '.join(THRESHOLD_METRICS)}")
    try:
        seconds = float(limit)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{limit!r} in {text!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the limit must be positive")
    return metric, seconds


class VersionAction(argparse.Action):
    """--version with the hash of this file, computed only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"{parser.prog} {__version__} (file sha256 {file_fingerprint()})")
        parser.exit()


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """The suggestion for a mistyped word, `; did you mean X?`, or "" when no choice is close: a
    choice the word abbreviates first (--out: --output), else the closest one by difflib."""
    import difflib  # noqa: PLC0415 - only a usage error needs it; keeps --help fast

    every = list(choices)
    abbreviated = [choice for choice in every if choice.startswith(word)]
    close = difflib.get_close_matches(word, abbreviated or every, n=1, cutoff=0.0 if abbreviated else 0.6)
    return f"; did you mean {close[0]}?" if close else ""


class CommandLineParser(argparse.ArgumentParser):
    """argparse as this tool words a usage error: one line naming the problem (with a suggestion
    for a mistyped flag or command) and the --help to read, exit 2; never the usage block. No flag
    is taken for an abbreviation of a longer one (allow_abbrev=False), so a typo never picks one."""

    def __init__(self, **options: Any) -> None:
        super().__init__(allow_abbrev=False, **options)
        self.commands: Dict[str, argparse.ArgumentParser] = {}  # the subcommands, on the top parser
        self.help_command = self.prog  # the --help to name: the command as the user started the tool

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"rl-batch-demo: error: {printable(message)} (see {self.help_command} --help)\n")

    def parse_command_line(self, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
        """parse_args, after the words are checked: a mistyped command or flag is named, with a
        suggestion, before argparse would report something else (a required --output) instead."""
        words = list(sys.argv[1:] if argv is None else argv)
        at = next((index for index, word in enumerate(words) if not word.startswith("-")), len(words))
        self.check_flags(words[:at])
        if self.commands and at < len(words):
            command = words[at]
            if command not in self.commands:
                self.error(f"unknown command {command}{did_you_mean(command, self.commands)}")
            parser = self.commands[command]
            if isinstance(parser, CommandLineParser):
                parser.check_flags(words[at + 1 :])
        args, extras = self.parse_known_args(words)
        if extras:
            getattr(args, "subparser", self).error(f"unexpected argument {extras[0]}")
        return args

    def check_flags(self, words: Sequence[str]) -> None:
        """Every flag among `words` must be one of this parser's (`-vh` stands for -v -h; `-1` is a
        number; a value after `=` is not looked at), up to a `--`."""
        known = [option for action in self._actions for option in action.option_strings]
        for word in words:
            if word == "--":
                return
            flag = word.split("=", 1)[0]
            if not flag.startswith("-") or flag == "-" or re.match(r"^-\d", flag) or flag in known:
                continue
            if not flag.startswith("--") and all(f"-{letter}" in known for letter in flag[1:]):
                continue
            self.error(f"unknown flag {flag}{did_you_mean(flag, known)}")


def parallelism_arg(text: str) -> Any:
    """--parallelism's value: a whole number of at least 1, or "auto" (the preflight decides)."""
    if text == "auto":
        return text
    try:
        return whole_number(1)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number of at least 1 nor auto") from None


def pinned_image_arg(text: str) -> str:
    """--pin-image's value: empty (argparse's const: resolve the digest) or an image by digest."""
    if text and (not re.search(_DIGEST, text) or text.startswith("@")):
        raise argparse.ArgumentTypeError(f"{text!r} is not an image by digest (REPO@sha256:64 hex digits)")
    return text


def _shared_options() -> Dict[str, Dict[str, Any]]:
    """The flags several commands take, each defined once (read when the parser is built, so the
    defaults are today's); a command may change a flag's default or help (see _add_options)."""
    return {
        "--output": {"required": True, "metavar": "DIR"},
        "--count": {"type": whole_number(1), "default": DEFAULT_COUNT, "metavar": "N"},
        "--rounds": {"type": whole_number(1), "metavar": "K"},
        "--image": {
            "default": DEFAULT_IMAGE,
            "help": f"container image with python, runnable as UID/GID 1000 (default {DEFAULT_IMAGE})",
        },
        "--runtime": {
            "default": DEFAULT_RUNTIME,
            "metavar": "RUNTIMECLASS",
            "help": f"RuntimeClass of the sandboxes (default {DEFAULT_RUNTIME}); 'none' uses the cluster's default "
            "runtime",
        },
        "--timeout": {
            "type": whole_number(1, MAX_WAIT_SECONDS),
            "default": DEFAULT_JOB_DEADLINE_SECONDS,
            "metavar": "SECONDS",
            "help": f"each Job's activeDeadlineSeconds (default {DEFAULT_JOB_DEADLINE_SECONDS}); "
            f"the client waits {CLIENT_GRACE_SECONDS} s longer",
        },
        "--allow-large": {
            "action": "store_true",
            "help": f"allow up to {MAX_COUNT_LARGE} episodes instead of {MAX_COUNT}",
        },
        "--quiet": {"action": "store_true", "help": "no progress line on stderr"},
        "--kubelet-metrics": {
            "action": "store_true",
            "help": "also read the kubelets' runtime histograms (RunPodSandbox, CreateContainer, StartContainer, "
            "PullImage) before and after the run; needs get nodes/proxy, a powerful permission (off by default)",
        },
        "--junit": {"metavar": "FILE"},
        "--json": {"action": "store_true", "help": "print the guide's JSON summary instead of the table"},
        "--threshold": {
            "type": threshold,
            "action": "append",
            "metavar": "METRIC=SECONDS",
            "help": f"fail with exit code {EXIT_THRESHOLD} when a figure exceeds its budget (repeatable); "
            f"metrics: {', '.join(THRESHOLD_METRICS)}",
        },
        "--metrics-file": {
            "metavar": "FILE",
            "help": "write the run's figures as rl_batch_demo_* gauges in the Prometheus text format "
            "(node_exporter's textfile collector, a Pushgateway)",
        },
        "--lang": {
            "choices": ("en", "zh"),
            "default": "en",
            "help": "row labels of the guide's table: en, or zh (the guide's own)",
        },
        "--reference": {
            "choices": ("guide",),
            "help": f"add the guide's published columns ({GUIDE_REFERENCE['date']}) beside the runs' in the guide's "
            "table",
        },
        "-v/--verbose": {
            "action": "store_true",
            "help": "show each kubectl call on stderr as it ends (the command, its exit code and seconds), and every "
            "retry",
        },
        "--context": {"help": "kubeconfig context to use (default: the current context, read once)"},
        "--kubeconfig": {"help": "kubeconfig file (default: kubectl's own: $KUBECONFIG or ~/.kube/config)"},
        "--kubectl": {"help": "kubectl binary (default: $KUBECTL, else kubectl on PATH)"},
        "--kubectl-timeout": {
            "type": whole_number(1, MAX_WAIT_SECONDS),
            "default": int(KUBECTL_PROCESS_TIMEOUT),
            "metavar": "SECONDS",
            "help": "kill a kubectl call that has not answered after this long, a log read once it has "
            f"printed nothing for this long (default {int(KUBECTL_PROCESS_TIMEOUT)})",
        },
    }


def _add_options(parser: Any, shared: Dict[str, Dict[str, Any]], options: Mapping[str, Any]) -> None:
    """Each flag of `options` as `shared` defines it, changed by its value: a help text, a dict of
    add_argument's options, or None (as defined; then a key may name several flags, space-separated).
    A flag's other names follow a slash (-v/--verbose). `parser` may be an argument group."""
    for flags, change in options.items():
        changes = {"help": change} if isinstance(change, str) else change or {}
        for flag in flags.split():
            parser.add_argument(*flag.split("/"), **{**shared.get(flag, {}), **changes})


def build_parser(
    tool: Optional[str] = None, parser_class: typing.Type[CommandLineParser] = CommandLineParser
) -> CommandLineParser:
    """The command line; its usage lines name the tool as the user started it (see invoked_as).
    `parser_class` words its usage errors (the Python API raises them; its commands take it too)."""
    plugin = (tool or invoked_as()) == PLUGIN_COMMAND
    parser = parser_class(
        prog=PLUGIN_COMMAND if plugin else INSTALLED_COMMAND,
        description="Time how fast a Kubernetes cluster prepares N isolated RL-rollout sandboxes, "
        "run a fix -> test -> reward episode in each, and collect every reward.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction, nargs=0, help="show the version and this file's hash")
    parser.help_command = tool or invoked_as()
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    shared = _shared_options()
    cluster = ("cluster", {"-v/--verbose --context --kubeconfig --kubectl --kubectl-timeout": None})

    def command(
        name: str, about: str, description: Optional[str], options: Mapping[str, Any], *groups: Tuple[str, Any]
    ) -> None:
        """A subcommand with its options, then its groups of options (title, options)."""
        subparser = commands.add_parser(
            name,
            help=about,
            description=description,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_options(subparser, shared, options)
        for title, grouped in groups:
            _add_options(subparser.add_argument_group(title), shared, grouped)
        subparser.set_defaults(subparser=subparser)  # a usage error names the command's --help
        subparser.help_command = f"{tool or invoked_as()} {name}"
        parser.commands[name] = subparser

    command(
        "run",
        "run a batch of episodes and measure it",
        "Create a namespace, a ConfigMap with the episode worker and a Job of N episodes; wait for it, save every "
        "diagnostic, validate every episode and write results.json.",
        {
            "--output": "new directory for receipt, diagnostics and results (must not exist)",
            "--count": {
                "default": None,
                "help": f"episodes per round: the Job's completions (default {DEFAULT_COUNT}, at most {MAX_COUNT}; "
                "with --tasks, the number of tasks)",
            },
            "--parallelism": {
                "type": parallelism_arg,
                "metavar": "P|auto",
                "help": "episodes running at once: the Job's parallelism (default: N; 1 runs them one after another; "
                "auto: as many as the eligible nodes have room for now, as `check` counts it, at most N; needs list "
                "nodes, list pods in every namespace and, with a RuntimeClass, list runtimeclasses)",
            },
            "--rounds": {
                "default": 1,
                "help": f"run K batches of N one after another, each its own Job (default 1, at most {MAX_ROUNDS})",
            },
            "--image --runtime --timeout": None,
            "--cleanup": {
                "choices": ("never", "on-success", "always"),
                "default": "never",
                "help": "delete what the run created once diagnostics are saved (default never, the guide's behaviour)",
            },
            "--threshold --allow-large": None,
            "--worker": {
                "metavar": "FILE.py",
                "help": "your episode worker instead of the built-in one (show-worker prints one to start from); it "
                "must emit one ready and one reward event with a finite numeric reward",
            },
            "--tasks": {
                "metavar": "FILE.jsonl",
                "help": "one JSON object per line, one episode each (the count is the number of lines); the Job "
                f"becomes Indexed and episode i reads line i of /demo/{TASKS_KEY}",
            },
            "--max-failed-episodes": {
                "type": whole_number(0),
                "default": 0,
                "metavar": "K",
                "help": "tolerate up to K episodes that failed (pod failed or evicted, no or invalid events): listed "
                "in results.json's failed_episodes and left out of the figures; never retried (default 0: any "
                "failure fails the run; K > 0 needs per-index backoff limits: Kubernetes 1.33, or 1.29-1.32 with the "
                "JobBackoffLimitPerIndex feature gate, on by default there)",
            },
            "--infra-retries": {
                "type": whole_number(0, MAX_INFRA_RETRIES, ""),
                "default": 0,
                "metavar": "K",
                "help": "run an episode whose pod was lost to the infrastructure (evicted, preempted, its node gone: "
                "DisruptionTarget) again, up to K times, by the Job's podFailurePolicy; an episode that failed by its "
                "own doing is never retried (default 0: a lost pod fails the run; K > 0 needs Kubernetes 1.29 or "
                "later)",
            },
            "--max-artifact-bytes": {
                "type": artifact_budget,
                "default": DEFAULT_MAX_ARTIFACT_BYTES,
                "metavar": "BYTES",
                "help": "the most bytes of artifacts one episode may save (files its worker writes under "
                f"${ARTIFACTS_ENV}, sent through its log to DIR/artifacts/POD/); an episode over it fails (default "
                f"{DEFAULT_MAX_ARTIFACT_BYTES:,} = 1Mi, at most {MAX_ARTIFACT_BYTES_LIMIT:,} = 4Mi, well under the "
                "kubelet's 10 MiB log rotation)",
            },
            "--dry-run": {"action": "store_true", "help": "write the manifests to DIR and contact no cluster"},
            "--quiet --json --kubelet-metrics": None,
            "--warmup": {
                "action": "store_true",
                "help": "before the measured rounds, one warm-up episode on each eligible node, all at once "
                "(DIR/warmup/)",
            },
            "--pin-image": {
                "nargs": "?",
                "const": "",
                "type": pinned_image_arg,
                "metavar": "REPO@sha256:DIGEST",
                "help": "run the measured Jobs by digest: the imageID the nodes ran in the warm-up (or a one-episode "
                "probe Job), or the digest given",
            },
        },
        cluster,
        (
            "CI reports (written on failure too; see the README's CI section)",
            {
                "--junit": "write a JUnit XML report: one test suite per round, one test case per episode and per "
                "--threshold",
                "--metrics-file": None,
            },
        ),
    )
    command(
        "cleanup",
        "delete what a run created, after checking ownership",
        "Read DIR/receipt.json, check the namespace's and Jobs' UIDs and labels, then delete the Jobs (foreground) "
        "and the namespace. Keeps DIR.",
        {
            "--output": "the run's output directory (holds receipt.json)",
            "--timeout": {
                "default": CLEANUP_WAIT_SECONDS,
                "help": f"how long to wait for the Jobs and then the namespace to go (default {CLEANUP_WAIT_SECONDS})",
            },
        },
        cluster,
    )
    command(
        "check",
        "preflight: can this cluster run the batch? (creates nothing)",
        None,
        {
            "--count": "episodes to plan capacity for",
            "--runtime": "RuntimeClass to check, or 'none'",
            "--image": "image the run would use (reported only)",
            "--kubelet-metrics": "also check the permission `run --kubelet-metrics` needs (get nodes/proxy, list "
            "nodes)",
            "--json": "print one JSON object, every finding and the verdict, instead of the lines",
        },
        cluster,
    )
    command(
        "compare",
        "show several runs' figures side by side",
        None,
        {
            "directories": {
                "nargs": "+",
                "metavar": "DIR",
                "help": "output directories of finished runs; the first is the baseline for ratios",
            },
            "--format": {
                "choices": ("text", "markdown", "json", "guide"),
                "default": "text",
                "help": "guide: the guide's section 六 table, its rows in its order, one column per run",
            },
            "--lang --reference": None,
            "--allow-different-counts": {
                "action": "store_true",
                "help": "compare runs with different episode counts anyway",
            },
        },
    )
    command(
        "show-worker",
        "print the built-in episode worker (or, with --template, a minimal worker to start from)",
        "Print the worker that runs in every sandbox, as a starting point for `run --worker FILE.py`.",
        {"--template": {"action": "store_true", "help": "print a minimal custom worker that reads its task instead"}},
    )
    command(
        "reproduce",
        "the guide's whole experiment, then its table",
        "Run, in the guide's order, DIR/parallel (N at once), DIR/sequential (one at a time) and DIR/warm (--warmup "
        "--rounds K), all with the image digest the first group resolves, each in its own namespace, cleaned up once "
        "its diagnostics are saved; write DIR/report.md and DIR/report.json.",
        {
            "--output": "new directory for the three groups",
            "--count": "tasks per group and round (default 10)",
            "--rounds": {"default": 3, "help": "rounds of the warm group (default 3)"},
            "--image --runtime --timeout": None,
            "--cleanup": {
                "choices": ("on-success", "always"),
                "default": "on-success",
                "help": "on-success (default): keep a failed group's namespace for inspection; always: delete it too",
            },
            "--allow-large --quiet --kubelet-metrics --lang --reference": None,
            "--threshold": f"a latency budget every group's run must keep (repeatable); a breach lets the experiment "
            f"go on, then exits {EXIT_THRESHOLD}; metrics: {', '.join(THRESHOLD_METRICS)}",
            "--json": "print report.json (the experiment, its table and its verdict) instead of the table and the "
            "verdict",
            "--junit": "write a JUnit XML report of every group: one suite per round, one test case per episode "
            "(written on failure too)",
            "--metrics-file": "write every group's figures as rl_batch_demo_* gauges in the Prometheus text format, "
            "labelled group=parallel|sequential|warm (written on failure too)",
        },
        cluster,
    )
    return parser


def check_counts(
    parser: argparse.ArgumentParser, count: int, parallelism: int, rounds: int, allow_large: bool, given: str
) -> None:
    """The limits on a batch's size, checked before any work starts, each named by the flag the
    user gave (`given` says what set the count: "--count 25", "--tasks FILE (25 tasks)", ...)."""
    if count > MAX_COUNT and not allow_large:
        parser.error(f"{given} is more than {MAX_COUNT}; pass --allow-large for up to {MAX_COUNT_LARGE}")
    if count > MAX_COUNT_LARGE:
        parser.error(f"{given} is more than {MAX_COUNT_LARGE}, the most --allow-large allows")
    if parallelism > count:
        parser.error(f"--parallelism {parallelism} is more than {given}")
    if rounds > MAX_ROUNDS:
        parser.error(f"--rounds {rounds} is more than {MAX_ROUNDS}")


def run_settings(args: argparse.Namespace) -> RunSettings:
    """What `run` was asked to do: its flags, and the files they name (--worker, --tasks) read and
    checked once, before any work starts; a bad file or flag combination is a usage error."""
    parser: argparse.ArgumentParser = args.subparser
    worker_source, worker_file, tasks, count = WORKER_SOURCE, None, None, args.count
    given = f"--count {count}"
    try:
        if args.worker:
            path = Path(args.worker)
            worker_source, worker_file = check_worker_source(read_input_file(path, "--worker"), str(path)), path.name
        if args.tasks:
            path = Path(args.tasks)
            listed = getattr(args, "tasks_given", None)  # the Python API's list of tasks, as JSON lines
            tasks = tuple(parse_tasks(listed if listed is not None else read_input_file(path, "--tasks"), str(path)))
            if count is not None and count != len(tasks):
                raise DemoError(
                    f"--count {count} does not match the {len(tasks)} tasks in {path} (one episode per line); "
                    "leave --count out or make them agree",
                    EXIT_USAGE,
                )
            count, given = len(tasks), f"--tasks {path} ({len(tasks)} tasks)"
        # the API server refuses a ConfigMap over its object size limit: refused here, before any work
        problem = configmap_size_problem(
            configmap_manifest(NAMESPACE_PREFIX + "0" * 12, "0" * 12, worker_source, tasks)
        )
        if problem:
            raise DemoError(problem, EXIT_USAGE)
    except DemoError as error:
        parser.error(str(error))
    if count is None:
        count, given = DEFAULT_COUNT, f"--count {DEFAULT_COUNT} (the default)"
    auto = args.parallelism == "auto"
    parallelism = count if auto else args.parallelism or count
    check_counts(parser, count, parallelism, args.rounds, args.allow_large, given)
    if args.dry_run and (args.warmup or args.pin_image == ""):
        parser.error(
            "--dry-run contacts no cluster, so it cannot list the nodes to warm up or resolve a digest; "
            "pass --pin-image=REPO@sha256:DIGEST to see the pinned manifests"
        )
    if args.dry_run and auto:
        parser.error("--dry-run contacts no cluster, so it cannot count the nodes' room for --parallelism auto")
    return dataclasses.replace(
        _flag_settings(args, count, parallelism),
        json_summary=args.json,
        worker_source=worker_source,
        worker_file=worker_file,
        tasks=tasks,
        max_failed_episodes=args.max_failed_episodes,
        infra_retries=args.infra_retries,
        max_artifact_bytes=args.max_artifact_bytes,
        warmup=args.warmup,
        pin_image=args.pin_image,
        dry_run=args.dry_run,
        junit=args.junit,
        metrics_file=args.metrics_file,
        parallelism_auto=auto,
    )


def reproduce_settings(args: argparse.Namespace) -> RunSettings:
    """What every group of `reproduce` shares (reproduce_group_settings makes each group's)."""
    check_counts(args.subparser, args.count, args.count, args.rounds, args.allow_large, f"--count {args.count}")
    return _flag_settings(args, args.count, args.count)


def _flag_settings(args: argparse.Namespace, count: int, parallelism: int) -> RunSettings:
    """The settings `run` and `reproduce` read from the same flags, with the built-in worker."""
    return RunSettings(
        output=Path(args.output),
        count=count,
        parallelism=parallelism,
        rounds=args.rounds,
        image=args.image,
        runtime=None if args.runtime == NO_RUNTIME else args.runtime,
        deadline_seconds=args.timeout,
        cleanup_policy=args.cleanup,
        thresholds=dict(args.threshold or []),
        quiet=args.quiet,
        json_summary=False,
        kubectl_timeout=float(args.kubectl_timeout),
        worker_source=WORKER_SOURCE,
        kubelet_metrics=args.kubelet_metrics,
    )


def invoked_as(plugin: bool = False) -> str:
    """The command the user typed to start this tool: `kubectl rl-batch-demo` as a kubectl plugin,
    `rl-batch-demo` as the installed command, else `python3 FILE`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if plugin or name in PLUGIN_FILE_NAMES:
        return PLUGIN_COMMAND
    if name == INSTALLED_COMMAND:
        return INSTALLED_COMMAND
    try:
        relative = os.path.relpath(__file__)
    except OSError:  # the working directory was removed: the path as Python has it
        relative = ".."
    return f"python3 {shlex.quote(__file__ if relative.startswith('..') else relative)}"


def prepared_command(args: argparse.Namespace, tool: str) -> Callable[[], int]:
    """The chosen command with what it needs (the typed settings of `run` and `reproduce`, the
    worker's text, how the user started this tool), read and checked: a usage error stops here."""
    if args.command == "run":
        settings = run_settings(args)
        return lambda: cmd_run_reported(settings, make_kubectl(args), tool)
    if args.command == "reproduce":
        base = reproduce_settings(args)
        return lambda: cmd_reproduce(args, base, tool)
    if args.command == "show-worker":
        source = WORKER_TEMPLATE if args.template else WORKER_SOURCE
        return lambda: cmd_show_worker(source)
    command = {"check": cmd_check, "cleanup": cmd_cleanup, "compare": cmd_compare}[args.command]
    return lambda: command(args)


def plugin_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the installed kubectl-rl_batch_demo: `kubectl rl-batch-demo ...`."""
    return main(argv, plugin=True)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Optional[Sequence[str]] = None, *, plugin: bool = False) -> int:
    previous = None
    if threading.current_thread() is threading.main_thread():  # first: from here on SIGTERM is a Ctrl-C
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        tool = invoked_as(plugin)
        args = build_parser(tool).parse_command_line(argv)
        return int(prepared_command(args, tool)())
    except BrokenPipeError:
        # The reader of stdout went away (`| head`); the work itself is done.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except DemoError as error:
        print(f"rl-batch-demo: error: {printable(str(error))}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("rl-batch-demo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as bug:  # a bug: its traceback for the report, then the exit code error.json gives it
        import traceback  # noqa: PLC0415 - only a bug needs it

        traceback.print_exception(type(bug), bug, bug.__traceback__, file=sys.stderr)
        print(
            f"rl-batch-demo: error: {printable(bug_message(bug))}; the traceback above is for a bug report",
            file=sys.stderr,
        )
        return EXIT_CLUSTER
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# Python API ###################################################################
# `import rl_batch_demo as rbd`: run_batch and stream_batch, a `run` from Python. Uses the command
# line: its options are run's flags, read by the same parser and settings, run by the same
# cmd_run_reported (one code path), printing nothing on stdout, never exiting, and leaving the
# caller's signal handlers alone.


class OptionsParser(CommandLineParser):
    """The command line's parser as the API uses it: a usage error raises DemoError (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise DemoError(printable(message), EXIT_USAGE)


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """What run_batch returns: the run's directory and the two files a trainer reads there."""

    output: Path
    results: Optional[Results]  # results.json as a dict; None after dry_run, which writes manifests only
    rewards: List[RewardLine]  # rewards.jsonl's rows, in the file's order (a retraction follows its row)

    @property
    def verdicts(self) -> List[RewardLine]:
        """Each pod's last row, its verdict (docs/outputs.md, "rewards.jsonl"), in the order the
        pods first appear: a reward that stands has `failure` null."""
        last = {row["pod"]: row for row in self.rewards}
        return list(last.values())

    @classmethod
    def read(cls, output: Path) -> BatchResult:
        rewards_file = output / REWARDS_FILE
        if not (output / "results.json").exists():  # a dry run: manifests only
            return cls(output, None, [])
        return cls(output, load_results(output), read_reward_lines(rewards_file))


def option_arguments(options: Mapping[str, Any], parser: CommandLineParser) -> List[str]:
    """`run`'s command line for the API's keyword options, each the flag with underscores
    (max_failed_episodes: --max-failed-episodes): `True` for a flag that takes no value, a
    value or None (left out) for one that does; `threshold` a mapping (metric: seconds) or
    "METRIC=SECONDS" texts. An unknown name or a value of the wrong kind is a usage error."""
    run = parser.commands["run"]
    flags = {action.dest: action for action in run._actions if action.option_strings and action.dest != "help"}
    argv: List[str] = []
    for name, value in options.items():
        action = flags.get(name)
        if action is None:
            raise DemoError(f"unknown option {name}{did_you_mean(name, flags)}", EXIT_USAGE)
        flag = max(action.option_strings, key=len)
        if action.nargs in (0, "?"):  # a switch (store_true), or --pin-image's optional value
            if not isinstance(value, (bool, str)) or (action.nargs != "?" and isinstance(value, str)):
                raise DemoError(f"option {name} takes True or False, not {short_repr(value)}", EXIT_USAGE)
            argv += [flag] if value is True else [f"{flag}={value}"] if isinstance(value, str) else []
        elif action.dest == "threshold":
            items = value.items() if isinstance(value, Mapping) else [value] if isinstance(value, str) else value
            argv += [f"{flag}={item}" if isinstance(item, str) else f"{flag}={item[0]}={item[1]}" for item in items]
        elif value is not None:
            if isinstance(value, bool):
                raise DemoError(f"option {name} takes a value, not {value}", EXIT_USAGE)
            argv.append(f"{flag}={os.fspath(value) if isinstance(value, os.PathLike) else value}")
    return argv


def tasks_lines(tasks: Sequence[Any]) -> bytes:
    """The API's `tasks` list as the lines of a --tasks file; an item that is no JSON object names its index."""
    lines = []
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise DemoError(
                f"tasks[{index}] is {type(task).__name__}, not a dict (one JSON object per episode)", EXIT_USAGE
            )
        try:
            lines.append(json.dumps(task, sort_keys=True, allow_nan=False) + "\n")
        except (TypeError, ValueError, RecursionError) as error:
            raise DemoError(f"tasks[{index}] cannot be written as JSON ({error})", EXIT_USAGE) from None
    return "".join(lines).encode("utf-8")


def batch_settings(
    output: Any, count: Optional[int], options: Mapping[str, Any]
) -> Tuple[RunSettings, argparse.Namespace]:
    """The settings `run` would take from the flags that `options` name, checked by the same
    parser and rules: a usage error is a DemoError, raised before any work starts."""
    given = dict(options)
    tasks = given.get("tasks")
    listed = tasks is not None and not isinstance(tasks, (str, os.PathLike))
    if listed:
        given["tasks"] = "tasks"  # the list stands for a file of that name in messages
    parser = build_parser(invoked_as(), OptionsParser)
    argv = option_arguments({"output": output, "count": count, **given}, parser)
    args = parser.parse_command_line(["run", *argv])
    if listed and tasks is not None:
        args.tasks_given = tasks_lines(tasks)
    return run_settings(args), args


def execute_batch(settings: RunSettings, args: argparse.Namespace) -> BatchResult:
    """The run, as `run` runs it without printing its summary; an interruption is re-raised as
    one (KeyboardInterrupt) once diagnostics are saved and the --cleanup policy has run, and a
    bug as DemoError (exit 3), its traceback chained."""
    try:
        cmd_run_reported(settings, make_kubectl(args), invoked_as(), print_summary=False)
    except DemoError as error:
        if error.exit_code == EXIT_INTERRUPTED:
            raise KeyboardInterrupt(str(error)) from error
        raise
    except Exception as bug:
        raise DemoError(bug_message(bug), EXIT_CLUSTER) from bug
    return BatchResult.read(settings.output)


def run_batch(output: Any, *, count: Optional[int] = None, **options: Any) -> BatchResult:
    """Run one batch, as `run --output OUTPUT --count COUNT ...` does, and return what it wrote:
    `.results` (results.json), `.rewards` (rewards.jsonl's rows), `.output`. `count` defaults to
    10, or to the number of tasks; `options` are run's other flags with underscores, `tasks` a
    --tasks file or a list of dicts. A failure raises DemoError with the command line's exit code."""
    settings, args = batch_settings(output, count, options)
    return execute_batch(settings, args)


def stream_batch(
    output: Any, *, count: Optional[int] = None, **options: Any
) -> typing.Generator[RewardLine, None, BatchResult]:
    """Run one batch as run_batch does, in a thread of its own, and yield each rewards.jsonl row
    as it is written. Leaving the loop early (break, an exception, close()) stops the run as a
    Ctrl-C would and waits for its diagnostics and its --cleanup policy; so does a Ctrl-C while
    it waits for the next row, which is then raised. Once the run has ended the generator raises
    its DemoError, or returns its BatchResult. Options are checked now, before the first row."""
    settings, args = batch_settings(output, count, options)
    return _stream(settings, args)


_DONE = object()  # stream_batch's last item: the run's thread has ended


def _stream(settings: RunSettings, args: argparse.Namespace) -> typing.Generator[RewardLine, None, BatchResult]:
    rows: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    ended: Dict[str, Any] = {}

    def work() -> None:
        try:
            ended["result"] = execute_batch(dataclasses.replace(settings, on_reward=rows.put, stop=stop), args)
        except BaseException as error:  # handed to the caller's thread below
            ended["error"] = error
        finally:
            rows.put(_DONE)

    thread = threading.Thread(target=work, name=f"rl-batch-demo {settings.output}")
    thread.start()
    try:
        while (row := rows.get()) is not _DONE:
            yield row
    except BaseException:  # KeyboardInterrupt while waiting, GeneratorExit, the loop's own exception
        stop.set()
        thread.join()
        raise
    thread.join()
    if "error" in ended:
        raise ended["error"]
    result: BatchResult = ended["result"]
    return result


# The episode worker (payload) #################################################
# The programs that run inside the sandboxes, kept as text; uses nothing above, and only the command
# line reads it. WORKER_SOURCE runs in every sandbox (mounted from the ConfigMap as /demo/episode.py),
# so that copying this one file is enough; it must run on any Python 3.9+ image as UID 1000 with
# nothing but the standard library. WORKER_TEMPLATE is what `show-worker --template` prints.


WORKER_SOURCE = r'''"""One RL episode: prepare a workspace, confirm the bug, apply a fix, test, emit the reward.

Events go to stdout as JSON lines (the container log) and, trimmed to the kubelet's 4 KiB
limit, to the termination message, so one `kubectl get pods` returns every reward.

The reward comes from a structured report, not from the test process's exit code: the tests
run in a child process under RUNNER_SOURCE, which gets the test source from this worker (never
from the workspace), compiles the code under test from shipping.py's bytes, and writes which
tests ran, how each ended and where both modules came from to a pipe only that child holds.
Reward 1 needs that report, exactly the three ShippingTest tests, all passed, from the runner's
own copy, exit code 0 and an unchanged test file; anything else is reward 0 with a `reason`.
The worker always emits one `reward` event, then exits non-zero unless the reward is 1.
"""

import time

STARTED_AT = time.time()  # the first statement: "first_statement_at" in the ready event

import os  # noqa: E402  (already loaded by the interpreter's start: costs nothing)


def proc_clocks(proc):
    """(process start, kernel boot, disagreement), epoch seconds by the node's clock, from /proc
    alone: the process's starttime (clock ticks since boot, /proc/self/stat field 22) on the
    kernel's boot clock (/proc/uptime), so a stepped wall clock cannot move it. None where /proc is
    unreadable. When /proc/uptime is shorter than the process's start after boot, it is not the
    kernel's (LXCFS and Sysbox make it the container's age, but leave /proc/self/stat on the host's
    boot clock): both times are None, and the disagreement holds the two readings.
    RL_DEMO_PROC names another /proc, for tests and simulations only."""
    try:
        with open(proc + "/uptime") as uptime_file:
            uptime = float(uptime_file.read().split()[0])
        booted = time.time() - uptime
    except (OSError, ValueError, IndexError):
        return None, None, None
    try:
        with open(proc + "/self/stat") as stat_file:
            stat = stat_file.read()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # fields after "pid (comm) ": state is field 3
        hertz = os.sysconf("SC_CLK_TCK")
        after_boot = ticks / hertz
    except (OSError, ValueError, IndexError, ZeroDivisionError):
        return None, booted, None
    if after_boot > uptime + 2 / hertz:  # both are truncated to a tick: two ticks of slack
        return None, None, {"uptime_seconds": uptime, "started_after_boot_seconds": after_boot}
    return booted + after_boot, booted, None


PROCESS_STARTED_AT, KERNEL_BOOTED_AT, PROC_CLOCKS_DISAGREE = proc_clocks(os.environ.get("RL_DEMO_PROC", "/proc"))

import hashlib  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

IMPORTS_DONE_AT = time.time()

WORKSPACE = pathlib.Path(os.environ.get("RL_DEMO_WORKSPACE", "/workspace"))
TERMINATION_LOG = pathlib.Path(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"))
ARTIFACTS = pathlib.Path(os.environ.get("RL_DEMO_ARTIFACTS", str(WORKSPACE / "artifacts")))  # sent by send_artifacts
TERMINATION_LIMIT = 4096
EPISODE_ID = os.environ["EPISODE_ID"]
DEFAULT_TEST_TIMEOUT = 20.0  # seconds per test run; RL_DEMO_TEST_TIMEOUT overrides it
REPORT_LIMIT = 65536  # bytes of runner report read; more is treated as undecodable
EXPECTED_TESTS = (
    "test_shipping.ShippingTest.test_below",
    "test_shipping.ShippingTest.test_boundary",
    "test_shipping.ShippingTest.test_above",
)
OUTCOMES = ("passed", "failed", "error", "skipped", "expected_failure", "unexpected_success", "unfinished")
MAX_REPORTED_TESTS = 10  # the `tests` field is bounded so the reward event always fits 4 KiB
MAX_NAME = 100
MAX_REASON = 300
MAX_ORIGIN = 200
CODE_FILE = WORKSPACE / "shipping.py"  # the code under test, graded from this file's bytes alone
TEST_ORIGIN = "runner stdin"  # test_shipping's origin: compiled from the source the runner got on stdin
GRADED_MODULES = ("shipping", "test_shipping")

BUGGY_SOURCE = "def shipping(total):\n    return 0 if total > 99 else 10\n"
TEST_SOURCE = "\n".join(
    [
        "import unittest",
        "",
        "from shipping import shipping",
        "",
        "",
        "class ShippingTest(unittest.TestCase):",
        "    def test_below(self):",
        "        self.assertEqual(shipping(98), 10)",
        "",
        "    def test_boundary(self):",
        "        self.assertEqual(shipping(99), 0)",
        "",
        "    def test_above(self):",
        "        self.assertEqual(shipping(100), 0)",
        "",
        "",
        "if __name__ == '__main__':",
        "    unittest.main()",
        "",
    ]
)
TEST_SHA256 = hashlib.sha256(TEST_SOURCE.encode()).hexdigest()
EXPECTED_TEST_MODULE = {"origin": TEST_ORIGIN, "sha256": TEST_SHA256}

# The test runner, started as `python -B -I -c RUNNER_SOURCE FD TEST_SHA256` in the workspace.
#
# Channel: the report goes to the write end of an os.pipe() the worker creates just before the
# run and hands only to this child (pass_fds); the worker closes its own copy at once, and the
# runner makes the descriptor non-inheritable, so processes the tests start do not get it. On
# stdin, a pipe only the worker holds, comes one JSON line: a one-time nonce, which must come
# back in the report, the test source and the path of the code under test. The runner checks the
# test source against TEST_SHA256 from its command line before anything from the workspace is
# read. The worker accepts exactly one JSON document, so a fake report written next to the real
# one makes the whole report undecodable.
#
# The two graded modules are never looked up by name: test_shipping is compiled from the source
# that came on stdin (origin "runner stdin"), shipping from the bytes of the one file the worker
# named (origin: that path), each registered in sys.modules under its name before the tests
# import it. No .pyc is read for either, so a test_shipping/ or shipping/ package, a planted
# __pycache__/*.pyc (-B stops writing bytecode, not reading it) or a compiled extension beside
# them is never run in their place. The report names each module's origin and the sha256 of
# what was compiled under its name.
#
# What this protects against: os._exit(0) or sys.exit(0) before or while the tests run (no
# report, or one that says so), printing fake unittest output (stdout and stderr are never
# parsed), skipping or adding tests (the report names every test that ran), files left in the
# workspace or elsewhere beforehand (the pipe has no path and exists only for this run; another
# process of the same user could reopen it through /proc/PID/fd, but it lacks the nonce), files
# that shadow the test module or the code under test (above), and modules in the workspace that
# shadow the runner's own imports (-I keeps the workspace off sys.path, and ignores PYTHON*
# variables, user site-packages, sitecustomize and .pth files there, until the runner has read
# its stdin and imported everything it needs).
#
# What it does not protect against: code the tests import runs inside this very process, so it
# can always forge the outcome: patch unittest or the result class, find the descriptor in
# /proc/self/fd and the nonce in this module's frames, write a report that decodes and then
# os._exit(0). The report is evidence that this runner finished, not proof of a correct fix.
RUNNER_SOURCE = r"""import hashlib
import importlib.machinery
import importlib.util
import json
import linecache
import os
import sys
import traceback
import unittest

TEST_MODULE = "test_shipping"
CODE_MODULE = "shipping"
TEST_ORIGIN = "runner stdin"


class RecordingResult(unittest.TextTestResult):
    # Records one [test id, outcome] entry per test run, a failure never overwritten by a pass.

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.entries = []
        self.current = None
        self.outcome = None

    def startTest(self, test):
        super().startTest(test)
        self.current, self.outcome = test, "unfinished"

    def stopTest(self, test):
        super().stopTest(test)
        if test is self.current:
            self.entries.append([test.id(), self.outcome])
        self.current, self.outcome = None, None

    def note(self, test, outcome):
        if test is self.current:
            if self.outcome in ("unfinished", "passed"):
                self.outcome = outcome
        else:  # an error outside a test, such as in setUpClass
            self.entries.append([test.id(), outcome])

    def addSuccess(self, test):
        super().addSuccess(test)
        self.note(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.note(test, "failed")

    def addError(self, test, err):
        super().addError(test, err)
        self.note(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.note(test, "skipped")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.note(test, "expected_failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.note(test, "unexpected_success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.note(test, "failed" if issubclass(err[0], test.failureException) else "error")


def load_module(name, source, origin, filename):
    # A module compiled from source the runner holds, never found on sys.path nor read from a .pyc;
    # its origin is the file it was read from (then also its __file__), or where it came from.
    spec = importlib.machinery.ModuleSpec(name, None, origin=origin)
    spec.has_location = origin == filename
    module = importlib.util.module_from_spec(spec)
    code = compile(source, filename, "exec", dont_inherit=True)
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def origins(compiled):
    # name -> the origin of the module sys.modules holds now, and the sha256 compiled under it.
    found = {}
    for name in (CODE_MODULE, TEST_MODULE):
        spec = getattr(sys.modules.get(name), "__spec__", None)
        origin = getattr(spec, "origin", None)
        found[name] = {"origin": origin if isinstance(origin, str) else None, "sha256": compiled.get(name)}
    return found


def main():
    channel = int(sys.argv[1])
    os.set_inheritable(channel, False)
    report = {"nonce": None, "tests": [], "error": None, "modules": {}}
    compiled = {}
    result = None
    try:
        message = json.loads(sys.stdin.readline())
        report["nonce"] = message["nonce"]
        test_source = message["test_source"].encode("utf-8")
        if hashlib.sha256(test_source).hexdigest() != sys.argv[2]:
            raise ValueError("the test source on stdin does not match its sha256")
        sys.path.insert(0, os.getcwd())  # for modules the code under test imports itself
        with open(message["code_path"], "rb") as stream:
            code_source = stream.read()
        compiled[CODE_MODULE] = hashlib.sha256(code_source).hexdigest()
        load_module(CODE_MODULE, code_source, message["code_path"], message["code_path"])
        filename = "test_shipping.py (" + TEST_ORIGIN + ")"
        lines = message["test_source"].splitlines(True)
        linecache.cache[filename] = (len(test_source), None, lines, filename)  # for tracebacks
        compiled[TEST_MODULE] = sys.argv[2]
        module = load_module(TEST_MODULE, test_source, TEST_ORIGIN, filename)
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        result = unittest.TextTestRunner(stream=sys.stderr, resultclass=RecordingResult).run(suite)
    except BaseException as error:  # SystemExit at import too: the report says so
        traceback.print_exc()
        report["error"] = (type(error).__name__ + ": " + str(error))[:200]
    if result is not None:
        report["tests"] = result.entries
    report["modules"] = origins(compiled)
    with os.fdopen(channel, "wb") as stream:
        stream.write(json.dumps(report).encode())
    return 0 if result is not None and report["error"] is None and result.wasSuccessful() else 1


sys.exit(main())
"""

EVENTS = []


class EpisodeFailed(Exception):
    """Reward 0 for a known reason (a timeout, a runner that could not start)."""

    def __init__(self, reason, output=""):
        super().__init__(reason)
        self.reason = reason
        self.output = output


class Terminated(BaseException):
    """SIGTERM (the Job's deadline, a deleted pod): still emit the reward event."""


class TestRun:
    """One run of test_shipping.py under the runner: exit code, output and the runner's report."""

    def __init__(self, exit_code, stdout, stderr, report, nonce):
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.report = report  # bytes read from the pipe, b"" when the runner wrote nothing
        self.nonce = nonce


def emit(event, **fields):
    record = dict(fields, event=event, at=time.time(), episode_id=EPISODE_ID)
    EVENTS.append(record)
    print(json.dumps(record, sort_keys=True), flush=True)
    write_termination_message()


def termination_text(events):
    return "".join(json.dumps(record, sort_keys=True) + "\n" for record in events)


def write_termination_message():
    events = [dict(record) for record in EVENTS]
    text = termination_text(events)
    while len(text.encode()) > TERMINATION_LIMIT:
        last = events[-1]
        output = last.get("tests_output", "")
        if not output:
            return
        excess = len(text.encode()) - TERMINATION_LIMIT
        last["tests_output"] = output[excess + 64 :]
        last["tests_output_truncated"] = True
        text = termination_text(events)
    try:  # noqa: SIM105 (contextlib.suppress would be one more import in the sandbox)
        TERMINATION_LOG.write_text(text)
    except OSError:
        pass  # no termination log outside Kubernetes, or a runtime without one


def printable(text, limit):
    """Untrusted text made short and ASCII, so the reward event's size stays bounded."""
    text = "".join(c if " " <= c <= "~" else "?" for c in str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def decode(data):
    """(text, whether it was valid UTF-8); undecodable bytes become U+FFFD instead of an error."""
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), False


def test_timeout():
    text = os.environ.get("RL_DEMO_TEST_TIMEOUT", "")
    if not text:
        return DEFAULT_TEST_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise EpisodeFailed("RL_DEMO_TEST_TIMEOUT must be a positive number of seconds, not " + printable(text, 40))
    return value


def kill_group(process):
    try:  # noqa: SIM105 (contextlib.suppress would be one more import in the sandbox)
        os.killpg(process.pid, signal.SIGKILL)  # the runner leads its own session
    except OSError:
        pass
    try:
        process.kill()
        process.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for stream in (process.stdin, process.stdout, process.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


class ReportReader:
    """Drains the report pipe while the tests run, so a large report never blocks the runner;
    keeps the first REPORT_LIMIT + 1 bytes."""

    def __init__(self, fd):
        self.fd = fd
        self.chunks = []
        self.size = 0
        self.thread = threading.Thread(target=self.drain, daemon=True)
        self.thread.start()

    def drain(self):
        try:
            while True:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return
                if self.size <= REPORT_LIMIT:
                    self.chunks.append(chunk)
                    self.size += len(chunk)
        except OSError:
            return

    def report(self):
        # After the runner exits its data is already in the pipe; a process it left holding the
        # write end must not stall the worker, so wait briefly and take what arrived.
        self.thread.join(timeout=2)
        return b"".join(list(self.chunks))


def run_tests(timeout):
    nonce = os.urandom(16).hex()
    read_end, write_end = os.pipe()
    reader = None
    try:
        try:
            process = subprocess.Popen(
                [sys.executable, "-B", "-I", "-c", RUNNER_SOURCE, str(write_end), TEST_SHA256],
                cwd=str(WORKSPACE),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_end,),
                start_new_session=True,
            )
        except OSError as error:
            raise EpisodeFailed(f"could not start the tests: {error}") from None
        finally:
            os.close(write_end)
        reader = ReportReader(read_end)
        try:
            message = {"nonce": nonce, "test_source": TEST_SOURCE, "code_path": str(CODE_FILE)}
            stdout, stderr = process.communicate((json.dumps(message) + "\n").encode(), timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            kill_group(process)
            output, _ = decode(expired.stderr or b"")
            raise EpisodeFailed(f"timeout after {timeout:g} s", output) from None
        except BaseException:
            kill_group(process)
            raise
        return TestRun(process.returncode, stdout, stderr, reader.report(), nonce)
    finally:
        if reader is None or not reader.thread.is_alive():
            os.close(read_end)  # else the reader thread still owns it; the worker is about to exit


def file_sha256(path):
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def reported_tests(run):
    """(the report's entries as [name, outcome] pairs, or None; its `modules` field, bounded;
    the reason it is unusable, or None)."""
    if not run.report:
        return None, {}, f"tests exited {run.exit_code} but the runner reported nothing"
    if len(run.report) > REPORT_LIMIT:
        return None, {}, f"test report too large (over {REPORT_LIMIT // 1024} KiB)"
    try:
        report = json.loads(run.report.decode("utf-8"))
        if not isinstance(report, dict) or not isinstance(report.get("tests"), list):
            raise ValueError("not a report")
        entries = report["tests"]
        pairs = []
        for entry in entries:
            if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
                raise ValueError("not a test entry")
            pairs.append((entry[0], entry[1] if entry[1] in OUTCOMES else "invalid"))
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, {}, "test report undecodable"
    if report.get("nonce") != run.nonce:
        return None, {}, "test report not written by the runner (wrong nonce)"
    modules = modules_field(report.get("modules"))
    if report.get("error") is not None:
        return pairs, modules, "runner error: " + printable(report["error"], 200)
    return pairs, modules, None


def modules_field(reported):
    """name -> {origin, sha256} of the two graded modules as the runner reports them, bounded:
    where each came from and the sha256 of the source compiled under its name (None: unknown)."""
    modules = {}
    for name in GRADED_MODULES:
        entry = reported.get(name) if isinstance(reported, dict) else None
        entry = entry if isinstance(entry, dict) else {}
        modules[name] = {
            key: printable(entry[key], MAX_ORIGIN) if isinstance(entry.get(key), str) else None
            for key in ("origin", "sha256")
        }
    return modules


def tests_field(pairs):
    """name -> outcome for the reward event (a failure wins over a pass for a repeated name), bounded."""
    tests = {}
    for reported, outcome in pairs:
        name = printable(reported, MAX_NAME)
        if name not in tests and len(tests) >= MAX_REPORTED_TESTS:
            continue
        if tests.get(name, "passed") == "passed":
            tests[name] = outcome
    return tests


def short(name):
    return name.split(".", 1)[-1] if name.startswith("test_shipping.") else name


def grade(run, file_unchanged):
    """(reward, reason, tests, modules): reward 1 only for the runner's report of exactly the three
    named tests, all passed, run from the runner's own copy against shipping.py's bytes, exit code
    0, an unchanged test file and output that decodes."""
    pairs, modules, problem = reported_tests(run)
    reason = "test file changed" if not file_unchanged else problem or grade_problem(run, pairs, modules)
    return (0 if reason else 1), reason, tests_field(pairs or []), modules


def grade_problem(run, pairs, modules):
    """Why a decodable report of the runner earns nothing, or None."""
    if modules["test_shipping"] != EXPECTED_TEST_MODULE:
        origin = modules["test_shipping"]["origin"]
        return printable(f"the tests did not run from the runner's own copy (origin {origin})", MAX_REASON)
    if modules["shipping"]["origin"] != str(CODE_FILE):
        origin = modules["shipping"]["origin"]
        return printable(f"the code under test is not {CODE_FILE.name} (origin {origin})", MAX_REASON)
    names = [name for name, _ in pairs]
    missing = [short(name) for name in EXPECTED_TESTS if name not in names]
    unexpected = sorted({short(name) for name in names if name not in EXPECTED_TESTS})
    repeated = sorted({short(name) for name in names if name in EXPECTED_TESTS and names.count(name) > 1})
    if missing or unexpected or repeated:
        parts = []
        for label, items in (("missing", missing), ("unexpected", unexpected), ("ran more than once", repeated)):
            if items:
                parts.append(label + " " + ", ".join(items))
        return printable("not exactly the three named tests ran: " + "; ".join(parts), MAX_REASON)
    bad = [f"{short(name)} {outcome}" for name, outcome in pairs if outcome != "passed"]
    if bad:
        return printable(", ".join(bad), MAX_REASON)
    if run.exit_code != 0:
        return f"tests exited {run.exit_code} although the runner reported every test passed"
    if not (decode(run.stdout)[1] and decode(run.stderr)[1]):
        return "test output undecodable (not UTF-8)"
    return None


def agent_action(source):
    """The deterministic stand-in for a coding agent's action; a real model plugs in here."""
    return source.replace("total > 99", "total >= 99")


def on_sigterm(signum, frame):
    raise Terminated(f"terminated by signal {signum}")


def write_artifact(name, data):
    """A file for the trainer: under ARTIFACTS, sent after the episode (send_artifacts)."""
    path = ARTIFACTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def save_patch(before, after):
    """The agent's action as a unified diff of shipping.py (patch.diff, an artifact)."""
    import difflib  # noqa: PLC0415 - after `ready`: the measured import phase stays the guide's

    lines = difflib.unified_diff(before.splitlines(True), after.splitlines(True), "a/shipping.py", "b/shipping.py")
    write_artifact("patch.diff", "".join(lines).encode())


# Artifacts travel through the log, the channel the tool reads anyway: each file under ARTIFACTS
# (symlinks and other non-regular files skipped, never followed) as lines
# "rl-demo-artifact 1 SEQ TOTAL SHA256 NAME DATA": frame SEQ (from 0) of TOTAL, the whole file's
# sha256, its relative name in URL-safe base64 and up to FRAME_DATA bytes of it in base64. The
# reward event's `artifacts` lists each file's {name, bytes, sha256}, sorted by name: the tool
# saves what the frames carry and checks it against that list (docs/own-episodes.md, "Artifacts").
FRAME_DATA = 24 * 1024
MAX_ARTIFACTS = 64
MAX_ARTIFACT_NAME = 255


def artifact_files(root):
    """(name, path) of each regular file under root, sorted by name; what cannot be sent is skipped."""
    found = []
    pending = [(str(root), "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            name = prefix + entry.name
            if entry.is_symlink() or not (entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)):
                print("artifact skipped (not a regular file): " + printable(name, 200), file=sys.stderr)
            elif entry.is_dir(follow_symlinks=False):
                pending.append((entry.path, name + "/"))
            elif printable(name, MAX_ARTIFACT_NAME + 1) != name or "\\" in name or len(name) > MAX_ARTIFACT_NAME:
                print("artifact skipped (its name): " + printable(name, 200), file=sys.stderr)
            else:
                found.append((name, entry.path))
    found.sort()
    if len(found) > MAX_ARTIFACTS:
        print(f"artifacts skipped: {len(found) - MAX_ARTIFACTS} beyond the first {MAX_ARTIFACTS}", file=sys.stderr)
    return found[:MAX_ARTIFACTS]


def read_chunks(path):
    """The file's bytes in FRAME_DATA pieces, opened without following a symlink."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, "rb") as stream:
        while True:
            chunk = stream.read(FRAME_DATA)
            if not chunk:
                return
            yield chunk


def send_artifacts():
    """Print every artifact's frames on stdout; return the manifest for the reward event."""
    import base64  # noqa: PLC0415 - after `ready`: the measured import phase stays the guide's

    manifest = []
    for name, path in artifact_files(ARTIFACTS):
        digest, size = hashlib.sha256(), 0
        for chunk in read_chunks(path):
            digest.update(chunk)
            size += len(chunk)
        sha256, total = digest.hexdigest(), max(1, -(-size // FRAME_DATA))
        label = base64.urlsafe_b64encode(name.encode()).decode()
        chunks = read_chunks(path) if size else iter([b""])
        for seq, chunk in enumerate(chunks):
            data = base64.b64encode(chunk).decode()
            print(f"rl-demo-artifact 1 {seq} {total} {sha256} {label} {data}")
        sys.stdout.flush()
        manifest.append({"name": name, "bytes": size, "sha256": sha256})
    return manifest


def episode(fields):
    """Fill in the reward event's fields; raise EpisodeFailed (or anything) for reward 0."""
    timeout = test_timeout()
    CODE_FILE.write_text(BUGGY_SOURCE, encoding="utf-8")
    WORKSPACE.joinpath("test_shipping.py").write_bytes(TEST_SOURCE.encode())
    emit(
        "ready",
        process_started_at=PROCESS_STARTED_AT,
        kernel_booted_at=KERNEL_BOOTED_AT,
        proc_clocks_disagree=PROC_CLOCKS_DISAGREE,
        first_statement_at=STARTED_AT,
        imports_done_at=IMPORTS_DONE_AT,
    )
    try:
        baseline = run_tests(timeout)
    except EpisodeFailed as failure:
        raise EpisodeFailed("baseline: " + failure.reason) from None
    fields["baseline_exit"] = baseline.exit_code
    source = CODE_FILE.read_text(encoding="utf-8")
    fixed = agent_action(source)
    CODE_FILE.write_text(fixed, encoding="utf-8")
    save_patch(source, fixed)
    test_file = WORKSPACE.joinpath("test_shipping.py")
    unchanged_before = file_sha256(test_file) == TEST_SHA256
    try:
        run = run_tests(timeout)
    except EpisodeFailed as failure:
        if unchanged_before:
            raise
        fields["tests_output"] = failure.output
        raise EpisodeFailed("test file changed") from None
    unchanged = unchanged_before and file_sha256(test_file) == TEST_SHA256
    fields["tests_exit"] = run.exit_code
    fields["tests_output"], _ = decode(run.stderr)
    write_artifact("tests-output.txt", run.stderr)  # whole: the reward event's copy may be trimmed
    fields["reward"], reason, fields["tests"], fields["modules"] = grade(run, unchanged)
    if reason is not None:
        fields["reason"] = reason


def main():
    fields = {"reward": 0, "baseline_exit": None, "tests_exit": None, "tests_output": "", "tests": {}, "modules": {}}
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        episode(fields)
    except EpisodeFailed as failure:
        fields["reward"], fields["reason"] = 0, printable(failure.reason, MAX_REASON)
        fields["tests_output"] = fields["tests_output"] or failure.output
    except Terminated as error:
        fields["reward"], fields["reason"] = 0, str(error)
    except BaseException as error:  # whatever happens, the episode ends with a reward event
        fields["reward"] = 0
        fields["reason"] = printable(f"worker error: {type(error).__name__}: {error}", MAX_REASON)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if fields["reward"] != 1:
        fields["reward"] = 0
        fields.setdefault("reason", "no reward")
    try:
        if os.environ.get("RL_DEMO_MAX_ARTIFACT_BYTES") != "0":  # --max-artifact-bytes 0: none wanted
            fields["artifacts"] = send_artifacts()
    except OSError as error:  # none listed: the client then refuses any frame already sent
        print("artifacts not sent: " + printable(error, MAX_REASON), file=sys.stderr)
    emit("reward", **fields)
    if fields["baseline_exit"] == 0:
        print("baseline must fail the boundary test", file=sys.stderr)
        return 1
    if fields["reward"] != 1:
        print("patched code failed its tests: " + fields["reason"], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


# A minimal custom worker (`show-worker --template`): the starting point for `run --worker`.
# The README's "Plugging in a real model" explains the protocol it follows.
WORKER_TEMPLATE = r'''"""One episode of your own: read this episode's task, act, emit `ready` and `reward`.

    rl-batch-demo run --worker my_worker.py --tasks tasks.jsonl --output DIR

The event protocol (what rl-batch-demo checks):
* one `ready` event once the environment is prepared, then one `reward` event;
* each carries `event`, `at` (time.time() on the node) and `episode_id` (the pod's name,
  from the EPISODE_ID environment variable);
* `reward` is a finite number, int or float, never a boolean; every other field of the reward
  event is kept as the episode's `info` in DIR/rewards.jsonl (keep it small: it is capped);
* events are JSON lines on stdout and, all of them, in the termination message
  (/dev/termination-log, at most 4096 bytes; when they do not fit, leave it empty and the log
  alone counts), so that one `kubectl get pods` can return every reward;
* exit 0 after the reward event, whatever the reward: a crash, a non-zero exit, a restart or a
  missing reward event makes the episode invalid (an infrastructure failure), not a low reward.

Artifacts (a patch, a trajectory): write files under $RL_DEMO_ARTIFACTS; send_artifacts() prints
each as frames on stdout (lines "rl-demo-artifact 1 SEQ TOTAL SHA256 NAME DATA", base64) and
returns the manifest [{name, bytes, sha256}] that the reward event carries as `artifacts`. The
tool saves them as DIR/artifacts/<pod>/<name>, byte for byte, within --max-artifact-bytes (1 MiB
by default) per episode; a missing, altered or unlisted one fails the episode.

Runs as UID 1000 with the standard library of the image's Python; /demo is read-only, the
episode's own emptyDir is /workspace and goes with the pod: send or upload what you keep.
"""

import time

STARTED_AT = time.time()  # before the other imports, so that the figures show their cost

import json  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

IMPORTS_DONE_AT = time.time()
EPISODE_ID = os.environ["EPISODE_ID"]
INDEX = int(os.environ.get("JOB_COMPLETION_INDEX", "0"))  # set by Kubernetes in an Indexed Job
TASKS = pathlib.Path(os.environ.get("RL_DEMO_TASKS", "/demo/tasks.jsonl"))  # from --tasks
WORKSPACE = pathlib.Path(os.environ.get("RL_DEMO_WORKSPACE", "/workspace"))
ARTIFACTS = pathlib.Path(os.environ.get("RL_DEMO_ARTIFACTS", str(WORKSPACE / "artifacts")))
TERMINATION_LOG = pathlib.Path(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"))
TERMINATION_LIMIT = 4096
FRAME_DATA = 24 * 1024  # bytes of an artifact per frame (one log line of about 33 KB)
EVENTS = []


def read_task():
    """Line INDEX (from 0) of /demo/tasks.jsonl: this episode's task; {} without --tasks."""
    if not TASKS.exists():
        return {}
    return json.loads(TASKS.read_text(encoding="utf-8").splitlines()[INDEX])


def emit(event, **fields):
    """One event: a JSON line on stdout, and every event so far in the termination message."""
    record = dict(fields, event=event, at=time.time(), episode_id=EPISODE_ID)
    EVENTS.append(record)
    print(json.dumps(record, sort_keys=True), flush=True)
    text = "".join(json.dumps(each, sort_keys=True) + "\n" for each in EVENTS)
    if len(text.encode()) > TERMINATION_LIMIT:
        text = ""  # Kubernetes would cut it mid-line; an empty message defers to the log
    try:  # noqa: SIM105 (contextlib.suppress would be one more import in the sandbox)
        TERMINATION_LOG.write_text(text)
    except OSError:
        pass  # no termination log outside Kubernetes


def send_artifacts():
    """Each regular file under ARTIFACTS (symlinks skipped, never followed) as frames on stdout,
    sorted by name; returns the manifest for the reward event."""
    import base64  # noqa: PLC0415 - only a worker that sends artifacts needs them
    import hashlib  # noqa: PLC0415 - only a worker that sends artifacts needs them

    files = sorted(
        (path.relative_to(ARTIFACTS).as_posix(), path)
        for path in ARTIFACTS.rglob("*")
        if not path.is_symlink() and path.is_file()  # rglob never enters a symlinked directory
    )
    manifest = []
    for name, path in files:
        data = path.read_bytes()  # small files; stream a large one in FRAME_DATA pieces instead
        sha256, total = hashlib.sha256(data).hexdigest(), max(1, -(-len(data) // FRAME_DATA))
        label = base64.urlsafe_b64encode(name.encode()).decode()
        for seq in range(total):
            chunk = base64.b64encode(data[seq * FRAME_DATA : (seq + 1) * FRAME_DATA]).decode()
            print(f"rl-demo-artifact 1 {seq} {total} {sha256} {label} {chunk}")
        manifest.append({"name": name, "bytes": len(data), "sha256": sha256})
    sys.stdout.flush()
    return manifest


def act(task):
    """The stand-in for your model and its tool calls: here, add the task's two numbers."""
    return task.get("a", 0) + task.get("b", 0)


def grade(task, answer):
    """Your reward rule: (reward, info). info's fields end up in rewards.jsonl."""
    correct = answer == task.get("expected")
    return (1.0 if correct else 0.0), {"answer": answer, "correct": correct}


def main():
    task = read_task()
    WORKSPACE.joinpath("task.json").write_text(json.dumps(task))  # prepare the environment
    emit("ready", process_started_at=STARTED_AT, imports_done_at=IMPORTS_DONE_AT)
    try:
        answer = act(task)
        reward, info = grade(task, answer)
    except Exception as error:  # the episode ran but the work failed: a reward of 0, with the reason
        answer, reward, info = None, 0.0, {"reason": f"{type(error).__name__}: {error}"[:300]}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)  # a trajectory for the trainer: DIR/artifacts/<pod>/
    trajectory = {"task": task, "answer": answer, "reward": reward}
    ARTIFACTS.joinpath("trajectory.json").write_text(json.dumps(trajectory, sort_keys=True))
    emit("reward", reward=reward, artifacts=send_artifacts(), **info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


if __name__ == "__main__":
    raise SystemExit(main())
