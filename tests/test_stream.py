"""Rewards as they arrive (issue 21): DIR/rewards.jsonl is appended to as each episode's verdict is
known, retracted where a later check rejects an episode, and agrees with results.json at the end.

The pure rules (which lines make the file agree with an analysed round, which retract it) as
tables; RoundRewards and the writer in-process; whole runs against call plans, reading the file
while the run still waits (the stub's `snapshot` hook between two pods' ends); and, through the
fake cluster, ten episodes of different lengths, a retraction and the process budget."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tempfile
import threading
import time
import unittest
import unittest.mock
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import rl_batch_demo as demo
from tests import records
from tests.callplan import CallPlanTestCase, RunPlan, watch_event
from tests.clusterobjects import JOB_CREATED_AT, TESTS_OUTPUT, Batch, log_of, make_events
from tests.fakecluster import FakeCluster
from tests.test_run import run_script
from tests.tiers import end_to_end


def lines_of(data: Optional[bytes]) -> List[Dict[str, Any]]:
    """The complete lines of rewards.jsonl as a reader takes them (a piece without newline is not one)."""
    if data is None:
        return []
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].decode().splitlines()]


def last_lines(lines: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Each pod's last line: the reader's rule, the last line of a pod is its verdict."""
    return {line["pod"]: line for line in lines}


def stands(line: Dict[str, Any]) -> bool:
    return line["failure"] is None and not line["retracted"]


def check_agrees_with_results(case: unittest.TestCase, lines: List[Dict[str, Any]], results: Dict[str, Any]) -> None:
    """The final file's promise: exactly one standing reward line per validated episode (its last
    line, with its reward), every failed episode's last line a failure, nothing else standing, and
    a retraction only ever after a reward line of its pod."""
    last = last_lines(lines)
    validated = {row["pod"]: row for row in results["pods"]}
    for pod, row in validated.items():
        standing = [line for line in lines if line["pod"] == pod and stands(line)]
        case.assertEqual(len(standing), 1, f"{pod}: {standing}")
        case.assertIs(last[pod], standing[0], pod)
        case.assertEqual((standing[0]["reward"], standing[0]["index"]), (row["reward"], row["index"]))
    for entry in results["failed_episodes"]:
        case.assertIsNotNone(last[entry["pod"]]["failure"], entry["pod"])
    case.assertEqual({pod for pod, line in last.items() if stands(line)}, set(validated))
    for position, line in enumerate(lines):
        if line["retracted"]:
            earlier = [other for other in lines[:position] if other["pod"] == line["pod"]]
            case.assertTrue(earlier and stands(earlier[-1]), f"a retraction without a reward before it: {line}")


# The pure rules #################################################################


def row(pod: str, index: int, reward: float = 1.0) -> Any:
    """An analysed episode's row with the keys its line takes (the rest plain values)."""
    fields = {"pod": pod, "index": index, "round": 1, "task_id": index, "reward": reward, "info": {"n": index}}
    return records.complete(fields, demo.EpisodeRow)


def failed(pod: str, index: int, cause: str) -> demo.FailedEpisode:
    return {
        "pod": pod,
        "index": index,
        "task_id": index,
        "round": 1,
        "job": "rollout",
        "cause": cause,
        "attempts": 1,
        "lost_attempts": [],
    }


