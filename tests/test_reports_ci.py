"""The CI reports (--junit, --metrics-file) and the kubectl plugin entry point.

The renderers are tested on hand-built results; two runs against the fake cluster check that a
real `run` writes both files, passing and failing; the plugin is run through a real kubectl
when one is on PATH."""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
import unittest.mock
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import rl_batch_demo as demo
from tests.clusterobjects import JOB_CREATED_AT, make_events, make_pod, results_of
from tests.fakecluster import write_executable
from tests.test_run import SCRIPT, ClusterTestCase
from tests.tiers import end_to_end
from tests.toolprocess import image_python

ROOT = Path(demo.__file__).resolve().parent

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\} (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def passing_results(rounds: int = 1, per_round: int = 3) -> dict[str, Any]:
    rows = []
    round_results = []
    for number in range(1, rounds + 1):
        job = demo.job_name_for(number, rounds)
        for index in range(per_round):
            name = f"{job}-{index}"
            pod = make_pod(name, finished=f"2026-11-29T10:00:0{index + 4}Z")
            events = make_events(name, JOB_CREATED_AT + 2.0 + index, JOB_CREATED_AT + 2.5 + index)
            row = demo.validate_episode(pod, events, JOB_CREATED_AT, None, "here")
            row["round"], row["job"] = number, job
            rows.append(row)
        round_results.append({"round": number, "job": job, "client_job_complete_seconds": 7.25 + number})
    return results_of(
        rows,
        image="python:3.12-alpine",
        parallelism=per_round,
        rounds=rounds,
        client_job_complete_seconds=9.25,
        round_results=round_results,
    )


def parse_junit(text: str) -> ElementTree.Element:
    root = ElementTree.fromstring(text.encode("utf-8"))
    assert root.tag == "testsuites"
    return root


def cases_of(root: ElementTree.Element) -> list[ElementTree.Element]:
    return root.findall("./testsuite/testcase")


def outcome(case: ElementTree.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Line by line, as the exposition format says: HELP, TYPE, then that family's samples together."""
    families: dict[str, list[tuple[dict[str, str], float]]] = {}
    current = None
    lines = text.split("\n")
    assert lines[-1] == "", "the file must end with a newline"
    for line in lines[:-1]:
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in families, f"family {name} appears twice"
            families[name] = []
            current = name
            assert "\n" not in line
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert (name, kind) == (current, "gauge"), line
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            assert match.group(1) == current, f"sample of {match.group(1)} outside its family"
            value = float(match.group(3))
            assert math.isfinite(value), line
            labels = {key: unescape(value) for key, value in LABEL.findall(match.group(2))}
            families[current].append((labels, value))
    return families


def unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], value)


