"""The programs that run inside the sandboxes, as real files: episode.py (the built-in episode
worker), runner.py (the test runner the worker starts with `python -c`) and template.py (what
`show-worker --template` prints). They run in pods on any Python 3.9+ image, with nothing but the
standard library, so they stay untyped and import nothing of the tool.

tools/build.py inlines them into rl_batch_demo.py as string literals; `payload_text` gives the
package the same text, by the same rule, so both read the programs alike."""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The one statement of episode.py that the text of runner.py replaces, exactly as written there.
RUNNER_STATEMENT = 'RUNNER_SOURCE = pathlib.Path(__file__).with_name("runner.py").read_text(encoding="utf-8")\n'


class PayloadError(Exception):
    """A payload that cannot be carried as a raw string literal exactly as it is on disk."""


def raw_literal(text: str, quote: str, name: str) -> str:
    """`r<quote>text<quote>`, refused unless it evaluates back to exactly `text`."""
    literal = f"r{quote}{text}{quote}"
    try:
        same = ast.literal_eval(literal) == text
    except (SyntaxError, ValueError):
        same = False
    if not same or text.endswith("\\"):
        raise PayloadError(f"{name} cannot be inlined as a raw {quote} string: it holds {quote} or ends in a backslash")
    return literal


def payload_text(name: str) -> str:
    """The program `name` as the pods get it: episode.py with runner.py inlined, the others as they are."""
    text = (HERE / name).read_text(encoding="utf-8")
    if name != "episode.py":
        return text
    if text.count(RUNNER_STATEMENT) != 1:
        raise PayloadError(f"episode.py must hold the statement {RUNNER_STATEMENT.strip()!r} exactly once")
    runner = raw_literal((HERE / "runner.py").read_text(encoding="utf-8"), '"""', "runner.py")
    return text.replace(RUNNER_STATEMENT, f"RUNNER_SOURCE = {runner}\n")
