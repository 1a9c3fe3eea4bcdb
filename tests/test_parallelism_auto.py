"""`run --parallelism auto`: the Job's parallelism is the room the eligible nodes have now, as
`check` counts it (allocatable less what the pods already there request, with the RuntimeClass's
overhead), at most the count; printed, in results.json, refused in one line when no episode fits.

The count as a table (pod_requests, episode_room), the run against call plans, and end to end
through the fake cluster, whose scheduler holds pods by the same requests (its nodes sized so that
only some episodes fit at once)."""

from __future__ import annotations

import json
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional

import rl_batch_demo as demo
from tests.callplan import Call, CallPlanTestCase, RunPlan, err_forbidden
from tests.clusterobjects import NAMESPACE, Batch, kubernetes_list, node_object, runtimeclass_object
from tests.fakecluster import FakeCluster
from tests.tiers import end_to_end
from tests.toolprocess import tool_command, tool_environment

SCRIPT = str(Path(demo.__file__).resolve())
MI = 2**20
FAST = {"stand_in_worker": True}  # the pods run no tests: what is measured here is where they run


def container(cpu: str, memory: str, restart: Optional[str] = None) -> Dict[str, Any]:
    found: Dict[str, Any] = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    if restart:
        found["restartPolicy"] = restart
    return found


def running_pod(node: str, cpu: str, memory: str = "0", phase: str = "Running", name: str = "busy") -> Dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"nodeName": node, "containers": [container(cpu, memory)]},
        "status": {"phase": phase},
    }


class PodRequestsTest(unittest.TestCase):
    """What a pod holds on its node, as component-helpers' PodRequests counts it."""

    def test_as_the_scheduler_counts_them(self) -> None:
        for name, spec, (cpu, memory) in (
            ("containers summed", {"containers": [container("100m", "64Mi"), container("200m", "1Gi")]}, (0.3, 1088)),
            (
                "an init container that needs more",
                {"containers": [container("100m", "64Mi")], "initContainers": [container("1", "32Mi")]},
                (1.0, 64),
            ),
            (
                "a sidecar counts for the pod's whole life, and under the init containers after it",
                {
                    "containers": [container("100m", "64Mi")],
                    "initContainers": [container("200m", "10Mi", "Always"), container("250m", "1Mi")],
                },
                (0.45, 74),
            ),
            (
                "pod-level requests",
                {"containers": [container("100m", "64Mi")], "resources": {"requests": {"cpu": "2"}}},
                (2.0, 64),
            ),
            (
                "the overhead on top",
                {"containers": [container("100m", "64Mi")], "overhead": {"cpu": "250m", "memory": "768Mi"}},
                (0.35, 832),
            ),
            ("nothing requested", {"containers": [{"name": "c"}]}, (0.0, 0)),
        ):
            with self.subTest(name):
                requested = demo.pod_requests({"spec": spec})
                self.assertAlmostEqual(requested["cpu"], cpu)
                self.assertEqual(requested["memory"], memory * MI)


