"""The fault matrix: each row of the README's table, injected into the fake cluster.

Every failing row asserts the exit code, the one-line message, the saved diagnostics, that
results.json is absent, and that nothing outside the run's namespace was touched."""

from __future__ import annotations

import json
from typing import Any

import rl_batch_demo as demo
from tests.test_run import ClusterTestCase


class FaultTestCase(ClusterTestCase):
    def run_with(self, faults: dict[str, Any], *argv: str, count: int = 2) -> Any:
        self.cluster.set_faults(faults)
        return self.tool("run", "--count", str(count), "--output", "out", "--quiet", *argv)

    def assert_run_failed(self, result: Any, exit_code: int, *fragments: str, diagnostics: bool = True) -> None:
        self.assert_fails(result, exit_code, *fragments)
        out = self.out()
        self.assertFalse((out / "results.json").exists())
        error = json.loads((out / "error.json").read_text())
        self.assertEqual(error["exit_code"], exit_code)
        if diagnostics:
            for name in ("receipt.json", "job-submitted.json", "job.json", "pods.json", "events.txt"):
                self.assertTrue((out / name).exists(), name)
        self.assert_only_own_namespace_touched()

    def assert_only_own_namespace_touched(self) -> None:
        namespace = self.receipt()["namespace"]
        for argv in self.cluster.calls():
            for flag in argv:
                if flag.startswith("--namespace="):
                    self.assertEqual(flag, f"--namespace={namespace}", argv)
            self.assertNotIn("delete", argv)
        self.assertTrue(set(self.namespaces()) <= {namespace})


class EpisodeFaultTest(FaultTestCase):
    def test_pod_failed(self) -> None:
        self.assert_run_failed(
            self.run_with({"episode": {"1": "exit1"}}), demo.EXIT_EPISODE, "phase Failed", "exit code 1"
        )

    def test_pod_evicted(self) -> None:
        self.assert_run_failed(self.run_with({"episode": {"0": "evict"}}), demo.EXIT_EPISODE, "evicted")

    def test_extra_replacement_pod(self) -> None:
        result = self.run_with({"episode": {"0": "replace"}})
        self.assertEqual(result.returncode, demo.EXIT_EPISODE, result.stderr)
        self.assertRegex(result.stderr, r"deleted mid-run|3 pods but 2 episodes")
        self.assertFalse((self.out() / "results.json").exists())

    def test_duplicate_ready_event(self) -> None:
        self.assert_run_failed(
            self.run_with({"episode": {"0": "duplicate_ready"}}), demo.EXIT_EPISODE, "found 2 ready and 1 reward"
        )

    def test_missing_reward(self) -> None:
        self.assert_run_failed(
            self.run_with({"episode": {"1": "drop_reward"}}), demo.EXIT_EPISODE, "found 1 ready and 0 reward"
        )

    def test_noise_lines_are_ignored(self) -> None:
        result = self.run_with({"episode": {"0": "noise", "1": "noise"}})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.results()["reward_sum"], 2)

    def test_malformed_event(self) -> None:
        self.assert_run_failed(self.run_with({"episode": {"0": "malformed"}}), demo.EXIT_EPISODE, "malformed JSON")

    def test_clock_skew(self) -> None:
        self.assert_run_failed(self.run_with({"episode": {"0": "skew"}}), demo.EXIT_EPISODE, "clock synchronisation")

    def test_restart(self) -> None:
        self.assert_run_failed(self.run_with({"episode": {"1": "restart"}}), demo.EXIT_EPISODE, "restarted 1 times")

    def test_wrong_episode_id(self) -> None:
        self.assert_run_failed(
            self.run_with({"episode": {"0": "wrong_id"}}), demo.EXIT_EPISODE, "episode_id 'someone-else'"
        )

    def test_logs_unavailable_says_why(self) -> None:
        result = self.run_with({"logs_unavailable": [1]})
        self.assert_run_failed(result, demo.EXIT_EPISODE, "log could not be read", "InternalError")
        logs = sorted(p.name for p in self.out().glob("*.log"))
        self.assertEqual(len(logs), 2)
        self.assertIn("", [(self.out() / name).read_text() for name in logs])

    def test_termination_message_disagrees_with_the_log(self) -> None:
        self.assert_run_failed(
            self.run_with({"episode": {"0": "message_mismatch"}}), demo.EXIT_EPISODE, "different events"
        )

    def test_runtime_without_termination_message_falls_back_to_logs(self) -> None:
        result = self.run_with({"episode": {"0": "no_message", "1": "no_message"}})
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_job_deadline_exceeded(self) -> None:
        result = self.run_with({"episode": {"0": "pending"}, "deadline_seconds": 1.0})
        self.assert_run_failed(result, demo.EXIT_TIMEOUT, "hit its deadline", "latest warning: FailedScheduling")


