"""The Python API: run_batch, stream_batch and their records."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import re
import threading
import typing
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence, Tuple

from .cli import CommandLineParser, build_parser, did_you_mean, invoked_as, run_settings
from .commands import cmd_run_reported
from .constants import EXIT_INTERRUPTED, EXIT_USAGE, REWARDS_FILE, RUN_FILES
from .core_basics import short_repr
from .core_reports import printable
from .errors import DemoError, outcome_of
from .kubectl import make_kubectl
from .persistence import load_results, read_reward_lines, refuse_existing_output
from .records import Results, RewardLine, RunSettings

# Python API ###################################################################
# `import rl_batch_demo as rbd`: run_batch and stream_batch, a `run` from Python. Uses the command
# line: its options are run's flags, read by the same parser and settings, run by the same
# cmd_run_reported (one code path), printing nothing on stdout, never exiting, and leaving the
# caller's signal handlers alone.


class OptionsParser(CommandLineParser):
    """The command line's parser as the API uses it: a usage error raises DemoError (exit 2),
    worded for Python: each of run's flags it names is the keyword (`--timeout 0` is `timeout=0`)."""

    def error(self, message: str) -> NoReturn:
        run = run_parser(self)
        switches = [action.dest for action in run._actions if action.nargs == 0] if run is not None else []
        raise DemoError(printable(keyword_message(message, run_flags(self), switches)), EXIT_USAGE)


def run_parser(parser: argparse.ArgumentParser) -> Optional[argparse.ArgumentParser]:
    """`run`'s parser: the top parser's subcommand, or the parser itself when it is run's."""
    commands = getattr(parser, "commands", {})
    return commands.get("run") or (parser if parser.prog.endswith(" run") else None)


def run_flags(parser: CommandLineParser) -> Dict[str, str]:
    """run's flags (--max-failed-episodes) by their keyword (max_failed_episodes); {} for another parser."""
    run = run_parser(parser)
    if run is None:
        return {}
    return {
        action.dest: max(action.option_strings, key=len)
        for action in run._actions
        if action.option_strings and action.dest != "help"
    }


PROSE = frozenset(
    {"a", "an", "and", "for", "in", "is", "names", "needs", "of", "or", "the", "to", "with"}
)  # never a flag's value


def keyword_message(
    message: str,
    flags: Mapping[str, str],
    switches: Iterable[str] = (),
    choices: Optional[Mapping[str, Iterable[str]]] = None,
) -> str:
    """A usage error in the API's words: `argument --timeout: ...` becomes `option timeout=: ...`,
    `--stop-after 9` (a flag and its value) `stop_after=9`, a switch (`switches`, by keyword)
    `allow_large=True`; other text is left as it is. With `choices` (each keyword's choices), a
    lower-case word after a flag is its value only if it is one of them (`--cleanup always`), else
    prose (`--max-failed-episodes sets aside ...`)."""
    by_flag = {flag: name for name, flag in flags.items()}
    switch_names = set(switches)

    def prose(name: str, value: str) -> bool:
        if value in PROSE:
            return True
        return choices is not None and value.isalpha() and value.islower() and value not in set(choices.get(name, ()))

    def keyword(match: re.Match[str]) -> str:
        name, value = by_flag.get(match.group(1)), match.group(2)
        if name is None:
            return match.group(0)
        if name in switch_names or value is None or prose(name, value):
            return f"{name}={'True' if name in switch_names else ''}" + (f" {value}" if value else "")
        return f"{name}={value}"

    message = re.sub(r"\bargument (--[a-z][a-z0-9-]*)(?:/[^:]*)?:", r"option \1:", message)
    return re.sub(r"(--[a-z][a-z0-9-]*)(?:[ =](?!-)([^\s:;,)]+))?", keyword, message)


# What each kind of run's values takes from Python, by the function that parses its text (the
# command line's type); a value of another type is refused (count="3": a str, not an int).
API_TYPES: Dict[str, Tuple[type, ...]] = {
    "whole_number.<locals>.parse": (int,),
    "reward_arg": (int, float),
    "parallelism_arg": (int, str),
    "artifact_budget": (int, str),
}


