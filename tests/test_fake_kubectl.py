"""Self-test of the kubectl fake (tests/fake_kubectl.py + tests/fakecluster.py).

The fake is exercised the way the tool uses it: as an executable ``kubectl``
found on PATH, through subprocess.  These tests pin the behaviour the rest of
the suite relies on: strict argument handling, a full create -> watch ->
complete cycle running a real (tiny) worker, and a few injected faults.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import tempfile
import time
import unittest
from typing import Any, ClassVar, Dict, List, Optional

import rl_batch_demo as demo
from tests.fakecluster import FakeCluster, fake_module, run_fake_in_process
from tests.fakekube.common import POD_PIDS_FILE
from tests.fakekube.faults import killed_mid_run
from tests.tiers import end_to_end

WORKER = r"""
import json, os, time
eid = os.environ["EPISODE_ID"]
lines = [json.dumps({"event": "ready", "at": time.time(), "episode_id": eid}),
         json.dumps({"event": "reward", "at": time.time(), "episode_id": eid, "reward": 1.5})]
for i in range(int(os.environ.get("EXTRA_LINES", "0"))):
    print("filler", i)
print("\n".join(lines), flush=True)
with open(os.environ["RL_DEMO_TERMINATION_LOG"], "w") as f:
    f.write("\n".join(lines) + "\n")
