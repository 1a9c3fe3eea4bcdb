"""Start-up phases of a sandbox (issue 10): the sandbox's own /proc clocks, the scheduler's
Scheduled event, the kubelet's Pulled events, and the kubelet's runtime histograms
(`--kubelet-metrics`). Pure functions with hand-built inputs and hand-computed values."""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import threading
import time
import unittest
from pathlib import Path
from typing import Any, Callable, ClassVar
from xml.etree import ElementTree

import rl_batch_demo as demo
from tests.clusterobjects import results_of, settings_for
from tests.fakecluster import ENVIRONMENT
from tests.toolprocess import image_python


class Case(unittest.TestCase):
    """Epoch seconds near 1.8e9 hold about 7 decimal digits of a second: compare to 1e-5."""

    def assertAlmostEqual(self, first: Any, second: Any, places: Any = 5, msg: Any = None, delta: Any = None) -> None:
        super().assertAlmostEqual(first, second, places=None if delta else places, msg=msg, delta=delta)


JOB_CREATED_AT = demo.parse_timestamp("2026-11-29T10:00:00Z")
CREATED_AT = JOB_CREATED_AT + 1.0  # make_pod's creationTimestamp


def make_pod(name: str = "rollout-abcde", uid: str = "pod-uid") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": "2026-11-29T10:00:01Z",
            "labels": {demo.UID_LABEL: "job-uid"},
        },
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": "Succeeded",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T10:00:01Z"}],
            "containerStatuses": [
                {
                    "name": "episode",
                    "imageID": "img@sha256:00",
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "startedAt": "2026-11-29T10:00:02Z",
                            "finishedAt": "2026-11-29T10:00:04Z",
                        }
                    },
                }
            ],
        },
    }


def ready_event(name: str = "rollout-abcde", **fields: Any) -> dict[str, Any]:
    """A new worker's ready event for a sandbox kernel: boot 0.3 s after the pod's creation,
    process start 0.9 s, first statement 0.95 s, imports 1.2 s, ready 1.3 s."""
    event = {
        "event": "ready",
        "at": CREATED_AT + 1.3,
        "episode_id": name,
        "kernel_booted_at": CREATED_AT + 0.3,
        "process_started_at": CREATED_AT + 0.9,
        "first_statement_at": CREATED_AT + 0.95,
        "imports_done_at": CREATED_AT + 1.2,
    }
    event.update(fields)
    return event


def reward_event(name: str = "rollout-abcde") -> dict[str, Any]:
    return {
        "event": "reward",
        "at": CREATED_AT + 2.0,
        "episode_id": name,
        "reward": 1,
        "baseline_exit": 1,
        "tests_exit": 0,
        "tests_output": "OK\n",
        "modules": {"test_shipping": dict(demo.BUILTIN_TEST_MODULE)},
    }


def k8s_event(reason: str, message: str = "", pod: str = "rollout-abcde", **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "kind": "Event",
        "reason": reason,
        "message": message,
        "involvedObject": {"kind": "Pod", "name": pod, "uid": "pod-uid", "fieldPath": "spec.containers{episode}"},
        "metadata": {"name": f"{pod}.1", "creationTimestamp": "2026-11-29T10:00:01Z"},
    }
    event.update(fields)
    return event


def validate(
    ready: dict[str, Any], pod_events: list[dict[str, Any]] | None = None, pod: dict[str, Any] | None = None
) -> demo.EpisodeRow:
    return demo.validate_episode(
        pod or make_pod(), [ready, reward_event()], JOB_CREATED_AT, None, "here", pod_events=pod_events
    )


class GoDurationTest(Case):
    def test_values(self) -> None:
        for text, seconds in (
            ("1.5s", 1.5),
            ("734ms", 0.734),
            ("2m3.5s", 123.5),
            ("1h2m", 3720.0),
            ("500\u00b5s", 0.0005),
            ("500\u03bcs", 0.0005),
            ("500us", 0.0005),
            ("12ns", 12e-9),
            ("0", 0.0),
            ("0s", 0.0),
            (".5s", 0.5),
            ("1.s", 1.0),
            ("1h0m0.001s", 3600.001),
            ("-1.5s", -1.5),
        ):
            with self.subTest(text=text):
                self.assertAlmostEqual(demo.parse_go_duration(text), seconds, places=12)

    def test_garbage_is_rejected(self) -> None:
        for text in ("", "1", "s", ".s", "1.5", "abc", "1x", "1s ", " 1s", "--1s", "1e3s", "1,5s", "1s2", "+", "NaNs"):
            with self.subTest(text=text), self.assertRaises(ValueError):
                demo.parse_go_duration(text)


class ImagePullTest(Case):
    def pull(self, *events: dict[str, Any]) -> dict[str, Any]:
        return demo.image_pull_of(list(events), make_pod())

    def test_cached(self) -> None:
        event = k8s_event("Pulled", 'Container image "python:3.12-alpine" already present on machine')
        self.assertEqual(self.pull(event), {"state": "cached", "seconds": None})
        newer = k8s_event(
            "Pulled", 'Container image "python:3.12-alpine" already present on machine and can be accessed by the pod'
        )
        self.assertEqual(self.pull(newer)["state"], "cached")

    def test_pulled_with_its_seconds(self) -> None:
        message = (
            'Successfully pulled image "python:3.12-alpine" in 1.234s (2m3.5s including waiting). '
            "Image size: 18734321 bytes."
        )
        self.assertEqual(
            self.pull(k8s_event("Pulled", message)),
            {"state": "pulled", "seconds": 1.234, "seconds_including_waiting": 123.5},
        )
        short = 'Successfully pulled image "reg/x:\\"q\\"" in 734ms (734ms including waiting)'
        self.assertEqual(self.pull(k8s_event("Pulled", short))["seconds"], 0.734)
        older = 'Successfully pulled image "python:3.12-alpine" in 2.5s'
        self.assertEqual(self.pull(k8s_event("Pulled", older))["seconds"], 2.5)

    def test_unknown_is_never_assumed_cached(self) -> None:
        garbage = 'Successfully pulled image "x" in soon (later including waiting)'
        for events in (
            [],
            [k8s_event("Pulling", 'Pulling image "x"')],
            [k8s_event("Pulled", garbage)],
            [k8s_event("Pulled", 'Successfully pulled image "x" in -1s (1s including waiting)')],
            [k8s_event("Pulled", 'Container image "x" already present on machine', pod="rollout-other")],
            [
                dict(
                    k8s_event("Pulled", 'Container image "x" already present on machine'),
                    involvedObject={"kind": "Pod", "name": "rollout-abcde", "uid": "another-pod-uid"},
                )
            ],
            [
                dict(
                    k8s_event("Pulled", 'Container image "x" already present on machine'),
                    involvedObject={"kind": "Pod", "name": "rollout-abcde", "fieldPath": "spec.initContainers{setup}"},
                )
            ],
            [k8s_event("Pulled", 'Container image "x" already present on machine\x1b[2J, says the pod')],
        ):
            with self.subTest(events=events):
                state = self.pull(*events)
                if events and "already present" in str(events[0].get("message")) and "\x1b" in events[0]["message"]:
                    self.assertEqual(state["state"], "cached")  # the prefix is the kubelet's; the rest is ignored
                else:
                    self.assertEqual(state, {"state": "unknown", "seconds": None})

    def test_cache_state_from_counts(self) -> None:
        for counts, state in (
            ({"cached": 3, "pulled": 0, "unknown": 0}, "cached"),
            ({"cached": 0, "pulled": 2, "unknown": 0}, "pulled"),
            ({"cached": 1, "pulled": 1, "unknown": 0}, "mixed"),
            ({"cached": 1, "pulled": 1, "unknown": 5}, "mixed"),
            ({"cached": 3, "pulled": 0, "unknown": 1}, "unknown"),
            ({"cached": 0, "pulled": 0, "unknown": 4}, "unknown"),
            ({"cached": 0, "pulled": 0, "unknown": 0}, "unknown"),
        ):
            with self.subTest(counts=counts):
                self.assertEqual(demo.cache_state_of(counts), state)

    def test_rows_carry_the_state_and_results_count_it(self) -> None:
        cached = validate(ready_event(), [k8s_event("Pulled", 'Container image "x" already present on machine')])
        unknown = validate(ready_event())
        self.assertEqual(cached["image_pull"]["state"], "cached")
        self.assertEqual(demo.image_cache_counts([cached, unknown]), {"cached": 1, "pulled": 0, "unknown": 1})


