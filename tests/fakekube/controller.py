"""The simulated Job controller, scheduler and kubelet.

``create`` of a Job starts one detached process per Job (tests/fake_kubectl.py with env
``FAKE_KUBECTL_CONTROLLER``) that runs ``JobController``.  It follows the store's change log
(no re-reading of the store), and plays:

* the Job controller: creates pods one by one (never more than ``parallelism`` at once, a
  ``SuccessfulCreate`` event each), refuses pods that violate the namespace's ``restricted``
  Pod Security level or name a missing RuntimeClass (``FailedCreate``), counts succeeded and
  failed pods into the Job's status, and ends the Job with ``SuccessCriteriaMet`` + ``Complete``,
  or ``FailureTarget`` + ``Failed`` (``BackoffLimitExceeded``, ``DeadlineExceeded``);
* the scheduler: binds each pod to a ready, schedulable node with room for its requests plus
  the RuntimeClass overhead, round robin (``Scheduled``), or leaves it Pending
  (``FailedScheduling``);
* the kubelet: mounts the ConfigMap holding ``episode.py``, runs it for real as a local
  process with the container's env (fieldRefs resolved) and a workspace, writes its output to
  ``logs/NS/POD.log``, and publishes the exit code and termination message (``Pulled``,
  ``Created``, ``Started``; ``Killing`` for a replaced pod).

Episode fault modes (faults.py) alter what the worker produced or what happens to its pod.
The process exits when the Job is finished or gone, when its namespace is being deleted,
when the state directory disappears, or after ``FAKE_KUBECTL_CONTROLLER_MAX_SECONDS``
(default 600).  It records ``controllers/NS__JOB.stats.json``: the peak number of episodes
running at once, the pods in creation order, and when Complete became visible."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .apiserver import (
    SIDECAR,
    default_pod_spec,
    job_labels,
    namespace_enforces_restricted,
    pod_security_violations,
    settle_serviceaccounts,
)
from .common import (
    CONTROLLER_MAX_ENV,
    JOB_TRACKING_FINALIZER,
    POD_PIDS_FILE,
    POLL_SECONDS,
    RUNTIME_NAME,
    STATE_ENV,
    KubectlError,
    append_line,
    deep_copy,
    log_path,
    new_uid,
    now_ts,
    parse_quantity,
    write_json_atomic,
)
from .containerlog import termination_message
from .faults import (
    MAX_TERMINATION_MESSAGE,
    SIGTERM_IGNORING_WORKER,
    STAND_IN_ARTIFACT_WORKER,
    STAND_IN_WORKER,
    apply_episode_faults,
    episode_modes,
    killed_mid_run,
    load_faults,
)
from .kubelet import record_runtime_operations
from .store import Store, Tx

POD_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
JOB_CONTROLLER_NAME = "kubernetes.io/job-controller"  # spec.managedBy of the Jobs the job controller runs
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
FOLLOWED_KINDS = {"Job", "Namespace", "Pod", "Node", "RuntimeClass", "ConfigMap", "ServiceAccount"}
SPAM_BURST = 25  # client-go events_cache.go defaultSpamBurst (refilled at 1 per 300 s: never, in a test)
SERVICEACCOUNT_RETRY_SECONDS = 0.15  # ServiceAccount admission's live lookups: rand(100..200) ms apart


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(POD_NAME_CHARS) for _ in range(n))


def job_condition(kind: str, reason: str, message: str, t: str) -> dict:
    """A Job status condition as the job controller writes it; an empty reason or message is
    left out, as Go's encoding/json leaves out an empty `omitempty` string (batch/v1 JobCondition)."""
    condition = {"type": kind, "status": "True", "reason": reason, "message": message}
    return {
        **{key: value for key, value in condition.items() if value},
        "lastProbeTime": t,
        "lastTransitionTime": t,
    }


PREEMPTED_POD_LINGERS = 0.3  # seconds a preempted pod stays Terminating, its end reported, before it is gone


class PodSim:
    """One pod of a Job as the job controller + scheduler + kubelet see it."""

    def __init__(self, index: int, name: str, modes: List[str]) -> None:
        self.index = index
        self.name = name
        self.modes = modes
        self.stage = "created"  # created|unschedulable|scheduled|running|finishing|done
        self.outcome = ""  # Succeeded|Failed|Replaced
        self.proc: Optional[subprocess.Popen] = None
        self.node: Optional[str] = None
        self.started = 0.0
        self.finished_worker = 0.0
        self.next_try = 0.0
        self.workdir = ""
        self.mount_reported = False
        self.completion_index: Optional[int] = None  # an Indexed Job's pod
        # The Job's podFailurePolicy's verdict on this pod once it Failed (match_pod_failure_policy):
        # the matched rule's action (None: no rule matched) and whether it counts as a failure.
        self.policy_action: Optional[str] = None
        self.counted = True
        self.finished_at = 0.0  # when it became terminal (the per-index backoff counts from it)
        self.created_at = 0.0
        self.deadline_kill_at: Optional[float] = None  # past its own activeDeadlineSeconds: SIGKILL then
        self.record: Dict[str, Any] = {}  # what the simulation decided for this pod (stats.json "records")
        self.lost_at = 0.0  # fault node_lost: when its node's kubelet stopped answering
        self.taint_deleted = False  # the taint manager has deleted it (it stays Running: no kubelet confirms)


