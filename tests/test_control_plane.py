"""The Job's life on a real control plane (issue 19): what the API server stores, the job
controller decides, the queue admits, the authorizer allows, and the garbage collector removes,
as ../shared/REAL_CLUSTER_FACTS.md lists them (W4, W7, W8, W11, W12, W13, W14, W17).

In-process call plans where the order of kubectl's answers is the point, then end-to-end runs
through the fake cluster (tests/fakekube), which models each behaviour with the upstream source
it comes from cited beside it."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import time
import unittest
import unittest.mock
from typing import Any, Dict, List, Optional, Sequence

import rl_batch_demo as demo
from tests.callplan import (
    Call,
    CallPlanTestCase,
    Cluster,
    MainThreadClock,
    Result,
    RunPlan,
    watch_event,
)
from tests.clusterobjects import JOB_CREATED_AT, NAMESPACE, Batch, namespace_object, node_object, stamp
from tests.test_run import ClusterTestCase
from tests.tiers import end_to_end

WATCH_SECONDS = RunPlan().watch_seconds


def suspended(job: Dict[str, Any]) -> Dict[str, Any]:
    """A Job as Kueue's webhook has the API server store it: suspended."""
    job = copy.deepcopy(job)
    job["spec"]["suspend"] = True
    return job


def with_conditions(job: Dict[str, Any], *conditions: Dict[str, Any], **status: Any) -> Dict[str, Any]:
    job = copy.deepcopy(job)
    job["status"] = {**job.get("status", {}), **status, "conditions": list(conditions)}
    return job


def suspended_condition(resumed_at: float = 0.0) -> Dict[str, Any]:
    """The job controller's Suspended condition: True while suspended, False once resumed."""
    if resumed_at:
        return Batch.condition("Suspended", "JobResumed", "Job resumed", stamp(resumed_at)) | {"status": "False"}
    return Batch.condition("Suspended", "JobSuspended", "Job suspended", stamp(JOB_CREATED_AT))


class ControlPlaneCase(CallPlanTestCase):
    def run_plan(self, calls: List[Call], *argv: str, count: int = 2) -> Result:
        self.expect(*calls)
        return self.tool("run", "--count", str(count), "--output", str(self.out()), *argv)


