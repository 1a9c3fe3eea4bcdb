"""The summary reads right: each figure as precise as its clocks (FIGURE_CLOCKS), the clocks named,
negative values explained, p99 and mean from 100 samples on, the files and a verdict last. Pure
tables of input -> text."""

from __future__ import annotations

import copy
import unittest
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import rl_batch_demo as demo
from tests.clusterobjects import JOB_CREATED_AT, make_events, make_pod, results_of, settings_for


class FigureTextTest(unittest.TestCase):
    """(value, figure) -> text: the clock's resolution decides the digits."""

    TABLE = (
        # two whole-second stamps: whole seconds, never milliseconds
        (0.0, "pod_to_container_started_seconds", "0 s"),
        (1.0, "pod_to_container_started_seconds", "1 s"),
        (0.4, "pod_to_container_started_seconds", "0 s"),  # a mean: rounded to what the clock holds
        # a whole-second stamp against a finer clock: tenths, as the guide prints them
        (3.7312, "batch_to_all_ready_seconds", "3.7 s"),
        (0.0432, "pod_to_ready_seconds", "0.0 s"),
        (-0.381, "reward_to_finished_seconds", "-0.4 s"),
        (-0.04, "reward_to_finished_seconds", "0.0 s"),  # no "-0.0"
        (0.8408, "pod_to_scheduled_seconds", "0.8 s"),
        # clock ticks: 10 ms steps below a second
        (0.4099, "interpreter_start_seconds", "410 ms"),
        (0.0041, "kernel_boot_to_process_start_seconds", "0 ms"),
        (1.4213, "interpreter_start_seconds", "1.42 s"),
        (0.998, "kernel_boot_to_process_start_seconds", "1.00 s"),
        # fine clocks: milliseconds below a second
        (0.0711, "python_import_seconds", "71.1 ms"),
        (-0.00001, "import_to_ready_seconds", "0.0 ms"),
        (2.7112, "client_job_complete_seconds", "2.71 s"),
        (None, "client_job_complete_seconds", "-"),
    )

    def test_table(self) -> None:
        for value, figure, text in self.TABLE:
            with self.subTest(value=value, figure=figure):
                self.assertEqual(demo.figure_text(value, figure), text)

    def test_every_phase_and_threshold_figure_has_its_clocks(self) -> None:
        self.assertEqual(set(demo.PHASES) | set(demo.THRESHOLD_METRICS), set(demo.FIGURE_CLOCKS))


class ClockTextTest(unittest.TestCase):
    TABLE = (
        ("pod_to_container_started_seconds", "mixed: API server 1 s + runtime 1 s"),
        ("kernel_boot_to_process_start_seconds", "kernel ticks, 10 ms clock"),
        ("python_import_seconds", "node clock"),
        ("client_job_complete_seconds", "client clock"),
        ("batch_to_all_ready_seconds", "mixed: API server 1 s + node"),
        ("pod_to_process_start_seconds", "mixed: API server 1 s + kernel ticks"),
        ("interpreter_start_seconds", "mixed: kernel ticks 10 ms + node"),
        ("pod_observed_to_ready_seconds", "mixed: client + node"),
        ("reward_to_finished_seconds", "mixed: node + runtime 1 s"),
    )

    def test_table(self) -> None:
        for figure, text in self.TABLE:
            with self.subTest(figure=figure):
                self.assertEqual(demo.clock_text(figure), text)


def summary_results(count: int = 4, *, same_second_start: bool = False) -> Dict[str, Any]:
    """Results of `count` episodes, one a second, with whole-second stamps as the API server
    writes them; `same_second_start`: each container starts in its pod's creation second."""
    rows = []
    for index in range(count):
        started = index + (0 if same_second_start else 1)
        pod = make_pod(
            f"rollout-{index}",
            created=f"2026-11-29T10:00:{index:02d}Z",
            started=f"2026-11-29T10:00:{started:02d}Z",
            finished=f"2026-11-29T10:00:{index + 3:02d}Z",
        )
        pod["status"]["conditions"][0]["lastTransitionTime"] = f"2026-11-29T10:00:{index:02d}Z"  # PodScheduled
        events = make_events(f"rollout-{index}", JOB_CREATED_AT + index + 2.0, JOB_CREATED_AT + index + 2.5)
        rows.append(demo.validate_episode(pod, events, JOB_CREATED_AT, None, "here"))
    return results_of(rows)


