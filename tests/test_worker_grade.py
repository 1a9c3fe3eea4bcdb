"""The embedded worker's grading, run for real: the reward comes from the runner's report on its
private pipe, never from the test process's exit code or output alone, and every failure still
ends in one reward event with a reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional

import rl_batch_demo as demo
from tests.fakecluster import ENVIRONMENT
from tests.fakekube.faults import MAX_TERMINATION_MESSAGE  # the kubelet's limit

MAIN_GUARD = 'if __name__ == "__main__":\n'
FIXED = "def shipping(total):\n    return 0 if total >= 99 else 10\n"
ALL_PASSED = {
    "test_shipping.ShippingTest.test_below": "passed",
    "test_shipping.ShippingTest.test_boundary": "passed",
    "test_shipping.ShippingTest.test_above": "passed",
}

FORGED_TESTS = [[name, "passed"] for name in ALL_PASSED]


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
    def __init__(self, result: subprocess.CompletedProcess[str], termination: str, seconds: float) -> None:
        self.result = result
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
                [sys.executable, "-B", str(script)], env=full_env, capture_output=True, text=True, timeout=60
            )
            seconds = time.monotonic() - started
            return Episode(result, termination.read_text() if termination.exists() else "", seconds)

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

    def test_normal_run_rewards_the_three_passed_tests(self) -> None:
        episode = self.run_worker()
        self.assertEqual(episode.result.returncode, 0, episode.result.stderr)
        self.assertEqual([event["event"] for event in episode.events], ["ready", "reward"])
        reward = episode.reward
        self.assertEqual((reward["reward"], reward["tests_exit"]), (1, 0))
        self.assertNotIn(reward["baseline_exit"], (0, None))
        self.assertEqual(reward["tests"], ALL_PASSED)
        self.assertNotIn("reason", reward)
        self.assertIn("Ran 3 tests", reward["tests_output"])
        self.assert_termination_matches(episode)

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

    def test_hanging_test_times_out(self) -> None:
        episode = self.run_worker('return source + "import time; time.sleep(1000)\\n"', RL_DEMO_TEST_TIMEOUT="0.5")
        self.assertIsNone(episode.reward["tests_exit"])
        self.assertNotIn(episode.reward["baseline_exit"], (0, None))
        self.assert_reward_zero(episode, "timeout after 0.5 s")
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
        self.assertEqual(episode.reward["tests_exit"], 0)
        self.assertEqual(episode.reward["tests"], ALL_PASSED)
        self.assert_reward_zero(episode, "test file changed")

    def test_test_file_restored_during_the_run_still_counts_as_changed(self) -> None:
        episode = self.run_worker(
            """
            weakened = TEST_SOURCE.replace("shipping(99), 0", "shipping(99), 10")
            WORKSPACE.joinpath("test_shipping.py").write_text(weakened)
            return source + "open('test_shipping.py', 'w').write(%r)\\n" % TEST_SOURCE
            """
        )
        self.assertEqual(episode.reward["tests_exit"], 0)
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
            """
            return source.replace("total > 99", "total >= 99") + (
                "import sys, unittest\\n"
                "sys.stderr.write('x' * 20000)\\n"
                "module = sys.modules['test_shipping']\\n"
                "for i in range(30):\\n"
                "    name = 'Extra%d' % i + '\\u00e9' * 100\\n"
                "    body = {'test_' + 'y' * 300: lambda self: None}\\n"
                "    setattr(module, name, type(name, (unittest.TestCase,), body))\\n"
            )
            """,
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
            """
            return source.replace("total > 99", "total >= 99") + (
                "import sys, unittest\\n"
                "module = sys.modules['test_shipping']\\n"
                "for i in range(100):\\n"
                "    name = 'Extra%d' % i + '\\u00e9' * 200\\n"
                "    setattr(module, name, type(name, (unittest.TestCase,), {'test_x': lambda self: None}))\\n"
            )
            """,
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
                [sys.executable, "-B", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
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


if __name__ == "__main__":
    unittest.main()
