"""Unit tests of the pure parts of rl_batch_demo: no kubectl, no cluster."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import typing
import unittest
import unittest.mock
from pathlib import Path
from typing import Any, ClassVar, Dict, Tuple
from xml.etree import ElementTree

import rl_batch_demo as demo
from tests import records
from tests.clusterobjects import JOB_CREATED, JOB_CREATED_AT, log_of, make_events, make_pod, results_of
from tests.fakecluster import ENVIRONMENT
from tests.fakekube.faults import MAX_TERMINATION_MESSAGE  # the kubelet's limit
from tests.toolprocess import image_python, tool_command, tool_environment


class OutcomeTest(unittest.TestCase):
    """outcome_of, the one classifier every command, main() and the API end through: what was
    raised, where, to the exit code of --help's table and the one sentence."""

    def test_table(self) -> None:
        output = Path("out")
        full_disk = OSError(28, "No space left on device", "out/results.json")
        episode = demo.DemoError("episode failed", demo.EXIT_EPISODE)
        rows = [
            # raised, output, printing: exit code, kind, sentence
            (episode, None, False, demo.EXIT_EPISODE, demo.EXPECTED, "episode failed"),
            (episode, output, True, demo.EXIT_EPISODE, demo.EXPECTED, "episode failed"),
            (
                full_disk,
                output,
                False,
                demo.EXIT_USAGE,
                demo.EXPECTED,
                "cannot write the run's output (No space left on device: out/results.json); "
                "check the free space and permissions of out",
            ),
            (full_disk, None, True, demo.EXIT_CLUSTER, demo.BUG, demo.bug_message(full_disk)),
            (BrokenPipeError(), None, True, demo.EXIT_OK, demo.STDOUT_CLOSED, "the reader of stdout went away"),
            (BrokenPipeError(), None, False, demo.EXIT_CLUSTER, demo.BUG, demo.bug_message(BrokenPipeError())),
            (ValueError("x"), output, True, demo.EXIT_CLUSTER, demo.BUG, demo.bug_message(ValueError("x"))),
            (KeyboardInterrupt(), output, True, demo.EXIT_INTERRUPTED, demo.INTERRUPTED, "interrupted"),
            (GeneratorExit(), None, False, demo.EXIT_INTERRUPTED, demo.INTERRUPTED, "interrupted"),
        ]
        for raised, where, printing, code, kind, sentence in rows:
            with self.subTest(raised=raised, output=where, printing=printing):
                outcome = demo.outcome_of(raised, where, printing)
                self.assertEqual((outcome.exit_code, outcome.kind, outcome.message), (code, kind, sentence))
                error = outcome.error()
                self.assertEqual((error.exit_code, str(error)), (code, sentence))
        self.assertIs(demo.outcome_of(episode).error(), episode)  # a DemoError keeps its kind (EpisodeInvalid...)

    def test_every_code_is_documented(self) -> None:
        for raised in (BrokenPipeError(), ValueError(), KeyboardInterrupt(), OSError("x")):
            with self.subTest(raised=raised):
                code = demo.outcome_of(raised, Path("out"), printing=True).exit_code
                self.assertRegex(demo.EXIT_CODES_HELP, rf"(?m)^  {code} ")


class DistinctNamesTest(unittest.TestCase):
    def test_no_function_is_named_as_a_record_field(self) -> None:
        """`receipt.tool_version` and a function tool_version() read alike and are not alike: a
        function is named for what it does, a field for what it holds."""
        functions = {
            name
            for name, value in vars(demo).items()
            if callable(value) and getattr(value, "__module__", "") == demo.__name__
        }
        fields = set()
        for value in vars(demo).values():
            if isinstance(value, type) and value.__module__ == demo.__name__:
                fields |= set(getattr(value, "__annotations__", {}))
        self.assertEqual(sorted(functions & fields), [])


class ReceiptReadTest(unittest.TestCase):
    """read_receipt checks receipt.json against the Receipt record, as results.json is checked."""

    def read(self, data: Any) -> Any:
        with tempfile.TemporaryDirectory() as root:
            Path(root, "receipt.json").write_text(json.dumps(data), encoding="utf-8")
            return demo.read_receipt(Path(root))

    def test_the_guides_receipt_loads_with_the_keys_it_lacks_null(self) -> None:
        guide = {"context": "ctx", "namespace": "agc-rl-0123456789ab", "uid": "ns-uid", "run_id": "r", "job_uid": "j"}
        receipt = self.read(guide)
        self.assertEqual(receipt, {**guide, **dict.fromkeys(("server", "kubeconfig", "kubectl"), None),
                                   "created_at": None, "tool_version": None, "jobs": []})  # fmt: skip
        self.assertEqual(records.exact_problem(receipt, demo.Receipt), "")

    def test_a_malformed_receipt_names_its_key(self) -> None:
        good = {"context": "c", "namespace": "n", "run_id": "r", "jobs": [{"name": "rollout", "uid": None}]}
        rows = [
            ({**good, "run_id": 5}, "run_id is a number, not a string"),
            ({**good, "jobs": [{"uid": "x"}]}, "jobs[0].name is missing"),
            ({**good, "created_at": "yesterday"}, "created_at is a string, not a finite number"),
            ([good], "the top level is a list, not an object"),
        ]
        for data, problem in rows:
            with self.subTest(problem=problem), self.assertRaises(demo.DemoError) as raised:
                self.read(data)
            self.assertEqual(raised.exception.exit_code, demo.EXIT_USAGE)
            self.assertIn(f"is not one this tool writes: {problem}; inspect the file", str(raised.exception))


class DigTest(unittest.TestCase):
    def test_reads_as_the_chain_it_replaces(self) -> None:
        rows = [
            ({"metadata": {"labels": {"a": "1"}}}, ("metadata", "labels", "a"), "1"),
            ({"metadata": None}, ("metadata", "labels", "a"), None),
            ({"metadata": {}}, ("metadata", "uid"), None),
            ({}, ("status",), None),
            ({"status": {"phase": ""}}, ("status", "phase"), ""),
        ]
        for obj, keys, expected in rows:
            with self.subTest(obj=obj, keys=keys):
                self.assertEqual(demo.dig(obj, *keys), expected)
                chain = obj
                for key in keys[:-1]:
                    chain = chain.get(key) or {}
                self.assertEqual(chain.get(keys[-1]), expected)


class RunDirectoryWritersTest(unittest.TestCase):
    """Every file of a run's directory is written by persistence (its writers name the files by
    RUN_FILES); elsewhere only the experiment's report files and the CI reports' own paths are."""

    def test_only_persistence_writes_a_runs_files(self) -> None:
        writers = {"write_json", "write_atomic", "save_if_possible"}
        found = set()
        for path in sorted((Path(__file__).resolve().parent.parent / "src" / "rl_batch_demo").glob("*.py")):
            if path.name == "persistence.py":
                continue
            text = path.read_text(encoding="utf-8")
            if not re.search(r"\b(?:" + "|".join(sorted(writers)) + r")\b", text):
                continue  # no call can name a writer its text does not hold: no tree to parse
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in writers:
                    found.add((path.stem, ast.unparse(node.args[0])))
        outside_a_run = {
            ("commands", "output / 'report.json'"),  # reproduce's experiment directory
            ("commands", "Path(path)"),  # --junit and --metrics-file, where the user asked
            ("flow_run", "output / 'report.json'"),
            ("flow_run", "output / 'report.md'"),
        }
        self.assertEqual(sorted(found - outside_a_run), [])


class PodAccountTest(unittest.TestCase):
    """A pod's share of the run's one ledger: its file's limit and its artifact allowance."""

    def test_text_is_held_by_its_file_or_the_runs_disk_and_says_which(self) -> None:
        ledger = demo.LogBudgets(disk=100, memory=10)
        account = demo.PodAccount(ledger, text_room=30, artifact_room=5)
        self.assertEqual(account.take_text(20), (20, ""))
        self.assertEqual(account.take_text(20), (10, "file"))  # the rest of its file's 30
        self.assertEqual(account.take_text(1, whole=True), (0, "file"))
        self.assertEqual(ledger.disk, 70)  # each byte of text from the run's disk side too
        other = demo.PodAccount(ledger, text_room=100, artifact_room=0)
        self.assertEqual(other.take_text(80, whole=True), (0, "run"))  # all or none: the run's 70
        self.assertEqual(other.take_text(80), (70, "run"))
        self.assertEqual(ledger.disk, 0)

    def test_artifacts_take_the_episodes_allowance_all_or_none_and_no_disk(self) -> None:
        ledger = demo.LogBudgets(disk=100, memory=10, artifact_bytes=8)
        account = ledger.account()
        self.assertEqual((account.text_room, account.artifact_room), (demo.LOG_FILE_LIMIT, 8))
        self.assertTrue(account.take_artifact(5))
        self.assertFalse(account.take_artifact(4))
        self.assertTrue(account.take_artifact(3))
        self.assertEqual(ledger.disk, 100)