class RulesTest(unittest.TestCase):
    def test_with_nothing_written_the_round_is_its_whole_file_in_index_order(self) -> None:
        lines = demo.reconciling_lines({}, [row("b", 1), row("a", 0)], [failed("c", 2, "evicted")], 5.0)
        self.assertEqual([(line["pod"], line["failure"], line["retracted"]) for line in lines],
                         [("a", None, False), ("b", None, False), ("c", "evicted", False)])  # fmt: skip
        self.assertEqual(lines[0]["info"], {"n": 0})
        self.assertEqual((lines[2]["reward"], lines[2]["info"]), (None, None))
        self.assertEqual({line["known_at"] for line in lines}, {5.0})

    def test_what_was_written_is_not_written_again_and_what_the_analysis_rejects_is_retracted(self) -> None:
        written = {
            "a": demo.reward_line(row("a", 0), 1.0),  # validated: stays
            "b": demo.reward_line(row("b", 1), 1.5),  # its log disagreed: retracted
            "c": demo.failure_line(1, 2, 2, "c", "the pod ended in phase Failed", 2.0),  # stays failed
            "d": demo.reward_line(row("d", 3), 2.5),  # not among the Job's pods: retracted
        }
        lines = demo.reconciling_lines(
            written, [row("a", 0), row("e", 4)], [failed("b", 1, "different events"), failed("c", 2, "Failed")], 9.0
        )
        self.assertEqual([(line["pod"], line["retracted"]) for line in lines],
                         [("b", True), ("d", True), ("e", False)])  # fmt: skip
        self.assertEqual(lines[0]["failure"], "different events")
        self.assertIn("not one of the Job's pods", lines[1]["failure"])
        self.assertEqual((lines[0]["reward"], lines[0]["info"], lines[0]["index"]), (None, None, 1))

    def test_no_reward_line_follows_a_failure_line(self) -> None:
        """Issue 29: a failure found when the pod ended is final, whatever a later analysis says."""
        written = {"c": demo.failure_line(1, 2, 2, "c", "its reward True is not a finite number", 2.0)}
        self.assertEqual(demo.reconciling_lines(written, [row("c", 2)], [], 9.0), [])

    def test_a_failed_round_retracts_every_reward_line_in_the_order_written(self) -> None:
        written = {
            "b": demo.reward_line(row("b", 1), 1.0),
            "c": demo.failure_line(1, 2, 2, "c", "evicted", 1.5),
            "a": demo.reward_line(row("a", 0), 2.0),
        }
        lines = demo.retracting_lines(written, "its round failed: x", 3.0)
        self.assertEqual([(line["pod"], line["failure"], line["retracted"]) for line in lines],
                         [("b", "its round failed: x", True), ("a", "its round failed: x", True)])  # fmt: skip
        self.assertEqual(demo.retracting_lines({"a": lines[1]}, "again", 4.0), [])  # retracted once

    def test_a_terminated_pod_is_judged_from_its_status_and_message(self) -> None:
        batch = Batch(count=2)
        episode = batch.episodes[0]
        judge = lambda pod: demo.provisional_episode(pod, 2, False, JOB_CREATED_AT, True, "here")  # noqa: E731
        self.assertIsNone(judge(batch.pod(episode, "running")))
        judged = judge(batch.pod(episode))
        assert judged is not None
        self.assertEqual((judged["pod"], judged["reward"]), (episode.name, 1))
        episode.message = ""
        self.assertIsNone(judge(batch.pod(episode)), "without a message the log decides, once read")
        episode.phase, episode.exit_code = "Failed", 1
        with self.assertRaisesRegex(demo.EpisodeInvalid, "phase Failed"):
            judge(batch.pod(episode))
        episode.phase, episode.exit_code = "Succeeded", 0
        episode.message = log_of(make_events(episode.name, episode.ready_at, episode.reward_at, reward=0))
        with self.assertRaisesRegex(demo.EpisodeInvalid, "reward 0 with tests exit 0"):
            judge(batch.pod(episode))


# RoundRewards and the writer ####################################################