class ScheduledTest(Case):
    def test_the_scheduler_event_gives_microseconds(self) -> None:
        event = k8s_event("Scheduled", "Successfully assigned ns/rollout-abcde to node-a")
        event["eventTime"] = "2026-11-29T10:00:01.123456Z"
        row = validate(ready_event(), [event])
        self.assertEqual(row["scheduled_source"], "event")
        self.assertAlmostEqual(row["pod_to_scheduled_seconds"], 0.123456, places=6)
        self.assertAlmostEqual(row["scheduled_at"], CREATED_AT + 0.123456, places=6)

    def test_else_the_condition(self) -> None:
        for events in (
            [],
            [k8s_event("Scheduled", "no eventTime")],
            [dict(k8s_event("Scheduled"), eventTime="soon")],
            [dict(k8s_event("Scheduled"), eventTime="2026-11-29T09:00:00.5Z")],  # outside the pod's life
            [dict(k8s_event("Scheduled", pod="rollout-other"), eventTime="2026-11-29T10:00:01.5Z")],
        ):
            with self.subTest(events=events):
                row = validate(ready_event(), events)
                self.assertEqual(row["scheduled_source"], "condition")
                self.assertEqual(row["pod_to_scheduled_seconds"], 0.0)

    def test_no_source_at_all(self) -> None:
        pod = make_pod()
        pod["status"]["conditions"] = []
        row = validate(ready_event(), [], pod)
        self.assertIsNone(row["scheduled_source"])
        self.assertIsNone(row["pod_to_scheduled_seconds"])


class SandboxClockTest(Case):
    def test_a_sandbox_kernel(self) -> None:
        row = validate(ready_event())
        self.assertEqual(row["kernel"], "sandbox")
        for field, value in (
            ("pod_to_kernel_boot_seconds", 0.3),
            ("kernel_boot_to_process_start_seconds", 0.6),
            ("pod_to_process_start_seconds", 0.9),
            ("interpreter_start_seconds", 0.05),
            ("python_import_seconds", 0.25),
            ("import_to_ready_seconds", 0.1),
            ("pod_to_ready_seconds", 1.3),
        ):
            with self.subTest(field=field):
                self.assertAlmostEqual(row[field], value, places=6)
        self.assertAlmostEqual(row["kernel_booted_at"], CREATED_AT + 0.3)
        self.assertAlmostEqual(row["first_statement_at"], CREATED_AT + 0.95)

    def test_a_shared_kernel_has_no_boot_figures(self) -> None:
        """The host's kernel, or a sandbox restored from a snapshot, which keeps its old boot time
        (kata-containers/runtime#951): booted before the pod, so no boot figure of this pod."""
        for booted in (CREATED_AT - 86400.0, CREATED_AT - 1.5):
            with self.subTest(booted=booted):
                row = validate(ready_event(kernel_booted_at=booted))
                self.assertEqual(row["kernel"], "shared")
                self.assertIsNone(row["kernel_booted_at"])
                self.assertIsNone(row["pod_to_kernel_boot_seconds"])
                self.assertIsNone(row["kernel_boot_to_process_start_seconds"])
                self.assertAlmostEqual(row["pod_to_process_start_seconds"], 0.9)

    def test_a_kernel_booted_within_a_second_before_the_whole_second_creation_is_the_sandbox(self) -> None:
        row = validate(ready_event(kernel_booted_at=CREATED_AT - 0.4))
        self.assertEqual(row["kernel"], "sandbox")
        self.assertAlmostEqual(row["pod_to_kernel_boot_seconds"], -0.4)

    def test_unreadable_proc_gives_null_never_an_invented_value(self) -> None:
        row = validate(ready_event(kernel_booted_at=None, process_started_at=None))
        self.assertIsNone(row["kernel"])
        for field in ("process_started_at", "pod_to_process_start_seconds", "interpreter_start_seconds"):
            self.assertIsNone(row[field], field)
        self.assertAlmostEqual(row["python_import_seconds"], 0.25)

    def test_an_older_worker_keeps_its_python_import_figure(self) -> None:
        legacy = ready_event(process_started_at=CREATED_AT + 0.95)
        for key in ("first_statement_at", "kernel_booted_at"):
            del legacy[key]
        row = validate(legacy)
        self.assertAlmostEqual(row["python_import_seconds"], 0.25)  # imports done - its process_started_at
        self.assertAlmostEqual(row["first_statement_at"], CREATED_AT + 0.95)
        self.assertIsNone(row["process_started_at"])
        self.assertIsNone(row["interpreter_start_seconds"])
        self.assertIsNone(row["kernel"])

    def test_custom_worker_without_any_clock(self) -> None:
        row = validate({"event": "ready", "at": CREATED_AT + 1.3, "episode_id": "rollout-abcde"})
        for field in ("python_import_seconds", "interpreter_start_seconds", "pod_to_process_start_seconds", "kernel"):
            self.assertIsNone(row[field], field)

    def test_hostile_or_impossible_wall_clock_times_fail_naming_the_pod(self) -> None:
        for fields, rule in (
            ({"first_statement_at": CREATED_AT - 1.5}, "first_statement_at .* outside the pod's life"),
            ({"first_statement_at": CREATED_AT + 2.5}, "first_statement_at .* outside the pod's life"),
            ({"imports_done_at": CREATED_AT + 9}, "imports_done_at .* outside the pod's life"),
            ({"imports_done_at": CREATED_AT + 0.92}, "imports finished before the process started"),
        ):
            with self.subTest(fields=fields), self.assertRaisesRegex(demo.EpisodeInvalid, "rollout-abcde: .*" + rule):
                validate(ready_event(**fields))

    def test_disagreeing_proc_clocks_are_unknown_with_a_note_never_a_failure(self) -> None:
        """/proc's process start and kernel boot are the sandbox's boot clock: where they contradict
        its wall clock (LXCFS, Sysbox, a restored snapshot), both are unknown and the row says why."""
        for fields, where in (
            ({"process_started_at": CREATED_AT - 3600}, "before the pod's creation"),
            ({"process_started_at": CREATED_AT + 5}, r"\(1795946406.000\) is after the container's end"),  # LXCFS
            ({"process_started_at": 1e300}, r"\(1e\+300\) is after the container's end"),
            ({"process_started_at": CREATED_AT + 5, "first_statement_at": None}, "after the container's end"),
            ({"process_started_at": CREATED_AT + 1.0}, "after its first statement"),  # a wall clock stepped forward
            ({"kernel_booted_at": CREATED_AT + 0.95}, "kernel booted .* after its process started"),
            ({"kernel_booted_at": 1e300}, "kernel booted .* after its process started"),
        ):
            with self.subTest(fields=fields):
                row = validate(ready_event(**fields))
                self.assertRegex(row["clock_note"] or "", where + ".*boot clock and its wall clock disagree")
                for field in (
                    "process_started_at",
                    "kernel_booted_at",
                    "kernel",
                    "pod_to_process_start_seconds",
                    "pod_to_kernel_boot_seconds",
                    "kernel_boot_to_process_start_seconds",
                    "interpreter_start_seconds",
                ):
                    self.assertIsNone(row[field], field)
                self.assertAlmostEqual(row["pod_to_ready_seconds"], 1.3)  # the rest of the episode stands
        self.assertIsNone(validate(ready_event())["clock_note"])

    def test_a_process_start_inside_the_pods_life_bounds_ready_from_below(self) -> None:
        """A ready claimed before the process that reports it started (by /proc, inside the pod's
        life) is refused: a forged ready, or a clock stepped back."""
        for fields in (
            {"process_started_at": CREATED_AT + 2.0},
            {"process_started_at": CREATED_AT + 1.4, "first_statement_at": None},
        ):
            with (
                self.subTest(fields=fields),
                self.assertRaisesRegex(
                    demo.EpisodeInvalid, r"rollout-abcde: its ready event .* is earlier than its own process's start"
                ),
            ):
                validate(ready_event(**fields))
        row = validate(ready_event(process_started_at=CREATED_AT + 1.31, first_statement_at=None))  # within two ticks
        self.assertAlmostEqual(row["pod_to_process_start_seconds"], 1.31)

    def test_the_workers_own_finding_is_noted_in_this_tools_words(self) -> None:
        """An LXCFS /proc: the worker found /proc/uptime (the container's age) shorter than its start
        after boot (the host's), sent both readings and no /proc stamps."""
        disagree = {"uptime_seconds": 0.04, "started_after_boot_seconds": 259200.5}
        row = validate(ready_event(process_started_at=None, kernel_booted_at=None, proc_clocks_disagree=disagree))
        self.assertEqual(
            row["clock_note"],
            "its /proc/uptime (0.04 s) is shorter than its process's start after boot (259200.50 s, /proc/self/stat): "
            + demo._CLOCKS_DISAGREE,
        )
        self.assertIsNone(row["kernel"])
        for hostile in ("\x1b[2J", {"uptime_seconds": "x"}, {"uptime_seconds": 1, "started_after_boot_seconds": 1e400}):
            with self.subTest(hostile=hostile):
                row = validate(ready_event(proc_clocks_disagree=hostile))
                if isinstance(hostile, dict):
                    self.assertIn("proc_clocks_disagree is malformed", row["clock_note"] or "")
                    self.assertIsNone(row["process_started_at"])
                else:
                    self.assertIsNone(row["clock_note"])  # not the worker's shape: its stamps are judged alone

    def test_a_clock_tick_of_slack_between_proc_and_the_first_statement(self) -> None:
        row = validate(ready_event(process_started_at=CREATED_AT + 0.96))
        self.assertAlmostEqual(row["interpreter_start_seconds"], -0.01)

    def test_non_numbers_are_not_invented(self) -> None:
        for value in ("early", True, [1], {"at": 1}, 10**400):
            with self.subTest(value=value):
                row = validate(ready_event(process_started_at=value, kernel_booted_at=value))
                self.assertIsNone(row["process_started_at"])
                self.assertIsNone(row["kernel_boot_to_process_start_seconds"])

    def test_each_row_figure_is_its_stamps_difference(self) -> None:
        """Every per-episode figure of a row is its end stamp minus its start stamp, as
        FIGURE_STAMPS names them (the summary's clocks and the docs read that table): the two
        never drift apart. validate_episode spells each one (a loop over the table would need
        mypy to accept non-literal TypedDict keys)."""
        rows = [validate(ready_event()), validate(ready_event(process_started_at=CREATED_AT + 0.96))]
        checked = 0
        for row in rows:
            plain: dict[str, Any] = dict(row)
            for figure, (start, end, _) in demo.FIGURE_STAMPS.items():
                if figure not in plain or start not in plain or end not in plain:
                    continue  # a batch figure, or python_import's and import_to_ready's (imports_done_at is not kept)
                with self.subTest(figure=figure):
                    if plain[start] is None or plain[end] is None:
                        self.assertIsNone(plain[figure])
                    else:
                        self.assertAlmostEqual(plain[figure], plain[end] - plain[start], places=9)
                    checked += 1
        self.assertEqual(checked, 2 * 10)  # each of the row's own figures with both stamps kept, in both rows

    def test_phases_and_rows_hold_every_new_figure(self) -> None:
        row = validate(ready_event())
        table = demo.phase_table([row])
        for phase in (
            "pod_to_process_start_seconds",
            "pod_to_kernel_boot_seconds",
            "kernel_boot_to_process_start_seconds",
            "interpreter_start_seconds",
        ):
            self.assertIn(phase, demo.PHASES)
            self.assertIn(phase, demo.PHASE_LABELS)
            self.assertEqual(table[phase]["samples"], 1)
            self.assertIn(phase, demo.pod_row(row))
        json.dumps(demo.pod_row(row), allow_nan=False)


