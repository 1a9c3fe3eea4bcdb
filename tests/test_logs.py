"""Reading the episodes' output at scale and safely (issues 19 and 20), in-process against call
plans: which kubectl calls read the logs and how many run at once, termination messages the
kubelet cut at the front, logs it rotated, the diagnostics saved before the logs, every pod's log
kept when a round fails; and the idle timeout of a log read, against a scripted kubectl."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import tempfile
import time
import unittest
import unittest.mock
from pathlib import Path
from typing import Any, Dict, List

import rl_batch_demo as demo
from tests.callplan import CallPlanTestCase, RunPlan, watch_event
from tests.clusterobjects import Batch, log_of
from tests.fakecluster import FakeCluster, write_executable
from tests.tiers import end_to_end
from tests.toolprocess import tool_command, tool_environment

SCRIPT = str(Path(demo.__file__).resolve())


def most_at_once(calls: List[Dict[str, Any]]) -> int:
    """The largest number of these recorded calls that ran at the same moment."""
    ends = [(call["started"] + call["seconds"] - 0.002, -1) for call in calls]  # both rounded to 1 ms
    edges = sorted([(call["started"], 1) for call in calls] + ends)
    running = peak = 0
    for _, change in edges:
        running += change
        peak = max(peak, running)
    return peak


def cut_at_front(events: List[Dict[str, Any]], pad: int) -> str:
    """The termination message the kubelet keeps of these events with `pad` bytes of padding in
    the first: its last 4,096 bytes, which begin inside that first line."""
    padded = [dict(events[0], pad="p" * pad), *events[1:]]
    return log_of(padded).encode()[-demo.TERMINATION_MESSAGE_LIMIT :].decode()


class LogsAtScaleTest(CallPlanTestCase):
    def log_calls(self) -> List[Dict[str, Any]]:
        return [call for call in self.recorded_calls() if "logs" in call["argv"]]

    def test_ten_episodes_without_termination_messages_stay_within_the_process_budget(self) -> None:
        batch = Batch(count=10)
        for episode in batch.episodes:
            episode.message = ""  # a runtime that never shares the file: every reward from the logs
        self.expect(*RunPlan(batch).run())
        self.run_ok("run", "--count", "10", "--output", str(self.out()))
        self.assertEqual(len(self.recorded_calls()), 10)  # the budget of a 10-episode run is 10
        [selector_read] = self.log_calls()
        self.assertIn("-l", selector_read["argv"])
        self.assertEqual(self.results()["pods_without_termination_message"], 10)

    def test_beyond_ten_pods_the_default_job_is_read_by_sets_of_ten_indexes(self) -> None:
        """Every measured Job is Indexed, so a default run's 25 pods (each listing artifacts, as
        the built-in worker's do) are read by 3 selectors of completion indexes: 3 processes, not
        25 (main before this: `logs POD` each, a process per episode)."""
        batch = Batch(count=25, parallelism=25)
        for episode in batch.episodes:
            episode.message = ""
        self.expect(*RunPlan(batch).run())
        self.run_ok("run", "--count", "25", "--parallelism", "25", "--allow-large", "--output", str(self.out()))
        self.assertEqual(self.read_json("job-submitted.json")["spec"]["completionMode"], "Indexed")
        selectors = sorted(call["argv"][call["argv"].index("-l") + 1] for call in self.log_calls())
        index = demo.INDEX_LABEL
        self.assertEqual(
            selectors,
            sorted(
                f"{batch.selector},{index} in ({','.join(map(str, range(start, min(start + 10, 25))))})"
                for start in (0, 10, 20)
            ),
        )
        self.assertEqual(self.results()["reward_sum"], 25)

    def test_beyond_ten_pods_without_the_index_label_each_pod_is_read_alone_eight_at_once(self) -> None:
        """Before Kubernetes 1.28 an Indexed Job's pods carry their index as an annotation only,
        no label a selector could choose: kubectl reads a selector's logs one after another at 5 a
        second past a burst of 10, so 25 pods are read by their own `logs POD` each, in a bounded
        pool, at the cost of a few processes' time."""
        batch = Batch(count=25, parallelism=25)
        for episode in batch.episodes:
            episode.message = ""
            episode.unlabelled = True
        self.expect(*RunPlan(batch).run())
        result = self.run_ok(
            "run", "--count", "25", "--parallelism", "25", "--allow-large", "--output", str(self.out())
        )
        calls = self.log_calls()
        self.assertEqual(sorted(call["argv"][-3] for call in calls), sorted(e.name for e in batch.episodes))
        self.assertFalse([call for call in calls if "-l" in call["argv"]])
        self.assertLessEqual(most_at_once(calls), demo.LOG_READ_PROCESSES)
        self.assertGreater(most_at_once(calls), 1, "the reads run at once")
        self.assertEqual(self.results()["reward_sum"], 25)
        self.assertIn("episode output: 25 pod(s) succeeded without a termination message", result.stdout)

    def lagging_pod_watch(self, count: int, started: int) -> List[Dict[str, Any]]:
        """A run of `count` episodes whose pod watch had shown only the first `started` pods
        running when the Job's Complete came (separate streams: CI saw one of ten): the rest's
        logs are read after the decision. Returns the log reads, followed or not."""
        batch = Batch(count=count, parallelism=count)
        for episode in batch.episodes:
            episode.message = ""  # beyond 20 episodes, only the logs carry these rewards: all read
        plan = RunPlan(batch)
        chunks = [watch_event("ADDED", batch.pod(episode, "pending")) for episode in batch.episodes]
        chunks += [watch_event("MODIFIED", batch.pod(episode, "running")) for episode in batch.episodes[:started]]
        calls = [*plan.preflight(), plan.create_namespace_and_configmap(), plan.create_job()]
        calls += [plan.job_watch(), plan.pod_watch(chunks=chunks), plan.pods_and_events()]
        watched = [json.loads(chunk.data)["object"] for chunk in chunks]
        calls += [*plan.follows(batch, watched), *plan.log_reads(batch, watched), plan.serviceaccount_watch()]
        self.set_timing(final_pods_grace_seconds=0.05)  # the watch never shows the pods final
        self.expect(*calls)
        large = ["--allow-large"] if count > demo.MAX_COUNT else []
        self.run_ok("run", "--count", str(count), "--parallelism", str(count), *large, "--output", str(self.out()))
        for episode in batch.episodes:
            self.assertEqual((self.out() / f"{episode.name}.log").read_text(), episode.log)
        self.assertEqual(self.results()["reward_sum"], count)
        return [call["argv"] for call in self.log_calls()]

    def selectors(self, reads: List[List[str]]) -> List[str]:
        return sorted(argv[argv.index("-l") + 1].rpartition(" in ")[2] for argv in reads if "-l" in argv)

    def test_ten_pods_the_pod_watch_showed_late_cost_no_process_more(self) -> None:
        """One of ten seen started at the decision: before, a `logs -f` of it then, and a
        `logs POD` for each of the nine others (19 processes in CI); now one `logs -l` of all."""
        reads = self.lagging_pod_watch(10, 1)
        self.assertEqual(len(reads), 1, reads)
        self.assertNotIn("-f", reads[0])
        self.assertLessEqual(len(self.recorded_calls()), 10)

    def test_the_pods_no_followed_read_brought_are_read_by_their_indexes(self) -> None:
        """Ten of twelve followed as they ran; the two the watch never showed started are read
        with one `logs -l` of exactly their indexes, not a `logs POD` each."""
        reads = self.lagging_pod_watch(12, 10)
        self.assertEqual(self.selectors(reads), ["(0,1,2,3,4,5,6,7,8,9)", "(10,11)"])
        self.assertEqual([argv for argv in reads if "-l" not in argv], [])

    def test_beyond_ten_unfollowed_pods_are_read_by_sets_of_ten_indexes(self) -> None:
        reads = self.lagging_pod_watch(25, 10)
        self.assertEqual(
            self.selectors(reads),
            ["(0,1,2,3,4,5,6,7,8,9)", "(10,11,12,13,14,15,16,17,18,19)", "(20,21,22,23,24)"],
        )
        self.assertEqual([argv for argv in reads if "-l" not in argv], [])

    def test_a_message_cut_at_the_front_is_read_with_its_log(self) -> None:
        """Beyond 20 episodes the messages alone carry the rewards; one the kubelet cut at the
        front (it keeps the last 4,096 bytes) lost its ready line: that pod's log is read, and
        the message's complete lines must end it."""
        batch = Batch(count=25, parallelism=25)
        cut = batch.episodes[4]
        cut.message = cut_at_front(cut.events, 5000)
        self.assertTrue(demo.message_cut_at_front(cut.message))
        self.assertNotIn('"ready"', cut.message.partition("\n")[2])
        self.expect(*RunPlan(batch).run())
        self.run_ok("run", "--count", "25", "--parallelism", "25", "--allow-large", "--output", str(self.out()))
        # its log followed with the others' while the pods ran: none is read after the decision
        self.assertEqual([call["argv"] for call in self.log_calls() if "-f" not in call["argv"]], [])
        results = self.results()
        notes = {row["pod"]: row["log_notes"] for row in results["pods"]}
        self.assertIn("cut at the front", notes[cut.name][0])
        self.assertEqual([pod for pod, noted in notes.items() if noted], [cut.name])

    def test_a_failed_round_saves_every_pods_log(self) -> None:
        """Beyond 20 episodes no log is read while the messages carry the rewards; when one
        episode fails, every pod's log is saved beside the error, as the guide keeps them."""
        batch = Batch(count=25, parallelism=25)
        bad = batch.episodes[6]
        bad.log = bad.message = log_of([bad.events[0], *bad.events])  # a duplicate ready
        plan = RunPlan(batch)
        self.expect(*plan.run())  # every pod's log followed while it ran, by sets of 10 completion indexes
        result = self.tool("run", "--count", "25", "--parallelism", "25", "--allow-large", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_EPISODE, bad.name, "found 2 ready")
        for episode in batch.episodes:
            self.assertEqual((self.out() / f"{episode.name}.log").read_text(), episode.log)

    def test_the_diagnostics_come_before_the_logs_and_a_full_disk_names_its_file(self) -> None:
        batch = Batch(count=2)
        self.expect(*RunPlan(batch).run())
        saved: List[str] = []
        original = demo.write_atomic

        def recording(path: Path, text: str) -> None:
            saved.append(path.name)
            original(path, text)

        def full(log_file: Any, data: bytes) -> None:  # write() on a full disk: an error without a file name
            saved.append(log_file.path.name)
            raise OSError(errno.ENOSPC, "No space left on device")

        with (
            unittest.mock.patch.object(demo, "write_atomic", recording),
            unittest.mock.patch.object(demo._PodLogFile, "_append", full),
        ):
            result = self.tool("run", "--count", "2", "--output", str(self.out()), "--cleanup", "never")
        error = self.assert_fails(result, demo.EXIT_USAGE, "No space left on device")
        self.assertRegex(error, rf"No space left on device: {self.out()}/rollout-p000[01]\.log\)")
        # the logs are followed while the pods run, so they fill the disk first; the run stops on
        # it only once pods.json and events.txt are written
        self.assertIn("pods.json", saved)
        self.assertIn("events.txt", saved)
        self.assertTrue((self.out() / "pods.json").exists() and (self.out() / "events.txt").exists())


