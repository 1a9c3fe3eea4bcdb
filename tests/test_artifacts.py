"""Artifacts (issue 21): files a worker writes under RL_DEMO_ARTIFACTS, sent as framed, hashed lines
through its log and saved as DIR/artifacts/<pod>/<name> (docs/own-episodes.md, "Artifacts").

Three tiers: the frame parser and the manifest rules as pure tables; ArtifactSink and the log
reader on a scratch directory (binary, nested, a forged hash, frames out of order or missing, a
planted symlink, a frame glued to another pod's line); and runs through the fake cluster, one of
them a matrix of hostile episodes failed and scored one by one (--failed-episode-reward), beside the
built-in worker's patch."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import Any, List
from unittest import mock

import rl_batch_demo as demo
from tests.fakecluster import FakeCluster
from tests.tiers import end_to_end
from tests.toolprocess import tool_command, tool_environment

SCRIPT = str(Path(demo.__file__).resolve())


def frame(name: str, seq: int, total: int, sha256: str, data: bytes) -> bytes:
    label = base64.urlsafe_b64encode(name.encode()).decode()
    return f"rl-demo-artifact 1 {seq} {total} {sha256} {label} {base64.b64encode(data).decode()}".encode()


def frames(name: str, data: bytes, size: int = demo.ARTIFACT_FRAME_DATA) -> List[bytes]:
    digest = hashlib.sha256(data).hexdigest()
    pieces = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    return [frame(name, seq, len(pieces), digest, piece) for seq, piece in enumerate(pieces)]


def entry(name: str, data: bytes) -> demo.ArtifactEntry:
    return {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


BINARY = bytes(range(256)) * 300  # every byte value, over four frames


class FrameParserTest(unittest.TestCase):
    def test_a_frame_round_trips_its_name_and_bytes(self) -> None:
        [line] = frames("a/b c/ünï.bin", b"\x00\xff\n\r")
        parsed = demo.parse_artifact_frame(line)
        self.assertEqual((parsed.name, parsed.seq, parsed.total, parsed.data), ("a/b c/ünï.bin", 0, 1, b"\x00\xff\n\r"))
        self.assertEqual(parsed.sha256, hashlib.sha256(b"\x00\xff\n\r").hexdigest())
        self.assertEqual(demo.parse_artifact_frame(frames("empty", b"")[0]).data, b"")

    def test_every_malformed_frame_is_refused_with_its_rule(self) -> None:
        good = hashlib.sha256(b"x").hexdigest()
        rows = (
            (frame("../escape", 0, 1, good, b"x"), "'..' segment"),
            (frame("/etc/passwd", 0, 1, good, b"x"), "is absolute"),
            (frame("a//b", 0, 1, good, b"x"), "empty"),
            (frame("nul\x00name", 0, 1, good, b"x"), "control character"),
            (frame("esc\x1b[2J", 0, 1, good, b"x"), "control character"),
            (frame("back\\slash", 0, 1, good, b"x"), "backslash"),
            (frame("n" * 256, 0, 1, good, b"x"), "longer than 255 bytes"),
            # issue 29: names that spoof what a file browser or a shell loop shows
            (frame("evil\u202etxt.exe", 0, 1, good, b"x"), "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
            (frame("zero\u200bwidth", 0, 1, good, b"x"), "U+200B (ZERO WIDTH SPACE)"),
            (frame("line\u2028break", 0, 1, good, b"x"), "U+2028 (LINE SEPARATOR)"),
            (frame("para\u2029break", 0, 1, good, b"x"), "U+2029 (PARAGRAPH SEPARATOR)"),
            (frame("-rf", 0, 1, good, b"x"), "starts with '-'"),
            (frame("sub/--help", 0, 1, good, b"x"), "starts with '-'"),
            # issue 25: at most 8 segments
            (frame("/".join("abcdefghi"), 0, 1, good, b"x"), "9 segments, more than 8"),
            (frame("x", 1, 1, good, b"x"), "frame 1 of 1"),
            (frame("x", 0, demo.ARTIFACT_FRAMES_LIMIT + 1, good, b"x"), "frames count from 0"),
            (frame("x", 0, 1, good, b"x" * (demo.ARTIFACT_FRAME_DATA + 1)), "more than a frame's"),
            (frame("x", 0, 1, good, b"x") + b" [pod/other/episode] {}", "not a well-formed artifact frame"),
            (frame("x", 0, 1, good, b"x")[:-1], "base64"),
            (frame("x", 0, 1, "F" * 64, b"x"), "not a well-formed"),
            (b"rl-demo-artifact 1 0 1 " + good.encode() + b" " + base64.urlsafe_b64encode(b"\xff") + b" eA==", "UTF-8"),
        )
        for line, rule in rows:
            with self.subTest(line=line[:80]):
                with self.assertRaises(ValueError) as raised:
                    demo.parse_artifact_frame(line)
                self.assertIn(rule, str(raised.exception))
                self.assertTrue(str(raised.exception).isprintable(), "the name reaches a message escaped")

    def test_the_manifest_rules(self) -> None:
        good = [entry("a", b"1"), entry("b/c", b"22")]
        directory = demo.ARTIFACT_DIRECTORY_BYTES  # b/ costs one directory's block
        self.assertEqual(demo.artifact_manifest(good, 3 + directory), good)
        self.assertEqual(demo.artifact_manifest(None, 0), [])
        rows = (
            ("x", "not a list"),
            ([good[1], good[0]], "not sorted"),
            ([good[0], good[0]], "each listed once"),
            ([dict(good[0], bytes=True)], "not {name, bytes, sha256}"),
            ([dict(good[0], name="../a")], "'..' segment"),
            ([dict(good[0], sha256="abc")], "not 64 hex digits"),
            ([entry(f"f{i:03}", b"") for i in range(demo.ARTIFACTS_PER_EPISODE_LIMIT + 1)], "more than 64"),
            # issue 29: names one filesystem stores as one file
            ([entry("Report.txt", b""), entry("report.txt", b"")], "would be stored as 'Report.txt'"),
            ([entry("caf\u00e9", b""), entry("cafe\u0301", b"")], "would be stored as 'caf\u00e9'"),
            ([entry("Dir/a", b""), entry("dir/b", b"")], "would be stored as 'Dir'"),
            # issue 25: 0 bytes listed, but 7 directories of 4 KiB each
            ([entry("a/b/c/d/e/f/g/h", b"")], "7 directories among them"),
        )
        for manifest, rule in rows:
            with self.subTest(rule):
                with self.assertRaises(ValueError) as raised:
                    demo.artifact_manifest(manifest, 100)
                self.assertIn(rule, str(raised.exception))
        with self.assertRaises(ValueError) as raised:
            demo.artifact_manifest(good, 2 + directory)
        self.assertIn(f"over the --max-artifact-bytes budget of {2 + directory:,} bytes", str(raised.exception))


class SinkTest(unittest.TestCase):
    """ArtifactSink on a scratch DIR/artifacts, fed frame lines as the log reader feeds them."""

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-artifacts-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name) / "artifacts"

    def sink(self, lines: List[bytes], budget: int = demo.DEFAULT_MAX_ARTIFACT_BYTES) -> demo.PodLog:
        sink = demo.ArtifactSink(self.root, "pod-a", demo.LogBudgets(artifacts=self.root, artifact_bytes=budget))
        for line in lines:
            sink.frame(line)
        log = demo.PodLog()
        sink.finish(log)
        return log

    def leftovers(self) -> List[str]:
        return sorted(str(path.relative_to(self.root)) for path in self.root.rglob("*") if path.name.endswith(".part"))

    def test_binary_nested_and_empty_files_are_saved_byte_for_byte(self) -> None:
        log = self.sink(frames("bin/all-bytes.bin", BINARY) + frames("deep/er/empty", b"") + frames("t.txt", b"hi\n"))
        self.assertEqual(log.artifact_error, "")
        self.assertEqual((self.root / "pod-a" / "bin" / "all-bytes.bin").read_bytes(), BINARY)
        self.assertEqual((self.root / "pod-a" / "deep" / "er" / "empty").read_bytes(), b"")
        self.assertEqual(
            log.artifacts,
            {
                e["name"]: e
                for e in (entry("bin/all-bytes.bin", BINARY), entry("deep/er/empty", b""), entry("t.txt", b"hi\n"))
            },
        )
        self.assertEqual(self.leftovers(), [])

    def test_each_lie_fails_the_pod_and_leaves_no_partial_file(self) -> None:
        two = frames("f", BINARY)
        forged = frames("f", b"honest")[0].replace(b"aG9uZXN0", b"Zm9yZ2Vk")  # same claimed hash, other bytes
        other_total = frame("f", 1, 9, hashlib.sha256(BINARY).hexdigest(), b"x")
        rows = (
            ([forged], "has sha256", False),
            ([two[0], two[2], two[1]], "frames 1 to 1 of artifact 'f' are missing", True),
            ([two[1], two[0]], "frames 0 to 0 of the 4 of artifact 'f' are missing", True),
            ([two[0], two[0]], "frame 0 of artifact 'f' came after frame 0", False),
            ([two[0], other_total], "changes its total or sha256", False),
            ([two[0]], "are missing (its log ended)", True),
            ([two[0], *frames("g", b"g")], "are missing (a frame of 'g' came before them)", True),
            ([*frames("g", b"g"), *frames("g", b"g")], "came after the artifact was complete", False),
            (two, "over the --max-artifact-bytes budget of 30,000 bytes", False),
        )
        for lines, rule, missing in rows:
            with self.subTest(rule):
                log = self.sink(lines, budget=30_000)
                self.assertIn(rule, log.artifact_error)
                self.assertEqual(log.artifact_frames_missing, missing)
                self.assertNotIn("f", log.artifacts)
                self.assertEqual(self.leftovers(), [])

    def test_nothing_is_written_through_a_planted_symlink_or_over_a_directory(self) -> None:
        outside = self.root.parent / "outside"
        outside.mkdir()
        (self.root / "pod-a").mkdir(parents=True)
        (self.root / "pod-a" / "link").symlink_to(outside, target_is_directory=True)
        log = self.sink(frames("link/file", b"x"))
        self.assertIn("cannot be saved there", log.artifact_error)
        self.assertEqual(list(outside.iterdir()), [])
        log = self.sink(frames("a", b"x") + frames("a/b", b"y"))  # a file, then a directory of that name
        self.assertIn("'a/b' cannot be saved there", log.artifact_error)
        self.assertEqual((self.root / "pod-a" / "a").read_bytes(), b"x")

    def test_names_one_filesystem_stores_as_one_file_never_overwrite_each_other(self) -> None:
        """Issue 29: on a case-insensitive or normalising filesystem (macOS) the second would replace
        the first; it is refused, on every filesystem alike, and the first stays as it came."""
        rows = (
            ("Report.txt", "report.txt", "'Report.txt'"),
            ("caf\u00e9.txt", "cafe\u0301.txt", "'caf\u00e9.txt'"),  # NFC, then NFD
            ("Logs/a", "logs/b", "'Logs'"),  # a directory another name would share
        )
        for first, second, named in rows:
            with self.subTest(second=second):
                log = self.sink(frames(first, b"first") + frames(second, b"second"))
                self.assertIn(f"would be stored as {named}", log.artifact_error)
                self.assertEqual(log.artifacts, {first: entry(first, b"first")})
                self.assertEqual((self.root / "pod-a" / first).read_bytes(), b"first")
                self.assertEqual(self.leftovers(), [])

    def test_every_directory_counts_against_the_episodes_budget(self) -> None:
        """Issue 25: 0 bytes of artifacts cannot buy directories (4 KiB of disk each)."""
        deep = [frames(f"d{i}/e/f/g/h/i/j/empty", b"")[0] for i in range(3)]  # 7 directories each
        log = self.sink(deep, budget=10 * demo.ARTIFACT_DIRECTORY_BYTES)
        self.assertIn("would make 7 more directories", log.artifact_error)
        self.assertEqual(sorted(log.artifacts), ["d0/e/f/g/h/i/j/empty"])
        self.assertFalse((self.root / "pod-a" / "d1").exists(), "a directory made past the budget")
        shared = [frames(f"d/f{i}", b"")[0] for i in range(9)]  # one directory, counted once
        self.assertEqual(self.sink(shared, budget=demo.ARTIFACT_DIRECTORY_BYTES).artifact_error, "")

    def test_a_long_non_ascii_name_that_fits_the_filesystem_is_saved(self) -> None:
        """Issue 25: 85 three-byte characters are 255 bytes, a file name's limit; the temporary
        name is cut by bytes, not characters, so it fits too."""
        name = "\u4e2d" * 85
        log = self.sink(frames(name, b"smile"))
        self.assertEqual(log.artifact_error, "")
        self.assertEqual((self.root / "pod-a" / name).read_bytes(), b"smile")

    def test_no_pods_output_costs_another_episodes_artifacts(self) -> None:
        """The run's budget for <pod>.log text spent by loud pods: an honest episode's artifact,
        within its own --max-artifact-bytes, is still saved, and takes none of that budget."""
        budgets = demo.LogBudgets(disk=0, artifacts=self.root)
        sink = demo.ArtifactSink(self.root, "pod-a", budgets)
        for line in frames("big", b"z" * 2000, size=500):
            sink.frame(line)
        self.assertEqual(sink.error, "")
        self.assertEqual((self.root / "pod-a" / "big").read_bytes(), b"z" * 2000)
        self.assertEqual(budgets.disk, 0)

    def test_a_warm_ups_view_spends_the_runs_budgets(self) -> None:
        run = demo.LogBudgets(disk=1000, memory=100, artifacts=self.root / "artifacts")
        warmup = run.saving_artifacts_in(self.root / "warmup" / "artifacts")
        self.assertEqual(
            (warmup.artifacts, warmup.artifact_bytes), (self.root / "warmup" / "artifacts", run.artifact_bytes)
        )
        self.assertEqual(warmup.take_disk(600), 600)
        self.assertEqual(warmup.saving_artifacts_in(self.root).take_disk(600), 400)  # a view of a view: the run's
        self.assertFalse(warmup.take_memory(101))
        self.assertTrue(warmup.take_memory(100))
        self.assertEqual((run.disk, run.memory), (0, 0))


class ReaderTest(unittest.TestCase):
    """Frames through the log reader: to DIR/artifacts, not to <pod>.log; a frame glued to another
    pod's line puts both pods' logs in doubt (read again alone)."""

    def test_frames_go_to_the_artifacts_and_a_glued_frame_is_doubted(self) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            budgets = demo.LogBudgets(artifacts=root / "artifacts")
            reader = demo.EpisodeLogReader(root, ["pod-a", "pod-b"], budgets=budgets)
            ready = b'{"event": "ready", "at": 1, "episode_id": "pod-a"}'
            text = b"".join(b"[pod/pod-a/episode] " + line + b"\n" for line in [ready, *frames("x.bin", BINARY)])
            reader.feed(text + b"[pod/pod-b/episode] " + frames("y", b"y")[0])  # pod-b's last frame lacks its newline
            reader.feed(b"[pod/pod-a/episode] " + ready + b"\n")  # kubectl glues pod-a's next line onto it
            logs = reader.finish()
            self.assertEqual((root / "artifacts" / "pod-a" / "x.bin").read_bytes(), BINARY)
            self.assertEqual(logs["pod-a"].artifacts, {"x.bin": entry("x.bin", BINARY)})
            self.assertNotIn(b"rl-demo-artifact", (root / "pod-a.log").read_bytes())
            self.assertIn(b"4 artifact frame lines went to", (root / "pod-a.log").read_bytes())
            self.assertEqual(reader.doubtful, {"pod-a", "pod-b"})
            self.assertIn("not a well-formed artifact frame", logs["pod-b"].artifact_error)

    def test_a_pod_whose_message_lists_artifacts_has_its_log_read_beyond_the_crosscheck(self) -> None:
        reward = {"event": "reward", "at": 2, "episode_id": "p", "reward": 1, "artifacts": [entry("a", b"a")]}
        self.assertTrue(demo.declares_artifacts(json.dumps(reward) + "\n"))
        self.assertFalse(demo.declares_artifacts(json.dumps(dict(reward, artifacts=[])) + "\n"))
        self.assertFalse(demo.declares_artifacts(""))


class WorkerSideTest(unittest.TestCase):
    """The built-in worker's and the template's send_artifacts, run in-process on a scratch
    directory: binary and nested files round-trip through the client's sink; a symlink to a file
    or a directory outside is skipped, never followed."""

    def send(self, source: str) -> tuple[Any, str, Path]:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-worker-side-")
        self.addCleanup(scratch.cleanup)
        root = Path(scratch.name)
        artifacts = root / "artifacts"
        (artifacts / "nested" / "deeper").mkdir(parents=True)
        (artifacts / "all-bytes.bin").write_bytes(BINARY)
        (artifacts / "nested" / "deeper" / "empty").write_bytes(b"")
        (root / "secret.txt").write_text("not an artifact")
        (artifacts / "link-to-secret").symlink_to(root / "secret.txt")
        (artifacts / "link-to-dir").symlink_to(root, target_is_directory=True)
        env = {"EPISODE_ID": "pod-a", "RL_DEMO_ARTIFACTS": str(artifacts), "RL_DEMO_WORKSPACE": str(root)}
        namespace: dict[str, Any] = {"__name__": "worker"}
        out, err = io.StringIO(), io.StringIO()
        with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(compile(source, "worker.py", "exec"), namespace)
            manifest = namespace["send_artifacts"]()
        sink_root = root / "saved"
        sink = demo.ArtifactSink(sink_root, "pod-a", demo.LogBudgets(artifacts=sink_root))
        for line in out.getvalue().encode().splitlines():
            sink.frame(line)
        log = demo.PodLog()
        sink.finish(log)
        self.assertEqual(log.artifact_error, "")
        self.assertEqual(
            demo.artifact_manifest(manifest, demo.DEFAULT_MAX_ARTIFACT_BYTES), list(log.artifacts.values())
        )
        self.assertEqual((sink_root / "pod-a" / "all-bytes.bin").read_bytes(), BINARY)
        return manifest, err.getvalue(), sink_root

    def test_both_workers_send_binary_and_nested_files_and_skip_symlinks(self) -> None:
        for name, source in (("built-in", demo.WORKER_SOURCE), ("template", demo.WORKER_TEMPLATE)):
            with self.subTest(name):
                manifest, _, saved = self.send(source)
                self.assertEqual([e["name"] for e in manifest], ["all-bytes.bin", "nested/deeper/empty"])
                self.assertFalse((saved / "pod-a" / "link-to-secret").exists())


# A custom worker (--worker) whose episode INDEX sends HOSTILE[INDEX]; index 0 is honest: binary,
# nested and empty files, a symlink to a file outside (skipped, never followed), a symlinked
# directory (skipped), sent as the template sends them.
HOSTILE_WORKER = r"""
import base64, hashlib, json, os, sys, time
first = time.time()
ID, INDEX = os.environ["EPISODE_ID"], int(os.environ["JOB_COMPLETION_INDEX"])
ART = os.environ["RL_DEMO_ARTIFACTS"]
EVENTS = []
def emit(name, **fields):
    EVENTS.append(json.dumps(dict(fields, event=name, at=time.time(), episode_id=ID), sort_keys=True) + "\n")
    print(EVENTS[-1], end="", flush=True)
    with open(os.environ["RL_DEMO_TERMINATION_LOG"], "w") as stream:
        stream.write("".join(EVENTS))
