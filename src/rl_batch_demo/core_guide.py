"""Pure core: the warm-up, the pinned image and the guide's table."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .constants import EXIT_CLUSTER, RUN_FILES, SUMMARY_WIDTH
from .core_basics import dig, finite_number, one_episode_job_manifest
from .core_reports import printable, render_table, wrap_text
from .errors import DemoError
from .records import GuideRow, GuideTable, JsonObject, KubeObject, Results, RunSettings

# Pure core: warm-up, pinned image and the guide's table ######################
# Warm-up manifests, the pinned digest, and the guide's section 六 table from results. Uses the
# sections above.


WARMUP_DIR = RUN_FILES.warmup
WARMUP_JOB_PREFIX = "warmup"
PROBE_JOB_NAME = "probe"
WARMUP_NODE_KEY = "rl-batch-demo/warmup-node"  # label (name or hash) and annotation (full name)
HOSTNAME_LABEL = "kubernetes.io/hostname"
NOT_ROUNDS = (WARMUP_JOB_PREFIX + "-", PROBE_JOB_NAME)  # receipt Jobs that are not measured rounds
_LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
_DIGEST = r"@(sha256:[0-9a-f]{64})\Z"  # the repository digest of an imageID (repo@sha256:...)
REPRODUCE_GROUPS = ("parallel", "sequential", "warm")  # the guide's order, section 六

# The guide's published reference (section 六), kept as data: the three groups of 2026-09-21,
# each cell exactly as the guide prints it. Numbers are strings so that no digit is lost.
GUIDE_REFERENCE: JsonObject = {
    "date": "2026-09-21",
    "conditions": {
        "en": [
            "the same task script and timing definitions",
            "a fixed Python image digest",
            "the same Cube runtime and container resources",
            "one container per sandbox, its own emptyDir, limits 500m CPU / 128Mi memory",
            "scheduling limited to two 64 vCPU nodes",
            "every one of the 50 measured episodes hit the image cache",
            "order: 10 in parallel, one at a time, one warm-up episode on each node, three rounds of 10 in parallel",
        ],
        "zh": [  # the guide's own words, with full-width punctuation
            "同一任务脚本和计时口径",
            "固定的 Python 镜像 digest",
            "相同的 Cube 运行时和容器资源规格",
            "每个沙箱为单容器、独立 emptyDir，容器 CPU 限制为 500m、内存限制为 128Mi",
            "可调度范围固定为两个 64 vCPU 节点",
            "全部 50 个正式任务均命中镜像缓存",
            "执行顺序为 10 路并行、单并发，再在两个节点分别执行一次相同任务预热，最后运行三轮 10 路并行",
        ],
    },
    # Each group's name, in the guide's order; then each row of its table (GUIDE_ROWS), as the guide
    # has it: the unit (None: no figure), then one cell per group.
    "columns": [
        {"name": {"en": "10 in parallel", "zh": "10 路并行"}},
        {"name": {"en": "one at a time", "zh": "单并发"}},
        {"name": {"en": "10 in parallel after per-node warm-up", "zh": "逐节点预热后 10 路并行"}},
    ],
    "cells": {
        "scale": (None, (1, 10), (1, 10), (3, 10)),
        "completed": (None, ("10", "10", "1"), ("10", "10", "1"), ("30", "30", "1")),
        "run_pod_sandbox": ("ms", ["752", "765"], ["676", "709"], ["761", "835"]),
        "create_container": ("ms", ["15", "23"], ["14", "15"], ["14", "21"]),
        "start_container": ("ms", ["176", "211"], ["175", "209"], ["180", "265"]),
        "python_import": ("s", ["1.32", "1.33"], ["1.32", "1.35"], ["1.33", "1.37"]),
        "import_to_ready": ("ms", ["2.3", "28.8"], ["2.3", "2.7"], ["2.3", "2.7"]),
        "batch_ready": ("s", ["3.7"], ["93.1"], ["3.2", "3.5", "3.6"]),
        "pod_to_ready": ("s", ["3.7", "3.7"], ["3.3", "3.4"], ["3.4", "3.5"]),
        "all_rewards": ("s", ["8.4"], ["97.6"], ["7.9", "8.2", "8.2"]),
        "client_complete": ("s", ["12.7"], ["101.6"], ["12.9", "13.0", "12.2"]),
    },
}

# The guide's rows in its order: (key, English label, the guide's own Chinese label).
GUIDE_ROWS = (
    ("scale", "test scale (rounds x tasks)", "测试规模"),
    ("completed", "completed / rewards", "完成任务 / 返回奖励"),
    ("run_pod_sandbox", "RunPodSandbox: P50 / P95", "沙箱创建 RunPodSandbox:P50 / P95"),
    ("create_container", "CreateContainer: P50 / P95", "容器创建 CreateContainer:P50 / P95"),
    ("start_container", "StartContainer: P50 / P95", "容器启动 StartContainer:P50 / P95"),
    ("python_import", "Python module import: P50 / P95", "Python 模块导入:P50 / P95"),
    ("import_to_ready", "import done -> application ready: P50 / P95", "导入完成至应用 ready:P50 / P95"),
    ("batch_ready", "whole batch ready (incl. Python start)", "整批应用环境准备完成(含 Python 初始化)"),
    ("pod_to_ready", "per pod created -> application ready: P50 / P95", "单 Pod 创建至应用 ready:P50 / P95"),
    ("all_rewards", "all rewards produced", "整批奖励全部产生"),
    ("client_complete", "client saw Job complete", "客户端观察到 Job 完成"),
)
GUIDE_HEADER = {"en": "figure", "zh": "检查项"}
GUIDE_COLUMN_PREFIX = {"en": "guide: ", "zh": "指南:"}  # a reference column's header: never mistaken for a run

# Runtime rows: the kubelet's histogram (run --kubelet-metrics), else the closest in-sandbox
# figure (results.json `phases`), named, else "not measured".
_RUNTIME_ROWS = {
    "run_pod_sandbox": ("RunPodSandbox", ("pod_to_kernel_boot_seconds",)),
    "create_container": (
        "CreateContainer",
        ("kernel_boot_to_process_start_seconds", "pod_to_container_started_seconds"),
    ),
    "start_container": ("StartContainer", ("kernel_boot_to_process_start_seconds", "pod_to_container_started_seconds")),
}
_ZH_COUNT = "一二三四五六七八九十"
_TIMES = "\u00d7"  # the multiplication sign of the guide's "1 轮 TIMES 10 个任务"
# Each phrase of the guide's table and reproduce's report: (English, Chinese).
_PHRASES = {
    "ms": ("ms", "毫秒"),
    "s": ("s", "秒"),
    "about": ("about {}", "约 {}"),
    "rounds": ("{n} rounds: {}", "{n}轮:{}"),
    "not": ("not measured ({})", "未测量({})"),
    "stand_in": ("{} (stand-in: {})", "{}(近似:{})"),
    "buckets": ("{} (kubelet buckets {})", "{}(kubelet 分桶 {})"),
    "run": ("run {}", "运行 {}"),
    "combined": ("CreateContainer + StartContainer together", "CreateContainer 与 StartContainer 合计"),
    "completed": ("{} / {}, {}", "{} / {},{}"),
    "all": ("all rewards {}", "奖励均为 {}"),
    "sum": ("reward sum {}", "奖励合计 {}"),
    "whole_seconds": ("whole seconds", "整秒"),
    "reference": (
        "guide columns: published figures of {date}; conditions: {conditions}",
        "指南列：{date}发布的数据；条件：{conditions}。",
    ),
    "separator": ("; ", "；"),
    "report_title": (
        "# rl-batch-demo reproduce: the guide's section 六, one command",
        "# rl-batch-demo reproduce：一条命令重做指南第六节",
    ),
    "report_intro": (
        "Image {image}, run by digest {pinned} in every group; context {context}; {count} tasks per round.",
        "镜像 {image}，各组都按 digest {pinned} 运行；上下文 {context}；每轮 {count} 个任务。",
    ),
    "report_header": ("| group | directory | exit | namespace |", "| 组 | 目录 | 退出码 | 命名空间 |"),
    "report_early": (
        "The experiment stopped early: only the groups that finished are in the table.",
        "实验提前结束：表中只有已完成的组。",
    ),
}
_WORDS = {lang: {key: pair[i] for key, pair in _PHRASES.items()} for i, lang in enumerate(("en", "zh"))}


def warmup_label_value(node: str) -> str:
    """The node's name as a label value; a name longer than a label allows becomes its hash
    (the Job's annotation keeps the whole name)."""
    if len(node) <= 63 and re.match(_LABEL_VALUE, node):
        return node
    import hashlib  # noqa: PLC0415 - keeps --help fast

    return "sha256-" + hashlib.sha256(node.encode()).hexdigest()[:40]


def warmup_job_manifest(
    settings: RunSettings, name: str, namespace: str, run_id: str, node: str, hostname: str
) -> KubeObject:
    """A one-episode Job pinned to one node through the scheduler: a nodeSelector on its hostname
    label, so the RuntimeClass's admission and scheduling still apply."""
    manifest = one_episode_job_manifest(settings, name, namespace, run_id)
    value = warmup_label_value(node)
    for metadata in (manifest["metadata"], manifest["spec"]["template"]["metadata"]):
        metadata["labels"][WARMUP_NODE_KEY] = value
        metadata["annotations"] = {WARMUP_NODE_KEY: node}
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {HOSTNAME_LABEL: hostname}
    return manifest


def image_repository(image: str) -> str:
    """The image without its tag or digest: `python:3.12-alpine` -> `python`."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    last = last.split(":", 1)[0]
    return f"{head}/{last}" if head else last


def pinned_image(image: str, image_ids: Dict[str, Optional[str]], where: str) -> str:
    """`repo@sha256:...` of the image the nodes ran (node -> imageID); refuses when they
    report different digests for the same tag, or no digest at all."""
    digests: Dict[str, List[str]] = {}
    for node, image_id in sorted(image_ids.items()):
        digest = re.search(_DIGEST, image_id or "")
        if digest is None:
            raise DemoError(
                f"cannot pin image {image}: node {node} reports imageID {image_id!r}, without a repository "
                f"digest; inspect {where}, or pass --pin-image=REPO@sha256:DIGEST",
                EXIT_CLUSTER,
            )
        digests.setdefault(digest.group(1), []).append(node)
    if len(digests) > 1:
        named = "; ".join(f"{digest} on {', '.join(nodes)}" for digest, nodes in sorted(digests.items()))
        raise DemoError(
            f"the nodes ran different images for {image}: {named}; the measured rounds would not run one image, "
            f"so none was started; inspect {where}, make the nodes agree, or pass --pin-image=REPO@sha256:DIGEST",
            EXIT_CLUSTER,
        )
    if not digests:
        raise DemoError(f"cannot pin image {image}: no episode reported an imageID; inspect {where}", EXIT_CLUSTER)
    return f"{image_repository(image)}@{next(iter(digests))}"


def _guide_pair(values: Sequence[float], lang: str) -> str:
    """P50 / P95 in one unit, as the guide prints them: ms below a second, else seconds."""
    if max(values) < 1:
        scale, decimals, unit = 1000, 1 if min(values) < 0.01 else 0, "ms"
    else:
        scale, decimals, unit = 1, 2, "s"
    return " / ".join(f"{v * scale:.{decimals}f}" for v in values) + " " + _WORDS[lang][unit]


def _guide_scale(rounds: Any, tasks: Any, lang: str) -> str:
    if lang == "zh":
        return f"{rounds} 轮 {_TIMES} {tasks} 个任务"
    return f"{rounds} round{'s' if rounds != 1 else ''} x {tasks} tasks"


def _guide_rounds(values: Sequence[str], unit: str, lang: str) -> str:
    """A whole-batch figure, one per round: "about" one, or "K rounds" of them."""
    words = _WORDS[lang]
    text = " / ".join(values) + " " + words[unit]
    if len(values) == 1:
        return words["about"].format(text)
    n = _ZH_COUNT[len(values) - 1] if lang == "zh" and len(values) <= 10 else str(len(values))
    return words["rounds"].format(text, n=n)


def _guide_reference_cell(group: int, key: str, lang: str) -> str:
    words = _WORDS[lang]
    unit, *groups = GUIDE_REFERENCE["cells"][key]
    values = groups[group]
    if key == "scale":
        return _guide_scale(values[0], values[1], lang)
    if key == "completed":
        return words["completed"].format(*values[:2], words["all"].format(values[2]))
    if key in ("batch_ready", "all_rewards", "client_complete"):
        return _guide_rounds(values, unit, lang)
    return " / ".join(values) + " " + words[unit]


def _phase_pair(results: Results, phase: str) -> Optional[List[float]]:
    stats = dig(results, "phases", phase)
    if not isinstance(stats, dict):
        return None
    values = [finite_number(stats.get("p50")), finite_number(stats.get("p95"))]
    return None if any(v is None for v in values) else [v for v in values if v is not None]


def _round_values(results: Results, key: str) -> List[float]:
    rounds = results.get("round_results") or []
    values = [finite_number(r.get(key)) for r in rounds if isinstance(r, dict)] if len(rounds) > 1 else []
    if values and all(v is not None for v in values):
        return [v for v in values if v is not None]
    top = finite_number(results.get(key))
    return [top] if top is not None else []


def _runtime_cell(results: Results, key: str, lang: str) -> str:
    words = _WORDS[lang]
    operation, stand_ins = _RUNTIME_ROWS[key]
    operations = results.get("runtime_operations")
    pooled = operations["pooled"].get(operation) if operations else None
    if isinstance(pooled, dict):
        values = [finite_number(pooled.get("p50_seconds")), finite_number(pooled.get("p95_seconds"))]
        if all(v is not None for v in values):
            text = _guide_pair([v for v in values if v is not None], lang)
            bounds = (pooled.get("p50_bucket"), pooled.get("p95_bucket"))
            buckets = [f"{b[0]}-{b[1]} s" for b in bounds if isinstance(b, list) and len(b) == 2]
            return words["buckets"].format(text, " / ".join(buckets)) if buckets else text
    for phase in stand_ins:
        pair = _phase_pair(results, phase)
        if pair is not None:
            name, text = phase, _guide_pair(pair, lang)
            if phase == "kernel_boot_to_process_start_seconds":
                name = f"{phase}, {words['combined']}"
            if phase == "pod_to_container_started_seconds":  # API server stamps: whole seconds
                text = f"{pair[0]:.0f} / {pair[1]:.0f} {words['s']}"
                name = f"{phase}, {words['whole_seconds']}"
            return words["stand_in"].format(text, name)
    return words["not"].format(words["run"].format("--kubelet-metrics"))


def guide_cells(results: Results, lang: str = "en") -> Dict[str, str]:
    """One run's column of the guide's table, from the tool's own figures."""
    words = _WORDS[lang]
    rounds = results.get("rounds") or 1
    tasks = results.get("episodes_per_round", results.get("episodes"))
    successful, episodes = results.get("successful_episodes"), results.get("episodes")
    reward = words["all"].format(1) if results.get("reward_sum") == successful else words["sum"]
    cells = {
        "scale": _guide_scale(rounds, tasks, lang),
        "completed": words["completed"].format(successful, episodes, reward.format(results.get("reward_sum"))),
    }
    for key in _RUNTIME_ROWS:
        cells[key] = _runtime_cell(results, key, lang)
    for key, phase in (("python_import", "python_import_seconds"), ("import_to_ready", "import_to_ready_seconds")):
        pair = _phase_pair(results, phase)
        cells[key] = _guide_pair(pair, lang) if pair else words["not"].format(phase)
    pod = [finite_number(results.get(f"pod_to_ready_{stat}_seconds")) for stat in ("p50", "p95")]
    cells["pod_to_ready"] = (  # whole-second pod creation: tenths of a second, never milliseconds
        " / ".join(f"{v:.1f}" for v in pod if v is not None) + " " + words["s"]
        if all(v is not None for v in pod)
        else "-"
    )
    for key, figure in (
        ("batch_ready", "batch_to_all_ready_seconds"),
        ("all_rewards", "batch_to_all_rewards_seconds"),
        ("client_complete", "client_job_complete_seconds"),
    ):
        values = _round_values(results, figure)
        cells[key] = _guide_rounds([f"{v:.1f}" for v in values], "s", lang) if values else "-"
    return cells


def guide_table(columns: List[Tuple[str, Results]], lang: str, reference: bool) -> GuideTable:
    """The guide's table: its rows in its order, one column per run, then (with `reference`)
    the guide's own published columns. Column names are the caller's; cells are the tool's."""
    header = [GUIDE_HEADER[lang]] + [name for name, _ in columns]
    cells = [guide_cells(results, lang) for _, results in columns]
    if reference:
        header += [GUIDE_COLUMN_PREFIX[lang] + column["name"][lang] for column in GUIDE_REFERENCE["columns"]]
    rows: List[GuideRow] = []
    for key, english, chinese in GUIDE_ROWS:
        row = [chinese if lang == "zh" else english] + [column[key] for column in cells]
        if reference:
            row += [_guide_reference_cell(group, key, lang) for group in range(len(GUIDE_REFERENCE["columns"]))]
        rows.append({"row": key, "cells": row})
    table: GuideTable = {"lang": lang, "header": header, "rows": rows}
    if reference:
        table["reference"] = {"date": GUIDE_REFERENCE["date"], "conditions": list(GUIDE_REFERENCE["conditions"][lang])}
    return table


def _guide_date(date: str, lang: str) -> str:
    """2026-09-21, or as the guide writes it: 2026 年 9 月 21 日."""
    if lang != "zh":
        return date
    year, month, day = date.split("-")
    return f"{year} 年 {int(month)} 月 {int(day)} 日"


def render_guide_table(table: GuideTable, style: str, width: Optional[int] = None) -> str:
    """The guide's table as aligned text or Markdown (render_table; text fits `width` columns, a
    terminal's, or SUMMARY_WIDTH, or wraps by column), then its reference's conditions in the
    table's language."""
    width = width or SUMMARY_WIDTH
    lines = [table["header"]] + [row["cells"] for row in table["rows"]]
    text = render_table(lines, style, width if style == "text" else None)
    reference = table.get("reference")
    if reference:
        words = _WORDS[table["lang"]]
        note = words["reference"].format(
            date=_guide_date(reference["date"], table["lang"]),
            conditions=words["separator"].join(reference["conditions"]),
        )
        note_lines = wrap_text(printable(note), width) if style == "text" else [printable(note)]
        text += "\n" + "\n".join(note_lines) + "\n"
    return text