class EpisodeRoomTest(unittest.TestCase):
    """Whole episodes per node (a pod never spans two), less what runs there, added up."""

    runtimeclass = runtimeclass_object()  # an episode: 0.35 CPU, 832 MiB

    def room(self, nodes: List[Dict[str, Any]], pods: Optional[List[Dict[str, Any]]] = None) -> int:
        return demo.episode_room(self.runtimeclass, nodes, pods if pods is not None else [])[0]

    def test_each_node_holds_whole_episodes(self) -> None:
        self.assertEqual(self.room([node_object("a", cpu="1", memory="4Gi")]), 2)  # CPU: 2.86, memory: 4.9
        # 1.2 CPU in all would hold 3 episodes; 0.6 on each of two nodes holds one each
        self.assertEqual(self.room([node_object("a", cpu="600m"), node_object("b", cpu="600m")]), 2)
        self.assertEqual(self.room([node_object("a", cpu="8", memory="2Gi")]), 2)  # memory decides

    def test_what_runs_there_takes_room(self) -> None:
        nodes = [node_object("a", cpu="1", memory="4Gi"), node_object("b", cpu="1", memory="4Gi")]
        self.assertEqual(self.room(nodes), 4)
        self.assertEqual(self.room(nodes, [running_pod("b", "300m")]), 4)  # 0.7 CPU left: still two
        self.assertEqual(self.room(nodes, [running_pod("b", "400m")]), 3)
        self.assertEqual(self.room(nodes, [running_pod("b", "100m", memory="3Gi")]), 3)  # 1 GiB left: one
        for ignored in (
            running_pod("b", "1", phase="Succeeded"),  # terminated: its room is free again
            running_pod("b", "1", phase="Failed"),
            running_pod("elsewhere", "1"),  # on a node no episode may use
            {**running_pod("b", "1"), "spec": {"containers": [container("1", "0")]}},  # not bound yet
        ):
            with self.subTest(pod=ignored["spec"].get("nodeName"), phase=ignored["status"]["phase"]):
                self.assertEqual(self.room(nodes, [ignored]), 4)

    def test_pod_slots_and_ineligible_nodes(self) -> None:
        few_slots = node_object("a")
        few_slots["status"]["allocatable"]["pods"] = "3"
        self.assertEqual(self.room([few_slots], [running_pod("a", "0", name=f"p{i}") for i in range(2)]), 1)
        cordoned = node_object("c")
        cordoned["spec"]["unschedulable"] = True
        self.assertEqual(self.room([cordoned]), 0)
        self.assertEqual(self.room([]), 0)

    def test_in_words(self) -> None:
        nodes = [node_object("a", cpu="1", memory="4Gi"), node_object("b", cpu="1", memory="4Gi")]
        _, text = demo.episode_room(self.runtimeclass, nodes, [running_pod("b", "400m", "1Gi")])
        self.assertEqual(
            text,
            "2 eligible nodes have 2.0 CPU, 8.0 GiB and 200.0 GiB of ephemeral storage allocatable, 0.4 CPU, 1.0 GiB "
            "and 0.0 GiB of ephemeral storage of it requested by 1 pod already there: room for 3 episodes at once, "
            "each 0.35 CPU and 0.81 GiB with the RuntimeClass's overhead, and 0.50 GiB of ephemeral storage "
            "(--ephemeral-storage)",
        )
        _, unknown = demo.episode_room(self.runtimeclass, nodes, None)
        self.assertIn("allocatable (before what already runs there): room for 4 episodes", unknown)


def granted_reviews(namespace: str, denied: tuple = ()) -> List[Dict[str, Any]]:
    reviews = demo.access_review_list(namespace, True, capacity=True)["items"]
    answered = []
    for review in reviews:
        attributes = review["spec"]["resourceAttributes"]
        allowed = (attributes["verb"], attributes["resource"]) not in denied or "namespace" in attributes
        answered.append(dict(review, status={"allowed": allowed}))
    return answered


