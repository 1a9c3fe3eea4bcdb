"""The tool's flows in-process against call plans: run, rounds, cleanup, check, compare, interrupts.

Each test plans every kubectl call it expects (tests/callplan.py), with answers built from one
description of the cluster (tests/clusterobjects.py); the stub fails the test on any other call
and on any planned call never made. Figures are recomputed from the plan's own inputs."""

from __future__ import annotations

import json
import unittest
import unittest.mock
from typing import Any, Dict

import rl_batch_demo as demo
from tests.callplan import (
    CONTEXT,
    SERVER,
    CallPlanTestCase,
    RunPlan,
)
from tests.clusterobjects import (
    IMAGE_ID,
    NAMESPACE,
    NAMESPACE_UID,
    RUN_ID,
    Batch,
)


class RunPlanTestCase(CallPlanTestCase):
    def run_batch(self, plan: RunPlan, *argv: str, directory: str = "out") -> Any:
        self.expect(*plan.run())
        batch = plan.batch
        return self.run_ok("run", "--count", str(batch.count), "--output", str(self.out(directory)), *argv)

    def check_results_against_the_plan(self, plan: RunPlan, directory: str = "out") -> Dict[str, Any]:
        """Every file a finished run writes, and every figure, recomputed from the plan's batch."""
        batch = plan.batch
        out = self.out(directory)
        receipt = self.receipt(directory)
        self.assertEqual(
            receipt,
            {
                "context": CONTEXT,
                "server": SERVER,
                "namespace": NAMESPACE,
                "run_id": RUN_ID,
                "kubeconfig": None,
                "kubectl": self.stub.kubectl,
                "created_at": receipt["created_at"],
                "tool_version": receipt["tool_version"],
                "uid": NAMESPACE_UID,
                "jobs": [{"name": "rollout", "uid": batch.uid}],
                "job_uid": batch.uid,
            },
        )
        self.assertEqual(self.read_json("job-submitted.json", directory), batch.manifest())
        self.assertEqual(self.read_json("job.json", directory), batch.job_complete())
        self.assertEqual(self.read_json("pods.json", directory), demo.pod_list(batch.pods()))
        events_text = (out / "events.txt").read_text()
        self.assertEqual(events_text.count("SuccessfulCreate"), batch.count)
        for episode in batch.episodes:
            self.assertEqual((out / f"{episode.name}.log").read_text(), episode.log)

        results = self.results(directory)
        count = batch.count
        self.assertEqual((results["episodes"], results["successful_episodes"], results["reward_sum"]), (count,) * 3)
        self.assertEqual(
            (results["context"], results["namespace"], results["image"], results["run_id"]),
            (CONTEXT, NAMESPACE, demo.DEFAULT_IMAGE, RUN_ID),
        )
        self.assertEqual(
            (results["runtime"], results["parallelism"], results["cache_state"]),
            (plan.runtime, batch.parallelism, "uncontrolled"),
        )
        self.assertGreater(results["client_job_complete_seconds"], 0)
        self.assertEqual(results["job_created_at"], batch.created)
        self.assertLessEqual(results["client_submitted_at"], results["client_observed_complete_at"])
        complete = batch.job_complete()["status"]
        self.assertEqual(results["job_complete_at"], demo.parse_timestamp(complete["completionTime"]))
        self.assertEqual(results["job_success_criteria_met_at"], demo.parse_timestamp(complete["completionTime"]))

        expected_rows = {}
        for episode in batch.episodes:
            ready, reward = episode.events
            expected_rows[episode.name] = {
                "pod": episode.name,
                "node": episode.node,
                "image_id": IMAGE_ID,
                "reward": 1,
                "round": 1,
                "job": batch.job_name,
                "batch_start": batch.created,
                "created_at": episode.created,
                "ready_at": ready["at"],
                "reward_at": reward["at"],
                "finished_at": episode.finished,
                "container_started_at": episode.started,
                "scheduled_at": episode.created,
                "pod_to_ready_seconds": ready["at"] - episode.created,
                "batch_to_ready_seconds": ready["at"] - batch.created,
                "batch_to_reward_seconds": reward["at"] - batch.created,
                "python_import_seconds": ready["imports_done_at"] - ready["process_started_at"],
                "import_to_ready_seconds": ready["at"] - ready["imports_done_at"],
                "ready_to_reward_seconds": reward["at"] - ready["at"],
                "pod_to_container_started_seconds": episode.started - episode.created,
                "reward_to_finished_seconds": episode.finished - reward["at"],
                "pod_to_scheduled_seconds": 0.0,
                "overhead": {"cpu": "250m", "memory": "768Mi"} if plan.runtime else None,
            }
        self.assertEqual(len(results["pods"]), count)
        for row in results["pods"]:
            expected = expected_rows[row["pod"]]
            for key, value in expected.items():
                if isinstance(value, float):
                    self.assertAlmostEqual(row[key], value, places=6, msg=key)
                else:
                    self.assertEqual(row[key], value, key)
            # Client-clock sightings from the pod watch: first seen, then Running, then Succeeded.
            self.assertIsNotNone(row["observed_first_seen_at"])
            self.assertLessEqual(row["observed_first_seen_at"], row["observed_running_at"])
            self.assertLessEqual(row["observed_running_at"], row["observed_succeeded_at"])
            self.assertAlmostEqual(
                row["pod_observed_to_ready_seconds"], row["ready_at"] - row["observed_first_seen_at"]
            )
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
        nodes: Dict[str, int] = {}
        for episode in batch.episodes:
            nodes[episode.node] = nodes.get(episode.node, 0) + 1
        self.assertEqual(results["nodes"], nodes)
        self.assertEqual(results["image_ids"], [IMAGE_ID])
        self.assertEqual(set(results["phases"]), set(demo.PHASES))
        self.assertEqual(results["phases"]["pod_to_ready_seconds"]["p50"], results["pod_to_ready_p50_seconds"])
        self.assertEqual(results["phases"]["pod_to_ready_seconds"]["samples"], count)
        self.assertTrue((out / "timeline.svg").read_text().startswith("<?xml"))
        return results


