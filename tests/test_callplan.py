"""The call-plan stub itself: it answers planned calls, and makes a test fail on anything else;
answered in-process (tests/stubprocess.py), it behaves as the stub's process does."""

from __future__ import annotations

import json
import marshal
import os
import signal
import subprocess
import tempfile
import time
import unittest
from typing import Any, Callable

import rl_batch_demo as demo
from tests import kubectl_stub
from tests.callplan import Call, CallPlanTestCase, Chunk, indented_json, stub_wrapper
from tests.clusterobjects import Batch
from tests.kubectl_stub import SIGNAL_WAIT_ENV, matches
from tests.stubprocess import StubProcess, spawner, stub_processes
from tests.toolprocess import image_python


class IndentedJsonTest(unittest.TestCase):
    """The stub's answers are kubectl's indented JSON, made faster than json.dumps makes them:
    byte for byte the same, or json.dumps's own when it is not plain JSON data."""

    def test_the_same_text_as_json_dumps(self) -> None:
        batch = Batch(count=3)
        odd = {"é\u2028\x00": [None, True, False, -0.0, 1e300, float("nan"), float("inf"), 10**30]}
        for value in (
            {},
            [],
            "text",
            3,
            None,
            {"a": {"b": [{}, [], [[]], {"c": ()}]}},
            odd,
            {1: "a key json.dumps makes a string"},
            (1, [2, (3,)]),
            batch.job(),
            [batch.pod(episode) for episode in batch.episodes],
        ):
            for indent in (1, 4):
                with self.subTest(value=str(value)[:40], indent=indent):
                    self.assertEqual(indented_json(value, indent), json.dumps(value, indent=indent))
        with self.assertRaises(TypeError):  # not JSON data at all: json.dumps's own error
            indented_json({"set": {1}}, 4)


class KilledCallTest(unittest.TestCase):
    def test_a_call_killed_before_its_signal_or_snapshot_writes_neither(self) -> None:
        """As a killed process writes nothing more: the in-process call's sleep raises once it is
        killed (tests/stubprocess.py), and a signal or snapshot it reaches then is not written (a
        late one once kept a test's scratch directory from being removed: "Directory not empty")."""

        class Killed(BaseException):
            pass

        def killed(seconds: float) -> None:
            raise Killed

        with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as outputs:
            written = os.path.join(outputs, "results.json")
            with open(written, "w") as stream:
                stream.write("{}\n")
            call = kubectl_stub.Invocation(environ={}, sleep=killed)
            with self.assertRaises(Killed):
                kubectl_stub.raise_signal(scratch, "watch.done", call)
            with self.assertRaises(Killed):
                kubectl_stub.snapshot(scratch, [written, 1, "results.json"], call)  # there: no wait before
            self.assertEqual(os.listdir(scratch), [])

    def test_a_call_killed_while_it_reads_its_input_claims_nothing(self) -> None:
        """A prepared create the tool cancels (Kubectl.cancel_prepared) is killed, then its stdin
        closed: the read may end on that end of file, and the killed call must not go on to
        claim a planned entry or record an unexpected call."""

        class Killed(BaseException):
            pass

        def killed(seconds: float) -> None:
            raise Killed

        with tempfile.TemporaryDirectory() as scratch:
            call = kubectl_stub.Invocation(
                environ={kubectl_stub.STUB_DIR_ENV: scratch}, read_stdin=lambda: "", sleep=killed
            )
            with self.assertRaises(Killed):
                kubectl_stub.main(["create", "-f", "-", "-o", "json"], call)
            self.assertEqual(os.listdir(scratch), [])  # no lock taken, no call recorded


class PlanCacheTest(unittest.TestCase):
    def test_a_plan_is_read_again_when_its_file_changes_and_only_the_last_few_are_kept(self) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            paths = [os.path.join(scratch, f"plan-{number}") for number in range(kubectl_stub._PLANS_KEPT + 3)]
            for number, path in enumerate(paths):
                with open(path, "wb") as stream:
                    marshal.dump([{"argv": ["get", str(number)]}], stream)
                self.assertEqual(kubectl_stub.load_plan(path), [{"argv": ["get", str(number)]}])
            kept = [path for path in kubectl_stub._PLANS if path.startswith(scratch)]
            self.assertEqual(kept, paths[-kubectl_stub._PLANS_KEPT :])  # the newest, the oldest dropped
            first = kubectl_stub.load_plan(paths[-1])
            self.assertIs(kubectl_stub.load_plan(paths[-1]), first)  # unchanged: not read again
            with open(paths[-1] + ".tmp", "wb") as stream:
                marshal.dump([{"argv": ["get", "x"]}, {"argv": ["get", "y"]}], stream)
            os.replace(paths[-1] + ".tmp", paths[-1])  # as KubectlStub writes it
            self.assertEqual(len(kubectl_stub.load_plan(paths[-1])), 2)


