"""What .ci/run installs is pinned: exact versions, all in .ci/requirements.txt, nothing else; and
which tiers it runs."""

from __future__ import annotations

import pathlib
import re
import unittest

CI = pathlib.Path(__file__).resolve().parent.parent / ".ci"
PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!-]*")


class PinnedToolsTest(unittest.TestCase):
    def test_every_requirement_is_an_exact_pin(self) -> None:
        lines = (CI / "requirements.txt").read_text().splitlines()
        pins = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        for pin in pins:
            with self.subTest(pin):
                self.assertRegex(pin, f"^{PIN.pattern}$")
        names = [pin.split("==")[0].lower().replace("_", "-") for pin in pins]
        self.assertLessEqual({"ruff", "mypy", "kubernetes-validate"}, set(names))
        self.assertEqual(len(names), len(set(names)), "a package pinned twice")

    def test_ci_installs_only_the_pinned_file_without_dependencies(self) -> None:
        installs = [line for line in (CI / "run").read_text().splitlines() if re.search(r"\bpip\b.*\binstall\b", line)]
        self.assertTrue(installs)
        for line in installs:
            with self.subTest(line):
                self.assertIn("--no-deps -r .ci/requirements.txt", line)
                rest = line.split("-r .ci/requirements.txt", 1)[1].strip()
                self.assertIn(rest, ("", "&&", "\\"), "nothing installed beside the pinned file")


class TiersTest(unittest.TestCase):
    def test_the_end_to_end_pass_runs_the_call_plan_tests_with_stub_processes(self) -> None:
        """The README's command answers the call-plan stub in-process (tests/stubprocess.py); the
        process boundary is tested by the pass that runs the end-to-end tier."""
        from tests.stubprocess import STUB_PROCESSES_ENV
        from tests.tiers import END_TO_END_ENV

        suites = [line for line in (CI / "run").read_text().splitlines() if "python3 -m tests.report" in line]
        end_to_end = [line for line in suites if f"{END_TO_END_ENV}=1 " in line]
        self.assertEqual(len(end_to_end), 1, suites)
        self.assertIn(f"{STUB_PROCESSES_ENV}=1 ", end_to_end[0])
        self.assertTrue(all(STUB_PROCESSES_ENV not in line for line in suites if line not in end_to_end))


if __name__ == "__main__":
    unittest.main()
