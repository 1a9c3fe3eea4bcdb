"""tools/build.py: the generated file from the modules, and each thing the build refuses. Each
refusal is tried on a copy of src/ in a temporary directory, never on the real sources."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import shutil
import tempfile
import unittest
import unittest.mock
from pathlib import Path
from types import ModuleType
from typing import Iterator, Tuple

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