class JobController:
    def __init__(self, state: str, namespace: str, job: str, uid: str, token: str, faults: dict) -> None:
        self.state = state
        self.ns = namespace
        self.job_name = job
        self.uid = uid
        self.token = token
        self.faults = faults
        self.store = Store(state)
        self.view = self.store.follow(FOLLOWED_KINDS)
        self.sims: List[PodSim] = []
        self.requests: Dict[str, Dict[str, float]] = {}  # pod uid -> its cpu/memory requests
        self.created = 0
        self.peak = 0
        self.started = time.time()
        self.first_sync = True
        self.max_seconds = float(os.environ.get(CONTROLLER_MAX_ENV, "600"))
        self.next_create_try = 0.0
        self.failed_creates_reported: set = set()  # the causes of FailedCreate events written
        self.accounts_seen: set = set()  # ServiceAccounts found once (they are never deleted mid-run)
        self.rr = 0
        self.image_ids: Dict[str, str] = {}
        self.stats_path = os.path.join(state, "controllers", f"{namespace}__{job}.stats.json")
        self.pod_names: List[str] = []
        self.completed_at: Optional[float] = None
        self.decided_at: Optional[float] = None  # SuccessCriteriaMet visible: the decision, before Complete
        self.synced: Optional[Tuple[int, int, int, int]] = None  # the counts sync_status last wrote
        self.spam_counts: Dict[Tuple[str, str, str, str], int] = {}  # events written per source and object
        self.failing: Optional[Tuple[str, str]] = None  # (reason, message) of a FailureTarget, until Failed
        self.suspended = False  # spec.suspend: a queue has not admitted the Job yet

    # -- helpers -------------------------------------------------------------

    def job(self) -> Optional[dict]:
        j = self.view.get("Job", self.ns, self.job_name)
        if j is None or j["metadata"].get("uid") != self.uid:
            return None
        return j

    def write_stats(self) -> None:
        write_json_atomic(
            self.stats_path,
            {
                "namespace": self.ns,
                "job": self.job_name,
                "uid": self.uid,
                "max_concurrent": self.peak,
                "pods": self.pod_names,
                "completed_at": self.completed_at,
                "decided_at": self.decided_at,
                "records": {s.name: s.record for s in self.sims},
            },
        )

    def event(
        self,
        tx: Tx,
        involved: dict,
        reason: str,
        message: str,
        etype: str = "Normal",
        component: str = "job-controller",
        field_path: Optional[str] = None,
        event_time: Optional[float] = None,
    ) -> None:
        md = involved["metadata"]
        # client-go's event spam filter: 25 events per source and object, then one per 5 minutes
        # (tools/record/events_cache.go, getSpamKey and defaultSpamBurst): a big Job's SuccessfulCreate
        # events stop after 25, and so does any later event about the Job (W13).
        spam_key = (component, involved["kind"], md["name"], md.get("uid", ""))
        self.spam_counts[spam_key] = self.spam_counts.get(spam_key, 0) + 1
        if self.spam_counts[spam_key] > SPAM_BURST:
            return
        t = now_ts(tx.now)
        inv_ref = {
            "kind": involved["kind"],
            "name": md["name"],
            "namespace": md.get("namespace", self.ns),
            "uid": md.get("uid", ""),
            "apiVersion": involved.get("apiVersion", "v1"),
            "resourceVersion": md.get("resourceVersion", ""),
        }
        if field_path:
            inv_ref["fieldPath"] = field_path
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{md['name']}.{os.urandom(8).hex()}",
                "namespace": self.ns,
                "creationTimestamp": t,
                "uid": new_uid(),
            },
            "involvedObject": inv_ref,
            "reason": reason,
            "message": message,
            "type": etype,
            "firstTimestamp": t,
            "lastTimestamp": t,
            "count": 1,
            "source": {"component": component}
            if component != "kubelet"
            else {"component": "kubelet", "host": self.sim_node_for(md["name"]) or ""},
            "reportingComponent": component,
            "reportingInstance": "",
        }
        if event_time is not None:  # written through events.k8s.io (the scheduler): eventTime, no timestamps
            ev.update(eventTime=micro_ts(event_time), firstTimestamp=None, lastTimestamp=None, action="Binding")
            ev["reportingInstance"] = f"{component}-{self.sim_node_for(md['name']) or ''}"
            ev["source"] = {}
            ev.pop("count")
        tx.put(ev)

    def sim_node_for(self, pod: str) -> Optional[str]:
        for s in self.sims:
            if s.name == pod:
                return s.node
        return None

    def image_id(self, image: str, node: Optional[str] = None) -> str:
        """The imageID a node's runtime reports: the repository with the digest it resolved.
        An image given by digest resolves to that digest; a tag resolves to one digest per
        cluster, except on the nodes of the ``mixed_digests`` fault, whose copy of the tag
        is another build (another digest)."""
        if "@sha256:" in image:
            repo, digest = image.split("@", 1)
            return f"{self.image_id(repo).split('@', 1)[0]}@{digest}"
        if node is not None and node in (self.faults.get("mixed_digests") or []):
            repo, digest = self.image_id(image).split("@sha256:", 1)
            return f"{repo}@sha256:{hashlib.sha256((digest + node).encode()).hexdigest()}"
        if image not in self.image_ids:
            repo = image.split("@", maxsplit=1)[0]
            last = repo.rsplit("/", 1)[-1]
            if ":" in last:
                repo = repo[: len(repo) - len(last)] + last.split(":")[0]
            first = repo.split("/")[0]
            if "/" not in repo:
                repo = "docker.io/library/" + repo
            elif "." not in first and ":" not in first and first != "localhost":
                repo = "docker.io/" + repo
            self.image_ids[image] = f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"
        return self.image_ids[image]

    def update_pod(self, sim: PodSim, fn: Callable[[Tx, dict], None]) -> bool:
        """Apply ``fn`` to the stored pod; False if the pod is gone."""
        with self.store.tx() as tx:
            pod = tx.get("Pod", self.ns, sim.name)
            if pod is None:
                return False
            fn(tx, pod)
            tx.put(pod)
            return True

    # -- main loop -------------------------------------------------------------

    def run(self) -> None:
        job = self.job()
        if job is None:
            return
        spec = job["spec"]
        self.completions = int(spec.get("completions", 1))
        self.parallelism = int(spec.get("parallelism", 1))
        self.indexed = spec.get("completionMode") == "Indexed"
        self.per_index = spec.get("backoffLimitPerIndex")
        # The API server's default for backoffLimit: 6, or MaxInt32 when backoffLimitPerIndex is
        # set (pkg/apis/batch/v1/defaults.go, SetDefaults_Job).
        self.backoff_limit = int(spec.get("backoffLimit", 6 if self.per_index is None else 2**31 - 1))
        self.max_failed_indexes = spec.get("maxFailedIndexes")
        self.pod_failure_policy = spec.get("podFailurePolicy")
        # The delay before an index's pod that failed is replaced: 10 s, doubled for each further
        # failure up to 10 minutes (pkg/controller/job/job_controller.go DefaultJobPodFailureBackOff,
        # MaxJobPodFailureBackOff; backoff_utils.go getRemainingTimePerIndex); fault
        # ``pod_failure_backoff_seconds`` shortens the first step for the tests.
        self.failure_backoff = float(self.faults.get("pod_failure_backoff_seconds", 10.0))
        deadline = self.faults.get("deadline_seconds", spec.get("activeDeadlineSeconds"))
        self.deadline = float(deadline) if deadline is not None else None
        self.template = job["spec"]["template"]
        self.write_stats()
        if spec.get("managedBy", JOB_CONTROLLER_NAME) != JOB_CONTROLLER_NAME:
            return  # another controller's Job (MultiKueue): the job controller leaves it alone (job_controller.go)
        self.suspended = bool(spec.get("suspend"))
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            j["status"] = {
                "active": 0,
                "ready": 0,
                "terminating": 0,
                "uncountedTerminatedPods": {},
                **self.index_status(),
            }
            if self.suspended:  # no pods, no startTime (its deadline does not run) until it is resumed
                t = now_ts(tx.now)
                j["status"]["conditions"] = [job_condition("Suspended", "JobSuspended", "Job suspended", t)]
                self.event(tx, j, "Suspended", "Job suspended")
            else:
                j["status"]["startTime"] = now_ts(self.started)
            tx.put(self.clean_status(j))
        try:
            while True:
                if not os.path.isdir(self.state) or time.time() - self.started > self.max_seconds:
                    return
                if not self.tick():
                    return
                time.sleep(POLL_SECONDS)
        finally:
            for sim in self.sims:
                self.kill(sim)
            self.view.close()

    def tick(self) -> bool:
        self.view.poll()
        job = self.job()
        now = time.time()
        if job is None or job["metadata"].get("deletionTimestamp"):
            return False
        ns_obj = self.view.get("Namespace", None, self.ns)
        if ns_obj is None or ns_obj["metadata"].get("deletionTimestamp"):
            return False
        if self.failing is not None:
            return self.tick_failing(now)
        if self.suspended:
            return self.tick_suspended(job, now)
        # The scheduler and the kubelet act on their own, whatever the Job's deadline: a pod
        # created before it still gets its scheduling attempt (FailedScheduling comes from
        # kube-scheduler, pkg/scheduler/schedule_one.go handleSchedulingFailure).
        for sim in self.sims:
            if sim.stage != "done":
                self.advance(sim, now)
        # The Job controller's first sync sets status.startTime and checks the deadline against
        # it in the same pass, so it always reaches manageJob and creates pods
        # (pkg/controller/job/job_controller.go syncJob: "Job first start", then
        # pastActiveDeadline): however late a loaded machine runs the first tick, it creates pods.
        first_sync, self.first_sync = self.first_sync, False
        if not first_sync and self.deadline is not None and now - self.started >= self.deadline:
            self.finish_failed("DeadlineExceeded", "Job was active longer than specified deadline")
            return True  # FailureTarget now, Failed once the pods have stopped (tick_failing)
        running = sum(1 for s in self.sims if s.stage in ("running", "finishing"))
        if running > self.peak:
            self.peak = running
            self.write_stats()
        fail_job = next((s for s in self.sims if s.policy_action == "FailJob"), None)
        if fail_job is not None:
            self.finish_failed("PodFailurePolicy", fail_job.record["policy_message"])
            return True
        if self.indexed:
            return self.tick_indexed(now)
        succeeded = sum(1 for s in self.sims if s.outcome == "Succeeded")
        failed = sum(1 for s in self.sims if s.outcome == "Failed" and s.counted)
        if failed > self.backoff_limit:
            self.finish_failed("BackoffLimitExceeded", "Job has reached the specified backoff limit")
            return True
        if succeeded >= self.completions:
            self.finish_complete()
            return False
        active = [s for s in self.sims if s.stage != "done"]
        want = min(self.parallelism, self.completions - succeeded) - len(active)
        if want > 0 and now >= self.next_create_try:
            for _ in range(want):
                if not self.create_pod():
                    self.next_create_try = now + 1.0
                    break
        self.sync_status()
        return True

    def kueue_admits(self, job: dict) -> bool:
        """Whether Kueue would ever admit this Job: only one labelled kueue.x-k8s.io/queue-name
        with a LocalQueue of that name in its namespace whose ClusterQueue exists; a labelled Job
        without it stays suspended, its Workload inadmissible ("LocalQueue X doesn't exist", Kueue
        pkg/controller/core/workload_controller.go), and an unlabelled one that
        manageJobsWithoutQueueName suspended is "not considered for admission" (Kueue docs,
        "Setup manageJobsWithoutQueueName")."""
        name = (job["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        if not name:
            return False
        local_queue = self.store.get("LocalQueue", self.ns, name)  # read live, as Kueue's cache follows it
        if local_queue is None or local_queue["metadata"].get("deletionTimestamp"):
            return False
        cluster_queue = (local_queue.get("spec") or {}).get("clusterQueue")
        return self.store.get("ClusterQueue", None, str(cluster_queue)) is not None

    def tick_suspended(self, job: dict, now: float) -> bool:
        """A suspended Job: no pods. Fault ``queue``, ``{"admit_after": SECONDS}`` (null: never),
        plays Kueue's controller, which resumes the Job once its Workload is admitted (Kueue docs,
        "Run a Kubernetes Job"); the job controller then turns the Suspended condition False
        (JobResumed), sets startTime anew, from which the deadline counts, and makes the pods
        (job_controller.go, syncJob)."""
        admit_after = (self.faults.get("queue") or {}).get("admit_after")
        if admit_after is not None and not self.kueue_admits(job):
            admit_after = None  # held forever
        if job["spec"].get("suspend") and admit_after is not None and now - self.started >= float(admit_after):
            with self.store.tx() as tx:
                j = tx.get("Job", self.ns, self.job_name)
                if j is None:
                    return False
                j["spec"]["suspend"] = False
                tx.put(j)  # the queue's update; the job controller sees it on its next sync
            return True
        if job["spec"].get("suspend"):
            return True
        self.suspended = False
        self.started = now
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return False
            t = now_ts(tx.now)
            for condition in j["status"].get("conditions") or []:
                if condition["type"] == "Suspended":
                    condition.update(status="False", reason="JobResumed", message="Job resumed")
                    condition.update(lastProbeTime=t, lastTransitionTime=t)
            j["status"]["startTime"] = t
            tx.put(j)
            self.event(tx, j, "Resumed", "Job resumed")
        return True

    def clean_status(self, job: dict) -> dict:
        st = job["status"]
        for k in ("active", "succeeded", "failed"):
            if not st.get(k):
                st.pop(k, None)
        return job

    def sync_status(self) -> None:
        active = sum(1 for s in self.sims if s.stage != "done")
        ready = sum(1 for s in self.sims if s.stage in ("running", "finishing"))
        succeeded = sum(1 for s in self.sims if s.outcome == "Succeeded")
        failed = sum(1 for s in self.sims if s.outcome == "Failed" and s.counted)  # Ignore: not in status.failed
        indexes = self.index_status()
        if (active, ready, succeeded, failed, indexes) == self.synced:
            return  # only this controller writes the Job's status: nothing to do, no transaction
        self.synced = (active, ready, succeeded, failed, indexes)
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            st = j.setdefault("status", {})
            new = dict(st)
            new.update(
                {
                    "active": active,
                    "ready": ready,
                    "succeeded": succeeded,
                    "failed": failed,
                    "terminating": 0,
                    "uncountedTerminatedPods": {},
                    **indexes,
                }
            )
            for k in ("active", "succeeded", "failed"):
                if not new.get(k):
                    new.pop(k, None)
            if new != st:
                j["status"] = new
                tx.put(j)

    # -- Indexed Jobs ----------------------------------------------------------------
    # One pod per completion index, lowest pending index first.  Without backoffLimitPerIndex
    # a failure counts against backoffLimit and its index is retried; with it, an index that
    # failed more than backoffLimitPerIndex times is failed for good (status.failedIndexes),
    # and more than maxFailedIndexes of them fail the Job (MaxFailedIndexesExceeded); once
    # every index is done the Job is Complete, or Failed (FailedIndexes) if one index failed.
    # A pod the podFailurePolicy Ignores is not counted; one it sends to FailIndex fails its index
    # at once (pkg/controller/job/indexed_job_utils.go isIndexFailed).

    def index_failures(self, index: int) -> int:
        """The index's counted failures so far (the job-index-failure-count its next pod carries)."""
        return sum(1 for s in self.sims if s.completion_index == index and s.outcome == "Failed" and s.counted)

    def index_outcomes(self) -> Tuple[set, set]:
        succeeded, failures = set(), {}  # type: ignore[var-annotated]
        fail_index = set()
        for sim in self.sims:
            if sim.completion_index is None:
                continue
            if sim.outcome == "Succeeded":
                succeeded.add(sim.completion_index)
            elif sim.outcome == "Failed" and sim.counted:
                failures[sim.completion_index] = failures.get(sim.completion_index, 0) + 1
                if sim.policy_action == "FailIndex":
                    fail_index.add(sim.completion_index)
        failed = set()
        if self.per_index is not None:
            failed = {i for i, n in failures.items() if n > int(self.per_index) and i not in succeeded}
            failed |= fail_index - succeeded
        return succeeded, failed

    def index_status(self) -> Dict[str, str]:
        """status.completedIndexes (when any) and status.failedIndexes (with backoffLimitPerIndex)."""
        if not getattr(self, "indexed", False):
            return {}
        succeeded, failed = self.index_outcomes()
        fields = {}
        if succeeded:
            fields["completedIndexes"] = compress_indexes(succeeded)
        if self.per_index is not None:
            fields["failedIndexes"] = compress_indexes(failed)
        return fields

    def tick_indexed(self, now: float) -> bool:
        succeeded, failed = self.index_outcomes()
        if sum(1 for s in self.sims if s.outcome == "Failed" and s.counted) > self.backoff_limit:
            self.finish_failed("BackoffLimitExceeded", "Job has reached the specified backoff limit")
            return True
        if self.max_failed_indexes is not None and len(failed) > int(self.max_failed_indexes):
            self.finish_failed(
                "MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes"
            )
            return True
        if len(succeeded) + len(failed) >= self.completions and not any(s.stage != "done" for s in self.sims):
            if failed:
                self.finish_failed("FailedIndexes", "Job has failed indexes")
                return True
            self.finish_complete()
            return False
        active = {s.completion_index for s in self.sims if s.stage != "done"}
        pending = [
            i for i in range(self.completions) if i not in succeeded | failed | active and self.backed_off(i, now)
        ]
        want = min(self.parallelism - len(active), len(pending))
        if want > 0 and now >= self.next_create_try:
            for index in pending[:want]:
                if not self.create_pod(index):
                    self.next_create_try = now + 1.0
                    break
        self.sync_status()
        return True

    def backed_off(self, index: int, now: float) -> bool:
        """Whether the index's backoff since its last counted failure is over (backoff_utils.go
        getRemainingTimePerIndex: 10 s after the first failure, doubling, at most 10 minutes)."""
        failed = [s for s in self.sims if s.completion_index == index and s.outcome == "Failed" and s.counted]
        if not failed:
            return True
        delay = min(self.failure_backoff * 2 ** (len(failed) - 1), 600.0)
        return now >= max(s.finished_at for s in failed) + delay

    # -- pod creation ------------------------------------------------------------

    def create_pod(self, completion_index: Optional[int] = None) -> bool:
        prefix = f"{self.job_name}-" if completion_index is None else f"{self.job_name}-{completion_index}-"
        name = prefix + random_suffix()
        tpl = deep_copy(self.template)
        pspec = tpl.get("spec") or {}
        account = str(pspec.get("serviceAccountName") or "default")
        account_missing = not self.serviceaccount_exists(account)
        with self.store.tx() as tx:
            job = tx.get("Job", self.ns, self.job_name)
            ns_obj = tx.get("Namespace", None, self.ns)
            if (
                job is None
                or job["metadata"].get("deletionTimestamp")
                or ns_obj is None
                or ns_obj["metadata"].get("deletionTimestamp")
            ):
                return False
            problem = None
            if account_missing:  # ServiceAccount admission comes first (a mutating plugin)
                problem = (
                    f'Error creating: pods "{name}" is forbidden: error looking up service account '
                    f'{self.ns}/{account}: serviceaccount "{account}" not found'
                )
            if problem is None and namespace_enforces_restricted(ns_obj):
                v = pod_security_violations(pspec)
                if v:
                    problem = (
                        f'Error creating: pods "{name}" is forbidden: violates PodSecurity '
                        f'"restricted:latest": {", ".join(v)}'
                    )
            rc_name = pspec.get("runtimeClassName")
            rc = tx.get("RuntimeClass", None, rc_name) if rc_name else None
            if problem is None and rc_name and rc is None:
                problem = (
                    f'Error creating: pods "{name}" is forbidden: pod rejected: RuntimeClass "{rc_name}" not found'
                )
            if problem is not None:
                cause = re.sub(r'pods "[^"]*"', "pods", problem)  # once per cause, whatever the pod's name
                if cause not in self.failed_creates_reported:
                    self.event(tx, job, "FailedCreate", problem, "Warning")
                    self.failed_creates_reported.add(cause)
                return False
            labels = dict((tpl.get("metadata") or {}).get("labels") or {})
            labels.update(job_labels(self.uid, self.job_name, bool(self.faults.get("legacy_labels"))))
            meta = {
                "name": name,
                "namespace": self.ns,
                "uid": new_uid(),
                "creationTimestamp": now_ts(tx.now),
                "labels": labels,
                "generateName": prefix,
                "finalizers": [JOB_TRACKING_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": self.job_name,
                        "uid": self.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            }
            annotations = (tpl.get("metadata") or {}).get("annotations")
            if annotations:
                meta["annotations"] = dict(annotations)
            spec = deep_copy(pspec)
            if completion_index is not None:
                index_pod(meta, spec, completion_index, label=not self.faults.get("no_pod_index_label"))
                if self.per_index is not None:  # its failures so far (job_controller.go addIndexFailureCountAnnotation)
                    meta["annotations"][INDEX_FAILURE_COUNT] = str(self.index_failures(completion_index))
            if "pod_sidecar" in (self.faults.get("admission") or []):  # a mesh's injector (apiserver.py admit_job)
                spec["containers"] = [*spec["containers"], deep_copy(SIDECAR)]
            default_pod_spec(spec)
            spec.setdefault("serviceAccountName", "default")
            spec.setdefault("serviceAccount", spec["serviceAccountName"])
            spec.setdefault("enableServiceLinks", True)
            spec.setdefault("priority", 0)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
            spec.setdefault(
                "tolerations",
                [
                    {
                        "key": "node.kubernetes.io/not-ready",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    },
                    {
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    },
                ],
            )
            if rc is not None and (rc.get("overhead") or {}).get("podFixed"):
                spec["overhead"] = deep_copy(rc["overhead"]["podFixed"])
            # The RuntimeClass admission controller merges the class's scheduling rules into the
            # pod: its nodeSelector (a conflicting key rejects the pod) and its tolerations.
            scheduling = (rc or {}).get("scheduling") or {}
            rc_selector = scheduling.get("nodeSelector") or {}
            own_selector = spec.get("nodeSelector") or {}
            conflicts = sorted(k for k, v in rc_selector.items() if k in own_selector and own_selector[k] != v)
            if conflicts:
                if not self.failed_creates_reported:
                    self.event(
                        tx,
                        job,
                        "FailedCreate",
                        f'Error creating: pods "{name}" is forbidden: pod rejected: conflict: '
                        f"nodeSelector {conflicts[0]} of the pod and of RuntimeClass {rc_name} differ",
                        "Warning",
                    )
                    self.failed_creates_reported.add("conflict")
                return False
            if rc_selector:
                spec["nodeSelector"] = {**own_selector, **rc_selector}
            if scheduling.get("tolerations"):
                spec["tolerations"] = list(spec["tolerations"]) + deep_copy(scheduling["tolerations"])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": spec,
                "status": {"phase": "Pending", "qosClass": qos_class(spec)},
            }
            tx.put(pod)
            self.event(tx, job, "SuccessfulCreate", f"Created pod: {name}")
        sim = PodSim(self.created, name, episode_modes(self.faults, self.created))
        sim.completion_index = completion_index
        sim.created_at = tx.now
        self.created += 1
        self.sims.append(sim)
        self.pod_names.append(name)
        self.write_stats()
        return True

    def serviceaccount_exists(self, account: str) -> bool:
        """ServiceAccount admission's lookup (apiserver.py, the serviceaccounts controller): the
        cache, then live lookups, 10 of them for `default` (100-200 ms apart, about 1.5 s), one for
        any other account."""
        if account in self.accounts_seen:
            return True
        attempts = 10 if account == "default" else 1
        for attempt in range(attempts):
            if attempt:
                time.sleep(SERVICEACCOUNT_RETRY_SECONDS)
            settle_serviceaccounts(self.store)
            self.view.poll()
            if self.view.get("ServiceAccount", self.ns, account) is not None:
                self.accounts_seen.add(account)
                return True
        return False

    # -- pod lifecycle ---------------------------------------------------------------

    def pod_deadline(self, sim: PodSim, now: float) -> None:
        """The kubelet's activeDeadlineSeconds of a pod (pkg/kubelet/active_deadline.go,
        pastActiveDeadline: counted from the pod's status.startTime, which the fake sets as its
        container starts): once past it, ShouldEvict records the Normal event DeadlineExceeded
        ("Pod was active on the node longer than the specified deadline"), and the kubelet stops
        the container as for any pod that must not run (SIGTERM, SIGKILL after the grace period);
        generateAPIPodStatus (pkg/kubelet/kubelet_pods.go) then reports phase Failed with that
        reason and message, whatever the exit code (finish). No DisruptionTarget: the pod's own
        deadline is not a disruption. The job controller counts it as any failed pod."""
        deadline = (self.template.get("spec") or {}).get("activeDeadlineSeconds")
        if sim.stage != "running" or deadline is None or sim.deadline_kill_at is not None:
            if sim.deadline_kill_at is not None and now >= sim.deadline_kill_at:
                self.kill(sim)  # the grace period is over
            return
        if now - sim.started < float(deadline):
            return
        grace = float(
            self.faults.get("termination_grace_seconds")
            or (self.template.get("spec") or {}).get("terminationGracePeriodSeconds")
            or 30
        )
        sim.deadline_kill_at = now + grace
        sim.record["deadline_exceeded_at"] = now
        self.update_pod(
            sim, lambda tx, p: self.event(tx, p, POD_DEADLINE_REASON, POD_DEADLINE_MESSAGE, "Normal", "kubelet")
        )
        if sim.proc is not None and sim.proc.poll() is None:
            with contextlib.suppress(OSError):
                sim.proc.terminate()

    def node_lost_fault(self) -> Dict[str, Any]:
        """Fault ``node_lost``: ``{"node": NAME, "after": SECONDS (after the pod started there),
        "toleration_seconds": 300, "then": null | "delete" | "out_of_service", "then_after": SECONDS}``."""
        fault = self.faults.get("node_lost")
        return fault if isinstance(fault, dict) else {}

    def lose(self, sim: PodSim, now: float) -> None:
        """The pod's node stops answering (its kubelet gone): nothing of the pod reaches the API
        server any more, so its phase stays Running; the node lifecycle controller marks the Node
        Ready Unknown (NodeStatusUnknown, "Kubelet stopped posting node status.") with the
        unreachable taints (pkg/controller/nodelifecycle/node_lifecycle_controller.go
        tryUpdateNodeHealth, doNoExecuteTaintingPass) and the pod Ready False, the condition
        alone (pkg/controller/util/node/controller_utils.go MarkPodsNotReady)."""
        self.kill(sim)  # whatever the container does now, no kubelet reports it
        sim.stage, sim.lost_at = "lost", now
        with self.store.tx() as tx:
            node = tx.get("Node", None, str(sim.node))
            taints = (node or {}).get("spec", {}).get("taints") or []
            if node is not None and not any(taint.get("key") == "node.kubernetes.io/unreachable" for taint in taints):
                t = now_ts(tx.now)
                for condition in node["status"].get("conditions") or []:
                    if condition.get("type") == "Ready":
                        condition.update(
                            status="Unknown",
                            reason="NodeStatusUnknown",
                            message="Kubelet stopped posting node status.",
                            lastTransitionTime=t,
                        )
                node["spec"]["taints"] = [
                    *(node["spec"].get("taints") or []),
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": t},
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": t},
                ]
                tx.put(node)

        def not_ready(tx: Tx, p: dict) -> None:
            for condition in p["status"].get("conditions") or []:
                if condition.get("type") == "Ready":
                    condition.update(status="False", lastTransitionTime=now_ts(tx.now))

        self.update_pod(sim, not_ready)

    def tick_lost(self, sim: PodSim, now: float) -> None:
        """A pod of a node that stopped answering. The taint manager deletes it after its
        tolerationSeconds for the unreachable taint (300 s, the DefaultTolerationSeconds admission
        plugin; at once for the out-of-service taint, which it does not tolerate), adding
        DisruptionTarget DeletionByTaintManager (pkg/controller/tainteviction/taint_eviction.go);
        with no kubelet to confirm, it stays Terminating, phase Running. PodGC marks it Failed and
        deletes it only when the Node object is deleted (gcOrphaned: DisruptionTarget
        DeletionByPodGC, "PodGC: node no longer exists") or tainted out-of-service while it is
        terminating (gcTerminating), pkg/controller/podgc/gc_controller.go,
        markFailedAndDeletePodWithCondition; then the job controller counts and replaces it."""
        fault = self.node_lost_fault()
        then, then_after = fault.get("then"), float(fault.get("then_after", 0.0))
        acted = then in ("delete", "out_of_service") and now - sim.lost_at >= then_after
        toleration = 0.0 if acted and then == "out_of_service" else float(fault.get("toleration_seconds", 300))
        if not sim.taint_deleted and now - sim.lost_at >= toleration:
            sim.taint_deleted = True

            def taint_delete(tx: Tx, p: dict) -> None:
                t = now_ts(tx.now)
                p["status"]["conditions"] = [
                    disruption("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint", t),
                    *(p["status"].get("conditions") or []),
                ]
                p["metadata"].setdefault("deletionTimestamp", t)
                p["metadata"].setdefault("deletionGracePeriodSeconds", 30)

            self.update_pod(sim, taint_delete)
        if not acted:
            return
        with self.store.tx() as tx:
            node = tx.get("Node", None, str(sim.node))
            if node is not None and then == "delete":
                tx.remove(node)  # an administrator or the cloud's node controller deleted it
            elif node is not None and not any(
                taint.get("key") == "node.kubernetes.io/out-of-service" for taint in node["spec"].get("taints") or []
            ):
                node["spec"]["taints"].append({"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"})
                tx.put(node)
        if then == "out_of_service" and not sim.taint_deleted:
            return  # gcTerminating acts on terminating pods only: the taint manager first
        gone = then == "delete"

        def pod_gc(tx: Tx, p: dict) -> None:
            t = now_ts(tx.now)
            p["status"]["phase"] = "Failed"
            if gone:
                p["status"]["conditions"] = [
                    disruption("DeletionByPodGC", "PodGC: node no longer exists", t),
                    *(c for c in p["status"].get("conditions") or [] if c.get("type") != "DisruptionTarget"),
                ]
            p["metadata"].setdefault("deletionTimestamp", t)

        final_pod: Dict[str, Any] = {}

        def marked(tx: Tx, p: dict) -> None:
            pod_gc(tx, p)
            final_pod.update(deep_copy(p))

        self.update_pod(sim, marked)
        action, counted, message = match_pod_failure_policy(self.pod_failure_policy, final_pod)
        sim.policy_action, sim.counted = action, counted
        sim.record.update(policy_action=action, policy_message=message, lost_node=sim.node)
        sim.finished_at = time.time()
        sim.outcome = "Failed"

        def finalized(tx: Tx, p: dict) -> None:  # the job controller counted it; PodGC's delete (grace 0)
            p["metadata"].pop("finalizers", None)
            tx.vanish_later(p, PREEMPTED_POD_LINGERS)

        self.update_pod(sim, finalized)
        sim.stage = "done"

    def advance(self, sim: PodSim, now: float) -> None:
        lost = self.node_lost_fault()
        if (
            sim.stage in ("running", "finishing")
            and lost.get("node") == sim.node
            and now - sim.started >= float(lost.get("after", 0.0))
        ):
            self.lose(sim, now)
        if sim.stage == "lost":
            self.tick_lost(sim, now)
            return
        self.pod_deadline(sim, now)
        if sim.stage in ("created", "unschedulable"):
            if now >= sim.next_try:
                self.schedule(sim, now)
        elif sim.stage == "scheduled":
            if now >= sim.next_try:
                self.start(sim, now)
        elif sim.stage == "running" and sim.proc is not None and sim.proc.poll() is not None:
            sim.finished_worker = now
            sim.stage = "finishing"
        if sim.stage == "finishing":
            extra = float(self.faults.get("episode_seconds") or 0)
            if now - sim.finished_worker >= extra:
                self.finish(sim)

    def schedule(self, sim: PodSim, now: float) -> None:
        self.view.poll()  # the binds of this tick so far count against the nodes' room
        pod = self.view.get("Pod", self.ns, sim.name)
        if pod is None:
            sim.stage, sim.outcome = "done", "Failed"
            return
        reason = None
        node_name = None
        if "pending" in sim.modes:
            nodes = self.nodes()
            reason = (
                f"0/{len(nodes)} nodes are available: {len(nodes)} Insufficient cpu. preemption: "
                f"0/{len(nodes)} nodes are available: {len(nodes)} No preemption victims found "
                "for incoming pod."
            )
        else:
            node_name, reason = self.pick_node(pod)
        if node_name is None:
            sim.next_try = now + 1.0
            first = sim.stage == "created"
            sim.stage = "unschedulable"
            if first:

                def mark(tx: Tx, p: dict) -> None:
                    p["status"]["conditions"] = [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": reason,
                            "lastProbeTime": None,
                            "lastTransitionTime": now_ts(tx.now),
                        }
                    ]
                    self.event(tx, p, "FailedScheduling", reason or "", "Warning", "default-scheduler")

                self.update_pod(sim, mark)
            return
        sim.node = node_name

        def bind(tx: Tx, p: dict) -> None:
            # the binding's PodScheduled condition is the API server's stamp (its clock: tx.now), not
            # the scheduler's (pkg/registry/core/pod/storage/storage.go setPodNodeAndMetadata)
            p["spec"]["nodeName"] = node_name
            p["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now_ts(tx.now)}
            ]
            # the scheduler writes events.k8s.io Events: eventTime (microseconds), no timestamps;
            # fault scheduled_event_time "legacy": an old core/v1 one (no eventTime)
            legacy = self.faults.get("scheduled_event_time") == "legacy"
            event_time = None if legacy else round(tx.now * 1e6) / 1e6  # exactly what micro_ts prints
            sim.record["scheduled_event_time"] = event_time
            self.event(
                tx,
                p,
                "Scheduled",
                f"Successfully assigned {self.ns}/{sim.name} to {node_name}",
                "Normal",
                "default-scheduler",
                event_time=event_time,
            )

        if self.update_pod(sim, bind):
            sim.stage = "scheduled"
            sim.next_try = 0.0
        else:
            sim.stage, sim.outcome = "done", "Failed"

    def nodes(self) -> List[dict]:
        now = time.time()
        found = [o for k, o in self.view.objects.items() if o["kind"] == "Node" and not self.view.is_gone(k, now)]
        return sorted(found, key=lambda o: o["metadata"]["name"])

    def pod_requests(self, pod: dict) -> Dict[str, float]:
        uid = pod["metadata"].get("uid", "")
        if uid not in self.requests:
            self.requests[uid] = pod_requests(pod["spec"])
        return self.requests[uid]

    def node_usage(self) -> Dict[str, Dict[str, float]]:
        """cpu/memory requested on each node by its Pending and Running pods (every namespace)."""
        used: Dict[str, Dict[str, float]] = {}
        now = time.time()
        for k, o in self.view.objects.items():
            if o["kind"] != "Pod" or self.view.is_gone(k, now):
                continue
            node = o["spec"].get("nodeName")
            if node and (o.get("status") or {}).get("phase") in ("Pending", "Running"):
                r = self.pod_requests(o)
                u = used.setdefault(node, dict.fromkeys(SCHEDULED_RESOURCES, 0.0))
                for res in SCHEDULED_RESOURCES:
                    u[res] += r[res]
        return used

    def pick_node(self, pod: dict) -> Tuple[Optional[str], Optional[str]]:
        nodes = self.nodes()
        if not nodes:
            return None, "no nodes available to schedule pods"
        need = self.pod_requests(pod)
        usage = self.node_usage()
        reasons: Dict[str, int] = {}
        fits = []
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        for node in nodes:
            node_labels = node["metadata"].get("labels") or {}
            if any(node_labels.get(key) != value for key, value in selector.items()):
                reasons["node(s) didn't match Pod's node affinity/selector"] = (
                    reasons.get("node(s) didn't match Pod's node affinity/selector", 0) + 1
                )
                continue
            if (node.get("spec") or {}).get("unschedulable"):
                reasons["node(s) were unschedulable"] = reasons.get("node(s) were unschedulable", 0) + 1
                continue
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
            if not ready:
                reasons["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"] = (
                    reasons.get("node(s) had untolerated taint {node.kubernetes.io/not-ready: }", 0) + 1
                )
                continue
            alloc = (node.get("status") or {}).get("allocatable") or {}
            used = usage.get(node["metadata"]["name"], dict.fromkeys(SCHEDULED_RESOURCES, 0.0))
            # ephemeral-storage as pkg/scheduler/framework/plugins/noderesources/fit.go fitsRequest counts
            # it: a pod that requests some does not fit a node that reports none
            short = [
                res
                for res in SCHEDULED_RESOURCES
                if (res in alloc or (res == "ephemeral-storage" and need[res] > 0))
                and used[res] + need[res] > parse_quantity(alloc.get(res, "0")) + 1e-9
            ]
            if short:
                for res in short:
                    reasons[f"Insufficient {res}"] = reasons.get(f"Insufficient {res}", 0) + 1
                continue
            fits.append(node["metadata"]["name"])
        if not fits:
            detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            return None, (
                f"0/{len(nodes)} nodes are available: {detail}. preemption: 0/{len(nodes)} "
                "nodes are available: No preemption victims found for incoming pod."
            )
        choice = fits[self.rr % len(fits)]
        self.rr += 1
        return choice, None

    def waiting_for_pod_watch(self, now: float) -> bool:
        """Fault ``pods_wait_for_pod_watch``: SECONDS: no container starts until a watch of the
        namespace's pods has printed its list, or SECONDS after this controller started. A real
        pod takes seconds from its Job's create to its container's start (scheduling, the
        sandbox, the image), far longer than a client's watch takes to open; the fake starts a
        container within milliseconds, so on a loaded machine a pod could end before the client's
        watch had listed it. Tests whose point is what the watch shows (the logs followed while
        the pods run, a lost pod proven lost) keep the real order with it."""
        limit = self.faults.get("pods_wait_for_pod_watch")
        if not limit or now - self.started > float(limit):
            return False
        return not os.path.exists(os.path.join(self.state, "pod_watches", self.ns))

    def start(self, sim: PodSim, now: float) -> None:
        if self.faults.get("sandbox_kernel") and now < int(sim.created_at) + SANDBOX_BOOT_AFTER + 0.1:
            return  # the sandbox's own kernel is still booting
        if self.waiting_for_pod_watch(now):
            return
        pod = self.view.get("Pod", self.ns, sim.name)
        if pod is None:
            sim.stage, sim.outcome = "done", "Failed"
            return
        spec = pod["spec"]
        container = spec["containers"][0]
        script = None
        problem = None
        for vol in spec.get("volumes") or []:
            cm_ref = vol.get("configMap")
            if not cm_ref:
                continue
            cm = self.view.get("ConfigMap", self.ns, cm_ref.get("name", ""))
            if cm is None:
                problem = (
                    f'MountVolume.SetUp failed for volume "{vol.get("name")}" : '
                    f'configmap "{cm_ref.get("name")}" not found'
                )
                break
            data = cm.get("data") or {}
            if "episode.py" in data:
                script = data["episode.py"]
            elif len(data) == 1:
                script = next(iter(data.values()))
        if problem is None and script is None:
            problem = (
                "fake_kubectl: the pod template mounts no ConfigMap with an episode.py key, so "
                "there is no episode to run"
            )
        if problem is not None:
            sim.next_try = now + 1.0
            if not sim.mount_reported:
                sim.mount_reported = True
                self.update_pod(
                    sim, lambda tx, p: self.event(tx, p, "FailedMount", problem or "", "Warning", "kubelet")
                )
            return
        sim.workdir = os.path.join(self.state, "work", self.ns, sim.name)
        workspace = os.path.join(sim.workdir, "workspace")
        os.makedirs(workspace, exist_ok=True)
        script_path = os.path.join(sim.workdir, "episode.py")
        if self.faults.get("stand_in_worker"):
            script = STAND_IN_ARTIFACT_WORKER if self.faults.get("stand_in_artifacts") else STAND_IN_WORKER
        if "ignore_sigterm" in sim.modes:
            script = SIGTERM_IGNORING_WORKER
        with open(script_path, "w", encoding="utf-8") as f:
            f.write(script or "")
        term_path = os.path.join(sim.workdir, "termination-log")
        open(term_path, "w").close()
        env = {"EPISODE_ID": sim.name, "HOSTNAME": sim.name}
        for e in container.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
            elif (e.get("valueFrom") or {}).get("fieldRef"):
                val = resolve_field_ref(pod, e["valueFrom"]["fieldRef"].get("fieldPath", ""), sim.node)
                if val is not None:
                    env[e["name"]] = val
        env.update(
            {
                "RL_DEMO_WORKSPACE": workspace,
                "RL_DEMO_TERMINATION_LOG": term_path,
                "PATH": os.environ.get("PATH", os.defpath),
            }
        )
        mount_container_paths(sim.workdir, workspace, container, spec, self.view, self.ns, env)
        # The container's command, as the kubelet runs it: a /demo/X.py of the ConfigMap (with
        # --worker, the tool's launcher.py, which runs episode.py beside it), else the worker itself. A worker the
        # faults replace (the stand-in, a SIGTERM-ignoring one) replaces episode.py there too.
        command = [str(part) for part in container.get("command") or []]
        mounted = self.script_mount_dir(sim.workdir, container, spec)
        entry = os.path.basename(command[-1]) if command and command[-1].endswith(".py") else "episode.py"
        if entry != "episode.py" and os.path.isfile(os.path.join(mounted, entry)):
            with open(os.path.join(mounted, "episode.py"), "w", encoding="utf-8") as f:
                f.write(script or "")
            script_path = os.path.join(mounted, entry)
        # The interpreter's options as the command gives them (`python -B -S /demo/launcher.py`):
        # the kubelet runs the command as written, so a pod pays for what its flags ask (-S: no
        # site-packages); -B at least, as every pod's command has it.
        flags = [part for part in command[1:-1] if re.fullmatch(r"-[A-Za-z]+", part)] or ["-B"]
        # The container's paths in env values the worker opens (RL_DEMO_ARTIFACTS, /workspace/...)
        # are this pod's local workspace: the fake has no container filesystem.
        for key in ("RL_DEMO_ARTIFACTS",):
            if env.get(key, "").startswith("/workspace/") or env.get(key) == "/workspace":
                env[key] = workspace + env[key][len("/workspace") :]
        env["RL_DEMO_TASKS"] = os.path.join(self.script_mount_dir(sim.workdir, container, spec), "tasks.jsonl")
        if self.faults.get("sandbox_kernel"):
            env["RL_DEMO_PROC"] = sandbox_proc(sim)
        elif self.faults.get("lxcfs"):
            env["RL_DEMO_PROC"] = lxcfs_proc(sim)
        if "wrong_id" in sim.modes:
            env["EPISODE_ID"] = "someone-else"
        lp = log_path(self.state, self.ns, sim.name)
        os.makedirs(os.path.dirname(lp), exist_ok=True)
        image = container.get("image", "")

        pulled = self.pulled_message(sim, image)
        record_runtime_operations(self.state, sim, spec.get("runtimeClassName"), self.view)

        def running(tx: Tx, p: dict) -> None:
            t = now_ts(tx.now)
            for reason, msg in (
                ("Pulled", pulled),
                ("Created", f"Created container: {container['name']}"),
                ("Started", f"Started container {container['name']}"),
            ):
                if msg is None:
                    continue  # fault image_pull "missing": this pod has no Pulled event
                self.event(
                    tx, p, reason, msg, "Normal", "kubelet", field_path=f"spec.containers{{{container['name']}}}"
                )
            ip = f"10.244.{random.randint(0, 3)}.{random.randint(2, 254)}"
            host_ip = f"172.18.0.{2 + int(hashlib.md5((sim.node or '').encode()).hexdigest(), 16) % 200}"
            p["status"].update(
                {
                    "phase": "Running",
                    "startTime": t,
                    "hostIP": host_ip,
                    "hostIPs": [{"ip": host_ip}],
                    "podIP": ip,
                    "podIPs": [{"ip": ip}],
                    "conditions": [
                        {
                            "type": "PodReadyToStartContainers",
                            "status": "True",
                            "lastProbeTime": None,
                            "lastTransitionTime": t,
                        },
                        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
                        {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
                        {"type": "ContainersReady", "status": "True", "lastProbeTime": None, "lastTransitionTime": t},
                        *[c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"],
                    ],
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "image": image,
                            "imageID": self.image_id(image, sim.node),
                            "containerID": f"{RUNTIME_NAME}://" + hashlib.sha256(sim.name.encode()).hexdigest(),
                            "restartCount": 0,
                            "ready": True,
                            "started": True,
                            "state": {"running": {"startedAt": t}},
                            "lastState": {},
                        }
                    ],
                }
            )

        sim.started = now
        # The worker's output goes to the pod's log as it prints it, so `kubectl logs -f` follows it
        # (the kubelet's ReadLogs with follow). A pod with episode fault modes writes elsewhere and
        # its log appears whole at its end, as the modes have rewritten it (apply_episode_faults):
        # no client can have followed the output the modes replace.
        with open(worker_output(lp, sim), "wb") as log:
            sim.proc = subprocess.Popen(
                [os.path.join(sim.workdir, "bin", "python"), *flags, script_path],  # mount_container_paths
                start_new_session=True,  # the container's processes: a SIGKILL ends them all (kill)
                cwd=workspace,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=True,
            )
        sim.record["started_at"] = time.time()  # its container's process spawned (client clock)
        # for FakeCluster.close(): a controller it SIGKILLs never kills its pods (own sessions)
        append_line(os.path.join(self.state, POD_PIDS_FILE), f"{sim.proc.pid}\n")
        if not self.update_pod(sim, running):
            self.kill(sim)
            sim.stage, sim.outcome = "done", "Failed"
            return
        sim.stage = "running"

    def script_mount_dir(self, workdir: str, container: dict, spec: dict) -> str:
        """The local directory of the ConfigMap mounted with episode.py (the worker's /demo)."""
        volumes = {v.get("name"): v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            if "configMap" in (volumes.get(mount.get("name")) or {}):
                return os.path.join(workdir, "configmap-" + str(mount["name"]))
        return os.path.join(workdir, "configmap")

    def pulled_message(self, sim: PodSim, image: str) -> Optional[str]:
        """The kubelet's Pulled message (fault image_pull): "cached" (default) for every pod,
        "pulled" for every pod, "mixed" (odd creation indexes pulled), "missing" (odd creation
        indexes have no Pulled event).  A pull's durations are recorded in the pod's record."""
        mode = self.faults.get("image_pull") or "cached"
        odd = sim.index % 2 == 1
        if mode == "missing" and odd:
            sim.record["pull"] = None
            return None
        if mode == "pulled" or (mode == "mixed" and odd):
            seconds = round(1.234 + 0.1 * (sim.index % 5), 3)
            waiting = round(seconds + 0.25, 3)
            sim.record["pull"] = {"seconds": seconds, "seconds_including_waiting": waiting}
            return (
                f'Successfully pulled image "{image}" in {go_seconds(seconds)} '
                f"({go_seconds(waiting)} including waiting). Image size: 52428800 bytes."
            )
        sim.record["pull"] = "cached"
        return f'Container image "{image}" already present on machine'

    def kill(self, sim: PodSim) -> None:
        """SIGKILL to the container: every process in it (its own session), as the runtime kills
        the container's cgroup; SIGTERM (terminate) goes to its first process alone."""
        if sim.proc is not None and sim.proc.poll() is None:
            try:
                os.killpg(sim.proc.pid, signal.SIGKILL)
                sim.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def finish(self, sim: PodSim) -> None:
        """The worker has exited: publish log, termination message and final pod status."""
        rc = sim.proc.returncode if sim.proc is not None else 1
        deadline_exceeded = sim.deadline_kill_at is not None
        if rc < 0:  # killed by signal N: the runtime reports 128 + N, never -N (containerd sys/reaper
            rc = 128 - rc  # reaper_unix.go exitStatus, exitSignalOffset; go-runc monitor.go alike)
        lp = log_path(self.state, self.ns, sim.name)
        with open(worker_output(lp, sim), "rb") as f:  # bytes throughout: a hostile episode's log need not be UTF-8
            log = f.read().decode("utf-8", errors="surrogateescape")
        term_path = os.path.join(sim.workdir, "termination-log")
        with open(term_path, "rb") as f:  # the kubelet reads the file's last 4 KiB (containerlog.py)
            f.seek(max(0, os.fstat(f.fileno()).st_size - MAX_TERMINATION_MESSAGE))
            message = f.read().decode("utf-8", errors="replace")
        log, message, rc = apply_episode_faults(sim.modes, log, message, rc)
        pod = self.view.get("Pod", self.ns, sim.name)
        container = pod["spec"]["containers"][0] if pod else {}
        if pod:  # the status manager's 12 KiB budget for the pod's messages (containerlog.py)
            spec = pod["spec"]
            containers = len(spec.get("containers") or []) + len(spec.get("initContainers") or [])
            message = termination_message(message.encode("utf-8", errors="replace"), containers)
        if not message and rc != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = "\n".join(log.splitlines()[-80:])[-2048:]
        # the kubelet's evictions (pkg/kubelet/eviction/eviction_manager.go, messages from helpers.go):
        # "evict" and "disk_pressure_own" the node-pressure eviction (synchronize: evictPod with
        # DisruptionTarget TerminationByKubelet, evictionMessage naming each container over its
        # request), "disk_limit" the pod over its own ephemeral-storage limit (localStorageEviction,
        # podEphemeralStorageLimitEviction: evictPod without a condition)
        limits = (container.get("resources") or {}).get("limits") or {}
        requests = (container.get("resources") or {}).get("requests") or {}
        eviction_message = {
            "evict": "The node was low on resource: memory.",
            "disk_pressure_own": "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, "
            f"available: 9Gi. Container {container.get('name', 'episode')} was using 3Gi, request is "
            f"{requests.get('ephemeral-storage', '0')}, has larger consumption of ephemeral-storage. ",
            "disk_limit": "Pod ephemeral local storage usage exceeds the total limit of containers "
            f"{limits.get('ephemeral-storage', '0')}. ",
        }
        eviction = next((mode for mode in ("evict", "disk_pressure_own", "disk_limit") if mode in sim.modes), "")
        evicted = bool(eviction)
        replaced = "replace" in sim.modes
        preempted = "preempt" in sim.modes
        rejected = "rejected" in sim.modes  # failed by the kubelet's admission: no exit code, no DisruptionTarget
        if evicted:  # the kubelet killed the worker mid-run: its log ends where it was, mid-frame
            log, message = killed_mid_run(log), ""
        tmp = lp + ".tmp"
        with open(tmp, "wb") as f:
            f.write(log.encode("utf-8", errors="surrogateescape"))
        os.replace(tmp, lp)
        if rejected:  # no container ever ran (kubelet.go rejectPod before any sync): no log, no message
            os.unlink(lp)
            message = ""
        if preempted:
            rc = 143  # the kubelet's SIGTERM: python's default handler ends it with 128 + 15
        if evicted:
            rc = 137  # a hard eviction kills at once (grace period 0): SIGKILL, 128 + 9
        phase = "Succeeded" if rc == 0 and not evicted and not rejected and not deadline_exceeded else "Failed"
        if replaced:
            phase = "Failed"
            rc = 137
        sim.outcome = "Replaced" if replaced else phase
        image = container.get("image", "")
        started = now_ts(sim.started)

        def final(tx: Tx, p: dict) -> None:
            t = now_ts(tx.now)
            st = p["status"]
            st["phase"] = phase
            reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
            conds = []
            for old in st.get("conditions") or []:
                c = dict(old)
                if c["type"] in ("Ready", "ContainersReady", "PodReadyToStartContainers"):
                    c.update({"status": "False", "lastTransitionTime": t})
                    if c["type"] != "PodReadyToStartContainers":
                        c["reason"] = reason
                conds.append(c)
            if evicted:  # the kubelet's node-pressure eviction: pkg/kubelet/eviction/eviction_manager.go
                # evictPod (status reason Evicted, condition DisruptionTarget TerminationByKubelet, the
                # PodDisruptionConditions gate: on from 1.26); phase Failed. Its container was killed,
                # and the kubelet reports it terminated (exit code 137) with its container ID, so its
                # log, cut where the kill fell (killed_mid_run), is served until the container is removed
                st["reason"] = "Evicted"
                st["message"] = eviction_message[eviction]
                if eviction != "disk_limit":  # a limit's eviction adds no condition
                    conds.insert(
                        0,
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "reason": "TerminationByKubelet",
                            "message": eviction_message[eviction],
                            "lastProbeTime": None,
                            "lastTransitionTime": t,
                        },
                    )
            term: Dict[str, Any] = {
                "exitCode": rc,
                "reason": "Completed" if rc == 0 else "Error",
                "startedAt": started,
                "finishedAt": t,
                "containerID": f"{RUNTIME_NAME}://" + hashlib.sha256(sim.name.encode()).hexdigest(),
            }
            if message:
                term["message"] = message
            cstat: Dict[str, Any] = {
                "name": container.get("name", "episode"),
                "image": image,
                "imageID": self.image_id(image, sim.node),
                "containerID": term["containerID"],
                "restartCount": 0,
                "ready": False,
                "started": False,
                "state": {"terminated": term},
                "lastState": {},
            }
            if "restart" in sim.modes:
                cstat["restartCount"] = 1
                cstat["lastState"] = {
                    "terminated": {
                        "exitCode": 1,
                        "reason": "Error",
                        "startedAt": started,
                        "finishedAt": started,
                        "containerID": term["containerID"],
                    }
                }
            st["containerStatuses"] = [cstat]
            if deadline_exceeded:  # generateAPIPodStatus: ShouldEvict's reason and message (pod_deadline)
                st["reason"] = POD_DEADLINE_REASON
                st["message"] = POD_DEADLINE_MESSAGE
            if rejected:  # the kubelet's admission refused it: pkg/kubelet/kubelet.go rejectPod (phase Failed,
                # the admit handler's reason and message, no container ever ran; no DisruptionTarget)
                st["reason"] = "OutOfcpu"
                st["message"] = "Pod was rejected: Node didn't have enough resource: cpu, requested: 100, used: 3900"
                st.pop("containerStatuses", None)
            if preempted:  # kube-scheduler's preemption of a victim: pkg/scheduler/framework/preemption/
                # preemption.go prepareCandidate adds DisruptionTarget (PreemptionByScheduler) and deletes the
                # pod; the kubelet stops its container (SIGTERM) and reports it Failed; once the job
                # controller has removed its finalizer the pod is gone (no pod of the listing)
                conds.insert(
                    0,
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                        "message": "default-scheduler: preempting to accommodate a higher priority pod",
                        "lastProbeTime": None,
                        "lastTransitionTime": t,
                    },
                )
                p["metadata"]["deletionTimestamp"] = t
                p["metadata"]["deletionGracePeriodSeconds"] = 30
            if replaced:
                p["metadata"]["deletionTimestamp"] = t
                p["metadata"]["deletionGracePeriodSeconds"] = 30
                conds.insert(
                    0,
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "DeletionByTaintManager",
                        "message": "Taint manager: deleting due to NoExecute taint",
                        "lastProbeTime": None,
                        "lastTransitionTime": t,
                    },
                )
                self.event(
                    tx,
                    p,
                    "Killing",
                    f"Stopping container {container.get('name', 'episode')}",
                    "Normal",
                    "kubelet",
                    field_path=f"spec.containers{{{container.get('name', 'episode')}}}",
                )
            st["conditions"] = conds

        # The phase, the terminated state and its message reach the API server in one status update,
        # as the kubelet writes them: kubernetes/kubernetes pkg/kubelet/kubelet_pods.go
        # convertToAPIContainerStatuses (Terminated.Message, read by kuberuntime_container.go
        # getTerminationMessage) within generateAPIPodStatus, sent by pkg/kubelet/status/status_manager.go
        # syncPod; so the pod watch delivers a terminated pod with its message, and the client can
        # know its reward then. `terminated_at`: just before that update (client clock): no client
        # can have seen the pod terminated earlier.
        sim.record["terminated_at"] = time.time()
        final_pod: Dict[str, Any] = {}

        def final_kept(tx: Tx, p: dict) -> None:
            final(tx, p)
            final_pod.update(deep_copy(p))

        self.update_pod(sim, final_kept)
        if phase == "Failed":
            action, counted, message = match_pod_failure_policy(self.pod_failure_policy, final_pod)
            sim.policy_action, sim.counted = action, counted
            sim.record.update(policy_action=action, policy_message=message)
        sim.finished_at = time.time()

        def finalized(tx: Tx, p: dict) -> None:
            p["metadata"].pop("finalizers", None)
            if preempted:  # gone once the kubelet confirms the end (the API server then removes it):
                # a moment, not at once (pkg/registry/core/pod/strategy.go: a graceful delete waits
                # for the kubelet's final status), so a watch started after the create sees it end
                tx.vanish_later(p, PREEMPTED_POD_LINGERS)

        self.update_pod(sim, finalized)
        sim.stage = "done"

    # -- job end ---------------------------------------------------------------------

    def finish_complete(self) -> None:
        self.sync_status()
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            t = now_ts(tx.now)
            j["status"]["conditions"] = [
                *(j["status"].get("conditions") or []),
                # a 1.31 job controller's: no reason, no message (job_controller.go newSuccessCondition,
                # enactJobFinished; REAL_CLUSTER_FACTS N5). kubernetes/kubernetes#126074, which would
                # have given it CompletionsReached, was closed unmerged
                job_condition("SuccessCriteriaMet", "", "", t),
            ]
            tx.put(self.clean_status(j))
        self.decided_at = time.time()  # the job controller's decision visible, for bench/bench.py
        time.sleep(POLL_SECONDS)
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            t = now_ts(tx.now)
            j["status"]["conditions"].append(
                job_condition("Complete", "", "", t)  # no reason either (job_controller.go, 1.31)
            )
            j["status"]["completionTime"] = t
            j["status"]["ready"] = 0
            j["status"].pop("active", None)
            tx.put(j)
            self.event(tx, j, "Completed", "Job completed")
        self.completed_at = time.time()  # the moment Complete became visible, for bench/bench.py
        self.write_stats()

    def finish_failed(self, reason: str, message: str) -> None:
        """The job controller's failure: FailureTarget at once, every active pod deleted with its
        grace period (the kubelet sends SIGTERM, and SIGKILL once the grace period is over), and
        Failed only once every pod has terminated (job_controller.go, deleteActivePods, then
        enactJobFinished with delayTerminalCondition, Kubernetes 1.31+; kubernetes/kubernetes
        #125510): a pod that ignores SIGTERM (episode mode ``ignore_sigterm``) holds Failed back
        by its whole grace period (the pod's terminationGracePeriodSeconds, or fault
        ``termination_grace_seconds``)."""
        grace = float(
            self.faults.get("termination_grace_seconds")
            or (self.template.get("spec") or {}).get("terminationGracePeriodSeconds")
            or 30
        )
        now = time.time()
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return
            t = now_ts(tx.now)
            for sim in self.sims:
                if sim.stage == "done":
                    continue
                if sim.stage == "lost":  # no kubelet to stop it: it stays Terminating (tick_lost, PodGC)
                    p = tx.get("Pod", self.ns, sim.name)
                    if p is not None:
                        p["metadata"].setdefault("deletionTimestamp", t)
                        tx.put(p)
                    continue
                sim.stage, sim.outcome, sim.next_try = "terminating", "Failed", now + grace
                p = tx.get("Pod", self.ns, sim.name)
                if p is not None:
                    p["metadata"]["deletionTimestamp"] = t
                    p["metadata"]["deletionGracePeriodSeconds"] = int(grace)
                    tx.put(p)
            st = j["status"]
            st.update(self.index_status())
            st["failed"] = sum(1 for s in self.sims if s.outcome == "Failed" and s.stage == "done")
            st["succeeded"] = sum(1 for s in self.sims if s.outcome == "Succeeded")
            st["active"] = 0
            st["ready"] = 0
            st["terminating"] = sum(1 for s in self.sims if s.stage == "terminating")
            st["conditions"] = [*(st.get("conditions") or []), job_condition("FailureTarget", reason, message, t)]
            tx.put(self.clean_status(j))
            self.event(tx, j, reason, message, "Warning")
        for sim in self.sims:
            if sim.stage == "terminating" and sim.proc is not None and sim.proc.poll() is None:
                with contextlib.suppress(OSError):
                    sim.proc.terminate()
        self.failing = (reason, message)

    def tick_failing(self, now: float) -> bool:
        """The failed Job's pods stopping: each gone once its process ended or its grace period
        ran out (SIGKILL); then Failed."""
        for sim in self.sims:
            if sim.stage == "lost":
                self.tick_lost(sim, now)  # PodGC may still mark it Failed
            if sim.stage != "terminating":
                continue
            if sim.proc is not None and sim.proc.poll() is None:
                if now < sim.next_try:
                    continue
                self.kill(sim)
            lp = log_path(self.state, self.ns, sim.name)
            if worker_output(lp, sim) != lp and os.path.exists(worker_output(lp, sim)):
                os.replace(worker_output(lp, sim), lp)  # a stopped pod's modes rewrite nothing: its output as printed
            code = sim.proc.returncode if sim.proc is not None else None
            terminated = {
                "exitCode": 128 - code if isinstance(code, int) and code < 0 else (code or 137),
                "reason": "Error",
                "startedAt": now_ts(sim.started or now),
                "finishedAt": now_ts(now),
            }
            with self.store.tx() as tx:
                p = tx.get("Pod", self.ns, sim.name)
                if p is not None:
                    p["metadata"].pop("finalizers", None)
                    p["status"]["phase"] = "Failed"
                    for status in p["status"].get("containerStatuses") or []:
                        status.update(ready=False, started=False, state={"terminated": dict(terminated)})
                    tx.vanish_later(p)
            sim.stage = "done"
        if any(s.stage in ("terminating", "lost") for s in self.sims):
            return True
        assert self.failing is not None
        reason, message = self.failing
        with self.store.tx() as tx:
            j = tx.get("Job", self.ns, self.job_name)
            if j is None:
                return False
            t = now_ts(tx.now)
            j["status"]["conditions"].append(job_condition("Failed", reason, message, t))
            j["status"]["failed"] = sum(1 for s in self.sims if s.outcome == "Failed")
            j["status"]["terminating"] = 0
            tx.put(j)
        return False