class AutoRunTest(CallPlanTestCase):
    """The run against call plans: its preflight reads the nodes and what runs there."""

    NODES = (node_object("node-a", cpu="1", memory="4Gi"), node_object("node-b", cpu="1", memory="4Gi"))

    def preflight(
        self, plan: RunPlan, pods: List[Dict[str, Any]], denied: tuple = (), runtimeclass: bool = True
    ) -> List[Call]:
        """One read of the RuntimeClasses, the nodes and every pod, beside the reviews: a
        10-episode run stays at 10 processes. `runtimeclass`: the listing holds the run's."""
        cluster = plan.cluster
        classes = [runtimeclass_object("cube")] if runtimeclass else [runtimeclass_object("other")]
        listing = cluster.get_list(
            "runtimeclasses,nodes,pods", [*classes, *self.NODES, *pods], namespace=None, flags=demo.EVERY_NAMESPACE
        )
        if ("list", "nodes") in denied:
            listing = listing.failing(err_forbidden("list", "nodes", namespace=""))
        asked = demo.access_review_list(NAMESPACE, True, capacity=True)
        calls = [cluster.config_view(), listing, cluster.rules_review(asked, denied)]
        if denied:  # the rules prove not every permission: the access reviews decide
            reviews = kubernetes_list(granted_reviews(NAMESPACE, denied))
            calls.append(cluster.create(asked, reviews, validate="false"))
        return calls

    def test_the_jobs_parallelism_is_the_nodes_room(self) -> None:
        plan = RunPlan(Batch(count=5, parallelism=3))  # room: node-a 2, node-b 1 beside its 400m pod
        self.expect(*self.preflight(plan, [running_pod("node-b", "400m")]), *plan.run()[3:])
        result = self.tool("run", "--count", "5", "--parallelism", "auto", "--output", str(self.out()), "--quiet")
        self.assertEqual(result.code, 0, result)
        self.assertIn("parallelism auto: 3 of 5 episodes at once (2 eligible nodes have 2.0 CPU", result.stderr)
        results = self.results()
        self.assertEqual((results["parallelism"], results["parallelism_capacity"]), (3, 3))
        self.assertEqual(self.read_json("job-submitted.json")["spec"]["parallelism"], 3)
        self.assertIn("parallelism 3", result.stdout)

    def test_at_most_the_count(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*self.preflight(plan, []), *plan.run()[3:])
        metrics = self.root / "metrics.prom"
        self.run_ok(
            *("run", "--count", "2", "--parallelism", "auto", "--output", str(self.out()), "--quiet"),
            *("--metrics-file", str(metrics)),
        )
        self.assertEqual((self.results()["parallelism"], self.results()["parallelism_capacity"]), (2, 4))
        self.assertIn('parallelism="auto"', metrics.read_text())

    def test_a_ten_episode_run_starts_ten_kubectl_processes(self) -> None:
        """A plain 10-episode run's ten (docs/call-plan.md): the listing of the RuntimeClasses, the
        nodes and what runs on them takes the place of the RuntimeClass's read."""
        plan = RunPlan(Batch(count=10, parallelism=4))
        self.expect(*self.preflight(plan, []), *plan.run()[3:])
        self.run_ok("run", "--count", "10", "--parallelism", "auto", "--output", str(self.out()), "--quiet")
        self.assertEqual(len(self.stub.calls()), 10)
        self.assertEqual(len(self.stub.calls()), len(RunPlan(Batch(count=10)).run()))

    def test_a_missing_runtimeclass_is_named_as_without_auto(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*self.preflight(plan, [], runtimeclass=False), plan.refused_watch())
        result = self.tool("run", "--count", "2", "--parallelism", "auto", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_CLUSTER, "RuntimeClass 'cube' does not exist in context")

    def test_refused_in_one_line_when_not_one_episode_fits(self) -> None:
        plan = RunPlan(Batch(count=2))
        full = [running_pod("node-a", "800m", name="a"), running_pod("node-b", "900m", name="b")]
        self.expect(*self.preflight(plan, full), plan.refused_watch())
        result = self.tool("run", "--count", "2", "--parallelism", "auto", "--output", str(self.out()))
        self.assert_fails(
            result,
            demo.EXIT_CLUSTER,
            "--parallelism auto: not even one episode fits now: 2 eligible nodes have 2.0 CPU",
            "room for 0 episodes",
            "nothing was created",
        )
        self.assertFalse(self.out().exists(), "a failed preflight leaves no output directory")

    def test_refused_without_the_permission_to_list_nodes(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*self.preflight(plan, [], denied=(("list", "nodes"),)), plan.refused_watch())
        result = self.tool("run", "--count", "2", "--parallelism", "auto", "--output", str(self.out()))
        self.assert_fails(
            result, demo.EXIT_CLUSTER, "--parallelism auto needs list nodes in context", "--parallelism P"
        )
        self.assertFalse(self.out().exists())

    def test_usage(self) -> None:
        for argv, fragment in (
            (["--parallelism", "auto", "--dry-run"], "cannot count the nodes' room for --parallelism auto"),
            (["--parallelism", "many"], "'many' is neither a whole number of at least 1 nor auto"),
        ):
            with self.subTest(argv=argv):
                result = self.tool("run", "--output", str(self.out()), *argv)
                self.assertEqual(result.code, demo.EXIT_USAGE, result)
                self.assertIn(fragment, result.stderr)


