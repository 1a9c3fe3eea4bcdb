"""The Python API (`import rl_batch_demo as rbd`: run_batch, stream_batch; docs/trainer.md).

In-process against call plans: it makes exactly the calls `run` makes, returns results.json and
rewards.jsonl's rows, raises DemoError with the command line's exit codes, prints nothing on
stdout, touches no signal handler, runs from any thread. End to end through the fake cluster: a
small driver with its own SIGINT and SIGTERM handlers, interrupted mid-run, cleans up per the
--cleanup policy and keeps its handlers."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import signal
import subprocess
import tempfile
import textwrap
import threading
import time
import unittest
import unittest.mock
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List

import rl_batch_demo as rbd
from tests.callplan import CallPlanTestCase, RunPlan
from tests.clusterobjects import Batch
from tests.fakecluster import ENVIRONMENT, FakeCluster
from tests.test_readme_help import code_blocks
from tests.test_stream import SLEEPING_WORKER
from tests.tiers import end_to_end
from tests.toolprocess import image_python, tool_command, tool_environment

# A worker whose task may name a file to wait for (`until`, up to 30 s) before it answers.
GATED_WORKER = SLEEPING_WORKER.replace(
    '    time.sleep(task["sleep"])\n',
    '    for _ in range(3000 if task.get("until") else 0):\n'
    '        if __import__("os").path.exists(task["until"]):\n'
    "            break\n"
    "        time.sleep(0.01)\n",
)
assert GATED_WORKER != SLEEPING_WORKER, "SLEEPING_WORKER changed: patch it anew"
ROOT = Path(rbd.__file__).resolve().parent


class ApiCallPlanTest(CallPlanTestCase):
    def quietly(self, call: Callable[[], Any]) -> Any:
        """`call()` with stdout and stderr captured; stdout must stay empty, whatever happens."""
        stdout, stderr = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                return call()
        finally:
            self.assertEqual(stdout.getvalue(), "", "the API printed on stdout")
            self.stderr = stderr.getvalue()

    def test_run_batch_makes_runs_calls_and_returns_its_files(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())  # exactly the calls of `run --count 2`
        handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
        result = self.quietly(lambda: rbd.run_batch(self.out(), count=2))
        self.assertEqual((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)), handlers)
        self.assertEqual(result.output, self.out())
        self.assertEqual(result.results, self.results())
        written = [json.loads(line) for line in (self.out() / rbd.REWARDS_FILE).read_text().splitlines()]
        self.assertEqual(result.rewards, written)
        self.assertEqual([row["reward"] for row in result.rewards], [1, 1])
        self.assertEqual(result.verdicts, result.rewards)  # no retraction: each pod's one row is its verdict
        self.assertIn(f"Test namespace: {plan.batch.manifest()['metadata']['namespace']}", self.stderr)

    def test_options_are_runs_flags_with_underscores(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run(), *plan.cleanup())
        result = self.quietly(
            lambda: rbd.run_batch(
                self.out(),
                count=2,
                quiet=True,
                cleanup="always",
                threshold={"batch_to_all_ready_seconds": 100},
                max_failed_episodes=None,  # None: left out, as if not given
                junit=str(self.root / "junit.xml"),
            )
        )
        self.assertEqual(result.results["reward_sum"], 2)
        self.assertTrue((self.root / "junit.xml").exists())
        self.assertNotIn(" elapsed, ", self.stderr)  # quiet: no progress line

    def test_a_failed_episode_raises_demo_error_1(self) -> None:
        plan = RunPlan(Batch(count=2))
        episode = plan.batch.episodes[1]
        episode.phase, episode.exit_code = "Failed", 1
        self.expect(*plan.run())
        with self.assertRaises(rbd.DemoError) as raised:
            self.quietly(lambda: rbd.run_batch(self.out(), count=2, quiet=True))
        self.assertEqual(raised.exception.exit_code, rbd.EXIT_EPISODE)
        self.assertIn("the pod ended in phase Failed", str(raised.exception))
        self.assertEqual(self.read_json("error.json")["exit_code"], rbd.EXIT_EPISODE)

    def test_a_run_time_error_gives_its_advice_in_keywords(self) -> None:
        """An error of the run itself, in the caller's words: the advice names keywords, while
        a command it quotes (the tool's own, kubectl's) keeps the flags one types."""
        tool = rbd.invoked_as()
        message = (
            "episode x: exit 1 (--max-failed-episodes sets aside only the infrastructure's; "
            f"--failed-episode-reward R scores it); clean up with {tool} cleanup --output DIR; "
            "or kubectl --context c get pods --output wide"
        )
        worded = rbd.api_words(message)
        self.assertIn("(max_failed_episodes= sets aside only", worded)
        self.assertIn("failed_episode_reward=R scores it", worded)
        self.assertIn(f"{tool} cleanup --output DIR;", worded)
        self.assertIn("kubectl --context c get pods --output wide", worded)
        self.assertEqual(rbd.api_words("no flag here"), "no flag here")

    def test_a_bug_raises_demo_error_3_with_its_cause(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        with (
            unittest.mock.patch.object(rbd, "assemble_results", side_effect=ZeroDivisionError("oops")),
            self.assertRaises(rbd.DemoError) as raised,
        ):
            self.quietly(lambda: rbd.run_batch(self.out(), count=2, quiet=True))
        self.assertEqual(raised.exception.exit_code, rbd.EXIT_CLUSTER)
        self.assertIsInstance(raised.exception.__cause__, ZeroDivisionError)
        self.assertEqual(self.read_json("error.json")["exit_code"], rbd.EXIT_CLUSTER)

    def test_usage_errors_raise_demo_error_2_before_any_call(self) -> None:
        tasks = self.root / "tasks.jsonl"
        tasks.write_text('{"id": 1}\n{"id": 2}\n')
        for options, fragment in (
            ({"cuont": 3}, "unknown option cuont; did you mean count?"),
            ({"max_failed": 1}, "did you mean max_failed_episodes?"),
            ({"help": True}, "unknown option help"),
            ({"count": 0}, "option count=: '0' must be at least 1"),
            ({"count": "3"}, "option count= takes an int, not '3' (str)"),
            ({"timeout": 2.5}, "option timeout= takes an int, not 2.5 (float)"),
            ({"episode_timeout": 900}, "episode_timeout=900 is longer than timeout=240"),
            ({"count": 25}, "count=25 is more than 20; pass allow_large=True"),
            ({"quiet": "yes"}, "option quiet takes True or False, not 'yes'"),
            ({"image": True}, "option image takes a value, not True"),
            ({"cleanup": "sometimes"}, "invalid choice: 'sometimes'"),
            ({"threshold": {"no_such_figure": 1}}, "unknown metric 'no_such_figure'"),
            ({"tasks": [{"id": 1}, "two"]}, "tasks[1] is str, not a dict"),
            ({"tasks": [{"x": float("nan")}]}, "tasks[0] cannot be written as JSON"),
            ({"tasks": []}, "is empty"),
            ({"tasks": str(tasks), "count": 3}, "count=3 does not match the 2 tasks"),
            ({"private_fields": "expected"}, "private_fields= needs tasks=: it keeps fields of the tasks out of"),
            ({"tasks": [{"q": 1, "expected": 2}], "private_fields": "expcted"}, "names 'expcted', which no task of"),
        ):
            with self.subTest(options=options):
                with self.assertRaises(rbd.DemoError) as raised:
                    self.quietly(lambda: rbd.run_batch(self.out(), **options))  # noqa: B023 - called at once
                self.assertEqual(raised.exception.exit_code, rbd.EXIT_USAGE)
                self.assertIn(fragment, str(raised.exception))
                self.assertNotRegex(str(raised.exception), r"--[a-z]", "an API error names the keyword, not the flag")
                self.assertEqual(self.stderr, "")
                self.assertFalse(self.out().exists())
        with self.assertRaisesRegex(rbd.DemoError, r"option output= takes a str or a path, not 3 \(int\)"):
            rbd.run_batch(3)
        self.out().mkdir()  # an earlier run's: refused at the call, in the caller's words
        with self.assertRaises(rbd.DemoError) as raised:
            rbd.stream_batch(self.out())
        self.assertEqual(raised.exception.exit_code, rbd.EXIT_USAGE)
        self.assertTrue(str(raised.exception).endswith("never overwritten); choose a new output="), raised.exception)
        self.assertEqual(self.stub.calls(), [])

    def test_a_list_of_tasks_is_a_tasks_file(self) -> None:
        tasks = [{"id": "a", "prompt": "fix it"}, {"id": "b", "nested": {"n": [1, 2.5]}}]
        path = self.root / "tasks.jsonl"
        path.write_text("".join(json.dumps(task) + "\n" for task in tasks))
        listed = self.quietly(lambda: rbd.run_batch(self.out("listed"), tasks=tasks, dry_run=True))
        self.quietly(lambda: rbd.run_batch(self.out("file"), tasks=str(path), dry_run=True))
        self.assertEqual((listed.results, listed.rewards), (None, []))  # a dry run writes manifests only
        for name in ("01-configmap.json", "02-job-rollout.json"):
            self.assertEqual(self.read_json(name, "listed"), self.read_json(name, "file"), name)
        configmap = self.read_json("01-configmap.json", "listed")
        self.assertEqual([json.loads(line) for line in configmap["data"][rbd.TASKS_KEY].splitlines()], tasks)

    def test_run_batch_from_another_thread(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        outcome: Dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = rbd.run_batch(self.out(), count=2, quiet=True)
            except BaseException as error:
                outcome["error"] = error

        with contextlib.redirect_stderr(io.StringIO()):
            thread = threading.Thread(target=work)
            thread.start()
            thread.join(60)
        self.assertNotIn("error", outcome)
        self.assertEqual(outcome["result"].results["reward_sum"], 2)

    def test_stream_batch_yields_the_rows_then_returns_the_result(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        with self.assertRaises(rbd.DemoError) as raised:
            rbd.stream_batch(self.out(), cuont=2)  # checked at the call, before any row is asked for
        self.assertEqual(raised.exception.exit_code, rbd.EXIT_USAGE)

        def consume() -> Any:
            stream = rbd.stream_batch(self.out(), count=2, quiet=True)
            rows: List[Any] = []
            while True:
                try:
                    rows.append(next(stream))
                except StopIteration as finished:
                    return rows, finished.value

        rows, result = self.quietly(consume)
        self.assertEqual(rows, result.rewards)
        self.assertEqual([row["pod"] for row in rows], [episode.name for episode in plan.batch.episodes])
        self.assertEqual(result.results["reward_sum"], 2)

    def test_stream_batch_raises_the_runs_error_after_its_rows(self) -> None:
        plan = RunPlan(Batch(count=2))
        episode = plan.batch.episodes[0]
        episode.phase, episode.exit_code = "Failed", 1
        self.expect(*plan.run())
        rows: List[Any] = []
        with self.assertRaises(rbd.DemoError) as raised:
            self.quietly(lambda: rows.extend(rbd.stream_batch(self.out(), count=2, quiet=True)))
        self.assertEqual(raised.exception.exit_code, rbd.EXIT_EPISODE)
        self.assertEqual(rows, rbd.read_reward_lines(self.out() / rbd.REWARDS_FILE))  # every row, as written
        last = {row["pod"]: row for row in rows}
        self.assertEqual(sorted(last), sorted(episode.name for episode in plan.batch.episodes))
        self.assertTrue(all(row["failure"] for row in last.values()), "no reward stands after a failed run")


# A trainer of its own: its own SIGINT and SIGTERM handlers, then the API against the fake cluster.
# argv: the output directory, the report file, the API call ("run" or "stream") and its options
# (JSON). The report says what the call returned or raised and whether the handlers stayed.
DRIVER = textwrap.dedent(
    """
    import json, signal, sys, time
    import rl_batch_demo as rbd

    class Terminated(BaseException):  # what this trainer's SIGTERM handler raises
        pass

    def on_sigint(signum, frame):
        raise KeyboardInterrupt("the trainer's Ctrl-C")

    def on_sigterm(signum, frame):
        raise Terminated("the trainer's SIGTERM")

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigterm)
    output, report_file, call, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    report = {"rows": []}
    try:
        if call == "run":
            result = rbd.run_batch(output, **options)
            report["rewards"] = [row["reward"] for row in result.rewards]
            report["reward_sum"] = result.results["reward_sum"]
        else:
            gate = options.pop("gate", None)  # a file written on the first row (a slow episode waits for it)
            for row in rbd.stream_batch(output, **options):
                report["rows"].append({"pod": row["pod"], "reward": row["reward"], "at": time.time()})
                if gate:
                    open(gate, "w").close()
    except BaseException as error:
        report["raised"] = [type(error).__name__, str(error), getattr(error, "exit_code", None)]
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    report["handlers_kept"] = [handlers[0] is on_sigint, handlers[1] is on_sigterm]
    with open(report_file, "w") as stream:
        json.dump(report, stream)
    """
)


class VerdictsTest(unittest.TestCase):
    """BatchResult.verdicts: each pod's last row, in index order, whatever order the pods ended in."""

    def test_each_pods_last_row_in_index_order(self) -> None:
        def row(index: Any, pod: str, reward: Any, retracted: bool = False, round_number: int = 1) -> Dict[str, Any]:
            failure = "its log disagrees" if retracted else None
            return {"round": round_number, "index": index, "pod": pod, "reward": reward, "retracted": retracted,
                    "failure": failure}  # fmt: skip

        rows = [row(2, "c", 1), row(0, "a", 1), row(1, "b", 0.5), row(0, "a", None, True), row(0, "z", 1, False, 2),
                row(None, "y", None)]  # fmt: skip
        result = rbd.BatchResult(Path("out"), None, rows)  # type: ignore[arg-type]
        self.assertEqual([(r["round"], r["pod"]) for r in result.verdicts], [(1, "a"), (1, "b"), (1, "c"), (1, "y"),
                                                                            (2, "z")])  # fmt: skip
        self.assertTrue(result.verdicts[0]["retracted"])  # a's last row


