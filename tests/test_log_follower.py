"""LogFollower's sets of followed pods, driven through pod_seen without a cluster: when a set's
`kubectl logs -f` starts, and how many a round may have (docs/call-plan.md). The reads themselves
are answered at once by a stand-in for the kubectl seam, which only records their selectors."""

from __future__ import annotations

import tempfile
import threading
import unittest
from pathlib import Path
from typing import Any, Dict, List

import rl_batch_demo as demo

SELECTOR = "batch.kubernetes.io/controller-uid=u"


class RecordingKubectl:
    """Each stream call's selector's completion indexes, in the order the reads started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sets: List[List[int]] = []

    def stream(self, args: List[str], feed: Any, **options: Any) -> None:
        chosen = args[args.index("-l") + 1]
        inside = chosen[chosen.index(" in (") + len(" in (") : -1]
        with self.lock:
            self.sets.append([int(each) for each in inside.split(",")])


def pod(index: int, stage: str) -> Dict[str, Any]:
    """Pod `index` of the Job: "pending" (no container yet), "running", "ended" or "deleting"."""
    state: Dict[str, Any] = {"waiting": {}} if stage == "pending" else {"running": {}}
    if stage == "ended":
        state = {"terminated": {"exitCode": 0}}
    metadata: Dict[str, Any] = {"name": f"rollout-{index}", "labels": {demo.INDEX_LABEL: str(index)}}
    if stage == "deleting":
        metadata["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    phase = "Succeeded" if stage == "ended" else ("Pending" if stage == "pending" else "Running")
    return {
        "metadata": metadata,
        "status": {"phase": phase, "containerStatuses": [{"name": demo.CONTAINER_NAME, "state": state}]},
    }


class FollowedSetsTest(unittest.TestCase):
    def sets_after(self, count: int, events: List[Dict[str, Any]]) -> List[List[int]]:
        kubectl = RecordingKubectl()
        with tempfile.TemporaryDirectory() as scratch:
            follower = demo.LogFollower(
                kubectl,  # type: ignore[arg-type]
                "ns",
                SELECTOR,
                count,
                Path(scratch),
                demo.LogBudgets(artifacts=Path(scratch)),
                seconds=5.0,
            )
            for event in events:
                follower.pod_seen(event)
            for read in follower.reads:  # each stand-in read ends at once
                self.assertTrue(read.done.wait(5.0))
        return sorted(kubectl.sets, key=lambda chosen: chosen[0])

    def test_ten_pods_are_one_read_even_when_one_ends_before_the_others_start(self) -> None:
        events = [pod(0, "running"), pod(0, "ended")] + [pod(i, "running") for i in range(1, 10)]
        self.assertEqual(self.sets_after(10, events), [list(range(10))])

    def test_a_pod_that_ends_early_starts_its_set_when_the_budget_has_room(self) -> None:
        # 12 pods: 2 reads; two started, one ends: (0, 1) now still leaves one read for the other 10
        events = [pod(0, "running"), pod(1, "running"), pod(1, "ended")] + [pod(i, "running") for i in range(2, 12)]
        self.assertEqual(self.sets_after(12, events), [[0, 1], list(range(2, 12))])

    def test_without_room_the_early_end_waits_for_a_full_set(self) -> None:
        # 12 pods, one read spent early on (0, 1): a second early end waits for the rest to start
        events = [pod(0, "running"), pod(1, "running"), pod(1, "ended"), pod(2, "running"), pod(2, "ended")]
        events += [pod(i, "running") for i in range(3, 12)]
        self.assertEqual(self.sets_after(12, events), [[0, 1], list(range(2, 12))])

    def test_a_pod_being_deleted_is_followed_at_once_whatever_the_budget(self) -> None:
        events = [pod(0, "running"), pod(1, "running"), pod(1, "deleting"), pod(2, "running")]
        events += [pod(i, "running") for i in range(3, 10)]
        self.assertEqual(self.sets_after(10, events), [[0, 1], list(range(2, 10))])

    def test_a_set_starts_at_ten_pods_and_a_pod_not_started_waits(self) -> None:
        events = [pod(i, "running") for i in range(10)] + [pod(10, "pending")]
        self.assertEqual(self.sets_after(20, events), [list(range(10))])


if __name__ == "__main__":
    unittest.main()


class HeldOpenKubectl:
    """A `kubectl logs -f` that prints pod 0's end line, then stays open until it is terminated,
    as a followed read does while a pod of its set still runs."""

    def __init__(self) -> None:
        self.ended = threading.Event()

    def terminate(self) -> None:  # the process's, as LogFollower ends a read
        self.ended.set()

    def poll(self) -> None:
        return None

    def stream(self, args: List[str], feed: Any, on_start: Any = None, **options: Any) -> None:
        on_start(self)
        feed(b"[pod/rollout-0/episode] " + demo.LOG_END_LINE + b"\n")
        self.ended.wait(3600)


class EarlyFinishTest(unittest.TestCase):
    def test_a_stopped_round_does_not_wait_for_the_reads_of_pods_still_running(self) -> None:
        """--stop-after or a stream left early: pod 0 ended and its log is whole, pod 1 still
        runs, so its read would last until the Job's deletion. finish(early=True) ends the read
        as soon as every ended pod of it is whole, whatever the grace (here an hour), and keeps
        pod 0's log, not pod 1's."""
        kubectl = HeldOpenKubectl()
        with tempfile.TemporaryDirectory() as scratch:
            follower = demo.LogFollower(
                kubectl,  # type: ignore[arg-type]
                "ns",
                SELECTOR,
                2,
                Path(scratch),
                demo.LogBudgets(artifacts=Path(scratch)),
                seconds=3600.0,
            )
            for event in (pod(0, "running"), pod(1, "running"), pod(0, "ended")):
                follower.pod_seen(event)
            kept: Dict[str, Any] = {}
            finishing = threading.Thread(target=lambda: kept.update(follower.finish(3600.0, early=True)), daemon=True)
            finishing.start()
            finishing.join(60.0)  # a hang, not a speed: without `early` it waits out the hour
            self.assertFalse(finishing.is_alive(), "finish() waited for the read of a pod still running")
            self.assertTrue(kubectl.ended.is_set())
            self.assertEqual(sorted(kept), ["rollout-0"])
