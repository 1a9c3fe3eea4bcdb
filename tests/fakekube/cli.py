"""kubectl's command line as v1.32 parses it (pflag rules), and the entry point.

* Global flags, before or after the command word: ``--kubeconfig``, ``--context``,
  ``--request-timeout``, ``-n/--namespace`` (``--flag=value``, ``--flag value``, ``-nNS``,
  ``-n=NS``).  Any other flag before the command word fails like kubectl's plugin lookup does.
* The commands and flags in ``COMMAND_FLAGS``; every other flag is ``unknown flag`` (exit 1,
  kubectl's wording and usage hint), except the real ones in ``UNSUPPORTED_FLAGS``, which the
  tool never sends and the fake refuses as unsupported instead of pretending kubectl would.
* A real kubectl command the fake does not implement is rejected with kubectl's
  ``unknown command`` wording plus a hint that the fake lacks it.

Every invocation is recorded in ``calls.jsonl`` (argv first, then exit status and stdin)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time

from .common import CONTROLLER_ENV, STATE_ENV, KubectlError, append_line, err, not_supported, out

# typing for the annotations only (postponed, never evaluated): not imported by each kubectl call (2 ms)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple


class Flag:
    def __init__(
        self,
        name: str,
        short: Optional[str] = None,
        kind: str = "string",
        noopt: Optional[str] = None,
        multi: bool = False,
    ) -> None:
        self.name = name
        self.short = short
        self.kind = kind  # "string" | "bool" | "int"
        self.noopt = noopt  # value used when given without "=value" (like pflag NoOptDefVal)
        self.multi = multi


GLOBAL_FLAGS = [Flag("kubeconfig"), Flag("context"), Flag("request-timeout"), Flag("namespace", "n")]
COMMAND_FLAGS: Dict[str, List[Flag]] = {
    "get": [
        Flag("output", "o"),
        Flag("selector", "l"),
        Flag("ignore-not-found", kind="bool"),
        Flag("watch", "w", kind="bool"),
        Flag("output-watch-events", kind="bool"),
        Flag("field-selector"),  # commands.parse_field_selector: metadata.name on every kind, a pod's fields
        # forms the guide's own script uses (bench/bench.py runs it side by side): only
        # ``get events --sort-by=.metadata.creationTimestamp`` (commands.guide_get_table)
        Flag("sort-by"),
        # only ``get --raw /api/v1/nodes/NODE/proxy/metrics`` (commands.get_raw)
        Flag("raw"),
        # only ``get pods --all-namespaces --field-selector=...`` (run --parallelism auto, check)
        Flag("all-namespaces", "A", kind="bool"),
    ],
    "create": [
        Flag("filename", "f", multi=True),
        Flag("output", "o"),
        Flag("validate", noopt="strict"),
        # only ``create --raw PATH -f -`` of a Namespace, a ConfigMap or a Job (commands.create_raw)
        Flag("raw"),
    ],
    "delete": [Flag("cascade", noopt="background"), Flag("wait", kind="bool")],
    "logs": [
        Flag("container", "c"),
        Flag("selector", "l"),
        Flag("prefix", kind="bool"),
        Flag("tail", kind="int"),
        Flag("max-log-requests", kind="int"),
        Flag("ignore-errors", kind="bool"),
        Flag("follow", "f", kind="bool"),
    ],
    "version": [Flag("output", "o")],
    "config view": [Flag("minify", kind="bool"), Flag("output", "o")],
    # forms the guide's own script uses; bench/bench.py runs it side by side
    "config current-context": [],
}
# Real kubectl flags of these commands that the tool never passes (long names; "-X" for shorthands).
UNSUPPORTED_FLAGS: Dict[str, set] = {
    "get": {"chunk-size", "all-namespaces", "-A", "show-labels", "watch-only"},
    "create": {"dry-run", "save-config", "edit", "selector", "-l"},
    "delete": {"ignore-not-found", "grace-period", "now", "force", "all", "selector", "-l", "filename", "-f"},
    "logs": {"previous", "-p", "since", "timestamps", "all-containers"},
    "version": {"client"},
    "config view": {"raw", "flatten"},
}
_BOOL_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_BOOL_FALSE = {"0", "f", "F", "FALSE", "false", "False"}

# Commands of the real kubectl that this fake does not implement.
REAL_COMMANDS = {
    "alpha",
    "annotate",
    "api-resources",
    "api-versions",
    "apply",
    "attach",
    "auth",
    "autoscale",
    "certificate",
    "cluster-info",
    "completion",
    "cordon",
    "cp",
    "debug",
    "describe",
    "diff",
    "drain",
    "edit",
    "events",
    "exec",
    "explain",
    "expose",
    "help",
    "kustomize",
    "label",
    "options",
    "patch",
    "plugin",
    "port-forward",
    "proxy",
    "replace",
    "rollout",
    "run",
    "scale",
    "set",
    "taint",
    "top",
    "uncordon",
    "wait",
}
REAL_CONFIG_COMMANDS = {
    "delete-cluster",
    "delete-context",
    "delete-user",
    "get-clusters",
    "get-contexts",
    "get-users",
    "rename-context",
    "set",
    "set-cluster",
    "set-context",
    "set-credentials",
    "unset",
    "use-context",
}


def usage_hint(cmdpath: str) -> str:
    return f"See 'kubectl {cmdpath} --help' for usage." if cmdpath else "See 'kubectl --help' for usage."


def _convert(flag: Flag, raw: str, shown: str, cmdpath: str) -> Any:
    if flag.kind == "bool":
        if raw in _BOOL_TRUE:
            return True
        if raw in _BOOL_FALSE:
            return False
        raise KubectlError(
            f'error: invalid argument "{raw}" for "{shown}" flag: strconv.ParseBool: '
            f'parsing "{raw}": invalid syntax\n{usage_hint(cmdpath)}'
        )
    if flag.kind == "int":
        if re.fullmatch(r"[+-]?\d+", raw):
            return int(raw)
        raise KubectlError(
            f'error: invalid argument "{raw}" for "{shown}" flag: strconv.ParseInt: '
            f'parsing "{raw}": invalid syntax\n{usage_hint(cmdpath)}'
        )
    return raw


def parse_flags(args: List[str], flags: List[Flag], cmdpath: str) -> Tuple[Dict[str, Any], List[str]]:
    """pflag-compatible parsing: flags and positionals may be interleaved."""
    by_long = {f.name: f for f in flags}
    by_short = {f.short: f for f in flags if f.short}
    unsupported = UNSUPPORTED_FLAGS.get(cmdpath, set())
    values: Dict[str, Any] = {}
    positional: List[str] = []

    def store(flag: Flag, value: Any) -> None:
        if flag.multi:
            values.setdefault(flag.name, []).append(value)
        else:
            values[flag.name] = value

    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--":
            positional.extend(args[i:])
            break
        if a.startswith("--") and len(a) > 2:
            name, eq, val = a[2:].partition("=")
            flag = by_long.get(name)
            if flag is None:
                if name in unsupported:
                    raise not_supported(f"kubectl {cmdpath} --{name}")
                raise KubectlError(f"error: unknown flag: --{name}\n{usage_hint(cmdpath)}")
            if eq:
                store(flag, _convert(flag, val, "--" + name, cmdpath))
            elif flag.kind == "bool":
                store(flag, True)
            elif flag.noopt is not None:
                store(flag, flag.noopt)
            elif i < len(args):
                store(flag, _convert(flag, args[i], "--" + name, cmdpath))
                i += 1
            else:
                raise KubectlError(f"error: flag needs an argument: --{name}\n{usage_hint(cmdpath)}")
        elif a.startswith("-") and len(a) > 1:
            chars = a[1:]
            j = 0
            while j < len(chars):
                c = chars[j]
                flag = by_short.get(c)
                if flag is None:
                    if "-" + c in unsupported:
                        raise not_supported(f"kubectl {cmdpath} -{c}")
                    raise KubectlError(f"error: unknown shorthand flag: '{c}' in -{chars}\n{usage_hint(cmdpath)}")
                rest = chars[j + 1 :]
                if flag.kind == "bool":
                    if rest.startswith("="):
                        store(flag, _convert(flag, rest[1:], "-" + c, cmdpath))
                        break
                    store(flag, True)
                    j += 1
                    continue
                if rest.startswith("="):
                    store(flag, _convert(flag, rest[1:], "-" + c, cmdpath))
                elif rest:
                    store(flag, _convert(flag, rest, "-" + c, cmdpath))
                elif i < len(args):
                    store(flag, _convert(flag, args[i], "-" + c, cmdpath))
                    i += 1
                else:
                    raise KubectlError(f"error: flag needs an argument: '{c}' in -{c}\n{usage_hint(cmdpath)}")
                break
        else:
            positional.append(a)
    return values, positional


def split_command(argv: List[str]) -> Tuple[Optional[str], List[str]]:
    """Find the command word; flags before it must be known global flags."""
    by_long = {f.name: f for f in GLOBAL_FLAGS}
    by_short = {f.short: f for f in GLOBAL_FLAGS if f.short}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and len(a) > 2:
            name, eq, _ = a[2:].partition("=")
            if name not in by_long:
                raise KubectlError(f"Error: flags cannot be placed before plugin name: {a}")
            i += 1 if eq else 2
        elif a.startswith("-") and len(a) > 1:
            if a[1] not in by_short:
                raise KubectlError(f"Error: flags cannot be placed before plugin name: {a}")
            i += 1 if len(a) > 2 else 2
        else:
            return a, argv[:i] + argv[i + 1 :]
    return None, list(argv)


def dispatch(argv: List[str], state: str, faults: dict) -> int:
    from . import commands

    command, rest = split_command(argv)
    if command is None:
        # no command (perhaps only global flags): kubectl prints its help and exits 0
        out("kubectl controls the Kubernetes cluster manager (fake_kubectl test double).\n")
        return 0
    if command == "config":
        sub, rest = split_command(rest)
        if sub is None:
            raise not_supported('"kubectl config" without "view"')
        if sub == "current-context":  # the guide's own script (bench/bench.py runs it side by side)
            command = "config current-context"
        elif sub != "view":
            if sub in REAL_CONFIG_COMMANDS:
                raise not_supported(f"kubectl config {sub}")
            raise KubectlError(f"error: unknown command \"{sub}\"\nSee 'kubectl config -h' for help and examples")
        else:
            command = "config view"
    elif command not in COMMAND_FLAGS:
        if command in REAL_COMMANDS:
            raise KubectlError(
                f'error: unknown command "{command}" for "kubectl"\n'
                f'(fake_kubectl: "{command}" is a real kubectl command that this fake '
                "does not implement)"
            )
        raise KubectlError(f'error: unknown command "{command}" for "kubectl"')
    flags, positional = parse_flags(rest, GLOBAL_FLAGS + COMMAND_FLAGS[command], command)
    inv = commands.Invocation(state, command, flags, faults)
    handler = {
        "get": commands.cmd_get,
        "create": commands.cmd_create,
        "delete": commands.cmd_delete,
        "logs": commands.cmd_logs,
        "version": commands.cmd_version,
        "config view": commands.cmd_config_view,
        "config current-context": commands.cmd_config_current_context,
    }[command]
    return handler(inv, flags, positional)


class _StdinRecorder:
    """Wraps sys.stdin so the text read can be recorded in calls.jsonl."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.text: Optional[str] = None

    def read(self, *a: Any) -> str:
        data = self.inner.read(*a)
        self.text = (self.text or "") + data
        return data

    def isatty(self) -> bool:
        try:
            return self.inner.isatty()
        except (AttributeError, ValueError):
            return False


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get(CONTROLLER_ENV):
        from .controller import run_controller

        return run_controller(os.environ[CONTROLLER_ENV])
    state = os.environ.get(STATE_ENV, "")
    if not state or not os.path.isdir(state):
        err(
            f"error: fake_kubectl: {STATE_ENV} is not set to an existing directory "
            "(this is the test fake of kubectl; see tests/fakecluster.py)"
        )
        return 1
    import signal

    from .zygote import kubectl_pid

    call_id = os.urandom(16).hex()
    calls = os.path.join(state, "calls.jsonl")
    start = {"event": "call", "id": call_id, "argv": argv, "start": time.time(), "pid": kubectl_pid()}
    append_line(calls, json.dumps(start) + "\n")
    recorder = _StdinRecorder(sys.stdin)
    sys.stdin = recorder  # type: ignore[assignment]
    rc = 1

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        from .faults import load_faults

        rc = dispatch(argv, state, load_faults())
    except KubectlError as e:
        err(e.message)
        rc = e.code
    except BrokenPipeError:
        rc = 0
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:
        rc = 130
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        done = {"event": "done", "id": call_id, "end": time.time(), "rc": rc, "stdin": recorder.text}
        with contextlib.suppress(OSError):
            append_line(calls, json.dumps(done) + "\n")
    return rc
