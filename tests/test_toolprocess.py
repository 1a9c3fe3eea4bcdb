"""The tool as the tests' subprocess (tests/toolprocess.py): the same program, from cached bytecode."""

from __future__ import annotations

import subprocess
import tempfile
import unittest

from tests.fakecluster import ENVIRONMENT
from tests.toolprocess import TOOL, cached_bytecode, image_python, tool_command, tool_environment


class ToolProcessTest(unittest.TestCase):
    runs_concurrently = True  # only subprocesses: tests/concurrently.py

    def run_both(self, *argv: str, cwd: str) -> tuple[subprocess.CompletedProcess[str], ...]:
        as_script = [image_python(), str(TOOL), *argv]
        return tuple(
            subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)
            for command, env in ((as_script, dict(ENVIRONMENT)), (tool_command(*argv), tool_environment(ENVIRONMENT)))
        )

    def test_the_module_says_what_the_script_says(self) -> None:
        with tempfile.TemporaryDirectory() as cwd:
            for argv in (["--version"], ["run", "--cuont", "2"]):  # its fingerprint; its name in a usage error
                with self.subTest(argv=argv):
                    script, module = self.run_both(*argv, cwd=cwd)
                    self.assertEqual((module.returncode, module.stdout, module.stderr), (
                        script.returncode, script.stdout, script.stderr))  # fmt: skip
        self.assertIn(f"python3 {TOOL}", script.stderr)  # how it was started: named by its file

    def test_its_code_comes_from_the_cache_and_nothing_is_written(self) -> None:
        cache = cached_bytecode()
        written = cache.stat().st_mtime_ns
        env = tool_environment(ENVIRONMENT)
        verbose = subprocess.run(
            [image_python(), "-v", *tool_command("--version")[1:]], env=env, capture_output=True, text=True, timeout=60
        )
        self.assertEqual(verbose.returncode, 0, verbose.stderr[-2000:])
        self.assertIn(f"code object from '{cache}'", verbose.stderr)
        self.assertEqual(cache.stat().st_mtime_ns, written)
        self.assertEqual(env.get("PYTHONDONTWRITEBYTECODE"), ENVIRONMENT.get("PYTHONDONTWRITEBYTECODE"))


if __name__ == "__main__":
    unittest.main()