class JunitPassingTest(unittest.TestCase):
    def test_one_suite_one_case_per_episode_and_threshold(self) -> None:
        results = passing_results()
        thresholds = {"pod_to_ready_p95_seconds": 5.0, "batch_to_all_rewards_seconds": 1.0}
        text = demo.render_junit_xml(
            demo.junit_suites(results, [], thresholds, (demo.EXIT_THRESHOLD, "latency budget breached", None)),
            {"namespace": "agc-rl-x"},
        )
        root = parse_junit(text)
        [suite] = root.findall("testsuite")
        self.assertEqual(suite.get("name"), "rl-batch-demo")
        self.assertEqual([suite.get(key) for key in ("tests", "failures", "errors", "skipped")], ["5", "1", "0", "0"])
        self.assertEqual(suite.get("time"), "8.250")
        self.assertEqual(root.get("tests"), "5")
        episodes = [case for case in cases_of(root) if case.get("classname") == "rl-batch-demo.rollout"]
        self.assertEqual([case.get("name") for case in episodes], ["rollout-0", "rollout-1", "rollout-2"])
        self.assertEqual([outcome(case) for case in episodes], ["passed"] * 3)
        # created -> finished, two whole-second stamps: whole seconds
        self.assertEqual([case.get("time") for case in episodes], ["3", "4", "5"])
        budgets = {
            case.get("name"): case for case in cases_of(root) if case.get("classname") == "rl-batch-demo.thresholds"
        }
        passed = budgets["threshold pod_to_ready_p95_seconds <= 5 s"]
        self.assertEqual(outcome(passed), "passed")
        # as precise as its clocks: the API server's whole seconds against the node's, tenths
        self.assertRegex(passed.findtext("system-out") or "", r"^pod_to_ready_p95_seconds = 2\.9 s, budget 5 s$")
        failed = budgets["threshold batch_to_all_rewards_seconds <= 1 s"]
        failure = failed.find("failure")
        assert failure is not None
        self.assertIn("batch_to_all_rewards_seconds = 4.5 s > 1 s", failure.get("message") or "")
        properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
        self.assertEqual(properties, {"job": "rollout", "namespace": "agc-rl-x", "round": "1"})

    def test_a_budget_on_an_unknown_figure_is_a_failure_as_the_exit_code_says(self) -> None:
        results = passing_results()
        results["batch_to_all_finished_seconds"] = None  # an episode without finishedAt
        thresholds = {"batch_to_all_finished_seconds": 10.0}
        self.assertEqual(len(demo.check_thresholds(results, thresholds)), 1)
        root = parse_junit(demo.render_junit_xml(demo.junit_suites(results, [], thresholds, None), {}))
        [case] = [case for case in cases_of(root) if case.get("classname") == "rl-batch-demo.thresholds"]
        self.assertEqual(outcome(case), "failure")
        failure = case.find("failure")
        assert failure is not None
        self.assertIn("batch_to_all_finished_seconds is unknown", failure.get("message") or "")

    def test_rounds_are_suites_and_test_names_are_unique(self) -> None:
        root = parse_junit(demo.render_junit_xml(demo.junit_suites(passing_results(rounds=2), [], {}, None), {}))
        suites = root.findall("testsuite")
        self.assertEqual([s.get("tests") for s in suites], ["3", "3"])
        self.assertEqual([s.get("time") for s in suites], ["8.250", "9.250"])
        self.assertEqual(root.get("time"), "17.500")
        keys = [(case.get("classname"), case.get("name")) for case in cases_of(root)]
        self.assertEqual(len(keys), len(set(keys)))
        self.assertEqual(keys[3], ("rl-batch-demo.rollout-2", "rollout-2-0"))

    def test_duplicate_names_get_a_suffix(self) -> None:
        case = demo._case("c", "same", 1.0)
        suites = [{"round": 1, "job": "rollout", "time": 1.0, "whole_seconds": True, "cases": [case, dict(case)]}]
        names = [c.get("name") for c in cases_of(parse_junit(demo.render_junit_xml(suites, {})))]
        self.assertEqual(names, ["same", "same #2"])


