"""When the pod watch already holds every pod's final state, and when it does not (issue: time to result)."""

from __future__ import annotations

import copy
import queue
import subprocess
import sys
import time
import unittest
from typing import Any

import rl_batch_demo as demo
from tests.test_units import make_pod

JOB_UID = "job-uid"


def watched_pod(name: str, **changes: Any) -> dict[str, Any]:
    pod = make_pod(name)
    pod["metadata"]["labels"] = {demo.UID_LABEL: JOB_UID}
    pod["metadata"].update(changes)
    return pod


def observation(pods: list[dict[str, Any]], **status: Any) -> demo.RoundObservation:
    job_status = {"succeeded": len(pods), "conditions": [{"type": "Complete", "status": "True"}]}
    job_status.update(status)
    job = {"metadata": {"name": "rollout", "uid": JOB_UID}, "status": job_status}
    return demo.RoundObservation(job, "Complete", 1.0, 1.0, last_pods={pod["metadata"]["name"]: pod for pod in pods})


class FinalPodsFromWatchTest(unittest.TestCase):
    def test_every_pod_terminal_and_counted_is_final(self) -> None:
        pods = [watched_pod("rollout-b"), watched_pod("rollout-a")]
        final = demo.final_pods_from_watch(observation(pods), JOB_UID)
        self.assertIsNotNone(final)
        assert final is not None
        self.assertEqual([pod["metadata"]["name"] for pod in final], ["rollout-a", "rollout-b"])

    def test_each_missing_proof_falls_back_to_the_listing(self) -> None:
        good = [watched_pod("rollout-a"), watched_pod("rollout-b")]
        running = copy.deepcopy(good)
        running[1]["status"]["phase"] = "Running"
        cases = {
            "a pod last seen before its final update (tracking finalizer still on)": (
                observation([good[0], watched_pod("rollout-b", finalizers=[demo.JOB_TRACKING_FINALIZER])]),
            ),
            "a pod last seen running": (observation(running),),
            "a pod being deleted": (observation([good[0], watched_pod("rollout-b", deletionTimestamp="x")]),),
            "the Job has not counted every pod": (observation(good, succeeded=1),),
            "terminated pods not yet counted": (observation(good, uncountedTerminatedPods={"succeeded": ["u"]}),),
            "a pod of another Job": (observation([good[0], watched_pod("rollout-b", labels={demo.UID_LABEL: "x"})]),),
        }
        for case, (seen,) in cases.items():
            with self.subTest(case):
                self.assertIsNone(demo.final_pods_from_watch(seen, JOB_UID))

    def test_a_deletion_or_a_failed_job_falls_back(self) -> None:
        seen = observation([watched_pod("rollout-a")])
        seen.pod_deleted = True
        self.assertIsNone(demo.final_pods_from_watch(seen, JOB_UID))
        failed = observation([watched_pod("rollout-a")])
        failed.condition = "Failed"
        self.assertIsNone(demo.final_pods_from_watch(failed, JOB_UID))


class ConcurrentlyTest(unittest.TestCase):
    def test_results_in_order_and_the_first_failure_raised(self) -> None:
        self.assertEqual(demo.concurrently([lambda: 1, lambda: 2, lambda: 3]), [1, 2, 3])

        def fail(message: str) -> Any:
            raise demo.DemoError(message, demo.EXIT_CLUSTER)

        with self.assertRaisesRegex(demo.DemoError, "first"):
            demo.concurrently([lambda: 1, lambda: fail("first"), lambda: fail("second")])


# A watch's kubectl that takes a while to end after SIGTERM (as one flushing its last events does).
SLOW_TO_END = """
import signal, sys, time
def stop(*_):
    time.sleep(0.4)
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
print('{"type": "ADDED", "object": {}}', flush=True)
time.sleep(60)
"""


class WatchEndTest(unittest.TestCase):
    """WatchStream.end: the next call need not wait for a watch to end (time to result), and
    kubectl-calls.json still gets the watch's whole record (Kubectl.wait_for_ended_watches)."""

    def test_end_returns_at_once_and_the_record_completes_once_waited_for(self) -> None:
        kubectl = demo.Kubectl(sys.executable, context=None, kubeconfig=None)
        argv = [sys.executable, "-SE", "-c", SLOW_TO_END]
        record = kubectl._record(argv, time.monotonic(), watch=True)
        sink: queue.Queue[Any] = queue.Queue()
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        watch = demo.WatchStream("job", process, sink, record, closing=kubectl.closing)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        self.assertEqual(sink.get(timeout=30)[3], {"type": "ADDED", "object": {}})  # running, its handler set
        asked = time.monotonic()
        watch.end()
        self.assertLess(time.monotonic() - asked, 0.3)  # not the 0.4 s the process takes to end
        self.assertNotIn("exit", record)
        kubectl.wait_for_ended_watches()
        self.assertGreaterEqual(time.monotonic() - asked, 0.4)
        self.assertEqual(record["exit"], 3)
        self.assertLess(record["seconds"], time.monotonic() - watch.started)  # until asked to end, not until it did


if __name__ == "__main__":
    unittest.main()
