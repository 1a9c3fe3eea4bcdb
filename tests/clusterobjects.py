"""Kubernetes objects as a cluster returns them, built consistently for tests.

`make_events`, `make_pod` and `log_of` are the small builders of the unit tests. `Batch` and
`Episode` describe one run's Job, its pods, their events and logs, with timestamps that agree
with each other (Job created <= pod created <= ready <= reward <= container finished), so a
call plan (tests/callplan.py) can answer every kubectl call of a run from one description and
a test can recompute every figure from the same inputs.

Shapes follow what kubectl prints for batch/v1 Jobs and v1 Pods (see tests/fake_kubectl.py
for a fuller simulation): whole-second RFC 3339 times, the Job's selector on its UID label
(`batch.kubernetes.io/controller-uid`, or `controller-uid` before Kubernetes 1.27), the
episode's events as JSON lines in its log and its termination message.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional

import rl_batch_demo as demo

JOB_CREATED = "2026-11-29T10:00:00Z"
JOB_CREATED_AT = demo.parse_timestamp(JOB_CREATED)

RUN_ID = "0123456789ab"  # what the patched new_run_id returns
NAMESPACE = demo.NAMESPACE_PREFIX + RUN_ID
NAMESPACE_UID = "11111111-1111-4111-8111-111111111111"
CONFIGMAP_UID = "33333333-3333-4333-8333-333333333333"
IMAGE_ID = "docker.io/library/python@sha256:" + "5924371973d2eef8" * 4
NODES = ("node-a", "node-b")
TESTS_OUTPUT = (
    "...\n----------------------------------------------------------------------\nRan 3 tests in 0.000s\n\nOK\n"
)


def stamp(epoch: float) -> str:
    """An API server timestamp: whole seconds (truncated), UTC, 'Z'."""
    moment = datetime.datetime.fromtimestamp(int(epoch), tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_events(name: str, ready_at: float, reward_at: float, **reward_fields: Any) -> List[Dict[str, Any]]:
    """The worker's two events, as it prints them."""
    reward = {
        "event": "reward",
        "at": reward_at,
        "episode_id": name,
        "reward": 1,
        "baseline_exit": 1,
        "tests_exit": 0,
        "tests_output": "OK\n",
        "modules": {"test_shipping": dict(demo.BUILTIN_TEST_MODULE)},  # the built-in tests, from the runner's stdin
    }
    reward.update(reward_fields)
    return [
        {
            "event": "ready",
            "at": ready_at,
            "episode_id": name,
            "process_started_at": ready_at - 0.5,
            "imports_done_at": ready_at - 0.01,
        },
        reward,
    ]


def log_of(events: List[Dict[str, Any]]) -> str:
    """Events as the worker writes them to its log and termination message: one JSON line each."""
    return "".join(json.dumps(event, sort_keys=True) + "\n" for event in events)


def pod_log_of(events: List[Dict[str, Any]]) -> demo.PodLog:
    """What the tool keeps of a log that holds these events (their lines, scanned)."""
    return demo.scan_text(log_of(events))


def make_pod(
    name: str = "rollout-abcde",
    created: str = "2026-11-29T10:00:01Z",
    phase: str = "Succeeded",
    exit_code: int = 0,
    restarts: int = 0,
    message: str = "",
    finished: str = "2026-11-29T10:00:04Z",
    started: str = "2026-11-29T10:00:02Z",
) -> Dict[str, Any]:
    """A finished episode pod with the fields validation reads (the unit tests' minimal shape)."""
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed",
        "startedAt": started,
        "finishedAt": finished,
    }
    if message:
        terminated["message"] = message
    return {
        "kind": "Pod",
        "metadata": {"name": name, "creationTimestamp": created, "labels": {demo.UID_LABEL: "job-uid"}},
        "spec": {"nodeName": "node-a", "overhead": {"cpu": "250m", "memory": "768Mi"}},
        "status": {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T10:00:01Z"}],
            "containerStatuses": [
                {
                    "name": "episode",
                    "imageID": "docker.io/library/python@sha256:00",
                    "restartCount": restarts,
                    "state": {"terminated": terminated},
                }
            ],
        },
    }


