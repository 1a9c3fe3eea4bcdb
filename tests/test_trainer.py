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
from tests.clusterobjects import settings_for
from tests.fakecluster import FakeCluster, write_executable
from tests.test_run import run_script
from tests.tiers import end_to_end
from tests.toolprocess import image_python

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
        # results.json's rows say whose failure each is as the lines do: none, they validated
        self.assertEqual({row["index"]: row["failure_kind"] for row in results["pods"]}, {0: None, 2: None})
        self.assertEqual(
            {row["index"]: lines[row["index"]]["failure_kind"] for row in results["pods"]}, {0: None, 2: None}
        )

    def test_without_a_score_the_hung_episode_fails_the_run_as_its_own(self) -> None:
        cluster = self.cluster()
        worker = self.worker([0, "hang"])
        result = self.run_tool(
            cluster, demo.EXIT_EPISODE, "--count", "2", "--worker", worker, "--episode-timeout", "2", "--timeout", "60"
        )
        self.assertIn("ran past its own deadline of 2 s", result.stderr)
        self.assertNotIn("hit its deadline", result.stderr)  # the Job's: never reached


@end_to_end
class StopAfterTest(TrainerTestCase):
    def test_the_first_k_to_end_are_kept_and_the_rest_stopped(self) -> None:
        """Episodes of different lengths: three end at once, two would take a minute. With
        --stop-after 3 the run succeeds with the three, validated, and stops the two: the Job is
        deleted (foreground) with its pods, and results.json names them."""
        cluster = self.cluster()
        worker = self.worker([0, 0.3, 0, 60, 60])
        self.run_tool(cluster, 0, "--count", "5", "--worker", worker, "--stop-after", "3", "--timeout", "120")
        results = self.results()
        self.assertEqual((results["episodes"], results["successful_episodes"], results["reward_sum"]), (3, 3, 3.0))
        self.assertEqual(sorted(row["index"] for row in results["pods"]), [0, 1, 2])
        self.assertEqual(sorted(entry["index"] for entry in results["stopped_episodes"]), [3, 4])
        self.assertEqual(results["stop_after"], 3)
        self.assertIn("--stop-after 3", results["stopped_by"])
        lines = self.lines()
        self.assertEqual(sorted(line["index"] for line in lines if demo.stands_as_reward(line)), [0, 1, 2])
        self.assertFalse([line for line in lines if line["index"] in (3, 4)])  # never ended: no verdict
        deletes = [argv[-4:] for argv in cluster.calls() if "delete" in argv and "job" in argv]
        self.assertEqual(deletes, [["job", "rollout", "--cascade=foreground", "--wait=false"]])
        self.assertTrue(all(job["metadata"].get("deletionTimestamp") for job in cluster.objects("Job")))
        pods = json.loads((self.out / "pods.json").read_text())["items"]
        self.assertEqual(len(pods), 5)  # every pod the Job had, the stopped ones too
        for row in results["pods"]:
            self.assertTrue((self.out / f"{row['pod']}.log").read_text().strip())

    def test_episodes_that_end_together_still_keep_exactly_k(self) -> None:
        """Five episodes that all end at once, --stop-after 2: whether the Job completes before the
        stop takes effect or not, exactly the first two rewards known stand, in rewards.jsonl and
        results.json, and the three others are named as stopped, with no line of their own."""
        cluster = self.cluster()
        worker = self.root / "template.py"  # the template saves a trajectory: each line waits for its file
        worker.write_text(demo.WORKER_TEMPLATE)
        tasks = self.root / "tasks.jsonl"
        tasks.write_text(
            "".join(json.dumps({"id": f"t{i}", "question": f"{i} + 1", "expected": i + 1}) + "\n" for i in range(5))
        )
        argv = ("--tasks", str(tasks), "--worker", str(worker), "--stop-after", "2", "--timeout", "120")
        self.run_tool(cluster, 0, "--count", "5", *argv)
        results = self.results()
        self.assertEqual((results["episodes"], results["successful_episodes"], results["reward_sum"]), (2, 2, 2.0))
        kept = sorted(row["index"] for row in results["pods"])
        stopped = results["stopped_episodes"]
        self.assertEqual(sorted([*kept, *(entry["index"] for entry in stopped)]), [0, 1, 2, 3, 4])
        lines = self.lines()
        self.assertEqual(sorted(line["index"] for line in lines), kept)  # no line for a stopped one
        pods = {pod["metadata"]["name"]: pod for pod in json.loads((self.out / "pods.json").read_text())["items"]}
        for entry in stopped:  # `ended` says whether its pod had ended: as pods.json shows it
            if entry["ended"]:
                self.assertEqual(pods[entry["pod"]]["status"]["phase"], "Succeeded", entry)
        self.assertIn("--stop-after 2", results["stopped_by"])

    def test_without_stop_after_the_same_run_waits_for_every_episode(self) -> None:
        """The control: the same episodes without the flag end every one (a short length here)."""
        cluster = self.cluster()
        worker = self.worker([0, 0.3, 0, 1, 1])
        self.run_tool(cluster, 0, "--count", "5", "--worker", worker)
        results = self.results()
        self.assertEqual((results["successful_episodes"], results["stopped_episodes"]), (5, []))
        self.assertIsNone(results["stopped_by"])
        self.assertFalse([argv for argv in cluster.calls() if "delete" in argv])


