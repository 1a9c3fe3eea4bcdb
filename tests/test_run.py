"""End-to-end tests: the real script against the strict fake kubectl (tests/fake_kubectl.py).

Every test gets its own fake cluster; episodes run the embedded worker for real. The tool runs
as a subprocess, exactly as a user runs it, with PATH holding only the fake."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any

import rl_batch_demo as demo
from tests.fakecluster import FakeCluster

SCRIPT = str(Path(demo.__file__).resolve())


class ClusterTestCase(unittest.TestCase):
    """A fresh fake cluster and a scratch directory per test."""

    cluster_options: dict[str, Any] = {}  # noqa: RUF012 - overridden per class, never mutated

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-test-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)
        self.cluster = self.make_cluster(**self.cluster_options)

    def make_cluster(self, **options: Any) -> FakeCluster:
        cluster = FakeCluster(self.root / f"cluster-{len(list(self.root.iterdir()))}", **options)
        self.addCleanup(cluster.close)
        self.system_namespaces = {ns["metadata"]["name"] for ns in cluster.objects("Namespace")}
        return cluster

    def tool(
        self, *argv: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        environment = self.cluster.env()
        environment.update(env or {})
        return subprocess.run(
            [sys.executable, SCRIPT, *argv],
            cwd=str(self.root),
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run_ok(self, *argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        result = self.tool(*argv, **kwargs)
        self.assertEqual(result.returncode, 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        self.assertNotIn("Traceback", result.stderr)
        return result

    def assert_fails(self, result: subprocess.CompletedProcess[str], exit_code: int, *fragments: str) -> None:
        self.assertEqual(result.returncode, exit_code, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        self.assertNotIn("Traceback", result.stderr)
        error_lines = [line for line in result.stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertEqual(len(error_lines), 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, error_lines[0])

    def out(self, name: str = "out") -> Path:
        return self.root / name

    def receipt(self, name: str = "out") -> dict[str, Any]:
        return json.loads((self.out(name) / "receipt.json").read_text())

    def results(self, name: str = "out") -> dict[str, Any]:
        return json.loads((self.out(name) / "results.json").read_text())

    def namespaces(self) -> list[str]:
        """Namespaces beyond those the fake cluster starts with."""
        names = {ns["metadata"]["name"] for ns in self.cluster.objects("Namespace")}
        return sorted(names - self.system_namespaces)


class RunEndToEndTest(ClusterTestCase):
    def check_run_against_the_fake(self, count: int, parallelism: int) -> dict[str, Any]:
        self.cluster.wait_idle()
        out = self.out()
        receipt = self.receipt()
        namespace = receipt["namespace"]
        self.assertRegex(namespace, r"^agc-rl-[0-9a-f]{12}$")
        self.assertEqual(receipt["context"], "fake-ctx")
        fake_server = json.loads((self.cluster.state_dir / "cluster.json").read_text()).get("server", "127.0.0.1:6443")
        self.assertEqual(receipt["server"], f"https://{fake_server}")
        [live_namespace] = [n for n in self.cluster.objects("Namespace") if n["metadata"]["name"] == namespace]
        self.assertEqual(receipt["uid"], live_namespace["metadata"]["uid"])
        self.assertEqual(live_namespace["metadata"]["labels"][demo.RUN_LABEL], receipt["run_id"])
        [job] = self.cluster.objects("Job", namespace)
        self.assertEqual(receipt["job_uid"], job["metadata"]["uid"])
        self.assertEqual(receipt["jobs"], [{"name": "rollout", "uid": job["metadata"]["uid"]}])

        submitted = json.loads((out / "job-submitted.json").read_text())
        self.assertEqual(
            submitted["spec"]["template"]["spec"]["containers"], job["spec"]["template"]["spec"]["containers"]
        )
        self.assertEqual((job["spec"]["completions"], job["spec"]["parallelism"]), (count, parallelism))
        saved_job = json.loads((out / "job.json").read_text())
        self.assertEqual(saved_job["metadata"]["uid"], job["metadata"]["uid"])
        self.assertIn("Complete", [c["type"] for c in saved_job["status"]["conditions"]])

        pods = {pod["metadata"]["name"]: pod for pod in self.cluster.objects("Pod", namespace)}
        saved_pods = json.loads((out / "pods.json").read_text())["items"]
        self.assertEqual(sorted(p["metadata"]["name"] for p in saved_pods), sorted(pods))
        self.assertEqual(len(pods), count)
        events_text = (out / "events.txt").read_text()
        self.assertIn("SuccessfulCreate", events_text)
        for name in pods:
            self.assertEqual((out / f"{name}.log").read_text(), self.cluster.pod_log(namespace, name))

        results = self.results()
        self.assertEqual(
            (results["episodes"], results["successful_episodes"], results["reward_sum"]), (count, count, count)
        )
        self.assertEqual(
            (results["context"], results["namespace"], results["image"]), ("fake-ctx", namespace, demo.DEFAULT_IMAGE)
        )
        self.assertEqual(
            (results["runtime"], results["parallelism"], results["cache_state"]), ("cube", parallelism, "uncontrolled")
        )
        self.assertGreater(results["client_job_complete_seconds"], 0)
        job_created = demo.parse_timestamp(job["metadata"]["creationTimestamp"])
        self.assertEqual(results["job_created_at"], job_created)
        self.assertLessEqual(results["client_submitted_at"], results["client_observed_complete_at"])
        conditions = {c["type"]: demo.parse_timestamp(c["lastTransitionTime"]) for c in job["status"]["conditions"]}
        self.assertEqual(results["job_complete_at"], conditions["Complete"])
        self.assertEqual(results["job_success_criteria_met_at"], conditions["SuccessCriteriaMet"])
        self.assertLessEqual(
            results["client_observed_complete_at"] - self.cluster.job_completed_at(namespace, "rollout"), 5
        )

        # Every row recomputed from the fake's own record: its pods and the worker's own log lines.
        expected_rows = {}
        for name, pod in pods.items():
            ready, reward = (json.loads(line) for line in self.cluster.pod_log(namespace, name).splitlines())
            created = demo.parse_timestamp(pod["metadata"]["creationTimestamp"])
            status = pod["status"]["containerStatuses"][0]
            expected_rows[name] = {
                "pod": name,
                "node": pod["spec"]["nodeName"],
                "image_id": status["imageID"],
                "reward": 1,
                "pod_to_ready_seconds": ready["at"] - created,
                "batch_to_ready_seconds": ready["at"] - job_created,
                "batch_to_reward_seconds": reward["at"] - job_created,
                "python_import_seconds": ready["imports_done_at"] - ready["process_started_at"],
                "import_to_ready_seconds": ready["at"] - ready["imports_done_at"],
                "ready_to_reward_seconds": reward["at"] - ready["at"],
                "pod_to_container_started_seconds": demo.parse_timestamp(status["state"]["terminated"]["startedAt"])
                - created,
                "reward_to_finished_seconds": demo.parse_timestamp(status["state"]["terminated"]["finishedAt"])
                - reward["at"],
                "overhead": pod["spec"].get("overhead"),
                "pod_to_scheduled_seconds": demo.parse_timestamp(
                    next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")["lastTransitionTime"]
                )
                - created,
            }
        self.assertEqual(len(results["pods"]), count)
        for row in results["pods"]:
            expected = expected_rows[row["pod"]]
            for key, value in expected.items():
                if isinstance(value, float):
                    self.assertAlmostEqual(row[key], value, places=6, msg=key)
                else:
                    self.assertEqual(row[key], value, key)
            self.assertIsNotNone(row["pod_observed_to_ready_seconds"])
        startup = [row["pod_to_ready_seconds"] for row in expected_rows.values()]
        self.assertAlmostEqual(results["pod_to_ready_p50_seconds"], demo.percentile(startup, 0.5))
        self.assertAlmostEqual(results["pod_to_ready_p95_seconds"], demo.percentile(startup, 0.95))
        self.assertAlmostEqual(results["pod_to_ready_max_seconds"], max(startup))
        self.assertAlmostEqual(
            results["batch_to_all_ready_seconds"], max(r["batch_to_ready_seconds"] for r in expected_rows.values())
        )
        self.assertAlmostEqual(
            results["batch_to_all_rewards_seconds"], max(r["batch_to_reward_seconds"] for r in expected_rows.values())
        )
        nodes: dict[str, int] = {}
        for row in expected_rows.values():
            nodes[row["node"]] = nodes.get(row["node"], 0) + 1
        self.assertEqual(results["nodes"], nodes)
        self.assertEqual(results["image_ids"], sorted({r["image_id"] for r in expected_rows.values()}))
        self.assertEqual(set(results["phases"]), set(demo.PHASES))
        self.assertEqual(results["phases"]["pod_to_ready_seconds"]["p50"], results["pod_to_ready_p50_seconds"])
        self.assertTrue((out / "timeline.svg").read_text().startswith("<?xml"))
        return results

    def test_parallel_ten(self) -> None:
        result = self.run_ok("run", "--count", "10", "--output", "out")
        self.check_run_against_the_fake(10, 10)
        namespace = self.receipt()["namespace"]
        self.assertGreater(self.cluster.max_concurrent_pods(namespace, "rollout"), 1)
        self.assertIn("Job created -> all episodes ready", result.stdout)
        self.assertIn(
            f"delete it with: python3 {SCRIPT}", result.stderr.replace(os.path.relpath(SCRIPT, self.root), SCRIPT)
        )
        # The target: a 10-episode run starts at most 10 kubectl processes.
        self.assertLessEqual(len(self.cluster.calls()), 10, self.cluster.calls())
        recorded = json.loads((self.out() / "kubectl-calls.json").read_text())
        self.assertEqual(sorted(call["argv"] for call in recorded), sorted(self.cluster.calls()))  # watches race
        for call in recorded:
            self.assertIn("exit", call)
            self.assertIn("seconds", call)
        for argv in self.cluster.calls()[1:]:
            self.assertIn("--context=fake-ctx", argv)
            self.assertIn("--request-timeout=30s" if "--watch" not in argv else "--watch", argv)

    def test_sequential(self) -> None:
        self.run_ok("run", "--count", "4", "--parallelism", "1", "--output", "out", "--json")
        results = self.check_run_against_the_fake(4, 1)
        namespace = self.receipt()["namespace"]
        self.assertEqual(self.cluster.max_concurrent_pods(namespace, "rollout"), 1)
        rows = sorted(results["pods"], key=lambda row: row["ready_at"])
        for earlier, later in zip(rows, rows[1:]):
            self.assertLessEqual(earlier["reward_at"], later["ready_at"])

    def test_json_summary_is_the_guides(self) -> None:
        result = self.run_ok("run", "--count", "2", "--output", "out", "--json", "--quiet")
        summary = json.loads(result.stdout)
        self.assertNotIn("pods", summary)
        self.assertEqual(summary["reward_sum"], 2)
        self.assertEqual(result.stderr.count("created,"), 0)

    def test_progress_lines_when_not_quiet(self) -> None:
        result = self.run_ok("run", "--count", "2", "--output", "out")
        self.assertIn("2 succeeded, 0 failed", result.stderr)

    def test_runtime_none(self) -> None:
        self.run_ok("run", "--count", "2", "--runtime", "none", "--output", "out")
        self.assertIsNone(self.results()["runtime"])
        [job] = self.cluster.objects("Job", self.receipt()["namespace"])
        self.assertNotIn("runtimeClassName", job["spec"]["template"]["spec"])
        self.assertFalse([argv for argv in self.cluster.calls() if "runtimeclass" in argv])

    def test_rounds_and_their_cleanup(self) -> None:
        result = self.run_ok("run", "--count", "2", "--rounds", "2", "--output", "out")
        self.assertIn("episodes 2 x 2 round(s), parallelism 2: 4 succeeded", result.stdout)
        results = self.results()
        self.assertEqual((results["episodes"], results["rounds"]), (4, 2))
        self.assertEqual([r["job"] for r in results["round_results"]], ["rollout-1", "rollout-2"])
        for round_number in (1, 2):
            self.assertTrue((self.out() / f"round-{round_number}" / "pods.json").exists())
        receipt = self.receipt()
        jobs = {
            job["metadata"]["name"]: job["metadata"]["uid"] for job in self.cluster.objects("Job", receipt["namespace"])
        }
        self.assertEqual({job["name"]: job["uid"] for job in receipt["jobs"]}, jobs)
        self.run_ok("cleanup", "--output", "out")
        self.assertEqual(self.namespaces(), [])

    def test_allow_large_reads_rewards_from_termination_messages(self) -> None:
        self.run_ok(
            "run", "--count", "200", "--parallelism", "50", "--allow-large", "--output", "out", "--quiet", timeout=600
        )
        results = self.results()
        self.assertEqual((results["episodes"], results["reward_sum"], len(results["pods"])), (200, 200, 200))
        calls = self.cluster.calls()
        self.assertFalse([argv for argv in calls if "logs" in argv], "logs are not read when messages carry rewards")
        self.assertLessEqual(len(calls), 10)

    def test_existing_output_touches_no_cluster(self) -> None:
        self.out().mkdir()
        self.assert_fails(self.tool("run", "--output", "out"), demo.EXIT_USAGE, "already exists")
        self.assertEqual(self.cluster.calls(), [])

    def test_missing_runtime_class_creates_nothing(self) -> None:
        result = self.tool("run", "--runtime", "gvisor", "--output", "out")
        self.assert_fails(result, demo.EXIT_CLUSTER, "RuntimeClass 'gvisor' does not exist")
        self.assertEqual(self.namespaces(), [])
        self.assertNotIn("uid", self.receipt())
        self.assertFalse((self.out() / "results.json").exists())
        cleanup = self.run_ok("cleanup", "--output", "out")
        self.assertIn("already absent", cleanup.stdout)

    def test_kubectl_not_on_path(self) -> None:
        empty = self.root / "empty-bin"
        empty.mkdir()
        result = self.tool("run", "--output", "out", env={"PATH": str(empty)})
        self.assert_fails(result, demo.EXIT_CLUSTER, "cannot start kubectl")
        self.assertFalse(self.out().exists())

    def test_threshold_breach_keeps_results(self) -> None:
        result = self.tool("run", "--count", "2", "--output", "out", "--threshold", "batch_to_all_ready_seconds=0.001")
        self.assert_fails(result, demo.EXIT_THRESHOLD, "batch_to_all_ready_seconds", "> 0.001 s")
        self.assertEqual(self.results()["reward_sum"], 2)

    def test_github_step_summary(self) -> None:
        summary = self.root / "summary.md"
        self.run_ok("run", "--count", "2", "--output", "out", env={"GITHUB_STEP_SUMMARY": str(summary)})
        self.assertIn("| batch_to_all_rewards_seconds |", summary.read_text())


class ContextAndBinaryTest(ClusterTestCase):
    def test_context_kubeconfig_and_kubectl_pass_through(self) -> None:
        kubeconfig = str(self.root / "cluster.kubeconfig")
        Path(kubeconfig).write_text("# the fake only checks the path\n")
        self.cluster = self.make_cluster(contexts=("one", "two"), current_context="one", kubeconfig=kubeconfig)
        kubectl = str(self.cluster.bin_dir / "kubectl")
        env = {"PATH": str(self.root)}  # kubectl only through --kubectl
        self.run_ok(
            "run",
            "--count",
            "2",
            "--context",
            "two",
            "--kubeconfig",
            kubeconfig,
            "--kubectl",
            kubectl,
            "--output",
            "out",
            env=env,
        )
        for argv in self.cluster.calls():
            self.assertIn(f"--kubeconfig={kubeconfig}", argv)
            self.assertIn("--context=two", argv)
        receipt = self.receipt()
        self.assertEqual((receipt["context"], receipt["kubeconfig"], receipt["kubectl"]), ("two", kubeconfig, kubectl))
        self.run_ok("cleanup", "--output", "out", env=env)  # everything from the receipt
        self.assertEqual(self.namespaces(), [])

    def test_kubectl_from_environment(self) -> None:
        kubeconfig = str(self.root / "k")
        Path(kubeconfig).write_text("#\n")
        self.cluster = self.make_cluster(kubeconfig=kubeconfig)
        kubectl = str(self.cluster.bin_dir / "kubectl")
        result = self.tool("check", "--kubeconfig", kubeconfig, env={"PATH": str(self.root), "KUBECTL": kubectl})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("verdict: ready", result.stdout)


class CleanupTest(ClusterTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.run_ok("run", "--count", "2", "--output", "out", "--quiet")
        self.cluster.wait_idle()

    def edit_receipt(self, **changes: Any) -> None:
        receipt = self.receipt()
        for key, value in changes.items():
            if value is None:
                receipt.pop(key, None)
            else:
                receipt[key] = value
        (self.out() / "receipt.json").write_text(json.dumps(receipt))

    def test_happy_path_then_already_absent(self) -> None:
        namespace = self.receipt()["namespace"]
        result = self.run_ok("cleanup", "--output", "out")
        self.assertIn(f"deleted namespace {namespace}", result.stdout)
        self.assertEqual(self.namespaces(), [])
        delete_job = [argv for argv in self.cluster.calls() if "delete" in argv and "job" in argv]
        self.assertEqual(len(delete_job), 1)
        self.assertIn("--cascade=foreground", delete_job[0])
        again = self.run_ok("cleanup", "--output", "out")
        self.assertIn("already absent", again.stdout)
        self.assertTrue((self.out() / "results.json").exists())

    def assert_refused(self, fragment: str) -> None:
        before = self.namespaces()
        result = self.tool("cleanup", "--output", "out")
        self.assert_fails(result, demo.EXIT_REFUSED, fragment, "nothing was deleted")
        self.assertEqual(self.namespaces(), before)
        self.assertFalse([argv for argv in self.cluster.calls() if "delete" in argv])

    def test_namespace_uid_mismatch(self) -> None:
        self.edit_receipt(uid="00000000-0000-0000-0000-000000000000")
        self.assert_refused("do not match the receipt")

    def test_label_mismatch(self) -> None:
        self.edit_receipt(run_id="ffffffffffff")
        self.assert_refused("do not match the receipt")

    def test_job_uid_mismatch(self) -> None:
        self.edit_receipt(jobs=[{"name": "rollout", "uid": "00000000-0000-0000-0000-000000000000"}])
        self.assert_refused("Job")

    def test_receipt_without_namespace_uid_is_proven_by_the_run_label(self) -> None:
        namespace = self.receipt()["namespace"]
        [live] = [n for n in self.cluster.objects("Namespace") if n["metadata"]["name"] == namespace]
        self.edit_receipt(uid=None)
        result = self.run_ok("cleanup", "--output", "out")
        self.assertIn("carries this run's labels", result.stdout)
        self.assertEqual(self.namespaces(), [])
        self.assertEqual(self.receipt()["uid"], live["metadata"]["uid"])

    def test_receipt_without_namespace_uid_and_another_label_is_refused(self) -> None:
        self.edit_receipt(uid=None, run_id="ffffffffffff")
        result = self.tool("cleanup", "--output", "out")
        self.assert_fails(result, demo.EXIT_REFUSED, "no namespace UID", "ownership cannot be proven")
        self.assertEqual(len(self.namespaces()), 1)
        self.assertFalse([argv for argv in self.cluster.calls() if "delete" in argv])

    def test_malformed_jobs_in_the_receipt(self) -> None:
        self.edit_receipt(jobs=[{"uid": "x"}])
        self.assert_fails(self.tool("cleanup", "--output", "out"), demo.EXIT_USAGE, "malformed 'jobs' list")

    def test_older_receipt_uses_job_json(self) -> None:
        self.edit_receipt(jobs=None, job_uid=None)
        self.run_ok("cleanup", "--output", "out")
        self.assertEqual(self.namespaces(), [])

    def test_another_cluster_behind_the_same_context_is_refused(self) -> None:
        self.edit_receipt(server="https://10.0.0.1:6443")
        result = self.tool("cleanup", "--output", "out")
        self.assert_fails(
            result, demo.EXIT_REFUSED, "the run used the API server https://10.0.0.1:6443", "nothing was deleted"
        )
        self.assertEqual(len(self.namespaces()), 1)
        self.assertFalse([argv for argv in self.cluster.calls() if "delete" in argv])

    def test_receipt_pointing_at_a_foreign_namespace(self) -> None:
        foreign = self.make_cluster_namespace("team-prod")
        self.edit_receipt(namespace="team-prod")
        self.assert_refused("team-prod")
        self.assertIn(foreign, self.namespaces())

    def make_cluster_namespace(self, name: str) -> str:
        manifest = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        subprocess.run(
            [str(self.cluster.bin_dir / "kubectl"), "create", "-f", "-", "-o", "json"],
            input=manifest,
            env=self.cluster.env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return name

    def test_namespace_stuck_terminating(self) -> None:
        self.cluster.set_faults({"namespace_stuck": True})
        result = self.tool("cleanup", "--output", "out", "--timeout", "2")
        self.assert_fails(result, demo.EXIT_TIMEOUT, "still Terminating", "finalizers", "never removed")
        self.assertEqual(len(self.namespaces()), 1)


class CleanupPolicyTest(ClusterTestCase):
    def test_on_success_deletes_after_a_good_run(self) -> None:
        result = self.run_ok("run", "--count", "2", "--output", "out", "--cleanup", "on-success")
        self.assertIn("deleted namespace", result.stderr)
        self.assertEqual(self.namespaces(), [])
        self.assertTrue((self.out() / "results.json").exists())

    def test_on_success_keeps_a_failed_run(self) -> None:
        self.cluster.set_faults({"episode": {"0": "exit1"}})
        result = self.tool("run", "--count", "2", "--output", "out", "--cleanup", "on-success")
        self.assertEqual(result.returncode, demo.EXIT_EPISODE, result.stderr)
        self.assertEqual(len(self.namespaces()), 1)

    def test_always_deletes_after_a_failed_run_and_keeps_diagnostics(self) -> None:
        self.cluster.set_faults({"episode": {"1": "exit1"}})
        result = self.tool("run", "--count", "2", "--output", "out", "--cleanup", "always")
        self.assert_fails(result, demo.EXIT_EPISODE, "phase Failed")
        self.assertEqual(self.namespaces(), [])
        for name in ("job.json", "pods.json", "events.txt", "error.json", "kubectl-calls.json"):
            self.assertTrue((self.out() / name).exists(), name)
        self.assertFalse((self.out() / "results.json").exists())


class CheckTest(ClusterTestCase):
    def test_ready_cluster(self) -> None:
        result = self.run_ok("check", "--count", "10")
        self.assertIn("10 pods need 3.5 CPU and 8.1 GiB including 7.5 GiB of RuntimeClass overhead", result.stdout)
        self.assertIn("permissions: all granted", result.stdout)
        self.assertIn("verdict: ready", result.stdout)
        self.assertEqual(self.namespaces(), [])

    def test_missing_runtime_class(self) -> None:
        result = self.tool("check", "--runtime", "kata")
        self.assertEqual(result.returncode, demo.EXIT_CLUSTER)
        self.assertIn("verdict: NOT ready: RuntimeClass 'kata' does not exist", result.stdout)

    def test_too_little_capacity(self) -> None:
        small = [{"name": "tiny", "allocatable": {"cpu": "1", "memory": "2Gi"}}]
        self.cluster = self.make_cluster(nodes=small)
        result = self.tool("check", "--count", "10")
        self.assertEqual(result.returncode, demo.EXIT_CLUSTER, result.stdout + result.stderr)
        self.assertIn("not enough allocatable capacity", result.stdout)

    def test_forbidden_permission(self) -> None:
        self.cluster = self.make_cluster(forbidden=[("create", "jobs"), ("get", "pods/log")])
        result = self.tool("check")
        self.assertEqual(result.returncode, demo.EXIT_CLUSTER)
        self.assertIn("denied: create jobs.batch, get pods/log", result.stdout)
        run = self.tool("run", "--output", "out")
        self.assert_fails(run, demo.EXIT_CLUSTER, "lacks permissions", "create jobs.batch")
        self.assertEqual(self.namespaces(), [])


class CompareTest(ClusterTestCase):
    def test_parallel_versus_sequential(self) -> None:
        self.run_ok("run", "--count", "3", "--output", "parallel", "--quiet")
        self.run_ok("run", "--count", "3", "--parallelism", "1", "--output", "sequential", "--quiet")
        text = self.run_ok("compare", "parallel", "sequential").stdout
        self.assertIn("all rewards (s)", text)
        self.assertRegex(text, r"all rewards \(s\)\s+\d+\.\d+\s+\d+\.\d+ \(x\d+\.\d\d\)")
        markdown = self.run_ok("compare", "parallel", "sequential", "--format", "markdown").stdout
        self.assertTrue(markdown.startswith("| figure | parallel | sequential |"))
        data = json.loads(self.run_ok("compare", "parallel", "sequential", "--format", "json").stdout)
        rewards = next(row for row in data["figures"] if row["figure"] == "batch_to_all_rewards_seconds")
        first, second = (
            json.loads((self.root / d / "results.json").read_text())["batch_to_all_rewards_seconds"]
            for d in ("parallel", "sequential")
        )
        self.assertAlmostEqual(rewards["ratios"][1], second / first)
        self.run_ok("run", "--count", "2", "--output", "two", "--quiet")
        refused = self.tool("compare", "parallel", "two")
        self.assert_fails(refused, demo.EXIT_USAGE, "different episode counts")
        self.run_ok("compare", "parallel", "two", "--allow-different-counts")


class InterruptTest(ClusterTestCase):
    """SIGINT at three points, each followed by a cleanup that works."""

    def interrupt_when(
        self, ready: Any, *argv: str, signal_number: int = signal.SIGINT
    ) -> subprocess.CompletedProcess[str]:
        process = subprocess.Popen(
            [sys.executable, SCRIPT, "run", "--output", "out", "--count", "2", *argv],
            cwd=str(self.root),
            env=self.cluster.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not ready():
            self.assertIsNone(process.poll(), "the run ended before it could be interrupted")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        process.send_signal(signal_number)
        stdout, stderr = process.communicate(timeout=120)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def calls_matching(self, *words: str) -> bool:
        return any(all(word in argv for word in words) for argv in self.cluster.calls())

    def test_before_the_namespace_exists(self) -> None:
        self.cluster.set_faults({"hang": {"match": "get runtimeclass", "seconds": 30}})
        result = self.interrupt_when(lambda: self.calls_matching("get", "runtimeclass"))
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted")
        self.assertEqual(self.namespaces(), [])
        self.cluster.set_faults({})
        self.assertIn("already absent", self.run_ok("cleanup", "--output", "out").stdout)

    def test_after_the_namespace_before_the_job(self) -> None:
        self.cluster.set_faults({"hang": {"match": "create Job", "seconds": 30}})
        result = self.interrupt_when(lambda: len([a for a in self.cluster.calls() if "create" in a]) >= 3)
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted")
        self.assertIn("cleanup --output", result.stderr)
        self.cluster.set_faults({})
        self.run_ok("cleanup", "--output", "out")
        self.assertEqual(self.namespaces(), [])

    def test_mid_run(self) -> None:
        self.cluster.set_faults({"episode_seconds": 20})
        result = self.interrupt_when(lambda: self.calls_matching("pods", "--watch"))
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted")
        for name in ("receipt.json", "job.json", "pods.json", "events.txt"):
            self.assertTrue((self.out() / name).exists(), name)
        self.run_ok("cleanup", "--output", "out")
        self.assertEqual(self.namespaces(), [])

    def test_sigterm_is_an_interruption_too(self) -> None:
        self.cluster.set_faults({"episode_seconds": 20})
        result = self.interrupt_when(
            lambda: self.calls_matching("pods", "--watch"), "--cleanup", "always", signal_number=signal.SIGTERM
        )
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted")
        self.assertEqual(self.namespaces(), [])


if __name__ == "__main__":
    unittest.main()
