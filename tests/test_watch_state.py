"""When the pod watch already holds every pod's final state, and when it does not (issue: time to result)."""

from __future__ import annotations

import copy
import queue
import subprocess
import sys
import threading
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

    def test_a_call_started_early_answers_or_raises_in_the_callers_thread(self) -> None:
        started = threading.Event()
        proceed = threading.Event()

        def listing() -> Any:
            started.set()
            proceed.wait(30)
            return threading.get_ident()

        call = demo.InBackground(listing)
        self.assertTrue(started.wait(30))  # running before anyone asked for its answer
        proceed.set()
        self.assertNotEqual(call.result(), threading.get_ident())  # it ran in a thread of its own

        def refused() -> Any:
            raise demo.DemoError("refused", demo.EXIT_CLUSTER)

        with self.assertRaisesRegex(demo.DemoError, "refused"):
            demo.InBackground(refused).result()


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
        # a grace before SIGKILL far beyond the 0.4 s: on CI's loaded machine 5 s was not enough
        watch = demo.WatchStream("job", process, sink, record, closing=kubectl.closing, end_seconds=60)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        self.assertEqual(sink.get(timeout=30)[3], {"type": "ADDED", "object": {}})  # running, its handler set
        asked = time.monotonic()
        watch.end()
        self.assertLess(time.monotonic() - asked, 0.3)  # not the 0.4 s the process takes to end
        self.assertNotIn("exit", record)
        kubectl.wait_for_ended_watches(seconds=120)
        self.assertGreaterEqual(time.monotonic() - asked, 0.4)
        self.assertEqual(record["exit"], 3)
        self.assertLess(record["seconds"], time.monotonic() - watch.started)  # until asked to end, not until it did


if __name__ == "__main__":
    unittest.main()


def job_event(kind: str, **status: Any) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": "rollout", "uid": JOB_UID}, "status": status}}


def pod_event(kind: str, name: str, **changes: Any) -> dict[str, Any]:
    return {"type": kind, "object": watched_pod(name, **changes)}


FAILED = {"conditions": [{"type": "FailureTarget", "status": "True"}], "failed": 1}
COMPLETE = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}


class JobWatchTakeTest(unittest.TestCase):
    """JobWatch.take, one event at a time, without threads: a table of event sequences and what
    the watch then holds."""

    def watch(self, **options: Any) -> demo.JobWatch:
        job = {"metadata": {"name": "rollout", "uid": JOB_UID, "namespace": "ns"}, "spec": {}, "status": {}}
        return demo.JobWatch(job, deadline=100.0, **options)

    def test_the_table(self) -> None:
        rows = [
            # (events as (tag, event), decided, condition, job stream open, pod stream open, pods kept, deleted)
            ([], False, None, True, True, [], False),
            ([("job", job_event("MODIFIED", **COMPLETE))], False, "Complete", True, True, [], False),
            ([("job", job_event("ADDED", **FAILED))], False, "Failed", True, True, [], False),
            ([("job", None)], False, None, False, True, [], False),
            ([("pods", None)], False, None, True, False, [], False),
            ([("pods", pod_event("ADDED", "p0")), ("pods", pod_event("MODIFIED", "p1"))], False, None, True, True,
             ["p0", "p1"], False),
            ([("pods", pod_event("ADDED", "p0")), ("pods", pod_event("DELETED", "p0"))], False, None, True, True,
             ["p0"], True),
            # after the decision, an ADDED (a relisting) does not replace the Job, a DELETED is no error
            ([("job", job_event("ADDED", **COMPLETE))], True, None, True, True, [], False),
            ([("job", job_event("DELETED"))], True, None, True, True, [], False),
        ]  # fmt: skip
        for events, decided, condition, job_open, pods_open, kept, deleted in rows:
            with self.subTest(events=events, decided=decided):
                seen: list[str] = []
                state = self.watch(on_pod=lambda pod, told=seen: told.append(pod["metadata"]["name"]))
                for tag, event in events:
                    state.take(tag, 1.0, 2.0, event, decided=decided)
                self.assertEqual(state.condition, condition)
                self.assertEqual((state.job_stream_open, state.pod_stream_open), (job_open, pods_open))
                self.assertEqual(sorted(state.last_pods), kept)
                self.assertEqual(state.deleted, deleted)
                told = [event["object"]["metadata"]["name"] for tag, event in events if tag == "pods" and event]
                removed = [e["object"]["metadata"]["name"] for tag, e in events if e and e["type"] == "DELETED"]
                self.assertEqual(seen, told[: len(told) - len(removed)])

    def test_the_jobs_deletion_before_the_decision_stops_the_wait(self) -> None:
        with self.assertRaisesRegex(demo.DemoError, "Job ns/rollout was deleted while the run waited"):
            self.watch().take("job", 1.0, 2.0, job_event("DELETED"))

    def test_an_error_event_is_kept_for_the_warning(self) -> None:
        state = self.watch()
        state.take("job", 1.0, 2.0, {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "old"}})
        self.assertEqual(state.watch_error, "ERROR 410: Expired: old")

    def test_a_queued_jobs_resumption_moves_the_deadline(self) -> None:
        job = {"metadata": {"name": "rollout", "uid": JOB_UID, "namespace": "ns"}, "spec": {"suspend": True}}
        state = demo.JobWatch(job, deadline=100.0, run_seconds=50.0)
        self.assertTrue(state.queued)
        state.take("job", 1.0, 80.0, {"type": "MODIFIED", "object": {**job, "spec": {"suspend": False}}})
        self.assertEqual((state.admitted_seen, state.deadline), (80.0, 130.0))

    def test_a_changed_pod_spec_is_refused(self) -> None:
        state = self.watch(pod_spec={"containers": [{"name": "episode", "image": "a"}]})
        pod = pod_event("ADDED", "p0")
        pod["object"]["spec"] = {"containers": [{"name": "episode", "image": "b"}]}
        with self.assertRaises(demo.JobRefused):
            state.take("pods", 1.0, 2.0, pod)

    def test_settled_after_a_failure_waits_for_every_counted_pod(self) -> None:
        state = self.watch()
        decided = [{"type": "FailureTarget", "status": "True"}, {"type": "Failed", "status": "True"}]
        state.take("job", 1.0, 2.0, job_event("MODIFIED", conditions=decided, failed=1, succeeded=1))
        running = pod_event("MODIFIED", "p0")
        running["object"]["status"] = {"phase": "Running"}
        state.take("pods", 1.0, 2.0, running)
        self.assertFalse(state.settled("Failed"))
        ended = pod_event("MODIFIED", "p0")
        state.take("pods", 1.0, 2.0, ended, decided=True)
        self.assertFalse(state.settled("Failed"))  # two counted, one seen
        state.take("pods", 1.0, 2.0, pod_event("MODIFIED", "p1"), decided=True)
        self.assertTrue(state.settled("Failed"))
