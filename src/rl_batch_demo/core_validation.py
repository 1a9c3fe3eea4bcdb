"""Pure core: each episode's validation and the round's figures."""

from __future__ import annotations

import functools
import json
import math
import re
import typing
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .constants import (
    ARTIFACT_DIRECTORY_BYTES,
    ARTIFACTS_PER_EPISODE_LIMIT,
    ARTIFACTS_REFUSED_COUNT_FIELD,
    ARTIFACTS_REFUSED_FIELD,
    BUILTIN_TEST_MODULE,
    CONTAINER_LOG_MAX_SIZE,
    DEFAULT_MAX_ARTIFACT_BYTES,
    EXIT_CLUSTER,
    EXIT_EPISODE,
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    FAILURE_EPISODE,
    FAILURE_INFRASTRUCTURE,
    FIGURE_SOURCES,
    FIGURE_STAMPS,
    INFO_LIMIT,
    INFO_MEMORY_LIMIT,
    JOB_NAME,
    JOB_STOPPED,
    LOG_CROSSCHECK_LIMIT,
    PHASES,
    QUEUE_NAME_LABEL,
    REWARD_LIMIT,
    TERMINATION_MESSAGE_LIMIT,
    TIMESTAMP_SLACK,
)
from .core_basics import (
    difference,
    dig,
    figure_text,
    finite_number,
    is_int,
    job_parallelism,
    json_kind,
    json_memory,
    json_number,
    max_known,
    optional_timestamp,
    parse_timestamp,
    percentile,
    release_and_fingerprint,
    short_repr,
    summarise,
)
from .core_clocks import (
    cache_state_of,
    events_by_pod,
    image_cache_counts,
    image_pull_of,
    sandbox_clocks,
    scheduled_event_time,
)
from .core_cluster import (
    LOST_NODE_RULE,
    _condition_time,
    _container_status,
    _phase_failure,
    artifact_directories,
    artifact_name_problem,
    comparable_events,
    complete_lines,
    container_runtime_name,
    creation_time,
    describe_event_difference,
    episode_attempts,
    episode_failure,
    failed_condition_reason,
    failed_condition_text,
    job_admission_time,
    logged_events,
    lost_node_note,
    message_cut_at_front,
    message_needs_log,
    parse_index_set,
    pod_count_problem,
    pod_counts,
    pod_failure,
    pod_index,
    scan_text,
    termination_message,
    whose_failure,
)
from .errors import DemoError, EpisodeInvalid
from .records import (
    ArtifactEntry,
    AutoParallelism,
    BatchFigures,
    EpisodeFigures,
    EpisodeRow,
    FailedEpisode,
    FirstReward,
    JsonObject,
    KubeletFigures,
    KubeObject,
    LogFigures,
    LostAttempt,
    LostNodes,
    PhaseStats,
    PodLog,
    PodRow,
    PreparedImage,
    Results,
    RewardLine,
    RoundCollected,
    RoundObservation,
    RoundResult,
    RunSettings,
    StoppedEpisode,
    StoppedFigures,
)

# Pure core: validation and figures ############################################
# Every rule an episode must pass, a round's outcome, its rows and figures, results.json. Uses
# the sections above.


def check_pod_set(
    pods: List[KubeObject],
    count: int,
    inspect: str,
    lost: Optional[Mapping[str, List[LostAttempt]]] = None,
    infra_retries: int = 0,
    job: Optional[KubeObject] = None,
) -> None:
    """Name the root cause first (see pod_failure's ranks), then a bare count mismatch. `pods`:
    each episode's last attempt, `lost` the attempts before (episode_attempts); `job` the Job."""
    lost = lost or {}
    broken = [
        (episode_failure(pod, lost.get(pod["metadata"]["name"], []), infra_retries, job), pod["metadata"]["name"])
        for pod in pods
    ]
    (_, rule), name = min(broken, key=lambda entry: entry[0][0], default=((3, ""), ""))  # the first of the lowest rank
    if rule:
        raise EpisodeInvalid(name, rule, inspect)
    problem = pod_count_problem(pods, count, inspect, sum(len(attempts) for attempts in lost.values()))
    if problem is not None:
        raise problem


def episode_events(
    pod_name: str, log: Optional[PodLog], log_error: Optional[str], message_text: str, crosscheck: bool, inspect: str
) -> Tuple[List[JsonObject], List[str]]:
    """The episode's events from the log and the termination message, which must agree, and
    notes on how they were read when it was not plainly.

    A message the kubelet may have cut at the front counts by its complete lines alone, which
    must then end the log's events. A log that lacks the message's first events looks rotated
    (`kubectl logs` returns only the kubelet's current file), and the message's events count, only
    when it still shows the message's later events or is as large as the kubelet rotates at
    (CONTAINER_LOG_MAX_SIZE); else the two disagree. Events are compared by their canonical JSON
    (comparable_events): `true`, `1` and `1.0` differ."""
    invalid = functools.partial(EpisodeInvalid, pod_name, inspect=inspect)  # the rule this episode breaks
    notes: List[str] = []
    cut = bool(message_text.strip()) and message_cut_at_front(message_text)
    if cut:
        message_text = complete_lines(message_text)
        notes.append(
            f"its termination message was cut at the front (the kubelet keeps its last {TERMINATION_MESSAGE_LIMIT:,} "
            "bytes): its first line was set aside"
        )
    message = scan_text(message_text) if message_text.strip() else None
    if message is not None and message.error:
        raise invalid(f"its termination message has a bad event: {message.error}")
    message_events = logged_events(message) if message is not None else None
    if log is None:
        if crosscheck or message_events is None or cut:
            raise invalid(f"its log could not be read ({log_error})")
        return message_events, notes
    if log.error:
        raise invalid(f"its log has a bad event: {log.error}")
    log_events = logged_events(log)
    rotation = (
        "the kubelet rotates a container's log file at 10 MiB by default and `kubectl logs` returns only the "
        "current file"
    )
    if message is None:
        if log.counts.get("reward") and not log.counts.get("ready"):
            raise invalid(
                f"its log has a reward event but no ready event before it, and no termination message: the log looks "
                f"rotated ({rotation}); keep the episode's output smaller, or its events in the termination message"
            )
        return log_events, notes
    in_log, in_message = comparable_events(log_events), comparable_events(message_events or [])
    others = (log.counts.get("other", 0), message.counts.get("other", 0))
    if cut and in_log[len(in_log) - len(in_message) :] == in_message:
        return log_events, notes  # the message's complete lines end the log's events
    if not cut and in_log == in_message and others[0] == others[1]:
        return log_events, notes
    lacks_ready = not log.counts.get("ready") and message.counts.get("ready")
    # Rotation leaves the current file, which holds the message's later events (a worker prints
    # its reward last), or is itself as large as the kubelet rotates at: a log with neither, an
    # empty one above all, is one that disagrees with its message, not one rotated away.
    rotated = bool(in_log) or log.saved_bytes + log.dropped_bytes >= CONTAINER_LOG_MAX_SIZE
    if not cut and lacks_ready and rotated and in_message[len(in_message) - len(in_log) :] == in_log:
        lost = len(in_message) - len(in_log)
        notes.append(
            f"its log lacks the first {lost} of the termination message's events, its ready event among them, and "
            f"looks rotated ({rotation}): the termination message's events were used"
        )
        return message_events or [], notes
    difference = describe_event_difference(log_events, message_events or [])
    if in_log == in_message:
        difference = f"the log has {others[0]} other events, the termination message {others[1]}"
    if cut:
        difference += "; the termination message was cut at the front, and its complete lines do not end the log"
    elif lacks_ready and not in_log:
        difference += (
            f" and the log, {log.saved_bytes + log.dropped_bytes:,} bytes, is too small to have been rotated (the "
            f"kubelet rotates a container's log only past its containerLogMaxSize, {CONTAINER_LOG_MAX_SIZE:,} bytes by "
            "default)"
        )
    raise invalid(f"its log and its termination message report different events ({difference})")


