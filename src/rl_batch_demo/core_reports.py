"""Pure core: the reports (summary, JUnit, metrics, compare) and the timeline picture."""

from __future__ import annotations

import datetime
import json
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .constants import (
    _XML_FORBIDDEN,
    BUILTIN_WORKER,
    CLOCK_API,
    CLOCK_RESOLUTION,
    COMPARE_FIGURES,
    EXIT_INTERRUPTED,
    EXIT_THRESHOLD,
    FIGURE_CLOCKS,
    FIGURE_SOURCES,
    HANDLER_SANDBOX,
    JOB_NAME,
    JUNIT_MESSAGE_LIMIT,
    JUNIT_SUITE_NAME,
    KUBELET_OPERATIONS,
    LOG_DIR_BUDGET,
    LOG_FILE_LIMIT,
    MANY_SAMPLES,
    METRICS_PREFIX,
    NO_RUNTIME,
    PHASE_LABELS,
    PHASES,
    QUEUE_FIGURES,
    SCHEDULED_BY_CONDITION,
    SIMULATED_RUNTIME,
    STAMP_CLOCKS,
    SUMMARY_WIDTH,
    TABLE_COLUMN_MIN,
    TABLE_COLUMN_NARROWEST,
    THRESHOLD_METRICS,
    TIMELINE_BARS,
    TIMELINE_DETAIL_BARS,
    TimelineStep,
)
from .core_basics import (
    Clocks,
    _exact_duration,
    _resolution,
    _seconds,
    below_resolution_text,
    clock_text,
    clocked_text,
    clocks_text,
    difference,
    dig,
    figure_text,
    finite_number,
    json_number,
    json_stat,
    optional_timestamp,
    percentile,
)
from .core_cluster import _condition_time, _container_status, infra_loss
from .core_validation import check_thresholds
from .records import (
    ComparisonRow,
    JUnitCase,
    JUnitSuite,
    KubeObject,
    PodRow,
    Results,
    RunSettings,
    RuntimeOperations,
    StartedRound,
)

# Pure core: reports ###########################################################
# The summary, CI reports (JUnit, Prometheus) and comparisons, as text, every pod string escaped.
# Uses the sections above.


# Lone surrogates too: a path or flag with a byte that is not UTF-8 reaches Python as one (\udcff).
_UNPRINTABLE = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def _escaped(match: re.Match[str]) -> str:
    """A character shown as its Python escape (\\x1b, \\u202e): visible, and inert."""
    return match.group().encode("unicode_escape").decode("ascii")


def printable(text: str, keep_newlines: bool = False) -> str:
    """Text for a terminal or a CI log with every control character (and bidirectional override)
    escaped, so nothing a pod printed can move the cursor, recolour the screen or forge a line."""
    if not keep_newlines:
        text = text.replace("\n", "\\n")
    return re.sub(_UNPRINTABLE, _escaped, text.replace("\t", " "))


def _display_width(text: str) -> int:
    """Terminal columns of a text: East Asian wide and full-width characters take two."""
    if text.isascii():  # every ASCII character takes one column: the common case, without a lookup each
        return len(text)
    import unicodedata  # noqa: PLC0415 - only tables need it; keeps --help fast

    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


_WIDE = "\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef"  # CJK characters and punctuation, full-width forms
# A line breaks before a wide character (with the closing marks after it), or before a run of others.
_LINE_BREAKS = rf"[{_WIDE}][\uff0c\u3002\uff1b\uff1a\u3001\uff09\u300d\u300f\uff01\uff1f),.;:!?\]]*\s*|[^{_WIDE}]+"


def _tokens(text: str) -> List[str]:
    """Where a line may break: at spaces, and between wide characters (Chinese breaks anywhere,
    but never before its closing punctuation)."""
    return [token for word in re.findall(r"\S+\s*|\s+", text) for token in re.findall(_LINE_BREAKS, word)]


def _name_parts(word: str) -> List[str]:
    """Where a word too long for a line may break: after each _ - / inside a name."""
    return re.findall(r"[!-~]+?[_/-](?=[!-~])|\S+\s*|\s+", word)


def _wrap_pieces(token: str, room: int) -> List[str]:
    """A token as it fits `room` columns: whole, else in _name_parts, a part still too long
    broken anywhere."""
    if _display_width(token.rstrip()) <= room:
        return [token]
    return [
        part for run in _name_parts(token) for part in (list(run) if _display_width(run.rstrip()) > room else [run])
    ]


def wrap_text(text: str, width: int, indent: str = "") -> List[str]:
    """`text` in lines of at most `width` terminal columns (CJK characters count two), broken at
    spaces and between wide characters, else inside a too long name (_wrap_pieces); lines after
    the first start with `indent`."""
    lines: List[str] = []
    line = ""
    for token in _tokens(text):
        for piece in _wrap_pieces(token, width - len(indent)):
            if line.strip() and _display_width((line + piece).rstrip()) > width:
                lines.append(line.rstrip())
                line = indent
            line += piece
    if line.strip() or not lines:
        lines.append(line.rstrip())
    return lines


def fit_lines(text: str, width: Optional[int]) -> str:
    """`text` with each line wrapped to `width` terminal columns (wrap_text; a continuation
    indented two more than its line), for a terminal that would otherwise break it anywhere;
    `width` None (not a terminal: a CI log, a file): unchanged, full lines."""
    if width is None:
        return text
    fitted = []
    for line in text.split("\n"):
        indent = " " * (len(line) - len(line.lstrip(" ")))
        fitted += wrap_text(line, width, indent + "  ") if _display_width(line) > width else [line]
    return "\n".join(fitted)


def shorten(text: str, width: int, mark: str = "...") -> str:
    """`text` cut at its tail to `width` terminal columns (CJK characters count two), `mark`
    where it was cut; whole when it fits."""
    if _display_width(text) <= width:
        return text
    kept, used = "", _display_width(mark)
    for character in text:
        used += _display_width(character)
        if used > width:
            break
        kept += character
    return (kept + mark)[: max(width, 0)] if width < len(mark) else kept + mark


def _longest_piece(text: str) -> int:
    """The narrowest a column holding `text` can be without breaking a name inside its parts."""
    return max((_display_width(part.rstrip()) for token in _tokens(text) for part in _name_parts(token)), default=0)


def markdown_literal(text: str) -> str:
    """Text shown verbatim in Markdown (a GitHub step summary): a fenced block whose fence is
    longer than any run of backticks inside, so no heading, link or image can be added."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{printable(text)}\n{fence}\n"


TableRow = Tuple[List[str], Optional[str]]  # a row's cells, or its first cell and one spanning every value column


def _lay_out(
    rows: Sequence[TableRow], widths: List[int], right: Sequence[bool], gaps: Sequence[int], values: range
) -> List[str]:
    """Rows as lines: each cell wrapped within its column's width (wrap_text, so a row may take
    several lines and no line breaks inside another cell), left or right aligned, `gaps[i]`
    spaces before column i; a spanning row's text right-aligned across the `values` columns."""
    out = []
    for given, span in rows:
        cells, layout, aligned, spacing = list(given), list(widths), list(right), list(gaps)
        if span is not None:  # one cell across the value columns, right-aligned
            across = sum(widths[i] for i in values) + sum(gaps[i] for i in values[1:])
            cells = [given[0], span, *given[values.stop :]]
            layout = [widths[0], across, *widths[values.stop :]]
            aligned = [right[0], True, *right[values.stop :]]
            spacing = [gaps[0], gaps[values.start], *gaps[values.stop :]]
        parts = [wrap_text(cell, column) for cell, column in zip(cells, layout)]
        for index in range(max(len(part) for part in parts)):
            line = ""
            for part, column, to_right, gap in zip(parts, layout, aligned, spacing):
                text = part[index] if index < len(part) else ""
                pad = " " * max(column - _display_width(text), 0)
                line += " " * gap + (pad + text if to_right else text + pad)
            out.append(line.rstrip())
    return out