class JunitFailureTest(unittest.TestCase):
    def pods(self, *phases: str) -> list[dict[str, Any]]:
        return [make_pod(f"rollout-{index}", phase=phase) for index, phase in enumerate(phases)]

    def test_the_invalid_episode_fails_and_the_rest_are_not_judged(self) -> None:
        hostile = 'episode rollout-1: reward "<b>&\x1b[31m\x00\ud800\ufffe" ]]> ; inspect here'
        rounds = [
            {"round": 1, "job": "rollout-1", "pods": self.pods("Succeeded"), "job_object": None},
            {"round": 2, "job": "rollout-2", "pods": self.pods("Succeeded", "Failed", "Succeeded"), "job_object": None},
        ]
        rounds[1]["pods"][1]["metadata"]["name"] = "rollout-1"
        suites = demo.junit_suites(None, rounds, {"pod_to_ready_p95_seconds": 5.0}, (1, hostile, "rollout-1"))
        text = demo.render_junit_xml(suites, {"namespace": "agc-rl-x\x07"})
        root = parse_junit(text)  # well-formed despite the control characters
        first, second = root.findall("testsuite")
        self.assertEqual([outcome(c) for c in first.findall("testcase")], ["passed"])
        self.assertEqual(
            [(c.get("name"), outcome(c)) for c in second.findall("testcase")],
            [
                ("rollout-0", "skipped"),
                ("rollout-1", "failure"),
                ("rollout-2", "skipped"),
                ("threshold pod_to_ready_p95_seconds <= 5 s", "skipped"),
            ],
        )
        self.assertEqual([second.get(k) for k in ("tests", "failures", "errors", "skipped")], ["4", "1", "0", "3"])
        failure = second.find("testcase/failure")
        assert failure is not None
        message = failure.get("message") or ""
        self.assertIn('reward "<b>&\\x1b[31m\\x00\\ud800\\ufffe" ]]>', message)
        self.assertEqual(failure.text, message)
        self.assertNotIn("\x1b", text)
        self.assertIn("first invalid episode (rollout-1)", text)

    def test_a_pod_lost_to_the_infrastructure_is_skipped_not_passed(self) -> None:
        """--infra-retries: a lost attempt was run again, so it is no passing episode of its own,
        whether the run ended (results.json's lost_attempts) or failed in a later round."""
        results = passing_results(rounds=1, per_round=2)
        cause = "DisruptionTarget EvictionByEvictionAPI: Eviction API: evicting"
        results["pods"][0]["lost_attempts"] = [{"pod": "rollout-lost", "cause": cause, "created_at": JOB_CREATED_AT}]
        root = parse_junit(demo.render_junit_xml(demo.junit_suites(results, [], {}, None), {}))
        self.assertEqual(
            [(c.get("name"), outcome(c)) for c in cases_of(root)],
            [("rollout-0", "passed"), ("rollout-lost", "skipped"), ("rollout-1", "passed")],
        )
        self.assertIn(cause, demo.render_junit_xml(demo.junit_suites(results, [], {}, None), {}))
        lost = make_pod("rollout-1-lost", phase="Failed", exit_code=143)
        lost["status"]["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
        rounds = [
            {"round": 1, "job": "rollout-1", "pods": [lost, *self.pods("Succeeded")], "job_object": None},
            {"round": 2, "job": "rollout-2", "pods": self.pods("Failed"), "job_object": None},
        ]
        root = parse_junit(demo.render_junit_xml(demo.junit_suites(None, rounds, {}, (1, "m", "rollout-0")), {}))
        first = root.findall("testsuite")[0]
        self.assertEqual(
            [(c.get("name"), outcome(c)) for c in first.findall("testcase")],
            [("rollout-1-lost", "skipped"), ("rollout-0", "passed")],
        )

    def test_an_invalid_pod_missing_from_the_listing_still_has_its_case(self) -> None:
        rounds = [{"round": 1, "job": "rollout", "pods": None, "job_object": None}]
        root = parse_junit(demo.render_junit_xml(demo.junit_suites(None, rounds, {}, (1, "m", "rollout-x")), {}))
        self.assertEqual([(c.get("name"), outcome(c)) for c in cases_of(root)], [("rollout-x", "failure")])

    def test_a_timeout_is_an_error_case_and_the_episodes_are_skipped_with_their_phase(self) -> None:
        job = {
            "metadata": {"creationTimestamp": "2026-11-29T10:00:00Z"},
            "status": {
                "conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": "2026-11-29T10:04:00Z"}]
            },
        }
        rounds = [{"round": 1, "job": "rollout", "pods": self.pods("Pending", "Running"), "job_object": job}]
        message = "Job agc-rl-x/rollout hit its deadline of 240 s"
        root = parse_junit(demo.render_junit_xml(demo.junit_suites(None, rounds, {}, (4, message, None)), {}))
        [suite] = root.findall("testsuite")
        self.assertEqual(suite.get("time"), "240")  # the Job's whole-second stamps: no decimals
        cases = suite.findall("testcase")
        self.assertEqual([outcome(c) for c in cases], ["skipped", "skipped", "error"])
        skipped = cases[0].find("skipped")
        assert skipped is not None
        self.assertEqual(
            skipped.get("message"), "not validated: the run stopped (exit 4) with this pod in phase Pending"
        )
        error = cases[2].find("error")
        assert error is not None
        self.assertEqual((cases[2].get("classname"), cases[2].get("name")), ("rl-batch-demo", "run"))
        self.assertEqual(error.get("message"), message)

    def test_an_interruption_skips_the_unfinished_episodes(self) -> None:
        rounds = [{"round": 1, "job": "rollout", "pods": self.pods("Running"), "job_object": None}]
        root = parse_junit(demo.render_junit_xml(demo.junit_suites(None, rounds, {}, (130, "interrupted", None)), {}))
        skipped = cases_of(root)[0].find("skipped")
        assert skipped is not None
        self.assertIn("the run was interrupted with this pod in phase Running", skipped.get("message") or "")
        self.assertEqual(root.get("errors"), "1")

    def test_a_failure_before_any_job_is_one_suite_with_one_error(self) -> None:
        root = parse_junit(
            demo.render_junit_xml(demo.junit_suites(None, [], {}, (3, "cannot start kubectl", None)), {})
        )
        [suite] = root.findall("testsuite")
        self.assertEqual(suite.get("name"), "rl-batch-demo")
        self.assertEqual([(c.get("name"), outcome(c)) for c in cases_of(root)], [("run", "error")])

    def test_long_messages_are_shortened_in_the_attribute_only(self) -> None:
        message = "x" * 5000
        root = parse_junit(demo.render_junit_xml(demo.junit_suites(None, [], {}, (3, message, None)), {}))
        error = cases_of(root)[0].find("error")
        assert error is not None
        self.assertEqual(len(error.get("message") or ""), demo.JUNIT_MESSAGE_LIMIT)
        self.assertEqual(error.text, message)