def validate_episode(
    pod: KubeObject,
    events: List[JsonObject],
    job_created_at: float,
    sighting: Optional[Dict[str, float]],
    inspect: str,
    builtin_worker: bool = True,
    pod_events: Optional[List[KubeObject]] = None,
    batch_start: Optional[float] = None,
) -> EpisodeRow:
    """Check one episode against every rule and return its row of figures.

    A custom worker (--worker) is held to every rule but the built-in task's own: its reward
    is any finite number, and no baseline or test exit is required. `pod_events` are the
    cluster's events about this pod (Scheduled, Pulled), from the listing already read.
    `batch_start`: where the batch figures start, the Job's admission when a queue held it (its
    creation by default)."""
    batch_start = job_created_at if batch_start is None else batch_start
    name = pod["metadata"]["name"]
    invalid = functools.partial(EpisodeInvalid, name, inspect=inspect)  # the rule this episode breaks
    status = pod.get("status", {})
    container = _container_status(pod)
    terminated = container.get("state", {}).get("terminated") or {}
    if status.get("phase") != "Succeeded":
        raise invalid(_phase_failure(pod))
    if container.get("restartCount", 0) != 0:
        raise invalid(f"the container restarted {short_repr(container['restartCount'])} times")
    if not is_int(terminated.get("exitCode"), 0):
        raise invalid(f"the container exit code is {short_repr(terminated.get('exitCode'))}, not 0")
    ready = [event for event in events if event["event"] == "ready"]
    reward = [event for event in events if event["event"] == "reward"]
    if len(ready) != 1 or len(reward) != 1:
        raise invalid(f"expected one ready and one reward event, found {len(ready)} ready and {len(reward)} reward")
    ready_event, reward_event = ready[0], reward[0]
    if ready_event.get("episode_id") != name or reward_event.get("episode_id") != name:
        raise invalid(
            f"its events carry episode_id {short_repr(ready_event.get('episode_id'))} / "
            f"{short_repr(reward_event.get('episode_id'))}, not the pod name"
        )
    custom_reward = finite_number(reward_event.get("reward"))
    if not builtin_worker and (custom_reward is None or abs(custom_reward) > REWARD_LIMIT):
        raise invalid(
            f"its reward {short_repr(reward_event.get('reward'))} is not a finite number within +-{REWARD_LIMIT:g}"
        )
    if builtin_worker and not (is_int(reward_event.get("reward"), 1) and is_int(reward_event.get("tests_exit"), 0)):
        raise invalid(
            f"reward {short_repr(reward_event.get('reward'))} with tests exit "
            f"{short_repr(reward_event.get('tests_exit'))}; the fixed code must pass its tests "
            "(reward the integer 1, tests exit the integer 0)"
        )
    baseline_exit = reward_event.get("baseline_exit")
    if builtin_worker and (not is_int(baseline_exit) or baseline_exit == 0):
        raise invalid(
            f"the unfixed baseline's tests exit is {short_repr(baseline_exit)}; it must fail (a non-zero integer)"
        )
    modules = reward_event.get("modules")
    test_module = modules.get("test_shipping") if isinstance(modules, dict) else None
    if builtin_worker and test_module != BUILTIN_TEST_MODULE:
        raise invalid(
            f"its reward event does not show the built-in tests run from the runner's own copy (modules.test_shipping "
            f"is {short_repr(test_module)}, not origin {BUILTIN_TEST_MODULE['origin']!r} with sha256 "
            f"{BUILTIN_TEST_MODULE['sha256'][:12]}...)"
        )
    created_at = parse_timestamp(pod["metadata"]["creationTimestamp"])
    ready_at = float(ready_event["at"])
    reward_at = float(reward_event["at"])
    # Whole-second creationTimestamps, possibly of two API-server replicas: each a second of slack.
    if not (job_created_at - TIMESTAMP_SLACK <= created_at and created_at - TIMESTAMP_SLACK <= ready_at <= reward_at):
        raise invalid(
            "timestamps out of order (Job creation <= pod creation <= ready <= reward, the first two whole seconds "
            f"and 1 s apart at most, fails: {job_created_at:.3f}, {created_at:.3f}, {ready_at:.3f}, "
            f"{reward_at:.3f}); check clock synchronisation between the API server and the nodes"
        )
    scheduled_at = _condition_time(pod, "PodScheduled")
    started_at = optional_timestamp(terminated.get("startedAt"))
    finished_at = optional_timestamp(terminated.get("finishedAt"))
    # startedAt and finishedAt are the node's container runtime's, truncated to the second.
    if finished_at is not None and reward_at > finished_at + TIMESTAMP_SLACK:
        raise invalid(
            f"its reward ({reward_at:.3f}) is later than the container's finish ({finished_at:.0f}, the node's "
            "container runtime's stamp); the clock the worker reads runs ahead of its node's: check the clock "
            "synchronisation of the node and, for a VM sandbox, of its guest"
        )
    if started_at is not None and ready_at < started_at - TIMESTAMP_SLACK:
        raise invalid(
            f"its ready event ({ready_at:.3f}) is earlier than its container's start ({started_at:.0f}, the node's "
            "container runtime's stamp); the clock the worker reads runs behind its node's: check the clock "
            "synchronisation of the node and, for a VM sandbox, of its guest"
        )
    clocks = sandbox_clocks(name, ready_event, created_at, ready_at, inspect, finished_at)
    imports_done_at = clocks.imports_done_at
    event_scheduled_at = scheduled_event_time(pod_events or [], pod, created_at, finished_at)
    scheduled_source = "event" if event_scheduled_at is not None else ("condition" if scheduled_at else None)
    scheduled_at = event_scheduled_at if event_scheduled_at is not None else scheduled_at
    sandbox = clocks.kernel_booted_at
    first_seen_at = sighting.get("first_seen_at") if sighting else None
    stamps = {
        "created_at": created_at,
        "scheduled_at": scheduled_at,
        "container_started_at": started_at,
        "kernel_booted_at": sandbox,
        "process_started_at": clocks.process_started_at,
        "first_statement_at": clocks.first_statement_at,
        "imports_done_at": imports_done_at,
        "ready_at": ready_at,
        "reward_at": reward_at,
        "finished_at": finished_at,
        "observed_first_seen_at": first_seen_at,
    }
    # the row's optional keys (artifacts, info's pod_reward, failure_kind) are set later, by their
    # owners; mypy's extra checks would have every one of them named beside a ** of figures
    return EpisodeRow(
        **episode_figures(stamps),  # type: ignore[typeddict-item]
        pod=name,
        node=pod.get("spec", {}).get("nodeName"),
        image_id=container.get("imageID"),
        container_runtime=container_runtime_name(container),
        reward=reward_event["reward"],
        batch_to_ready_seconds=ready_at - batch_start,
        batch_to_reward_seconds=reward_at - batch_start,
        overhead=pod.get("spec", {}).get("overhead"),
        created_at=created_at,
        scheduled_at=scheduled_at,
        container_started_at=started_at,
        ready_at=ready_at,
        reward_at=reward_at,
        finished_at=finished_at,
        observed_first_seen_at=first_seen_at,
        observed_running_at=sighting.get("Running") if sighting else None,
        observed_succeeded_at=sighting.get("Succeeded") if sighting else None,
        batch_start=batch_start,
        round=1,
        job=JOB_NAME,
        index=0,
        task_id=None,
        info=reward_info(reward_event),
        scheduled_source=scheduled_source,
        process_started_at=clocks.process_started_at,
        first_statement_at=clocks.first_statement_at,
        kernel_booted_at=sandbox,
        kernel=clocks.kernel,
        clock_note=clocks.note,
        image_pull=image_pull_of(pod_events or [], pod),
        log_notes=[],
        attempts=1,
        lost_attempts=[],
        retry_seconds=0.0,
    )