def run_worker(**env_overrides: str) -> dict[str, Any]:
    """The embedded worker run locally; its ready event."""
    with tempfile.TemporaryDirectory() as root:
        workspace = Path(root, "workspace")
        workspace.mkdir()
        script = Path(root, "episode.py")
        script.write_text(demo.WORKER_SOURCE)
        env = dict(
            ENVIRONMENT,  # not os.environ: it runs beside the other tests (tests/concurrently.py)
            EPISODE_ID="rollout-xyz",
            RL_DEMO_WORKSPACE=str(workspace),
            RL_DEMO_TERMINATION_LOG=str(Path(root, "termination-log")),
            **{key: value.replace("{root}", root) for key, value in env_overrides.items()},
        )
        proc = Path(root, "proc")
        (proc / "self").mkdir(parents=True)
        lxcfs = env.pop("LXCFS", None)  # the container's age; the host booted 3 days before the process
        (proc / "uptime").write_text("0.05 0.00\n" if lxcfs else "100.00 170.25\n")
        start = str(259200 * os.sysconf("SC_CLK_TCK")) if lxcfs else "9950"
        # field 22 (starttime) = 9950 ticks; a command name with spaces and a parenthesis
        fields = ["S", "1"] + ["0"] * 17 + [start] + ["0"] * 30
        (proc / "self" / "stat").write_text("4242 (odd ) name) " + " ".join(fields) + "\n")
        before = time.time()
        result = subprocess.run(
            [image_python(), "-B", str(script)], env=env, capture_output=True, text=True, timeout=60
        )
        after = time.time()
        if result.returncode != 0:
            raise AssertionError(result.stderr)
        ready = demo.parse_events(result.stdout)[0]
        ready["test_window"] = (before, after)
        return ready