class RoundRewardsTest(unittest.TestCase):
    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-stream-")
        self.addCleanup(scratch.cleanup)
        self.output = Path(scratch.name)
        self.told: List[demo.RewardLine] = []
        self.writer = demo.RewardsWriter(self.output / demo.REWARDS_FILE, self.told.append)
        self.writer.open()
        self.addCleanup(self.writer.close)

    def settings(self, count: int, **extra: Any) -> demo.RunSettings:
        args = demo.build_parser().parse_args(["run", "--output", str(self.output), "--count", str(count)])
        return dataclasses.replace(demo.run_settings(args), **extra)

    def rewards(self, batch: Batch, **extra: Any) -> demo.RoundRewards:
        rewards = demo.RoundRewards(self.writer, self.settings(batch.count, **extra), 1, self.output)
        rewards.job_created(batch.job(), time.monotonic())
        return rewards

    def on_disk(self) -> List[Dict[str, Any]]:
        return lines_of((self.output / demo.REWARDS_FILE).read_bytes())

    def test_an_indexed_jobs_pod_is_numbered_by_its_completion_index_as_it_ends(self) -> None:
        """Every measured Job is Indexed: without --tasks too, a pod's line comes as it ends,
        numbered by its completion index, though the other pod does not exist yet."""
        batch = Batch(count=2, parallelism=1)
        rewards = self.rewards(batch)
        first = batch.episodes[0]
        rewards.pod_seen(batch.pod(first, "pending"))
        rewards.pod_seen(batch.pod(first))
        self.assertEqual([(line["pod"], line["index"]) for line in self.on_disk()], [(first.name, 0)])

    def test_a_pods_place_in_creation_order_waits_for_every_pod(self) -> None:
        """Not Indexed (a cluster that dropped completionMode), parallelism 1: the first pod ends
        before the second exists, so its index (its place in creation order) is not settled, and
        its line waits for the second pod."""
        batch = Batch(count=2, parallelism=1)
        rewards = demo.RoundRewards(self.writer, self.settings(batch.count), 1, self.output)
        job = batch.job()
        job["spec"].pop("completionMode", None)
        rewards.job_created(job, time.monotonic())
        first, second = batch.episodes
        rewards.pod_seen(batch.pod(first, "pending"))
        rewards.pod_seen(batch.pod(first))
        self.assertEqual(self.on_disk(), [])
        rewards.pod_seen(batch.pod(second, "pending"))
        self.assertEqual([(line["pod"], line["index"]) for line in self.on_disk()], [(first.name, 0)])
        rewards.pod_seen(batch.pod(second))
        rewards.pod_seen(batch.pod(second))  # a pod's later events write nothing more
        self.assertEqual([(line["pod"], line["index"]) for line in self.on_disk()], [(first.name, 0), (second.name, 1)])
        self.assertEqual(self.told, self.on_disk())

    def test_an_indexed_job_writes_each_line_when_its_pod_ends_with_its_task(self) -> None:
        batch = Batch(count=2, parallelism=1)
        pods = [batch.pod(episode) for episode in batch.episodes]
        for index, pod in enumerate(pods):
            pod["metadata"]["annotations"] = {demo.INDEX_ANNOTATION: str(1 - index)}
        tasks = ({"id": "zero"}, {"id": "one"})
        rewards = self.rewards(batch, tasks=tasks)
        rewards.pod_seen(pods[0])  # the second pod does not exist yet: an Indexed Job needs no wait
        self.assertEqual([(line["index"], line["task_id"]) for line in self.on_disk()], [(1, "one")])

    def test_stop_after_writes_exactly_k_standing_lines(self) -> None:
        """--stop-after 2 and four pods that end before the stop takes effect (their lines known at
        once, as when a followed read brings several pods' artifacts together): the first two
        known stand, the other two get no line and are the round's `beyond`, stopped with the rest;
        a later event of a kept pod writes nothing more."""
        batch = Batch(count=4)
        rewards = self.rewards(batch, stop_after=2)
        order = [batch.episodes[index] for index in (2, 0, 3, 1)]
        for episode in order:
            rewards.pod_seen(batch.pod(episode))
        rewards.pod_seen(batch.pod(order[0]))
        self.assertEqual([line["pod"] for line in self.on_disk()], [order[0].name, order[1].name])
        self.assertEqual((rewards.standing(), rewards.beyond), (2, {order[2].name, order[3].name}))
        self.assertEqual(self.told, self.on_disk())

    def test_a_foreign_or_nameless_pod_is_ignored(self) -> None:
        batch = Batch(count=1)
        rewards = self.rewards(batch)
        foreign = batch.pod(batch.episodes[0])
        foreign["metadata"]["labels"].update({demo.UID_LABEL: "another-job", demo.LEGACY_UID_LABEL: "another-job"})
        rewards.pod_seen(foreign)
        rewards.pod_seen({"metadata": {}})
        rewards.pod_seen({"metadata": {"name": "x", "labels": None}})
        self.assertEqual(self.on_disk(), [])

    def test_an_interruption_retracts_what_was_written(self) -> None:
        batch = Batch(count=2)
        rewards = self.rewards(batch)
        for episode in batch.episodes:
            rewards.pod_seen(batch.pod(episode))
        rewards.failed(KeyboardInterrupt())
        lines = self.on_disk()
        self.assertEqual([(line["pod"], line["retracted"]) for line in lines[2:]],
                         [(batch.episodes[0].name, True), (batch.episodes[1].name, True)])  # fmt: skip
        self.assertEqual(lines[2]["failure"], "the run was interrupted before its round was validated")
        self.assertEqual(self.told, lines)

    def test_the_episode_a_failure_names_gets_its_own_rule(self) -> None:
        batch = Batch(count=2)
        rewards = self.rewards(batch)
        rewards.pod_seen(batch.pod(batch.episodes[0]))
        rewards.pod_seen(batch.pod(batch.episodes[1], "running"))
        failure = demo.EpisodeInvalid(batch.episodes[1].name, "its log could not be read (x)", "here")
        rewards.failed(failure)
        lines = self.on_disk()
        self.assertEqual([(line["pod"], line["failure"], line["retracted"]) for line in lines[1:]],
                         [(batch.episodes[1].name, "its log could not be read (x)", False),
                          (batch.episodes[0].name, f"its round failed: {failure}", True)])  # fmt: skip
        self.assertEqual(lines[1]["index"], 1)

    def test_the_callers_seam_is_told_after_the_line_is_on_disk(self) -> None:
        seen: List[bool] = []

        def on_reward(line: demo.RewardLine) -> None:
            seen.append(lines_of((self.output / "other.jsonl").read_bytes())[-1] == line)
            line["reward"] = 99  # the caller's copy: the run's own record stays

        writer = demo.RewardsWriter(self.output / "other.jsonl", on_reward)
        writer.open()
        self.addCleanup(writer.close)
        self.writer = writer
        batch = Batch(count=1)
        rewards = self.rewards(batch)
        rewards.pod_seen(batch.pod(batch.episodes[0]))
        self.assertEqual(seen, [True])
        self.assertEqual(rewards.last[batch.episodes[0].name]["reward"], 1)


