"""Issue 11: the guide's whole experiment in one command.

Pure parts in-process (the guide's table, its reference columns, digest pinning, the warm-up
manifest); a few runs of the real script against the strict fake: the warm-up's pinning and
ordering, the mixed-digest refusal, `reproduce` end to end and interrupted."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import subprocess
import tempfile
import time
import unittest
import unittest.mock
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import rl_batch_demo as demo
from tests import records
from tests.callplan import FAST
from tests.fakecluster import FakeCluster
from tests.records import written, written_results
from tests.test_run import SCRIPT, run_script
from tests.tiers import end_to_end

GUIDE = Path(__file__).resolve().parents[1] / ".." / "shared" / "seed" / "000_89e6d74ee1c6c1ae.txt"

# The guide's section 六 table, line by line as the guide prints it (its columns are separated
# by single spaces). The test also reads the guide itself when it is beside the repository.
GUIDE_TABLE = """\
检查项 10 路并行 单并发 逐节点预热后 10 路并行
测试规模 1 轮 × 10 个任务 1 轮 × 10 个任务 3 轮 × 10 个任务
完成任务 / 返回奖励 10 / 10,奖励均为 1 10 / 10,奖励均为 1 30 / 30,奖励均为 1
沙箱创建 RunPodSandbox:P50 / P95 752 / 765 毫秒 676 / 709 毫秒 761 / 835 毫秒
容器创建 CreateContainer:P50 / P95 15 / 23 毫秒 14 / 15 毫秒 14 / 21 毫秒
容器启动 StartContainer:P50 / P95 176 / 211 毫秒 175 / 209 毫秒 180 / 265 毫秒
Python 模块导入:P50 / P95 1.32 / 1.33 秒 1.32 / 1.35 秒 1.33 / 1.37 秒
导入完成至应用 ready:P50 / P95 2.3 / 28.8 毫秒 2.3 / 2.7 毫秒 2.3 / 2.7 毫秒
整批应用环境准备完成(含 Python 初始化) 约 3.7 秒 约 93.1 秒 三轮:3.2 / 3.5 / 3.6 秒
单 Pod 创建至应用 ready:P50 / P95 3.7 / 3.7 秒 3.3 / 3.4 秒 3.4 / 3.5 秒
整批奖励全部产生 约 8.4 秒 约 97.6 秒 三轮:7.9 / 8.2 / 8.2 秒
客户端观察到 Job 完成 约 12.7 秒 约 101.6 秒 三轮:12.9 / 13.0 / 12.2 秒
"""  # noqa: RUF001 - the guide's own multiplication sign

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def synthetic_results(rounds: int = 1, **extra: Any) -> dict[str, Any]:
    """A results.json as the tool writes it, with round figures that are easy to read back."""
    phases = {
        "python_import_seconds": {"p50": 1.321, "p95": 1.334, "max": 1.4, "samples": 10},
        "import_to_ready_seconds": {"p50": 0.0023, "p95": 0.0288, "max": 0.03, "samples": 10},
        "pod_to_container_started_seconds": {"p50": 1.0, "p95": 2.0, "max": 2.0, "samples": 10},
    }
    results: dict[str, Any] = {
        "episodes": 10 * rounds,
        "successful_episodes": 10 * rounds,
        "reward_sum": 10 * rounds,
        "episodes_per_round": 10,
        "rounds": rounds,
        "batch_to_all_ready_seconds": 3.6,
        "batch_to_all_rewards_seconds": 8.2,
        "client_job_complete_seconds": 13.0,
        "pod_to_ready_p50_seconds": 3.4,
        "pod_to_ready_p95_seconds": 3.5,
        "phases": phases,
        "round_results": [
            {
                "batch_to_all_ready_seconds": 3.2 + 0.2 * i,
                "batch_to_all_rewards_seconds": 7.9 + 0.1 * i,
                "client_job_complete_seconds": 12.9 - 0.1 * i,
            }
            for i in range(rounds)
        ],
    }
    results.update(extra)
    return records.complete(results, demo.Results)  # the keys these tests leave out, as plain values


class GuideReferenceTest(unittest.TestCase):
    """The guide's published columns, kept in the tool, equal the guide's text."""

    def guide_lines(self) -> list[str]:
        lines = GUIDE_TABLE.splitlines()
        if GUIDE.is_file():
            text = GUIDE.read_text(encoding="utf-8")
            for line in lines:
                self.assertIn(line, text.splitlines(), "the test's copy of the guide's table drifted")
        return lines

    def test_reference_values_equal_the_guide(self) -> None:
        table = demo.guide_table([], "zh", reference=True)
        self.assertEqual(
            table["header"][1:], ["指南:" + line for line in ("10 路并行", "单并发", "逐节点预热后 10 路并行")]
        )
        names = [column["name"]["zh"] for column in demo.GUIDE_REFERENCE["columns"]]
        rendered = [" ".join([table["header"][0], *names])] + [" ".join(row["cells"]) for row in table["rows"]]
        self.assertEqual(rendered, self.guide_lines())

    def test_reference_date_and_conditions(self) -> None:
        self.assertEqual(demo.GUIDE_REFERENCE["date"], "2026-09-21")
        conditions = " ".join(demo.GUIDE_REFERENCE["conditions"]["en"])
        for condition in ("digest", "Cube", "500m", "128Mi", "two 64 vCPU nodes", "image cache"):
            self.assertIn(condition, conditions)
        text = demo.render_guide_table(demo.guide_table([], "en", reference=True), "text")
        self.assertIn("2026-09-21", text)

    def test_the_footnote_in_chinese_with_full_width_punctuation(self) -> None:
        text = demo.render_guide_table(demo.guide_table([("run", synthetic_results())], "zh", reference=True), "text")
        note = text.split("\n\n")[-1].replace("\n", "")
        self.assertTrue(note.startswith("指南列：2026 年 9 月 21 日发布的数据；条件：同一任务脚本和计时口径；"), note)
        self.assertTrue(note.endswith("最后运行三轮 10 路并行。"), note)
        self.assertEqual(re.findall(r"[,;:()]", note), [])  # full-width marks only
        for condition in demo.GUIDE_REFERENCE["conditions"]["zh"]:
            self.assertIn(condition, note)


class GuideTableTest(unittest.TestCase):
    def test_rows_in_the_guides_order(self) -> None:
        table = demo.guide_table([("run", synthetic_results())], "en", reference=False)
        self.assertEqual(
            [row["row"] for row in table["rows"]],
            [
                "scale",
                "completed",
                "run_pod_sandbox",
                "create_container",
                "start_container",
                "python_import",
                "import_to_ready",
                "batch_ready",
                "pod_to_ready",
                "all_rewards",
                "client_complete",
            ],
        )
        self.assertEqual(table["header"], ["figure", "run"])
        zh = demo.guide_table([("run", synthetic_results())], "zh", reference=False)
        self.assertEqual([row["cells"][0] for row in zh["rows"]], [label for _, _, label in demo.GUIDE_ROWS])
        self.assertEqual(zh["header"][0], "检查项")

    def test_cells_from_the_tools_figures(self) -> None:
        cells = demo.guide_cells(synthetic_results(rounds=3))
        self.assertEqual(cells["scale"], "3 rounds x 10 tasks")
        self.assertEqual(cells["completed"], "30 / 30, all rewards 1")
        self.assertEqual(cells["python_import"], "1.32 / 1.33 s")
        self.assertEqual(cells["import_to_ready"], "2.3 / 28.8 ms")
        self.assertEqual(cells["batch_ready"], "3 rounds: 3.2 / 3.4 / 3.6 s")
        self.assertEqual(cells["all_rewards"], "3 rounds: 7.9 / 8.0 / 8.1 s")
        self.assertEqual(cells["pod_to_ready"], "3.4 / 3.5 s")
        self.assertEqual(cells["run_pod_sandbox"], "not measured (run --kubelet-metrics)")
        self.assertIn("stand-in: pod_to_container_started_seconds", cells["create_container"])
        one = demo.guide_cells(synthetic_results())
        self.assertEqual(one["batch_ready"], "about 3.6 s")
        self.assertEqual(demo.guide_cells(synthetic_results(), "zh")["batch_ready"], "约 3.6 秒")
        self.assertEqual(demo.guide_cells(synthetic_results(rounds=3), "zh")["batch_ready"], "三轮:3.2 / 3.4 / 3.6 秒")
        self.assertEqual(demo.guide_cells(synthetic_results(), "zh")["scale"], "1 轮 × 10 个任务")  # noqa: RUF001 - the guide's sign

    def test_runtime_rows_prefer_kubelet_metrics_then_sandbox_figures(self) -> None:
        operations = {
            "pooled": {
                "RunPodSandbox": {
                    "count": 10,
                    "p50_seconds": 0.752,
                    "p95_seconds": 0.765,
                    "p50_bucket": [0.5, 1],
                    "p95_bucket": [0.5, 1],
                }
            }
        }
        phases = dict(synthetic_results()["phases"])
        phases["kernel_boot_to_process_start_seconds"] = {"p50": 0.2, "p95": 0.25, "max": 0.3, "samples": 10}
        cells = demo.guide_cells(synthetic_results(runtime_operations=operations, phases=phases))
        self.assertEqual(cells["run_pod_sandbox"], "752 / 765 ms (kubelet buckets 0.5-1 s / 0.5-1 s)")
        self.assertIn("stand-in: kernel_boot_to_process_start_seconds", cells["start_container"])
        self.assertIn("CreateContainer + StartContainer together", cells["create_container"])

    def test_the_text_table_fits_120_columns_or_wraps_cleanly(self) -> None:
        runs = [(name, synthetic_results(rounds=3)) for name in ("10 in parallel", "one at a time", "after warm-up")]
        for lang in ("en", "zh"):
            with self.subTest(lang=lang):
                table = demo.guide_table(runs, lang, reference=True)
                text = demo.render_guide_table(table, "text")
                for line in text.splitlines():
                    self.assertLessEqual(demo._display_width(line), 120, line)
                # each row starts after an empty line with its label's first word; no cell is lost
                blocks = text.split("\n\n")
                self.assertEqual(len(blocks), 1 + len(table["rows"]) + 1)  # header, rows, the note
                for block, row in zip(blocks[1:], table["rows"]):
                    self.assertTrue(block.startswith(row["cells"][0][:2]), (block, row["cells"][0]))
                    for cell in row["cells"]:
                        for word in re.findall(r"[0-9.]+", cell):
                            self.assertIn(word, block)

    def test_a_table_that_fits_is_not_wrapped(self) -> None:
        text = demo.render_guide_table(demo.guide_table([("run", synthetic_results())], "en", reference=False), "text")
        self.assertNotIn("\n\n", text)
        self.assertEqual(len(text.splitlines()), 1 + len(demo.GUIDE_ROWS))

    WRAPS = (
        ("one two three four", 9, ["one two", "three", "four"]),
        ("pod_to_container_started_seconds)", 12, ["pod_to_", "container_", "started_", "seconds)"]),
        ("未测量(运行 --kubelet-metrics)", 12, ["未测量(运行", "--kubelet-", "metrics)"]),
        ("指南列：2026 年发布的数据；条件：同一任务", 16, ["指南列：2026 年", "发布的数据；条", "件：同一任务"]),
        ("abcdefghijklmnop", 6, ["abcdef", "ghijkl", "mnop"]),
    )

    def test_wrapping_by_display_width(self) -> None:
        for text, width, lines in self.WRAPS:
            with self.subTest(text=text):
                self.assertEqual(demo.wrap_text(text, width), lines)
                for line in lines:
                    self.assertLessEqual(demo._display_width(line), width)

    def test_column_names_are_escaped(self) -> None:
        table = demo.guide_table([("a|b\x1b[31m", synthetic_results())], "en", reference=False)
        markdown = demo.render_guide_table(table, "markdown")
        self.assertIn("a\\|b\\\\x1b[31m", markdown)  # Markdown shows a\|b\x1b[31m: a pipe, no cell break
        self.assertNotIn("\x1b", demo.render_guide_table(table, "text"))


class PinningTest(unittest.TestCase):
    def test_one_digest_is_pinned(self) -> None:
        ids = {"node-a": f"docker.io/library/python@{DIGEST_A}", "node-b": f"docker.io/library/python@{DIGEST_A}"}
        self.assertEqual(demo.pinned_image("python:3.12-alpine", ids, "x"), f"python@{DIGEST_A}")
        self.assertEqual(
            demo.pinned_image("localhost:5000/py:3", {"n": f"localhost:5000/py@{DIGEST_A}"}, "x"),
            f"localhost:5000/py@{DIGEST_A}",
        )

    def test_mixed_digests_are_refused_with_both_named(self) -> None:
        ids = {"node-a": f"python@{DIGEST_A}", "node-b": f"python@{DIGEST_B}"}
        with self.assertRaises(demo.DemoError) as caught:
            demo.pinned_image("python:3.12-alpine", ids, "x")
        self.assertIn(DIGEST_A, str(caught.exception))
        self.assertIn(DIGEST_B, str(caught.exception))
        self.assertIn("node-b", str(caught.exception))

    def test_an_image_id_without_a_digest_is_refused(self) -> None:
        with self.assertRaises(demo.DemoError):
            demo.pinned_image("python:3", {"node-a": "sha256:" + "c" * 63}, "x")

    def test_the_flag_takes_only_a_digest(self) -> None:
        self.assertEqual(demo.pinned_image_arg(""), "")
        self.assertEqual(demo.pinned_image_arg(f"python@{DIGEST_A}"), f"python@{DIGEST_A}")
        for bad in ("python:3.12", f"@{DIGEST_A}", "python@sha256:abc"):
            with self.assertRaises(argparse.ArgumentTypeError):
                demo.pinned_image_arg(bad)

    def test_a_given_digest_is_run_and_dry_run_cannot_resolve_one(self) -> None:
        args = demo.build_parser().parse_args(["run", "--output", "o", f"--pin-image=python@{DIGEST_A}"])
        settings = demo.run_settings(args)
        image, _ = demo.prepare_measured_image(None, settings, "ns", "rid", None, None)  # type: ignore[arg-type]
        pod_spec = demo.round_job_manifest(settings, "rollout", "ns", "rid", image)["spec"]["template"]["spec"]
        self.assertEqual(pod_spec["containers"][0]["image"], f"python@{DIGEST_A}")
        for flag in ("--warmup", "--pin-image"):
            args = demo.build_parser().parse_args(["run", "--output", "o", "--dry-run", flag])
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
                demo.run_settings(args)

    def test_the_pod_s_disk_flags_reach_every_group_and_its_recorded_command_line(self) -> None:
        args = demo.build_parser().parse_args(
            ["reproduce", "--output", "exp", "--ephemeral-storage", "2Gi", "--workspace-size", "1Gi"]
        )
        base = demo.reproduce_settings(args)
        self.assertEqual((base.ephemeral_storage, base.workspace_size), ("2Gi", "1Gi"))
        argv = demo.reproduce_group_argv(args, "ctx", "parallel", None)
        self.assertEqual(argv[argv.index("--ephemeral-storage") + 1], "2Gi")
        settings = demo.run_settings(demo.build_parser().parse_args(argv))
        self.assertEqual((settings.ephemeral_storage, settings.workspace_size), ("2Gi", "1Gi"))
        spec = demo.round_job_manifest(settings, "rollout", "ns", "rid", "img")["spec"]["template"]["spec"]
        self.assertEqual(spec["containers"][0]["resources"]["limits"]["ephemeral-storage"], "2Gi")
        self.assertEqual(spec["volumes"][1], {"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}})
        for bad in (["--workspace-size", "1Gi", "--ephemeral-storage", "512Mi"], ["--ephemeral-storage", "lots"]):
            with self.subTest(bad=bad), self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
                demo.run_settings(demo.build_parser().parse_args(["run", "--output", "o", *bad]))
            self.assertTrue("more than --ephemeral-storage" in err.getvalue() or "not a quantity" in err.getvalue())

    def test_each_group_runs_the_settings_its_recorded_command_line_gives(self) -> None:
        """Each group is spelt once, as the `run` command line report.json records; run's own
        parser reads the group's settings from it, with what every group shares from the flags."""
        flags = "--output exp --count 4 --rounds 2 --quiet --kubelet-metrics --runtime none --cleanup always"
        flags += " --threshold pod_to_ready_p95_seconds=2.5 --threshold batch_to_all_ready_seconds=30 --json"
        args = demo.build_parser().parse_args(
            ["reproduce", *flags.split(), "--kubeconfig", "kc", "--kubectl-timeout", "9"]
        )
        base = demo.reproduce_settings(args)
        pinned = f"python@{DIGEST_A}"
        groups = {
            # group: (pin_image, rounds, parallelism, warmup)
            "parallel": (None, "", 1, 4, False),
            "sequential": (pinned, pinned, 1, 1, False),
            "warm": (pinned, pinned, 2, 4, True),
        }
        for group, (given, pin_image, rounds, parallelism, warmup) in groups.items():
            with self.subTest(group=group):
                settings = demo.reproduce_group_settings(demo.reproduce_group_argv(args, "ctx", group, given))
                self.assertEqual(settings.output, Path("exp") / group)
                self.assertEqual(
                    (settings.pin_image, settings.rounds, settings.parallelism, settings.warmup),
                    (pin_image, rounds, parallelism, warmup),
                )
                shared = dataclasses.replace(
                    settings, output=base.output, pin_image=None, rounds=base.rounds, warmup=False
                )
                self.assertEqual(shared, dataclasses.replace(base, parallelism=parallelism))

    def test_warmup_manifest_pins_the_node_through_the_scheduler(self) -> None:
        settings = demo.run_settings(
            demo.build_parser().parse_args(["run", "--output", "o", "--warmup", "--pin-image"])
        )
        self.assertTrue(settings.warmup)
        self.assertEqual(settings.pin_image, "")
        manifest = demo.warmup_job_manifest(settings, "warmup-1", "ns", "rid", "node-a", "node-a-host")
        spec = manifest["spec"]
        self.assertEqual((spec["completions"], spec["parallelism"]), (1, 1))
        self.assertEqual(spec["template"]["spec"]["nodeSelector"], {"kubernetes.io/hostname": "node-a-host"})
        self.assertEqual(spec["template"]["spec"]["runtimeClassName"], "cube")
        self.assertEqual(manifest["metadata"]["labels"][demo.WARMUP_NODE_KEY], "node-a")
        self.assertEqual(manifest["metadata"]["annotations"][demo.WARMUP_NODE_KEY], "node-a")
        long_name = "n" * 70 + ".example.org"
        value = demo.warmup_label_value(long_name)
        self.assertLessEqual(len(value), 63)
        self.assertRegex(value, r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")


class ReproduceCleanupTest(unittest.TestCase):
    """`cleanup --output DIR` of a reproduce directory, where no cluster is needed."""

    def test_nothing_reached_the_cluster(self) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            (Path(scratch) / "report.json").write_text("{}")
            with contextlib.redirect_stdout(io.StringIO()) as out:
                self.assertEqual(demo.main(["cleanup", "--output", scratch]), 0)
            self.assertIn("nothing to delete", out.getvalue())

    def test_the_exit_code_is_the_worst_groups(self) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            for group in ("parallel", "sequential"):
                (Path(scratch) / group).mkdir()
                (Path(scratch) / group / "receipt.json").write_text('{"context": 1}')
            with contextlib.redirect_stderr(io.StringIO()) as err:
                self.assertEqual(demo.main(["cleanup", "--output", scratch]), demo.EXIT_USAGE)
            self.assertIn("parallel:", err.getvalue())
            self.assertIn("sequential:", err.getvalue())


class ReproduceOutputTest(unittest.TestCase):
    """What `reproduce` prints and writes around its groups, with each group's run replaced by one
    that writes what a finished run writes (the groups themselves run end to end below)."""

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-repro-out-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)

    def experiment(self, *flags: str, breach: str = "") -> tuple[int, str, str]:
        """reproduce in-process; every group's run "succeeds", the `breach` group's over budget."""
        calls: list[str] = []

        def run(settings: demo.RunSettings, kubectl: Any, tool: str, print_summary: bool = True) -> int:
            group = settings.output.name
            calls.append(group)
            settings.output.mkdir(parents=True)
            (settings.output / "receipt.json").write_text(json.dumps({"namespace": f"agc-rl-{group}"}))
            rounds = settings.rounds
            results = synthetic_results(
                rounds=rounds, image_pinned=f"python@{DIGEST_A}", parallelism=settings.parallelism
            )
            (settings.output / "results.json").write_text(json.dumps(results))
            if print_summary:
                print(f"summary of {group}")
            if group == breach:
                raise demo.DemoError("latency budget breached: batch_to_all_ready_seconds = 3.600 s > 1 s", 5)
            return 0

        class Unbound:
            def cluster_identity(self) -> tuple[str, str]:
                return "ctx", "https://api.example:6443"

            def with_context(self, context: str) -> Unbound:
                return self

        argv = ["reproduce", "--output", str(self.root / "exp"), *flags]
        out, err = io.StringIO(), io.StringIO()
        with (
            unittest.mock.patch.object(demo, "cmd_run", run),
            unittest.mock.patch.object(demo, "make_kubectl", lambda *_: Unbound()),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = demo.main(argv)
        self.assertEqual(calls, list(demo.REPRODUCE_GROUPS))
        return code, out.getvalue(), err.getvalue()

    def test_quiet_prints_only_the_table_and_the_verdict(self) -> None:
        code, out, err = self.experiment("--quiet", "--reference", "guide")
        self.assertEqual(code, 0, err)
        report = written(self, self.root / "exp" / "report.json", demo.ReproduceReport)
        exp = self.root / "exp"
        self.assertEqual(
            out,
            demo.render_guide_table(report["table"], "text")
            + f"\nverdict: 3/3 groups finished, 50/50 episodes valid; report {exp / 'report.md'} and "
            f"{exp / 'report.json'}\n",
        )
        self.assertNotIn("reproduce: group", err)

    def test_without_quiet_each_group_summary_then_the_table(self) -> None:
        code, out, err = self.experiment()
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("summary of parallel\nsummary of sequential\nsummary of warm\n\n"), out)
        self.assertIn("reproduce: group 2/3 (sequential)", err)

    def test_a_breached_threshold_lets_the_experiment_go_on_then_exits_5(self) -> None:
        code, out, err = self.experiment("--quiet", "--threshold", "batch_to_all_ready_seconds=1", breach="sequential")
        self.assertEqual(code, demo.EXIT_THRESHOLD, err)
        self.assertIn("verdict: 3/3 groups finished, 50/50 episodes valid; latency budget breached in sequential", out)
        [error] = [line for line in err.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("latency budget breached in sequential: latency budget breached: batch_to_all_ready", error)
        report = written(self, self.root / "exp" / "report.json", demo.ReproduceReport)
        self.assertEqual([g["exit_code"] for g in report["groups"]], [0, 5, 0])
        self.assertTrue(report["complete"])
        self.assertEqual(len(report["table"]["header"]), 4)  # the breached group is in the table

    def test_json_prints_only_the_report_with_its_verdict(self) -> None:
        code, out, err = self.experiment("--json", "--reference", "guide")
        self.assertEqual(code, 0, err)
        printed = json.loads(out)
        self.assertEqual(out, json.dumps(printed, indent=2, sort_keys=True) + "\n")
        report = written(self, self.root / "exp" / "report.json", demo.ReproduceReport)
        self.assertEqual({key: value for key, value in printed.items() if key != "verdict"}, report)
        self.assertTrue(printed["verdict"].startswith("verdict: 3/3 groups finished"))
        self.assertNotIn("summary of", out)

    def test_metrics_file_holds_every_groups_figures(self) -> None:
        metrics = self.root / "exp.prom"
        code, _, err = self.experiment("--quiet", "--metrics-file", str(metrics), breach="warm")
        self.assertEqual(code, demo.EXIT_THRESHOLD, err)
        text = metrics.read_text()
        exits = re.findall(r'^rl_batch_demo_exit_code\{group="(\w+)",image="[^"]+",parallelism="(\d+)",'
                           r'runtime="cube"\} (\d+)$', text, re.MULTILINE)  # fmt: skip
        self.assertEqual(exits, [("parallel", "10", "0"), ("sequential", "1", "0"), ("warm", "10", "5")])
        self.assertEqual(text.count("# TYPE rl_batch_demo_reward_sum gauge"), 1)  # each family once
        self.assertEqual(len(re.findall(r"^rl_batch_demo_reward_sum\{", text, re.MULTILINE)), 3)

    def test_report_md_prose_in_chinese(self) -> None:
        code, _, err = self.experiment("--quiet", "--lang", "zh", "--reference", "guide")
        self.assertEqual(code, 0, err)
        text = (self.root / "exp" / "report.md").read_text(encoding="utf-8")
        lines = text.splitlines()
        self.assertEqual(lines[0], "# rl-batch-demo reproduce：一条命令重做指南第六节")
        self.assertEqual(
            lines[2],
            f"镜像 `python:3.12-alpine`，各组都按 digest `python@{DIGEST_A}` 运行；上下文 `ctx`；每轮 10 个任务。",
        )
        self.assertEqual(lines[4], "| 组 | 目录 | 退出码 | 命名空间 |")
        self.assertIn("指南列：2026 年 9 月 21 日发布的数据；条件：", text)
        for line in (lines[0], lines[2], lines[-1]):
            self.assertEqual(re.findall(r"(?<=[\u3400-\u9fff])[,;:]|[,;:](?=[\u3400-\u9fff])", line), [], line)


@end_to_end
class FakeClusterCase(unittest.TestCase):
    """The real script as a subprocess against a fake cluster, in a scratch directory."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-repro-")
        self.addCleanup(scratch.cleanup)
        self.root = Path(scratch.name)

    def make_cluster(self, **options: Any) -> FakeCluster:
        """A fake cluster whose pods run its stand-in worker: the experiment's orchestration is
        under test here, not the episode's grading (tests/test_worker_grade.py)."""
        faults = dict(options.pop("faults", None) or {})
        faults.setdefault("stand_in_worker", True)
        cluster = FakeCluster(self.root / "cluster", faults=faults, **options)
        self.addCleanup(cluster.close)
        self.cluster = cluster
        return cluster

    def tool(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """The tool as a user runs it, in the scratch directory, with only the fake on PATH."""
        return run_script(argv, self.cluster.env(), self.root)

    def assert_exit(self, result: subprocess.CompletedProcess[str], code: int) -> None:
        self.assertEqual(result.returncode, code, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        self.assertNotIn("Traceback", result.stderr)

    def run_namespaces(self) -> list[str]:
        return [
            ns["metadata"]["name"]
            for ns in self.cluster.objects("Namespace")
            if ns["metadata"]["name"].startswith(demo.NAMESPACE_PREFIX)
        ]

    def create_started(self, job: str) -> float:
        """When the client started the kubectl create of the Job named `job` (fake's record)."""
        for record in self.cluster.call_records():
            stdin = (record["stdin"] or "").replace('":"', '": "')
            if "create" in record["argv"] and f'"name": "{job}"' in stdin:
                return float(record["start"])
        raise AssertionError(f"no create of Job {job}")


class WarmupTest(FakeClusterCase):
    def test_one_pod_per_eligible_node_each_on_its_node_all_done_before_the_measured_job(self) -> None:
        self.make_cluster(
            runtimeclasses={
                "cube": {
                    "handler": "cube",
                    "overhead": {"podFixed": {"cpu": "250m", "memory": "768Mi"}},
                    "scheduling": {"nodeSelector": {"pool": "sandbox"}},
                }
            },
            nodes=[
                {"name": "node-a"},
                {"name": "node-b", "labels": {"pool": "sandbox"}},
                {"name": "node-c", "labels": {"pool": "sandbox"}},
            ],
        )
        result = self.tool("run", "--output", "out", "--count", "3", "--warmup", "--pin-image", "--timeout", "60")
        self.assert_exit(result, 0)
        self.cluster.wait_idle()
        [namespace] = self.run_namespaces()
        pods = self.cluster.objects("Pod", namespace)
        warm = [pod for pod in pods if pod["metadata"]["labels"].get("job-name", "").startswith("warmup-")]
        measured = [pod for pod in pods if pod["metadata"]["labels"].get("job-name") == "rollout"]
        self.assertEqual(sorted(pod["spec"]["nodeName"] for pod in warm), ["node-b", "node-c"])
        for pod in warm:
            self.assertEqual(pod["spec"]["nodeName"], pod["metadata"]["labels"][demo.WARMUP_NODE_KEY])
            self.assertEqual(pod["spec"]["nodeSelector"]["kubernetes.io/hostname"], pod["spec"]["nodeName"])
            self.assertEqual(pod["spec"]["nodeSelector"]["pool"], "sandbox")  # the RuntimeClass still applies
        self.assertEqual(len(measured), 3)
        self.assertTrue({pod["spec"]["nodeName"] for pod in measured} <= {"node-b", "node-c"})
        measured_created = self.create_started("rollout")
        for job in ("warmup-1", "warmup-2"):
            self.assertLess(self.cluster.job_completed_at(namespace, job), measured_created)
        results = written_results(self, self.root / "out")
        self.assertEqual(results["image"], "python:3.12-alpine")
        self.assertRegex(results["image_pinned"], r"^python@sha256:[0-9a-f]{64}$")
        self.assertEqual({pod["spec"]["containers"][0]["image"] for pod in measured}, {results["image_pinned"]})
        self.assertEqual(results["warmup"]["nodes"], ["node-b", "node-c"])
        self.assertEqual(results["warmup"]["per_node"]["node-b"]["image_pull"], "cached")
        self.assertEqual(results["episodes"], 3)  # warm-up episodes never count
        self.assertEqual({row["job"] for row in results["pods"]}, {"rollout"})
        self.assertTrue((self.root / "out" / "warmup" / "warmup-1" / "pods.json").is_file())
        receipt = json.loads((self.root / "out" / "receipt.json").read_text())
        self.assertEqual(sorted(job["name"] for job in receipt["jobs"]), ["rollout", "warmup-1", "warmup-2"])
        self.assertTrue(all(job["uid"] for job in receipt["jobs"]))
        self.assert_exit(self.tool("cleanup", "--output", "out"), 0)
        self.assertEqual(self.run_namespaces(), [])

    def test_nodes_reporting_different_digests_stop_before_the_measured_rounds(self) -> None:
        self.make_cluster(faults={"mixed_digests": ["node-b"]})
        result = self.tool("run", "--output", "out", "--count", "2", "--warmup", "--pin-image", "--timeout", "60")
        self.assert_exit(result, demo.EXIT_CLUSTER)
        [error] = [line for line in result.stderr.splitlines() if line.startswith("rl-batch-demo: error:")]
        self.assertIn("different images", error)
        self.assertEqual(len(set(re.findall(r"sha256:[0-9a-f]{64}", error))), 2)
        self.cluster.wait_idle()
        [namespace] = self.run_namespaces()
        self.assertEqual(sorted(job["metadata"]["name"] for job in self.cluster.objects("Job", namespace)),
                         ["warmup-1", "warmup-2"])  # fmt: skip
        self.assertTrue((self.root / "out" / "warmup" / "warmup-2" / "pods.json").is_file())
        self.assertFalse((self.root / "out" / "results.json").exists())
        self.assert_exit(self.tool("cleanup", "--output", "out"), 0)
        self.assertEqual(self.run_namespaces(), [])

    def test_a_failed_warmup_stops_the_run_before_the_measured_job(self) -> None:
        self.make_cluster(faults={"episode": {"0": "exit1"}})
        result = self.tool("run", "--output", "out", "--count", "2", "--warmup", "--timeout", "60")
        self.assert_exit(result, demo.EXIT_EPISODE)
        self.assertIn("warmup-", result.stderr)
        self.cluster.wait_idle()
        [namespace] = self.run_namespaces()
        self.assertNotIn("rollout", [job["metadata"]["name"] for job in self.cluster.objects("Job", namespace)])
        self.assertTrue((self.root / "out" / "warmup" / "warmup-1" / "events.txt").is_file())
        self.assertFalse((self.root / "out" / "results.json").exists())
        self.assert_exit(self.tool("cleanup", "--output", "out"), 0)
        self.assertEqual(self.run_namespaces(), [])


class ReproduceTest(FakeClusterCase):
    def test_three_groups_each_cleaned_before_the_next_and_the_report(self) -> None:
        self.make_cluster()
        result = self.tool(
            "reproduce", "--output", "exp", "--count", "2", "--rounds", "2", "--timeout", "60", "--quiet",
            "--reference", "guide", "--junit", "experiment.xml", "--metrics-file", "experiment.prom",
            "--threshold", "pod_to_ready_max_seconds=600",
        )  # fmt: skip
        self.assert_exit(result, 0)
        out = self.root / "exp"
        junit = ElementTree.parse(self.root / "experiment.xml").getroot()
        suites = junit.findall("testsuite")
        self.assertEqual(len(suites), 4)  # parallel, sequential, and the warm group's two rounds
        cases = junit.findall("testsuite/testcase")
        self.assertEqual(len(cases), 8 + 3)  # every episode, and each group's threshold
        self.assertEqual(junit.get("failures"), "0")
        groups = sorted({case.get("classname", "").split(".")[1] for case in cases})
        self.assertEqual(groups, ["parallel", "sequential", "warm"])
        self.assertEqual(len({(case.get("classname"), case.get("name")) for case in cases}), 11)  # unique
        thresholds = [case.get("classname") for case in cases if case.get("name", "").startswith("threshold ")]
        self.assertEqual(thresholds, [f"rl-batch-demo.{group}.thresholds" for group in demo.REPRODUCE_GROUPS])
        metrics = (self.root / "experiment.prom").read_text()
        exits = re.findall(r'^rl_batch_demo_exit_code\{group="(\w+)",.*\} (\d+)$', metrics, re.MULTILINE)
        self.assertEqual(exits, [("parallel", "0"), ("sequential", "0"), ("warm", "0")])
        report = written(self, out / "report.json", demo.ReproduceReport)
        # --quiet: stdout holds the guide's table and the verdict, nothing else
        self.assertEqual(
            result.stdout,
            demo.render_guide_table(report["table"], "text")
            + "\nverdict: 3/3 groups finished, 8/8 episodes valid; report exp/report.md and exp/report.json\n",
        )
        self.assertNotIn("reproduce: group", result.stderr)
        self.assertTrue(report["complete"])
        self.assertEqual([g["name"] for g in report["groups"]], ["parallel", "sequential", "warm"])
        self.assertTrue((out / "report.md").is_file())
        self.assertIn("RunPodSandbox", (out / "report.md").read_text())
        namespaces = [g["namespace"] for g in report["groups"]]
        self.assertEqual(len(set(namespaces)), 3)
        self.assertEqual(self.run_namespaces(), [])
        # each group's namespace was gone (its last call) before the next group's first call
        records = self.cluster.call_records()

        def mentions(record: dict[str, Any], namespace: str) -> bool:
            return namespace in " ".join(record["argv"]) or namespace in (record["stdin"] or "")

        for earlier, later in zip(namespaces, namespaces[1:]):
            last_end = max(r["end"] or r["start"] for r in records if mentions(r, earlier))  # end: None if killed
            first_start = min(r["start"] for r in records if mentions(r, later))
            self.assertLess(last_end, first_start)
        pinned = {written_results(self, out / g)["image_pinned"] for g in demo.REPRODUCE_GROUPS}
        self.assertEqual(len(pinned), 1)
        self.assertEqual(pinned, {report["image_pinned"]})
        warm = written_results(self, out / "warm")
        self.assertEqual((warm["rounds"], warm["episodes"], warm["parallelism"]), (2, 4, 2))
        self.assertEqual(json.loads((out / "sequential" / "results.json").read_text())["parallelism"], 1)
        self.assertIn("whole batch", result.stdout)
        self.assertIn("guide: one at a", result.stdout)
        # compare --format guide on the groups, in the guide's own words
        compare = self.tool(
            "compare", "exp/parallel", "exp/sequential", "exp/warm", "--format", "guide", "--lang", "zh"
        )
        self.assert_exit(compare, 0)
        self.assertIn("整批奖励全部产生", compare.stdout)
        self.assertIn("2 轮 × 2 个任务", compare.stdout)  # noqa: RUF001 - the guide's sign
        # cleanup of the experiment's directory: every group, nothing left to delete
        cleanup = self.tool("cleanup", "--output", "exp")
        self.assert_exit(cleanup, 0)
        self.assertEqual(cleanup.stdout.count("already absent"), 3)

    def test_a_failed_group_stops_the_experiment_and_keeps_its_namespace(self) -> None:
        self.make_cluster(faults={"episode": {"0": "exit1"}})  # the first group's probe fails
        result = self.tool(
            "reproduce", "--output", "exp", "--count", "2", "--timeout", "60", "--json", "--metrics-file", "exp.prom"
        )
        self.assert_exit(result, demo.EXIT_EPISODE)
        self.assertIn("reproduce stopped at group parallel", result.stderr)
        self.assertNotIn("reproduce: group", result.stderr)
        report = written(self, self.root / "exp" / "report.json", demo.ReproduceReport)
        printed = json.loads(result.stdout)  # --json: one object on stdout, also on failure
        self.assertEqual(printed["verdict"], "verdict: 0/3 groups finished, 0/0 episodes valid; stopped at group "
                         "parallel (exit 1); report exp/report.json")  # fmt: skip
        self.assertEqual({key: value for key, value in printed.items() if key != "verdict"}, report)
        metrics = (self.root / "exp.prom").read_text()
        self.assertRegex(metrics, r'(?m)^rl_batch_demo_exit_code\{group="parallel",.*\} 1$')
        self.assertRegex(metrics, r'(?m)^rl_batch_demo_validated\{group="parallel",.*\} 0$')
        self.assertEqual([(g["name"], g["exit_code"]) for g in report["groups"]], [("parallel", demo.EXIT_EPISODE)])
        self.assertFalse(report["complete"])
        self.assertFalse((self.root / "exp" / "sequential").exists())
        self.assertEqual(self.run_namespaces(), [report["groups"][0]["namespace"]])
        self.cluster.wait_idle()
        self.assert_exit(self.tool("cleanup", "--output", "exp"), 0)
        self.assertEqual(self.run_namespaces(), [])


class FakeSchedulingTest(unittest.TestCase):
    """The fake's scheduler honours nodeSelector (with the RuntimeClass's merged in), and its
    nodes report per-node image digests under the mixed_digests fault."""

    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def make(self, **options: Any) -> FakeCluster:
        scratch = tempfile.TemporaryDirectory(prefix="rl-demo-sched-")
        self.addCleanup(scratch.cleanup)
        cluster = FakeCluster(Path(scratch.name), **options)
        self.addCleanup(cluster.close)
        self.cluster = cluster
        return cluster

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", *args], input=input, capture_output=True, text=True, env=self.cluster.env(), timeout=30
        )

    def submit(self, node_selector: dict[str, str], image: str = "python:3.12-alpine") -> str:
        namespace = "agc-rl-000000000001"
        job = demo.job_manifest(
            name="rollout",
            namespace=namespace,
            run_id="000000000001",
            count=2,
            parallelism=2,
            image=image,
            runtime="cube",
            deadline_seconds=60,
        )
        job["spec"]["template"]["spec"]["nodeSelector"] = node_selector
        items = [
            demo.namespace_manifest(namespace, "000000000001"),
            demo.configmap_manifest(namespace, "000000000001", demo.WORKER_SOURCE),
        ]
        for item in (*items, job):
            created = self.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(item))
            self.assertEqual(created.returncode, 0, created.stderr)
        return namespace

    def wait_for(self, predicate: Any) -> None:
        deadline = time.monotonic() + 30
        while not predicate():
            self.assertLess(time.monotonic(), deadline, "the fake did not get there")
            time.sleep(0.05)

    def test_pods_land_on_the_selected_node(self) -> None:
        self.make()
        namespace = self.submit({"kubernetes.io/hostname": "node-b"})

        def scheduled() -> bool:
            pods = self.cluster.objects("Pod", namespace)
            return len(pods) == 2 and all(pod["spec"].get("nodeName") for pod in pods)

        self.wait_for(scheduled)
        self.assertEqual({pod["spec"]["nodeName"] for pod in self.cluster.objects("Pod", namespace)}, {"node-b"})

    def test_a_selector_no_node_matches_leaves_the_pods_pending(self) -> None:
        self.make()
        namespace = self.submit({"kubernetes.io/hostname": "node-z"})

        def reported() -> bool:
            return any(e.get("reason") == "FailedScheduling" for e in self.cluster.objects("Event", namespace))

        self.wait_for(reported)
        [event, *_] = [e for e in self.cluster.objects("Event", namespace) if e.get("reason") == "FailedScheduling"]
        self.assertIn("didn't match Pod's node affinity/selector", event["message"])
        self.assertFalse(any(pod["spec"].get("nodeName") for pod in self.cluster.objects("Pod", namespace)))

    def test_the_runtimeclass_selector_is_merged_and_a_conflict_rejects_the_pod(self) -> None:
        scheduling = {"nodeSelector": {"kubernetes.io/hostname": "node-a"}}
        self.make(runtimeclasses={"cube": {"handler": "cube", "scheduling": scheduling}})
        namespace = self.submit({"kubernetes.io/hostname": "node-b"})

        def refused() -> bool:
            return any(e.get("reason") == "FailedCreate" for e in self.cluster.objects("Event", namespace))

        self.wait_for(refused)
        [event] = [e for e in self.cluster.objects("Event", namespace) if e.get("reason") == "FailedCreate"]
        self.assertIn("conflict", event["message"])
        self.assertEqual(self.cluster.objects("Pod", namespace), [])

    def test_mixed_digests_fault_is_strict(self) -> None:
        self.make(faults={"mixed_digests": "node-b"})
        result = self.kubectl("get", "nodes")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("mixed_digests", result.stderr)


class InterruptedReproduceTest(FakeClusterCase):
    """A Ctrl-C raised in-process at one kubectl call, so this one runs the tool in this process
    (its waits shrunk, so polls do not sleep) and in the main thread."""

    runs_concurrently = False

    def tool(self, *argv: str) -> subprocess.CompletedProcess[str]:
        out, err = io.StringIO(), io.StringIO()
        previous = os.getcwd()
        os.chdir(self.root)
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(unittest.mock.patch.dict(os.environ, self.cluster.env(), clear=True))
                stack.enter_context(unittest.mock.patch.object(demo, "TIMING", FAST))
                stack.enter_context(contextlib.redirect_stdout(out))
                stack.enter_context(contextlib.redirect_stderr(err))
                try:
                    code = demo.main(list(argv))
                except SystemExit as exit:  # argparse
                    code = int(exit.code or 0)
        finally:
            os.chdir(previous)
        return subprocess.CompletedProcess([SCRIPT, *argv], code, out.getvalue(), err.getvalue())

    def test_interrupted_in_the_middle_then_cleanup_leaves_nothing(self) -> None:
        """Ctrl-C as the sequential group creates its Job (raised in-process at that call; the
        real signals are tests/test_run.py's): receipts make `cleanup --output DIR` complete."""
        self.make_cluster()
        original = demo.Kubectl._once

        def once(kubectl: demo.Kubectl, argv: list[str], stdin: str | None, timeout: float) -> Any:
            manifest = demo.parse_json_documents(stdin)[0] if stdin else {}
            spec = (manifest.get("spec") or {}) if manifest.get("kind") == "Job" else {}
            # the sequential group's, not a probe's; on the fake's context only (the patch is on the
            # class: a concurrent test's Kubectl, the contract tests', must not be interrupted)
            if "--context=fake-ctx" in argv and (spec.get("parallelism"), spec.get("completions")) == (1, 2):
                raise KeyboardInterrupt
            return original(kubectl, argv, stdin, timeout)

        with unittest.mock.patch.object(demo.Kubectl, "_once", once):
            result = self.tool(
                "reproduce", "--output", "exp", "--count", "2", "--rounds", "2", "--quiet", "--junit", "exp.xml"
            )
        self.assertEqual(result.returncode, demo.EXIT_INTERRUPTED, result.stderr)
        junit = ElementTree.parse(self.root / "exp.xml").getroot()  # written on the way out too
        self.assertEqual(junit.get("failures"), "0")
        self.assertGreaterEqual(int(junit.get("errors") or 0), 1)  # the sequential group: interrupted
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn("cleanup --output", result.stderr)
        self.assertFalse((self.root / "exp" / "warm").exists())
        report = written(self, self.root / "exp" / "report.json", demo.ReproduceReport)
        self.assertFalse(report["complete"])
        self.assertEqual(len(self.run_namespaces()), 1)  # the parallel group was cleaned up already
        self.assertTrue((self.root / "exp" / "parallel" / "results.json").exists())
        self.cluster.wait_idle(timeout=60)
        cleanup = self.tool("cleanup", "--output", "exp")
        self.assert_exit(cleanup, 0)
        self.assertEqual(self.run_namespaces(), [])


if __name__ == "__main__":
    unittest.main()