def episode_figures(stamps: Mapping[str, Optional[float]]) -> EpisodeFigures:
    """A pod's own figures from its stamps: each the end stamp less the start stamp that
    FIGURE_STAMPS names for it (None where either is unknown), the table the summary, the verdict
    and the guide's table read each figure's clocks from, so a figure's definition is one row."""
    figures = {
        figure: difference(stamps[end], stamps[start])
        for figure, (start, end, _) in FIGURE_STAMPS.items()
        if figure in EpisodeFigures.__annotations__
    }
    return typing.cast(EpisodeFigures, figures)  # every key of EpisodeFigures: tests/test_units.py


def reward_info(reward_event: JsonObject) -> JsonObject:
    """The reward event's other fields (the episode's `info`), or a note when they are too large."""
    info = {k: v for k, v in reward_event.items() if k not in ("event", "at", "episode_id", "reward", "artifacts")}
    size = len(json.dumps(info, sort_keys=True, allow_nan=False))
    if size > INFO_LIMIT:
        return {"info_dropped": f"{size} bytes of JSON, over the {INFO_LIMIT}-byte limit of rewards.jsonl"}
    memory = json_memory(info)  # every row keeps its info until rewards.jsonl is written
    if memory > INFO_MEMORY_LIMIT:
        return {"info_dropped": f"{memory} bytes in memory once parsed, over the {INFO_MEMORY_LIMIT}-byte limit"}
    return info


ARTIFACT_ROTATION_HINT = (
    "frames are missing from its log: the kubelet rotates a container's log file at 10 MiB by default and `kubectl "
    "logs` returns only the current file, so the likely cause is rotation; keep the episode's output and artifacts "
    "smaller"
)


def artifact_manifest(value: Any, budget: int) -> List[ArtifactEntry]:
    """The reward event's `artifacts`, checked (ValueError says which rule it breaks): a list of
    {name, bytes, sha256}, each name safe (artifact_name_problem, beside the names before it),
    sorted by name and each once, at most ARTIFACTS_PER_EPISODE_LIMIT, their bytes and the
    directories their names make (ARTIFACT_DIRECTORY_BYTES each) within `budget`
    (--max-artifact-bytes), as ArtifactSink counts them while saving."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"its reward event's artifacts is {json_kind(value)}, not a list")
    if len(value) > ARTIFACTS_PER_EPISODE_LIMIT:
        raise ValueError(f"its reward event lists {len(value)} artifacts, more than {ARTIFACTS_PER_EPISODE_LIMIT}")
    entries: List[ArtifactEntry] = []
    for item in value:
        name = item.get("name") if isinstance(item, dict) else None
        size = item.get("bytes") if isinstance(item, dict) else None
        digest = item.get("sha256") if isinstance(item, dict) else None
        if not (isinstance(name, str) and type(size) is int and size >= 0 and isinstance(digest, str)):
            raise ValueError(
                f"its reward event lists an artifact {short_repr(item)} that is not {{name, bytes, sha256}}"
            )
        problem = artifact_name_problem(name, [entry["name"] for entry in entries])
        if problem:
            raise ValueError(f"its reward event lists an artifact {short_repr(name)} whose name {problem}")
        if not re.fullmatch("[0-9a-f]{64}", digest):
            raise ValueError(
                f"its artifact {short_repr(name)} has a sha256 {short_repr(digest)} that is not 64 hex digits"
            )
        entries.append({"name": name, "bytes": size, "sha256": digest})
    names = [entry["name"] for entry in entries]
    if names != sorted(set(names)):
        raise ValueError("its reward event's artifacts are not sorted by name, each listed once")
    directories = artifact_directories(names)
    total = sum(entry["bytes"] for entry in entries) + len(directories) * ARTIFACT_DIRECTORY_BYTES
    if total > budget:
        made = (
            f" ({len(directories)} directories among them, {ARTIFACT_DIRECTORY_BYTES:,} bytes each)"
            if directories
            else ""
        )
        raise ValueError(
            f"its artifacts take {total:,} bytes{made}, over the --max-artifact-bytes budget of {budget:,} bytes per "
            "episode"
        )
    return entries


def refused_artifacts_text(refused: Any, count: Any = None) -> str:
    """The launcher's `artifacts_refused` ([{name, why}], its first 16; `count`, its
    artifacts_refused_count: how many there were in all) as a bounded, escaped sentence."""
    items = refused if isinstance(refused, list) else [refused]
    named = [
        f"{short_repr(item.get('name'))} ({short_repr(item.get('why'), 160)})"
        if isinstance(item, dict)
        else short_repr(item)
        for item in items[:5]
    ]
    total = count if type(count) is int and count > len(items) else len(items)
    more = f" and {total - len(named):,} more" if total > len(named) else ""
    return "; ".join(named) + more


def episode_artifacts(
    pod_name: str,
    events: List[JsonObject],
    log: Optional[PodLog],
    log_error: Optional[str],
    budget: int,
    inspect: str,
    received: bool = True,
) -> List[ArtifactEntry]:
    """A validated episode's artifacts: its reward event's manifest, and (`received`) each of them
    saved from its log's frames, whole, with the bytes and sha256 the manifest lists, and nothing
    else. Else the rule it breaks (EpisodeInvalid)."""
    invalid = functools.partial(EpisodeInvalid, pod_name, inspect=inspect)
    reward = next(event for event in events if event["event"] == "reward")
    try:
        declared = artifact_manifest(reward.get("artifacts"), budget)
    except ValueError as error:
        raise invalid(str(error)) from None
    refused = reward.get(ARTIFACTS_REFUSED_FIELD)
    if refused:  # the launcher could not send what the worker left (sandbox/launcher.py): never silence
        count = reward.get(ARTIFACTS_REFUSED_COUNT_FIELD)
        raise invalid(f"its artifacts could not all be sent: {refused_artifacts_text(refused, count)}")
    if not received:
        return declared
    if log is None:
        if declared:
            raise invalid(f"its artifacts could not be read: its log could not be read ({log_error})")
        return []
    if log.artifact_error:
        hint = f"; {ARTIFACT_ROTATION_HINT}" if log.artifact_frames_missing else ""
        raise invalid(f"its artifacts did not arrive whole: {log.artifact_error}{hint}")
    for entry in declared:
        got = log.artifacts.get(entry["name"])
        if got is None:
            raise invalid(
                f"its artifact {short_repr(entry['name'])} never arrived: no frame of it is in its log; "
                f"{ARTIFACT_ROTATION_HINT}"
            )
        if got != entry:
            raise invalid(
                f"its artifact {short_repr(entry['name'])} arrived as {got['bytes']:,} bytes with sha256 "
                f"{got['sha256'][:12]}..., but its reward event lists {entry['bytes']:,} bytes with sha256 "
                f"{entry['sha256'][:12]}..."
            )
    extra = sorted(set(log.artifacts) - {entry["name"] for entry in declared})
    if extra:
        raise invalid(f"it sent an artifact {short_repr(extra[0])} that its reward event does not list")
    return declared


def reward_line(row: EpisodeRow, known_at: float) -> RewardLine:
    """A validated episode's line of rewards.jsonl: its reward and the reward event's other fields."""
    return {
        "round": row["round"],
        "index": row["index"],
        "task_id": row["task_id"],
        "pod": row["pod"],
        "reward": row["reward"],
        "info": row.get("info", {}),
        "failure": None,
        "failure_kind": None,
        "known_at": known_at,
        "retracted": False,
        "attempts": row["attempts"],
        "lost_attempts": row["lost_attempts"],
        "artifacts": row.get("artifacts", []),
        **({"pod_reward": row["pod_reward"]} if "pod_reward" in row else {}),  # type: ignore[typeddict-item]
    }


def graded_reward(settings: RunSettings, line: RewardLine) -> float:
    """A grader's reward for a validated episode's line (settings.grade: grade= or --grader), from
    its whole task (private fields too; {} without --tasks): a finite number within a reward's
    limit, never a boolean; anything else, or an exception, fails the run in one sentence."""
    assert settings.grade is not None
    tasks, index = settings.tasks, line["index"]
    task = dict(tasks[index]) if tasks is not None and index is not None and 0 <= index < len(tasks) else {}
    name = settings.grader_name or "the grader"
    where = f"episode {line['pod']} (task {short_repr(line['task_id'])})"
    try:
        value = settings.grade(task, dict(line))  # type: ignore[arg-type]
    except Exception as error:
        message = f"{name} raised {short_repr(error, 200)} grading {where}; fix the grader"
        raise DemoError(message, EXIT_EPISODE) from None
    number = finite_number(value) if not isinstance(value, bool) else None
    if number is None or abs(number) > REWARD_LIMIT:
        raise DemoError(
            f"{name} returned {short_repr(value)} for {where}, not a finite number of at most {REWARD_LIMIT:g} in "
            "size; fix the grader",
            EXIT_EPISODE,
        )
    return value if isinstance(value, int) else number


def failure_line(
    round_number: int,
    index: Optional[int],
    task_id: Any,
    pod: str,
    failure: str,
    known_at: float,
    lost: Sequence[LostAttempt] = (),
    kind: str = FAILURE_EPISODE,
    reward: Optional[float] = None,
) -> RewardLine:
    """A failed episode's line: info null, its failure and whose it is (`kind`), and reward null,
    or `reward` (--failed-episode-reward R) for a failure of its own doing, which then stands.
    `lost`: the episode's pods lost to the infrastructure before this one (--infra-retries)."""
    return {
        "round": round_number,
        "index": index,
        "task_id": task_id,
        "pod": pod,
        "reward": reward if kind == FAILURE_EPISODE else None,
        "info": None,
        "failure": failure,
        "failure_kind": kind,
        "known_at": known_at,
        "retracted": False,
        "attempts": len(lost) + 1,
        "lost_attempts": list(lost),
        "artifacts": None,
    }


