"""The suite. `python3 -m unittest discover -s tests -t .` runs it all; the end-to-end tests
that only wait for subprocesses run a few at a time beside the rest (tests/concurrently.py)."""

from __future__ import annotations

import os
import unittest

from tests.concurrently import beside


def load_tests(loader: unittest.TestLoader, standard_tests: unittest.TestSuite, pattern: str) -> unittest.TestSuite:
    """The package's tests, found as discovery finds them, the end-to-end ones beside the rest."""
    standard_tests.addTests(loader.discover(start_dir=os.path.dirname(__file__), pattern=pattern or "test*.py"))
    return beside(standard_tests)
