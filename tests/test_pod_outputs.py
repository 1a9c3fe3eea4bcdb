"""Each pod's output read as the pod runs (LogFollower), end to end through the fake cluster.

The fake forgets a pod's log once its object is removed (tests/fakekube/store.py, as the API
server and the kubelet do), so what a stopped pod printed is kept only by a reader that followed
it while it ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import rl_batch_demo as demo
from tests.test_sources_e2e import SourcesTestCase
from tests.tiers import end_to_end

# The worker template with its main() replaced: index 3 fails once the others have printed their
# line and are running (so its round fails and the job controller stops them, SIGTERM: exit 143).
STOPPED_ROUND_MAIN = """
def main():
    print(f"episode {INDEX} started", flush=True)
    if INDEX == 3:
        time.sleep(3)  # the others start meanwhile; their logs are followed once all have
        print("episode 3 gives up", flush=True)
        return 1
    time.sleep(60)  # stopped by the job controller long before
    return 0
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
for row in demo.stream_batch(out, count=int(sys.argv[3]), worker=sys.argv[4], quiet=True):
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

    def test_followed_logs_keep_a_ten_episode_run_within_ten_processes(self) -> None:
        """The ten logs are followed by one `kubectl logs -f` while the pods run; nothing is read
        after the decision but the events."""
        cluster = self.cluster()
        self.run_tool(cluster, 0, "--count", "10")
        calls = self.kubectl_calls()
        self.assertLessEqual(len(calls), 10)
        reads = [argv for argv in calls if "logs" in argv]
        self.assertEqual(len(reads), 1)
        self.assertIn("-f", reads[0])
        self.assertEqual(calls[-1][-4:], ["get", "events", "-o", "json"])


@end_to_end
class RowsWithTheirFilesTest(SourcesTestCase):
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
            [sys.executable, str(script), source, str(self.out), "4", str(worker)],
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
