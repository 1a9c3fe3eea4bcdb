"""A node that stops answering (issue 27): its pods keep phase Running, so the job controller,
which with a podFailurePolicy replaces only Failed pods (job_controller.go isPodFailed,
onlyReplaceFailedPods), neither counts nor retries them until PodGC marks them Failed, once the
Node is deleted or tainted node.kubernetes.io/out-of-service (podgc/gc_controller.go gcOrphaned,
gcTerminating). The run names the node and its state; cleanup names a pod stuck Terminating there.

The pure words as tables; the run through the fake cluster, whose kubelet stops answering
(fault node_lost: tests/fakekube/controller.py lose, tick_lost)."""

from __future__ import annotations

import unittest
from typing import Any, Dict

import rl_batch_demo as demo
from tests.test_run import run_script
from tests.test_sources_e2e import SourcesTestCase
from tests.tiers import end_to_end

# a quick replacement; and the pods start once the pod watch has listed, as on a real cluster: on a
# loaded machine the fake's lost pod was otherwise gone before the watch could prove it lost (CI)
FAST_BACKOFF = {"pod_failure_backoff_seconds": 0.2, "pods_wait_for_pod_watch": 30}


def pod(phase: str = "Running", ready: str = "False", running: bool = True, **extra: Any) -> Dict[str, Any]:
    state = {"running": {"startedAt": "2026-01-01T00:00:00Z"}} if running else {"waiting": {"reason": "x"}}
    conditions = [{"type": "Ready", "status": ready}, *extra.pop("conditions", [])]
    return {
        "metadata": {"name": "rollout-0-abcde"},
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [{"name": "episode", "state": state}],
        },
    }


def node(ready: str, **spec: Any) -> Dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": ready,
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastTransitionTime": "2026-01-01T00:00:05Z",
    }
    return {"metadata": {"name": "node-a"}, "spec": spec, "status": {"conditions": [condition]}}


class WordsTest(unittest.TestCase):
    def test_a_running_pod_marked_not_ready_names_its_node(self) -> None:
        self.assertEqual(demo.unanswered_node(pod()), "node-a")  # MarkPodsNotReady: the condition alone
        self.assertEqual(demo.unanswered_node(pod(ready="True")), "")
        self.assertEqual(demo.unanswered_node(pod(running=False)), "")  # still starting: its kubelet says so
        self.assertEqual(demo.unanswered_node(pod(phase="Failed")), "")
        kubelet_says = pod()
        kubelet_says["status"]["conditions"][0]["reason"] = "ContainersNotReady"
        self.assertEqual(demo.unanswered_node(kubelet_says), "")
        deleting = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
        self.assertEqual(demo.unanswered_node(pod(ready="True", conditions=[deleting])), "node-a")

    def test_a_nodes_state_in_words(self) -> None:
        self.assertEqual(
            demo.node_state("node-a", node("Unknown")),
            "node node-a: Unknown since 2026-01-01T00:00:05Z (NodeStatusUnknown, Kubelet stopped posting node status.)",
        )
        self.assertIn(": NotReady since", demo.node_state("node-a", node("False")))
        tainted = node("Unknown", taints=[{"key": demo.OUT_OF_SERVICE_TAINT, "effect": "NoExecute"}])
        self.assertTrue(demo.node_state("node-a", tainted).endswith(", tainted out-of-service"))
        self.assertEqual(demo.node_state("node-a", None), "node node-a: deleted")
        self.assertIn("state unknown (cannot read it: forbidden)", demo.node_state("node-a", None, "forbidden"))
        note = demo.lost_node_note({"p1": "node-a", "p2": "node-a"}, {"node-a": "node node-a: Unknown"})
        self.assertEqual(note, "node node-a: Unknown, its pods p1, p2 still Running there")
        self.assertEqual(demo.lost_node_note({}, {}), "")

    def test_a_deadline_names_the_node_and_why_there_is_no_retry(self) -> None:
        from tests.clusterobjects import settings_for

        settings = settings_for(2, image="img", deadline_seconds=60, cleanup_policy="never")
        observation = demo.RoundObservation(
            job={"metadata": {}, "status": {}},
            condition=None,
            lost_pods={"rollout-0-abcde": "node-a"},
            node_states={"node-a": "node node-a: Unknown"},
        )
        error = demo.round_stopper(demo.ROUND_DEADLINE, observation, "ns/rollout", settings, "", "DIR")
        self.assertIn("node node-a: Unknown, its pod rollout-0-abcde still Running there", str(error))
        self.assertIn("only once the Node is deleted or tainted node.kubernetes.io/out-of-service", str(error))