class EpisodeFiguresTest(unittest.TestCase):
    """A pod's own figures come from FIGURE_STAMPS alone: each its end stamp less its start."""

    def test_each_figure_is_its_end_stamp_less_its_start(self) -> None:
        figures = typing.get_type_hints(demo.EpisodeFigures)
        self.assertLessEqual(set(figures), set(demo.FIGURE_STAMPS))  # every one has its row there
        self.assertLessEqual(set(figures), set(typing.get_type_hints(demo.PodRow)))  # and is a pods[] field
        stamps = {stamp: 1000.0 + 7 * number for number, stamp in enumerate(demo.STAMP_CLOCKS)}
        computed = demo.episode_figures(stamps)
        self.assertEqual(set(computed), set(figures))
        for figure, value in computed.items():
            start, end, _ = demo.FIGURE_STAMPS[figure]
            with self.subTest(figure=figure):
                self.assertEqual(value, stamps[end] - stamps[start])
        # an unknown stamp: the figures that end or start at it are unknown, the others stand
        unknown = dict(stamps, scheduled_at=None)
        computed = demo.episode_figures(unknown)
        self.assertIsNone(computed["pod_to_scheduled_seconds"])
        self.assertEqual(computed["pod_to_ready_seconds"], stamps["ready_at"] - stamps["created_at"])


class TimestampAndStatisticsTest(unittest.TestCase):
    def test_parse_timestamp_forms(self) -> None:
        self.assertEqual(demo.parse_timestamp("1970-01-01T00:00:10Z"), 10.0)
        self.assertAlmostEqual(demo.parse_timestamp("1970-01-01T00:00:10.25Z"), 10.25)
        self.assertEqual(demo.parse_timestamp("1970-01-01T01:00:10+01:00"), 10.0)
        with self.assertRaises(ValueError):
            demo.parse_timestamp("yesterday")

    def test_percentile_interpolates_like_the_guide(self) -> None:
        values = [4.0, 1.0, 3.0, 2.0]
        self.assertEqual(demo.percentile(values, 0.5), 2.5)
        self.assertAlmostEqual(demo.percentile(values, 0.95), 3.85)
        self.assertEqual(demo.percentile([7.0], 0.95), 7.0)

    def test_summarise_skips_missing_and_reports_none_when_empty(self) -> None:
        self.assertEqual(demo.summarise([None, 1.0, 3.0]), {"samples": 2, "p50": 2.0, "p95": 2.9, "max": 3.0})
        self.assertIsNone(demo.summarise([None, None]))

    def test_parse_quantity(self) -> None:
        self.assertEqual(demo.parse_quantity("250m"), 0.25)
        self.assertEqual(demo.parse_quantity("768Mi"), 768 * 2**20)
        self.assertEqual(demo.parse_quantity("2"), 2.0)
        with self.assertRaises(ValueError):
            demo.parse_quantity("lots")