"""

NS = "rl-demo"


def job_manifest(
    name: str = "rollout",
    completions: int = 3,
    parallelism: int = 2,
    extra_env: Optional[List[dict]] = None,
    security: bool = False,
) -> Dict[str, Any]:
    container: Dict[str, Any] = {
        "name": "episode",
        "image": "python:3.12-slim",
        "command": ["python3", "-B", "/episode/episode.py"],
        "env": [
            {"name": "EPISODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *(extra_env or []),
        ],
        "volumeMounts": [{"name": "episode", "mountPath": "/episode"}],
    }
    pod_spec: Dict[str, Any] = {
        "restartPolicy": "Never",
        "runtimeClassName": "cube",
        "containers": [container],
        "volumes": [{"name": "episode", "configMap": {"name": "episode"}}],
    }
    if security:
        pod_spec["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "backoffLimit": 0,
            "activeDeadlineSeconds": 60,
            "template": {"spec": pod_spec},
        },
    }


def setup_manifest(ns_labels: Optional[dict] = None) -> Dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": ns_labels or {}}},
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "episode", "namespace": NS},
                "data": {"episode.py": WORKER},
            },
        ],
    }


class RawPathWordsTest(unittest.TestCase):
    """The fake's raw paths are read as urllib.parse reads them, which it imports only for a path
    with an escape in it (3 ms of a call's start)."""

    def test_query_pairs_and_unquoted_are_urllib_s(self) -> None:
        import urllib.parse

        from tests.fakekube.common import query_pairs, unquoted

        queries = ["", "fieldManager=kubectl-create&fieldValidation=Strict", "a=&b=1&&c", "x=1=2&y", "a=%41&b=c+d"]
        for query in queries:
            with self.subTest(query=query):
                self.assertEqual(query_pairs(query), urllib.parse.parse_qsl(query))
        for text in ["cube", "", "c%75be", "%E2%82%AC", "%zz", "a+b"]:
            with self.subTest(text=text):
                self.assertEqual(unquoted(text), urllib.parse.unquote(text))


class FakeKubectlTestCase(unittest.TestCase):
    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py
    cluster_kwargs: ClassVar[Dict[str, Any]] = {}
    # The fake's words and refusals, call by call: answered by its `main` in this process (the
    # test then runs in the main thread), not by a process that costs 30 ms of CPU a call; every
    # wire test of the tool goes through the fake's process and its wrapper.
    in_process: ClassVar[bool] = False

    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.cluster = FakeCluster(pathlib.Path(self._tmp.name), **self.cluster_kwargs)
        self.addCleanup(self._tmp.cleanup)
        self.addCleanup(self.cluster.close)

    def kubectl(
        self, *args: str, input: Optional[str] = None, env: Optional[Dict[str, str]] = None
    ) -> subprocess.CompletedProcess:
        if self.in_process:
            return run_fake_in_process(args, env=env or self.cluster.env(), input=input)
        return subprocess.run(
            ["kubectl", *args], input=input, capture_output=True, text=True, env=env or self.cluster.env(), timeout=30
        )

    def ok(self, *args: str, input: Optional[str] = None) -> str:
        p = self.kubectl(*args, input=input)
        self.assertEqual(p.returncode, 0, f"kubectl {args} failed: {p.stderr}")
        return p.stdout

    def fails(self, *args: str, stderr: str, input: Optional[str] = None) -> None:
        p = self.kubectl(*args, input=input)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertEqual(p.stderr.rstrip("\n"), stderr)

    def create(self, obj: Dict[str, Any]) -> List[dict]:
        text = self.ok("create", "-f", "-", "-o", "json", "-n", NS, input=json.dumps(obj))
        decoder, pos, out = json.JSONDecoder(), 0, []
        while pos < len(text.rstrip()):
            value, pos = decoder.raw_decode(text, pos)
            out.append(value)
            while pos < len(text) and text[pos].isspace():
                pos += 1
        return out

    def job(self, name: str = "rollout") -> dict:
        return json.loads(self.ok("get", "job", name, "-n", NS, "-o", "json"))


class StrictnessTest(FakeKubectlTestCase):
    runs_concurrently, in_process = False, True

    def test_rejects_like_kubectl(self) -> None:
        self.fails("get", "jobs", "--foo", stderr="error: unknown flag: --foo\nSee 'kubectl get --help' for usage.")
        self.fails(
            "get", "pods", "-x", stderr="error: unknown shorthand flag: 'x' in -x\nSee 'kubectl get --help' for usage."
        )
        self.fails("foo", stderr='error: unknown command "foo" for "kubectl"')
        self.fails("get", "foo", stderr='error: the server doesn\'t have a resource type "foo"')
        self.fails("--foo", "get", "pods", stderr="Error: flags cannot be placed before plugin name: --foo")
        self.fails(
            "get", "pods", "-n", stderr="error: flag needs an argument: 'n' in -n\nSee 'kubectl get --help' for usage."
        )
        self.fails(
            "get",
            "pods",
            "--request-timeout=1x",
            stderr="error: Invalid timeout value. Timeout must be a single integer in seconds, or an "
            "integer followed by a corresponding time unit (e.g. 1s | 2m | 3h)",
        )
        self.fails(
            "--context",
            "nope",
            "get",
            "pods",
            stderr="Error in configuration: context was not found for specified context: nope",
        )
        self.fails(
            "get",
            "pods,events",
            "-w",
            "-o",
            "json",
            "--output-watch-events",
            stderr="error: you may only specify a single resource type",
        )
        self.fails(
            "get",
            "job",
            "rollout",
            "-n",
            NS,
            "-o",
            "json",
            # the namespace is missing too: its NotFound is the error (cli-runtime visitor.go Info.Get)
            stderr=f'Error from server (NotFound): namespaces "{NS}" not found',
        )
        self.fails(
            "get",
            "job",
            "rollout",
            "-n",
            "default",
            "-o",
            "json",
            stderr='Error from server (NotFound): jobs.batch "rollout" not found',
        )
        self.fails(
            "get",
            "runtimeclass",
            "nope",
            "-ojson",
            stderr='Error from server (NotFound): runtimeclasses.node.k8s.io "nope" not found',
        )
        self.fails(
            "get",
            "pods",
            "-o",
            "bogus",
            stderr='error: unable to match a printer suitable for the output format "bogus", allowed formats are: '
            "custom-columns,custom-columns-file,go-template,go-template-file,json,jsonpath,jsonpath-as-json,"
            "jsonpath-file,name,template,templatefile,wide,yaml",
        )
        self.fails(
            "delete",
            "job",
            "x",
            "--cascade=bogus",
            stderr='error: invalid cascade value (bogus). Must be "background", "foreground", or "orphan"',
        )
        self.fails(
            "logs",
            "--tail=abc",
            "x",
            stderr='error: invalid argument "abc" for "--tail" flag: '
            "strconv.ParseInt: parsing \"abc\": invalid syntax\nSee 'kubectl logs --help' for usage.",
        )
        self.fails(
            "config", "bogus", stderr="error: unknown command \"bogus\"\nSee 'kubectl config -h' for help and examples"
        )
        # every call is recorded, rejected ones included
        self.assertEqual(len(self.cluster.calls()), 16)
        self.assertEqual(self.cluster.calls()[0], ["get", "jobs", "--foo"])

    def test_refuses_what_the_tool_never_sends(self) -> None:
        """Real kubectl accepts these; the fake says it does not implement them (exit 1)."""
        for args, what in (
            (["get", "pods"], "get without -o json"),
            (["get", "pods", "-o", "yaml"], "get -o yaml (only -o json)"),
            (["get", "pods", "-o", "name"], "get -o name (only -o json)"),
            (["get", "pods", "--chunk-size=0", "-o", "json"], "kubectl get --chunk-size"),
            (["get", "pods", "--show-labels", "-o", "json"], "kubectl get --show-labels"),
            (
                ["get", "pods", "-A", "-w", "--output-watch-events", "-o", "json"],
                "get --all-namespaces with names or --watch",
            ),
            (
                ["get", "jobs,pods", "--field-selector=metadata.name=x", "-o", "json"],
                "--field-selector on several kinds",
            ),
            (
                ["get", "pods", "-w", "--output-watch-events", "--field-selector=status.phase=Running", "-o", "json"],
                "get --watch --field-selector status.phase=Running (only metadata.name=NAME)",
            ),
            (["get", "pod/x", "-o", "json"], "get TYPE/NAME (use get TYPE NAME)"),
            (["get", "pods", "-w", "-o", "json"], "get -w without --output-watch-events"),
            (["config", "get-contexts"], "kubectl config get-contexts"),
            (["get", "runtimeclass"], "get without -o json"),  # table output: only `get runtimeclass NAME`
            (["get", "runtimeclass", "cube", "--ignore-not-found"], "get without -o json"),
            (["get", "events"], "get without -o json"),  # events in a table: only with the guide's --sort-by
            (["get", "pods", "-l", "a=b"], "get without -o json"),
            (
                ["get", "events", "--sort-by=.metadata.name"],
                "get --sort-by (only get events --sort-by=.metadata.creationTimestamp)",
            ),
            (
                ["get", "events", "--sort-by=.metadata.creationTimestamp", "-o", "json"],
                "get --sort-by (only get events --sort-by=.metadata.creationTimestamp)",
            ),
            (["get", "job", "x", "-o", "name"], "get -o name (only -o json)"),
            (["config", "view"], "config view without --minify -o json"),
            (["version"], "version without -o json"),
            (["create", "-f", "-"], "create without -o json"),
            (
                ["delete", "job", "x", "--cascade=background"],
                "delete job --cascade=background (only --cascade=foreground)",
            ),
            (["delete", "job", "x", "--ignore-not-found"], "kubectl delete --ignore-not-found"),
            (["delete", "pods", "x"], "delete pods"),
            (["logs", "x"], "logs without -c CONTAINER"),
            (["logs", "x", "episode"], "logs POD CONTAINER (use -c CONTAINER)"),
        ):
            with self.subTest(args=args):
                self.fails(*args, stderr=f"error: fake_kubectl does not support {what}", input="")

    def test_accepted_forms(self) -> None:
        view = json.loads(self.ok("config", "view", "--minify", "-o", "json"))
        self.assertEqual(view["current-context"], "fake-ctx")
        self.assertEqual(view["clusters"][0]["cluster"]["server"], "https://127.0.0.1:6443")
        self.assertEqual(self.ok("get", "job", "x", "--ignore-not-found", "-o", "json", "-nkube-system"), "")
        ns = json.loads(self.ok("--context=fake-ctx", "get", "ns", "default", "-o", "json", "--request-timeout", "30s"))
        self.assertEqual((ns["kind"], ns["metadata"]["name"]), ("Namespace", "default"))
        lst = json.loads(self.ok("get", "nodes", "-ojson"))
        self.assertEqual(lst["kind"], "List")
        self.assertEqual([n["metadata"]["name"] for n in lst["items"]], ["node-a", "node-b"])
        self.assertEqual(lst["metadata"], {"resourceVersion": ""})
        version = json.loads(self.ok("version", "-o", "json", "--request-timeout=0"))
        self.assertEqual(version["serverVersion"]["minor"], "32")
        self.assertEqual(version["clientVersion"]["gitVersion"], "v1.32.4")

    def test_no_real_kubectl_on_path(self) -> None:
        env = self.cluster.env()
        self.assertEqual(env["PATH"], str(self.cluster.bin_dir))
        self.assertNotIn("KUBECONFIG", env)
        self.assertEqual(sorted(os.listdir(self.cluster.bin_dir)), ["kubectl"])


class RawFormsTest(FakeKubectlTestCase):
    """`create --raw PATH -f -` and `get --raw` of a RuntimeClass, as the real kubectl sends them
    (tests/test_kubectl_contract.py checks the real one): one request, the answer as the server
    writes it, errors without the `error when creating "STDIN"` of a plain create."""

    def test_raw_creates_validate_as_the_path_says_and_name_no_file(self) -> None:
        namespace, configmap = setup_manifest()["items"]
        created = json.loads(self.ok("create", "--raw", "/api/v1/namespaces", "-f", "-", input=json.dumps(namespace)))
        self.assertEqual((created["kind"], created["metadata"]["name"]), ("Namespace", NS))
        self.assertTrue(created["metadata"]["uid"])
        path = f"/api/v1/namespaces/{NS}/configmaps?fieldValidation=Strict"
        self.assertEqual(
            json.loads(self.ok("create", "--raw", path, "-f", "-", input=json.dumps(configmap)))["kind"], "ConfigMap"
        )
        self.fails(
            "create", "--raw", path, "-f", "-", input=json.dumps(configmap),
            stderr='Error from server (AlreadyExists): configmaps "episode" already exists',
        )  # fmt: skip
        job = job_manifest()
        job["metadata"]["namespace"] = NS
        job["spec"].update(completionMode="Indexed", backoffLimitPerIndex=1)
        self.cluster.set_faults({"server_version": "v1.27.3"})  # before spec.backoffLimitPerIndex
        strict = f"/apis/batch/v1/namespaces/{NS}/jobs?fieldManager=kubectl-create&fieldValidation=Strict"
        self.fails(
            "create", "--raw", strict, "-f", "-", input=json.dumps(job),
            stderr='Error from server (BadRequest): Job in version "v1" cannot be handled as a Job: '
            'strict decoding error: unknown field "spec.backoffLimitPerIndex"',
        )  # fmt: skip
        self.fails(
            "create", "--raw", "/api/v1/namespaces/elsewhere/configmaps", "-f", "-", input=json.dumps(configmap),
            stderr="Error from server (BadRequest): the namespace of the provided object does not match the "
            "namespace sent on the request",
        )  # fmt: skip
        self.fails(
            "create",
            "--raw",
            strict,
            "-f",
            "-",
            "-o",
            "json",
            stderr="error: --raw and --output are mutually exclusive",
        )

    def test_a_watch_in_a_namespace_not_created_yet_sees_its_account(self) -> None:
        """The run's ServiceAccount watch starts before its namespace exists (BatchRun.preflight)."""
        watch = subprocess.Popen(
            [
                *("kubectl", "get", "serviceaccounts", "--field-selector", "metadata.name=default", "-n", NS),
                *("-w", "-o", "json", "--output-watch-events", "--request-timeout=20s"),
            ],
            env=self.cluster.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # killed, then its pipes closed and it waited for (Popen's __exit__): an unclosed pipe's
        # ResourceWarning, printed whenever it is collected, lands in whatever stderr a main-thread
        # test is capturing then (seen in CI: ClusterAccessTest got it)
        self.addCleanup(watch.__exit__, None, None, None)
        self.addCleanup(watch.kill)
        time.sleep(0.3)  # listed (nothing) and watching before the namespace is created
        self.ok("create", "-f", "-", "-o", "json", input=json.dumps(setup_manifest()))
        assert watch.stdout is not None
        text = ""
        while True:  # kubectl prints each event indented, over several lines
            line = watch.stdout.readline()
            self.assertTrue(line, "the watch ended without an event")
            text += line
            try:
                event = json.loads(text)
                break
            except ValueError:
                continue
        self.assertEqual((event["type"], event["object"]["metadata"]["name"]), ("ADDED", "default"))

    def test_raw_read_of_a_runtimeclass(self) -> None:
        stored = json.loads(self.ok("get", "--raw", "/apis/node.k8s.io/v1/runtimeclasses/cube"))
        self.assertEqual((stored["kind"], stored["handler"]), ("RuntimeClass", "cube"))
        self.fails(
            "get", "--raw", "/apis/node.k8s.io/v1/runtimeclasses/gone",
            stderr='Error from server (NotFound): runtimeclasses.node.k8s.io "gone" not found',
        )  # fmt: skip


class KubeconfigTest(FakeKubectlTestCase):
    runs_concurrently, in_process = False, True

    def setUp(self) -> None:
        self._kc_dir = tempfile.TemporaryDirectory()
        self.addCleanup(self._kc_dir.cleanup)
        self.kc = os.path.join(self._kc_dir.name, "config")
        self.cluster_kwargs = {"kubeconfig": self.kc, "contexts": ("a", "b"), "current_context": "a"}
        super().setUp()

    def test_required_kubeconfig(self) -> None:
        view = json.loads(self.ok("--kubeconfig", self.kc, "config", "view", "--minify", "-o", "json"))
        self.assertEqual(view["current-context"], "a")
        self.ok("get", "ns", "--context", "b", f"--kubeconfig={self.kc}", "-o", "json")
        env = dict(self.cluster.env(), KUBECONFIG=self.kc)
        ns = json.loads(self.kubectl("get", "ns", "default", "-o", "json", env=env).stdout)
        self.assertEqual(ns["metadata"]["name"], "default")
        self.fails(
            "--context",
            "b",
            "get",
            "ns",
            stderr="Error in configuration: context was not found for specified context: b",
        )
        self.fails(
            "config", "view", "--minify", "-o", "json", stderr="error: current-context must exist in order to minify"
        )
        self.fails(
            "--kubeconfig",
            self.kc + ".missing",
            "get",
            "ns",
            stderr=f"error: stat {self.kc}.missing: no such file or directory",
        )


class ConfigMapSizeTest(FakeKubectlTestCase):
    def test_the_data_s_values_count_as_the_api_server_counts_them(self) -> None:
        """Issue 27: ValidateConfigMap sums the bytes of the data's values, not the keys nor the
        JSON form: 726 KB of quotes (over 1 MiB as JSON) fit; 1 MiB and a byte does not."""
        manifest = setup_manifest()
        configmap = manifest["items"][1]
        configmap["data"] = {"episode.py": WORKER, "tasks.jsonl": '"' * (726 * 1000 - len(WORKER))}
        self.assertGreater(len(json.dumps(manifest)), 2**20)
        self.assertEqual([o["kind"] for o in self.create(manifest)], ["Namespace", "ConfigMap"])
        manifest["items"] = [configmap]
        configmap["metadata"]["name"] = "long-key"
        configmap["data"] = {"k" * 200: "x" * (2**20 - 10)}  # keys do not count
        self.assertEqual([o["kind"] for o in self.create(manifest)], ["ConfigMap"])
        configmap["metadata"]["name"] = "too-big"
        configmap["data"] = {"b": "\u00e9" * (2**19 + 1)}  # 1 MiB and two bytes: each é is two
        p = self.kubectl("create", "-f", "-", "-o", "json", "-n", NS, input=json.dumps(manifest))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("Too long: must have at most 1048576 bytes", p.stderr)


class CycleTest(FakeKubectlTestCase):
    cluster_kwargs: ClassVar[Dict[str, Any]] = {"forbidden": [("get", "pods/log")]}

    def test_the_rules_review_lists_what_the_access_reviews_allow(self) -> None:
        """The fake's rules review agrees with its access reviews: every permission of a run but
        the forbidden `get pods/log` is proven by its rules, and that one is not; with a webhook
        beside RBAC (`rules_review: incomplete`) nothing is."""
        review = demo.rules_review(NS)
        args = ("create", "--raw", demo.RULES_REVIEW_PATH, "-f", "-")
        answer = json.loads(self.ok(*args, input=json.dumps(review)))
        self.assertEqual((answer["kind"], answer["spec"]), ("SelfSubjectRulesReview", review["spec"]))
        asked = demo.access_review_list(NS, True, kubelet_metrics=True, lists_nodes=True)
        reviews = self.create(asked)
        self.assertEqual(demo.denied_permissions(reviews), ["get pods/log"])
        self.assertIsNone(demo.granted_by_rules(answer, asked))
        allowed = {**asked, "items": [i for i, r in zip(asked["items"], reviews) if r["status"]["allowed"]]}
        self.assertIsNotNone(demo.granted_by_rules(answer, allowed))
        self.cluster.set_faults({"rules_review": "incomplete"})
        incomplete = json.loads(self.ok(*args, input=json.dumps(review)))
        self.assertTrue(incomplete["status"]["incomplete"])
        self.assertIsNone(demo.granted_by_rules(incomplete, allowed))
        self.fails(
            *args,
            input=json.dumps({**review, "spec": {}}),
            stderr="Error from server (BadRequest): no namespace on request",
        )

    def test_create_watch_complete(self) -> None:
        created = self.create(setup_manifest())
        self.assertEqual([o["kind"] for o in created], ["Namespace", "ConfigMap"])
        self.assertRegex(created[0]["metadata"]["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        watch = subprocess.Popen(
            [
                "kubectl",
                "get",
                "jobs",
                "--field-selector",
                "metadata.name=rollout",  # a list watch: the Job does not exist yet
                "-n",
                NS,
                "-w",
                "-o",
                "json",
                "--output-watch-events",
                "--request-timeout=20s",
            ],
            env=self.cluster.env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            job = self.create(job_manifest())[0]
            uid = job["metadata"]["uid"]
            self.assertEqual(job["spec"]["selector"], {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
            self.assertEqual(job["status"], {})
            events = read_watch_until(
                watch,
                lambda ev: any(c["type"] == "Complete" for c in ev["object"].get("status", {}).get("conditions", [])),
            )
        finally:
            watch.kill()
            watch.wait()
            assert watch.stdout is not None
            watch.stdout.close()
        self.assertEqual(events[0]["type"], "ADDED")
        self.assertTrue(all(e["type"] == "MODIFIED" for e in events[1:]))
        self.cluster.wait_idle(10)
        final = self.job()
        self.assertEqual(final["status"]["succeeded"], 3)
        self.assertNotIn("failed", final["status"])
        self.assertEqual([c["type"] for c in final["status"]["conditions"]], ["SuccessCriteriaMet", "Complete"])
        self.assertLessEqual(self.cluster.max_concurrent_pods(NS, "rollout"), 2)
        self.assertGreaterEqual(self.cluster.max_concurrent_pods(NS, "rollout"), 1)

        listing = json.loads(self.ok("get", "pods,events", "-n", NS, "-o", "json"))
        pods = [o for o in listing["items"] if o["kind"] == "Pod"]
        self.assertEqual(len(pods), 3)
        for pod in pods:
            name = pod["metadata"]["name"]
            self.assertRegex(name, r"^rollout-[bcdfghjklmnpqrstvwxz2456789]{5}$")
            self.assertEqual(pod["status"]["phase"], "Succeeded")
            self.assertEqual(pod["spec"]["overhead"], {"cpu": "250m", "memory": "768Mi"})
            self.assertIn(pod["spec"]["nodeName"], ("node-a", "node-b"))
            self.assertNotIn("finalizers", pod["metadata"])
            term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
            self.assertEqual((term["exitCode"], term["reason"]), (0, "Completed"))
            ready = json.loads(term["message"].splitlines()[0])
            self.assertEqual((ready["event"], ready["episode_id"]), ("ready", name))
            self.assertEqual(self.cluster.pod_log(NS, name).splitlines()[0], term["message"].splitlines()[0])
        reasons = sorted(o["reason"] for o in listing["items"] if o["kind"] == "Event")
        self.assertEqual(reasons.count("SuccessfulCreate"), 3)
        self.assertEqual(reasons.count("Started"), 3)
        self.assertEqual(reasons.count("Completed"), 1)

        # the cluster forbids pods/log: logs fail, and a SelfSubjectAccessReview says so
        self.fails(
            "logs",
            pods[0]["metadata"]["name"],
            "-c",
            "episode",
            "-n",
            NS,
            stderr=f'Error from server (Forbidden): pods "{pods[0]["metadata"]["name"]}" is forbidden: '
            f'User "fake-user" cannot get resource "pods/log" in API group "" in the '
            f'namespace "{NS}"',
        )
        review = self.create(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {
                    "resourceAttributes": {"verb": "get", "resource": "pods", "subresource": "log", "namespace": NS}
                },
            }
        )[0]
        self.assertFalse(review["status"]["allowed"])

        self.assertEqual(
            self.ok("delete", "job", "rollout", "-n", NS, "--cascade=foreground"), 'job.batch "rollout" deleted\n'
        )
        self.assertEqual(self.cluster.objects("Pod", NS), [])
        self.assertEqual(self.ok("delete", "namespace", NS, "--wait=false"), f'namespace "{NS}" deleted\n')
        time.sleep(0.4)
        self.assertNotIn(NS, [ns["metadata"]["name"] for ns in self.cluster.objects("Namespace")])
        self.fails(
            "get", "namespace", NS, "-o", "json", stderr=f'Error from server (NotFound): namespaces "{NS}" not found'
        )

    def test_logs_selector_tail_and_prefix(self) -> None:
        self.cluster.close()
        self.cluster = FakeCluster(pathlib.Path(self._tmp.name))
        self.addCleanup(self.cluster.close)
        self.create(setup_manifest())
        self.create(job_manifest(completions=2, parallelism=1, extra_env=[{"name": "EXTRA_LINES", "value": "12"}]))
        self.cluster.wait_idle(10)
        pods = [p["metadata"]["name"] for p in self.cluster.objects("Pod", NS)]
        self.assertEqual(self.cluster.max_concurrent_pods(NS, "rollout"), 1)
        default = self.ok("logs", "-l", "job-name=rollout", "-c", "episode", "--prefix", "-n", NS)
        self.assertEqual(len(default.splitlines()), 20)  # 10 per pod without --tail
        full = self.ok(
            "logs",
            "-l",
            "batch.kubernetes.io/job-name=rollout",
            "-c",
            "episode",
            "--prefix",
            "--tail=-1",
            "--max-log-requests=1",
            "-n",
            NS,
        )
        lines = full.splitlines()
        self.assertEqual(len(lines), 28)
        first = lines[0].split(" ", 1)[0]  # the pods in any order, each pod's lines together
        self.assertIn(first, [f"[pod/{pod}/episode]" for pod in pods])
        self.assertTrue(all(line.startswith(first) for line in lines[:14]), lines)
        self.assertEqual(lines[0], f"{first} filler 0")
        one = self.ok("logs", pods[0], "-c", "episode", "-n", NS)
        self.assertEqual(one, self.cluster.pod_log(NS, pods[0]))


# A worker whose output tries what a node changes (tests/fakekube/containerlog.py): CRLF line
# ends, a 40 KiB line containerd cuts into partial records, a last line without a newline, and a
# termination message of 6,000 bytes, of which the kubelet keeps the end.
NODE_WORKER = r"""
import os, sys
out = sys.stdout.buffer
out.write(b"first\r\nsecond\rstill second\r\n" + b"L" * 40000 + b"\r\n")
for number in range(int(os.environ.get("EXTRA_LINES", "0"))):
    out.write(b"filler %d\n" % number)
out.write(b"no newline\r")
out.flush()
with open(os.environ["RL_DEMO_TERMINATION_LOG"], "w") as f:
    f.write("".join("line %04d ..............\n" % number for number in range(240)))
"""


@end_to_end
class NodeLogsTest(FakeKubectlTestCase):
    """The container log and termination message as the real node serves them (W5, W6, W18)."""

    def run_job(self, faults: Dict[str, Any], completions: int = 1, extra_lines: int = 0) -> List[str]:
        self.cluster.set_faults(faults)
        setup = setup_manifest()
        setup["items"][1]["data"]["episode.py"] = NODE_WORKER
        self.create(setup)
        env = [{"name": "EXTRA_LINES", "value": str(extra_lines)}]
        self.create(job_manifest(completions=completions, parallelism=completions, extra_env=env))
        self.cluster.wait_idle(20)
        return sorted(p["metadata"]["name"] for p in self.cluster.objects("Pod", NS))

    def raw(self, *args: str) -> bytes:
        """kubectl's stdout as bytes (text mode would turn each CR into a newline)."""
        p = subprocess.run(["kubectl", *args], capture_output=True, env=self.cluster.env(), timeout=30, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def test_crlf_long_lines_and_the_message_tail(self) -> None:
        [pod] = self.run_job({})
        log = self.raw("logs", pod, "-c", "episode", "-n", NS)
        self.assertEqual(log, b"first\nsecond\rstill second\n" + b"L" * 40000 + b"\nno newline\r")
        status = self.cluster.objects("Pod", NS)[0]["status"]["containerStatuses"][0]["state"]["terminated"]
        message = status["message"]
        self.assertEqual(len(message.encode()), 4096)
        self.assertTrue(message.endswith("line 0239 ..............\n"))
        self.assertFalse(message.startswith("line "), "the kubelet keeps the end: the first line is cut")

    def test_only_the_current_file_after_rotation(self) -> None:
        [pod] = self.run_job({"container_log_max_size": 64 * 1024}, extra_lines=20000)
        log = self.raw("logs", pod, "-c", "episode", "-n", NS)
        self.assertLessEqual(len(log), 64 * 1024)
        self.assertNotIn(b"first", log)
        self.assertTrue(log.startswith(b"filler "), log[:40])
        self.assertTrue(log.endswith(b"filler 19999\nno newline\r"))

    def test_selector_reads_in_random_order_paced_after_a_burst(self) -> None:
        pods = self.run_job({"stand_in_worker": True}, completions=13)
        args = ("logs", "-l", "job-name=rollout", "-c", "episode", "--prefix", "--tail=-1", "-n", NS)
        orders = set()
        for _ in range(2):  # two of 13! orders: the same twice once in six billion
            started = time.monotonic()
            text = self.ok(*args)
            elapsed = time.monotonic() - started
            order = [line.split("/")[1] for line in text.splitlines() if '"ready"' in line]
            self.assertEqual(sorted(order), pods)
            orders.add(tuple(order))
            # 13 log requests: 10 at once, then one every 0.2 s (client-go's 5 QPS, burst 10)
            self.assertGreaterEqual(elapsed, 0.6)
        self.assertGreater(len(orders), 1, "kubectl ranges over a Go map: the order varies")


# A worker written the way the guide's is: container paths named literally, `python` from PATH.
GUIDE_STYLE_WORKER = r"""
import json, os, pathlib, subprocess, time
p = pathlib.Path('/workspace')
os.chdir(p)
p.joinpath('probe.py').write_text('print(6 * 7)\n')
out = subprocess.run(['python', '-B', 'probe.py'], text=True, capture_output=True, timeout=20).stdout.strip()
for event in ('ready', 'reward'):
    print(json.dumps(dict(event=event, at=time.time(), episode_id=os.environ['EPISODE_ID'], out=out,
                          read_back=p.joinpath('probe.py').read_text(), mounted=open('/demo/episode.py').read()[:1])),
          flush=True)
"""


class GuideWordsTest(FakeKubectlTestCase):
    """What the fake answers the guide's script's reads, word for word."""

    runs_concurrently, in_process = False, True

    def test_current_context_and_runtimeclass_table(self) -> None:
        self.assertEqual(self.ok("config", "current-context"), "fake-ctx\n")
        self.fails("config", "current-context", "x", stderr="error: unexpected arguments: [x]")
        # the store's objects were created an hour before the cluster started
        self.assertEqual(
            self.ok("--context", "fake-ctx", "--request-timeout=30s", "get", "runtimeclass", "cube"),
            "NAME   HANDLER   AGE\ncube   cube      60m\n",
        )
        self.fails(
            "get",
            "runtimeclass",
            "gone",
            stderr='Error from server (NotFound): runtimeclasses.node.k8s.io "gone" not found',
        )
        self.fails(
            "get",
            "events",
            "--sort-by=.metadata.creationTimestamp",
            "-l",
            "a=b",
            stderr="error: fake_kubectl does not support get --sort-by "
            "(only get events --sort-by=.metadata.creationTimestamp)",
        )
        p = self.kubectl("get", "events", "--sort-by=.metadata.creationTimestamp", "-n", "kube-public")
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "", "No resources found in kube-public namespace.\n"))

    def test_unset_current_context(self) -> None:
        self.cluster.close()
        self.cluster = FakeCluster(pathlib.Path(self._tmp.name), current_context=None)
        self.addCleanup(self.cluster.close)
        self.fails("config", "current-context", stderr="error: current-context is not set")


class GuideFormsTest(FakeKubectlTestCase):
    """Forms the guide's own script uses; bench/bench.py runs it side by side."""

    def test_guide_style_worker_and_events_table(self) -> None:
        manifest = setup_manifest()
        manifest["items"][1]["data"] = {"episode.py": GUIDE_STYLE_WORKER}
        self.create(manifest)
        job = job_manifest(completions=2, parallelism=2)
        container = job["spec"]["template"]["spec"]["containers"][0]
        container["command"] = ["python", "-B", "/demo/episode.py"]
        container["volumeMounts"] = [
            {"name": "script", "mountPath": "/demo", "readOnly": True},
            {"name": "workspace", "mountPath": "/workspace"},
        ]
        job["spec"]["template"]["spec"]["volumes"] = [
            {"name": "script", "configMap": {"name": "episode"}},
            {"name": "workspace", "emptyDir": {}},
        ]
        self.create(job)
        self.cluster.wait_idle(20)
        self.assertEqual(self.job()["status"].get("succeeded"), 2, self.cluster.controller_logs())
        pods = [p["metadata"]["name"] for p in self.cluster.objects("Pod", NS)]
        for pod in pods:
            log = self.ok("logs", pod, "-c", "episode", "-n", NS)
            events = [json.loads(line) for line in log.splitlines()]
            self.assertEqual([e["event"] for e in events], ["ready", "reward"])
            self.assertEqual(
                (events[0]["out"], events[0]["read_back"], events[0]["mounted"]), ("42", "print(6 * 7)\n", "\n")
            )
            self.assertEqual(events[0]["episode_id"], pod)
        table = self.ok("-n", NS, "get", "events", "--sort-by=.metadata.creationTimestamp").splitlines()
        self.assertRegex(table[0], r"^LAST SEEN   TYPE     REASON +OBJECT +MESSAGE$")
        stored = self.cluster.objects("Event", NS)
        self.assertEqual(len(table), 1 + len(stored))
        columns = [table[0].index(word) for word in ("TYPE", "REASON", "OBJECT", "MESSAGE")]
        rows = [
            [
                line[: columns[0]].strip(),
                *(line[a:b].strip() for a, b in zip(columns, columns[1:])),
                line[columns[-1] :],
            ]
            for line in table[1:]
        ]
        for row in rows:
            self.assertRegex(row[0], r"^\d+s$")
        self.assertIn(["Normal", "Completed", "job/rollout", "Job completed"], [row[1:] for row in rows])
        self.assertEqual(sum(row[2] == "Started" for row in rows), 2)
        self.assertIn(f"pod/{pods[0]}", [row[3] for row in rows])

    def test_human_duration(self) -> None:
        from tests.fakekube.commands import human_duration

        for seconds, text in (
            (-5, "<invalid>"),
            (-0.5, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (600, "10m"),
            (3600, "60m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 120, "3h2m"),
            (8 * 3600, "8h"),
            (48 * 3600, "2d"),
            (50 * 3600, "2d2h"),
            (8 * 86400, "8d"),
            (2 * 365 * 86400, "2y"),
            (2 * 365 * 86400 + 86400, "2y1d"),
            (9 * 365 * 86400, "9y"),
        ):
            with self.subTest(seconds=seconds):
                self.assertEqual(human_duration(seconds), text)


@end_to_end
class FaultTest(FakeKubectlTestCase):
    def test_ambiguous_create_then_already_exists(self) -> None:
        self.cluster.set_faults(
            {"api_errors": [{"match": "create Namespace", "times": 1, "error": "500", "after_apply": True}]}
        )
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        self.fails(
            "create",
            "-f",
            "-",
            "-o",
            "json",
            input=json.dumps(ns),
            stderr='Error from server (InternalError): error when creating "STDIN": Internal error '
            "occurred: fake injected fault",
        )
        self.assertEqual(len(self.cluster.objects("Namespace", None)), 5)
        self.fails(
            "create",
            "-f",
            "-",
            "-o",
            "json",
            input=json.dumps(ns),
            stderr=f'Error from server (AlreadyExists): error when creating "STDIN": namespaces "{NS}" already exists',
        )
        records = self.cluster.call_records()
        self.assertEqual(json.loads(records[0]["stdin"]), ns)
        self.assertEqual(records[0]["rc"], 1)

    def test_failed_episode_and_unavailable_log(self) -> None:
        self.cluster.set_faults({"episode": {"0": "exit1"}, "logs_unavailable": [0]})
        self.create(setup_manifest())
        self.create(job_manifest(completions=2, parallelism=1))
        self.cluster.wait_idle(10)
        job = self.job()
        self.assertEqual(job["status"]["failed"], 1)
        self.assertEqual(
            [(c["type"], c["reason"]) for c in job["status"]["conditions"]],
            [("FailureTarget", "BackoffLimitExceeded"), ("Failed", "BackoffLimitExceeded")],
        )
        pod = self.cluster.objects("Pod", NS)[0]
        self.assertEqual(pod["status"]["phase"], "Failed")
        self.assertEqual(pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 1)
        self.fails(
            "logs",
            pod["metadata"]["name"],
            "-c",
            "episode",
            "-n",
            NS,
            stderr="Error from server (InternalError): Internal error occurred: failed to read log "
            f"of pod {pod['metadata']['name']}",
        )
        self.assertIn('"event": "reward"', self.cluster.pod_log(NS, pod["metadata"]["name"]))

    def test_a_rejected_pods_log_is_not_available_and_ignore_errors_goes_on(self) -> None:
        """The kubelet's admission refused the pod: no container ever ran, so there is no log;
        `kubectl logs` fails as the kubelet answers (validateContainerLogStatus), and
        `logs -l --ignore-errors` prints that error unprefixed on stdout and reads the others."""
        self.cluster.set_faults({"episode": {"0": "rejected"}})
        self.create(setup_manifest())
        job = job_manifest(completions=2, parallelism=2)
        job["spec"]["backoffLimit"] = 1  # the Job does not fail at the rejection and kill the other pod mid-run
        self.create(job)
        self.cluster.wait_idle(10)
        pods = {p["metadata"]["name"]: p for p in self.cluster.objects("Pod", NS)}
        rejected = next(name for name, p in pods.items() if p["status"].get("reason") == "OutOfcpu")
        other = next(name for name, p in pods.items() if p["status"].get("phase") == "Succeeded")
        error = f'container "episode" in pod "{rejected}" is not available'
        self.fails("logs", rejected, "-c", "episode", "-n", NS, stderr=f"Error from server (BadRequest): {error}")
        out = self.ok("logs", "-l", "job-name=rollout", "-c", "episode", "--prefix", "--ignore-errors", "-n", NS)
        self.assertIn(f"error: {error}\n", out)
        self.assertNotIn(f"[pod/{rejected}/", out)
        self.assertIn(f'[pod/{other}/episode] {{"event": "ready"', out)
        # without it, the read stops at the rejected pod, wherever kubectl's order put it
        self.fails(
            "logs",
            "-l",
            "job-name=rollout",
            "-c",
            "episode",
            "--prefix",
            "-n",
            NS,
            stderr=f"Error from server (BadRequest): {error}",
        )

    def test_an_evicted_pods_log_ends_where_the_kill_fell(self) -> None:
        """A hard eviction kills the worker mid-run: its container is reported terminated (137),
        and its log, served, ends inside a line (its reward never written whole)."""
        self.cluster.set_faults({"episode": {"0": "evict"}})
        self.create(setup_manifest())
        self.create(job_manifest(completions=1, parallelism=1))
        self.cluster.wait_idle(10)
        [pod] = self.cluster.objects("Pod", NS)
        self.assertEqual(pod["status"]["reason"], "Evicted")
        self.assertEqual(pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 137)
        served = self.ok("logs", pod["metadata"]["name"], "-c", "episode", "-n", NS)
        self.assertTrue(served.startswith('{"event": "ready"'), served)
        self.assertFalse(served.endswith("\n"), served)
        self.assertNotIn('"reward": 1.5', served)

    def test_killed_mid_run_cuts_the_first_artifact_frame(self) -> None:
        log = "ready\nrl-demo-artifact 1 0 1 abc bmFtZQ== " + "A" * 40 + "\nreward\n"
        cut = killed_mid_run(log)
        self.assertTrue(cut.startswith("ready\nrl-demo-artifact 1 0 1 "), cut)
        self.assertLess(len(cut), log.index("\nreward"))
        self.assertEqual(killed_mid_run("ready\nreward 12345678\n"), "ready\nreward ")

    def test_close_kills_the_pods_too_even_one_deaf_to_sigterm(self) -> None:
        """A pod runs in a session of its own, which the controller's SIGKILL at close() does not
        reach: close() kills the cluster's pods by their recorded pids."""
        self.cluster.set_faults({"episode": {"0": "ignore_sigterm"}})
        self.create(setup_manifest())
        self.create(job_manifest(completions=1, parallelism=1))
        pids = self.cluster.state_dir / POD_PIDS_FILE
        waited_until = time.monotonic() + 10  # the controller's first pass, however loaded the machine
        while not (pids.exists() and pids.read_text().split()) and time.monotonic() < waited_until:
            time.sleep(0.02)
        [pid] = [int(line) for line in pids.read_text().split()]

        def running() -> bool:  # a killed pod may stay a zombie until its new parent reaps it
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
            except OSError:
                return False

        self.assertTrue(running())
        self.cluster.close()
        waited_until = time.monotonic() + 10
        while running() and time.monotonic() < waited_until:
            time.sleep(0.02)
        self.assertFalse(running())

    def first_pod(self) -> dict:
        waited_until = time.monotonic() + 10  # the controller's first pass, however loaded the machine
        while not self.cluster.objects("Pod", NS) and time.monotonic() < waited_until:
            time.sleep(0.02)
        return self.cluster.objects("Pod", NS)[0]

    def test_a_pending_pods_log_is_waiting_to_start(self) -> None:
        # No fault deadline: the Job's own (60 s) is far beyond the read below, however loaded
        # the machine; the pod stays Pending until the test's end stops the controller.
        self.cluster.set_faults({"episode": {"0": "pending"}})
        self.create(setup_manifest())
        self.create(job_manifest(completions=1, parallelism=1))
        pod = self.first_pod()
        self.assertEqual(pod["status"]["phase"], "Pending")
        self.fails(
            "logs",
            pod["metadata"]["name"],
            "-c",
            "episode",
            "-n",
            NS,
            stderr=f'Error from server (BadRequest): container "episode" in pod '
            f'"{pod["metadata"]["name"]}" is waiting to start: ContainerCreating',
        )

    def test_pending_pod_hits_deadline(self) -> None:
        self.cluster.set_faults({"episode": {"0": "pending"}, "deadline_seconds": 1.5})
        self.create(setup_manifest())
        self.create(job_manifest(completions=1, parallelism=1))
        self.cluster.wait_idle(10)
        job = self.job()
        self.assertEqual(job["status"]["conditions"][-1]["reason"], "DeadlineExceeded")
        reasons = [e["reason"] for e in self.cluster.objects("Event", NS)]
        self.assertIn("FailedScheduling", reasons)
        self.assertIn("DeadlineExceeded", reasons)

    def test_a_deadline_reached_before_the_first_sync_still_creates_and_schedules_the_pod(self) -> None:
        # A loaded machine can start the controller after the deadline; the real one creates the
        # pods in its first sync anyway, and the scheduler tries each pod that exists.
        self.cluster.set_faults({"episode": {"0": "pending"}, "deadline_seconds": 0.001})
        self.create(setup_manifest())
        self.create(job_manifest(completions=1, parallelism=1))
        self.cluster.wait_idle(10)
        reasons = [e["reason"] for e in self.cluster.objects("Event", NS)]
        self.assertCountEqual(
            [r for r in reasons if r in ("SuccessfulCreate", "FailedScheduling", "DeadlineExceeded")],
            ["SuccessfulCreate", "FailedScheduling", "DeadlineExceeded"],
        )  # events are listed by name, not in order
        self.assertEqual(self.job()["status"]["conditions"][-1]["reason"], "DeadlineExceeded")

    def test_restricted_namespace_blocks_insecure_pods(self) -> None:
        self.cluster.set_faults({"deadline_seconds": 0.5})
        self.create(setup_manifest({"pod-security.kubernetes.io/enforce": "restricted"}))
        p = self.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(job_manifest()))
        self.assertEqual(p.returncode, 0)
        self.assertIn('Warning: would violate PodSecurity "restricted:latest"', p.stderr)
        self.cluster.wait_idle(10)
        self.assertEqual(self.cluster.objects("Pod", NS), [])
        failed_create = [e for e in self.cluster.objects("Event", NS) if e["reason"] == "FailedCreate"]
        self.assertIn('violates PodSecurity "restricted:latest"', failed_create[0]["message"])
        # the same Job with a compliant securityContext runs, within the Job's own deadline (60 s):
        # the 0.5 s one above, which a loaded machine's episode could outlast, ends only the blocked Job
        self.cluster.set_faults({})
        self.create(job_manifest(name="secure", completions=1, parallelism=1, security=True))
        self.cluster.wait_idle(10)
        self.assertEqual(self.job("secure")["status"]["succeeded"], 1)

    def test_stuck_namespace_and_legacy_labels(self) -> None:
        self.cluster.set_faults({"namespace_stuck": True, "legacy_labels": True, "episode_seconds": 5})
        self.create(setup_manifest())
        job = self.create(job_manifest(completions=1, parallelism=1))[0]
        self.assertEqual(job["spec"]["selector"]["matchLabels"], {"controller-uid": job["metadata"]["uid"]})
        self.first_pod()  # the stuck namespace keeps it, Terminating with its finalizer
        self.ok("delete", "namespace", NS, "--wait=false")
        self.cluster.wait_idle(5)
        ns = json.loads(self.ok("get", "namespace", NS, "-o", "json"))
        self.assertEqual(ns["status"]["phase"], "Terminating")
        self.assertEqual(ns["spec"]["finalizers"], ["kubernetes"])
        self.assertIn("NamespaceContentRemaining", [c["type"] for c in ns["status"]["conditions"]])

    def test_hang_respects_request_timeout_and_watch_ends_early(self) -> None:
        self.cluster.set_faults({"hang": {"match": "get runtimeclass", "seconds": 30}, "watch_ends_early": True})
        start = time.monotonic()
        self.fails(
            "get",
            "runtimeclass",
            "cube",
            "--request-timeout=0.3s",
            stderr="Unable to connect to the server: net/http: request canceled (Client.Timeout "
            "exceeded while awaiting headers)",
        )
        self.assertLess(time.monotonic() - start, 5)
        out = self.ok("get", "ns", "default", "-w", "-o", "json", "--output-watch-events")
        self.assertEqual(json.loads(out)["type"], "ADDED")


class ContainerLogTest(unittest.TestCase):
    def test_records_rotation_and_message(self) -> None:
        node = fake_module().containerlog
        records = node.cri_records(b"a\r\n" + b"x" * 40000 + b"\nend")
        pieces = [(partial, len(content)) for partial, content in records]
        self.assertEqual(pieces[:4], [(False, 1), (True, 16384), (True, 16384), (False, 7232)])
        self.assertEqual(records[-1], (True, b"end"))  # no newline: a partial record
        self.assertEqual(node.read_logs(records), b"a\n" + b"x" * 40000 + b"\nend")
        lines = node.cri_records(b"".join(b"%05d\n" % n for n in range(1000)))
        current = node.current_file(lines, (5 + node.RECORD_OVERHEAD) * 100)  # 100 records a file
        self.assertEqual(node.read_logs(current)[:6], b"00900\n")
        self.assertEqual(node.termination_message(b"x" * 5000 + b"\xe2\x82\xac", 1), "x" * 4093 + "\u20ac")
        self.assertEqual(len(node.termination_message(b"y" * 4096, 4)), 3072)  # 12 KiB over 4 containers


class StoreTest(unittest.TestCase):
    """The per-object store (tests/fakekube/store.py) that every kubectl call and controller shares."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.cluster = FakeCluster(pathlib.Path(self._tmp.name))
        self.addCleanup(self.cluster.close)
        self.store = fake_module().Store(str(self.cluster.state_dir))

    def config_map(self, name: str, namespace: str = "default") -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}

    def test_a_follower_opened_inside_a_line_being_appended_skips_its_rest(self) -> None:
        # a large commit's line seen half written when the follower took the log's end (Linux
        # grows the size page by page as a write copies): its rest is not a change to parse
        with self.store.tx() as tx:
            tx.put(self.config_map("a"))
        log = pathlib.Path(self.store.log_path)
        line = log.read_bytes().splitlines(keepends=True)[-1]
        with open(log, "ab") as stream:
            stream.write(line[: len(line) // 2])
        follower = self.store.follow({"ConfigMap"}, "default")
        self.addCleanup(follower.close)
        with open(log, "ab") as stream:
            stream.write(line[len(line) // 2 :])
        self.assertEqual(follower.poll(), [])
        with self.store.tx() as tx:
            tx.put(self.config_map("b"))
        self.assertEqual(follower.poll(), ["ConfigMap/default/b"])

    def test_resource_versions_files_and_change_log(self) -> None:
        follower = self.store.follow({"ConfigMap"}, "default")
        self.addCleanup(follower.close)
        with self.store.tx() as tx:
            tx.put(self.config_map("a"))
            tx.put(self.config_map("b"))
        with self.store.tx() as tx:
            obj = tx.get("ConfigMap", "default", "a")
            assert obj is not None
            obj["data"] = {"k": "v"}
            tx.put(obj)
        a = self.store.get("ConfigMap", "default", "a")
        b = self.store.get("ConfigMap", "default", "b")
        assert a is not None and b is not None
        self.assertGreater(int(a["metadata"]["resourceVersion"]), int(b["metadata"]["resourceVersion"]))
        path = self.cluster.state_dir / "objects" / "ConfigMap" / "default" / "a.json"
        self.assertEqual(json.loads(path.read_text())["data"], {"k": "v"})
        self.assertEqual(follower.poll(), ["ConfigMap/default/a", "ConfigMap/default/b", "ConfigMap/default/a"])
        self.assertEqual(follower.objects["ConfigMap/default/a"], a)
        with self.assertRaises(RuntimeError), self.store.tx() as tx:  # a failed transaction writes nothing
            tx.put(self.config_map("c"))
            raise RuntimeError
        self.assertIsNone(self.store.get("ConfigMap", "default", "c"))
        self.assertEqual(follower.poll(), [])
        self.assertEqual([o["metadata"]["name"] for o in self.store.list("ConfigMap", "default")], ["a", "b"])

    def test_pending_deletions_vanish_at_their_time(self) -> None:
        with self.store.tx() as tx:
            tx.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}})
            tx.put(self.config_map("inside", "doomed"))
        follower = self.store.follow({"ConfigMap", "Namespace"})
        self.addCleanup(follower.close)
        with self.store.tx() as tx:
            ns = tx.get("Namespace", None, "doomed")
            assert ns is not None
            tx.vanish_later(ns, 1.0)  # long enough for the checks below on a loaded machine
        self.assertEqual(follower.poll(), ["Namespace//doomed"])
        ns = self.store.get("Namespace", None, "doomed")
        assert ns is not None
        self.assertIn("deletionTimestamp", ns["metadata"])
        self.assertIsNotNone(self.store.get("ConfigMap", "doomed", "inside"))
        time.sleep(1.05)
        # gone for every reader at its time, before any writer has removed the files
        self.assertIsNone(self.store.get("Namespace", None, "doomed"))
        self.assertIsNone(self.store.get("ConfigMap", "doomed", "inside"))
        self.assertEqual(self.store.list("ConfigMap", "doomed"), [])
        self.assertTrue(follower.is_gone("ConfigMap/doomed/inside", time.time()))
        self.assertEqual(self.cluster.objects("ConfigMap", "doomed"), [])
        with self.store.tx():  # the next transaction carries the deletions out
            pass
        self.assertFalse((self.cluster.state_dir / "objects" / "ConfigMap" / "doomed" / "inside.json").exists())
        self.assertEqual(sorted(follower.poll()), ["ConfigMap/doomed/inside", "Namespace//doomed"])
        self.assertEqual([k for k in follower.objects if "doomed" in k], [])


def read_watch_until(proc: subprocess.Popen, done: Any, timeout: float = 15) -> List[dict]:
    """Read indented JSON watch events from ``proc`` until ``done(event)``."""
    assert proc.stdout is not None
    events: List[dict] = []
    buf = ""
    decoder = json.JSONDecoder()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        buf += line
        try:
            event, _ = decoder.raw_decode(buf.strip())
        except ValueError:
            continue
        buf = ""
        events.append(event)
        if done(event):
            return events
    raise AssertionError(f"watch ended without the expected event: {events}")


class GarbageCollectorPaceTest(unittest.TestCase):
    """The fake's garbage collector lets a foreground-deleted Job's pods go at about 7 a second
    (3 requests a pod within kubeAPIQPS 20: garbagecollector.go attemptToDeleteItem, isDangling),
    the Job after the last of them."""

    def test_ten_pods_go_over_a_second_and_a_half(self) -> None:
        from tests.fakekube.commands import delete_job_foreground

        class Tx:
            def __init__(self, pods: List[Dict[str, Any]]) -> None:
                self.pods, self.later = pods, []  # type: ignore[var-annotated]

            def list(self, kind: str, namespace: str) -> List[Dict[str, Any]]:
                return self.pods

            def vanish_later(self, obj: Dict[str, Any], delay: float) -> None:
                self.later.append((obj["metadata"]["name"], delay))

        owner = [{"uid": "job-uid"}]
        pods = [{"metadata": {"name": f"p{i}", "ownerReferences": owner}} for i in range(10)]
        job = {"metadata": {"name": "rollout", "namespace": "ns", "uid": "job-uid"}}
        tx = Tx(pods)
        delete_job_foreground(tx, job)  # type: ignore[arg-type]
        delays = dict(tx.later)
        self.assertAlmostEqual(delays["p9"], 9 * 3 / 20)
        self.assertAlmostEqual(delays["rollout"], 10 * 3 / 20 + 0.05)


if __name__ == "__main__":
    unittest.main()