def worker_output(log: str, sim: PodSim) -> str:
    """Where the worker's stdout and stderr go: the pod's log itself, or beside it when episode
    fault modes rewrite the log at the worker's end (see the worker's start)."""
    return log + ".worker" if sim.modes else log


POD_DEADLINE_REASON = "DeadlineExceeded"  # pkg/kubelet/active_deadline.go: reason and message
POD_DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
SANDBOX_BOOT_AFTER = 0.3  # fault sandbox_kernel: the sandbox's kernel boots this long after the pod's creationTimestamp
HOST_UPTIME = 259200.0  # fault lxcfs: the host booted three days before the worker started


def go_seconds(seconds: float) -> str:
    """A Go time.Duration of whole milliseconds as String() prints it ("1.5s")."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


def sandbox_proc(sim: PodSim) -> str:
    """Fault sandbox_kernel: a /proc of the pod's own kernel (RL_DEMO_PROC), booted
    SANDBOX_BOOT_AFTER after the pod's creationTimestamp, the worker started ``ticks`` clock
    ticks after boot; ``uptime`` holds the uptime at this moment (the worker starts just after)."""
    proc = os.path.join(sim.workdir, "proc")
    os.makedirs(os.path.join(proc, "self"), exist_ok=True)
    booted = int(sim.created_at) + SANDBOX_BOOT_AFTER
    uptime = time.time() - booted
    hz = os.sysconf("SC_CLK_TCK")
    ticks = max(1, int((uptime - 0.05) * hz))
    with open(os.path.join(proc, "uptime"), "w", encoding="ascii") as f:
        f.write(f"{uptime:.2f} 0.00\n")
    fields = ["S"] + ["0"] * 18 + [str(ticks)] + ["0"] * 30  # field 22 (index 19 after the comm) is starttime
    with open(os.path.join(proc, "self", "stat"), "w", encoding="ascii") as f:
        f.write("1 (python3) " + " ".join(fields) + "\n")
    sim.record["kernel"] = {
        "booted_at": booted,
        "uptime": float(f"{uptime:.2f}"),
        "start_ticks": ticks,
        "kernel_boot_to_process_start_seconds": ticks / hz,
    }
    return proc


def lxcfs_proc(sim: PodSim) -> str:
    """Fault lxcfs: the /proc of a runc container under LXCFS (or Sysbox), which virtualises
    /proc/uptime but not /proc/<pid>/stat (lxc/lxcfs proc_fuse.c proc_uptime_read: the uptime is
    the age of the container's init, here the worker, which has not started yet; "%.2lf"). The
    worker's starttime stays on the host's boot clock: HOST_UPTIME seconds of ticks."""
    proc = os.path.join(sim.workdir, "proc")
    os.makedirs(os.path.join(proc, "self"), exist_ok=True)
    with open(os.path.join(proc, "uptime"), "w", encoding="ascii") as f:
        f.write("0.00 0.00\n")
    ticks = int(HOST_UPTIME * os.sysconf("SC_CLK_TCK"))
    fields = ["S"] + ["0"] * 18 + [str(ticks)] + ["0"] * 30  # field 22 (index 19 after the comm) is starttime
    with open(os.path.join(proc, "self", "stat"), "w", encoding="ascii") as f:
        f.write("1 (python3) " + " ".join(fields) + "\n")
    sim.record["kernel"] = {"lxcfs": True, "uptime": 0.0, "start_ticks": ticks}
    return proc


def micro_ts(t: float) -> str:
    """RFC 3339 with microseconds, as an events.k8s.io eventTime (MicroTime)."""
    seconds, micros = divmod(round(t * 1e6), 1000000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def compress_indexes(indexes: Any) -> str:
    """A set of completion indexes as the Job controller writes it: "1,3-5"."""
    runs: List[List[int]] = []
    for i in sorted(indexes):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"


def disruption(reason: str, message: str, t: str) -> Dict[str, Any]:
    """A pod's DisruptionTarget condition (PodDisruptionConditions, GA 1.31)."""
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": t,
    }