def retraction_of(line: RewardLine, failure: str, known_at: float, kind: str = FAILURE_EPISODE) -> RewardLine:
    """The line that withdraws a pod's earlier reward line: a later check rejected the episode
    (`kind`: whose doing that was); its reward is null."""
    retraction = failure_line(
        line["round"], line["index"], line["task_id"], line["pod"], failure, known_at, line["lost_attempts"], kind
    )
    retraction["retracted"] = True
    return retraction


def stands_as_reward(line: Optional[RewardLine]) -> bool:
    """Whether a pod's last line is a reward that stands (a reader's rule: the last line of a pod
    is its verdict): a validated episode's, or an episode failure scored by --failed-episode-reward."""
    return line is not None and line["reward"] is not None and not line["retracted"]


def failed_episode_lines(entry: FailedEpisode, previous: Optional[RewardLine], known_at: float) -> List[RewardLine]:
    """What rewards.jsonl needs for a failed episode, given the pod's last line so far: its failure
    line when it has none; when a reward line of it stands, that line's retraction, then (scored by
    --failed-episode-reward) the scored failure line; nothing when its verdict is written already."""
    kind = entry.get("failure_kind", FAILURE_EPISODE)
    verdict = failure_line(
        entry["round"],
        entry["index"],
        entry["task_id"],
        entry["pod"],
        entry["cause"],
        known_at,
        entry["lost_attempts"],
        kind,
        entry.get("reward"),
    )
    if previous is None:
        return [verdict]
    if not stands_as_reward(previous):  # its failure is written: only a score it lacks is new
        return [verdict] if verdict["reward"] is not None else []
    if previous["failure"] is not None and previous["reward"] == verdict["reward"]:
        return []  # its scored failure, written as the pod ended
    retraction = retraction_of(previous, entry["cause"], known_at, kind)
    return [retraction, verdict] if verdict["reward"] is not None else [retraction]


def _index_order(line: RewardLine) -> Tuple[int, int, str]:
    return line["round"], line["index"] if line["index"] is not None else -1, line["pod"]


def reconciling_lines(
    last: Mapping[str, RewardLine], rows: Sequence[EpisodeRow], failed: Sequence[FailedEpisode], known_at: float
) -> List[RewardLine]:
    """The lines that make rewards.jsonl agree with an analysed round, given each pod's last line
    so far (`last`, by pod): a reward line for each validated episode without one, a failure line
    for each failed episode without a line, and a retraction of each reward line the analysis did
    not accept (its episode failed, or its pod is not among the Job's pods), in index order. With
    no line written yet, these are the round's lines as a whole file would hold them."""
    # A reward only for a pod without a line: after its failure line, none may stand (a failure
    # found early is final; analyse_round fails it with that cause).
    lines = [reward_line(row, known_at) for row in rows if row["pod"] not in last]
    for entry in failed:
        lines += failed_episode_lines(entry, last.get(entry["pod"]), known_at)
    analysed = {row["pod"] for row in rows} | {entry["pod"] for entry in failed}
    lines += [
        retraction_of(line, "its pod is not one of the Job's pods once the round was analysed", known_at)
        for pod, line in last.items()
        if pod not in analysed and stands_as_reward(line)
    ]
    return sorted(lines, key=_index_order)


def retracting_lines(
    last: Mapping[str, RewardLine], failure: str, known_at: float, kinds: Optional[Mapping[str, str]] = None
) -> List[RewardLine]:
    """When a round fails (or the run stops) before its analysis accepted it: a retraction of each
    of its reward lines, in the order they were written, with `failure` as the reason and each
    pod's failure kind (`kinds`, by pod: its pod as last watched; the episode's when unknown)."""
    return [
        retraction_of(line, failure, known_at, (kinds or {}).get(line["pod"], FAILURE_EPISODE))
        for line in last.values()
        if stands_as_reward(line)
    ]