class RewardsWriterTest(unittest.TestCase):
    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-stream-writer-")
        self.addCleanup(scratch.cleanup)
        self.path = Path(scratch.name) / demo.REWARDS_FILE

    def test_each_line_is_appended_whole_and_never_rewritten(self) -> None:
        writer = demo.RewardsWriter(self.path)
        writer.open()
        first = demo.failure_line(1, 0, 0, "a", "x", 1.0)
        writer.append([first])
        before = self.path.read_bytes()
        writer.append([demo.failure_line(1, 1, 1, "b", "y", 2.0), demo.failure_line(1, 2, 2, "c", "z", 3.0)])
        writer.close()
        self.assertTrue(self.path.read_bytes().startswith(before))
        self.assertEqual([line["pod"] for line in demo.read_reward_lines(self.path)], ["a", "b", "c"])
        with self.assertRaises(FileExistsError):  # a fresh output directory only
            demo.RewardsWriter(self.path).open()

    def test_a_failed_write_leaves_at_most_a_partial_last_line_which_readers_skip(self) -> None:
        writer = demo.RewardsWriter(self.path)
        writer.open()
        writer.append([demo.failure_line(1, 0, 0, "a", "x", 1.0)])
        real_write = os.write

        def short_then_full(descriptor: int, data: bytes) -> int:
            if len(data) > 20:
                return real_write(descriptor, data[:20])  # a short write, then the disk is full
            raise OSError(28, "No space left on device")

        with unittest.mock.patch.object(demo.os, "write", short_then_full), self.assertRaises(OSError) as caught:
            writer.append([demo.failure_line(1, 1, 1, "b", "y", 2.0)])
        self.assertEqual(
            (caught.exception.strerror, caught.exception.filename), ("No space left on device", str(self.path))
        )
        with self.assertRaisesRegex(OSError, "an earlier write failed"):  # nothing more is written
            writer.append([demo.failure_line(1, 2, 2, "c", "z", 3.0)])
        writer.close()
        self.assertFalse(self.path.read_bytes().endswith(b"\n"))
        self.assertEqual([line["pod"] for line in demo.read_reward_lines(self.path)], ["a"])

    def test_a_line_that_is_not_the_tools_is_bad_input(self) -> None:
        self.path.write_bytes(b'{"pod": "a"}\n')
        with self.assertRaisesRegex(demo.DemoError, "line 1 is not a rewards line of this tool"):
            demo.read_reward_lines(self.path)


# Whole runs against call plans ##################################################


def end_in_order(batch: Batch, order: Sequence[int]) -> None:
    """Give the episodes different lengths: the k-th of `order` works k seconds longer than the
    first, so its reward and its container's end come k seconds later (logs and messages agree)."""
    for k, index in enumerate(order):
        episode = batch.episodes[index]
        episode.reward_at += k
        episode.finished += k
        episode.log = episode.message = log_of(
            make_events(episode.name, episode.ready_at, episode.reward_at, tests_output=TESTS_OUTPUT)
        )