class MetricsTest(unittest.TestCase):
    labels = {"runtime": "cube", "image": "python:3.12-alpine", "parallelism": "3"}  # noqa: RUF012

    def test_every_figure_as_a_gauge_with_its_labels(self) -> None:
        results = passing_results()
        families = parse_metrics(demo.render_metrics(results, self.labels, 0, 1764410400.5))
        self.assertEqual(families["rl_batch_demo_exit_code"], [(self.labels, 0.0)])
        self.assertEqual(families["rl_batch_demo_validated"], [(self.labels, 1.0)])
        self.assertEqual(families["rl_batch_demo_last_run_timestamp_seconds"], [(self.labels, 1764410400.5)])
        self.assertEqual(families["rl_batch_demo_episodes"], [(self.labels, 3.0)])
        for metric in demo.THRESHOLD_METRICS:
            [(labels, value)] = families[f"rl_batch_demo_{metric}"]
            self.assertEqual(labels, self.labels)
            self.assertAlmostEqual(value, results[metric])
        p95 = {labels["phase"]: value for labels, value in families["rl_batch_demo_phase_p95_seconds"]}
        self.assertAlmostEqual(p95["pod_to_ready"], results["phases"]["pod_to_ready_seconds"]["p95"])
        self.assertNotIn("pod_observed_to_ready", p95)  # no episode had it: no sample, never NaN
        for labels, _ in families["rl_batch_demo_phase_samples"]:
            self.assertEqual(set(labels), {"runtime", "image", "parallelism", "phase"})

    def test_each_help_names_the_clocks_and_the_resolution(self) -> None:
        text = demo.render_metrics(passing_results(), self.labels, 0, 1.0)
        helps = dict(line[len("# HELP ") :].split(" ", 1) for line in text.splitlines() if line.startswith("# HELP "))
        self.assertTrue(
            helps["rl_batch_demo_batch_to_all_finished_seconds"].endswith(
                "seconds; mixed: API server 1 s + runtime 1 s, to 1 s."
            )
        )
        self.assertTrue(helps["rl_batch_demo_client_job_complete_seconds"].endswith("client clock, to 0.001 ms."))
        phases = helps["rl_batch_demo_phase_p50_seconds"]
        for phase in demo.PHASES:
            precision = f"{phase[: -len('_seconds')]} {demo.clock_text(phase)}, to "
            self.assertIn(precision, phases)
        self.assertIn("reward_to_finished mixed: node + runtime 1 s, to 1 s.", phases)
        self.assertIn("kernel_boot_to_process_start kernel ticks, 10 ms clock, to 10 ms;", phases)

    def test_a_failed_run_has_its_exit_code_and_no_figures(self) -> None:
        families = parse_metrics(demo.render_metrics(None, self.labels, 4, 1.0))
        self.assertEqual(
            set(families), {f"rl_batch_demo_{n}" for n in ("exit_code", "validated", "last_run_timestamp_seconds")}
        )
        self.assertEqual(families["rl_batch_demo_validated"][0][1], 0.0)

    def test_label_values_are_escaped_and_non_finite_values_left_out(self) -> None:
        results = passing_results()
        results["batch_to_all_ready_seconds"] = float("nan")
        results["batch_to_all_rewards_seconds"] = float("inf")
        labels = {"runtime": 'evil"} 1\nfake_metric 2 \\', "image": "i", "parallelism": "1"}
        text = demo.render_metrics(results, labels, 0, 1.0)
        families = parse_metrics(text)
        self.assertNotIn("rl_batch_demo_batch_to_all_ready_seconds", families)
        self.assertNotIn("rl_batch_demo_batch_to_all_rewards_seconds", families)
        self.assertEqual(families["rl_batch_demo_exit_code"][0][0]["runtime"], labels["runtime"])
        self.assertNotRegex(text.lower(), r"\b(nan|inf)\b")


