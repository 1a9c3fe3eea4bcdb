"""The call-plan stub itself: it answers planned calls, and makes a test fail on anything else."""

from __future__ import annotations

import os
import subprocess
import time
import unittest

from tests.callplan import Call, CallPlanTestCase, Chunk
from tests.kubectl_stub import SIGNAL_WAIT_ENV, matches


class StubTest(CallPlanTestCase):
    def kubectl(self, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", *argv], input=stdin, capture_output=True, text=True, timeout=30, check=False)

    def test_path_holds_only_the_stub(self) -> None:
        self.assertEqual(os.environ["PATH"], str(self.stub.bin_dir))
        self.assertEqual(os.listdir(self.stub.bin_dir), ["kubectl"])

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
        watch = subprocess.Popen(["kubectl", "get", "a", "--watch"], stdout=subprocess.PIPE, text=True)
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


if __name__ == "__main__":
    unittest.main()
