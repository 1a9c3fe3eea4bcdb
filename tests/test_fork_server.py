"""The fake's fork server (tests/fakekube/zygote.py): a call it makes is the call the fake makes in
a process of its own, to the tool that started it: the same answers on the same pipes, the same
exit for each signal, the same process ID in the fake's records, and no output once it is killed."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Callable, Dict, List, Set

from tests.fakecluster import ENVIRONMENT, FAKE_KUBECTL, SERVE_ENV, ZYGOTE_ENV, FakeCluster, fork_server_pid

WATCH = ["--namespace=default", "get", "serviceaccounts", "-o", "json", "--output-watch-events", "--watch"]
CONFIGMAP = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "NAME", "namespace": "default"}}'


def children(pid: int) -> Set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listing:
            return {int(word) for word in listing.read().split()}
    except OSError:
        return set()


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class ForkServerTest(unittest.TestCase):
    runs_concurrently = True  # only subprocesses

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rl-fork-server-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        self.cluster = FakeCluster(self.root / "cluster")
        self.addCleanup(self.cluster.close)
        self.served = self.cluster.env()
        socket = self.served.get(ZYGOTE_ENV)
        if socket is None:
            self.skipTest("no fork server here (RL_DEMO_FAKE_FORK_SERVER=0, or no os.pidfd_open)")
        self.assertTrue(wait_for(lambda: os.path.exists(socket)), "the fork server never listened")
        self.server = fork_server_pid()
        self.plain = {k: v for k, v in self.served.items() if k != ZYGOTE_ENV}

    def kubectl(self, env: Dict[str, str], argv: List[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", *argv], env=env, input=stdin, capture_output=True, text=True, timeout=60)

    def start_watch(self) -> subprocess.Popen[bytes]:
        """A watch through the server, running once its first event is out (the fake's SIGTERM
        handler is in place by then), and made by a copy: a child of the server."""
        assert self.server is not None
        before = children(self.server)
        watch = subprocess.Popen(["kubectl", *WATCH], env=self.served, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(
            lambda: (watch.poll() is None and watch.kill(), watch.wait(), watch.stdout.close(), watch.stderr.close())
        )  # type: ignore[func-returns-value, union-attr]
        assert watch.stdout is not None
        ready, _, _ = select.select([watch.stdout], [], [], 30)
        self.assertTrue(ready, "the watch printed nothing")
        self.assertIn(b'"type": "ADDED"', os.read(watch.stdout.fileno(), 1 << 16))
        self.assertTrue(children(self.server) - before, "no copy of the server made the call")
        return watch

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()

    def last_call(self) -> Dict[str, object]:
        return self.cluster.call_records()[-1]

    def test_a_served_call_answers_as_the_fakes_own_process(self) -> None:
        """The same exit code, stdout (a created object's own uid and stamps aside) and stderr, and
        the same stdin recorded."""
        for argv, stdin in (
            (["get", "namespaces", "-o", "json"], ""),
            (["get", "nosuchkind", "-o", "json"], ""),
            (["get", "namespaces"], ""),
            (["create", "-f", "-", "-o", "json"], CONFIGMAP),
            (["create", "-f", "-", "-o", "json"], "{not json"),
        ):
            with self.subTest(argv=argv, stdin=stdin):
                answers = []
                for env, name in ((self.plain, "plain"), (self.served, "served")):
                    made = self.kubectl(env, argv, stdin.replace("NAME", name))
                    stdout = made.stdout.replace(name, "NAME")
                    if argv[0] == "create" and made.returncode == 0:
                        created = json.loads(stdout)
                        for field in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
                            created["metadata"].pop(field, None)
                        stdout = json.dumps(created)
                    recorded = self.last_call()["stdin"]
                    self.assertEqual(recorded, stdin.replace("NAME", name) if stdin else None)
                    answers.append((made.returncode, stdout, made.stderr))
                self.assertEqual(answers[1], answers[0])

    def test_a_signal_to_the_client_ends_the_call_as_it_ends_the_fakes_process(self) -> None:
        for signum, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, -signal.SIGHUP)):
            with self.subTest(signal=signum.name):
                watch = self.start_watch()
                watch.send_signal(signum)
                self.assertEqual(watch.wait(30), code)
                record = self.last_call()
                self.assertEqual(record["pid"], watch.pid)  # the process the tool started, not the copy
                self.assertEqual(record["rc"], None if code < 0 else code)

    def test_a_killed_client_takes_its_copy_with_it(self) -> None:
        """SIGKILL reaches the client only; its copy, which holds the same stdout, is killed too,
        so the reader sees the end of the stream, as after a killed kubectl."""
        assert self.server is not None
        before = children(self.server)
        watch = self.start_watch()
        [copy] = children(self.server) - before
        watch.kill()
        self.assertEqual(watch.wait(30), -signal.SIGKILL)
        assert watch.stdout is not None
        ready, _, _ = select.select([watch.stdout], [], [], 30)
        self.assertTrue(ready)
        self.assertEqual(os.read(watch.stdout.fileno(), 1 << 16), b"")
        self.assertTrue(wait_for(lambda: copy not in children(self.server)), "the copy outlived its client")
        self.assertEqual(self.last_call()["rc"], None)  # killed: no end recorded

    def test_without_a_server_the_client_makes_the_call_itself(self) -> None:
        gone = {**self.plain, ZYGOTE_ENV: str(self.root / "no-server")}
        made = self.kubectl(gone, ["get", "namespaces", "-o", "json"])
        self.assertEqual(
            (made.returncode, made.stdout), (0, self.kubectl(self.plain, ["get", "namespaces", "-o", "json"]).stdout)
        )


class ForkServerLifeTest(unittest.TestCase):
    runs_concurrently = True  # only subprocesses

    def test_the_server_ends_when_its_stdin_closes_and_its_calls_have_ended(self) -> None:
        if not hasattr(os, "pidfd_open"):
            self.skipTest("the fork server needs os.pidfd_open")
        root = Path(tempfile.mkdtemp(prefix="rl-fork-server-"))
        self.addCleanup(shutil.rmtree, root, True)
        cluster = FakeCluster(root / "cluster")
        self.addCleanup(cluster.close)
        socket = str(root / "socket")
        server = subprocess.Popen(
            [sys.executable, "-S", str(FAKE_KUBECTL)],
            env={**ENVIRONMENT, SERVE_ENV: socket},
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
        self.addCleanup(lambda: (server.poll() is None and server.kill(), server.wait()))  # type: ignore[func-returns-value]
        self.assertTrue(wait_for(lambda: os.path.exists(socket)))
        env = {**cluster.env(), ZYGOTE_ENV: socket}
        watch = subprocess.Popen(["kubectl", *WATCH], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert watch.stdout is not None and server.stdin is not None
        select.select([watch.stdout], [], [], 30)
        self.assertTrue(children(server.pid), "the watch is not the server's")
        server.stdin.close()
        self.assertTrue(wait_for(lambda: not os.path.exists(socket)), "the server still listens")
        time.sleep(0.05)
        self.assertIsNone(server.poll(), "the server ended before its call")
        watch.terminate()
        self.assertEqual(watch.wait(30), 143)  # the call ended as the fake's: its SIGTERM handler ran
        watch.stdout.close()
        self.assertEqual(server.wait(30), 0)
        after = subprocess.run(
            ["kubectl", "get", "namespaces", "-o", "json"], env=env, capture_output=True, text=True, timeout=60
        )
        self.assertEqual(after.returncode, 0, after.stderr)  # no server: the client made it itself


if __name__ == "__main__":
    unittest.main()