class StreamedRunTest(CallPlanTestCase):
    """The pod watch's events end pods in `order`; before each later pod's end, the stub waits
    until rewards.jsonl holds a line for each pod that ended before (at most 5 s), and copies it."""

    def plan(self, batch: Batch, order: Sequence[int], waits: Optional[Dict[int, int]] = None) -> RunPlan:
        """Every call of the run; `waits`: before the k-th pod's end, how many lines to wait for
        (default k, one per pod ended before)."""
        plan = RunPlan(batch)
        path = str(self.out() / demo.REWARDS_FILE)
        chunks = [watch_event("ADDED", batch.pod(episode, "pending")) for episode in batch.episodes]
        chunks += [watch_event("MODIFIED", batch.pod(episode, "running")) for episode in batch.episodes]
        for k, index in enumerate(order):
            lines = k if waits is None else waits.get(k, 0)
            snapshot = (path, lines, f"before-{k}") if k and lines else None
            chunks.append(watch_event("MODIFIED", batch.pod(batch.episodes[index]), snapshot=snapshot))
        calls = [*plan.preflight(), plan.create_namespace_and_configmap(), plan.create_job()]
        calls += [plan.job_watch(), plan.pod_watch(chunks=chunks)]
        calls.append(plan.events() if plan.watch_is_final(batch) else plan.pods_and_events())
        watched = [batch.pod(episode, "running") for episode in batch.episodes]
        watched += [batch.pod(batch.episodes[index]) for index in order]
        calls += [*plan.follows(batch, watched), *plan.log_reads(batch, watched), plan.serviceaccount_watch()]
        self.expect(*calls)
        return plan

    def snapshot(self, k: int) -> List[Dict[str, Any]]:
        data = self.stub.snapshot(f"before-{k}")
        self.assertIsNotNone(data, f"rewards.jsonl did not exist before pod {k} ended")
        return lines_of(data)

    def run_count(self, count: int) -> Any:
        return self.tool("run", "--count", str(count), "--output", str(self.out()), "--quiet")

    def test_each_line_is_written_as_its_pod_ends_while_the_run_waits(self) -> None:
        batch = Batch(count=10)
        order = [3, 8, 0, 5, 9, 1, 7, 2, 6, 4]  # the order the episodes end in
        end_in_order(batch, order)
        self.plan(batch, order)
        result = self.run_count(10)
        self.assertEqual(result.code, 0, result)
        names = [batch.episodes[index].name for index in order]
        first = self.snapshot(1)  # read before the second pod ended, long before the run's end
        self.assertEqual([line["pod"] for line in first], names[:1])
        self.assertEqual((first[0]["reward"], first[0]["failure"], first[0]["retracted"]), (1, None, False))
        for k in range(2, 10):
            self.assertEqual([line["pod"] for line in self.snapshot(k)], names[:k], k)
        results = self.results()
        lines = records.written(self, self.out() / demo.REWARDS_FILE, demo.RewardLine)
        self.assertEqual([line["pod"] for line in lines], names)  # completion order, not index order
        self.assertEqual([line["index"] for line in lines], order)  # the place in creation order
        self.assertEqual([line["task_id"] for line in lines], order)
        stamps = [line["known_at"] for line in lines]
        self.assertEqual(stamps, sorted(stamps))
        self.assertLess(results["client_submitted_at"], stamps[0])
        self.assertGreater(results["client_first_reward_seconds"], 0)
        self.assertLess(results["client_first_reward_seconds"], results["client_job_complete_seconds"])
        self.assertEqual(
            results["round_results"][0]["client_first_reward_seconds"], results["client_first_reward_seconds"]
        )
        last_reward = max(episode.reward_at for episode in batch.episodes)
        self.assertAlmostEqual(results["batch_to_all_rewards_seconds"], last_reward - batch.created)
        check_agrees_with_results(self, lines, results)
        self.assertEqual(len(self.stub.calls()), 10)  # no process more: the watch brought every reward
        self.assertLessEqual(len(self.stub.calls()), 10)  # the budget of a 10-episode run

    def test_a_pod_without_a_termination_message_gets_its_line_once_the_logs_are_read(self) -> None:
        batch = Batch(count=3)
        batch.episodes[1].message = ""  # the runtime left none (W15: Kata shared_fs=none, peer pods)
        self.plan(batch, [1, 0, 2], waits={2: 1})
        result = self.run_count(3)
        self.assertEqual(result.code, 0, result)
        names = [episode.name for episode in batch.episodes]
        self.assertEqual([line["pod"] for line in self.snapshot(2)], [names[0]])  # pod 1 ended first: no line
        lines = records.written(self, self.out() / demo.REWARDS_FILE, demo.RewardLine)
        self.assertEqual([line["pod"] for line in lines], [names[0], names[2], names[1]])
        results = self.results()
        self.assertGreaterEqual(lines[2]["known_at"], results["client_observed_complete_at"])
        check_agrees_with_results(self, lines, results)

    def test_a_reward_the_log_contradicts_is_retracted_and_so_is_the_failed_rounds(self) -> None:
        batch = Batch(count=3)
        episode = batch.episodes[1]
        episode.log = log_of(make_events(episode.name, episode.ready_at, episode.reward_at, baseline_exit=2))
        self.plan(batch, [0, 1, 2])
        result = self.run_count(3)
        self.assert_fails(result, demo.EXIT_EPISODE, "report different events")
        names = [each.name for each in batch.episodes]
        self.assertEqual([line["pod"] for line in self.snapshot(2)], names[:2])  # a reward, as far as known then
        lines = records.written(self, self.out() / demo.REWARDS_FILE, demo.RewardLine)
        self.assertEqual([(line["pod"], line["retracted"]) for line in lines],
                         [(names[0], False), (names[1], False), (names[2], False),
                          (names[1], True), (names[0], True), (names[2], True)])  # fmt: skip
        self.assertIn("its log and its termination message report different events", lines[3]["failure"])
        self.assertTrue(lines[4]["failure"].startswith(f"its round failed: episode {names[1]}: "))
        self.assertEqual([line for line in last_lines(lines).values() if stands(line)], [])
        self.assertFalse((self.out() / "results.json").exists())

    def test_a_failed_episode_is_written_when_its_pod_ends(self) -> None:
        batch = Batch(count=3)
        batch.episodes[1].phase, batch.episodes[1].exit_code = "Failed", 1
        self.plan(batch, [1, 0, 2])
        result = self.run_count(3)
        self.assert_fails(result, demo.EXIT_EPISODE, "phase Failed")
        names = [each.name for each in batch.episodes]
        [failure] = self.snapshot(1)
        self.assertEqual((failure["pod"], failure["reward"], failure["retracted"]), (names[1], None, False))
        self.assertIn("phase Failed (exit code 1", failure["failure"])
        lines = records.written(self, self.out() / demo.REWARDS_FILE, demo.RewardLine)
        self.assertEqual([(line["pod"], line["retracted"]) for line in lines],
                         [(names[1], False), (names[0], False), (names[2], False),
                          (names[0], True), (names[2], True)])  # fmt: skip

    def failure_before_the_last_pod(self, last_pod_seen_before: bool) -> None:
        """The two watches are separate streams: here the Job's Failed is sent before the last
        pod's end (once the first two lines are on disk; `last_pod_seen_before`: that pod was
        watched pending and running before, else not at all), and the run waits a moment for
        it, so its verdict is streamed, then retracted with the round, like the others'."""
        batch = Batch(count=3)
        batch.episodes[1].phase, batch.episodes[1].exit_code = "Failed", 1
        plan = RunPlan(batch)
        path = str(self.out() / demo.REWARDS_FILE)
        early, late = batch.episodes[:2], batch.episodes[2]
        after_failed = f"job-{batch.job_name}.done"
        seen = [*early, late] if last_pod_seen_before else early
        chunks = [watch_event("ADDED", batch.pod(episode, "pending")) for episode in seen]
        chunks += [watch_event("MODIFIED", batch.pod(episode, "running")) for episode in seen]
        chunks += [watch_event("MODIFIED", batch.pod(batch.episodes[index])) for index in (1, 0)]
        if not last_pod_seen_before:
            chunks.append(watch_event("ADDED", batch.pod(late, "pending"), wait_for=after_failed, delay=0.05))
        chunks.append(watch_event("MODIFIED", batch.pod(late), wait_for=after_failed))
        job_watch = plan.job_watch()
        added, failed = job_watch.chunks
        # the lines on disk before the Job's Failed: both ended pods' (every measured Job is
        # Indexed: an episode's number is its completion index, known as its pod ends)
        lines = 2
        job_watch = dataclasses.replace(
            job_watch, chunks=[added, dataclasses.replace(failed, wait_for=None, snapshot=(path, lines, "failed"))]
        )
        calls = [*plan.preflight(), plan.create_namespace_and_configmap(), plan.create_job()]
        calls += [job_watch, plan.pod_watch(chunks=chunks), plan.pods_and_events()]
        watched = [json.loads(chunk.data)["object"] for chunk in chunks]
        calls += [*plan.follows(batch, watched), *plan.log_reads(batch, watched)]
        self.expect(*calls, plan.serviceaccount_watch())
        result = self.run_count(3)
        self.assert_fails(result, demo.EXIT_EPISODE, "phase Failed")
        names = [each.name for each in batch.episodes]
        lines = records.written(self, self.out() / demo.REWARDS_FILE, demo.RewardLine)
        self.assertEqual([(line["pod"], line["retracted"]) for line in lines],
                         [(names[1], False), (names[0], False), (names[2], False),
                          (names[0], True), (names[2], True)])  # fmt: skip

    def test_a_pod_that_ends_after_the_jobs_failure_still_gets_its_line(self) -> None:
        self.failure_before_the_last_pod(last_pod_seen_before=True)

    def test_a_pod_first_watched_after_the_jobs_failure_still_gets_its_line(self) -> None:
        """The Job counted three pods; the watch had shown two: the run waits for the third."""
        self.failure_before_the_last_pod(last_pod_seen_before=False)

    def test_a_job_that_completes_before_the_stop_still_keeps_exactly_k(self) -> None:
        """--stop-after 2 of 4: the Job's Complete is read while the pod watch has shown one pod
        ended (separate streams: CI saw it), and the others' ends never come on it. The run lists
        the pods and keeps exactly two: the one with a line, then the earliest of the rest to end
        (by its container's finishedAt); the two others are stopped, with no line and in no
        figure. Before, every listed pod was validated: results.json held 4 of --stop-after 2."""
        self.set_timing(final_pods_grace_seconds=0.5)  # waited out: the watched pods never settle here
        batch = Batch(count=4)
        end_in_order(batch, [1, 3, 0, 2])
        plan = RunPlan(batch)
        path = str(self.out() / demo.REWARDS_FILE)
        chunks = [watch_event("ADDED", batch.pod(episode, "pending")) for episode in batch.episodes]
        chunks += [watch_event("MODIFIED", batch.pod(episode, "running")) for episode in batch.episodes]
        chunks.append(watch_event("MODIFIED", batch.pod(batch.episodes[1])))
        job_watch = plan.job_watch()
        added, complete = job_watch.chunks
        complete = dataclasses.replace(complete, wait_for=None, snapshot=(path, 1, "complete"))
        calls = [*plan.preflight(), plan.create_namespace_and_configmap(), plan.create_job()]
        calls += [dataclasses.replace(job_watch, chunks=[added, complete]), plan.pod_watch(chunks=chunks)]
        calls.append(plan.pods_and_events())
        watched = [json.loads(chunk.data)["object"] for chunk in chunks]
        calls += [*plan.follows(batch, watched), *plan.log_reads(batch, watched), plan.serviceaccount_watch()]
        self.expect(*calls)
        result = self.tool("run", "--count", "4", "--stop-after", "2", "--output", str(self.out()), "--quiet")
        self.assertEqual(result.code, 0, result)
        names = [episode.name for episode in batch.episodes]
        self.assertEqual([line["pod"] for line in lines_of(self.stub.snapshot("complete") or b"")], [names[1]])
        results = self.results()
        self.assertEqual((results["episodes"], results["successful_episodes"]), (2, 2), results)
        self.assertEqual(sorted(row["pod"] for row in results["pods"]), sorted([names[1], names[3]]))
        stopped = {entry["pod"]: entry["ended"] for entry in results["stopped_episodes"]}
        self.assertEqual(stopped, {names[0]: True, names[2]: True})
        lines = records.written(self, self.out() / demo.REWARDS_FILE, demo.RewardLine)
        self.assertEqual([line["pod"] for line in lines], [names[1], names[3]])
        check_agrees_with_results(self, lines, results)
        self.assertIn("--stop-after 2", results["stopped_by"])
        pods = json.loads((self.out() / "pods.json").read_text())["items"]
        self.assertEqual(sorted(pod["metadata"]["name"] for pod in pods), sorted(names))  # the stopped too

    def test_the_python_seam_is_told_of_every_line_once_it_is_on_disk(self) -> None:
        batch = Batch(count=3)
        self.plan(batch, [2, 0, 1])
        told: List[Any] = []
        path = self.out() / demo.REWARDS_FILE

        def on_reward(line: demo.RewardLine) -> None:
            told.append((line, lines_of(path.read_bytes())))

        args = demo.build_parser().parse_args(["run", "--count", "3", "--output", str(self.out()), "--quiet"])
        settings = dataclasses.replace(demo.run_settings(args), on_reward=on_reward)
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            self.assertEqual(demo.cmd_run(settings, demo.make_kubectl(args), "rl-batch-demo"), 0)
        lines = lines_of(path.read_bytes())
        self.assertEqual([line for line, _ in told], lines)
        for position, (line, on_disk) in enumerate(told):
            self.assertEqual(on_disk[position], line)  # already on disk when told