class FakeClusterCase(unittest.TestCase):
    """A fresh fake cluster and a scratch directory per test; Python run in it as a trainer would."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py
    FAST: ClassVar[Dict[str, Any]] = {"stand_in_worker": True}  # fast: the pods run no tests, and earn reward 1

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-api-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)
        self.cluster = FakeCluster(self.root / "cluster", faults=self.FAST)
        self.addCleanup(self.cluster.close)
        self.system_namespaces = {ns["metadata"]["name"] for ns in self.cluster.objects("Namespace")}

    def environment(self) -> Dict[str, str]:
        env = {**self.cluster.env(), "PYTHONPATH": str(ROOT)}
        env.setdefault("HOME", ENVIRONMENT.get("HOME", str(self.root)))
        return env

    def namespaces(self) -> List[str]:
        return sorted({ns["metadata"]["name"] for ns in self.cluster.objects("Namespace")} - self.system_namespaces)

    def driver(self, call: str, **options: Any) -> subprocess.Popen[str]:
        (self.root / "driver.py").write_text(DRIVER)
        argv = [str(self.root / "out"), str(self.root / "report.json"), call, json.dumps(options)]
        return subprocess.Popen(
            [image_python(), str(self.root / "driver.py"), *argv],
            cwd=str(self.root),
            env=self.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, process: subprocess.Popen[str]) -> Dict[str, Any]:
        stdout, stderr = process.communicate(timeout=120)
        self.stderr = stderr
        self.assertEqual(process.returncode, 0, stderr)
        self.assertEqual(stdout, "", "the API printed on stdout")
        self.assertNotIn("Traceback", stderr)
        report: Dict[str, Any] = json.loads((self.root / "report.json").read_text())
        self.assertEqual(report["handlers_kept"], [True, True], "the trainer's signal handlers were replaced")
        return report

    def interrupt_once_running(self, process: subprocess.Popen[str], signal_number: int) -> None:
        """Send the signal once the Job's pods run (the pod watch has started)."""
        deadline = time.monotonic() + 60
        while not any("pods" in argv and "--watch" in argv for argv in self.cluster.calls()):
            self.assertIsNone(process.poll(), "the run ended before it could be interrupted")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        time.sleep(0.3)
        process.send_signal(signal_number)