def match_pod_failure_policy(policy: Optional[dict], pod: dict) -> Tuple[Optional[str], bool, str]:
    """The job controller's verdict on a failed pod: (the first matching rule's action or None,
    whether the failure counts against the backoff limits, FailJob's message), as
    kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy decides it:
    rules in order; onExitCodes looks at each container (then init container) with a terminated
    state and a non-zero exit code (getMatchingContainerFromList: a container without a
    terminated state, an evicted pod's, never matches); onPodConditions at the pod's conditions
    by type and status; Ignore does not count; no match counts."""
    if not policy:
        return None, True, ""
    status = pod.get("status") or {}
    name = f"{(pod.get('metadata') or {}).get('namespace')}/{(pod.get('metadata') or {}).get('name')}"
    for number, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            codes = rule["onExitCodes"]
            wanted = set(codes.get("values") or [])
            for cstat in list(status.get("containerStatuses") or []) + list(status.get("initContainerStatuses") or []):
                term = (cstat.get("state") or {}).get("terminated")
                if term is None or codes.get("containerName") not in (None, cstat.get("name")):
                    continue
                code = term.get("exitCode", 0)
                matched = (code in wanted) if codes.get("operator") == "In" else (code not in wanted)
                if code != 0 and codes.get("operator") in ("In", "NotIn") and matched:
                    message = (
                        f"Container {cstat.get('name')} for pod {name} failed with exit code {code} "
                        f"matching {action} rule at index {number}"
                    )
                    return action, action != "Ignore", message
        elif rule.get("onPodConditions") is not None:
            for condition in status.get("conditions") or []:
                for pattern in rule["onPodConditions"]:
                    if condition.get("type") == pattern.get("type") and condition.get("status") == pattern.get(
                        "status", "True"
                    ):
                        message = (
                            f"Pod {name} has condition {condition.get('type')} matching {action} rule at index {number}"
                        )
                        return action, action != "Ignore", message
    return None, True, ""


