"""Each pod's output read as the pod runs (LogFollower), end to end through the fake cluster.

The fake forgets a pod's log once its object is removed (tests/fakekube/store.py, as the API
server and the kubelet do), so what a stopped pod printed is kept only by a reader that followed
it while it ran."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import rl_batch_demo as demo
from tests.test_sources_e2e import SourcesTestCase
from tests.tiers import end_to_end
from tests.toolprocess import image_python

# The worker template with its main() replaced: index 3 fails once the others have printed their
# line and are running (so its round fails and the job controller stops them, SIGTERM: exit 143).
STOPPED_ROUND_MAIN = """
def main():
    print(f"episode {INDEX} started", flush=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ARTIFACTS.joinpath("note.txt").write_text(f"episode {INDEX}")
    send_artifacts()  # early: the round fails, so these must not look like a good episode's
    if INDEX == 3:
        time.sleep(3)  # the others start meanwhile; their logs are followed once all have
        print("episode 3 gives up", flush=True)
        return 1
    time.sleep(60)  # stopped by the job controller long before
    return 0
"""

# A worker that only writes files: no send_artifacts() call, its reward event lists none.
WRITES_ONLY_MAIN = """
def main():
    task = read_task()
    emit("ready", process_started_at=STARTED_AT, imports_done_at=IMPORTS_DONE_AT)
    ARTIFACTS.joinpath("steps").mkdir(parents=True, exist_ok=True)
    ARTIFACTS.joinpath("trajectory.json").write_text(json.dumps({"index": INDEX}))
    ARTIFACTS.joinpath("steps", "0.txt").write_bytes(b"first step\\n" * INDEX)
    emit("reward", reward=1.0)
    return 0
"""
# ... and one that leaves what cannot be sent: a symlink, and a file over --max-artifact-bytes.
LEAVES_REFUSED_MAIN = """
def main():
    task = read_task()
    emit("ready", process_started_at=STARTED_AT, imports_done_at=IMPORTS_DONE_AT)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ARTIFACTS.joinpath("big.bin").write_bytes(b"x" * 5000)
    os.symlink("/etc/passwd", str(ARTIFACTS / "link"))
    emit("reward", reward=1.0)
    return 0
"""

# Index 0 ends at once; the others sleep a minute: a loop that leaves after the first row.
SLEEPERS_MAIN = """
def main():
    task = read_task()
    emit("ready", process_started_at=STARTED_AT, imports_done_at=IMPORTS_DONE_AT)
    if INDEX:
        time.sleep(60)
    emit("reward", reward=1.0, artifacts=[])
    return 0
"""
LEAVE_EARLY = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import rl_batch_demo as demo
rows = demo.stream_batch(Path(sys.argv[2]), count=3, worker=sys.argv[3], quiet=True, cleanup="always")
first = next(rows)
started = time.monotonic()
rows.close()
print(json.dumps({"first": first["pod"], "close_seconds": time.monotonic() - started}))
"""

# A script beside the run: stream_batch's rows, and for each row whether every artifact it lists
# was on disk, whole, when the row was yielded.
STREAM_CHECK = """
import hashlib, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import rl_batch_demo as demo
out = Path(sys.argv[2])
seen = []
count = int(sys.argv[3])
tasks = [{"id": f"t{i}", "question": f"{i} + 1", "expected": i + 1} for i in range(count)]  # the template's shape
for row in demo.stream_batch(out, count=count, worker=sys.argv[4], tasks=tasks, quiet=True):
    files = []
    for entry in row.get("artifacts") or []:
        path = out / "artifacts" / row["pod"] / entry["name"]
        data = path.read_bytes() if path.is_file() else None
        files.append([entry["name"], data is not None and hashlib.sha256(data).hexdigest() == entry["sha256"]])
    seen.append({"pod": row["pod"], "reward": row.get("reward"), "files": files})
print(json.dumps(seen))
"""


def template_with_main(main: str) -> str:
    """The worker template, its main() replaced by `main` (the last definition wins)."""
    head, tail = demo.WORKER_TEMPLATE.rsplit('if __name__ == "__main__":', 1)
    return head + main + '\n\nif __name__ == "__main__":' + tail


@end_to_end
class StoppedPodsTest(SourcesTestCase):
    def test_a_failed_round_keeps_every_pods_log_on_a_cluster_that_deletes_them(self) -> None:
        """Index 3 fails; the job controller deletes the other nine while they run (exit 143),
        and the fake forgets each one's log as its object goes. pods.json lists all ten, and each
        .log holds what its pod printed: it was read while the pod ran."""
        cluster = self.cluster()
        worker = self.root / "stopped.py"
        worker.write_text(template_with_main(STOPPED_ROUND_MAIN))
        result = self.tool(cluster, "run", "--count", "10", "--worker", str(worker), "--output", str(self.out))
        self.assertEqual(result.returncode, demo.EXIT_EPISODE, result.stderr)
        pods = json.loads((self.out / "pods.json").read_text())["items"]
        self.assertEqual(len(pods), 10, [pod["metadata"]["name"] for pod in pods])
        namespace = self.receipt()["namespace"]
        stopped = 0
        for pod in pods:
            name = pod["metadata"]["name"]
            index = int(pod["metadata"]["annotations"][demo.INDEX_ANNOTATION])
            self.assertIn(f"episode {index} started\n", (self.out / f"{name}.log").read_text(), name)
            if index != 3:
                stopped += 1
                # the cluster no longer has it: only the followed read kept it
                again = subprocess.run(
                    ["kubectl", "--context=fake-ctx", f"--namespace={namespace}", "logs", name, "-c", "episode"],
                    env=cluster.env(),
                    capture_output=True,
                    text=True,
                    check=False,
                )
                self.assertEqual(again.returncode, 1, again.stdout)
                self.assertIn(f'pods "{name}" not found', again.stderr)
        self.assertEqual(stopped, 9)
        # no artifact of the failed round is where a trainer looks for good episodes' files
        self.assertEqual(list((self.out / demo.RUN_FILES.artifacts).glob("*/*")), [])
        set_aside = sorted(
            path.parent.name for path in (self.out / demo.RUN_FILES.artifacts_set_aside).glob("*/note.txt")
        )
        self.assertEqual(set_aside, sorted(pod["metadata"]["name"] for pod in pods))

    def test_followed_logs_keep_a_ten_episode_run_within_ten_processes(self) -> None:
        """The ten logs are followed by one `kubectl logs -f` while the pods run; nothing is read
        after the decision but the events. The rule holds for the pods the pod watch showed started
        before the decision: the Job's and the pods' watches are two streams, and on a loaded machine
        (CI's stub-process tier) the pods' can lag behind the Job's Complete by more than the 0.25 s
        the run waits for it, and the run then reads the logs after the decision (the fallback,
        correct but not this rule's case); the test says so and skips rather than assert on timing."""
        cluster = self.cluster()
        self.run_tool(cluster, 0, "--count", "10")
        results = self.results()
        complete = results["client_observed_complete_at"]
        sightings = [
            min((t for t in (row["observed_running_at"], row["observed_succeeded_at"]) if t is not None), default=None)
            for row in results["pods"]
        ]
        if not all(seen is not None and seen < complete for seen in sightings):
            self.skipTest("the pod watch showed a pod started only after the job controller's decision")
        calls = self.kubectl_calls()
        self.assertLessEqual(len(calls), 10)
        reads = [argv for argv in calls if "logs" in argv]
        self.assertEqual(len(reads), 1)
        self.assertIn("-f", reads[0])
        self.assertEqual(calls[-1][-4:], ["get", "events", "-o", "json"])


@end_to_end
class RowsWithTheirFilesTest(SourcesTestCase):
    def script(self, cluster: Any, text: str, *argv: str) -> subprocess.CompletedProcess:
        script = self.root / "script.py"
        script.write_text(text)
        source = str(Path(demo.__file__).resolve().parent)
        result = subprocess.run(
            [image_python(), str(script), source, *argv],
            cwd=str(self.root),
            env=cluster.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        cluster.wait_idle()
        return result

    def test_a_worker_that_only_writes_files_has_them_saved(self) -> None:
        """Artifacts need no call: the launcher sends what the worker left under
        RL_DEMO_ARTIFACTS once it exits, and adds them to its reward event."""
        cluster = self.cluster()
        worker = self.root / "writer.py"
        worker.write_text(template_with_main(WRITES_ONLY_MAIN))
        self.run_tool(cluster, 0, "--count", "2", "--worker", str(worker))
        for row in self.results()["pods"]:
            self.assertEqual([entry["name"] for entry in row["artifacts"]], ["steps/0.txt", "trajectory.json"], row)
            for entry in row["artifacts"]:
                data = (self.out / "artifacts" / row["pod"] / entry["name"]).read_bytes()
                self.assertEqual((len(data), hashlib.sha256(data).hexdigest()), (entry["bytes"], entry["sha256"]))
            trajectory = json.loads((self.out / "artifacts" / row["pod"] / "trajectory.json").read_text())
            self.assertEqual(trajectory, {"index": row["index"]})

    def test_files_that_cannot_be_sent_fail_the_episode_naming_them(self) -> None:
        """A file over --max-artifact-bytes is not sent, and the episode fails with a cause that
        names it, never silence; a symlink beside it is skipped, never followed."""
        cluster = self.cluster()
        worker = self.root / "refused.py"
        worker.write_text(template_with_main(LEAVES_REFUSED_MAIN))
        result = self.tool(
            cluster, "run", "--count", "1", "--worker", str(worker), "--max-artifact-bytes", "4096",
            "--output", str(self.out), "--quiet",
        )  # fmt: skip
        self.assertEqual(result.returncode, demo.EXIT_EPISODE, result.stderr)
        self.assertIn("its artifacts could not all be sent", result.stderr)
        why = "5,000 bytes, over the budget of 4,096 bytes per episode (4,096 left)"
        self.assertIn(f"'big.bin' ('{why}')", result.stderr)
        self.assertNotIn("'link'", result.stderr)
        self.assertFalse(list(self.out.glob("artifacts*/*/link")))
        [log] = self.out.glob("rollout-*.log")
        self.assertIn("artifact skipped (not a regular file): link", log.read_text())

    def test_leaving_the_loop_while_logs_are_read_stops_the_run(self) -> None:
        """The first row comes while two episodes still run (and their logs are followed);
        close() stops the run then: it does not wait for them (a minute). The row already
        validated stands (results.json covers it, issue 25's early stop) and the two still
        running are named as stopped. How long close() took is printed, not asserted
        (bench/bench.py's kind of figure)."""
        cluster = self.cluster()
        worker = self.root / "sleepers.py"
        worker.write_text(template_with_main(SLEEPERS_MAIN))
        result = self.script(cluster, LEAVE_EARLY, str(self.out), str(worker))
        self.assertEqual(result.returncode, 0, result.stderr)
        left = json.loads(result.stdout.splitlines()[-1])
        results = json.loads((self.out / "results.json").read_text())
        # the two still running (or not yet created when the loop was left: named by index)
        self.assertEqual(sorted(entry["index"] for entry in results["stopped_episodes"]), [1, 2])
        self.assertFalse(any(entry["ended"] for entry in results["stopped_episodes"]))
        self.assertTrue(results["stopped_by"])
        self.assertLess(left["close_seconds"], 60)  # it did not wait for the sleeping episodes

    def test_each_streamed_row_has_its_artifacts_on_disk(self) -> None:
        """stream_batch: when a row is yielded, every artifact it lists is saved under
        DIR/artifacts/<pod>/ and has the sha256 it lists."""
        cluster = self.cluster()
        worker = self.root / "worker.py"
        worker.write_text(demo.WORKER_TEMPLATE)
        script = self.root / "check.py"
        script.write_text(STREAM_CHECK)
        source = str(Path(demo.__file__).resolve().parent)
        result = subprocess.run(
            [image_python(), str(script), source, str(self.out), "4", str(worker)],
            cwd=str(self.root),
            env=cluster.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        cluster.wait_idle()
        self.assertEqual(result.returncode, 0, result.stderr)
        seen: List[Dict[str, Any]] = json.loads(result.stdout.splitlines()[-1])
        self.assertEqual(len({row["pod"] for row in seen}), 4)
        for row in seen:
            self.assertEqual([name for name, _ in row["files"]], ["trajectory.json"], row)
            self.assertTrue(all(whole for _, whole in row["files"]), row)


if __name__ == "__main__":
    import unittest

    unittest.main()
