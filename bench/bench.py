#!/usr/bin/env python3
"""Client-side figures of rl_batch_demo.py, measured against the test fake (a simulation).

Prints, for N = 10, 100 and 1000 episodes (change with --sizes):
  * kubectl processes started by one `run`;
  * the client's own CPU seconds (this process only: the fake kubectl and the episodes are
    separate processes and are not counted);
  * watch latency: from the moment the fake wrote the Job's Complete condition to the moment the
    client saw it;
  * collect-and-analyse time: from the client seeing Complete to results.json on disk;
and the time `python3 rl_batch_demo.py --help` takes, beside a bare interpreter's start.

Standard library only:  python3 bench/bench.py [--sizes 10,100,1000]
Nothing here is a cluster measurement; the fake runs every episode on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rl_batch_demo  # noqa: E402
from tests.fakecluster import FakeCluster  # noqa: E402

# The fake runs every episode as local processes: 1,000 at once would only measure this machine's
# process table. The client's work does not depend on parallelism.
MAX_PARALLEL_EPISODES = 100


def time_help(repeats: int = 15) -> Dict[str, float]:
    """Median wall time of `--help`, and of an interpreter that does nothing, for scale."""

    def median_of(argv: List[str]) -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    return {
        "help_seconds": median_of([sys.executable, str(ROOT / "rl_batch_demo.py"), "--help"]),
        "bare_interpreter_seconds": median_of([sys.executable, "-c", "pass"]),
    }


def run_once(count: int, scratch: Path) -> Dict[str, Any]:
    cluster = FakeCluster(scratch / f"cluster-{count}")
    try:
        output = scratch / f"run-{count}"
        parallelism = min(count, MAX_PARALLEL_EPISODES)
        argv = [
            "run",
            "--count",
            str(count),
            "--parallelism",
            str(parallelism),
            "--output",
            str(output),
            "--quiet",
            "--timeout",
            "3600",
        ]
        if count > rl_batch_demo.MAX_COUNT:
            argv.append("--allow-large")
        cpu_before = time.process_time()
        messages = io.StringIO()
        with (
            mock.patch.dict(os.environ, cluster.env(), clear=True),
            contextlib.redirect_stdout(messages),
            contextlib.redirect_stderr(messages),
        ):
            exit_code = rl_batch_demo.main(argv)
        cpu_seconds = time.process_time() - cpu_before
        if exit_code != 0:
            raise SystemExit(f"run of {count} episodes failed with exit code {exit_code}:\n{messages.getvalue()}")
        results = json.loads((output / "results.json").read_text())
        written_at = (output / "results.json").stat().st_mtime
        completed_at = cluster.job_completed_at(results["namespace"], "rollout")
        return {
            "episodes": count,
            "parallelism": parallelism,
            "kubectl_processes": len(cluster.calls()),
            "client_cpu_seconds": cpu_seconds,
            "watch_latency_seconds": results["client_observed_complete_at"] - completed_at,
            "complete_to_results_seconds": written_at - results["client_observed_complete_at"],
            "client_job_complete_seconds": results["client_job_complete_seconds"],
        }
    finally:
        cluster.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,1000", help="comma-separated episode counts")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    help_figures = time_help()
    print(
        f"--help: {help_figures['help_seconds'] * 1000:.0f} ms (bare interpreter: "
        f"{help_figures['bare_interpreter_seconds'] * 1000:.0f} ms) on {sys.version.split()[0]}"
    )
    print()
    header = (
        "episodes",
        "kubectl processes",
        "client CPU s",
        "watch latency s",
        "Complete->results s",
        "client wait s",
    )
    print("  ".join(f"{column:>19}" for column in header))
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as scratch:
        for size in sizes:
            figures = run_once(size, Path(scratch))
            print(
                "  ".join(
                    f"{value:>19}" if isinstance(value, int) else f"{value:>19.3f}"
                    for value in (
                        figures["episodes"],
                        figures["kubectl_processes"],
                        figures["client_cpu_seconds"],
                        figures["watch_latency_seconds"],
                        figures["complete_to_results_seconds"],
                        figures["client_job_complete_seconds"],
                    )
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