def accepted_types(action: argparse.Action) -> Tuple[type, ...]:
    """The Python types an option with a value takes: its parser's (API_TYPES), else a text or a path."""
    if action.type is None:
        return (str, os.PathLike)
    return API_TYPES.get(getattr(action.type, "__qualname__", ""), (str,))


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """What run_batch returns: the run's directory and the two files a trainer reads there."""

    output: Path
    results: Optional[Results]  # results.json as a dict; None after dry_run, which writes manifests only
    rewards: List[RewardLine]  # rewards.jsonl's rows, in the file's order (a retraction follows its row)

    @property
    def verdicts(self) -> List[RewardLine]:
        """Each pod's last row, its verdict (docs/outputs.md, "rewards.jsonl"), in index order
        (round, then completion index; a row without an index last, by pod): a reward stands when
        `reward` is not null and `retracted` is false."""
        last = {row["pod"]: row for row in self.rewards}
        return sorted(last.values(), key=verdict_order)

    @classmethod
    def read(cls, output: Path) -> BatchResult:
        rewards_file = output / REWARDS_FILE
        if not (output / RUN_FILES.results).exists():  # a dry run: manifests only
            return cls(output, None, [])
        return cls(output, load_results(output), read_reward_lines(rewards_file))


def verdict_order(row: RewardLine) -> Tuple[int, int, int, str]:
    index = row["index"]
    return row["round"], index is None, index if index is not None else 0, row["pod"]


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
        elif action.dest == "tags" and isinstance(value, Mapping):  # a dict of tags, as --tags' JSON object
            try:
                argv.append(f"{flag}={json.dumps(dict(value), allow_nan=False)}")
            except (TypeError, ValueError, RecursionError) as error:
                raise DemoError(f"option tags= cannot be written as JSON ({error})", EXIT_USAGE) from None
        elif value is not None:
            if isinstance(value, bool):
                raise DemoError(f"option {name} takes a value, not {value}", EXIT_USAGE)
            kinds = accepted_types(action)
            if not isinstance(value, kinds):
                names = " or ".join(
                    "a path" if kind is os.PathLike else f"an {kind.__name__}" if kind is int else f"a {kind.__name__}"
                    for kind in kinds
                )
                raise DemoError(
                    f"option {name}= takes {names}, not {short_repr(value)} ({type(value).__name__})", EXIT_USAGE
                )
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
    grade = given.pop("grade", None)  # grade=callable(task, row) -> float: no flag, the command line's --grader
    if grade is not None and not callable(grade):
        raise DemoError(f"option grade= takes a function grade(task, row), not {short_repr(grade)}", EXIT_USAGE)
    if grade is not None and given.get("grader") is not None:
        raise DemoError("give grade= or grader=, not both", EXIT_USAGE)
    tasks = given.get("tasks")
    listed = tasks is not None and not isinstance(tasks, (str, os.PathLike))
    if listed:
        given["tasks"] = "tasks"  # the list stands for a file of that name in messages
    parser = build_parser(invoked_as(), OptionsParser)
    argv = option_arguments({"output": output, "count": count, **given}, parser)
    args = parser.parse_command_line(["run", *argv])
    if listed and tasks is not None:
        args.tasks_given = tasks_lines(tasks)
    settings = run_settings(args)
    try:  # as run refuses it, before any work, but in the caller's words (`output=`)
        refuse_existing_output(settings.output)
    except DemoError as error:
        raise DemoError(keyword_message(str(error), run_flags(parser)), error.exit_code) from None
    if grade is not None:
        name = getattr(grade, "__qualname__", None) or type(grade).__name__
        settings = dataclasses.replace(settings, grade=grade, grader_name=f"grade={name}")
    return settings, args