@end_to_end
class TrainerDriverTest(FakeClusterCase):
    """The driver above, end to end through the fake cluster, as a trainer runs the API."""

    def test_a_trainer_with_its_own_handlers_runs_a_batch(self) -> None:
        report = self.finish(self.driver("run", count=2, cleanup="always", quiet=True))
        self.assertEqual((report["rewards"], report["reward_sum"]), ([1, 1], 2))
        self.assertEqual(self.namespaces(), [])

    def test_ctrl_c_in_the_trainer_cleans_up_per_policy(self) -> None:
        """The trainer's own SIGINT handler raises KeyboardInterrupt mid-run: diagnostics are
        saved, --cleanup always deletes the namespace, then the interruption reaches the trainer."""
        self.cluster.set_faults({**self.FAST, "episode_seconds": 30})
        process = self.driver("run", count=2, cleanup="always", quiet=True)
        self.interrupt_once_running(process, signal.SIGINT)
        report = self.finish(process)
        name, message, _ = report["raised"]
        self.assertEqual(name, "KeyboardInterrupt")
        self.assertIn(f"interrupted; diagnostics are in {self.root / 'out'}", message)
        for saved in ("receipt.json", "job.json", "pods.json", "events.txt", "error.json"):
            self.assertTrue((self.root / "out" / saved).exists(), saved)
        self.assertEqual(json.loads((self.root / "out" / "error.json").read_text())["exit_code"], 130)
        self.assertEqual(self.namespaces(), [])

    def test_a_trainers_own_sigterm_exception_keeps_the_namespace_under_on_success(self) -> None:
        """Whatever the trainer's handler raises stops the run as Ctrl-C does, then is raised as
        it is; --cleanup on-success keeps the interrupted run's namespace and names the command."""
        self.cluster.set_faults({**self.FAST, "episode_seconds": 30})
        process = self.driver("stream", count=2, cleanup="on-success", quiet=True)
        self.interrupt_once_running(process, signal.SIGTERM)
        report = self.finish(process)
        self.assertEqual(report["raised"][:2], ["Terminated", "the trainer's SIGTERM"])
        [namespace] = self.namespaces()
        self.assertIn(f"namespace {namespace} is kept; delete it with: ", self.stderr)
        self.assertTrue((self.root / "out" / "pods.json").exists())