# Through the fake cluster #######################################################

# A worker of its own: each task sleeps its `sleep` seconds between `ready` and `reward`.
SLEEPING_WORKER = demo.WORKER_TEMPLATE.replace(
    '    a, op, b = task["question"].split()\n',
    '    time.sleep(task["sleep"])\n    a, op, b = task["question"].split()\n',
)
assert SLEEPING_WORKER != demo.WORKER_TEMPLATE, "the template's act() changed: patch it anew"
# Ten episodes of different lengths, the first to end by index 2; the others end at least 2 s
# after it, a quarter of a second apart, so the orderings below leave room for a loaded machine.
RANKS = [3, 8, 0, 5, 9, 1, 7, 2, 6, 4]
SLEEPS = [0.0 if rank == 0 else 2.0 + 0.25 * rank for rank in RANKS]


class WatchedKubectl:
    """A stand-in for the kubectl seam of wait_for_job: each watch puts its events into the loop's
    queue as it starts (`later`: after `delay` seconds, from a timer), as a watch whose first
    listing arrives at once does; reads nothing else."""

    def __init__(
        self, events: Dict[str, List[Dict[str, Any]]], later: Sequence[Dict[str, Any]] = (), delay: float = 0.0
    ):
        self.timing = dataclasses.replace(demo.Timing(), final_pods_grace_seconds=3600.0)  # a hang, never a speed
        self.events, self.later, self.delay = events, list(later), delay
        self.timers: List[threading.Timer] = []

    def watch(self, tag: str, args: Sequence[str], namespace: str, sink: Any, seconds: float) -> Any:
        def put(event: Dict[str, Any]) -> None:
            sink.put((tag, time.time(), time.monotonic(), event))

        for event in self.events.get(tag, []):
            put(event)
        if tag == "pods" and self.later:
            timer = threading.Timer(self.delay, lambda: [put(event) for event in self.later])
            timer.start()
            self.timers.append(timer)
        return unittest.mock.Mock(stderr="", garbled="")