def event_object(
    involved_kind: str, involved_name: str, reason: str, message: str, at: float, kind: str = "Normal", index: int = 0
) -> Dict[str, Any]:
    """A core/v1 Event about an object of the run's namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{involved_name}.{index:016x}",
            "namespace": NAMESPACE,
            "creationTimestamp": stamp(at),
        },
        "involvedObject": {"kind": involved_kind, "name": involved_name, "namespace": NAMESPACE},
        "reason": reason,
        "message": message,
        "type": kind,
        "count": 1,
        "firstTimestamp": stamp(at),
        "lastTimestamp": stamp(at),
    }


@dataclasses.dataclass
class Episode:
    """One pod of the Job and what its worker reported; faults edit these fields."""

    name: str
    node: str
    created: float  # API server clock, whole seconds
    started: float  # container startedAt
    finished: float  # container finishedAt
    ready_at: float  # node clock, sub-second
    reward_at: float
    phase: str = "Succeeded"
    exit_code: int = 0
    restarts: int = 0
    log: str = ""  # the container log
    message: str = ""  # the termination message ("" when the runtime left none)
    evicted: bool = False
    deleted_at: Optional[float] = None  # deletionTimestamp: deleted mid-run
    labels: Dict[str, str] = dataclasses.field(default_factory=dict)
    uid: str = "44444444-4444-4444-8444-000000000000"
    index: Optional[int] = None  # its completion index (every measured Job is Indexed); None: a stray pod
    unlabelled: bool = False  # the index as an annotation only, no label (Kubernetes before 1.28)

    @property
    def events(self) -> List[Dict[str, Any]]:
        """The events of the log (what the figures are computed from)."""
        return demo.parse_events(self.log)


class Batch:
    """One Job of N episodes as the cluster reports it: created at `created`, its pods started
    `parallelism` at a time, each taking 2 s from creation to finish."""

    def __init__(
        self,
        count: int = 10,
        parallelism: Optional[int] = None,
        job_name: str = demo.JOB_NAME,
        job_uid: str = "22222222-2222-4222-8222-000000000001",
        created: float = JOB_CREATED_AT,
        runtime: Optional[str] = "cube",
        deadline_seconds: int = demo.DEFAULT_JOB_DEADLINE_SECONDS,
        legacy_labels: bool = False,
        image: str = demo.DEFAULT_IMAGE,
        infra_retries: int = 0,
    ) -> None:
        self.count = count
        self.infra_retries = infra_retries  # --infra-retries: an Indexed Job whose lost pods are replaced
        self.image = image  # --image: the Job's, and its pods' as the API server stores them
        self.parallelism = count if parallelism is None else parallelism
        self.job_name = job_name
        self.uid = job_uid
        self.created = created
        self.runtime = runtime
        self.deadline_seconds = deadline_seconds
        self.legacy_labels = legacy_labels
        self.episodes = [self._episode(index) for index in range(count)]
        self.final: Optional[Dict[str, Any]] = None  # the Job's last state, when not derived from the episodes

    # -- the objects ----------------------------------------------------------------

    @property
    def uid_label(self) -> str:
        return demo.LEGACY_UID_LABEL if self.legacy_labels else demo.UID_LABEL

    @property
    def selector(self) -> str:
        return f"{self.uid_label}={self.uid}"

    def _episode(self, index: int) -> Episode:
        slot = index // self.parallelism  # parallelism 1: one after another
        created = self.created + 1 + 2 * slot
        name = f"{self.job_name}-p{index:04d}"
        ready_at = created + 1.25 + 0.01 * index
        reward_at = ready_at + 0.5
        episode = Episode(
            name=name,
            node=NODES[index % len(NODES)],
            created=created,
            started=created + 1,
            finished=created + 2,
            ready_at=ready_at,
            reward_at=reward_at,
            uid=f"44444444-4444-4444-8444-{index:012d}",
        )
        episode.log = episode.message = log_of(make_events(name, ready_at, reward_at, tests_output=TESTS_OUTPUT))
        episode.index = index  # every measured Job is Indexed (rl_batch_demo.round_job_manifest)
        return episode

    def add_episode(self, index: Optional[int] = None) -> Episode:
        """One pod more than the Job asked for (a replacement, or a stray); `index`: the
        completion index it replaces a pod of (with infra_retries)."""
        episode = self._episode(len(self.episodes))
        episode.index = index
        self.episodes.append(episode)
        return episode

    def manifest(self, namespace: str = NAMESPACE, image: Optional[str] = None) -> Dict[str, Any]:
        """The Job exactly as the tool submits it (its own builder, with this batch's settings)."""
        return demo.job_manifest(
            name=self.job_name,
            namespace=namespace,
            run_id=RUN_ID,
            count=self.count,
            parallelism=self.parallelism,
            image=self.image if image is None else image,
            runtime=self.runtime,
            deadline_seconds=self.deadline_seconds,
            indexed=True,
            infra_retries=self.infra_retries,
            launcher=False,  # the built-in worker is the pod's command; --worker's has the launcher
            # each pod's own deadline, --episode-timeout's default for this Job's deadline
            episode_deadline_seconds=settings_for(
                self.count, deadline_seconds=self.deadline_seconds
            ).episode_deadline_seconds,
        )

    def job(self, status: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The Job as the API server returns it: the manifest plus uid, creation time, selector."""
        job = copy.deepcopy(self.manifest())
        metadata = job["metadata"]
        metadata.update(uid=self.uid, creationTimestamp=stamp(self.created), resourceVersion="1000", generation=1)
        uid_labels = {demo.LEGACY_UID_LABEL: self.uid, "job-name": self.job_name}
        if not self.legacy_labels:
            uid_labels.update({demo.UID_LABEL: self.uid, "batch.kubernetes.io/job-name": self.job_name})
        job["spec"]["selector"] = {"matchLabels": {self.uid_label: self.uid}}
        job["spec"]["template"]["metadata"]["labels"].update(uid_labels)
        job["status"] = status or {}
        return job

    def job_running(self) -> Dict[str, Any]:
        return self.job({"active": min(self.parallelism, self.count), "ready": 0, "startTime": stamp(self.created)})

    def job_complete(self) -> Dict[str, Any]:
        done = stamp(max(episode.finished for episode in self.episodes) + 1)
        retried: Dict[str, Any] = {}
        if self.infra_retries:  # the lost pods counted (podFailurePolicy Count), every index complete
            lost = sum(1 for episode in self.episodes if episode.phase == "Failed")
            retried = {"completedIndexes": f"0-{self.count - 1}" if self.count > 1 else "0", "failedIndexes": ""}
            if lost:
                retried["failed"] = lost
        return self.job(
            {
                **retried,
                "startTime": stamp(self.created),
                "completionTime": done,
                "succeeded": self.count,
                "ready": 0,
                "conditions": [
                    # as a 1.31 job controller writes them: no reason, no message (REAL_CLUSTER_FACTS N5)
                    self.condition("SuccessCriteriaMet", "", "", done),
                    self.condition("Complete", "", "", done),
                ],
            }
        )

    def final_job(self) -> Dict[str, Any]:
        """The Job once it ended: Failed (backoffLimit 0) as soon as one episode failed, else Complete."""
        if self.final is not None:
            return self.final
        lost = self.infra_retries and all(episode.evicted for episode in self.episodes if episode.phase == "Failed")
        if not lost and any(episode.phase == "Failed" and episode.deleted_at is None for episode in self.episodes):
            return self.job_failed("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        return self.job_complete()

    def job_failed(self, reason: str, message: str) -> Dict[str, Any]:
        at = stamp(max(episode.finished for episode in self.episodes) + 1)
        failed = sum(1 for episode in self.episodes if episode.phase == "Failed")
        return self.job(
            {
                "startTime": stamp(self.created),
                "failed": failed,
                "succeeded": self.count - failed,
                "conditions": [
                    self.condition("FailureTarget", reason, message, at),
                    self.condition("Failed", reason, message, at),
                ],
            }
        )

    @staticmethod
    def condition(kind: str, reason: str, message: str, at: str) -> Dict[str, Any]:
        """A condition as the API server serves it: an empty reason or message left out (omitempty)."""
        return {
            "type": kind,
            "status": "True",
            **({"reason": reason} if reason else {}),
            **({"message": message} if message else {}),
            "lastProbeTime": at,
            "lastTransitionTime": at,
        }

    def pod(self, episode: Episode, stage: str = "final") -> Dict[str, Any]:
        """The pod at one stage of its life: "pending", "running" or "final"."""
        labels = {
            demo.RUN_LABEL: RUN_ID,
            "app": demo.APP_LABEL_VALUE,
            demo.LEGACY_UID_LABEL: self.uid,
            "job-name": self.job_name,
        }
        if not self.legacy_labels:
            labels.update({demo.UID_LABEL: self.uid, "batch.kubernetes.io/job-name": self.job_name})
        labels.update(episode.labels)
        if episode.index is not None and not episode.unlabelled:
            labels[demo.INDEX_LABEL] = str(episode.index)
        metadata: Dict[str, Any] = {
            "name": episode.name,
            "generateName": f"{self.job_name}-",
            "namespace": NAMESPACE,
            "uid": episode.uid,
            "creationTimestamp": stamp(episode.created),
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": self.job_name, "uid": self.uid, "controller": True}
            ],
        }
        if episode.index is not None:
            metadata["annotations"] = {demo.INDEX_ANNOTATION: str(episode.index)}
        spec: Dict[str, Any] = copy.deepcopy(self.manifest()["spec"]["template"]["spec"])
        if self.runtime is not None:
            spec["overhead"] = {"cpu": "250m", "memory": "768Mi"}
        status: Dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
        if stage == "pending":
            return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}
        spec["nodeName"] = episode.node
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(episode.created)}
        status.update(startTime=stamp(episode.created), conditions=[scheduled])
        container: Dict[str, Any] = {
            "name": demo.CONTAINER_NAME,
            "image": self.image,
            "imageID": IMAGE_ID,
            "restartCount": 0,
        }
        if stage == "running":
            status["phase"] = "Running"
            container.update(ready=True, started=True, state={"running": {"startedAt": stamp(episode.started)}})
            status["containerStatuses"] = [container]
            return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}
        status["phase"] = episode.phase
        terminated: Dict[str, Any] = {
            "exitCode": episode.exit_code,
            "reason": "Completed" if episode.exit_code == 0 else "Error",
            "startedAt": stamp(episode.started),
            "finishedAt": stamp(episode.finished),
        }
        if episode.message:
            terminated["message"] = episode.message
        container.update(ready=False, started=False, restartCount=episode.restarts, state={"terminated": terminated})
        status["containerStatuses"] = [container]
        if episode.evicted:
            status.update(reason="Evicted", message="The node was low on resource: memory.")
            status["conditions"].insert(
                0,
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": "The node was low on resource: memory.",
                    "lastTransitionTime": stamp(episode.finished),
                },
            )
            del status["containerStatuses"]
        if episode.deleted_at is not None:
            metadata["deletionTimestamp"] = stamp(episode.deleted_at)
            metadata["deletionGracePeriodSeconds"] = 30
            status["conditions"].insert(
                0,
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                    "lastTransitionTime": stamp(episode.deleted_at),
                },
            )
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}

    def pods(self) -> List[Dict[str, Any]]:
        return [self.pod(episode) for episode in self.episodes]

    def events(self) -> List[Dict[str, Any]]:
        """The namespace's events of this Job: one SuccessfulCreate, Scheduled and Pulled (the
        image already present) per pod."""
        events = []
        for index, episode in enumerate(self.episodes):
            events.append(
                event_object(
                    "Job",
                    self.job_name,
                    "SuccessfulCreate",
                    f"Created pod: {episode.name}",
                    episode.created,
                    index=2 * index,
                )
            )
            events.append(
                event_object(
                    "Pod",
                    episode.name,
                    "Scheduled",
                    f"Successfully assigned {NAMESPACE}/{episode.name} to {episode.node}",
                    episode.created,
                    index=2 * index + 1,
                )
            )
            pulled = event_object(
                "Pod",
                episode.name,
                "Pulled",
                f'Container image "{self.image}" already present on machine',
                episode.started,
                index=1000 + index,
            )
            pulled["involvedObject"].update(uid=episode.uid, fieldPath=f"spec.containers{{{demo.CONTAINER_NAME}}}")
            events.append(pulled)
        return events

    def prefixed_logs(self, episodes: Optional[List[Episode]] = None) -> str:
        """`kubectl logs -l ... --prefix` output: every line tagged with its pod and container."""
        return "".join(
            f"[pod/{episode.name}/{demo.CONTAINER_NAME}] {line}\n"
            for episode in (self.episodes if episodes is None else episodes)
            for line in episode.log.splitlines()
        )

    def episode(self, index: int) -> Episode:
        return self.episodes[index]


def namespace_object(name: str = NAMESPACE, uid: str = NAMESPACE_UID, run_id: str = RUN_ID) -> Dict[str, Any]:
    """The run's namespace as the API server returns it."""
    namespace = demo.namespace_manifest(name, run_id)
    namespace["metadata"].update(uid=uid, creationTimestamp=stamp(JOB_CREATED_AT - 2), resourceVersion="900")
    namespace["metadata"]["labels"]["kubernetes.io/metadata.name"] = name
    namespace["spec"] = {"finalizers": ["kubernetes"]}
    namespace["status"] = {"phase": "Active"}
    return namespace


def serviceaccount_object(namespace: str = NAMESPACE) -> Dict[str, Any]:
    """The namespace's default ServiceAccount, as the serviceaccounts controller creates it."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "default",
            "namespace": namespace,
            "uid": "66666666-6666-4666-8666-666666666666",
            "creationTimestamp": stamp(JOB_CREATED_AT - 2),
            "resourceVersion": "901",
        },
    }


def configmap_object() -> Dict[str, Any]:
    configmap = demo.configmap_manifest(NAMESPACE, RUN_ID, demo.WORKER_SOURCE, None)
    configmap["metadata"].update(uid=CONFIGMAP_UID, creationTimestamp=stamp(JOB_CREATED_AT - 1), resourceVersion="950")
    return configmap


def runtimeclass_object(name: str = "cube") -> Dict[str, Any]:
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name, "uid": "55555555-5555-4555-8555-555555555555"},
        "handler": name,
        "overhead": {"podFixed": {"cpu": "250m", "memory": "768Mi"}},
    }


def node_object(name: str, cpu: str = "64", memory: str = "256Gi") -> Dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "ephemeral-storage": "100Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def access_reviews(
    namespace: str, with_runtimeclass: bool, denied: tuple = (), lists_nodes: bool = False
) -> List[Dict[str, Any]]:
    """The SelfSubjectAccessReviews as the server answers them; `denied` names (verb, resource)."""
    reviews = demo.access_review_list(namespace, with_runtimeclass, lists_nodes=lists_nodes)["items"]
    answered = []
    for review in reviews:
        attributes = review["spec"]["resourceAttributes"]
        resource = attributes["resource"] + (f"/{attributes['subresource']}" if attributes.get("subresource") else "")
        allowed = (attributes["verb"], resource) not in denied
        answered.append(dict(review, status={"allowed": allowed} if allowed else {"allowed": False, "reason": ""}))
    return answered


def kubernetes_list(items: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def check_rows_and_batch_figures(
    case: unittest.TestCase, results: Dict[str, Any], expected_rows: Dict[str, Dict[str, Any]], out: Path
) -> None:
    """results.json against rows a test recomputed from what the cluster saw (a call plan's batch
    or the fake's record): every expected field of every row, then the batch figures (startup
    percentiles, whole-batch times, nodes, image IDs, phases) and the timeline's presence."""
    case.assertEqual(len(results["pods"]), len(expected_rows))
    for row in results["pods"]:
        for key, value in expected_rows[row["pod"]].items():
            if isinstance(value, float):
                case.assertAlmostEqual(row[key], value, places=6, msg=key)
            else:
                case.assertEqual(row[key], value, key)
    rows = list(expected_rows.values())
    startup = [row["pod_to_ready_seconds"] for row in rows]
    case.assertAlmostEqual(results["pod_to_ready_p50_seconds"], demo.percentile(startup, 0.5))
    case.assertAlmostEqual(results["pod_to_ready_p95_seconds"], demo.percentile(startup, 0.95))
    case.assertAlmostEqual(results["pod_to_ready_max_seconds"], max(startup))
    case.assertAlmostEqual(results["batch_to_all_ready_seconds"], max(row["batch_to_ready_seconds"] for row in rows))
    case.assertAlmostEqual(results["batch_to_all_rewards_seconds"], max(row["batch_to_reward_seconds"] for row in rows))
    nodes: Dict[str, int] = {}
    for row in rows:
        nodes[row["node"]] = nodes.get(row["node"], 0) + 1
    case.assertEqual(results["nodes"], nodes)
    case.assertEqual(results["image_ids"], sorted({row["image_id"] for row in rows}))
    case.assertEqual(set(results["phases"]), set(demo.PHASES))
    case.assertEqual(results["phases"]["pod_to_ready_seconds"]["p50"], results["pod_to_ready_p50_seconds"])
    case.assertEqual(results["phases"]["pod_to_ready_seconds"]["samples"], len(rows))
    case.assertTrue((out / "timeline.svg").read_text().startswith("<?xml"))


def results_of(rows: List[demo.EpisodeRow], **fields: Any) -> Dict[str, Any]:
    """A results.json as `run` writes it for these rows (the same figure functions as
    assemble_results), with the run's own fields set to plain values; `fields` overrides them."""
    counts = demo.image_cache_counts(rows)
    results = demo.batch_figures(rows)
    results.update(
        namespace="agc-rl-x",
        context="ctx",
        runtime="cube",
        image="img",
        parallelism=1,
        rounds=1,
        client_job_complete_seconds=9.0,
        phases=demo.phase_table(rows),
        nodes=demo.node_spread(rows),
        image_ids=["sha"],
        image_cache=counts,
        cache_state=demo.cache_state_of(counts),
        pods=[demo.pod_row(row) for row in rows],
    )
    results.update(fields)
    return results


def settings_for(count: int, **extra: Any) -> demo.RunSettings:
    """A run's settings for `count` episodes as the tests need them; `extra` sets any other field."""
    fields: Dict[str, Any] = {
        "output": Path("DIR"),
        "count": count,
        "parallelism": count,
        "rounds": 1,
        "image": demo.DEFAULT_IMAGE,
        "runtime": None,
        "deadline_seconds": 240,
        "cleanup_policy": "never",
        "thresholds": {},
        "quiet": True,
        "json_summary": False,
        "kubectl_timeout": 60.0,
        "worker_source": demo.WORKER_SOURCE,
    }
    return demo.RunSettings(**{**fields, **extra})
