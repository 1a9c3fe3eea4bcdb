"""Replays every kubectl argument list the tool produced against the real kubectl.

The fake accepts only what real kubectl accepts, but the fake could be wrong too. Here the
argument lists recorded in several scenarios go to the real kubectl (when one is installed)
with a kubeconfig pointing at an unreachable server: each must get as far as trying to
connect, never stop at a flag or verb kubectl does not know.

The scenarios run the tool in-process (its argument lists are the same as from a subprocess)
with the tests' instant waits, so retries and polls cost no real time, and with the fake's
stand-in worker, since the argument lists do not depend on the grading; the fake still answers
every call as a separate kubectl process. The replays run a few at a time."""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import unittest.mock
from pathlib import Path
from typing import Any

import rl_batch_demo as demo
from tests.callplan import FAST
from tests.test_run import ClusterTestCase
from tests.tiers import end_to_end

REAL_KUBECTL = shutil.which("kubectl")
UNREACHABLE = "https://127.0.0.1:1"
REJECTED = re.compile(
    r"unknown (flag|shorthand flag|command)|flag needs an argument|invalid argument|"
    r"required flag|accepts at most|expected one of|unknown resource type|doesn't have a resource type|"
    r"error: you must specify|cannot be used with|is not a valid"
)
REACHED_NETWORK = re.compile(r"connection refused|was refused|Unable to connect|dial tcp|connect: ")


@end_to_end
class ReplayTest(ClusterTestCase):
    runs_concurrently = False  # runs the tool in this process, with os.environ patched

    def setUp(self) -> None:
        if REAL_KUBECTL is None:
            self.skipTest("no real kubectl on PATH to replay against")
        super().setUp()

    def kubeconfig(self, contexts: set[str]) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "unreachable", "cluster": {"server": UNREACHABLE, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "nobody", "user": {"token": "not-a-secret"}}],
            "contexts": [
                {"name": name, "context": {"cluster": "unreachable", "user": "nobody"}} for name in sorted(contexts)
            ],
            "current-context": sorted(contexts)[0],
        }
        path = self.root / "unreachable.kubeconfig"
        path.write_text(json.dumps(config))
        return path

    def in_process(self, *argv: str) -> int:
        """rl_batch_demo.main(argv) in this process against the fake, output discarded."""
        with (
            unittest.mock.patch.dict(os.environ, self.cluster.env(), clear=True),
            unittest.mock.patch.object(demo, "TIMING", FAST),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()) as err,
        ):
            code = demo.main(list(argv))
        self.assertNotIn("Traceback", err.getvalue())
        return code

    def record_scenarios(self) -> list[dict[str, Any]]:
        self.assertEqual(self.in_process("check", "--count", "2"), 0)
        self.cluster.set_faults({"logs_unavailable": [0], "watch_ends_early": True, "stand_in_worker": True})
        failed = str(self.root / "failed")
        self.assertEqual(self.in_process("run", "--count", "2", "--output", failed, "--quiet"), demo.EXIT_EPISODE)
        self.cluster.set_faults({"stand_in_worker": True})
        ok = str(self.root / "ok")  # and its cleanup: the deletes and the waits for them
        argv = ["--rounds", "2", "--runtime", "none", "--quiet", "--cleanup", "always", "--context", "fake-ctx"]
        self.assertEqual(self.in_process("run", "--count", "1", "--output", ok, *argv), 0)
        return self.cluster.call_records()

    def test_every_argument_list_is_accepted_by_real_kubectl(self) -> None:
        records = self.record_scenarios()
        contexts = {"fake-ctx"}
        unique: dict[tuple[str, ...], dict[str, Any]] = {}
        for record in records:
            unique.setdefault(tuple(record["argv"]), record)
        self.assertGreaterEqual(len(unique), 12)
        kubeconfig = self.kubeconfig(contexts)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.root), "KUBECONFIG": str(kubeconfig)}

        replays = {  # what the tool ran, without the fake's kubeconfig: its stdin
            tuple(arg for arg in argv if not arg.startswith("--kubeconfig")): record.get("stdin") or ""
            for argv, record in unique.items()
        }

        def replay(argv: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [REAL_KUBECTL or "kubectl", *argv],
                input=replays[argv],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            results = dict(zip(replays, pool.map(replay, replays)))
        for argv, result in results.items():
            with self.subTest(argv=" ".join(argv)):
                self.assertIsNone(REJECTED.search(result.stderr), result.stderr)
                if result.returncode != 0:
                    self.assertRegex(result.stderr, REACHED_NETWORK)


if __name__ == "__main__":
    import unittest

    unittest.main()