class TranscriptTest(RunPlanTestCase):
    """README "What a run does": a 10-episode run starts exactly these 10 kubectl processes."""

    def test_ten_episode_run_makes_these_ten_calls(self) -> None:
        plan = RunPlan(Batch(count=10))
        self.run_batch(plan)
        uid = plan.batch.uid
        base = [f"--context={CONTEXT}", "--request-timeout=30s"]
        in_namespace = [*base, f"--namespace={NAMESPACE}"]
        watching = [f"--context={CONTEXT}", "--request-timeout=275s", f"--namespace={NAMESPACE}"]
        selector = f"batch.kubernetes.io/controller-uid={uid}"
        transcript = [
            ["config", "view", "--minify", "-o", "json"],
            [*base, "get", "runtimeclass", "cube", "--ignore-not-found", "-o", "json"],
            [*base, "create", "-f", "-", "-o", "json"],  # every SelfSubjectAccessReview at once
            [*base, "create", "-f", "-", "-o", "json"],  # the namespace
            [*base, "create", "-f", "-", "-o", "json"],  # the ConfigMap
            [*base, "create", "-f", "-", "-o", "json"],  # the Job
            [*watching, "get", "job", "rollout", "-o", "json", "--output-watch-events", "--watch"],
            [*watching, "get", "pods", "-l", selector, "-o", "json", "--output-watch-events", "--watch"],
            [*in_namespace, "get", "pods,events", "-o", "json"],
            [*in_namespace, "logs", "-l", selector, "-c", "episode", "--prefix", "--tail=-1", "--max-log-requests=10"],
        ]
        recorded = self.recorded_calls()
        self.assertEqual([call["argv"] for call in recorded], transcript)  # the tool's order
        received = self.stub.calls()  # the two watch processes start together: either may log first
        self.assertEqual(received[:6] + received[8:], transcript[:6] + transcript[8:])
        self.assertCountEqual(received[6:8], transcript[6:8])
        kinds = [json.loads(record["stdin"])["kind"] for record in self.stub.records() if record["stdin"]]
        self.assertEqual(kinds, ["List", "Namespace", "ConfigMap", "Job"])
        for call in recorded:
            self.assertIn("seconds", call)
            self.assertEqual(call.get("watch", False), "--watch" in call["argv"])
            self.assertEqual(call["exit"], -15 if call.get("watch") else 0)  # watches end with SIGTERM


class RunTest(RunPlanTestCase):
    def test_parallel_ten(self) -> None:
        plan = RunPlan(Batch(count=10))
        result = self.run_batch(plan)
        self.check_results_against_the_plan(plan)
        self.assertIn("Job created -> all episodes ready", result.stdout)
        self.assertIn(f"Test namespace: {NAMESPACE}", result.stderr)
        self.assertIn(f"namespace {NAMESPACE} is kept; delete it with: python3 ", result.stderr)
        self.assertIn(f"cleanup --output {self.out()}", result.stderr)


if __name__ == "__main__":
    unittest.main()
