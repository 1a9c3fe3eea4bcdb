"""End-to-end tests: the real script against the strict fake kubectl (tests/fake_kubectl.py).

Every test gets its own fake cluster; episodes run the embedded worker for real. The tool runs
as a subprocess, exactly as a user runs it, with PATH holding only the fake. These few tests
keep the real wire path honest (processes, pipes, signals, a cluster that really runs the
episodes); every flow and fault is tested in-process against call plans in tests/test_flows.py
and tests/test_flow_faults.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Sequence

import rl_batch_demo as demo
from tests import records
from tests.clusterobjects import check_rows_and_batch_figures
from tests.fakecluster import FakeCluster
from tests.tiers import end_to_end
from tests.toolprocess import image_python, tool_command, tool_environment

SCRIPT = str(Path(demo.__file__).resolve())


def run_script(
    argv: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The tool as a user runs it: `python3 rl_batch_demo.py ARGV` in `cwd` with exactly `env`
    (a fake cluster's, with only the fake kubectl on PATH), its output captured as text; run as
    a module from its cached bytecode (tests/toolprocess.py)."""
    return subprocess.run(
        tool_command(*argv),
        cwd=str(cwd),
        env=tool_environment(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class ClusterTestCase(unittest.TestCase):
    """A fresh fake cluster and a scratch directory per test."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py
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
        return run_script(argv, {**self.cluster.env(), **(env or {})}, self.root, timeout)

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
        return records.written(self, self.out(name) / "receipt.json", demo.Receipt)

    def results(self, name: str = "out") -> dict[str, Any]:
        return records.written_results(self, self.out(name))

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
        for name in pods:  # as served, but the artifact frames: they went to artifacts/<pod>/, a marker says
            served = self.cluster.pod_log(namespace, name).splitlines(keepends=True)
            frames = [line for line in served if line.startswith("rl-demo-artifact 1 ")]
            saved, marker = (out / f"{name}.log").read_text().rsplit("\n[", 1)
            self.assertEqual(saved + "\n", "".join(line for line in served if line not in frames))
            self.assertEqual(
                marker, f"rl-batch-demo: {len(frames)} artifact frame lines went to out/artifacts/{name}/]\n"
            )
            self.assertEqual(len(frames), 2)  # the built-in worker's patch.diff and tests-output.txt

        results = self.results()
        self.assertEqual(
            (results["episodes"], results["successful_episodes"], results["reward_sum"]), (count, count, count)
        )
        self.assertEqual(
            (results["context"], results["namespace"], results["image"]), ("fake-ctx", namespace, demo.DEFAULT_IMAGE)
        )
        self.assertEqual(
            (results["runtime"], results["parallelism"], results["cache_state"]), ("cube", parallelism, "cached")
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
        records = self.cluster.pod_records(namespace, "rollout")
        for name, pod in pods.items():
            ready, reward = (
                json.loads(line)
                for line in self.cluster.pod_log(namespace, name).splitlines()
                # the artifact frames, between the two, and the worker's last line (no launcher)
                if not line.startswith("rl-demo-artifact 1 ") and line != demo.LOG_END_LINE.decode()
            )
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
                "python_import_seconds": ready["imports_done_at"] - ready["first_statement_at"],
                "import_to_ready_seconds": ready["at"] - ready["imports_done_at"],
                "ready_to_reward_seconds": reward["at"] - ready["at"],
                "pod_to_container_started_seconds": demo.parse_timestamp(status["state"]["terminated"]["startedAt"])
                - created,
                "reward_to_finished_seconds": demo.parse_timestamp(status["state"]["terminated"]["finishedAt"])
                - reward["at"],
                "overhead": pod["spec"].get("overhead"),
                # the scheduler's Scheduled event (eventTime, microseconds), as the fake wrote it
                "pod_to_scheduled_seconds": records[name]["scheduled_event_time"] - created,
            }
        check_rows_and_batch_figures(self, results, expected_rows, out)
        self.assertEqual(len(results["pods"]), count)
        for row in results["pods"]:
            if row["pod_observed_to_ready_seconds"] is None:  # a pod the watch first showed ready or ended (a load)
                first_seen = row["observed_first_seen_at"]
                self.assertTrue(first_seen is None or first_seen >= row["ready_at"], row)
            else:
                seen_to_ready = row["ready_at"] - row["observed_first_seen_at"]
                self.assertAlmostEqual(row["pod_observed_to_ready_seconds"], seen_to_ready)
        return results

    def test_parallel_ten(self) -> None:
        # the pods start once the pod watch has listed, as on a real cluster: on a loaded machine
        # the fake's pods could otherwise end before the watch showed them (CI saw no followed read)
        self.cluster.set_faults({"pods_wait_for_pod_watch": 30})
        result = self.run_ok("run", "--count", "10", "--output", "out")
        self.check_run_against_the_fake(10, 10)
        namespace = self.receipt()["namespace"]
        self.assertGreater(self.cluster.max_concurrent_pods(namespace, "rollout"), 1)
        self.assertIn("Job created -> all episodes ready", result.stdout)
        self.assertIn(
            f"delete it with: python3 {SCRIPT}", result.stderr.replace(os.path.relpath(SCRIPT, self.root), SCRIPT)
        )
        # The target: a 10-episode run starts at most 10 kubectl processes, one of them the one
        # followed read of all ten logs (LogFollower: a pod that ends before the last has started
        # waits for it rather than costing a read of its own), none read after the decision.
        calls = self.cluster.calls()
        self.assertLessEqual(len(calls), 10, calls)
        self.assertEqual(len([call for call in calls if "logs" in call]), 1, calls)
        self.assertEqual(len([call for call in calls if "logs" in call and "-f" in call]), 1, calls)
        recorded = json.loads((self.out() / "kubectl-calls.json").read_text())
        self.assertEqual(sorted(call["argv"] for call in recorded), sorted(self.cluster.calls()))  # watches race
        for call in recorded:
            self.assertIn("exit", call)
            self.assertIn("seconds", call)
        for argv in self.cluster.calls()[1:]:
            self.assertIn("--context=fake-ctx", argv)
            if "logs" in argv:  # a log read has no --request-timeout: it would limit each log's transfer
                self.assertFalse([word for word in argv if word.startswith("--request-timeout")], argv)
            else:
                self.assertIn("--request-timeout=30s" if "--watch" not in argv else "--watch", argv)

    @end_to_end
    def test_sequential_rounds_and_their_cleanup(self) -> None:
        """Two rounds of two at parallelism 1: each Job really serialised, both recorded, both
        cleaned up. The pods run the fake's stand-in worker: the order is under test, not the
        grading (test_parallel_ten runs the real worker)."""
        self.cluster.set_faults({"stand_in_worker": True})
        result = self.run_ok("run", "--count", "2", "--parallelism", "1", "--rounds", "2", "--output", "out")
        self.assertIn("episodes 2 x 2 round(s), parallelism 1: 4 succeeded", result.stdout)
        results = self.results()
        self.assertEqual((results["episodes"], results["rounds"], results["reward_sum"]), (4, 2, 4))
        self.assertEqual([r["job"] for r in results["round_results"]], ["rollout-1", "rollout-2"])
        receipt = self.receipt()
        namespace = receipt["namespace"]
        for round_number in (1, 2):
            self.assertTrue((self.out() / f"round-{round_number}" / "pods.json").exists())
            self.assertEqual(self.cluster.max_concurrent_pods(namespace, f"rollout-{round_number}"), 1)
            rows = sorted((r for r in results["pods"] if r["round"] == round_number), key=lambda row: row["ready_at"])
            self.assertEqual(len(rows), 2)
            self.assertLessEqual(rows[0]["reward_at"], rows[1]["ready_at"])
        jobs = {job["metadata"]["name"]: job["metadata"]["uid"] for job in self.cluster.objects("Job", namespace)}
        self.assertEqual({job["name"]: job["uid"] for job in receipt["jobs"]}, jobs)
        self.run_ok("cleanup", "--output", "out")
        self.assertEqual(self.namespaces(), [])

    @end_to_end
    def test_allow_large_reads_rewards_from_termination_messages(self) -> None:
        """Past the cross-check limit the rewards come from the termination messages; the logs
        are followed while the pods run (one read per 10 pods), none is read after the
        decision. The stand-in worker writes its termination message as the real one does;
        test_parallel_ten checks the real worker's message against its log."""
        self.cluster.set_faults({"stand_in_worker": True})
        self.run_ok("run", "--count", "21", "--allow-large", "--output", "out", "--quiet")  # just past 20
        results = self.results()
        self.assertEqual((results["episodes"], results["reward_sum"], len(results["pods"])), (21, 21, 21))
        calls = self.cluster.calls()
        reads = [argv for argv in calls if "logs" in argv]
        self.assertTrue(all("-f" in argv for argv in reads), reads)
        self.assertLessEqual(len(reads), 3)  # 21 pods: about one read per 10
        self.assertLessEqual(len(calls), 12)


class CheckTest(ClusterTestCase):
    def test_ready_cluster(self) -> None:
        result = self.run_ok("check", "--count", "10")
        self.assertIn("10 pods need 3.5 CPU and 8.1 GiB including 7.5 GiB of RuntimeClass overhead", result.stdout)
        self.assertIn("permissions: all granted", result.stdout)
        self.assertIn("verdict: ready", result.stdout)
        self.assertEqual(self.namespaces(), [])


@end_to_end
class InterruptTest(ClusterTestCase):
    """A real signal to a real process mid-run (SIGTERM, as a CI runner sends, which the tool
    turns into Ctrl-C's KeyboardInterrupt), with --cleanup always. tests/test_flows.py
    interrupts at every point in-process, each followed by a cleanup that works."""

    def interrupt_when(
        self, ready: Any, *argv: str, signal_number: int = signal.SIGINT
    ) -> subprocess.CompletedProcess[str]:
        process = subprocess.Popen(
            [image_python(), SCRIPT, "run", "--output", "out", "--count", "2", *argv],
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

    def test_sigterm_is_an_interruption_too(self) -> None:
        self.cluster.set_faults({"episode_seconds": 20})
        result = self.interrupt_when(
            lambda: self.calls_matching("pods", "--watch"), "--cleanup", "always", signal_number=signal.SIGTERM
        )
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted")
        self.assertIn("interrupted: saving diagnostics", result.stderr)
        for name in ("receipt.json", "job.json", "pods.json", "events.txt", "error.json"):
            self.assertTrue((self.out() / name).exists(), name)
        self.assertEqual(self.namespaces(), [])


if __name__ == "__main__":
    unittest.main()
