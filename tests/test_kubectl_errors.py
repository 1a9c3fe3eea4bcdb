"""kubectl's words for a cluster it cannot use, and the tool's one line for each.

kubectl v1.32.4's texts were measured without a cluster: an empty $HOME (no kubeconfig and no
discovery cache), a --kubeconfig that does not exist, a closed port on 127.0.0.1 and a context
the kubeconfig lacks. They are recorded below (EXPECTED) and checked three ways:

* the fake kubectl prints them, byte for byte but for klog's time and process id (always);
* the real kubectl on PATH prints them too (when there is one; in the end-to-end tier,
  tests/tiers.py), so the record cannot go stale;
* the tool, run through the fake, answers each with one line that names the fix, retries
  quietly (or each call and retry with -v), and leaves no output directory behind.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import unittest.mock
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import rl_batch_demo as demo
from tests.callplan import FAST
from tests.fakecluster import FakeCluster, run_fake_in_process
from tests.tiers import end_to_end

REAL_KUBECTL = shutil.which("kubectl")
CLOSED = "127.0.0.1:1"  # nothing listens on port 1
CONTEXT = "prod"
KLOG_HEADER = re.compile(r"^E\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +\d+ ", re.MULTILINE)


def klog(api: str, dialed: str) -> str:
    """client-go's line for one failed discovery refresh (memcache.go:265), time and pid elided."""
    return (
        'E<time> <pid> memcache.go:265] "Unhandled Error" err="couldn\'t get current server API group list: '
        f'Get \\"{api}\\": dial tcp {dialed}: connect: connection refused"'
    )


def refused(host: str, scheme: str, dialed: str, attempts: int, timeout: str = "30s") -> str:
    lines = [klog(f"{scheme}://{host}/api?timeout={timeout}", dialed)] * attempts
    return "\n".join(
        [*lines, f"The connection to the server {host} was refused - did you specify the right host or port?"]
    )


def validating(host: str, scheme: str, dialed: str, one: bool) -> str:
    download = "failed to download openapi: " if one else ""
    return (
        f'error: error validating "STDIN": error validating data: {download}Get "{scheme}://{host}/openapi/v2?'
        f'timeout=30s": dial tcp {dialed}: connect: connection refused; if you choose to ignore these errors, '
        "turn validation off with --validate=false"
    )


def unrecognized(host: str, scheme: str, dialed: str) -> str:
    api = f"{scheme}://{host}/api?timeout=30s"
    message = f'error: unable to recognize "STDIN": Get "{api}": dial tcp {dialed}: connect: connection refused'
    return f"{klog(api, dialed)}\n{message}"


NAMESPACE_JSON = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "agc-rl-0"}})
LIST_JSON = json.dumps({"apiVersion": "v1", "kind": "List", "items": [json.loads(NAMESPACE_JSON)]})
REVIEWS_JSON = json.dumps(demo.access_review_list("agc-rl-0", True))
TIMEOUT = "--request-timeout=30s"
# The raw forms (Kubectl.runtimeclass, Kubectl.create_raw): one request, no discovery, so no klog lines.
RUNTIMECLASS_PATH = "/apis/node.k8s.io/v1/runtimeclasses/cube"
NAMESPACES_PATH = demo.create_path(json.loads(NAMESPACE_JSON))


def refused_raw_localhost() -> str:
    return refused("localhost:8080", "http", "127.0.0.1:8080", 0)


