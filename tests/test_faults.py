"""Faults injected into the fake cluster, end to end: the wire path of two rows of docs/faults.md's table.

The whole fault matrix runs in-process against call plans (tests/test_flow_faults.py); these
check that the same behaviour holds against a cluster that really runs the episodes: a failed
episode, and a 500 on the Job's create after the server stored it."""

from __future__ import annotations

import json
from typing import Any

import rl_batch_demo as demo
from tests.test_run import ClusterTestCase
from tests.tiers import end_to_end


@end_to_end
class FaultTestCase(ClusterTestCase):
    def run_with(self, faults: dict[str, Any], *argv: str, count: int = 2) -> Any:
        self.cluster.set_faults(faults)
        return self.tool("run", "--count", str(count), "--output", "out", "--quiet", *argv)


class WireFaultTest(FaultTestCase):
    def test_failed_episode_keeps_diagnostics(self) -> None:
        result = self.run_with({"episode": {"1": "exit1"}})
        self.assert_fails(result, demo.EXIT_EPISODE, "phase Failed", "exit code 1")
        self.assertEqual(len(self.namespaces()), 1)
        self.assertFalse([argv for argv in self.cluster.calls() if "delete" in argv])
        for name in ("job.json", "pods.json", "events.txt", "error.json", "kubectl-calls.json"):
            self.assertTrue((self.out() / name).exists(), name)
        self.assertFalse((self.out() / "results.json").exists())
        self.assertEqual(json.loads((self.out() / "error.json").read_text())["exit_code"], demo.EXIT_EPISODE)

    def test_server_error_on_the_job_create_after_it_was_stored_is_adopted(self) -> None:
        faults = {"api_errors": [{"match": "create Job", "times": 1, "error": "500", "after_apply": True}]}
        result = self.run_with(faults)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("adopted Job", result.stderr)
        self.assertEqual(self.results()["reward_sum"], 2)
        # access reviews, namespace with ConfigMap, Job: the Job's create was not repeated
        self.assertEqual(len([argv for argv in self.cluster.calls() if "create" in argv]), 3)


if __name__ == "__main__":
    import unittest

    unittest.main()
