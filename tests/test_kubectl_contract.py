"""Contract tests of the real kubectl: what rl_batch_demo.py relies on, checked against the binary.

Our fake kubectl (tests/fakekube/) was written by us, so the tool and the fake can share a wrong
belief. Here the real kubectl runs against a recording API server on 127.0.0.1
(tests/recordingserver.py) with the tool's own global flags (`Kubectl.argv`) and the command
forms the tool sends, and each test asserts both the requests kubectl made (method, path, query,
body, and when) and what it printed. The upstream source of each behaviour (kubernetes/kubectl,
kubernetes/cli-runtime, client-go) is named next to its contract.

Which kubectl: RL_DEMO_CONTRACT_KUBECTL (paths separated by os.pathsep; CI passes one binary of
every minor it can install offline, see .ci/run), else the `kubectl` on PATH; with neither, the
whole module is skipped. Every contract runs against every binary (a few at once), and a
failure names the binary's version (a subTest per binary), so a minor that behaves differently
is reported by minor. Where minors legitimately differ, the contract says which minor does what.

The slow contracts (`logs -l` of 20 pods under client-go's 5 requests/s, `-f`, kubectl's own
retries, the client timeouts) wait 1 to 4 s each per binary by design; they run only with
RL_DEMO_CONTRACT_SLOW=1 (CI sets it), so the README's test command stays fast (about 4 s of this
module, beside the other tests)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

import rl_batch_demo as demo
from tests.fakecluster import ENVIRONMENT
from tests.fakekube.commands import BODY_TIMEOUT
from tests.recordingserver import SERVER_VERSION, Answer, Recorded, RecordingServer, status_answer

KUBECTL_ENV = "RL_DEMO_CONTRACT_KUBECTL"
SLOW_ENV = "RL_DEMO_CONTRACT_SLOW"
WORKERS = 12  # binaries tested at once: mostly waiting (for kubectl, for the rate limiter)

# client-go's defaults for a rest.Config without QPS/Burst (rest.DefaultQPS, rest.DefaultBurst),
# which kubectl leaves as they are for every client but discovery (kubectl pkg/cmd/cmd.go).
QPS = 5.0
BURST = 10
# Seconds of clock granularity between kubectl's timers and the server's stamps. A lower bound on
# a kubectl timer is measured from a server stamp taken before that timer started (a load can
# delay a stamp, never advance it), so that load can only lengthen what is measured.
TIMER_SLACK = 0.05

NAMESPACE = "demo"
CONTAINER = demo.CONTAINER_NAME
JOB = "rollout"
SELECTOR = f"job-name={JOB}"
JOB_PATH = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{JOB}"
JOBS_PATH = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"


def kubectl_environment(home: str) -> Dict[str, str]:
    """A real kubectl's environment here: PATH, a HOME of its own (its own discovery cache), and
    GOGC=off: each call is a process of 40 ms whose garbage collection only costs CPU (8 ms of
    its 50), and changes nothing kubectl sends or prints."""
    return {"PATH": ENVIRONMENT.get("PATH", os.defpath), "HOME": home, "GOGC": "off"}


def _binaries() -> List[str]:
    listed = ENVIRONMENT.get(KUBECTL_ENV, "")
    if listed.strip():
        return [path for path in listed.split(os.pathsep) if path]
    found = shutil.which("kubectl", path=ENVIRONMENT.get("PATH"))
    return [found] if found else []


BINARIES = _binaries()
NO_KUBECTL = f"no kubectl on PATH (nor {KUBECTL_ENV}): the contract tests of the real kubectl are skipped"
SLOW = ENVIRONMENT.get(SLOW_ENV, "") not in ("", "0")


def load_tests(loader: unittest.TestLoader, standard_tests: unittest.TestSuite, pattern: Optional[str]) -> Any:
    """Without a kubectl the whole module is one skipped test, named by the reason (pytest, which
    ignores load_tests, skips each contract by its class instead)."""
    if BINARIES:
        return standard_tests

    class KubectlContracts(unittest.TestCase):
        def test_real_kubectl(self) -> None:
            self.skipTest(NO_KUBECTL)

    return loader.suiteClass([KubectlContracts("test_real_kubectl")])


class Binary:
    """One kubectl under test, with the version it reports (`version --client -o json`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.version = "unknown"
        self.minor = 0
        self.problem = ""
        try:
            with tempfile.TemporaryDirectory() as home:
                completed = subprocess.run(
                    [path, "version", "--client", "-o", "json"],
                    env=kubectl_environment(home),
                    capture_output=True,
                    timeout=30,
                    check=False,
                )
            client = json.loads(completed.stdout)["clientVersion"]
            self.version = str(client["gitVersion"])
            self.minor = int(re.match(r"\d+", str(client["minor"])).group())  # type: ignore[union-attr]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError, AttributeError) as error:
            self.problem = f"{path} is not a working kubectl: {error}"

    @property
    def dispatcher(self) -> bool:
        """The Google Cloud SDK's kubectl: a wrapper that first asks the server's /version, then
        runs the kubectl of the matching minor (kubectl.1.NN beside it)."""
        return self.version.endswith("-dispatcher")

    @property
    def label(self) -> str:
        return f"{self.version} ({self.path})"


@functools.cache
def binaries() -> Tuple[Binary, ...]:
    return tuple(Binary(path) for path in BINARIES)


class Outcome:
    """One kubectl process: its exit status, output, and when it ran (time.monotonic())."""

    def __init__(self, argv: List[str], completed: subprocess.CompletedProcess[bytes], started: float, ended: float):
        self.argv = argv
        self.returncode = completed.returncode
        self.stdout: bytes = completed.stdout
        self.stderr = completed.stderr.decode("utf-8", "replace")
        self.started = started
        self.ended = ended

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    def documents(self) -> List[Any]:
        """The JSON documents printed one after another, each as it is (a List stays one)."""
        text, decoder, documents, position = self.stdout.decode(), json.JSONDecoder(), [], 0
        while text[position:].strip():
            position += len(text[position:]) - len(text[position:].lstrip())
            document, position = decoder.raw_decode(text, position)
            documents.append(document)
        return documents

    def __repr__(self) -> str:
        out, err = self.stdout[:600], self.stderr[:600]
        return f"exit {self.returncode} after {self.seconds:.2f} s; stdout {out!r}; stderr {err!r}"


class Session:
    """The real kubectl against a fresh recording server, with a HOME of its own (kubectl's
    discovery cache), bound to the context the tool would use."""

    def __init__(self, binary: Binary, directory: Path) -> None:
        self.binary = binary
        self.directory = directory
        self.server = RecordingServer()
        self.kubeconfig = self.server.kubeconfig(directory, contexts=("contract", "other"), current="other")
        self.kubectl = demo.Kubectl(binary.path, context="contract", kubeconfig=str(self.kubeconfig))

    def __enter__(self) -> Session:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.__exit__(*exc)

    def run(
        self,
        args: Sequence[str],
        namespace: Optional[str] = NAMESPACE,
        stdin: Optional[bytes] = None,
        request_timeout: Optional[str] = demo.REQUEST_TIMEOUT,
        timeout: float = 60,
    ) -> Outcome:
        """kubectl with the tool's global flags (Kubectl.argv: --kubeconfig, --context,
        --request-timeout, --namespace), then args."""
        argv = self.kubectl.argv(args, namespace, request_timeout=request_timeout)
        env = kubectl_environment(str(self.directory))
        started = time.monotonic()
        completed = subprocess.run(argv, input=stdin, env=env, capture_output=True, timeout=timeout, check=False)
        return Outcome(argv, completed, started, time.monotonic())

    def api(self) -> List[Recorded]:
        return self.server.api_requests()

    def warm_discovery(self) -> None:
        """Fill kubectl's discovery cache (as any earlier call of a run does), so that a short
        --request-timeout then applies to the request under test alone; forget what was asked."""
        outcome = self.run(["api-resources", "-o", "name"], namespace=None)
        if outcome.returncode != 0:
            raise AssertionError(f"kubectl api-resources failed: {outcome}")
        self.server.requests.clear()

    def forget_discovery(self) -> None:
        """kubectl keeps discovery in $HOME/.kube/cache for hours: the next run asks again."""
        shutil.rmtree(self.directory / ".kube" / "cache", ignore_errors=True)


# Objects as the API server returns them #######################################


def pod(name: str, phase: str = "Succeeded") -> Dict[str, Any]:
    """A pod as a list returns it: items carry no kind or apiVersion."""
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "resourceVersion": "40",
            "labels": {"job-name": JOB},
        },
        "spec": {"containers": [{"name": CONTAINER, "image": "python:3.12-alpine"}], "restartPolicy": "Never"},
        "status": {"phase": phase},
    }


def whole(kind: str, api_version: str, item: Dict[str, Any]) -> Dict[str, Any]:
    """An object as a GET returns it: with kind and apiVersion."""
    return {"apiVersion": api_version, "kind": kind, **item}


def pod_list(pods: Sequence[Dict[str, Any]], resource_version: str = "50") -> Dict[str, Any]:
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": resource_version},
        "items": list(pods),
    }


def job(resource_version: str) -> Dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": JOB, "namespace": NAMESPACE, "uid": "uid-job", "resourceVersion": resource_version},
        "spec": {"completions": 2, "parallelism": 2},
        "status": {"active": 2},
    }


def always(answer: Answer) -> Callable[[Recorded, re.Match[str]], Answer]:
    """A route that gives every request the same answer."""
    return lambda request, match: answer


