"""Your own episodes (issue 12): --worker, --tasks, rewards.jsonl, --max-failed-episodes.

Pure functions with hand-built inputs, plus workers run for real as local subprocesses (as
test_worker_grade does) whose output then goes through the same analysis a run uses."""

from __future__ import annotations

import contextlib
import copy
import datetime
import io
import json
import os
import subprocess
import tempfile
import textwrap
import time
import types
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import rl_batch_demo as demo
from tests.clusterobjects import pod_log_of, settings_for
from tests.fakecluster import write_executable
from tests.fakekube.faults import MAX_TERMINATION_MESSAGE  # the kubelet's limit
from tests.toolprocess import image_python

# A worker of the kind the issue asks for: it reads its own task by JOB_COMPLETION_INDEX and
# returns a reward that depends on the task (here: the task's `x` squared, over 10).
TASK_WORKER = textwrap.dedent(
    """
    import json, os, pathlib, sys, time

    STARTED_AT = time.time()
    EPISODE_ID = os.environ["EPISODE_ID"]
    INDEX = int(os.environ["JOB_COMPLETION_INDEX"])
    TASKS = pathlib.Path(os.environ.get("RL_DEMO_TASKS", "/demo/tasks.jsonl"))
    TERMINATION_LOG = pathlib.Path(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"))
    EVENTS = []


    def emit(event, **fields):
        record = dict(fields, event=event, at=time.time(), episode_id=EPISODE_ID)
        EVENTS.append(record)
        print(json.dumps(record, sort_keys=True), flush=True)
        TERMINATION_LOG.write_text("".join(json.dumps(e, sort_keys=True) + "\\n" for e in EVENTS))


    task = json.loads(TASKS.read_text().splitlines()[INDEX])
    emit("ready", process_started_at=STARTED_AT)
    print("some noise a model prints")
    emit("reward", reward=task["x"] ** 2 / 10, seen_id=task.get("id"), seen_index=INDEX)
    sys.exit(0)
    """
)

TASKS = [{"id": "alpha", "x": 1}, {"x": 2}, {"id": 7, "x": 3}, {"id": "delta", "x": 4}]


def iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Ran:
    """One worker run on this machine: its stdout events and its termination message."""

    def __init__(self, name: str, index: int, started: float, stdout: str, termination: str, code: int) -> None:
        self.name, self.index, self.started = name, index, started
        self.stdout, self.termination, self.code = stdout, termination, code
        self.finished = time.time()
        self.events = demo.parse_events(stdout)


def run_worker(source: str, tasks: Optional[List[Dict[str, Any]]], index: int, name: str, **extra: str) -> Ran:
    with tempfile.TemporaryDirectory() as root:
        workspace = Path(root, "workspace")
        workspace.mkdir()
        script = Path(root, "episode.py")
        script.write_text(source)
        termination = Path(root, "termination-log")
        env = dict(
            os.environ,
            EPISODE_ID=name,
            RL_DEMO_WORKSPACE=str(workspace),
            RL_DEMO_TERMINATION_LOG=str(termination),
            RL_DEMO_TASKS=str(Path(root, "tasks.jsonl")),
            JOB_COMPLETION_INDEX=str(index),
            **extra,
        )
        if tasks is not None:
            Path(root, "tasks.jsonl").write_text(demo.tasks_text(tasks))
        started = time.time()
        result = subprocess.run(
            [image_python(), "-B", str(script)], env=env, capture_output=True, text=True, timeout=60
        )
        message = termination.read_text() if termination.exists() else ""
        return Ran(name, index, started, result.stdout, message, result.returncode)


def pod_for(
    ran: Optional[Ran],
    name: str,
    index: Optional[int],
    created: float,
    phase: str = "Succeeded",
    exit_code: int = 0,
    message: Optional[str] = None,
) -> Dict[str, Any]:
    started = ran.started if ran else created
    finished = (ran.finished if ran else created) + 1
    annotations = {demo.INDEX_ANNOTATION: str(index)} if index is not None else {}
    terminated = {
        "exitCode": exit_code,
        "startedAt": iso(started),
        "finishedAt": iso(finished),
        "message": (ran.termination if ran else "") if message is None else message,
    }
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "creationTimestamp": iso(created),
            "annotations": annotations,
            "labels": {demo.UID_LABEL: "job-uid"},
        },
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(created)}],
            "containerStatuses": [
                {"name": "episode", "restartCount": 0, "imageID": "image@sha256:0", "state": {"terminated": terminated}}
            ],
        },
    }


def job_for(created: float, condition: str = "Complete", reason: str = "", **status: Any) -> Dict[str, Any]:
    return {
        "metadata": {"name": "rollout", "uid": "job-uid", "creationTimestamp": iso(created)},
        "spec": {},
        "status": dict(
            conditions=[
                {"type": condition, "status": "True", "reason": reason, "lastTransitionTime": iso(time.time())}
            ],
            **status,
        ),
    }


def collected_for(
    pods: List[Dict[str, Any]],
    logs: Dict[str, Optional[demo.PodLog]],
    job: Dict[str, Any],
    *,
    count: int,
    max_failed: int = 0,
    failed_reward: Optional[float] = None,
    builtin: bool = False,
    tasks: Optional[List[Dict[str, Any]]] = None,
    indexed: bool = True,
) -> demo.RoundCollected:
    condition = demo.job_condition(job)
    observation = demo.RoundObservation(job, condition, time.time(), time.monotonic(), {})
    return demo.RoundCollected(
        round_number=1,
        job_name="rollout",
        job=job,
        observation=observation,
        pods=pods,
        logs=logs,
        log_errors={},
        count=count,
        round_dir=Path("DIR"),
        submitted_wall=time.time(),
        submitted_monotonic=time.monotonic() - 1,
        indexed=indexed,
        task_ids=[demo.task_id_of(task, i) for i, task in enumerate(tasks)] if tasks is not None else None,
        builtin_worker=builtin,
        max_failed_episodes=max_failed,
        failed_episode_reward=failed_reward,
    )


def round_job(settings: demo.RunSettings) -> Dict[str, Any]:
    return demo.round_job_manifest(settings, "rollout", "ns", "r", settings.image)


