"""The Python API: run_batch, stream_batch and their records."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import queue
import threading
import typing
from pathlib import Path
from typing import Any, Dict, List, Mapping, NoReturn, Optional, Sequence, Tuple

from .cli import CommandLineParser, build_parser, did_you_mean, invoked_as, run_settings
from .commands import cmd_run_reported
from .constants import EXIT_INTERRUPTED, EXIT_USAGE, REWARDS_FILE, RUN_FILES
from .core_basics import short_repr
from .core_reports import printable
from .errors import DemoError, outcome_of
from .kubectl import make_kubectl
from .persistence import load_results, read_reward_lines
from .records import Results, RewardLine, RunSettings

# Python API ###################################################################
# `import rl_batch_demo as rbd`: run_batch and stream_batch, a `run` from Python. Uses the command
# line: its options are run's flags, read by the same parser and settings, run by the same
# cmd_run_reported (one code path), printing nothing on stdout, never exiting, and leaving the
# caller's signal handlers alone.


class OptionsParser(CommandLineParser):
    """The command line's parser as the API uses it: a usage error raises DemoError (exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise DemoError(printable(message), EXIT_USAGE)


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """What run_batch returns: the run's directory and the two files a trainer reads there."""

    output: Path
    results: Optional[Results]  # results.json as a dict; None after dry_run, which writes manifests only
    rewards: List[RewardLine]  # rewards.jsonl's rows, in the file's order (a retraction follows its row)

    @property
    def verdicts(self) -> List[RewardLine]:
        """Each pod's last row, its verdict (docs/outputs.md, "rewards.jsonl"), in the order the
        pods first appear: a reward that stands has `failure` null."""
        last = {row["pod"]: row for row in self.rewards}
        return list(last.values())

    @classmethod
    def read(cls, output: Path) -> BatchResult:
        rewards_file = output / REWARDS_FILE
        if not (output / RUN_FILES.results).exists():  # a dry run: manifests only
            return cls(output, None, [])
        return cls(output, load_results(output), read_reward_lines(rewards_file))


def option_arguments(options: Mapping[str, Any], parser: CommandLineParser) -> List[str]:
    """`run`'s command line for the API's keyword options, each the flag with underscores
    (max_failed_episodes: --max-failed-episodes): `True` for a flag that takes no value, a
    value or None (left out) for one that does; `threshold` a mapping (metric: seconds) or
    "METRIC=SECONDS" texts. An unknown name or a value of the wrong kind is a usage error."""
    run = parser.commands["run"]
    flags = {action.dest: action for action in run._actions if action.option_strings and action.dest != "help"}
    argv: List[str] = []
    for name, value in options.items():
        action = flags.get(name)
        if action is None:
            raise DemoError(f"unknown option {name}{did_you_mean(name, flags)}", EXIT_USAGE)
        flag = max(action.option_strings, key=len)
        if action.nargs in (0, "?"):  # a switch (store_true), or --pin-image's optional value
            if not isinstance(value, (bool, str)) or (action.nargs != "?" and isinstance(value, str)):
                raise DemoError(f"option {name} takes True or False, not {short_repr(value)}", EXIT_USAGE)
            argv += [flag] if value is True else [f"{flag}={value}"] if isinstance(value, str) else []
        elif action.dest == "threshold":
            items = value.items() if isinstance(value, Mapping) else [value] if isinstance(value, str) else value
            argv += [f"{flag}={item}" if isinstance(item, str) else f"{flag}={item[0]}={item[1]}" for item in items]
        elif value is not None:
            if isinstance(value, bool):
                raise DemoError(f"option {name} takes a value, not {value}", EXIT_USAGE)
            argv.append(f"{flag}={os.fspath(value) if isinstance(value, os.PathLike) else value}")
    return argv