def event_line(kind: str, obj: Dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def not_found(resource: str, name: str, group: str = "") -> Answer:
    qualified = f"{resource}.{group}" if group else resource
    return status_answer(
        404, "NotFound", f'{qualified} "{name}" not found', {"name": name, "group": group, "kind": resource}
    )


def serve_namespace(server: RecordingServer, exists: bool = True) -> None:
    """GET namespaces/demo, which kubectl asks after a NotFound (cli-runtime visitor.go Info.Get)."""
    answer = Answer(200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    server.route(
        "GET", f"/api/v1/namespaces/{NAMESPACE}", lambda r, m: answer if exists else not_found("namespaces", NAMESPACE)
    )


class PodLogs:
    """Pods matching the selector and their logs, served as the API server serves them: the
    list, each pod, and each pod's log (`follow=true`: the log, then the stream held open for
    `hold` seconds, as the kubelet does until it notices the container has ended)."""

    def __init__(
        self,
        server: RecordingServer,
        logs: Dict[str, bytes],
        failing: Sequence[str] = (),
        hold: float = 0.0,
        waiting: Sequence[str] = (),
    ):
        self.logs = logs
        self.failing = set(failing)
        self.waiting = set(waiting)  # pods whose container the kubelet reports still waiting to start
        self.hold = hold
        items = [pod(name) for name in logs]
        server.route("GET", PODS_PATH, lambda r, m: Answer(200, pod_list(items)))
        server.route("GET", f"{PODS_PATH}/([^/]+)", self.one_pod)
        server.route("GET", f"{PODS_PATH}/([^/]+)/log", self.log)

    def one_pod(self, request: Recorded, match: re.Match[str]) -> Answer:
        name = match.group(1)
        return Answer(200, whole("Pod", "v1", pod(name))) if name in self.logs else not_found("pods", name)

    def log(self, request: Recorded, match: re.Match[str]) -> Answer:
        name = match.group(1)
        if name in self.failing:
            return status_answer(500, "InternalError", f"Internal error occurred: failed to read the log of {name}")
        if name in self.waiting:  # kubelet_pods.go validateContainerLogStatus, passed on by the API server
            message = f'container "{CONTAINER}" in pod "{name}" is waiting to start: ContainerCreating'
            return status_answer(400, "BadRequest", message)
        if name not in self.logs:
            return not_found("pods", name)
        if request.query.get("follow") == "true":
            return Answer(200, chunks=[(0.0, self.logs[name]), (self.hold, b"")], content_type="text/plain")
        return Answer(200, self.logs[name], "text/plain")


def log_reads(session: Session) -> List[Recorded]:
    return [r for r in session.api() if r.path.endswith("/log")]


def pod_of(request: Recorded) -> str:
    return request.path.split("/")[-2]


def prefixed(name: str) -> bytes:
    """kubectl's --prefix (logs.go addPrefixIfNeeded)."""
    return f"[pod/{name}/{CONTAINER}] ".encode()


def with_prefixes(order: Sequence[str], logs: Dict[str, bytes]) -> bytes:
    """What `logs --prefix` prints for these logs read in this order (logs.go
    DefaultConsumeRequest: a prefix per bufio ReadBytes('\\n') piece, the last one as it is)."""
    out = b""
    for name in order:
        for piece in re.findall(rb"[^\n]*\n|[^\n]+$", logs[name]):
            out += prefixed(name) + piece
    return out


class _Captured(Exception):
    """Raised by FormsOfTheTool once a call's arguments are known: nothing runs."""


Form = Tuple[List[str], Optional[str], Optional[str]]  # arguments, --namespace, --request-timeout


class FormsOfTheTool(demo.Kubectl):
    """The tool's own Kubectl, stopped in Kubectl.argv: what each of its calls passes after the
    global flags, so that a contract runs exactly the command the tool runs."""

    def __init__(self) -> None:
        super().__init__("kubectl", context=None, kubeconfig=None)
        self.captured: Optional[Form] = None

    def argv(
        self,
        args: Sequence[str],
        namespace: Optional[str] = None,
        request_timeout: Optional[str] = demo.REQUEST_TIMEOUT,
    ) -> List[str]:
        self.captured = (list(args), namespace, request_timeout)
        raise _Captured


def tool_form(call: Callable[[demo.Kubectl], Any]) -> Form:
    kubectl = FormsOfTheTool()
    try:
        call(kubectl)
    except _Captured:
        assert kubectl.captured is not None
        return kubectl.captured
    raise AssertionError("the tool's call ran no kubectl")


def selector_args(count: int, follow: bool = False, selector: str = SELECTOR, ignored: Sequence[str] = ()) -> List[str]:
    """The arguments of rl_batch_demo.logs_by_selector for `count` pods (plus -f, with the
    --max-log-requests it needs); `ignored`: pods the selector matches too whose logs are not
    wanted (lost pods: the tool adds --ignore-errors). A log read carries no --request-timeout
    (run them with request_timeout=None, as the tool does)."""
    names = [f"p{index}" for index in range(count) if f"p{index}" not in ignored]
    args, namespace, timeout = tool_form(
        lambda k: demo.logs_by_selector(k, NAMESPACE, selector, names, Path("unused"), ignored=ignored)
    )
    assert namespace == NAMESPACE and "-f" not in args and timeout is None
    return [*args, "-f", f"--max-log-requests={count}"] if follow else args


def pod_log_args(name: str) -> List[str]:
    """The arguments of rl_batch_demo.log_of (no --request-timeout either)."""
    args, namespace, timeout = tool_form(lambda k: demo.log_of(k, NAMESPACE, name, Path("unused")))
    assert namespace == NAMESPACE and timeout is None
    return args


def create_args(review: bool) -> List[str]:
    """The arguments of Kubectl.create: the run's objects, or (review) the access reviews."""
    args, namespace, _ = tool_form(lambda k: k.create({"apiVersion": "v1", "kind": "List", "items": []}, review))
    assert namespace is None
    return args


def get_args(kind: str, name: str) -> List[str]:
    """The arguments of Kubectl.get (one object, None when it is missing)."""
    return tool_form(lambda k: k.get(kind, name, NAMESPACE))[0]


def list_args(kinds: str) -> List[str]:
    """The arguments of Kubectl.get_list."""
    return tool_form(lambda k: k.get_list(kinds, namespace=NAMESPACE))[0]


def everywhere_args() -> List[str]:
    """The arguments of Kubectl.get_list for the pods of every namespace that are not terminated
    (`check`, `run --parallelism auto`)."""
    args, namespace, _ = tool_form(lambda k: k.get_list("pods", flags=demo.NON_TERMINATED_PODS))
    assert namespace is None
    return args


def nodes_and_pods_args() -> List[str]:
    """The arguments of Kubectl.get_list for the RuntimeClasses, the nodes and every pod (`run
    --parallelism auto`)."""
    args, namespace, _ = tool_form(lambda k: k.get_list("runtimeclasses,nodes,pods", flags=demo.EVERY_NAMESPACE))
    assert namespace is None
    return args


def config_view_args() -> List[str]:
    """The arguments of Kubectl.cluster_identity (no --request-timeout: no server is asked)."""
    args, namespace, timeout = tool_form(lambda k: k.cluster_identity())
    assert (namespace, timeout) == (None, None)
    return args


def assert_one_at_a_time(case: unittest.TestCase, reads: Sequence[Recorded]) -> None:
    """Each log request arrived only after the previous answer was complete."""
    for before, after in zip(reads, reads[1:]):
        case.assertIsNotNone(before.answered)
        case.assertGreaterEqual(after.arrived, before.answered, f"{after} arrived while {before} was still answered")


def assert_paced(case: unittest.TestCase, listing: Recorded, reads: Sequence[Recorded]) -> None:
    """Under client-go's token bucket (QPS, burst BURST) the n-th log request cannot leave before
    (n - BURST) / QPS seconds after the first, which itself follows the pod list: a lower bound
    that load can only make longer, not a measured timing."""
    floor = (len(reads) - BURST) / QPS
    spent = reads[-1].arrived - listing.arrived
    case.assertGreaterEqual(
        spent, floor - TIMER_SLACK, f"{len(reads)} log requests within {spent:.3f} s of the pod list: not paced"
    )


@unittest.skipUnless(BINARIES, NO_KUBECTL)
class ContractCase(unittest.TestCase):
    runs_concurrently = True  # only waits for kubectl; see tests/concurrently.py
    maxDiff = 4000

    def each_kubectl(self, contract: Callable[[Session], None]) -> None:
        """Run contract against every binary (a few at once), each with its own server; a
        failure is reported in a subTest named by the binary's version."""
        found = binaries()

        def one(binary: Binary) -> None:
            if binary.problem:
                raise AssertionError(binary.problem)
            with tempfile.TemporaryDirectory() as directory, Session(binary, Path(directory)) as session:
                contract(session)

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(WORKERS, len(found))) as pool:
            futures = [(binary, pool.submit(one, binary)) for binary in found]
        for binary, future in futures:
            with self.subTest(kubectl=binary.label):
                future.result()  # the contract's own failure, raised here under the binary's name


class LogsContract(ContractCase):
    """`kubectl logs`, as read_logs, logs_by_selector and log_of use it (kubectl
    pkg/cmd/logs/logs.go, pkg/polymorphichelpers/logsforobject.go)."""

    def test_logs_of_a_pod_gets_the_pod_first_then_its_log(self) -> None:
        """W8: `logs POD` resolves the pod through the builder (logs.go Complete:
        builder.Do().Infos()), so it needs `get pods` besides `get pods/log`."""
        text = b"one\nlast without newline"

        def contract(session: Session) -> None:
            PodLogs(session.server, {"p0": text})
            outcome = session.run(pod_log_args("p0"), request_timeout=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            self.assertEqual(outcome.stdout, text)  # as it is: no prefix, nothing added
            requests = session.api()
            self.assertEqual(
                [(r.method, r.path) for r in requests],
                [("GET", f"{PODS_PATH}/p0"), ("GET", f"{PODS_PATH}/p0/log")],
            )
            self.assertEqual(requests[1].query, {"container": CONTAINER})  # no timeout: none limits the transfer

        self.each_kubectl(contract)

    def test_logs_of_a_missing_pod_reads_no_log(self) -> None:
        """The pod's GET fails (then kubectl asks whether the namespace exists, cli-runtime
        visitor.go Info.Get); no log is requested. The wording changed in 1.30 (logs.go
        Complete wraps the error with the namespace)."""

        def contract(session: Session) -> None:
            PodLogs(session.server, {})
            serve_namespace(session.server)
            outcome = session.run(pod_log_args("p0"), request_timeout=None)
            self.assertEqual(outcome.returncode, 1, outcome)
            self.assertEqual(
                [r.path for r in session.api()],
                [f"{PODS_PATH}/p0", f"/api/v1/namespaces/{NAMESPACE}"],
            )
            if session.binary.minor >= 30:
                expected = f'error: error from server (NotFound): pods "p0" not found in namespace "{NAMESPACE}"\n'
            else:
                expected = 'Error from server (NotFound): pods "p0" not found\n'
            self.assertEqual(outcome.stderr, expected)

        self.each_kubectl(contract)

    def test_selector_reads_pods_one_at_a_time_in_random_order(self) -> None:
        """W2: without -f, `logs -l` reads the pods one after another
        (sequentialConsumeRequest), ranging over a Go map: the order changes from run to run.
        The output follows the order of the requests. 9 pods stay within the burst."""
        logs = {f"p{index}": f"line of p{index}\n".encode() for index in range(9)}

        def contract(session: Session) -> None:
            PodLogs(session.server, logs)
            orders = set()
            runs = 0
            while runs < 8:  # a Go map of 9 has many orders: two differ almost surely
                runs += 1
                already = len(log_reads(session))
                outcome = session.run(selector_args(len(logs)), request_timeout=None)
                self.assertEqual(outcome.returncode, 0, outcome)
                reads = log_reads(session)[already:]
                order = [pod_of(r) for r in reads]
                self.assertCountEqual(order, logs)  # each pod once
                assert_one_at_a_time(self, reads)
                self.assertEqual(outcome.stdout, with_prefixes(order, logs))
                for read in reads:  # --tail=-1: no tailLines; no --request-timeout: no timeout
                    self.assertEqual(read.query, {"container": CONTAINER})
                orders.add(tuple(order))
                if len(orders) > 1:
                    break
            self.assertGreater(len(orders), 1, f"the same order in {runs} runs: {orders}")
            listing = next(r for r in session.api() if r.path.endswith("/pods"))
            self.assertEqual(listing.query, {"labelSelector": SELECTOR})  # not chunked

        self.each_kubectl(contract)

    def test_selector_without_tail_reads_only_the_last_ten_lines(self) -> None:
        """With -l, --tail defaults to 10 (logs.go Complete/ToLogOptions): the tool must pass
        --tail=-1; with a pod name there is no default."""

        def contract(session: Session) -> None:
            PodLogs(session.server, {"p0": b"x\n", "p1": b"y\n"})
            outcome = session.run(["logs", "-l", SELECTOR, "-c", CONTAINER, "--prefix"])
            self.assertEqual(outcome.returncode, 0, outcome)
            self.assertEqual({r.query.get("tailLines") for r in log_reads(session)}, {"10"})

        self.each_kubectl(contract)

    def test_prefix_is_written_once_per_line_and_glued_after_a_last_line_without_newline(self) -> None:
        """--prefix writes `[pod/NAME/CONTAINER] ` before each `\\n`-terminated piece; a last
        line without `\\n` is written as it is, so the next pod's prefix follows on the same
        line (EpisodeLogReader._check_glued). A CR is data; an empty log prints nothing."""
        logs = {
            "p0": b"first\n\nsecond\r\nlast without newline",
            "p1": b"",
            "p2": b"only line\n",
            "p3": b"no newline at all",
        }

        def contract(session: Session) -> None:
            PodLogs(session.server, logs)
            outcome = session.run(selector_args(len(logs)), request_timeout=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            order = [pod_of(r) for r in log_reads(session)]
            self.assertEqual(outcome.stdout, with_prefixes(order, logs))
            self.assertEqual(outcome.stdout.count(prefixed("p0")), 4)
            self.assertNotIn(prefixed("p1"), outcome.stdout)

        self.each_kubectl(contract)

    def test_an_unreadable_log_stops_the_selector_read(self) -> None:
        """A pod whose log cannot be read ends the sequential read (no --ignore-errors): exit 1,
        the server's message on stderr, the pods read before it printed whole, none after."""
        logs = {f"p{index}": f"line of p{index}\n".encode() for index in range(6)}

        def contract(session: Session) -> None:
            PodLogs(session.server, logs, failing=["p3"])
            outcome = session.run(selector_args(len(logs)), request_timeout=None)
            self.assertEqual(outcome.returncode, 1, outcome)
            order = [pod_of(r) for r in log_reads(session)]
            self.assertEqual(order[-1], "p3", f"log requests went on after the failing one: {order}")
            self.assertEqual(outcome.stdout, with_prefixes(order[:-1], logs))
            self.assertEqual(
                outcome.stderr,
                "Error from server (InternalError): Internal error occurred: failed to read the log of p3\n",
            )
            failure = demo.KubectlFailure(outcome.argv, outcome.returncode, outcome.stderr)
            self.assertTrue(failure.transient)

        self.each_kubectl(contract)

    def test_with_lost_pods_an_unreadable_log_is_an_error_line_and_the_read_goes_on(self) -> None:
        """logs_by_selector with lost pods passes --ignore-errors: a failed log request prints
        `error: MESSAGE` (the server's message, no prefix) on stdout, and kubectl reads every other
        pod and exits 0 (logs.go sequentialConsumeRequest, consumeWithRetry from 1.36); the
        reader keeps the others' logs whole and puts none in doubt."""
        logs = {f"p{index}": f"line of p{index}\n".encode() for index in range(6)}

        def contract(session: Session) -> None:
            PodLogs(session.server, logs, failing=["p3"])
            args = selector_args(len(logs), ignored=["p3"])
            self.assertIn("--ignore-errors", args)
            outcome = session.run(args, request_timeout=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            order = [pod_of(r) for r in log_reads(session)]
            self.assertEqual(sorted(order), sorted(logs))
            error = b"error: Internal error occurred: failed to read the log of p3\n"
            expected = b"".join(error if name == "p3" else with_prefixes([name], logs) for name in order)
            self.assertEqual(outcome.stdout, expected)
            with tempfile.TemporaryDirectory() as scratch:
                wanted = [name for name in logs if name != "p3"]
                reader = demo.EpisodeLogReader(Path(scratch), wanted, ignored=["p3"])
                reader.feed(outcome.stdout)
                self.assertEqual(sorted(reader.finish()), wanted)
                self.assertEqual(reader.doubtful, set())

        self.each_kubectl(contract)

    def test_a_selector_of_completion_indexes_is_passed_as_it_is(self) -> None:
        """read_logs reads an Indexed Job's pods beyond 10 by sets of completion indexes: the
        set-based selector reaches the server's pod list unchanged (cli-runtime
        LabelSelectorParam), and the pods it lists are read as with any selector."""
        chosen = f"{SELECTOR},{demo.INDEX_LABEL} in (0,1,2)"
        logs = {f"p{index}": f"line of p{index}\n".encode() for index in range(3)}

        def contract(session: Session) -> None:
            PodLogs(session.server, logs)
            outcome = session.run(selector_args(len(logs), selector=chosen), request_timeout=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            listing = next(r for r in session.api() if r.path.endswith("/pods"))
            self.assertEqual(listing.query, {"labelSelector": chosen})
            self.assertCountEqual([pod_of(r) for r in log_reads(session)], logs)

        self.each_kubectl(contract)

    def test_follow_beyond_max_log_requests_is_refused_before_any_log(self) -> None:
        """-f with more pods than --max-log-requests (default 5) fails before reading."""
        logs = {f"p{index}": b"x\n" for index in range(6)}

        def contract(session: Session) -> None:
            PodLogs(session.server, logs)
            outcome = session.run(["logs", "-l", SELECTOR, "-c", CONTAINER, "--prefix", "--tail=-1", "-f"])
            self.assertEqual(outcome.returncode, 1, outcome)
            self.assertEqual(log_reads(session), [])
            self.assertEqual(
                outcome.stderr,
                "error: you are attempting to follow 6 log streams, but maximum allowed concurrency is 5, "
                "use --max-log-requests to increase the limit\n",
            )

        self.each_kubectl(contract)


class FollowContract(ContractCase):
    """What LogFollower depends on: `logs -f -l ... --ignore-errors` (follow_args)."""

    def test_follow_goes_on_past_a_pod_still_waiting_and_exits_0(self) -> None:
        """A stream that fails (a container still waiting to start: 400) is an unprefixed
        `error: MESSAGE` line on stdout and the other streams go on, on every minor: up to 1.35
        parallelConsumeRequest prints it; from 1.36 consumeWithRetry returns at once with
        --ignore-errors (no retry until --pod-running-timeout). kubectl exits 0 once every
        stream has ended; each pod's lines keep their prefix."""
        logs = {"p0": b"first of p0\nlast of p0\n", "p1": b"", "p2": b"only line of p2\n"}

        def contract(session: Session) -> None:
            PodLogs(session.server, logs, waiting=["p1"])
            outcome = session.run(demo.follow_args(SELECTOR, demo.LOG_SELECTOR_PODS), request_timeout=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            for read in log_reads(session):
                self.assertEqual(read.query, {"container": CONTAINER, "follow": "true"})
            self.assertCountEqual([pod_of(r) for r in log_reads(session)], logs)
            lines = outcome.stdout.splitlines(keepends=True)
            error = b'error: container "episode" in pod "p1" is waiting to start: ContainerCreating\n'
            self.assertIn(error, lines)
            for name in ("p0", "p2"):
                own = b"".join(line[len(prefixed(name)) :] for line in lines if line.startswith(prefixed(name)))
                self.assertEqual(own, logs[name])
            self.assertEqual(len(lines), 4)

        self.each_kubectl(contract)

    def test_follow_lists_the_pods_once(self) -> None:
        """The pods are listed once, before any stream: a pod created later is not followed
        (why LogFollower starts a read only for pods whose container has started)."""

        def contract(session: Session) -> None:
            PodLogs(session.server, {"p0": b"x\n"})
            outcome = session.run(demo.follow_args(SELECTOR, demo.LOG_SELECTOR_PODS), request_timeout=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            listings = [r for r in session.api() if r.path.endswith("/pods")]
            self.assertEqual(len(listings), 1)
            self.assertEqual(listings[0].query.get("labelSelector"), SELECTOR)

        self.each_kubectl(contract)


SLOW_SKIP = f"waits 1-4 s by design; set {SLOW_ENV}=1 to run it (CI does)"


@unittest.skipUnless(SLOW, SLOW_SKIP)
class LogsPacingContract(ContractCase):
    """W2 measured: 20 pods, client-go's token bucket (5 requests/s, burst 10), with and
    without -f (kubernetes/kubectl#773). The server answers at once, so without the limiter the
    20 reads would take milliseconds."""

    COUNT = 20
    LOGS: ClassVar[Dict[str, bytes]] = {
        f"p{index:02d}": f"first of p{index:02d}\nlast of p{index:02d}\n".encode() for index in range(COUNT)
    }

    def read(self, session: Session, args: List[str]) -> Tuple[Outcome, Recorded, List[Recorded]]:
        outcome = session.run(args, request_timeout=None)
        self.assertEqual(outcome.returncode, 0, outcome)
        listing = [r for r in session.api() if r.path.endswith("/pods")]
        self.assertEqual(len(listing), 1)
        reads = log_reads(session)
        self.assertCountEqual([pod_of(r) for r in reads], self.LOGS)
        return outcome, listing[0], reads

    def test_selector_read_is_sequential_and_paced_whatever_max_log_requests(self) -> None:
        """The tool's own arguments, then the same with --max-log-requests=20: the same
        sequential, paced read (parallelConsumeRequest runs only with -f). Why read_logs reads
        at most 10 pods with one selector."""

        def contract(session: Session) -> None:
            PodLogs(session.server, self.LOGS)
            plain = selector_args(self.COUNT)
            for args in (plain, [*plain, f"--max-log-requests={self.COUNT}"]):
                session.server.requests.clear()
                outcome, listing, reads = self.read(session, args)
                assert_one_at_a_time(self, reads)
                assert_paced(self, listing, reads)
                self.assertEqual(outcome.stdout, with_prefixes([pod_of(r) for r in reads], self.LOGS))

        self.each_kubectl(contract)

    def test_follow_reads_in_parallel_under_the_same_limit(self) -> None:
        """-f on terminated containers: every stream at once (parallelConsumeRequest), each
        paced by the same client (one clientset, logsforobject.go), and kubectl returns once
        every stream has ended. Lines stay whole (prefixingWriter writes prefix and line in one
        write to the pipe), but pods interleave line by line."""
        hold = 1.5  # each stream stays open this long after its log, as if the kubelet were slow to end it

        def contract(session: Session) -> None:
            PodLogs(session.server, self.LOGS, hold=hold)
            outcome, listing, reads = self.read(session, selector_args(self.COUNT, follow=True))
            for read in reads:
                self.assertEqual(read.query, {"container": CONTAINER, "follow": "true"})
            overlapping = [b for a, b in zip(reads, reads[1:]) if a.answered is not None and b.arrived < a.answered]
            self.assertGreaterEqual(len(overlapping), BURST - 1, "the followed streams were not read at once")
            assert_paced(self, listing, reads)
            self.assertGreaterEqual(outcome.ended, max(r.answered or 0 for r in reads))
            lines = outcome.stdout.splitlines(keepends=True)
            self.assertEqual(len(lines), 2 * self.COUNT)
            for name, log in self.LOGS.items():
                own = b"".join(line[len(prefixed(name)) :] for line in lines if line.startswith(prefixed(name)))
                self.assertEqual(own, log)

        self.each_kubectl(contract)

    def test_follow_retries_an_unreadable_log_since_136(self) -> None:
        """-f and a log that cannot be read: up to 1.35 kubectl fails at once (exit 1); from 1.36
        on it asks again every second until --pod-running-timeout (logs.go consumeWithRetry,
        kubernetes/kubectl d9dc040ca), printing the error each time, then exits 1."""
        logs = {f"p{index}": b"x\n" for index in range(4)}
        patience = 4

        def contract(session: Session) -> None:
            PodLogs(session.server, logs, failing=["p2"])
            args = [*selector_args(len(logs), follow=True), f"--pod-running-timeout={patience}s"]
            outcome = session.run(args, request_timeout=None)
            self.assertEqual(outcome.returncode, 1, outcome)
            tries = [r for r in log_reads(session) if pod_of(r) == "p2"]
            if session.binary.minor >= 36:
                self.assertGreaterEqual(len(tries), 2, outcome)
                self.assertGreaterEqual(outcome.seconds, patience - TIMER_SLACK, outcome)
                self.assertEqual(outcome.stderr.count("failed to read the log of p2"), len(tries), outcome)
            else:
                self.assertEqual(len(tries), 1, outcome)
                self.assertLess(outcome.seconds, patience, outcome)
                self.assertIn("Error from server (InternalError)", outcome.stderr)

        self.each_kubectl(contract)


@unittest.skipUnless(SLOW, SLOW_SKIP)
class LogTransferContract(ContractCase):
    """--request-timeout becomes client-go's http.Client.Timeout (rest.Config.Timeout), which
    also covers reading the response: a log that takes longer to arrive ends part-way, exit 1;
    without it the same log arrives whole. Why log reads carry none (Kubectl.stream, idle)."""

    PIECES: ClassVar[List[Tuple[float, bytes]]] = [(0.25, b"piece %d\n" % index) for index in range(8)]  # 2 s

    def test_request_timeout_ends_a_slow_log_and_none_reads_it_whole(self) -> None:
        whole_log = b"".join(piece for _, piece in self.PIECES)

        def contract(session: Session) -> None:
            session.server.route("GET", f"{PODS_PATH}/p0", lambda r, m: Answer(200, whole("Pod", "v1", pod("p0"))))
            session.server.route(
                "GET", f"{PODS_PATH}/p0/log", lambda r, m: Answer(200, chunks=self.PIECES, content_type="text/plain")
            )
            cut = session.run(pod_log_args("p0"), request_timeout="1s")
            self.assertEqual(cut.returncode, 1, cut)
            self.assertTrue(whole_log.startswith(cut.stdout) and len(cut.stdout) < len(whole_log), cut)
            # what the fake prints (commands.transfer), or the same with net/http's other words for
            # it, by which of its timers fires first; or the request context's own deadline, bare,
            # when it fires first (seen once from v1.35.2 in CI at load 10)
            other = BODY_TIMEOUT.replace("context deadline exceeded", "net/http: request canceled")
            self.assertIn(cut.stderr.strip(), (BODY_TIMEOUT, other, "error: context deadline exceeded"))
            read = session.run(pod_log_args("p0"), request_timeout=None)
            self.assertEqual((read.returncode, read.stdout), (0, whole_log), read)

        self.each_kubectl(contract)


class WatchContract(ContractCase):
    """`get ... -o json --output-watch-events --watch`, as Kubectl.watch and wait_for_job use it
    (kubectl pkg/cmd/get/get.go watch())."""

    WATCH_SECONDS = 44.5  # Kubectl.watch asks ceil(seconds): 45s (Go writes 60 s as "1m0s" in the query)
    WATCH_TIMEOUT = "45s"

    def watch_args(self, tag: str, *target: str) -> List[str]:
        """The arguments of Kubectl.watch, as wait_for_job calls it."""
        queued: queue.Queue[Any] = queue.Queue()
        args, namespace, timeout = tool_form(
            lambda k: k.watch(tag, list(target), NAMESPACE, queued, self.WATCH_SECONDS)
        )
        assert (namespace, timeout) == (NAMESPACE, self.WATCH_TIMEOUT), (namespace, timeout)
        return args

    def test_single_object_watch_prints_the_get_then_drops_the_first_watch_event(self) -> None:
        """W7: the object is read with a GET and printed as ADDED; the watch starts from
        resourceVersion 0 (fieldSelector metadata.name), whose first event (the server's
        synthetic ADDED) is not printed; every later event is; exit 0 when the server closes."""
        stream = [(0.0, event_line("ADDED", job("10"))), (0.02, event_line("MODIFIED", job("11")))]
        stream += [(0.02, event_line("MODIFIED", job("12"))), (0.02, b"")]

        def contract(session: Session) -> None:
            session.server.route("GET", JOB_PATH, always(Answer(200, job("10"))))
            session.server.route("GET", JOBS_PATH, always(Answer(200, chunks=stream)))
            outcome = session.run(self.watch_args("job", "job", JOB), request_timeout=self.WATCH_TIMEOUT)
            self.assertEqual((outcome.returncode, outcome.stderr), (0, ""), outcome)
            events = outcome.documents()
            self.assertEqual(
                [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events],
                [("ADDED", "10"), ("MODIFIED", "11"), ("MODIFIED", "12")],
            )
            self.assertEqual(events[0]["object"], job("10"))
            get, watch = session.api()
            self.assertEqual((get.path, get.query), (JOB_PATH, {"timeout": self.WATCH_TIMEOUT}))
            self.assertEqual(
                watch.query,
                {
                    "fieldSelector": f"metadata.name={JOB}",
                    "resourceVersion": "0",
                    "watch": "true",
                    "timeout": self.WATCH_TIMEOUT,
                },
            )
            self.assertIsNotNone(watch.answered)
            self.assertLess(outcome.ended - (watch.answered or 0), 5, "kubectl did not end with the watch")

        self.each_kubectl(contract)

    def test_single_object_watch_drops_a_newer_state_in_its_first_event(self) -> None:
        """The first watch event is dropped whatever it carries (get.go: outputObjects false until
        one event is processed): a change between the GET and the start of the watch, which the
        server's synthetic ADDED would carry, is never printed. A Job that completed in that
        window shows its Complete only when its watch ends and wait_for_job polls."""
        stream = [(0.0, event_line("ADDED", job("11"))), (0.02, b"")]

        def contract(session: Session) -> None:
            session.server.route("GET", JOB_PATH, always(Answer(200, job("10"))))
            session.server.route("GET", JOBS_PATH, always(Answer(200, chunks=stream)))
            outcome = session.run(self.watch_args("job", "job", JOB), request_timeout=self.WATCH_TIMEOUT)
            self.assertEqual((outcome.returncode, outcome.stderr), (0, ""), outcome)
            self.assertEqual(outcome.documents(), [{"type": "ADDED", "object": job("10")}])

        self.each_kubectl(contract)

    def test_single_object_watch_prints_an_error_event_and_exits_0(self) -> None:
        """W7: an ERROR event (410 Expired) is printed like any other; kubectl ignores the end of
        the watch (get.go discards UntilWithoutRetry's error) and exits 0 once the server closes."""
        gone = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "too old resource version: 10 (12)",
            "reason": "Expired",
            "code": 410,
        }
        stream = [(0.0, event_line("ADDED", job("10"))), (0.02, event_line("ERROR", gone)), (0.02, b"")]

        def contract(session: Session) -> None:
            session.server.route("GET", JOB_PATH, always(Answer(200, job("10"))))
            session.server.route("GET", JOBS_PATH, always(Answer(200, chunks=stream)))
            outcome = session.run(self.watch_args("job", "job", JOB), request_timeout=self.WATCH_TIMEOUT)
            self.assertEqual((outcome.returncode, outcome.stderr), (0, ""), outcome)
            self.assertEqual(
                outcome.documents(), [{"type": "ADDED", "object": job("10")}, {"type": "ERROR", "object": gone}]
            )

        self.each_kubectl(contract)

    @unittest.skipUnless(SLOW, SLOW_SKIP)
    def test_watch_ends_with_exit_0_at_the_request_timeout(self) -> None:
        """--request-timeout is the watch request's `timeout` and its client timeout: a server
        that keeps the watch open and silent is left after that time, and kubectl still exits 0
        with nothing on stderr (the tool then polls; wait_for_job)."""

        def contract(session: Session) -> None:
            silent = [(0.0, event_line("ADDED", job("10"))), (10.0, b"")]
            session.server.route("GET", JOB_PATH, always(Answer(200, job("10"))))
            session.server.route("GET", JOBS_PATH, always(Answer(200, chunks=silent)))
            session.warm_discovery()
            outcome = session.run(self.watch_args("job", "job", JOB), request_timeout="2s")
            self.assertEqual((outcome.returncode, outcome.stderr), (0, ""), outcome)
            self.assertEqual(len(outcome.documents()), 1)
            get, watch = session.api()
            self.assertEqual(watch.query.get("timeout"), "2s")
            self.assertGreaterEqual(outcome.ended - get.arrived, 2 - TIMER_SLACK)  # the GET precedes the watch
            self.assertLess(outcome.seconds, 8, "kubectl waited for the server, not for its timeout")

        self.each_kubectl(contract)

    def test_watch_of_a_missing_object_fails_at_once(self) -> None:
        """The first GET fails, so no watch starts: exit 1 with the NotFound at once (the tool's
        wait_for_job then polls, and finds the Job gone)."""

        def contract(session: Session) -> None:
            session.server.route("GET", JOB_PATH, lambda r, m: not_found("jobs", JOB, "batch"))
            serve_namespace(session.server)
            outcome = session.run(self.watch_args("job", "job", JOB), request_timeout=self.WATCH_TIMEOUT)
            self.assertEqual((outcome.returncode, outcome.stdout), (1, b""), outcome)
            self.assertEqual(outcome.stderr, f'Error from server (NotFound): jobs.batch "{JOB}" not found\n')
            self.assertFalse([r for r in session.api() if r.query.get("watch")])

        self.each_kubectl(contract)

    def test_the_jobs_watch_by_name_prints_its_list_then_every_event(self) -> None:
        """The Job's watch as wait_for_job starts it (`get jobs --field-selector metadata.name=NAME
        --watch`), which the tool uses because a single object's watch drops its first event: a
        list (limit=500) whose item is printed as ADDED, then a watch from the list's
        resourceVersion where every event is printed, the first one too, so a Job that changed
        between the list and the watch is never lost."""
        item = {key: value for key, value in job("10").items() if key not in ("kind", "apiVersion")}
        listed = {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {"resourceVersion": "10"}, "items": [item]}
        stream = [(0.0, event_line("MODIFIED", job("11"))), (0.02, event_line("MODIFIED", job("12"))), (0.02, b"")]
        created = job("9")
        args, namespace, _ = tool_form(
            lambda k: demo.wait_for_job(k, NAMESPACE, created, time.monotonic() + 30, 0.0, demo.Progress(False))
        )
        self.assertEqual(namespace, NAMESPACE)

        def contract(session: Session) -> None:
            def jobs(request: Recorded, match: re.Match[str]) -> Answer:
                return Answer(200, chunks=stream) if request.query.get("watch") == "true" else Answer(200, listed)

            session.server.route("GET", JOBS_PATH, jobs)
            outcome = session.run(args, request_timeout=self.WATCH_TIMEOUT)
            self.assertEqual((outcome.returncode, outcome.stderr), (0, ""), outcome)
            events = outcome.documents()
            self.assertEqual(
                [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events],
                [("ADDED", "10"), ("MODIFIED", "11"), ("MODIFIED", "12")],
            )
            self.assertEqual(events[0]["object"], job("10"))  # kind and apiVersion added to the list's item
            listing, watch = session.api()
            by_name = f"metadata.name={JOB}"
            self.assertEqual(listing.query, {"fieldSelector": by_name, "limit": "500", "timeout": self.WATCH_TIMEOUT})
            self.assertEqual(
                watch.query,
                {"fieldSelector": by_name, "resourceVersion": "10", "watch": "true", "timeout": self.WATCH_TIMEOUT},
            )

        self.each_kubectl(contract)

    def test_list_watch_prints_every_item_and_every_event(self) -> None:
        """The pods' watch (`get pods -l SEL --watch`): a chunked list (limit=500) whose items are
        printed as ADDED, with kind and apiVersion though the list's items have none; then a watch
        from the list's resourceVersion, and there every event is printed, the first too."""
        listed = pod_list([pod("p0"), pod("p1")], resource_version="50")
        stream = [(0.0, event_line("MODIFIED", whole("Pod", "v1", pod("p1", "Running")))), (0.1, b"")]

        def contract(session: Session) -> None:
            def pods(request: Recorded, match: re.Match[str]) -> Answer:
                return Answer(200, chunks=stream) if request.query.get("watch") == "true" else Answer(200, listed)

            session.server.route("GET", PODS_PATH, pods)
            outcome = session.run(self.watch_args("pods", "pods", "-l", SELECTOR), request_timeout=self.WATCH_TIMEOUT)
            self.assertEqual((outcome.returncode, outcome.stderr), (0, ""), outcome)
            events = outcome.documents()
            self.assertEqual([e["type"] for e in events], ["ADDED", "ADDED", "MODIFIED"])
            self.assertEqual(events[0]["object"], whole("Pod", "v1", pod("p0")))
            listing, watch = session.api()
            self.assertEqual(listing.query, {"labelSelector": SELECTOR, "limit": "500", "timeout": self.WATCH_TIMEOUT})
            self.assertEqual(
                watch.query,
                {"labelSelector": SELECTOR, "resourceVersion": "50", "watch": "true", "timeout": self.WATCH_TIMEOUT},
            )

        self.each_kubectl(contract)

    def test_list_watch_prints_each_event_as_it_comes_with_the_whole_terminated_status(self) -> None:
        """Rewards as they arrive rest on this (RoundRewards, on wait_for_job's pod watch): kubectl
        prints each event of the pods' watch as soon as it comes (get.go's watch loop prints every
        event through the printer to an unbuffered os.Stdout), and the object is the pod whole: its
        terminated state with the termination message. The first event must reach kubectl's
        stdout before the server even sends the second, two seconds later."""
        message = '{"event": "reward", "at": 1.5, "reward": 1}\n'
        ended = pod("p0")
        ended["status"]["containerStatuses"] = [
            {"name": CONTAINER, "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message}}}
        ]
        listed = pod_list([pod("p0", "Running")], resource_version="50")
        stream = [
            (0.0, event_line("MODIFIED", whole("Pod", "v1", ended))),
            (2.0, event_line("MODIFIED", whole("Pod", "v1", pod("p1")))),
        ]
        stream.append((0.0, b""))

        def contract(session: Session) -> None:
            def pods(request: Recorded, match: re.Match[str]) -> Answer:
                return Answer(200, chunks=stream) if request.query.get("watch") == "true" else Answer(200, listed)

            session.server.route("GET", PODS_PATH, pods)
            args = self.watch_args("pods", "pods", "-l", SELECTOR)
            argv = session.kubectl.argv(args, NAMESPACE, request_timeout=self.WATCH_TIMEOUT)
            env = kubectl_environment(str(session.directory))
            with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as process:
                assert process.stdout is not None
                received, arrivals = b"", []  # the bytes, and when each read of them ended
                while chunk := os.read(process.stdout.fileno(), 65536):
                    received += chunk
                    arrivals.append((time.monotonic(), len(received)))
            text, decoder, documents, position = received.decode(), json.JSONDecoder(), [], 0
            while text[position:].strip():
                position += len(text[position:]) - len(text[position:].lstrip())
                document, position = decoder.raw_decode(text, position)
                documents.append((document, position))  # position: where the document ends
            self.assertEqual([d["type"] for d, _ in documents], ["ADDED", "MODIFIED", "MODIFIED"], received[:600])
            first, first_end = documents[1]
            self.assertEqual(
                first["object"]["status"]["containerStatuses"][0]["state"]["terminated"]["message"], message
            )
            printed_at = next(at for at, length in arrivals if length >= first_end)  # ASCII: characters are bytes
            [watch] = [r for r in session.api() if r.query.get("watch") == "true"]
            self.assertIsNotNone(watch.answered)
            self.assertLess(printed_at, watch.answered or 0, "kubectl held the first event back")

        self.each_kubectl(contract)


class ObjectsContract(ContractCase):
    """create, get, delete, get --raw, config view and version, as the tool runs them."""

    def namespace_configmap_job(self) -> Dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "episode", "namespace": NAMESPACE},
                    "data": {"k": "v"},
                },
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": JOB, "namespace": NAMESPACE},
                    "spec": {},
                },
            ],
        }

    @staticmethod
    def created(request: Recorded, match: re.Match[str]) -> Answer:
        stored = request.json()
        stored["metadata"]["uid"] = "uid-" + stored["metadata"]["name"]
        return Answer(201, stored)

    def test_create_of_a_list_goes_on_past_a_failure(self) -> None:
        """`create -f - -o json --validate=strict` of a List (OwnedCreator): one POST per item,
        in order, each with fieldValidation=Strict; a failed item does not stop the next; each
        created object is printed; exit 1 with the failure on stderr. A v1 List has no OpenAPI v3
        path, so kubectl also validates it client-side against /openapi/v2 (cli-runtime
        query_param_verifier_v3.go HasSupport: List is unsupported; kubectl
        pkg/validation/schema.go paramVerifyingSchema). The same with the access reviews'
        --validate=false, with fieldValidation=Ignore and no schema read."""
        manifest = self.namespace_configmap_job()

        def contract(session: Session) -> None:
            self.route_creates_but_the_configmap(session)
            for review, validation in ((False, "Strict"), (True, "Ignore")):
                session.server.requests.clear()
                outcome = session.run(create_args(review), namespace=None, stdin=json.dumps(manifest).encode())
                self.assertEqual(outcome.returncode, 1, outcome)
                self.assertEqual(
                    outcome.stderr,
                    'Error from server (AlreadyExists): error when creating "STDIN": '
                    'configmaps "episode" already exists\n',
                )
                posts = [r for r in session.api() if r.method == "POST"]
                self.assertEqual([r.json() for r in posts], manifest["items"])
                for post in posts:
                    self.assertEqual(
                        post.query,
                        {
                            "fieldManager": "kubectl-create",
                            "fieldValidation": validation,
                            "timeout": demo.REQUEST_TIMEOUT,
                        },
                    )
                self.assertEqual(
                    [d["metadata"]["uid"] for d in outcome.documents()], [f"uid-{NAMESPACE}", f"uid-{JOB}"]
                )
                self.assertEqual("/openapi/v2" in [r.path for r in session.server.taken()], not review)
                failure = demo.KubectlFailure(outcome.argv, outcome.returncode, outcome.stderr, outcome.stdout.decode())
                self.assertTrue(failure.already_exists)

        self.each_kubectl(contract)

    def route_creates_but_the_configmap(self, session: Session) -> None:
        """The namespace and the Job are created; the ConfigMap exists already (409 AlreadyExists)."""
        exists = status_answer(
            409, "AlreadyExists", 'configmaps "episode" already exists', {"name": "episode", "kind": "configmaps"}
        )
        session.server.route("POST", "/api/v1/namespaces", self.created)
        session.server.route("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", lambda r, m: exists)
        session.server.route("POST", JOBS_PATH, self.created)

    def test_create_of_documents_goes_on_past_a_failure_and_reads_no_v2_schema_from_129(self) -> None:
        """The run's objects as it sends them (Kubectl.create_input: one JSON document each, not
        a List): one POST per document, in order, each with fieldValidation=Strict; a failed one
        does not stop the next; each created object printed; exit 1 with the failure on stderr,
        read as a List's would be. No /openapi/v2 from 1.29 (the OpenAPI v3 document of `v1`
        says the server validates), where a List fetches it on every call; up to 1.28 kubectl
        downloads it for any object (cli-runtime query_param_verifier_v3.go, kubectl
        pkg/validation/schema.go)."""
        items = self.namespace_configmap_job()["items"]

        def contract(session: Session) -> None:
            self.route_creates_but_the_configmap(session)
            stdin = demo.Kubectl.create_input({"apiVersion": "v1", "kind": "List", "items": items})
            self.assertNotIn('"List"', stdin)
            outcome = session.run(create_args(False), namespace=None, stdin=stdin.encode())
            self.assertEqual(outcome.returncode, 1, outcome)
            self.assertEqual(
                outcome.stderr,
                'Error from server (AlreadyExists): error when creating "STDIN": configmaps "episode" already exists\n',
            )
            posts = [r for r in session.api() if r.method == "POST"]
            self.assertEqual([r.json() for r in posts], items)
            self.assertEqual({r.query["fieldValidation"] for r in posts}, {"Strict"})
            self.assertEqual([d["metadata"]["uid"] for d in outcome.documents()], [f"uid-{NAMESPACE}", f"uid-{JOB}"])
            paths = [r.path for r in session.server.taken()]
            self.assertEqual("/openapi/v2" in paths, session.binary.minor <= 28)
            failure = demo.KubectlFailure(outcome.argv, outcome.returncode, outcome.stderr, outcome.stdout.decode())
            self.assertTrue(failure.already_exists)

        self.each_kubectl(contract)

    def test_create_of_one_object_is_validated_by_the_server(self) -> None:
        """One Job, --validate=strict: kubectl checks the OpenAPI v3 document of batch/v1 for the
        fieldValidation parameter and leaves the validation to the server; the server's
        strict-decoding refusal reaches stderr whole after kubectl's prefix (W12). Up to 1.28
        kubectl also downloads /openapi/v2 first, whatever it then uses; from 1.29 on it does not."""
        single = self.namespace_configmap_job()["items"][2]
        refusal = (
            'Job in version "v1" cannot be handled as a Job: '
            'strict decoding error: unknown field "spec.backoffLimitPerIndex"'
        )

        def contract(session: Session) -> None:
            session.server.route("POST", JOBS_PATH, lambda r, m: status_answer(400, "BadRequest", refusal))
            outcome = session.run(
                create_args(review=False),
                namespace=None,
                stdin=json.dumps(single).encode(),
            )
            self.assertEqual(outcome.returncode, 1, outcome)
            self.assertEqual(
                outcome.stderr, f'Error from server (BadRequest): error when creating "STDIN": {refusal}\n'
            )
            line = demo.strict_refusal(outcome.stderr, f"{NAMESPACE}/{JOB}")  # what the run says instead
            self.assertIn("does not know spec.backoffLimitPerIndex", line or "")
            self.assertIn("Kubernetes 1.29 or later", line or "")
            paths = [r.path for r in session.server.taken()]
            self.assertIn("/openapi/v3/apis/batch/v1", paths)
            self.assertEqual("/openapi/v2" in paths, session.binary.minor <= 28)
            (post,) = [r for r in session.api() if r.method == "POST"]
            self.assertEqual(post.query["fieldValidation"], "Strict")

        self.each_kubectl(contract)

    def test_create_of_access_reviews_without_validation_reads_no_schema(self) -> None:
        """The preflight's reviews (`--validate=false`): no OpenAPI document is fetched, each
        review is POSTed with fieldValidation=Ignore and printed with the server's status."""
        reviews = demo.access_review_list(NAMESPACE, True, False)

        def contract(session: Session) -> None:
            def review(request: Recorded, match: re.Match[str]) -> Answer:
                answered = request.json()
                answered["status"] = {"allowed": True}
                return Answer(201, answered)

            session.server.route("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
            outcome = session.run(
                create_args(review=True),
                namespace=None,
                stdin=json.dumps(reviews).encode(),
            )
            self.assertEqual(outcome.returncode, 0, outcome)
            self.assertFalse([r for r in session.server.taken() if r.path.startswith("/openapi")])
            posts = session.api()
            self.assertEqual([r.json() for r in posts], reviews["items"])
            self.assertEqual({r.query["fieldValidation"] for r in posts}, {"Ignore"})
            printed = outcome.documents()
            self.assertEqual([d["spec"] for d in printed], [item["spec"] for item in reviews["items"]])
            self.assertTrue(all(d["status"]["allowed"] for d in printed))

        self.each_kubectl(contract)

    def test_get_of_a_missing_object_with_ignore_not_found_prints_nothing(self) -> None:
        """`get KIND NAME --ignore-not-found -o json` (Kubectl.get): nothing on stdout or
        stderr, exit 0. Without the flag: exit 1 and the server's NotFound; when the namespace
        is gone too, kubectl reports the namespace instead (cli-runtime visitor.go Info.Get asks
        GET namespaces/NS after a NotFound)."""

        def contract(session: Session) -> None:
            session.server.route("GET", JOB_PATH, lambda r, m: not_found("jobs", JOB, "batch"))
            serve_namespace(session.server)
            outcome = session.run(get_args("job", JOB))
            self.assertEqual((outcome.returncode, outcome.stdout, outcome.stderr), (0, b"", ""), outcome)
            self.assertEqual(session.api()[0].path, JOB_PATH)
            outcome = session.run(["get", "job", JOB, "-o", "json"])
            self.assertEqual(
                (outcome.returncode, outcome.stderr),
                (1, f'Error from server (NotFound): jobs.batch "{JOB}" not found\n'),
                outcome,
            )
            serve_namespace(session.server, exists=False)
            outcome = session.run(["get", "job", JOB, "-o", "json"])
            self.assertEqual(
                (outcome.returncode, outcome.stderr),
                (1, f'Error from server (NotFound): namespaces "{NAMESPACE}" not found\n'),
                outcome,
            )
            outcome = session.run(get_args("job", JOB))
            self.assertEqual((outcome.returncode, outcome.stdout, outcome.stderr), (0, b"", ""), outcome)

        self.each_kubectl(contract)

    def test_get_of_one_object_prints_it_alone(self) -> None:
        def contract(session: Session) -> None:
            session.server.route("GET", JOB_PATH, always(Answer(200, job("10"))))
            outcome = session.run(get_args("job", JOB))
            self.assertEqual(outcome.returncode, 0, outcome)
            self.assertEqual(outcome.documents(), [job("10")])

        self.each_kubectl(contract)

    def test_get_of_pods_and_events_is_one_list_with_kind_on_each_item(self) -> None:
        """`get pods,events -o json` (split_pods_and_events): one List, the pods then the core v1
        events (not events.k8s.io), each item with kind and apiVersion though the server's
        lists carry them only on the list; with nothing found, an empty List."""
        scheduled = {
            "metadata": {"name": "p0.1", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Pod", "name": "p0", "namespace": NAMESPACE},
            "reason": "Scheduled",
            "type": "Normal",
        }

        def contract(session: Session) -> None:
            contents = {"pods": [pod("p0")], "events": [scheduled]}

            def listing(kind: str) -> Callable[[Recorded, re.Match[str]], Answer]:
                return lambda r, m: Answer(
                    200,
                    {
                        "kind": kind.capitalize()[:-1] + "List",
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": "60"},
                        "items": contents[kind],
                    },
                )

            for kind in contents:
                session.server.route("GET", f"/api/v1/namespaces/{NAMESPACE}/{kind}", listing(kind))
            outcome = session.run(list_args("pods,events"))
            self.assertEqual(outcome.returncode, 0, outcome)
            expected = {
                "apiVersion": "v1",
                "kind": "List",
                "metadata": {"resourceVersion": ""},
                "items": [whole("Pod", "v1", pod("p0")), whole("Event", "v1", scheduled)],
            }
            self.assertEqual(outcome.documents(), [expected])
            self.assertEqual(
                [(r.path, r.query.get("limit")) for r in session.api()],
                [(PODS_PATH, "500"), (f"/api/v1/namespaces/{NAMESPACE}/events", "500")],
            )
            contents["pods"], contents["events"] = [], []
            outcome = session.run(list_args("pods,events"))
            self.assertEqual(outcome.documents(), [dict(expected, items=[])])
            self.assertEqual(outcome.stderr, "")

        self.each_kubectl(contract)

    def test_get_of_pods_in_every_namespace_is_one_list_of_every_page(self) -> None:
        """`get pods --all-namespaces --field-selector=status.phase!=Succeeded,status.phase!=Failed
        -o json` (episode_room's pods): GET /api/v1/pods with the field selector as it is and
        limit=500, then once more per continue token, printed as one List of every page's items
        with kind on each (kubectl pkg/cmd/get/get.go, cli-runtime's resource builder
        RequestChunksOf: a chunked list, joined)."""
        selector = demo.NON_TERMINATED_PODS[1].split("=", 1)[1]

        def contract(session: Session) -> None:
            pages = {
                "": ([pod("p0", "Running"), pod("p1", "Pending")], "page-2"),
                "page-2": ([pod("p2", "Running")], ""),
            }

            def listing(recorded: Recorded, match: re.Match[str]) -> Answer:
                items, token = pages[recorded.query.get("continue", "")]
                metadata = {"resourceVersion": "70", **({"continue": token} if token else {})}
                return Answer(200, {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items})

            session.server.route("GET", "/api/v1/pods", listing)
            outcome = session.run(everywhere_args(), namespace=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            [printed] = outcome.documents()
            self.assertEqual(printed["kind"], "List")
            self.assertEqual([item["metadata"]["name"] for item in printed["items"]], ["p0", "p1", "p2"])
            self.assertEqual({item["kind"] for item in printed["items"]}, {"Pod"})
            self.assertEqual(
                [
                    (r.path, r.query.get("fieldSelector"), r.query.get("limit"), r.query.get("continue"))
                    for r in session.api()
                ],
                [("/api/v1/pods", selector, "500", None), ("/api/v1/pods", selector, "500", "page-2")],
            )

        self.each_kubectl(contract)

    def test_get_of_nodes_and_every_pod_is_one_list_with_kind_on_each_item(self) -> None:
        """`get runtimeclasses,nodes,pods --all-namespaces -o json` (BatchRun.preflight with
        --parallelism auto): the RuntimeClasses' list (cluster-scoped), the nodes' list, then the
        pods of every namespace (GET /api/v1/pods, no namespace in the path), each limit=500; one
        List, every item with its kind (so the tool tells them apart)."""

        def contract(session: Session) -> None:
            node = {"metadata": {"name": "node-a"}, "status": {"allocatable": {"cpu": "4"}}}
            nodes = {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": [node]}
            runtimeclass = {"metadata": {"name": "cube"}, "handler": "cube"}
            classes = {
                "kind": "RuntimeClassList",
                "apiVersion": "node.k8s.io/v1",
                "metadata": {},
                "items": [runtimeclass],
            }
            session.server.route("GET", "/apis/node.k8s.io/v1/runtimeclasses", always(Answer(200, classes)))
            session.server.route("GET", "/api/v1/nodes", always(Answer(200, nodes)))
            session.server.route("GET", "/api/v1/pods", always(Answer(200, pod_list([pod("p0", "Running")]))))
            outcome = session.run(nodes_and_pods_args(), namespace=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            [printed] = outcome.documents()
            kinds = [(item["kind"], item["metadata"]["name"]) for item in printed["items"]]
            self.assertEqual(kinds, [("RuntimeClass", "cube"), ("Node", "node-a"), ("Pod", "p0")])
            self.assertEqual(demo.named_runtimeclass(printed["items"], "cube"), printed["items"][0])
            requests = [(r.path, r.query.get("limit")) for r in session.api()]
            expected = [
                ("/apis/node.k8s.io/v1/runtimeclasses", "500"),
                ("/api/v1/nodes", "500"),
                ("/api/v1/pods", "500"),
            ]
            self.assertEqual(requests, expected)

        self.each_kubectl(contract)

    def test_delete_of_a_job_in_the_foreground_without_waiting(self) -> None:
        """`delete job NAME --cascade=foreground --wait=false`: one DELETE whose body asks
        propagationPolicy Foreground, no wait; the namespace's delete asks Background. The
        confirmation line names the namespace from 1.34 on."""

        def contract(session: Session) -> None:
            session.server.route("DELETE", JOB_PATH, lambda r, m: Answer(200, job("70")))
            terminating = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": NAMESPACE},
                "status": {"phase": "Terminating"},
            }
            session.server.route("DELETE", f"/api/v1/namespaces/{NAMESPACE}", lambda r, m: Answer(200, terminating))
            outcome = session.run(["delete", "job", JOB, "--cascade=foreground", "--wait=false"])  # cleanup_run's
            self.assertEqual(outcome.returncode, 0, outcome)
            (delete,) = session.api()
            self.assertEqual((delete.method, delete.path), ("DELETE", JOB_PATH))
            self.assertEqual(delete.json(), {"propagationPolicy": "Foreground"})
            self.assertRegex(outcome.stdout.decode(), rf'^job\.batch "{JOB}" deleted( from {NAMESPACE} namespace)?\n$')
            self.assertEqual(outcome.stdout.decode().endswith("namespace\n"), session.binary.minor >= 34)
            outcome = session.run(["delete", "namespace", NAMESPACE, "--wait=false"], namespace=None)
            self.assertEqual(
                (outcome.returncode, outcome.stdout), (0, f'namespace "{NAMESPACE}" deleted\n'.encode()), outcome
            )
            self.assertEqual(session.api()[-1].json(), {"propagationPolicy": "Background"})

        self.each_kubectl(contract)

    @staticmethod
    def the_tools_kubectl(session: Session) -> demo.Kubectl:
        """The tool's own Kubectl bound to the session's context, its kubectl started with the
        session's HOME (its own discovery cache, empty at first: a fresh CI runner's)."""
        kubectl = demo.Kubectl(session.binary.path, context="contract", kubeconfig=str(session.kubeconfig))
        kubectl.environment = kubectl_environment(str(session.directory))
        return kubectl

    @staticmethod
    def asked_beyond(session: Session, *paths: str) -> List[str]:
        """Requests other than `paths`: discovery, OpenAPI documents, anything else (the Google
        Cloud SDK's dispatcher asks /version before every command, to pick its kubectl)."""
        dispatcher = session.binary.dispatcher
        return [
            repr(r) for r in session.server.taken() if r.path not in paths and not (dispatcher and r.path == "/version")
        ]

    def test_raw_create_is_one_post_with_strict_validation_and_no_discovery(self) -> None:
        """`create --raw PATH -f -` (Kubectl.create_raw, the run's Job): with a cold cache, one POST
        of stdin's bytes to PATH, its query as given (fieldValidation=Strict, fieldManager), no
        discovery and no OpenAPI document (kubectl pkg/cmd/create/create.go RunCreate: --raw goes
        to rawhttp.RawPost before the builder); the server's answer printed as it is. A refusal is
        `Error from server (Reason): message`, exit 1, without the `error when creating "STDIN"` of
        a plain create: AlreadyExists and a strict decoding error still read as the tool's checks
        expect (KubectlFailure.already_exists, strict_refusal)."""
        manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": NAMESPACE}}

        def contract(session: Session) -> None:
            kubectl = self.the_tools_kubectl(session)
            session.server.route("POST", JOBS_PATH, self.created)
            created = kubectl.create_raw(demo.create_path(manifest), manifest)
            self.assertEqual(created, {**manifest, "metadata": {**manifest["metadata"], "uid": "uid-" + JOB}})
            self.assertEqual(self.asked_beyond(session, JOBS_PATH), [])
            (post,) = session.api()
            self.assertEqual((post.method, post.json()), ("POST", manifest))
            self.assertEqual(
                post.query,
                {"fieldManager": "kubectl-create", "fieldValidation": "Strict", "timeout": demo.REQUEST_TIMEOUT},
            )
            exists = status_answer(409, "AlreadyExists", f'jobs.batch "{JOB}" already exists', {"name": JOB})
            session.server.route("POST", JOBS_PATH, always(exists))
            with self.assertRaises(demo.KubectlFailure) as refused:
                kubectl.create_raw(demo.create_path(manifest), manifest)
            self.assertEqual(
                refused.exception.stderr, f'Error from server (AlreadyExists): jobs.batch "{JOB}" already exists\n'
            )
            self.assertTrue(refused.exception.already_exists)
            strict = (
                'Job in version "v1" cannot be handled as a Job: strict decoding error: '
                'unknown field "spec.backoffLimitPerIndex"'
            )
            session.server.route("POST", JOBS_PATH, always(status_answer(400, "BadRequest", strict)))
            with self.assertRaises(demo.KubectlFailure) as unknown:
                kubectl.create_raw(demo.create_path(manifest), manifest)
            self.assertEqual(unknown.exception.stderr, f"Error from server (BadRequest): {strict}\n")
            self.assertIn(demo.PER_INDEX_BACKOFF, demo.strict_refusal(unknown.exception.stderr, "the Job") or "")

        self.each_kubectl(contract)

    def test_a_prepared_create_sends_nothing_before_its_input_nor_once_cancelled(self) -> None:
        """Kubectl.prepare: a create's kubectl started before its input. `create --raw PATH -f -`
        opens its POST and waits to send the body (client-go streams Body(io.Reader)), or reads
        its input first; killed before it (cancel_prepared), its request has no body's end, and
        no object is created. `create -f -` asks nothing but /version before its input. Given its
        input, the prepared process makes the call, one process each, as `create` would."""
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": NAMESPACE}}
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}

        def opened(session: Session, method: str, path: str, limit: float = 3.0) -> bool:
            """Whether kubectl began a request `method path` within `limit` s (some minors read
            their input first and begin none): the test then cancels it, or gives it its input."""
            ends = time.monotonic() + limit
            while time.monotonic() < ends:
                if (method, path) in [(verb, where.split("?")[0]) for verb, where in session.server.arrivals]:
                    return True
                time.sleep(0.01)
            return False

        def contract(session: Session) -> None:
            kubectl = self.the_tools_kubectl(session)
            answered: List[str] = []

            def created(request: Recorded, match: re.Match[str]) -> Answer:
                answered.append(request.path)
                return self.created(request, match)

            session.server.route("POST", JOBS_PATH, created)
            session.server.route("POST", "/api/v1/namespaces", created)
            path = demo.create_path(job)
            kubectl.prepare_create_raw(path)
            opened(session, "POST", JOBS_PATH)
            kubectl.cancel_prepared()
            session.server.arrivals.clear()
            kubectl.prepare_create()
            if opened(session, "GET", "/version"):  # what it asks before its input; then a moment more
                time.sleep(0.2)
            kubectl.cancel_prepared()
            self.assertEqual(answered, [])  # nothing created, nothing answered
            self.assertEqual(session.api(), [])  # no request but discovery completed
            self.assertEqual([call.get("cancelled") for call in kubectl.calls], ["not needed", "not needed"])
            self.assertEqual(kubectl.children, set())
            kubectl.prepare_create_raw(path)
            kubectl.prepare_create()
            opened(session, "POST", JOBS_PATH)
            self.assertEqual(kubectl.create_raw(path, job)["metadata"]["uid"], "uid-" + JOB)
            self.assertEqual([d["metadata"]["uid"] for d in kubectl.create(namespace)], ["uid-" + NAMESPACE])
            self.assertEqual(answered, [JOBS_PATH, "/api/v1/namespaces"])
            self.assertEqual([r.json() for r in session.api() if r.method == "POST"], [job, namespace])
            made = kubectl.calls[2:]
            self.assertEqual(len(made), 2)  # one process each: the prepared ones
            for call in made:
                self.assertTrue(call["prepared"] and call["exit"] == 0, call)
                self.assertLessEqual(call["started"], call["input_at"], call)
            self.assertEqual(kubectl.prepared, {})

        self.each_kubectl(contract)

    def test_raw_create_of_the_rules_review_is_one_post_and_its_answer_as_written(self) -> None:
        """`create --raw /apis/authorization.k8s.io/v1/selfsubjectrulesreviews -f -`
        (BatchRun.review_access): with a cold cache, one POST of the review and no discovery, the
        server's answer printed as it is, which the tool reads as proof of every permission when
        its rules grant them (granted_by_rules); a refusal is a failure (the access reviews are
        asked then), a transient one retried as a read's."""
        path = demo.RULES_REVIEW_PATH
        manifest = demo.rules_review(NAMESPACE)
        status = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }

        def contract(session: Session) -> None:
            kubectl = self.the_tools_kubectl(session)
            kubectl.timing = dataclasses.replace(kubectl.timing, retry_delays=(0.0,))
            session.server.route("POST", path, lambda r, m: Answer(201, {**r.json(), "status": status}))
            answer = kubectl.create_raw(path, manifest, review=True)
            self.assertEqual(answer, {**manifest, "status": status})
            self.assertEqual(self.asked_beyond(session, path), [])
            (post,) = session.api()
            self.assertEqual(
                (post.method, post.json(), post.query), ("POST", manifest, {"timeout": demo.REQUEST_TIMEOUT})
            )
            self.assertIsNotNone(demo.granted_by_rules(answer, demo.access_review_list(NAMESPACE, True)))
            session.server.requests.clear()
            unavailable = status_answer(
                503, "ServiceUnavailable", "the server is currently unable to handle the request"
            )
            answers = iter([unavailable, Answer(201, {**manifest, "status": status})])
            session.server.route("POST", path, lambda r, m: next(answers))
            self.assertEqual(kubectl.create_raw(path, manifest, review=True)["status"], status)
            self.assertEqual(len([r for r in session.api() if r.method == "POST"]), 2)  # kubectl's own try, then ours
            forbidden = (
                'selfsubjectrulesreviews.authorization.k8s.io is forbidden: User "u" cannot create resource '
                '"selfsubjectrulesreviews" in API group "authorization.k8s.io" at the cluster scope'
            )
            session.server.route("POST", path, always(status_answer(403, "Forbidden", forbidden)))
            with self.assertRaises(demo.KubectlFailure) as refused:
                kubectl.create_raw(path, manifest, review=True)
            self.assertEqual(refused.exception.first_line, f"Error from server (Forbidden): {forbidden}")
            self.assertFalse(refused.exception.unreachable)

        self.each_kubectl(contract)

    def test_raw_get_of_a_runtimeclass_is_one_get_and_names_its_absence(self) -> None:
        """`get --raw /apis/node.k8s.io/v1/runtimeclasses/NAME` (Kubectl.runtimeclass): with a cold
        cache, one GET and no discovery (kubectl get.go: --raw goes to rawhttp.RawGet); the
        object as the server wrote it; a missing one is the server's NotFound, printed
        `Error from server (NotFound): runtimeclasses.node.k8s.io "NAME" not found`, exit 1, which
        the tool reads as absent; a path the server does not serve is another NotFound (the
        generic "could not find the requested resource"), raised as a failure, as a refusal is."""
        path = "/apis/node.k8s.io/v1/runtimeclasses/cube"
        stored = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "cube"},
            "handler": "cube",
        }

        def contract(session: Session) -> None:
            kubectl = self.the_tools_kubectl(session)
            session.server.route("GET", path, always(Answer(200, stored)))
            self.assertEqual(kubectl.runtimeclass("cube"), stored)
            self.assertEqual(self.asked_beyond(session, path), [])
            (get,) = session.api()
            self.assertEqual((get.method, get.query), ("GET", {"timeout": demo.REQUEST_TIMEOUT}))
            session.server.route("GET", path, always(not_found("runtimeclasses", "cube", "node.k8s.io")))
            self.assertIsNone(kubectl.runtimeclass("cube"))
            session.server.route("GET", path, always(Answer(404, b"404 page not found\n", "text/plain")))
            with self.assertRaises(demo.KubectlFailure) as unserved:
                kubectl.runtimeclass("cube")
            self.assertEqual(
                unserved.exception.first_line,
                "Error from server (NotFound): the server could not find the requested resource",
            )
            forbidden = 'runtimeclasses.node.k8s.io "cube" is forbidden: User "u" cannot get resource "runtimeclasses"'
            session.server.route("GET", path, always(status_answer(403, "Forbidden", forbidden)))
            with self.assertRaises(demo.KubectlFailure) as refused:
                kubectl.runtimeclass("cube")
            self.assertEqual(refused.exception.first_line, f"Error from server (Forbidden): {forbidden}")

        self.each_kubectl(contract)

    def test_get_raw_returns_the_text_as_it_is(self) -> None:
        """`get --raw /api/v1/nodes/N/proxy/metrics` (read_kubelet_metrics): the body byte for
        byte, a CR and a missing last newline included."""
        text = b'# TYPE kubelet_runtime_operations_duration_seconds histogram\nx_bucket{le="0.005"} 1\r\nlast 2'

        def contract(session: Session) -> None:
            session.server.route(
                "GET", "/api/v1/nodes/node-1/proxy/metrics", lambda r, m: Answer(200, text, "text/plain; version=0.0.4")
            )
            outcome = session.run(["get", "--raw", "/api/v1/nodes/node-1/proxy/metrics"], namespace=None)
            self.assertEqual((outcome.returncode, outcome.stdout), (0, text), outcome)
            (request,) = session.api()
            self.assertEqual(
                (request.path, request.query), ("/api/v1/nodes/node-1/proxy/metrics", {"timeout": demo.REQUEST_TIMEOUT})
            )

        self.each_kubectl(contract)

    def test_config_view_minify_gives_exactly_the_named_context(self) -> None:
        """`config view --minify -o json` with --context (Kubectl.cluster_identity): that context,
        its cluster and its user, as current-context, from the kubeconfig alone: no request.
        (The Google Cloud SDK's dispatcher asks the server's /version first, even here.)"""

        def contract(session: Session) -> None:
            config = json.loads(session.kubeconfig.read_text())
            config["clusters"].append({"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:1"}})
            config["users"].append({"name": "someone", "user": {}})
            config["contexts"][1]["context"] = {"cluster": "elsewhere", "user": "someone"}
            session.kubeconfig.write_text(json.dumps(config))
            outcome = session.run(config_view_args(), namespace=None, request_timeout=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            (view,) = outcome.documents()
            self.assertEqual(view["current-context"], "contract")
            self.assertEqual(
                view["contexts"], [{"name": "contract", "context": {"cluster": "recording", "user": "tester"}}]
            )
            self.assertEqual(view["clusters"], [{"name": "recording", "cluster": {"server": session.server.url}}])
            self.assertEqual(view["users"], [{"name": "tester", "user": {}}])
            asked = [(r.method, r.path) for r in session.server.taken()]
            self.assertEqual(asked, [("GET", "/version")] if session.binary.dispatcher else [])

        self.each_kubectl(contract)

    def test_config_view_of_an_unknown_context_fails(self) -> None:
        def contract(session: Session) -> None:
            session.kubectl.context = "nowhere"
            outcome = session.run(config_view_args(), namespace=None, request_timeout=None)
            self.assertEqual(
                (outcome.returncode, outcome.stdout, outcome.stderr),
                (1, b"", "error: cannot locate context nowhere\n"),
                outcome,
            )

        self.each_kubectl(contract)

    def test_version_prints_the_client_and_the_server(self) -> None:
        def contract(session: Session) -> None:
            outcome = session.run(["version", "-o", "json"], namespace=None)
            self.assertEqual(outcome.returncode, 0, outcome)
            (version,) = outcome.documents()
            self.assertEqual(version["serverVersion"], SERVER_VERSION)
            self.assertIn("gitVersion", version["clientVersion"])

        self.each_kubectl(contract)


class ForeignServerContract(ContractCase):
    """A URL that answers HTTP but is no Kubernetes API server (an HTTP proxy, another web server:
    404 with a plain-text body to every path): each of the preflight's first calls fails with
    kubectl's words for a 404 without a metav1.Status body, which the tool reads as one sentence
    naming the server; a real API server's NotFound (a missing object, a node proxy's 404) is not."""

    PROXY_404 = Answer(404, b"404 page not found\n", "text/plain; charset=utf-8")  # Go's http.NotFound

    def test_every_first_call_names_a_server_that_is_not_an_api_server(self) -> None:
        reviews = json.dumps(demo.access_review_list(NAMESPACE, True, False)).encode()

        def contract(session: Session) -> None:
            for method in ("GET", "POST"):
                session.server.route(method, r"/.*", lambda request, match: self.PROXY_404)
            for args, stdin in (
                (["version", "-o", "json"], None),  # check's first read
                (get_args("runtimeclass", "cube"), None),  # run's and check's
                (create_args(review=True), reviews),  # the access reviews
                (tool_form(lambda k: k.get_list("nodes"))[0], None),
            ):
                outcome = session.run(args, namespace=None, stdin=stdin)
                self.assertEqual(outcome.returncode, 1, outcome)
                failure = demo.KubectlFailure(outcome.argv, 1, outcome.stderr, server=session.server.url)
                self.assertTrue(failure.unreachable, outcome)  # the caller stops at the first, in one line
                self.assertEqual(str(failure), demo.not_an_api_server_message(session.server.url, "contract"), outcome)

        self.each_kubectl(contract)

    def test_a_real_servers_not_found_is_not_taken_for_one(self) -> None:
        def contract(session: Session) -> None:
            session.server.route(
                "GET", "/api/v1/nodes/n1/proxy/metrics", lambda request, match: self.PROXY_404
            )  # the kubelet's own 404, through the API server
            for args in (get_args("job", "missing"), ["get", "--raw", "/api/v1/nodes/n1/proxy/metrics"]):
                outcome = session.run([arg for arg in args if arg != "--ignore-not-found"])
                self.assertEqual(outcome.returncode, 1, outcome)
                failure = demo.KubectlFailure(outcome.argv, 1, outcome.stderr)
                self.assertFalse(failure.unreachable, outcome)
                self.assertIn("failed (exit 1): Error from server (NotFound)", str(failure))

        self.each_kubectl(contract)


class TimeoutContract(ContractCase):
    """--request-timeout, which the tool passes to every call but config view (Kubectl.argv),
    and the failures the tool takes for transient (KubectlFailure.transient)."""

    def test_request_timeout_is_each_requests_timeout(self) -> None:
        """Every request, discovery included, carries `timeout=` the flag's value (client-go
        rest Request.URL); without the flag, discovery asks 32 s and other requests nothing."""

        def contract(session: Session) -> None:
            session.server.route("GET", JOB_PATH, always(Answer(200, job("10"))))
            outcome = session.run(["get", "job", JOB, "-o", "json"], request_timeout="17s")
            self.assertEqual(outcome.returncode, 0, outcome)
            requests = session.server.taken()
            if session.binary.dispatcher:  # its own probe of /version
                requests = [r for r in requests if r.path != "/version"]
            self.assertTrue(requests)
            self.assertEqual({r.query.get("timeout") for r in requests}, {"17s"}, requests)
            session.server.requests.clear()
            session.forget_discovery()
            session.run(["get", "job", JOB, "-o", "json"], request_timeout=None)
            discovery = [r for r in session.server.taken() if r.discovery and r.path != "/version"]
            self.assertEqual({r.query.get("timeout") for r in discovery}, {"32s"})
            self.assertEqual(session.api()[0].query, {})

        self.each_kubectl(contract)

    @unittest.skipUnless(SLOW, SLOW_SKIP)
    def test_a_slow_answer_fails_at_the_request_timeout_as_transient(self) -> None:
        """An answer slower than --request-timeout: kubectl gives up after that time with
        `Unable to connect to the server: ...` (two wordings, whichever of Go's context deadline
        and the client's timeout fires first, on any minor), which the tool takes for transient."""

        def contract(session: Session) -> None:
            slow = Answer(200, job("10"), delay=10)
            session.server.route("GET", JOB_PATH, always(slow))
            session.warm_discovery()
            outcome = session.run(["get", "job", JOB, "-o", "json"], request_timeout="2s")
            self.assertEqual(outcome.returncode, 1, outcome)
            self.assertRegex(outcome.stderr, r"^Unable to connect to the server: ")
            self.assertEqual([r.path for r in session.api()], [JOB_PATH])
            self.assertGreaterEqual(outcome.seconds, 2 - TIMER_SLACK)
            self.assertLess(outcome.seconds, 8, "kubectl waited for the answer, not for its timeout")
            self.assertTrue(demo.KubectlFailure(outcome.argv, 1, outcome.stderr).transient, outcome.stderr)

        self.each_kubectl(contract)

    def test_server_errors_read_as_the_tool_expects(self) -> None:
        """The API server's 500, 503 and 429 (without Retry-After) are printed as `Error from
        server (Reason): message` and taken for transient; 403 is not."""

        def contract(session: Session) -> None:
            path = JOB_PATH
            for code, reason, transient in (
                (500, "InternalError", True),
                (503, "ServiceUnavailable", True),
                (429, "TooManyRequests", True),
                (403, "Forbidden", False),
            ):
                session.server.route(
                    "GET",
                    path,
                    lambda r, m, code=code, reason=reason: status_answer(code, reason, f"injected {reason}"),
                )
                outcome = session.run(["get", "job", JOB, "-o", "json"])
                self.assertEqual(
                    (outcome.returncode, outcome.stderr),
                    (1, f"Error from server ({reason}): injected {reason}\n"),
                    outcome,
                )
                self.assertEqual(demo.KubectlFailure(outcome.argv, 1, outcome.stderr).transient, transient, reason)

        self.each_kubectl(contract)

    @unittest.skipUnless(SLOW, SLOW_SKIP)
    def test_too_many_requests_with_retry_after_is_retried_by_kubectl(self) -> None:
        """A 429 with Retry-After (as priority and fairness sends it) is retried by kubectl itself
        after that many seconds (client-go request.go checkWait, up to 10 times), before anything
        is printed: the tool sees success."""

        def contract(session: Session) -> None:
            path = JOB_PATH
            answers = [status_answer(429, "TooManyRequests", "wait")]
            answers[0].headers["Retry-After"] = "1"
            session.server.route("GET", path, lambda r, m: answers.pop() if answers else Answer(200, job("10")))
            session.server.requests.clear()
            outcome = session.run(["get", "job", JOB, "-o", "json"])
            self.assertEqual((outcome.returncode, outcome.documents()), (0, [job("10")]), outcome)
            tries = [r for r in session.api() if r.path == path]
            self.assertEqual([r.status for r in tries], [429, 200])
            self.assertGreaterEqual(tries[1].arrived - tries[0].arrived, 1 - TIMER_SLACK)

        self.each_kubectl(contract)


@unittest.skipUnless(BINARIES, NO_KUBECTL)
class WholeRunContract(unittest.TestCase):
    """A whole run through each real kubectl: `run --count 2` against the fake cluster behind an
    API server (tests/apicluster.py), kubectl's discovery cache cold. Every other contract here
    checks one form; this one checks that the forms together make a run: the watches, the logs
    followed as the pods end, the raw creates, the events, as the real kubectl prints them. Three
    binaries at once (each run has pods of its own); only with RL_DEMO_CONTRACT_SLOW=1."""

    @unittest.skipUnless(SLOW, SLOW_SKIP)
    def test_a_run_through_the_real_kubectl_succeeds_with_every_reward(self) -> None:
        found = binaries()
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            futures = [(binary, pool.submit(self.one_run, binary)) for binary in found]
        for binary, future in futures:
            with self.subTest(kubectl=binary.label):
                future.result()

    def one_run(self, binary: Binary) -> None:
        from tests.apicluster import ApiCluster
        from tests.fakecluster import FakeCluster
        from tests.toolprocess import tool_command, tool_environment

        if binary.problem:
            raise AssertionError(binary.problem)
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            cluster = FakeCluster(root / "cluster")
            try:
                with ApiCluster(cluster) as server:
                    (root / "home").mkdir()
                    env = kubectl_environment(str(root / "home"))
                    env["KUBECONFIG"] = str(server.kubeconfig(root))
                    out = root / "out"

                    def tool(*argv: str) -> subprocess.CompletedProcess[str]:
                        return subprocess.run(
                            tool_command(*argv, "--kubectl", binary.path, "--output", str(out)),
                            cwd=directory,
                            env=tool_environment(env),
                            capture_output=True,
                            text=True,
                            timeout=300,
                            check=False,
                        )

                    done = tool("run", "--count", "2", "--quiet")
                    self.assertEqual(done.returncode, 0, done.stderr)
                    refused = [r for r in server.taken() if (r.status or 0) >= 400]
                    self.assertEqual(refused, [], "requests the API server refused")
                    # then cleanup: its reads, and the watches of what it deleted (by name, the
                    # namespace's cluster-wide), as this kubectl makes them
                    cleaned = tool("cleanup")
                    self.assertEqual(cleaned.returncode, 0, cleaned.stderr)
                    self.assertIn("deleted namespace", cleaned.stdout)
                    taken = server.taken()
                    gone = [r for r in taken if r.status == 404 and r.method == "GET" and "watch" not in r.query]
                    refused = [r for r in taken if (r.status or 0) >= 400 and r not in gone]
                    self.assertEqual(refused, [], "requests the API server refused (a read of what is gone aside)")
                    self.assertTrue(gone, "cleanup never read the Job or the namespace gone")
            finally:
                cluster.close()
            results = json.loads((out / "results.json").read_text())
            self.assertEqual((results["successful_episodes"], results["reward_sum"]), (2, 2.0))
            lines = [json.loads(line) for line in (out / demo.REWARDS_FILE).read_text().splitlines()]
            self.assertEqual(sorted(line["index"] for line in lines), [0, 1])
            for row in results["pods"]:  # each log read whole, as the pod ended
                self.assertIn(demo.LOG_END_LINE.decode(), (out / f"{row['pod']}.log").read_text())
            calls = json.loads((out / "kubectl-calls.json").read_text())
            self.assertLessEqual(len(calls), 10, [call["argv"] for call in calls])


if __name__ == "__main__":
    unittest.main()