# (setup, argv after `kubectl`, stdin): kubectl's stderr, exit 1. Setups: "closed" (the
# kubeconfig's server is a closed port), "empty" (no kubeconfig at all), "missing" (--kubeconfig
# names no file), "bogus" (--context names no context), "gone" (the current context is undefined).
# The argv are the tool's own forms (Kubectl.argv); "K" stands for the setup's kubeconfig.
EXPECTED: List[Tuple[str, Tuple[str, ...], Optional[str], str]] = [
    (
        "closed",
        ("get", "runtimeclass", "cube", "--ignore-not-found", "-o", "json"),
        None,
        refused(CLOSED, "https", CLOSED, 5),
    ),
    ("closed", ("--namespace=agc-rl-0", "get", "pods,events", "-o", "json"), None, refused(CLOSED, "https", CLOSED, 6)),
    (
        "closed",
        (
            "--request-timeout=270s",
            "--namespace=agc-rl-0",
            "get",
            "job",
            "rollout",
            "-o",
            "json",
            "--output-watch-events",
            "--watch",
        ),
        None,
        refused(CLOSED, "https", CLOSED, 5, timeout="4m30s"),
    ),
    (
        "closed",
        ("create", "-f", "-", "-o", "json", "--validate=false"),
        REVIEWS_JSON,
        unrecognized(CLOSED, "https", CLOSED),
    ),
    (
        "closed",
        ("create", "-f", "-", "-o", "json", "--validate=strict"),
        LIST_JSON,
        validating(CLOSED, "https", CLOSED, one=False),
    ),
    (
        "closed",
        ("create", "-f", "-", "-o", "json", "--validate=strict"),
        NAMESPACE_JSON,
        validating(CLOSED, "https", CLOSED, one=True),
    ),
    ("closed", ("version", "-o", "json"), None, refused(CLOSED, "https", CLOSED, 0)),
    (
        "closed",
        ("--namespace=agc-rl-0", "logs", "-l", "job-name=rollout", "-c", "episode", "--prefix", "--tail=-1"),
        None,
        refused(CLOSED, "https", CLOSED, 4),
    ),
    ("closed", ("delete", "namespace", "agc-rl-0", "--wait=false"), None, refused(CLOSED, "https", CLOSED, 5)),
    ("closed", ("get", "--raw", "/api/v1/nodes/node-a/proxy/metrics"), None, refused(CLOSED, "https", CLOSED, 0)),
    ("closed", ("get", "--raw", RUNTIMECLASS_PATH), None, refused(CLOSED, "https", CLOSED, 0)),
    ("closed", ("create", "--raw", NAMESPACES_PATH, "-f", "-"), NAMESPACE_JSON, refused(CLOSED, "https", CLOSED, 0)),
    ("empty", ("create", "--raw", NAMESPACES_PATH, "-f", "-"), NAMESPACE_JSON, refused_raw_localhost()),
    (
        "empty",
        ("config", "view", "--minify", "-o", "json"),
        None,
        "error: current-context must exist in order to minify",
    ),
    (
        "empty",
        ("get", "namespace", "x", "--ignore-not-found", "-o", "json"),
        None,
        refused("localhost:8080", "http", "127.0.0.1:8080", 5),
    ),
    ("empty", ("version", "-o", "json"), None, refused("localhost:8080", "http", "127.0.0.1:8080", 0)),
    (
        "empty",
        ("create", "-f", "-", "-o", "json", "--validate=strict"),
        LIST_JSON,
        validating("localhost:8080", "http", "127.0.0.1:8080", one=False),
    ),
    (
        "missing",
        ("config", "view", "--minify", "-o", "json"),
        None,
        "error: current-context must exist in order to minify",
    ),
    (
        "missing",
        ("--context=prod", "config", "view", "--minify", "-o", "json"),
        None,
        "error: cannot locate context prod",
    ),
    ("missing", ("get", "namespace", "x", "-o", "json"), None, "error: stat K: no such file or directory"),
    ("bogus", ("config", "view", "--minify", "-o", "json"), None, "error: cannot locate context bogus"),
    (
        "bogus",
        ("get", "namespace", "x", "-o", "json"),
        None,
        "Error in configuration: context was not found for specified context: bogus",
    ),
    (
        "bogus",
        ("delete", "namespace", "x", "--wait=false"),
        None,
        "Error in configuration: context was not found for specified context: bogus",
    ),
    (
        "bogus",
        ("create", "-f", "-", "-o", "json", "--validate=false"),
        REVIEWS_JSON,
        "Error in configuration: context was not found for specified context: bogus",
    ),
    (
        "bogus",
        ("create", "-f", "-", "-o", "json", "--validate=strict"),
        LIST_JSON,
        'error: context "bogus" does not exist',
    ),
    ("bogus", ("version", "-o", "json"), None, 'error: context "bogus" does not exist'),
    ("bogus", ("get", "--raw", "/api/v1/nodes/node-a/proxy/metrics"), None, 'error: context "bogus" does not exist'),
    ("bogus", ("create", "--raw", NAMESPACES_PATH, "-f", "-"), NAMESPACE_JSON, 'error: context "bogus" does not exist'),
    ("gone", ("config", "view", "--minify", "-o", "json"), None, "error: cannot locate context gone"),
    (
        "gone",
        ("get", "namespace", "x", "-o", "json"),
        None,
        "Error in configuration: context was not found for specified context: gone",
    ),
    (
        "gone",
        ("version", "-o", "json"),
        None,
        "Error in configuration: context was not found for specified context: gone",
    ),
]


