"""The suite. `python3 -m unittest discover -s tests -t .` runs it all; the end-to-end tests
that only wait for subprocesses run a few at a time beside the rest (tests/concurrently.py).

The tests import the generated rl_batch_demo.py, so users run exactly what is tested. Before
anything runs, the suite checks that the file is what src/rl_batch_demo/ generates: a stale file
would silently be what every test tests, so then the suite is one failing test with the build's
own message, and nothing else runs."""

from __future__ import annotations

import importlib.util
import os
import unittest
from pathlib import Path
from typing import Optional

from tests.concurrently import beside

ROOT = Path(__file__).resolve().parent.parent


def stale_file() -> Optional[str]:
    """tools/build.py's sentence when rl_batch_demo.py is not what the sources generate, else None."""
    spec = importlib.util.spec_from_file_location("_rl_batch_demo_build", ROOT / "tools" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    try:
        fresh = "".join(piece.text for piece in build.generate())
    except (build.BuildError, SyntaxError, OSError) as error:
        return f"tools/build.py cannot generate rl_batch_demo.py: {error}"
    if build.TARGET.read_text(encoding="utf-8") != fresh:
        return f"rl_batch_demo.py is not what src/rl_batch_demo/ generates: {build.FIX}."
    return None


def load_tests(loader: unittest.TestLoader, standard_tests: unittest.TestSuite, pattern: str) -> unittest.TestSuite:
    """The package's tests, found as discovery finds them, the end-to-end ones beside the rest;
    only the freshness failure when rl_batch_demo.py is stale."""
    stale = stale_file()
    if stale is not None:

        class FreshFile(unittest.TestCase):  # made here, so that discovery never collects it otherwise
            def test_rl_batch_demo_py_is_generated_from_src(self) -> None:
                self.fail(stale)

        return unittest.TestSuite([FreshFile("test_rl_batch_demo_py_is_generated_from_src")])
    standard_tests.addTests(loader.discover(start_dir=os.path.dirname(__file__), pattern=pattern or "test*.py"))
    return beside(standard_tests)
