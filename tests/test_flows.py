"""The tool's flows in-process against call plans: run, rounds, cleanup, check, compare, interrupts.

Each test plans every kubectl call it expects (tests/callplan.py), with answers built from one
description of the cluster (tests/clusterobjects.py); the stub fails the test on any other call
and on any planned call never made. Figures are recomputed from the plan's own inputs."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import shlex
import unittest
import unittest.mock
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional

import rl_batch_demo as demo
from tests.callplan import (
    CONTEXT,
    ERR_NO_CURRENT_CONTEXT,
    SERVER,
    Call,
    CallPlanTestCase,
    Chunk,
    Cluster,
    MainThreadClock,
    Result,
    RunPlan,
    as_json,
    err_forbidden,
    err_unreachable,
)
from tests.clusterobjects import (
    IMAGE_ID,
    JOB_CREATED_AT,
    NAMESPACE,
    NAMESPACE_UID,
    RUN_ID,
    Batch,
    check_rows_and_batch_figures,
    namespace_object,
    node_object,
    runtimeclass_object,
)

SECOND_JOB_UID = "22222222-2222-4222-8222-000000000002"
ERR_FORBIDDEN_DELETE = err_forbidden("delete", "jobs", "batch")
ERR_FORBIDDEN_NAMESPACES = err_forbidden("create", "namespaces", namespace="", creating=True)


def fail_episode(batch: Batch, index: int) -> None:
    """The worker exited 1: the pod Failed, and with backoffLimit 0 so did the Job."""
    episode = batch.episodes[index]
    episode.phase, episode.exit_code = "Failed", 1


class RunPlanTestCase(CallPlanTestCase):
    def run_batch(self, plan: RunPlan, *argv: str, directory: str = "out") -> Any:
        self.expect(*plan.run())
        batch = plan.batch
        return self.run_ok("run", "--count", str(batch.count), "--output", str(self.out(directory)), *argv)

    def run_batch_failing(self, plan: RunPlan, *argv: str, directory: str = "out") -> Any:
        self.expect(*plan.run())
        return self.tool("run", "--count", str(plan.batch.count), "--output", str(self.out(directory)), *argv)

    def check_results_against_the_plan(self, plan: RunPlan, directory: str = "out") -> Dict[str, Any]:
        """Every file a finished run writes, and every figure, recomputed from the plan's batch."""
        batch = plan.batch
        out = self.out(directory)
        receipt = self.receipt(directory)
        self.assertEqual(
            receipt,
            {
                "context": CONTEXT,
                "server": SERVER,
                "namespace": NAMESPACE,
                "run_id": RUN_ID,
                "kubeconfig": None,
                "kubectl": self.stub.kubectl,
                "created_at": receipt["created_at"],
                "tool_version": receipt["tool_version"],
                "uid": NAMESPACE_UID,
                "jobs": [{"name": "rollout", "uid": batch.uid}],
                "job_uid": batch.uid,
            },
        )
        self.assertEqual(self.read_json("job-submitted.json", directory), batch.manifest())
        self.assertEqual(self.read_json("job.json", directory), batch.job_complete())
        self.assertEqual(self.read_json("pods.json", directory), demo.pod_list(batch.pods()))
        events_text = (out / "events.txt").read_text()
        self.assertEqual(events_text.count("SuccessfulCreate"), batch.count)
        for episode in batch.episodes:
            self.assertEqual((out / f"{episode.name}.log").read_text(), episode.log)

        results = self.results(directory)
        count = batch.count
        self.assertEqual((results["episodes"], results["successful_episodes"], results["reward_sum"]), (count,) * 3)
        self.assertEqual(
            (results["context"], results["namespace"], results["image"], results["run_id"]),
            (CONTEXT, NAMESPACE, demo.DEFAULT_IMAGE, RUN_ID),
        )
        self.assertEqual(
            (results["runtime"], results["parallelism"], results["cache_state"]),
            (plan.runtime, batch.parallelism, "cached"),  # every pod's Pulled event: already present
        )
        self.assertGreater(results["client_job_complete_seconds"], 0)
        self.assertEqual(results["job_created_at"], batch.created)
        self.assertLessEqual(results["client_submitted_at"], results["client_observed_complete_at"])
        complete = batch.job_complete()["status"]
        self.assertEqual(results["job_complete_at"], demo.parse_timestamp(complete["completionTime"]))
        self.assertEqual(results["job_success_criteria_met_at"], demo.parse_timestamp(complete["completionTime"]))

        expected_rows = {}
        for episode in batch.episodes:
            ready, reward = episode.events
            expected_rows[episode.name] = {
                "pod": episode.name,
                "node": episode.node,
                "image_id": IMAGE_ID,
                "reward": 1,
                "round": 1,
                "job": batch.job_name,
                "batch_start": batch.created,
                "created_at": episode.created,
                "ready_at": ready["at"],
                "reward_at": reward["at"],
                "finished_at": episode.finished,
                "container_started_at": episode.started,
                "scheduled_at": episode.created,
                "pod_to_ready_seconds": ready["at"] - episode.created,
                "batch_to_ready_seconds": ready["at"] - batch.created,
                "batch_to_reward_seconds": reward["at"] - batch.created,
                "python_import_seconds": ready["imports_done_at"] - ready["process_started_at"],
                "import_to_ready_seconds": ready["at"] - ready["imports_done_at"],
                "ready_to_reward_seconds": reward["at"] - ready["at"],
                "pod_to_container_started_seconds": episode.started - episode.created,
                "reward_to_finished_seconds": episode.finished - reward["at"],
                "pod_to_scheduled_seconds": 0.0,
                "overhead": {"cpu": "250m", "memory": "768Mi"} if plan.runtime else None,
            }
        check_rows_and_batch_figures(self, results, expected_rows, out)
        self.assertEqual(results["image_ids"], [IMAGE_ID])
        for row in results["pods"]:
            # Client-clock sightings from the pod watch: first seen, then Running, then Succeeded.
            self.assertIsNotNone(row["observed_first_seen_at"])
            self.assertLessEqual(row["observed_first_seen_at"], row["observed_running_at"])
            self.assertLessEqual(row["observed_running_at"], row["observed_succeeded_at"])
            self.assertAlmostEqual(
                row["pod_observed_to_ready_seconds"], row["ready_at"] - row["observed_first_seen_at"]
            )
        return results


