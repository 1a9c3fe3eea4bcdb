"""The programs rl_batch_demo.py carries as text, written out as files for the linters.

    python3 -m tests.payloads DIR

writes, as `show-worker` and `show-worker --template` print them:
* DIR/worker.py: the built-in episode worker (WORKER_SOURCE);
* DIR/worker_runner.py: the test runner the worker starts with `python -c` (its RUNNER_SOURCE);
* DIR/worker_template.py: the starting point for `run --worker` (WORKER_TEMPLATE).

.ci/run lints them with ruff and compiles them on every supported Python; tests/test_payloads.py
compiles them on the Python that runs the suite. They run in a pod, not here, so no one imports
them: without this nothing would read them as code before a cluster does.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
from typing import Dict, Mapping, Optional, Sequence

from tests.toolprocess import tool_command, tool_environment

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "rl_batch_demo.py"
RUNNER_NAME = "RUNNER_SOURCE"


def runner_source(worker: str) -> str:
    """The string literal the worker assigns to RUNNER_SOURCE at module level, exactly once."""
    found = [
        node.value
        for node in ast.parse(worker).body
        if isinstance(node, ast.Assign)
        and any(isinstance(target, ast.Name) and target.id == RUNNER_NAME for target in node.targets)
    ]
    if len(found) != 1 or not isinstance(found[0], ast.Constant) or not isinstance(found[0].value, str):
        raise ValueError(f"the worker must assign one string literal to {RUNNER_NAME}, found {len(found)} assignments")
    return found[0].value


def payloads(worker: str, template: str) -> Dict[str, str]:
    """File name -> source of each program carried as text."""
    return {"worker.py": worker, "worker_runner.py": runner_source(worker), "worker_template.py": template}


def show_worker(*flags: str, env: Optional[Mapping[str, str]] = None) -> str:
    """What `rl_batch_demo.py show-worker FLAGS` prints; RuntimeError, with its stderr, if it fails."""
    command = tool_command("show-worker", *flags)
    environment = tool_environment(os.environ if env is None else env)
    result = subprocess.run(command, capture_output=True, check=False, cwd=SCRIPT.parent, env=environment, timeout=60)
    if result.returncode != 0:  # the error says why, with the program's own stderr
        stderr = result.stderr.decode("utf-8", "replace")
        raise RuntimeError(f"{' '.join(command[1:])} exited {result.returncode}:\n{stderr}")
    return result.stdout.decode("utf-8")


def write_payloads(directory: pathlib.Path, env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Write every payload into `directory` (created if missing); returns what it wrote."""
    sources = payloads(show_worker(env=env), show_worker("--template", env=env))
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        (directory / name).write_text(text, encoding="utf-8")
    return sources


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 -m tests.payloads DIR", file=sys.stderr)
        return 2
    try:
        written = write_payloads(pathlib.Path(argv[0]))
    except (OSError, ValueError, SyntaxError, subprocess.SubprocessError) as error:
        print(f"tests.payloads: {error}", file=sys.stderr)
        return 1
    for name in sorted(written):
        print(os.path.join(argv[0], name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
