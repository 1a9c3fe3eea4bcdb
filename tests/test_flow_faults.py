"""The fault matrix as call plans: each row of docs/faults.md's table, answered by the stub.

Every failing run asserts the exit code, the one `rl-batch-demo: error:` line, the saved
diagnostics, that results.json is absent, and that no call touched another namespace or deleted
anything. API faults are kubectl's own words for them (tests/callplan.py), so the tool's retry
and adoption rules are tested against what kubectl really prints."""

from __future__ import annotations

import copy
import dataclasses
import unittest
import unittest.mock
from typing import Any, Callable, Dict, List

import rl_batch_demo as demo
from tests.callplan import (
    ERR_CLIENT_TIMEOUT,
    ERR_INTERNAL,
    ERR_INTERNAL_CREATE,
    ERR_REFUSED,
    ERR_TOO_MANY,
    ERR_UNAVAILABLE,
    Call,
    CallPlanTestCase,
    Result,
    RunPlan,
    as_json,
    err_already_exists,
    err_forbidden,
    err_log_unreadable,
    err_unreachable,
    watch_event,
)
from tests.clusterobjects import NAMESPACE, Batch, Episode, configmap_object, event_object, log_of, namespace_object


def rewrite_events(episode: Episode, change: Callable[[List[Dict[str, Any]]], List[Dict[str, Any]]]) -> None:
    """Change the worker's events in both its log and its termination message."""
    episode.log = log_of(change(demo.parse_events(episode.log)))
    episode.message = log_of(change(demo.parse_events(episode.message)))


def fail_episode(batch: Batch, index: int) -> None:
    episode = batch.episodes[index]
    episode.phase, episode.exit_code = "Failed", 1


class FaultTestCase(CallPlanTestCase):
    def run_plan(self, plan: RunPlan, calls: List[Call], *argv: str) -> Result:
        self.expect(*calls)
        return self.tool("run", "--count", str(plan.batch.count), "--output", str(self.out()), "--quiet", *argv)

    def assert_run_failed(self, result: Result, exit_code: int, *fragments: str, diagnostics: bool = True) -> str:
        line = self.assert_fails(result, exit_code, *fragments)
        out = self.out()
        self.assertFalse((out / "results.json").exists())
        error = self.read_json("error.json")
        self.assertEqual((error["exit_code"], f"rl-batch-demo: error: {error['message']}"), (exit_code, line))
        if diagnostics:
            for name in ("receipt.json", "job-submitted.json", "job.json", "pods.json", "events.txt"):
                self.assertTrue((out / name).exists(), name)
        self.assert_only_own_namespace_touched()
        return line

    def assert_only_own_namespace_touched(self) -> None:
        for argv in self.stub.calls():
            for flag in argv:
                if flag.startswith("--namespace="):
                    self.assertEqual(flag, f"--namespace={NAMESPACE}", argv)
            self.assertNotIn("delete", argv)