def tasks_lines(tasks: Sequence[Any]) -> bytes:
    """The API's `tasks` list as the lines of a --tasks file; an item that is no JSON object names its index."""
    lines = []
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise DemoError(
                f"tasks[{index}] is {type(task).__name__}, not a dict (one JSON object per episode)", EXIT_USAGE
            )
        try:
            lines.append(json.dumps(task, sort_keys=True, allow_nan=False) + "\n")
        except (TypeError, ValueError, RecursionError) as error:
            raise DemoError(f"tasks[{index}] cannot be written as JSON ({error})", EXIT_USAGE) from None
    return "".join(lines).encode("utf-8")


def batch_settings(
    output: Any, count: Optional[int], options: Mapping[str, Any]
) -> Tuple[RunSettings, argparse.Namespace]:
    """The settings `run` would take from the flags that `options` name, checked by the same
    parser and rules: a usage error is a DemoError, raised before any work starts."""
    given = dict(options)
    tasks = given.get("tasks")
    listed = tasks is not None and not isinstance(tasks, (str, os.PathLike))
    if listed:
        given["tasks"] = "tasks"  # the list stands for a file of that name in messages
    parser = build_parser(invoked_as(), OptionsParser)
    argv = option_arguments({"output": output, "count": count, **given}, parser)
    args = parser.parse_command_line(["run", *argv])
    if listed and tasks is not None:
        args.tasks_given = tasks_lines(tasks)
    return run_settings(args), args


def execute_batch(settings: RunSettings, args: argparse.Namespace) -> BatchResult:
    """The run, as `run` runs it without printing its summary; an interruption is re-raised as
    one (KeyboardInterrupt) once diagnostics are saved and the --cleanup policy has run, and a
    bug as DemoError (exit 3), its traceback chained."""
    try:
        cmd_run_reported(settings, make_kubectl(args), invoked_as(), print_summary=False)
    except Exception as raised:  # an interruption that is not a DemoError passes through as it is
        outcome = outcome_of(raised)
        if outcome.exit_code == EXIT_INTERRUPTED:
            raise KeyboardInterrupt(outcome.message) from raised
        if isinstance(raised, DemoError):
            raise
        raise outcome.error() from raised
    return BatchResult.read(settings.output)


def run_batch(output: Any, *, count: Optional[int] = None, **options: Any) -> BatchResult:
    """Run one batch, as `run --output OUTPUT --count COUNT ...` does, and return what it wrote:
    `.results` (results.json), `.rewards` (rewards.jsonl's rows), `.output`. `count` defaults to
    10, or to the number of tasks; `options` are run's other flags with underscores, `tasks` a
    --tasks file or a list of dicts. A failure raises DemoError with the command line's exit code."""
    settings, args = batch_settings(output, count, options)
    return execute_batch(settings, args)


def stream_batch(
    output: Any, *, count: Optional[int] = None, **options: Any
) -> typing.Generator[RewardLine, None, BatchResult]:
    """Run one batch as run_batch does, in a thread of its own, and yield each rewards.jsonl row
    as it is written. Leaving the loop early (break, an exception, close()) stops the run as a
    Ctrl-C would and waits for its diagnostics and its --cleanup policy; so does a Ctrl-C while
    it waits for the next row, which is then raised. Once the run has ended the generator raises
    its DemoError, or returns its BatchResult. Options are checked now, before the first row."""
    settings, args = batch_settings(output, count, options)
    return _stream(settings, args)


_DONE = object()  # stream_batch's last item: the run's thread has ended


def _stream(settings: RunSettings, args: argparse.Namespace) -> typing.Generator[RewardLine, None, BatchResult]:
    rows: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    ended: Dict[str, Any] = {}

    def work() -> None:
        try:
            ended["result"] = execute_batch(dataclasses.replace(settings, on_reward=rows.put, stop=stop), args)
        except BaseException as error:  # handed to the caller's thread below
            ended["error"] = error
        finally:
            rows.put(_DONE)

    thread = threading.Thread(target=work, name=f"rl-batch-demo {settings.output}")
    thread.start()
    try:
        while (row := rows.get()) is not _DONE:
            yield row
    except BaseException:  # KeyboardInterrupt while waiting, GeneratorExit, the loop's own exception
        stop.set()
        thread.join()
        raise
    thread.join()
    if "error" in ended:
        raise ended["error"]
    result: BatchResult = ended["result"]
    return result