def frame(name, seq, total, sha, data):
    label = base64.urlsafe_b64encode(name.encode()).decode()
    print(f"rl-demo-artifact 1 {seq} {total} {sha} {label} {base64.b64encode(data).decode()}", flush=True)
def send(name, data, claim=None, skip=None, listed=True):
    sha = hashlib.sha256(data).hexdigest()
    pieces = [data[i:i + 24576] for i in range(0, len(data), 24576)] or [b""]
    for seq, piece in enumerate(pieces):
        if seq != skip:
            frame(name, seq, len(pieces), claim or sha, piece)
    return [{"name": name, "bytes": len(data), "sha256": claim or sha}] if listed else []
emit("ready", process_started_at=first, imports_done_at=first)
BINARY = bytes(range(256)) * 300
if INDEX == 0:
    os.makedirs(os.path.join(ART, "nested", "deeper"))
    with open(os.path.join(ART, "all-bytes.bin"), "wb") as f:
        f.write(BINARY)
    with open(os.path.join(ART, "nested", "deeper", "empty"), "wb"):
        pass
    outside = os.path.join(os.path.dirname(ART), "secret.txt")
    with open(outside, "w") as f:
        f.write("not an artifact")
    os.symlink(outside, os.path.join(ART, "link-to-secret"))
    os.symlink(os.path.dirname(ART), os.path.join(ART, "link-to-dir"))
    files = sorted(
        (os.path.relpath(os.path.join(d, n), ART).replace(os.sep, "/"), os.path.join(d, n))
        for d, _, names in os.walk(ART) for n in names if not os.path.islink(os.path.join(d, n))
    )
    manifest = []
    for name, path in files:
        with open(path, "rb") as f:
            manifest += send(name, f.read())