class ApiFaultTest(FaultTestCase):
    def test_server_error_on_each_create(self) -> None:
        for kind in ("Namespace", "ConfigMap", "Job"):
            for applied in (True, False):
                with self.subTest(kind=kind, applied=applied):
                    self.cluster = self.make_cluster()
                    self.root_out = self.root / f"out-{kind}-{applied}"
                    faults = {
                        "api_errors": [{"match": f"create {kind}", "times": 1, "error": "500", "after_apply": applied}]
                    }
                    self.cluster.set_faults(faults)
                    result = self.tool("run", "--count", "2", "--output", self.root_out.name, "--quiet")
                    if applied:
                        self.assertEqual(result.returncode, 0, result.stderr)
                        self.assertIn(f"adopted {kind}", result.stderr)
                        results = json.loads((self.root_out / "results.json").read_text())
                        self.assertEqual(results["reward_sum"], 2)
                    else:
                        self.assert_fails(
                            result, demo.EXIT_CLUSTER, f"creating {kind}", "does not exist", "nothing was repeated"
                        )
                        self.assertFalse((self.root_out / "results.json").exists())
                    # access reviews, namespace and ConfigMap together, Job: never a create repeated
                    creates = [argv for argv in self.cluster.calls() if "create" in argv]
                    self.assertEqual(len(creates), 3 if (kind == "Job" or applied) else 2)

    def test_forbidden_create(self) -> None:
        result = self.run_with({"api_errors": [{"match": "create Job", "times": 1, "error": "403"}]})
        self.assert_run_failed(result, demo.EXIT_CLUSTER, "Forbidden", diagnostics=False)
        self.run_ok("cleanup", "--output", "out")
        self.assertEqual(self.namespaces(), [])

    def test_too_many_requests_then_success(self) -> None:
        result = self.run_with({"api_errors": [{"match": "get events", "times": 1, "error": "429"}]})
        self.assertEqual(result.returncode, 0, result.stderr)
        listing = [argv for argv in self.cluster.calls() if argv[-4:] == ["get", "events", "-o", "json"]]
        self.assertEqual(len(listing), 2)

    def test_connection_refused_then_recovered(self) -> None:
        result = self.run_with({"api_errors": [{"match": "get runtimeclass", "times": 2, "error": "refused"}]})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.results()["reward_sum"], 2)

    def test_permanent_error_is_not_retried(self) -> None:
        result = self.run_with({"api_errors": [{"match": "get runtimeclass", "times": 5, "error": "403"}]})
        self.assert_fails(result, demo.EXIT_CLUSTER, "Forbidden")
        self.assertEqual(len([argv for argv in self.cluster.calls() if "runtimeclass" in argv]), 1)

    def test_kubectl_hanging_past_its_timeout(self) -> None:
        result = self.run_with({"hang": {"match": "get runtimeclass", "seconds": 30}}, "--kubectl-timeout", "1")
        self.assert_fails(result, demo.EXIT_TIMEOUT, "did not answer within 1 s")
        self.assertEqual(self.namespaces(), [])

    def test_watch_ending_early_falls_back_to_polling(self) -> None:
        result = self.run_with({"watch_ends_early": True, "episode_seconds": 1.5})
        self.assertEqual(result.returncode, 0, result.stderr)
        polls = [
            argv
            for argv in self.cluster.calls()
            if argv[-4:] == ["job", "rollout", "--ignore-not-found", "-o"]
            or ("get" in argv and "rollout" in argv and "--watch" not in argv)
        ]
        self.assertGreaterEqual(len(polls), 1)

    def test_legacy_job_labels(self) -> None:
        result = self.run_with({"legacy_labels": True})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(
            any(
                "controller-uid=" in " ".join(argv) and "batch.kubernetes.io" not in " ".join(argv)
                for argv in self.cluster.calls()
            )
        )


if __name__ == "__main__":
    import unittest

    unittest.main()
