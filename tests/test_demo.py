"""The README's no-cluster command, exactly as shown, end to end: `python3 tests/fakecluster.py demo`
starts a fake cluster, runs a 10-episode batch against it, cleans it up, stops the fake and leaves
the results; run again, it refuses the existing directory as the tool does. The results.json it
writes is also the reference for the field names the documents describe."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any, Dict, Sequence, Set

from tests.fakecluster import ENVIRONMENT, write_executable
from tests.test_docs import DEMO_COMMAND, commands, section
from tests.test_readme_help import ROOT

# Fields the documents describe that a default run does not write, and why.
CONDITIONAL_FIELDS = {
    "runtime_operations": "only with --kubelet-metrics",
    "image_pinned_from": "only with --pin-image",
}


def documented_fields(text: str, markers: Sequence[str]) -> Set[str]:
    """Field names in the first column of the tables of the sections whose heading contains one
    of `markers` (`pods[]` -> pods)."""
    names: Set[str] = set()
    for marker in markers:
        heading = next(line for line in text.splitlines() if line.startswith("#") and marker in line)
        body = text.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
        for row in body.splitlines():
            if row.startswith("| `"):
                cell = row.split("|")[1]
                names |= {field.rstrip("[]") for field in re.findall(r"`([a-z][a-z0-9_]*(?:\[\])?)`", cell)}
    return names


def keys_of(results: Dict[str, Any]) -> Set[str]:
    """Every key of results.json, of one pods[] row, of one round_results[] row and of phases."""
    return set(results) | set(results["pods"][0]) | set(results["round_results"][0]) | set(results["phases"])


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
            command = [sys.executable, str(ROOT / argv[1]), *argv[2:]]
            first = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=180)
            report = f"stdout:\n{first.stdout}\nstderr:\n{first.stderr}"
            self.assertEqual(first.returncode, 0, report)
            output = work / "rl-fake-demo"
            results = json.loads((output / "results.json").read_text(encoding="utf-8"))
            self.assertEqual((results["episodes"], results["successful_episodes"], results["reward_sum"]), (10, 10, 10))
            self.assertEqual(results["context"], "fake-ctx")
            self.assertIn("results: rl-fake-demo/results.json", first.stdout)
            self.assertIn("$ python3 rl_batch_demo.py run --count 10 --output rl-fake-demo", first.stderr)
            self.assertIn("$ python3 rl_batch_demo.py cleanup --output rl-fake-demo", first.stderr)
            self.assertIn(f"deleted namespace {results['namespace']}", first.stdout)
            self.assertIn("simulated cluster", first.stderr)
            self.assertNotIn("real kubectl was called", report)
            receipt = json.loads((output / "receipt.json").read_text(encoding="utf-8"))
            first_reward = json.loads((output / "rewards.jsonl").read_text(encoding="utf-8").splitlines()[0])
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
        self.check_documented_fields(results)
        self.check_documented_files(receipt, first_reward)

    def check_documented_fields(self, results: Dict[str, Any]) -> None:
        """The fields README.zh-CN.md and docs/figures.md describe are results.json's, and every
        key of results.json and of its rows is described in docs/figures.md."""
        keys = keys_of(results)
        figures = (ROOT / "docs" / "figures.md").read_text(encoding="utf-8")
        chinese = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
        tables = {
            "docs/figures.md": documented_fields(figures, ["The guide's fields", "Phases of one episode"]),
            "README.zh-CN.md": documented_fields(chinese, ["`results.json` 顶层", "`pods[]` 各行"]),
        }
        for where, names in tables.items():
            self.assertGreater(len(names), 15, where)
            self.assertEqual(names - keys - set(CONDITIONAL_FIELDS), set(), f"{where} names fields results.json lacks")
        described = set(re.findall(r"`([a-z][a-z0-9_]*)", figures))
        pods_row = set(results["pods"][0])
        self.assertEqual((set(results) | pods_row) - described, set(), "keys docs/figures.md does not describe")

    def check_documented_files(self, receipt: Dict[str, Any], reward: Dict[str, Any]) -> None:
        """docs/outputs.md names exactly the keys of receipt.json and of a rewards.jsonl line."""
        outputs = (ROOT / "docs" / "outputs.md").read_text(encoding="utf-8")
        for file_name, written in (("receipt.json", receipt), ("rewards.jsonl", reward)):
            row = next(line for line in outputs.splitlines() if line.startswith(f"| `{file_name}` |"))
            named = set(re.findall(r"`([a-z][a-z0-9_]*)`", row.split("|", 2)[2])) - {"cleanup", "results"}
            self.assertEqual(named, set(written), f"docs/outputs.md's {file_name} row")


if __name__ == "__main__":
    unittest.main()