def batch_figures(rows: List[EpisodeRow], failed: Sequence[FailedEpisode] = ()) -> BatchFigures:
    """The guide's whole-batch figures for one set of episodes, with the rewards' mean, min and max
    beside the guide's reward_sum. `failed`: the failed episodes the round accepted, each left out
    of every figure (masked: --max-failed-episodes) or, scored (--failed-episode-reward R), counted
    in the reward figures with R and in no timing figure. `rows` is never empty."""
    startup = [row["pod_to_ready_seconds"] for row in rows]
    scored = [entry["reward"] for entry in failed if entry.get("reward") is not None]
    rewards = [row["reward"] for row in rows] + [reward for reward in scored if reward is not None]
    masked = len(failed) - len(scored)

    def latest(ends: List[Optional[float]]) -> Optional[float]:  # the cluster's stamps: every episode's, else unknown
        known = [end for end in ends if end is not None]
        return max(known) if len(known) == len(ends) else None

    return {
        "episodes": len(rows) + len(failed),
        "successful_episodes": len(rows),
        "masked_episodes": masked,
        "reward_sum": sum(rewards),
        "batch_to_all_ready_seconds": max(row["batch_to_ready_seconds"] for row in rows),
        "batch_to_all_rewards_seconds": max(row["batch_to_reward_seconds"] for row in rows),
        "batch_to_all_started_seconds": latest([difference(r["container_started_at"], r["batch_start"]) for r in rows]),
        "batch_to_all_finished_seconds": latest([difference(r["finished_at"], r["batch_start"]) for r in rows]),
        "pod_to_ready_p50_seconds": percentile(startup, 0.5),
        "pod_to_ready_p95_seconds": percentile(startup, 0.95),
        "pod_to_ready_max_seconds": max(startup),
        "reward_mean": math.fsum(rewards) / len(rewards),  # |r| <= 1e15: no overflow
        "reward_min": min(rewards),
        "reward_max": max(rewards),
        "lost_attempts": sum(len(row["lost_attempts"]) for row in rows),
        "retry_seconds_sum": math.fsum(row["retry_seconds"] for row in rows),
        "retry_seconds_max": max(row["retry_seconds"] for row in rows),
    }


def figure_notes(figures: BatchFigures, rows: Sequence[PodRow], max_failed_episodes: int, scored: int = 0) -> List[str]:
    """results.json's `notes`, in this tool's words: episodes lost to the infrastructure and masked
    under --max-failed-episodes (the reward figures leave them out), episode failures scored under
    --failed-episode-reward, and episodes whose sandbox clocks disagree."""
    notes = []
    masked = figures["masked_episodes"]
    if masked:
        notes.append(
            f"{masked} of {figures['episodes']} episodes masked: the infrastructure lost them (failure_kind "
            f"{FAILURE_INFRASTRUCTURE}) and they were set aside under --max-failed-episodes {max_failed_episodes}, "
            f"so reward_sum ({figures['reward_sum']!r}) and reward_mean ({figures['reward_mean']!r}) leave them out; "
            "failed_episodes names each masked episode, and rewards.jsonl gives it reward null"
        )
    if scored:
        notes.append(
            f"{scored} of {figures['episodes']} episodes failed by their own doing (failure_kind {FAILURE_EPISODE}) "
            "and were scored as --failed-episode-reward: reward_sum, reward_mean, reward_min and reward_max count "
            "that reward for each, and no timing figure counts them; failed_episodes names each with its cause"
        )
    if figures["lost_attempts"]:
        retried = sum(1 for row in rows if row["lost_attempts"])
        notes.append(
            f"{figures['lost_attempts']} pod(s) lost to the infrastructure were replaced (--infra-retries), in "
            f"{retried} of {figures['successful_episodes']} validated episodes: the retries added "
            f"{figures['retry_seconds_sum']:g} s in all, at most {figures['retry_seconds_max']:g} s to one episode "
            "(first pod created -> last pod created), and the batch figures include them; pods[].lost_attempts names "
            "each lost pod and its cause"
        )
    disagree = [row for row in rows if row["clock_note"]]
    if disagree:
        notes.append(
            f"{len(disagree)} of {len(rows)} episodes' sandbox clocks disagree, so their process start and kernel "
            f"boot are unknown, the rest of each episode standing (pods[].clock_note; {disagree[0]['pod']}: "
            f"{disagree[0]['clock_note']})"
        )
    return notes


def phase_table(rows: List[EpisodeRow]) -> Dict[str, Optional[PhaseStats]]:
    return {phase: summarise(json_number(row.get(phase)) for row in rows) for phase in PHASES}


def node_spread(rows: List[EpisodeRow]) -> Dict[str, int]:
    spread: Dict[str, int] = {}
    for row in rows:
        node = row["node"] or "(unknown)"
        spread[node] = spread.get(node, 0) + 1
    return dict(sorted(spread.items()))


ROUND_COMPLETE = "complete"  # the Job is Complete: validate, then report
ROUND_FAILED = "failed"  # the Job is Failed: validate (to name the episode), then fail
ROUND_DEADLINE = "deadline"  # the Job hit its activeDeadlineSeconds
ROUND_BLOCKED = "blocked"  # the cluster refused to create the Job's pods
ROUND_TIMEOUT = "timeout"  # the client's wait ran out without a Job condition
ROUND_NOT_ADMITTED = "not-admitted"  # the client's wait ran out while the Job was still suspended (queued)
ROUND_FAILED_INDEXES = "failed-indexes"  # Failed (FailedIndexes): every index ran, at most maxFailedIndexes failed
ROUND_STOPPED = "stopped"  # stopped early (--stop-after, a stream left): the episodes that ended are analysed


def classify_round(observation: RoundObservation) -> str:
    """How a round ended, from what the client observed."""
    if observation.blocked:
        return ROUND_BLOCKED
    if observation.condition is None and observation.queued and observation.admitted_seen_monotonic is None:
        return ROUND_NOT_ADMITTED
    if observation.condition is None:
        return ROUND_TIMEOUT
    if observation.condition == JOB_STOPPED:
        return ROUND_STOPPED
    if observation.condition == "Failed" and failed_condition_reason(observation.job) == "FailedIndexes":
        return ROUND_FAILED_INDEXES  # analysed like a complete round; analyse_round checks the count
    if observation.condition == "Failed":
        return ROUND_DEADLINE if "DeadlineExceeded" in failed_condition_text(observation.job) else ROUND_FAILED
    return ROUND_COMPLETE