def _fit_columns(widths: List[int], floors: Sequence[int], gaps: Sequence[int], width: int) -> List[int]:
    """Column widths narrowed, the widest first and none below its floor, until a line fits `width`."""
    widths = list(widths)
    while sum(widths) + sum(gaps) > width:
        narrowable = [i for i in range(len(widths)) if widths[i] > floors[i]]
        if not narrowable:
            break
        widths[max(narrowable, key=lambda i: widths[i])] -= 1
    return widths


def _figure_table(
    header: Sequence[str],
    rows: Sequence[Tuple[str, Clocks, Sequence[Optional[float]]]],
    sources: Optional[Sequence[str]] = None,
    width: Optional[int] = None,
) -> List[str]:
    """Lines of figures: a label, each value formatted by its clocks, who measured it (`sources`,
    when given: FIGURE_SOURCES), then its clocks; a row whose values are all below its clocks'
    resolution says so across its value columns (below_resolution_text); a row with a negative
    value is marked "*", and a note under the table says why it can be. `width`: the terminal's
    columns, which the label and clock columns are narrowed and wrapped to fit (values never
    break); None: natural widths, notes wrapped at SUMMARY_WIDTH."""
    count = len(header) - 1
    table: List[TableRow] = [([*header[:1], *header[1:], *(["by"] if sources else []), "clock"], None)]
    notes: List[str] = []
    for number, (label, clocks, values) in enumerate(rows):
        texts = [clocked_text(value, clocks) for value in values]
        span = below_resolution_text(values, clocks)
        negative = span is None and any(text.startswith("-") and text != "-" for text in texts)
        by = [sources[number]] if sources else []
        table.append(([label, *texts, *by, clocks_text(clocks) + (" *" if negative else "")], span))
        if negative:
            why = clocks[2] or "its clock cannot give a negative value: results.json was changed"
            notes += wrap_text(f"* {label}: negative because {why}", width or SUMMARY_WIDTH, "  ")
    values = range(1, 1 + count)
    columns = len(table[0][0])
    natural = [max(_display_width(cells[i]) for cells, span in table if span is None) for i in range(columns)]
    right = [i in values for i in range(columns)]
    # the layout of old: labels one wider than the longest, each value in its width plus two
    widths = [natural[0] + 1, *(natural[i] + 2 for i in values), *natural[values.stop :]]
    gaps = [0] * (1 + count) + [2] * (columns - 1 - count)
    fitted = width is not None and sum(widths) + sum(gaps) > width
    if fitted:  # a terminal too narrow: two spaces between columns, the words then the names broken
        widths, gaps = list(natural), [0] + [2] * (columns - 1)
    room = sum(widths[i] for i in values) + sum(gaps[i] for i in values[1:])
    # "< 1 s (1 s clock)" where the value columns hold it, else "< 1 s" (the clock column says the rest)
    table = [
        (cells, span if span is None or _display_width(span) <= room else span.split(" (")[0]) for cells, span in table
    ]
    spans = [_display_width(span) for _, span in table if span is not None]
    widths[values.stop - 1] += max(max(spans, default=0) - room, 0)  # a spanning text widens the last value
    if not fitted or width is None:
        return _lay_out(table, widths, right, gaps, values) + notes
    # A terminal too narrow: the label and the clock narrowed, each to its longest word
    words = [max(_longest_piece(cells[i]) for cells, _ in table) for i in range(columns)]
    narrow = {0, columns - 1}  # values and sources stay whole
    floors = [min(words[i], widths[i]) if i in narrow else widths[i] for i in range(columns)]
    beside = _fit_columns(widths, floors, gaps, width)
    if sum(beside) + sum(gaps) <= width:
        return _lay_out(table, beside, right, gaps, values) + notes
    # Still too narrow: each row's clock goes on a line of its own under it, and only the label narrows
    grid = [(cells[:-1], span) for cells, span in table]
    widths, gaps, right = widths[:-1], gaps[:-1], right[:-1]
    for limit in (words[0], TABLE_COLUMN_MIN):
        widths = _fit_columns(widths, [min(limit, widths[0]), *widths[1:]], gaps, width)
    lines = _lay_out(grid[:1], widths, right, gaps, values)
    for (cells, _), row in zip(table[1:], grid[1:]):
        lines += _lay_out([row], widths, right, gaps, values) + wrap_text(f"  clock: {cells[-1]}", width, "    ")
    return lines + notes


def _many_sample_figures(results: Results, phase: str) -> Tuple[Optional[float], Optional[float]]:
    """(p99, mean) of a phase over the episodes' rows, when there are MANY_SAMPLES of them."""
    values = [value for row in results.get("pods") or [] if (value := finite_number(row.get(phase))) is not None]
    if len(values) < MANY_SAMPLES:
        return None, None
    return percentile(values, 0.99), math.fsum(values) / len(values)


def verdict_line(results: Results, breaches: Sequence[str] = ()) -> str:
    """One line: how many episodes validated, the reward, the two batch figures, and what failed."""
    failed = results.get("failed_episodes") or []
    scored = sum(1 for entry in failed if entry.get("reward") is not None)
    left_out = len(failed) - scored
    valid = f"{results['successful_episodes']}/{results['episodes']} episodes valid"
    if left_out:
        valid += f" ({left_out} left out under --max-failed-episodes {results.get('max_failed_episodes')})"
    stopped = len(results.get("stopped_episodes") or [])
    if stopped:
        valid += f" ({stopped} stopped: {results.get('stopped_by')})"
    if scored:
        valid += f" ({scored} failed and scored {results.get('failed_episode_reward')!r} under --failed-episode-reward)"
    text = (
        f"verdict: {valid}, reward_sum {results['reward_sum']}; all ready "
        f"{figure_text(results.get('batch_to_all_ready_seconds'), 'batch_to_all_ready_seconds')}, all rewards "
        f"{figure_text(results.get('batch_to_all_rewards_seconds'), 'batch_to_all_rewards_seconds')}"
    )
    if breaches:
        text += f"; latency budget breached (exit {EXIT_THRESHOLD}): {'; '.join(breaches)}"
    return text


