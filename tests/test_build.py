"""tools/build.py: the generated file from the modules, and each thing the build refuses. Each
refusal is tried on a copy of src/ in a temporary directory, never on the real sources."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import subprocess
import tempfile
import unittest
import unittest.mock
from pathlib import Path
from types import ModuleType
from typing import Iterator, Tuple

from tests.fakecluster import ENVIRONMENT
from tests.toolprocess import fresh_bytecode, image_python

ROOT = Path(__file__).resolve().parent.parent


def load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_build_under_test", ROOT / "tools" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = load_build()  # one for every test, so that its parse() keeps the trees of the sources no test edits


@contextlib.contextmanager
def copied_tree() -> Iterator[Tuple[ModuleType, Path]]:
    """The build, pointed at a copy of src/ and of rl_batch_demo.py."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", ".mypy_cache"))
        shutil.copy(ROOT / "rl_batch_demo.py", root / "rl_batch_demo.py")
        build = BUILD
        paths = {"ROOT": root, "PACKAGE": root / "src" / "rl_batch_demo", "TARGET": root / "rl_batch_demo.py"}
        with unittest.mock.patch.multiple(build, **paths):
            yield build, build.PACKAGE


def run(build: ModuleType, *argv: str) -> Tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = build.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


class BuildTest(unittest.TestCase):
    def test_the_committed_file_is_fresh(self) -> None:
        code, out, err = run(BUILD, "--check")
        self.assertEqual((code, out, err), (0, "", ""))

    def test_check_shows_the_diff_and_the_fix_for_a_stale_file(self) -> None:
        with copied_tree() as (build, package):
            edit(package / "errors.py", "class DemoError(Exception):", "class DemoError(Exception):  # changed")
            code, out, err = run(build, "--check")
        self.assertEqual(code, 1)
        self.assertIn("+class DemoError(Exception):  # changed", out)
        self.assertIn("edit src/rl_batch_demo/, then run python3 tools/build.py", err)

    def test_an_import_of_a_module_below_is_refused(self) -> None:
        with copied_tree() as (build, package):
            edit(
                package / "errors.py",
                "from __future__ import annotations\n",
                "from __future__ import annotations\n\nfrom .cli import main\n",
            )
            code, _, err = run(build, "--check")
        self.assertEqual(code, 2)
        self.assertIn("src/rl_batch_demo/errors.py:", err)
        self.assertIn("imports .cli, which is not above errors in MODULES", err)

    def test_a_name_defined_twice_is_refused(self) -> None:
        with copied_tree() as (build, package):
            with (package / "api.py").open("a", encoding="utf-8") as api:
                api.write("\n\ndef main() -> int:\n    return 0\n")
            code, _, err = run(build)
        self.assertEqual(code, 2)
        self.assertIn("main is defined in both cli.py and api.py", err)

    def test_a_payload_that_cannot_be_inlined_exactly_is_refused(self) -> None:
        for name, text, quote in (("template.py", "X = '''a'''\n", "'''"), ("runner.py", 'X = """a"""\n', '"""')):
            with self.subTest(name=name), copied_tree() as (build, package):
                with (package / "sandbox" / name).open("a", encoding="utf-8") as payload:
                    payload.write(text)
                code, _, err = run(build, "--check")
                self.assertEqual(code, 2)
                self.assertIn(f"{name} cannot be inlined as a raw {quote} string", err)

    def test_the_runner_statement_must_stand_once_in_the_worker(self) -> None:
        with copied_tree() as (build, package):
            edit(package / "sandbox" / "episode.py", "RUNNER_SOURCE = pathlib", "RUNNER_SOURCE  = pathlib")
            code, _, err = run(build)
        self.assertEqual(code, 2)
        self.assertIn("episode.py must hold the statement", err)

    def test_where_maps_a_line_back_to_its_module(self) -> None:
        build = BUILD
        lines = (ROOT / "rl_batch_demo.py").read_text(encoding="utf-8").splitlines()
        for wanted, source in (("def main(argv", "cli.py"), ("class DemoError(Exception):", "errors.py")):
            with self.subTest(wanted=wanted):
                line = next(number for number, text in enumerate(lines, 1) if text.startswith(wanted))
                _, out, _ = run(build, "--where", str(line))
                path, _, number = out.strip().rpartition(":")
                self.assertEqual(Path(path).name, source)
                module_lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
                self.assertEqual(module_lines[int(number) - 1], lines[line - 1])

    def test_where_maps_a_line_of_an_inlined_program_to_its_file(self) -> None:
        build = BUILD
        lines = (ROOT / "rl_batch_demo.py").read_text(encoding="utf-8").splitlines()
        template = (ROOT / "src" / "rl_batch_demo" / "sandbox" / "template.py").read_text(encoding="utf-8").splitlines()
        line = next(number for number, text in enumerate(lines, 1) if text.startswith("WORKER_TEMPLATE = r'''"))
        _, out, _ = run(build, "--where", str(line + 5))
        self.assertIn("src/rl_batch_demo/sandbox/template.py:6 ", out)
        self.assertEqual(template[5], lines[line + 4])

    def test_the_file_says_it_is_generated_and_by_what(self) -> None:
        head = (ROOT / "rl_batch_demo.py").read_text(encoding="utf-8").splitlines()[:4]
        self.assertEqual(head[0], "#!/usr/bin/env python3")
        self.assertIn("Generated by tools/build.py from the modules of src/rl_batch_demo/", head[1])
        self.assertIn("Do not edit this file", " ".join(head))