def round_stopper(
    outcome: str, observation: RoundObservation, where: str, settings: RunSettings, warning: str, inspect: str
) -> Optional[DemoError]:
    """The error that ends a round before any episode is validated, if its outcome is one."""
    if outcome == ROUND_BLOCKED:
        hint = " (the namespace enforces Pod Security 'restricted')" if "PodSecurity" in observation.blocked else ""
        return DemoError(
            f"Job {where} cannot create its pods: {observation.blocked}{hint}; inspect {inspect}, then run cleanup",
            EXIT_CLUSTER,
        )
    labels = dig(observation.job, "metadata", "labels") or {}
    if outcome == ROUND_NOT_ADMITTED and QUEUE_NAME_LABEL not in labels:
        # Kueue manages a Job only by that label, so one that holds an unlabelled Job is configured
        # with manageJobsWithoutQueueName: true and never admits it (Kueue docs, "Setup
        # manageJobsWithoutQueueName"); a LocalQueue and the label are what it waits for
        return DemoError(
            f"Job {where} was never admitted: it stayed suspended (spec.suspend) for {settings.client_wait_seconds} s "
            f"without a {QUEUE_NAME_LABEL} label; Kueue holds unlabelled Jobs here (manageJobsWithoutQueueName) and "
            "never admits them: pass --queue CLUSTERQUEUE (`kubectl get clusterqueues` lists them) so that the run "
            f"makes its own LocalQueue and labels its Jobs; inspect {inspect}, then run cleanup",
            EXIT_TIMEOUT,
        )
    if outcome == ROUND_NOT_ADMITTED:
        return DemoError(
            f"Job {where} was never admitted: it stayed suspended (spec.suspend, set by a queue such as Kueue) for "
            f"{settings.client_wait_seconds} s; see why its queue holds it (for Kueue: `kubectl -n "
            f"{where.split('/', 1)[0]} get workloads`), or raise --timeout; inspect {inspect}, then run cleanup",
            EXIT_TIMEOUT,
        )
    lost = lost_node_note(observation.lost_pods, observation.node_states)
    if lost and outcome in (ROUND_TIMEOUT, ROUND_DEADLINE):  # a node stopped answering: say so, and why no retry
        warning = f"{warning}; {lost}: {LOST_NODE_RULE}"
    if outcome == ROUND_TIMEOUT:
        counts = pod_counts(observation.pod_sightings, observation.job)
        return DemoError(
            f"Job {where} did not finish within {settings.client_wait_seconds} s"
            f"{' of its admission' if observation.queued else ''} "
            f"({counts['created']} pods created, {counts['running']} running, {counts['succeeded']} succeeded"
            f"{warning}); inspect {inspect}, then run cleanup",
            EXIT_TIMEOUT,
        )
    if outcome == ROUND_DEADLINE:
        return DemoError(
            f"Job {where} hit its deadline of {settings.deadline_seconds} s "
            f"(activeDeadlineSeconds{warning}); inspect {inspect} for pending or slow pods, then run cleanup",
            EXIT_TIMEOUT,
        )
    return None


def round_inspect_hint(round_dir: Path) -> str:
    return f"{round_dir}/pods.json, events.txt and the episode logs"


def episode_inspect_hint(round_dir: Path, name: str, log: Optional[PodLog], log_error: Optional[str]) -> str:
    """What an episode's failure tells the user to inspect: its <pod>.log only where one was
    saved (the reader writes the file with the pod's first line), else why there is none."""
    if log is not None and (log.lines or log.saved_bytes or log.dropped_bytes):
        return f"{round_dir}/{name}.log and pods.json"
    if log is not None:
        why = f"{name} printed nothing, so no {name}.log was saved"
    elif log_error and log_error != "not read":
        why = f"its log could not be read ({log_error})"
    else:
        why = "its log was not read: its termination message carried its events"
    return f"{round_dir}/pods.json and events.txt ({why})"


def analyse_round(collected: RoundCollected, where: str) -> Tuple[List[EpisodeRow], RoundResult]:
    """A finished round's rows and figures, or the first rule it breaks (EpisodeInvalid).

    Every pod is validated on complete data: its status, its events from the log and the
    termination message (which must agree for small runs), its clocks."""
    inspect = round_inspect_hint(collected.round_dir)
    tolerated = collected.max_failed_episodes  # with K > 0, up to K infrastructure failures are set aside
    scoring = collected.failed_episode_reward is not None  # an episode's own failure is scored, not fatal
    collect = tolerated > 0 or scoring  # failures are gathered, each accepted or not by its kind
    retries = collected.infra_retries
    pods, lost = episode_attempts(collected.pods, collected.count, retries, inspect)
    if not collect and not collected.stopped:  # a stopped round: only the episodes that ended
        check_pod_set(pods, collected.count, inspect, lost, retries, collected.job)
    job_created_at = creation_time(collected.job, "the Job")
    crosscheck = collected.count <= LOG_CROSSCHECK_LIMIT
    observation = collected.observation
    # A queued Job's figures start when it was admitted: its wait in the queue is its own figure.
    admitted_at = job_admission_time(observation.job) if observation.queued else job_created_at
    admitted_seen = observation.admitted_seen_monotonic
    cluster_events = events_by_pod(collected.events)
    rows = []
    failed: List[Tuple[EpisodeInvalid, Optional[int]]] = []
    for position, pod in enumerate(pods):
        name = pod["metadata"]["name"]
        pod_inspect = episode_inspect_hint(
            collected.round_dir, name, collected.logs.get(name), collected.log_errors.get(name)
        )
        index: Optional[int] = None if collected.indexed else position
        try:
            if collected.indexed:
                index = pod_index(pod, collected.count, pod_inspect)
            rule = episode_failure(pod, lost.get(name, []), retries, collected.job)[1] if collect else ""
            rule = collected.provisional_failures.get(name) or rule  # a failure found at the pod's end is final
            if rule:
                raise EpisodeInvalid(name, rule, pod_inspect)
            events, notes = episode_events(
                name,
                collected.logs.get(name),
                collected.log_errors.get(name, "not read"),
                termination_message(pod),
                crosscheck,
                pod_inspect,
            )
            row = validate_episode(
                pod,
                events,
                job_created_at,
                observation.pod_sightings.get(name),
                pod_inspect,
                collected.builtin_worker,
                pod_events=cluster_events.get(name, []),
                batch_start=admitted_at,
            )
            row["artifacts"] = episode_artifacts(
                name,
                events,
                collected.logs.get(name),
                collected.log_errors.get(name, "not read"),
                collected.max_artifact_bytes,
                pod_inspect,
            )
        except (KeyError, TypeError, ValueError) as error:
            shape = EpisodeInvalid(name, f"its pod status or events have an unexpected shape ({error!r})", pod_inspect)
            if not accepted_failure(collected, pod):
                raise refused_failure(collected, shape) from None
            failed.append((shape, index))
            continue
        except EpisodeInvalid as invalid:
            if not accepted_failure(collected, pod):
                raise refused_failure(collected, invalid) from None
            failed.append((invalid, index))
            continue
        row["round"], row["job"], row["log_notes"] = collected.round_number, collected.job_name, notes
        row["index"] = position if index is None else index
        row["task_id"] = task_id_for(collected, row["index"])
        set_attempts(row, lost.get(name, []))
        rows.append(row)
    set_aside = check_failed_episodes(collected, pods, rows, failed, where, inspect, lost)
    if collected.stopped and not rows:
        raise DemoError(
            f"Job {where} was stopped early ({collected.stopped_by}) before any episode ended with a reward; "
            f"inspect {inspect}",
            EXIT_INTERRUPTED,
        )
    if observation.condition not in ("Complete", JOB_STOPPED) and not set_aside:
        raise DemoError(
            f"Job {where} failed ({failed_condition_text(observation.job)}) although every episode validated; "
            f"inspect {inspect}",
            EXIT_EPISODE,
        )
    assert observation.condition_seen_monotonic is not None
    by_name = {str(pod["metadata"]["name"]): pod for pod in pods}
    failed_episodes: List[FailedEpisode] = []
    for failure, index in failed:
        kind = whose_failure(by_name.get(failure.pod))
        failed_episodes.append(
            {
                "pod": failure.pod,
                "index": index,
                "task_id": task_id_for(collected, index),
                "round": collected.round_number,
                "job": collected.job_name,
                "cause": failure.rule,
                "attempts": len(lost.get(failure.pod, [])) + 1,
                "lost_attempts": lost.get(failure.pod, []),
                "failure_kind": kind,
                "reward": collected.failed_episode_reward if kind == FAILURE_EPISODE else None,
            }
        )
    figures = RoundResult(
        **batch_figures(rows, failed_episodes),
        scored_episodes=sum(1 for entry in failed_episodes if entry["reward"] is not None),
        **FirstReward(),  # a measured round's, once its rewards are written (RoundRewards.analysed)
        **stopped_figures(collected),
        failed_episodes=failed_episodes,
        round=collected.round_number,
        job=collected.job_name,
        job_uid=collected.job["metadata"]["uid"],
        client_job_complete_seconds=observation.condition_seen_monotonic - collected.submitted_monotonic,
        client_submitted_at=collected.submitted_wall,
        client_observed_complete_at=observation.condition_seen_wall,
        job_created_at=job_created_at,
        job_admitted_at=admitted_at,
        admission_wait_seconds=difference(admitted_at, job_created_at),
        client_admission_wait_seconds=None if admitted_seen is None else admitted_seen - collected.submitted_monotonic,
        job_complete_at=_condition_time(observation.job, "Complete"),
        job_success_criteria_met_at=_condition_time(observation.job, "SuccessCriteriaMet"),
        **log_figures(collected, pods),
        **LostNodes(),  # named below when a node stopped answering
    )
    if observation.node_states:  # a node stopped answering: its pods were not retried while it did
        figures["lost_nodes"] = dict(sorted(observation.node_states.items()))
    return rows, figures