class WorkerClockTest(Case):
    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def test_the_worker_reads_the_proc_it_is_given(self) -> None:
        ready = run_worker(RL_DEMO_PROC="{root}/proc")
        before, after = ready["test_window"]
        ticks = os.sysconf("SC_CLK_TCK")
        self.assertLessEqual(before - 100.0, ready["kernel_booted_at"])
        self.assertLessEqual(ready["kernel_booted_at"], after - 100.0)
        self.assertAlmostEqual(ready["process_started_at"] - ready["kernel_booted_at"], 9950 / ticks, places=6)

    def test_unreadable_proc_gives_null(self) -> None:
        ready = run_worker(RL_DEMO_PROC="{root}/absent")
        self.assertIsNone(ready["process_started_at"])
        self.assertIsNone(ready["kernel_booted_at"])
        self.assertIsNotNone(ready["first_statement_at"])

    def test_the_worker_reports_its_proc_clocks(self) -> None:
        ready = run_worker()
        self.assertLessEqual(ready["first_statement_at"], ready["imports_done_at"])
        self.assertLessEqual(ready["imports_done_at"], ready["at"])
        if not Path("/proc/self/stat").exists():
            self.assertIsNone(ready["process_started_at"])
            return
        self.assertLessEqual(ready["process_started_at"], ready["first_statement_at"] + demo.CLOCK_TICK_SLACK)
        self.assertGreater(ready["process_started_at"], ready["first_statement_at"] - 10)
        self.assertLess(ready["kernel_booted_at"], ready["process_started_at"])

    def test_an_lxcfs_proc_gives_null_stamps_and_both_readings(self) -> None:
        """LXCFS: /proc/uptime is the container's age (lxc/lxcfs proc_uptime_read: the reaper's
        age), /proc/self/stat's starttime the host's ticks since boot."""
        ready = run_worker(RL_DEMO_PROC="{root}/proc", LXCFS="1")
        self.assertIsNone(ready["process_started_at"])
        self.assertIsNone(ready["kernel_booted_at"])
        self.assertEqual(
            ready["proc_clocks_disagree"], {"uptime_seconds": 0.05, "started_after_boot_seconds": 259200.0}
        )
        consistent = run_worker(RL_DEMO_PROC="{root}/proc")
        self.assertIsNone(consistent["proc_clocks_disagree"])

    def test_the_ready_event_still_fits_the_termination_message(self) -> None:
        self.assertIn("first_statement_at=STARTED_AT", demo.WORKER_SOURCE)
        self.assertLess(demo.WORKER_SOURCE.index("= proc_clocks("), demo.WORKER_SOURCE.index("import hashlib"))


# A kubelet's /metrics by hand. RunPodSandbox is in both of the kubelet's families: by operation type
# (s*: the guide's figure; its bucket bounds here are simplified, the real ones are
# ExponentialBuckets(.005, 2.5, 14)) and by RuntimeClass handler (h*: only a cross-check).
SAMPLE_METRICS = """\
# HELP kubelet_run_podsandbox_duration_seconds [ALPHA] Duration in seconds of the run_podsandbox operations.
# TYPE kubelet_run_podsandbox_duration_seconds histogram
kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="0.005"} {h0005}
kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="0.5"} {h05}
kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="1"} {h1}
kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="+Inf"} {hinf}
kubelet_run_podsandbox_duration_seconds_sum{runtime_handler="cube"} {hsum}
kubelet_run_podsandbox_duration_seconds_count{runtime_handler="cube"} {hinf}
kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="",le="0.005"} 7
kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="",le="0.5"} 7
kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="",le="1"} 7
kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="",le="+Inf"} 7
kubelet_run_podsandbox_duration_seconds_sum{runtime_handler=""} 0.00002
kubelet_run_podsandbox_duration_seconds_count{runtime_handler=""} 7
# TYPE kubelet_runtime_operations_duration_seconds histogram
kubelet_runtime_operations_duration_seconds_bucket{operation_type="create_container",le="0.01"} {c001}
kubelet_runtime_operations_duration_seconds_bucket{operation_type="create_container",le="0.025"} {c0025}
kubelet_runtime_operations_duration_seconds_bucket{operation_type="create_container",le="+Inf"} {c0025}
kubelet_runtime_operations_duration_seconds_sum{operation_type="create_container"} {csum}
kubelet_runtime_operations_duration_seconds_count{operation_type="create_container"} {c0025}
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.1"} 0
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.5"} {s05}
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="1"} {s1}
kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="+Inf"} {sinf}
kubelet_runtime_operations_duration_seconds_sum{operation_type="run_podsandbox"} {ssum}
kubelet_runtime_operations_duration_seconds_count{operation_type="run_podsandbox"} {sinf}
kubelet_runtime_operations_duration_seconds_bucket{operation_type="start_container",le="0.25"} {st}
kubelet_runtime_operations_duration_seconds_bucket{operation_type="start_container",le="+Inf"} {st}
kubelet_runtime_operations_duration_seconds_sum{operation_type="start_container"} {stsum}
kubelet_runtime_operations_duration_seconds_count{operation_type="start_container"} {st}
kubelet_runtime_operations_total{operation_type="create_container"} 99
kubelet_pod_start_duration_seconds_bucket{le="+Inf"} 12
"""


def metrics_text(**values: float) -> str:
    defaults = {"s05": 0, "s1": 0, "sinf": 0, "ssum": 0, "c001": 0, "c0025": 0, "csum": 0, "st": 0, "stsum": 0}
    defaults.update({"h0005": 0, "h05": 0, "h1": 0, "hinf": 0, "hsum": 0})
    defaults.update(values)
    text = SAMPLE_METRICS
    for key, value in defaults.items():
        text = text.replace("{" + key + "}", repr(value))
    return text


def reading(text: str, handler: str = "cube") -> demo.KubeletReading:
    scanner = demo.MetricsScanner(
        [demo.HANDLER_SANDBOX_FAMILY, *(family for _, family, _, _ in demo.KUBELET_OPERATIONS)]
    )
    scanner.feed(text.encode())
    return demo.kubelet_reading(scanner.finish(), handler, scanner.error)


