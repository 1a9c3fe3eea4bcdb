"""--queue CLUSTERQUEUE: the run makes its own Kueue LocalQueue and labels its Jobs (issue 27,
"Kueue's queues").

Kueue manages only a Job labelled kueue.x-k8s.io/queue-name with a LocalQueue of that name in the
Job's own namespace (Kueue docs, "Run a Kubernetes Job"); with manageJobsWithoutQueueName an
unlabelled Job is suspended and never admitted (Kueue docs, "Setup manageJobsWithoutQueueName").
The pure rules as tables; the run through the fake cluster, whose Kueue does the same
(tests/fakekube/apiserver.py admit_job, controller.py kueue_admits)."""

from __future__ import annotations

import unittest
from typing import Any, Dict, List

import rl_batch_demo as demo
from tests.clusterobjects import settings_for
from tests.fakekube.controller import JobController
from tests.test_sources_e2e import SourcesTestCase
from tests.tiers import end_to_end


def api_group(*versions: str) -> Dict[str, Any]:
    """GET /apis/kueue.x-k8s.io as the API server answers it, preferred first."""
    entries = [{"groupVersion": f"kueue.x-k8s.io/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "name": "kueue.x-k8s.io", "versions": entries, "preferredVersion": entries[0]}


class RulesTest(unittest.TestCase):
    def test_the_version_is_the_servers_preferred_of_those_the_tool_writes(self) -> None:
        self.assertEqual(demo.served_kueue_version(api_group("v1beta2", "v1beta1")), "v1beta2")
        self.assertEqual(demo.served_kueue_version(api_group("v1beta1")), "v1beta1")
        self.assertEqual(demo.served_kueue_version(api_group("v1", "v1beta1")), "v1beta1")  # v1 not known here
        self.assertIsNone(demo.served_kueue_version(api_group("v1alpha1")))
        self.assertIsNone(demo.served_kueue_version(None))

    def test_the_local_queue_and_the_jobs_label(self) -> None:
        queue = demo.local_queue_manifest("agc-rl-x", "x", "team-a", "v1beta2")
        self.assertEqual((queue["apiVersion"], queue["kind"]), ("kueue.x-k8s.io/v1beta2", "LocalQueue"))
        self.assertEqual(queue["spec"], {"clusterQueue": "team-a"})
        self.assertEqual(queue["metadata"]["labels"][demo.RUN_LABEL], "x")
        settings = settings_for(2, image="img", deadline_seconds=60, cleanup_policy="never", queue="team-a")
        job = demo.round_job_manifest(settings, "rollout", "agc-rl-x", "x", "img")
        self.assertEqual(job["metadata"]["labels"][demo.QUEUE_NAME_LABEL], queue["metadata"]["name"])
        warmup = demo.one_episode_job_manifest(settings, "warmup-node-a", "agc-rl-x", "x")
        self.assertEqual(warmup["metadata"]["labels"][demo.QUEUE_NAME_LABEL], queue["metadata"]["name"])
        plain = demo.round_job_manifest(
            settings_for(2, image="img", deadline_seconds=60, cleanup_policy="never"), "rollout", "ns", "x", "img"
        )
        self.assertNotIn(demo.QUEUE_NAME_LABEL, plain["metadata"]["labels"])

    def test_the_preflight_reviews_local_queues_and_names_the_cluster_queue(self) -> None:
        reviews = demo.access_review_list("ns", False, local_queue=True)["items"]
        asked = {
            (r["spec"]["resourceAttributes"]["verb"], r["spec"]["resourceAttributes"]["resource"])
            for r in reviews
            if r["spec"]["resourceAttributes"]["group"] == "kueue.x-k8s.io"
        }
        self.assertEqual(asked, {("create", "localqueues"), ("get", "localqueues"), ("delete", "localqueues")})
        self.assertFalse([r for r in demo.access_review_list("ns", False)["items"] if "localqueues" in str(r)])

        def findings(kueue: demo.Read, cluster_queue: demo.Read) -> List[demo.Finding]:
            return demo.kueue_findings("ctx", "team-a", kueue, cluster_queue)

        served = demo.Read(api_group("v1beta1"))
        ok = findings(served, demo.Read({"kind": "ClusterQueue"}))
        self.assertTrue(all(finding.ok for finding in ok))
        self.assertIn("kueue.x-k8s.io/v1beta1", ok[0].detail)
        [_, missing] = findings(served, demo.Read(None))
        self.assertFalse(missing.ok)
        self.assertIn("ClusterQueue 'team-a' does not exist", missing.stop)
        [_, unknown] = findings(served, demo.Read(failure="forbidden"))
        self.assertTrue(unknown.ok)  # a ClusterQueue the user may not read is said, not a problem
        self.assertIn("cannot tell", unknown.detail)
        [absent, _] = findings(demo.Read(failure="the server could not find the requested resource"), demo.Read(None))
        self.assertFalse(absent.ok)
        self.assertIn("install Kueue, or run without --queue", absent.stop)

    def test_cleanup_deletes_only_the_runs_own_local_queue(self) -> None:
        receipt: Any = {
            "context": "c",
            "server": None,
            "namespace": "agc-rl-x",
            "run_id": "x",
            "kubeconfig": None,
            "kubectl": None,
            "created_at": None,
            "tool_version": None,
            "jobs": [],
            "uid": "ns-uid",
            "local_queue": {"name": "rl-batch-demo", "cluster_queue": "team-a", "uid": "lq-uid"},
        }
        self.assertEqual(demo.schema_problem(receipt, demo.Receipt), "")  # the record receipt.json is read against
        namespace = {"metadata": {"uid": "ns-uid", "labels": {demo.RUN_LABEL: "x"}}}
        ours = {"metadata": {"uid": "lq-uid", "labels": {demo.RUN_LABEL: "x"}}}
        self.assertEqual(demo.plan_cleanup(receipt, [], "c", None, namespace, {}, ours).local_queue, "rl-batch-demo")
        foreign = {"metadata": {"uid": "other", "labels": {demo.RUN_LABEL: "x"}}}
        refused = demo.plan_cleanup(receipt, [], "c", None, namespace, {}, foreign)
        self.assertIn("LocalQueue agc-rl-x/rl-batch-demo has UID other", refused.refusal or "")
        self.assertIsNone(demo.plan_cleanup(receipt, [], "c", None, namespace, {}, None).local_queue)  # gone
        receipt["local_queue"]["uid"] = None  # the run stopped before the create answered: its label proves it
        self.assertEqual(demo.plan_cleanup(receipt, [], "c", None, namespace, {}, ours).local_queue, "rl-batch-demo")

    def test_a_job_held_without_the_label_names_queue(self) -> None:
        settings = settings_for(2, image="img", deadline_seconds=60, cleanup_policy="never")
        job: Dict[str, Any] = {"metadata": {"name": "rollout", "labels": {}}, "spec": {"suspend": True}, "status": {}}
        observation = demo.RoundObservation(job=job, condition=None)
        error = demo.round_stopper(demo.ROUND_NOT_ADMITTED, observation, "ns/rollout", settings, "", "DIR")
        self.assertIn("Kueue holds unlabelled Jobs here (manageJobsWithoutQueueName)", str(error))
        self.assertIn("pass --queue CLUSTERQUEUE", str(error))
        job["metadata"]["labels"][demo.QUEUE_NAME_LABEL] = "rl-batch-demo"
        error = demo.round_stopper(demo.ROUND_NOT_ADMITTED, observation, "ns/rollout", settings, "", "DIR")
        self.assertIn("kubectl -n ns get workloads", str(error))


class FakeKueueTest(unittest.TestCase):
    """The fake's Kueue admits only a labelled Job whose LocalQueue exists and points at an
    existing ClusterQueue (Kueue pkg/controller/core/workload_controller.go: "LocalQueue X
    doesn't exist" keeps the Workload inadmissible)."""

    def admits(self, labels: Dict[str, str], objects: Dict[tuple, dict]) -> bool:
        class Store:
            def get(self, kind: str, namespace: Any, name: str) -> Any:
                return objects.get((kind, namespace, name))

        controller = JobController.__new__(JobController)
        controller.store, controller.ns = Store(), "ns"  # type: ignore[assignment]
        return controller.kueue_admits({"metadata": {"labels": labels}})

    def test_kueue_suspends_only_labelled_jobs_unless_it_manages_them_all(self) -> None:
        from tests.fakekube.apiserver import admit_job

        def suspended(labels: Dict[str, str], **queue: Any) -> bool:
            job = {"metadata": {"labels": labels}, "spec": {"suspend": False, "template": {"spec": {}}}}
            admit_job(job, {"queue": {"admit_after": 0, **queue}})
            return bool(job["spec"]["suspend"])

        self.assertTrue(suspended({demo.QUEUE_NAME_LABEL: "q"}))
        self.assertFalse(suspended({}))  # manageJobsWithoutQueueName false, Kueue's default: left alone
        self.assertTrue(suspended({}, manage_jobs_without_queue_name=True))  # and kueue_admits never admits it

    def test_only_a_labelled_job_with_its_local_queue_is_admitted(self) -> None:
        local_queue = {"metadata": {"name": "q"}, "spec": {"clusterQueue": "team-a"}}
        cluster_queue = {"metadata": {"name": "team-a"}}
        both = {("LocalQueue", "ns", "q"): local_queue, ("ClusterQueue", None, "team-a"): cluster_queue}
        label = {demo.QUEUE_NAME_LABEL: "q"}
        self.assertTrue(self.admits(label, both))
        self.assertFalse(self.admits({}, both))  # unlabelled: manageJobsWithoutQueueName holds it forever
        self.assertFalse(self.admits(label, {("ClusterQueue", None, "team-a"): cluster_queue}))  # no LocalQueue
        self.assertFalse(self.admits(label, {("LocalQueue", "ns", "q"): local_queue}))  # no ClusterQueue


@end_to_end
class QueueThroughTheFakeTest(SourcesTestCase):
    """The run against the fake's Kueue."""

    def test_a_run_with_its_own_local_queue_is_admitted_measured_and_cleaned_up(self) -> None:
        cluster = self.cluster(faults={"queue": {"admit_after": 1, "versions": ["v1beta2", "v1beta1"]}})
        self.run_tool(cluster, 0, "--count", "2", "--queue", "team-a")
        namespace = self.receipt()["namespace"]
        [local_queue] = cluster.objects("LocalQueue", namespace)
        self.assertEqual(local_queue["apiVersion"], "kueue.x-k8s.io/v1beta2")  # the version the server prefers
        self.assertEqual(local_queue["spec"], {"clusterQueue": "team-a"})
        self.assertEqual(
            self.receipt()["local_queue"],
            {"name": "rl-batch-demo", "cluster_queue": "team-a", "uid": local_queue["metadata"]["uid"]},
        )
        self.assertEqual(self.job()["metadata"]["labels"][demo.QUEUE_NAME_LABEL], "rl-batch-demo")
        results = self.results()
        self.assertGreaterEqual(results["client_admission_wait_seconds"], 1)
        creates = [r for r in cluster.call_records() if "create" in r["argv"] and r.get("stdin")]
        kinds = [[item["kind"] for item in demo.parse_json_documents(r["stdin"])] for r in creates]
        self.assertIn(["Namespace", "ConfigMap", "LocalQueue"], kinds)  # one create, with the namespace
        cleaned = self.tool(cluster, "cleanup", "--output", str(self.out))
        self.assertEqual(cleaned.returncode, 0, cleaned.stderr)
        self.assertIn(f"deleted LocalQueue {namespace}/rl-batch-demo", cleaned.stdout)
        self.assertEqual(cluster.objects("LocalQueue", namespace), [])

    def test_without_queue_kueue_leaves_the_unlabelled_job_alone(self) -> None:
        cluster = self.cluster(faults={"queue": {"admit_after": 30}})
        self.run_tool(cluster, 0, "--count", "2")
        self.assertFalse(self.job()["spec"]["suspend"])  # never suspended: Kueue manages only labelled Jobs
        self.assertNotIn("local_queue", self.receipt())

    def test_a_missing_cluster_queue_or_kueue_stops_before_anything_is_created(self) -> None:
        cluster = self.cluster(faults={"queue": {"admit_after": 0}})
        result = self.run_tool(cluster, demo.EXIT_CLUSTER, "--count", "1", "--queue", "nope")
        self.assertIn("ClusterQueue 'nope' does not exist", result.stderr)
        self.assertFalse(self.out.exists())  # a failed preflight leaves no DIR
        cluster.set_faults({})
        result = self.run_tool(cluster, demo.EXIT_CLUSTER, "--count", "1", "--queue", "team-a")
        self.assertIn("--queue needs Kueue's API (kueue.x-k8s.io", result.stderr)
        self.assertFalse([o for o in cluster.objects("Namespace") if o["metadata"]["name"].startswith("agc-rl-")])

    def test_check_reviews_local_queues_and_says_whether_the_cluster_queue_exists(self) -> None:
        cluster = self.cluster(faults={"queue": {"admit_after": 0}}, forbidden=[("create", "localqueues")])
        result = self.tool(cluster, "check", "--runtime", "none", "--queue", "team-a")
        self.assertEqual(result.returncode, demo.EXIT_CLUSTER, result.stderr)
        self.assertIn("ClusterQueue team-a: exists", result.stdout)
        self.assertIn("create localqueues.kueue.x-k8s.io", result.stdout)


if __name__ == "__main__":
    unittest.main()