def api_words(message: str) -> str:
    """A run's error in the API's words: the advice it gives names run's keywords
    (`max_failed_episodes=`), while a command it quotes, the tool's own (`... cleanup --output
    DIR`) or kubectl's, keeps its flags, being a command to type."""
    parser = build_parser(invoked_as(), OptionsParser)
    flags, run = run_flags(parser), run_parser(parser)
    switches = [action.dest for action in run._actions if action.nargs == 0] if run is not None else []
    choices = {action.dest: [str(c) for c in action.choices or ()] for action in run._actions} if run else {}
    quoted = re.compile(rf"(?:\bkubectl\b|{re.escape(invoked_as())})[^;)]*")
    worded, last = [], 0
    for command in quoted.finditer(message):
        worded += [keyword_message(message[last : command.start()], flags, switches, choices), command.group(0)]
        last = command.end()
    return "".join([*worded, keyword_message(message[last:], flags, switches, choices)])


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
            raised.args = (api_words(str(raised)), *raised.args[1:])  # the same error, in the caller's words
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
    as it is written. Leaving the loop early (break, an exception, close()) keeps what finished:
    the round stops as stop_after=K stops it (its Job deleted, the episodes that ended validated,
    results.json covering them, the rows yielded standing), then its --cleanup policy runs; left
    before any episode ended, the run stops as a Ctrl-C would. A Ctrl-C while it waits for the
    next row interrupts the run, and is then raised. Once the run has ended the generator raises
    its DemoError, or returns its BatchResult. Options are checked now, before the first row."""
    settings, args = batch_settings(output, count, options)
    return _stream(settings, args)


_DONE = object()  # stream_batch's last item: the run's thread has ended


def _stream(settings: RunSettings, args: argparse.Namespace) -> typing.Generator[RewardLine, None, BatchResult]:
    rows: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    early = threading.Event()
    ended: Dict[str, Any] = {}

    def work() -> None:
        try:
            seams = dataclasses.replace(settings, on_reward=rows.put, stop=stop, finish_early=early)
            ended["result"] = execute_batch(seams, args)
        except BaseException as error:  # handed to the caller's thread below
            ended["error"] = error
        finally:
            rows.put(_DONE)

    thread = threading.Thread(target=work, name=f"rl-batch-demo {settings.output}")
    thread.start()
    try:
        while (row := rows.get()) is not _DONE:
            yield row
    except KeyboardInterrupt:  # a Ctrl-C while waiting: the run is interrupted, as `run` is
        stop.set()
        thread.join()
        raise
    except BaseException:  # the loop left early (GeneratorExit: break, close()), or its own exception
        early.set()  # the round stops as --stop-after stops it: what ended is validated and kept
        thread.join()
        raise
    thread.join()
    if "error" in ended:
        raise ended["error"]
    result: BatchResult = ended["result"]
    return result


def astream_batch(output: Any, *, count: Optional[int] = None, **options: Any) -> typing.AsyncIterator[RewardLine]:
    """stream_batch for asyncio: an async generator over the same rows, each handed to the event
    loop by the run's thread (loop.call_soon_threadsafe), so that waiting for the next row never
    blocks the loop. Leaving the loop early (break and aclose(), an exception, a cancellation)
    keeps what finished, as stream_batch's does; once the run has ended, its DemoError is raised
    after the last row. Options are checked now, before the first row."""
    settings, args = batch_settings(output, count, options)
    return _astream(settings, args, {})


async def arun_batch(output: Any, *, count: Optional[int] = None, **options: Any) -> BatchResult:
    """run_batch for asyncio: the batch runs in a thread of its own while the event loop goes on;
    returns its BatchResult or raises its DemoError. A cancellation stops the run as leaving
    astream_batch's loop early does, then is raised."""
    settings, args = batch_settings(output, count, options)
    ended: Dict[str, Any] = {}
    async for _ in _astream(settings, args, ended):
        pass
    result: BatchResult = ended["result"]
    return result


async def _astream(
    settings: RunSettings, args: argparse.Namespace, ended: Dict[str, Any]
) -> typing.AsyncIterator[RewardLine]:
    import asyncio  # noqa: PLC0415 - only the async API needs it: 30 ms of every start otherwise

    loop = asyncio.get_running_loop()
    rows: asyncio.Queue[Any] = asyncio.Queue()
    stop, early = threading.Event(), threading.Event()

    def put(item: Any) -> None:  # from the run's thread; a loop already closed takes nothing more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(rows.put_nowait, item)

    def work() -> None:
        try:
            seams = dataclasses.replace(settings, on_reward=put, stop=stop, finish_early=early)
            ended["result"] = execute_batch(seams, args)
        except BaseException as error:  # handed to the loop below
            ended["error"] = error
        finally:
            put(_DONE)

    thread = threading.Thread(target=work, name=f"rl-batch-demo {settings.output}")
    thread.start()
    try:
        while (row := await rows.get()) is not _DONE:
            yield row
    except BaseException:  # aclose() (GeneratorExit), a cancellation, the loop's own exception
        early.set()  # what ended is kept, as stream_batch's loop left early
        await loop.run_in_executor(None, thread.join)  # the run's diagnostics and --cleanup, off the loop
        raise
    await loop.run_in_executor(None, thread.join)
    if "error" in ended:
        raise ended["error"]