class PrometheusTextTest(Case):
    def test_sample_lines(self) -> None:
        self.assertEqual(
            demo.parse_metric_line('x_bucket{a="q\\"uote\\\\d\\n",le="+Inf"} 3 1700000000000'),
            ("x_bucket", {"a": 'q"uote\\d\n', "le": "+Inf"}, 3.0),
        )
        self.assertEqual(demo.parse_metric_line("up 1"), ("up", {}, 1.0))
        self.assertEqual(demo.parse_metric_line('x{a="1",} 2.5e-3'), ("x", {"a": "1"}, 0.0025))
        for line in ("# HELP x y", "# TYPE x histogram", "", "x{a=1} 2", 'x{a="1" 2', "x{} many", 'x{a="1"}'):
            with self.subTest(line=line):
                self.assertIsNone(demo.parse_metric_line(line))

    def test_the_scanner_keeps_only_wanted_families_across_chunks(self) -> None:
        text = metrics_text(s05=2, s1=3, sinf=4, ssum=2.5).encode()
        scanner = demo.MetricsScanner(["kubelet_run_podsandbox_duration_seconds"])
        for start in range(0, len(text), 7):
            scanner.feed(text[start : start + 7])
        samples = scanner.finish()
        self.assertEqual(len(samples), 12)
        self.assertTrue(all(name.startswith("kubelet_run_podsandbox_duration_seconds") for name, _, _ in samples))

    def test_long_lines_and_garbage_are_ignored(self) -> None:
        scanner = demo.MetricsScanner(["fam"])
        scanner.feed(b'fam_count{a="' + b"x" * (demo.METRICS_LINE_LIMIT + 10))
        scanner.feed(b'"} 5\nfam_count{a="b"} 2\n\xff\xfefam garbage\nfam_sum{a="b"} 1')
        self.assertEqual(scanner.finish(), [("fam_count", {"a": "b"}, 2.0), ("fam_sum", {"a": "b"}, 1.0)])
        self.assertEqual(scanner.long_lines, 1)

    def test_too_many_samples_is_an_error(self) -> None:
        scanner = demo.MetricsScanner(["fam"])
        scanner.feed(b"fam_count 1\n" * (demo.METRICS_SAMPLES_LIMIT + 1))
        scanner.finish()
        self.assertIn("more than", scanner.error)
        self.assertIn("more than", demo.kubelet_reading([], "cube", scanner.error).error)

    def test_histograms_by_label(self) -> None:
        histograms = reading(metrics_text(s05=2, s1=3, sinf=4, ssum=2.5, c001=1, c0025=3, csum=0.04)).histograms
        self.assertEqual(
            histograms["RunPodSandbox"],
            demo.Histogram(((0.1, 0.0), (0.5, 2.0), (1.0, 3.0), (math.inf, 4.0)), 2.5, 4.0),
        )
        self.assertEqual(
            histograms["CreateContainer"], demo.Histogram(((0.01, 1.0), (0.025, 3.0), (math.inf, 3.0)), 0.04, 3.0)
        )
        self.assertIsNone(histograms["PullImage"])  # never happened on this node
        self.assertEqual(
            histograms[demo.HANDLER_SANDBOX],
            demo.Histogram(((0.005, 0.0), (0.5, 0.0), (1.0, 0.0), (math.inf, 0.0)), 0.0, 0.0),
        )

    def test_run_podsandbox_comes_from_the_operations_family_whatever_the_handler(self) -> None:
        """kubelet_runtime_operations_duration_seconds{operation_type="run_podsandbox"} has no handler
        label: the handler only picks the cross-check's series (instrumented_services.go)."""
        text = metrics_text(s05=2, s1=3, sinf=4, ssum=2.5)
        cube, default = reading(text).histograms, reading(text, handler="").histograms
        self.assertEqual(cube["RunPodSandbox"], default["RunPodSandbox"])
        assert cube["RunPodSandbox"] is not None
        self.assertEqual(cube["RunPodSandbox"].count, 4.0)
        by_default = default[demo.HANDLER_SANDBOX]
        assert by_default is not None
        self.assertEqual((by_default.count, by_default.sum), (7.0, 0.00002))

    def test_malformed_histograms_are_named(self) -> None:
        for text in (
            'kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="1"} 2\n',  # no +Inf
            'kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="1"} 3\n'
            'kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="+Inf"} 2\n'
            'kubelet_run_podsandbox_duration_seconds_count{runtime_handler="cube"} 2\n',  # not cumulative
            'kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="+Inf"} NaN\n',
            'kubelet_run_podsandbox_duration_seconds_bucket{runtime_handler="cube",le="x"} 1\n',
        ):
            with self.subTest(text=text):
                self.assertIn("malformed", reading(text).error)


def histogram(*buckets: tuple[float, float], total: float = 0.0) -> demo.Histogram:
    return demo.Histogram(tuple(buckets), total, buckets[-1][1])


INF = math.inf


class HistogramMathTest(Case):
    def test_quantile_interpolates_inside_the_bucket_like_prometheus(self) -> None:
        h = histogram((0.1, 2), (0.5, 6), (1.0, 9), (INF, 10))
        # q=0.5: rank 5 in (0.1, 0.5] holding 4, 3 of them below: 0.1 + 0.4 * 3/4
        self.assertEqual(demo.histogram_quantile(0.5, h), (0.1 + 0.4 * 0.75, (0.1, 0.5)))
        # q=0.1: rank 1 in the lowest bucket, which starts at 0: 0.1 * 1/2
        self.assertEqual(demo.histogram_quantile(0.1, h), (0.05, (0.0, 0.1)))
        # q=0.8: rank 8 in (0.5, 1] holding 3, 2 of them below: 0.5 + 0.5 * 2/3
        value, bucket = demo.histogram_quantile(0.8, h) or (0.0, (0.0, 0.0))
        self.assertAlmostEqual(value, 0.5 + 0.5 * 2 / 3)
        self.assertEqual(bucket, (0.5, 1.0))
        # q=0.95: rank 9.5 in +Inf: the highest finite bound
        self.assertEqual(demo.histogram_quantile(0.95, h), (1.0, (1.0, INF)))
        self.assertIsNone(demo.histogram_quantile(0.5, histogram((0.1, 0), (INF, 0))))
        self.assertIsNone(demo.histogram_quantile(0.5, histogram((INF, 3))))

    def test_subtraction_bucket_by_bucket(self) -> None:
        before = histogram((0.5, 3), (1.0, 4), (INF, 5), total=3.0)
        after = histogram((0.5, 10), (1.0, 13), (INF, 15), total=10.5)
        self.assertEqual(demo.subtract_histograms(after, before), histogram((0.5, 7), (1.0, 9), (INF, 10), total=7.5))
        self.assertEqual(demo.subtract_histograms(after, None), after)
        with self.assertRaisesRegex(ValueError, "went down"):
            demo.subtract_histograms(before, after)
        with self.assertRaisesRegex(ValueError, "bucket bounds changed"):
            demo.subtract_histograms(histogram((0.25, 10), (INF, 15)), before)

    def test_figures_are_never_infinite(self) -> None:
        figures = demo.operation_figures(histogram((-1e308, 0), (1e308, 4), (INF, 4), total=1e308))
        self.assertEqual((figures["p50_seconds"], figures["p50_bucket"]), (None, None))
        self.assertEqual(figures["count"], 4)
        json.dumps(figures, allow_nan=False)

    def test_figures_mean_is_exact_and_buckets_are_json(self) -> None:
        figures = demo.operation_figures(histogram((0.5, 7), (1.0, 9), (INF, 10), total=7.5))
        self.assertEqual(figures["count"], 10)
        self.assertEqual(figures["mean_seconds"], 0.75)
        self.assertAlmostEqual(figures["p50_seconds"], 5 / 7 * 0.5)
        self.assertEqual(figures["p50_bucket"], [0.0, 0.5])
        self.assertEqual((figures["p95_seconds"], figures["p95_bucket"]), (1.0, [1.0, None]))
        json.dumps(figures, allow_nan=False)


def expected(pods: int, pulls: int | None = 0) -> dict[str, int | None]:
    return {"RunPodSandbox": pods, "CreateContainer": pods, "StartContainer": pods, "PullImage": pulls}