class SummaryTest(unittest.TestCase):
    maxDiff = None

    def test_batch_and_phase_lines(self) -> None:
        lines = demo.render_summary(summary_results(same_second_start=True)).splitlines()
        self.assertEqual(
            lines[3:9],
            [
                "batch figure                              value  by       clock",
                "Job created -> all episodes ready         5.0 s  pod      mixed: API server 1 s + node",
                "Job created -> all rewards                5.5 s  pod      mixed: API server 1 s + node",
                "Job created -> all containers started       3 s  cluster  mixed: API server 1 s + runtime 1 s",
                "Job created -> all containers finished      6 s  cluster  mixed: API server 1 s + runtime 1 s",
                "client submit -> Job Complete observed   9.00 s  client   client clock",
            ],
        )
        header = next(i for i, line in enumerate(lines) if line.startswith("phase (per episode)"))
        self.assertEqual(
            lines[header : header + 5],
            [
                "phase (per episode)                        p50      p95      max  clock",
                "pod created -> scheduled                       < 1 s (1 s clock)  API server, 1 s clock",
                "pod created -> sandbox kernel booted         -        -        -  "
                "mixed: API server 1 s + kernel ticks",
                "sandbox kernel boot -> process start         -        -        -  kernel ticks, 10 ms clock",
                "pod created -> container started               < 1 s (1 s clock)  mixed: API server 1 s + runtime 1 s",
            ],
        )
        self.assertEqual(
            lines[header + 7 : header + 9],
            [
                "Python module import                    490 ms   490 ms   490 ms  node clock",
                "import done -> application ready       10.0 ms  10.0 ms  10.0 ms  node clock",
            ],
        )
        for line in lines:
            self.assertNotRegex(line, r"\b0\.0 ms")

    def test_a_negative_median_comes_with_its_note(self) -> None:
        results = summary_results()
        for row in results["pods"]:
            row["reward_to_finished_seconds"] = -0.3
        results["phases"] = {**results["phases"], "reward_to_finished_seconds": demo.summarise([-0.3, -0.2, 1.1])}
        lines = demo.render_summary(results).splitlines()
        line = next(line for line in lines if line.startswith("reward -> container finished"))
        self.assertEqual(
            line, "reward -> container finished            -0.2 s    1.0 s    1.1 s  mixed: node + runtime 1 s *"
        )
        note = lines.index(line) + 1
        self.assertEqual(
            lines[note : note + 2],
            [
                "* reward -> container finished: negative because finishedAt is truncated to the second, so a reward "
                "in the container's",
                "  last second reads as after it",
            ],
        )

    BELOW_RESOLUTION = (
        # (phase, values, what the row shows instead of its values): whole-second clocks, then ticks
        ("reward_to_finished_seconds", [-0.3, 0.0, 0.1], "< 1 s (1 s clock)"),
        ("pod_to_container_started_seconds", [0.0, 0.0, 0.0], "< 1 s (1 s clock)"),
        ("kernel_boot_to_process_start_seconds", [0.0, 0.004, 0.009], "< 10 ms (10 ms clock)"),
        ("reward_to_finished_seconds", [-0.3, 0.0, 1.0], None),  # a value of a second: the values
        ("python_import_seconds", [0.0, 0.0, 0.0], None),  # a fine clock: its digits hold
    )

    def test_a_row_below_its_clocks_resolution_says_so(self) -> None:
        for phase, values, text in self.BELOW_RESOLUTION:
            with self.subTest(phase=phase, values=values):
                results = summary_results()
                results["phases"] = {**results["phases"], phase: demo.summarise(values)}
                lines = demo.render_summary(results).splitlines()
                line = next(line for line in lines if line.startswith(demo.PHASE_LABELS[phase]))
                cells = line[len(demo.PHASE_LABELS[phase]) :].split("  ")
                shown = [cell.strip() for cell in cells if cell.strip()]
                if text is None:
                    self.assertNotIn("clock)", line)
                    stats = results["phases"][phase]
                    self.assertEqual(
                        shown[:3], [demo.figure_text(stats[stat], phase) for stat in ("p50", "p95", "max")]
                    )
                else:
                    self.assertEqual(shown[:2], [text, demo.clock_text(phase)], line)
                    self.assertNotIn("-0", line)
                    self.assertNotIn("negative because", "\n".join(lines))

    def test_a_negative_scheduling_figure_is_never_blamed_on_the_scheduler_alone(self) -> None:
        """Issue 27: the PodScheduled condition is the API server's stamp at binding
        (setPodNodeAndMetadata); its negative figure means API-server replicas' clocks."""
        results = summary_results()
        results["phases"] = {**results["phases"], "pod_to_scheduled_seconds": demo.summarise([-1.0, -1.0, 0.0])}
        text = " ".join(line.strip() for line in demo.render_summary(results).splitlines())
        self.assertIn("the condition, like creationTimestamp, is the API server's stamp (set when it binds", text)
        self.assertIn("two API-server replicas' clocks disagree", text)
        self.assertNotIn("scheduler's stamp", text)

    def test_no_note_without_a_negative_value(self) -> None:
        self.assertNotIn("negative because", demo.render_summary(summary_results()))

    def test_p99_and_mean_from_100_samples_on(self) -> None:
        few = summary_results()
        self.assertNotIn("p99", demo.render_summary(few))
        many = copy.deepcopy(few)
        many["pods"] = [dict(row) for _ in range(25) for row in few["pods"]]  # 100 rows
        for index, row in enumerate(many["pods"]):
            row["python_import_seconds"] = index / 1000  # 0.000 .. 0.099 s
        lines = demo.render_summary(many).splitlines()
        header = next(line for line in lines if line.startswith("phase (per episode)"))
        self.assertEqual(
            header, "phase (per episode)                        p50      p95      max      p99     mean  clock"
        )
        imports = next(line for line in lines if line.startswith("Python module import"))
        # p50/p95/max come from the phases block (4 episodes); p99 and mean from the 100 rows
        self.assertEqual(
            imports, "Python module import                    490 ms   490 ms   490 ms  98.0 ms  49.5 ms  node clock"
        )

    def test_lines_fit_the_terminal_with_p99_and_mean(self) -> None:
        many = summary_results()
        many["pods"] = many["pods"] * 25
        for line in demo.render_summary(many).splitlines():
            if not line.startswith("image IDs"):  # a digest is not broken
                self.assertLessEqual(len(line), demo.SUMMARY_WIDTH, line)

    def test_scheduled_from_conditions_is_whole_seconds(self) -> None:
        results = summary_results()
        self.assertTrue(all(row["scheduled_source"] == "condition" for row in results["pods"]))
        line = next(
            line for line in demo.render_summary(results).splitlines() if line.startswith("pod created -> scheduled")
        )
        self.assertTrue(line.endswith("API server, 1 s clock"), line)
        self.assertNotIn(".0 s", line)