# Run by a subprocess: stream_batch's loop left after the first row, in a fresh interpreter.
STREAM_DRIVER = """
import json, sys
import rl_batch_demo as rbd
output, worker = sys.argv[1], sys.argv[2]
seen = []
for row in rbd.stream_batch(output, count=4, worker=worker, quiet=True):
    seen.append(row)
    if len([r for r in seen if r["reward"] is not None]) == 2:
        break
print(json.dumps(seen))
"""


# The same, from asyncio: astream_batch's loop left after the first two rewards, then aclose().
ASYNC_LEAVE_DRIVER = """
import asyncio, json, sys
import rl_batch_demo as rbd
output, worker = sys.argv[1], sys.argv[2]
async def main():
    seen = []
    rows = rbd.astream_batch(output, count=4, worker=worker, quiet=True)
    async for row in rows:
        seen.append(row)
        if len([r for r in seen if r["reward"] is not None]) == 2:
            break
    await rows.aclose()
    print(json.dumps(seen))
asyncio.run(main())
"""


@end_to_end
class StreamLeftEarlyTest(TrainerTestCase):
    def test_the_rows_yielded_stand_and_the_rest_are_stopped(self) -> None:
        self.check_left_early(STREAM_DRIVER)

    def test_astream_batch_closed_early_keeps_its_rows_too(self) -> None:
        self.check_left_early(ASYNC_LEAVE_DRIVER)

    def check_left_early(self, driver_text: str) -> None:
        cluster = self.cluster()
        worker = self.worker([0, 0, 60, 60])
        driver = self.root / "driver.py"
        driver.write_text(driver_text)
        env = {**cluster.env(), "PYTHONPATH": str(Path(demo.__file__).resolve().parent)}
        result = subprocess.run(
            [image_python(), str(driver), str(self.out), worker],
            env=env,
            cwd=str(self.root),
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        cluster.wait_idle()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        seen = json.loads(result.stdout)
        results = self.results()  # the run finished: results.json covers what ended
        self.assertEqual(sorted(row["index"] for row in results["pods"]), sorted(row["index"] for row in seen))
        self.assertEqual(sorted(entry["index"] for entry in results["stopped_episodes"]), [2, 3])
        self.assertEqual(results["stopped_by"], "stream_batch's loop was left")
        standing = [line for line in self.lines() if demo.stands_as_reward(line)]
        self.assertEqual(sorted(line["pod"] for line in standing), sorted(row["pod"] for row in seen))
        self.assertFalse([line for line in self.lines() if line["retracted"]])  # nothing yielded was taken back
        self.assertFalse((self.out / "error.json").exists())


# asyncio: astream_batch beside a second task that ticks; then arun_batch. Prints what it saw.
ASYNC_DRIVER = """
import asyncio, json, sys
import rl_batch_demo as rbd
output, worker = sys.argv[1], sys.argv[2]
ticks = 0

async def ticker():
    global ticks
    while True:
        ticks += 1
        await asyncio.sleep(0.01)

async def main():
    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    seen = []
    async for row in rbd.astream_batch(output + "-stream", count=3, worker=worker, quiet=True, tags={"policy": "v7"}):
        seen.append({"pod": row["pod"], "tags": row["tags"], "ticks": ticks})
    result = await rbd.arun_batch(output + "-run", count=2, worker=worker, quiet=True, tags={"step": 3})
    at_end = ticks
    task.cancel()
    try:
        rbd.astream_batch(output + "-bad", count="3")
    except rbd.DemoError as error:
        refused = str(error)
    print(json.dumps({"seen": seen, "ticks_at_end": at_end, "result_tags": result.results["tags"],
                      "verdicts": [v["index"] for v in result.verdicts], "refused": refused}))

asyncio.run(main())
"""


@end_to_end
class AsyncAndTagsTest(TrainerTestCase):
    def test_astream_batch_never_blocks_the_loop_and_rows_carry_the_tags(self) -> None:
        """Three episodes of different lengths streamed into an asyncio loop where a second task
        ticks: it keeps ticking while the rows are awaited (its count grows from row to row), and
        every row, results.json and the JUnit properties carry the tags as given."""
        cluster = self.cluster()
        worker = self.worker([0, 1, 2])
        driver = self.root / "driver.py"
        driver.write_text(ASYNC_DRIVER)
        env = {**cluster.env(), "PYTHONPATH": str(Path(demo.__file__).resolve().parent)}
        result = subprocess.run(
            [image_python(), str(driver), str(self.out), worker],
            env=env,
            cwd=str(self.root),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        cluster.wait_idle()
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        seen = report["seen"]
        self.assertEqual(len(seen), 3)
        ticks = [row["ticks"] for row in seen]
        self.assertGreater(ticks[0], 1)  # it ran while the batch was prepared
        self.assertEqual(ticks, sorted(set(ticks)))  # and between every two rows: never blocked
        self.assertGreater(report["ticks_at_end"], ticks[-1])  # and while arun_batch ran
        self.assertEqual([row["tags"] for row in seen], [{"policy": "v7"}] * 3)
        self.assertEqual(report["result_tags"], {"step": 3})
        self.assertEqual(report["verdicts"], [0, 1])
        self.assertEqual(report["refused"], "option count= takes an int, not '3' (str)")
        stream = Path(f"{self.out}-stream")
        results = records.written_results(self, stream)
        self.assertEqual(results["tags"], {"policy": "v7"})
        lines = records.written(self, stream / demo.REWARDS_FILE, demo.RewardLine)
        self.assertEqual({json.dumps(line["tags"]) for line in lines}, {'{"policy": "v7"}'})

    def test_the_junit_report_carries_the_tags(self) -> None:
        cluster = self.cluster()
        worker = self.worker([0])
        junit = self.root / "junit.xml"
        tags = '{"policy": "v7", "step": 12}'
        self.run_tool(cluster, 0, "--count", "1", "--worker", worker, "--tags", tags, "--junit", str(junit))
        text = junit.read_text()
        self.assertIn('<property name="tag.policy" value="v7" />', text)
        self.assertIn('<property name="tag.step" value="12" />', text)
        self.assertEqual(self.results()["tags"], {"policy": "v7", "step": 12})
        self.assertEqual([line["tags"] for line in self.lines()], [{"policy": "v7", "step": 12}])


# A worker that answers its task (a + b) and says whether it could read the expected answer.
ANSWERING_WORKER = """
import json, os, sys, time
first = time.time()
ID = os.environ["EPISODE_ID"]
INDEX = int(os.environ["JOB_COMPLETION_INDEX"])
with open(os.environ.get("RL_DEMO_TASKS", "/demo/tasks.jsonl")) as stream:
    lines = stream.read().splitlines()
task = json.loads(lines[INDEX])
seen = any("expected" in json.loads(line) for line in lines)
def line(name, **fields):
    return json.dumps(dict(fields, event=name, at=time.time(), episode_id=ID), sort_keys=True) + "\\n"
out = line("ready", process_started_at=first, imports_done_at=first)
out += line("reward", reward=0.5, answer=task["a"] + task["b"], saw_expected=seen)
sys.stdout.write(out)
with open(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"), "w") as stream:
    stream.write(out)
"""
GRADER = """
def grade(task, info):
    return 1.0 if info["answer"] == task["expected"] else 0.0
"""


@end_to_end
class GradingTest(TrainerTestCase):
    def test_private_fields_stay_out_of_the_pods_and_the_grader_sets_the_reward(self) -> None:
        cluster = self.cluster()
        worker = self.root / "worker.py"
        write_executable(worker, ANSWERING_WORKER)
        (self.root / "grader.py").write_text(GRADER)
        tasks = [{"id": "t0", "a": 1, "b": 2, "expected": 3}, {"id": "t1", "a": 2, "b": 2, "expected": 5}]
        (self.root / "tasks.jsonl").write_text("".join(json.dumps(task) + "\n" for task in tasks))
        self.run_tool(
            cluster, 0, "--worker", str(worker), "--tasks", str(self.root / "tasks.jsonl"),
            "--private-fields", "expected", "--grader", str(self.root / "grader.py"),
        )  # fmt: skip
        [configmap] = cluster.objects("ConfigMap")
        self.assertNotIn("expected", configmap["data"][demo.TASKS_KEY])
        self.assertEqual([json.loads(line) for line in configmap["data"][demo.TASKS_KEY].splitlines()],
                         [{"a": 1, "b": 2, "id": "t0"}, {"a": 2, "b": 2, "id": "t1"}])  # fmt: skip
        [job] = cluster.objects("Job")  # the worker is told which fields it cannot see
        [env] = [c["env"] for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == demo.CONTAINER_NAME]
        self.assertIn({"name": demo.PRIVATE_FIELDS_ENV, "value": "expected"}, env)
        lines = {line["task_id"]: line for line in self.lines()}
        self.assertEqual(
            {k: (v["reward"], v["pod_reward"]) for k, v in lines.items()}, {"t0": (1.0, 0.5), "t1": (0.0, 0.5)}
        )
        self.assertEqual({v["info"]["saw_expected"] for v in lines.values()}, {False})
        results = self.results()
        self.assertEqual(
            sorted((row["task_id"], row["reward"], row["pod_reward"]) for row in results["pods"]),
            [("t0", 1.0, 0.5), ("t1", 0.0, 0.5)],
        )
        self.assertEqual(
            (results["reward_sum"], results["grader"], results["private_fields"]), (1.0, "grader.py", ["expected"])
        )

    def test_a_grader_that_fails_fails_the_run_naming_the_episode(self) -> None:
        cluster = self.cluster()
        worker = self.root / "worker.py"
        write_executable(worker, ANSWERING_WORKER)
        (self.root / "grader.py").write_text("def grade(task, info):\n    return float('nan')\n")
        (self.root / "tasks.jsonl").write_text('{"a": 1, "b": 2, "expected": 3}\n')
        result = self.run_tool(
            cluster, demo.EXIT_EPISODE, "--worker", str(worker), "--tasks", str(self.root / "tasks.jsonl"),
            "--grader", str(self.root / "grader.py"),
        )  # fmt: skip
        self.assertIn("grader.py returned nan for episode rollout-0-", result.stderr)
        self.assertFalse([line for line in self.lines() if demo.stands_as_reward(line)])


class PureTablesTest(unittest.TestCase):
    """The decisions above as tables, without a cluster."""

    def line(self, reward: Any = 0.5, index: Any = 0) -> demo.RewardLine:
        row = {"round": 1, "index": index, "task_id": "t0", "pod": "rollout-0-abc", "reward": reward, "info": {},
               "attempts": 1, "lost_attempts": [], "artifacts": []}  # fmt: skip
        return demo.reward_line(row, 0.0)  # type: ignore[arg-type]

    def test_a_grader_gives_a_finite_number_or_fails_the_run(self) -> None:
        tasks = ({"id": "t0", "expected": 3},)

        def settings(grade: Any) -> demo.RunSettings:
            return settings_for(1, tasks=tasks, grade=grade, grader_name="grader.py")

        self.assertEqual(demo.graded_reward(settings(lambda task, row: task["expected"] - 2), self.line()), 1)
        seen: List[Any] = []
        demo.graded_reward(settings(lambda task, row: seen.append((task, row["reward"])) or 0.0), self.line())
        self.assertEqual(seen, [({"id": "t0", "expected": 3}, 0.5)])  # the whole task, the pod's reward
        for grade, fragment in (
            (lambda task, row: 1 / 0, "grader.py raised ZeroDivisionError('division by zero') grading episode "),
            (lambda task, row: float("nan"), "grader.py returned nan for episode rollout-0-abc (task 't0')"),
            (lambda task, row: True, "returned True"),
            (lambda task, row: "1", "returned '1'"),
            (lambda task, row: 1e16, "not a finite number of at most 1e+15 in size"),
            (lambda task, row: None, "returned None"),
        ):
            with self.subTest(fragment), self.assertRaises(demo.DemoError) as raised:
                demo.graded_reward(settings(grade), self.line())
            self.assertIn(fragment, str(raised.exception))
            self.assertEqual(raised.exception.exit_code, demo.EXIT_EPISODE)

    def test_an_episode_without_a_task_is_graded_with_an_empty_one(self) -> None:
        settings = settings_for(1, grade=lambda task, row: float(len(task)))
        self.assertEqual(demo.graded_reward(settings, self.line()), 0.0)

    def test_the_tasks_in_the_configmap_lack_the_private_fields(self) -> None:
        tasks = ({"id": "t0", "question": "1 + 1", "expected": 2, "hint": "x"},)
        settings = settings_for(1, tasks=tasks, private_fields=("expected", "hint"))
        self.assertEqual(settings.public_tasks, ({"id": "t0", "question": "1 + 1"},))
        self.assertEqual(settings.tasks, tasks)  # the client keeps them whole, for its grader
        configmap = demo.configmap_manifest("ns", "r", "print()", settings.public_tasks)
        self.assertNotIn("expected", configmap["data"][demo.TASKS_KEY])

    def test_the_episode_deadline(self) -> None:
        for timeout, given, expected in (
            (240, None, 216),
            (600, None, 570),
            (20, None, 18),
            (1, None, 1),
            (240, 30, 30),
        ):
            with self.subTest(timeout=timeout, given=given):
                settings = settings_for(1, deadline_seconds=timeout, episode_timeout=given)
                self.assertEqual(settings.episode_deadline_seconds, expected)
                spec = demo.round_job_manifest(settings, "rollout", "ns", "r", "img")["spec"]
                self.assertEqual(spec["template"]["spec"]["activeDeadlineSeconds"], expected)
                self.assertEqual(spec["activeDeadlineSeconds"], timeout)

    def test_the_job_of_scored_failures_runs_every_index(self) -> None:
        spec = demo.round_job_manifest(settings_for(4, failed_episode_reward=0.0), "rollout", "ns", "r", "img")["spec"]
        self.assertEqual((spec["completionMode"], spec["backoffLimitPerIndex"]), ("Indexed", 0))
        self.assertNotIn("maxFailedIndexes", spec)
        self.assertNotIn("backoffLimit", spec)
        both = settings_for(4, failed_episode_reward=0.0, max_failed_episodes=2, infra_retries=1)
        spec = demo.round_job_manifest(both, "rollout", "ns", "r", "img")["spec"]
        self.assertNotIn("maxFailedIndexes", spec)  # the client counts the infrastructure's losses
        self.assertEqual([rule["action"] for rule in spec["podFailurePolicy"]["rules"]], ["Count", "FailIndex"])

    def test_the_selector_of_a_stopped_rounds_ended_pods(self) -> None:
        def pod(index: Any) -> Dict[str, Any]:
            labels = {} if index is None else {demo.INDEX_LABEL: str(index)}
            return {"metadata": {"name": f"p{index}", "labels": labels}}

        select = demo.ended_pods_selector
        self.assertEqual(select("uid=u", [pod(5), pod(0), pod(2)], [pod(1)]), f"uid=u,{demo.INDEX_LABEL} in (0,2,5)")
        self.assertIsNone(select("uid=u", [pod(0), pod(None)], []))  # a pod without the label: read by name
        self.assertIsNone(select("uid=u", [pod(0)], [pod(0)]))  # a stopped replacement shares the index
        self.assertIsNone(select("uid=u", [], [pod(1)]))

    def test_the_selector_of_the_pods_no_read_brought_while_they_ran(self) -> None:
        def pod(index: Any) -> Dict[str, Any]:
            labels = {} if index is None else {demo.INDEX_LABEL: str(index)}
            return {"metadata": {"name": f"p{index}", "labels": labels}}

        select = demo.unread_pods_selector
        followed = [pod(index) for index in range(10)]
        self.assertEqual(select("uid=u", [pod(11), pod(10)], followed), f"uid=u,{demo.INDEX_LABEL} in (10,11)")
        beyond = [pod(index) for index in range(10, 10 + demo.LOG_SELECTOR_PODS + 1)]
        self.assertEqual(select("uid=u", beyond, followed), "uid=u")  # read_logs reads them by sets of indexes
        self.assertIsNone(select("uid=u", [pod(3), pod(10)], followed))  # an index read already (a replacement)
        self.assertIsNone(select("uid=u", [*beyond, pod(3)], followed))
        self.assertIsNone(select("uid=u", [pod(10), pod(None)], followed))  # without the label: by name

    def test_the_first_k_to_end_are_kept(self) -> None:
        """--stop-after K on the ended pods: those with a line first, then the others in the order
        their containers ended, until K rewards stand; the rest stopped. The race it settles: a
        Job that completed while the pod watch had shown only some pods ended, so the listing's
        pods without a line must not all be validated (results.json had 6 of --stop-after 4)."""

        def pod(name: str, finished: Any, created: str = "2026-12-02T10:00:00Z") -> Dict[str, Any]:
            state = {} if finished is None else {"terminated": {"finishedAt": finished}}
            status = {"containerStatuses": [{"state": state}]}
            return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}

        at = "2026-12-02T10:00:{:02d}Z".format
        pods = [pod("a", at(5)), pod("b", at(1)), pod("c", at(3)), pod("d", at(2)), pod("e", None), pod("f", at(9))]

        def names(kept: List[Dict[str, Any]], stopped: List[Dict[str, Any]]) -> List[List[str]]:
            return [[one["metadata"]["name"] for one in kept], [one["metadata"]["name"] for one in stopped]]

        for known, limit, expected in (
            ({"a": True, "f": True}, 2, [["a", "f"], ["b", "c", "d", "e"]]),  # K lines stand: only they
            ({"a": True}, 3, [["a", "b", "d"], ["c", "e", "f"]]),  # then the earliest ends (b, d)
            ({}, 6, [["a", "b", "c", "d", "e", "f"], []]),
            ({"c": False}, 2, [["b", "c", "d"], ["a", "e", "f"]]),  # a failure line stays, counts no reward
            ({}, 5, [["a", "b", "c", "d", "f"], ["e"]]),  # an unknown end comes last
            ({"a": True, "b": True, "c": True}, 2, [["a", "b", "c"], ["d", "e", "f"]]),  # never one dropped
        ):
            with self.subTest(known=known, limit=limit):
                self.assertEqual(names(*demo.first_to_end(pods, known, limit)), expected)
        same = [pod("y", at(1), "2026-12-02T09:00:02Z"), pod("x", at(1), "2026-12-02T09:00:01Z")]
        self.assertEqual(names(*demo.first_to_end(same, {}, 1)), [["x"], ["y"]])  # a tie: the older pod
        bad = [pod("m", "yesterday"), pod("n", at(7))]
        self.assertEqual(names(*demo.first_to_end(bad, {}, 1)), [["n"], ["m"]])  # unreadable: unknown

    def test_api_errors_name_the_keyword(self) -> None:
        flags = {"timeout": "--timeout", "stop_after": "--stop-after", "allow_large": "--allow-large"}
        for message, expected in (
            ("argument --timeout: '0' must be at least 1", "option timeout=: '0' must be at least 1"),
            ("--stop-after 9 is more than the 5 episodes", "stop_after=9 is more than the 5 episodes"),
            ("pass --allow-large for up to 1000", "pass allow_large=True for up to 1000"),
            ("give a shorter --timeout or a longer one", "give a shorter timeout= or a longer one"),
            ("kubectl --context=x says", "kubectl --context=x says"),  # not one of run's flags: as it is
        ):
            with self.subTest(message):
                self.assertEqual(demo.keyword_message(message, flags, ["allow_large"]), expected)


if __name__ == "__main__":
    unittest.main()