class PluginTest(unittest.TestCase):
    def usage(self, argv0: str) -> str:
        with unittest.mock.patch.object(sys, "argv", [argv0]):
            return demo.build_parser().format_usage()

    def test_the_name_it_was_started_as(self) -> None:
        for argv0, usage, command in (
            ("/usr/local/bin/kubectl-rl_batch_demo", "usage: kubectl rl-batch-demo ", "kubectl rl-batch-demo cleanup"),
            ("/opt/x/kubectl-rl_batch_demo.py", "usage: kubectl rl-batch-demo ", "kubectl rl-batch-demo cleanup"),
            ("/usr/local/bin/rl-batch-demo", "usage: rl-batch-demo ", "rl-batch-demo cleanup"),
            ("rl_batch_demo.py", "usage: rl-batch-demo ", "python3 "),
        ):
            with self.subTest(argv0=argv0):
                self.assertTrue(self.usage(argv0).startswith(usage))
                with unittest.mock.patch.object(sys, "argv", [argv0]):
                    cleanup = demo.cleanup_command(demo.invoked_as(), Path("out dir"))
                self.assertTrue(cleanup.startswith(command))
                self.assertTrue(cleanup.endswith("cleanup --output 'out dir'"))

    def test_a_removed_working_directory_is_no_crash(self) -> None:
        """Started from a directory that was removed (os.getcwd fails), the command to show is the
        script's absolute path, not a traceback."""
        removed = FileNotFoundError(2, "No such file or directory")
        with (
            unittest.mock.patch.object(sys, "argv", ["rl_batch_demo.py"]),
            unittest.mock.patch.object(os, "getcwd", side_effect=removed),
        ):
            command = demo.invoked_as()
        self.assertEqual(command, f"python3 {shlex.quote(demo.__file__)}")

    def test_plugin_main_sets_the_plugin_name(self) -> None:
        stdout = io.StringIO()
        with (
            unittest.mock.patch.object(sys, "argv", ["anything"]),
            contextlib.redirect_stdout(stdout),
            self.assertRaises(SystemExit),
        ):
            demo.plugin_main(["run", "--help"])
        self.assertTrue(stdout.getvalue().startswith("usage: kubectl rl-batch-demo run "))

    def test_the_package_installs_both_commands(self) -> None:
        text = (ROOT / "pyproject.toml").read_text()
        self.assertIn('rl-batch-demo = "rl_batch_demo:main"', text)
        self.assertIn('kubectl-rl_batch_demo = "rl_batch_demo:plugin_main"', text)

    def test_through_a_real_kubectl(self) -> None:
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            self.skipTest("no kubectl on PATH")
        with tempfile.TemporaryDirectory(prefix="rl-demo-plugin-") as folder:
            plugin = Path(folder) / "kubectl-rl_batch_demo"  # the single file, copied under the plugin's name
            source = Path(SCRIPT).read_text(encoding="utf-8").split("\n", 1)[1]
            write_executable(plugin, f"#!{image_python()}\n{source}")
            env = dict(os.environ, PATH=os.pathsep.join([folder, os.environ.get("PATH", "")]))
            listed = subprocess.run(
                [kubectl, "plugin", "list", "--name-only"], env=env, capture_output=True, text=True, timeout=60
            )
            if "kubectl-rl_batch_demo" not in listed.stdout:
                self.skipTest(f"{kubectl} is not a kubectl with plugin support ({listed.stderr.strip()[:80]})")
            result = subprocess.run(
                [kubectl, "rl-batch-demo", "--help"], env=env, capture_output=True, text=True, timeout=60
            )
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertTrue(result.stdout.startswith("usage: kubectl rl-batch-demo "), result.stdout[:200])
            result = subprocess.run(
                [kubectl, "rl-batch-demo", "run", "--help"], env=env, capture_output=True, text=True, timeout=60
            )
            self.assertIn("--junit FILE", result.stdout)


