"""What a trainer builds on (issue 25), end to end through the fake cluster: whose a failure is
(failure_kind), an episode's own deadline (--episode-timeout), an early stop that keeps what
finished (--stop-after, stream_batch), grading on the client, the async API and tags.

Each test is one short run of a custom worker whose episodes differ by their completion index
(JOB_COMPLETION_INDEX): how long each takes, and whether it hangs or crashes."""

from __future__ import annotations

import json
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import Any, Dict, List

import rl_batch_demo as demo
from tests import records
from tests.fakecluster import FakeCluster, write_executable
from tests.test_run import run_script
from tests.tiers import end_to_end

# A worker whose episode INDEX sleeps SECONDS[INDEX] between ready and reward ("hang": an hour),
# and exits with EXITS.get(INDEX, 0) after its reward.
WORKER = """
import json, os, sys, time
first = time.time()
ID = os.environ["EPISODE_ID"]
INDEX = int(os.environ["JOB_COMPLETION_INDEX"])
SECONDS = {seconds!r}
EXITS = {exits!r}
def line(name, **fields):
    return json.dumps(dict(fields, event=name, at=time.time(), episode_id=ID), sort_keys=True) + "\\n"
ready = line("ready", process_started_at=first, imports_done_at=first)
sys.stdout.write(ready)
sys.stdout.flush()
time.sleep(3600 if SECONDS[INDEX] == "hang" else SECONDS[INDEX])
reward = line("reward", reward=1.0, index=INDEX)
sys.stdout.write(reward)
with open(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"), "w") as stream:
    stream.write(ready + reward)
sys.exit(EXITS.get(INDEX, 0))
"""


class TrainerTestCase(unittest.TestCase):
    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-trainer-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)

    def cluster(self, **options: Any) -> FakeCluster:
        cluster = FakeCluster(self.root / "cluster", **options)
        self.addCleanup(cluster.close)
        return cluster

    def worker(self, seconds: List[Any], exits: Dict[int, int] | None = None) -> str:
        path = self.root / "worker.py"
        write_executable(path, WORKER.format(seconds=seconds, exits=exits or {}))
        return str(path)

    def run_tool(self, cluster: FakeCluster, code: int, *argv: str) -> subprocess.CompletedProcess:
        result = run_script(["run", "--output", str(self.out), "--quiet", *argv], cluster.env(), self.root)
        cluster.wait_idle()
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(result.returncode, code, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result

    @property
    def out(self) -> Path:
        return self.root / "out"

    def results(self) -> Dict[str, Any]:
        return records.written_results(self, self.out)

    def lines(self) -> List[demo.RewardLine]:
        return records.written(self, self.out / demo.REWARDS_FILE, demo.RewardLine)


@end_to_end
class EpisodeTimeoutTest(TrainerTestCase):
    def test_a_hung_episode_fails_alone_and_is_scored(self) -> None:
        """Index 1 prints ready and sleeps: past its own --episode-timeout the kubelet fails its pod
        (DeadlineExceeded), the Job's deadline is never reached, and with --failed-episode-reward the
        batch succeeds with the others' rewards and the hung one scored as its own failure."""
        cluster = self.cluster()
        worker = self.worker([0, "hang", 0])
        argv = ("--count", "3", "--worker", worker, "--episode-timeout", "2", "--timeout", "60")
        self.run_tool(cluster, 0, *argv, "--failed-episode-reward", "-1")
        job = json.loads((self.out / "job.json").read_text())
        self.assertEqual(job["spec"]["template"]["spec"]["activeDeadlineSeconds"], 2)
        self.assertEqual([c["reason"] for c in job["status"]["conditions"] if c["type"] == "Failed"], ["FailedIndexes"])
        pods = json.loads((self.out / "pods.json").read_text())["items"]
        [hung] = [pod for pod in pods if pod["metadata"]["annotations"][demo.INDEX_ANNOTATION] == "1"]
        self.assertEqual((hung["status"]["phase"], hung["status"]["reason"]), ("Failed", "DeadlineExceeded"))
        events = (self.out / "events.txt").read_text()
        self.assertIn("DeadlineExceeded", events)
        results = self.results()
        [entry] = results["failed_episodes"]
        self.assertEqual((entry["index"], entry["failure_kind"], entry["reward"]), (1, demo.FAILURE_EPISODE, -1.0))
        self.assertIn("ran past its own deadline of 2 s (--episode-timeout", entry["cause"])
        self.assertEqual((results["successful_episodes"], results["reward_sum"]), (2, 1.0 + 1.0 - 1.0))
        lines = {line["index"]: line for line in self.lines()}
        self.assertEqual((lines[1]["reward"], lines[1]["failure_kind"]), (-1.0, demo.FAILURE_EPISODE))

    def test_without_a_score_the_hung_episode_fails_the_run_as_its_own(self) -> None:
        cluster = self.cluster()
        worker = self.worker([0, "hang"])
        result = self.run_tool(
            cluster, demo.EXIT_EPISODE, "--count", "2", "--worker", worker, "--episode-timeout", "2", "--timeout", "60"
        )
        self.assertIn("ran past its own deadline of 2 s", result.stderr)
        self.assertNotIn("hit its deadline", result.stderr)  # the Job's: never reached


if __name__ == "__main__":
    unittest.main()