@end_to_end
class AutoOnTheFakeTest(unittest.TestCase):
    """End to end: the fake's scheduler holds pods by their requests and the RuntimeClass's
    overhead, on nodes sized so that 4 of 6 episodes fit (node-b also runs another team's pod)."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    NODES = [  # noqa: RUF012 - read only
        {"name": "node-a", "allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"}},
        {"name": "node-b", "allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"}},
    ]
    BUSY = [{"name": "busy", "namespace": "team-a", "node": "node-b", "requests": {"cpu": "300m", "memory": "1Gi"}}]  # noqa: RUF012

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-auto-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)

    def cluster(self, nodes: List[Dict[str, Any]]) -> FakeCluster:
        cluster = FakeCluster(
            self.root / f"cluster-{len(list(self.root.iterdir()))}", nodes=nodes, pods=self.BUSY, faults=FAST
        )
        self.addCleanup(cluster.close)
        return cluster

    def tool(self, cluster: FakeCluster, *argv: str) -> subprocess.CompletedProcess[str]:
        env = tool_environment(cluster.env())
        return subprocess.run(
            tool_command(*argv), cwd=str(self.root), env=env, capture_output=True, text=True, timeout=120, check=False
        )

    def test_only_what_fits_runs_at_once(self) -> None:
        cluster = self.cluster(self.NODES)
        check = self.tool(cluster, "check", "--count", "6")
        self.assertIn("requested by 1 pod already there: room for 4 episodes at once", check.stdout)
        result = self.tool(cluster, "run", "--count", "6", "--parallelism", "auto", "--output", "out", "--quiet")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("parallelism auto: 4 of 6 episodes at once", result.stderr)
        results = json.loads((self.root / "out" / "results.json").read_text())
        self.assertEqual((results["parallelism"], results["parallelism_capacity"], results["reward_sum"]), (4, 4, 6))
        namespace = results["namespace"]
        [job] = cluster.objects("Job", namespace)
        self.assertEqual(job["spec"]["parallelism"], 4)
        cluster.wait_idle()
        self.assertEqual(cluster.max_concurrent_pods(namespace, "rollout"), 4)
        self.assertNotIn("FailedScheduling", (self.root / "out" / "events.txt").read_text())  # never one too many
        calls = [argv for argv in cluster.calls() if "--all-namespaces" in argv]
        listed = [argv[argv.index("get") + 1] for argv in calls]
        self.assertEqual(listed, ["pods", "runtimeclasses,nodes,pods"])  # check, run
        # the room is exact: one episode more than it, and the scheduler holds one back
        more = self.tool(cluster, "run", "--count", "6", "--parallelism", "5", "--output", "more", "--quiet")
        self.assertEqual(more.returncode, 0, more.stderr)
        self.assertIn("FailedScheduling", (self.root / "more" / "events.txt").read_text())
        cluster.wait_idle()
        more_namespace = json.loads((self.root / "more" / "results.json").read_text())["namespace"]
        self.assertEqual(cluster.max_concurrent_pods(more_namespace, "rollout"), 4)

    def test_not_one_episode_fits(self) -> None:
        cluster = self.cluster([{"name": "node-b", "allocatable": {"cpu": "500m", "memory": "4Gi", "pods": "110"}}])
        result = self.tool(cluster, "run", "--count", "2", "--parallelism", "auto", "--output", "out")
        self.assertEqual(result.returncode, demo.EXIT_CLUSTER, result.stderr)
        [line] = [line for line in result.stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("not even one episode fits now", line)
        self.assertFalse((self.root / "out").exists())
        self.assertEqual(
            [ns for ns in cluster.objects("Namespace") if ns["metadata"]["name"].startswith("agc-rl-")], []
        )


if __name__ == "__main__":
    unittest.main()