def render_summary(
    results: Results, files: Sequence[Tuple[str, str]] = (), breaches: Sequence[str] = (), width: Optional[int] = None
) -> str:
    """The terminal summary: headline figures, then one line per phase (p50, p95, max; p99 and
    mean from MANY_SAMPLES on), each formatted by its clocks and naming them; notes for negative
    values; where the files are (`files`: what, path); the verdict last. `width`: a terminal's
    columns, which every line fits (the tables narrowed by column, the rest wrapped at spaces);
    None (a log, a file): full lines, notes wrapped at SUMMARY_WIDTH."""
    wrap = width or SUMMARY_WIDTH
    lines = [
        f"namespace {results['namespace']}  context {results['context']}  "
        f"runtime {results['runtime'] or '(none)'}  image {results['image']}",
        f"episodes {results.get('episodes_per_round', results['episodes'])} x {results['rounds']} round(s), "
        "parallelism "
        f"{results['parallelism']}: {results['successful_episodes']} succeeded, reward sum "
        f"{results['reward_sum']}",
    ]
    if results.get("worker", BUILTIN_WORKER) != BUILTIN_WORKER:
        lines.append(
            f"worker {results['worker']}: reward mean {results.get('reward_mean')!r}, "
            f"min {results.get('reward_min')!r}, max {results.get('reward_max')!r} (rewards.jsonl)"
        )
    for note in results.get("notes") or []:
        lines += wrap_text(f"note: {note}", wrap, "  ")
    queued_for, client_queued_for = (json_number(results.get(key)) for key in QUEUE_FIGURES)
    if client_queued_for is not None or (queued_for or 0) > 0:
        api_wait = "unknown" if queued_for is None else f"{queued_for:.0f} s"
        lines.append(
            f"queued: {api_wait} from Job created to admitted (job controller's clock, whole seconds; the client "
            f"saw {_seconds(client_queued_for)}); the batch figures count from the admission"
        )
    lines.append("")
    batch = [
        ("Job created -> all episodes ready", "batch_to_all_ready_seconds"),
        ("Job created -> all rewards", "batch_to_all_rewards_seconds"),
        ("Job created -> all containers started", "batch_to_all_started_seconds"),
        ("Job created -> all containers finished", "batch_to_all_finished_seconds"),
        ("client submit -> Job Complete observed", "client_job_complete_seconds"),
    ]
    lines += _figure_table(
        ["batch figure", "value"],
        [(label, FIGURE_CLOCKS[key], [json_number(results.get(key))]) for label, key in batch],
        [FIGURE_SOURCES[key] for _, key in batch],
        width,
    )
    many = {phase: _many_sample_figures(results, phase) for phase in PHASES}
    extra = any(p99 is not None for p99, _ in many.values())
    sources = [row.get("scheduled_source") for row in results.get("pods") or []]
    rows = []
    for phase in PHASES:
        stats = results["phases"].get(phase)
        values = [json_stat(stats, stat) for stat in ("p50", "p95", "max")] + (list(many[phase]) if extra else [])
        clocks = FIGURE_CLOCKS[phase]
        if phase == "pod_to_scheduled_seconds" and "condition" in sources and "event" not in sources:
            clocks = SCHEDULED_BY_CONDITION
        rows.append((PHASE_LABELS[phase], clocks, values))
    header = ["phase (per episode)", "p50", "p95", "max"] + (["p99", "mean"] if extra else [])
    lines += ["", *_figure_table(header, rows, width=width)]
    lines += startup_source_lines(results, wrap)
    lines += output_source_lines(results, wrap)
    lines += runtime_operation_lines(results.get("runtime_operations"), width)
    nodes = ", ".join(f"{node}: {episodes}" for node, episodes in results["nodes"].items())
    lines += ["", f"nodes: {nodes}", f"image IDs: {', '.join(results['image_ids']) or '-'}"]
    if results.get("image_pinned"):
        lines.append(f"image pinned: {results['image_pinned']}")
    warmup = results.get("warmup")
    for node, warm in sorted((warmup["per_node"] if warmup else {}).items()):
        ready = figure_text(warm.get("pod_to_ready_seconds"), "pod_to_ready_seconds")
        lines.append(f"warm-up {node}: ready {ready}, image {warm.get('image_pull')}")
    if files:
        lines += ["", *(f"{what}: {path}" for what, path in files)]
    lines.append(verdict_line(results, breaches))
    return fit_lines("\n".join(lines), width) + "\n"


def startup_source_lines(results: Results, width: int = SUMMARY_WIDTH) -> List[str]:
    """Where the start-up rows came from: the image cache, the scheduling clock, the kernel;
    wrapped to `width` columns."""
    rows = results.get("pods") or []
    lines = [""]
    cache = results.get("image_cache")
    if cache:
        pulls = [seconds for row in rows if (seconds := row["image_pull"]["seconds"]) is not None]
        pulled = f" (pull p50 {_seconds(percentile(pulls, 0.5))})" if pulls else ""
        lines += wrap_text(
            f"image cache (kubelet Pulled events): {cache.get('cached', 0)} cached, {cache.get('pulled', 0)} "
            f"pulled{pulled}, {cache.get('unknown', 0)} unknown: cache_state {results.get('cache_state')}",
            width,
            "  ",
        )
    sources = [row.get("scheduled_source") for row in rows]
    kernels = [row.get("kernel") for row in rows]
    lines += wrap_text(
        f"scheduled from: {sources.count('event')} Scheduled events (microseconds), "
        f"{sources.count('condition')} PodScheduled conditions (whole seconds)",
        width,
        "  ",
    )
    disagree = sum(1 for row in rows if row.get("clock_note"))
    lines += wrap_text(
        f"kernel: {kernels.count('sandbox')} booted in the sandbox, {kernels.count('shared')} shared (booted before "
        f"the pod, or restored from a snapshot), {kernels.count(None)} unknown"
        + (f" ({disagree} whose clocks disagree: pods[].clock_note)" if disagree else ""),
        width,
        "  ",
    )
    unstarted = sum(1 for row in rows if row.get("process_started_at") is None)
    if unstarted and results.get("worker", BUILTIN_WORKER) != BUILTIN_WORKER:  # the built-in reads /proc itself
        lines += wrap_text(
            f"process start: unknown for {unstarted} of {len(rows)} episode(s): their ready event carries no "
            "process_started_at or kernel_booted_at, which a custom worker reports itself (docs/own-episodes.md), "
            "so the rows from the process start show - and the kernel is unknown",
            width,
            "  ",
        )
    return lines


def output_source_lines(results: Results, width: int = SUMMARY_WIDTH) -> List[str]:
    """How the episodes' output was read, when not all plainly: pods without a termination
    message, episodes read with a note, pod output that was not saved; wrapped to `width`."""
    missing = results.get("pods_without_termination_message", 0)
    noted = sum(1 for row in results.get("pods") or [] if row.get("log_notes"))
    not_saved = results.get("log_bytes_not_saved", 0)
    lines = []
    if missing or noted:
        lines += wrap_text(
            f"episode output: {missing} pod(s) succeeded without a termination message (their logs alone carried "
            f"their events), {noted} episode(s) read with a note (pods[].log_notes in results.json)",
            width,
            "  ",
        )
    if not_saved:
        lines += wrap_text(
            f"pod logs: {not_saved:,} bytes read but not saved (each <pod>.log keeps {LOG_FILE_LIMIT:,} bytes, a run's "
            f"logs {LOG_DIR_BUDGET:,} in all); every ready and reward line was saved",
            width,
            "  ",
        )
    return lines


def _bucket_text(bucket: Any) -> str:
    if not bucket:
        return "-"
    lower, upper = bucket
    return f"({_exact_duration(lower)}, {_exact_duration(upper) if upper is not None else '+Inf'}]"


