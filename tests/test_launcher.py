"""The pod's launcher (src/rl_batch_demo/sandbox/launcher.py, shipped as LAUNCHER_SOURCE).

What it sends is read by the client's own log reader, frame parser and validation
(EpisodeLogReader, ArtifactSink, episode_artifacts), so each test proves that the client accepts
it, or fails the episode with a cause that names what the launcher refused. Two tiers: the
launcher run as a pod runs it (`python -B -S launcher.py`, a tiny stand-in worker as the episode.py
beside it, in a scratch directory) for what needs its process: the whole path of a left file,
SIGTERM, exit codes, a last line without its newline; and its file rules in-process, on its own
functions loaded from the same source (symlinks, unreadable files, names, 64 files, the budget,
a file that changes while it is read), where an interpreter start per case would cost more than
the case."""

from __future__ import annotations

import base64
import dataclasses
import errno
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import rl_batch_demo as demo
from tests.clusterobjects import settings_for
from tests.fakecluster import ENVIRONMENT
from tests.toolprocess import image_python

BINARY = bytes(range(256)) * 300  # every byte value, over four frames

# The stand-in worker's helpers; each test adds its own lines after them.
WORKER_HEAD = r'''
import base64, hashlib, json, os, signal, sys, time

ARTIFACTS = os.environ["RL_DEMO_ARTIFACTS"]


def leave(name, data=b"", mode=None):
    """A file left under ARTIFACTS (name: str, or bytes that need not be UTF-8)."""
    root = os.fsencode(ARTIFACTS) if isinstance(name, bytes) else ARTIFACTS
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as stream:
        stream.write(data)
    if mode is not None:
        os.chmod(path, mode)


def send(name, data):
    """What send_artifacts does for one file: its frame printed, its manifest entry returned."""
    leave(name, data)
    digest = hashlib.sha256(data).hexdigest()
    label = base64.urlsafe_b64encode(name.encode()).decode()
    print(f"rl-demo-artifact 1 0 1 {digest} {label} {base64.b64encode(data).decode()}", flush=True)
    return {"name": name, "bytes": len(data), "sha256": digest}


def reward(end="\n", **fields):
    line = json.dumps({"event": "reward", "at": time.time(), "reward": 1, **fields})
    print(line, end=end, flush=True)
    with open(os.environ["RL_DEMO_TERMINATION_LOG"], "a") as stream:
        stream.write(line + "\n")
'''


def sigterm_worker(send_reward: bool) -> str:
    """A worker's body that says "waiting" once its SIGTERM handler is set, then sleeps; on
    SIGTERM it says so on stderr, sends its reward (`send_reward`) and dies by the signal."""
    return (
        "def stopped(number, frame):\n"
        "    print('worker got SIGTERM', file=sys.stderr, flush=True)\n"
        + ("    reward()\n" if send_reward else "")
        + "    signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "signal.signal(signal.SIGTERM, stopped)\n"
        "print('waiting', flush=True)\n"
        "time.sleep(60)\n"
    )


@dataclasses.dataclass
class Launched:
    """What one launcher run left: its exit code, stdout, stderr, and the reward event it printed
    and the one its termination message holds (None when absent)."""

    code: int
    out: bytes
    err: str
    reward: Optional[Dict[str, Any]]
    message_reward: Optional[Dict[str, Any]]


def reward_of(text: bytes) -> Optional[Dict[str, Any]]:
    for line in text.splitlines():
        if line.startswith(b"{") and b'"reward"' in line:
            event = json.loads(line)
            if event.get("event") == "reward":
                return dict(event)
    return None


def launcher_namespace() -> Dict[str, Any]:
    """The launcher's functions, loaded from its source without running its main()."""
    namespace: Dict[str, Any] = {"__name__": "rl_demo_launcher", "__file__": "launcher.py"}
    exec(compile(demo.LAUNCHER_SOURCE, "launcher.py", "exec"), namespace)
    return namespace


class Proxy:
    """A module as the launcher sees it (its `os` or `sys`), with some attributes replaced."""

    def __init__(self, module: Any, **replaced: Any) -> None:
        self.module = module
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)


