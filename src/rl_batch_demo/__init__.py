#!/usr/bin/env python3
"""rl-batch-demo: how fast does a Kubernetes cluster prepare N isolated RL-rollout sandboxes?

Submits one Job of N pods, each an "episode" that prepares its own workspace, confirms a
boundary test fails, applies a fix, re-runs the tests and reports a reward. Then it collects
every reward, validates every episode, and reports honest timing figures: whole-batch
latencies, per-pod start-up percentiles and per-phase breakdowns.

It is one file with no dependencies beyond Python 3.9+ and kubectl: copy it anywhere.

Usage:
    python3 rl_batch_demo.py check     [--count N] [--runtime R] [--image I] [--kubelet-metrics]
    python3 rl_batch_demo.py run       --output DIR [--count N] [--parallelism P|auto] [--rounds K]
                                       [--image I] [--runtime R|none] [--cleanup POLICY]
                                       [--worker FILE.py] [--tasks FILE.jsonl] [--max-failed-episodes K]
                                       [--failed-episode-reward R] [--episode-timeout S] [--stop-after K]
                                       [--tags JSON]
                                       [--warmup] [--pin-image[=DIGEST]] [--kubelet-metrics]
                                       [--junit FILE] [--metrics-file FILE]
    python3 rl_batch_demo.py reproduce --output DIR [--count N] [--rounds K] [--junit FILE]
    python3 rl_batch_demo.py cleanup   --output DIR
    python3 rl_batch_demo.py compare   DIR [DIR ...] [--format text|markdown|json|guide] [--lang en|zh]
    python3 rl_batch_demo.py show-worker [--template]

From Python (docs/trainer.md): `import rl_batch_demo as rbd`, then `rbd.run_batch(DIR, count=N,
cleanup="always", ...)` (run's flags with underscores) returns `.results` and `.rewards`, and
`rbd.stream_batch(DIR, ...)` yields each rewards.jsonl row as it is written (`astream_batch`,
`arun_batch`: the same for asyncio); errors raise rbd.DemoError with the exit code below.

Saved as `kubectl-rl_batch_demo` on PATH, it is also the kubectl plugin `kubectl rl-batch-demo`.
Everything a pod prints is untrusted input: read as bytes, bounded, escaped before it is shown.

Every run works in its own namespace (agc-rl-<12 hex>) and writes receipt.json before it
creates anything, so `cleanup` can later delete exactly what the run created, after checking
UIDs and labels, and nothing else.

Exit codes (see --help): 0 success, 1 episode failed or invalid, 2 usage or bad input,
3 cluster or kubectl error, 4 timeout, 5 threshold breached, 6 refused, 130 interrupted.
"""