def runtime_operation_lines(operations: Optional[RuntimeOperations], width: Optional[int] = None) -> List[str]:
    """The kubelet's runtime histograms (--kubelet-metrics): counts, exact means, and each
    quantile with the bucket it lies in; an interpolated value is never more precise than that.
    `width`: a terminal's columns, which the table fits by narrowing and wrapping its label and
    bucket columns; None: the natural layout."""
    if not operations:
        return []
    header = ["runtime operation (kubelet)", "count", "mean", "p50 ~", "p50 bucket", "p95 ~", "p95 bucket"]
    table: List[List[str]] = [header]
    pooled = operations.get("pooled") or {}
    crosscheck = operations.get("sandbox_crosscheck")
    handler = f"{HANDLER_SANDBOX} {operations.get('handler') or '(default)'} (cross-check)"
    rows = [(operation, pooled.get(operation)) for operation, *_ in KUBELET_OPERATIONS]
    for label, figures in [*rows, (handler, crosscheck["handler_figures"] if crosscheck else None)]:
        if not figures:
            table.append([label, "-", "", "", "", "", ""])
            continue
        table.append(
            [
                label,
                str(figures["count"]),
                _seconds(figures["mean_seconds"]),
                _seconds(figures["p50_seconds"]),
                _bucket_text(figures["p50_bucket"]),
                _seconds(figures["p95_seconds"]),
                _bucket_text(figures["p95_bucket"]),
            ]
        )
    right = [False, True, True, True, False, True, False]
    widths, gaps = [44, 7, 11, 11, 20, 10, 0], [0, 0, 0, 0, 2, 0, 2]  # the natural layout
    widths[-1] = max(_display_width(line[-1]) for line in table)
    lines = [""]
    if width is None or sum(widths) + sum(gaps) <= width:
        lines += _lay_out([(line, None) for line in table], widths, right, gaps, range(1, 2))
    else:  # a terminal too narrow: the buckets on a line under each row, the operation's name narrowed
        grid = [[line[0], line[1], line[2], line[3], line[5]] for line in table]
        widths = [max(_display_width(line[i]) for line in grid) for i in range(5)]
        gaps, right = [0, 2, 2, 2, 2], [False, True, True, True, True]
        for limit in (max(_longest_piece(line[0]) for line in grid), TABLE_COLUMN_MIN):
            widths = _fit_columns(widths, [min(limit, widths[0]), *widths[1:]], gaps, width)
        lines += _lay_out([(grid[0], None)], widths, right, gaps, range(1, 2))
        for line, row in zip(table[1:], grid[1:]):
            lines += _lay_out([(row, None)], widths, right, gaps, range(1, 2))
            if line[4]:
                lines += wrap_text(f"  p50 in {line[4]}, p95 in {line[6]}", width, "    ")
    wrap = width or SUMMARY_WIDTH
    if crosscheck and crosscheck["note"]:
        lines += wrap_text(f"  note: {crosscheck['note']}", wrap, "    ")
    for node, entry in sorted((operations.get("nodes") or {}).items()):
        if entry.get("note"):
            lines += wrap_text(f"  node {node}: {entry['note']}", wrap, "    ")
    lines += wrap_text(
        "  (node-wide counters, read before and after the run; quantiles interpolated within buckets)", wrap, "    "
    )
    return lines


def headline(results: Results) -> Dict[str, object]:
    """The guide's JSON summary: results without the per-episode rows."""
    return {key: value for key, value in results.items() if key != "pods"}


def markdown_summary(results: Results) -> str:
    """A table for CI step summaries (GITHUB_STEP_SUMMARY)."""
    lines = [
        f"### rl-batch-demo: {results['successful_episodes']}/{results['episodes']} episodes, "
        f"reward sum {results['reward_sum']}",
        "",
        "| figure | value | measured by | clock |",
        "| --- | --- | --- | --- |",
    ]
    for key in THRESHOLD_METRICS:
        value = figure_text(json_number(results.get(key)), key)
        lines.append(f"| {key} | {value} | {FIGURE_SOURCES[key]} | {clock_text(key)} |")
    lines += [
        f"| runtime | {results['runtime'] or '(none)'} | | |",
        f"| parallelism | {results['parallelism']} | | |",
        f"| namespace | {results['namespace']} | | |",
    ]
    return "\n".join(lines) + "\n"


def render_events_text(events: List[KubeObject]) -> str:
    """Events as a table sorted by creation time, like `kubectl get events --sort-by`."""

    def key(event: KubeObject) -> Tuple[str, str]:
        return (event.get("metadata", {}).get("creationTimestamp") or "", event.get("metadata", {}).get("name", ""))

    lines = ["CREATED               TYPE     REASON                 OBJECT                              MESSAGE"]
    for event in sorted(events, key=key):
        involved = event.get("involvedObject", {})
        lines.append(
            f"{event.get('metadata', {}).get('creationTimestamp', '-'):<22}"
            f"{event.get('type', '-'):<9}{event.get('reason', '-'):<23}"
            f"{(involved.get('kind', '?').lower() + '/' + involved.get('name', '?')):<36}"
            f"{' '.join(str(event.get('message', '')).split())}"
        )
    return "\n".join(lines) + "\n"


def _ratio(value: float, base: float) -> Optional[float]:
    try:
        return finite_number(value / base)
    except OverflowError:  # a hand-edited integer beyond a float's range
        return None


def _compare_clocks(figure: str) -> Optional[Clocks]:
    """The clocks of a compared figure ("phase:stat" for a phase); None for a count or a
    kubelet histogram's mean (exact, in its own unit)."""
    key = figure.split(":", maxsplit=1)[0]
    return FIGURE_CLOCKS.get(key) if key != "runtime_operations" else None


def comparison(runs: List[Tuple[str, Results]]) -> List[ComparisonRow]:
    """One row per figure: each run's value (as results.json holds it), its ratio to the first
    run's, each value as the summary shows it (as precise as its clocks), and that resolution."""
    figures = list(COMPARE_FIGURES)
    figures += [(f"{phase}:{stat}", f"{PHASE_LABELS[phase]} {stat}") for phase in PHASES for stat in ("p50", "p95")]
    figures += [(f"runtime_operations:{name}", f"{name} mean (kubelet)") for name, *_ in KUBELET_OPERATIONS]
    rows: List[ComparisonRow] = []
    for key, label in figures:
        values: List[Optional[float]] = []
        for _, results in runs:
            if key.startswith("runtime_operations:"):
                operations = results.get("runtime_operations")
                pooled = operations["pooled"].get(key.split(":")[1]) if operations else None
                values.append(json_number(pooled.get("mean_seconds")) if isinstance(pooled, dict) else None)
            elif ":" in key:
                phase, stat = key.split(":")
                stats = dig(results, "phases", phase)
                values.append(json_number(stats.get(stat)) if stats else None)
            else:
                values.append(json_number(results.get(key, 1 if key == "rounds" else None)))
        clocks = _compare_clocks(key)
        resolution = _resolution(clocks) if clocks is not None else None
        base = values[0]
        # A ratio only means something between two positive durations that their clocks can tell
        # apart from zero, and only when a float holds it.
        floor = resolution if resolution is not None and resolution >= 0.01 else 0.0
        ratios = [
            None
            if (base is None or base <= 0 or base < floor or value is None or value < 0 or value < floor)
            else _ratio(value, base)
            for value in values
        ]
        texts = [_compare_text(value, key, clocks) for value in values]
        rows.append(
            {
                "figure": key,
                "label": label,
                "values": values,
                "ratios": ratios,
                "texts": texts,
                "clock": clocks_text(clocks) if clocks is not None else None,
                "resolution_seconds": resolution,
            }
        )
    return rows


def _compare_text(value: Optional[float], figure: str, clocks: Optional[Clocks]) -> str:
    """A compared value as the summary shows it: a count whole, a duration as precise as its
    clocks ("< 1 s" below a whole-second clock's resolution, never a bare negative), a kubelet
    mean in its unit."""
    if value is None:
        return "-"
    if clocks is None:
        return _seconds(value) if figure.startswith("runtime_operations:") else f"{value:g}"
    below = below_resolution_text([value], clocks)
    return below.split(" (")[0] if below else clocked_text(value, clocks)


def render_comparison(names: List[str], rows: List[ComparisonRow], style: str, width: Optional[int] = None) -> str:
    """The compared figures as a table (render_table): each value as precise as its clocks, and
    its ratio to the first run's; `width`: a terminal's columns, which the table fits."""

    def cell(text: str, ratio: Optional[float], first: bool) -> str:
        return text if first or ratio is None else f"{text} (x{ratio:.2f})"

    table = [
        [row["label"]] + [cell(t, r, i == 0) for i, (t, r) in enumerate(zip(row["texts"], row["ratios"]))]
        for row in rows
    ]
    return render_table([["figure", *names], *table], style, width)