def index_pod(meta: dict, spec: dict, index: int, label: bool = True) -> None:
    """What the Job controller adds to the pod of completion index ``index`` of an Indexed Job:
    the index annotation and label, the pod's hostname, and env JOB_COMPLETION_INDEX (from
    the annotation) in every container. ``label`` False: a controller before Kubernetes 1.28,
    which sets the annotation only (the label came with the PodIndexLabel feature, beta and on
    from 1.28: pkg/controller/job/indexed_job_utils.go addCompletionIndexLabel)."""
    meta.setdefault("annotations", {})[INDEX_KEY] = str(index)
    if label:
        meta["labels"][INDEX_KEY] = str(index)
    spec.setdefault("hostname", meta["generateName"].rstrip("-"))
    for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        env = c.setdefault("env", [])
        if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
            env.append(
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {
                        "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{INDEX_KEY}']"}
                    },
                }
            )


def qos_class(spec: dict) -> str:
    reqs, lims, any_set = [], [], False
    for c in spec.get("containers") or []:
        r = c.get("resources") or {}
        reqs.append(r.get("requests") or {})
        lims.append(r.get("limits") or {})
        any_set = any_set or bool(r.get("requests") or r.get("limits"))
    if not any_set:
        return "BestEffort"
    guaranteed = all(
        set(lim) >= {"cpu", "memory"} and all(req.get(k, lim[k]) == lim[k] for k in ("cpu", "memory"))
        for req, lim in zip(reqs, lims)
    )
    return "Guaranteed" if guaranteed else "Burstable"