elif INDEX == 1:
    manifest = send("big.bin", b"b" * 100_000)
elif INDEX == 2:
    manifest = []
    frame("../../escape", 0, 1, hashlib.sha256(b"x").hexdigest(), b"x")
elif INDEX == 3:
    manifest = []
    frame("/tmp/absolute", 0, 1, hashlib.sha256(b"x").hexdigest(), b"x")
elif INDEX == 4:
    manifest = send("forged.bin", BINARY, claim=hashlib.sha256(b"something else").hexdigest())
elif INDEX == 5:
    manifest = send("gap.bin", BINARY, skip=1)
elif INDEX == 6:
    manifest = send("unlisted.txt", b"u", listed=False)
else:
    manifest = [{"name": "never-sent.txt", "bytes": 1, "sha256": hashlib.sha256(b"n").hexdigest()}]
emit("reward", reward=1.0, artifacts=manifest)
"""
HOSTILE_CAUSES = {  # index -> what its failed_episodes cause says
    1: "its artifacts take 100,000 bytes, over the --max-artifact-bytes budget of 90,000 bytes per episode",
    2: "'..' segment",
    3: "is absolute",
    4: "its frames claim",
    5: "frames 1 to 1 of artifact 'gap.bin' are missing",
    6: "it sent an artifact 'unlisted.txt' that its reward event does not list",
    7: "its artifact 'never-sent.txt' never arrived",
}


@end_to_end
class ArtifactRunTest(unittest.TestCase):
    """Runs through the fake cluster (`kubectl logs` as the kubelet serves it)."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-artifact-runs-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)

    def run_tool(self, name: str, *options: str, faults: Any = None) -> tuple[subprocess.CompletedProcess[str], Path]:
        cluster = FakeCluster(self.root / f"cluster-{name}", faults=faults)
        output = self.root / f"out-{name}"
        try:
            result = subprocess.run(
                tool_command("run", "--output", str(output), "--quiet", "--cleanup", "always", *options),
                cwd=self.root,
                env=tool_environment(cluster.env()),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        finally:
            cluster.close()
        self.assertNotIn("Traceback", result.stderr)
        return result, output

    def test_the_built_in_worker_saves_its_patch_and_its_test_output(self) -> None:
        """Also with --warmup: DIR/artifacts holds the measured episodes' alone (a warm-up's are in
        its own directory), one folder per pods[] row."""
        result, output = self.run_tool("builtin", "--count", "2", "--warmup")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = json.loads((output / "results.json").read_text())
        lines = demo.read_reward_lines(output / demo.REWARDS_FILE)
        self.assertEqual(
            sorted(path.name for path in (output / "artifacts").iterdir()), sorted(r["pod"] for r in results["pods"])
        )
        self.assertTrue(list((output / demo.WARMUP_DIR).glob("**/artifacts/*/patch.diff")), "no warm-up artifacts")
        for row in results["pods"]:
            folder = output / "artifacts" / row["pod"]
            self.assertEqual([a["name"] for a in row["artifacts"]], ["patch.diff", "tests-output.txt"])
            for listed in row["artifacts"]:
                data = (folder / listed["name"]).read_bytes()
                self.assertEqual(entry(listed["name"], data), listed)
            patch = (folder / "patch.diff").read_text()
            self.assertIn("-    return 0 if total > 99 else 10\n+    return 0 if total >= 99 else 10", patch)
            self.assertIn("Ran 3 tests", (folder / "tests-output.txt").read_text())
            [line] = [line for line in lines if line["pod"] == row["pod"]]
            self.assertEqual(line["artifacts"], row["artifacts"])
            self.assertNotIn("artifacts", line["info"] or {})

    def test_hostile_artifacts_fail_their_own_episode_only(self) -> None:
        worker = self.root / "hostile.py"
        worker.write_text(HOSTILE_WORKER)
        count = 8
        result, output = self.run_tool(
            "hostile",
            *("--count", str(count), "--worker", str(worker), "--failed-episode-reward", "0"),
            # index 0's 76,800 bytes and 2 directories (8,192) fit, index 1's 100,000 bytes do not
            *("--max-artifact-bytes", "90000"),
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(all(ch.isprintable() or ch == "\n" for ch in result.stderr), result.stderr)
        results = json.loads((output / "results.json").read_text())
        causes = {e["index"]: e["cause"] for e in results["failed_episodes"]}
        self.assertEqual(sorted(causes), sorted(HOSTILE_CAUSES))
        for index, cause in HOSTILE_CAUSES.items():
            with self.subTest(index=index):
                self.assertIn(cause, causes[index])
        self.assertIn("likely cause is rotation", causes[5])
        [row] = results["pods"]
        folder = output / "artifacts" / row["pod"]
        self.assertEqual((folder / "all-bytes.bin").read_bytes(), bytes(range(256)) * 300)
        self.assertEqual((folder / "nested" / "deeper" / "empty").read_bytes(), b"")
        self.assertEqual([a["name"] for a in row["artifacts"]], ["all-bytes.bin", "nested/deeper/empty"])
        self.assertFalse((folder / "link-to-secret").exists())
        written = [p for p in output.rglob("*") if p.is_file()]
        self.assertTrue(all(output in p.parents for p in written))
        self.assertFalse(any("escape" in p.name or "absolute" in p.name for p in (output.parent).rglob("*")))
        self.assertEqual([p for p in (output / "artifacts").rglob("*.part")], [])

    def test_a_log_followed_from_its_start_loses_no_frame_to_the_kubelets_rotation(self) -> None:
        """The log is followed while the pod runs, and the kubelet's follow reopens the file it
        rotated (pkg/kubelet/kuberuntime/logs/logs.go ReadLogs: waitLogs reports it recreated):
        300 KB of frames through a 64 KiB log file arrive whole (a log read only once its pod has
        ended gets the current file alone)."""
        worker = self.root / "rotated.py"
        rotating = HOSTILE_WORKER.replace("if INDEX == 0:", "if INDEX == -1:").replace(
            "elif INDEX == 1:", "elif INDEX == 0:"
        )
        # written 2 s after the start, when the log is followed (from the container's start on)
        worker.write_text(rotating.replace('b"b" * 100_000', "(time.sleep(2), os.urandom(300_000))[1]"))
        result, output = self.run_tool(
            "rotated",
            *("--count", "1", "--worker", str(worker), "--tasks", str(self.tasks(1))),
            faults={"container_log_max_size": 64 * 1024},
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        [row] = json.loads((output / "results.json").read_text())["pods"]
        self.assertIn("big.bin", [entry["name"] for entry in row["artifacts"]])
        saved = (output / "artifacts" / row["pod"] / "big.bin").read_bytes()
        self.assertEqual(len(saved), 300_000)

    def tasks(self, count: int) -> Path:
        path = self.root / f"tasks-{count}.jsonl"
        path.write_text("".join(json.dumps({"id": f"t{i}"}) + "\n" for i in range(count)))
        return path


if __name__ == "__main__":
    unittest.main()