if __name__ == "__main__":
    unittest.main()


class ScriptEndTest(unittest.TestCase):
    """The generated file run as a script ends through run_as_script: main's exit code, and all it
    printed delivered, though the interpreter's teardown is skipped."""

    runs_concurrently = True  # only subprocesses, with the environment the tests were loaded with

    def test_the_script_exits_with_mains_code_and_everything_printed(self) -> None:
        import subprocess

        import rl_batch_demo as demo
        from tests.fakecluster import ENVIRONMENT
        from tests.toolprocess import image_python

        script = str(ROOT / "rl_batch_demo.py")
        shown = subprocess.run(
            [image_python(), script, "show-worker"], capture_output=True, check=False, env=ENVIRONMENT, cwd=str(ROOT)
        )
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertEqual(shown.stdout.decode(), demo.WORKER_SOURCE)  # buffered output flushed, to its last byte
        refused = subprocess.run(
            [image_python(), script, "cleanup"],
            capture_output=True,
            text=True,
            check=False,
            env=ENVIRONMENT,
            cwd=str(ROOT),
        )
        self.assertEqual(refused.returncode, demo.EXIT_USAGE, refused.stderr)
        self.assertEqual(len(refused.stderr.splitlines()), 1, refused.stderr)  # its one sentence, delivered


class SuiteGuardTest(unittest.TestCase):
    """tests/__init__.py: the freshness check made in a child while the tests are found, the
    suite reduced to its one failure when the file is stale, and the tests' bytecode."""

    def test_a_stale_file_leaves_one_failing_test_with_the_builds_sentence(self) -> None:
        import tests

        class Answered:
            def __init__(self) -> None:
                self.reaped = False

            def stale(self) -> str:
                return "rl_batch_demo.py is not what src/rl_batch_demo/ generates: " + BUILD.FIX + "."

            def reap(self) -> None:
                self.reaped = True

        found = unittest.TestSuite([BuildTest("test_the_committed_file_is_fresh")])
        loader = unittest.mock.Mock(spec=unittest.TestLoader)
        loader.discover.return_value = found
        with unittest.mock.patch.object(tests, "Preparation", Answered), unittest.mock.patch("atexit.register"):
            suite = tests.load_tests(loader, unittest.TestSuite(), "test*.py")
        loader.discover.assert_called_once()  # the tests are found (while the child checks), then dropped
        [only] = list(suite)
        result = unittest.TestResult()
        only.run(result)
        self.assertEqual(result.testsRun, 1)
        [(_, traceback)] = result.failures
        self.assertIn(f"rl_batch_demo.py is not what src/rl_batch_demo/ generates: {BUILD.FIX}.", traceback)

    def test_the_child_answers_and_a_child_that_dies_leaves_the_check_to_the_parent(self) -> None:
        # a fresh interpreter: this suite's process has threads, and a fork is made only without them
        script = (
            "import json, os, unittest.mock\n"
            "import tests\n"
            "parent = os.getpid()\n"
            "def answer(text):\n"
            "    return lambda: text if os.getpid() != parent else 'asked in the parent'\n"
            "def dies():\n"
            "    if os.getpid() != parent:\n"
            "        raise RuntimeError('the child fails')\n"
            "    return 'asked in the parent'\n"
            "seen = []\n"
            "with unittest.mock.patch.object(tests, 'suite_sources', lambda: []):\n"
            "    for check in (answer('stale: \\u00e9dit'), answer(None), dies):\n"
            "        with unittest.mock.patch.object(tests, 'stale_file', check):\n"
            "            preparation = tests.Preparation()\n"
            "            seen.append([preparation.pid > 0, preparation.stale()])\n"
            "            preparation.reap()\n"
            "print(json.dumps(seen))\n"
        )
        result = subprocess.run(
            [image_python(), "-c", script], cwd=ROOT, env=dict(ENVIRONMENT), capture_output=True, text=True, timeout=60
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(
            json.loads(result.stdout),
            [[True, "stale: \u00e9dit"], [True, None], [True, "asked in the parent"]],
        )

    def test_the_tests_bytecode_is_written_where_imports_read_it_once_per_change(self) -> None:
        import tests

        with tempfile.TemporaryDirectory() as scratch:
            good, broken = Path(scratch, "good.py"), Path(scratch, "broken.py")
            good.write_text("VALUE = 1\n")
            broken.write_text("def (:\n")
            caches = {path: Path(importlib.util.cache_from_source(str(path))) for path in (good, broken)}
            tests.compile_sources([good, broken])
            self.assertTrue(fresh_bytecode(caches[good], good))
            self.assertFalse(caches[broken].exists())  # left to its import, which names the error
            written = caches[good].stat().st_mtime_ns
            tests.compile_sources([good])
            self.assertEqual(caches[good].stat().st_mtime_ns, written)  # fresh: not written again
            good.write_text("VALUE = 22\n")
            self.assertFalse(fresh_bytecode(caches[good], good))
            tests.compile_sources([good])
            self.assertTrue(fresh_bytecode(caches[good], good))