SCHEDULED_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def pod_requests(spec: dict) -> Dict[str, float]:
    total = dict.fromkeys(SCHEDULED_RESOURCES, 0.0)
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        req = dict(res.get("limits") or {})
        req.update(res.get("requests") or {})
        for k in total:
            if k in req:
                total[k] += parse_quantity(req[k])
    for k, v in (spec.get("overhead") or {}).items():
        if k in total:
            total[k] += parse_quantity(v)
    return total


def resolve_field_ref(pod: dict, path: str, node: Optional[str]) -> Optional[str]:
    md = pod["metadata"]
    simple = {
        "metadata.name": md["name"],
        "metadata.namespace": md.get("namespace"),
        "metadata.uid": md.get("uid"),
        "spec.nodeName": node,
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
        "status.hostIP": "172.18.0.2",
        "status.podIP": "10.244.0.2",
    }
    if path in simple:
        return simple[path]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return (md.get(m.group(1)) or {}).get(m.group(2))
    return None


def run_controller(spec_json: str) -> int:
    spec = json.loads(spec_json)
    state = os.environ.get(STATE_ENV, "")
    token = spec["token"]
    marker = os.path.join(state, "controllers", token + ".json")
    try:
        faults = load_faults()
    except KubectlError as e:
        print(e.message, file=sys.stderr)
        faults = {}
    ctl = JobController(state, spec["namespace"], spec["job"], spec["uid"], token, faults)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        ctl.run()
    finally:
        with contextlib.suppress(OSError):
            ctl.write_stats()
        with contextlib.suppress(OSError):
            os.remove(marker)
    return 0