@end_to_end
class StreamedToTheTrainerTest(FakeClusterCase):
    """stream_batch hands each row over as it is written: with two episodes of different lengths,
    the first row reaches the trainer before the second pod has ended."""

    FAST: ClassVar[Dict[str, Any]] = {}  # the worker's own sleeps make the lengths

    def test_the_first_row_arrives_while_the_other_episode_still_runs(self) -> None:
        """The slow episode cannot end before the trainer holds the quick one's row: it waits for
        the file the driver writes on its first row (up to 30 s: if the row came only after the
        Job, the slow one would end first and the order below fail). So the order is proven by
        construction, not by a margin a loaded machine can eat."""
        (self.root / "worker.py").write_text(GATED_WORKER)
        gate = self.root / "first-row"
        tasks = [
            {"id": "quick", "question": "1 + 1", "expected": 2},
            {"id": "slow", "until": str(gate), "question": "0 + 0", "expected": 0},
        ]
        (self.root / "tasks.jsonl").write_text("".join(json.dumps(task) + "\n" for task in tasks))
        report = self.finish(
            self.driver("stream", gate=str(gate), worker="worker.py", tasks="tasks.jsonl", cleanup="always", quiet=True)
        )
        self.assertEqual([row["reward"] for row in report["rows"]], [1, 1])
        results = json.loads((self.root / "out" / "results.json").read_text())
        ended = {
            name: r["terminated_at"] for name, r in self.cluster.pod_records(results["namespace"], "rollout").items()
        }
        first, second = report["rows"]
        self.assertLess(first["at"], ended[second["pod"]])  # in the trainer's hands while the slow one ran
        self.assertLess(ended[first["pod"]], first["at"])
        self.assertEqual(self.namespaces(), [])