class TranscriptTest(RunPlanTestCase):
    """docs/call-plan.md: a 10-episode run starts exactly these 10 kubectl processes, in
    these steps; the calls of one step run at once, each step after the one before."""

    def test_ten_episode_run_makes_these_ten_calls_in_six_steps(self) -> None:
        plan = RunPlan(Batch(count=10))
        calls = plan.run()
        # The two calls of a step that runs at once each answer only once the other has started:
        # made one after the other, the first would wait for a signal that never comes (a problem
        # the stub records), however fast or slow the machine.
        for first, second in ((1, 2),):  # runtimeclass and rules review
            self.assertEqual((calls[first].name, calls[second].name), ("", ""))
            calls[first] = dataclasses.replace(
                calls[first], name=f"at-once-{first}", wait_for=f"at-once-{second}.started"
            )
            calls[second] = dataclasses.replace(
                calls[second], name=f"at-once-{second}", wait_for=f"at-once-{first}.started"
            )
        self.expect(*calls)
        self.run_ok("run", "--count", "10", "--output", str(self.out()))
        uid = plan.batch.uid
        base = [f"--context={CONTEXT}", "--request-timeout=30s"]
        in_namespace = [*base, f"--namespace={NAMESPACE}"]
        watching = [f"--context={CONTEXT}", "--request-timeout=275s", f"--namespace={NAMESPACE}"]
        reading = [f"--context={CONTEXT}", f"--namespace={NAMESPACE}"]
        selector = f"batch.kubernetes.io/controller-uid={uid}"
        RAW_QUERY = "?fieldManager=kubectl-create&fieldValidation=Strict"
        steps = [
            [["config", "view", "--minify", "-o", "json"]],
            [
                [  # first, the watch for the namespace's default ServiceAccount, before the namespace exists
                    f"--context={CONTEXT}",
                    "--request-timeout=142s",  # the preflight's reads, the namespace's create, the wait after
                    f"--namespace={NAMESPACE}",
                    *("get", "serviceaccounts", "--field-selector", "metadata.name=default"),
                    *("-o", "json", "--output-watch-events", "--watch"),
                ],
                [*base, "get", "--raw", "/apis/node.k8s.io/v1/runtimeclasses/cube"],  # one request each
                # every permission at once, in one request (the rules prove them all: no access review)
                [*base, "create", "--raw", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", "-f", "-"],
            ],
            [[*base, "create", "-f", "-", "-o", "json", "--validate=strict"]],  # the namespace and the ConfigMap
            [  # the Job, one POST: no discovery, no OpenAPI download, strict validation by the server
                [*base, "create", "--raw", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs{RAW_QUERY}", "-f", "-"]
            ],
            [
                [
                    *watching,
                    *("get", "jobs", "--field-selector", "metadata.name=rollout"),
                    *("-o", "json", "--output-watch-events", "--watch"),
                ],
                [*watching, "get", "pods", "-l", selector, "-o", "json", "--output-watch-events", "--watch"],
                # while the pods run, their logs followed (LogFollower): no --request-timeout, which
                # would limit each log's transfer; ten streams at once
                [
                    *reading,
                    *("logs", "-f", "-l", f"{selector},{demo.INDEX_LABEL} in (0,1,2,3,4,5,6,7,8,9)", "-c", "episode"),
                    *("--prefix", "--tail=-1", "--ignore-errors", "--max-log-requests=10"),
                ],
            ],
            # after the decision, nothing left to read: started at once, beside the followed read's end
            [[*in_namespace, "get", "events", "-o", "json"]],
        ]
        recorded = self.recorded_calls()
        self.assertEqual(len(recorded), 10)
        self.assertLessEqual(len(recorded), 10)  # the project's budget for a 10-episode run
        first = recorded[0]
        job_create = [call for call in recorded if "create" in call["argv"]][-1]
        for call in recorded:
            if call.get("watch") and "serviceaccounts" not in call["argv"]:  # the Job's and its pods' watches
                # The client's time left when it started the watch: 275 s less what passed since
                # it submitted the Job, which is at least the create's own duration and at most
                # the time since the run's first call (ms records): 275 s unless a loaded machine
                # made the create take a second or more.
                flag = next(i for i, arg in enumerate(call["argv"]) if arg.startswith("--request-timeout="))
                timeout = int(call["argv"][flag][len("--request-timeout=") : -1])
                least = math.ceil(275 - (call["started"] - first["started"]) - 0.001)
                most = math.ceil(275 - job_create["seconds"] + 0.001)
                self.assertTrue(least <= timeout <= most, f"{timeout} s, not within [{least}, {most}]: {call}")
                call["argv"][flag] = "--request-timeout=275s"  # for the comparison with the steps
        # The two creates of the run's objects are prepared (Kubectl.prepare): each kubectl starts
        # during the step before its own, and is given its input once that step has ended. A step
        # begins when its calls are sent: at their start, or a prepared call's input.
        prepared = [call for call in recorded if "input_at" in call]
        self.assertEqual([call["argv"] for call in prepared], [steps[2][0], steps[3][0]])
        for call in prepared:
            self.assertLess(call["started"], call["input_at"], call)
            self.assertGreaterEqual(call["started"] + call["seconds"], call["input_at"], call)
        recorded.sort(key=lambda call: call.get("input_at", call["started"]))
        position = 0
        previous_end = previous_start = -1.0
        ends = [-1.0, -1.0]
        for step in steps:
            calls = recorded[position : position + len(step)]
            position += len(step)
            self.assertCountEqual([call["argv"] for call in calls], step)
            starts = [call.get("input_at", call["started"]) for call in calls]
            for call in calls:  # a prepared call: started once the step two before had ended
                if "input_at" in call:  # (its namespace's name known; the preflight passed)
                    self.assertGreaterEqual(call["started"], ends[-2] - 0.002, call)
            if step is steps[-1]:  # the events: after the step before began, not after its reads ended
                self.assertGreater(min(starts), previous_start, "the events were listed before the watches began")
            else:
                self.assertGreaterEqual(
                    min(starts), previous_end - 0.002, f"{step[0][-3:]} began before the step before ended"
                )
            previous_start = max(starts)
            # the account's watch goes on beside the step after its own, until the account is seen
            ending = [call for call in calls if "serviceaccounts" not in call["argv"]]
            previous_end = max(call["started"] + call["seconds"] for call in ending)
            ends.append(previous_end)
        sent = [
            [doc["kind"] for doc in demo.parse_json_documents(r["stdin"])] for r in self.stub.records() if r["stdin"]
        ]
        # the rules review; the namespace and the ConfigMap, one JSON document each; the Job
        self.assertEqual(sent, [["SelfSubjectRulesReview"], ["Namespace", "ConfigMap"], ["Job"]])
        [together] = [r["stdin"] for r in self.stub.records() if r["stdin"] and '"Namespace"' in r["stdin"]]
        self.assertNotIn('"List"', together)  # a List would be validated against /openapi/v2 (Kubectl.create_input)
        for call in recorded:
            self.assertIn("seconds", call)
            self.assertEqual(call.get("watch", False), "--watch" in call["argv"])
            self.assertEqual(call["exit"], -15 if call.get("watch") else 0)  # watches end with SIGTERM


class VerboseTest(RunPlanTestCase):
    """-v: each kubectl call on stderr as it ends, one escaped line each; without it, none."""

    CALL = re.compile(r"^\+ (?P<argv>.+)  # exit (?P<exit>-?\d+), (?P<seconds>\d+\.\d{3}) s$")

    def test_each_call_one_line_as_it_ends(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        result = self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet", "-v")
        shown = [self.CALL.match(line) for line in result.stderr.splitlines() if line.startswith("+ ")]
        self.assertTrue(all(shown), result.stderr)
        recorded = self.recorded_calls()  # kubectl-calls.json, in the order the calls started
        self.assertEqual(len(shown), len(recorded))
        self.assertCountEqual(
            [(shlex.split(match["argv"])[1:], int(match["exit"])) for match in shown if match],
            [(call["argv"], call["exit"]) for call in recorded],
        )
        self.assertEqual(shlex.split(shown[0]["argv"])[0], self.stub.kubectl)  # the binary the run uses
        ended = [match for match in shown if match and "--watch" in match["argv"]]
        self.assertEqual([int(match["exit"]) for match in ended], [-15] * 3)  # the tool ended every watch
        self.expect(*plan.cleanup())
        cleanup = self.run_ok("cleanup", "--output", str(self.out()), "--verbose")
        self.assertEqual(
            len([line for line in cleanup.stderr.splitlines() if self.CALL.match(line)]), len(plan.cleanup())
        )

    def test_quiet_without_it(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        result = self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        self.assertEqual(result.stderr.splitlines()[0], f"Test namespace: {NAMESPACE}")
        self.assertFalse([line for line in result.stderr.splitlines() if line.startswith("+ ")])

    def test_the_line_is_escaped_and_shell_quoted(self) -> None:
        kubectl = demo.Kubectl("kubectl", context="dev\x1b[2Jctx", kubeconfig=None, verbose=True)
        argv = kubectl.argv(["get", "pods", "-l", "a b"])
        with contextlib.redirect_stderr(io.StringIO()) as err:
            kubectl._ended(argv, {"exit": 0, "seconds": 0.25})
            kubectl._ended(argv, {"error": "timeout", "seconds": 60.0})
        self.assertEqual(
            err.getvalue(),
            "+ kubectl '--context=dev\\x1b[2Jctx' --request-timeout=30s get pods -l 'a b'  # exit 0, 0.250 s\n"
            "+ kubectl '--context=dev\\x1b[2Jctx' --request-timeout=30s get pods -l 'a b'  # no answer, killed, "
            "60.000 s\n",
        )


class RunTest(RunPlanTestCase):
    def test_parallel_ten(self) -> None:
        plan = RunPlan(Batch(count=10))
        result = self.run_batch(plan)
        self.check_results_against_the_plan(plan)
        self.assertIn("Job created -> all episodes ready", result.stdout)
        self.assertIn(f"Test namespace: {NAMESPACE}", result.stderr)
        self.assertIn(f"namespace {NAMESPACE} is kept; delete it with: python3 ", result.stderr)
        self.assertIn(f"cleanup --output {self.out()}", result.stderr)

    def test_the_events_are_listed_while_the_followed_logs_end(self) -> None:
        """Once the pod watch proved every pod final, only the events are left to list after the
        decision, and that listing does not wait for the followed read to end, nor for pods.json:
        here the followed read ends only once the listing has started (made after it, the
        listing would wait for the follow grace, and the logs would be read again)."""
        plan = RunPlan(Batch(count=2))
        calls = []
        for planned in plan.run():
            call = planned
            if planned.argv[-4:] == ["get", "events", "-o", "json"]:
                call = dataclasses.replace(planned, name="events-listing")
            elif "logs" in planned.argv and "-f" in planned.argv:
                chunks = (Chunk(planned.stdout), Chunk("", wait_for="events-listing.started"))
                call = dataclasses.replace(planned, stdout="", chunks=chunks)
            calls.append(call)
        self.assertEqual(sum(1 for call in calls if call.name == "events-listing"), 1)
        self.expect(*calls)
        self.run_ok("run", "--count", "2", "--output", str(self.out()))
        self.check_results_against_the_plan(plan)
        self.assertEqual(sum(1 for argv in self.stub.calls() if "logs" in argv), 1)  # the followed read alone

    def test_sequential(self) -> None:
        plan = RunPlan(Batch(count=4, parallelism=1))
        result = self.run_batch(plan, "--parallelism", "1", "--json")
        results = self.check_results_against_the_plan(plan)
        self.assertEqual(json.loads(result.stdout)["parallelism"], 1)
        [submitted] = [json.loads(r["stdin"]) for r in self.stub.records() if r["stdin"] and '"Job"' in r["stdin"]]
        self.assertEqual((submitted["spec"]["completions"], submitted["spec"]["parallelism"]), (4, 1))
        rows = sorted(results["pods"], key=lambda row: row["ready_at"])
        for earlier, later in zip(rows, rows[1:]):
            self.assertLessEqual(earlier["reward_at"], later["ready_at"])

    def test_json_summary_is_the_guides(self) -> None:
        result = self.run_batch(RunPlan(Batch(count=2)), "--json", "--quiet")
        summary = json.loads(result.stdout)
        self.assertNotIn("pods", summary)
        self.assertEqual(summary["reward_sum"], 2)
        self.assertEqual(summary, {key: value for key, value in self.results().items() if key != "pods"})
        self.assertEqual(result.stderr.count("created,"), 0)

    def test_progress_lines_when_not_quiet(self) -> None:
        result = self.run_batch(RunPlan(Batch(count=2)))
        self.assertRegex(
            result.stderr,
            rf"2 created, 0 running, 2 succeeded, 0 failed; \d+\.\d s elapsed, \d+ s left; {NAMESPACE}/rollout",
        )

    def test_progress_ends_with_the_final_state_when_the_pods_last_events_come_after_complete(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        job_watch, pod_watch = calls[5], calls[6]
        complete = dataclasses.replace(job_watch.chunks[-1], wait_for=None)  # before the pods' final events
        calls[5] = dataclasses.replace(job_watch, chunks=(*job_watch.chunks[:-2], complete))  # no ADDED: no update
        finals = [dataclasses.replace(chunk, wait_for="job-rollout.done") for chunk in pod_watch.chunks[-2:]]
        finals[0] = dataclasses.replace(finals[0], delay=0.05)
        calls[6] = dataclasses.replace(pod_watch, chunks=(*pod_watch.chunks[:-2], *finals))
        self.expect(*calls)
        result = self.run_ok("run", "--count", "2", "--output", str(self.out()))
        last = [line for line in result.stderr.splitlines() if line.endswith(f" left; {NAMESPACE}/rollout")][-1]
        self.assertIn("2 created, 0 running, 2 succeeded, 0 failed", last)

    def test_runtime_none(self) -> None:
        plan = RunPlan(Batch(count=2, runtime=None), runtime=None)
        calls = plan.run()
        with_runtimeclass = demo.access_review_list(NAMESPACE, True)
        calls[1] = plan.cluster.rules_review(with_runtimeclass, denied=(("get", "runtimeclasses"),))
        self.assertEqual(calls[1].argv, plan.preflight()[1].argv)  # the rules review, its rules narrower
        self.expect(*calls)
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--runtime", "none")
        self.check_results_against_the_plan(plan)
        self.assertIsNone(self.results()["runtime"])
        [job] = [json.loads(r["stdin"]) for r in self.stub.records() if r["stdin"] and '"Job"' in r["stdin"]]
        self.assertNotIn("runtimeClassName", job["spec"]["template"]["spec"])
        self.assertFalse([argv for argv in self.stub.calls() if any("runtimeclass" in arg for arg in argv)])
        # rules without `get runtimeclasses` prove what a run without a RuntimeClass needs: no access review
        self.assertFalse([r for r in self.stub.records() if r["stdin"] and "SelfSubjectAccessReview" in r["stdin"]])

    def test_rounds_and_their_cleanup(self) -> None:
        first = Batch(count=2, job_name="rollout-1")
        second = Batch(count=2, job_name="rollout-2", job_uid=SECOND_JOB_UID, created=JOB_CREATED_AT + 100)
        plan = RunPlan(first, second)
        self.expect(*plan.run())
        result = self.run_ok("run", "--count", "2", "--rounds", "2", "--output", str(self.out()))
        self.assertIn("episodes 2 x 2 round(s), parallelism 2: 4 succeeded", result.stdout)
        results = self.results()
        self.assertEqual((results["episodes"], results["rounds"], results["episodes_per_round"]), (4, 2, 2))
        self.assertEqual([r["job"] for r in results["round_results"]], ["rollout-1", "rollout-2"])
        self.assertEqual([r["job_uid"] for r in results["round_results"]], [first.uid, second.uid])
        self.assertEqual(results["job_created_at"], first.created)
        self.assertEqual({row["round"] for row in results["pods"] if row["job"] == "rollout-2"}, {2})
        for round_number, batch in ((1, first), (2, second)):
            round_dir = self.out() / f"round-{round_number}"
            self.assertEqual(json.loads((round_dir / "pods.json").read_text()), demo.pod_list(batch.pods()))
            self.assertEqual(json.loads((round_dir / "job-submitted.json").read_text()), batch.manifest())
            self.assertTrue((round_dir / f"{batch.episodes[0].name}.log").exists())
        self.assertEqual(
            self.receipt()["jobs"], [{"name": "rollout-1", "uid": first.uid}, {"name": "rollout-2", "uid": second.uid}]
        )
        self.assertNotIn("job_uid", self.receipt())
        self.expect(*plan.cleanup())
        cleanup = self.run_ok("cleanup", "--output", str(self.out()))
        self.assertIn(f"deleted Job {NAMESPACE}/rollout-1 and its pods", cleanup.stdout)
        self.assertIn(f"deleted Job {NAMESPACE}/rollout-2 and its pods", cleanup.stdout)
        self.assertIn(f"deleted namespace {NAMESPACE}", cleanup.stdout)

    def test_allow_large_reads_rewards_from_termination_messages(self) -> None:
        plan = RunPlan(Batch(count=30, parallelism=15))
        self.expect(*plan.run())
        self.run_ok(
            "run", "--count", "30", "--parallelism", "15", "--allow-large", "--output", str(self.out()), "--quiet"
        )
        results = self.results()
        self.assertEqual((results["episodes"], results["reward_sum"], len(results["pods"])), (30, 30, 30))
        calls = self.stub.calls()
        # each log followed while its pod ran, by sets of 10 completion indexes; none read after
        follows = [argv for argv in calls if "logs" in argv]
        self.assertTrue(all("-f" in argv for argv in follows), follows)
        self.assertEqual(len(follows), 3)
        self.assertEqual(len(calls), 12)

    def test_large_run_reads_only_the_logs_of_pods_without_a_message(self) -> None:
        batch = Batch(count=25)
        for index in (3, 7):
            batch.episodes[index].message = ""
        plan = RunPlan(batch)
        self.expect(*plan.run())  # their logs followed with the others', none read after the decision
        result = self.run_ok("run", "--count", "25", "--allow-large", "--output", str(self.out()))
        results = self.results()
        self.assertEqual((results["reward_sum"], results["pods_without_termination_message"]), (25, 2))
        logs = [argv for argv in self.stub.calls() if "logs" in argv]
        self.assertEqual(
            sorted(argv[argv.index("-l") + 1].split(" in ")[1] for argv in logs),
            ["(0,1,2,3,4,5,6,7,8,9)", "(10,11,12,13,14,15,16,17,18,19)", "(20,21,22,23,24)"],
        )
        self.assertIn("episode output: 2 pod(s) succeeded without a termination message", result.stdout)

    def test_existing_output_touches_no_cluster(self) -> None:
        self.out().mkdir()
        self.assert_fails(self.tool("run", "--output", str(self.out())), demo.EXIT_USAGE, "already exists")
        self.assertEqual(self.stub.calls(), [])

    def test_missing_runtime_class_creates_nothing(self) -> None:
        plan = RunPlan(runtime="gvisor")
        self.expect(
            *plan.preflight()[:1], plan.get_runtimeclass(exists=False), *plan.preflight()[2:], plan.refused_watch()
        )
        result = self.tool("run", "--runtime", "gvisor", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_CLUSTER, "RuntimeClass 'gvisor' does not exist", "--runtime none")
        self.assertFalse([argv for argv in self.stub.calls() if "create" in argv and argv != plan.preflight()[2].argv])
        self.assertNotIn("is kept", result.stderr)
        # Nothing exists in the cluster, so nothing of the run is kept: the same command works again.
        self.assertFalse(self.out().exists())
        self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
        again = RunPlan(Batch(runtime="gvisor"), runtime="gvisor")  # the RuntimeClass exists now
        self.expect(*again.run())
        self.run_ok("run", "--runtime", "gvisor", "--output", str(self.out()), "--quiet")
        self.assertEqual(self.results()["reward_sum"], again.batch.count)

    def test_a_failed_create_keeps_the_output(self) -> None:
        """From the first create on, the cluster may hold the run's objects: the receipt stays."""
        plan = RunPlan()
        self.expect(
            *plan.preflight(),
            plan.create_namespace_and_configmap().failing(ERR_FORBIDDEN_NAMESPACES),
            plan.serviceaccount_watch(present=False, ended_early=True),
        )
        result = self.tool("run", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_CLUSTER, "Forbidden")
        self.assertEqual(self.receipt()["namespace"], NAMESPACE)
        self.assertTrue((self.out() / "error.json").exists())
        self.assert_fails(self.tool("run", "--output", str(self.out())), demo.EXIT_USAGE, "already exists")

    def test_kubectl_not_on_path(self) -> None:
        empty = self.root / "empty-bin"
        empty.mkdir()
        with unittest.mock.patch.dict(os.environ, {"PATH": str(empty)}):
            result = self.tool("run", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_CLUSTER, "cannot start kubectl", "--kubectl PATH or set KUBECTL")
        self.assertFalse(self.out().exists())

    def test_threshold_breach_keeps_results(self) -> None:
        result = self.run_batch_failing(
            RunPlan(Batch(count=2)),
            "--threshold",
            "batch_to_all_ready_seconds=0.001",
            "--threshold",
            "pod_to_ready_max_seconds=100",
        )
        line = self.assert_fails(result, demo.EXIT_THRESHOLD, "batch_to_all_ready_seconds", "> 0.001 s")
        self.assertNotIn("pod_to_ready_max_seconds", line)
        self.assertEqual(self.results()["reward_sum"], 2)
        self.assertEqual(self.read_json("error.json")["exit_code"], demo.EXIT_THRESHOLD)

    def test_github_step_summary(self) -> None:
        summary = self.root / "summary.md"
        with unittest.mock.patch.dict(os.environ, {"GITHUB_STEP_SUMMARY": str(summary)}):
            self.run_batch(RunPlan(Batch(count=2)))
        self.assertIn("| batch_to_all_rewards_seconds |", summary.read_text())
        self.assertIn("### rl-batch-demo: 2/2 episodes, reward sum 2", summary.read_text())


class ContextAndBinaryTest(RunPlanTestCase):
    def test_context_kubeconfig_and_kubectl_pass_through(self) -> None:
        kubeconfig = str(self.root / "cluster.kubeconfig")
        Path(kubeconfig).write_text("# the stub never reads it\n")
        plan = RunPlan(Batch(count=2), cluster=Cluster(context="two", kubeconfig=kubeconfig))
        calls = plan.run()
        calls[0] = plan.cluster.config_view(bound=True)  # --context two: the view of that context
        self.expect(*calls)
        empty = self.root / "empty-bin"
        empty.mkdir()
        argv = ["--context", "two", "--kubeconfig", kubeconfig, "--kubectl", self.stub.kubectl]
        with unittest.mock.patch.dict(os.environ, {"PATH": str(empty)}):  # kubectl only through --kubectl
            self.run_ok("run", "--count", "2", *argv, "--output", str(self.out()))
            for call in self.stub.calls():
                self.assertIn(f"--kubeconfig={kubeconfig}", call)
                self.assertIn("--context=two", call)
            receipt = self.receipt()
            self.assertEqual(
                (receipt["context"], receipt["kubeconfig"], receipt["kubectl"]), ("two", kubeconfig, self.stub.kubectl)
            )
            self.expect(*plan.cleanup())
            self.run_ok("cleanup", "--output", str(self.out()))  # everything from the receipt

    def test_kubeconfig_from_the_environment_is_recorded(self) -> None:
        kubeconfig = str(self.root / "env.kubeconfig")  # one file: pinned with --kubeconfig on every call
        plan = RunPlan(Batch(count=2), cluster=Cluster(kubeconfig=kubeconfig))
        self.expect(*plan.run())
        with unittest.mock.patch.dict(os.environ, {"KUBECONFIG": kubeconfig}):
            self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        self.assertEqual(self.receipt()["kubeconfig"], kubeconfig)

    def test_a_kubeconfig_list_travels_in_the_environment(self) -> None:
        kubeconfigs = os.pathsep.join(str(self.root / name) for name in ("a.kubeconfig", "b.kubeconfig"))
        plan = RunPlan(Batch(count=2))  # a list cannot be a flag: no --kubeconfig on any call
        self.expect(*plan.run())
        with unittest.mock.patch.dict(os.environ, {"KUBECONFIG": kubeconfigs}):
            self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        self.assertEqual(self.receipt()["kubeconfig"], kubeconfigs)

    def test_kubectl_from_environment(self) -> None:
        kubeconfig = str(self.root / "k")
        cluster = Cluster(kubeconfig=kubeconfig)
        self.expect(*CheckTest.check_calls(cluster))
        empty = self.root / "empty-bin"
        empty.mkdir()
        with unittest.mock.patch.dict(os.environ, {"PATH": str(empty), "KUBECTL": self.stub.kubectl}):
            result = self.run_ok("check", "--kubeconfig", kubeconfig)
        self.assertIn("verdict: ready", result.stdout)


class ClusterAccessTest(RunPlanTestCase):
    """A cluster the tool cannot use: one line with the fix, quiet retries, no DIR left behind."""

    def test_an_unreachable_api_server(self) -> None:
        plan = RunPlan(Batch(count=2))
        config, runtimeclass, reviews = plan.preflight()
        self.expect(
            config,
            *[runtimeclass.failing(err_unreachable("get"))] * 4,  # a read: tried, then retried 3 times
            *[reviews.failing(err_unreachable("review"))] * 4,
            plan.refused_watch(),
        )
        result = self.tool("run", "--count", "2", "--output", str(self.out()))
        self.assertEqual(result.code, demo.EXIT_CLUSTER, result)
        self.assertEqual(
            result.stderr,
            f"rl-batch-demo: error: cannot reach the API server {SERVER} of context {CONTEXT} (connection refused); "
            f"check the network/VPN and that the cluster runs, or `kubectl --context {CONTEXT} cluster-info`\n",
        )
        self.assertFalse(self.out().exists())
        self.verify_plan()
        # once the server answers, the same command in the same --output works
        self.expect(*plan.run())
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")

    def test_the_api_server_going_away_mid_run(self) -> None:
        """A create the server never saw (kubectl's OpenAPI download failed) is not an adoption case."""
        plan = RunPlan(Batch(count=2))
        calls = plan.run()[:4]
        calls[3] = calls[3].failing(err_unreachable("create one"))  # the objects' documents, as one object's
        namespace_alone = plan.create_namespace().failing(err_unreachable("create one"))
        # refused on each try, then looked up (to adopt it if it was created after all): unreachable too
        lookup = plan.get_namespace(present=False).failing(err_unreachable("get"))
        self.expect(*calls, *[namespace_alone] * 4, *[lookup] * 4, plan.serviceaccount_watch(False, ended_early=True))
        result = self.tool("run", "--count", "2", "--output", str(self.out()), "-v")
        line = self.assert_fails(result, demo.EXIT_CLUSTER, f"cannot reach the API server {SERVER} of context")
        self.assertEqual(result.stderr.splitlines()[-1], line)
        self.assertEqual(result.stderr.count("warning: retrying the create of Namespace"), 3)
        self.assertEqual(result.stderr.count("warning: retrying `kubectl"), 3)
        self.assertTrue(self.out().exists())  # a create was sent: the receipt stays for cleanup
        self.assertIn("cleanup --output", result.stderr)

    def config_view_fails(
        self, message: str, *argv: str, env: Optional[Dict[str, str]] = None, **options: Any
    ) -> Result:
        cluster = Cluster(**options)
        self.expect(cluster.config_view(bound="context" in options).failing(message))
        home = self.root / "home"  # empty: no ~/.kube/config
        home.mkdir(exist_ok=True)
        with unittest.mock.patch.dict(os.environ, {"HOME": str(home), **(env or {})}):
            result = self.tool("run", "--output", str(self.out()), *argv)
        self.assertFalse(self.out().exists())
        return result

    def test_no_kubeconfig_at_all(self) -> None:
        result = self.config_view_fails(ERR_NO_CURRENT_CONTEXT)
        self.assert_fails(
            result,
            demo.EXIT_USAGE,
            "no kubeconfig: ~/.kube/config does not exist and $KUBECONFIG is not set",
            "--kubeconfig FILE",
        )

    def test_a_kubeconfig_that_does_not_exist(self) -> None:
        missing = str(self.root / "missing.kubeconfig")
        result = self.config_view_fails(ERR_NO_CURRENT_CONTEXT, "--kubeconfig", missing, kubeconfig=missing)
        self.assert_fails(result, demo.EXIT_USAGE, f"the kubeconfig file {missing} does not exist; check --kubeconfig")
        self.fresh_stub()
        missing = str(self.root / "missing.kubeconfig")
        result = self.config_view_fails(ERR_NO_CURRENT_CONTEXT, env={"KUBECONFIG": missing}, kubeconfig=missing)
        self.assert_fails(result, demo.EXIT_USAGE, f"no file in $KUBECONFIG exists ({missing}); check $KUBECONFIG")

    def test_a_kubeconfig_without_a_current_context(self) -> None:
        kubeconfig = self.root / "no-current.kubeconfig"
        kubeconfig.write_text("# the stub never reads it\n")
        result = self.config_view_fails(
            ERR_NO_CURRENT_CONTEXT, "--kubeconfig", str(kubeconfig), kubeconfig=str(kubeconfig)
        )
        self.assert_fails(
            result, demo.EXIT_USAGE, f"the kubeconfig ({kubeconfig}) sets no current context; pass --context"
        )

    def test_an_unknown_context(self) -> None:
        kubeconfig = self.root / "present.kubeconfig"
        kubeconfig.write_text("# the stub never reads it\n")
        argv = ("--context", "bogus", "--kubeconfig", str(kubeconfig))
        result = self.config_view_fails(
            "error: cannot locate context bogus", *argv, context="bogus", kubeconfig=str(kubeconfig)
        )
        self.assert_fails(result, demo.EXIT_USAGE, "context bogus is not in the kubeconfig; check --context")
        # kubectl says the same when the kubeconfig file is missing: the missing file is the fix
        self.fresh_stub()
        missing = str(self.root / "missing.kubeconfig")
        argv = ("--context", "prod", "--kubeconfig", missing)
        result = self.config_view_fails("error: cannot locate context prod", *argv, context="prod", kubeconfig=missing)
        self.assert_fails(result, demo.EXIT_USAGE, f"the kubeconfig file {missing} does not exist; check --kubeconfig")


class CleanupTest(CallPlanTestCase):
    """Cleanup from a receipt as `run` writes it (RunTest pins that receipt), edited per test."""

    def setUp(self) -> None:
        super().setUp()
        self.plan = RunPlan(Batch(count=2))
        self.out().mkdir()
        demo.write_receipt(
            self.out(),
            demo.Receipt(
                context=CONTEXT,
                server=SERVER,
                namespace=NAMESPACE,
                run_id=RUN_ID,
                kubectl=self.stub.kubectl,
                created_at=JOB_CREATED_AT - 5,
                tool_version="0.1.0+test",
                kubeconfig=None,
                uid=NAMESPACE_UID,
                jobs=[{"name": "rollout", "uid": self.plan.batch.uid}],
            ),
        )

    def edit_receipt(self, **changes: Any) -> None:
        receipt = self.receipt()
        for key, value in changes.items():
            if value is None:
                receipt.pop(key, None)
            else:
                receipt[key] = value
        (self.out() / "receipt.json").write_text(json.dumps(receipt))

    def cleanup(self, *argv: str) -> Any:
        return self.tool("cleanup", "--output", str(self.out()), *argv)

    def ownership_reads(self, namespace: Optional[Dict[str, Any]] = None, job: Any = "live") -> List[Call]:
        cluster = self.plan.cluster
        name = (namespace or namespace_object())["metadata"]["name"]
        calls = [cluster.config_view(bound=True), cluster.get("namespace", name, namespace or namespace_object())]
        return [*calls, cluster.get("job", "rollout", self.plan.batch.job() if job == "live" else job, name)]

    def assert_refused(self, *fragments: str) -> None:
        result = self.cleanup()
        self.assert_fails(result, demo.EXIT_REFUSED, *fragments, "nothing was deleted")
        self.assertFalse([argv for argv in self.stub.calls() if "delete" in argv])

    def test_happy_path_then_already_absent(self) -> None:
        (self.out() / "results.json").write_text("{}")
        self.expect(*self.plan.cleanup())
        result = self.run_ok("cleanup", "--output", str(self.out()))
        self.assertEqual(
            result.stdout,
            f"deleted Job {NAMESPACE}/rollout and its pods\ndeleted namespace {NAMESPACE}\n",
        )
        delete_job = [argv for argv in self.stub.calls() if "delete" in argv and "job" in argv]
        self.assertEqual(len(delete_job), 1)
        self.assertIn("--cascade=foreground", delete_job[0])
        self.expect(self.plan.cluster.config_view(bound=True), self.plan.get_namespace(present=False))
        again = self.run_ok("cleanup", "--output", str(self.out()))
        self.assertIn("already absent", again.stdout)
        self.assertTrue((self.out() / "results.json").exists())

    def test_namespace_uid_mismatch(self) -> None:
        self.edit_receipt(uid="00000000-0000-0000-0000-000000000000")
        self.expect(*self.ownership_reads())
        self.assert_refused("do not match the receipt")

    def test_label_mismatch(self) -> None:
        self.edit_receipt(run_id="ffffffffffff")
        self.expect(*self.ownership_reads())
        self.assert_refused("do not match the receipt", f"{demo.RUN_LABEL}={RUN_ID}")

    def test_job_uid_mismatch(self) -> None:
        self.edit_receipt(jobs=[{"name": "rollout", "uid": "00000000-0000-0000-0000-000000000000"}])
        self.expect(*self.ownership_reads())
        self.assert_refused(f"Job {NAMESPACE}/rollout has UID {self.plan.batch.uid}")

    def test_receipt_without_namespace_uid_is_proven_by_the_run_label(self) -> None:
        self.edit_receipt(uid=None)
        self.expect(*self.plan.cleanup())
        result = self.run_ok("cleanup", "--output", str(self.out()))
        self.assertIn("carries this run's labels", result.stdout)
        self.assertEqual(self.receipt()["uid"], NAMESPACE_UID)

    def test_receipt_without_namespace_uid_and_another_label_is_refused(self) -> None:
        self.edit_receipt(uid=None, run_id="ffffffffffff")
        self.expect(*self.ownership_reads())
        result = self.cleanup()
        self.assert_fails(result, demo.EXIT_REFUSED, "no namespace UID", "ownership cannot be proven")
        self.assertFalse([argv for argv in self.stub.calls() if "delete" in argv])

    def test_malformed_jobs_in_the_receipt(self) -> None:
        self.edit_receipt(jobs=[{"uid": "x"}])
        self.assert_fails(
            self.cleanup(), demo.EXIT_USAGE, "receipt.json is not one this tool writes: jobs[0].name is missing"
        )

    def test_older_receipt_uses_job_json(self) -> None:
        self.edit_receipt(jobs=None, job_uid=None)
        (self.out() / "job.json").write_text(as_json(self.plan.batch.job_complete()))
        self.expect(*self.plan.cleanup())
        self.run_ok("cleanup", "--output", str(self.out()))

    def test_guide_receipt_with_job_uid(self) -> None:
        self.edit_receipt(jobs=None, job_uid="00000000-0000-0000-0000-000000000000")  # job.json absent: job_uid rules
        self.expect(*self.ownership_reads())
        self.assert_refused("has UID")

    def test_another_cluster_behind_the_same_context_is_refused(self) -> None:
        self.edit_receipt(server="https://10.0.0.1:6443")
        self.expect(*self.ownership_reads())
        self.assert_refused("the run used the API server https://10.0.0.1:6443", f"now points at {SERVER}")

    def test_receipt_pointing_at_a_foreign_namespace(self) -> None:
        foreign = namespace_object("team-prod", uid="99999999-9999-4999-8999-999999999999")
        del foreign["metadata"]["labels"][demo.RUN_LABEL]
        self.edit_receipt(namespace="team-prod")
        # Not a name this tool gives: refused before any kubectl call (so no ownership reads).
        self.assertEqual(foreign["metadata"]["name"], "team-prod")
        self.assert_refused("team-prod")
        self.assertEqual(self.stub.calls(), [])

    def test_receipt_with_a_job_name_this_tool_never_gives(self) -> None:
        self.edit_receipt(jobs=[{"name": "-l", "uid": None}])
        self.assert_refused("not a name this tool gives")
        self.assertEqual(self.stub.calls(), [])

    def test_namespace_stuck_terminating(self) -> None:
        stuck = namespace_object()
        stuck["metadata"]["deletionTimestamp"] = "2026-11-29T10:05:00Z"
        stuck["status"] = {
            "phase": "Terminating",
            "conditions": [
                {
                    "type": "NamespaceFinalizersRemaining",
                    "status": "True",
                    "message": "Some content in the namespace has finalizers remaining: "
                    "example.com/hold in 1 resource instances",
                }
            ],
        }
        calls = self.plan.cleanup()[:-1]
        calls.append(dataclasses.replace(self.plan.get_namespace(), stdout=as_json(stuck), repeat=True))
        # watching namespaces is a cluster-wide right, and this user lacks it: the polls alone
        denied = 'Error from server (Forbidden): namespaces is forbidden: User "rl" cannot watch resource '
        denied += '"namespaces" in API group "" at the cluster scope'
        calls.append(self.plan.deletion_watch("namespace", NAMESPACE, 2, hold=False).failing(denied))
        self.expect(*calls)
        self.set_timing(cleanup_first_poll=0.25, cleanup_max_poll=2.0)  # the tool's own schedule
        waits = MainThreadClock()  # the waits take no time, and are recorded
        with unittest.mock.patch.object(demo, "time", waits):
            result = self.cleanup("--timeout", "1")
        self.assert_fails(
            result,
            demo.EXIT_TIMEOUT,
            "still Terminating after 1.3 s",  # 1 s and the garbage collector's time for the Job's 2 pods (0.3 s)
            "finalizers ['kubernetes']",
            "example.com/hold",
            "never removed",
        )
        calls_made = self.stub.calls()
        deleted = next(i for i, argv in enumerate(calls_made) if argv[-3:-1] == ["namespace", NAMESPACE])
        polls = [argv for argv in calls_made[deleted + 1 :] if "--watch" not in argv]
        # A poll at once, then after each wait: 0.25 s, doubling, only the last one cut short by
        # the deadline (1.3 s: 1 s and the garbage collector's time for the 2 pods). On an idle
        # machine that is 0, 0.25, 0.75 and 1.3 s; a loaded one, whose calls take longer, reaches
        # the deadline after fewer waits, on the same schedule. The first wait began on the watch,
        # which ended denied: what is left of its 0.25 s is slept.
        self.assertEqual(len(polls), len(waits.seconds) + 1, f"a poll after each wait: {polls}, {waits.seconds}")
        self.assertGreaterEqual(len(waits.seconds), 1)
        schedule = [0.25 * 2**number for number in range(len(waits.seconds))]
        self.assertLessEqual(waits.seconds[0], 0.25)
        self.assertEqual(waits.seconds[1:-1], schedule[1:-1], "not polled at 0.25 s doubling")
        self.assertLessEqual(waits.seconds[-1], schedule[-1])


class CleanupPolicyTest(RunPlanTestCase):
    def test_on_success_deletes_after_a_good_run(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run(), *plan.cleanup())
        result = self.run_ok("run", "--count", "2", "--output", str(self.out()), "--cleanup", "on-success")
        self.assertIn(f"deleted namespace {NAMESPACE}", result.stderr)
        self.assertNotIn("is kept", result.stderr)
        self.assertTrue((self.out() / "results.json").exists())

    def test_on_success_deletes_after_a_breached_threshold(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run(), *plan.cleanup())
        argv = ["--cleanup", "on-success", "--threshold", "batch_to_all_ready_seconds=0.001"]
        result = self.tool("run", "--count", "2", "--output", str(self.out()), *argv)
        self.assert_fails(result, demo.EXIT_THRESHOLD, "latency budget breached")
        self.assertIn(f"deleted namespace {NAMESPACE}", result.stderr)

    def test_on_success_keeps_a_failed_run(self) -> None:
        plan = RunPlan(Batch(count=2))
        fail_episode(plan.batch, 0)
        self.expect(*plan.run())
        result = self.tool("run", "--count", "2", "--output", str(self.out()), "--cleanup", "on-success")
        self.assert_fails(result, demo.EXIT_EPISODE, "phase Failed")
        self.assertIn(f"namespace {NAMESPACE} is kept", result.stderr)

    def test_always_deletes_after_a_failed_run_and_keeps_diagnostics(self) -> None:
        plan = RunPlan(Batch(count=2))
        fail_episode(plan.batch, 1)
        self.expect(*plan.run(), *plan.cleanup())
        result = self.tool("run", "--count", "2", "--output", str(self.out()), "--cleanup", "always")
        self.assert_fails(result, demo.EXIT_EPISODE, "phase Failed")
        self.assertIn(f"deleted namespace {NAMESPACE}", result.stderr)
        for name in ("job.json", "pods.json", "events.txt", "error.json", "kubectl-calls.json"):
            self.assertTrue((self.out() / name).exists(), name)
        self.assertFalse((self.out() / "results.json").exists())

    def test_a_failed_cleanup_after_a_good_run_is_the_error(self) -> None:
        plan = RunPlan(Batch(count=2))
        cleanup = plan.cleanup()
        self.expect(*plan.run(), *cleanup[:3], cleanup[3].failing(ERR_FORBIDDEN_DELETE))
        result = self.tool("run", "--count", "2", "--output", str(self.out()), "--cleanup", "always")
        self.assert_fails(result, demo.EXIT_CLUSTER, "delete job rollout", "Forbidden")
        self.assertIn("is kept", result.stderr)
        self.assertTrue((self.out() / "results.json").exists())

    def test_a_job_gone_between_its_read_and_its_delete_is_already_gone(self) -> None:
        """A round stopped early deletes its own Job without waiting: cleanup may read it and then
        find it gone at its delete (NotFound), which is what it wanted, so it goes on."""
        plan = RunPlan(Batch(count=2))
        cleanup = plan.cleanup()
        not_found = 'Error from server (NotFound): jobs.batch "rollout" not found'
        self.expect(*plan.run(), *cleanup[:3], cleanup[3].failing(not_found), *cleanup[5:])
        result = self.tool("run", "--count", "2", "--output", str(self.out()), "--cleanup", "always")
        self.assertEqual(result.code, 0, result)
        self.assertIn(f"Job {NAMESPACE}/rollout is already gone", result.stderr)
        self.assertIn(f"deleted namespace {NAMESPACE}", result.stderr)


class CheckTest(CallPlanTestCase):
    @staticmethod
    def check_calls(
        cluster: Cluster, runtime: Optional[str] = "cube", nodes: Optional[List[Any]] = None, denied: tuple = ()
    ) -> List[Call]:
        """`check`: config view, server version, the RuntimeClass, the nodes, the pods running there,
        every access review."""
        version = {"clientVersion": {"gitVersion": "v1.31.2"}, "serverVersion": {"gitVersion": "v1.31.1"}}
        calls = [cluster.config_view(), Call(cluster.args("version", "-o", "json"), stdout=as_json(version))]
        if runtime is not None:
            calls.append(cluster.get_runtimeclass(runtime, runtimeclass_object() if runtime == "cube" else None))
        nodes = [node_object("node-a"), node_object("node-b")] if nodes is None else nodes
        calls.append(cluster.get_list("nodes", nodes, namespace=None))
        calls.append(cluster.running_pods([]))
        calls.append(
            cluster.access_reviews(demo.NAMESPACE_PREFIX + "preflight", runtime is not None, denied, lists_nodes=True)
        )
        return calls

    def test_ready_cluster(self) -> None:
        self.expect(*self.check_calls(Cluster()))
        result = self.run_ok("check", "--count", "10")
        self.assertIn(f"context: {CONTEXT} (API server {SERVER})", result.stdout)
        self.assertIn("server version: v1.31.1", result.stdout)
        self.assertIn('RuntimeClass cube: handler cube, overhead {"cpu": "250m", "memory": "768Mi"}', result.stdout)
        self.assertIn("10 pods need 3.5 CPU and 8.1 GiB including 7.5 GiB of RuntimeClass overhead", result.stdout)
        self.assertIn("2 eligible nodes have 128.0 CPU, 512.0 GiB and 200.0 GiB of ephemeral storage", result.stdout)
        self.assertIn("permissions: all granted", result.stdout)
        self.assertIn("verdict: ready to run 10 episodes", result.stdout)

    def test_missing_runtime_class(self) -> None:
        self.expect(*self.check_calls(Cluster(), runtime="kata"))
        result = self.tool("check", "--runtime", "kata")
        self.assertEqual(result.code, demo.EXIT_CLUSTER, result)
        self.assertIn("verdict: NOT ready: RuntimeClass 'kata' does not exist", result.stdout)

    def test_too_little_capacity(self) -> None:
        self.expect(*self.check_calls(Cluster(), nodes=[node_object("tiny", cpu="1", memory="2Gi")]))
        result = self.tool("check", "--count", "10")
        self.assertEqual(result.code, demo.EXIT_CLUSTER, result)
        self.assertIn("not enough allocatable capacity", result.stdout)

    def test_run_limits_hold_before_any_call(self) -> None:
        """`check` refuses what `run` refuses, with run's words and exit 2, before any kubectl
        call (the plan is empty): a ready check means that the same run would start."""
        for argv, message in (
            (["--count", "21"], "--count 21 is more than 20; pass --allow-large for up to 1000"),
            (["--count", "1001", "--allow-large"], "--count 1001 is more than 1000, the most --allow-large allows"),
            (["--count", "1001"], "--count 1001 is more than 1000, the most --allow-large allows"),  # not "pass it"
            (["--count", "5", "--parallelism", "6"], "--parallelism 6 is more than --count 5"),
        ):
            with self.subTest(argv=argv):
                self.assert_fails(self.tool("check", *argv), demo.EXIT_USAGE, message)
        self.expect(*self.check_calls(Cluster()))
        self.assertIn(
            "verdict: ready to run 21 episodes", self.run_ok("check", "--count", "21", "--allow-large").stdout
        )

    def test_capacity_is_planned_for_the_parallelism(self) -> None:
        """Room for 2 episodes at once (1 CPU, 2 GiB; each 0.35 CPU and 0.81 GiB with the overhead):
        10 at once do not fit, 2 at a time do, and auto would run 2."""
        tiny = [node_object("tiny", cpu="1", memory="2Gi")]
        for argv, ready, detail, parallelism in (
            ([], False, "10 pods need 3.5 CPU", 10),
            (["--parallelism", "3"], False, "3 of 10 episodes at once (--parallelism 3): 3 pods need 1.0 CPU", 3),
            (["--parallelism", "2"], True, "2 of 10 episodes at once (--parallelism 2): 2 pods need 0.7 CPU", 2),
            (
                ["--parallelism", "auto"],
                True,
                "--parallelism auto would run 2 of 10 episodes at once; 1 eligible",
                "auto",
            ),
        ):
            with self.subTest(argv=argv):
                self.fresh_stub()
                self.expect(*self.check_calls(Cluster(), nodes=tiny))
                result = self.tool("check", "--count", "10", *argv, "--json")
                self.verify_plan()
                report = json.loads(result.stdout)
                [capacity] = [finding for finding in report["findings"] if finding["name"] == "capacity"]
                self.assertEqual((capacity["ok"], report["ready"]), (ready, ready), capacity)
                self.assertTrue(capacity["detail"].startswith(detail), capacity["detail"])
                self.assertEqual(report["parallelism"], parallelism)
        self.fresh_stub()
        self.expect(*self.check_calls(Cluster(), nodes=[node_object("tiny", cpu="100m", memory="2Gi")]))
        result = self.tool("check", "--parallelism", "auto")
        self.assertEqual(result.code, demo.EXIT_CLUSTER, result)
        self.assertIn("capacity: --parallelism auto: not even one episode fits now; 1 eligible node has", result.stdout)

    # What the real kubectl 1.32 prints when every path answers 404 with a plain-text body, as an
    # HTTP proxy or another web server does (tests/test_kubectl_contract.py, ForeignServerContract).
    DISCOVERY_404 = (
        'E1202 00:13:51.437281   11058 memcache.go:265] "Unhandled Error" err="couldn\'t get current server API '
        'group list: the server could not find the requested resource"'
    )
    FOREIGN: ClassVar[Dict[str, str]] = {
        "version": "Error from server (NotFound): the server could not find the requested resource",
        "get": "\n".join(
            [DISCOVERY_404] * 4 + ["Error from server (NotFound): the server could not find the requested resource"]
        ),
        "create": DISCOVERY_404
        + '\nerror: unable to recognize "STDIN": the server could not find the requested resource',
    }

    def foreign(self, call: Call) -> Call:
        """The call answered as a server that is not a Kubernetes API server answers it."""
        verb = next(word for word in call.argv if word in self.FOREIGN)
        return call.failing(self.FOREIGN[verb])

    def test_a_url_that_is_not_an_api_server_is_one_sentence_in_check_and_run(self) -> None:
        calls = self.check_calls(Cluster())
        self.expect(calls[0], *map(self.foreign, calls[1:]))
        result = self.tool("check")
        sentence = demo.not_an_api_server_message(SERVER, CONTEXT)
        self.assert_fails(result, demo.EXIT_CLUSTER, sentence)
        self.assertEqual(result.stdout, "")  # no finding line, no raw kubectl error
        self.assertEqual(result.stderr, f"rl-batch-demo: error: {sentence}\n")
        self.assertNotIn("Error from server", result.stderr)
        preflight = RunPlan().preflight()
        self.expect(preflight[0], *map(self.foreign, preflight[1:]), RunPlan().refused_watch())
        run = self.tool("run", "--output", str(self.out()))
        self.assert_fails(run, demo.EXIT_CLUSTER, sentence)
        self.assertEqual(run.stderr, f"rl-batch-demo: error: {sentence}\n")
        self.assertFalse(self.out().exists())  # nothing was created; the same --output works again

    def test_forbidden_read_is_a_problem_of_the_verdict(self) -> None:
        calls = self.check_calls(Cluster())
        calls[3] = calls[3].failing(err_forbidden("list", "nodes", namespace=""))
        self.expect(*calls)
        result = self.tool("check")
        self.assertEqual(result.code, demo.EXIT_CLUSTER, result)
        self.assertIn("verdict: NOT ready: cannot list nodes (Error from server (Forbidden):", result.stdout)

    def test_forbidden_permission(self) -> None:
        denied = (("create", "jobs"), ("get", "pods/log"))
        self.expect(*self.check_calls(Cluster(), denied=denied))
        result = self.tool("check")
        self.assertEqual(result.code, demo.EXIT_CLUSTER)
        self.assertIn("denied: create jobs.batch, get pods/log", result.stdout)
        self.expect(*RunPlan().preflight(denied=denied), RunPlan().refused_watch())
        run = self.tool("run", "--output", str(self.out()))
        self.assert_fails(run, demo.EXIT_CLUSTER, "lacks permissions", "create jobs.batch", "nothing was created")
        self.assertFalse([argv for argv in self.stub.records() if argv["stdin"] and '"Namespace"' in argv["stdin"]])

    def test_json_is_one_object_with_every_finding_and_the_verdict(self) -> None:
        self.expect(*self.check_calls(Cluster()))
        lines = self.run_ok("check", "--count", "10").stdout.splitlines()
        self.expect(*self.check_calls(Cluster()))
        result = self.run_ok("check", "--count", "10", "--json")
        report = json.loads(result.stdout)
        self.assertEqual(
            result.stdout, json.dumps(report, indent=2, sort_keys=True) + "\n"
        )  # sorted keys, nothing else
        self.assertEqual(
            sorted(report),
            ["context", "count", "exit_code", "findings", "parallelism", "problems", "ready", "server", "verdict"],
        )
        self.assertEqual((report["context"], report["server"], report["count"]), (CONTEXT, SERVER, 10))
        self.assertEqual((report["ready"], report["problems"], report["exit_code"]), (True, [], 0))
        self.assertEqual(report["verdict"], "ready to run 10 episodes")
        for finding in report["findings"]:
            self.assertEqual(sorted(finding), ["detail", "name", "ok", "problem"])
        # every finding the lines print, in their order, and the verdict line
        self.assertEqual(
            [f"{finding['name']}: {finding['detail']}" for finding in report["findings"]]
            + [f"verdict: {report['verdict']}"],
            lines,
        )

    def test_json_of_a_cluster_that_is_not_ready(self) -> None:
        self.expect(*self.check_calls(Cluster(), runtime="kata"))
        result = self.tool("check", "--runtime", "kata", "--json")
        self.assertEqual(result.code, demo.EXIT_CLUSTER, result)
        report = json.loads(result.stdout)
        self.assertEqual((report["ready"], report["exit_code"]), (False, demo.EXIT_CLUSTER))
        self.assertEqual(report["problems"], ["RuntimeClass 'kata' does not exist"])
        self.assertEqual(report["verdict"], "NOT ready: RuntimeClass 'kata' does not exist")
        failed = [finding for finding in report["findings"] if not finding["ok"]]
        self.assertEqual([finding["problem"] for finding in failed], report["problems"])


class CompareTest(RunPlanTestCase):
    def test_parallel_versus_sequential(self) -> None:
        self.run_batch(RunPlan(Batch(count=3)), "--quiet", directory="parallel")
        self.run_batch(RunPlan(Batch(count=3, parallelism=1)), "--parallelism", "1", "--quiet", directory="sequential")
        parallel, sequential = str(self.out("parallel")), str(self.out("sequential"))
        text = self.run_ok("compare", parallel, sequential).stdout
        # each value as precise as its clocks (the API server's whole seconds + the node's: tenths)
        self.assertRegex(text, r"\nall rewards\s+\d+\.\d s\s+\d+\.\d s \(x\d+\.\d\d\)\n")
        self.assertRegex(text, r"\nall finished \(cluster\)\s+\d+ s\s+\d+ s \(x\d+\.\d\d\)\n")
        self.assertRegex(text, r"\nreward -> container finished p50\s+< 1 s\s+< 1 s\n")  # no ratio, no negative
        markdown = self.run_ok("compare", parallel, sequential, "--format", "markdown").stdout
        self.assertTrue(markdown.startswith(f"| figure | {parallel} | {sequential} |"))
        data = json.loads(self.run_ok("compare", parallel, sequential, "--format", "json").stdout)
        self.assertEqual(data["runs"], [parallel, sequential])
        rewards = next(row for row in data["figures"] if row["figure"] == "batch_to_all_rewards_seconds")
        first, second = (self.results(d)["batch_to_all_rewards_seconds"] for d in ("parallel", "sequential"))
        self.assertAlmostEqual(rewards["ratios"][1], second / first)
        self.assertGreater(second / first, 2)  # three slots of 2 s against one
        self.run_batch(RunPlan(Batch(count=2)), "--quiet", directory="two")
        refused = self.tool("compare", parallel, str(self.out("two")))
        self.assert_fails(refused, demo.EXIT_USAGE, "different episode counts")
        self.run_ok("compare", parallel, str(self.out("two")), "--allow-different-counts")

    def test_a_hand_edited_or_foreign_results_file(self) -> None:
        """compare checks results.json against the schema before reading it: one line naming the
        file and the key, exit 2, never a traceback."""
        self.run_batch(RunPlan(Batch(count=2)), "--quiet")
        path = self.out() / "results.json"
        written = self.results()
        guide_keys = [*demo.THRESHOLD_METRICS, "episodes", "successful_episodes", "reward_sum", "pods", "context"]
        guide_keys += ["namespace", "image", "runtime", "parallelism", "cache_state"]  # as the guide's script writes
        guide = {key: written[key] for key in guide_keys}
        for edit, problem in (
            (lambda r: r["pods"][1]["image_pull"].pop("state"), "pods[1].image_pull.state is missing"),
            (lambda r: r.update(episodes="2"), "episodes is a string, not an integer"),
            (lambda r: r["phases"]["python_import_seconds"].update(p50=None), "python_import_seconds'].p50 is null"),
            (lambda r: r.update(runtime_operations={"handler": ""}), "runtime_operations.pooled is missing"),
            (lambda r: r.pop("round_results"), "round_results is missing"),
            (lambda r: r.clear() or r.update(guide), "reward_mean is missing"),  # the guide's own results.json
        ):
            edited = json.loads(json.dumps(written))
            edit(edited)
            path.write_text(json.dumps(edited))
            with self.subTest(problem=problem):
                self.assert_fails(
                    self.tool("compare", str(self.out())), demo.EXIT_USAGE, f"{path} is not a results file", problem
                )
        for text, problem in (
            ("[]", "the top level is a list, not an object"),
            ('{"episodes": NaN}', "NaN is not a JSON number"),
            ("[" * 100_000, "cannot read"),
        ):
            path.write_text(text)
            with self.subTest(problem=problem):
                self.assert_fails(self.tool("compare", str(self.out())), demo.EXIT_USAGE, str(path), problem)

    def test_a_run_without_results(self) -> None:
        self.out().mkdir()
        self.assert_fails(self.tool("compare", str(self.out())), demo.EXIT_USAGE, "did not finish successfully")


class InterruptTest(RunPlanTestCase):
    """Ctrl-C at three points, raised in-process at the call where a user's SIGINT would land;
    each followed by a cleanup that works. tests/test_run.py sends real signals to a real process."""

    def interrupt_at(self, when: Any) -> None:
        """Raise KeyboardInterrupt instead of starting the first kubectl call `when(argv, stdin)` picks.
        Only this plan's calls (its context): the patch is on the class, and a concurrent test's
        Kubectl (the contract tests', in a background thread) must not get the interruption."""
        original = demo.Kubectl._once

        def once(kubectl: demo.Kubectl, argv: List[str], stdin: Optional[str], timeout: float) -> Any:
            if f"--context={CONTEXT}" in argv and when(argv[1:], stdin):
                raise KeyboardInterrupt
            return original(kubectl, argv, stdin, timeout)

        patcher = unittest.mock.patch.object(demo.Kubectl, "_once", once)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_before_the_namespace_exists(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.interrupt_at(lambda argv, stdin: any("runtimeclass" in arg for arg in argv))
        self.expect(plan.cluster.config_view(), plan.preflight()[2], plan.refused_watch())  # beside it: the reviews
        result = self.tool("run", "--count", "2", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted; nothing was created in the cluster")
        self.assertNotIn("cleanup --output", result.stderr)  # nothing exists to clean up
        self.assertNotIn("saving diagnostics", result.stderr)
        self.assertFalse(self.out().exists())  # so the same --output works again

    def test_after_the_namespace_before_the_job(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.interrupt_at(lambda argv, stdin: bool(stdin) and demo.parse_json_documents(stdin)[0]["kind"] == "Job")
        saving = plan.cluster.get_list("pods,events", [])  # no Job yet: events only, then nothing more
        self.expect(*plan.run()[:4], saving, plan.serviceaccount_watch())
        result = self.tool("run", "--count", "2", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted")
        self.assertIn("interrupted: saving diagnostics", result.stderr)
        self.assertIn(f"cleanup --output {self.out()}", result.stderr)
        self.assertTrue((self.out() / "events.txt").exists())
        self.assertEqual(self.receipt()["jobs"], [{"name": "rollout", "uid": None}])
        self.expect(*plan.cleanup(jobs_present=False))
        self.run_ok("cleanup", "--output", str(self.out()))

    def mid_run(self, *argv: str, cleanup: bool = False) -> Any:
        """Interrupted while watching, as soon as the first pod is seen."""
        plan = RunPlan(Batch(count=2))
        patcher = unittest.mock.patch.object(demo, "record_pod_sighting", side_effect=KeyboardInterrupt)
        patcher.start()
        self.addCleanup(patcher.stop)
        batch = plan.batch
        job_watch = plan.job_watch(final=batch.job_running())  # never finishes: the run is interrupted first
        job_watch = dataclasses.replace(job_watch, chunks=job_watch.chunks[:1])
        pod_watch = plan.pod_watch(chunks=[plan_chunk for plan_chunk in plan.pod_watch().chunks[:1]])
        running = [batch.pod(episode, "running") for episode in batch.episodes]
        saving = [
            plan.cluster.get_list("pods,events", running),
            plan.get_job(batch.job_running()),
            plan.cluster.logs_by_selector(batch.selector, batch.prefixed_logs()),
        ]
        self.expect(
            *plan.run()[:5],
            job_watch,
            pod_watch,
            *saving,
            *(plan.cleanup() if cleanup else []),
            plan.serviceaccount_watch(),
        )
        result = self.tool("run", "--count", "2", "--output", str(self.out()), *argv)
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted")
        for name in ("receipt.json", "job.json", "pods.json", "events.txt", "kubectl-calls.json", "error.json"):
            self.assertTrue((self.out() / name).exists(), name)
        self.assertEqual(self.read_json("pods.json"), demo.pod_list(running))
        self.assertEqual(self.read_json("job.json"), batch.job_running())
        for episode in batch.episodes:
            self.assertEqual((self.out() / f"{episode.name}.log").read_text(), episode.log)
        self.assertFalse((self.out() / "results.json").exists())
        return plan, result

    def test_mid_run(self) -> None:
        plan, result = self.mid_run()
        self.assertIn("cleanup --output", result.stderr)
        self.expect(*plan.cleanup())
        self.run_ok("cleanup", "--output", str(self.out()))

    def test_a_second_ctrl_c_skips_the_saving_and_the_last_line_says_so(self) -> None:
        plan = RunPlan(Batch(count=2))
        for target, name in ((demo, "record_pod_sighting"), (demo.BatchRun, "save_after_interrupt")):
            patcher = unittest.mock.patch.object(target, name, side_effect=KeyboardInterrupt)
            patcher.start()
            self.addCleanup(patcher.stop)
        job_watch = plan.job_watch(final=plan.batch.job_running())
        job_watch = dataclasses.replace(job_watch, chunks=job_watch.chunks[:1])
        pod_watch = plan.pod_watch(chunks=list(plan.pod_watch().chunks[:1]))
        self.expect(*plan.run()[:5], job_watch, pod_watch, plan.serviceaccount_watch())
        result = self.tool("run", "--count", "2", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted; saving diagnostics was skipped, so")
        lines = result.stderr.splitlines()
        self.assertIn("skipped saving diagnostics", lines)
        self.assertNotIn("diagnostics are in", result.stderr)
        self.assertEqual(
            lines[-1],
            f"rl-batch-demo: error: interrupted; saving diagnostics was skipped, so {self.out()} holds only what "
            "the run wrote before (receipt.json, for cleanup)",
        )
        self.assertIn(f"cleanup --output {self.out()}", result.stderr)
        self.assertFalse((self.out() / "pods.json").exists())
        self.assertTrue((self.out() / "receipt.json").exists())

    def test_after_the_round_nothing_is_saved_over_it(self) -> None:
        """A Ctrl-C once the round's diagnostics are on disk (here while the results are
        published) reads nothing again: no listing, no log read (the plan has none, so one would
        fail the test), and the round's logs stay those its analysis read."""
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        patcher = unittest.mock.patch.object(demo, "publish", side_effect=KeyboardInterrupt)
        patcher.start()
        self.addCleanup(patcher.stop)
        result = self.tool("run", "--count", "2", "--output", str(self.out()))
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted")
        for episode in plan.batch.episodes:
            self.assertEqual((self.out() / f"{episode.name}.log").read_text(), episode.log)

    def test_mid_run_with_cleanup_always(self) -> None:
        _, result = self.mid_run("--cleanup", "always", cleanup=True)
        self.assertIn(f"deleted namespace {NAMESPACE}", result.stderr)
        self.assertNotIn("is kept", result.stderr)

    def test_interrupt_during_cleanup(self) -> None:
        plan = RunPlan(Batch(count=2))
        self.expect(*plan.run())
        self.interrupt_at(lambda argv, stdin: "delete" in argv)
        self.expect(*plan.cleanup()[:3])
        result = self.tool("run", "--count", "2", "--output", str(self.out()), "--cleanup", "always")
        self.assert_fails(result, demo.EXIT_INTERRUPTED, "interrupted during cleanup")
        self.assertIn("is kept", result.stderr)


if __name__ == "__main__":
    unittest.main()