class IgnoredErrorsTest(unittest.TestCase):
    """`logs -l --ignore-errors` (a selector that matches lost pods too): kubectl's unprefixed
    error lines, judged by EpisodeLogReader."""

    def read(self, output: bytes, wanted: List[str], ignored: List[str]) -> demo.EpisodeLogReader:
        with tempfile.TemporaryDirectory() as scratch:
            reader = demo.EpisodeLogReader(Path(scratch), wanted, ignored=ignored)
            reader.feed(output)
            reader.finish()
        return reader

    def test_a_lost_pods_error_puts_no_pod_in_doubt(self) -> None:
        output = (
            b"[pod/a/episode] line of a\n"
            b'error: container "episode" in pod "lost-1" is not available\n'
            b"[pod/lost-2/episode] its cut fr"  # a lost pod killed mid-line: b's first line is glued on
            b"[pod/b/episode] line of b\n"
            b"[pod/c/episode] line of c\n"
        )
        reader = self.read(output, ["a", "b", "c"], ["lost-1", "lost-2"])
        self.assertEqual(reader.doubtful & {"a", "b", "c"}, {"b"})  # b alone is read again, by itself
        self.assertEqual(sorted(reader.files), ["a", "c"])  # nothing of the lost pods is kept

    def test_an_error_naming_no_pod_puts_the_pod_before_it_in_doubt(self) -> None:
        """A transfer cut mid-stream (no pod in its message) follows the pod it cut short."""
        output = b"[pod/a/episode] line of a\n[pod/b/episode] half of b\nerror: unexpected EOF\n[pod/c/episode] c\n"
        self.assertEqual(self.read(output, ["a", "b", "c"], ["lost"]).doubtful, {"b"})

    def test_an_error_naming_a_wanted_pod_puts_it_in_doubt(self) -> None:
        output = b'[pod/a/episode] a\nerror: container "episode" in pod "b" is waiting to start: ContainerCreating\n'
        self.assertEqual(self.read(output, ["a", "b"], ["lost"]).doubtful, {"b"})

    def test_an_error_glued_onto_a_wanted_pods_last_line_puts_it_in_doubt(self) -> None:
        output = b'[pod/a/episode] last line without newlineerror: container "episode" in pod "lost" is not available\n'
        self.assertEqual(self.read(output, ["a"], ["lost"]).doubtful, {"a"})

    def test_without_lost_pods_an_error_like_line_is_only_dropped(self) -> None:
        output = b"[pod/a/episode] a said error: this\nerror: not kubectl's here\n"
        self.assertEqual(self.read(output, ["a"], []).doubtful, set())