class StubTest(CallPlanTestCase):
    """The stub as a process (started by subprocess.Popen)."""

    spawn: Callable[..., Any] = staticmethod(subprocess.Popen)

    def start(self, *argv: str, **options: Any) -> Any:
        """`kubectl ARGV` started as the tool starts it: both pipes, stdin piped or from /dev/null."""
        options.setdefault("stdin", subprocess.DEVNULL)
        return self.spawn(["kubectl", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)

    def kubectl(self, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        with self.start(*argv, stdin=subprocess.PIPE, encoding="utf-8", errors="replace") as process:
            stdout, stderr = process.communicate(stdin, timeout=30)
        return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)

    def test_path_holds_only_the_stub(self) -> None:
        self.assertEqual(os.environ["PATH"], str(self.stub.bin_dir))
        self.assertEqual(os.listdir(self.stub.bin_dir), ["kubectl"])

    def test_calls_planned_after_a_call_are_answered_by_the_next(self) -> None:
        # the in-process stub keeps the plan it read (kubectl_stub.load_plan) until the file changes
        for n in range(3):
            self.expect(Call(["get", f"x{n}"], stdout=f"{n}\n"))
            self.assertEqual(self.kubectl("get", f"x{n}").stdout, f"{n}\n")
        self.expect(Call(["get", "x0"], stdout="again\n"))  # the same argv, planned again
        self.assertEqual(self.kubectl("get", "x0").stdout, "again\n")

    def test_an_optional_call_a_run_never_made_is_not_matched_by_the_next_run(self) -> None:
        """A run made (one call of its expect()), without its optional call; the next run's same
        call gets its own answer, and a plan of two expect()s before any call keeps both."""
        self.expect(Call(["get", "x"], stdout="x\n"), Call(["get", "watch"], stdout="refused\n", optional=True))
        self.assertEqual(self.kubectl("get", "x").stdout, "x\n")
        self.expect(Call(["get", "watch"], stdout="second run's\n"))
        self.assertEqual(self.kubectl("get", "watch").stdout, "second run's\n")
        self.verify_plan()
        self.expect(Call(["get", "y"], stdout="y\n"), Call(["get", "later"], stdout="first\n", optional=True))
        self.expect(Call(["get", "later"], stdout="second\n"))  # nothing of the first made yet: kept
        self.assertEqual(self.kubectl("get", "later").stdout, "first\n")
        self.assertEqual(self.kubectl("get", "y").stdout, "y\n")
        self.assertEqual(self.kubectl("get", "later").stdout, "second\n")

    def test_the_readable_plan_is_written_only_for_a_plan_that_fails(self) -> None:
        self.expect(Call(["get", "x"], stdout="x\n"))
        readable = self.stub.directory / "plan.json"
        self.assertFalse(readable.exists())
        self.assertEqual(self.kubectl("get", "x").stdout, "x\n")
        self.verify_plan()  # it holds: nothing written
        self.assertFalse(readable.exists())
        self.expect(Call(["get", "never"]))
        with self.assertRaises(AssertionError):
            self.verify_plan()
        planned = [entry["argv"] for entry in json.loads(readable.read_text())]
        self.assertEqual(planned, [["get", "x"], ["get", "never"]])
        self.assertEqual(self.kubectl("get", "never").returncode, 0)  # so that the test's own check holds

    def test_planned_calls_are_answered_in_order_of_the_plan(self) -> None:
        self.expect(
            Call(["get", "x"], stdout="first\n"),
            Call(["get", "y"], stdout="", stderr="boom\n", exit=3),
            Call(["get", "x"], stdout="second\n"),
        )
        self.assertEqual(self.kubectl("get", "x").stdout, "first\n")
        self.assertEqual(self.kubectl("get", "x").stdout, "second\n")  # the next entry with this argv
        failed = self.kubectl("get", "y")
        self.assertEqual((failed.returncode, failed.stderr), (3, "boom\n"))
        self.assertEqual(self.stub.calls(), [["get", "x"], ["get", "x"], ["get", "y"]])

    def test_concurrent_calls_match_by_argv_and_wait_for_each_other(self) -> None:
        self.expect(
            Call(["get", "a", "--watch"], chunks=(Chunk("a\n", wait_for="b.done"),), name="a"),
            Call(["get", "b"], stdout="b\n", name="b", wait_for="a.started"),
        )
        watch = self.start("get", "a", "--watch", text=True)
        self.assertEqual(self.kubectl("get", "b").stdout, "b\n")
        self.assertEqual(watch.communicate(timeout=30)[0], "a\n")
        self.assertCountEqual(self.stub.calls(), [["get", "a", "--watch"], ["get", "b"]])  # either may log first

    def test_a_watch_streams_its_chunks(self) -> None:
        self.expect(Call(["get", "w", "--watch"], chunks=(Chunk("a\n"), Chunk("b\n", delay=0.01)), stdout="end\n"))
        self.assertEqual(self.kubectl("get", "w", "--watch").stdout, "a\nb\nend\n")

    def test_stdin_is_recorded_and_checked(self) -> None:
        self.expect(Call(["create", "-f", "-"], stdout="ok\n", stdin_json={"kind": "Namespace"}))
        self.assertEqual(self.kubectl("create", "-f", "-", stdin='{"kind": "Namespace"}').stdout, "ok\n")
        self.assertEqual(self.stub.records()[0]["stdin"], '{"kind": "Namespace"}')

    def test_an_unexpected_call_fails_at_once_and_at_teardown(self) -> None:
        result = self.kubectl("delete", "namespace", "prod")
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr, "kubectl stub: unexpected call: kubectl delete namespace prod\n")
        with self.assertRaisesRegex(AssertionError, "kubectl calls the plan did not expect"):
            self.verify_plan()
        self.fresh_stub()  # leave a clean stub for the real teardown

    def test_a_wrong_stdin_fails(self) -> None:
        self.expect(Call(["create", "-f", "-"], stdin_json={"kind": "Namespace"}))
        result = self.kubectl("create", "-f", "-", stdin='{"kind": "Job"}')
        self.assertEqual(result.returncode, 1)
        self.assertIn("stdin differs from the plan", result.stderr)
        with self.assertRaisesRegex(AssertionError, "did not expect"):
            self.verify_plan()
        self.fresh_stub()

    def test_a_signal_that_never_comes_fails_at_teardown(self) -> None:
        os.environ[SIGNAL_WAIT_ENV] = "0.1"  # restored with the rest of the sealed environment
        self.expect(Call(["get", "late"], stdout="never\n", wait_for="nobody.started"))
        result = self.kubectl("get", "late")
        self.assertEqual((result.returncode, result.stdout), (1, ""))
        self.assertIn("signal 1:nobody.started never came (kubectl get late)", result.stderr)
        self.assertEqual(self.stub.calls(), [["get", "late"]])
        with self.assertRaisesRegex(AssertionError, "never came"):
            self.verify_plan()
        self.fresh_stub()

    def test_a_watchs_request_timeout_may_count_down_by_the_seconds_passed_only(self) -> None:
        watch = ["--request-timeout=275s", "get", "job", "rollout", "--watch"]
        planned = {"argv": watch, "counts_down_since": time.monotonic() - 2.5}  # 3 s, rounded up
        for timeout, accepted in ((275, True), (273, True), (272, True), (271, False), (276, False)):
            with self.subTest(timeout=timeout):
                sent = [f"--request-timeout={timeout}s", *watch[1:]]
                self.assertEqual(matches(planned, sent), accepted)
        self.assertFalse(matches(planned, ["--request-timeout=274s", "get", "job", "other", "--watch"]))
        self.assertFalse(matches({"argv": watch}, ["--request-timeout=274s", *watch[1:]]))  # not a countdown
        self.assertTrue(matches({"argv": watch}, list(watch)))

    def test_a_planned_call_never_made_fails_at_teardown(self) -> None:
        self.expect(Call(["get", "never"]))
        with self.assertRaisesRegex(AssertionError, "planned kubectl calls that were never made"):
            self.verify_plan()
        self.fresh_stub()

    # -- what the tool relies on of a process -------------------------------------------

    def test_terminate_ends_a_held_watch_after_what_it_wrote(self) -> None:
        self.expect(Call(["get", "w", "--watch"], chunks=(Chunk("a\n"),), hold=True, name="w"))
        with self.start("get", "w", "--watch") as watch:
            self.assertEqual(watch.stdout.readline(), b"a\n")
            self.assertIsNone(watch.poll())  # held open
            watch.terminate()
            self.assertEqual(watch.wait(timeout=30), -signal.SIGTERM)
            self.assertEqual(watch.stdout.read(), b"")  # end of file once it has ended
        self.assertEqual(watch.returncode, -signal.SIGTERM)

    def test_kill_ends_a_call_that_sleeps_and_its_answer_never_comes(self) -> None:
        self.expect(Call(["get", "slow"], stdout="late\n", sleep=60))
        with self.start("get", "slow") as call:
            with self.assertRaises(subprocess.TimeoutExpired):
                call.communicate(timeout=0.2)
            with self.assertRaises(subprocess.TimeoutExpired):
                call.wait(timeout=0.05)
            call.kill()
            self.assertEqual(call.communicate(timeout=30), (b"", b""))  # communicate again, after the timeout
        self.assertEqual(call.returncode, -signal.SIGKILL)

    def test_kill_ends_a_call_that_waits_for_a_signal(self) -> None:
        self.expect(Call(["get", "late"], stdout="never\n", name="late", wait_for="nobody.started"))
        with self.start("get", "late") as call:
            started = self.stub.directory / "signals" / "1:late.started"
            deadline = time.monotonic() + 30
            while not started.exists() and time.monotonic() < deadline:  # claimed: it waits now
                time.sleep(0.002)
            call.kill()
            self.assertEqual(call.wait(timeout=30), -signal.SIGKILL)
            self.assertEqual(call.stdout.read(), b"")

    def test_kill_ends_a_call_whose_reader_stopped_reading(self) -> None:
        self.expect(Call(["logs", "big"], stdout="x" * 1_000_000))  # far more than a pipe holds
        with self.start("logs", "big") as call:
            self.assertEqual(len(call.stdout.read(10)), 10)
            self.assertRaises(subprocess.TimeoutExpired, call.wait, 0.1)  # blocked on the full pipe
            call.kill()
            self.assertEqual(call.wait(timeout=30), -signal.SIGKILL)

    def test_an_ended_call_keeps_its_exit_code_whatever_it_is_sent(self) -> None:
        self.expect(Call(["get", "x"], stdout="x\n", exit=4))
        with self.start("get", "x") as call:
            self.assertEqual(call.stdout.read(), b"x\n")
            self.assertEqual(call.wait(timeout=30), 4)
            call.terminate()
            call.kill()
            self.assertEqual((call.wait(), call.poll()), (4, 4))

    def test_text_mode_decodes_and_translates_newlines_as_popen(self) -> None:
        self.expect(Call(["get", "t"], stdout="caf\u00e9\r\n\udcff\n", stderr="\udcff oops\n"))
        with self.start("get", "t", encoding="utf-8", errors="replace") as call:
            # stdout's lone surrogate as a byte (surrogateescape), stderr's escaped (backslashreplace)
            self.assertEqual(call.communicate(timeout=30), ("caf\u00e9\n\ufffd\n", "\\udcff oops\n"))