def render_table(lines: List[List[Any]], style: str, width: Optional[int] = None) -> str:
    """A header line and rows as aligned text or Markdown; every cell made printable (a column
    name may be a directory name), Markdown cells with their pipes escaped. Text wider than
    `width` terminal columns (CJK characters count two) has its widest columns narrowed and
    their cells wrapped, each row then followed by an empty line so that rows stay apart."""
    cells = [[printable(str(cell)) for cell in line] for line in lines]
    if style == "markdown":
        escaped = [[cell.replace("\\", "\\\\").replace("|", "\\|") for cell in line] for line in cells]
        out = ["| " + " | ".join(escaped[0]) + " |", "|" + " --- |" * len(escaped[0])]
        out += ["| " + " | ".join(line) + " |" for line in escaped[1:]]
        return "\n".join(out) + "\n"
    natural = [max(_display_width(line[i]) for line in cells) for i in range(len(cells[0]))]
    widths = list(natural)
    words = [max(_longest_piece(line[i]) for line in cells) for i in range(len(widths))]
    # no name broken, if possible; then columns of TABLE_COLUMN_MIN; then, on a terminal too narrow
    # even for that (many runs side by side), as narrow as a wide character and its mark
    narrowest = [TABLE_COLUMN_NARROWEST] * len(widths)
    for limits in ([max(TABLE_COLUMN_MIN, word) for word in words], [TABLE_COLUMN_MIN] * len(widths), narrowest):
        floor = [min(limit, column) for limit, column in zip(limits, natural)]  # no name broken, if possible
        while width is not None and sum(widths) + 2 * (len(widths) - 1) > width and widths != floor:
            widest = max((i for i in range(len(widths)) if widths[i] > floor[i]), key=lambda i: widths[i])
            widths[widest] -= 1
    wrapped = widths != natural
    out = []
    for line in cells:
        parts = [wrap_text(cell, column) for cell, column in zip(line, widths)]
        for row in range(max(len(part) for part in parts)):
            texts = [part[row] if row < len(part) else "" for part in parts]
            out.append("  ".join(text + " " * (column - _display_width(text)) for text, column in zip(texts, widths)))
            out[-1] = out[-1].rstrip()
        if wrapped:
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# CI reports: JUnit XML and the Prometheus text format ------------------------
#
# A run's outcome as test suites: plain dicts first (junit_suites), serialised once at the edge
# (render_junit_xml). Pod content is untrusted: every string is cleaned of what XML 1.0 forbids
# and escaped by ElementTree; every metrics label value is escaped per the exposition format.


def xml_safe(text: Any) -> str:
    """Text that XML 1.0 can carry: forbidden control characters become visible escapes."""
    return re.sub(_XML_FORBIDDEN, _escaped, str(text))


def _finite_seconds(value: Any) -> float:
    """A duration for a `time` attribute: finite and not negative, else 0."""
    number = finite_number(value)
    return number if number is not None and number >= 0 else 0.0


def _pod_seconds(pod: KubeObject) -> float:
    """Pod created (API server) -> container finished (the node's runtime), whole seconds (0 if unknown)."""
    try:
        created = optional_timestamp(dig(pod, "metadata", "creationTimestamp"))
        terminated = dig(_container_status(pod), "state", "terminated") or {}
        finished = optional_timestamp(terminated.get("finishedAt"))
    except (AttributeError, TypeError, ValueError):
        return 0.0
    return _finite_seconds(difference(finished, created))


def _job_seconds(job: Optional[KubeObject]) -> float:
    """Job created -> its Complete or Failed condition, API server clock, whole seconds (0 if unknown)."""
    if not job:
        return 0.0
    try:
        created = optional_timestamp(dig(job, "metadata", "creationTimestamp"))
        ended = _condition_time(job, "Complete") or _condition_time(job, "Failed")
    except (AttributeError, TypeError, ValueError):
        return 0.0
    return _finite_seconds(difference(ended, created))


def _case(
    classname: str, name: str, seconds: float, outcome: str = "passed", message: str = "", text: str = ""
) -> JUnitCase:
    """A test case; its time is the pod's creation (API server) to its container's finishedAt
    (the runtime), two whole-second stamps, or 0 where nothing was timed: whole seconds."""
    return {
        "classname": classname,
        "name": name,
        "time": seconds,
        "whole_seconds": True,
        "outcome": outcome,
        "message": message,
        "text": text,
    }


def junit_suites(
    results: Optional[Results],
    rounds: List[StartedRound],
    thresholds: Dict[str, float],
    error: Optional[Tuple[int, str, Optional[str]]],
) -> List[JUnitSuite]:
    """A run as JUnit suites: one per round, one test case per episode, named after its pod.

    `results` is results.json when the run got that far; otherwise `rounds` holds what each
    started round left on disk ({"round", "job", "pods" or None, "job_object" or None}).
    `error` is (exit code, message, the pod an EpisodeInvalid names) when the run failed.
    Rounds before the one in progress validated (the run moved on); in the round in progress the
    invalid episode is a failure and the rest are skipped (not judged); any other failure is one
    error case named "run". One case per --threshold follows the episodes of the last suite."""
    suites: List[JUnitSuite] = []
    if results is not None:
        for figures in results["round_results"]:  # one per round, even for one round
            number, job = figures["round"], figures["job"]
            classname = f"{JUNIT_SUITE_NAME}.{job}"
            cases = []
            for row in results.get("pods") or []:
                if row.get("round", 1) == number:
                    taken = _finite_seconds(difference(row.get("finished_at"), row.get("created_at")))
                    cases.append(_case(classname, str(row["pod"]), taken))
                    for lost in row.get("lost_attempts") or []:  # --infra-retries: run again, not judged
                        why = f"lost to the infrastructure and run again as {row['pod']}: {lost.get('cause')}"
                        cases.append(_case(classname, str(lost.get("pod")), 0.0, "skipped", why))
            # set aside under --max-failed-episodes or scored under --failed-episode-reward: the run did
            # not fail for them, so neither does the report (skipped, with why)
            for entry in results.get("failed_episodes") or []:
                if entry.get("round", 1) == number:
                    if entry.get("reward") is not None:
                        how = f"failed by its own doing, scored {entry.get('reward')!r} (--failed-episode-reward)"
                    else:
                        how = "lost to the infrastructure, left out of the figures (--max-failed-episodes)"
                    cases.append(
                        _case(classname, str(entry.get("pod")), 0.0, "skipped", f"{how}: {entry.get('cause')}")
                    )
            seconds = _finite_seconds(figures.get("client_job_complete_seconds"))
            # the client's own clock: milliseconds
            suites.append({"round": number, "job": job, "time": seconds, "whole_seconds": False, "cases": cases})
    else:
        for index, started in enumerate(rounds):
            in_progress = error is not None and index == len(rounds) - 1
            classname = f"{JUNIT_SUITE_NAME}.{started['job']}"
            cases = []
            for pod in started.get("pods") or []:
                name = str(dig(pod, "metadata", "name") or "(unnamed pod)")
                if not in_progress and infra_loss(pod):  # --infra-retries ran its episode again
                    why = f"lost to the infrastructure and run again: {infra_loss(pod)}"
                    cases.append(_case(classname, name, _pod_seconds(pod), "skipped", why))
                elif not in_progress:
                    cases.append(_case(classname, name, _pod_seconds(pod)))
                elif error is not None and name == error[2]:
                    cases.append(_case(classname, name, _pod_seconds(pod), "failure", error[1], error[1]))
                elif error is not None and error[2] is not None:
                    reason = f"not judged: validation stops at the first invalid episode ({error[2]})"
                    cases.append(_case(classname, name, _pod_seconds(pod), "skipped", reason))
                else:
                    code = error[0] if error is not None else 0
                    how = "was interrupted" if code == EXIT_INTERRUPTED else f"stopped (exit {code})"
                    status = pod.get("status")
                    phase = (status.get("phase") if isinstance(status, dict) else None) or "unknown"
                    reason = f"not validated: the run {how} with this pod in phase {phase}"
                    cases.append(_case(classname, name, _pod_seconds(pod), "skipped", reason))
            seconds = _job_seconds(started.get("job_object"))
            suites.append(  # the job controller's whole-second condition
                {
                    "round": started["round"],
                    "job": started["job"],
                    "time": seconds,
                    "whole_seconds": True,
                    "cases": cases,
                }
            )
    if not suites:
        suites.append({"round": None, "job": None, "time": 0.0, "whole_seconds": True, "cases": []})
    last = suites[-1]["cases"]
    episode_failed = error is not None and error[2] is not None and results is None
    if (
        episode_failed
        and error is not None
        and not any(case["outcome"] == "failure" for suite in suites for case in suite["cases"])
    ):  # the invalid pod is not in pods.json (it was never listed)
        job = suites[-1]["job"] or JOB_NAME
        last.append(_case(f"{JUNIT_SUITE_NAME}.{job}", str(error[2]), 0.0, "failure", error[1], error[1]))
    if error is not None and error[0] != EXIT_THRESHOLD and not episode_failed:
        last.append(_case(JUNIT_SUITE_NAME, "run", 0.0, "error", error[1], error[1]))
    for metric, limit in sorted(thresholds.items()):
        name = f"threshold {metric} <= {limit:g} s"
        classname = f"{JUNIT_SUITE_NAME}.thresholds"
        value = results.get(metric) if results is not None else None
        if results is None:
            last.append(_case(classname, name, 0.0, "skipped", "not judged: the run did not validate"))
        elif finite_number(value) is None:  # unknown: breached, as check_thresholds judges it
            [breach] = check_thresholds(results, {metric: limit})
            last.append(_case(classname, name, 0.0, "failure", f"latency budget breached: {breach}", breach))
        else:
            breaches = check_thresholds(results, {metric: limit})
            figure = f"{metric} = {figure_text(finite_number(value), metric)}, budget {limit:g} s"
            if breaches:
                last.append(_case(classname, name, 0.0, "failure", f"latency budget breached: {breaches[0]}", figure))
            else:
                last.append(_case(classname, name, 0.0, text=figure))
    return suites


