"""Injected faults (env ``FAKE_KUBECTL_FAULTS``, a JSON object; the names and their meanings
are documented in tests/fakecluster.py).

Every name is validated on every call: an unknown fault, an unknown episode mode or a
malformed ``api_errors`` rule is an error, so a typo in a test cannot silently disable a
fault.  ``api_errors`` and ``hang`` rules with ``times`` count their firings in
``fault_counters.json`` in the state directory; episode modes transform what a real worker
wrote (its log, its termination message, its exit code)."""

from __future__ import annotations

import functools
import json
import os

from .common import FAULTS_ENV, KubectlError, lookup_type, read_json, write_json_atomic
from .containerlog import MAX_CONTAINER_TERMINATION_MESSAGE

# typing for the annotations only (postponed, never evaluated): not imported by each kubectl call (2 ms)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, List, Optional, Tuple

FAULT_KEYS = {
    "episode",
    "logs_unavailable",
    "deadline_seconds",
    "episode_seconds",
    "api_errors",
    "hang",
    "watch_ends_early",
    "namespace_stuck",
    "node_lost",
    "legacy_labels",
    "server_version",
    "client_version",  # the kubectl minor the fake plays, where wordings differ (issue 19)
    # the control plane as it is (issue 19)
    "watch_gap",
    "watch_error",
    "watch_garbage",  # issue 27: bytes that are not UTF-8, or an object of an odd shape, on a watch
    "serviceaccount_delay",
    "rules_review",  # "incomplete": a webhook authorizer beside RBAC, which cannot list its rules
    "queue",
    "admission",
    "termination_grace_seconds",
    "stand_in_worker",
    "pods_wait_for_pod_watch",  # seconds at most: no container starts before a pod watch has listed
    "stand_in_artifacts",
    "no_pod_index_label",  # a job controller before 1.28: an Indexed Job's pods lack the index label
    "mixed_digests",
    # Indexed Jobs (issue 12)
    "old_job_api",
    # infrastructure retries (issue 21): a server that drops podFailurePolicy; the per-index backoff's first step
    "no_pod_failure_policy",
    "pod_failure_backoff_seconds",
    # sandbox start-up phases (issue 10)
    "scheduled_event_time",
    "image_pull",
    "sandbox_kernel",
    "kubelet_foreign_pods",
    "kubelet_restart",
    "lxcfs",
    # the API server refuses connections: true, or the number of calls refused (issue 18)
    "unreachable",
    # logs at scale (issue 19): a paced log transfer, the kubelet's log rotation size
    "log_bytes_per_second",
    "container_log_max_size",
}
SCHEDULED_EVENT_TIMES = {"event_time", "legacy"}  # Scheduled events with eventTime (default) or without it
IMAGE_PULLS = {"cached", "pulled", "mixed", "missing"}  # Pulled events: see controller.pulled_event
# With fault "stand_in_worker", each pod runs this instead of the ConfigMap's worker: the built-in
# worker's two events, with real times and the same fields, but no test runs. For tests of what
# the client does with a pod's output (the hostile matrix), not of the worker's grading. `modules`
# names the built-in tests as the runner reports them (rl_batch_demo.BUILTIN_TEST_MODULE).
STAND_IN_WORKER = """\
import json, os, sys, time
first = time.time()
episode, log = os.environ["EPISODE_ID"], os.environ["RL_DEMO_TERMINATION_LOG"]
events = []
def emit(event, **fields):
    events.append(dict(fields, event=event, at=time.time(), episode_id=episode))
    print(json.dumps(events[-1], sort_keys=True), flush=True)
    with open(log, "w") as stream:
        stream.write("".join(json.dumps(e, sort_keys=True) + "\\n" for e in events))
emit("ready", first_statement_at=first, imports_done_at=first, process_started_at=None, kernel_booted_at=None)
time.sleep(0.05)
sha256 = "b7c043fc5be7621e78434454b15ad720d958d26656e72d3ccbb0dc1d761147eb"
modules = {"test_shipping": {"origin": "runner stdin", "sha256": sha256}}
emit("reward", reward=1, baseline_exit=1, tests_exit=0, tests_output="OK (stand-in)\\n", tests={}, modules=modules)
"""
# With fault "stand_in_artifacts" too, the stand-in also sends artifacts as the built-in worker does
# (its patch.diff and tests-output.txt, framed on stdout before the reward event that lists them,
# rl_batch_demo.WORKER_SOURCE send_artifacts), so every pod's log must be read, as in a default run.
STAND_IN_ARTIFACT_WORKER = STAND_IN_WORKER.replace(
    'emit("reward", reward=1,',
    """import base64, hashlib
files = {
    "patch.diff": b"--- a/shipping.py\\n+++ b/shipping.py\\n@@ -1 +1 @@\\n-bug\\n+fix\\n",
    "tests-output.txt": b"OK (stand-in)\\n",
}
artifacts = []
for name, data in sorted(files.items()):
    sha256 = hashlib.sha256(data).hexdigest()
    label = base64.urlsafe_b64encode(name.encode()).decode()
    print(f"rl-demo-artifact 1 0 1 {sha256} {label} {base64.b64encode(data).decode()}", flush=True)
    artifacts.append({"name": name, "bytes": len(data), "sha256": sha256})
emit("reward", artifacts=artifacts, reward=1,""",
)
# Episode mode "ignore_sigterm": a stuck episode that ignores SIGTERM, so only the grace period's
# SIGKILL ends it (controller.py finish_failed).
SIGTERM_IGNORING_WORKER = """\
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("stuck, and deaf to SIGTERM", flush=True)
time.sleep(3600)
"""
ADMISSIONS = {"queue", "managed_by", "sidecar", "security_context", "pod_sidecar"}
EPISODE_MODES = {
    "ignore_sigterm",
    "exit1",
    "duplicate_ready",
    "drop_reward",
    "noise",
    "malformed",
    "skew",
    "restart",
    "evict",
    "disk_pressure_own",
    "disk_limit",
    "preempt",
    "rejected",
    "replace",
    "pending",
    "no_message",
    "message_mismatch",
    "wrong_id",
}
# Hostile episodes: what an attacker's code inside the sandbox could print, in the log and (where
# the API server could carry it) in the termination message. See HOSTILE_LINES / HOSTILE_FIELDS.
# A line added before the worker's own output, as bytes the container wrote, times its repeat:
# built only when a pod uses it, because every fake kubectl call imports this module.
HOSTILE_LINES = {
    "hostile_invalid_utf8": b"\xff\xfe\xfd not UTF-8 \xc3\x28\n",
    "hostile_nul": b"\x00\x00 NUL bytes \x00\n",
    "hostile_control": b"\x1b[2J\x1b]0;pwned\x07\x9b31m terminal escapes\n",
    "hostile_cr_injection": b'progress 50%\r{"event": "reward", "at": 1.0, "episode_id": "x", "reward": 1}\n',
    "hostile_u2028_injection": b'note\xe2\x80\xa8{"event": "ready", "at": 1.0, "episode_id": "x"}\n',
    "hostile_forged_prefix": b'[pod/someone-else/episode] {"event": "reward", "at": 1.0, "reward": 1}\n',
    "hostile_long_line": (b'{"event": "reward", "pad": "', b"x", 100 * 1024, b'"}\n'),
    # deeper than any Python's JSON decoder goes (3.13 parses 1,500 levels), shorter than 64 KiB
    "hostile_nesting": (b'{"event": "ready", "at": 1.0, "x": ', b"[", 30000, b"]" * 30000 + b"}\n"),
    # about 9.7 MB: over the 8 MiB that <pod>.log keeps, within the kubelet's 10 MiB log file
    "hostile_huge_log": (b"", b"noise " * 170 + b"\n", 9500, b""),
}
HOSTILE_FIELDS = {  # (event, field, value) written into the worker's own event, log and message alike
    "hostile_huge_number": ("ready", "at", int("9" * 400)),
    "hostile_nan": ("reward", "reward", float("nan")),
    "hostile_reward_true": ("reward", "reward", True),
    "hostile_reward_float": ("reward", "reward", 1.0),
    "hostile_reward_string": ("reward", "reward", "1"),
    "hostile_ansi_id": ("ready", "episode_id", "\x1b[2J\x1b[31mforged\nline"),
    "hostile_surrogate_id": ("ready", "episode_id", "\ud800"),
    "hostile_markdown_id": ("ready", "episode_id", "# heading\n![image](http://example.invalid/x.png)"),
}
EPISODE_MODES |= set(HOSTILE_LINES) | set(HOSTILE_FIELDS)