class EpisodeFaultTest(FaultTestCase):
    """One episode of two goes wrong; the run names it and the rule it broke."""

    def run_batch(self, batch: Batch, *argv: str) -> Result:
        plan = RunPlan(batch)
        return self.run_plan(plan, plan.run(), *argv)

    def test_pod_failed(self) -> None:
        batch = Batch(count=2)
        fail_episode(batch, 1)
        line = self.assert_run_failed(self.run_batch(batch), demo.EXIT_EPISODE, "phase Failed", "exit code 1")
        self.assertIn(f"episode {batch.episodes[1].name}: the pod ended in phase Failed (exit code 1, Error)", line)
        self.assertEqual(self.read_json("job.json"), batch.final_job())

    def test_pod_evicted(self) -> None:
        batch = Batch(count=2)
        batch.episodes[0].evicted, batch.episodes[0].phase = True, "Failed"
        self.assert_run_failed(
            self.run_batch(batch), demo.EXIT_EPISODE, "evicted (The node was low on resource: memory.)"
        )

    def test_pod_deleted_and_replaced_mid_run(self) -> None:
        self.set_timing(final_pods_grace_seconds=0.05)  # the watched pods never prove final here
        batch = Batch(count=2)
        replaced = batch.episodes[0]
        replaced.phase, replaced.exit_code, replaced.deleted_at = "Failed", 137, replaced.finished
        batch.add_episode()  # the replacement of the deleted pod
        plan = RunPlan(batch)
        self.assert_run_failed(
            self.run_plan(plan, plan.run()),
            demo.EXIT_EPISODE,
            f"episode {replaced.name}: the pod was deleted mid-run",
            "DeletionByTaintManager",
        )

    def test_extra_pod(self) -> None:
        self.set_timing(final_pods_grace_seconds=0.05)  # the watched pods never prove final here
        batch = Batch(count=2)
        batch.add_episode()  # three pods succeeded for two episodes
        plan = RunPlan(batch)
        self.assert_run_failed(
            self.run_plan(plan, plan.run()),
            demo.EXIT_EPISODE,
            "the Job has 3 pods but 2 episodes were requested",
            "rollout-p0000, rollout-p0001, rollout-p0002",
        )

    def test_duplicate_ready_event(self) -> None:
        batch = Batch(count=2)
        rewrite_events(batch.episodes[0], lambda events: [events[0], *events])
        self.assert_run_failed(self.run_batch(batch), demo.EXIT_EPISODE, "found 2 ready and 1 reward")

    def test_missing_reward(self) -> None:
        batch = Batch(count=2)
        rewrite_events(batch.episodes[1], lambda events: events[:1])
        self.assert_run_failed(self.run_batch(batch), demo.EXIT_EPISODE, "found 1 ready and 0 reward")

    def test_noise_lines_are_ignored(self) -> None:
        batch = Batch(count=2)
        for episode in batch.episodes:
            episode.log = 'WARNING: runtime noise\n{"level": "info", "msg": "structured"}\n' + episode.log
        self.expect(*RunPlan(batch).run())
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        self.assertEqual(self.results()["reward_sum"], 2)

    def test_malformed_event_in_both_sources(self) -> None:
        batch = Batch(count=2)
        episode = batch.episodes[0]
        episode.log += '{"event": "reward", "at": \n'
        episode.message += '{"event": "reward", "at": \n'
        self.assert_run_failed(
            self.run_batch(batch),
            demo.EXIT_EPISODE,
            f"episode {episode.name}: its termination message has a bad event: line 3 is a malformed JSON event",
        )

    def test_malformed_event_in_the_log(self) -> None:
        batch = Batch(count=2)
        batch.episodes[1].log += '{"event": "reward", "at": \n'
        self.assert_run_failed(
            self.run_batch(batch), demo.EXIT_EPISODE, "its log has a bad event: line 3 is a malformed JSON event"
        )

    def test_clock_skew(self) -> None:
        batch = Batch(count=2)
        rewrite_events(batch.episodes[0], lambda events: [dict(event, at=event["at"] - 3600) for event in events])
        self.assert_run_failed(
            self.run_batch(batch), demo.EXIT_EPISODE, "timestamps out of order", "clock synchronisation"
        )

    def test_node_clock_ahead(self) -> None:
        batch = Batch(count=2)
        rewrite_events(batch.episodes[1], lambda events: [events[0], dict(events[1], at=events[1]["at"] + 5)])
        self.assert_run_failed(self.run_batch(batch), demo.EXIT_EPISODE, "the clock the worker reads runs ahead")

    def test_restart(self) -> None:
        batch = Batch(count=2)
        batch.episodes[1].restarts = 1
        self.assert_run_failed(self.run_batch(batch), demo.EXIT_EPISODE, "restarted 1 times")

    def test_wrong_episode_id(self) -> None:
        batch = Batch(count=2)
        rewrite_events(batch.episodes[0], lambda events: [dict(event, episode_id="someone-else") for event in events])
        self.assert_run_failed(self.run_batch(batch), demo.EXIT_EPISODE, "episode_id 'someone-else'")

    def test_logs_unavailable_says_why(self) -> None:
        batch = Batch(count=2)
        plan = RunPlan(batch)
        unreadable = batch.episodes[1].name
        calls = plan.run()[:-2] + plan.run()[-1:]  # all but the logs followed
        # The followed read goes on past a stream that fails (--ignore-errors: kubectl's `error:`
        # line instead, which names the pod). That pod is then read alone: InternalError is
        # transient, so that read is retried three times.
        message = err_log_unreadable(unreadable).split(": ", 1)[1]
        [follow] = plan.follows(batch)
        calls += [dataclasses.replace(follow, stdout=batch.prefixed_logs(batch.episodes[:1]) + f"error: {message}\n")]
        calls += [plan.cluster.logs_of(unreadable, "").failing(err_log_unreadable(unreadable))] * 4
        result = self.run_plan(plan, calls, "-v")
        self.assert_run_failed(
            result, demo.EXIT_EPISODE, f"episode {unreadable}: its log could not be read", "InternalError"
        )
        self.assertEqual(result.stderr.count("warning: retrying `kubectl"), 3)
        self.assertEqual((self.out() / f"{unreadable}.log").read_text(), "")
        self.assertEqual((self.out() / f"{batch.episodes[0].name}.log").read_text(), batch.episodes[0].log)
        self.assertEqual(
            sorted(p.name for p in self.out().glob("*.log")), sorted(f"{e.name}.log" for e in batch.episodes)
        )

    def test_termination_message_disagrees_with_the_log(self) -> None:
        batch = Batch(count=2)
        episode = batch.episodes[0]
        # a message that passes every rule alone (a failure found from it would be final: issue 29)
        episode.message = log_of([*demo.parse_events(episode.message)[:1], dict(episode.events[1], note="forged")])
        self.assert_run_failed(self.run_batch(batch), demo.EXIT_EPISODE, "different events")

    def test_runtime_without_termination_message_falls_back_to_logs(self) -> None:
        batch = Batch(count=2)
        for episode in batch.episodes:
            episode.message = ""
        self.expect(*RunPlan(batch).run())
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        self.assertEqual(self.results()["reward_sum"], 2)

    def test_job_deadline_exceeded(self) -> None:
        self.set_timing(final_pods_grace_seconds=0.5)  # waited out: the watched pods never settle here
        batch = Batch(count=2)
        plan = RunPlan(batch)
        stuck = batch.episodes[0]
        pending = batch.pod(stuck, "pending")
        unschedulable = "0/2 nodes are available: 2 Insufficient cpu."
        pending["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        ]
        warning = event_object("Pod", stuck.name, "FailedScheduling", unschedulable, batch.created + 1, "Warning", 99)
        deadline = event_object(
            "Job", "rollout", "DeadlineExceeded", "Job was active longer", batch.created + 240, "Warning", 98
        )
        final = batch.job_failed("DeadlineExceeded", "Job was active longer than specified deadline")
        calls = [*plan.run()[:5], plan.serviceaccount_watch()]
        calls += [
            plan.job_watch(final=final),
            plan.pod_watch(
                chunks=[watch_event("ADDED", pending), watch_event("MODIFIED", batch.pod(batch.episodes[1]))]
            ),
            plan.cluster.get_list("pods,events", [pending, batch.pod(batch.episodes[1]), warning, deadline]),
            # the one that ran: followed (at the decision: the Job failed, its pods may go with it)
            *plan.follows(batch, [pending, batch.pod(batch.episodes[1])], complete=False),
            plan.cluster.logs_of(stuck.name, "").failing(
                f'Error from server (BadRequest): container "episode" in pod "{stuck.name}" is waiting to start: '
                "ContainerCreating"
            ),
        ]
        result = self.run_plan(plan, calls)
        self.assert_run_failed(
            result,
            demo.EXIT_TIMEOUT,
            f"Job {NAMESPACE}/rollout hit its deadline of 240 s",
            f"latest warning: FailedScheduling: {unschedulable}",
        )
        self.assertEqual((self.out() / f"{stuck.name}.log").read_text(), "")


class ApiFaultTest(FaultTestCase):
    """Failures of the API server or the connection to it, on creates and on reads."""

    def lookup_call(self, plan: RunPlan, kind: str, present: bool) -> Call:
        if kind == "Namespace":
            return plan.get_namespace(present)
        if kind == "ConfigMap":
            return plan.get_configmap(present)
        return plan.get_job(plan.batch.job() if present else None)

    def ambiguous_create(self, kind: str, error: str, applied: bool) -> None:
        """An ambiguous failure of one object's create: it is looked up and adopted only when it
        exists. Namespace and ConfigMap share one `create` of a List, which kubectl carries on
        past a failed item: the answer holds the other object when it was created."""
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        if kind == "Job":
            calls[4:5] = [calls[4].failing(error), self.lookup_call(plan, kind, applied)]
            stop = 6
        else:
            other = configmap_object() if kind == "Namespace" else namespace_object()
            # A namespace that was never stored takes its ConfigMap's create down with it.
            answered = as_json(other) if (kind == "ConfigMap" or applied) else ""
            calls[3:4] = [calls[3].failing(error, stdout=answered), self.lookup_call(plan, kind, applied)]
            stop = 5
        if not applied:
            calls = [*calls[:stop], plan.serviceaccount_watch(ended_early=True)]
        result = self.run_plan(plan, calls)
        creates = [argv for argv in self.stub.calls() if "create" in argv]
        if applied:
            self.assertEqual(result.code, 0, result)
            self.assertIn(f"warning: adopted {kind} ", result.stderr)
            self.assertEqual(self.results()["reward_sum"], 2)
            self.assertEqual(len(creates), 3)  # access reviews, namespace with ConfigMap, Job: none repeated
        else:
            line = self.assert_run_failed(
                result,
                demo.EXIT_CLUSTER,
                f"creating {kind}",
                "does not exist",
                "nothing was repeated",
                diagnostics=False,
            )
            self.assertIn("run cleanup, then try again", line)
            self.assertEqual(len(creates), 3 if kind == "Job" else 2)
            # From the namespace's create on, the namespace may exist, unless the lookup said it does not.
            self.assertEqual(f"namespace {NAMESPACE} is kept" in result.stderr, kind != "Namespace")

    def test_server_error_on_each_create(self) -> None:
        for kind in ("Namespace", "ConfigMap", "Job"):
            for applied in (True, False):
                with self.subTest(kind=kind, applied=applied):
                    self.fresh_stub()
                    self.ambiguous_create(kind, ERR_INTERNAL_CREATE, applied)
                    self.verify_plan()

    def test_client_timeout_on_each_create(self) -> None:
        for kind in ("Namespace", "ConfigMap", "Job"):
            with self.subTest(kind=kind):
                self.fresh_stub()
                self.ambiguous_create(kind, ERR_CLIENT_TIMEOUT, applied=True)
                self.verify_plan()

    def test_kubectl_killed_during_a_create_adopts(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        # The combined create hangs and is killed: both objects are looked up, and adopted by their label.
        lookup = dataclasses.replace(plan.get_namespace(), name="lookup")
        calls[3:4] = [dataclasses.replace(calls[3], sleep=10), lookup, plan.get_configmap()]
        # As long as the create may take, and the wait; the account is there once the namespace is
        # found (the killed create never says it is done, and the run would wait out the account).
        watch = plan.serviceaccount_watch(kubectl_timeout=30)
        calls[-1] = dataclasses.replace(watch, chunks=[dataclasses.replace(watch.chunks[0], wait_for="lookup.done")])
        # Only the hanging create is cut short (at 0.5 s); every other call keeps the 30 s, which
        # a loaded machine's slowest call stays far below (a 1 s timeout for all of them did not).
        self.shorten_process_timeouts(lambda argv, stdin: '"Namespace"' in (stdin or ""))
        result = self.run_plan(plan, calls, "--kubectl-timeout", "30")
        self.assertEqual(result.code, 0, result)
        self.assertIn("adopted Namespace", result.stderr)
        self.assertIn("adopted ConfigMap", result.stderr)
        self.assertIn("did not answer within 30 s", result.stderr)
        self.assertNotIn("ServiceAccount is not there yet", result.stderr)

    def test_refused_create_is_repeated(self) -> None:
        # kubectl's words for the objects' documents and for one object: unreachable (the OpenAPI
        # download for validation failed, so nothing was sent: from 1.29 as one object's, up to
        # 1.28 "The connection to the server ... was refused"), or 429
        unreachable = err_unreachable("create one")
        for combined, alone in ((unreachable, unreachable), (ERR_REFUSED, unreachable), (ERR_TOO_MANY,) * 2):
            with self.subTest(error=combined):
                self.fresh_stub()
                plan = RunPlan(Batch(count=2))
                calls = plan.run()
                # The combined create never reached the server: each object is then created alone,
                # the ConfigMap refused once more, then created.
                calls[3:4] = [
                    calls[3].failing(combined),
                    plan.create_namespace(),
                    plan.create_configmap().failing(alone),
                    plan.create_configmap(),
                ]
                result = self.run_plan(plan, calls, "-v")
                self.assertEqual(result.code, 0, result)
                self.assertIn("warning: retrying the create of ConfigMap episode after:", result.stderr)
                self.verify_plan()

    def test_already_exists_and_ours_is_adopted(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        calls[4:5] = [calls[4].failing(err_already_exists("jobs.batch", "rollout")), plan.get_job(plan.batch.job())]
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        self.assertIn("warning: adopted Job rollout after an ambiguous create", result.stderr)

    def test_already_exists_and_not_ours_is_refused(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = [*plan.run()[:4], plan.serviceaccount_watch(ended_early=True)]
        foreign = namespace_object(run_id="ffffffffffff")
        # kubectl goes on to the ConfigMap, which then lands in someone else's namespace: the
        # tool stops at the namespace, before it would adopt anything.
        calls[3:4] = [
            calls[3].failing(err_already_exists("namespaces", NAMESPACE), stdout=as_json(configmap_object())),
            plan.cluster.get("namespace", NAMESPACE, foreign),
        ]
        result = self.run_plan(plan, calls)
        self.assert_run_failed(
            result,
            demo.EXIT_REFUSED,
            f"Namespace {NAMESPACE} already exists and is not this run's (label {demo.RUN_LABEL}='ffffffffffff')",
            "left untouched",
            diagnostics=False,
        )

    def test_create_answer_without_a_uid_or_not_json(self) -> None:
        for answer, message in (
            ("{not json", "printed output that is not JSON"),
            (as_json({"kind": "Namespace", "metadata": {"name": NAMESPACE}}), "without metadata.uid"),
        ):
            with self.subTest(message=message):
                self.fresh_stub()
                plan = RunPlan(Batch(count=2))
                calls = [*plan.run()[:4], plan.serviceaccount_watch(ended_early=True)]
                calls[3] = dataclasses.replace(calls[3], stdout=answer)
                self.assert_run_failed(self.run_plan(plan, calls), demo.EXIT_CLUSTER, message, diagnostics=False)
                self.verify_plan()

    def test_forbidden_create(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = [*plan.run()[:5], plan.serviceaccount_watch()]
        calls[4] = calls[4].failing(err_forbidden("create", "jobs", "batch", creating=True))
        result = self.run_plan(plan, calls)
        self.assert_run_failed(result, demo.EXIT_CLUSTER, "Forbidden", "cannot create resource", diagnostics=False)
        self.assertEqual(self.receipt()["jobs"], [{"name": "rollout", "uid": None}])
        self.expect(*plan.cleanup(jobs_present=False))
        self.run_ok("cleanup", "--output", str(self.out()))

    def test_too_many_requests_then_success(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        calls[7:7] = [calls[7].failing(ERR_TOO_MANY)]  # the events listing, refused once
        result = self.run_plan(plan, calls, "-v")
        self.assertEqual(result.code, 0, result)
        self.assertEqual(len([argv for argv in self.stub.calls() if argv[-3:] == ["events", "-o", "json"]]), 2)
        self.assertIn("warning: retrying `kubectl", result.stderr)

    def test_retries_are_quiet_without_verbose(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        calls[7:7] = [calls[7].failing(ERR_TOO_MANY)]  # the events listing, refused once
        calls[3:4] = [calls[3].failing(ERR_TOO_MANY), plan.create_namespace(), plan.create_configmap()]
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        self.assertEqual(len([argv for argv in self.stub.calls() if argv[-3:] == ["events", "-o", "json"]]), 2)
        self.assertEqual(
            result.stderr.splitlines(),
            [
                f"Test namespace: {NAMESPACE}",
                f"namespace {NAMESPACE} is kept; delete it with: "
                f"python3 rl_batch_demo.py cleanup --output {self.out()}",
            ],
        )

    def test_connection_refused_then_recovered(self) -> None:
        plan = RunPlan(Batch(count=2))
        calls = plan.run()
        calls[1:1] = [calls[1].failing(err_unreachable("get")), calls[1].failing(ERR_UNAVAILABLE)]
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        self.assertEqual(self.results()["reward_sum"], 2)
        self.assertEqual(len([argv for argv in self.stub.calls() if any("runtimeclass" in arg for arg in argv)]), 3)

    def test_retries_stop_after_three(self) -> None:
        plan = RunPlan(Batch(count=2))
        result = self.run_plan(  # the access reviews run beside the RuntimeClass read
            plan,
            [
                plan.cluster.config_view(),
                *[plan.get_runtimeclass().failing(ERR_INTERNAL)] * 4,
                plan.preflight()[2],
                plan.refused_watch(),
            ],
            "-v",
        )
        self.assert_fails(
            result, demo.EXIT_CLUSTER, "get --raw /apis/node.k8s.io/v1/runtimeclasses/cube", "InternalError"
        )
        self.assertFalse(self.out().exists())  # a failed preflight leaves no output directory
        self.assertEqual(result.stderr.count("warning: retrying"), 3)

    def test_permanent_error_is_not_retried(self) -> None:
        plan = RunPlan(Batch(count=2))
        forbidden = err_forbidden("get", "runtimeclasses", "node.k8s.io", namespace="")
        result = self.run_plan(
            plan,
            [
                plan.cluster.config_view(),
                plan.get_runtimeclass().failing(forbidden),
                plan.preflight()[2],
                plan.refused_watch(),
            ],
        )
        self.assert_fails(result, demo.EXIT_CLUSTER, "Forbidden")
        self.assertEqual(len([argv for argv in self.stub.calls() if any("runtimeclass" in arg for arg in argv)]), 1)
        self.assertNotIn("retrying", result.stderr)

    def test_kubectl_hanging_past_its_timeout(self) -> None:
        plan = RunPlan(Batch(count=2))
        hanging = dataclasses.replace(plan.get_runtimeclass(), sleep=10)
        self.shorten_process_timeouts(lambda argv, stdin: any("runtimeclass" in arg for arg in argv))
        result = self.run_plan(
            plan,
            [plan.cluster.config_view(), hanging, plan.preflight()[2], plan.refused_watch(kubectl_timeout=30)],
            "--kubectl-timeout",
            "30",
        )  # the hang is cut at 0.5 s; the other calls keep 30 s, however loaded the machine
        self.assert_fails(
            result,
            demo.EXIT_TIMEOUT,
            "did not answer within 30 s",
            "get --raw /apis/node.k8s.io/v1/runtimeclasses/cube",
            f"check that the API server {plan.cluster.server} of context {plan.cluster.context} is reachable",
        )
        self.assertFalse(self.out().exists())  # no namespace was created: the preflight's files are gone
        self.assertFalse(
            [
                argv
                for argv in self.stub.calls()
                if "create" in argv
                and ("--validate=strict" in argv or "--raw" in argv)
                and demo.RULES_REVIEW_PATH not in argv
            ]
        )

    def test_watch_ending_early_falls_back_to_polling(self) -> None:
        plan = RunPlan(Batch(count=2))
        batch = plan.batch
        calls = plan.run()
        job_watch = calls[5]
        calls[5] = dataclasses.replace(job_watch, chunks=job_watch.chunks[:1], hold=False, stderr="watch closed\n")
        polls = [
            dataclasses.replace(plan.get_job(batch.job_running()), wait_for="pods-rollout.done"),
            plan.get_job(batch.job_complete()),
        ]
        calls[7:7] = polls
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        self.assertIn(
            f"warning: the watch of Job {NAMESPACE}/rollout ended early (watch closed); polling every", result.stderr
        )
        self.assertEqual(self.read_json("job.json"), batch.job_complete())
        self.assertEqual(self.recorded_calls()[5]["exit"], 0)

    def test_watch_printing_garbage_falls_back_to_polling(self) -> None:
        plan = RunPlan(Batch(count=2))
        batch = plan.batch
        calls = plan.run()
        calls[5] = dataclasses.replace(
            calls[5],
            chunks=(calls[5].chunks[0], dataclasses.replace(calls[5].chunks[0], data="<html>502 Bad Gateway</html>\n")),
        )
        calls[7:7] = [dataclasses.replace(plan.get_job(batch.job_complete()), wait_for="pods-rollout.done")]
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        self.assertIn("ended early", result.stderr)

    def watch_prints(self, data: Callable[[Batch], str], reason: str) -> None:
        """Issue 27: the Job's watch prints `data` after its first event; the run polls and sees
        the Job complete: never exit 4 at its deadline, nor a traceback."""
        plan = RunPlan(Batch(count=2))
        batch = plan.batch
        calls = plan.run()
        calls[5] = dataclasses.replace(
            calls[5], chunks=(calls[5].chunks[0], dataclasses.replace(calls[5].chunks[0], data=data(batch)))
        )
        calls[7:7] = [dataclasses.replace(plan.get_job(batch.job_complete()), wait_for="pods-rollout.done")]
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn(f"warning: the watch of Job {NAMESPACE}/rollout ended early ({reason}", result.stderr)
        self.assertEqual(self.read_json("job.json"), batch.job_complete())

    def test_a_watch_printing_bytes_that_are_not_utf8_falls_back_to_polling(self) -> None:
        self.watch_prints(lambda batch: "\udcff\udcfe{}\n", "it printed bytes that are not UTF-8")

    def test_a_watch_sending_a_job_of_an_unexpected_shape_falls_back_to_polling(self) -> None:
        def odd(batch: Batch) -> str:
            return as_json(
                {"type": "MODIFIED", "object": {**batch.job_running(), "status": {"conditions": "Complete"}}}
            )

        self.watch_prints(odd, "an object of an unexpected shape: its status.conditions is not a list")

    def test_legacy_job_labels(self) -> None:
        plan = RunPlan(Batch(count=2, legacy_labels=True))
        self.expect(*plan.run())
        self.run_ok("run", "--count", "2", "--output", str(self.out()), "--quiet")
        selectors = [argv[argv.index("-l") + 1] for argv in self.stub.calls() if "-l" in argv]
        # the pod watch, and the logs followed by completion index: the index label is the same
        self.assertEqual(
            selectors,
            [f"controller-uid={plan.batch.uid}", f"controller-uid={plan.batch.uid},{demo.INDEX_LABEL} in (0,1)"],
        )

    def test_pods_refused_by_the_cluster_fail_fast(self) -> None:
        """FailedCreate (a Pod Security rejection): no pod ever appears; the run stops with the
        cluster's message as soon as the blocked check finds it, not at the deadline."""
        self.set_timing(blocked_check_seconds=0.05)
        plan = RunPlan(Batch(count=2))
        batch = plan.batch
        refusal = (
            'Error creating: pods "rollout-x7k2p" is forbidden: violates PodSecurity "restricted:latest": '
            'allowPrivilegeEscalation != false (container "episode" must set '
            "securityContext.allowPrivilegeEscalation=false)"
        )
        unrelated = event_object("ConfigMap", "episode", "Created", "created", batch.created, index=1)
        failed_create = event_object("Job", "rollout", "FailedCreate", refusal, batch.created + 1, "Warning", 2)
        calls = [*plan.run()[:5], plan.serviceaccount_watch()]
        calls += [
            plan.job_watch(chunks=[watch_event("ADDED", batch.job())]),
            plan.pod_watch(chunks=[]),
            dataclasses.replace(plan.cluster.get_list("events", [unrelated]), wait_for="pods-rollout.started"),
            dataclasses.replace(
                plan.cluster.get_list("events", [unrelated, failed_create]), wait_for="job-rollout.started"
            ),
            plan.cluster.get_list("pods,events", [unrelated, failed_create]),
        ]
        result = self.run_plan(plan, calls)
        line = self.assert_run_failed(
            result,
            demo.EXIT_CLUSTER,
            f"Job {NAMESPACE}/rollout cannot create its pods: {refusal}",
            "(the namespace enforces Pod Security 'restricted')",
            "then run cleanup",
        )
        self.assertIn("FailedCreate", (self.out() / "events.txt").read_text())
        self.assertTrue(line)
        self.assertEqual(self.read_json("pods.json")["items"], [])


if __name__ == "__main__":
    unittest.main()


class WatchedStateTest(FaultTestCase):
    """docs/call-plan.md: the pods' final state comes from the watch only when provably final."""

    def test_a_pod_updated_after_its_terminal_event_is_listed_instead(self) -> None:
        self.set_timing(final_pods_grace_seconds=0.05)  # the watched pods never prove final here
        plan = RunPlan(Batch(count=2))
        batch = plan.batch
        last = batch.pod(batch.episodes[1])
        seen = copy.deepcopy(last)  # terminal, but the Job controller's finalizer removal is still to come
        seen["metadata"]["finalizers"] = [demo.JOB_TRACKING_FINALIZER]
        # a terminal pod's status never changes again; its metadata may (the annotation stands for it)
        seen["metadata"].setdefault("annotations", {})["stale"] = "the watch's copy"
        chunks = [watch_event("ADDED", batch.pod(episode, "pending")) for episode in batch.episodes]
        chunks += [watch_event("MODIFIED", batch.pod(batch.episodes[0])), watch_event("MODIFIED", seen)]
        calls = plan.run()
        calls[6] = plan.pod_watch(chunks=chunks)
        calls[7] = plan.pods_and_events()  # the fallback: one listing of pods and events
        watched = [batch.pod(episode, "pending") for episode in batch.episodes] + [batch.pod(batch.episodes[0]), seen]
        calls[-len(plan.follows(batch)) - 1 : -1] = plan.follows(batch, watched)
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        listed = self.read_json("pods.json")["items"]
        self.assertEqual(listed, demo.pod_list(batch.pods())["items"])  # the listing's state, not the watch's
        self.assertNotIn(["get", "events", "-o", "json"], [argv[-4:] for argv in self.stub.calls()])

    def test_a_pod_event_of_an_unexpected_shape_is_ignored_and_the_pods_are_listed(self) -> None:
        """Issue 27: a pod whose status is a list on the pod watch (no API server sends one): the
        event is ignored, never a traceback, and the pods' final state comes from a listing."""
        self.set_timing(final_pods_grace_seconds=0.5)  # waited out: the watched pods never settle here
        plan = RunPlan(Batch(count=2))
        batch = plan.batch
        odd = copy.deepcopy(batch.pod(batch.episodes[1]))
        odd["status"] = ["Succeeded"]
        chunks = [watch_event("ADDED", batch.pod(episode, "pending")) for episode in batch.episodes]
        chunks += [watch_event("MODIFIED", odd)]
        chunks += [watch_event("MODIFIED", batch.pod(episode)) for episode in batch.episodes]
        calls = plan.run()
        calls[6] = plan.pod_watch(chunks=chunks)
        calls[7] = plan.pods_and_events()
        watched = [batch.pod(episode, "pending") for episode in batch.episodes]  # the odd event is ignored
        watched += [batch.pod(episode) for episode in batch.episodes]
        calls[-len(plan.follows(batch)) - 1 : -1] = plan.follows(batch, watched)
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(self.read_json("pods.json")["items"], demo.pod_list(batch.pods())["items"])

    def test_a_pods_last_event_just_after_the_jobs_complete_is_waited_for(self) -> None:
        """The two watches are separate streams: the Job's Complete may come first. The tool
        waits a moment (Timing.final_pods_grace_seconds) for the pods to prove final."""
        plan = RunPlan(Batch(count=2))
        batch = plan.batch
        calls = plan.run()
        job_watch, pod_watch = calls[5], calls[6]
        complete = dataclasses.replace(job_watch.chunks[-1], wait_for=None)  # not after the pods' last event
        calls[5] = dataclasses.replace(job_watch, chunks=(*job_watch.chunks[:-1], complete))
        last = dataclasses.replace(pod_watch.chunks[-1], wait_for="job-rollout.done", delay=0.05)
        calls[6] = dataclasses.replace(pod_watch, chunks=(*pod_watch.chunks[:-1], last))
        result = self.run_plan(plan, calls)
        self.assertEqual(result.code, 0, result)
        self.assertFalse([argv for argv in self.stub.calls() if "pods,events" in argv])
        self.assertEqual(self.read_json("pods.json"), demo.pod_list(batch.pods()))
        pod_records = [call for call in self.recorded_calls() if "pods" in call["argv"] and "--watch" in call["argv"]]
        self.assertEqual(len(pod_records), 1)

    def test_pods_final_in_the_watch_are_not_listed(self) -> None:
        plan = RunPlan(Batch(count=2))
        result = self.run_plan(plan, plan.run())
        self.assertEqual(result.code, 0, result)
        self.assertFalse([argv for argv in self.stub.calls() if "pods,events" in argv])
        self.assertEqual(self.read_json("pods.json"), demo.pod_list(plan.batch.pods()))


class FullDiskTest(FaultTestCase):
    def test_a_full_disk_is_one_sentence_and_the_cleanup_still_runs(self) -> None:
        plan = RunPlan(Batch(count=2))
        original = demo.write_atomic

        def write_atomic(path: Any, text: str) -> None:
            if path.name == "results.json":
                raise OSError(28, "No space left on device", str(path))
            original(path, text)

        with unittest.mock.patch.object(demo, "write_atomic", write_atomic):
            result = self.run_plan(plan, [*plan.run(), *plan.cleanup()], "--cleanup", "always")
        line = self.assert_fails(result, demo.EXIT_USAGE, "cannot write the run's output (No space left on device")
        self.assertIn("results.json", line)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(self.read_json("error.json")["exit_code"], demo.EXIT_USAGE)
        self.assertIn(f"deleted namespace {NAMESPACE}", result.stderr)
