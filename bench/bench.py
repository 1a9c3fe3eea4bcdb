#!/usr/bin/env python3
"""Client-side figures of rl_batch_demo.py, measured against the test fake (a simulation).

Prints, for N = 10 and 100 episodes run end to end against the fake (change with --sizes):
  * kubectl processes started by one `run` (and, for 10 episodes, with and without --kubelet-metrics);
  * the client's own CPU seconds (this process only: the fake kubectl and the episodes are
    separate processes and are not counted);
  * watch latency: from the moment the fake wrote the job controller's decision (SuccessCriteriaMet,
    just before Complete) to the moment the client saw it (the guide's script: Complete, by its poll);
  * collect-and-analyse time: from the client seeing Complete to results.json on disk;
  * first reward: from the first pod's end (as the fake recorded it) to its line of rewards.jsonl,
    and the run's client_first_reward_seconds (Job create -> first reward known);
then the client's analysis alone (no kubectl) for 10, 100 and 1000 episodes (--analyse), and the
cost of writing their rewards as their pods end (validation from the termination message, one
append and fsync per line: it happens while the run waits), which
isolates the client's share of a large run (end to end, 1,000 episodes against the fake take about
two minutes, most of it running the episodes on this machine); and the time
`python3 rl_batch_demo.py --help` takes, beside a bare interpreter's start; the kubectl process
count of a 10-episode run against its budget; and the client's peak memory reading a 1 GB log
(--no-memory skips it).

With --guide PATH (the guide's own script, a restored copy kept outside this repository), it also
runs, alternately, R repetitions (--repeats, default 5) of `rl_batch_demo.py run --count 10` and of
the guide's `PATH run --count 10`, each a subprocess on a fresh fake cluster, and prints both tools'
wall times (start -> exit, start -> results.json), their ratio, kubectl process counts, which calls
ran concurrently, how many ran in sequence before the Job create, and Job Complete seen ->
results.json. `--only real-kubectl` runs the same side by side through the real kubectl on PATH,
its discovery cache cold each run (a fresh HOME, as on a fresh CI runner), against the fake
cluster behind an API server on 127.0.0.1 (tests/apicluster.py), the fake's controller and pods
at the lowest CPU priority (on a cluster they run on other machines, not on the client's cores).

Standard library only:  python3 bench/bench.py [--sizes 10,100,1000] [--guide PATH [--repeats R]]
Nothing here is a cluster measurement; the fake runs every episode on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rl_batch_demo  # noqa: E402
from tests.apicluster import ApiCluster  # noqa: E402
from tests.fakecluster import FakeCluster  # noqa: E402
from tests.recordingserver import OPENAPI_V2_PROTOBUF, Answer, RecordingServer  # noqa: E402

# The fake runs every episode as local processes: 1,000 at once would only measure this machine's
# process table. The client's work does not depend on parallelism.
MAX_PARALLEL_EPISODES = 100
PROCESS_BUDGET = 10  # kubectl processes of a 10-episode run (docs/call-plan.md)
GUIDE_COUNT = 10
EXTRA_SEED: List[Optional[int]] = [1]  # --only real-kubectl: the seed of the pairs' extra episode seconds
PODS_CPUS: List[Optional[Set[int]]] = [None]  # --pods-core: the fake's controller and pods on a core of their own
PODS_NICED = [True]  # --only real-kubectl: the fake's controller and pods at nice 19 (--pods-at-normal-priority)
CLIENT_CPU: List[Optional[int]] = [None]  # --split-cores: the client's core (the cluster gets the others)
LOG_BYTES = 10**9  # "1 GB" of log in the memory figure


def time_help(repeats: int = 15) -> Dict[str, float]:
    """Median wall time of `--help`, and of an interpreter that does nothing, for scale; and of
    `python3 -m rl_batch_demo --help` from a copy whose bytecode is cached, as `pip install .`
    leaves it (pip compiles what it installs): Python never caches a script run by its path, so
    `python3 rl_batch_demo.py` compiles the whole file each time."""

    def median_of(argv: List[str], cwd: Optional[str] = None) -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True, cwd=cwd)
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    with tempfile.TemporaryDirectory(prefix="rl-bench-help-") as installed:
        copy = Path(installed) / "rl_batch_demo.py"
        shutil.copyfile(ROOT / "rl_batch_demo.py", copy)
        subprocess.run([sys.executable, "-m", "py_compile", str(copy)], check=True)
        # -m finds it in the working directory, as an installed module on sys.path
        installed_seconds = median_of([sys.executable, "-m", "rl_batch_demo", "--help"], cwd=installed)
    return {
        "help_seconds": median_of([sys.executable, str(ROOT / "rl_batch_demo.py"), "--help"]),
        "installed_help_seconds": installed_seconds,
        "bare_interpreter_seconds": median_of([sys.executable, "-c", "pass"]),
    }


def run_once(
    count: int,
    scratch: Path,
    kubelet_metrics: bool = False,
    tag: str = "",
    stand_in: bool = False,
    no_messages: bool = False,
    extra: Tuple[str, ...] = (),
    cluster_faults: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """One run against a fresh fake. stand_in: each pod runs the fake's stand-in worker (the two
    events and the built-in worker's two artifacts, no tests), so 1,000 episodes take about two
    minutes and measure the client alone. cluster_faults: more of the fake's faults.
    no_messages: every pod's termination message is empty (a runtime that never shares the file),
    so every log is read."""
    # The fake's Job controller gives up after 10 minutes by default; 1,000 episodes take longer.
    os.environ.setdefault("FAKE_KUBECTL_CONTROLLER_MAX_SECONDS", "7200")
    tag = f"{count}{tag}"
    # the stand-in sends the built-in worker's artifacts too, so every log is read as in a default run
    faults: Dict[str, Any] = {"stand_in_worker": True, "stand_in_artifacts": True} if stand_in else {}
    faults.update(cluster_faults or {})
    if no_messages:
        faults["episode"] = {str(index): "no_message" for index in range(count)}
    cluster = FakeCluster(scratch / f"cluster-{tag}", faults=faults or None)
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
        argv += extra
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
        results = rl_batch_demo.load_results(output)  # checked against the schema, as compare reads it
        written_at = (output / "results.json").stat().st_mtime
        decided_at = cluster.job_decided_at(results["namespace"], "rollout")  # the tool acts on the decision
        ended = cluster.pod_records(results["namespace"], "rollout")
        first_line = rl_batch_demo.read_reward_lines(output / rl_batch_demo.REWARDS_FILE)[0]
        return {
            "episodes": count,
            "parallelism": parallelism,
            "kubectl_processes": len(cluster.calls()),
            "client_cpu_seconds": cpu_seconds,
            "watch_latency_seconds": results["client_observed_complete_at"] - decided_at,
            "complete_to_results_seconds": written_at - results["client_observed_complete_at"],
            "client_job_complete_seconds": results["client_job_complete_seconds"],
            "first_end_to_line_seconds": first_line["known_at"] - min(r["terminated_at"] for r in ended.values()),
            "client_first_reward_seconds": results["client_first_reward_seconds"],
            "log_reads": sum(1 for argv in cluster.calls() if "logs" in argv),
            "pods_without_termination_message": results["pods_without_termination_message"],
        }
    finally:
        cluster.close()


EMPTY_MESSAGE_COUNT = 200  # issue 19's target: Job Complete -> results.json in at most 15 s
EMPTY_MESSAGE_TARGET_SECONDS = 15.0


def print_empty_messages(scratch: Path) -> None:
    """200 episodes whose termination messages are empty (a runtime that never shares the
    file), so every log is read: on a cluster before Kubernetes 1.28 (an Indexed Job's pods
    without the index label) one `logs POD` each, 8 at once; from 1.28 one `logs -l` per 10
    completion indexes (every measured Job is Indexed)."""
    print(
        f"{EMPTY_MESSAGE_COUNT} episodes without termination messages (stand-in worker, every log read; "
        f"target Complete->results <= {EMPTY_MESSAGE_TARGET_SECONDS:g} s):"
    )
    for label, faults in (
        ("before 1.28 (no index label): one logs POD each", {"no_pod_index_label": True}),
        ("1.28+: logs -l per 10 indexes", {}),
    ):
        figures = run_once(
            EMPTY_MESSAGE_COUNT,
            scratch,
            tag=f"-empty{len(faults)}",
            stand_in=True,
            no_messages=True,
            cluster_faults=faults,
        )
        verdict = "within" if figures["complete_to_results_seconds"] <= EMPTY_MESSAGE_TARGET_SECONDS else "OVER"
        print(
            f"  {label}: Complete->results {figures['complete_to_results_seconds']:.2f} s ({verdict} the target), "
            f"{figures['log_reads']} log reads, {figures['kubectl_processes']} kubectl processes in all, "
            f"{figures['pods_without_termination_message']} pods without a termination message in results.json"
        )


def synthetic_listing(count: int, scratch: Path) -> Tuple[str, Dict[str, Any], str]:
    """What `kubectl get pods,events -o json` prints for a finished Job of `count` episodes:
    one real episode (the embedded worker, run here) cloned with shifted times; and that
    episode's log (its events and its artifacts' frames), with EPISODE in place of its id."""
    workspace = scratch / f"workspace-{count}"
    workspace.mkdir()
    message_file = scratch / f"message-{count}"
    env = dict(
        os.environ, EPISODE_ID="template", RL_DEMO_WORKSPACE=str(workspace), RL_DEMO_TERMINATION_LOG=str(message_file)
    )
    script = scratch / "episode.py"
    script.write_text(rl_batch_demo.WORKER_SOURCE)
    episode = subprocess.run([sys.executable, "-B", str(script)], env=env, check=True, capture_output=True)
    log = episode.stdout.decode("utf-8").replace('"episode_id": "template"', '"episode_id": "EPISODE"')
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
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), job, log


def analyse_only(count: int, scratch: Path) -> Dict[str, float]:
    """The client's work between seeing Complete and having results.json, without kubectl:
    parse the listing, save diagnostics, validate every episode (the same `analyse_round` as
    `run`), write results and timeline."""
    listing, job, log = synthetic_listing(count, scratch)
    output = scratch / f"analyse-{count}"
    output.mkdir()
    args = rl_batch_demo.build_parser().parse_args(
        ["run", "--output", str(output), "--count", str(count), "--allow-large", "--quiet"]
    )
    settings = rl_batch_demo.run_settings(args)
    observation = rl_batch_demo.RoundObservation(job, "Complete", time.time(), time.monotonic())
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    pods, events = rl_batch_demo.split_pods_and_events(rl_batch_demo.parse_json_documents(listing), job)
    rl_batch_demo.write_json(output / "pods.json", rl_batch_demo.pod_list(pods))
    rl_batch_demo.write_atomic(output / "events.txt", rl_batch_demo.render_events_text(events))
    # every log, as `run` reads them: the built-in worker's reward names artifacts, which only
    # the log carries (and small runs cross-check the messages against the logs)
    logs: Dict[str, Optional[rl_batch_demo.PodLog]] = {}
    budgets = rl_batch_demo.LogBudgets(artifacts=output / "artifacts")
    for pod in pods:
        name = pod["metadata"]["name"]
        text = log.replace('"episode_id": "EPISODE"', f'"episode_id": "{name}"')
        sink = rl_batch_demo.ArtifactSink(output / "artifacts", name, budgets)
        for line in text.encode("utf-8").splitlines():
            if line.startswith(rl_batch_demo.ARTIFACT_FRAME_TAG):
                sink.frame(line)
        logs[name] = rl_batch_demo.scan_text(text)
        sink.finish(logs[name])
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


class ArtifactsArrived:
    """The round's LogFollower as stream_only needs it: every artifact a pod's reward event lists
    already saved (in `run` a line waits for its files; here the figure is the client's own work
    once they are there: the validation and the append)."""

    def __init__(self, pods: List[Dict[str, Any]]) -> None:
        self.listed: Dict[str, Dict[str, Any]] = {}
        for pod in pods:
            message = pod["status"]["containerStatuses"][0]["state"]["terminated"].get("message") or ""
            reward = rl_batch_demo.parse_events(message)[1]
            self.listed[pod["metadata"]["name"]] = {entry["name"]: entry for entry in reward.get("artifacts") or []}

    def artifacts_of(self, name: str) -> Tuple[Dict[str, Any], str, bool]:
        return self.listed.get(name, {}), "", False


def stream_only(count: int, scratch: Path) -> Dict[str, float]:
    """The client's work while it waits, as each of `count` terminated pods arrives from the pod
    watch: validate it from its termination message and append its line to rewards.jsonl (one
    write and one fsync each), as RoundRewards does in `run`."""
    (scratch / "stream").mkdir(exist_ok=True)
    listing, job, _ = synthetic_listing(count, scratch / "stream")
    output = scratch / f"stream-{count}"
    output.mkdir()
    args = rl_batch_demo.build_parser().parse_args(
        ["run", "--output", str(output), "--count", str(count), "--allow-large", "--quiet"]
    )
    settings = rl_batch_demo.run_settings(args)
    pods, _ = rl_batch_demo.split_pods_and_events(rl_batch_demo.parse_json_documents(listing), job)
    writer = rl_batch_demo.RewardsWriter(output / rl_batch_demo.REWARDS_FILE)
    writer.open()
    rewards = rl_batch_demo.RoundRewards(writer, settings, 1, output)
    rewards.follower = ArtifactsArrived(pods)  # type: ignore[assignment]
    rewards.job_created(job, time.monotonic())
    for pod in pods:  # each pod running first, so that every place in creation order is settled
        rewards.pod_seen(dict(pod, status={"phase": "Running"}))
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    for pod in pods:  # then each ends, one watch event at a time
        rewards.pod_seen(pod)
    cpu, wall = time.process_time() - cpu_before, time.perf_counter() - wall_before
    writer.close()
    lines = rl_batch_demo.read_reward_lines(output / rl_batch_demo.REWARDS_FILE)
    if len(lines) != count:
        raise SystemExit(f"streaming {count} pods wrote {len(lines)} lines")
    return {"cpu": cpu, "wall": wall}


# --------------------------------------------------------------------------- 1 GB of log

LOG_GENERATOR = r"""
import json, sys, time
out = sys.stdout.buffer
prefix = b"[pod/rollout-a/episode] "
total, mode = int(sys.argv[-2]), sys.argv[-1]  # (kubectl's arguments come first; ignored)
if mode == "lines":
    block = (prefix + b"x" * 4096 + b"\n") * 256
    for _ in range(total // len(block) + 1):
        out.write(block)
else:  # one line, no newline in it
    out.write(prefix)
    chunk = b"y" * (1 << 20)
    for _ in range(total // len(chunk) + 1):
        out.write(chunk)
    out.write(b"\n")
now = time.time()
for event in (
    {"event": "ready", "at": now, "episode_id": "rollout-a"},
    {"event": "reward", "at": now + 1, "episode_id": "rollout-a", "reward": 1, "baseline_exit": 1,
     "tests_exit": 0, "tests_output": "OK"},
):
    out.write(prefix + json.dumps(event).encode() + b"\n")
out.flush()
"""

MEMORY_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
root, executable, round_dir = sys.argv[1:4]
sys.path.insert(0, root)
import rl_batch_demo
kubectl = rl_batch_demo.Kubectl(executable, context=None, kubeconfig=None, process_timeout=600)
def status(field):
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field + ":"))
try:  # Linux: reset the peak resident set (VmHWM) to now, so the import's own peak is not counted
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    baseline = status("VmRSS")
    peak_of = lambda: status("VmHWM")
except (OSError, StopIteration, ValueError):  # elsewhere: an upper bound, the import's peak included
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_of = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
logs = rl_batch_demo.logs_by_selector(kubectl, "bench", "job-name=rollout", ["rollout-a"], Path(round_dir))
seconds = time.perf_counter() - started
peak = peak_of()
log = logs["rollout-a"]
print(json.dumps({"baseline_kib": baseline, "peak_kib": peak, "seconds": seconds,
                  "events": [e.get("event") for e in rl_batch_demo.logged_events(log)],
                  "error": log.error, "lines": log.lines,
                  "long_lines": log.long_lines, "saved_bytes": log.saved_bytes, "dropped_bytes": log.dropped_bytes,
                  "file_bytes": (Path(round_dir) / "rollout-a.log").stat().st_size}))
"""


def log_memory(mode: str, scratch: Path) -> Dict[str, Any]:
    """The client's peak RSS above its baseline while logs_by_selector reads 1 GB of log from a
    stand-in kubectl (a child process: ru_maxrss is per process, and this one holds the fake's data)."""
    work = scratch / f"memory-{mode}"
    work.mkdir()
    generator = work / "kubectl"
    generator.write_text(
        f"#!{sys.executable}\n"
        + LOG_GENERATOR.replace("sys.argv[-2]", str(LOG_BYTES)).replace("sys.argv[-1]", repr(mode))
    )
    generator.chmod(0o755)
    round_dir = work / "round"
    round_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(ROOT), str(generator), str(round_dir)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the memory child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


# A worker that prints what swells when parsed: 30 "progress" events, then `ready` and `reward`,
# each line just under the 64 KiB line limit and full of `[[]]` (about 30 times its bytes once
# parsed), 32 events in all, the most an episode may print; no termination message, so its log counts.
SWOLLEN_WORKER = r"""
import json, os, sys, time
first = time.time()
pad = ",".join(["[[]]"] * 10000)  # printed as "[[]], " each: a line of about 60 KB
def line(name, **fields):
    return json.dumps(dict(fields, event=name, at=time.time(), episode_id=os.environ["EPISODE_ID"]), sort_keys=True)
for step in range(30):
    print(line("progress", step=step, x=json.loads("[" + pad + "]")), flush=True)
print(line("ready", process_started_at=first, imports_done_at=first, x=json.loads("[" + pad + "]")), flush=True)
print(line("reward", reward=1.0, x=json.loads("[" + pad + "]")), flush=True)
"""
SWOLLEN_PODS = 20
MEMORY_TARGET_MB = 150

# The tool in a child process that reports its own peak resident set (ru_maxrss, this process
# only: kubectl and the episodes are other processes) when `run` ends.
PEAK_RUNNER = r"""
import json, resource, runpy, sys
script, report = sys.argv[1], sys.argv[2]
sys.argv = [script, *sys.argv[3:]]
code = 0
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as ended:
    code = ended.code
with open(report, "w") as stream:
    json.dump({"exit": code, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, stream)
"""


def worker_run(
    name: str, worker: str, count: int, scratch: Path, faults: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """`run --worker` of `count` episodes on a fresh fake, the tool in PEAK_RUNNER: its exit code,
    peak resident set (KiB), output directory and results (if any)."""
    work = scratch / name
    work.mkdir()
    (work / "worker.py").write_text(worker)
    cluster = FakeCluster(work / "cluster", faults=faults)
    try:
        output = work / "out"
        argv = ["run", "--count", str(count), "--parallelism", str(count), "--worker", str(work / "worker.py")]
        argv += ["--output", str(output), "--quiet", "--cleanup", "always"] + (["--allow-large"] if count > 20 else [])
        report = work / "peak.json"
        runner = [sys.executable, "-c", PEAK_RUNNER, str(ROOT / "rl_batch_demo.py"), str(report), *argv]
        proc = subprocess.run(runner, env=cluster.env(), capture_output=True, text=True, timeout=1800, check=False)
        figures = json.loads(report.read_text()) if report.exists() else {"exit": proc.returncode, "peak_kib": 0}
        figures["stderr"], figures["output"] = proc.stderr, output
        results = output / "results.json"
        figures["results"] = json.loads(results.read_text()) if results.exists() else None
        return figures
    finally:
        cluster.close()


def print_swollen_memory(scratch: Path) -> None:
    figures = worker_run("swollen", SWOLLEN_WORKER, SWOLLEN_PODS, scratch)
    peak = figures["peak_kib"] / 1024
    verdict = "within" if peak < MEMORY_TARGET_MB else "OVER"
    print(
        f"client peak memory, {SWOLLEN_PODS} pods each printing 32 events of 64 KiB of `[[]]` (run --worker, end to "
        f"end; the tool's own peak resident set, ru_maxrss): {peak:.0f} MB ({verdict} {MEMORY_TARGET_MB} MB), "
        f"exit {figures['exit']}"
    )


# A worker that prints about 9.5 MB between its `ready` and its `reward` (within the kubelet's
# 10 MiB log file, over a <pod>.log's 8 MiB) and leaves its termination message empty.
LOUD_WORKER = r"""
import json, os, sys, time
first = time.time()
def line(name, **fields):
    return json.dumps(dict(fields, event=name, at=time.time(), episode_id=os.environ["EPISODE_ID"]), sort_keys=True)
print(line("ready", process_started_at=first, imports_done_at=first), flush=True)
block = ("noise " * 170 + "\n") * 1000
for _ in range(9):
    sys.stdout.write(block)
print(line("reward", reward=1.0), flush=True)
"""
LOUD_PODS = 40


def print_disk_budget(scratch: Path) -> None:
    figures = worker_run("loud", LOUD_WORKER, LOUD_PODS, scratch)
    logs = sorted(figures["output"].glob("*.log"))
    saved = sum(path.stat().st_size for path in logs)
    with_events = sum(
        1 for path in logs if b'"event": "ready"' in path.read_bytes() and b'"event": "reward"' in path.read_bytes()
    )
    not_saved = (figures["results"] or {}).get("log_bytes_not_saved", 0)
    budget = rl_batch_demo.LOG_DIR_BUDGET / 2**20
    directory = sum(path.stat().st_size for path in figures["output"].rglob("*") if path.is_file())
    print(
        f"disk: {LOUD_PODS} pods printing {LOUD_PODS * 9.2:.0f} MB in all: {saved / 2**20:.1f} MiB of <pod>.log saved "
        f"(budget {budget:.0f} MiB for all written for pods, 8 MiB a pod), the output directory "
        f"{directory / 2**20:.1f} MiB in all, {not_saved / 1e6:.0f} MB counted, not saved; {with_events} of "
        f"{len(logs)} logs hold their ready and reward lines; exit {figures['exit']}"
    )


def print_memory(scratch: Path) -> None:
    print(
        f"client memory reading a {LOG_BYTES / 1e9:.0f} GB log (rl_batch_demo.logs_by_selector in a child process; "
        "its peak resident set during the read (VmHWM, reset just before it) over its resident set then):"
    )
    for mode, label in (("lines", "lines of 4 KiB"), ("one-line", "one line, no newline")):
        m = log_memory(mode, scratch)
        rise = (m["peak_kib"] - m["baseline_kib"]) / 1024
        print(
            f"  1 GB log ({label}): +{rise:.1f} MB peak RSS, {m['seconds']:.1f} s "
            f"(baseline {m['baseline_kib'] / 1024:.1f} MB; events found {m['events']}; "
            f"{m['long_lines']} over-long lines skipped; <pod>.log {m['file_bytes'] / 2**20:.1f} MiB, "
            f"{m['dropped_bytes'] / 1e6:.0f} MB counted, not saved)"
        )


# --------------------------------------------------------------------------- side by side with the guide


def steps(intervals: List[Tuple[float, float, str]]) -> List[List[Tuple[float, float, str]]]:
    """Calls grouped into sequential steps: calls whose [start, end] overlap share a step."""
    groups: List[List[Tuple[float, float, str]]] = []
    end = float("-inf")
    for item in sorted(intervals):
        if groups and item[0] < end:
            groups[-1].append(item)
            end = max(end, item[1])
        else:
            groups.append([item])
            end = item[1]
    return groups


def short(argv: List[str]) -> str:
    """A call's argv without the flags every call carries (context, timeouts, namespace)."""
    words: List[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--context", "--request-timeout", "-n", "--namespace", "--kubeconfig"):
            skip = True
        elif not word.startswith(("--context=", "--request-timeout=", "--namespace=", "--kubeconfig=", "--max-log")):
            words.append(word if len(word) <= 40 else word[:37] + "...")
    text = " ".join(words)
    return text if len(text) <= 90 else text[:87] + "..."


def timed(argv: List[str], env: Dict[str, str], cwd: Path, output: Path) -> Dict[str, Any]:
    started = time.time()
    # --split-cores: the client (the tool or the guide, and every kubectl it starts) on the first core
    client_cpu = {CLIENT_CPU[0]} if CLIENT_CPU[0] is not None else None
    proc = subprocess.run(
        argv,
        env=env,
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        preexec_fn=(lambda: os.sched_setaffinity(0, client_cpu)) if client_cpu else None,
    )
    ended = time.time()
    figures: Dict[str, Any] = {"exit": proc.returncode, "wall": ended - started, "stderr": proc.stderr}
    figures["exited_at"] = ended
    results = output / "results.json"
    if results.exists():
        figures["to_results"] = results.stat().st_mtime - started
        figures["results_mtime"] = results.stat().st_mtime
        figures["results"] = json.loads(results.read_text())
    return figures


@contextlib.contextmanager
def cluster_for(
    scratch: Path, name: str, real_kubectl: bool, episode_extra: float = 0.0
) -> Iterator[Tuple[FakeCluster, Dict[str, str], Any]]:
    """A fresh fake cluster, the environment a tool runs in against it, and (`real_kubectl`) the
    API server in front of it: the real kubectl on PATH (behind a wrapper that counts its
    processes) with an empty HOME, so kubectl's discovery cache is cold, as on a fresh CI runner;
    the fake's Job controller and pods then run at nice 19 (ApiCluster's pods_niced), so that what
    a cluster runs on its own machines leaves the client's two cores to the client. `episode_extra`:
    seconds each pod runs on after its worker ended (the fake's episode_seconds)."""
    faults = {"episode_seconds": episode_extra} if episode_extra else {}
    cluster = FakeCluster(scratch / f"{name}-cluster", faults=faults)
    try:
        if not real_kubectl:
            yield cluster, cluster.env(), None
            return
        kubectl = shutil.which("kubectl")
        assert kubectl is not None, "--only real-kubectl needs kubectl on PATH"
        folder = scratch / f"{name}-bin"
        folder.mkdir()
        processes = scratch / f"{name}-kubectl-processes"
        wrapper = folder / "kubectl"
        wrapper.write_text(f'#!/bin/sh\necho >> "{processes}"\nexec "{kubectl}" "$@"\n')
        wrapper.chmod(0o755)
        home = scratch / f"{name}-home"
        home.mkdir()
        with ApiCluster(cluster, pods_niced=PODS_NICED[0], pods_cpus=PODS_CPUS[0]) as server:
            env = {"PATH": f"{folder}{os.pathsep}{os.defpath}", "HOME": str(home), "LANG": "C.UTF-8"}
            env["KUBECONFIG"] = str(server.kubeconfig(scratch / f"{name}-bin"))
            yield cluster, env, server
    finally:
        cluster.close()


def process_count(scratch: Path, name: str) -> int:
    path = scratch / f"{name}-kubectl-processes"
    return len(path.read_text().splitlines()) if path.exists() else 0


def tool_run(scratch: Path, index: int, real_kubectl: bool = False, episode_extra: float = 0.0) -> Dict[str, Any]:
    with cluster_for(scratch, f"tool-{index}", real_kubectl, episode_extra) as (cluster, env, server):
        output = scratch / f"tool-{index}"
        argv = [sys.executable, str(ROOT / "rl_batch_demo.py"), "run", "--count", str(GUIDE_COUNT)]
        figures = timed([*argv, "--output", str(output), "--quiet"], env, scratch, output)
        figures["processes"] = process_count(scratch, f"tool-{index}") if server else len(cluster.calls())
        if figures["exit"] != 0 or "results" not in figures:
            return figures
        results = figures["results"]
        calls = json.loads((output / "kubectl-calls.json").read_text())
        figures["calls"] = calls
        job_create = max(sent(c) for c in calls if "create" in c["argv"])
        figures["before_job"] = [c for c in calls if sent(c) < job_create]
        figures["seen_to_results"] = figures["results_mtime"] - results["client_observed_complete_at"]
        decided_at = cluster.job_decided_at(results["namespace"], "rollout")  # SuccessCriteriaMet
        figures["watch_latency"] = results["client_observed_complete_at"] - decided_at
        figures["timeline"] = run_timeline(
            figures, calls, decided_at, cluster.pod_records(results["namespace"], "rollout")
        )
        figures["end_to_results"] = figures["timeline"]["results.json written"] - figures["timeline"]["last read ended"]
        figures["end_to_exit"] = figures["timeline"]["the tool exited"] - figures["timeline"]["last read ended"]
        figures["to_job_created"] = figures["timeline"]["Job created (its create answered)"]
        figures["pods_seconds"] = figures["timeline"]["last pod finished"] - figures["to_job_created"]
        if server is not None:
            figures["requests"] = len(server.taken())
        return figures


def run_timeline(
    figures: Dict[str, Any], calls: List[Dict[str, Any]], decided_at: float, pods: Dict[str, Dict[str, Any]]
) -> Dict[str, float]:
    """The run's own stamps, in seconds from its first kubectl call (client clock). The calls'
    `started` count from the tool's kubectl seam (monotonic); results.json's client_submitted_at
    is the wall clock just before the Job's create, whose record starts at the same moment, which
    puts the fake's wall stamps (the job controller's decision, each pod's end), the files' mtimes
    and the process's exit on the same axis."""
    results = figures["results"]
    job_create = max((c for c in calls if "create" in c["argv"]), key=sent)
    first = min(c["started"] for c in calls)
    wall_zero = results["client_submitted_at"] - (sent(job_create) - first)  # the first call, wall clock
    decided = decided_at - wall_zero
    reads = [c for c in calls if not c.get("watch") and c["started"] - first >= decided - 0.5]
    return {
        "Job created (its create answered)": job_create["started"] + job_create["seconds"] - first,
        "last pod finished": max(float(r["terminated_at"]) for r in pods.values()) - wall_zero,
        "the job controller decided": decided,
        "client saw Complete": results["client_observed_complete_at"] - wall_zero,
        "last read ended": max(c["started"] + c["seconds"] - first for c in reads) if reads else decided,
        "results.json written": figures["results_mtime"] - wall_zero,
        "the tool exited": figures["exited_at"] - wall_zero,
    }


def print_timeline(title: str, figures: Dict[str, Any]) -> None:
    """One run's timeline as the issue's table: each kubectl call's start and length, then the stamps."""
    calls = figures["calls"]
    first = min(c["started"] for c in calls)
    print(f"  {title}: seconds from the first kubectl call (client clock)")
    print(f"    {'from':>6} {'to':>6} {'length':>6}  what")
    for c in sorted(calls, key=lambda c: c["started"]):
        start = c["started"] - first
        if "input_at" in c:  # a prepared call (Kubectl.prepare): its process first, then its input
            waited = c["input_at"] - c["started"]
            print(f"    {start:6.3f} {start + waited:6.3f} {waited:6.3f}  prepared, waiting for its input:")
            start = c["input_at"] - first
        kind = "watch " if c.get("watch") else ""
        end = c["started"] + c["seconds"] - first
        print(f"    {start:6.3f} {end:6.3f} {end - start:6.3f}  {kind}{short(c['argv'])}")
    for label, stamp in sorted(figures["timeline"].items(), key=lambda item: item[1]):
        print(f"    {stamp:6.3f} {'':>6} {'':>6}  {label}")


def guide_run(
    guide: Path, scratch: Path, index: int, real_kubectl: bool = False, episode_extra: float = 0.0
) -> Dict[str, Any]:
    with cluster_for(scratch, f"guide-{index}", real_kubectl, episode_extra) as (cluster, env, server):
        output = scratch / f"guide-{index}"
        argv = [sys.executable, str(guide), "run", "--count", str(GUIDE_COUNT), "--output", str(output)]
        figures = timed(argv, env, scratch, output)
        if server is not None:
            return guide_figures_from_requests(figures, cluster, server, process_count(scratch, f"guide-{index}"))
        records = cluster.call_records()
        figures["processes"] = len(records)
        if figures["exit"] != 0 or "results" not in figures:
            return figures
        origin = records[0]["start"]
        figures["calls"] = [
            {"argv": r["argv"], "started": r["start"] - origin, "seconds": (r["end"] or r["start"]) - r["start"]}
            for r in records
        ]
        job_create = max(r["start"] for r in records if '"kind": "Job"' in (r["stdin"] or ""))
        figures["before_job"] = [c for c, r in zip(figures["calls"], records) if r["start"] < job_create]
        created = next(r for r in records if r["start"] == job_create)
        figures["to_job_created"] = (created["end"] or created["start"]) - origin  # as the fake recorded it
        completed_at = cluster.job_completed_at(figures["results"]["namespace"], "rollout")
        pods = cluster.pod_records(figures["results"]["namespace"], "rollout")
        last_pod = max(float(r["terminated_at"]) for r in pods.values())  # the fake's wall clock, as `start`
        figures["pods_seconds"] = last_pod - (created["end"] or created["start"])
        polls = [r for r in records if r["argv"][-4:-2] == ["job", "rollout"] and r["start"] >= completed_at]
        if polls:  # the first poll that started after Complete saw it when it returned
            figures["watch_latency"] = polls[0]["end"] - completed_at
            figures["seen_to_results"] = figures["results_mtime"] - polls[0]["end"]
        return figures


def guide_figures_from_requests(
    figures: Dict[str, Any], cluster: FakeCluster, server: Any, processes: int
) -> Dict[str, Any]:
    """The guide's figures through the real kubectl, from the API server's records (the server's
    monotonic clock, put on the wall clock of the fake's stamps by one reading of both): the Job's
    create answered, the first poll of the Job that arrived after Complete, and the last pod's end,
    in seconds from the guide's first request."""
    figures["processes"] = processes
    figures["requests"] = len(server.taken())
    if figures["exit"] != 0 or "results" not in figures:
        return figures
    to_wall = time.time() - time.monotonic()
    requests = server.taken()
    origin = requests[0].arrived + to_wall
    namespace = figures["results"]["namespace"]
    [created] = [r for r in requests if r.method == "POST" and r.path.endswith("/jobs")]
    job_created = (created.answered or created.arrived) + to_wall
    figures["to_job_created"] = job_created - origin
    pods = cluster.pod_records(namespace, "rollout")
    figures["pods_seconds"] = max(float(r["terminated_at"]) for r in pods.values()) - job_created
    completed_at = cluster.job_completed_at(namespace, "rollout")
    job_path = f"/apis/batch/v1/namespaces/{namespace}/jobs/rollout"
    polls = [r for r in requests if r.path == job_path and r.arrived + to_wall >= completed_at]
    if polls:
        seen = (polls[0].answered or polls[0].arrived) + to_wall
        figures["watch_latency"] = seen - completed_at
        figures["seen_to_results"] = figures["results_mtime"] - seen
    return figures


def sent(call: Dict[str, Any]) -> float:
    """When a call was sent: its start, or a prepared call's input (Kubectl.prepare)."""
    return float(call.get("input_at", call["started"]))


def describe_calls(title: str, calls: List[Dict[str, Any]]) -> None:
    print(f"  {title}: each kubectl process (start s, seconds, step; calls sharing a step ran concurrently)")
    plain = [(sent(c), c["started"] + c["seconds"], short(c["argv"])) for c in calls if not c.get("watch")]
    for number, group in enumerate(steps(plain), 1):
        for started, ended, text in group:
            mark = " (concurrent)" if len(group) > 1 else ""
            print(f"    {started:7.3f} {ended - started:7.3f}  step {number:>2}{mark:<13} {text}")
    for c in calls:
        if c.get("watch"):
            print(f"    {c['started']:7.3f} {c['seconds']:7.3f}  watch, alongside  {short(c['argv'])}")


def side_by_side(guide: Path, repeats: int, scratch: Path, real_kubectl: bool = False) -> None:
    how = (
        "the real kubectl on PATH, a cold discovery cache each run, against an API server in front of a fresh "
        "fake cluster (tests/apicluster.py), its controller and pods "
        + ("at nice 19" if PODS_NICED[0] else "at the client's priority")
        + (f" on core {sorted(PODS_CPUS[0])[0]}, the client and the server on the others" if PODS_CPUS[0] else "")
        if real_kubectl
        else "the fake kubectl on a fresh fake cluster"
    )
    print(f"side by side, {GUIDE_COUNT} episodes: {repeats} repetitions of each, alternating, each a subprocess: {how}")
    tool: List[Dict[str, Any]] = []
    theirs: List[Dict[str, Any]] = []
    # With the real kubectl, each pair's episodes run on for the same extra time, drawn evenly from
    # [0, 1) s: the guide's one-second poll then meets the Job's end at an even phase, as on a
    # cluster whose episodes take any time, not at the one this machine's pods happen to take.
    phases = random.Random(EXTRA_SEED[0])
    extras = [phases.random() if real_kubectl and EXTRA_SEED[0] is not None else 0.0 for _ in range(repeats)]
    if any(extras):
        listed = ", ".join(f"{extra:.2f}" for extra in extras)
        print(f"  each pair's extra episode seconds (the fake's episode_seconds): {listed}")
    for index in range(repeats):
        tool.append(tool_run(scratch, index, real_kubectl, extras[index]))
        theirs.append(guide_run(guide, scratch, index, real_kubectl, extras[index]))
    for name, runs in (("rl_batch_demo", tool), ("the guide's script", theirs)):
        failed = [r for r in runs if r["exit"] != 0 or "results" not in r]
        if failed:
            tail = failed[0]["stderr"].strip().splitlines()[-3:]
            print(f"  {name}: {len(failed)} of {len(runs)} runs failed (exit {failed[0]['exit']}): " + " | ".join(tail))
    good_tool = [r for r in tool if "results" in r and r["exit"] == 0]
    good_guide = [r for r in theirs if "results" in r and r["exit"] == 0]

    def figure(runs: List[Dict[str, Any]], key: str, how: Any) -> Optional[float]:
        values = [r[key] for r in runs if key in r]
        return how(values) if values else None

    def cell(value: Optional[float], unit: str = "s") -> str:
        if value is None:
            return "n/a"
        return f"{value:.0f}" if unit == "" else f"{value:.3f}"

    rows = [
        ("start -> exit, median s", "wall", statistics.median, "s"),
        ("start -> exit, min s", "wall", min, "s"),
        ("start -> results.json, median s", "to_results", statistics.median, "s"),
        ("start -> results.json, min s", "to_results", min, "s"),
        ("first kubectl call -> Job created, median s", "to_job_created", statistics.median, "s"),
        # the pods' own time: on the fake, the episodes of both tools share this machine's cores
        ("Job created -> last pod finished, median s", "pods_seconds", statistics.median, "s"),
        ("Job decided/Complete -> seen, median s", "watch_latency", statistics.median, "s"),
        ("Complete seen -> results.json, median s", "seen_to_results", statistics.median, "s"),
        ("kubectl processes, median", "processes", statistics.median, ""),
        ("API requests, median", "requests", statistics.median, ""),
        ("last read -> results.json, median s", "end_to_results", statistics.median, "s"),
        ("last read -> exit, median s", "end_to_exit", statistics.median, "s"),
    ]
    print(f"  {'':<42}{'rl_batch_demo':>15}{'guide script':>15}{'ratio':>9}")
    for label, key, how, unit in rows:
        a, b = figure(good_tool, key, how), figure(good_guide, key, how)
        ratio = f"{a / b:.2f}" if a is not None and b else "n/a"
        print(f"  {label:<42}{cell(a, unit):>15}{cell(b, unit):>15}{ratio:>9}")
    for name, runs in (("rl_batch_demo", good_tool), ("guide script", good_guide)):
        if runs and "before_job" in runs[-1]:
            before = runs[-1]["before_job"]
            plain = [(sent(c), c["started"] + c["seconds"], "") for c in before if not c.get("watch")]
            print(
                f"  {name}: {len(before)} kubectl processes before the Job create, "
                f"in {len(steps(plain))} sequential steps"
            )
    if good_tool:
        median_run = sorted(good_tool, key=lambda r: r["wall"])[len(good_tool) // 2]
        print_timeline("rl_batch_demo, the run of median wall time", median_run)
        describe_calls("rl_batch_demo, last run (its kubectl-calls.json)", good_tool[-1]["calls"])
    if good_guide and "calls" in good_guide[-1]:
        calls = good_guide[-1]["calls"]
        polls = sum(1 for c in calls if c["argv"][-4:-2] == ["job", "rollout"])
        print(f"  guide script, last run: {len(calls)} kubectl processes, {polls} of them Job polls (every 1 s)")
        describe_calls(
            "guide script, last run (the fake's call records)",
            [c for c in calls if c["argv"][-4:-2] != ["job", "rollout"]],
        )


def synthetic_openapi_v2(definitions: int = 700, properties: int = 12) -> bytes:
    """An /openapi/v2 document of about a real cluster's size (3 MB: Kubernetes' own
    api/openapi-spec/swagger.json is 3.2 MB of JSON before any CRD), as kubectl asks for it:
    protobuf, gnostic's openapi_v2.Document (openapiv2/OpenAPIv2.proto): `definitions` objects of
    `properties` described strings each. kubectl downloads and parses it for a List's
    client-side validation; the recording server's own is empty."""

    def varint(number: int) -> bytes:
        out = bytearray()
        while True:
            low, number = number & 0x7F, number >> 7
            out.append(low | (0x80 if number else 0))
            if not number:
                return bytes(out)

    def field(number: int, payload: Any) -> bytes:  # length-delimited
        data = payload.encode() if isinstance(payload, str) else payload
        return varint(number << 3 | 2) + varint(len(data)) + data

    def schema(description: str, kind: str, named: Sequence[Tuple[str, bytes]] = ()) -> bytes:
        body = field(4, description) + field(22, field(1, kind))  # Schema.description, Schema.type
        if named:  # Schema.properties: NamedSchema(name, value) each
            body += field(25, b"".join(field(1, field(1, name) + field(2, sub)) for name, sub in named))
        return body

    text = " ".join(["lorem ipsum dolor sit amet consectetur"] * 7)
    named = []
    for number in range(definitions):
        props = [(f"field{p}", schema(f"field {p} of Kind{number}: {text}", "string")) for p in range(properties)]
        named.append(
            field(1, field(1, f"io.k8s.api.synthetic.v1.Kind{number}") + field(2, schema(text, "object", props)))
        )
    info = field(1, "Kubernetes") + field(2, "v1.32.4")
    return field(1, "2.0") + field(2, info) + field(9, b"".join(named))  # swagger, info, definitions


def slow_down(server: Any, latency: float) -> None:
    """Every answer of the recording server `latency` seconds later, as a nearby API server's."""
    answer = server.answer

    def slowed(record: Any) -> Answer:
        given = answer(record)
        given.delay += latency
        return given

    server.answer = slowed


def cold_cache_forms(repeats: int, latency: float = 0.0) -> None:
    """What a cold kubectl cache (a fresh CI runner's empty $HOME) costs each form of the calls
    before the Job, and what the same form costs once the cache is warm: the real kubectl on PATH
    against the recording API server on 127.0.0.1 (tests/recordingserver.py, which answers at
    once: on a real API server each request also costs its round trip: `latency` seconds are
    added before every answer to stand for it; its /openapi/v2 a synthetic one of a real
    cluster's size, synthetic_openapi_v2), each form in a fresh HOME, then again in the
    same HOME, the forms alternating, `repeats` times. A form of two calls runs them one after
    the other (the second needs the first's object). "now" is what the run sends; "before" what
    it sent earlier; "candidate" a form measured and not taken."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("cold cache: no kubectl on PATH; skipped")
        return
    namespace = "agc-rl-0123456789ab"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rollout", "namespace": namespace}}
    runtimeclass = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "cube"}}
    reviews = rl_batch_demo.access_review_list(namespace, True)
    ns = rl_batch_demo.namespace_manifest(namespace, "0123456789ab")
    cm = rl_batch_demo.configmap_manifest(
        namespace, "0123456789ab", rl_batch_demo.WORKER_SOURCE, None, rl_batch_demo.LAUNCHER_SOURCE
    )
    objects = {"apiVersion": "v1", "kind": "List", "items": [ns, cm]}
    strict = ["create", "-f", "-", "-o", "json", "--validate=strict"]
    rules = rl_batch_demo.rules_review(namespace)
    Form = Tuple[str, List[Tuple[List[str], str]]]
    forms: List[Form] = [
        ("Job: create -f - --validate=strict (before)", [(strict, json.dumps(job))]),
        (
            "Job: create --raw PATH -f - (now)",
            [(["create", "--raw", rl_batch_demo.create_path(job), "-f", "-"], json.dumps(job))],
        ),
        (
            "RuntimeClass: get runtimeclass NAME (before)",
            [(["get", "runtimeclass", "cube", "--ignore-not-found", "-o", "json"], "")],
        ),
        ("RuntimeClass: get --raw PATH (now)", [(["get", "--raw", "/apis/node.k8s.io/v1/runtimeclasses/cube"], "")]),
        (
            f"{len(reviews['items'])} access reviews: create -f - --validate=false (before)",
            [(["create", "-f", "-", "-o", "json", "--validate=false"], json.dumps(reviews))],
        ),
        (
            "rules review: create --raw PATH -f - (now)",
            [(["create", "--raw", rl_batch_demo.RULES_REVIEW_PATH, "-f", "-"], json.dumps(rules))],
        ),
        ("namespace + ConfigMap: List, --validate=strict (before)", [(strict, json.dumps(objects))]),
        ("namespace + ConfigMap: 2 documents, strict (now)", [(strict, rl_batch_demo.Kubectl.create_input(objects))]),
        (
            "namespace, then ConfigMap: 2 x create --raw (candidate)",
            [
                (["create", "--raw", rl_batch_demo.create_path(ns), "-f", "-"], json.dumps(ns)),
                (["create", "--raw", rl_batch_demo.create_path(cm), "-f", "-"], json.dumps(cm)),
            ],
        ),
    ]
    samples: Dict[Tuple[str, str], List[Tuple[float, int]]] = {}

    def created(record: Any, match: Any) -> Answer:
        stored = record.json()
        stored.setdefault("metadata", {})["uid"] = "uid"
        return Answer(201, stored)

    def reviewed(record: Any, match: Any) -> Answer:
        answered = record.json()
        answered["status"] = {"allowed": True}
        return Answer(201, answered)

    def ruled(record: Any, match: Any) -> Answer:
        everything = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
        return Answer(201, {**record.json(), "status": {"resourceRules": everything, "incomplete": False}})

    with RecordingServer() as server, tempfile.TemporaryDirectory(prefix="rl-bench-cold-") as scratch:
        server.route("POST", "/apis/batch/v1/namespaces/[^/]+/jobs", created)
        server.route("POST", "/api/v1/namespaces", created)
        server.route("POST", "/api/v1/namespaces/[^/]+/configmaps", created)
        server.route("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", reviewed)
        server.route("POST", rl_batch_demo.RULES_REVIEW_PATH, ruled)
        server.route("GET", "/apis/node.k8s.io/v1/runtimeclasses/cube", lambda r, m: Answer(200, runtimeclass))
        v2 = synthetic_openapi_v2()
        server.route("GET", "/openapi/v2", lambda r, m: Answer(200, v2, OPENAPI_V2_PROTOBUF))
        kubeconfig = server.kubeconfig(Path(scratch))
        slow_down(server, latency)
        for repeat in range(repeats):
            for number, (label, calls) in enumerate(forms):
                home = Path(scratch) / f"home-{repeat}-{number}"  # a cold cache, then the same one warm
                home.mkdir()
                env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home)}
                for cache in ("cold", "warm"):
                    before = len(server.taken())
                    started = time.perf_counter()
                    for argv, stdin in calls:
                        subprocess.run(
                            [kubectl, f"--kubeconfig={kubeconfig}", "--request-timeout=30s", *argv],
                            input=stdin.encode() if stdin else None,
                            env=env,
                            capture_output=True,
                            check=True,
                        )
                    seconds = time.perf_counter() - started
                    samples.setdefault((label, cache), []).append((seconds, len(server.taken()) - before))
    version = subprocess.run(
        [kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True, check=False
    ).stdout
    client = json.loads(version or "{}").get("clientVersion", {}).get("gitVersion", "?")
    print(
        f"kubectl cache cold and warm, {kubectl} ({client}) against the recording server answering after "
        f"{latency * 1000:.0f} ms, median of {repeats}, alternating:"
    )
    print(f"  {'':<56} {'cold cache':<16} warm cache")
    for label, _ in forms:
        row = f"  {label:<56}"
        for cache in ("cold", "warm"):
            seconds = statistics.median(s for s, _ in samples[(label, cache)])
            requests = statistics.median(n for _, n in samples[(label, cache)])
            row += f" {seconds:6.3f} s {requests:3.0f} req"
        print(row)


def steps_before_the_job(repeats: int, latency: float = 0.0) -> None:
    """The run's steps before its Job, as it makes them, with the real kubectl on PATH against the
    recording server (`latency` before every answer): the ServiceAccount's watch, the
    RuntimeClass's read and the permissions at once, then the namespace and the ConfigMap, then
    the Job's create; the account is there at once (its wait is not what is measured). Seconds
    from the first call's start to the end of the permissions' step, of the objects' step and to
    the Job's create answered; cold: a fresh HOME, warm: the same HOME again; the plans
    alternating, `repeats` times."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("steps before the Job: no kubectl on PATH; skipped")
        return
    namespace = "agc-rl-0123456789ab"
    reviews = rl_batch_demo.access_review_list(namespace, True)
    ns = rl_batch_demo.namespace_manifest(namespace, "0123456789ab")
    cm = rl_batch_demo.configmap_manifest(
        namespace, "0123456789ab", rl_batch_demo.WORKER_SOURCE, None, rl_batch_demo.LAUNCHER_SOURCE
    )
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rollout", "namespace": namespace}}
    strict = ["create", "-f", "-", "-o", "json", "--validate=strict"]
    Call = Tuple[List[str], str]
    access = (["create", "-f", "-", "-o", "json", "--validate=false"], json.dumps(reviews))
    rules = (
        ["create", "--raw", rl_batch_demo.RULES_REVIEW_PATH, "-f", "-"],
        json.dumps(rl_batch_demo.rules_review(namespace)),
    )
    listing = {"apiVersion": "v1", "kind": "List", "items": [ns, cm]}
    together = (strict, json.dumps(listing))
    documents = (strict, rl_batch_demo.Kubectl.create_input(listing))
    raw_ns = (["create", "--raw", rl_batch_demo.create_path(ns), "-f", "-"], json.dumps(ns))
    raw_cm = (["create", "--raw", rl_batch_demo.create_path(cm), "-f", "-"], json.dumps(cm))
    plans = [
        ("access reviews | List create (before)", access, [together]),
        ("rules review | List create", rules, [together]),
        ("rules review | 2 documents (now)", rules, [documents]),
        ("rules review | 2 x create --raw (candidate)", rules, [raw_ns, raw_cm]),
    ]
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}}

    def accounts(record: Any, match: Any) -> Answer:
        if record.query.get("watch") in ("true", "1"):
            return Answer(200, chunks=[(0.0, b""), (30.0, b"")])  # held until the watch is ended
        listing = {"kind": "ServiceAccountList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}}
        return Answer(200, {**listing, "items": [account]})

    def created(record: Any, match: Any) -> Answer:
        stored = record.json()
        stored.setdefault("metadata", {})["uid"] = "uid"
        return Answer(201, stored)

    def reviewed(record: Any, match: Any) -> Answer:
        return Answer(201, {**record.json(), "status": {"allowed": True}})

    def ruled(record: Any, match: Any) -> Answer:
        everything = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
        return Answer(201, {**record.json(), "status": {"resourceRules": everything, "incomplete": False}})

    samples: Dict[Tuple[str, str], List[Tuple[float, float, float, int]]] = {}
    with RecordingServer() as server, tempfile.TemporaryDirectory(prefix="rl-bench-steps-") as scratch:
        for pattern in (
            "/api/v1/namespaces",
            "/api/v1/namespaces/[^/]+/configmaps",
            "/apis/batch/v1/namespaces/[^/]+/jobs",
        ):
            server.route("POST", pattern, created)
        server.route("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", reviewed)
        server.route("POST", rl_batch_demo.RULES_REVIEW_PATH, ruled)
        server.route(
            "GET", "/apis/node.k8s.io/v1/runtimeclasses/cube", lambda r, m: Answer(200, {"kind": "RuntimeClass"})
        )
        server.route("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts", accounts)
        v2 = synthetic_openapi_v2()
        server.route("GET", "/openapi/v2", lambda r, m: Answer(200, v2, OPENAPI_V2_PROTOBUF))
        kubeconfig = server.kubeconfig(Path(scratch))
        slow_down(server, latency)
        base = [kubectl, f"--kubeconfig={kubeconfig}", "--request-timeout=30s"]
        watch_argv = ["get", "serviceaccounts", "--field-selector", "metadata.name=default"]
        watch_argv += [f"--namespace={namespace}", "-o", "json", "--output-watch-events", "--watch"]
        rc_read = (["get", "--raw", "/apis/node.k8s.io/v1/runtimeclasses/cube"], "")
        job_create = (["create", "--raw", rl_batch_demo.create_path(job), "-f", "-"], json.dumps(job))

        def steps(env: Dict[str, str], permissions: Call, objects: List[Call]) -> Tuple[float, float, float]:
            def call(form: Call) -> None:
                subprocess.run([*base, *form[0]], input=form[1].encode(), env=env, capture_output=True, check=True)

            started = time.perf_counter()
            with subprocess.Popen(
                [*base, *watch_argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            ) as w:
                assert w.stdout is not None
                rl_batch_demo.concurrently([lambda: call(rc_read), lambda: call(permissions)])
                preflight = time.perf_counter() - started
                call(objects[0])
                rest: List[Callable[[], Any]] = [functools.partial(call, form) for form in objects[1:]]
                seen = rl_batch_demo.concurrently([*rest, w.stdout.readline])  # the account, listed
                assert seen[-1], "the account's watch printed nothing"
                created_objects = time.perf_counter() - started
                call(job_create)
                job_created = time.perf_counter() - started
                w.terminate()
            return preflight, created_objects, job_created

        for repeat in range(repeats):
            for number, (label, permissions, objects) in enumerate(plans):
                home = Path(scratch) / f"home-{repeat}-{number}"  # a cold cache, then the same one warm
                home.mkdir()
                env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home)}
                for cache in ("cold", "warm"):
                    before = len(server.taken())
                    figures = steps(env, permissions, objects)
                    samples.setdefault((label, cache), []).append((*figures, len(server.taken()) - before))
    print(
        f"steps before the Job, {kubectl} against the recording server answering after {latency * 1000:.0f} ms, "
        f"median of {repeats}, alternating\n  (seconds from the first call: the permissions' step ends, the objects' "
        "step ends, the Job is created):"
    )
    for label, _, _ in plans:
        for cache in ("cold", "warm"):
            runs = samples[(label, cache)]
            figures = [statistics.median(run[index] for run in runs) for index in range(4)]
            print(
                f"  {label:<44} {cache}: {figures[0]:.3f}  {figures[1]:.3f}  {figures[2]:.3f} s  "
                f"{figures[3]:.0f} requests"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100", help="episode counts run end to end against the fake")
    parser.add_argument("--analyse", default="10,100,1000", help="episode counts for the analysis-only figure")
    parser.add_argument(
        "--stand-in-sizes",
        default="1000",
        help="episode counts run end to end with the fake's stand-in worker (no tests in the pods)",
    )
    parser.add_argument("--guide", metavar="PATH", help="the guide's own script: run it side by side with the tool")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions of each tool with --guide (default 5)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory and disk budget figures")
    parser.add_argument(
        "--only",
        choices=("side-by-side", "real-kubectl", "cold-cache"),
        help="print only the side by side with the guide (needs --guide; real-kubectl: through the real kubectl "
        "and an API server in front of the fake cluster, a cold discovery cache) or the cold-cache figure",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=20.0,
        help="with --only cold-cache: milliseconds the recording server waits before each answer (default 20)",
    )
    parser.add_argument(
        "--no-extra-episode-seconds",
        action="store_true",
        help="with --only real-kubectl: no extra episode seconds (the Job ends when this machine's pods do)",
    )
    parser.add_argument("--seed", type=int, default=1, help="with --only real-kubectl: the extra seconds' seed")
    parser.add_argument(
        "--split-cores",
        action="store_true",
        help="with --only real-kubectl: the client on one core, the cluster (API server, controller, pods) on the rest",
    )
    parser.add_argument(
        "--pods-core",
        action="store_true",
        help="with --only real-kubectl: the fake's controller and pods on the last core, the client and the API "
        "server on the others (on a cluster the pods run on nodes of their own)",
    )
    parser.add_argument(
        "--pods-at-normal-priority",
        action="store_true",
        help="with --only real-kubectl: the fake's controller and pods at the client's own priority, not at nice 19",
    )
    args = parser.parse_args()
    PODS_NICED[0] = not args.pods_at_normal_priority
    if args.split_cores:  # the cluster (this process's API server, the fake's controller, pods) off the client's core
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            parser.error("--split-cores needs two cores at least")
        CLIENT_CPU[0] = cores[0]
        os.sched_setaffinity(0, set(cores[1:]))
    if args.pods_core:  # the nodes' core apart: this process (the API server) and the client on the rest
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2 or args.split_cores:
            parser.error("--pods-core needs two cores at least, and not --split-cores")
        PODS_CPUS[0] = {cores[-1]}
        os.sched_setaffinity(0, set(cores[:-1]))
    EXTRA_SEED[0] = None if args.no_extra_episode_seconds else args.seed
    if args.only == "cold-cache":
        cold_cache_forms(args.repeats, args.latency_ms / 1000)
        print()
        steps_before_the_job(args.repeats, args.latency_ms / 1000)
        return 0
    if args.only in ("side-by-side", "real-kubectl"):
        if not args.guide or not Path(args.guide).is_file():
            parser.error(f"--only {args.only} needs --guide PATH, the guide's script")
        with tempfile.TemporaryDirectory(prefix="rl-bench-") as scratch:
            side_by_side(Path(args.guide).resolve(), args.repeats, Path(scratch), args.only == "real-kubectl")
        return 0
    sizes = [int(size) for size in args.sizes.split(",") if size]
    help_figures = time_help()
    print(
        f"--help: {help_figures['help_seconds'] * 1000:.0f} ms as a script, "
        f"{help_figures['installed_help_seconds'] * 1000:.0f} ms as installed (bytecode cached; bare interpreter: "
        f"{help_figures['bare_interpreter_seconds'] * 1000:.0f} ms) on {sys.version.split()[0]}"
    )
    print()
    header = (
        "episodes",
        "kubectl processes",
        "log reads",
        "client CPU s",
        "watch latency s",
        "Complete->results s",
        "client wait s",
        "1st end->line s",
        "1st reward s",
    )
    print("  ".join(f"{column:>19}" for column in header))
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as scratch:
        processes: Dict[int, int] = {}
        stand_in_sizes = [int(size) for size in args.stand_in_sizes.split(",") if size]
        for size, stand_in in [(size, False) for size in sizes] + [(size, True) for size in stand_in_sizes]:
            figures = run_once(size, Path(scratch), tag="-stand-in" if stand_in else "", stand_in=stand_in)
            processes[size] = figures["kubectl_processes"]
            print(
                "  ".join(
                    f"{value:>19}" if isinstance(value, int) else f"{value:>19.3f}"
                    for value in (
                        figures["episodes"],
                        figures["kubectl_processes"],
                        figures["log_reads"],
                        figures["client_cpu_seconds"],
                        figures["watch_latency_seconds"],
                        figures["complete_to_results_seconds"],
                        figures["client_job_complete_seconds"],
                        figures["first_end_to_line_seconds"],
                        figures["client_first_reward_seconds"],
                    )
                )
                + ("  (stand-in worker)" if stand_in else "")
            )
            if stand_in:  # issue 25: the first row within 1 s of the first pod's end, processes growing with N/10
                print(
                    f"{size:,} episodes (stand-in worker): the first row {figures['first_end_to_line_seconds']:.3f} s "
                    f"after the first pod's end; {figures['kubectl_processes']} kubectl processes, of them "
                    f"{figures['log_reads']} followed log reads (one per 10 pods: {size / 10:g})"
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
        print(
            "analysis only (parse the pod listing, save diagnostics, read the logs and their artifacts, validate, "
            "write results and timeline):"
        )
        for size in (int(size) for size in args.analyse.split(",") if size):
            timing = analyse_only(size, Path(scratch))
            print(f"{size:>19}  episodes: {timing['cpu']:.3f} s client CPU, {timing['wall']:.3f} s wall")
        print()
        print("rewards as pods end (validate from the termination message, append and fsync each line):")
        for size in (int(size) for size in args.analyse.split(",") if size):
            timing = stream_only(size, Path(scratch))
            print(f"{size:>19}  episodes: {timing['cpu']:.3f} s client CPU, {timing['wall']:.3f} s wall")
        if GUIDE_COUNT not in processes:
            processes[GUIDE_COUNT] = run_once(GUIDE_COUNT, Path(scratch))["kubectl_processes"]
        verdict = "within" if processes[GUIDE_COUNT] <= PROCESS_BUDGET else "OVER"
        print()
        print(
            f"kubectl processes of a {GUIDE_COUNT}-episode run: {processes[GUIDE_COUNT]} "
            f"({verdict} the budget of {PROCESS_BUDGET})"
        )
        print()
        print_empty_messages(Path(scratch))
        if not args.no_memory:
            print()
            print_memory(Path(scratch))
            print_swollen_memory(Path(scratch))
            print_disk_budget(Path(scratch))
        if args.guide:
            print()
            guide = Path(args.guide).resolve()
            if not guide.is_file():
                print(f"side by side: the guide's script {args.guide} is not a file; skipped")
            else:
                side_by_side(guide, args.repeats, Path(scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