class TaskWorkerEndToEndTest(unittest.TestCase):
    """The task worker, run once per index, then analysed exactly as a round would be."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.job_created = time.time() - 2
        cls.runs = [run_worker(TASK_WORKER, TASKS, i, f"rollout-{i}-abcde") for i in range(len(TASKS))]

    def pods_and_logs(self) -> Tuple[List[Dict[str, Any]], Dict[str, Optional[demo.PodLog]]]:
        pods = [pod_for(ran, ran.name, ran.index, self.job_created + 1) for ran in self.runs]
        pods.reverse()  # creation order need not be index order
        logs: Dict[str, Optional[demo.PodLog]] = {ran.name: pod_log_of(ran.events) for ran in self.runs}
        return pods, logs

    def test_each_index_reads_its_own_task_and_rewards_by_it(self) -> None:
        for ran in self.runs:
            self.assertEqual(ran.code, 0)
        pods, logs = self.pods_and_logs()
        rows, figures = demo.analyse_round(
            collected_for(pods, logs, job_for(self.job_created), count=4, tasks=TASKS), "ns/rollout"
        )
        by_index = {row["index"]: row for row in rows}
        self.assertEqual(sorted(by_index), [0, 1, 2, 3])
        for index, task in enumerate(TASKS):
            row = by_index[index]
            self.assertEqual(row["reward"], task["x"] ** 2 / 10)
            self.assertEqual(row["task_id"], task.get("id", index))
            self.assertEqual(row["pod"], f"rollout-{index}-abcde")
            self.assertEqual(row["info"], {"seen_id": task.get("id"), "seen_index": index})
        self.assertEqual(figures["reward_sum"], sum(t["x"] ** 2 / 10 for t in TASKS))
        self.assertEqual(figures["reward_min"], 0.1)
        self.assertEqual(figures["reward_max"], 1.6)
        self.assertAlmostEqual(figures["reward_mean"], 3.0 / 4)
        self.assertEqual(figures["failed_episodes"], [])

    def test_a_failure_found_when_its_pod_ended_is_final_in_the_analysis(self) -> None:
        """Issue 29: an episode whose failure line was written when its pod ended stays failed,
        with that cause, although its log and message would now validate: results.json never
        counts a reward that rewards.jsonl refused. It is the episode's own failure, so
        --failed-episode-reward scores it (never its later reward) and without it the round fails."""
        pods, logs = self.pods_and_logs()
        collected = collected_for(pods, logs, job_for(self.job_created), count=4, failed_reward=-1.0, tasks=TASKS)
        cause = "its reward True is not a finite number"
        collected.provisional_failures = {"rollout-2-abcde": cause}
        rows, figures = demo.analyse_round(collected, "ns/rollout")
        self.assertEqual(sorted(row["index"] for row in rows), [0, 1, 3])
        [failed] = figures["failed_episodes"]
        self.assertEqual((failed["pod"], failed["cause"]), ("rollout-2-abcde", cause))
        self.assertEqual((failed["failure_kind"], failed["reward"]), ("episode", -1.0))
        collected.failed_episode_reward = None
        with self.assertRaisesRegex(demo.EpisodeInvalid, cause):
            demo.analyse_round(collected, "ns/rollout")

    def test_rewards_jsonl_matches_results_json(self) -> None:
        pods, logs = self.pods_and_logs()
        rows, figures = demo.analyse_round(
            collected_for(pods, logs, job_for(self.job_created), count=4, tasks=TASKS), "ns/rollout"
        )
        settings = settings_for(4, worker_source=TASK_WORKER, worker_file="task_worker.py", tasks=tuple(TASKS))
        results = demo.assemble_results(settings, "ctx", "ns", "run", rows, [figures])
        lines = demo.reconciling_lines({}, rows, figures["failed_episodes"], 0.0)  # as the file holds the round
        self.assertEqual([line["index"] for line in lines], [0, 1, 2, 3])
        by_pod = {row["pod"]: row for row in results["pods"]}
        for line in lines:
            row = by_pod[line["pod"]]
            self.assertEqual(
                (line["index"], line["task_id"], line["reward"]), (row["index"], row["task_id"], row["reward"])
            )
            self.assertIsNone(line["failure"])
            self.assertEqual(line["info"]["seen_index"], line["index"])
            self.assertEqual(row["info"], line["info"])  # results.json's row carries it too
        self.assertEqual(sum(line["reward"] for line in lines), results["reward_sum"])
        self.assertEqual(results["worker"], "task_worker.py")
        self.assertEqual(results["tasks"], 4)
        self.assertEqual((results["episodes"], results["successful_episodes"]), (4, 4))
        summary = demo.render_summary(results)
        self.assertIn("worker task_worker.py: reward mean 0.75", summary)
        # its ready events carry no process start: the summary says why its rows show -
        self.assertTrue(all(row["process_started_at"] is None for row in results["pods"]))
        self.assertIn(
            "process start: unknown for 4 of 4 episode(s): their ready event carries no process_started_at or "
            "kernel_booted_at, which a custom worker reports itself (docs/own-episodes.md), so the rows from the "
            "process start show - and the kernel is unknown",
            " ".join(summary.split()),
        )
        self.assertNotIn("process start: unknown", demo.render_summary({**results, "worker": demo.BUILTIN_WORKER}))
        json.dumps(results, allow_nan=False)

    def test_the_built_in_rules_would_refuse_the_same_episodes(self) -> None:
        pods, logs = self.pods_and_logs()
        with self.assertRaisesRegex(demo.EpisodeInvalid, "rollout-3-abcde: reward 1.6 with tests exit None"):
            demo.analyse_round(
                collected_for(pods, logs, job_for(self.job_created), count=4, tasks=TASKS, builtin=True), "ns/rollout"
            )


class TemplateWorkerTest(unittest.TestCase):
    def test_show_worker_prints_the_built_in_worker_exactly(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(demo.main(["show-worker"]), 0)
        self.assertEqual(out.getvalue(), demo.WORKER_SOURCE)

    def test_show_worker_template_prints_the_template(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(demo.main(["show-worker", "--template"]), 0)
        self.assertEqual(out.getvalue(), demo.WORKER_TEMPLATE)
        compile(out.getvalue(), "template.py", "exec")

    def test_the_template_runs_and_its_events_are_accepted(self) -> None:
        tasks = [{"id": "t0", "question": "2 + 3", "expected": 5}, {"id": "t1", "question": "2 * 2", "expected": 5}]
        job_created = time.time() - 2
        runs = [run_worker(demo.WORKER_TEMPLATE, tasks, i, f"rollout-{i}-xyz") for i in range(2)]
        for ran in runs:
            self.assertEqual(ran.code, 0)
            self.assertEqual([e["event"] for e in ran.events], ["ready", "reward"])
            self.assertEqual(demo.parse_events(ran.termination), ran.events)
            self.assertLessEqual(len(ran.termination.encode()), MAX_TERMINATION_MESSAGE)
        pods = [pod_for(ran, ran.name, ran.index, job_created + 1) for ran in runs]
        with tempfile.TemporaryDirectory() as root:  # its output read as the tool reads a log: frames saved
            budgets = demo.LogBudgets(artifacts=Path(root, "artifacts"))
            logs: Dict[str, Optional[demo.PodLog]] = {}
            for ran in runs:
                reader = demo.EpisodeLogReader(Path(root), [ran.name], single_pod=ran.name, budgets=budgets)
                reader.feed(ran.stdout.encode())
                logs[ran.name] = reader.finish()[ran.name]
            rows, figures = demo.analyse_round(
                collected_for(pods, logs, job_for(job_created), count=2, tasks=tasks), "ns/r"
            )
            trajectory = json.loads(Path(root, "artifacts", "rollout-0-xyz", "trajectory.json").read_text())
        self.assertEqual(trajectory, {"answer": 5, "reward": 1.0, "task": tasks[0]})
        self.assertEqual([entry["name"] for entry in rows[0]["artifacts"]], ["trajectory.json"])
        self.assertEqual(
            [(row["task_id"], row["reward"]) for row in sorted(rows, key=lambda r: r["index"])],
            [("t0", 1.0), ("t1", 0.0)],
        )
        self.assertEqual(rows[0]["info"], {"answer": 5, "correct": True})
        self.assertEqual(figures["reward_sum"], 1.0)

    def test_a_task_without_the_fields_the_template_reads_fails_naming_them(self) -> None:
        """Not a silent reward of 0: a task of another shape (or none, without --tasks) fails its
        episode, and the run's cause quotes the template's own words from its termination message."""
        cases = [
            (None, {}, "question, expected"),
            ([{"id": "t0", "question": "2 + 3"}], {}, "expected"),  # its answer, unless kept private
            ([{"id": "t0", "a": 2, "b": 3}], {demo.PRIVATE_FIELDS_ENV: "expected"}, "question"),
            ([{"id": "t0", "a": 2, "b": 3, "expected": 5}], {}, "question"),
        ]
        for tasks, private, missing in cases:
            with self.subTest(tasks=tasks, private=private):
                ran = run_worker(demo.WORKER_TEMPLATE, tasks, 0, "rollout-0-abc", **private)
                self.assertEqual(ran.code, 1)
                self.assertEqual(ran.events, [])
                self.assertEqual(ran.termination, f"task 0 lacks the field(s) {missing} this worker reads\n")
        pod = pod_for(ran, ran.name, 0, time.time() - 2, phase="Failed", exit_code=1, message=ran.termination)
        rank, rule = demo.pod_failure(pod)
        self.assertEqual(rank, 1)
        self.assertIn("exit code 1", rule)
        self.assertIn("its termination message ends 'task 0 lacks the field(s) question this worker reads'", rule)

    def test_the_readmes_sample_tasks_fit_the_template(self) -> None:
        """The README's sample tasks file, written by its own command, in the template's shape:
        the template answers every task right (one shape for the template and the docs)."""
        root = Path(demo.__file__).resolve().parent
        for readme in ("README.md", "README.zh-CN.md"):
            [line] = [
                line for line in (root / readme).read_text(encoding="utf-8").splitlines() if line.startswith("printf ")
            ]
            with self.subTest(readme), tempfile.TemporaryDirectory() as scratch:
                subprocess.run(["sh", "-c", line], cwd=scratch, check=True)
                tasks = demo.parse_tasks(Path(scratch, "tasks.jsonl").read_bytes(), "tasks.jsonl")
            self.assertGreaterEqual(len(tasks), 2)
            for index in range(len(tasks)):
                ran = run_worker(demo.WORKER_TEMPLATE, list(tasks), index, f"rollout-{index}-abc")
                self.assertEqual((ran.code, ran.events[-1]["reward"]), (0, 1.0), ran)

    def test_the_template_leaves_the_grade_to_the_client_without_the_expected_answer(self) -> None:
        private = {demo.PRIVATE_FIELDS_ENV: "expected"}  # --private-fields expected, as the tool tells the pod
        ran = run_worker(demo.WORKER_TEMPLATE, [{"id": "t0", "question": "4 * 5"}], 0, "rollout-0-abc", **private)
        self.assertEqual(ran.code, 0)
        reward = ran.events[-1]
        self.assertEqual((reward["reward"], reward["answer"]), (0.0, 20))
        self.assertNotIn("correct", reward)
        namespace: Dict[str, Any] = {}
        exec(textwrap.dedent(demo.WORKER_TEMPLATE.split("such as\n\n", 1)[1].split("\n\n", 1)[0]), namespace)
        self.assertEqual(namespace["grade"]({"question": "4 * 5", "expected": 20}, reward), 1.0)  # its grader

    def test_the_template_leaves_the_termination_message_empty_when_events_do_not_fit(self) -> None:
        source = demo.WORKER_TEMPLATE.replace(
            'return (1.0 if correct else 0.0), {"answer": answer, "correct": correct}',
            'return 0.5, {"blob": "x" * 5000}',
        )
        self.assertNotEqual(source, demo.WORKER_TEMPLATE)
        ran = run_worker(source, [{"question": "1 + 1", "expected": 2}], 0, "rollout-0-big")
        self.assertEqual(ran.termination, "")
        self.assertEqual(ran.events[-1]["reward"], 0.5)


class CustomRulesTest(unittest.TestCase):
    """validate_episode for a custom worker: the built-in task's rules skipped, every other enforced."""

    def setUp(self) -> None:
        self.job_created = time.time() - 10
        self.created = self.job_created + 1
        self.ready = self.created + 2
        self.reward_at = self.created + 3

    def events(self, **reward: Any) -> List[Dict[str, Any]]:
        return [
            {"event": "ready", "at": self.ready, "episode_id": "p"},
            dict({"event": "reward", "at": self.reward_at, "episode_id": "p", "reward": 0.25}, **reward),
        ]

    def pod(self, **changes: Any) -> Dict[str, Any]:
        pod = pod_for(None, "p", None, self.created, message="")
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        terminated["finishedAt"] = iso(self.reward_at + 2)
        for key, value in changes.items():
            if key == "restarts":
                pod["status"]["containerStatuses"][0]["restartCount"] = value
            elif key == "exit_code":
                terminated["exitCode"] = value
            else:
                pod["status"][key] = value
        return pod

    def validate(self, pod: Dict[str, Any], events: List[Dict[str, Any]], builtin: bool = False) -> demo.EpisodeRow:
        return demo.validate_episode(pod, events, self.job_created, None, "here", builtin)

    def test_any_finite_reward_without_tests_or_baseline(self) -> None:
        for reward in (0.25, 0, -3, 10**6, 1e-9):
            row = self.validate(self.pod(), self.events(reward=reward))
            self.assertEqual(row["reward"], reward)
        self.assertEqual(self.validate(self.pod(), self.events(note="hi"))["info"], {"note": "hi"})

    def test_the_built_in_rules_still_hold_for_the_built_in_worker(self) -> None:
        with self.assertRaisesRegex(demo.EpisodeInvalid, "the fixed code must pass its tests"):
            self.validate(self.pod(), self.events(), builtin=True)

    def test_a_reward_that_is_not_a_finite_number_is_invalid(self) -> None:
        for reward in (True, False, "1", None, [1], {"r": 1}, 10**400):
            with self.subTest(reward=reward), self.assertRaisesRegex(demo.EpisodeInvalid, "is not a finite number"):
                self.validate(self.pod(), self.events(reward=reward))

    def test_every_other_rule_is_enforced(self) -> None:
        cases = [
            (self.pod(phase="Failed"), self.events(), "phase Failed"),
            (self.pod(restarts=1), self.events(), "restarted"),
            (self.pod(exit_code=1), self.events(), "exit code is 1"),
            (self.pod(), self.events()[1:], "found 0 ready and 1 reward"),
            (self.pod(), self.events() + self.events()[1:], "found 1 ready and 2 reward"),
            (self.pod(), self.events(episode_id="other"), "not the pod name"),
            (self.pod(), self.events(at=self.ready - 1), "timestamps out of order"),
            (self.pod(), self.events(at=self.reward_at + 60), "later than the container's finish"),
        ]
        for pod, events, rule in cases:
            with self.subTest(rule=rule), self.assertRaisesRegex(demo.EpisodeInvalid, rule):
                self.validate(pod, events)

    def test_a_large_info_is_dropped_with_a_note(self) -> None:
        row = self.validate(self.pod(), self.events(blob="x" * (demo.INFO_LIMIT + 1)))
        self.assertEqual(list(row["info"] or {}), ["info_dropped"])

    def test_a_custom_workers_bad_event_line_is_an_error(self) -> None:
        for line in ('{"event": "reward", "at": 1, "reward": NaN}', '{"event": "reward", "at": 1, "reward": Infinity}'):
            with self.assertRaises(demo.EventParseError):
                demo.parse_events(line)