def junit_tag_properties(tags: Mapping[str, Any]) -> Dict[str, str]:
    """--tags as JUnit properties, each `tag.KEY`: a string as it is, any other value as its JSON."""
    return {
        f"tag.{key}": value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        for key, value in tags.items()
    }


def render_junit_xml(suites: List[JUnitSuite], properties: Dict[str, str]) -> str:
    """JUnit XML as GitLab's test reports and GitHub's JUnit actions read it: <testsuites>, one
    <testsuite> per round, <testcase classname name time> with <failure>, <error> or <skipped>."""
    from xml.etree import ElementTree  # noqa: PLC0415 - only a run with --junit pays for this import

    def seconds_text(seconds: float, whole: bool) -> str:  # as precise as the clock it came from
        return f"{seconds:.0f}" if whole else f"{seconds:.3f}"

    def attributes(cases: List[JUnitCase], seconds: float, whole: bool) -> Dict[str, str]:  # of <testsuite(s)>
        outcomes = [case["outcome"] for case in cases]
        counted = {"tests": None, "failures": "failure", "errors": "error", "skipped": "skipped"}
        totals = {key: str(len(outcomes) if of is None else outcomes.count(of)) for key, of in counted.items()}
        return {"name": JUNIT_SUITE_NAME, **totals, "time": seconds_text(seconds, whole)}

    def short(message: str) -> str:
        text = xml_safe(message)
        return text if len(text) <= JUNIT_MESSAGE_LIMIT else text[: JUNIT_MESSAGE_LIMIT - 3] + "..."

    every_case = [case for suite in suites for case in suite["cases"]]
    whole = all(suite["whole_seconds"] for suite in suites)
    root = ElementTree.Element("testsuites", attributes(every_case, sum(suite["time"] for suite in suites), whole))
    seen: Dict[Tuple[str, str], int] = {}
    for suite in suites:
        cases = suite["cases"]
        element = ElementTree.SubElement(root, "testsuite", attributes(cases, suite["time"], suite["whole_seconds"]))
        suite_properties = dict(properties)
        if suite["round"] is not None:
            suite_properties.update(round=str(suite["round"]), job=str(suite["job"]))
        holder = ElementTree.SubElement(element, "properties")
        for key, value in sorted(suite_properties.items()):
            ElementTree.SubElement(holder, "property", name=xml_safe(key), value=xml_safe(value))
        for case in cases:
            classname, name = xml_safe(case["classname"]), xml_safe(case["name"])
            seen[(classname, name)] = seen.get((classname, name), 0) + 1
            if seen[(classname, name)] > 1:  # test names must be unique
                name = f"{name} #{seen[(classname, name)]}"
            testcase = ElementTree.SubElement(
                element,
                "testcase",
                classname=classname,
                name=name,
                time=seconds_text(case["time"], case["whole_seconds"]),
            )
            if case["outcome"] != "passed":  # <failure>, <error> or <skipped>; a skipped case has no text
                outcome = ElementTree.SubElement(testcase, case["outcome"], message=short(case["message"]))
                if case["outcome"] != "skipped":
                    outcome.text = xml_safe(case["text"])
            elif case["text"]:
                ElementTree.SubElement(testcase, "system-out").text = xml_safe(case["text"])
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def _metric_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _metric_label_value(value: Any) -> str:
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate as \udcff
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _metric_number(value: Any) -> Optional[str]:
    """A sample value as the exposition format writes it; None for what it must not carry (NaN, Inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return str(value)
    return repr(float(value)) if math.isfinite(value) else None


MetricRun = Tuple[Dict[str, str], Optional[Results], int]  # labels, results.json (None: not valid), exit code


def render_metrics(results: Optional[Results], labels: Dict[str, str], exit_code: int, finished_at: float) -> str:
    """One run's figures as rl_batch_demo_* gauges (render_metrics_of_runs)."""
    return render_metrics_of_runs([(labels, results, exit_code)], finished_at)


def _metric_families(
    results: Optional[Results], exit_code: int, finished_at: float
) -> List[Tuple[str, str, List[Tuple[Dict[str, str], Any]]]]:
    """(name suffix, help, samples (extra labels, value)) of one run: figures only when it
    validated; exit code and time always."""
    families: List[Tuple[str, str, List[Tuple[Dict[str, str], Any]]]] = [
        (
            "exit_code",
            "Exit code of the last run (0 success, 1 episode invalid, 4 timeout, 5 budget breached; see --help).",
            [({}, exit_code)],
        ),
        (
            "validated",
            "1 when every episode of the last run validated and results.json was written, else 0.",
            [({}, int(results is not None))],
        ),
        (
            "last_run_timestamp_seconds",
            "When the last run ended: client wall clock, epoch seconds.",
            [({}, finished_at)],
        ),
    ]
    if results is not None:
        families += [
            ("episodes", "Episodes run (episodes per round x rounds).", [({}, results.get("episodes"))]),
            ("successful_episodes", "Episodes that validated.", [({}, results.get("successful_episodes"))]),
            ("reward_sum", "Sum of the episodes' rewards.", [({}, results.get("reward_sum"))]),
        ]
        for metric in THRESHOLD_METRICS:
            families.append(
                (
                    metric,
                    f"results.json {metric}, seconds; {_precision(FIGURE_CLOCKS[metric])}.",
                    [({}, results.get(metric))],
                )
            )
        phases = results.get("phases") or {}
        for stat in ("p50", "p95", "max", "samples"):
            samples = [({"phase": phase[: -len("_seconds")]}, json_stat(phases.get(phase), stat)) for phase in PHASES]
            if stat == "samples":
                families.append(("phase_samples", "Episodes with a value for each phase.", samples))
            else:
                precisions = "; ".join(
                    f"{phase[: -len('_seconds')]} {_precision(FIGURE_CLOCKS[phase])}" for phase in PHASES
                )
                families.append(
                    (
                        f"phase_{stat}_seconds",
                        f"{stat} of each per-episode phase, seconds; by phase: {precisions}.",
                        samples,
                    )
                )
    return families


