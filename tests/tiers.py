"""The suite's two tiers: the README's command runs the fast one; `.ci/run` runs both.

The fast tier is every pure table, every call-plan test and a few wire paths through the fake
cluster (tests/test_run.py's ten parallel episodes with the real worker and `check`,
tests/test_demo.py, most of the fake's own tests), so `python3 -m unittest discover -s tests -t .`
stays well inside a minute on two cores. A class (or method) decorated with `end_to_end` runs
real episode pods on the fake cluster in every test (each pod starts the built-in worker's three
interpreters, and every kubectl call is a Python process): it runs when RL_DEMO_END_TO_END=1 is
set, as `.ci/run` sets it on its default Python, and is skipped with that line otherwise. A
decorated test asserts exactly what it asserted before; only where it runs changes.
"""

from __future__ import annotations

import os
import unittest
from typing import TypeVar

END_TO_END_ENV = "RL_DEMO_END_TO_END"
T = TypeVar("T")  # a TestCase class or one test method


def end_to_end_enabled() -> bool:
    return os.environ.get(END_TO_END_ENV) == "1"


def end_to_end(test: T) -> T:
    """Run `test` (a class, with its subclasses, or one test method) only in the end-to-end tier."""
    reason = f"end to end through the fake cluster: set {END_TO_END_ENV}=1 to run it (.ci/run does)"
    return unittest.skipUnless(end_to_end_enabled(), reason)(test)