@end_to_end
class RunWritesReportsTest(ClusterTestCase):
    """Two real runs against the fake: the files exist and say what happened."""

    def test_a_passing_run(self) -> None:
        self.run_ok(
            "run", "--count", "2", "--output", "out", "--quiet",
            "--junit", "reports/junit.xml", "--metrics-file", "reports/rl.prom",
            "--threshold", "pod_to_ready_p95_seconds=120",
        )  # fmt: skip
        root = parse_junit((self.root / "reports" / "junit.xml").read_text())
        pods = [row["pod"] for row in self.results()["pods"]]
        episodes = [c for c in cases_of(root) if c.get("classname") == "rl-batch-demo.rollout"]
        self.assertEqual(sorted(c.get("name") or "" for c in episodes), sorted(pods))
        self.assertEqual([outcome(c) for c in cases_of(root)], ["passed"] * 3)
        self.assertEqual(root.get("failures"), "0")
        families = parse_metrics((self.root / "reports" / "rl.prom").read_text())
        self.assertEqual(
            families["rl_batch_demo_reward_sum"][0],
            ({"image": demo.DEFAULT_IMAGE, "parallelism": "2", "runtime": "cube"}, 2.0),
        )
        # written atomically: no temporary file is left beside them
        self.assertEqual(sorted(p.name for p in (self.root / "reports").iterdir()), ["junit.xml", "rl.prom"])

    def test_a_failing_run_names_the_failed_episode(self) -> None:
        self.cluster.set_faults({"episode": {"1": "exit1"}})
        result = self.tool(
            "run", "--count", "2", "--output", "out", "--quiet", "--junit", "junit.xml", "--metrics-file", "rl.prom"
        )
        self.assert_fails(result, demo.EXIT_EPISODE, "phase Failed")
        root = parse_junit((self.root / "junit.xml").read_text())
        failures = [c for c in cases_of(root) if outcome(c) == "failure"]
        self.assertEqual(len(failures), 1)
        failure = failures[0].find("failure")
        assert failure is not None
        self.assertIn(f"episode {failures[0].get('name')}: the pod ended in phase Failed", failure.get("message") or "")
        self.assertIn(failures[0].get("name") or "?", result.stderr)
        families = parse_metrics((self.root / "rl.prom").read_text())
        self.assertEqual(families["rl_batch_demo_exit_code"][0][1], 1.0)
        self.assertEqual(families["rl_batch_demo_validated"][0][1], 0.0)


if __name__ == "__main__":
    unittest.main()