def _precision(clocks: Clocks) -> str:
    """A gauge's clocks and the resolution its value has, for its HELP line (the sample itself
    is written as results.json holds it): "mixed: API server 1 s + node, to 1 s", "client clock,
    to 0.001 ms"."""
    return f"{clocks_text(clocks)}, to {_exact_duration(_resolution(clocks))}"


def render_metrics_of_runs(runs: Sequence[MetricRun], finished_at: float) -> str:
    """Runs' figures as rl_batch_demo_* gauges in the Prometheus text exposition format
    (node_exporter's textfile collector, a Pushgateway): HELP and TYPE, then each family's
    samples together, every run's (told apart by its labels: `reproduce` labels each group)."""
    families: Dict[str, Tuple[str, List[Tuple[Dict[str, str], Any]]]] = {}
    for labels, results, exit_code in runs:
        for suffix, help_text, samples in _metric_families(results, exit_code, finished_at):
            families.setdefault(suffix, (help_text, []))[1].extend(({**labels, **extra}, v) for extra, v in samples)
    lines = []
    for suffix, (help_text, samples) in families.items():
        written = [(merged, text) for merged, value in samples if (text := _metric_number(value)) is not None]
        if not written:
            continue
        name = METRICS_PREFIX + suffix
        lines.append(f"# HELP {name} {_metric_help(help_text)}")
        lines.append(f"# TYPE {name} gauge")
        for merged, text in written:
            label_text = ",".join(f'{key}="{_metric_label_value(merged[key])}"' for key in sorted(merged))
            lines.append(f"{name}{{{label_text}}} {text}")
    return "\n".join(lines) + "\n"


def metrics_labels(settings: RunSettings) -> Dict[str, str]:
    """The labels of a run's --metrics-file samples: what ran, so that series of runs compare."""
    return {
        "runtime": settings.runtime if settings.runtime is not None else NO_RUNTIME,
        "image": settings.image,
        "parallelism": "auto" if settings.parallelism_auto else str(settings.parallelism),
    }


# Pure core: timeline picture ##################################################
# timeline.svg from results.json. Uses the reports' escaping and the constants.


