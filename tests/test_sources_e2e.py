"""End-to-end tests of the features whose sources the fake gained late: Indexed Jobs (``run
--tasks``, ``--max-failed-episodes``; issue 12) and the sandbox start-up phases (Scheduled
eventTime, Pulled events, the kubelets' /metrics, a sandbox's own kernel; issue 10).

Each test runs the real tool as a subprocess against the strict fake kubectl and compares what
the tool reports with what the fake recorded it did (``FakeCluster.pod_records``,
``kubelet_observations``).  Every flow and fault is tested in-process elsewhere; these few keep
the wire path of these features honest, so each test is one short run (2 or 3 episodes)."""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import Any, Dict, List

import rl_batch_demo as demo
from tests import records
from tests.fakecluster import FakeCluster
from tests.test_run import run_script
from tests.tiers import end_to_end

NODES = ("node-a", "node-b")
TASKS = [  # the template's task shape (show-worker --template, docs/own-episodes.md)
    {"question": "1 + 2", "expected": 3},
    {"question": "2 + 2", "expected": 5},
    {"question": "5 + 5", "expected": 10},
]


@end_to_end
class SourcesTestCase(unittest.TestCase):
    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-sources-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)

    def cluster(self, **options: Any) -> FakeCluster:
        cluster = FakeCluster(self.root / "cluster", **options)
        self.addCleanup(cluster.close)
        return cluster

    def tool(self, cluster: FakeCluster, *argv: str) -> subprocess.CompletedProcess:
        result = run_script(argv, cluster.env(), self.root)
        cluster.wait_idle()
        self.assertNotIn("Traceback", result.stderr)
        return result

    def run_tool(self, cluster: FakeCluster, code: int, *argv: str) -> subprocess.CompletedProcess:
        result = self.tool(cluster, "run", "--output", str(self.out), "--quiet", *argv)
        self.assertEqual(result.returncode, code, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result

    @property
    def out(self) -> Path:
        return self.root / "out"

    def results(self) -> Dict[str, Any]:
        return records.written_results(self, self.out)

    def job(self) -> Dict[str, Any]:
        return json.loads((self.out / "job.json").read_text())

    def reward_lines(self) -> List[demo.RewardLine]:
        return records.written(self, self.out / demo.REWARDS_FILE, demo.RewardLine)

    def records(self, cluster: FakeCluster) -> Dict[str, dict]:
        return cluster.pod_records(self.receipt()["namespace"], "rollout")

    def receipt(self) -> Dict[str, Any]:
        return records.written(self, self.out / "receipt.json", demo.Receipt)

    def tasks_file(self, tasks: List[dict]) -> str:
        path = self.root / "tasks.jsonl"
        path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
        return str(path)

    def template_worker(self) -> str:
        path = self.root / "worker.py"
        path.write_text(demo.WORKER_TEMPLATE)
        return str(path)

    def kubectl_calls(self) -> List[List[str]]:
        return [call["argv"] for call in json.loads((self.out / "kubectl-calls.json").read_text())]


class FakeSourcesTest(SourcesTestCase):
    """The new sources of the fake stay as strict as kubectl (direct kubectl calls, no run)."""

    def kubectl(self, cluster: FakeCluster, *argv: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            ["kubectl", "--context=fake-ctx", *argv],
            input=stdin,
            env=cluster.env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def test_get_raw_follows_kubectls_rules(self) -> None:
        cluster = self.cluster()
        metrics = "/api/v1/nodes/node-a/proxy/metrics"
        for argv, message in (
            (["get", "--raw", metrics, "-o", "json"], "error: --raw and --output are mutually exclusive"),
            (["get", "--raw", metrics, "pods"], "error: arguments may not be passed when --raw is specified"),
            (["get", "--raw", metrics, "-l", "a=b"], "error: --raw may not be specified with other flags"),
            (["get", "--raw", "x"], 'error: --raw must be a valid URL path: parse "x": invalid URI for request'),
            (["get", "--raw", "/api/v1/nodes/node-x/proxy/metrics"], 'Error from server (NotFound): nodes "node-x"'),
            (["get", "--raw", "/healthz"], "error: fake_kubectl does not support get --raw /healthz"),
        ):
            result = self.kubectl(cluster, *argv)
            self.assertEqual(result.returncode, 1, argv)
            self.assertTrue(result.stderr.startswith(message), (argv, result.stderr))
        result = self.kubectl(cluster, "get", "--raw", metrics)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('kubelet_run_podsandbox_duration_seconds_count{runtime_handler="cube"} 25\n', result.stdout)
        self.assertIn(
            'kubelet_runtime_operations_duration_seconds_bucket{operation_type="pull_image",le="+Inf"}', result.stdout
        )

    def test_run_podsandbox_as_a_135_and_a_136_kubelet_record_it(self) -> None:
        """instrumented_services.go RunPodSandbox: the operations family always holds the true
        duration (no handler label); the handler family holds microseconds before 1.36."""
        nodes = [{"name": "old", "kubelet_version": "v1.35.2"}, {"name": "new", "kubelet_version": "v1.36.0"}]
        cluster = self.cluster(nodes=nodes)
        texts = {}
        for node in ("old", "new"):
            result = self.kubectl(cluster, "get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics")
            self.assertEqual(result.returncode, 0, result.stderr)
            scanner = demo.MetricsScanner([demo.HANDLER_SANDBOX_FAMILY, "kubelet_runtime_operations_duration_seconds"])
            scanner.feed(result.stdout.encode())
            texts[node] = demo.kubelet_reading(scanner.finish(), "cube").histograms
            self.assertIn('kubelet_runtime_operations_total{operation_type="run_podsandbox"} 25\n', result.stdout)
        for node, handler_mean in (("old", 2e-6), ("new", 0.6)):
            operation, by_handler = texts[node]["RunPodSandbox"], texts[node][demo.HANDLER_SANDBOX]
            assert operation is not None and by_handler is not None
            self.assertEqual((operation.count, by_handler.count), (25, 25))
            self.assertAlmostEqual(operation.sum / operation.count, 0.6)
            self.assertAlmostEqual(by_handler.sum / by_handler.count, handler_mean)
        bounds = [bound for bound, _ in texts["old"]["RunPodSandbox"].buckets][:-1]
        self.assertEqual(bounds, [0.005 * 2.5**i for i in range(14)])

    def test_per_index_fields_are_validated(self) -> None:
        cluster = self.cluster()
        job = json.loads(self.kubectl(cluster, "create", "-f", "-", "-o", "json", stdin=json.dumps(_job())).stdout)
        self.assertEqual((job["spec"]["completionMode"], job["spec"]["backoffLimit"]), ("Indexed", 2147483647))
        bad = _job(completionMode="NonIndexed", maxFailedIndexes=3, name="bad")
        result = self.kubectl(cluster, "create", "-f", "-", "-o", "json", stdin=json.dumps(bad))
        self.assertEqual(result.returncode, 1)
        self.assertIn("spec.backoffLimitPerIndex: Invalid value: 0: requires indexed completion mode", result.stderr)
        self.assertIn(
            "spec.maxFailedIndexes: Invalid value: 3: must be less than or equal to completions", result.stderr
        )


def _job(name: str = "indexed", **spec: Any) -> Dict[str, Any]:
    container = {"name": "episode", "image": "python:3.12"}
    pod = {"restartPolicy": "Never", "containers": [container]}
    fields = {"completions": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 0, "maxFailedIndexes": 1}
    fields.update(spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {**fields, "template": {"spec": pod}},
    }


class IndexedJobTest(SourcesTestCase):
    def test_each_index_runs_its_task_and_is_reported_by_index(self) -> None:
        cluster = self.cluster()
        self.run_tool(cluster, 0, "--worker", self.template_worker(), "--tasks", self.tasks_file(TASKS))
        job = self.job()
        self.assertEqual(job["spec"]["completionMode"], "Indexed")
        self.assertEqual(job["status"]["completedIndexes"], "0-2")
        rewards = [json.loads(line) for line in (self.out / "rewards.jsonl").read_text().splitlines()]
        rewards.sort(key=lambda line: line["index"])  # the file is in the order the episodes ended
        self.assertEqual([r["index"] for r in rewards], [0, 1, 2])
        self.assertEqual([r["reward"] for r in rewards], [1.0, 0.0, 1.0])  # task 1's expected answer is wrong
        self.assertEqual([r["info"]["answer"] for r in rewards], [3, 4, 10])
        rows = sorted(self.results()["pods"], key=lambda row: row["index"])
        self.assertEqual([(row["task_id"], row["reward"]) for row in rows], [(0, 1.0), (1, 0.0), (2, 1.0)])
        for row, reward in zip(rows, rewards):
            self.assertEqual(row["pod"], reward["pod"])
            self.assertRegex(row["pod"], rf"^rollout-{row['index']}-[a-z0-9]{{5}}$")
            self.assertTrue((self.out / f"{row['pod']}.log").read_text().strip())  # logs -l --prefix by index
        # Scheduled events carry eventTime: the figure is eventTime - creationTimestamp, as the fake wrote it
        records = self.records(cluster)
        for row in rows:
            self.assertEqual(row["scheduled_source"], "event")
            expected = records[row["pod"]]["scheduled_event_time"] - row["created_at"]
            self.assertAlmostEqual(row["pod_to_scheduled_seconds"], expected, places=5)
        self.assertEqual(self.results()["cache_state"], "cached")
        # without --kubelet-metrics: no node reads at all
        calls = self.kubectl_calls()
        self.assertFalse([c for c in calls if "/proxy/metrics" in c[-1] or c[-3:] == ["nodes", "-o", "json"]])

    def test_a_lost_index_within_max_failed_episodes_is_masked(self) -> None:
        """failure_kind infrastructure: an evicted episode is set aside under --max-failed-episodes."""
        cluster = self.cluster(faults={"episode": {"1": "evict"}})
        self.run_tool(cluster, 0, "--tasks", self.tasks_file(TASKS), "--max-failed-episodes", "1")
        job = self.job()
        self.assertEqual((job["spec"]["backoffLimitPerIndex"], job["spec"]["maxFailedIndexes"]), (0, 1))
        self.assertEqual(job["spec"]["backoffLimit"], 2147483647)
        self.assertEqual((job["status"]["failedIndexes"], job["status"]["completedIndexes"]), ("1", "0,2"))
        failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
        self.assertEqual([(c["reason"], c["message"]) for c in failed], [("FailedIndexes", "Job has failed indexes")])
        results = self.results()
        self.assertEqual(
            [(e["index"], e["task_id"], e["failure_kind"], e["reward"]) for e in results["failed_episodes"]],
            [(1, 1, demo.FAILURE_INFRASTRUCTURE, None)],
        )
        self.assertEqual(sorted(row["index"] for row in results["pods"]), [0, 2])
        self.assertEqual((results["masked_episodes"], results["scored_episodes"]), (1, 0))
        [line] = [line for line in self.reward_lines() if line["index"] == 1]
        self.assertEqual((line["reward"], line["failure_kind"]), (None, demo.FAILURE_INFRASTRUCTURE))

    def test_an_own_failure_is_never_masked(self) -> None:
        """failure_kind episode: a worker that exits 1 fails the run under --max-failed-episodes,
        which names --failed-episode-reward; with it, the episode is scored and the others run on."""
        cluster = self.cluster(faults={"episode": {"1": "exit1"}})
        result = self.run_tool(cluster, 1, "--tasks", self.tasks_file(TASKS), "--max-failed-episodes", "1")
        self.assertIn("sets aside only failures of the infrastructure; --failed-episode-reward R", result.stderr)
        [line] = [line for line in self.reward_lines() if line["index"] == 1]
        self.assertEqual((line["reward"], line["failure_kind"]), (None, demo.FAILURE_EPISODE))

    def test_an_own_failure_is_scored_with_failed_episode_reward(self) -> None:
        cluster = self.cluster(faults={"episode": {"1": "exit1"}})
        self.run_tool(cluster, 0, "--tasks", self.tasks_file(TASKS), "--failed-episode-reward", "-1")
        job = self.job()
        self.assertEqual(job["spec"]["backoffLimitPerIndex"], 0)
        self.assertNotIn("maxFailedIndexes", job["spec"])  # every index runs, whatever fails
        self.assertEqual((job["status"]["failedIndexes"], job["status"]["completedIndexes"]), ("1", "0,2"))
        results = self.results()
        self.assertEqual(
            [(e["index"], e["failure_kind"], e["reward"]) for e in results["failed_episodes"]],
            [(1, demo.FAILURE_EPISODE, -1.0)],
        )
        self.assertEqual((results["episodes"], results["scored_episodes"], results["masked_episodes"]), (3, 1, 0))
        self.assertEqual(results["reward_sum"], 1 + 1 - 1)
        lines = {line["index"]: line for line in self.reward_lines()}
        self.assertEqual((lines[1]["reward"], lines[1]["failure_kind"]), (-1.0, demo.FAILURE_EPISODE))
        self.assertIn("exit code 1", lines[1]["failure"] or "")
        self.assertEqual({lines[i]["failure_kind"] for i in (0, 2)}, {None})

    def test_more_failed_indexes_than_allowed_fail_the_run(self) -> None:
        cluster = self.cluster(faults={"episode": {"0": "evict", "2": "evict"}})
        result = self.run_tool(cluster, 1, "--count", "3", "--max-failed-episodes", "1")
        self.assertIn("lost to the infrastructure, more than --max-failed-episodes 1", result.stderr)
        job = self.job()
        # 0 and 2 failed; 1 may have been still running when the Job gave up (then the fake counts
        # it failed too, as its pod is stopped), so the set is 0,2 or 0-2.
        self.assertIn(job["status"]["failedIndexes"], ("0,2", "0-2"))
        # The decision (FailureTarget), then Failed once the stopped pods have ended: job.json is the
        # Job as watched when the run stopped waiting for that (Timing.final_pods_grace_seconds,
        # 0.25 s), which a loaded machine's fake can outlast (CI: FailureTarget alone).
        conditions = [(c["type"], c["reason"]) for c in job["status"]["conditions"]]
        decided = [("FailureTarget", "MaxFailedIndexesExceeded")]
        self.assertIn(conditions, (decided, [*decided, ("Failed", "MaxFailedIndexesExceeded")]))

    def test_a_server_without_per_index_limits_makes_the_run_delete_its_job(self) -> None:
        cluster = self.cluster(faults={"old_job_api": True})
        result = self.run_tool(cluster, 3, "--count", "2", "--max-failed-episodes", "1")
        self.assertIn("per-index backoff limits", result.stderr)
        deletes = [c for c in cluster.calls() if "delete" in c]
        self.assertIn(["delete", "job", "rollout", "--cascade=foreground", "--wait=false"], [c[-5:] for c in deletes])
        jobs = cluster.objects("Job")
        self.assertTrue(all(j["metadata"].get("deletionTimestamp") for j in jobs), jobs)  # gone or going
        for job in jobs:  # the fields the server does not know are gone, and backoffLimit has its old default
            self.assertNotIn("backoffLimitPerIndex", job["spec"])
            self.assertEqual(job["spec"]["backoffLimit"], 6)


class SandboxPhasesTest(SourcesTestCase):
    def test_kubelet_metrics_pulls_and_a_sandbox_kernel(self) -> None:
        cluster = self.cluster(faults={"image_pull": "mixed", "sandbox_kernel": True})
        self.run_tool(cluster, 0, "--count", "3", "--kubelet-metrics")
        results = self.results()
        records = self.records(cluster)
        self.assertEqual(results["cache_state"], "mixed")
        for row in results["pods"]:
            record = records[row["pod"]]
            if record["pull"] == "cached":
                self.assertEqual(row["image_pull"]["state"], "cached")
            else:
                self.assertEqual(row["image_pull"]["state"], "pulled")
                self.assertAlmostEqual(row["image_pull"]["seconds"], record["pull"]["seconds"])
                self.assertAlmostEqual(
                    row["image_pull"]["seconds_including_waiting"], record["pull"]["seconds_including_waiting"]
                )
            kernel = record["kernel"]
            self.assertEqual(row["kernel"], "sandbox")
            self.assertAlmostEqual(
                row["kernel_boot_to_process_start_seconds"], kernel["kernel_boot_to_process_start_seconds"], places=3
            )
            # booted 0.3 s after creationTimestamp, as the worker measured it: its clock when it
            # read /proc/uptime (before it reported ready) minus the uptime the fake wrote then
            self.assertGreaterEqual(row["pod_to_kernel_boot_seconds"], 0.29)
            measured_boot = row["created_at"] + row["pod_to_kernel_boot_seconds"]
            self.assertGreaterEqual(measured_boot, kernel["booted_at"] - 0.01)
            self.assertLessEqual(measured_boot, row["ready_at"] - kernel["uptime"] + 0.01)
        # runtime_operations: the pooled histogram deltas are exactly what the fake kubelets timed
        observed: Dict[str, List[float]] = {}
        names = {"sandbox": "RunPodSandbox", "create_container": "CreateContainer", "start_container": "StartContainer"}
        names["pull_image"] = "PullImage"
        for node in NODES:
            for o in cluster.kubelet_observations(node):
                observed.setdefault(names[o["op"]], []).append(o["seconds"])
        operations = results["runtime_operations"]
        self.assertEqual(operations["handler"], "cube")
        for operation, seconds in observed.items():
            pooled = operations["pooled"][operation]
            self.assertEqual(pooled["count"], len(seconds), operation)
            self.assertTrue(math.isclose(pooled["mean_seconds"], sum(seconds) / len(seconds), rel_tol=1e-6))
        self.assertEqual(len(observed["RunPodSandbox"]), 3)
        # the fake's kubelets are v1.32.0: their handler family holds microseconds, said beside the figure
        crosscheck = operations["sandbox_crosscheck"]
        self.assertEqual(crosscheck["handler_figures"]["count"], 3)
        self.assertLess(crosscheck["handler_figures"]["mean_seconds"], 1e-5)
        self.assertIn("kubernetes/kubernetes#135749", crosscheck["note"])
        self.assertEqual(len(observed["PullImage"]), 1)
        self.assertTrue(all(node["foreign_operations"] == 0 for node in operations["nodes"].values()))
        # the flag's kubectl processes: one list of the nodes, each node read before and after
        calls = self.kubectl_calls()
        raw = [c for c in calls if "/proxy/metrics" in c[-1]]  # the RuntimeClass's raw read aside
        self.assertEqual(sorted(c[-1] for c in raw), sorted(f"/api/v1/nodes/{n}/proxy/metrics" for n in NODES * 2))
        self.assertEqual(len([c for c in calls if c[-3:] == ["nodes", "-o", "json"]]), 1)

    def test_an_lxcfs_proc_leaves_process_and_kernel_unknown_and_the_run_valid(self) -> None:
        """LXCFS virtualises /proc/uptime, not /proc/self/stat (lxc/lxcfs proc_uptime_read): the
        worker's boot clock disagrees with its wall clock. Never an episode failure, a note."""
        cluster = self.cluster(faults={"lxcfs": True})
        self.run_tool(cluster, 0, "--count", "2")
        results = self.results()
        self.assertEqual(results["successful_episodes"], 2)
        for row in results["pods"]:
            self.assertIsNone(row["kernel"])
            self.assertIsNone(row["process_started_at"])
            self.assertIsNone(row["pod_to_process_start_seconds"])
            self.assertIn(
                "its /proc/uptime (0.00 s) is shorter than its process's start after boot (259200.00 s",
                row["clock_note"],
            )
            self.assertIsNotNone(row["python_import_seconds"])  # the wall clock's figures stand
        self.assertTrue(any(note.startswith("2 of 2 episodes' sandbox clocks disagree") for note in results["notes"]))

    def test_pulled_images_and_scheduled_conditions(self) -> None:
        cluster = self.cluster(faults={"image_pull": "pulled", "scheduled_event_time": "legacy"})
        self.run_tool(cluster, 0, "--count", "2")
        results = self.results()
        self.assertEqual(results["cache_state"], "pulled")
        records = self.records(cluster)
        for row in results["pods"]:
            self.assertEqual(row["scheduled_source"], "condition")
            self.assertEqual(row["image_pull"]["seconds"], records[row["pod"]]["pull"]["seconds"])
            self.assertEqual(row["kernel"], "shared")  # the host's kernel booted long before the pod

    def test_missing_pulled_events_and_foreign_operations(self) -> None:
        cluster = self.cluster(faults={"image_pull": "missing", "kubelet_foreign_pods": 1})
        self.run_tool(cluster, 0, "--count", "2", "--kubelet-metrics")
        results = self.results()
        self.assertEqual(results["cache_state"], "unknown")
        self.assertEqual(sorted(row["image_pull"]["state"] for row in results["pods"]), ["cached", "unknown"])
        nodes = results["runtime_operations"]["nodes"]
        # one foreign operation of each kind per node; the pull counts as foreign only on the node
        # whose every episode had a Pulled event (elsewhere how many pulls were ours is unknown)
        self.assertEqual(sorted(nodes[node]["foreign_operations"] for node in NODES), [3, 4], nodes)

    def test_kubelet_metrics_refused_without_nodes_proxy(self) -> None:
        cluster = self.cluster(forbidden=[("get", "nodes/proxy")])
        before = cluster.objects("Namespace")
        result = self.run_tool(cluster, 3, "--count", "2", "--kubelet-metrics")
        self.assertIn("--kubelet-metrics needs get nodes/proxy", result.stderr)
        self.assertEqual(cluster.objects("Namespace"), before)
        self.assertFalse([c for c in cluster.calls() if "/proxy/metrics" in c[-1]])
        check = self.tool(cluster, "check", "--kubelet-metrics")
        self.assertEqual(check.returncode, 3, check.stdout + check.stderr)
        self.assertIn("kubelet metrics: denied: get nodes/proxy", check.stdout)


if __name__ == "__main__":
    unittest.main()