def stopped_figures(collected: RoundCollected) -> StoppedFigures:
    """A stopped round's episodes that it did not keep: its stopped pods (stopped_pods, in creation
    order: those still running, and those that ended beyond the first K of --stop-after K), then,
    in an Indexed round, each index the Job had not created a pod for yet; {} otherwise."""
    if not collected.stopped:
        return {"stopped_episodes": [], "stopped_by": None}
    where = f"{collected.round_dir}/pods.json"

    def index_of(pod: KubeObject) -> Optional[int]:
        try:
            return pod_index(pod, collected.count, where)
        except EpisodeInvalid:
            return None

    def entry(pod: Optional[str], index: Optional[int], ended: bool) -> StoppedEpisode:
        task_id = task_id_for(collected, index)
        return {"pod": pod, "ended": ended, "index": index, "task_id": task_id,
                "round": collected.round_number, "job": collected.job_name}  # fmt: skip

    def ended(pod: KubeObject) -> bool:  # as stopped_round_pods tells an ended pod: terminal, not being deleted
        return dig(pod, "status", "phase") in ("Succeeded", "Failed") and not dig(pod, "metadata", "deletionTimestamp")

    episodes = [entry(str(pod["metadata"]["name"]), index_of(pod), ended(pod)) for pod in collected.stopped_pods]
    if collected.indexed:  # an index whose pod was never created is stopped too
        seen = {index_of(pod) for pod in [*collected.pods, *collected.stopped_pods]}
        episodes += [entry(None, index, False) for index in range(collected.count) if index not in seen]
    return {"stopped_episodes": episodes, "stopped_by": collected.stopped_by}


def accepted_failure(collected: RoundCollected, pod: KubeObject) -> bool:
    """Whether a round goes on past this failed episode: one the infrastructure lost, under
    --max-failed-episodes (counted in check_failed_episodes), or one of the episode's own doing,
    under --failed-episode-reward (scored). Otherwise it fails the round, as without either flag."""
    if whose_failure(pod) == FAILURE_INFRASTRUCTURE:
        return collected.max_failed_episodes > 0
    return collected.failed_episode_reward is not None


def refused_failure(collected: RoundCollected, invalid: EpisodeInvalid) -> EpisodeInvalid:
    """The error of a failed episode no flag accepts: under --max-failed-episodes, an episode's own
    failure says that only the infrastructure's are set aside, and how to score it instead."""
    if not collected.max_failed_episodes:
        return invalid
    return EpisodeInvalid(
        invalid.pod,
        f"{invalid.rule} (a failure of the episode's own doing: --max-failed-episodes sets aside only failures of "
        "the infrastructure; --failed-episode-reward R scores it as R instead)",
        invalid.inspect,
    )


def set_attempts(row: EpisodeRow, lost: List[LostAttempt]) -> None:
    """A validated episode's attempts: its lost pods, and the time from the first one's creation to
    its own pod's (what the retries added to it)."""
    row["attempts"], row["lost_attempts"] = len(lost) + 1, lost
    row["retry_seconds"] = max(0.0, row["created_at"] - lost[0]["created_at"]) if lost else 0.0


def log_figures(collected: RoundCollected, pods: Optional[List[KubeObject]] = None) -> LogFigures:
    """`pods`: the episodes' last attempts. Only a pod that succeeded counts as one without a
    termination message: its log alone carried its events (the runtime shares no file); a failed
    or lost pod's status is its verdict, and a killed worker leaves no message on any runtime."""
    return {
        "pods_without_termination_message": sum(
            1
            for pod in (collected.pods if pods is None else pods)
            if dig(pod, "status", "phase") == "Succeeded" and not termination_message(pod).strip()
        ),
        "log_bytes_not_saved": sum(log.dropped_bytes for log in collected.logs.values() if log is not None),
    }


def provisional_episode(
    pod: KubeObject,
    count: int,
    indexed: bool,
    job_created_at: float,
    builtin_worker: bool,
    inspect: str,
    max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
) -> Optional[EpisodeRow]:
    """An episode's verdict as soon as the pod watch shows its pod terminated: its row, or the rule
    it breaks (EpisodeInvalid), judged as analyse_round judges it but from the pod's status and its
    termination message alone (the log and the cluster's events are read once the Job has ended).
    None while it cannot be judged: the pod has not terminated, or it succeeded without a
    termination message that can carry its events (some runtimes leave none, and the kubelet may
    cut a long one at the front: its log decides, once read). The row's round,
    job, index and task_id are the caller's to set.

    A failure found here is final (the same rules see the same status and message later); a
    reward is provisional: the log may disagree, its artifacts (the manifest's promise) may not
    arrive whole, the pod may be deleted, the round may fail."""
    name = str(pod["metadata"]["name"])
    phase = dig(pod, "status", "phase")
    if phase not in ("Succeeded", "Failed"):
        return None
    try:
        if indexed:
            pod_index(pod, count, inspect)
        rule = pod_failure(pod)[1]  # a Failed pod breaks one of its rules
        if rule:
            raise EpisodeInvalid(name, rule, inspect)
        message = termination_message(pod)
        if message_needs_log(message):  # empty, or cut at the front by the kubelet: its log decides
            return None
        events, _ = episode_events(name, None, "not read yet", message, False, inspect)
        row = validate_episode(pod, events, job_created_at, None, inspect, builtin_worker)
        # the manifest it promises; its files arrive with its log, once the Job has ended
        row["artifacts"] = episode_artifacts(name, events, None, None, max_artifact_bytes, inspect, received=False)
        return row
    except (KeyError, TypeError, ValueError) as error:
        raise EpisodeInvalid(name, f"its pod status or events have an unexpected shape ({error!r})", inspect) from None


def task_id_for(collected: RoundCollected, index: Optional[int]) -> Any:
    if index is None:
        return None
    if collected.task_ids is not None and 0 <= index < len(collected.task_ids):
        return collected.task_ids[index]
    return index