class ClientSide(unittest.TestCase):
    """A scratch directory, and the client reading a pod's log there."""

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-launcher-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)
        self.artifacts = self.root / "workspace" / "artifacts"
        self.artifacts.mkdir(parents=True)

    def client(self, out: bytes, budget: int = demo.DEFAULT_MAX_ARTIFACT_BYTES) -> Tuple[demo.PodLog, str]:
        """What the client makes of a pod's log: the PodLog (the artifacts it saved, its frame
        error) and the cause that fails the episode ("" when it stands)."""
        root = self.root / "client"
        budgets = demo.LogBudgets(artifacts=root / "artifacts", artifact_bytes=budget)
        reader = demo.EpisodeLogReader(root, ["pod-a"], single_pod="pod-a", budgets=budgets)
        reader.feed(out)
        log = reader.finish()["pod-a"]
        self.assertIn("pod-a", reader.ended)  # the launcher's last line came: the log is whole
        try:
            demo.episode_artifacts("pod-a", demo.logged_events(log), log, None, budget, "its log")
        except demo.EpisodeInvalid as error:
            return log, error.rule
        return log, ""

    def saved(self, name: str) -> bytes:
        return (self.root / "client" / "artifacts" / "pod-a" / name).read_bytes()


class LauncherRunTest(ClientSide):
    """The launcher as a subprocess in its own scratch directory (tests/concurrently.py)."""

    runs_concurrently = True

    def setUp(self) -> None:
        super().setUp()
        self.demo_dir = self.root / "demo"
        self.demo_dir.mkdir()
        (self.demo_dir / "launcher.py").write_text(demo.LAUNCHER_SOURCE, encoding="utf-8")
        self.message = self.root / "termination-log"
        self.message.write_text("")

    def command(self, worker: str, budget: int) -> Tuple[List[str], Dict[str, str]]:
        (self.demo_dir / "episode.py").write_text(WORKER_HEAD + worker, encoding="utf-8")
        env = dict(
            ENVIRONMENT,
            RL_DEMO_WORKSPACE=str(self.root / "workspace"),
            RL_DEMO_ARTIFACTS=str(self.artifacts),
            RL_DEMO_TERMINATION_LOG=str(self.message),
            RL_DEMO_MAX_ARTIFACT_BYTES=str(budget),
        )
        # the pod's own command (`python -B -S /demo/launcher.py`), its python this interpreter
        own = settings_for(1, worker_file="own.py", launcher_source=demo.LAUNCHER_SOURCE)  # --worker's settings
        container = demo.round_job_manifest(own, "rollout", "ns", "r", "img")["spec"]["template"]["spec"]
        python, *flags, path = container["containers"][0]["command"]
        self.assertEqual((python, path), ("python", "/demo/launcher.py"))
        return [image_python(), *flags, str(self.demo_dir / "launcher.py")], env

    def launch(self, worker: str, budget: int = demo.DEFAULT_MAX_ARTIFACT_BYTES) -> Launched:
        command, env = self.command(worker, budget)
        result = subprocess.run(command, env=env, cwd=str(self.root), capture_output=True, timeout=60, check=False)
        out, err = result.stdout, result.stderr.decode(errors="replace")
        return Launched(result.returncode, out, err, reward_of(out), reward_of(self.message.read_bytes()))

    def test_a_copy_of_the_built_in_worker_given_as_worker_ends_with_one_end_line(self) -> None:
        """show-worker's text given back as --worker runs under the launcher: the worker leaves
        the end line to it (RL_DEMO_LAUNCHED), so the log ends once, after its files."""
        command, env = self.command("", demo.DEFAULT_MAX_ARTIFACT_BYTES)
        (self.demo_dir / "episode.py").write_text(demo.WORKER_SOURCE, encoding="utf-8")
        result = subprocess.run(
            command, env=dict(env, EPISODE_ID="pod-a"), cwd=str(self.root), capture_output=True, timeout=60, check=False
        )
        self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace"))
        lines = result.stdout.splitlines()
        self.assertEqual((lines.count(demo.LOG_END_LINE), lines[-1]), (1, demo.LOG_END_LINE))
        reward = reward_of(result.stdout)
        assert reward is not None
        self.assertEqual(reward["reward"], 1, reward)
        self.assertEqual(sorted(a["name"] for a in reward["artifacts"]), ["patch.diff", "tests-output.txt"])
        log, cause = self.client(result.stdout)
        self.assertEqual((cause, sorted(log.artifacts)), ("", ["patch.diff", "tests-output.txt"]))
        self.assertEqual(self.saved("patch.diff")[:4], b"--- ")

    def test_left_files_are_sent_whole_and_the_client_saves_them(self) -> None:
        """Binary, nested, empty and non-ASCII names (UTF-8, as the client takes them) reach the
        client byte for byte; what the worker sent itself is not sent again; the termination
        message lists the same artifacts."""
        run = self.launch(
            f"leave('nested/deeper/all-bytes.bin', {BINARY!r})\n"
            "leave('empty')\n"
            "leave('résumé.txt', 'été'.encode())\n"
            "leave('日本語/メモ.txt', b'memo')\n"
            "leave('ÿþ.bin', b'+/')\n"
            "reward(artifacts=[send('own.txt', b'mine')])\n"
        )
        self.assertEqual(run.code, 0, run.err)
        assert run.reward is not None
        names = ["empty", "nested/deeper/all-bytes.bin", "own.txt", "résumé.txt", "ÿþ.bin", "日本語/メモ.txt"]
        # each frame names its file in base64url, as send_artifacts does ("ÿþ.bin" is "w7/Dvi5iaW4="
        # in the standard alphabet: a '+' or '/' in a label would be another reader's guess)
        labels = {line.split()[5] for line in run.out.splitlines() if line.startswith(b"rl-demo-artifact ")}
        self.assertEqual(labels, {base64.urlsafe_b64encode(name.encode()) for name in names})
        self.assertEqual([entry["name"] for entry in run.reward["artifacts"]], names)
        self.assertNotIn("artifacts_refused", run.reward)
        self.assertEqual(run.message_reward, run.reward)
        own = base64.urlsafe_b64encode(b"own.txt")
        self.assertEqual(sum(1 for line in run.out.splitlines() if own in line), 1)  # sent once, by the worker
        log, cause = self.client(run.out)
        self.assertEqual((log.artifact_error, cause), ("", ""))
        self.assertEqual(sorted(log.artifacts.values(), key=lambda entry: entry["name"]), run.reward["artifacts"])
        self.assertEqual(self.saved("nested/deeper/all-bytes.bin"), BINARY)
        self.assertEqual(self.saved("résumé.txt"), "été".encode())
        self.assertEqual(self.saved("empty"), b"")
        self.assertEqual(run.out.splitlines()[-1], demo.LOG_END_LINE)

    def test_a_pod_pays_only_for_the_imports_every_pod_needs(self) -> None:
        """Every pod starts the launcher before its worker: with the pod's command (-S, no
        site-packages) and a worker that leaves no file, it imports neither subprocess (and the
        selectors, threading and locale it brings) nor base64 nor hashlib (OpenSSL). The worker,
        its own interpreter, is not counted: its imports go to the same stderr, so it has none."""
        command, env = self.command("", demo.DEFAULT_MAX_ARTIFACT_BYTES)
        (self.demo_dir / "episode.py").write_text('print(\'{"event": "reward"}\')\n', encoding="utf-8")
        traced = [command[0], "-X", "importtime", *command[1:]]
        result = subprocess.run(traced, env=env, cwd=str(self.root), capture_output=True, timeout=60, check=True)
        imported = {line.split("|")[-1].strip() for line in result.stderr.decode().splitlines() if "|" in line}
        self.assertIn("json", imported)  # the trace works: the launcher reads the reward event
        unwanted = {"subprocess", "selectors", "threading", "locale", "base64", "hashlib", "_hashlib", "site"}
        self.assertFalse(unwanted & imported, sorted(imported))
        self.assertEqual(result.stdout.splitlines()[-1], demo.LOG_END_LINE)

    def ended(self, launcher: subprocess.Popen[bytes]) -> Tuple[bytes, bytes]:
        """The launcher's output once it has ended. One still running after 30 s fails the test at
        once, with what it and its worker printed: the whole session (both) is killed, so the
        test does not go on to wait for the worker's sleep (CI on Python 3.10 once waited so for
        this signal, not seen since in 60 runs)."""
        try:
            return launcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            out, err = launcher.communicate()
            self.fail(f"the launcher had not ended 30 s after SIGTERM; stdout: {out!r}; stderr: {err!r}")

    def test_sigterm_is_passed_on_and_the_launcher_ends_by_it(self) -> None:
        """The worker gets the SIGTERM sent to the launcher, sends its reward and dies by the
        signal; the launcher prints the reward and its end line, then ends by the same signal (a
        container's exit code 128 + 15)."""
        command, env = self.command(sigterm_worker(send_reward=True), demo.DEFAULT_MAX_ARTIFACT_BYTES)
        with subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        ) as launcher:
            assert launcher.stdout is not None
            self.assertEqual(launcher.stdout.readline(), b"waiting\n")  # the worker runs, its handler set
            launcher.send_signal(signal.SIGTERM)
            out, err = self.ended(launcher)
        self.assertEqual(launcher.returncode, -signal.SIGTERM)
        self.assertIn(b"worker got SIGTERM", err)
        self.assertIsNotNone(reward_of(out))
        self.assertEqual(out.splitlines()[-1], demo.LOG_END_LINE)

    def test_a_blocked_sigterm_inherited_is_still_passed_on(self) -> None:
        """A signal mask survives exec: a launcher started with SIGTERM blocked (by whatever
        started it) still hears the Job's stop, and its worker starts with nothing blocked."""
        command, env = self.command(sigterm_worker(send_reward=False), demo.DEFAULT_MAX_ARTIFACT_BYTES)
        blocking = (
            "import os, signal, sys\n"
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
            "os.execv(sys.argv[1], sys.argv[1:])\n"
        )
        with subprocess.Popen(
            [image_python(), "-c", blocking, *command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        ) as launcher:
            assert launcher.stdout is not None
            self.assertEqual(launcher.stdout.readline(), b"waiting\n")
            launcher.send_signal(signal.SIGTERM)
            out, err = self.ended(launcher)
        self.assertEqual(launcher.returncode, -signal.SIGTERM, err)
        self.assertIn(b"worker got SIGTERM", err)
        self.assertEqual(out.splitlines()[-1], demo.LOG_END_LINE)

    def test_a_worker_killed_by_a_signal_ends_the_launcher_by_it(self) -> None:
        """Its reward event, its last line without a newline, still comes whole, on a line of its
        own, before the end line; then the launcher dies by the worker's signal."""
        run = self.launch("reward(end='')\nos.kill(os.getpid(), signal.SIGKILL)\n")
        self.assertEqual(run.code, -signal.SIGKILL)
        lines = run.out.split(b"\n")
        self.assertEqual(reward_of(lines[0]), run.message_reward)
        self.assertEqual(lines[1:], [demo.LOG_END_LINE, b""])

    def test_a_last_line_without_its_newline_gets_one(self) -> None:
        """The worker's last line lacks its newline: the frames, the held reward event and the
        end line each start a line of their own, and the client reads them all; the worker's exit
        code is the launcher's."""
        run = self.launch("leave('t.txt', b't')\nreward()\nprint('tail', end='', flush=True)\n")
        lines = run.out.split(b"\n")
        self.assertEqual(lines[0], b"tail")
        self.assertTrue(lines[1].startswith(b"rl-demo-artifact 1 0 1 "), lines)
        self.assertEqual(reward_of(lines[2]), run.reward)
        self.assertEqual(lines[3:], [demo.LOG_END_LINE, b""])
        log, cause = self.client(run.out)
        self.assertEqual((sorted(log.artifacts), cause), (["t.txt"], ""))
        bare = self.launch("print('partial', end='', flush=True)\nsys.exit(3)\n")
        self.assertEqual((bare.code, bare.out), (3, b"partial\n" + demo.LOG_END_LINE + b"\n"))


class LeftFilesTest(ClientSide):
    """The launcher's with_left_files (what main() does once the worker has exited) in-process,
    on files a test leaves in a scratch RL_DEMO_ARTIFACTS; its frames and the reward event it
    returns, as a pod's log, go to the client."""

    def leave(self, name: Union[str, bytes], data: bytes = b"") -> None:
        root: Union[str, bytes] = os.fsencode(str(self.artifacts)) if isinstance(name, bytes) else str(self.artifacts)
        path = os.path.join(root, name)  # type: ignore[arg-type]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as stream:
            stream.write(data)

    def send(
        self, budget: int = demo.DEFAULT_MAX_ARTIFACT_BYTES, **replaced_os: Any
    ) -> Tuple[Dict[str, Any], bytes, str]:
        """(the reward event the launcher would print, the pod's log it makes, its stderr)."""
        launcher = launcher_namespace()
        launcher["ARTIFACTS"] = str(self.artifacts)
        launcher["budget"] = lambda: budget  # RL_DEMO_MAX_ARTIFACT_BYTES, without touching os.environ
        stderr = io.StringIO()
        launcher["sys"] = Proxy(sys, stderr=stderr)
        if replaced_os:
            launcher["os"] = Proxy(os, **replaced_os)
        out = io.BytesIO()
        event = launcher["with_left_files"]({"event": "reward", "at": 1.0, "reward": 1}, out)
        log = out.getvalue() + json.dumps(event).encode() + b"\n" + demo.LOG_END_LINE + b"\n"
        return event, log, stderr.getvalue()

    def test_a_symlink_is_skipped_never_followed(self) -> None:
        outside = self.root / "outside"
        outside.mkdir()
        (outside / "secret.txt").write_text("not an artifact")
        self.leave("kept.txt", b"kept")
        (self.artifacts / "link").symlink_to(outside / "secret.txt")
        (self.artifacts / "link-dir").symlink_to(outside, target_is_directory=True)
        event, log, err = self.send()
        self.assertEqual([entry["name"] for entry in event["artifacts"]], ["kept.txt"])
        self.assertNotIn("artifacts_refused", event)
        self.assertIn("artifact skipped (not a regular file): link\n", err)
        self.assertIn("artifact skipped (not a regular file): link-dir\n", err)
        frames = [line for line in log.splitlines() if line.startswith(b"rl-demo-artifact")]
        self.assertEqual([base64.b64decode(line.split()[-1]) for line in frames], [b"kept"])
        self.assertEqual(self.client(log)[1], "")

    def test_an_unreadable_file_or_directory_fails_the_episode_naming_it(self) -> None:
        """Opening secret.bin and listing closed/ fail as a file of mode 000 does for anyone but
        root (the suite may run as root, which reads it anyway)."""
        self.leave("ok.txt", b"ok")
        self.leave("secret.bin", b"x")
        self.leave("closed/inner.txt", b"x")

        def refusing_open(path: str, flags: int, *rest: Any) -> int:
            if path.endswith("secret.bin"):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return os.open(path, flags, *rest)

        def refusing_scandir(path: str) -> Any:
            if path.endswith("closed"):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return os.scandir(path)

        event, log, _ = self.send(open=refusing_open, scandir=refusing_scandir)
        self.assertEqual([entry["name"] for entry in event["artifacts"]], ["ok.txt"])
        self.assertEqual(
            event["artifacts_refused"],
            [
                {"name": "closed", "why": "its directory cannot be read: Permission denied"},
                {"name": "secret.bin", "why": "it cannot be read: Permission denied"},
            ],
        )
        saved, cause = self.client(log)
        self.assertEqual((saved.artifact_error, sorted(saved.artifacts)), ("", ["ok.txt"]))
        self.assertIn("its artifacts could not all be sent: 'closed' (", cause)
        self.assertIn("'secret.bin' ('it cannot be read: Permission denied')", cause)

    def test_a_name_the_client_would_refuse_is_refused_by_name(self) -> None:
        """The client's name rules, applied before sending: what it would refuse is listed (its
        name escaped), what it takes is sent and saved; a non-UTF-8 name never reaches a frame."""
        for name in ("-rf", "a\u202eb.txt", b"\xff.bin", "Report.txt", "report.txt", "/".join("abcdefgh") + "/i.txt"):
            self.leave(name, b"x")
        self.leave("good.txt", b"x")
        event, log, _ = self.send()
        self.assertEqual([entry["name"] for entry in event["artifacts"]], ["Report.txt", "good.txt"])
        refused = {entry["name"]: entry["why"] for entry in event["artifacts_refused"]}
        self.assertEqual(sorted(refused), ["-rf", "\\xff.bin", "a/b/c/d/e/f/g/h", "a\u202eb.txt", "report.txt"])
        self.assertIn("more than 8 segments", refused["a/b/c/d/e/f/g/h"])
        self.assertIn("earlier artifact", refused["report.txt"])
        self.assertEqual(refused["\\xff.bin"], "is not UTF-8")
        saved, cause = self.client(log)
        self.assertEqual((saved.artifact_error, sorted(saved.artifacts)), ("", ["Report.txt", "good.txt"]))
        self.assertIn("its artifacts could not all be sent: '-rf' (", cause)

    def test_past_64_files_the_rest_are_refused_and_the_refusals_stay_short(self) -> None:
        """64 files are sent; the other 26 are refused, the first 16 listed and the count given,
        so the reward event stays a short line and the cause says how many."""
        for index in range(90):
            self.leave(f"f{index:03}", b"x")
        event, log, _ = self.send()
        self.assertEqual([entry["name"] for entry in event["artifacts"]], [f"f{i:03}" for i in range(64)])
        self.assertEqual(len(event["artifacts_refused"]), 16)
        self.assertEqual(event["artifacts_refused"][0], {"name": "f064", "why": "more than 64 artifacts"})
        self.assertEqual(event["artifacts_refused_count"], 26)
        self.assertLess(len(json.dumps(event)), demo.EVENT_LINE_LIMIT // 4)
        saved, cause = self.client(log)
        self.assertEqual((saved.artifact_error, len(saved.artifacts)), ("", 64))
        self.assertTrue(cause.endswith("and 21 more"), cause)

    def test_a_file_past_the_budget_is_refused_without_being_read(self) -> None:
        """A sparse 1 TiB checkpoint: read whole it would raise MemoryError (in a pod, an OOM
        kill whose cause names nothing); its size is judged before any of it is read."""
        self.leave("checkpoint.bin")
        os.truncate(self.artifacts / "checkpoint.bin", 2**40)
        self.leave("trajectory.json", b"{}")
        event, log, _ = self.send(budget=4096)
        self.assertEqual([entry["name"] for entry in event["artifacts"]], ["trajectory.json"])
        why = "1,099,511,627,776 bytes, over the budget of 4,096 bytes per episode (4,096 left)"
        self.assertEqual(event["artifacts_refused"], [{"name": "checkpoint.bin", "why": why}])
        self.assertIn("'checkpoint.bin' ('1,099,511,627,776 bytes, over the budget", self.client(log, 4096)[1])

    def test_every_directory_costs_the_budget_as_the_client_counts_it(self) -> None:
        """a/b/data (100 bytes, 2 directories) and a/x (no new directory) fill a budget of
        100 + 2 x 4,096 + 4,095 bytes exactly, and the client takes them; d/e, 0 bytes but one
        more directory, is refused, never sent for the client to refuse."""
        budget = 100 + 2 * demo.ARTIFACT_DIRECTORY_BYTES + 4095
        self.leave("a/b/data", b"x" * 100)
        self.leave("a/x", b"x" * 4095)
        self.leave("d/e")
        event, log, _ = self.send(budget=budget)
        self.assertEqual([entry["name"] for entry in event["artifacts"]], ["a/b/data", "a/x"])
        [refused] = event["artifacts_refused"]
        self.assertEqual(
            refused, {"name": "d/e", "why": "0 bytes and 1 new directory (4,096 bytes each), over the budget of "
                      "12,387 bytes per episode (0 left)"}
        )  # fmt: skip
        saved, cause = self.client(log, budget)
        self.assertEqual((saved.artifact_error, sorted(saved.artifacts)), ("", ["a/b/data", "a/x"]))
        self.assertIn("'d/e' (", cause)

    def test_a_budget_of_0_asks_for_none(self) -> None:
        """--max-artifact-bytes 0: the files left (the built-in worker always leaves two) are
        neither sent nor refused, and the episode stands."""
        self.leave("patch.diff", b"x")
        event, log, _ = self.send(budget=0)
        self.assertEqual(event, {"event": "reward", "at": 1.0, "reward": 1})
        self.assertNotIn(b"rl-demo-artifact", log)
        self.assertEqual(self.client(log, 0)[1], "")


class LauncherRulesTest(unittest.TestCase):
    """The launcher's own functions, in-process: its name rules are the client's, and a file that
    changes while it is read is refused rather than framed with a digest of other bytes."""

    NAMES = (
        "plain.txt", "résumé.txt", "日本語/メモ.txt", "🙂.txt", "cafe\u0301", "a" * 255, "é" * 127, "é" * 128,
        "a" * 256, "/".join("abcdefgh"), "/".join("abcdefghi"), "-rf", "a/-b", "a-b", "back\\slash", "tab\tname",
        "del\x7f", "c1\x85", "nul\x00", "a\u202eb", "zero\u200bwidth", "bom\ufeff", "line\u2028", "para\u2029",
        "\udcff.bin", "a/./b", "a//b", "a/../b", "nbsp\u00a0", "ideographic\u3000space", "tilde~",
    )  # fmt: skip
    EARLIER = (
        (["Report.txt"], "report.txt"), (["café"], "cafe\u0301"), (["dir/a"], "DIR/b"), (["dir/a"], "dir/b"),
        (["straße"], "STRASSE"), (["a/b"], "A"), (["x"], "y"),
    )  # fmt: skip

    def test_a_name_is_sent_exactly_when_the_client_would_save_it(self) -> None:
        launcher = launcher_namespace()
        for name in self.NAMES:
            with self.subTest(name=name):
                self.assertEqual(bool(launcher["name_problem"](name, {})), bool(demo.artifact_name_problem(name)))
        for earlier, name in self.EARLIER:
            with self.subTest(earlier=earlier, name=name):
                taken: Dict[str, str] = {}
                for other in earlier:
                    launcher["take"](other, taken, set())
                client = demo.artifact_name_problem(name, earlier)
                self.assertEqual(bool(launcher["name_problem"](name, taken)), bool(client))
        self.assertEqual(launcher["name_problem"]("résumé.txt", {}), "")

    def test_a_file_that_changes_while_it_is_read_is_refused(self) -> None:
        """Its size checked, then it grows, shrinks or is rewritten (a new mtime) as its first
        piece is read: refused, so no frame carries bytes its digest is not of."""
        with tempfile.TemporaryDirectory(prefix="rl-demo-launcher-") as scratch:
            path = Path(scratch) / "changing.bin"
            changes = {
                "grows": lambda: path.write_bytes(BINARY + b"more"),
                "shrinks": lambda: os.truncate(path, 10),
                "rewritten": lambda: os.utime(path, ns=(0, 0)),
            }
            for change, act in changes.items():
                with self.subTest(change):
                    path.write_bytes(BINARY)
                    pieces, why = read_within_while(act)(str(path), 2**20, "{size} bytes")
                    self.assertEqual((pieces, why), (None, "it changed while it was read"))
            path.write_bytes(BINARY)
            pieces, why = launcher_namespace()["read_within"](str(path), 2**20, "{size} bytes")
            self.assertEqual((b"".join(pieces), why), (BINARY, ""))
            self.assertTrue(all(len(piece) <= demo.ARTIFACT_FRAME_DATA for piece in pieces))
            over = launcher_namespace()["read_within"](str(path), len(BINARY) - 1, "{size} bytes")
            self.assertEqual(over, (None, "76,800 bytes"))


def read_within_while(act: Any) -> Any:
    """The launcher's read_within, `act` done as it reads its first piece."""
    launcher = launcher_namespace()
    done: List[bool] = []

    def read(descriptor: int, size: int) -> bytes:
        if not done:
            done.append(True)
            act()
        return os.read(descriptor, size)

    launcher["os"] = Proxy(os, read=read)
    return launcher["read_within"]


if __name__ == "__main__":
    unittest.main()
