"""The hostile-episode matrix, end to end through the fake kubectl (the real wire path).

The fake's worker prints each hostile input, in its log and, where the API server could carry it,
in its termination message (tests/fakekube/faults.py: HOSTILE_LINES, HOSTILE_FIELDS). Every row
ends in its documented outcome (docs/faults.md), with no traceback, no
control byte on stdout or stderr, strict JSON in every file, and `--cleanup always` leaving no
namespace behind."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import Any

import rl_batch_demo as demo
from tests.fakecluster import FakeCluster
from tests.tiers import end_to_end
from tests.toolprocess import image_python

SCRIPT = str(Path(demo.__file__).resolve())
LOG_FILE_LIMIT = demo.LOG_FILE_LIMIT  # read once: a test in the main thread patches it (tests/concurrently.py)
CLEANUP = ("--cleanup", "always")

# Inputs the client must ignore as noise: one run, one episode each, and the run succeeds.
NOISE = (
    "hostile_invalid_utf8",
    "hostile_nul",
    "hostile_control",
    "hostile_cr_injection",
    "hostile_u2028_injection",
    "hostile_forged_prefix",
    "hostile_long_line",
    "hostile_huge_log",
)
# Inputs that invalidate the episode: (mode, what the one error line says).
INVALID = (
    ("hostile_nesting", "malformed JSON event (nested too deeply)"),
    ("hostile_huge_number", "no finite numeric 'at'"),
    ("hostile_nan", "NaN is not a JSON number"),
    ("hostile_reward_true", "reward True with tests exit 0"),
    ("hostile_reward_float", "reward 1.0 with tests exit 0"),
    ("hostile_reward_string", "reward '1' with tests exit 0"),
    ("hostile_ansi_id", "episode_id '\\x1b[2J\\x1b[31mforged\\nline'"),
    ("hostile_surrogate_id", "episode_id '\\ud800'"),
    ("hostile_markdown_id", "not the pod name"),
)


# Custom workers (`run --worker`) whose output meets what the node does to it (issues 19, 20):
# the events as the worker template emits them, then each one's twist.
WORKER_HEAD = """
import json, os, sys, time
first = time.time()
ID = os.environ["EPISODE_ID"]
def line(name, **fields):
    return json.dumps(dict(fields, event=name, at=time.time(), episode_id=ID), sort_keys=True) + "\\n"