@end_to_end
class IndexedLogsEndToEndTest(unittest.TestCase):
    """Through the fake (its `logs -l` paced as kubectl's): an Indexed Job's 12 pods without
    termination messages are read by two selectors of completion indexes, each of at most 10."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def test_sets_of_ten_completion_indexes(self) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            faults = {"stand_in_worker": True, "episode": {str(index): "no_message" for index in range(12)}}
            cluster = FakeCluster(root / "cluster", faults=faults)
            try:
                output = root / "out"
                argv = ["run", "--count", "12", "--max-failed-episodes", "1", "--output", str(output), "--quiet"]
                result = subprocess.run(
                    tool_command(*argv, "--cleanup", "always"),
                    env=tool_environment(cluster.env()),
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                self.assertEqual(result.returncode, 0, result.stderr)
                reads = [argv for argv in cluster.calls() if "logs" in argv]
            finally:
                cluster.close()
            # ceil(12 / 10) reads, each of at most 10 completion indexes, together every index
            # once; which indexes share a read depends on when each pod started and ended
            # (LogFollower.spare_read: a pod that ends early may start a read of fewer)
            prefix = f"{demo.INDEX_LABEL} in ("
            sets = []
            for argv in reads:
                chosen = argv[argv.index("-l") + 1].split(",", 1)[1]
                self.assertTrue(chosen.startswith(prefix) and chosen.endswith(")"), chosen)
                sets.append([int(each) for each in chosen[len(prefix) : -1].split(",")])
            self.assertEqual(len(sets), 2, reads)
            self.assertTrue(all(len(chosen) <= demo.LOG_SELECTOR_PODS for chosen in sets), sets)
            self.assertEqual(sorted(index for chosen in sets for index in chosen), list(range(12)))
            results = json.loads((output / "results.json").read_text())
            self.assertEqual((results["successful_episodes"], results["pods_without_termination_message"]), (12, 12))


# A kubectl that prints a line every 0.1 s for `seconds` (argv's last word), then exits; or, with
# "stall", prints one line and then nothing for 3 s.
SLOW_KUBECTL = """#!{python} -SE
import sys, time
if sys.argv[-1] == "stall":
    print("first", flush=True)
    time.sleep(3)