class RuntimeOperationsTest(Case):
    def test_before_and_after_per_node_and_pooled(self) -> None:
        before = {
            "node-a": reading(metrics_text(s05=1, s1=1, sinf=1, ssum=0.4, c001=5, c0025=5, csum=0.02)),
            "node-b": reading(metrics_text()),
            "node-idle": reading(metrics_text()),
        }
        after = {
            # node-a: 3 sandboxes (0.5..1 s), 2 of them this run's; 2 creates
            "node-a": reading(
                metrics_text(s05=1, s1=4, sinf=4, ssum=2.65, c001=6, c0025=7, csum=0.05, st=2, stsum=0.35)
            ),
            # node-b: 2 sandboxes, one of them slower than 1 s
            "node-b": reading(metrics_text(s05=0, s1=1, sinf=2, ssum=2.0, c001=2, c0025=2, csum=0.01, st=2, stsum=0.3)),
        }
        operations = demo.count_runtime_operations(
            before, after, "cube", {"node-a": expected(2), "node-b": expected(2)}
        )
        self.assertEqual(operations["handler"], "cube")
        self.assertEqual(set(operations["nodes"]), {"node-a", "node-b"})
        node_a = operations["nodes"]["node-a"]
        self.assertEqual(node_a["RunPodSandbox"]["count"], 3)
        self.assertAlmostEqual(node_a["RunPodSandbox"]["mean_seconds"], 2.25 / 3)
        self.assertEqual(node_a["RunPodSandbox"]["p50_bucket"], [0.5, 1.0])
        self.assertAlmostEqual(node_a["RunPodSandbox"]["p50_seconds"], 0.75)  # rank 1.5 of 3 in (0.5, 1]
        self.assertEqual(node_a["CreateContainer"]["count"], 2)
        self.assertEqual(node_a["PullImage"]["count"], 0)
        self.assertEqual(node_a["foreign_operations"], 1)
        self.assertIn("RunPodSandbox: 1 of 3 operations were not this run's", node_a["note"])
        node_b = operations["nodes"]["node-b"]
        self.assertEqual(node_b["foreign_operations"], 0)
        self.assertEqual(node_b["RunPodSandbox"]["p95_bucket"], [1.0, None])
        pooled = operations["pooled"]
        self.assertEqual(pooled["RunPodSandbox"]["count"], 5)
        self.assertAlmostEqual(pooled["RunPodSandbox"]["mean_seconds"], (2.25 + 2.0) / 5)
        # pooled buckets: (0.5, 1] holds 4 of 5: p50 rank 2.5 -> 0.5 + 0.5 * 2.5/4
        self.assertAlmostEqual(pooled["RunPodSandbox"]["p50_seconds"], 0.5 + 0.5 * 2.5 / 4)
        self.assertEqual(pooled["StartContainer"]["count"], 4)
        self.assertAlmostEqual(pooled["StartContainer"]["mean_seconds"], 0.65 / 4)
        self.assertIsNone(pooled["PullImage"])
        json.dumps(operations, allow_nan=False)

    def test_the_handler_family_is_a_cross_check_named_when_implausibly_small(self) -> None:
        """A kubelet before 1.36 observes kubelet_run_podsandbox_duration_seconds when the call
        starts (microseconds); run_podsandbox's histogram stays the figure, and a note says why."""
        before = {"node-a": reading(metrics_text())}
        buggy = metrics_text(s05=1, s1=2, sinf=2, ssum=1.5, h0005=2, h05=2, h1=2, hinf=2, hsum=4e-6)
        operations = demo.count_runtime_operations(before, {"node-a": reading(buggy)}, "cube", {"node-a": expected(2)})
        self.assertAlmostEqual(operations["pooled"]["RunPodSandbox"]["mean_seconds"], 0.75)
        crosscheck = operations["sandbox_crosscheck"]
        self.assertEqual(crosscheck["handler_figures"]["count"], 2)
        self.assertAlmostEqual(crosscheck["handler_figures"]["mean_seconds"], 2e-6)
        self.assertIn(
            'kubelet_run_podsandbox_duration_seconds{runtime_handler="cube"} averages 2 \u00b5s', crosscheck["note"]
        )
        self.assertIn("against 750 ms", crosscheck["note"])
        self.assertIn("kubernetes/kubernetes#135749", crosscheck["note"])
        summary = demo.render_summary(results_with([validate(ready_event())], operations))
        self.assertIn(f"note: {crosscheck['note']}", " ".join(summary.split()))
        # a 1.36 kubelet: both families agree, and nothing is said
        fixed = metrics_text(s05=1, s1=2, sinf=2, ssum=1.5, h05=1, h1=2, hinf=2, hsum=1.49)
        operations = demo.count_runtime_operations(before, {"node-a": reading(fixed)}, "cube", {"node-a": expected(2)})
        self.assertEqual(operations["sandbox_crosscheck"]["note"], "")
        # no sandbox of this handler, or none at all: nothing to compare
        for text in (metrics_text(s05=1, s1=2, sinf=2, ssum=1.5), metrics_text()):
            operations = demo.count_runtime_operations(
                before, {"node-a": reading(text)}, "cube", {"node-a": expected(2)}
            )
            self.assertEqual(operations["sandbox_crosscheck"]["note"], "")

    def test_other_handlers_sandboxes_are_foreign(self) -> None:
        """run_podsandbox counts every sandbox of the node, whatever its handler."""
        before = {"node-a": reading(metrics_text())}
        after = {"node-a": reading(metrics_text(s05=1, s1=3, sinf=3, ssum=2.2, h05=1, h1=1, hinf=1, hsum=0.7))}
        node = demo.count_runtime_operations(before, after, "cube", {"node-a": expected(1)})["nodes"]["node-a"]
        self.assertEqual(node["RunPodSandbox"]["count"], 3)
        self.assertIn("RunPodSandbox: 2 of 3 operations were not this run's", node["note"])

    def test_a_restarted_kubelet_voids_its_node(self) -> None:
        before = {"node-a": reading(metrics_text(s05=5, s1=5, sinf=5, ssum=2.0))}
        after = {"node-a": reading(metrics_text(s05=1, s1=2, sinf=2, ssum=1.0))}
        node = demo.count_runtime_operations(before, after, "cube", {"node-a": expected(2)})["nodes"]["node-a"]
        self.assertIn("went down", node["note"])
        self.assertIsNone(node["RunPodSandbox"])
        vanished = {"node-a": reading("")}
        node = demo.count_runtime_operations(before, vanished, "cube", {"node-a": expected(2)})["nodes"]["node-a"]
        self.assertIn("disappeared", node["note"])

    def test_unread_nodes_say_why(self) -> None:
        before = {"node-a": demo.KubeletReading({}, "forbidden")}
        after = {"node-a": reading(metrics_text()), "node-c": reading(metrics_text())}
        operations = demo.count_runtime_operations(
            before, after, "cube", {"node-a": expected(1), "node-c": expected(1), "node-d": expected(1)}
        )
        self.assertIn("forbidden", operations["nodes"]["node-a"]["note"])
        self.assertIn("not read before", operations["nodes"]["node-c"]["note"])
        self.assertIn("not read before", operations["nodes"]["node-d"]["note"])
        self.assertEqual(operations["pooled"]["RunPodSandbox"], None)

    def test_unknown_pulls_are_said(self) -> None:
        before = {"node-a": reading(metrics_text())}
        after = {"node-a": reading(metrics_text(s05=1, s1=1, sinf=1, ssum=0.3))}
        node = demo.count_runtime_operations(before, after, "cube", {"node-a": expected(1, None)})["nodes"]["node-a"]
        self.assertIn("PullImage: 0 operations, how many were this run's is unknown", node["note"])

    def test_expected_operations_from_rows(self) -> None:
        cached = validate(ready_event(), [k8s_event("Pulled", 'Container image "x" already present on machine')])
        pulled = validate(
            ready_event(), [k8s_event("Pulled", 'Successfully pulled image "x" in 1s (1s including waiting)')]
        )
        unknown = validate(ready_event())
        unknown["node"] = "node-b"
        self.assertEqual(
            demo.expected_operations([cached, pulled, unknown]),
            {"node-a": expected(2, 1), "node-b": expected(1, None)},
        )


