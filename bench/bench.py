#!/usr/bin/env python3
"""Client-side figures of rl_batch_demo.py, measured against the test fake (a simulation).

Prints, for N = 10 and 100 episodes run end to end against the fake (change with --sizes):
  * kubectl processes started by one `run` (and, for 10 episodes, with and without --kubelet-metrics);
  * the client's own CPU seconds (this process only: the fake kubectl and the episodes are
    separate processes and are not counted);
  * watch latency: from the moment the fake wrote the Job's Complete condition to the moment the
    client saw it;
  * collect-and-analyse time: from the client seeing Complete to results.json on disk;
then the client's analysis alone (no kubectl) for 10, 100 and 1000 episodes (--analyse), which
isolates the client's share of a large run (end to end, 1,000 episodes against the fake take about
two minutes, most of it running the episodes on this machine); and the time
`python3 rl_batch_demo.py --help` takes, beside a bare interpreter's start.

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
from typing import Any, Dict, List, Optional, Tuple
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


def run_once(count: int, scratch: Path, kubelet_metrics: bool = False, tag: str = "") -> Dict[str, Any]:
    # The fake's Job controller gives up after 10 minutes by default; 1,000 episodes take longer.
    os.environ.setdefault("FAKE_KUBECTL_CONTROLLER_MAX_SECONDS", "7200")
    tag = f"{count}{tag}"
    cluster = FakeCluster(scratch / f"cluster-{tag}")
    try:
        output = scratch / f"run-{tag}"
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
        if kubelet_metrics:
            argv.append("--kubelet-metrics")
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


def synthetic_listing(count: int, scratch: Path) -> Tuple[str, Dict[str, Any]]:
    """What `kubectl get pods,events -o json` prints for a finished Job of `count` episodes:
    one real episode (the embedded worker, run here) cloned with shifted times."""
    workspace = scratch / f"workspace-{count}"
    workspace.mkdir()
    message_file = scratch / f"message-{count}"
    env = dict(
        os.environ, EPISODE_ID="template", RL_DEMO_WORKSPACE=str(workspace), RL_DEMO_TERMINATION_LOG=str(message_file)
    )
    script = scratch / "episode.py"
    script.write_text(rl_batch_demo.WORKER_SOURCE)
    subprocess.run([sys.executable, "-B", str(script)], env=env, check=True, capture_output=True)
    ready, reward = rl_batch_demo.parse_events(message_file.read_text())
    created = float(int(ready["at"])) - 2
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reward["at"] + 1))
    job = {"kind": "Job", "metadata": {"name": "rollout", "uid": "job-uid", "creationTimestamp": stamp}}
    items: List[Dict[str, Any]] = []
    for index in range(count):
        name = f"rollout-{index:05d}"
        events = [dict(ready, episode_id=name), dict(reward, episode_id=name)]
        message = "".join(json.dumps(event, sort_keys=True) + "\n" for event in events)
        items.append(
            {
                "kind": "Pod",
                "metadata": {"name": name, "creationTimestamp": stamp, "labels": {rl_batch_demo.UID_LABEL: "job-uid"}},
                "spec": {"nodeName": f"node-{index % 4}", "overhead": {"cpu": "250m", "memory": "768Mi"}},
                "status": {
                    "phase": "Succeeded",
                    "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp}],
                    "containerStatuses": [
                        {
                            "name": "episode",
                            "imageID": "docker.io/library/python@sha256:0",
                            "restartCount": 0,
                            "state": {
                                "terminated": {
                                    "exitCode": 0,
                                    "startedAt": stamp,
                                    "finishedAt": finished,
                                    "message": message,
                                }
                            },
                        }
                    ],
                },
            }
        )
        items.append(
            {
                "kind": "Event",
                "metadata": {"name": f"{name}.1", "creationTimestamp": stamp},
                "type": "Normal",
                "reason": "Started",
                "involvedObject": {"kind": "Pod", "name": name},
                "message": "Started container episode",
            }
        )
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), job


def analyse_only(count: int, scratch: Path) -> Dict[str, float]:
    """The client's work between seeing Complete and having results.json, without kubectl:
    parse the listing, save diagnostics, validate every episode (the same `analyse_round` as
    `run`), write results and timeline."""
    listing, job = synthetic_listing(count, scratch)
    output = scratch / f"analyse-{count}"
    output.mkdir()
    args = rl_batch_demo.build_parser().parse_args(
        ["run", "--output", str(output), "--count", str(count), "--allow-large", "--quiet"]
    )
    settings = rl_batch_demo.RunSettings.from_args(args)
    observation = rl_batch_demo.RoundObservation(job, "Complete", time.time(), time.monotonic())
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    pods, events = rl_batch_demo.split_pods_and_events(rl_batch_demo.parse_json_documents(listing), job)
    rl_batch_demo.write_json(output / "pods.json", rl_batch_demo.pod_list(pods))
    rl_batch_demo.write_atomic(output / "events.txt", rl_batch_demo.render_events_text(events))
    logs: Dict[str, Optional[rl_batch_demo.PodLog]] = {}
    if count <= rl_batch_demo.LOG_CROSSCHECK_LIMIT:  # small runs read the logs too; they match the messages
        logs = {
            pod["metadata"]["name"]: rl_batch_demo.PodLog(
                rl_batch_demo.parse_events(rl_batch_demo.termination_message(pod))
            )
            for pod in pods
        }
    collected = rl_batch_demo.RoundCollected(
        round_number=1,
        job_name=job["metadata"]["name"],
        job=job,
        observation=observation,
        pods=pods,
        logs=logs,
        log_errors={},
        count=count,
        round_dir=output,
        submitted_wall=time.time() - 1.0,
        submitted_monotonic=time.monotonic() - 1.0,
    )
    rows, figures = rl_batch_demo.analyse_round(collected, "ns/rollout")
    results = rl_batch_demo.assemble_results(settings, "c", "ns", "r", rows, [figures])
    with contextlib.redirect_stdout(io.StringIO()):
        rl_batch_demo.publish(results, settings)
    return {"cpu": time.process_time() - cpu_before, "wall": time.perf_counter() - wall_before}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100", help="episode counts run end to end against the fake")
    parser.add_argument("--analyse", default="10,100,1000", help="episode counts for the analysis-only figure")
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
        print()
        plain = run_once(10, Path(scratch), tag="-plain")
        flagged = run_once(10, Path(scratch), kubelet_metrics=True, tag="-kubelet")
        print(
            f"kubectl processes of a 10-episode run: {plain['kubectl_processes']} without --kubelet-metrics, "
            f"{flagged['kubectl_processes']} with it (one `get nodes`, then one `get --raw` per eligible node "
            "before and per episode node after)"
        )
        print()
        print("analysis only (parse the pod listing, save diagnostics, validate, write results and timeline):")
        for size in (int(size) for size in args.analyse.split(",")):
            timing = analyse_only(size, Path(scratch))
            print(f"{size:>19}  episodes: {timing['cpu']:.3f} s client CPU, {timing['wall']:.3f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