class StopTakesInWhatArrivedTest(unittest.TestCase):
    """--stop-after's stop in wait_for_job: the loop asks `enough` between two events, so a pod
    watch that started after the pods existed (its first listing all at once, the ended pods
    first) once stopped with 3 of the Job's 5 pods in pods.json (CI saw it: tests.test_trainer
    StopAfterTest). The stop takes in the events received, then waits for the pods the Job counts."""

    def wait(self, kubectl: WatchedKubectl, batch: Batch) -> demo.RoundObservation:
        ended: List[str] = []

        def on_pod(pod: Dict[str, Any]) -> None:
            if pod["status"].get("phase") == "Succeeded" and pod["metadata"]["name"] not in ended:
                ended.append(pod["metadata"]["name"])

        result: List[demo.RoundObservation] = []
        waiting = threading.Thread(
            target=lambda: result.append(
                demo.wait_for_job(
                    kubectl,  # type: ignore[arg-type]
                    demo.NAMESPACE_PREFIX + "test",
                    batch.job(),
                    time.monotonic() + 3600,
                    time.monotonic(),
                    demo.Progress(False),
                    on_pod=on_pod,
                    enough=lambda: len(ended) >= 3,
                )
            ),
            daemon=True,
        )
        waiting.start()
        waiting.join(60.0)  # a hang, not a speed: the grace here is an hour
        for timer in kubectl.timers:
            timer.cancel()
        self.assertFalse(waiting.is_alive(), "the stop waited out its grace")
        [observation] = result
        self.assertEqual(observation.condition, demo.JOB_STOPPED)
        return observation

    def batch(self) -> Batch:
        return Batch(count=5)

    def test_the_pods_listed_with_the_ended_ones_are_taken_in(self) -> None:
        batch = self.batch()
        listing = [watch_event("ADDED", batch.pod(episode)) for episode in batch.episodes[:3]]
        listing += [watch_event("ADDED", batch.pod(episode, "running")) for episode in batch.episodes[3:]]
        kubectl = WatchedKubectl(
            {
                "job": [json.loads(watch_event("ADDED", batch.job_running()).data)],
                "pods": [json.loads(c.data) for c in listing],
            }
        )
        observation = self.wait(kubectl, batch)
        self.assertEqual(sorted(observation.last_pods), sorted(episode.name for episode in batch.episodes))
        ended, stopped = demo.stopped_round_pods(observation, batch.job()["metadata"]["uid"])
        self.assertEqual([pod["metadata"]["name"] for pod in ended], [e.name for e in batch.episodes[:3]])
        self.assertEqual([pod["metadata"]["name"] for pod in stopped], [e.name for e in batch.episodes[3:]])

    def test_pods_the_job_counts_and_the_watch_has_not_shown_are_waited_for(self) -> None:
        batch = self.batch()
        ended = [json.loads(watch_event("ADDED", batch.pod(episode)).data) for episode in batch.episodes[:3]]
        late = [json.loads(watch_event("ADDED", batch.pod(e, "running")).data) for e in batch.episodes[3:]]
        job = json.loads(watch_event("ADDED", batch.job_running()).data)  # active: 5
        kubectl = WatchedKubectl({"job": [job], "pods": ended}, later=late, delay=0.05)
        observation = self.wait(kubectl, batch)
        self.assertEqual(sorted(observation.last_pods), sorted(episode.name for episode in batch.episodes))

    def test_once_every_pod_the_job_counts_is_seen_the_stop_waits_no_more(self) -> None:
        batch = self.batch()
        job = json.loads(watch_event("ADDED", batch.job_running()).data)
        job["object"]["status"]["active"] = 3  # the Job as last seen counts the three ended pods alone
        ended = [json.loads(watch_event("ADDED", batch.pod(episode)).data) for episode in batch.episodes[:3]]
        kubectl = WatchedKubectl({"job": [job], "pods": ended})
        observation = self.wait(kubectl, batch)  # an hour's grace: returning at all is the check
        self.assertEqual(len(observation.last_pods), 3)