class StreamingKubectl:
    """Stands in for the Kubectl seam's stream(): answers each node's /metrics in small chunks,
    from several threads at once, and records the calls."""

    def __init__(self, answers: dict[str, str | Exception]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def stream(self, args: list[str], consume: Callable[[bytes], None], **_: Any) -> None:
        self.calls.append(list(args))
        with self.lock:
            self.threads.add(threading.current_thread().name)
        node = args[2].split("/")[4]
        answer = self.answers[node]
        if isinstance(answer, Exception):
            raise answer
        data = answer.encode()
        for start in range(0, len(data), 100):
            consume(data[start : start + 100])


class ReadKubeletMetricsTest(Case):
    def test_every_node_is_read_through_the_proxy(self) -> None:
        answers: dict[str, str | Exception] = {
            f"node-{i}": metrics_text(s05=i, s1=i, sinf=i, ssum=i * 0.3) for i in range(5)
        }
        answers["node-9"] = demo.DemoError("error: forbidden", demo.EXIT_CLUSTER)
        kubectl = StreamingKubectl(answers)
        readings = demo.read_kubelet_metrics(kubectl, [*answers, "bad/../name"], "cube")  # type: ignore[arg-type]
        self.assertEqual(
            sorted(kubectl.calls), sorted(["get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics"] for node in answers)
        )
        for index in range(5):
            sandbox = readings[f"node-{index}"].histograms["RunPodSandbox"]
            assert sandbox is not None
            self.assertEqual(sandbox.count, index)
        self.assertEqual(readings["node-9"].error, "error: forbidden")
        self.assertEqual(readings["bad/../name"].error, "not a valid node name")


def rule(verbs: list[str], groups: list[str], resources: list[str], **extra: Any) -> dict[str, Any]:
    return {"verbs": verbs, "apiGroups": groups, "resources": resources, **extra}


def rules_answer(rules: list[Any], **status: Any) -> dict[str, Any]:
    answer = demo.rules_review("agc-rl-x")
    return {**answer, "status": {"resourceRules": rules, "nonResourceRules": [], "incomplete": False, **status}}


class RulesReviewTest(Case):
    """granted_by_rules: a rules review stands for the access reviews only where RBAC would allow
    each of them by one of its rules; anything less, and the access reviews decide."""

    def asked(self) -> dict[str, Any]:
        return demo.access_review_list("agc-rl-x", True, kubelet_metrics=True, lists_nodes=True, local_queue=True)

    def exact_rules(self) -> list[dict[str, Any]]:
        """One rule per permission asked, as a role that grants exactly these would list them."""
        rules = []
        for review in self.asked()["items"]:
            attributes = review["spec"]["resourceAttributes"]
            sub = attributes.get("subresource")
            resource = attributes["resource"] + (f"/{sub}" if sub else "")
            rules.append(rule([attributes["verb"]], [attributes["group"]], [resource]))
        return rules

    def test_wildcards_prove_every_review_allowed_as_asked(self) -> None:
        asked = self.asked()
        proven = demo.granted_by_rules(rules_answer([rule(["*"], ["*"], ["*"])]), asked)
        assert proven is not None
        self.assertEqual([review["spec"] for review in proven], [review["spec"] for review in asked["items"]])
        self.assertTrue(all(review["status"]["allowed"] is True for review in proven))
        self.assertEqual(demo.denied_permissions(proven), [])

    def test_each_permission_needs_a_rule_of_its_own(self) -> None:
        rules = self.exact_rules()
        self.assertIsNotNone(demo.granted_by_rules(rules_answer(rules), self.asked()))
        for index, missing in enumerate(rules):
            with self.subTest(missing=missing):
                fewer = rules[:index] + rules[index + 1 :]
                self.assertIsNone(demo.granted_by_rules(rules_answer(fewer), self.asked()))

    def test_an_answer_that_may_miss_rules_or_a_denial_proves_nothing(self) -> None:
        everything = [rule(["*"], ["*"], ["*"])]
        for answer in (
            rules_answer(everything, incomplete=True),  # a webhook authorizer: it may deny what RBAC allows
            rules_answer(everything, evaluationError='role.rbac.authorization.k8s.io "x" not found'),
            {**rules_answer(everything), "status": {"resourceRules": everything}},  # no incomplete: unknown
            {"kind": "SelfSubjectRulesReview"},
            None,
        ):
            with self.subTest(answer=answer):
                self.assertIsNone(demo.granted_by_rules(answer, self.asked()))

    def test_rules_match_as_rbac_matches_them(self) -> None:
        """Each case: one rule, one request (verb, resource, group, subresource), whether RBAC's
        evaluation_helpers.go would allow it."""
        cases = [
            (rule(["get"], [""], ["pods"]), ("get", "pods", "", ""), True),
            (rule(["list"], [""], ["pods"]), ("get", "pods", "", ""), False),
            (rule(["*"], [""], ["pods"]), ("watch", "pods", "", ""), True),
            (rule(["create"], [""], ["jobs"]), ("create", "jobs", "batch", ""), False),  # another group
            (rule(["create"], ["*"], ["jobs"]), ("create", "jobs", "batch", ""), True),
            (rule(["create"], ["apps", "batch"], ["jobs"]), ("create", "jobs", "batch", ""), True),
            (rule(["get"], [""], ["pods"]), ("get", "pods", "", "log"), False),  # a subresource is its own
            (rule(["get"], [""], ["pods/log"]), ("get", "pods", "", "log"), True),
            (rule(["get"], [""], ["pods/log"]), ("get", "pods", "", ""), False),
            (rule(["get"], [""], ["*/log"]), ("get", "pods", "", "log"), True),
            (rule(["get"], [""], ["*/log"]), ("get", "nodes", "", "proxy"), False),
            (rule(["get"], [""], ["pods/*"]), ("get", "pods", "", "log"), False),  # RBAC has no such wildcard
            (rule(["get"], [""], ["*"]), ("get", "nodes", "", "proxy"), True),
            (rule(["get"], [""], ["*/log"]), ("get", "pods", "", ""), False),
            (rule(["*"], ["*"], ["*"], resourceNames=["cube"]), ("get", "runtimeclasses", "node.k8s.io", ""), False),
            (
                rule(["get"], ["node.k8s.io"], ["runtimeclasses"], resourceNames=[]),
                ("get", "runtimeclasses", "node.k8s.io", ""),
                True,
            ),
            (rule(["Get"], [""], ["pods"]), ("get", "pods", "", ""), False),  # case matters
            ({"verbs": "get", "apiGroups": [""], "resources": ["pods"]}, ("get", "pods", "", ""), False),
            ({"verbs": ["get"], "resources": ["pods"]}, ("get", "pods", "", ""), False),  # no group listed
            ("get pods", ("get", "pods", "", ""), False),
        ]
        for granted, (verb, resource, group, subresource), allowed in cases:
            attributes = {"verb": verb, "resource": resource, "group": group}
            if subresource:
                attributes["subresource"] = subresource
            asked = {"items": [{"spec": {"resourceAttributes": attributes}}]}
            with self.subTest(rule=granted, asked=attributes):
                proven = demo.granted_by_rules(rules_answer([granted]), asked)
                self.assertEqual(proven is not None, allowed)


class PermissionTest(Case):
    def reviews(self, allowed_proxy: bool) -> list[dict[str, Any]]:
        reviews = demo.access_review_list("agc-rl-x", True, kubelet_metrics=True)["items"]
        for review in reviews:
            attributes = review["spec"]["resourceAttributes"]
            proxy = attributes.get("subresource") == "proxy"
            review["status"] = {"allowed": allowed_proxy or not proxy}
        return reviews

    def test_the_flag_adds_the_node_reviews_only_when_asked(self) -> None:
        plain = demo.access_review_list("agc-rl-x", True)["items"]
        flagged = demo.access_review_list("agc-rl-x", True, kubelet_metrics=True)["items"]
        self.assertEqual(len(flagged), len(plain) + 2)
        attributes = [review["spec"]["resourceAttributes"] for review in flagged[len(plain) :]]
        self.assertEqual(
            attributes,
            [
                {"verb": "get", "resource": "nodes", "group": "", "subresource": "proxy"},
                {"verb": "list", "resource": "nodes", "group": ""},
            ],
        )

    def findings(self, allowed_proxy: bool) -> list[demo.Finding]:
        return demo.preflight_findings(
            context="ctx",
            server=None,
            runtime=None,
            reviews=demo.Read(self.reviews(allowed_proxy)),
            kubelet_metrics=True,
        )

    def test_denied_node_proxy_is_its_own_finding_and_stops_a_run(self) -> None:
        findings = {finding.name: finding for finding in self.findings(False)}
        self.assertTrue(findings["permissions"].ok)
        self.assertFalse(findings["kubelet metrics"].ok)
        self.assertIn("get nodes/proxy", findings["kubelet metrics"].stop)
        self.assertIn("nothing was created", findings["kubelet metrics"].stop)
        granted = {finding.name: finding for finding in self.findings(True)}
        self.assertTrue(granted["kubelet metrics"].ok)
        self.assertIn("also allows exec", granted["kubelet metrics"].detail)
        without = demo.preflight_findings(
            context="ctx", server=None, runtime=None, reviews=demo.Read(self.reviews(False))
        )
        self.assertNotIn("kubelet metrics", {finding.name for finding in without})

    def test_every_failed_read_has_a_sentence_to_stop_with(self) -> None:
        """A run stops at the first finding that is not ok with its `stop`: a failed read's is
        never empty (it was, and the run's one line said nothing)."""
        failure = demo.Read(failure="Error from server (InternalError): boom")
        findings = demo.preflight_findings(
            context="ctx", server=None, runtime="cube", runtimeclass=failure, reviews=failure, nodes=failure
        )
        failed = [finding for finding in findings if not finding.ok]
        self.assertEqual(len(failed), 3)
        for finding in failed:
            self.assertIn("in context ctx (Error from server (InternalError): boom)", finding.stop)

    def test_run_refuses_before_creating_anything(self) -> None:
        test = self

        class Watch:
            ended = False

            def end(self) -> None:
                Watch.ended = True

        class Kubectl:
            context = "ctx"
            process_timeout = 30.0
            timing = demo.TIMING
            created: ClassVar[list[dict[str, Any]]] = []

            def runtimeclass(self, name: str) -> dict[str, Any]:
                return {"kind": "RuntimeClass", "handler": "cube"}

            def watch(self, *args: Any) -> Watch:  # the account's watch, started with the preflight
                return Watch()

            prepared: ClassVar[list[str]] = []

            def prepare_create(self) -> None:  # the namespace's create, started with the preflight
                self.prepared.append("create")

            def cancel_prepared(self) -> None:
                self.prepared.append("cancelled")

            def create_raw(self, path: str, manifest: dict[str, Any], review: bool = False) -> dict[str, Any]:
                test.assertEqual((path, review), (demo.RULES_REVIEW_PATH, True))  # the rules review only
                wildcard = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}  # a webhook beside RBAC:
                return {**manifest, "status": {"resourceRules": [wildcard], "incomplete": True}}  # no proof

            def create(self, manifest: dict[str, Any], review: bool = False) -> list[dict[str, Any]]:
                test.assertTrue(review)  # access reviews only
                self.created.append(manifest)
                return test.reviews(False)

        with tempfile.TemporaryDirectory() as root:
            settings = settings_for(1, output=Path(root, "out"), image="img", runtime="cube", kubelet_metrics=True)
            receipt = demo.Receipt(
                context="ctx",
                namespace="agc-rl-x",
                run_id="x",
                server=None,
                kubeconfig=None,
                kubectl=None,
                created_at=None,
                tool_version=None,
                jobs=[],
            )
            batch = demo.BatchRun(Kubectl(), receipt, settings, demo.Progress(enabled=False))  # type: ignore[arg-type]
            with self.assertRaises(demo.DemoError) as raised:
                batch.execute()
        self.assertEqual(raised.exception.exit_code, demo.EXIT_CLUSTER)
        self.assertIn("--kubelet-metrics needs get nodes/proxy", str(raised.exception))
        self.assertEqual(len(Kubectl.created), 1)
        self.assertEqual(batch.runtime_handler, "cube")
        self.assertTrue(Watch.ended)  # a refused preflight ends the account's watch
        self.assertEqual(Kubectl.prepared, ["create", "cancelled"])  # and the namespace's create it prepared

    def test_flags_parse(self) -> None:
        parser = demo.build_parser()
        self.assertTrue(parser.parse_args(["run", "--output", "x", "--kubelet-metrics"]).kubelet_metrics)
        self.assertFalse(parser.parse_args(["run", "--output", "x"]).kubelet_metrics)
        self.assertTrue(parser.parse_args(["check", "--kubelet-metrics"]).kubelet_metrics)


