"""The embedded worker's grading, run for real: the reward comes from the runner's report on its
private pipe, never from the test process's exit code or output alone, and every failure still
ends in one reward event with a reason."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import tempfile
import textwrap
import time
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional

import rl_batch_demo as demo
from tests.fakecluster import ENVIRONMENT, FakeCluster
from tests.fakekube.faults import MAX_TERMINATION_MESSAGE  # the kubelet's limit
from tests.test_run import run_script
from tests.tiers import end_to_end
from tests.toolprocess import image_python

MAIN_GUARD = 'if __name__ == "__main__":\n'
FIXED = "def shipping(total):\n    return 0 if total >= 99 else 10\n"
ALL_PASSED = {
    "test_shipping.ShippingTest.test_below": "passed",
    "test_shipping.ShippingTest.test_boundary": "passed",
    "test_shipping.ShippingTest.test_above": "passed",
}

FORGED_TESTS = [[name, "passed"] for name in ALL_PASSED]
BUGGY = "def shipping(total):\n    return 0 if total > 99 else 10\n"  # shipping.py before the agent acts


# Test classes that pass whatever the code does, named as the built-in ones.
PASSING_TESTS = (
    "import unittest\n\n\nclass ShippingTest(unittest.TestCase):\n"
    "    def test_below(self):\n        pass\n\n"
    "    def test_boundary(self):\n        pass\n\n"
    "    def test_above(self):\n        pass\n"
)
# Bytecode the import system takes for a source file: a timestamp .pyc carrying the file's own
# mtime and size (what py_compile writes; `-B` stops writing bytecode, not reading it), or an
# unchecked hash-based one (PEP 552), which is used without looking at the source at all.
PLANT_PYC = """
import importlib.util, marshal, os


def plant_pyc(path, source, checked=True):
    stat = os.stat(path)
    if checked:
        fields = (0, int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)
    else:
        fields = (1, 0, 0)  # flags: hash-based, unchecked; the hash is never compared
    header = b"".join(field.to_bytes(4, "little") for field in fields)
    pyc = importlib.util.cache_from_source(str(path))
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    with open(pyc, "wb") as stream:
        stream.write(importlib.util.MAGIC_NUMBER + header + marshal.dumps(compile(source, str(path), "exec")))