@end_to_end
class StreamedThroughTheFakeTest(unittest.TestCase):
    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-stream-e2e-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)
        self.output = self.root / "out"
        (self.root / "worker.py").write_text(SLEEPING_WORKER)
        (self.root / "tasks.jsonl").write_text(
            "".join(
                json.dumps({"id": f"t{i}", "sleep": s, "question": f"{i} + 1", "expected": i + 1}) + "\n"
                for i, s in enumerate(SLEEPS)
            )
        )

    def run_tool(self, cluster: FakeCluster, *extra: str) -> Any:
        argv = ["run", "--count", "10", "--output", str(self.output), "--quiet", "--worker", "worker.py"]
        result = run_script([*argv, "--tasks", "tasks.jsonl", *extra], cluster.env(), self.root)
        return result, time.time()

    def test_ten_episodes_of_different_lengths(self) -> None:
        cluster = FakeCluster(self.root / "cluster")
        self.addCleanup(cluster.close)
        result, exited = self.run_tool(cluster)
        self.assertEqual(result.returncode, 0, result.stderr)
        results = records.written_results(self, self.output)
        lines = records.written(self, self.output / demo.REWARDS_FILE, demo.RewardLine)
        ended = {
            name: record["terminated_at"]
            for name, record in cluster.pod_records(results["namespace"], "rollout").items()
        }
        by_end = sorted(ended, key=lambda name: ended[name])
        self.assertEqual([line["pod"] for line in lines], by_end)  # completion order
        self.assertEqual(lines[0]["index"], RANKS.index(0))
        first = lines[0]["known_at"]
        self.assertGreaterEqual(first, ended[by_end[0]])  # known once the pod had ended ...
        self.assertLess(first - ended[by_end[0]], 1.0)  # ... within a second of it ...
        self.assertLess(first, ended[by_end[1]])  # ... before any other pod ended ...
        self.assertLess(first, ended[by_end[-1]] - 1.0)  # ... long before the last did ...
        self.assertLess(first, cluster.job_completed_at(results["namespace"], "rollout"))
        self.assertLess(max(line["known_at"] for line in lines), exited)  # ... and the run exited
        for line in lines:
            self.assertGreaterEqual(line["known_at"], ended[line["pod"]])
        self.assertLess(results["client_first_reward_seconds"], results["client_job_complete_seconds"] - 1.0)
        check_agrees_with_results(self, lines, results)
        self.assertLessEqual(len(cluster.calls()), 10, cluster.calls())  # the budget of a 10-episode run

    def test_a_reward_contradicted_by_the_log_is_retracted_then_scored(self) -> None:
        """The termination message's reward event says 0 where the log says 1: the line written as
        the pod ended is retracted once the log is read, and the episode, failed by its own doing,
        is scored as --failed-episode-reward's -1 (its last line, which stands)."""
        index = RANKS.index(0)  # the first to end
        cluster = FakeCluster(self.root / "cluster", faults={"episode": {str(index): "message_mismatch"}})
        self.addCleanup(cluster.close)
        result, _ = self.run_tool(cluster, "--failed-episode-reward", "-1")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = records.written_results(self, self.output)
        lines = records.written(self, self.output / demo.REWARDS_FILE, demo.RewardLine)
        [entry] = results["failed_episodes"]
        mine = [line for line in lines if line["pod"] == entry["pod"]]
        self.assertEqual(
            [(line["reward"], line["retracted"]) for line in mine], [(0.0, False), (None, True), (-1.0, False)]
        )
        self.assertIs(lines[0], mine[0])  # written first, as its pod ended first
        self.assertIn("report different events", mine[1]["failure"])
        self.assertEqual(mine[1]["failure"], entry["cause"])
        self.assertEqual([line["failure_kind"] for line in mine], [None, demo.FAILURE_EPISODE, demo.FAILURE_EPISODE])
        self.assertEqual((entry["failure_kind"], entry["reward"]), (demo.FAILURE_EPISODE, -1.0))
        check_agrees_with_results(self, lines, results)


if __name__ == "__main__":
    unittest.main()