def _xml(text: str) -> str:
    """Text for the SVG: characters XML 1.0 forbids made visible escapes (`xml_safe`), markup escaped."""
    text = xml_safe(text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


TIMELINE_LABEL_WIDTH, TIMELINE_PLOT_WIDTH, TIMELINE_ROW_HEIGHT = 230, 760, 16


def _stamp_clock(row: PodRow, key: str) -> str:
    """The clock of one of a row's stamps (STAMP_CLOCKS): a PodScheduled condition is the API server's."""
    return CLOCK_API if key == "scheduled_at" and row.get("scheduled_source") == "condition" else STAMP_CLOCKS[key]


def _stamp_resolution(row: PodRow, key: str) -> float:
    """The resolution of one of a row's stamps: a PodScheduled condition is whole seconds."""
    return CLOCK_RESOLUTION[_stamp_clock(row, key)]


def _timeline_step(
    row: PodRow, step: TimelineStep, top: float, height: float, origin: float, scale: float, later: Optional[float]
) -> Tuple[List[str], bool]:
    """One phase of one episode, drawn as a bar, or as a marker when it is shorter than its clocks
    can tell: within the resolution of its coarser stamp (less than a second against a
    whole-second stamp, or two whole-second stamps at most a second apart). A marker is a tick
    where the phase is known and a whisker across the window its whole-second end lies in (up to
    `later`, a finer stamp of a step that came after it), never a bar of the clock's second.
    Returns the SVG parts and whether a marker was drawn."""
    name, meaning, colour, start_key, end_key = step
    start, stop = row.get(start_key), row.get(end_key)
    if not isinstance(start, (int, float)) or not isinstance(stop, (int, float)):
        return [], False
    start_res, end_res = _stamp_resolution(row, start_key), _stamp_resolution(row, end_key)
    span = stop - start
    resolution = max(start_res, end_res)

    def x(at: float) -> float:
        return TIMELINE_LABEL_WIDTH + (at - origin) * scale

    css = "bar" if height > 4 else "detail"
    stamp_clocks: Clocks = (_stamp_clock(row, start_key), _stamp_clock(row, end_key), None)
    clocks = clocks_text(stamp_clocks)
    if span >= resolution and not (min(start_res, end_res) >= 1 and span <= resolution):
        return [
            f'<rect class="{css}" data-phase="{_xml(name)}" x="{x(start):.1f}" y="{top:.1f}" '
            f'width="{max(span * scale, 0.5):.1f}" height="{height:.1f}" fill="{colour}">'
            f"<title>{_xml(row['pod'])} {_xml(name)}: {clocked_text(span, stamp_clocks)} "
            f"({_xml(clocks)})</title></rect>"
        ], False
    if end_res >= 1:  # the end is truncated: it lies in its second, not before a finer start nor after `later`
        low = max(stop, start) if start_res < 1 else stop
        high = stop + end_res if later is None or later < low else min(stop + end_res, later)
        window, tick = (low, high), (start if start_res < 1 else stop)
    elif start_res >= 1:  # the start is truncated: somewhere in its second, before the end
        window, tick = (start, min(start + start_res, stop)), stop
    else:
        window, tick = (start, stop), stop
    middle = top + height / 2
    caps = "".join(
        f'<line x1="{x(at):.1f}" y1="{middle - 2:.1f}" x2="{x(at):.1f}" y2="{middle + 2:.1f}"/>' for at in window
    )
    return [
        f'<g class="marker" data-phase="{_xml(name)}" stroke="{colour}" stroke-width="1.5">'
        f"<title>{_xml(row['pod'])} {_xml(name)}: {_xml(meaning)} within {_exact_duration(resolution)} "
        f"({_xml(clocks)}): between {window[0] - origin:.3f} and {window[1] - origin:.3f} s</title>"
        f'<line x1="{x(tick):.1f}" y1="{top:.1f}" x2="{x(tick):.1f}" y2="{top + height:.1f}" stroke-width="2.5"/>'
        f'<line x1="{x(window[0]):.1f}" y1="{middle:.1f}" x2="{x(window[1]):.1f}" y2="{middle:.1f}"/>{caps}</g>'
    ], True


def _timeline_heading(results: Results, origin: float) -> List[str]:
    """What the picture shows: the headline figures; the context, namespace and date; and, when
    the episodes ran on the tests' fake cluster, that this is a simulation."""
    figures = ", ".join(
        f"{label} {figure_text(finite_number(results.get(key)), key)}"
        for label, key in (
            ("all ready", "batch_to_all_ready_seconds"),
            ("all rewards", "batch_to_all_rewards_seconds"),
            ("pod->ready p50", "pod_to_ready_p50_seconds"),
        )
    )
    when = datetime.datetime.fromtimestamp(origin, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    runtimes = results.get("container_runtimes") or []
    lines = [
        f"{results['episodes']} episodes, parallelism {results['parallelism']}, "
        f"runtime {results['runtime'] or '(none)'}: {figures}",
        f"context {results.get('context') or '-'}, namespace {results.get('namespace') or '-'}, "
        f"first Job created {when}" + (f", container runtime {', '.join(map(str, runtimes))}" if runtimes else ""),
    ]
    if SIMULATED_RUNTIME in runtimes:
        lines.append("SIMULATION: the tests' fake cluster ran these episodes on one machine; no real cluster")
    return lines


def render_timeline_svg(results: Results) -> str:
    """One row per episode, grouped by node, each phase on a shared seconds axis from the first
    Job's creation: a bar, or a marker where it is shorter than its clocks can tell; each round's
    Job marked. Plain SVG, so any browser shows it."""
    rows = sorted(
        results["pods"], key=lambda row: (row.get("node") or "", row.get("round", 1), row["created_at"], row["pod"])
    )
    origin = min(row["batch_start"] for row in rows)
    ends = [  # a whole-second end may lie up to its second later: its marker's whisker shows that
        end + (_stamp_resolution(row, step[4]) if _stamp_resolution(row, step[4]) >= 1 else 0)
        for row in rows
        for step in TIMELINE_BARS + TIMELINE_DETAIL_BARS
        if (end := json_number(row.get(step[4]))) is not None
    ]
    span = max(max(ends, default=origin) - origin, 1.0)
    scale = TIMELINE_PLOT_WIDTH / span
    nodes = sorted({row.get("node") or "(unknown)" for row in rows})
    rounds = sorted({(row.get("round", 1), row["batch_start"]) for row in rows})
    heading = _timeline_heading(results, origin)
    drawn: List[str] = []
    markers = False
    strips = set()
    y = 0.0  # rows are placed from 0, then moved under the heading and the legend
    for node in nodes:
        y += 18
        drawn.append(f'<text x="10" y="{y - 4:.0f}" font-weight="bold">node {_xml(node)}</text>')
        for row in (r for r in rows if (r.get("node") or "(unknown)") == node):
            drawn.append(f'<text x="10" y="{y + 12:.0f}">{_xml(row["pod"])}</text>')
            marks: List[str] = []  # drawn over the row's bars
            finer = [  # each bar's end, where its stamp is finer than a second
                json_number(row.get(end_key)) if _stamp_resolution(row, end_key) < 1 else None
                for *_, end_key in TIMELINE_BARS
            ]
            for index, step in enumerate(TIMELINE_BARS):
                # the first finer stamp after this step's end: its end came before it
                later = next((stamp for stamp in finer[index + 1 :] if stamp is not None), None)
                parts, marked = _timeline_step(row, step, y + 2, TIMELINE_ROW_HEIGHT - 4, origin, scale, later)
                (marks if marked else drawn).extend(parts)
            for name, meaning, colour, start_keys, end_key in TIMELINE_DETAIL_BARS:
                start_key = next((key for key in start_keys if row.get(key) is not None), start_keys[-1])
                step = (name, meaning, colour, start_key, end_key)
                parts, marked = _timeline_step(row, step, y + TIMELINE_ROW_HEIGHT - 4, 3, origin, scale, None)
                (marks if marked else drawn).extend(parts)
                strips.update([name] if parts else [])
            drawn += marks
            markers = markers or bool(marks)
            y += TIMELINE_ROW_HEIGHT
        y += 4
    legend = [(name, meaning, colour, "bar") for name, meaning, colour, _, _ in TIMELINE_BARS]
    legend += [
        (name, meaning, colour, "strip") for name, meaning, colour, _, _ in TIMELINE_DETAIL_BARS if name in strips
    ]
    if markers:
        legend.append(
            ("tick and whisker", "a phase shorter than its clocks can tell, and where it lies", "#444", "mark")
        )
    if len(rounds) > 1:
        legend.append(("round K", "that round's Job created (dashed)", "#888", "round"))
    legend_top = 14 + 18 * len(heading)
    top = legend_top + 16 * ((len(legend) + 1) // 2) + (22 if len(rounds) > 1 else 8)
    height = top + y + 60
    width = TIMELINE_LABEL_WIDTH + TIMELINE_PLOT_WIDTH + 30
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
        'font-family="sans-serif" font-size="11">',
        f"<title>{_xml(heading[0])}</title>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{_xml(heading[0])}</text>',
    ]
    for index, line in enumerate(heading[1:], 1):
        style = ' fill="#b00020" font-weight="bold"' if line.startswith("SIMULATION") else ""
        parts.append(f'<text x="10" y="{20 + 18 * index}" font-size="12"{style}>{_xml(line)}</text>')
    for index, (name, meaning, colour, kind) in enumerate(legend):
        lx, ly = 10 + (index % 2) * 505, legend_top + (index // 2) * 16
        if kind == "bar":
            parts.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{colour}"/>')
        elif kind == "strip":
            parts.append(f'<rect x="{lx}" y="{ly + 8}" width="12" height="4" fill="{colour}"/>')
        else:
            dash = ' stroke-dasharray="3,2"' if kind == "round" else ""
            parts.append(
                f'<line x1="{lx + 6}" y1="{ly}" x2="{lx + 6}" y2="{ly + 12}" stroke="{colour}" stroke-width="2"{dash}/>'
            )
            if kind == "mark":
                parts.append(f'<line x1="{lx}" y1="{ly + 6}" x2="{lx + 12}" y2="{ly + 6}" stroke="{colour}"/>')
        parts.append(f'<text x="{lx + 16}" y="{ly + 10}">{_xml(name)}: {_xml(meaning)}</text>')
    parts.append(f'<g transform="translate(0,{top:.0f})">')
    axis_y = y + 10
    if len(rounds) > 1:
        for number, started in rounds:
            rx = TIMELINE_LABEL_WIDTH + (started - origin) * scale
            parts.append(
                f'<line class="round" x1="{rx:.1f}" y1="-6" x2="{rx:.1f}" y2="{axis_y:.0f}" stroke="#888" '
                'stroke-dasharray="3,2"/>'
            )
            parts.append(f'<text x="{rx + 3:.1f}" y="-8" fill="#555">round {number}</text>')
    parts += drawn
    parts.append(
        f'<line x1="{TIMELINE_LABEL_WIDTH}" y1="{axis_y:.0f}" x2="{TIMELINE_LABEL_WIDTH + TIMELINE_PLOT_WIDTH}" '
        f'y2="{axis_y:.0f}" stroke="black"/>'
    )
    interval = _axis_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        tx = TIMELINE_LABEL_WIDTH + tick * scale
        parts.append(f'<line x1="{tx:.1f}" y1="{axis_y:.0f}" x2="{tx:.1f}" y2="{axis_y + 5:.0f}" stroke="black"/>')
        parts.append(f'<text x="{tx:.1f}" y="{axis_y + 18:.0f}" text-anchor="middle">{tick:g}</text>')
        tick += interval
    parts.append(
        f'<text x="{TIMELINE_LABEL_WIDTH + TIMELINE_PLOT_WIDTH / 2:.0f}" y="{axis_y + 34:.0f}" text-anchor="middle">'
        "seconds since the Job was created</text>"
    )
    parts += ["</g>", "</svg>"]
    return "\n".join(parts) + "\n"


def _axis_step(span: float) -> float:
    """A round tick interval giving at most 12 ticks, whatever the span."""
    for step in (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600):
        if span / step <= 12:
            return float(step)
    return float(math.ceil(span / 12 / 600) * 600)