class MaxFailedEpisodesTest(unittest.TestCase):
    """Four episodes, two of them failed by their own doing (a Failed pod, a pod without a reward
    event), or lost to the infrastructure (lose()): --max-failed-episodes K sets aside only the
    infrastructure's, --failed-episode-reward R scores the episodes' own."""

    def setUp(self) -> None:
        self.job_created = time.time() - 20
        created = self.job_created + 1
        self.pods = []
        self.logs: Dict[str, Optional[demo.PodLog]] = {}
        for index in range(4):
            name = f"rollout-{index}-x"
            ready = {"event": "ready", "at": created + 2, "episode_id": name}
            reward = {"event": "reward", "at": created + 3, "episode_id": name, "reward": index / 2}
            events = [ready, reward]
            phase, exit_code = "Succeeded", 0
            if index == 1:
                phase, exit_code = "Failed", 1
            if index == 3:
                events = [ready]
            pod = pod_for(None, name, index, created, phase=phase, exit_code=exit_code, message="")
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = iso(created + 5)
            self.pods.append(pod)
            self.logs[name] = pod_log_of(events)

    def lose(self, *indexes: int) -> None:
        """The kubelet's node-pressure eviction of these episodes' pods (DisruptionTarget, Evicted)."""
        for index in indexes:
            status = self.pods[index]["status"]
            status.update(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
            status["conditions"].insert(
                0, {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": "low"}
            )
            status["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 137

    def analyse(
        self, k: int, job: Optional[Dict[str, Any]] = None, reward: Optional[float] = None
    ) -> Tuple[List[demo.EpisodeRow], Dict[str, Any]]:
        job = job or job_for(self.job_created, "Failed", "FailedIndexes", failedIndexes="1,3", completedIndexes="0,2")
        collected = collected_for(self.pods, self.logs, job, count=4, max_failed=k, failed_reward=reward)
        return demo.analyse_round(collected, "ns/rollout")

    def test_k_zero_fails_at_the_root_cause_as_before(self) -> None:
        with self.assertRaisesRegex(demo.EpisodeInvalid, "episode rollout-1-x: the pod ended in phase Failed"):
            self.analyse(0, job_for(self.job_created, "Failed", "BackoffLimitExceeded"))

    def test_failure_kinds(self) -> None:
        kinds = {pod["metadata"]["name"]: demo.whose_failure(pod) for pod in self.pods}
        self.assertEqual(set(kinds.values()), {demo.FAILURE_EPISODE})  # exit 1, no reward event, succeeded
        self.lose(1)
        self.assertEqual(demo.whose_failure(self.pods[1]), demo.FAILURE_INFRASTRUCTURE)
        deleted = copy.deepcopy(self.pods[0])
        deleted["metadata"]["deletionTimestamp"] = iso(time.time())
        self.assertEqual(demo.whose_failure(deleted), demo.FAILURE_INFRASTRUCTURE)  # it has no token to ask for it
        own_deadline = copy.deepcopy(self.pods[2])
        own_deadline["status"].update(phase="Failed", reason="DeadlineExceeded", message="Pod was active ...")
        self.assertEqual(demo.whose_failure(own_deadline), demo.FAILURE_EPISODE)
        own_deadline["status"].pop("containerStatuses")  # past its deadline before any container ran: still its own
        self.assertEqual(demo.whose_failure(own_deadline), demo.FAILURE_EPISODE)
        self.assertEqual(demo.infra_loss(own_deadline), "")
        refused = copy.deepcopy(own_deadline)
        refused["status"].update(reason="OutOfcpu", message="Pod was rejected")  # the kubelet's admission
        self.assertEqual(demo.whose_failure(refused), demo.FAILURE_INFRASTRUCTURE)
        self.assertEqual(demo.whose_failure(None), demo.FAILURE_EPISODE)  # never seen: nothing proves a loss

    def test_k_never_sets_aside_an_episodes_own_failure(self) -> None:
        for k in (1, 2, 10):
            with (
                self.subTest(k=k),
                self.assertRaisesRegex(
                    demo.EpisodeInvalid,
                    r"rollout-1-x: .*phase Failed .*own doing: --max-failed-episodes sets aside only failures of the "
                    r"infrastructure; --failed-episode-reward R scores it",
                ),
            ):
                self.analyse(k)

    def test_below_the_number_of_lost_episodes_fails(self) -> None:
        self.lose(1, 3)
        with self.assertRaisesRegex(
            demo.EpisodeInvalid,
            r"rollout-1-x: the pod was evicted .*\(2 episodes lost to the infrastructure, more than "
            r"--max-failed-episodes 1\)",
        ):
            self.analyse(1, job_for(self.job_created, "Failed", "MaxFailedIndexesExceeded"))

    def test_lost_episodes_within_k_are_masked(self) -> None:
        self.lose(1, 3)
        for k in (2, 3, 10):
            with self.subTest(k=k):
                rows, figures = self.analyse(k)
                self.assertEqual(sorted(row["index"] for row in rows), [0, 2])
                self.assertEqual((figures["episodes"], figures["successful_episodes"]), (4, 2))
                self.assertEqual((figures["masked_episodes"], figures["scored_episodes"]), (2, 0))
                self.assertEqual(figures["reward_sum"], 0 + 1.0)
                entries = {entry["index"]: entry for entry in figures["failed_episodes"]}
                self.assertEqual(sorted(entries), [1, 3])
                self.assertEqual({entry["failure_kind"] for entry in entries.values()}, {demo.FAILURE_INFRASTRUCTURE})
                self.assertEqual({entry["reward"] for entry in entries.values()}, {None})
                self.assertIn("evicted", entries[1]["cause"])
                self.assertEqual(figures["job_complete_at"], None)  # the Job ended Failed (FailedIndexes)

    def test_an_episodes_own_failures_are_scored(self) -> None:
        rows, figures = self.analyse(0, reward=-1.0)
        self.assertEqual(sorted(row["index"] for row in rows), [0, 2])
        self.assertEqual((figures["episodes"], figures["successful_episodes"]), (4, 2))
        self.assertEqual((figures["masked_episodes"], figures["scored_episodes"]), (0, 2))
        self.assertEqual(figures["reward_sum"], 0 + 1.0 - 1.0 - 1.0)  # R counts in every reward figure
        self.assertEqual((figures["reward_min"], figures["reward_max"], figures["reward_mean"]), (-1.0, 1.0, -0.25))
        entries = {entry["index"]: entry for entry in figures["failed_episodes"]}
        self.assertEqual({entry["failure_kind"] for entry in entries.values()}, {demo.FAILURE_EPISODE})
        self.assertEqual({entry["reward"] for entry in entries.values()}, {-1.0})
        self.assertIn("phase Failed", entries[1]["cause"])
        self.assertIn("found 1 ready and 0 reward", entries[3]["cause"])
        # no pod has a message; the Failed one is not counted: its status is its verdict
        self.assertEqual(figures["pods_without_termination_message"], 3)

    def test_a_lost_episode_is_never_scored(self) -> None:
        self.lose(1)
        with self.assertRaisesRegex(demo.EpisodeInvalid, "rollout-1-x: the pod was evicted"):
            self.analyse(0, reward=0.0)  # K = 0: a loss still fails the run
        _, figures = self.analyse(1, reward=0.0)
        kinds = {entry["index"]: (entry["failure_kind"], entry["reward"]) for entry in figures["failed_episodes"]}
        self.assertEqual(kinds, {1: (demo.FAILURE_INFRASTRUCTURE, None), 3: (demo.FAILURE_EPISODE, 0.0)})
        self.assertEqual((figures["episodes"], figures["masked_episodes"], figures["scored_episodes"]), (4, 1, 1))

    def test_results_rewards_and_summary_with_failed_episodes(self) -> None:
        self.lose(1)
        rows, figures = self.analyse(2, reward=-1.0)
        settings = settings_for(4, max_failed_episodes=2, failed_episode_reward=-1.0)
        results = demo.assemble_results(settings, "ctx", "ns", "run", rows, [figures])
        self.assertEqual(len(results["failed_episodes"]), 2)
        self.assertEqual((results["max_failed_episodes"], results["failed_episode_reward"]), (2, -1.0))
        self.assertEqual(results["worker"], demo.BUILTIN_WORKER)
        lines = demo.reconciling_lines({}, rows, results["failed_episodes"], 0.0)
        self.assertEqual([line["index"] for line in lines], [0, 1, 2, 3])
        self.assertEqual([line["reward"] for line in lines], [0.0, None, 1.0, -1.0])
        self.assertEqual([line["failure"] is None for line in lines], [True, False, True, False])
        self.assertEqual(
            [line["failure_kind"] for line in lines], [None, demo.FAILURE_INFRASTRUCTURE, None, demo.FAILURE_EPISODE]
        )
        self.assertEqual([demo.stands_as_reward(line) for line in lines], [True, False, True, True])
        self.assertEqual((results["masked_episodes"], results["scored_episodes"]), (1, 1))
        masked, scored = results["notes"]
        self.assertIn("1 of 4 episodes masked: the infrastructure lost them", masked)
        self.assertIn("1 of 4 episodes failed by their own doing", scored)
        summary = " ".join(demo.render_summary(results).split())
        self.assertIn(f"note: {masked}", summary)
        self.assertIn("(1 failed and scored -1.0 under --failed-episode-reward)", summary)
        suites = demo.junit_suites(results, [], {}, None)
        skipped = {case["name"]: case["message"] for case in suites[0]["cases"] if case["outcome"] == "skipped"}
        self.assertEqual(sorted(skipped), ["rollout-1-x", "rollout-3-x"])
        self.assertIn("lost to the infrastructure", skipped["rollout-1-x"])
        self.assertIn("scored -1.0 (--failed-episode-reward)", skipped["rollout-3-x"])

    def test_a_reward_contradicted_later_is_retracted_then_scored(self) -> None:
        rows, figures = self.analyse(0, reward=0.0)
        provisional = demo.reward_line({**rows[0], "pod": "rollout-3-x", "index": 3}, 0.0)
        lines = demo.reconciling_lines({"rollout-3-x": provisional}, rows, figures["failed_episodes"], 1.0)
        mine = [line for line in lines if line["pod"] == "rollout-3-x"]
        self.assertEqual([(line["retracted"], line["reward"]) for line in mine], [(True, None), (False, 0.0)])
        written = {line["pod"]: line for line in lines}  # once written, nothing more is needed
        self.assertEqual(demo.reconciling_lines(written, rows, figures["failed_episodes"], 2.0), [])

    def test_a_complete_job_with_invalid_events_is_also_scored(self) -> None:
        self.pods[1]["status"]["phase"] = "Succeeded"
        self.pods[1]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 0
        rows, figures = self.analyse(0, job_for(self.job_created), reward=0.0)
        self.assertEqual(sorted(row["index"] for row in rows), [0, 1, 2])
        self.assertEqual([entry["index"] for entry in figures["failed_episodes"]], [3])

    def test_the_jobs_failed_indexes_must_be_failed_episodes(self) -> None:
        job = job_for(self.job_created, "Failed", "FailedIndexes", failedIndexes="0-1")
        with self.assertRaisesRegex(
            demo.DemoError, "lists index 0 in status.failedIndexes, but that episode validated"
        ):
            self.analyse(0, job, reward=0.0)

    def test_another_failure_reason_still_fails(self) -> None:
        with self.assertRaisesRegex(demo.DemoError, "failed \\(BackoffLimitExceeded"):
            self.analyse(0, job_for(self.job_created, "Failed", "BackoffLimitExceeded"), reward=0.0)

    def test_every_episode_failed(self) -> None:
        for pod in self.pods:
            pod["status"]["phase"] = "Failed"
        with self.assertRaisesRegex(demo.DemoError, "every episode of Job ns/rollout failed"):
            self.analyse(0, reward=0.0)

    def test_a_missing_or_repeated_index(self) -> None:
        self.pods[2]["metadata"]["annotations"][demo.INDEX_ANNOTATION] = "0"
        with self.assertRaisesRegex(demo.DemoError, "more than one pod for completion index 0"):
            self.analyse(0, reward=0.0)
        for bad in ("4", "-1", "01", "x", None):
            self.pods[2]["metadata"]["annotations"][demo.INDEX_ANNOTATION] = bad
            _, figures = self.analyse(0, reward=0.0)
            causes = {entry["pod"]: entry["cause"] for entry in figures["failed_episodes"]}
            self.assertIn("annotation is", causes["rollout-2-x"])

    def test_classify_round(self) -> None:
        def outcome(reason: str) -> str:
            job = job_for(self.job_created, "Failed", reason)
            return demo.classify_round(demo.RoundObservation(job, "Failed"))

        self.assertEqual(outcome("FailedIndexes"), demo.ROUND_FAILED_INDEXES)
        self.assertEqual(outcome("MaxFailedIndexesExceeded"), demo.ROUND_FAILED)
        self.assertEqual(outcome("BackoffLimitExceeded"), demo.ROUND_FAILED)
        self.assertEqual(outcome("DeadlineExceeded"), demo.ROUND_DEADLINE)


class ManifestTest(unittest.TestCase):
    def job(self, **extra: Any) -> Dict[str, Any]:
        return demo.job_manifest(
            name="rollout",
            namespace="ns",
            run_id="r",
            count=4,
            parallelism=2,
            image="i",
            runtime=None,
            deadline_seconds=240,
            **extra,
        )

    def test_the_built_in_run_is_unchanged(self) -> None:
        spec = self.job()["spec"]
        self.assertEqual(
            sorted(spec), ["activeDeadlineSeconds", "backoffLimit", "completions", "parallelism", "template"]
        )
        self.assertEqual(spec["backoffLimit"], 0)
        settings = demo.run_settings(demo.build_parser().parse_args(["run", "--output", "o"]))
        configmap = demo.configmap_manifest("ns", "r", settings.worker_source, settings.tasks, settings.launcher_source)
        # no launcher.py: the built-in worker is the pod's command
        self.assertEqual(configmap["data"], {"episode.py": demo.WORKER_SOURCE})
        self.assertTrue(settings.builtin_worker)
        self.assertEqual(settings.worker_name, demo.BUILTIN_WORKER)
        self.assertFalse(settings.indexed)

    def test_tasks_make_an_indexed_job_with_no_retries(self) -> None:
        spec = self.job(indexed=True)["spec"]
        self.assertEqual((spec["completionMode"], spec["backoffLimit"]), ("Indexed", 0))
        self.assertNotIn("backoffLimitPerIndex", spec)

    def test_max_failed_episodes_uses_per_index_limits(self) -> None:
        spec = self.job(max_failed_episodes=2)["spec"]
        self.assertEqual(spec["completionMode"], "Indexed")
        self.assertEqual((spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]), (0, 2))
        self.assertNotIn("backoffLimit", spec)
        self.assertEqual(self.job(max_failed_episodes=9)["spec"]["maxFailedIndexes"], 4)  # at most completions

    def test_the_configmap_carries_worker_and_tasks(self) -> None:
        data = demo.configmap_manifest("ns", "r", "print(1)\n", [{"b": 1, "a": "\u00e9"}, {}])["data"]
        self.assertEqual(data["episode.py"], "print(1)\n")
        self.assertEqual(data[demo.TASKS_KEY], '{"a":"\\u00e9","b":1}\n{}\n')
        self.assertEqual(
            [json.loads(line) for line in data[demo.TASKS_KEY].splitlines()], [{"b": 1, "a": "\u00e9"}, {}]
        )

    def test_parse_index_set(self) -> None:
        self.assertEqual(demo.parse_index_set("1,3-5,9"), [1, 3, 4, 5, 9])
        self.assertEqual(demo.parse_index_set(""), [])
        self.assertEqual(demo.parse_index_set(None), [])
        for bad in ("1,,2", "5-3", "a", "1-", 7, "01"):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                demo.parse_index_set(bad)

    def test_parse_tasks(self) -> None:
        self.assertEqual(demo.parse_tasks(b'{"id": 1}\n{"x": [1, 2]}\n', "t"), [{"id": 1}, {"x": [1, 2]}])
        self.assertEqual(demo.parse_tasks(b'{"id": 1}', "t"), [{"id": 1}])
        cases = [
            (b"", "is empty"),
            (b'{"a": 1}\n\n{"b": 2}\n', "line 2 is not JSON"),
            (b'{"a": 1}\n[1]\n', "line 2 is a JSON list, not an object"),
            (b'{"a": 1}\n{"a": NaN}\n', "line 2 is not JSON \\(NaN is not a JSON number\\)"),
            (b'{"a": 1}\n{"a": 1} {"b": 2}\n', "line 2 is not JSON"),
            (b'{"a": 1}\n{"a": "\xff"}\n', "line 2 is not UTF-8"),
            (b'{"a": ' * 100000 + b"1" + b"}" * 100000, "line 1 is (nested too deeply|not JSON)"),
        ]
        for data, message in cases:
            with self.subTest(message=message), self.assertRaisesRegex(demo.DemoError, message) as caught:
                demo.parse_tasks(data, "t")
            self.assertEqual(caught.exception.exit_code, demo.EXIT_USAGE)

    def test_task_id(self) -> None:
        self.assertEqual(demo.task_id_of({"id": "a"}, 3), "a")
        self.assertEqual(demo.task_id_of({"x": 1}, 3), 3)
        self.assertEqual(demo.task_id_of(None, 3), 3)


class RefusedBeforeAnythingTest(unittest.TestCase):
    """Bad --tasks or --worker files stop the run before any kubectl process starts."""

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp())
        self.calls = self.root / "kubectl-called"
        kubectl = self.root / "kubectl"
        write_executable(kubectl, f"#!/bin/sh\necho \"$@\" >> '{self.calls}'\nexit 1\n")
        self.kubectl = str(kubectl)
        self.output = self.root / "out"

    def tearDown(self) -> None:
        import shutil

        shutil.rmtree(self.root)

    def refused(self, *args: str) -> str:
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertRaises(SystemExit) as caught:
            demo.main(["run", "--output", str(self.output), "--kubectl", self.kubectl, "--quiet", *args])
        self.assertEqual(caught.exception.code, demo.EXIT_USAGE)
        self.assertFalse(self.calls.exists(), "kubectl was run")
        self.assertFalse(self.output.exists(), "the output directory was created")
        return stderr.getvalue()

    def write(self, name: str, data: bytes) -> str:
        path = self.root / name
        path.write_bytes(data)
        return str(path)

    def test_a_malformed_tasks_file(self) -> None:
        tasks = self.write("tasks.jsonl", b'{"id": 1}\n{"id": 2,}\n')
        self.assertIn("tasks.jsonl line 2 is not JSON", self.refused("--tasks", tasks))

    def test_an_oversized_tasks_file(self) -> None:
        line = json.dumps({"prompt": "x" * 300_000}).encode() + b"\n"
        tasks = self.write("tasks.jsonl", line * 4)
        message = self.refused("--tasks", tasks)
        self.assertIn("1 MiB (1,048,576 bytes) limit on a ConfigMap's data", message)
        self.assertRegex(message, r"data, the worker and the tasks, would be 1,2\d\d,\d{3} bytes")

    def test_a_tasks_file_counted_as_the_api_server_counts_it(self) -> None:
        """Issue 27: the API server counts the data's values (ValidateConfigMap), not their JSON
        form: 726 KB of quotes, which JSON doubles, fit."""
        line = json.dumps({"prompt": '"' * 90_000}).encode() + b"\n"
        tasks = self.write("tasks.jsonl", line * 4)
        manifest = demo.configmap_manifest("ns", "0" * 12, "print()", demo.parse_tasks(line * 4, "tasks.jsonl"))
        self.assertGreater(len(json.dumps(manifest)), 2**20)  # over 1 MiB as JSON
        self.assertEqual(demo.configmap_size_problem(manifest), "")
        args = ["run", "--tasks", tasks, "--worker", self.write("w.py", b"print()\n"), "--dry-run"]
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(demo.main([*args, "--output", str(self.output), "--quiet"]), 0)

    def test_a_count_that_does_not_match(self) -> None:
        tasks = self.write("tasks.jsonl", b"{}\n{}\n")
        self.assertIn("--count 3 does not match the 2 tasks", self.refused("--tasks", tasks, "--count", "3"))

    def test_a_private_field_that_no_task_has(self) -> None:
        """A misspelled --private-fields would keep nothing private: refused before anything is created."""
        tasks = self.write("tasks.jsonl", b'{"question": "1 + 1", "expected": 2}\n')
        message = self.refused("--tasks", tasks, "--private-fields", "expected,expcted")
        self.assertIn(f"--private-fields names 'expcted', which no task of {tasks} has", message)

    def test_too_many_tasks_without_allow_large(self) -> None:
        tasks = self.write("tasks.jsonl", b"{}\n" * 21)
        self.assertIn(f"--tasks {tasks} (21 tasks) is more than 20; pass --allow-large", self.refused("--tasks", tasks))

    def test_a_worker_that_does_not_compile(self) -> None:
        worker = self.write("my_worker.py", b"import json\n\ndef main(:\n    pass\n")
        message = self.refused("--worker", worker)
        self.assertIn("my_worker.py line 3 does not compile as Python", message)

    def test_a_worker_that_is_not_utf8(self) -> None:
        worker = self.write("my_worker.py", b"x = 1\ny = '\xff'\n")
        self.assertIn("my_worker.py line 2 is not UTF-8", self.refused("--worker", worker))

    def test_a_worker_with_a_nul_byte_names_its_line(self) -> None:
        worker = self.write("my_worker.py", b"x = 1\ny = 'a\x00b'\nz = 3\n")
        message = self.refused("--worker", worker)
        self.assertEqual(len(message.splitlines()), 1, message)
        self.assertIn(f"--worker {worker} line 2 has a NUL byte, which Python refuses in source code", message)

    def test_a_worker_nested_too_deeply_is_refused_in_one_line(self) -> None:
        # Too deep for every Python 3.9-3.13: the parser's stack (MemoryError) and the compiler's
        # (RecursionError); compile() raises them rather than a SyntaxError.
        for nesting in (b"x = " + b"-" * 100000 + b"1", b"x = f" + b"()" * 100000):
            with self.subTest(nesting[:6]):
                worker = self.write("my_worker.py", b"import json\n" + nesting + b"\n")
                message = self.refused("--worker", worker)
                self.assertEqual(len(message.splitlines()), 1, message)
                self.assertRegex(
                    message, r"my_worker\.py is nested too deeply for Python to compile \((Recursion|Memory)Error\)"
                )

    def test_a_syntax_error_without_a_line_leaves_the_line_out(self) -> None:
        worker = self.write("my_worker.py", b"\xef\xbb\xbf# coding: latin-1\nx = 1\n")
        message = self.refused("--worker", worker)
        self.assertIn("my_worker.py does not compile as Python: encoding problem: iso-8859-1 with BOM", message)

    def test_a_worker_with_a_utf8_bom_is_kept_as_python_reads_it(self) -> None:
        worker = self.write("w.py", b"\xef\xbb\xbf" + demo.WORKER_TEMPLATE.encode())
        with contextlib.redirect_stdout(io.StringIO()):
            code = demo.main(["run", "--output", str(self.output), "--dry-run", "--worker", worker])
        self.assertEqual(code, 0)
        configmap = json.loads((self.output / "01-configmap.json").read_text(encoding="utf-8"))
        self.assertEqual(configmap["data"]["episode.py"], "\ufeff" + demo.WORKER_TEMPLATE)
        task = [{"question": "1 + 1", "expected": 2}]
        ran = run_worker(configmap["data"]["episode.py"], task, 0, "rollout-bom")  # as the pod's Python reads it
        self.assertEqual((ran.code, [event["event"] for event in ran.events]), (0, ["ready", "reward"]))

    def test_a_missing_file(self) -> None:
        self.assertIn("cannot read --worker", self.refused("--worker", str(self.root / "absent.py")))

    def test_dry_run_writes_the_custom_configmap_and_indexed_job(self) -> None:
        tasks = self.write("tasks.jsonl", b'{"id": "a"}\n{"id": "b"}\n')
        worker = self.write("w.py", demo.WORKER_TEMPLATE.encode())
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = demo.main(
                ["run", "--output", str(self.output), "--dry-run", "--tasks", tasks, "--worker", worker,
                 "--max-failed-episodes", "1"]
            )  # fmt: skip
        self.assertEqual(code, 0)
        self.assertFalse(self.calls.exists())
        configmap = json.loads((self.output / "01-configmap.json").read_text())
        self.assertEqual(configmap["data"]["episode.py"], demo.WORKER_TEMPLATE)
        self.assertEqual(configmap["data"][demo.TASKS_KEY], '{"id":"a"}\n{"id":"b"}\n')
        job = json.loads((self.output / "02-job-rollout.json").read_text())
        self.assertEqual(job["spec"]["completions"], 2)
        self.assertEqual(job["spec"]["completionMode"], "Indexed")
        self.assertEqual((job["spec"]["backoffLimitPerIndex"], job["spec"]["maxFailedIndexes"]), (0, 1))


class OldClusterTest(unittest.TestCase):
    """An API server that drops the per-index fields: the Job is deleted at once, exit 3."""

    def fake_run(self, settings: Any = None) -> Any:
        calls: List[List[str]] = []
        kubectl = types.SimpleNamespace(run=lambda args, namespace=None: calls.append(list(args)) or "")
        batch = types.SimpleNamespace(kubectl=kubectl, namespace="ns", settings=settings or settings_for(4))
        batch.delete_refused_job = lambda name, before: demo.BatchRun.delete_refused_job(batch, name, before)
        return batch, calls

    def test_dropped_per_index_fields(self) -> None:
        manifest = round_job(settings_for(4, max_failed_episodes=1))
        created = json.loads(json.dumps(manifest))
        del created["spec"]["backoffLimitPerIndex"], created["spec"]["maxFailedIndexes"]
        created["spec"]["backoffLimit"] = 6  # what an old API server defaults
        batch, calls = self.fake_run()
        with self.assertRaisesRegex(demo.DemoError, "does not support per-index backoff limits") as caught:
            demo.BatchRun.refuse_dropped_fields(batch, manifest, created)
        self.assertEqual(caught.exception.exit_code, demo.EXIT_CLUSTER)
        self.assertIn("it was deleted at once", str(caught.exception))
        self.assertEqual(calls, [["delete", "job", "rollout", "--cascade=foreground", "--wait=false"]])

    def test_fields_kept(self) -> None:
        manifest = round_job(settings_for(4, max_failed_episodes=1))
        batch, calls = self.fake_run()
        demo.BatchRun.refuse_dropped_fields(batch, manifest, json.loads(json.dumps(manifest)))
        plain = round_job(settings_for(4))
        # nothing needed: a plain run's Job is Indexed only for its log reads, which go pod by pod without it
        demo.BatchRun.refuse_dropped_fields(batch, plain, {"spec": {}})
        self.assertEqual(calls, [])

    def test_a_dropped_completion_mode_stops_a_run_with_tasks(self) -> None:
        settings = settings_for(4, tasks=[{"id": index} for index in range(4)])
        manifest = round_job(settings)
        created = json.loads(json.dumps(manifest))
        del created["spec"]["completionMode"]
        batch, calls = self.fake_run(settings)
        with self.assertRaisesRegex(demo.DemoError, "does not support Indexed Jobs"):
            demo.BatchRun.refuse_dropped_fields(batch, manifest, created)
        self.assertEqual(len(calls), 1)


class DocumentedExampleTest(unittest.TestCase):
    """docs/own-episodes.md's complete example runs as shown: its worker on its tasks gives its
    rewards.jsonl."""

    def blocks(self) -> List[str]:
        text = (Path(demo.__file__).resolve().parent / "docs" / "own-episodes.md").read_text(encoding="utf-8")
        section = text.split("\n## A complete example\n", 1)[1].split("\n## ", 1)[0]
        return [block.split("\n", 1)[1] for block in section.split("```")[1::2]]

    def test_the_example(self) -> None:
        tasks_block, worker_block, command_block, rewards_block = self.blocks()[:4]
        tasks = demo.parse_tasks(tasks_block.encode(), "README")
        self.assertIn("--worker my_worker.py --tasks tasks.jsonl", command_block)
        shown = [json.loads(line) for line in rewards_block.splitlines()]  # in the order they were known
        self.assertEqual([line["known_at"] for line in shown], sorted(line["known_at"] for line in shown))
        expected = sorted(shown, key=lambda line: line["index"])
        job_created = time.time() - 2
        with tempfile.TemporaryDirectory() as root:
            source = worker_block.replace("/dev/termination-log", str(Path(root, "termination-log")))
            source = source.replace("/demo/tasks.jsonl", str(Path(root, "tasks.jsonl")))
            Path(root, "tasks.jsonl").write_text(demo.tasks_text(tasks))
            runs = [run_worker(source, None, i, expected[i]["pod"]) for i in range(len(tasks))]
        pods = [pod_for(ran, ran.name, ran.index, job_created + 1) for ran in runs]
        logs: Dict[str, Optional[demo.PodLog]] = {ran.name: pod_log_of(ran.events) for ran in runs}
        collected = collected_for(pods, logs, job_for(job_created), count=len(tasks), tasks=tasks)
        rows, figures = demo.analyse_round(collected, "ns/rollout")
        lines = demo.reconciling_lines({}, rows, [], 0.0)
        for line in expected:  # the time each was known differs from run to run
            self.assertIsInstance(line["known_at"], float)
        self.assertEqual(
            [dict(line, known_at=None, tags={}) for line in lines],  # the file's writer adds the (no) --tags
            [dict(line, known_at=None) for line in expected],
        )
        self.assertEqual((figures["reward_sum"], figures["reward_min"], figures["reward_max"]), (2.0, 0.0, 1.0))
        self.assertAlmostEqual(figures["reward_mean"], 2 / 3)


if __name__ == "__main__":
    unittest.main()