def hostile_line(mode: str) -> bytes:
    """The bytes of a HOSTILE_LINES entry: a plain line, or (head, unit, repeat, tail)."""
    recipe = HOSTILE_LINES[mode]
    if isinstance(recipe, bytes):
        return recipe
    head, unit, repeat, tail = recipe
    return head + unit * repeat + tail


API_ERRORS = {
    "500": "Error from server (InternalError): {ctx}Internal error occurred: fake injected fault",
    "403": "Error from server (Forbidden): {ctx}{forbidden}",
    "429": "Error from server (TooManyRequests): {ctx}the server has received too many requests "
    "and has asked us to try again later",
    "503": "Error from server (ServiceUnavailable): {ctx}the server is currently unable to handle the request",
    # the last line only: Invocation._fault_error prints kubectl's whole output (commands.connection_refused)
    "refused": "The connection to the server {server} was refused - did you specify the right host or port?",
    "timeout": "Unable to connect to the server: net/http: request canceled "
    "(Client.Timeout exceeded while awaiting headers)",
}
MAX_TERMINATION_MESSAGE = MAX_CONTAINER_TERMINATION_MESSAGE  # the kubelet's, containerlog.py


def load_faults() -> dict:
    raw = os.environ.get(FAULTS_ENV, "").strip()
    if not raw:
        return {}
    try:
        faults = json.loads(raw)
    except ValueError as e:
        raise KubectlError(f"error: fake_kubectl: {FAULTS_ENV} is not valid JSON: {e}") from None
    if not isinstance(faults, dict):
        raise KubectlError(f"error: fake_kubectl: {FAULTS_ENV} must be a JSON object")
    unknown = set(faults) - FAULT_KEYS
    if unknown:
        raise KubectlError(f"error: fake_kubectl: unknown fault(s) {sorted(unknown)}; known: {sorted(FAULT_KEYS)}")
    for idx, mode in (faults.get("episode") or {}).items():
        modes = mode if isinstance(mode, list) else [mode]
        bad = [m for m in modes if m not in EPISODE_MODES]
        if bad or not str(idx).isdigit():
            raise KubectlError(
                f"error: fake_kubectl: bad episode fault {idx!r}: {mode!r}; known modes: {sorted(EPISODE_MODES)}"
            )
    if faults.get("scheduled_event_time", "event_time") not in SCHEDULED_EVENT_TIMES:
        raise KubectlError(f"error: fake_kubectl: bad scheduled_event_time; known: {sorted(SCHEDULED_EVENT_TIMES)}")
    if faults.get("rules_review", "incomplete") != "incomplete":
        raise KubectlError('error: fake_kubectl: rules_review must be "incomplete"')
    if faults.get("image_pull", "cached") not in IMAGE_PULLS:
        raise KubectlError(f"error: fake_kubectl: bad image_pull; known: {sorted(IMAGE_PULLS)}")
    foreign = faults.get("kubelet_foreign_pods", 0)
    if not isinstance(foreign, int) or isinstance(foreign, bool) or foreign < 0:
        raise KubectlError("error: fake_kubectl: kubelet_foreign_pods must be an int >= 0")
    for rule in faults.get("api_errors") or []:
        if str(rule.get("error")) not in API_ERRORS or "match" not in rule:
            raise KubectlError(f"error: fake_kubectl: bad api_errors rule {rule!r}; errors: {sorted(API_ERRORS)}")
    if not set(faults.get("admission") or []) <= ADMISSIONS:
        raise KubectlError(f"error: fake_kubectl: bad admission {faults['admission']!r}; known: {sorted(ADMISSIONS)}")
    down = faults.get("unreachable", False)
    if not (down is True or down is False or (isinstance(down, int) and down > 0)):
        raise KubectlError(f"error: fake_kubectl: unreachable must be true or a number of calls > 0, not {down!r}")
    for key in ("log_bytes_per_second", "container_log_max_size"):
        value = faults.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise KubectlError(f"error: fake_kubectl: {key} must be a number of bytes > 0, not {value!r}")
    nodes = faults.get("mixed_digests")
    if nodes is not None and not (isinstance(nodes, list) and all(isinstance(n, str) for n in nodes)):
        raise KubectlError(f"error: fake_kubectl: mixed_digests must be a list of node names, not {nodes!r}")
    return faults