class LastLinesTest(unittest.TestCase):
    FILES: ClassVar[List[Tuple[str, str]]] = [
        ("results", "out/results.json"),
        ("timeline", "out/timeline.svg"),
        ("reports", "JUnit j.xml"),
    ]

    def test_files_then_the_verdict_last(self) -> None:
        lines = demo.render_summary(summary_results(), self.FILES).splitlines()
        self.assertEqual(
            lines[-4:],
            [
                "results: out/results.json",
                "timeline: out/timeline.svg",
                "reports: JUnit j.xml",
                "verdict: 4/4 episodes valid, reward_sum 4; all ready 5.0 s, all rewards 5.5 s",
            ],
        )

    VERDICTS = (
        ({}, [], "verdict: 4/4 episodes valid, reward_sum 4; all ready 5.0 s, all rewards 5.5 s"),
        (
            {},
            ["batch_to_all_ready_seconds = 5.000 s > 2 s"],
            "verdict: 4/4 episodes valid, reward_sum 4; all ready 5.0 s, all rewards 5.5 s; latency budget "
            "breached (exit 5): batch_to_all_ready_seconds = 5.000 s > 2 s",
        ),
        (
            {"episodes": 6, "failed_episodes": [{}, {}], "max_failed_episodes": 2},
            [],
            "verdict: 4/6 episodes valid (2 left out under --max-failed-episodes 2), reward_sum 4; all ready 5.0 s, "
            "all rewards 5.5 s",
        ),
    )

    def test_verdicts(self) -> None:
        for fields, breaches, text in self.VERDICTS:
            with self.subTest(text=text):
                results: Dict[str, Any] = {**summary_results(), **fields}
                self.assertEqual(demo.verdict_line(results, breaches), text)

    def test_settings_name_the_reports_asked_for(self) -> None:
        settings = settings_for(1, output=demo.Path("out"), image="i", quiet=False, worker_source="")
        names: List[Optional[str]] = [what for what, _ in demo.summary_files(settings)]
        self.assertEqual(names, ["results", "timeline"])
        reported = demo.dataclasses.replace(settings, junit="j.xml", metrics_file="m.prom")
        self.assertEqual(
            demo.summary_files(reported)[-1], ("reports", "JUnit j.xml, metrics m.prom (written when the run ends)")
        )


if __name__ == "__main__":
    unittest.main()
