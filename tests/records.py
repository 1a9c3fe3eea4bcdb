"""The schema of results.json and the files beside it (the TypedDicts of rl_batch_demo.py's typed
records), walked for the tests: which records a file holds, and a strict check that a file a run
wrote has exactly the schema's keys with the right JSON types.

The tool itself only checks what it reads back (`schema_problem`, which leaves unknown keys alone);
a written file must also hold no key the schema lacks, so `exact_problem` adds that."""

from __future__ import annotations

import json
import typing
from typing import Any, Dict, Iterator, List

import rl_batch_demo as demo

# Each file the documents' field tables describe, by the name the tables use, and its record.
FILES: Dict[str, Any] = {
    "results.json": demo.Results,
    "rewards.jsonl": demo.RewardLine,
    "receipt.json": demo.Receipt,
    "report.json": demo.ReproduceReport,
}


def is_record(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, dict) and hasattr(kind, "__required_keys__")


def fields(record: Any) -> Dict[str, Any]:
    """A record's keys (inherited ones included) and their types."""
    return typing.get_type_hints(record)


def unwrapped(kind: Any) -> Any:
    """The type without Optional."""
    if typing.get_origin(kind) is typing.Union:
        return next(arg for arg in typing.get_args(kind) if arg is not type(None))
    return kind


def inner_records(kind: Any) -> Iterator[Any]:
    """The records a field's type holds: itself, or inside Optional, List and Dict."""
    kind = unwrapped(kind)
    if is_record(kind):
        yield kind
    elif typing.get_origin(kind) in (list, dict):
        yield from inner_records(typing.get_args(kind)[-1])


def reachable(record: Any) -> List[Any]:
    """The record and every record inside it, each once, in the order they are met."""
    found = [record]
    for kind in found:
        for field in fields(kind).values():
            found += [inner for inner in inner_records(field) if inner not in found]
    return found


def exact_problem(value: Any, kind: Any) -> str:
    """What keeps `value` from being exactly `kind`: the tool's own check (a missing key, a wrong
    type), then any key the schema does not have; "" when it is exact."""
    return demo.schema_problem(value, kind) or unknown_key(value, kind, "")


def unknown_key(value: Any, kind: Any, key: str) -> str:
    kind = unwrapped(kind)
    if value is None:
        return ""
    if is_record(kind):
        known = fields(kind)
        for name in sorted(value):
            path = f"{key}.{name}" if key else name
            problem = (
                f"{path} is not in the schema" if name not in known else unknown_key(value[name], known[name], path)
            )
            if problem:
                return problem
    elif typing.get_origin(kind) in (list, dict):
        items = enumerate(value) if isinstance(value, list) else value.items()
        for name, item in items:
            problem = unknown_key(item, typing.get_args(kind)[-1], f"{key}[{name!r}]")
            if problem:
                return problem
    return ""


def written(case: Any, path: Any, record: Any) -> Any:
    """A JSON file (or, for rewards.jsonl, each line) a run wrote, checked to be exactly `record`."""
    text = path.read_text(encoding="utf-8")
    values = [json.loads(line) for line in text.splitlines()] if path.suffix == ".jsonl" else [json.loads(text)]
    for value in values:
        case.assertEqual(exact_problem(value, record), "", f"{path} departs from the schema ({record.__name__})")
    return values if path.suffix == ".jsonl" else values[0]


def written_results(case: Any, directory: Any) -> Any:
    """results.json of a run, and the rewards.jsonl written with it, both checked (see written)."""
    if (directory / demo.REWARDS_FILE).exists():
        written(case, directory / demo.REWARDS_FILE, demo.RewardLine)
    return written(case, directory / "results.json", demo.Results)


def complete(value: Any, kind: Any) -> Any:
    """A hand-built record with every required key the test left out given a plain value (None,
    0, "", an empty list), so that the tool reads it as it reads its own files."""
    origin = typing.get_origin(kind)
    if value is None and origin is typing.Union:
        return None
    kind = unwrapped(kind)
    if is_record(kind):
        value = dict(value or {})
        for name, field in fields(kind).items():
            if name in value:
                value[name] = complete(value[name], field)
            elif name in kind.__required_keys__:
                value[name] = complete(None, field)
        return value
    if typing.get_origin(kind) is list:
        return [complete(item, typing.get_args(kind)[0]) for item in value or []]
    if typing.get_origin(kind) is dict:
        return {name: complete(item, typing.get_args(kind)[1]) for name, item in (value or {}).items()}
    if value is not None or kind is Any:
        return value
    return {int: 0, float: 0.0, str: "", bool: False}[kind]