"""
# Code that puts the fixed function in sys.modules as `shipping` wherever Python runs it.
SHADOW_SHIPPING = (
    f"import sys, types; sys.modules['shipping'] = m = types.ModuleType('shipping'); exec({FIXED!r}, m.__dict__)"
)
# Agent actions that leave shipping.py's bug in place and put something in the workspace that
# the runner's import of a graded module could find instead. The first four earned reward 1
# before the runner compiled both modules itself; the last two never did (-I: the workspace is
# no site directory and is not on sys.path at start-up) and stay as guards.
SHADOWS = {
    "a test_shipping/ package": (
        'package = WORKSPACE / "test_shipping"\n'
        "package.mkdir()\n"
        f'(package / "__init__.py").write_text({PASSING_TESTS!r})\n'
    ),
    "a planted test_shipping .pyc with the test file's mtime and size": (
        f'{PLANT_PYC}\nplant_pyc(WORKSPACE / "test_shipping.py", {PASSING_TESTS!r})\n'
    ),
    "a shipping/ package with the fix beside the unfixed shipping.py": (
        f'package = WORKSPACE / "shipping"\npackage.mkdir()\n(package / "__init__.py").write_text({FIXED!r})\n'
    ),
    "a planted unchecked shipping .pyc with the fix": (
        f'{PLANT_PYC}\nplant_pyc(WORKSPACE / "shipping.py", {FIXED!r}, checked=False)\n'
    ),
    "a .pth file in the workspace": f'WORKSPACE.joinpath("shadow.pth").write_text({SHADOW_SHIPPING + chr(10)!r})\n',
    "sitecustomize and usercustomize in the workspace": (
        'for name in ("sitecustomize.py", "usercustomize.py"):\n'
        f"    WORKSPACE.joinpath(name).write_text({SHADOW_SHIPPING + chr(10)!r})\n"
    ),
}  # each an agent action's body but its last line, `return source`


def adding_tests(extra: str) -> str:
    """An agent action: the fix, plus code under test that calls `extra(module)` (defined in
    `extra`) on the test module just before the runner loads the tests from it (in-process, as
    any code under test can)."""
    code = (
        "\nimport sys, unittest\n"
        "_load = unittest.TestLoader.loadTestsFromModule\n"
        "def _load_more(self, module, *args, **kwargs):\n"
        "    extra(module)\n"
        "    return _load(self, module, *args, **kwargs)\n"
        "unittest.TestLoader.loadTestsFromModule = _load_more\n"
    )
    return f"return source.replace('total > 99', 'total >= 99') + {code + textwrap.dedent(extra)!r}"


def worker_source(agent_action: Optional[str]) -> str:
    """WORKER_SOURCE, with agent_action redefined by `agent_action` (a function body) when given."""
    source = demo.WORKER_SOURCE
    if agent_action is None:
        return source
    if source.count(MAIN_GUARD) != 1:
        raise AssertionError("the worker no longer ends with one __main__ guard; update worker_source()")
    body = textwrap.indent(textwrap.dedent(agent_action).strip("\n"), "    ")
    replacement = f"def agent_action(source):\n{body}\n\n\n{MAIN_GUARD}"
    return source.replace(MAIN_GUARD, replacement)


class Episode:
    def __init__(
        self, result: subprocess.CompletedProcess[str], termination: str, seconds: float, workspace: Path
    ) -> None:
        self.result = result
        self.workspace = workspace  # gone once the episode has ended: a name to compare with
        self.termination = termination
        self.seconds = seconds
        self.events: List[Dict[str, Any]] = demo.parse_events(result.stdout)
        rewards = [event for event in self.events if event["event"] == "reward"]
        if len(rewards) != 1:
            raise AssertionError(f"expected one reward event, got {self.events}; stderr: {result.stderr}")
        self.reward = rewards[0]


class WorkerGradeTest(unittest.TestCase):
    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def run_worker(self, agent_action: Optional[str] = None, **env: str) -> Episode:
        with tempfile.TemporaryDirectory() as root:
            workspace = Path(root, "workspace")
            workspace.mkdir()
            script = Path(root, "episode.py")
            script.write_text(worker_source(agent_action))
            termination = Path(root, "termination-log")
            full_env = dict(
                ENVIRONMENT,
                EPISODE_ID="rollout-grade",
                RL_DEMO_WORKSPACE=str(workspace),
                RL_DEMO_TERMINATION_LOG=str(termination),
                **env,
            )
            started = time.monotonic()
            result = subprocess.run(
                [image_python(), "-B", str(script)], env=full_env, capture_output=True, text=True, timeout=60
            )
            seconds = time.monotonic() - started
            return Episode(result, termination.read_text() if termination.exists() else "", seconds, workspace)

    def assert_reward_zero(self, episode: Episode, reason: str) -> None:
        self.assertEqual(episode.reward["reward"], 0, episode.reward)
        self.assertIn(reason, episode.reward.get("reason", ""), episode.reward)
        self.assertNotEqual(episode.result.returncode, 0)
        self.assert_termination_matches(episode)

    def assert_termination_matches(self, episode: Episode) -> None:
        self.assertLessEqual(len(episode.termination.encode()), MAX_TERMINATION_MESSAGE)
        self.assertEqual(
            demo.comparable_events(demo.parse_events(episode.termination)), demo.comparable_events(episode.events)
        )

    def modules(self, episode: Episode, code: str) -> Dict[str, Dict[str, str]]:
        """The reward event's `modules` when the runner graded `code` against its own tests."""
        graded = {"origin": str(episode.workspace / "shipping.py"), "sha256": hashlib.sha256(code.encode()).hexdigest()}
        return {"shipping": graded, "test_shipping": demo.BUILTIN_TEST_MODULE}

    def test_normal_run_rewards_the_three_passed_tests(self) -> None:
        episode = self.run_worker()
        self.assertEqual(episode.result.returncode, 0, episode.result.stderr)
        self.assertEqual([event["event"] for event in episode.events], ["ready", "reward"])
        reward = episode.reward
        self.assertEqual((reward["reward"], reward["tests_exit"]), (1, 0))
        self.assertNotIn(reward["baseline_exit"], (0, None))
        self.assertEqual(reward["tests"], ALL_PASSED)
        self.assertEqual(reward["modules"], self.modules(episode, FIXED))  # the client's BUILTIN_TEST_MODULE too
        self.assertNotIn("reason", reward)
        self.assertIn("Ran 3 tests", reward["tests_output"])
        self.assert_termination_matches(episode)
        # the pod's command is this worker, no launcher: it ends its log with the end line itself
        self.assertEqual(episode.result.stdout.splitlines()[-1], demo.LOG_END_LINE.decode())
        self.assertEqual(episode.result.stdout.count(demo.LOG_END_LINE.decode()), 1)

    def test_a_failed_episode_ends_its_log_with_the_end_line_too(self) -> None:
        episode = self.run_worker("return source")  # the bug left in place
        self.assert_reward_zero(episode, "ShippingTest.test_boundary failed")
        self.assertEqual(episode.result.stdout.splitlines()[-1], demo.LOG_END_LINE.decode())

    def test_under_the_launcher_the_end_line_is_left_to_it(self) -> None:
        # a copy of the built-in worker given as --worker runs under the launcher, which prints
        # the end line after the files it sends: the worker must not print one before them
        episode = self.run_worker(RL_DEMO_LAUNCHED="1")
        self.assertEqual(episode.reward["reward"], 1, episode.reward)
        self.assertNotIn(demo.LOG_END_LINE.decode(), episode.result.stdout)

    def test_os_exit_at_import_earns_nothing(self) -> None:
        episode = self.run_worker('return source.replace("total > 99", "total >= 99") + "\\nimport os; os._exit(0)\\n"')
        self.assertEqual(episode.reward["tests_exit"], 0)
        self.assertEqual(episode.reward["tests"], {})
        self.assert_reward_zero(episode, "tests exited 0 but the runner reported nothing")

    def test_sys_exit_with_fake_output_earns_nothing(self) -> None:
        episode = self.run_worker(
            """
            fake = "...\\n" + "-" * 70 + "\\nRan 3 tests in 0.000s\\n\\nOK\\n"
            return source + "import sys\\nsys.stderr.write(%r)\\nsys.exit(0)\\n" % fake
            """
        )
        self.assertIn("Ran 3 tests", episode.reward["tests_output"])
        self.assert_reward_zero(episode, "runner error: SystemExit")

    @unittest.skipUnless(Path("/proc/self/fd").is_dir(), "needs /proc/self/fd")
    def test_report_forged_on_the_pipe_without_the_nonce_earns_nothing(self) -> None:
        episode = self.run_worker(
            """
            names = ("test_below", "test_boundary", "test_above")
            tests = [["test_shipping.ShippingTest." + name, "passed"] for name in names]
            report = {"nonce": "guess", "tests": tests, "error": None}
            forge = (
                "import json, os\\n"
                "for fd in os.listdir('/proc/self/fd'):\\n"
                "    if int(fd) > 2:\\n"
                "        try:\\n"
                "            os.write(int(fd), json.dumps(%r).encode())\\n"
                "        except OSError:\\n"
                "            pass\\n"
                "os._exit(0)\\n"
            ) % report
            return source + forge
            """
        )
        self.assertEqual(episode.reward["tests_exit"], 0)
        self.assert_reward_zero(episode, "wrong nonce")

    def test_workspace_module_cannot_shadow_the_runner_imports(self) -> None:
        # A json.py in the workspace would run before the runner reads its nonce, if the workspace
        # were on sys.path at start-up: it could read the nonce itself and forge a valid report.
        shadow = textwrap.dedent(
            f"""
            import os, sys
            nonce = sys.stdin.readline().strip()
            report = '{{"nonce": "%s", "tests": %s, "error": null}}' % (nonce, {json.dumps(FORGED_TESTS)!r})
            os.write(int(sys.argv[1]), report.encode())
            os._exit(0)
            """
        )
        episode = self.run_worker(f"WORKSPACE.joinpath('json.py').write_text({shadow!r})\nreturn source")
        self.assertEqual(episode.reward["tests"]["test_shipping.ShippingTest.test_boundary"], "failed")
        self.assert_reward_zero(episode, "ShippingTest.test_boundary failed")

    def test_no_file_in_the_workspace_shadows_a_graded_module(self) -> None:
        for attack, action in SHADOWS.items():
            with self.subTest(attack):
                episode = self.run_worker(action + "return source\n")
                self.assertEqual(episode.reward["tests"]["test_shipping.ShippingTest.test_boundary"], "failed")
                self.assertEqual(episode.reward["modules"], self.modules(episode, BUGGY))
                self.assert_reward_zero(episode, "ShippingTest.test_boundary failed")

    def test_tests_run_from_the_runners_copy_even_when_the_file_is_gone(self) -> None:
        episode = self.run_worker(
            """
            WORKSPACE.joinpath("test_shipping.py").unlink()
            return source.replace("> 99", ">= 99")
            """
        )
        self.assertEqual(episode.reward["tests"], ALL_PASSED)
        self.assertEqual(episode.reward["modules"], self.modules(episode, FIXED))
        self.assert_reward_zero(episode, "test file changed")

    def test_code_under_test_that_replaces_a_graded_module_earns_nothing(self) -> None:
        # In-process code can do anything (docs/safety.md); one that swaps the modules under their
        # names without caring for their origin is caught by it.
        episode = self.run_worker(f"return source + {SHADOW_SHIPPING + chr(10)!r}")
        self.assertEqual(episode.reward["modules"]["shipping"]["origin"], None)
        self.assert_reward_zero(episode, "the code under test is not shipping.py (origin None)")

    def test_what_it_cannot_promise_code_under_test_patching_unittest_earns_reward_1(self) -> None:
        # docs/safety.md: two lines in shipping.py, the bug in place, reward 1. In-sandbox grading
        # cannot stop this; if the grade ever does, that page (and faults.md) must say so.
        patch = "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
        episode = self.run_worker(f"return source + {patch!r}")
        self.assertEqual(episode.reward["reward"], 1, episode.reward)
        self.assertEqual(episode.reward["modules"], self.modules(episode, BUGGY + patch))  # what got reward 1

    def test_hanging_test_times_out(self) -> None:
        # 2 s: the baseline (the buggy code, no hang) must end within it on a loaded machine too;
        # at 0.5 s it once timed out in CI, so the hang of the fixed code was never reached
        episode = self.run_worker('return source + "import time; time.sleep(1000)\\n"', RL_DEMO_TEST_TIMEOUT="2")
        self.assertNotIn(episode.reward["baseline_exit"], (0, None), episode.reward)
        self.assertIsNone(episode.reward["tests_exit"])
        self.assert_reward_zero(episode, "timeout after 2 s")
        self.assertLess(episode.seconds, 10)

    def test_invalid_timeout_is_a_reason_not_a_crash(self) -> None:
        episode = self.run_worker(RL_DEMO_TEST_TIMEOUT="soon")
        self.assert_reward_zero(episode, "RL_DEMO_TEST_TIMEOUT")

    def test_edited_test_file_earns_nothing(self) -> None:
        episode = self.run_worker(
            """
            weakened = TEST_SOURCE.replace("shipping(99), 0", "shipping(99), 10")
            WORKSPACE.joinpath("test_shipping.py").write_text(weakened)
            return source
            """
        )
        # The runner's own copy ran, not the weakened file: the boundary test still fails.
        self.assertEqual(episode.reward["tests"]["test_shipping.ShippingTest.test_boundary"], "failed")
        self.assertEqual(episode.reward["modules"]["test_shipping"], demo.BUILTIN_TEST_MODULE)
        self.assert_reward_zero(episode, "test file changed")

    def test_test_file_restored_during_the_run_still_counts_as_changed(self) -> None:
        episode = self.run_worker(
            """
            weakened = TEST_SOURCE.replace("shipping(99), 0", "shipping(99), 10")
            WORKSPACE.joinpath("test_shipping.py").write_text(weakened)
            return source + "open('test_shipping.py', 'w').write(%r)\\n" % TEST_SOURCE
            """
        )
        self.assertNotEqual(episode.reward["tests_exit"], 0)
        self.assert_reward_zero(episode, "test file changed")

    def test_undecodable_output_is_a_reason_not_a_crash(self) -> None:
        episode = self.run_worker(
            """
            fixed = source.replace("total > 99", "total >= 99")
            junk = "import sys\\nsys.stderr.buffer.write(b'\\\\xff\\\\xfe')\\nsys.stdout.buffer.write(b'\\\\xc3')\\n"
            return fixed + junk
            """
        )
        self.assertEqual(episode.reward["tests"], ALL_PASSED)
        self.assertIn("\ufffd", episode.reward["tests_output"])
        self.assert_reward_zero(episode, "test output undecodable")

    def test_a_dropped_test_earns_nothing(self) -> None:
        episode = self.run_worker(
            """
            return source + (
                "import unittest\\n"
                "names = unittest.TestLoader.getTestCaseNames\\n"
                "unittest.TestLoader.getTestCaseNames = "
                "lambda self, case: [n for n in names(self, case) if n != 'test_boundary']\\n"
            )
            """
        )
        self.assertEqual(episode.reward["tests_exit"], 0)
        self.assertNotIn("test_shipping.ShippingTest.test_boundary", episode.reward["tests"])
        self.assert_reward_zero(episode, "missing ShippingTest.test_boundary")

    def test_unfixed_code_reports_the_failing_test(self) -> None:
        episode = self.run_worker("return source")
        self.assertEqual(episode.reward["tests"]["test_shipping.ShippingTest.test_boundary"], "failed")
        self.assertEqual(episode.reward["tests"]["test_shipping.ShippingTest.test_below"], "passed")
        self.assertNotEqual(episode.reward["tests_exit"], 0)
        self.assert_reward_zero(episode, "ShippingTest.test_boundary failed")

    def test_nonzero_exit_after_every_test_passed_earns_nothing(self) -> None:
        episode = self.run_worker(
            'return source.replace("total > 99", "total >= 99") + '
            '"import atexit, os\\natexit.register(lambda: os._exit(3))\\n"'
        )
        self.assertEqual(episode.reward["tests"], ALL_PASSED)
        self.assertEqual(episode.reward["tests_exit"], 3)
        self.assert_reward_zero(episode, "tests exited 3 although")

    def test_many_tests_and_long_output_still_fit_the_termination_message(self) -> None:
        episode = self.run_worker(
            adding_tests(
                """
                sys.stderr.write('x' * 20000)
                def extra(module):
                    for i in range(30):
                        name = 'Extra%d' % i + '\u00e9' * 100
                        body = {'test_' + 'y' * 300: lambda self: None}
                        setattr(module, name, type(name, (unittest.TestCase,), body))
                """
            ),
            RL_DEMO_TEST_TIMEOUT="10",
        )
        tests = episode.reward["tests"]
        self.assertEqual(len(tests), 10)
        self.assertTrue(all(len(name) <= 100 and name.isascii() for name in tests))
        self.assertLessEqual(len(episode.reward["reason"]), 300)
        self.assertIn("tests_output_truncated", demo.parse_events(episode.termination)[-1])
        self.assert_reward_zero(episode, "not exactly the three named tests ran: unexpected")

    def test_report_larger_than_the_pipe_buffer_does_not_stall_the_runner(self) -> None:
        episode = self.run_worker(
            adding_tests(
                """
                def extra(module):
                    for i in range(100):
                        name = 'Extra%d' % i + '\u00e9' * 200
                        setattr(module, name, type(name, (unittest.TestCase,), {'test_x': lambda self: None}))
                """
            ),
            RL_DEMO_TEST_TIMEOUT="10",
        )
        self.assertEqual(episode.reward["tests_exit"], 0)
        self.assert_reward_zero(episode, "test report too large")
        self.assertLess(episode.seconds, 10)

    @unittest.skipUnless(hasattr(signal, "SIGTERM") and os.name == "posix", "needs POSIX signals")
    def test_sigterm_still_emits_the_reward(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            workspace = Path(root, "workspace")
            workspace.mkdir()
            script = Path(root, "episode.py")
            script.write_text(worker_source("import time\ntime.sleep(30)\nreturn source"))
            env = dict(
                ENVIRONMENT,
                EPISODE_ID="rollout-grade",
                RL_DEMO_WORKSPACE=str(workspace),
                RL_DEMO_TERMINATION_LOG=str(Path(root, "termination-log")),
            )
            with subprocess.Popen(
                [image_python(), "-B", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ) as process:
                assert process.stdout is not None
                self.assertIn('"ready"', process.stdout.readline())
                time.sleep(0.5)
                process.send_signal(signal.SIGTERM)
                stdout, _ = process.communicate(timeout=30)
            self.assertNotEqual(process.returncode, 0)
            rewards = [event for event in demo.parse_events(stdout) if event["event"] == "reward"]
            self.assertEqual(len(rewards), 1, stdout)
            self.assertEqual(rewards[0]["reward"], 0)
            self.assertIn("terminated by signal", rewards[0]["reason"])


class TestRunnerProcessTest(unittest.TestCase):
    """The worker's TestRunner: one runner process, each run a child it forked before any run began."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def test_each_run_is_a_child_of_one_runner_and_starts_as_fresh(self) -> None:
        # shipping.py notes its process, its parent and whether unittest still carries the mark it
        # leaves on it; a run forked after the other ran, or the same process twice, would show it
        # (and how many children its runner has: both, from the first run on, where Linux says)
        noting = (
            "import json, os, unittest\n"
            "parent = os.getppid()\n"
            "try:\n"
            "    siblings = len(open(f'/proc/{parent}/task/{parent}/children').read().split())\n"
            "except OSError:\n"
            "    siblings = None\n"
            "with open(os.environ['RUNS_LOG'], 'a') as log:\n"
            "    log.write(json.dumps([os.getpid(), parent, hasattr(unittest, 'left_by_a_run'), siblings]) + '\\n')\n"
            "unittest.left_by_a_run = True\n"
        )
        driver = textwrap.dedent(
            f"""
            import json, runpy, sys
            episode = runpy.run_path(sys.argv[1], run_name="episode")  # its definitions, not its main
            runner = episode["TestRunner"]()
            runs = []
            for source in ({BUGGY!r}, {FIXED!r}):
                episode["CODE_FILE"].write_text({noting!r} + source)
                runs.append(runner.run(30).exit_code)
            runner.close()
            print(json.dumps({{"runner": runner.process.pid, "exit_codes": runs}}))
            """
        )
        with tempfile.TemporaryDirectory() as root:
            workspace, log, script = Path(root, "workspace"), Path(root, "runs.log"), Path(root, "episode.py")
            workspace.mkdir()
            script.write_text(demo.WORKER_SOURCE)
            env = dict(ENVIRONMENT, EPISODE_ID="rollout-runner", RL_DEMO_WORKSPACE=str(workspace), RUNS_LOG=str(log))
            result = subprocess.run(
                [image_python(), "-B", "-c", driver, str(script)], env=env, capture_output=True, text=True, timeout=60
            )
            self.assertEqual(result.returncode, 0, result.stderr)
            ran = json.loads(result.stdout)
            runs = [json.loads(line) for line in log.read_text().splitlines()]
        self.assertEqual(ran["exit_codes"], [1, 0])  # the buggy code fails its tests, the fixed one passes
        (first, first_parent, first_marked, children), (second, second_parent, second_marked, _) = runs
        self.assertEqual((first_parent, second_parent), (ran["runner"], ran["runner"]))
        self.assertNotEqual(first, second)
        self.assertEqual((first_marked, second_marked), (False, False))
        if children is not None:  # the baseline started once the second run's child existed
            self.assertEqual(children, 2)


@end_to_end
class WorkerOnTheFakeTest(unittest.TestCase):
    """Workers end to end, as `run --worker` on the fake cluster (whose kubelet runs the
    ConfigMap's episode.py for real)."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def test_a_worker_with_a_utf8_bom_runs(self) -> None:
        with tempfile.TemporaryDirectory(prefix="rl-demo-bom-") as scratch:
            root = Path(scratch)
            worker, output = root / "bom_worker.py", root / "out"
            worker.write_bytes(b"\xef\xbb\xbf" + demo.WORKER_TEMPLATE.encode())
            cluster = FakeCluster(root / "cluster")
            self.addCleanup(cluster.close)
            tasks = root / "tasks.jsonl"
            tasks.write_text('{"id": "add-1", "question": "2 + 3", "expected": 5}\n')  # the template's shape
            argv = ["run", "--output", str(output), "--quiet", "--worker", str(worker), "--tasks", str(tasks)]
            result = run_script(argv, cluster.env(), root)
            self.assertEqual(result.returncode, 0, result.stderr)
            rewards = [json.loads(line) for line in (output / "rewards.jsonl").read_text().splitlines()]
        # The template with its task: 2 + 3 is the expected 5, a reward of 1.
        self.assertEqual([(row["reward"], row["failure"]) for row in rewards], [(1.0, None)])

    # The shadowing attacks: the built-in worker with its agent replaced, one attack per task. It
    # exits 0 whatever the reward (the protocol of a custom worker), so every episode validates and
    # its reward and reason reach rewards.jsonl.

    def test_every_shadow_earns_reward_zero_through_the_cluster(self) -> None:
        branches = "".join(
            f"if attack == {index}:\n" + textwrap.indent(body + "return source\n", "    ")
            for index, body in enumerate(SHADOWS.values())
        )
        action = (
            "import json, os\n"
            "tasks = open(os.environ.get('RL_DEMO_TASKS', '/demo/tasks.jsonl')).read().splitlines()\n"
            "attack = json.loads(tasks[int(os.environ['JOB_COMPLETION_INDEX'])])['attack']\n"
            f"{branches}raise AssertionError(attack)\n"
        )
        exit_call = "    sys.exit(main())\n"
        source = worker_source(action)
        self.assertEqual(source.count(exit_call), 1, "update this test: the worker's exit changed")
        source = source.replace(exit_call, "    main()\n    sys.exit(0)\n")
        with tempfile.TemporaryDirectory(prefix="rl-demo-shadow-") as scratch:
            root = Path(scratch)
            worker, tasks, output = root / "shadowing_worker.py", root / "tasks.jsonl", root / "out"
            worker.write_text(source)
            tasks.write_text("".join(json.dumps({"id": name, "attack": i}) + "\n" for i, name in enumerate(SHADOWS)))
            cluster = FakeCluster(root / "cluster")
            self.addCleanup(cluster.close)
            argv = ["run", "--output", str(output), "--quiet", "--count", str(len(SHADOWS))]
            result = run_script([*argv, "--worker", str(worker), "--tasks", str(tasks)], cluster.env(), root)
            self.assertEqual(result.returncode, 0, result.stderr)
            rewards = [json.loads(line) for line in (output / "rewards.jsonl").read_text().splitlines()]
            results = json.loads((output / "results.json").read_text())
        rewards.sort(key=lambda row: row["index"])  # the file is in the order the episodes ended
        self.assertEqual([row["task_id"] for row in rewards], list(SHADOWS))
        for row in rewards:
            with self.subTest(row["task_id"]):
                self.assertEqual((row["reward"], row["failure"]), (0, None))
                self.assertEqual(row["info"]["reason"], "ShippingTest.test_boundary failed")
                self.assertEqual(row["info"]["modules"]["test_shipping"], demo.BUILTIN_TEST_MODULE)
                self.assertEqual(
                    row["info"]["modules"]["shipping"]["sha256"], hashlib.sha256(BUGGY.encode()).hexdigest()
                )
        self.assertEqual(results["reward_sum"], 0)


if __name__ == "__main__":
    unittest.main()
