"""The programs rl_batch_demo.py carries as text (the episode worker, its test runner, the worker
template) are code that only a pod runs: these tests compile them on the Python that runs the
suite (.ci/run runs it on every supported Python, and ruff reads the same files)."""

from __future__ import annotations

import pathlib
import tempfile
import unittest
import warnings

import rl_batch_demo as demo
from tests.fakecluster import ENVIRONMENT
from tests.payloads import payloads, runner_source, write_payloads


def compile_strictly(source: str, name: str) -> None:
    """compile() with every warning an error (an invalid escape sequence, an `is` with a literal,
    a call of a literal: SyntaxWarning or DeprecationWarning), and without this module's
    `from __future__` flags."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile(source, name, "exec", dont_inherit=True)


class PayloadCompileTest(unittest.TestCase):
    def test_every_payload_compiles_on_this_python(self) -> None:
        sources = payloads(demo.WORKER_SOURCE, demo.WORKER_TEMPLATE)
        self.assertEqual(sorted(sources), ["worker.py", "worker_runner.py", "worker_template.py"])
        for name, source in sources.items():
            with self.subTest(name):
                compile_strictly(source, name)

    def test_a_syntax_warning_fails_the_compile(self) -> None:
        with self.assertRaises(SyntaxError):
            compile_strictly("x = 1\ny = x is 1\n", "warns.py")
        with self.assertRaises(SyntaxError):
            compile_strictly("def f(:\n", "broken.py")

    def test_the_runner_is_the_workers_single_runner_source_literal(self) -> None:
        self.assertEqual(runner_source('X = 1\nRUNNER_SOURCE = r"""print(1)\n"""\n'), "print(1)\n")
        for worker in ("X = 1\n", 'RUNNER_SOURCE = "a"\nRUNNER_SOURCE = "b"\n', "RUNNER_SOURCE = 'a' + 'b'\n"):
            with self.subTest(worker=worker), self.assertRaises(ValueError):
                runner_source(worker)


class PayloadFilesTest(unittest.TestCase):
    runs_concurrently = True  # only subprocesses and its own scratch directory: tests/concurrently.py

    def test_the_files_are_what_show_worker_prints(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            directory = pathlib.Path(root) / "payloads"
            write_payloads(directory, env=ENVIRONMENT)
            written = {path.name: path.read_text(encoding="utf-8") for path in directory.iterdir()}
        self.assertEqual(written, payloads(demo.WORKER_SOURCE, demo.WORKER_TEMPLATE))


if __name__ == "__main__":
    unittest.main()
