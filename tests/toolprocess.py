"""The tool as a subprocess of the tests, without compiling its 11k lines on every run.

Python never caches the bytecode of a script it runs by path (`python3 rl_batch_demo.py`), so
each such run compiled the whole file again (about 90 ms on the project's machine). And this
machine's environment sets PYTHONDONTWRITEBYTECODE=1, so nothing would be cached by itself.
`tool_command` runs the same file as a module instead (`python3 -m rl_batch_demo`, found through
PYTHONPATH, `tool_environment`), which the import system loads from its bytecode cache
(`__pycache__/` beside the file, ignored by git), where this module compiles it once per test
process, on first use. PYTHONDONTWRITEBYTECODE stays as it was: neither the tool nor anything it
starts writes bytecode anywhere it did not before (the worker's workspace above all).

(A cache prefix, PYTHONPYCACHEPREFIX in a temporary directory, is slower, not faster: under a
prefix Python looks for every module's bytecode there, so each run recompiled the standard
library modules the tool imports, 1.4 s a run against 0.5 s as a script at load 7.)

What the tool sees is the same either way: `__file__` is the file's absolute path, and so is
`sys.argv[0]` (Python makes both absolute), so its messages name it as `python3 FILE` from the
working directory, and --version's fingerprint is that of the same bytes. The one difference is
`sys.path[0]`: the working directory under -m, the file's directory as a script; the tool
imports only the standard library. The README's commands (`python3 tests/fakecluster.py demo`)
still run the file as a script, as users do.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import py_compile
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Mapping

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "rl_batch_demo.py"
_COMPILED: List[Path] = []
_LOCK = threading.Lock()


def fresh_bytecode(cache: Path, source: Path = TOOL) -> bool:
    """Whether `cache` is bytecode the import system takes for `source` as it is now: this
    Python's magic number, a timestamp-checked header (PEP 552 flags 0) with the file's mtime and
    size, the same test the import system makes before it uses a cache."""
    try:
        with open(cache, "rb") as stream:
            header = stream.read(16)
        stat = source.stat()
    except OSError:
        return False
    fields = [int.from_bytes(header[at : at + 4], "little") for at in (4, 8, 12)]
    timestamp = [0, int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF]
    return len(header) == 16 and header[:4] == importlib.util.MAGIC_NUMBER and fields == timestamp


def cached_bytecode() -> Path:
    """The tool's bytecode, where the import system reads it, compiled from the file as it is now
    (once per test process, on first use, unless a fresh one is there already: the tests never
    change the file). tests/__init__.py asks for it first, so the tests' own import reads it too."""
    with _LOCK:
        if not _COMPILED:
            cache = Path(importlib.util.cache_from_source(str(TOOL)))
            _COMPILED.append(cache if fresh_bytecode(cache) else Path(py_compile.compile(str(TOOL), doraise=True)))
        return _COMPILED[0]


def tool_command(*argv: str) -> List[str]:
    """`python3 rl_batch_demo.py ARGV`, as a module: run it with `tool_environment`."""
    cached_bytecode()
    return [image_python(), "-m", TOOL.stem, *argv]


def tool_environment(env: Mapping[str, str]) -> Dict[str, str]:
    """`env` with the tool's directory first on PYTHONPATH."""
    paths = [str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


_IMAGE_PYTHON: List[str] = []
_IMAGE_PYTHON_LOCK = threading.Lock()


def image_python() -> str:
    """This interpreter as an image's clean one: a link to it beside a pyvenv.cfg (Python's venv
    rule, Modules/getpath.py), which reads the standard library only, not the site packages of the
    interpreter running the tests, whose .pth files may cost tens of ms a start (35 ms with this
    machine's pyenv Python, whose certifi .pth imports importlib.resources). Every Python process
    the tests start runs it: the tool (which needs the standard library alone, as on a machine with
    nothing installed), a worker outside the fake, the suite's own child suites; the fake's pods
    get the same (tests/fakekube/controller.py). One per test process."""
    with _IMAGE_PYTHON_LOCK:
        if not _IMAGE_PYTHON:
            root = Path(tempfile.mkdtemp(prefix="rl-image-python-"))
            atexit.register(shutil.rmtree, root, True)
            (root / "bin").mkdir()
            (root / "bin" / "python").symlink_to(sys.executable)
            home = os.path.dirname(sys.executable)
            (root / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\n", encoding="utf-8")
            _IMAGE_PYTHON.append(str(root / "bin" / "python"))
        return _IMAGE_PYTHON[0]