def results_with(rows: list[demo.EpisodeRow], operations: dict[str, Any] | None = None) -> dict[str, Any]:
    results = results_of(rows)
    if operations is not None:
        results["runtime_operations"] = operations
    return results


class ReportTest(Case):
    def operations(self) -> dict[str, Any]:
        before = {"node-a": reading(metrics_text())}
        after = {"node-a": reading(metrics_text(s05=1, s1=2, sinf=2, ssum=1.2, c001=2, c0025=2, csum=0.01, st=2))}
        return demo.count_runtime_operations(before, after, "cube", {"node-a": expected(1)})

    def test_summary_shows_sources_and_operations_with_buckets(self) -> None:
        hostile = k8s_event("Pulled", 'Container image "x\x1b[31m" already present on machine')
        results = results_with([validate(ready_event(), [hostile])], self.operations())
        text = demo.render_summary(results)
        self.assertIn("pod created -> process started", text)
        self.assertIn("1 cached, 0 pulled, 0 unknown: cache_state cached", text)
        self.assertIn("1 booted in the sandbox", text)
        self.assertIn("RunPodSandbox", text)
        self.assertIn("(500 ms, 1 s]", text)
        self.assertIn("RunPodSandbox: 1 of 2 operations were not this run's", text)
        json.dumps(results, allow_nan=False)

    def test_summary_without_the_new_keys(self) -> None:
        results = results_with([validate(ready_event())])
        del results["image_cache"]
        self.assertNotIn("runtime operation", demo.render_summary(results))

    def test_compare_has_the_new_phases_and_operations(self) -> None:
        first = results_with([validate(ready_event())], self.operations())
        second = results_with([validate(ready_event())])
        rows = {row["figure"]: row for row in demo.comparison([("a", first), ("b", second)])}
        self.assertAlmostEqual(rows["pod_to_process_start_seconds:p50"]["values"][0], 0.9)
        self.assertAlmostEqual(rows["runtime_operations:RunPodSandbox"]["values"][0], 0.6)
        self.assertIsNone(rows["runtime_operations:RunPodSandbox"]["values"][1])

    def test_timeline_draws_the_sandbox_strips_where_known(self) -> None:
        rows = [validate(ready_event()), validate(ready_event(kernel_booted_at=None, process_started_at=None))]
        rows[1]["pod"] = "rollout-other"
        root = ElementTree.fromstring(demo.render_timeline_svg(results_with(rows)))
        strips = [el for el in root.iter("{http://www.w3.org/2000/svg}rect") if el.get("class") == "detail"]
        self.assertEqual([strip.get("data-phase") for strip in strips], ["process start"])  # 0.6 s of ticks
        # the kernel booted 0.3 s after a whole-second creation: shorter than that clock tells, a marker
        marks = [
            el.get("data-phase") for el in root.iter("{http://www.w3.org/2000/svg}g") if el.get("class") == "marker"
        ]
        self.assertIn("sandbox boot", marks)
        self.assertIn("sandbox boot: pod created -> sandbox kernel booted", "".join(root.itertext()))
        drawn = [el for el in root.iter() if el.get("class") in ("bar", "marker") and el.get("data-phase")]
        names = {name for name, *_ in demo.TIMELINE_BARS}
        self.assertEqual({el.get("data-phase") for el in drawn} & names, names)


if __name__ == "__main__":
    unittest.main()