class PermissionsTest(ControlPlaneCase):
    """W8: `kubectl logs POD` GETs the pod first; `run --warmup` and `check` list the nodes."""

    def test_get_pods_is_reviewed_before_anything_is_created(self) -> None:
        plan = RunPlan()
        self.expect(*plan.preflight(denied=(("get", "pods"),)), plan.refused_watch())
        result = self.tool("run", "--output", str(self.out()))
        self.assert_fails(
            result, demo.EXIT_CLUSTER, "lacks permissions this run needs: get pods", "nothing was created"
        )

    def test_the_warmup_reviews_list_nodes(self) -> None:
        cluster = Cluster()
        denied = (("list", "nodes"),)
        rules = cluster.rules_review(demo.access_review_list(NAMESPACE, True, lists_nodes=True), denied)
        reviews = cluster.access_reviews(NAMESPACE, True, denied, lists_nodes=True)
        self.expect(cluster.config_view(), RunPlan().get_runtimeclass(), rules, reviews, RunPlan().refused_watch())
        result = self.tool("run", "--warmup", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_CLUSTER, "lacks permissions this run needs: list nodes")

    def test_rules_that_prove_nothing_are_followed_by_the_access_reviews(self) -> None:
        """A webhook authorizer beside RBAC cannot list its rules (`incomplete`), and may deny what
        RBAC's rules allow: the access reviews are asked after the rules review, and decide."""
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        asked = demo.access_review_list(NAMESPACE, True)
        calls[2] = plan.cluster.rules_review(asked, incomplete=True)  # every rule, but incomplete
        reviews = plan.cluster.access_reviews(NAMESPACE, True, (("get", "pods"),))
        self.expect(*calls[:3], reviews, plan.refused_watch())
        result = self.tool("run", "--count", "2", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_CLUSTER, "lacks permissions this run needs: get pods")
        self.assertFalse(self.out().exists())  # a failed preflight leaves no output directory
        [rules, access] = [argv for argv in self.stub.calls() if "create" in argv]
        self.assertIn(demo.RULES_REVIEW_PATH, rules)
        self.assertIn("--validate=false", access)

    def test_the_access_reviews_come_only_after_rules_that_prove_nothing(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        calls[2] = plan.cluster.rules_review(demo.access_review_list(NAMESPACE, True), incomplete=True)
        calls[3:3] = [plan.cluster.access_reviews(NAMESPACE, True)]
        self.expect(*calls)
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        recorded = self.recorded_calls()
        [rules] = [call for call in recorded if demo.RULES_REVIEW_PATH in call["argv"]]
        [access] = [call for call in recorded if "--validate=false" in call["argv"]]
        self.assertGreaterEqual(access["started"], rules["started"] + rules["seconds"] - 0.002)
        self.assertEqual(len(recorded), len(plan.run()) + 1)  # one process more than where rules prove all

    def test_without_watching_serviceaccounts_the_run_skips_that_wait_and_says_so(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = plan.run()[:-1]  # every call but the account's watch
        calls[:3] = plan.preflight(denied=(("watch", "serviceaccounts"),))
        self.expect(*calls, plan.refused_watch())  # started beside the reviews, ended by their answer
        result = self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        self.assertIn("warning: ServiceAccount wait: denied: watch serviceaccounts; a run creates", result.stderr)
        recorded = self.recorded_calls()
        [account] = [call for call in recorded if "serviceaccounts" in call["argv"]]
        [together] = [call for call in recorded if "--validate=strict" in call["argv"]]
        # no wait: the account's watch ended before the create was given its input (Kubectl.prepare)
        self.assertLessEqual(account["started"] + account["seconds"], together["input_at"] + 0.001)

    def test_check_says_whether_runs_may_wait_for_the_serviceaccount(self) -> None:
        reviews = demo.access_review_list(NAMESPACE, False)["items"]
        for review in reviews:
            attributes = review["spec"]["resourceAttributes"]
            review["status"] = {"allowed": attributes["resource"] != "serviceaccounts"}
        findings = demo.preflight_findings(context="c", server=None, runtime=None, reviews=demo.Read(reviews))
        by_name = {finding.name: finding for finding in findings}
        self.assertTrue(by_name["permissions"].ok)
        self.assertTrue(by_name["ServiceAccount wait"].ok)  # never a problem of the verdict
        self.assertIn("denied: list serviceaccounts, watch serviceaccounts", by_name["ServiceAccount wait"].detail)

    def test_a_run_without_warmup_does_not_ask_for_list_nodes(self) -> None:
        items = demo.access_review_list(NAMESPACE, True)["items"]
        attributes = [
            (r["spec"]["resourceAttributes"]["verb"], r["spec"]["resourceAttributes"]["resource"]) for r in items
        ]
        self.assertNotIn(("list", "nodes"), attributes)
        self.assertIn(("get", "pods"), attributes)
        self.assertIn(("list", "jobs"), attributes)  # the Job's list watch
        self.assertIn(("watch", "serviceaccounts"), attributes)
        both = demo.access_review_list(NAMESPACE, True, kubelet_metrics=True, lists_nodes=True)["items"]
        self.assertEqual(len(both), len(items) + 2)  # get nodes/proxy, and list nodes once


class DecisionTest(ControlPlaneCase):
    """W11: the job controller's first condition is its decision; Complete and Failed may come
    much later (every pod terminated, grace periods included)."""

    def test_success_criteria_met_is_the_decision(self) -> None:
        batch = Batch(count=2)
        plan = RunPlan(batch)
        decided = with_conditions(
            batch.job_complete(),
            Batch.condition("SuccessCriteriaMet", "", "", stamp(JOB_CREATED_AT + 6)),  # 1.31: no reason
        )
        calls = plan.run()
        calls[5] = dataclasses.replace(plan.job_watch(final=decided), hold=False)  # no Complete ever comes
        result = self.run_plan(calls, "--quiet")
        self.assertEqual(result.code, 0, result)
        results = self.results()
        self.assertEqual(results["job_success_criteria_met_at"], JOB_CREATED_AT + 6)
        self.assertIsNone(results["job_complete_at"])
        self.assertIsNotNone(results["client_observed_complete_at"])

    def test_failure_target_past_the_deadline_is_the_deadline(self) -> None:
        self.set_timing(final_pods_grace_seconds=0.5)  # waited out: the watched pods never settle here
        batch = Batch(count=2)
        plan = RunPlan(batch)
        stuck = batch.episodes[0]
        target = with_conditions(
            batch.job({"failed": 1, "succeeded": 1, "terminating": 1}),
            Batch.condition("FailureTarget", "DeadlineExceeded", "Job was active longer", stamp(JOB_CREATED_AT + 240)),
        )  # Failed waits for the terminating pod, whose worker ignores SIGTERM
        running, finished = batch.pod(stuck, "running"), batch.pod(batch.episodes[1])
        calls = plan.run()[:5]
        calls += [
            dataclasses.replace(plan.job_watch(final=target), hold=False),
            plan.pod_watch(chunks=[watch_event("ADDED", running), watch_event("MODIFIED", finished)]),
            plan.cluster.get_list("pods,events", [running, finished]),
            *plan.follows(batch, [running, finished]),  # both followed once one has ended
            plan.serviceaccount_watch(),
        ]
        result = self.run_plan(calls, "--quiet")
        self.assert_fails(result, demo.EXIT_TIMEOUT, f"Job {NAMESPACE}/rollout hit its deadline of 240 s")
        self.assertNotIn("did not finish", result.stderr)

    def test_the_decision_alone_or_with_the_terminal_condition(self) -> None:
        job = Batch().job()
        for conditions, decision in (
            ([], None),
            (["SuccessCriteriaMet"], "Complete"),
            (["SuccessCriteriaMet", "Complete"], "Complete"),
            (["FailureTarget"], "Failed"),
            (["FailureTarget", "Failed"], "Failed"),
            (["Suspended"], None),
        ):
            decided = with_conditions(job, *(Batch.condition(c, "R", "m", stamp(JOB_CREATED_AT)) for c in conditions))
            self.assertEqual(demo.job_condition(decided), decision, conditions)
        target = with_conditions(job, Batch.condition("FailureTarget", "DeadlineExceeded", "late", stamp(0)))
        self.assertEqual(demo.failed_condition_text(target), "DeadlineExceeded: late")


class QueueTest(ControlPlaneCase):
    """W17: Kueue creates the Job suspended and resumes it once admitted, or never; MultiKueue
    hands it to another controller; a webhook may change what it runs."""

    def queued_calls(self, plan: RunPlan, admitted_at: float) -> List[Call]:
        batch = plan.batch
        created = suspended(batch.job())
        waiting = with_conditions(created, suspended_condition())
        resumed = with_conditions(batch.job_running(), suspended_condition(admitted_at), startTime=stamp(admitted_at))
        final = batch.job_complete()
        final["status"]["conditions"].insert(0, suspended_condition(admitted_at))
        calls = plan.run()
        calls[4] = plan.cluster.create_raw(batch.manifest(), created)
        # A queued Job's watches last for the wait in the queue and then the Job's own wait.
        seconds = 2 * plan.watch_seconds - 5
        job_watch = plan.job_watch(final=final, seconds=seconds)
        resume = watch_event("MODIFIED", resumed, delay=0.3)  # queued for a while: the progress line says so
        calls[5] = dataclasses.replace(job_watch, chunks=(watch_event("ADDED", waiting), resume, job_watch.chunks[-1]))
        calls[6] = dataclasses.replace(calls[6], argv=plan.pod_watch(seconds=seconds).argv)
        return calls

    def test_a_queued_job_waits_and_its_admission_is_its_own_figure(self) -> None:
        plan = RunPlan(Batch(count=2))
        admitted_at = JOB_CREATED_AT + 1
        result = self.run_plan(self.queued_calls(plan, admitted_at))
        self.assertEqual(result.code, 0, result)
        self.assertIn("queued: suspended until a queue admits it", result.stderr)
        results = self.results()
        self.assertEqual((results["job_created_at"], results["job_admitted_at"]), (JOB_CREATED_AT, admitted_at))
        self.assertEqual(results["admission_wait_seconds"], 1.0)
        self.assertGreaterEqual(results["client_admission_wait_seconds"], 0.3)
        self.assertGreaterEqual(results["client_job_complete_seconds"], results["client_admission_wait_seconds"])
        for row, episode in zip(results["pods"], plan.batch.episodes):
            self.assertEqual(row["batch_start"], admitted_at)  # the batch figures count from the admission
            self.assertAlmostEqual(row["batch_to_ready_seconds"], episode.events[0]["at"] - admitted_at)
        self.assertIn("queued: 1 s from Job created to admitted", result.stdout)
        [round_result] = results["round_results"]
        self.assertEqual(round_result["admission_wait_seconds"], 1.0)

    def test_an_unqueued_job_is_admitted_when_created(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.run_plan(plan.run(), "--quiet")
        results = self.results()
        self.assertEqual(results["job_admitted_at"], results["job_created_at"])
        self.assertEqual(results["admission_wait_seconds"], 0.0)
        self.assertIsNone(results["client_admission_wait_seconds"])

    def test_a_job_never_admitted_ends_with_exit_4(self) -> None:
        batch = Batch(count=2, deadline_seconds=1)
        plan = RunPlan(batch, deadline_seconds=1)
        created = suspended(batch.job())
        calls = [*plan.preflight(), plan.create_namespace_and_configmap(), plan.serviceaccount_watch()]
        by_name = ["jobs", "--field-selector", "metadata.name=rollout"]
        watching = [watch_event("ADDED", with_conditions(created, suspended_condition()))]
        calls += [
            plan.cluster.create_raw(batch.manifest(), created),
            plan.cluster.watch(by_name, watching, 7, "job-rollout"),  # 1 s to wait, then 1 s to run, + 5 s
            plan.cluster.watch(["pods", "-l", batch.selector], [], 7, "pods-rollout"),
            plan.cluster.get_list("pods,events", []),
        ]
        with unittest.mock.patch.object(demo, "CLIENT_GRACE_SECONDS", 0):
            result = self.run_plan(calls, "--timeout", "1", "--quiet")
        self.assert_fails(result, demo.EXIT_TIMEOUT, f"Job {NAMESPACE}/rollout was never admitted", "stayed suspended")

    def refused(self, plan: RunPlan, stored: Dict[str, Any], *fragments: str) -> None:
        calls = [*plan.preflight(), plan.create_namespace_and_configmap(), plan.serviceaccount_watch()]
        calls += [
            plan.cluster.create_raw(plan.batch.manifest(), stored),
            plan.cluster.delete("job", "rollout", "--cascade=foreground", "--wait=false", namespace=NAMESPACE),
        ]
        result = self.run_plan(calls, "--quiet")
        self.assert_fails(result, demo.EXIT_CLUSTER, *fragments, "it was deleted at once")

    def test_a_job_another_controller_manages_is_refused_and_deleted(self) -> None:
        plan = RunPlan(Batch(count=2))
        stored = plan.batch.job()
        stored["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        self.refused(plan, stored, "is managed by kueue.x-k8s.io/multikueue (spec.managedBy")

    def test_a_job_whose_template_a_webhook_changed_is_refused_and_deleted(self) -> None:
        plan = RunPlan(Batch(count=2))
        stored = plan.batch.job()
        template = stored["spec"]["template"]["spec"]
        template["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2"})
        template["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
        self.refused(
            plan,
            stored,
            "the cluster changed what Job",
            "containers 'istio-proxy' added",
            "container episode's securityContext.allowPrivilegeEscalation False became True",
        )

    def test_a_pod_a_webhook_changed_is_refused_and_its_job_deleted(self) -> None:
        batch = Batch(count=2)
        plan = RunPlan(batch)
        pod = batch.pod(batch.episodes[0], "pending")
        pod["spec"]["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2"})
        calls = plan.run()[:5]
        calls += [
            plan.job_watch(chunks=[watch_event("ADDED", batch.job_running())]),
            plan.pod_watch(chunks=[watch_event("ADDED", pod)]),
            plan.cluster.delete("job", "rollout", "--cascade=foreground", "--wait=false", namespace=NAMESPACE),
            plan.serviceaccount_watch(),
        ]
        result = self.run_plan(calls, "--quiet")
        self.assert_fails(
            result, demo.EXIT_CLUSTER, f"what pod {pod['metadata']['name']} of Job", "'istio-proxy' added", "deleted"
        )

    def test_a_changed_pod_the_watch_never_showed_is_refused_from_the_listing(self) -> None:
        """The pod watch lagged the Job's: no pod seen by the decision, so the pods come from the
        listing, and are checked there (CI's end-to-end pass saw such a run exit 0)."""
        self.set_timing(final_pods_grace_seconds=0.05)
        batch = Batch(count=2)
        plan = RunPlan(batch)
        changed = batch.pod(batch.episodes[1])
        changed["spec"]["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2"})
        pods = [batch.pod(batch.episodes[0]), changed]
        calls = plan.run()[:5]
        calls += [
            plan.job_watch(),
            plan.pod_watch(chunks=[]),
            plan.cluster.get_list("pods,events", [*pods, *batch.events()]),
            plan.cluster.delete("job", "rollout", "--cascade=foreground", "--wait=false", namespace=NAMESPACE),
            plan.serviceaccount_watch(),
        ]
        result = self.run_plan(calls, "--quiet")
        name = changed["metadata"]["name"]
        self.assert_fails(
            result, demo.EXIT_CLUSTER, f"what pod {name} of Job", "'istio-proxy' added", "deleted", "pods.json"
        )
        self.assertFalse(list(self.out().glob("*.log")))  # no log read of a Job refused
        self.assertEqual(len(self.read_json("pods.json")["items"]), 2)  # the diagnostics first

    def test_template_changes_ignore_what_the_api_server_defaults(self) -> None:
        submitted = Batch().manifest()["spec"]["template"]["spec"]
        defaulted = copy.deepcopy(submitted)
        defaulted["containers"][0].update(terminationMessagePath="/dev/termination-log", imagePullPolicy="Always")
        defaulted["containers"][0]["securityContext"]["procMount"] = "Default"
        defaulted.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler")
        # what managed clusters add to every pod only confines it more: GKE Autopilot's seccomp
        # profile, OpenShift's SELinux labels
        defaulted["securityContext"].update(seccompProfile={"type": "RuntimeDefault"}, seLinuxOptions={"level": "s0"})
        self.assertEqual(demo.template_changes(submitted, defaulted), [])
        loosened = copy.deepcopy(defaulted)
        loosened["containers"][0]["securityContext"].update(privileged=True, capabilities={"add": ["SYS_ADMIN"]})
        loosened["securityContext"]["runAsUser"] = 0
        self.assertEqual(
            demo.template_changes(submitted, loosened),
            [
                "container episode's securityContext.capabilities {'drop': ['ALL']} became {'add': ['SYS_ADMIN']}",
                "container episode's securityContext.privileged True was added",
                "the pod's securityContext.runAsUser 1000 became 0",
            ],
        )
        defaulted["containers"][0]["image"] = "mirror.invalid/python:3.12-alpine"
        self.assertEqual(
            demo.template_changes(submitted, defaulted),
            ["container episode's image 'python:3.12-alpine' became 'mirror.invalid/python:3.12-alpine'"],
        )


class CleanupWaitTest(CallPlanTestCase):
    """W14, N4: the garbage collector deletes about 7 pods a second: 3 requests each at kubeAPIQPS 20."""

    def test_the_wait_grows_with_the_jobs_pods(self) -> None:
        self.assertEqual(demo.cleanup_wait_seconds(120, 1000), 270)  # 3 requests a pod at kubeAPIQPS 20
        self.assertEqual(demo.job_pod_count({"spec": {"completions": 10}, "status": {"failed": 12}}), 12)
        self.assertEqual(demo.job_pod_count(None), 0)
        plan = RunPlan(Batch(count=10))
        self.expect(*plan.run())
        self.run_ok("run", "--count", "10", "--output", str(self.out()), "--quiet")
        still_there = dataclasses.replace(plan.get_job(plan.batch.job_complete()), repeat=True)
        self.expect(
            plan.cluster.config_view(bound=True),
            plan.get_namespace(),
            plan.get_job(plan.batch.job_complete()),
            plan.cluster.delete("job", "rollout", "--cascade=foreground", "--wait=false", namespace=NAMESPACE),
            still_there,
            # its watch ends at once having shown it there (a proxy that cuts long requests): the
            # polls alone, on the tool's schedule, which the clock below makes take no time
            plan.deletion_watch("job", "rollout", 3, [watch_event("ADDED", plan.batch.job_complete())], hold=False),
            # what holds it: its pods (none stuck on a node that stopped answering here)
            plan.cluster.get_list("pods", plan.batch.pods(), flags=["-l", plan.batch.selector]),
        )
        self.set_timing(cleanup_first_poll=0.25, cleanup_max_poll=2.0)  # the tool's own schedule
        clock = MainThreadClock()  # the waits take no time
        with unittest.mock.patch.object(demo, "time", clock):
            result = self.tool("cleanup", "--output", str(self.out()), "--timeout", "1")
        line = self.assert_fails(result, demo.EXIT_TIMEOUT, "still terminating after 2.5 s")  # 1 s + 10 pods at 20/3/s
        self.assertNotIn("stuck Terminating", line)
        self.assertTrue(clock.seconds)  # waited on the clock: polls take real time, waits none
        self.assertLessEqual(sum(clock.seconds), 2.5)

    def cleanup_plan(
        self, plan: RunPlan, *job_gone: Call, namespace_gone: Sequence[Call] = (), namespace_there: bool = True
    ) -> List[Call]:
        """cleanup after a run: ownership reads, the Job deleted and seen there once, then
        `job_gone`; the namespace deleted and seen there once (or gone at once), then `namespace_gone`."""
        job = plan.batch.job_complete()
        return [
            plan.cluster.config_view(bound=True),
            plan.get_namespace(),
            plan.get_job(job),
            plan.cluster.delete("job", "rollout", "--cascade=foreground", "--wait=false", namespace=NAMESPACE),
            plan.get_job(job),
            *job_gone,
            plan.cluster.delete("namespace", NAMESPACE, "--wait=false"),
            plan.get_namespace(present=namespace_there),
            *namespace_gone,
        ]

    def test_a_deletion_is_seen_on_its_watch_without_another_poll(self) -> None:
        """Each object still there at the first poll is watched by name: its DELETED event ends
        the wait (a trainer's step that cleans up waits for the deletion, not for the polls'
        0.25 s doubling). No second poll is planned: one would be an unexpected call."""
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        job, namespace = plan.batch.job_complete(), namespace_object()
        job_gone = watch_event("DELETED", job, delay=0.05)
        namespace_gone = watch_event("DELETED", dict(namespace, status={"phase": "Terminating"}), delay=0.05)
        self.expect(
            *self.cleanup_plan(
                plan,
                plan.deletion_watch("job", "rollout", 121, [watch_event("ADDED", job), job_gone], hold=True),
                namespace_gone=[plan.deletion_watch("namespace", NAMESPACE, 121, [namespace_gone], hold=True)],
            )
        )
        self.set_timing(cleanup_first_poll=0.25, cleanup_max_poll=2.0)  # the tool's own schedule
        result = self.tool("cleanup", "--output", str(self.out()))
        self.assertEqual(result.code, 0, result)
        self.assertIn(f"deleted Job {NAMESPACE}/rollout and its pods", result.stdout)
        self.assertIn(f"deleted namespace {NAMESPACE}", result.stdout)

    def test_a_deletion_of_another_object_of_that_name_does_not_end_the_wait(self) -> None:
        """The watch's DELETED counts only with the deleted object's UID (from the ownership
        read): another Job of that name (deleted and made again meanwhile) is not this one, so
        the polls go on, and the one planned after it shows the Job gone."""
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        other = copy.deepcopy(plan.batch.job_complete())
        other["metadata"]["uid"] = "00000000-0000-4000-8000-00000000beef"
        watch = plan.deletion_watch("job", "rollout", 121, [watch_event("DELETED", other)], hold=True)
        self.expect(*self.cleanup_plan(plan, watch, plan.get_job(None), namespace_there=False))
        self.set_timing(cleanup_first_poll=0.05, cleanup_max_poll=0.05)  # the second poll soon
        result = self.tool("cleanup", "--output", str(self.out()))
        self.assertEqual(result.code, 0, result)
        self.assertIn(f"deleted Job {NAMESPACE}/rollout and its pods", result.stdout)

    def test_a_pod_stuck_terminating_on_a_node_that_stopped_answering_is_named(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        still_there = dataclasses.replace(plan.get_job(plan.batch.job_complete()), repeat=True)
        stuck = plan.batch.pods()
        stuck[0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
        stuck[0]["spec"]["nodeName"] = "node-a"
        lost = node_object("node-a")
        lost["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "lastTransitionTime": "2026-01-01T00:09:00Z",
            }
        ]
        self.expect(
            plan.cluster.config_view(bound=True),
            plan.get_namespace(),
            plan.get_job(plan.batch.job_complete()),
            plan.cluster.delete("job", "rollout", "--cascade=foreground", "--wait=false", namespace=NAMESPACE),
            still_there,
            plan.deletion_watch("job", "rollout", 2, [watch_event("ADDED", plan.batch.job_complete())], hold=False),
            plan.cluster.get_list("pods", stuck, flags=["-l", plan.batch.selector]),
            plan.cluster.get("node", "node-a", lost, namespace=None),
        )
        self.set_timing(cleanup_first_poll=0.25, cleanup_max_poll=2.0)  # the tool's own schedule
        clock = MainThreadClock()  # the waits take no time (with no pause, the polls span 1.3 real seconds)
        with unittest.mock.patch.object(demo, "time", clock):
            result = self.tool("cleanup", "--output", str(self.out()), "--timeout", "1")
        line = self.assert_fails(result, demo.EXIT_TIMEOUT, "still terminating after 1.3 s")  # 1 s + 2 pods at 20/3/s
        self.assertTrue(clock.seconds)  # waited on the clock
        self.assertLessEqual(sum(clock.seconds), 1.3)
        name = stuck[0]["metadata"]["name"]
        self.assertIn(
            f"node node-a: Unknown since 2026-01-01T00:09:00Z (NodeStatusUnknown), its pod {name} stuck", line
        )
        self.assertIn("goes only once the Node is deleted or tainted node.kubernetes.io/out-of-service (PodGC)", line)


@end_to_end
class FakeControlPlaneTest(ClusterTestCase):
    """End to end through the fake, which models each behaviour as the upstream source does."""

    def run_in(self, faults: Dict[str, Any], *argv: str, count: int = 2) -> Any:
        self.cluster.set_faults({"stand_in_worker": True, **faults})
        return self.tool("run", "--count", str(count), "--output", "out", *argv)

    def recorded(self) -> List[Dict[str, Any]]:
        return json.loads((self.out() / "kubectl-calls.json").read_text())

    def test_a_job_done_between_the_get_and_the_watch_is_seen_on_the_watch(self) -> None:
        """W7: a single object's watch drops its first event, so a Job that completed between
        kubectl's GET and its watch would show Complete only when the watch ends (here ~40 s)."""
        result = self.run_in({"watch_gap": 3}, "--timeout", "5", count=1)
        self.assertEqual(result.returncode, 0, result.stderr)
        job_watches = [call for call in self.recorded() if call.get("watch") and "jobs" in call["argv"]]
        self.assertEqual(len(job_watches), 1, self.recorded())
        self.assertIn(job_watches[0]["exit"], (-15, 143))  # ended by the tool's SIGTERM once the decision came
        self.assertFalse([call for call in self.recorded() if call["argv"][-5:-2] == ["get", "job", "rollout"]])

    def test_an_error_event_ends_the_jobs_watch_and_polling_takes_over(self) -> None:
        result = self.run_in({"watch_error": ["jobs"], "episode_seconds": 2})  # the Job is not done when watched
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ended early (ERROR 410: Expired: too old resource version", result.stderr)

    def test_success_criteria_met_carries_no_reason_as_a_1_31_job_controller_writes_it(self) -> None:
        """Issue 27 (REAL_CLUSTER_FACTS N5): SuccessCriteriaMet and Complete without a reason or
        message; the tool decides on the first and times it all the same."""
        result = self.run_in({}, count=1)
        self.assertEqual(result.returncode, 0, result.stderr)
        conditions = json.loads((self.out() / "job.json").read_text())["status"]["conditions"]
        decided = {c["type"]: c for c in conditions if c["type"] in ("SuccessCriteriaMet", "Complete")}
        self.assertEqual(sorted(decided), ["Complete", "SuccessCriteriaMet"])
        for condition in decided.values():
            self.assertNotIn("reason", condition)
            self.assertNotIn("message", condition)
        results = json.loads((self.out() / "results.json").read_text())
        self.assertIsNotNone(results["job_success_criteria_met_at"])

    def test_a_jobs_watch_printing_what_is_no_watch_event_falls_back_to_polling(self) -> None:
        """Issue 27: bytes that are not UTF-8, or a Job of a shape no API server sends, on the
        Job's watch: the run polls and succeeds (never exit 4 at its deadline, nor a traceback)."""
        rows = (("not_utf8", "it printed bytes that are not UTF-8"), ("odd_shape", "an object of an unexpected shape"))
        for garbage, reason in rows:
            with self.subTest(garbage):
                shutil.rmtree(self.out(), ignore_errors=True)
                result = self.run_in({"watch_garbage": {"jobs": garbage}, "episode_seconds": 2}, "--timeout", "20")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertNotIn("Traceback", result.stderr)
                self.assertIn(f"ended early ({reason}", result.stderr)

    def test_a_worker_deaf_to_sigterm_still_hits_its_deadline(self) -> None:
        """W11: FailureTarget at the deadline; Failed only when the pod is gone, 40 s later."""
        faults = {"deadline_seconds": 2, "termination_grace_seconds": 40, "episode": {"0": "ignore_sigterm"}}
        result = self.run_in(faults, "--timeout", "5", count=1)
        self.assert_fails(result, demo.EXIT_TIMEOUT, "hit its deadline of 5 s")
        [job] = self.cluster.objects("Job", self.receipt()["namespace"])
        self.assertEqual([c["type"] for c in job["status"]["conditions"]], ["FailureTarget"])  # Failed still waits

    def test_a_queued_job_is_waited_for_and_its_figures_start_at_admission(self) -> None:
        result = self.run_in({"queue": {"admit_after": 2}}, "--queue", "team-a")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("queued: suspended until a queue admits it", result.stderr)
        results = self.results()
        self.assertGreaterEqual(results["client_admission_wait_seconds"], 2)
        self.assertGreaterEqual(results["admission_wait_seconds"], 1)  # whole seconds
        self.assertEqual(results["job_admitted_at"], results["job_created_at"] + results["admission_wait_seconds"])
        for row in results["pods"]:
            self.assertEqual(row["batch_start"], results["job_admitted_at"])
            self.assertGreaterEqual(row["created_at"], row["batch_start"])

    def test_a_sidecar_injected_into_the_pods_is_refused(self) -> None:
        result = self.run_in({"admission": ["pod_sidecar"]})
        self.assert_fails(result, demo.EXIT_CLUSTER, "'istio-proxy' added", "it was deleted at once")
        self.cluster.wait_idle()
        namespace = self.receipt()["namespace"]
        for _ in range(100):  # the garbage collector takes the pods first, then the Job
            if not self.cluster.objects("Job", namespace):
                break
            time.sleep(0.05)
        self.assertEqual(self.cluster.objects("Job", namespace), [])

    def test_a_job_multikueue_manages_is_refused(self) -> None:
        result = self.run_in({"admission": ["managed_by"]})
        self.assert_fails(result, demo.EXIT_CLUSTER, "managed by kueue.x-k8s.io/multikueue", "deleted at once")

    def test_kubernetes_127_refuses_per_index_fields_in_one_line(self) -> None:
        """W12: strict validation on 1.27 refuses the unknown field; the line names the version."""
        result = self.run_in({"server_version": "v1.27.3"}, "--max-failed-episodes", "1")
        self.assert_fails(
            result, demo.EXIT_CLUSTER, "does not know spec.backoffLimitPerIndex", "Kubernetes 1.29 or later", "on by"
        )
        self.assertEqual(self.cluster.objects("Job", self.receipt()["namespace"]), [])

    def test_a_late_default_serviceaccount_is_waited_for_not_counted(self) -> None:
        """W4: pods of a namespace without its default ServiceAccount are refused (FailedCreate)."""
        result = self.run_in({"serviceaccount_delay": 2.5}, "--quiet")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("FailedCreate", (self.out() / "events.txt").read_text())
        self.assertLessEqual(len(self.recorded()), 10)

    def test_logs_of_a_pod_need_get_pods(self) -> None:
        self.cluster = self.make_cluster(forbidden=[("get", "pods")])
        result = self.run_in({}, "--quiet")
        self.assert_fails(result, demo.EXIT_CLUSTER, "lacks permissions this run needs: get pods")

    def test_a_429_with_retry_after_is_retried_by_kubectl_itself(self) -> None:
        # the events' listing after the decision: `get events`, or `get pods,events` when the pod
        # watch had not shown every pod final (a loaded machine): the 429 meets whichever it is
        retried = [
            {"match": listing, "error": "429", "retry_after": 0.5, "times": 1}
            for listing in ("get events", "get pods,events")
        ]
        result = self.run_in({"api_errors": retried}, "--quiet")
        self.assertEqual(result.returncode, 0, result.stderr)
        listings = [call for call in self.recorded() if call["argv"][-2:] == ["-o", "json"]]
        listings = [call for call in listings if call["argv"][-3] in ("events", "pods,events")]
        self.assertEqual([call["exit"] for call in listings], [0])  # no retry of the tool's own


@end_to_end
class FakeKubectlWordingTest(ClusterTestCase):
    """The fake's own words where the tool's reads depend on them (contract tests, tests/test_kubectl_contract.py)."""

    def kubectl(self, *args: str, input: Optional[str] = None, **faults: Any) -> Any:
        import subprocess

        self.cluster.set_faults(faults)
        env = self.cluster.env()
        return subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, env=env, timeout=30)

    def test_a_single_objects_watch_of_a_missing_object_fails_at_once(self) -> None:
        watch = self.kubectl("get", "job", "nope", "-w", "-o", "json", "--output-watch-events", "--request-timeout=20s")
        self.assertEqual((watch.returncode, watch.stdout), (1, ""))
        self.assertEqual(watch.stderr, 'Error from server (NotFound): jobs.batch "nope" not found\n')

    def test_logs_of_a_missing_pod_by_kubectl_minor(self) -> None:
        for version, expected in (
            ("v1.32.4", 'error: error from server (NotFound): pods "p0" not found in namespace "default"'),
            ("v1.29.9", 'Error from server (NotFound): pods "p0" not found'),
        ):
            logs = self.kubectl("logs", "p0", "-c", "episode", client_version=version)
            self.assertEqual((logs.returncode, logs.stderr.strip()), (1, expected), version)
        missing = self.kubectl("logs", "p0", "-c", "episode", "-n", "gone")
        self.assertEqual(missing.stderr.strip(), 'Error from server (NotFound): namespaces "gone" not found')

    def test_events_about_one_object_stop_after_25(self) -> None:
        """W13: client-go's spam filter (events_cache.go): 25 events per source and object."""
        from tests.test_fake_kubectl import NS, job_manifest, setup_manifest

        for manifest in (setup_manifest(), job_manifest(completions=30, parallelism=30)):
            created = self.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(manifest))
            self.assertEqual(created.returncode, 0, created.stderr)
        self.cluster.wait_idle(60)
        reasons = [event["reason"] for event in self.cluster.objects("Event", NS)]
        self.assertEqual(reasons.count("SuccessfulCreate"), 25)
        self.assertEqual(reasons.count("Started"), 30)  # the kubelet's, one pod each: none dropped
        self.assertNotIn("Completed", reasons)  # the Job's 26th event

    def test_logs_need_get_pods_or_list_pods(self) -> None:
        self.cluster = self.make_cluster(forbidden=[("get", "pods")])
        one = self.kubectl("logs", "p0", "-c", "episode")
        self.assertIn('cannot get resource "pods" in API group ""', one.stderr)
        self.cluster = self.make_cluster(forbidden=[("list", "pods")])
        selected = self.kubectl("logs", "-l", "job-name=rollout", "-c", "episode")
        self.assertIn('cannot list resource "pods" in API group ""', selected.stderr)


if __name__ == "__main__":
    unittest.main()