class TrainerDocTest(FakeClusterCase):
    """docs/trainer.md's Python blocks, run as they are against the fake cluster. README.md's
    loop runs in the fast tier too: the one run of astream_batch, stop_after and a client-side
    grader through a cluster there (the end-to-end tier has tests/test_trainer.py for those)."""

    def blocks(self) -> List[str]:
        text = (ROOT / "docs" / "trainer.md").read_text(encoding="utf-8")
        return ["\n".join(lines) for language, lines in code_blocks(text) if language == "python"]

    def run_block(self, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [image_python(), "-c", code],
            cwd=str(self.root),
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def shown_template(self) -> str:
        shown = subprocess.run(  # the file as a module, from its cached bytecode (tests/toolprocess.py)
            tool_command("show-worker", "--template"), env=tool_environment(ENVIRONMENT),
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return shown.stdout

    @end_to_end  # docs/trainer.md's sync loop and stream; run_batch and stream_batch in-process above
    def test_the_trainer_loop(self) -> None:
        loop, stream = self.blocks()[:2]
        result = self.run_block(loop)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "step 0: 4 rewards, mean 1.00\nstep 1: 4 rewards, mean 1.00\n")
        self.assertEqual(json.loads((self.root / "runs/step-1/results.json").read_text())["tasks"], 4)
        self.assertEqual(self.namespaces(), [])
        result = self.run_block("import rl_batch_demo as rbd\n" + stream)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([line.split()[1] for line in result.stdout.splitlines()], ["1"] * 10)
        self.assertEqual(self.namespaces(), [])

    def test_the_readmes_trainer_loop(self) -> None:
        """README.md's "Feeding a trainer" block, async: in each step the first 4 of 6 episodes to
        finish, graded on the client from the task's private field, each with the step's tags.
        docs/trainer.md shows the same loop (its blank lines aside): the same program, so running
        one runs both (each run starts 12 pods on the fake cluster)."""
        text = (ROOT / "README.md").read_text(encoding="utf-8")
        [readme] = ["\n".join(lines) for language, lines in code_blocks(text) if language == "python"]
        loop = self.blocks()[2]
        self.assertEqual([line for line in loop.splitlines() if line], [line for line in readme.splitlines() if line])
        self.assertEqual(ast.dump(ast.parse(loop)), ast.dump(ast.parse(readme)))
        self.check_async_loop(readme)

    def check_async_loop(self, loop: str) -> None:
        # my_worker.py as the README writes it: `show-worker --template > my_worker.py`, run as it is
        # (a cluster without the stand-in worker, which would replace it and report no answer)
        (self.root / "my_worker.py").write_text(self.shown_template())
        self.cluster.close()
        self.cluster = FakeCluster(self.root / "template-cluster")
        self.addCleanup(self.cluster.close)
        self.system_namespaces = {ns["metadata"]["name"] for ns in self.cluster.objects("Namespace")}
        result = self.run_block(loop)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = [tuple(line.split()) for line in result.stdout.splitlines()]
        for step in range(2):
            mine = [row for row in rows if row[0] == str(step)]
            # stop_after=4: exactly the first 4 rewards known, whenever the others ended
            self.assertEqual(len(mine), 4, rows)
            self.assertEqual({(reward, tag) for _, _, reward, tag in mine}, {("1.0", str(step))})
            self.assertEqual(len({task for _, task, _, _ in mine}), len(mine))
            results = json.loads((self.root / f"runs/step-{step}/results.json").read_text())
            # the other two are named, whether they still ran, had not started or ended after the 4th
            stopped = results["stopped_episodes"]
            self.assertEqual(results["successful_episodes"], 4, results)
            self.assertEqual(len(stopped), 2, results)
            self.assertFalse({entry["index"] for entry in stopped} & {row["index"] for row in results["pods"]})
            self.assertEqual(results["private_fields"], ["expected"])
        self.assertEqual(self.namespaces(), [], result.stdout + result.stderr)

    def test_the_chinese_readmes_loop_is_the_same_code(self) -> None:
        """README.zh-CN.md's loop differs from the one run above only in its comments."""

        def code(name: str) -> List[str]:
            text = (ROOT / name).read_text(encoding="utf-8")
            [loop] = [lines for language, lines in code_blocks(text) if language == "python"]
            return [line.split("  #")[0].rstrip() for line in loop]

        self.assertEqual(code("README.zh-CN.md"), code("README.md"))


if __name__ == "__main__":
    unittest.main()