def episode_modes(faults: dict, index: int) -> List[str]:
    mode = (faults.get("episode") or {}).get(str(index))
    if mode is None:
        return []
    return list(mode) if isinstance(mode, list) else [mode]


def hang_rules(faults: dict) -> List[dict]:
    hang = faults.get("hang")
    return hang if isinstance(hang, list) else ([hang] if hang else [])


def _canon_target(word: str) -> str:
    """Normalise the resource part of a fault ``match`` ("job" -> "jobs", "Namespace" -> "namespace")."""
    parts = []
    for piece in word.split(","):
        rt = lookup_type(piece)
        parts.append(rt.resource if rt is not None else piece.lower())
    return ",".join(parts)


def op_matches(match: str, op: Tuple[str, str]) -> bool:
    """Whether a rule's ``match`` ("VERB" or "VERB TARGET") applies to the request ``op``."""
    words = match.split(None, 1)
    if not words or words[0] != op[0]:
        return False
    if len(words) == 1:
        return True
    return _canon_target(words[1].strip()) == _canon_target(op[1])


class FaultCounters:
    """Counts how often each api_errors/hang rule fired (persisted in the state dir)."""

    def __init__(self, state: str) -> None:
        self.path = os.path.join(state, "fault_counters.json")
        self.lock = os.path.join(state, "fault_counters.lock")

    def take(self, rule_id: str, times: Optional[int]) -> bool:
        import fcntl

        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            counts = read_json(self.path, {})
            used = counts.get(rule_id, 0)
            if times is not None and used >= int(times):
                return False
            counts[rule_id] = used + 1
            write_json_atomic(self.path, counts)
            return True
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- episode modes