def kubeconfig_text(server: str, current: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "closed", "cluster": {"server": server}}],
            "users": [{"name": "nobody", "user": {"token": "not-a-secret"}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": "closed", "user": "nobody"}}],
            "current-context": current,
        }
    )


class Setups:
    """Each setup's kubeconfig, flags and fake cluster, under one scratch directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kubeconfig = root / "closed.kubeconfig"
        self.kubeconfig.write_text(kubeconfig_text(f"https://{CLOSED}", CONTEXT))
        self.gone = root / "gone.kubeconfig"
        self.gone.write_text(kubeconfig_text(f"https://{CLOSED}", "gone"))
        self.missing = root / "no-such.kubeconfig"
        self.home = root / "home"  # empty: no ~/.kube/config, no discovery cache
        self.home.mkdir()
        self.fakes: Dict[str, FakeCluster] = {}

    def kubeconfig_of(self, setup: str) -> Optional[Path]:
        return {"closed": self.kubeconfig, "missing": self.missing, "bogus": self.kubeconfig, "gone": self.gone}.get(
            setup
        )

    def flags(self, setup: str) -> List[str]:
        path = self.kubeconfig_of(setup)
        flags = [f"--kubeconfig={path}"] if path else []
        return flags + (["--context=bogus"] if setup == "bogus" else [])

    def fake(self, setup: str) -> FakeCluster:
        if setup not in self.fakes:
            gone = setup == "gone"
            self.fakes[setup] = FakeCluster(
                self.root / f"fake-{setup}",
                kubeconfig=str(self.gone if gone else self.kubeconfig),
                contexts=(CONTEXT,),
                current_context="gone" if gone else CONTEXT,
                server=CLOSED,
                faults={"unreachable": True},
            )
        return self.fakes[setup]

    def close(self) -> None:
        for fake in self.fakes.values():
            fake.close()


def normalised(stderr: str) -> str:
    return KLOG_HEADER.sub("E<time> <pid> ", stderr.rstrip("\n"))


class KubectlWordsTest(unittest.TestCase):
    """The fake's stderr, and the real kubectl's, for each case of EXPECTED."""

    # the fake's words are answered in this process (run_fake_in_process): the main thread's
    runs_concurrently = False

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-kubectl-words-")
        self.addCleanup(scratch.cleanup)
        self.setups = Setups(Path(scratch.name))
        self.addCleanup(self.setups.close)

    def argv(self, setup: str, args: Tuple[str, ...]) -> List[str]:
        timeout = (
            [] if args[:2] == ("config", "view") or any(a.startswith("--request-timeout") for a in args) else [TIMEOUT]
        )
        return [*self.setups.flags(setup), *timeout, *args]

    def expected(self, setup: str, text: str) -> str:
        return text.replace("stat K:", f"stat {self.setups.missing}:")

    def run_all(
        self, run: concurrent.futures.Executor, kubectl: str, env_of: Callable[[str], Dict[str, str]]
    ) -> List[subprocess.CompletedProcess]:
        jobs = [
            run.submit(
                subprocess.run,
                [kubectl, *self.argv(setup, args)],
                input=stdin,
                capture_output=True,
                text=True,
                env=env_of(setup),
                timeout=60,
            )
            for setup, args, stdin, _ in EXPECTED
        ]
        return [job.result() for job in jobs]

    def check(self, results: List[subprocess.CompletedProcess], who: str) -> None:
        for (setup, args, _, text), result in zip(EXPECTED, results):
            with self.subTest(who=who, setup=setup, argv=" ".join(args)):
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertEqual(normalised(result.stderr), self.expected(setup, text))

    def test_the_fake_prints_what_kubectl_prints(self) -> None:
        fake_env = {setup: self.setups.fake(setup).env() for setup in ("closed", "gone")}
        results = [
            run_fake_in_process(
                self.argv(setup, args), env=fake_env["gone" if setup == "gone" else "closed"], input=stdin
            )
            for setup, args, stdin, _ in EXPECTED
        ]
        self.check(results, "the fake")

    @end_to_end  # a check of the record, not of the tool: 31 runs of a Go binary, about 3 s of CPU
    @unittest.skipIf(REAL_KUBECTL is None, "no real kubectl on PATH to compare with")
    def test_the_real_kubectl_prints_the_same(self) -> None:
        assert REAL_KUBECTL is not None
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.setups.home)}
        with concurrent.futures.ThreadPoolExecutor(4) as run:
            results = self.run_all(run, REAL_KUBECTL, lambda setup: env)
        self.check(results, "kubectl")


class ClusterAccessTest(unittest.TestCase):
    """The tool through the fake: one line with the right fix for each case, no DIR left."""

    runs_concurrently = False  # runs the tool in this process, with os.environ patched

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-cluster-access-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)
        self.setups = Setups(self.root)
        self.addCleanup(self.setups.close)
        self.cluster = self.setups.fake("closed")
        self.output = self.root / "out"

    def tool(self, *argv: str, env: Optional[Dict[str, str]] = None) -> Tuple[int, str]:
        """rl_batch_demo.main(argv) in this process against the fake (its waits instant); stderr."""
        environment = dict(self.cluster.env(), HOME=str(self.setups.home), **(env or {}))
        with (
            unittest.mock.patch.dict(os.environ, environment, clear=True),
            unittest.mock.patch.object(demo, "TIMING", FAST),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()) as err,
        ):
            code = demo.main(list(argv))
        return code, err.getvalue()

    def assert_one_line(self, code: int, stderr: str, exit_code: int, line: str) -> None:
        self.assertEqual((code, stderr), (exit_code, f"rl-batch-demo: error: {line}\n"))
        self.assertFalse(self.output.exists())

    def test_an_unreachable_api_server(self) -> None:
        line = (
            f"cannot reach the API server https://{CLOSED} of context {CONTEXT} (connection refused); check the "
            f"network/VPN and that the cluster runs, or `kubectl --context {CONTEXT} cluster-info`"
        )
        flags = ("--kubeconfig", str(self.setups.kubeconfig))
        code, stderr = self.tool("run", "--count", "2", "--output", str(self.output), *flags)
        self.assert_one_line(code, stderr, demo.EXIT_CLUSTER, line)  # the retries are quiet
        code, stderr = self.tool("check", *flags)
        self.assert_one_line(code, stderr, demo.EXIT_CLUSTER, line)
        # -v: each call as it ends (escaped, as a shell reads it) and each retry, then the same line
        code, stderr = self.tool("run", "-v", "--count", "2", "--output", str(self.output), *flags)
        lines = stderr.splitlines()
        self.assertEqual((code, lines[-1]), (demo.EXIT_CLUSTER, f"rl-batch-demo: error: {line}"))
        calls = [entry for entry in lines if entry.startswith("+ ")]
        # config view, then each preflight read and its 3 retries, and the account's watch and the
        # namespace's prepared create beside them (killed without its input: nothing was sent)
        self.assertEqual(len(calls), 1 + 2 * 4 + 2, stderr)
        kubectl = shutil.which("kubectl", path=self.cluster.env()["PATH"])
        self.assertEqual(
            calls[0],
            f"+ {kubectl} --kubeconfig={self.setups.kubeconfig} config view --minify -o json  # exit 0, "
            + calls[0].rsplit(", ", 1)[1],
        )
        [watch] = [call for call in calls if " serviceaccounts " in call]  # refused too, or ended by the failure
        self.assertRegex(watch, r" get serviceaccounts .* --watch  # exit (1|-15), \d+\.\d{3} s$")
        [prepared] = [call for call in calls if " --validate=strict" in call]
        self.assertRegex(
            prepared, r" create -f - -o json --validate=strict  # prepared, never given its input \(not needed\), "
        )
        for call in calls[1:]:
            if call in (watch, prepared):
                continue
            self.assertRegex(
                call,
                r"^\+ \S+ --kubeconfig=\S+ --context=prod --request-timeout=30s (get|create) .*"
                r"  # exit 1, \d+\.\d{3} s$",
            )
        self.assertEqual(len([entry for entry in lines if entry.startswith("warning: retrying `kubectl")]), 6)
        self.assertEqual(len(lines), 1 + 11 + 6)

    @end_to_end  # a whole run on the fake after the failures: 25 kubectl processes and two pods
    def test_once_the_server_answers_the_same_command_works(self) -> None:
        flags = ("--kubeconfig", str(self.setups.kubeconfig))
        code, _ = self.tool("run", "--count", "2", "--output", str(self.output), *flags)
        self.assertEqual(code, demo.EXIT_CLUSTER)
        # The server answers again: the same command works, in the same --output.
        self.cluster.set_faults({"stand_in_worker": True})
        code, stderr = self.tool("run", "--count", "2", "--output", str(self.output), "--quiet", *flags)
        self.assertEqual(code, 0, stderr)
        self.assertEqual(json.loads((self.output / "results.json").read_text())["reward_sum"], 2)
        self.cluster.set_faults({})
        self.assertEqual(self.tool("cleanup", "--output", str(self.output))[0], 0)

    def test_no_kubeconfig_at_all(self) -> None:
        code, stderr = self.tool("run", "--output", str(self.output))
        self.assert_one_line(
            code,
            stderr,
            demo.EXIT_USAGE,
            "no kubeconfig: ~/.kube/config does not exist and $KUBECONFIG is not set; write one with your "
            "cluster's tool (for example `kind export kubeconfig`, `aws eks update-kubeconfig`, `gcloud container "
            "clusters get-credentials`), or pass --kubeconfig FILE",
        )

    def test_a_kubeconfig_that_does_not_exist(self) -> None:
        missing = str(self.setups.missing)
        code, stderr = self.tool("run", "--output", str(self.output), "--kubeconfig", missing)
        self.assert_one_line(
            code, stderr, demo.EXIT_USAGE, f"the kubeconfig file {missing} does not exist; check --kubeconfig"
        )
        code, stderr = self.tool("check", env={"KUBECONFIG": missing})
        self.assert_one_line(
            code,
            stderr,
            demo.EXIT_USAGE,
            f"no file in $KUBECONFIG exists ({missing}); check $KUBECONFIG, or pass --kubeconfig FILE",
        )

    def test_an_unknown_context(self) -> None:
        code, stderr = self.tool(
            "run", "--output", str(self.output), "--kubeconfig", str(self.setups.kubeconfig), "--context", "bogus"
        )
        self.assert_one_line(
            code,
            stderr,
            demo.EXIT_USAGE,
            "context bogus is not in the kubeconfig; check --context "
            "(`kubectl config get-contexts` lists the contexts)",
        )
        self.cluster = self.setups.fake("gone")
        code, stderr = self.tool("check", "--kubeconfig", str(self.setups.gone))
        self.assert_one_line(
            code,
            stderr,
            demo.EXIT_USAGE,
            "the kubeconfig's current context gone is not defined in it; pass --context, or choose one with "
            "`kubectl config use-context NAME`",
        )


if __name__ == "__main__":
    unittest.main()


class PreparedCallTest(unittest.TestCase):
    """Kubectl.prepare, without kubectl: a stand-in process records what it is given."""

    class Process:
        def __init__(self, argv: List[str], log: List[Tuple[str, Any]], **options: Any) -> None:
            self.args, self.log, self.returncode = argv, log, None
            log.append(("spawned", options["stdin"] == subprocess.PIPE))

        def poll(self) -> Optional[int]:
            return self.returncode

        def kill(self) -> None:
            self.log.append(("killed", None))
            self.returncode = -9

        def wait(self, timeout: Optional[float] = None) -> int:
            return self.returncode or 0

        def communicate(self, input: Optional[str] = None, timeout: Optional[float] = None) -> Tuple[str, str]:
            self.log.append(("input", input))
            if self.returncode is None:
                self.returncode = 0
            return '{"metadata": {"uid": "u"}}', ""

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: Any) -> None:
            pass

    def kubectl(self) -> Tuple[Any, List[Tuple[str, Any]]]:
        log: List[Tuple[str, Any]] = []
        spawner = lambda argv, **options: self.Process(argv, log, **options)  # noqa: E731
        return demo.Kubectl("kubectl", context="ctx", kubeconfig=None, spawner=spawner), log

    def test_the_next_call_of_its_argv_is_given_the_prepared_process(self) -> None:
        kubectl, log = self.kubectl()
        kubectl.prepare_create_raw("/apis/batch/v1/namespaces/ns/jobs")
        self.assertEqual(log, [("spawned", True)])
        created = kubectl.create_raw("/apis/batch/v1/namespaces/ns/jobs", {"kind": "Job"})
        self.assertEqual(created, {"metadata": {"uid": "u"}})
        self.assertEqual(log, [("spawned", True), ("input", '{"kind": "Job"}')])  # no process more
        [record] = kubectl.calls
        self.assertTrue(record["prepared"])
        self.assertEqual(record["exit"], 0)
        self.assertGreaterEqual(record["input_at"], record["started"])
        self.assertEqual((kubectl.prepared, kubectl.children), ({}, set()))
        kubectl.create_raw("/apis/batch/v1/namespaces/ns/jobs", {"kind": "Job"})  # the next starts its own
        self.assertEqual(log[2:], [("spawned", True), ("input", '{"kind": "Job"}')])

    def test_a_call_not_made_is_killed_before_any_input(self) -> None:
        kubectl, log = self.kubectl()
        kubectl.prepare_create()
        kubectl.prepare_create()  # prepared once
        kubectl.cancel_prepared()
        self.assertEqual(log, [("spawned", True), ("killed", None), ("input", None)])
        [record] = kubectl.calls
        self.assertEqual(record["cancelled"], "not needed")
        self.assertNotIn("input_at", record)
        self.assertEqual((kubectl.prepared, kubectl.children), ({}, set()))

    def test_one_prepared_too_long_ago_is_replaced(self) -> None:
        kubectl, log = self.kubectl()
        kubectl.prepare_create_raw("/p")
        with unittest.mock.patch.object(demo, "PREPARED_CALL_MAX_AGE", -1.0):
            kubectl.create_raw("/p", {"kind": "Job"})
        self.assertEqual(
            log, [("spawned", True), ("killed", None), ("input", None), ("spawned", True), ("input", '{"kind": "Job"}')]
        )
        self.assertEqual([record.get("cancelled") for record in kubectl.calls], ["too old", None])

    def test_a_cancelled_call_that_does_not_end_in_time_raises_nothing(self) -> None:
        """cancel_prepared runs in cmd_run's `finally`: a process not reaped within its wait is
        left to the kernel, never a traceback over the run's own sentence."""
        kubectl, log = self.kubectl()
        kubectl.prepare_create()
        [prepared] = kubectl.prepared.values()

        def slow(input: Optional[str] = None, timeout: Optional[float] = None) -> Tuple[str, str]:
            raise subprocess.TimeoutExpired(prepared.argv, timeout or 0)

        prepared.process.communicate = slow  # type: ignore[method-assign]
        kubectl.cancel_prepared()
        self.assertEqual(log, [("spawned", True), ("killed", None)])
        self.assertEqual([record["cancelled"] for record in kubectl.calls], ["not needed"])
        self.assertEqual((kubectl.prepared, kubectl.children), ({}, set()))