# --------------------------------------------------------------------------- the guide's worker
# Forms the guide's own script uses; bench/bench.py runs it side by side.  The guide's worker
# (its ConfigMap ``episode.py``) names its container paths literally (``/workspace``) and runs
# ``python`` from PATH, as the image provides.  The fake has no container filesystem, so the
# kubelet puts a ``python`` on the episode's PATH and translates the container's mount paths to
# the pod's local directories for the calls a worker opens files and changes directory with
# (``open``, ``io.open``, ``os.open``, ``os.chdir``), through a ``sitecustomize`` on PYTHONPATH.
# The tool's own worker takes its paths from RL_DEMO_WORKSPACE and never meets it.

MOUNT_PRELUDE = """# fake kubelet: the container's volume mounts (the fake has no container filesystem)
import builtins
import io
import os

_MOUNTS = %r


def _local(path):
    try:
        text = os.fspath(path)
    except TypeError:
        return path
    if not isinstance(text, str):
        return path
    for mount, local in _MOUNTS:
        if text == mount or text.startswith(mount + "/"):
            return local + text[len(mount):]
    return path


class _wrap:
    # A callable object, not a function: Python 3.9's pathlib keeps `open = os.open` as a class
    # attribute, where a function would become a method and receive the accessor as `path`.
    def __init__(self, call):
        self.call = call

    def __call__(self, path, *args, **kwargs):
        return self.call(_local(path), *args, **kwargs)


builtins.open = io.open = _wrap(io.open)
os.open = _wrap(os.open)
os.chdir = _wrap(os.chdir)
"""