def check_failed_episodes(
    collected: RoundCollected,
    pods: List[KubeObject],
    rows: List[EpisodeRow],
    failed: List[Tuple[EpisodeInvalid, Optional[int]]],
    where: str,
    inspect: str,
    lost: Optional[Mapping[str, List[LostAttempt]]] = None,
) -> bool:
    """With --max-failed-episodes K: fail the round as before when more than K episodes failed,
    when pods are missing or share an index, or when the Job's own list of failed indexes names
    an episode that validated. True when the Job's FailedIndexes verdict is accounted for."""
    tolerated = collected.max_failed_episodes
    kinds = {str(pod["metadata"]["name"]): whose_failure(pod) for pod in pods}
    lost_ones = [invalid for invalid, _ in failed if kinds.get(invalid.pod) == FAILURE_INFRASTRUCTURE]
    if len(lost_ones) > tolerated:
        first = lost_ones[0]
        raise EpisodeInvalid(
            first.pod,
            f"{first.rule} ({len(lost_ones)} episodes lost to the infrastructure, more than --max-failed-episodes "
            f"{tolerated})",
            first.inspect,
        )
    replaced = sum(len(attempts) for attempts in (lost or {}).values())
    collect = tolerated > 0 or collected.failed_episode_reward is not None
    whole = collect and not collected.stopped  # a stopped round has only the pods that ended
    problem = pod_count_problem(pods, collected.count, inspect, replaced) if whole else None
    if problem is not None:
        raise problem
    indexes = [row["index"] for row in rows] + [index for _, index in failed if index is not None]
    repeated = sorted({index for index in indexes if indexes.count(index) > 1})
    if collected.indexed and repeated:
        raise DemoError(
            f"Job {where} has more than one pod for completion index {repeated[0]}; inspect {inspect}", EXIT_EPISODE
        )
    if not rows and failed:
        raise DemoError(
            f"every episode of Job {where} failed ({len(failed)}), so there is no validated episode to time; the "
            f"first: {failed[0][0]}",
            EXIT_EPISODE,
        )
    observation = collected.observation
    if not (
        failed and observation.condition == "Failed" and failed_condition_reason(observation.job) == "FailedIndexes"
    ):
        return False
    status = observation.job.get("status") or {}
    try:
        job_failed = parse_index_set(status.get("failedIndexes"))
    except ValueError as error:
        raise DemoError(f"Job {where} reports unreadable status.failedIndexes: {error}", EXIT_CLUSTER) from None
    ours = {index for _, index in failed}
    validated = sorted(index for index in job_failed if index not in ours)
    if validated:
        raise DemoError(
            f"Job {where} lists index {validated[0]} in status.failedIndexes, but that episode validated; "
            f"inspect {inspect}",
            EXIT_EPISODE,
        )
    return True


def assemble_results(
    settings: RunSettings,
    context: str,
    namespace: str,
    run_id: str,
    rows: List[EpisodeRow],
    rounds: List[RoundResult],
    prepared: Optional[PreparedImage] = None,
    kubelet: Optional[KubeletFigures] = None,
    capacity: Optional[AutoParallelism] = None,
) -> Results:
    """results.json: the guide's fields first, then phases, nodes, rounds and absolute stamps;
    `prepared`: the warm-up and the pinned image (none without --warmup and --pin-image);
    `kubelet`: the runtime operations (only with --kubelet-metrics); `capacity`: the nodes'
    room (only with --parallelism auto, whose parallelism is that room, at most the count)."""
    failed = [entry for figures in rounds for entry in figures["failed_episodes"]]
    first_rewards = [r["client_first_reward_seconds"] for r in rounds if "client_first_reward_seconds" in r]
    first_reward: FirstReward = {"client_first_reward_seconds": max(first_rewards)} if first_rewards else {}
    figures = batch_figures(rows, failed)
    scored = sum(1 for entry in failed if entry.get("reward") is not None)
    return Results(
        **figures,
        scored_episodes=scored,
        failed_episode_reward=settings.failed_episode_reward,
        stop_after=settings.stop_after,
        tags=settings.tags,
        grader=settings.grader_name if settings.grade is not None else None,
        private_fields=list(settings.private_fields),
        stopped_episodes=[entry for r in rounds for entry in r.get("stopped_episodes", [])],
        stopped_by=next((r.get("stopped_by") for r in rounds if r.get("stopped_by")), None),
        **first_reward,
        figure_sources=dict(sorted(FIGURE_SOURCES.items())),
        notes=figure_notes(figures, rows, settings.max_failed_episodes, scored),
        **(prepared or {"image_pinned": None, "warmup": None}),
        **(kubelet or {}),
        **(capacity or {}),
        failed_episodes=failed,
        max_failed_episodes=settings.max_failed_episodes,
        infra_retries=settings.infra_retries,
        pods_without_termination_message=sum(r["pods_without_termination_message"] for r in rounds),
        log_bytes_not_saved=sum(r["log_bytes_not_saved"] for r in rounds),
        worker=settings.worker_name,
        tasks=len(settings.tasks) if settings.tasks is not None else None,
        context=context,
        namespace=namespace,
        run_id=run_id,
        image=settings.image,
        runtime=settings.runtime,
        parallelism=job_parallelism(settings, None if capacity is None else capacity["parallelism_capacity"]),
        rounds=settings.rounds,
        episodes_per_round=settings.count,
        cache_state=cache_state_of(image_cache_counts(rows)),
        image_cache=image_cache_counts(rows),
        client_job_complete_seconds=max(r["client_job_complete_seconds"] for r in rounds),
        client_submitted_at=rounds[0]["client_submitted_at"],
        client_observed_complete_at=rounds[-1]["client_observed_complete_at"],
        job_created_at=rounds[0]["job_created_at"],
        job_admitted_at=rounds[0]["job_admitted_at"],
        admission_wait_seconds=max_known(r["admission_wait_seconds"] for r in rounds),
        client_admission_wait_seconds=max_known(r["client_admission_wait_seconds"] for r in rounds),
        job_complete_at=rounds[-1]["job_complete_at"],
        job_success_criteria_met_at=rounds[-1]["job_success_criteria_met_at"],
        phases=phase_table(rows),
        nodes=node_spread(rows),
        image_ids=sorted({row["image_id"] for row in rows if row["image_id"]}),
        container_runtimes=sorted({row["container_runtime"] for row in rows if row["container_runtime"]}),
        round_results=rounds,
        tool_version=release_and_fingerprint(),
        pods=[pod_row(row) for row in rows],
    )


def pod_row(row: EpisodeRow) -> PodRow:
    """A row as results.json keeps it: with its `info` as rewards.jsonl has it (bounded by
    INFO_LIMIT when the reward event was read: reward_info), {} when the event had none, and its
    failure_kind as its line has it (None: it validated)."""
    copy = row.copy()
    copy["info"] = row.get("info", {})
    copy["failure_kind"] = None
    return copy


def check_thresholds(results: Results, thresholds: Dict[str, float]) -> List[str]:
    """Every breached latency budget, in a stable order."""
    breaches = []
    for metric, limit in sorted(thresholds.items()):
        value = json_number(results.get(metric))
        if value is None:  # a budget is never met by a figure nobody measured
            breaches.append(f"{metric} is unknown (an episode lacks its stamp), so it cannot be held to {limit:g} s")
        elif value > limit:
            breaches.append(f"{metric} = {figure_text(value, metric)} > {limit:g} s")  # as precise as its clocks
    return breaches