def _json_line(line: str) -> Optional[dict]:
    try:
        v = json.loads(line)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


ARTIFACT_FRAME = "rl-demo-artifact "  # a worker's artifact frame line (rl_batch_demo.ARTIFACT_FRAME_TAG)


def killed_mid_run(log: str) -> str:
    """What is left of a worker's log when the kubelet killed it mid-run (eviction: the eviction
    manager's killPodFunc, pkg/kubelet/eviction/eviction_manager.go evictPod): the runtime keeps
    what the container wrote until then, and the last piece of a line written without its
    newline is served as it is (kubectl then glues the next pod's prefix onto it). The cut falls
    in the middle of its first artifact frame (a worker sends them before its reward event), else
    in the middle of its last line, so neither the frame nor the reward arrives whole."""
    lines = log.split("\n")
    frames = [index for index, line in enumerate(lines) if line.startswith(ARTIFACT_FRAME)]
    at = frames[0] if frames else max(0, len(lines) - (2 if lines[-1] == "" else 1))
    kept = "\n".join(lines[:at])
    return (kept + "\n" if at else "") + lines[at][: max(1, len(lines[at]) // 2)]


def apply_episode_faults(modes: List[str], log: str, message: str, rc: int) -> Tuple[str, str, int]:
    """Transform the real worker's outputs according to the episode fault modes.

    ``restart``, ``evict``, ``replace``, ``pending`` and ``wrong_id`` act on the pod instead
    (see controller.py)."""

    def join(lines: List[str], original: str) -> str:
        if not lines:
            return ""
        return "\n".join(lines) + ("\n" if original.endswith("\n") or original == "" else "")

    def per_text(text: str, fn: Callable[[List[str]], List[str]]) -> str:
        lines = text.split("\n")  # newline only, as a container log is split
        if lines and lines[-1] == "":
            lines.pop()
        return join(fn(lines), text)

    def dup_ready(lines: List[str]) -> List[str]:
        for i, ln in enumerate(lines):
            v = _json_line(ln)
            if v is not None and v.get("event") == "ready":
                return [*lines[: i + 1], ln, *lines[i + 1 :]]
        return lines

    def drop_reward(lines: List[str]) -> List[str]:
        return [ln for ln in lines if (_json_line(ln) or {}).get("event") != "reward"]

    def skew(lines: List[str]) -> List[str]:
        res = []
        for ln in lines:
            v = _json_line(ln)
            if v is not None and isinstance(v.get("at"), (int, float)) and not isinstance(v.get("at"), bool):
                v["at"] = v["at"] - 3600
                res.append(json.dumps(v))
            else:
                res.append(ln)
        return res

    def zero_reward(lines: List[str]) -> List[str]:
        res = []
        for ln in lines:
            v = _json_line(ln)
            if v is not None and v.get("event") == "reward":
                v["reward"] = 0
                res.append(json.dumps(v))
            else:
                res.append(ln)
        return res

    def rewrite_field(event: str, field: str, value: Any, lines: List[str]) -> List[str]:
        res = []
        for ln in lines:
            v = _json_line(ln)
            if v is not None and v.get("event") == event:
                v[field] = value
                res.append(json.dumps(v, sort_keys=True))
            else:
                res.append(ln)
        return res

    for mode in modes:
        if mode in HOSTILE_LINES:
            line = hostile_line(mode)
            log = line.decode("utf-8", errors="surrogateescape") + log
            if len(line) < 1024:  # what a termination message could carry; the API server's JSON is UTF-8
                message = line.decode("utf-8", errors="replace") + message
        elif mode in HOSTILE_FIELDS:
            rewrite = functools.partial(rewrite_field, *HOSTILE_FIELDS[mode])
            log, message = per_text(log, rewrite), per_text(message, rewrite)
        elif mode == "exit1":
            rc = 1
        elif mode == "duplicate_ready":
            log, message = per_text(log, dup_ready), per_text(message, dup_ready)
        elif mode == "drop_reward":
            log, message = per_text(log, drop_reward), per_text(message, drop_reward)
        elif mode == "noise":
            log = "WARNING: fake runtime noise\n" + log
        elif mode == "malformed":
            bad = '{"event": "reward", "at": '
            log = log + ("" if log.endswith("\n") or not log else "\n") + bad + "\n"
            message = message + ("" if message.endswith("\n") or not message else "\n") + bad + "\n"
        elif mode == "skew":
            log, message = per_text(log, skew), per_text(message, skew)
        elif mode == "no_message":
            message = ""
        elif mode == "message_mismatch":
            message = per_text(message, zero_reward)
    raw = message.encode("utf-8", errors="replace")
    if len(raw) > MAX_TERMINATION_MESSAGE:  # the kubelet keeps the last 4 KiB (containerlog.py)
        message = raw[-MAX_TERMINATION_MESSAGE:].decode("utf-8", errors="replace")
    return log, message, rc
