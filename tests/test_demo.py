"""The README's no-cluster command, exactly as shown, end to end: `python3 tests/fakecluster.py demo`
starts a fake cluster, runs a 10-episode batch against it, cleans it up, stops the fake and leaves
the results; run again, it refuses the existing directory as the tool does. The results.json,
receipt.json and rewards.jsonl it writes have exactly the schema's keys (tests/records.py), which
the documents' field tables list (tests/test_docs.py)."""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import unittest
from pathlib import Path

import rl_batch_demo as demo
from tests import records
from tests.fakecluster import ENVIRONMENT, write_executable
from tests.test_docs import DEMO_COMMAND, commands, section
from tests.test_readme_help import ROOT
from tests.toolprocess import image_python


class DemoTest(unittest.TestCase):
    runs_concurrently = True  # subprocesses and its own scratch directory only: tests/concurrently.py

    def test_the_readme_command_end_to_end(self) -> None:
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        self.assertEqual(commands(section(readme, "Try it without a cluster")), [DEMO_COMMAND])
        argv = shlex.split(DEMO_COMMAND)
        self.assertEqual(argv[:2], ["python3", "tests/fakecluster.py"])
        with tempfile.TemporaryDirectory(prefix="rl-demo-test-") as scratch:
            root = Path(scratch)
            work, temporary = root / "clone", root / "tmp"
            work.mkdir()
            temporary.mkdir()
            # A real kubectl or kubeconfig of the reader's must never be reached: both point at
            # something that fails loudly, and the demo must not use them.
            trap = root / "real-kubectl"
            write_executable(trap, "#!/bin/sh\necho 'the real kubectl was called' >&2\nexit 99\n")
            env = {**ENVIRONMENT, "TMPDIR": str(temporary), "KUBECTL": str(trap), "KUBECONFIG": str(root / "none")}
            command = [image_python(), str(ROOT / argv[1]), *argv[2:]]
            first = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=180)
            report = f"stdout:\n{first.stdout}\nstderr:\n{first.stderr}"
            self.assertEqual(first.returncode, 0, report)
            output = work / "rl-fake-demo"
            results = records.written_results(self, output)
            self.assertEqual((results["episodes"], results["successful_episodes"], results["reward_sum"]), (10, 10, 10))
            self.assertEqual(results["context"], "fake-ctx")
            # the fake's runtime names itself: the run knows it was a simulation, and its picture says so
            self.assertEqual(results["container_runtimes"], [demo.SIMULATED_RUNTIME])
            self.assertIn("SIMULATION: ", (output / "timeline.svg").read_text(encoding="utf-8"))
            self.assertRegex(first.stdout, r"(?m)^verdict: 10/10 episodes valid, reward_sum 10; all ready \d+\.\d s")
            self.assertIn("results: rl-fake-demo/results.json", first.stdout)
            self.assertIn("$ python3 rl_batch_demo.py run --count 10 --output rl-fake-demo", first.stderr)
            self.assertIn("$ python3 rl_batch_demo.py cleanup --output rl-fake-demo", first.stderr)
            self.assertIn(f"deleted namespace {results['namespace']}", first.stdout)
            self.assertIn("simulated cluster", first.stderr)
            self.assertNotIn("real kubectl was called", report)
            receipt = records.written(self, output / "receipt.json", records.demo.Receipt)
            rewards = records.written(self, output / "rewards.jsonl", records.demo.RewardLine)
            self.assertEqual(sorted(line["index"] for line in rewards), list(range(10)))
            self.assertTrue(receipt["kubectl"].startswith(str(temporary)), receipt["kubectl"])
            self.assertEqual(list(temporary.iterdir()), [], "the fake cluster was not removed")
            self.assertEqual(sorted(p.name for p in work.iterdir()), ["rl-fake-demo"])

            before = {p.name: p.stat().st_mtime_ns for p in output.iterdir()}
            second = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(second.returncode, 2, second.stderr)
            self.assertIn("output directory rl-fake-demo already exists", second.stderr)
            self.assertNotIn("cleanup --output", second.stderr)  # nothing in it is the demo's to clean
            self.assertEqual({p.name: p.stat().st_mtime_ns for p in output.iterdir()}, before)
            self.assertEqual(list(temporary.iterdir()), [])


if __name__ == "__main__":
    unittest.main()