class ManifestTest(unittest.TestCase):
    def job(self, runtime: str | None = "cube") -> dict[str, Any]:
        return demo.job_manifest(
            name="rollout",
            namespace="agc-rl-0123456789ab",
            run_id="0123456789ab",
            count=10,
            parallelism=3,
            image="python:3.12-alpine",
            runtime=runtime,
            deadline_seconds=240,
        )

    def test_job_is_the_guides(self) -> None:
        job = self.job()
        spec = job["spec"]
        self.assertEqual(
            (spec["completions"], spec["parallelism"], spec["backoffLimit"], spec["activeDeadlineSeconds"]),
            (10, 3, 0, 240),
        )
        pod = spec["template"]["spec"]
        self.assertEqual(pod["runtimeClassName"], "cube")
        self.assertEqual(pod["restartPolicy"], "Never")
        self.assertIs(pod["automountServiceAccountToken"], False)
        self.assertEqual(
            pod["securityContext"], {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": True}
        )
        container = pod["containers"][0]
        self.assertEqual(container["name"], "episode")
        self.assertEqual(container["command"], ["python", "-B", "/demo/episode.py"])
        # a measured round's pods run the built-in worker itself: it sends its own files and
        # prints the log's end line, so no launcher (one interpreter fewer a pod)
        builtin = demo.run_settings(demo.build_parser().parse_args(["run", "--output", "o"]))
        spec = demo.round_job_manifest(builtin, "rollout", "ns", "r", "img")["spec"]["template"]["spec"]
        self.assertEqual(spec["containers"][0]["command"], ["python", "-B", "/demo/episode.py"])
        self.assertEqual(builtin.launcher_source, "")
        # --worker's pods start the launcher, which needs no site-packages (-S: their .pth files
        # cost each pod before its worker started); the worker it runs gets them
        with tempfile.TemporaryDirectory() as scratch:
            worker = Path(scratch, "own.py")
            worker.write_text("print()\n", encoding="utf-8")
            own = demo.run_settings(demo.build_parser().parse_args(["run", "--output", "o", "--worker", str(worker)]))
        spec = demo.round_job_manifest(own, "rollout", "ns", "r", "img")["spec"]["template"]["spec"]
        self.assertEqual(spec["containers"][0]["command"], ["python", "-B", "-S", "/demo/launcher.py"])
        self.assertEqual(own.launcher_source, demo.LAUNCHER_SOURCE)
        self.assertIn('[sys.executable, "-B", WORKER, *sys.argv[1:]]', demo.LAUNCHER_SOURCE)
        self.assertEqual(
            container["env"],
            [
                {"name": "EPISODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "RL_DEMO_ARTIFACTS", "value": "/workspace/artifacts"},  # in the workspace's emptyDir
                {"name": "RL_DEMO_MAX_ARTIFACT_BYTES", "value": "1048576"},  # --max-artifact-bytes
            ],
        )
        self.assertEqual(
            container["securityContext"],
            {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        )
        self.assertEqual(
            container["resources"],
            {  # the disk as well (--ephemeral-storage): a worker that fills it is evicted alone, at its own limit
                "requests": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "512Mi"},
                "limits": {"cpu": "500m", "memory": "128Mi", "ephemeral-storage": "512Mi"},
            },
        )
        self.assertEqual(
            container["volumeMounts"],
            [
                {"name": "script", "mountPath": "/demo", "readOnly": True},
                {"name": "workspace", "mountPath": "/workspace"},
            ],
        )
        self.assertEqual(
            pod["volumes"],
            [  # --workspace-size
                {"name": "script", "configMap": {"name": "episode"}},
                {"name": "workspace", "emptyDir": {"sizeLimit": "256Mi"}},
            ],
        )
        self.assertEqual(job["metadata"]["labels"][demo.RUN_LABEL], "0123456789ab")

    def test_runtime_none_omits_the_runtime_class(self) -> None:
        self.assertNotIn("runtimeClassName", self.job(runtime=None)["spec"]["template"]["spec"])

    def test_namespace_is_labelled_and_restricted(self) -> None:
        namespace = demo.namespace_manifest("agc-rl-0123456789ab", "0123456789ab")
        self.assertEqual(namespace["metadata"]["labels"][demo.RUN_LABEL], "0123456789ab")
        self.assertEqual(namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted")

    def test_configmap_carries_the_worker(self) -> None:
        configmap = demo.configmap_manifest("ns", "id", demo.WORKER_SOURCE)
        self.assertEqual(configmap["data"]["episode.py"], demo.WORKER_SOURCE)

    def test_pod_selector_prefers_the_uid_label_and_falls_back_to_the_legacy_one(self) -> None:
        job = {"metadata": {"uid": "u1"}, "spec": {"selector": {"matchLabels": {demo.UID_LABEL: "u1"}}}}
        self.assertEqual(demo.pod_selector(job), f"{demo.UID_LABEL}=u1")
        legacy = {"metadata": {"uid": "u1"}, "spec": {"selector": {"matchLabels": {"controller-uid": "u1"}}}}
        self.assertEqual(demo.pod_selector(legacy), "controller-uid=u1")


class LogParsingTest(unittest.TestCase):
    def test_noise_lines_are_ignored(self) -> None:
        text = "WARNING: something\n" + log_of(make_events("p", 10.0, 11.0))
        self.assertEqual([event["event"] for event in demo.parse_events(text)], ["ready", "reward"])

    def test_malformed_event_line_is_an_error(self) -> None:
        with self.assertRaisesRegex(demo.EventParseError, "line 2 is a malformed JSON event"):
            demo.parse_events(log_of(make_events("p", 10.0, 11.0)[:1]) + '{"event": "reward", "at": \n')

    def test_json_lines_that_are_not_events_are_ignored(self) -> None:
        text = '{"level": "warning", "msg": "x"}\n{broken noise\n' + log_of(make_events("p", 10.0, 11.0))
        self.assertEqual([event["event"] for event in demo.parse_events(text)], ["ready", "reward"])

    def test_event_without_a_finite_time_is_an_error(self) -> None:
        for line, problem in (
            ('{"event": "ready"}', "no finite numeric 'at'"),
            ('{"event": "ready", "at": "soon"}', "no finite numeric 'at'"),
            ('{"event": "ready", "at": true}', "no finite numeric 'at'"),
            ('{"event": "ready", "at": 1e999}', "no finite numeric 'at'"),
            ('{"event": "ready", "at": 1' + "0" * 400 + "}", "no finite numeric 'at'"),
            ('{"event": "ready", "at": Infinity}', "Infinity is not a JSON number"),
            ('{"event": "ready", "at": NaN}', "NaN is not a JSON number"),
        ):
            with self.subTest(line=line[:40]), self.assertRaisesRegex(demo.EventParseError, problem):
                demo.parse_events(line + "\n")

    def test_prefixed_logs_are_split_per_pod_into_files(self) -> None:
        text = b"[pod/rollout-a/episode] one\n[pod/rollout-b/episode] two\n[pod/rollout-a/episode] three\n"
        with tempfile.TemporaryDirectory() as scratch:
            reader = demo.EpisodeLogReader(Path(scratch), ["rollout-a", "rollout-b"])
            for index in range(0, len(text), 7):  # chunk boundaries fall anywhere
                reader.feed(text[index : index + 7])
            logs = reader.finish()
            self.assertEqual(sorted(logs), ["rollout-a", "rollout-b"])
            self.assertEqual((Path(scratch) / "rollout-a.log").read_bytes(), b"one\nthree\n")
            self.assertEqual((Path(scratch) / "rollout-b.log").read_bytes(), b"two\n")
            self.assertEqual(logs["rollout-a"].lines, 2)

    def test_parse_json_documents_reads_concatenated_objects_and_lists(self) -> None:
        text = '{"kind": "A"}\n{"kind": "List", "items": [{"kind": "B"}, {"kind": "C"}]}'
        self.assertEqual([d["kind"] for d in demo.parse_json_documents(text)], ["A", "B", "C"])


def collected_round(
    pods: list[dict[str, Any]],
    logs: dict[str, str | None] | None = None,
    condition: str | None = "Complete",
    count: int | None = None,
) -> demo.RoundCollected:
    job = {"metadata": {"name": "rollout", "uid": "job-uid", "creationTimestamp": JOB_CREATED}, "status": {}}
    return demo.RoundCollected(
        round_number=1,
        job_name="rollout",
        job=job,
        observation=demo.RoundObservation(job, condition, JOB_CREATED_AT + 9.0, 109.0),
        pods=pods,
        logs=dict(logs or {}),
        log_errors={},
        count=len(pods) if count is None else count,
        round_dir=Path("out"),
        submitted_wall=JOB_CREATED_AT - 0.5,
        submitted_monotonic=100.0,
    )


def pod_log(text: str) -> demo.PodLog:
    return demo.scan_text(text)


class ValidationTest(unittest.TestCase):
    """Each rule of the guide's step 7, refused on its own."""

    def validate(self, pod: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
        return demo.validate_episode(pod, events, JOB_CREATED_AT, {"first_seen_at": JOB_CREATED_AT + 1.2}, "here")

    def test_a_good_episode_gives_its_row(self) -> None:
        row = self.validate(make_pod(), make_events("rollout-abcde", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 3.5))
        self.assertEqual(row["pod"], "rollout-abcde")
        self.assertAlmostEqual(row["pod_to_ready_seconds"], 2.0)
        self.assertAlmostEqual(row["batch_to_ready_seconds"], 3.0)
        self.assertAlmostEqual(row["batch_to_reward_seconds"], 3.5)
        self.assertAlmostEqual(row["python_import_seconds"], 0.49)
        self.assertAlmostEqual(row["import_to_ready_seconds"], 0.01)
        self.assertAlmostEqual(row["pod_to_scheduled_seconds"], 0.0)
        self.assertAlmostEqual(row["pod_to_container_started_seconds"], 1.0)
        self.assertAlmostEqual(row["ready_to_reward_seconds"], 0.5)
        self.assertAlmostEqual(row["reward_to_finished_seconds"], 0.5)
        self.assertAlmostEqual(row["pod_observed_to_ready_seconds"], 1.8)
        self.assertEqual(row["image_id"], "docker.io/library/python@sha256:00")

    def assert_refused(self, pod: dict[str, Any], events: list[dict[str, Any]], pattern: str) -> None:
        with self.assertRaisesRegex(demo.EpisodeInvalid, pattern) as caught:
            self.validate(pod, events)
        self.assertEqual(caught.exception.exit_code, demo.EXIT_EPISODE)
        self.assertIn("rollout-abcde", str(caught.exception))

    def good_events(self, **reward_fields: Any) -> list[dict[str, Any]]:
        return make_events("rollout-abcde", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 3.5, **reward_fields)

    def test_pod_not_succeeded(self) -> None:
        self.assert_refused(make_pod(phase="Failed", exit_code=1), self.good_events(), "phase Failed .exit code 1")

    def test_restart(self) -> None:
        self.assert_refused(make_pod(restarts=1), self.good_events(), "restarted 1 times")

    def test_exit_code(self) -> None:
        self.assert_refused(make_pod(exit_code=2), self.good_events(), "exit code is 2")

    def test_missing_reward(self) -> None:
        self.assert_refused(make_pod(), self.good_events()[:1], "found 1 ready and 0 reward")

    def test_duplicate_ready(self) -> None:
        events = self.good_events()
        self.assert_refused(make_pod(), [events[0], *events], "found 2 ready and 1 reward")

    def test_identity(self) -> None:
        events = make_events("someone-else", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 3.5)
        self.assert_refused(make_pod(), events, "episode_id 'someone-else'")

    def test_reward_zero(self) -> None:
        self.assert_refused(make_pod(), self.good_events(reward=0, tests_exit=1), "reward 0 with tests exit 1")

    def test_baseline_passed(self) -> None:
        self.assert_refused(make_pod(), self.good_events(baseline_exit=0), "baseline.s tests exit is 0; it must fail")

    def test_clock_skew(self) -> None:
        events = make_events("rollout-abcde", JOB_CREATED_AT - 3600, JOB_CREATED_AT - 3599)
        self.assert_refused(make_pod(), events, "clock synchronisation")

    def test_node_clock_ahead_is_skew(self) -> None:
        events = make_events("rollout-abcde", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 3600)
        self.assert_refused(make_pod(), events, "container runtime's stamp.*the clock the worker reads runs ahead")

    def test_non_numeric_optional_fields_are_not_invented(self) -> None:
        events = self.good_events()
        events[0]["process_started_at"] = "early"
        row = self.validate(make_pod(), events)
        self.assertIsNone(row["python_import_seconds"])

    def test_pod_before_job_is_skew(self) -> None:
        self.assert_refused(make_pod(created="2026-11-29T09:59:58Z"), self.good_events(), "out of order")

    def test_whole_second_stamps_of_two_replicas_have_a_second_of_slack(self) -> None:
        """The Job's and the pod's creationTimestamps are whole seconds and may come from two
        API-server replicas whose clocks differ: a pod a second "before" its Job is no skew (W10)."""
        row = self.validate(make_pod(created="2026-11-29T09:59:59Z"), self.good_events())
        self.assertAlmostEqual(row["created_at"], JOB_CREATED_AT - 1.0)
        early = make_events("rollout-abcde", JOB_CREATED_AT + 0.5, JOB_CREATED_AT + 0.6)  # ready 0.5 s before creation
        started = "2026-11-29T10:00:00Z"
        row = self.validate(make_pod(started=started), early)
        self.assertAlmostEqual(row["pod_to_ready_seconds"], -0.5)
        late = make_events("rollout-abcde", JOB_CREATED_AT - 0.1, JOB_CREATED_AT + 0.6)  # 1.1 s before it
        self.assert_refused(make_pod(started=started), late, "out of order.*1 s apart at most")

    def test_a_pod_the_failed_jobs_controller_deleted_says_so(self) -> None:
        """The job controller deletes a failed Job's active pods (job_controller.go, deleteActivePods):
        a pod whose deletion was asked for once the Job had failed is recorded as such; one deleted
        before (perhaps what failed the Job) and one with a DisruptionTarget stay as they were."""
        job = {
            "status": {
                "conditions": [
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                        "lastTransitionTime": "2026-11-29T10:00:05Z",
                    }
                ]
            }
        }
        for deleted_at, grace, expected in (
            (
                "2026-11-29T10:00:35Z",
                30,
                "the pod was deleted mid-run by the job controller because the Job failed "
                "(BackoffLimitExceeded: Job has reached the specified backoff limit; deletionTimestamp "
                "2026-11-29T10:00:35Z)",
            ),
            ("2026-11-29T10:00:34Z", 30, "the pod was deleted mid-run (deletionTimestamp 2026-11-29T10:00:34Z)"),
        ):
            with self.subTest(deleted_at=deleted_at):
                pod = make_pod(phase="Failed", exit_code=143)
                pod["metadata"].update(deletionTimestamp=deleted_at, deletionGracePeriodSeconds=grace)
                self.assertEqual(demo.pod_failure(pod, job), (2, expected))
                self.assertEqual(
                    demo.pod_failure(pod)[1], f"the pod was deleted mid-run (deletionTimestamp {deleted_at})"
                )
                with self.assertRaises(demo.EpisodeInvalid) as caught:
                    demo.check_pod_set([pod], 1, "here", job=job)
                self.assertIn(expected, str(caught.exception))
        disrupted = make_pod(phase="Failed", exit_code=143)
        disrupted["metadata"].update(deletionTimestamp="2026-11-29T10:00:40Z", deletionGracePeriodSeconds=30)
        disrupted["status"]["conditions"].append(
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "preempted"}
        )
        self.assertIn("; PreemptionByScheduler: preempted)", demo.pod_failure(disrupted, job)[1])

    def test_pod_set_names_deleted_evicted_and_extra_pods(self) -> None:
        deleted = make_pod()
        deleted["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:05Z"
        with self.assertRaisesRegex(demo.EpisodeInvalid, "rollout-abcde: the pod was deleted mid-run"):
            demo.check_pod_set([deleted], 1, "here")
        evicted = make_pod(phase="Failed")
        evicted["status"].update(reason="Evicted", message="low on memory")
        with self.assertRaisesRegex(demo.EpisodeInvalid, "evicted .low on memory"):
            demo.check_pod_set([evicted], 1, "here")
        with self.assertRaisesRegex(demo.DemoError, "2 pods but 1 episodes.*rollout-a, rollout-b"):
            demo.check_pod_set([make_pod("rollout-a"), make_pod("rollout-b")], 1, "here")


class EpisodeSourcesTest(unittest.TestCase):
    """The log and the termination message: which is read, and that they agree."""

    events: ClassVar[list[dict[str, Any]]] = make_events("p", 10.0, 11.0)

    def test_agreeing_sources(self) -> None:
        result = demo.episode_events("p", pod_log(log_of(self.events)), None, log_of(self.events), True, "here")
        self.assertEqual(result, (self.events, []))

    def test_trimmed_test_output_still_agrees(self) -> None:
        trimmed = [dict(self.events[0]), dict(self.events[1], tests_output="K\n", tests_output_truncated=True)]
        self.assertEqual(
            demo.episode_events("p", pod_log(log_of(self.events)), None, log_of(trimmed), True, "h"), (self.events, [])
        )

    def test_disagreeing_sources(self) -> None:
        other = [self.events[0], dict(self.events[1], reward=0)]
        with self.assertRaisesRegex(demo.EpisodeInvalid, "different events"):
            demo.episode_events("p", pod_log(log_of(self.events)), None, log_of(other), True, "here")

    def test_sources_that_differ_only_in_a_type_disagree(self) -> None:
        """Issue 29: compared type-strictly (Python's == holds True == 1 == 1.0), in any field."""
        artifact = {"name": "a.txt", "bytes": 1, "sha256": "0" * 64}
        for field, logged, told in (
            ("reward", 1, True),
            ("reward", 1, 1.0),
            ("tests_exit", 0, False),
            ("artifacts", [artifact], [dict(artifact, bytes=True)]),
        ):
            with self.subTest(field=field, told=told):
                log = [self.events[0], dict(self.events[1], **{field: logged})]
                message = [self.events[0], dict(self.events[1], **{field: told})]
                with self.assertRaisesRegex(demo.EpisodeInvalid, f"different events.*differ in '{field}'"):
                    demo.episode_events("p", pod_log(log_of(log)), None, log_of(message), True, "here")

    def test_unreadable_log_says_why(self) -> None:
        with self.assertRaisesRegex(demo.EpisodeInvalid, r"log could not be read \(Error from server"):
            demo.episode_events("p", None, "Error from server (InternalError)", log_of(self.events), True, "here")

    def test_large_batches_use_the_message_alone(self) -> None:
        self.assertEqual(demo.episode_events("p", None, "not read", log_of(self.events), False, "h"), (self.events, []))

    def test_a_message_cut_at_the_front_counts_by_its_complete_lines(self) -> None:
        padded = [dict(self.events[0], pad="p" * 5000), self.events[1]]
        message = log_of(padded).encode()[-demo.TERMINATION_MESSAGE_LIMIT :].decode()
        events, notes = demo.episode_events("p", pod_log(log_of(padded)), None, message, True, "h")
        self.assertEqual([event["event"] for event in events], ["ready", "reward"])
        self.assertIn("cut at the front", notes[0])
        with self.assertRaisesRegex(demo.EpisodeInvalid, "its complete lines do not end the log"):
            demo.episode_events("p", pod_log(log_of(padded[:1])), None, message, True, "h")
        with self.assertRaisesRegex(demo.EpisodeInvalid, "log could not be read"):
            demo.episode_events("p", None, "not read", message, False, "h")  # beyond 20 episodes: its log is needed
        hostile = '{"event": "ready", "at": ' + message[25:]  # a cut that leaves a broken event line first
        self.assertEqual(demo.episode_events("p", pod_log(log_of(padded)), None, hostile, True, "h")[0], events)

    def test_a_log_that_lost_its_beginning_looks_rotated(self) -> None:
        events, notes = demo.episode_events("p", pod_log(log_of(self.events[1:])), None, log_of(self.events), True, "h")
        self.assertEqual(events, self.events)  # the termination message's
        self.assertIn("looks rotated", notes[0])
        with self.assertRaisesRegex(demo.EpisodeInvalid, "reward event but no ready event.*looks rotated"):
            demo.episode_events("p", pod_log(log_of(self.events[1:])), None, "", True, "h")

    def test_other_events_count_too(self) -> None:
        tick = {"event": "tick", "at": 10.5, "episode_id": "p"}
        log = pod_log(log_of([self.events[0], tick, self.events[1]]))
        self.assertEqual(log.counts, {"ready": 1, "other": 1, "reward": 1})
        with self.assertRaisesRegex(demo.EpisodeInvalid, "the log has 1 other events, the termination message 0"):
            demo.episode_events("p", log, None, log_of(self.events), True, "h")

    def test_empty_message_falls_back_to_the_log(self) -> None:
        self.assertEqual(demo.episode_events("p", pod_log(log_of(self.events)), None, "", True, "h"), (self.events, []))


class ReportTest(unittest.TestCase):
    def results(self) -> dict[str, Any]:
        rows = []
        for index in range(4):
            pod = make_pod(
                f"rollout-{index}",
                created=f"2026-11-29T10:00:0{index}Z",
                started=f"2026-11-29T10:00:0{index + 1}Z",
                finished=f"2026-11-29T10:00:0{index + 3}Z",
            )
            pod["spec"]["nodeName"] = "node-a" if index % 2 else "node-b"
            events = make_events(f"rollout-{index}", JOB_CREATED_AT + index + 2.0, JOB_CREATED_AT + index + 2.5)
            rows.append(demo.validate_episode(pod, events, JOB_CREATED_AT, None, "here"))
        return results_of(rows)

    def test_batch_figures(self) -> None:
        results = self.results()
        self.assertEqual(results["episodes"], 4)
        self.assertEqual(results["reward_sum"], 4)
        self.assertAlmostEqual(results["batch_to_all_ready_seconds"], 5.0)
        self.assertAlmostEqual(results["batch_to_all_rewards_seconds"], 5.5)
        self.assertEqual(results["nodes"], {"node-a": 2, "node-b": 2})

    def test_summary_table_names_every_phase(self) -> None:
        text = demo.render_summary(self.results())
        for label in demo.PHASE_LABELS.values():
            self.assertIn(label, text)
        self.assertIn("nodes: node-a: 2, node-b: 2", text)

    def drawn(self, svg: str) -> Dict[Tuple[str, str], str]:
        """(pod, phase) -> "bar" or "marker", from the picture's own elements."""
        root = ElementTree.fromstring(svg)
        kinds = {}
        for element in root.iter():
            if element.get("class") in ("bar", "marker"):
                title = element.find("{http://www.w3.org/2000/svg}title")
                pod = (title.text or "").split()[0] if title is not None else ""
                kinds[(pod, element.get("data-phase") or "")] = element.get("class") or ""
        return kinds

    def test_timeline_draws_each_phase_once_as_a_bar_or_a_marker(self) -> None:
        svg = demo.render_timeline_svg(self.results())
        root = ElementTree.fromstring(svg)
        texts = "".join(root.itertext())
        self.assertIn("node node-a", texts)
        self.assertIn("seconds since the Job was created", texts)
        # pod i: created i s after the Job, container started 1 s later (both whole seconds), ready at
        # i + 2 s and reward at i + 2.5 s (node clock), finished at i + 3 s (whole seconds)
        expected = {}
        for index in range(4):
            pod = f"rollout-{index}"
            expected[(pod, "waiting")] = "marker" if index <= 1 else "bar"  # two stamps at most 1 s apart
            expected[(pod, "pod start")] = "marker"  # two whole-second stamps 1 s apart: a 1 s artefact
            expected[(pod, "Python start")] = "bar"  # 1 s from a whole-second start to the node's ready
            expected[(pod, "task")] = "bar"
            expected[(pod, "exit")] = "marker"  # 0.5 s to a whole-second finish
        self.assertEqual(self.drawn(svg), expected)

    def test_a_marker_is_a_tick_and_the_window_its_whole_second_end_lies_in(self) -> None:
        results = self.results()
        results["pods"][0]["finished_at"] = results["pods"][0]["reward_at"] - 0.4  # inverted by truncation
        root = ElementTree.fromstring(demo.render_timeline_svg(results))
        [exit_marker] = [
            element
            for element in root.iter("{http://www.w3.org/2000/svg}g")
            if element.get("data-phase") == "exit" and "rollout-0 " in "".join(element.itertext())
        ]
        ticks = exit_marker.findall("{http://www.w3.org/2000/svg}line")
        scale = demo.TIMELINE_PLOT_WIDTH / (results["pods"][-1]["finished_at"] + 1 - JOB_CREATED_AT)
        reward_x = demo.TIMELINE_LABEL_WIDTH + (results["pods"][0]["reward_at"] - JOB_CREATED_AT) * scale
        finished_x = demo.TIMELINE_LABEL_WIDTH + (results["pods"][0]["finished_at"] + 1 - JOB_CREATED_AT) * scale
        self.assertAlmostEqual(float(ticks[0].get("x1") or 0), reward_x, delta=0.1)  # the tick: the reward
        self.assertAlmostEqual(float(ticks[1].get("x1") or 0), reward_x, delta=0.1)  # the window: not before it
        self.assertAlmostEqual(float(ticks[1].get("x2") or 0), finished_x, delta=0.1)  # to the end of its second
        self.assertIn("within 1 s (mixed: node + runtime 1 s)", "".join(exit_marker.itertext()))

    def test_a_whisker_ends_where_a_finer_later_stamp_proves_the_step_done(self) -> None:
        results = self.results()
        row = results["pods"][0]  # container started 1 s after the Job (whole seconds), ready at 2 s
        row["ready_at"] = row["container_started_at"] + 0.4  # the container started before that
        root = ElementTree.fromstring(demo.render_timeline_svg(results))
        [marker] = [
            element
            for element in root.iter("{http://www.w3.org/2000/svg}g")
            if element.get("data-phase") == "pod start" and "rollout-0 " in "".join(element.itertext())
        ]
        self.assertIn("between 1.000 and 1.400 s", "".join(marker.itertext()))

    def test_timeline_names_context_date_and_a_simulation(self) -> None:
        results = self.results()
        root = ElementTree.fromstring(demo.render_timeline_svg(results))
        texts = [element.text or "" for element in root.iter("{http://www.w3.org/2000/svg}text")]
        self.assertEqual(texts[1], "context ctx, namespace agc-rl-x, first Job created 2026-11-29 10:00:00 UTC")
        self.assertFalse(any("SIMULATION" in text for text in texts))
        results["container_runtimes"] = [demo.SIMULATED_RUNTIME]
        root = ElementTree.fromstring(demo.render_timeline_svg(results))
        texts = [element.text or "" for element in root.iter("{http://www.w3.org/2000/svg}text")]
        self.assertTrue(texts[1].endswith(f", container runtime {demo.SIMULATED_RUNTIME}"))
        self.assertTrue(texts[2].startswith("SIMULATION: the tests' fake cluster"))

    def test_rounds_are_marked_and_the_legend_stays_above_the_first_row(self) -> None:
        results = self.results()
        for row in results["pods"][2:]:
            row["round"], row["batch_start"] = 2, row["batch_start"] + 2.0
        root = ElementTree.fromstring(demo.render_timeline_svg(results))
        svg = "{http://www.w3.org/2000/svg}"
        rounds = [element for element in root.iter(f"{svg}line") if element.get("class") == "round"]
        self.assertEqual(len(rounds), 2)
        texts = [element.text or "" for element in root.iter(f"{svg}text")]
        self.assertIn("round 1", texts)
        self.assertIn("round 2", texts)
        [plot] = [
            element for element in root.iter(f"{svg}g") if (element.get("transform") or "").startswith("translate")
        ]
        top = float((plot.get("transform") or "").split(",")[1].rstrip(")"))
        legend = [float(element.get("y") or 0) for element in root if element.tag == f"{svg}text"]
        round_labels = [
            float(element.get("y") or 0)
            for element in plot.iter(f"{svg}text")
            if (element.text or "").startswith("round")
        ]
        self.assertLess(max(legend), top + min(round_labels) - 11)  # the legend ends above the round labels

    def test_timeline_ticks_stay_few_for_huge_spans(self) -> None:
        for span in (0.3, 7.0, 95.0, 4000.0, 1e9):
            with self.subTest(span=span):
                self.assertLessEqual(span / demo._axis_step(span), 12)

    def test_thresholds(self) -> None:
        results = self.results()
        self.assertEqual(demo.check_thresholds(results, {"batch_to_all_ready_seconds": 10}), [])
        self.assertEqual(
            demo.check_thresholds(results, {"batch_to_all_ready_seconds": 4, "pod_to_ready_max_seconds": 1}),
            [
                "batch_to_all_ready_seconds = 5.0 s > 4 s",
                "pod_to_ready_max_seconds = 2.0 s > 1 s",
            ],  # its clocks' tenths
        )

    def test_cluster_observed_batch_figures_and_their_budgets(self) -> None:
        """batch_to_all_started/finished_seconds: Job created -> the last container's startedAt and
        finishedAt (the cluster's, whole seconds); a budget on one nobody measured is breached."""
        results = self.results()
        rows = results["pods"]
        self.assertEqual(
            results["batch_to_all_started_seconds"], max(r["container_started_at"] for r in rows) - JOB_CREATED_AT
        )
        self.assertEqual(results["batch_to_all_finished_seconds"], max(r["finished_at"] for r in rows) - JOB_CREATED_AT)
        self.assertEqual(demo.FIGURE_SOURCES["batch_to_all_finished_seconds"], "cluster")
        finished = results["batch_to_all_finished_seconds"]
        self.assertEqual(demo.check_thresholds(results, {"batch_to_all_finished_seconds": finished}), [])
        self.assertEqual(
            demo.check_thresholds(results, {"batch_to_all_finished_seconds": finished - 1}),
            [f"batch_to_all_finished_seconds = {finished:.0f} s > {finished - 1:g} s"],  # two whole-second stamps
        )
        rows[0]["finished_at"] = None
        figures = demo.batch_figures(rows)  # type: ignore[arg-type]
        self.assertIsNone(figures["batch_to_all_finished_seconds"])
        self.assertEqual(
            demo.check_thresholds({**results, **figures}, {"batch_to_all_finished_seconds": 100}),  # type: ignore[arg-type]
            ["batch_to_all_finished_seconds is unknown (an episode lacks its stamp), so it cannot be held to 100 s"],
        )
        self.assertEqual(demo.threshold("batch_to_all_finished_seconds=3"), ("batch_to_all_finished_seconds", 3.0))

    def test_events_text_is_sorted_by_creation(self) -> None:
        events = [
            {
                "metadata": {"name": "b", "creationTimestamp": "2026-11-29T10:00:02Z"},
                "reason": "Late",
                "involvedObject": {"kind": "Pod", "name": "p"},
                "message": "x",
            },
            {
                "metadata": {"name": "a", "creationTimestamp": "2026-11-29T10:00:01Z"},
                "reason": "Early",
                "involvedObject": {"kind": "Job", "name": "rollout"},
                "message": "y",
            },
        ]
        lines = demo.render_events_text(events).splitlines()
        self.assertIn("Early", lines[1])
        self.assertIn("Late", lines[2])


class FakeStream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class ProgressTest(unittest.TestCase):
    counts: ClassVar[list[dict[str, int]]] = [
        {"created": 1},
        {"created": 2},
        {"created": 2, "running": 2},
        {"created": 2, "succeeded": 2},
    ]
    TERMINAL: ClassVar[dict[str, str]] = {"TERM": "xterm-256color"}

    def test_log_lines_are_rate_limited_and_the_final_state_is_printed(self) -> None:
        stream = FakeStream(tty=False)
        progress = demo.Progress(enabled=True, stream=stream, environ=self.TERMINAL)
        for counts in self.counts:
            progress.update("ns/rollout", 1.0, counts, 269.4)
        progress.finish()
        lines = stream.getvalue().splitlines()
        self.assertEqual(
            lines,  # the first change, then the last state at finish
            [
                "1 created, 0 running, 0 succeeded, 0 failed; 1.0 s elapsed, 269 s left; ns/rollout",
                "2 created, 0 running, 2 succeeded, 0 failed; 1.0 s elapsed, 269 s left; ns/rollout",
            ],
        )

    def test_terminal_line_is_rewritten_with_counts_elapsed_and_time_left(self) -> None:
        stream = FakeStream(tty=True)
        progress = demo.Progress(enabled=True, stream=stream, environ=self.TERMINAL, columns=120)
        for counts in self.counts:
            progress.update("ns/rollout", 2.0, counts, 30.6)
        progress.finish()
        text = stream.getvalue()
        self.assertEqual(text.count("\r\033[K"), 4)
        self.assertTrue(
            text.endswith("2 created, 0 running, 2 succeeded, 0 failed; 2.0 s elapsed, 31 s left; ns/rollout\n"), text
        )

    def test_terminal_line_never_wraps(self) -> None:
        stream = FakeStream(tty=True)
        progress = demo.Progress(enabled=True, stream=stream, environ=self.TERMINAL, columns=40)
        progress.update("agc-rl-3837462f437d/rollout", 2.0, {"created": 10}, 268.0)
        self.assertEqual(stream.getvalue(), "\r\033[K10 created, 0 running, 0 succeeded, ...")

    def test_the_counts_and_times_come_first_and_only_the_name_is_cut(self) -> None:
        label = "agc-rl-3837462f437d/rollout"
        expected = {  # the width: one column is left free, so the line never reaches the margin
            80: "10 created, 8 running, 0 succeeded, 0 failed; 2.5 s elapsed, 268 s left; agc...",
            60: "10 created, 8 running, 0 succeeded, 0 failed; 2.5 s elap...",
        }
        for columns, line in expected.items():
            for given in ({"columns": columns}, {"environ": {**self.TERMINAL, "COLUMNS": str(columns)}}):
                with self.subTest(columns=columns, given=given):
                    stream = FakeStream(tty=True)
                    progress = demo.Progress(enabled=True, stream=stream, **{"environ": self.TERMINAL, **given})
                    progress.update(label, 2.5, {"created": 10, "running": 8}, 268.0)
                    self.assertEqual(stream.getvalue(), "\r\033[K" + line)
                    self.assertEqual(len(line), columns - 1)
        wide = FakeStream(tty=True)
        demo.Progress(enabled=True, stream=wide, environ=self.TERMINAL, columns=120).update(
            label, 2.5, {"created": 10, "running": 8}, 268.0
        )
        self.assertTrue(wide.getvalue().endswith("268 s left; agc-rl-3837462f437d/rollout"), wide.getvalue())

    def test_a_message_erases_the_progress_line_instead_of_being_glued_to_it(self) -> None:
        stream = FakeStream(tty=True)
        progress = demo.Progress(enabled=True, stream=stream, environ=self.TERMINAL, columns=120)
        progress.update("ns/rollout", 2.0, {"created": 1}, 10.0)
        demo.say("warning: something", stream)
        demo.say("and again", stream)  # the line is already erased: nothing more to erase
        progress.update("ns/rollout", 2.0, {"created": 2}, 10.0)  # drawn again, on a line of its own
        self.assertEqual(
            stream.getvalue(),
            "\r\033[K1 created, 0 running, 0 succeeded, 0 failed; 2.0 s elapsed, 10 s left; ns/rollout"
            "\r\033[Kwarning: something\nand again\n"
            "\r\033[K2 created, 0 running, 0 succeeded, 0 failed; 2.0 s elapsed, 10 s left; ns/rollout",
        )

    def test_a_log_keeps_the_whole_line_whatever_its_width(self) -> None:
        stream = FakeStream(tty=False)
        progress = demo.Progress(enabled=True, stream=stream, environ={**self.TERMINAL, "COLUMNS": "40"})
        progress.update("agc-rl-3837462f437d/rollout", 2.5, {"created": 10}, 268.0)
        progress.finish()
        self.assertEqual(
            stream.getvalue(),
            "10 created, 0 running, 0 succeeded, 0 failed; 2.5 s elapsed, 268 s left; agc-rl-3837462f437d/rollout\n",
        )

    def test_no_escape_sequence_under_dumb_terminals_no_color_or_no_tty(self) -> None:
        for tty, environ in (
            (True, {"TERM": "dumb"}),
            (True, {"TERM": "xterm", "NO_COLOR": "1"}),
            (True, {"NO_COLOR": "anything"}),
            (False, {"TERM": "xterm"}),
        ):
            with self.subTest(tty=tty, environ=environ):
                stream = FakeStream(tty=tty)
                progress = demo.Progress(enabled=True, stream=stream, environ=environ)
                for counts in self.counts:
                    progress.update("ns/rollout", 2.0, counts, 10.0)
                progress.finish()
                text = stream.getvalue()
                self.assertNotIn("\033", text)
                self.assertNotIn("\r", text)
                self.assertIn(
                    "2 created, 0 running, 2 succeeded, 0 failed; 2.0 s elapsed, 10 s left; ns/rollout\n", text
                )

    def test_which_streams_rewrite_in_place(self) -> None:
        for tty, environ, rewrites in (
            (True, {"TERM": "xterm"}, True),
            (True, {}, True),
            (True, {"NO_COLOR": ""}, True),  # no-color.org: an empty value does not count
            (True, {"TERM": "dumb"}, False),
            (True, {"NO_COLOR": "0"}, False),  # any other value does
            (False, {}, False),
        ):
            with self.subTest(tty=tty, environ=environ):
                self.assertEqual(demo.rewrites_in_place(FakeStream(tty=tty), environ), rewrites)

    def test_quiet_prints_nothing(self) -> None:
        stream = FakeStream(tty=True)
        progress = demo.Progress(enabled=False, stream=stream, environ=self.TERMINAL)
        progress.update("ns/rollout", 1.0, {"created": 1})
        progress.finish()
        self.assertEqual(stream.getvalue(), "")


class KubectlOutputTest(unittest.TestCase):
    """What kubectl prints is checked before it is trusted."""

    def test_objects_without_a_uid_are_an_error(self) -> None:
        with self.assertRaisesRegex(demo.DemoError, "without metadata.uid") as caught:
            demo.required_uid({"metadata": {"name": "x"}}, "a Job")
        self.assertEqual(caught.exception.exit_code, demo.EXIT_CLUSTER)

    def test_non_object_list_items_are_rejected(self) -> None:
        with self.assertRaises(ValueError):
            demo.parse_json_documents('{"kind": "List", "items": [1, 2]}')

    def test_failed_create_event_explains_a_blocked_job(self) -> None:
        class Events(demo.Kubectl):
            def get_list(self, kinds: str, namespace: str | None = None, **_: Any) -> Any:
                return [
                    {
                        "kind": "Event",
                        "reason": "FailedCreate",
                        "involvedObject": {"name": "rollout"},
                        "message": 'pods "rollout-x" is forbidden: violates PodSecurity "restricted:latest"',
                    },
                    {"kind": "Event", "reason": "FailedCreate", "involvedObject": {"name": "other"}, "message": "no"},
                ]

        kubectl = Events("kubectl", context="c", kubeconfig=None)
        self.assertIn("violates PodSecurity", demo.creation_blocked(kubectl, "ns", "rollout"))
        self.assertEqual(demo.creation_blocked(kubectl, "ns", "nothing-here"), "")


class OddPodShapeTest(unittest.TestCase):
    def test_an_unreadable_pod_time_names_the_pod(self) -> None:
        pod = make_pod(message=log_of(make_events("rollout-abcde", JOB_CREATED_AT + 3.0, JOB_CREATED_AT + 3.5)))
        pod["metadata"]["creationTimestamp"] = "yesterday"
        collected = collected_round([pod], logs={"rollout-abcde": pod_log(demo.termination_message(pod))})
        with self.assertRaisesRegex(demo.EpisodeInvalid, "rollout-abcde: its pod status or events have an unexpected"):
            demo.analyse_round(collected, "ns/rollout")


class InspectHintTest(unittest.TestCase):
    """A failed episode's message names its <pod>.log only where one was saved."""

    def test_a_pod_that_printed_nothing_is_not_sent_to_a_log_that_does_not_exist(self) -> None:
        pod = make_pod()  # no termination message
        for logs, errors, inspect in (
            (
                {"rollout-abcde": demo.PodLog()},
                {},
                "out/pods.json and events.txt (rollout-abcde printed nothing, so no rollout-abcde.log was saved)",
            ),
            ({"rollout-abcde": demo.scan_text("hello\n")}, {}, "out/rollout-abcde.log and pods.json"),
            (
                {},
                {"rollout-abcde": "error: timed out"},
                "out/pods.json and events.txt (its log could not be read (error: timed out))",
            ),
            ({}, {}, "out/pods.json and events.txt (its log was not read: its termination message carried its events)"),
        ):
            with self.subTest(inspect=inspect):
                collected = demo.dataclasses.replace(collected_round([pod], logs=logs), log_errors=errors)
                with self.assertRaises(demo.EpisodeInvalid) as caught:
                    demo.analyse_round(collected, "ns/rollout")
                self.assertTrue(str(caught.exception).endswith(f"; inspect {inspect}"), str(caught.exception))


class CompareTest(unittest.TestCase):
    def test_ratios_only_between_positive_durations(self) -> None:
        first = {"episodes": 10, "batch_to_all_rewards_seconds": 2.0, "phases": {}}
        second = {"episodes": 10, "batch_to_all_rewards_seconds": 5.0, "phases": {}}
        first["phases"]["reward_to_finished_seconds"] = {"p50": -0.1, "p95": 0.2, "max": 0.2, "samples": 1}
        second["phases"]["reward_to_finished_seconds"] = {"p50": -0.5, "p95": -0.1, "max": 0.0, "samples": 1}
        rows = {row["figure"]: row for row in demo.comparison([("a", first), ("b", second)])}
        self.assertEqual(rows["batch_to_all_rewards_seconds"]["ratios"], [1.0, 2.5])
        self.assertEqual(rows["reward_to_finished_seconds:p50"]["ratios"], [None, None])
        self.assertEqual(rows["reward_to_finished_seconds:p95"]["ratios"], [None, None])  # below its 1 s clock

    def test_each_value_as_precise_as_its_clocks(self) -> None:
        first = {"episodes": 10, "batch_to_all_finished_seconds": 3.0, "client_job_complete_seconds": 2.71234}
        second = {"episodes": 10, "batch_to_all_finished_seconds": 0.0, "client_job_complete_seconds": 0.0441}
        first["phases"] = {"reward_to_finished_seconds": {"p50": -0.3, "p95": 1.55, "max": 2.0, "samples": 3}}
        second["phases"] = {"reward_to_finished_seconds": {"p50": 2.0, "p95": -1.2, "max": 2.0, "samples": 3}}
        rows = {row["figure"]: row for row in demo.comparison([("a", first), ("b", second)])}
        for figure, texts, ratios, clock, resolution in (
            ("episodes", ["10", "10"], [1.0, 1.0], None, None),
            ("batch_to_all_finished_seconds", ["3 s", "< 1 s"], [1.0, None], "mixed: API server 1 s + runtime 1 s", 1),
            ("client_job_complete_seconds", ["2.71 s", "44.1 ms"], [1.0, 0.0441 / 2.71234], "client clock", 1e-6),
            ("reward_to_finished_seconds:p50", ["< 1 s", "2.0 s"], [None, None], "mixed: node + runtime 1 s", 1),
            ("reward_to_finished_seconds:p95", ["1.6 s", "-1.2 s"], [1.0, None], "mixed: node + runtime 1 s", 1),
        ):
            with self.subTest(figure=figure):
                row = rows[figure]
                self.assertEqual((row["texts"], row["clock"], row["resolution_seconds"]), (texts, clock, resolution))
                self.assertEqual(row["ratios"], ratios)
        text = demo.render_comparison(["a", "b"], list(rows.values()), "text")
        self.assertRegex(text, r"\nall finished \(cluster\)\s+3 s\s+< 1 s\n")
        self.assertNotIn(".000", text)
        self.assertIn(
            "| reward -> container finished p50 | < 1 s | 2.0 s |",
            demo.render_comparison(["a", "b"], list(rows.values()), "markdown"),
        )


class SchemaTest(unittest.TestCase):
    """schema_problem, the check of a results.json read back, and the tests' strict check of one written."""

    def test_a_value_read_back_is_named_by_its_first_departure(self) -> None:
        pull = {"state": "pulled", "seconds": 1.5}
        for value, problem in (
            (pull, ""),
            ({**pull, "seconds_including_waiting": None, "unknown key": 1}, ""),  # optional; unknown keys unread
            ({"seconds": None}, "state is missing"),
            ({**pull, "state": 1}, "state is a number, not a string"),
            ({**pull, "seconds": True}, "seconds is a boolean, not a finite number"),
            ({**pull, "seconds": 10**400}, "seconds is a number, not a finite number"),
            ([pull], "the top level is a list, not an object"),
        ):
            with self.subTest(value=value):
                self.assertEqual(demo.schema_problem(value, demo.ImagePull), problem)
        row = {"figure": "x", "label": "y", "values": [1, None, 2.5], "ratios": ["1"]}
        self.assertEqual(demo.schema_problem(row, demo.ComparisonRow), "ratios[0] is a string, not a finite number")
        self.assertEqual(
            demo.schema_problem({"count": 1.0}, demo.OperationFigures), "count is a number, not an integer"
        )
        nodes = {"handler": "", "pooled": demo.no_operations(), "nodes": {"a\x1b": {}}}
        self.assertEqual(demo.schema_problem(nodes, demo.RuntimeOperations), "nodes['a\\x1b'].RunPodSandbox is missing")

    def test_the_strict_check_also_refuses_unknown_keys(self) -> None:
        rows = [
            demo.validate_episode(
                make_pod(),
                make_events("rollout-abcde", JOB_CREATED_AT + 2, JOB_CREATED_AT + 3),
                JOB_CREATED_AT,
                None,
                "here",
            )
        ]
        row = demo.pod_row(rows[0])
        self.assertEqual(records.exact_problem(row, demo.PodRow), "")
        self.assertEqual(records.exact_problem({**row, "stray": {}}, demo.PodRow), "stray is not in the schema")
        bad = {**row, "image_pull": {**row["image_pull"], "size": 1}}
        self.assertEqual(records.exact_problem(bad, demo.PodRow), "image_pull.size is not in the schema")
        self.assertEqual(
            records.exact_problem({**row, "reward": None}, demo.PodRow), "reward is null, not a finite number"
        )


class CapacityTest(unittest.TestCase):
    runtimeclass: ClassVar[dict[str, Any]] = {
        "handler": "cube",
        "overhead": {"podFixed": {"cpu": "0", "memory": "768Mi"}},
    }

    def node(self, name: str, **spec: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": {"sandbox": "yes"}},
            "spec": spec,
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "50Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def test_the_guides_example_in_words(self) -> None:
        fits, text = demo.capacity_verdict(10, self.runtimeclass, [self.node("a"), self.node("b")])
        self.assertTrue(fits)
        self.assertIn("10 pods need 1.0 CPU and 8.1 GiB including 7.5 GiB of RuntimeClass overhead", text)
        self.assertIn("2 eligible nodes have 8.0 CPU, 16.0 GiB and 100.0 GiB of ephemeral storage", text)
        self.assertIn("and 5.0 GiB of ephemeral storage", text)  # 10 x --ephemeral-storage 512Mi

    def test_ephemeral_storage_is_counted_as_the_scheduler_counts_it(self) -> None:
        """Each episode requests --ephemeral-storage; a node that reports none has no room (fit.go)."""
        small = self.node("a")
        small["status"]["allocatable"]["ephemeral-storage"] = "2Gi"
        self.assertEqual(demo.episode_room(self.runtimeclass, [small], [])[0], 4)  # 4 x 512Mi
        self.assertEqual(demo.episode_room(self.runtimeclass, [small], [], "1Gi")[0], 2)
        fits, text = demo.capacity_verdict(3, self.runtimeclass, [small], [], "1Gi")
        self.assertFalse(fits)
        self.assertIn("3.0 GiB of ephemeral storage", text)
        silent = self.node("b")
        del silent["status"]["allocatable"]["ephemeral-storage"]
        self.assertEqual(demo.episode_room(self.runtimeclass, [silent], [])[0], 0)

    def test_too_little_memory(self) -> None:
        fits, _ = demo.capacity_verdict(20, self.runtimeclass, [self.node("a")])
        self.assertFalse(fits)

    def test_unschedulable_tainted_and_unselected_nodes_are_not_eligible(self) -> None:
        runtimeclass = dict(self.runtimeclass, scheduling={"nodeSelector": {"sandbox": "yes"}})
        tainted = self.node("t", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        unselected = self.node("u")
        unselected["metadata"]["labels"] = {}
        nodes = [self.node("ok"), self.node("cordoned", unschedulable=True), tainted, unselected]
        self.assertEqual([n["metadata"]["name"] for n in demo.eligible_nodes(nodes, runtimeclass)], ["ok"])
        tolerant = dict(
            runtimeclass,
            scheduling={
                "nodeSelector": {"sandbox": "yes"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            },
        )
        self.assertEqual([n["metadata"]["name"] for n in demo.eligible_nodes(nodes, tolerant)], ["ok", "t"])


class CommandLineTest(unittest.TestCase):
    def run_main(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = demo.main(list(argv))
            except SystemExit as exit:
                code = int(exit.code or 0)
        return code, out.getvalue(), err.getvalue()

    def test_bounds_are_usage_errors(self) -> None:
        for argv, message in (
            (["--count", "21"], "--count 21 is more than 20; pass --allow-large for up to 1000"),
            (["--count", "1001", "--allow-large"], "--count 1001 is more than 1000, the most --allow-large allows"),
            (["--count", "1001"], "--count 1001 is more than 1000, the most --allow-large allows"),
            (["--count", "5", "--parallelism", "6"], "--parallelism 6 is more than --count 5"),
            (["--parallelism", "12"], "--parallelism 12 is more than --count 10 (the default)"),
            (["--count", "0"], "argument --count: '0' must be at least 1"),
            (["--count", "ten"], "argument --count: 'ten' is not a whole number"),
            (["--rounds", "11"], "--rounds 11 is more than 10"),
            (["--threshold", "nonsense_seconds=1"], "unknown metric 'nonsense_seconds'"),
        ):
            with self.subTest(argv=argv):
                code, _, err = self.run_main("run", "--output", "unused", *argv)
                self.assertEqual(code, demo.EXIT_USAGE)
                self.assertTrue(err.startswith("rl-batch-demo: error: "), err)
                self.assertIn(message, err)
                self.assertTrue(err.endswith(f" (see {demo.invoked_as()} run --help)\n"), err)
                self.assertEqual(err.count("\n"), 1, err)  # one line, no usage block
                self.assertFalse(Path("unused").exists())

    def assert_usage_error(self, argv: list[str], line: str) -> None:
        """Exit 2 and exactly `line` on stderr: one line, no usage block, nothing run."""
        with tempfile.TemporaryDirectory() as root, unittest.mock.patch.dict(os.environ, {"PATH": root}):
            code, out, err = self.run_main(*argv)
        self.assertEqual((code, out, err), (demo.EXIT_USAGE, "", f"rl-batch-demo: error: {line}\n"))

    def test_a_mistyped_flag_or_command_gets_a_suggestion(self) -> None:
        for argv, line in (
            (["run", "--output", "x", "--cuont", "5"], "unknown flag --cuont; did you mean --count? "),
            (["run", "--outptu", "x"], "unknown flag --outptu; did you mean --output? "),  # not "required: --output"
            (["run", "--output", "x", "--paralelism=3"], "unknown flag --paralelism; did you mean --parallelism? "),
            (["rnu", "--output", "x"], "unknown command rnu; did you mean run? "),
            (["clenaup", "--output", "x"], "unknown command clenaup; did you mean cleanup? "),
            (["compare", "a", "--formt", "json"], "unknown flag --formt; did you mean --format? "),
            (["check", "--zzz"], "unknown flag --zzz "),
            (["run", "--output", "x", "surplus"], "unexpected argument surplus "),
            (["run"], "the following arguments are required: --output "),
            ([], "the following arguments are required: COMMAND "),
        ):
            command = argv[0] if argv and argv[0] in ("run", "compare", "check") else None
            where = f"{demo.invoked_as()} {command}" if command else demo.invoked_as()  # as the user started it
            with self.subTest(argv=argv):
                self.assert_usage_error(argv, f"{line}(see {where} --help)")

    def test_the_help_to_read_is_named_as_the_tool_was_started(self) -> None:
        for argv0, where in (
            ("/usr/local/bin/rl-batch-demo", "rl-batch-demo run"),
            ("/usr/local/bin/kubectl-rl_batch_demo", "kubectl rl-batch-demo run"),
            ("rl_batch_demo.py", "python3 "),
        ):
            with self.subTest(argv0=argv0), unittest.mock.patch.object(sys, "argv", [argv0]):
                code, _, err = self.run_main("run", "--output", "x", "--cuont", "5")
                self.assertEqual(code, demo.EXIT_USAGE)
                self.assertIn(f"(see {where}", err)
                self.assertTrue(err.endswith(" run --help)\n"), err)

    def test_no_flag_is_taken_for_an_abbreviation(self) -> None:
        """allow_abbrev=False on every parser: a prefix of a flag is an unknown flag."""
        for argv, prefix, flag in (
            (["run", "--output", "x", "--cou", "5"], "--cou", "--count"),
            (["run", "--out", "x"], "--out", "--output"),
            (["reproduce", "--output", "x", "--roun", "2"], "--roun", "--rounds"),
            (["cleanup", "--out", "x"], "--out", "--output"),
            (["check", "--runt", "gvisor"], "--runt", "--runtime"),
            (["compare", "a", "--form", "json"], "--form", "--format"),
            (["show-worker", "--temp"], "--temp", "--template"),
            (["--vers"], "--vers", "--version"),
        ):
            with self.subTest(argv=argv):
                code, _, err = self.run_main(*argv)
                self.assertEqual(code, demo.EXIT_USAGE)
                self.assertIn(f"unknown flag {prefix}; did you mean {flag}?", err)
        parser = demo.build_parser()
        for sub in [parser, *parser.commands.values()]:
            self.assertFalse(sub.allow_abbrev, sub.prog)

    def test_short_options_and_exact_flags_still_work(self) -> None:
        args = demo.build_parser().parse_command_line(["run", "-v", "--output=x", "--count", "3"])
        self.assertEqual((args.verbose, args.output, args.count), (True, "x", 3))
        for command in ("check", "cleanup", "run", "reproduce"):
            with self.subTest(command=command):
                argv = [command, *(["--output", "x"] if command != "check" else []), "-v"]
                self.assertTrue(demo.build_parser().parse_command_line(argv).verbose)
        code, out, _ = self.run_main("run", "-vh")  # -v -h: the help, not an unknown flag
        self.assertEqual(code, 0)
        self.assertIn("--verbose", out)

    def test_a_commands_options_are_added_when_first_read(self) -> None:
        """A command line uses one subcommand: the others' options are never built (cli.defer)."""
        parser = demo.build_parser()
        run, check = parser.commands["run"], parser.commands["check"]
        self.assertTrue(run.__dict__["_deferred"] and check.__dict__["_deferred"])  # read without _actions
        args = parser.parse_command_line(["run", "--output", "x", "--count", "3"])
        self.assertEqual((args.output, args.count, args.subparser), ("x", 3, run))
        self.assertEqual(run.__dict__["_deferred"], [])
        self.assertTrue(check.__dict__["_deferred"])
        # anything that reads the options adds them first: their help, as the API reads them
        self.assertIn("--runtime", check.format_help())
        self.assertEqual(check.__dict__["_deferred"], [])
        self.assertIn(
            "--max-failed-episodes", {o for a in demo.build_parser().commands["run"]._actions for o in a.option_strings}
        )

    def test_help_imports_no_difflib(self) -> None:
        """difflib is imported only when a usage error needs a suggestion: --help stays fast."""
        for argv, imported in ((["run", "--help"], False), (["run", "--cuont"], True)):
            with self.subTest(argv=argv):
                python, *module = tool_command(*argv)  # from its cached bytecode (tests/toolprocess.py)
                result = subprocess.run(
                    [python, "-X", "importtime", *module],
                    env=tool_environment(os.environ),
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                self.assertEqual(" difflib" in result.stderr or "| difflib" in result.stderr, imported, argv)

    def test_allow_large_raises_the_limit(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            code, out, _ = self.run_main(
                "run", "--output", f"{root}/dry", "--count", "200", "--allow-large", "--dry-run"
            )
            self.assertEqual(code, 0, out)
            job = json.loads(Path(root, "dry", "02-job-rollout.json").read_text())
            self.assertEqual(job["spec"]["completions"], 200)

    def test_cleanup_has_no_count_bound(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            code, _, err = self.run_main("cleanup", "--output", root)
        self.assertEqual(code, demo.EXIT_USAGE)
        self.assertIn("no receipt at", err)

    def test_unreadable_receipt_is_a_message(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            Path(root, "receipt.json").write_text("{not json")
            code, _, err = self.run_main("cleanup", "--output", root)
        self.assertEqual(code, demo.EXIT_USAGE)
        self.assertIn("cannot read the receipt", err)

    def test_dry_run_writes_manifests_and_touches_nothing(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            env = {"PATH": root}  # no kubectl anywhere: a call would fail
            with unittest.mock.patch.dict(os.environ, env):
                code, out, _ = self.run_main(
                    "run", "--output", f"{root}/dry", "--rounds", "2", "--runtime", "none", "--dry-run"
                )
            self.assertEqual(code, 0)
            names = sorted(p.name for p in Path(root, "dry").iterdir())
            self.assertEqual(
                names, ["00-namespace.json", "01-configmap.json", "02-job-rollout-1.json", "03-job-rollout-2.json"]
            )
            job = json.loads(Path(root, "dry", "02-job-rollout-1.json").read_text())
            self.assertNotIn("runtimeClassName", job["spec"]["template"]["spec"])
            self.assertIn("no cluster was contacted", out)

    def test_existing_output_is_refused(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            code, _, err = self.run_main("run", "--output", root, "--dry-run")
        self.assertEqual(code, demo.EXIT_USAGE)
        self.assertIn("already exists", err)

    def test_version_names_the_file_hash(self) -> None:
        code, out, _ = self.run_main("--version")
        self.assertEqual(code, 0)
        self.assertRegex(out, r"rl-batch-demo \d+\.\d+\.\d+ \(file sha256 [0-9a-f]{12}\)")


class WorkerTest(unittest.TestCase):
    """The embedded worker, run for real with this Python."""

    runs_concurrently = True  # only a subprocess and its own scratch directory: tests/concurrently.py

    def run_worker(self, workspace: Path, termination: Path) -> subprocess.CompletedProcess[str]:
        script = workspace.parent / "episode.py"
        script.write_text(demo.WORKER_SOURCE)
        env = dict(
            ENVIRONMENT,  # not os.environ, which a test in the main thread may have sealed
            EPISODE_ID="rollout-xyz",
            RL_DEMO_WORKSPACE=str(workspace),
            RL_DEMO_TERMINATION_LOG=str(termination),
        )
        return subprocess.run([image_python(), "-B", str(script)], env=env, capture_output=True, text=True, timeout=60)

    def test_baseline_fails_fix_passes_events_in_order(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            workspace = Path(root, "workspace")
            workspace.mkdir()
            termination = Path(root, "termination-log")
            result = self.run_worker(workspace, termination)
            self.assertEqual(result.returncode, 0, result.stderr)
            events = demo.parse_events(result.stdout)
            self.assertEqual([event["event"] for event in events], ["ready", "reward"])
            ready, reward = events
            self.assertEqual(ready["episode_id"], "rollout-xyz")
            self.assertLessEqual(ready["process_started_at"], ready["imports_done_at"])
            self.assertLessEqual(ready["imports_done_at"], ready["at"])
            self.assertLessEqual(ready["at"], reward["at"])
            self.assertNotEqual(reward["baseline_exit"], 0)
            self.assertEqual((reward["tests_exit"], reward["reward"]), (0, 1))
            self.assertIn("Ran 3 tests", reward["tests_output"])
            self.assertEqual(
                Path(workspace, "shipping.py").read_text(),
                "def shipping(total):\n    return 0 if total >= 99 else 10\n",
            )
            message = termination.read_text()
            self.assertLessEqual(len(message.encode()), MAX_TERMINATION_MESSAGE)
            self.assertEqual(demo.comparable_events(demo.parse_events(message)), demo.comparable_events(events))


if __name__ == "__main__":
    unittest.main()