def mount_container_paths(
    workdir: str, workspace: str, container: dict, spec: dict, view: Any, namespace: str, env: Dict[str, str]
) -> None:
    """The container's volumeMounts as local directories (an emptyDir is the pod's workspace, a
    ConfigMap a directory of its keys), a ``python`` on PATH, and the prelude that maps them."""
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    mounts: List[Tuple[str, str]] = []
    for mount in container.get("volumeMounts") or []:
        vol = volumes.get(mount.get("name")) or {}
        path = str(mount.get("mountPath", "")).rstrip("/")
        if not path.startswith("/"):
            continue
        if "emptyDir" in vol:
            local = (
                workspace
                if not any(m[1] == workspace for m in mounts)
                else os.path.join(workdir, "emptydir-" + str(mount["name"]))
            )
        elif "configMap" in vol:
            cm = view.get("ConfigMap", namespace, (vol.get("configMap") or {}).get("name", "")) or {}
            local = os.path.join(workdir, "configmap-" + str(mount["name"]))
            os.makedirs(local, exist_ok=True)
            for key, value in (cm.get("data") or {}).items():
                with open(os.path.join(local, key), "w", encoding="utf-8") as f:
                    f.write(value)
        else:
            continue
        os.makedirs(local, exist_ok=True)
        mounts.append((path, local))
    site = os.path.join(workdir, "site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as f:
        f.write(MOUNT_PRELUDE % (sorted(mounts, key=lambda m: -len(m[0])),))
    bin_dir = os.path.join(workdir, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.symlink(sys.executable, os.path.join(bin_dir, "python"))
    # The pod's interpreter is an image's clean one: run through this symlink beside a pyvenv.cfg
    # (Python's venv rule, Modules/getpath.py), it reads the standard library only, not the site
    # packages of the interpreter running the tests, whose .pth files may cost tens of ms a start.
    with open(os.path.join(workdir, "pyvenv.cfg"), "w", encoding="utf-8") as f:
        f.write(f"home = {os.path.dirname(sys.executable)}\ninclude-system-site-packages = false\n")
    env["PYTHONPATH"] = site
    env["PATH"] = bin_dir + os.pathsep + env["PATH"]