@end_to_end
class LostNodeThroughTheFakeTest(SourcesTestCase):
    def test_a_node_that_stops_answering_is_named_and_its_episode_not_retried(self) -> None:
        cluster = self.cluster(faults={"node_lost": {"node": "node-a", "after": 0}, **FAST_BACKOFF})
        argv = ("run", "--output", str(self.out), "--count", "2", "--timeout", "3", "--infra-retries", "1")
        result = run_script(argv, cluster.env(), self.root)  # the Job's controller lives on: its pod never ends
        self.assertEqual(result.returncode, demo.EXIT_TIMEOUT, result.stderr)
        [line] = [line for line in result.stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("hit its deadline", line)
        self.assertIn("node node-a: Unknown since", line)
        self.assertIn("Kubelet stopped posting node status.", line)
        self.assertIn("still Running there", line)
        self.assertIn("only once the Node is deleted or tainted node.kubernetes.io/out-of-service", line)
        progress = [line for line in result.stderr.splitlines() if "still Running there" in line and "elapsed" in line]
        self.assertTrue(progress, result.stderr)  # the progress line names the node and its state
        self.assertEqual(len(self.records(cluster)), 2)  # never replaced: the pod is not Failed
        cleaned = self.tool(cluster, "cleanup", "--output", str(self.out), "--timeout", "1")
        self.assertEqual(cleaned.returncode, demo.EXIT_TIMEOUT, cleaned.stderr)
        self.assertIn("stuck Terminating there", cleaned.stderr)
        self.assertIn("node node-a: Unknown", cleaned.stderr)
        self.assertIn("tainted node.kubernetes.io/out-of-service (PodGC)", cleaned.stderr)

    def test_a_deleted_node_lets_podgc_fail_the_pod_and_the_job_retry_it(self) -> None:
        lost = {"node": "node-a", "after": 0, "then": "delete", "then_after": 2}
        cluster = self.cluster(faults={"node_lost": lost, **FAST_BACKOFF})
        self.run_tool(cluster, 0, "--count", "2", "--infra-retries", "1")
        results = self.results()
        self.assertEqual((results["successful_episodes"], results["lost_attempts"]), (2, 1))
        [attempt] = [attempt for row in results["pods"] for attempt in row["lost_attempts"]]
        self.assertIn("DisruptionTarget DeletionByPodGC: PodGC: node no longer exists", attempt["cause"])
        self.assertEqual([n["metadata"]["name"] for n in cluster.objects("Node")], ["node-b"])
        [round_result] = results["round_results"]
        # named in results.json, in the state the run first read it: Unknown, or already deleted on a slow machine
        self.assertRegex(
            round_result["lost_nodes"]["node-a"],
            r"^node node-a: (Unknown since \S+ \(NodeStatusUnknown, Kubelet stopped posting node status\.\)|deleted)$",
        )

    def test_an_out_of_service_taint_lets_podgc_fail_the_pod_and_the_job_retry_it(self) -> None:
        lost = {"node": "node-a", "after": 0, "then": "out_of_service", "then_after": 0.5}
        cluster = self.cluster(faults={"node_lost": lost, **FAST_BACKOFF})
        self.run_tool(cluster, 0, "--count", "2", "--infra-retries", "1")
        [attempt] = [attempt for row in self.results()["pods"] for attempt in row["lost_attempts"]]
        self.assertIn("DisruptionTarget DeletionByTaintManager", attempt["cause"])


if __name__ == "__main__":
    unittest.main()