else:
    ends = time.monotonic() + float(sys.argv[-1])
    while time.monotonic() < ends:
        print("line", flush=True)
        time.sleep(0.1)
"""


class IdleTimeoutTest(unittest.TestCase):
    """A log read ends when kubectl has printed nothing for the timeout, not after it."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.kubectl_path = Path(scratch.name) / "kubectl"
        write_executable(self.kubectl_path, SLOW_KUBECTL.format(python=sys.executable))

    def stream(self, last: str, idle: bool) -> bytes:
        kubectl = demo.Kubectl(str(self.kubectl_path), context=None, kubeconfig=None)
        received = bytearray()
        kubectl.stream(["logs", last], received.extend, timeout=0.6, request_timeout=None, idle=idle)
        self.assertNotIn("--request-timeout", " ".join(kubectl.calls[-1]["argv"]))
        return bytes(received)

    def test_a_read_that_keeps_printing_may_take_longer_than_the_timeout(self) -> None:
        started = time.monotonic()
        self.assertGreater(self.stream("1.5", idle=True).count(b"line"), 5)
        self.assertGreater(time.monotonic() - started, 1.2)

    def test_a_read_that_stops_printing_ends_after_the_timeout(self) -> None:
        with self.assertRaisesRegex(demo.KubectlTimeout, "did not answer within 0.6 s"):
            self.stream("stall", idle=True)

    def test_without_idle_the_timeout_is_the_whole_calls(self) -> None:
        with self.assertRaises(demo.KubectlTimeout):
            self.stream("1.5", idle=False)


if __name__ == "__main__":
    unittest.main()