class SpawnerTest(CallPlanTestCase):
    def test_the_tools_kubectl_answers_in_process_unless_stub_processes_are_asked_for(self) -> None:
        args = demo.build_parser("rl-batch-demo").parse_args(["check"])
        kubectl = demo.make_kubectl(args)
        if stub_processes():  # RL_DEMO_STUB_PROCESSES=1, as .ci/run's end-to-end pass sets it
            self.assertIs(kubectl.spawner, subprocess.Popen)
        else:
            self.assertIsNot(kubectl.spawner, subprocess.Popen)
            self.expect(Call(["get", "x"], stdout="x\n"))
            pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
            with kubectl.spawner([kubectl.executable, "get", "x"], **pipes) as call:
                self.assertIsInstance(call, StubProcess)
                self.assertEqual(call.communicate(timeout=30), (b"x\n", b""))
        self.assertIs(demo.Kubectl("kubectl", None, None).spawner, subprocess.Popen)  # the tool's own default


class InProcessStubTest(StubTest):
    """The same tests with the stub answered in this process, as the call-plan tests use it."""

    spawn = staticmethod(spawner(stub_wrapper()))

    def test_the_stub_is_answered_in_process_and_any_other_program_is_a_process(self) -> None:
        self.expect(Call(["get", "x"], stdout="x\n"))
        with self.start("get", "x") as call:
            self.assertIsInstance(call, StubProcess)
            self.assertEqual(call.communicate(timeout=30), (b"x\n", b""))
        with self.spawn([image_python(), "-c", "print(1)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as other:
            self.assertIsInstance(other, subprocess.Popen)
            self.assertEqual(other.communicate(timeout=30), (b"1\n", b""))

    def test_a_missing_kubectl_fails_to_start_as_it_would(self) -> None:
        with self.assertRaises(FileNotFoundError):
            self.spawn(["no-such-kubectl"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


if __name__ == "__main__":
    unittest.main()