def message(text):
    with open(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"), "w") as stream:
        stream.write(text)
out = sys.stdout
"""
HOSTILE_WORKERS = {
    # a termination message over 4 KiB: the kubelet keeps its end, which begins inside the ready line
    "cut_message": """
ready = line("ready", process_started_at=first, imports_done_at=first, pad="p" * 3000)
reward = line("reward", reward=1.0, pad="q" * 1500)
out.write(ready + reward)
message(ready + reward)
""",
    # 200 KiB between ready and reward: the kubelet rotates the log (here at 64 KiB) past the ready line
    "rotated_log": """
ready = line("ready", process_started_at=first, imports_done_at=first)
out.write(ready)
out.write("working ...\\n" * 20000)
reward = line("reward", reward=1.0)
out.write(reward)
message(ready + reward)
""",
    # the last output a progress bar redrawn with \\r for 300 KiB, no newline: kubectl glues the
    # next pod's first line (its ready event) onto it, past the first two chunks the client reads
    "long_progress_bar": """
ready = line("ready", process_started_at=first, imports_done_at=first)
reward = line("reward", reward=1.0)
out.write(ready + reward)
message(ready + reward)
out.write("".join("\\r[%-50s]" % ("#" * (i % 50)) for i in range(6000)))
""",
    # the same bar, short (within the line limit)
    "short_progress_bar": """
ready = line("ready", process_started_at=first, imports_done_at=first)
reward = line("reward", reward=1.0)
out.write(ready + reward)
message(ready + reward)
out.write("\\r[##########] 100%")
""",
    # issue 29: the log says reward 1, the termination message reward true (Python's True == 1)
    "bool_reward": """
ready = line("ready", process_started_at=first, imports_done_at=first)
at = time.time()  # the same reward event twice but for its reward's type
def reward(value):
    return json.dumps(dict(event="reward", at=at, episode_id=ID, reward=value), sort_keys=True) + "\\n"
out.write(ready + reward(1))
message(ready + reward(True))
""",
    # issue 29: nothing in the log beside good events in the termination message: no rotation
    # leaves an empty log (the kubelet rotates only past containerLogMaxSize)
    "silent_log": """
ready = line("ready", process_started_at=first, imports_done_at=first)
message(ready + line("reward", reward=1.0))
""",
    # issues 29 and 25: episode INDEX sends the artifact names SPOOF_NAMES[INDEX], framed as the
    # template frames them; index 0 is honest (a 255-byte name of 3-byte characters, a nested file)
    "spoof_names": """
import base64, hashlib
INDEX = int(os.environ["JOB_COMPLETION_INDEX"])
NAMES = %s
ready = line("ready", process_started_at=first, imports_done_at=first)
out.write(ready)
manifest = []
for name in sorted(NAMES[INDEX]):
    data = name.encode("utf-8")
    sha = hashlib.sha256(data).hexdigest()
    label = base64.urlsafe_b64encode(data).decode()
    out.write(f"rl-demo-artifact 1 0 1 {sha} {label} {base64.b64encode(data).decode()}\\n")
    manifest.append({"name": name, "bytes": len(data), "sha256": sha})
reward = line("reward", reward=1.0, artifacts=manifest)
out.write(reward)
message(ready + reward)
""",
    # issue 27: the worker kills itself with SIGKILL; the runtime reports exit code 128 + 9
    "killed_by_signal": """
import signal
out.write(line("ready", process_started_at=first, imports_done_at=first))
out.flush()
os.kill(os.getpid(), signal.SIGKILL)
""",
}
# What each episode of "spoof_names" sends, and the cause its failure names (None: it validates).
SPOOF_NAMES = (
    (["\u4e2d" * 85, "nested/a/b.txt"], None),
    (["report\u202etxt.exe"], "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    (["zero\u200bwidth.txt"], "U+200B (ZERO WIDTH SPACE)"),
    (["line\u2028separator.txt"], "U+2028 (LINE SEPARATOR)"),
    (["-rf"], "starts with '-'"),
    (["Report.txt", "report.txt"], "would be stored as 'Report.txt'"),
    (["caf\u00e9.txt", "cafe\u0301.txt"], "would be stored as 'cafe\u0301.txt'"),  # NFC beside NFD
    (["/".join("abcdefghi")], "9 segments, more than 8"),
    ([f"d{i}/e/f/g/h/i/j/empty" for i in range(3)], "21 directories among them"),  # of 4 KiB each: over 64 KiB
)
HOSTILE_WORKERS["spoof_names"] %= ascii([names for names, _ in SPOOF_NAMES])  # the worker file stays ASCII

# A custom worker (--worker) that runs FORGER_SECONDS but claims its reward 1 ms after its ready, which
# it claims at its first statement: every figure the pod reports says it was quick.
FORGER_SECONDS = 5
FORGER = f"""\
import json, os, time
first = time.time()
episode = os.environ["EPISODE_ID"]
time.sleep({FORGER_SECONDS})
events = [
    {{"event": "ready", "at": first, "episode_id": episode}},
    {{"event": "reward", "at": first + 0.001, "episode_id": episode, "reward": 1.0}},
]
text = "".join(json.dumps(event) + "\\n" for event in events)
print(text, end="", flush=True)
with open(os.environ.get("RL_DEMO_TERMINATION_LOG", "/dev/termination-log"), "w") as stream:
    stream.write(text)
"""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} in a JSON output")


@end_to_end
class HostileRunTestCase(unittest.TestCase):
    """Runs of the tool on a fresh fake cluster each, and what every one of them must hold."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-hostile-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)

    def run_hostile(
        self, name: str, modes: list[str], *options: str
    ) -> tuple[subprocess.CompletedProcess[bytes], Path, list[str]]:
        """One run of len(modes) episodes, episode i printing modes[i], cleaned up always."""
        faults = {"episode": dict(enumerate(modes)), "stand_in_worker": True}  # fast: no tests run in the pod
        cluster = FakeCluster(self.root / f"cluster-{name}", faults=faults)
        try:
            before = {ns["metadata"]["name"] for ns in cluster.objects("Namespace")}
            output = self.root / f"out-{name}"
            summary = self.root / f"summary-{name}.md"
            env = dict(cluster.env(), GITHUB_STEP_SUMMARY=str(summary))
            result = subprocess.run(
                [
                    *(image_python(), SCRIPT, "run", "--count", str(len(modes)), "--output", str(output)),
                    *("--quiet", *CLEANUP, *options),
                ],
                env=env,
                capture_output=True,
                timeout=120,
                check=False,
            )
            left = sorted({ns["metadata"]["name"] for ns in cluster.objects("Namespace")} - before)
            if summary.exists():
                (output / "step-summary.md").write_bytes(summary.read_bytes())
            return result, output, left
        finally:
            cluster.close()

    def run_worker(
        self, name: str, count: int, faults: dict[str, Any] | None = None, *options: str
    ) -> tuple[subprocess.CompletedProcess[bytes], Path, list[str]]:
        """One run of `count` episodes of HOSTILE_WORKERS[name] (`run --worker`), cleaned up always."""
        worker = self.root / f"{name}.py"
        worker.write_text(WORKER_HEAD + HOSTILE_WORKERS[name])
        cluster = FakeCluster(self.root / f"cluster-{name}{len(options)}", faults=faults)
        try:
            before = {ns["metadata"]["name"] for ns in cluster.objects("Namespace")}
            output = self.root / f"out-{name}{len(options)}"
            argv = [image_python(), SCRIPT, "run", "--count", str(count), "--worker", str(worker)]
            result = subprocess.run(
                [*argv, "--output", str(output), "--quiet", *CLEANUP, *options],
                env=cluster.env(),
                capture_output=True,
                timeout=120,
                check=False,
            )
            left = sorted({ns["metadata"]["name"] for ns in cluster.objects("Namespace")} - before)
            return result, output, left
        finally:
            cluster.close()

    def assert_contained(self, result: subprocess.CompletedProcess[bytes], output: Path, left: list[str]) -> None:
        for stream in (result.stdout, result.stderr):
            text = stream.decode("utf-8")  # strict: the tool writes only valid UTF-8
            self.assertNotIn("Traceback", text)
            self.assertTrue(all(char.isprintable() or char == "\n" for char in text), repr(text))
        self.assertEqual(left, [], "--cleanup always left a namespace")
        for path in output.rglob("*.json"):
            json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
        for path in output.glob("*.log"):  # the text up to its limit, then markers and its ready and reward lines
            self.assertLessEqual(path.stat().st_size, LOG_FILE_LIMIT + 2 * demo.EVENT_LINE_LIMIT + 1024, path.name)
        names = {pod["metadata"]["name"] for pod in json.loads((output / "pods.json").read_text())["items"]}
        for path in output.iterdir():
            if path.suffix == ".log":
                self.assertIn(path.stem, names, "a log file named by something other than the pod listing")
        summary = output / "step-summary.md"
        if summary.exists():
            lines = summary.read_text(encoding="utf-8").splitlines()
            headings = [line for line in lines if line.startswith("#")]
            self.assertTrue(all(line.startswith("### rl-batch-demo") for line in headings), headings)


class HostileEpisodeTest(HostileRunTestCase):
    def test_a_forged_reward_time_cannot_pass_a_cluster_observed_budget(self) -> None:
        """A reward's time is bounded only from above (the container's finish): a pod that works 5 s
        and claims its reward 1 ms after ready passes a budget on batch_to_all_rewards_seconds. The
        cluster's batch_to_all_finished_seconds (Job created -> last container finished) holds it."""
        worker = self.root / "forger.py"
        worker.write_text(FORGER)
        cluster = FakeCluster(self.root / "cluster-forger")
        try:
            output = self.root / "out-forger"
            budget = str(FORGER_SECONDS - 1)
            result = subprocess.run(
                [
                    *(image_python(), SCRIPT, "run", "--count", "2", "--output", str(output), "--quiet", *CLEANUP),
                    *("--worker", str(worker), "--threshold", f"batch_to_all_rewards_seconds={budget}"),
                    *("--threshold", f"batch_to_all_finished_seconds={budget}"),
                ],
                env=cluster.env(),
                capture_output=True,
                timeout=120,
                check=False,
            )
        finally:
            cluster.close()
        stderr = result.stderr.decode("utf-8")
        self.assertEqual(result.returncode, demo.EXIT_THRESHOLD, stderr)
        [error] = [line for line in stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("batch_to_all_finished_seconds = ", error)
        self.assertNotIn("batch_to_all_rewards_seconds", error)  # the forged figure passed its budget
        results = json.loads((output / "results.json").read_text())
        self.assertGreaterEqual(results["batch_to_all_finished_seconds"], FORGER_SECONDS)  # whole seconds, >= the sleep
        self.assertLess(results["batch_to_all_rewards_seconds"], results["batch_to_all_finished_seconds"] - 2)
        sources = results["figure_sources"]
        self.assertEqual(
            (sources["batch_to_all_rewards_seconds"], sources["batch_to_all_finished_seconds"]), ("pod", "cluster")
        )

    def test_noise_is_ignored_and_the_run_succeeds(self) -> None:
        result, output, left = self.run_hostile("noise", list(NOISE))
        self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace"))
        self.assert_contained(result, output, left)
        results = json.loads((output / "results.json").read_text())
        self.assertEqual(results["reward_sum"], len(NOISE))
        self.assertEqual(results["episodes"], len(NOISE))
        saved = [path.read_bytes() for path in output.glob("*.log")]
        self.assertTrue(any(b"[rl-batch-demo: log truncated at" in log for log in saved), "the 9.7 MB log was capped")
        self.assertTrue(any(b"\xff\xfe\xfd not UTF-8" in log for log in saved), "the log was saved as bytes")

    def test_each_invalid_input_fails_its_episode_by_name(self) -> None:
        """Two inputs end a run on their own (exit 1, the one error line naming the pod and the
        problem); all of them, in one run that sets each failed episode aside
        (--failed-episode-reward 0: each is the episode's own failure), are each named with their cause
        and failure_kind episode beside one good episode."""

        def alone(row: tuple[str, str]) -> tuple[str, str, Any]:
            mode, expected = row
            return mode, expected, self.run_hostile(mode, [mode])

        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            together = pool.submit(
                self.run_hostile, "together", [mode for mode, _ in INVALID] + ["noise"], "--failed-episode-reward",
                "0",
            )  # fmt: skip
            outcomes = list(pool.map(alone, [INVALID[0], INVALID[6]]))
            result, output, left = together.result()
        for mode, expected, (alone_result, alone_output, alone_left) in outcomes:
            with self.subTest(mode):
                stderr = alone_result.stderr.decode("utf-8")
                self.assertEqual(alone_result.returncode, demo.EXIT_EPISODE, stderr)
                self.assert_contained(alone_result, alone_output, alone_left)
                [error] = [line for line in stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
                self.assertIn("episode rollout-", error)
                self.assertIn(expected, error)
                self.assertFalse((alone_output / "results.json").exists())
                self.assertEqual(json.loads((alone_output / "error.json").read_text())["exit_code"], demo.EXIT_EPISODE)
        self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace"))
        self.assert_contained(result, output, left)
        results = json.loads((output / "results.json").read_text())
        self.assertEqual((results["successful_episodes"], results["reward_sum"]), (1, 1))
        causes = {entry["index"]: entry["cause"] for entry in results["failed_episodes"]}
        self.assertEqual(sorted(causes), list(range(len(INVALID))))
        kinds = {(entry["failure_kind"], entry["reward"]) for entry in results["failed_episodes"]}
        self.assertEqual(kinds, {(demo.FAILURE_EPISODE, 0.0)})
        self.assertEqual((results["scored_episodes"], results["masked_episodes"]), (len(INVALID), 0))
        for index, (mode, expected) in enumerate(INVALID):
            with self.subTest(mode, together=True):
                self.assertIn(expected, causes[index])


class NodeOutputTest(HostileRunTestCase):
    """What the node does to a pod's output, met by custom workers (one row each, docs/faults.md):
    a termination message cut at the front, a rotated log, a last line glued onto by the next
    pod's first. Each run succeeds, saying how it read the episodes where it had to."""

    ROWS = (  # (worker, episodes, fake faults, run's options, the note each episode carries, or None)
        ("cut_message", 2, None, (), "termination message was cut at the front"),
        ("rotated_log", 2, {"container_log_max_size": 64 * 1024}, (), "looks rotated"),
        # two pods: kubectl reads them in some order, and the first one's last line gets the
        # second one's first glued on; nothing may be blamed on either, nor masked
        ("long_progress_bar", 2, None, ("--max-failed-episodes", "1"), None),
        ("short_progress_bar", 2, None, (), None),
    )

    def test_each_row_succeeds_and_says_how_it_read_the_episodes(self) -> None:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.ROWS)) as pool:
            runs = list(pool.map(lambda row: self.run_worker(row[0], row[1], row[2], *row[3]), self.ROWS))
        for (name, count, _, options, note), (result, output, left) in zip(self.ROWS, runs):
            with self.subTest(name, options=options):
                self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace"))
                self.assert_contained(result, output, left)
                results = json.loads((output / "results.json").read_text())
                self.assertEqual((results["successful_episodes"], results["reward_sum"]), (count, float(count)))
                for row in results["pods"]:
                    if note is None:
                        self.assertEqual(row["log_notes"], [])
                    else:
                        self.assertEqual(len(row["log_notes"]), 1)
                        self.assertIn(note, row["log_notes"][0])


class IntegrityRoundThreeTest(HostileRunTestCase):
    """Issue 29 (and issue 25's artifact names): custom workers that a comparison by `==`, an
    empty log taken for a rotated one, or names saved as they came let through."""

    def test_a_termination_message_of_true_beside_a_log_of_1_never_stands_as_a_reward(self) -> None:
        result, output, left = self.run_worker("bool_reward", 1)
        stderr = result.stderr.decode("utf-8")
        self.assertEqual(result.returncode, demo.EXIT_EPISODE, stderr)
        self.assert_contained(result, output, left)
        [error] = [line for line in stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("reward True", error)
        lines = demo.read_reward_lines(output / demo.REWARDS_FILE)
        self.assertTrue(lines, "no line in rewards.jsonl")
        self.assertEqual([line["reward"] for line in lines], [None] * len(lines), lines)
        self.assertFalse(demo.stands_as_reward(lines[-1]))

    def test_an_empty_log_beside_a_good_termination_message_is_no_rotated_log(self) -> None:
        result, output, left = self.run_worker("silent_log", 1)
        stderr = result.stderr.decode("utf-8")
        self.assertEqual(result.returncode, demo.EXIT_EPISODE, stderr)
        self.assert_contained(result, output, left)
        [error] = [line for line in stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("its log and its termination message report different events", error)
        self.assertIn("too small to have been rotated", error)
        self.assertFalse(demo.stands_as_reward(demo.read_reward_lines(output / demo.REWARDS_FILE)[-1]))

    def test_artifact_names_that_spoof_are_refused_and_a_long_non_ascii_one_is_saved(self) -> None:
        count = len(SPOOF_NAMES)
        result, output, left = self.run_worker(
            "spoof_names", count, None, "--failed-episode-reward", "0", "--max-artifact-bytes", "65536"
        )
        self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace"))
        self.assert_contained(result, output, left)
        results = json.loads((output / "results.json").read_text())
        causes = {entry["index"]: entry["cause"] for entry in results["failed_episodes"]}
        expected = {index: cause for index, (_, cause) in enumerate(SPOOF_NAMES) if cause is not None}
        self.assertEqual(sorted(causes), sorted(expected))
        for index, cause in expected.items():
            with self.subTest(index=index):
                self.assertIn(cause, causes[index])
        [row] = results["pods"]
        folder = output / "artifacts" / row["pod"]
        for name in SPOOF_NAMES[0][0]:
            self.assertEqual((folder / name).read_bytes(), name.encode("utf-8"))
        saved = [path.relative_to(output / "artifacts") for path in (output / "artifacts").rglob("*")]
        for path in saved:  # nothing spoofing was written under any pod's folder
            self.assertFalse(any(ch in str(path) for ch in "\u202e\u200b\u2028"), path)
            self.assertFalse(any(part.startswith("-") for part in path.parts), path)


class RuntimeTest(HostileRunTestCase):
    """Issue 27: what a container runtime reports, as the fake reports it."""

    def test_a_worker_killed_by_a_signal_exits_128_plus_its_number(self) -> None:
        result, output, left = self.run_worker("killed_by_signal", 1)
        stderr = result.stderr.decode("utf-8")
        self.assertEqual(result.returncode, demo.EXIT_EPISODE, stderr)
        self.assert_contained(result, output, left)
        [pod] = json.loads((output / "pods.json").read_text())["items"]
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        self.assertEqual(terminated["exitCode"], 137)
        [error] = [line for line in stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("(exit code 137, ", error)
        # never Python's -9 for the signal: as a code, whatever the scratch directory's random name holds
        self.assertNotRegex(error, r"(code|status|exited) -9\b")


if __name__ == "__main__":
    unittest.main()
