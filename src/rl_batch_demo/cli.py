"""The command line: argparse, the settings it builds, and main()."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import shlex
import signal
import sys
import threading
import typing
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Mapping, NoReturn, Optional, Sequence, Tuple

from .commands import cmd_check, cmd_cleanup, cmd_compare, cmd_reproduce, cmd_run_reported, cmd_show_worker
from .constants import (
    ARTIFACTS_ENV,
    CLEANUP_WAIT_SECONDS,
    CLIENT_GRACE_SECONDS,
    DEFAULT_COUNT,
    DEFAULT_EPHEMERAL_STORAGE,
    DEFAULT_IMAGE,
    DEFAULT_JOB_DEADLINE_SECONDS,
    DEFAULT_MAX_ARTIFACT_BYTES,
    DEFAULT_RUNTIME,
    DEFAULT_WORKSPACE_SIZE,
    EXIT_CODES_HELP,
    EXIT_THRESHOLD,
    EXIT_USAGE,
    INSTALLED_COMMAND,
    KUBECTL_PROCESS_TIMEOUT,
    MAX_ARTIFACT_BYTES_LIMIT,
    MAX_COUNT,
    MAX_COUNT_LARGE,
    MAX_INFRA_RETRIES,
    MAX_ROUNDS,
    MAX_WAIT_SECONDS,
    NAMESPACE_PREFIX,
    NO_RUNTIME,
    PLUGIN_COMMAND,
    PLUGIN_FILE_NAMES,
    REWARD_LIMIT,
    TAG_KEYS_LIMIT,
    TAGS_LIMIT,
    TASKS_KEY,
    THRESHOLD_METRICS,
    __version__,
)
from .core_basics import (
    _reject_constant,
    check_worker_source,
    configmap_manifest,
    configmap_size_problem,
    file_fingerprint,
    parse_quantity,
    parse_tasks,
)
from .core_guide import _DIGEST, GUIDE_REFERENCE
from .core_reports import fit_lines, printable
from .errors import BUG, INTERRUPTED, STDOUT_CLOSED, DemoError, outcome_of
from .kubectl import make_kubectl
from .payloads import LAUNCHER_SOURCE, WORKER_SOURCE, WORKER_TEMPLATE
from .persistence import read_input_file
from .records import JsonObject, RunSettings
from .status import discard_stdout, say_stderr, terminal_width

# Command line #################################################################
# Flags to typed settings, checked before any work, and main(). Uses anything, the payload below
# included: it hands the worker's text to the commands.


def whole_number(minimum: int, limit: Optional[int] = None, unit: str = " seconds") -> Callable[[str], int]:
    """An argparse type: a whole number of at least `minimum` (0 or 1), and with `limit`, a number
    (of seconds, or of `unit`) no larger than that (a longer wait is a typo)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"{text!r} must be at least 1" if minimum else f"{text!r} must be 0 or more"
            )
        if limit is not None and value > limit:
            raise argparse.ArgumentTypeError(f"{text!r} is more than {limit}{unit}")
        return value

    return parse


def artifact_budget(text: str) -> int:
    """An argparse type: --max-artifact-bytes, a whole number of bytes or a quantity (512Ki, 2Mi),
    at most MAX_ARTIFACT_BYTES_LIMIT: more base64 in a log would near the kubelet's rotation."""
    try:
        value = parse_quantity(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes (such as 1048576 or 1Mi)") from None
    if not (value >= 0 and value == int(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes")
    if value > MAX_ARTIFACT_BYTES_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{text!r} is more than {MAX_ARTIFACT_BYTES_LIMIT:,} bytes (4Mi): their frames in the log would near the "
            "kubelet's 10 MiB log rotation, past which `kubectl logs` returns only the current file"
        )
    return int(value)


def storage_quantity(text: str) -> str:
    """An argparse type: --ephemeral-storage, --workspace-size, a positive whole number of bytes as a
    Kubernetes quantity (512Mi, 2Gi, 1000000000), kept as given: the API server stores it so."""
    try:
        value = parse_quantity(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a quantity of bytes (such as 512Mi or 2Gi)") from None
    if not (value >= 1 and value == int(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number of bytes")
    return text


def threshold(text: str) -> Tuple[str, float]:
    metric, separator, limit = text.partition("=")
    if not separator:
        raise argparse.ArgumentTypeError(f"{text!r} is not METRIC=SECONDS")
    if metric not in THRESHOLD_METRICS:
        raise argparse.ArgumentTypeError(f"unknown metric {metric!r}; choose from {', '.join(THRESHOLD_METRICS)}")
    try:
        seconds = float(limit)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{limit!r} in {text!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the limit must be positive")
    return metric, seconds


def load_grader(path: Path) -> Callable[[JsonObject, Any], Any]:
    """--grader FILE.py: your own Python file, run here on the client (never in a pod), that
    defines grade(task, info) -> float; it grades each validated episode from its whole task
    (--private-fields too) and its reward event's info. A file that cannot be read, compiled or
    run, or defines no grade, is a usage error before anything is created."""
    source = read_input_file(path, "--grader")
    namespace: Dict[str, Any] = {"__name__": "rl_batch_demo_grader", "__file__": str(path)}
    try:
        # the user's own grader, run like their trainer's code on their machine: never in a pod
        exec(compile(source, str(path), "exec"), namespace)
    except Exception as error:  # its own error, in one line
        raise DemoError(f"--grader {path} cannot be loaded: {type(error).__name__}: {error}", EXIT_USAGE) from None
    grade = namespace.get("grade")
    if not callable(grade):
        raise DemoError(f"--grader {path} defines no function grade(task, info)", EXIT_USAGE)
    return lambda task, row: grade(task, row.get("info") or {})


def tags_arg(text: str) -> JsonObject:
    """An argparse type: --tags, one JSON object (strict JSON: no NaN), at most TAG_KEYS_LIMIT keys
    and TAGS_LIMIT bytes as JSON, carried as given."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        raise argparse.ArgumentTypeError(f"is not JSON ({error})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"is {type(value).__name__} in JSON, not an object of tags")
    if len(value) > TAG_KEYS_LIMIT or len(json.dumps(value).encode()) > TAGS_LIMIT:
        raise argparse.ArgumentTypeError(f"has more than {TAG_KEYS_LIMIT} keys or {TAGS_LIMIT} bytes of JSON")
    return value


class VersionAction(argparse.Action):
    """--version with the hash of this file, computed only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"{parser.prog} {__version__} (file sha256 {file_fingerprint()})")
        parser.exit()


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """The suggestion for a mistyped word, `; did you mean X?`, or "" when no choice is close: a
    choice the word abbreviates first (--out: --output), else the closest one by difflib."""
    import difflib  # noqa: PLC0415 - only a usage error needs it; keeps --help fast

    every = list(choices)
    abbreviated = [choice for choice in every if choice.startswith(word)]
    close = difflib.get_close_matches(word, abbreviated or every, n=1, cutoff=0.0 if abbreviated else 0.6)
    return f"; did you mean {close[0]}?" if close else ""


class CommandLineParser(argparse.ArgumentParser):
    """argparse as this tool words a usage error: one line naming the problem (with a suggestion
    for a mistyped flag or command) and the --help to read, exit 2; never the usage block. No flag
    is taken for an abbreviation of a longer one (allow_abbrev=False), so a typo never picks one."""

    def __init__(self, **options: Any) -> None:
        self._deferred: typing.List[Callable[[], None]] = []  # before argparse's own __init__ reads _actions
        super().__init__(allow_abbrev=False, **options)
        self.commands: Dict[str, argparse.ArgumentParser] = {}  # the subcommands, on the top parser
        self.help_command = self.prog  # the --help to name: the command as the user started the tool

    def defer(self, add_options: Callable[[], None]) -> None:
        """Add this parser's options only when something first reads them: a command line uses
        one subcommand, and adding the other commands' 80 options cost 3.5 ms of each start
        (each add_argument makes a help formatter), each call of the Python API twice."""
        self._deferred.append(add_options)

    # Every reader of a parser's options (parsing, --help, usage, check_flags, the API's keyword
    # words, argument groups) goes through _actions first: reading it adds the deferred options.
    @property
    def _actions(self) -> typing.List[argparse.Action]:
        if self._deferred:
            deferred, self._deferred = self._deferred, []
            for add_options in deferred:
                add_options()
        return self._action_list

    @_actions.setter
    def _actions(self, actions: typing.List[argparse.Action]) -> None:
        self._action_list = actions

    def format_help(self) -> str:
        """argparse's help, each line then fitted to a terminal's width: argparse wraps the flags'
        help, not the description and the exit codes written out as they are (--help goes to stdout)."""
        return fit_lines(super().format_help().rstrip("\n"), terminal_width(sys.stdout)) + "\n"

    def error(self, message: str) -> NoReturn:
        line = f"rl-batch-demo: error: {printable(message)} (see {self.help_command} --help)"
        self.exit(EXIT_USAGE, fit_lines(line, terminal_width(sys.stderr)) + "\n")

    def parse_command_line(self, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
        """parse_args, after the words are checked: a mistyped command or flag is named, with a
        suggestion, before argparse would report something else (a required --output) instead."""
        words = list(sys.argv[1:] if argv is None else argv)
        at = next((index for index, word in enumerate(words) if not word.startswith("-")), len(words))
        self.check_flags(words[:at])
        if self.commands and at < len(words):
            command = words[at]
            if command not in self.commands:
                self.error(f"unknown command {command}{did_you_mean(command, self.commands)}")
            parser = self.commands[command]
            if isinstance(parser, CommandLineParser):
                parser.check_flags(words[at + 1 :])
        args, extras = self.parse_known_args(words)
        if extras:
            getattr(args, "subparser", self).error(f"unexpected argument {extras[0]}")
        return args

    def check_flags(self, words: Sequence[str]) -> None:
        """Every flag among `words` must be one of this parser's (`-vh` stands for -v -h; `-1` is a
        number; a value after `=` is not looked at), up to a `--`."""
        known = [option for action in self._actions for option in action.option_strings]
        for word in words:
            if word == "--":
                return
            flag = word.split("=", 1)[0]
            if not flag.startswith("-") or flag == "-" or re.match(r"^-\d", flag) or flag in known:
                continue
            if not flag.startswith("--") and all(f"-{letter}" in known for letter in flag[1:]):
                continue
            self.error(f"unknown flag {flag}{did_you_mean(flag, known)}")


def parallelism_arg(text: str) -> Any:
    """--parallelism's value: a whole number of at least 1, or "auto" (the preflight decides)."""
    if text == "auto":
        return text
    try:
        return whole_number(1)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number of at least 1 nor auto") from None


def reward_arg(text: str) -> float:
    """An argparse type: --failed-episode-reward, a finite number within a reward's limit."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or abs(value) > REWARD_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite reward of at most {REWARD_LIMIT:g} in size")
    return value


def pinned_image_arg(text: str) -> str:
    """--pin-image's value: empty (argparse's const: resolve the digest) or an image by digest."""
    if text and (not re.search(_DIGEST, text) or text.startswith("@")):
        raise argparse.ArgumentTypeError(f"{text!r} is not an image by digest (REPO@sha256:64 hex digits)")
    return text


def _shared_options() -> Dict[str, Dict[str, Any]]:
    """The flags several commands take, each defined once (read when the parser is built, so the
    defaults are today's); a command may change a flag's default or help (see _add_options)."""
    return {
        "--output": {"required": True, "metavar": "DIR"},
        "--count": {"type": whole_number(1), "default": DEFAULT_COUNT, "metavar": "N"},
        "--rounds": {"type": whole_number(1), "metavar": "K"},
        "--image": {
            "default": DEFAULT_IMAGE,
            "help": f"container image with python, runnable as UID/GID 1000 (default {DEFAULT_IMAGE})",
        },
        "--runtime": {
            "default": DEFAULT_RUNTIME,
            "metavar": "RUNTIMECLASS",
            "help": f"RuntimeClass of the sandboxes (default {DEFAULT_RUNTIME}); 'none' uses the cluster's default "
            "runtime",
        },
        "--timeout": {
            "type": whole_number(1, MAX_WAIT_SECONDS),
            "default": DEFAULT_JOB_DEADLINE_SECONDS,
            "metavar": "SECONDS",
            "help": f"each Job's activeDeadlineSeconds (default {DEFAULT_JOB_DEADLINE_SECONDS}); "
            f"the client waits {CLIENT_GRACE_SECONDS} s longer",
        },
        "--ephemeral-storage": {
            "type": storage_quantity,
            "default": DEFAULT_EPHEMERAL_STORAGE,
            "metavar": "QUANTITY",
            "help": "each episode container's ephemeral-storage request and limit: its writable layer, its logs and "
            f"/workspace together; a pod over it is evicted, the episode's own failure (default "
            f"{DEFAULT_EPHEMERAL_STORAGE})",
        },
        "--workspace-size": {
            "type": storage_quantity,
            "default": DEFAULT_WORKSPACE_SIZE,
            "metavar": "QUANTITY",
            "help": f"the sizeLimit of the episode's /workspace emptyDir, at most --ephemeral-storage (default "
            f"{DEFAULT_WORKSPACE_SIZE})",
        },
        "--queue": {
            "metavar": "CLUSTERQUEUE",
            "help": "run through Kueue: create a LocalQueue in the run's namespace pointing at this ClusterQueue and "
            "label every Job with it (kueue.x-k8s.io/queue-name); needs create, get and delete localqueues",
        },
        "--allow-large": {
            "action": "store_true",
            "help": f"allow up to {MAX_COUNT_LARGE} episodes instead of {MAX_COUNT}",
        },
        "--quiet": {"action": "store_true", "help": "no progress line on stderr"},
        "--kubelet-metrics": {
            "action": "store_true",
            "help": "also read the kubelets' runtime histograms (RunPodSandbox, CreateContainer, StartContainer, "
            "PullImage) before and after the run; needs get nodes/proxy, a powerful permission (off by default)",
        },
        "--junit": {"metavar": "FILE"},
        "--json": {"action": "store_true", "help": "print the guide's JSON summary instead of the table"},
        "--threshold": {
            "type": threshold,
            "action": "append",
            "metavar": "METRIC=SECONDS",
            "help": f"fail with exit code {EXIT_THRESHOLD} when a figure exceeds its budget (repeatable); "
            f"metrics: {', '.join(THRESHOLD_METRICS)}",
        },
        "--metrics-file": {
            "metavar": "FILE",
            "help": "write the run's figures as rl_batch_demo_* gauges in the Prometheus text format "
            "(node_exporter's textfile collector, a Pushgateway)",
        },
        "--lang": {
            "choices": ("en", "zh"),
            "default": "en",
            "help": "row labels of the guide's table: en, or zh (the guide's own)",
        },
        "--reference": {
            "choices": ("guide",),
            "help": f"add the guide's published columns ({GUIDE_REFERENCE['date']}) beside the runs' in the guide's "
            "table",
        },
        "-v/--verbose": {
            "action": "store_true",
            "help": "show each kubectl call on stderr as it ends (the command, its exit code and seconds), and every "
            "retry",
        },
        "--context": {"help": "kubeconfig context to use (default: the current context, read once)"},
        "--kubeconfig": {"help": "kubeconfig file (default: kubectl's own: $KUBECONFIG or ~/.kube/config)"},
        "--kubectl": {"help": "kubectl binary (default: $KUBECTL, else kubectl on PATH)"},
        "--kubectl-timeout": {
            "type": whole_number(1, MAX_WAIT_SECONDS),
            "default": int(KUBECTL_PROCESS_TIMEOUT),
            "metavar": "SECONDS",
            "help": "kill a kubectl call that has not answered after this long, a log read once it has "
            f"printed nothing for this long (default {int(KUBECTL_PROCESS_TIMEOUT)})",
        },
    }


def _add_options(parser: Any, shared: Dict[str, Dict[str, Any]], options: Mapping[str, Any]) -> None:
    """Each flag of `options` as `shared` defines it, changed by its value: a help text, a dict of
    add_argument's options, or None (as defined; then a key may name several flags, space-separated).
    A flag's other names follow a slash (-v/--verbose). `parser` may be an argument group."""
    for flags, change in options.items():
        changes = {"help": change} if isinstance(change, str) else change or {}
        for flag in flags.split():
            parser.add_argument(*flag.split("/"), **{**shared.get(flag, {}), **changes})


def build_parser(
    tool: Optional[str] = None, parser_class: typing.Type[CommandLineParser] = CommandLineParser
) -> CommandLineParser:
    """The command line; its usage lines name the tool as the user started it (see invoked_as).
    `parser_class` words its usage errors (the Python API raises them; its commands take it too)."""
    plugin = (tool or invoked_as()) == PLUGIN_COMMAND
    parser = parser_class(
        prog=PLUGIN_COMMAND if plugin else INSTALLED_COMMAND,
        description="Time how fast a Kubernetes cluster prepares N isolated RL-rollout sandboxes, "
        "run a fix -> test -> reward episode in each, and collect every reward.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction, nargs=0, help="show the version and this file's hash")
    parser.help_command = tool or invoked_as()
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    shared = _shared_options()
    cluster = ("cluster", {"-v/--verbose --context --kubeconfig --kubectl --kubectl-timeout": None})

    def command(
        name: str, about: str, description: Optional[str], options: Mapping[str, Any], *groups: Tuple[str, Any]
    ) -> None:
        """A subcommand with its options, then its groups of options (title, options)."""
        subparser = commands.add_parser(
            name,
            help=about,
            description=description,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

        def add_options() -> None:
            _add_options(subparser, shared, options)
            for title, grouped in groups:
                _add_options(subparser.add_argument_group(title), shared, grouped)
            subparser.set_defaults(subparser=subparser)  # a usage error names the command's --help

        subparser.defer(add_options)
        subparser.help_command = f"{tool or invoked_as()} {name}"
        parser.commands[name] = subparser

    command(
        "run",
        "run a batch of episodes and measure it",
        "Create a namespace, a ConfigMap with the episode worker and a Job of N episodes; wait for it, save every "
        "diagnostic, validate every episode and write results.json.",
        {
            "--output": "new directory for receipt, diagnostics and results (must not exist)",
            "--count": {
                "default": None,
                "help": f"episodes per round: the Job's completions (default {DEFAULT_COUNT}, at most {MAX_COUNT}; "
                "with --tasks, the number of tasks)",
            },
            "--parallelism": {
                "type": parallelism_arg,
                "metavar": "P|auto",
                "help": "episodes running at once: the Job's parallelism (default: N; 1 runs them one after another; "
                "auto: as many as the eligible nodes have room for now, as `check` counts it, at most N; needs list "
                "nodes, list pods in every namespace and, with a RuntimeClass, list runtimeclasses)",
            },
            "--rounds": {
                "default": 1,
                "help": f"run K batches of N one after another, each its own Job (default 1, at most {MAX_ROUNDS})",
            },
            "--image --runtime --timeout --ephemeral-storage --workspace-size --queue": None,
            "--cleanup": {
                "choices": ("never", "on-success", "always"),
                "default": "never",
                "help": "delete what the run created once diagnostics are saved (default never, the guide's behaviour)",
            },
            "--threshold --allow-large": None,
            "--worker": {
                "metavar": "FILE.py",
                "help": "your episode worker instead of the built-in one (show-worker prints one to start from); it "
                "must emit one ready and one reward event with a finite numeric reward",
            },
            "--tasks": {
                "metavar": "FILE.jsonl",
                "help": "one JSON object per line, one episode each (the count is the number of lines); episode i "
                f"(its completion index: every Job is Indexed) reads line i of /demo/{TASKS_KEY}",
            },
            "--max-failed-episodes": {
                "type": whole_number(0),
                "default": 0,
                "metavar": "K",
                "help": "set aside up to K episodes the infrastructure lost (failure_kind infrastructure: evicted, "
                "preempted, refused by the kubelet, deleted): listed in results.json's failed_episodes and left out "
                "of the figures; never retried, and never an episode's own failure (default 0: any failure fails the "
                "run; K > 0 needs per-index backoff limits: Kubernetes 1.33, or 1.29-1.32 with the "
                "JobBackoffLimitPerIndex feature gate, on by default there)",
            },
            "--failed-episode-reward": {
                "type": reward_arg,
                "metavar": "R",
                "help": "score each episode that failed by its own doing (failure_kind episode: a non-zero exit, "
                "killed, no or invalid events, its --episode-timeout) as reward R, your minimum reward, instead of "
                "failing the run; the others run on (needs per-index backoff limits, as --max-failed-episodes)",
            },
            "--stop-after": {
                "type": whole_number(1),
                "metavar": "K",
                "help": "once K episodes of a round have a standing reward (known as their pods end), stop the rest: "
                "the Job is deleted with its pods (foreground) and the run succeeds with the episodes that had "
                "ended, validated; results.json names the stopped ones (stopped_episodes); at most the count",
            },
            "--private-fields": {
                "metavar": "FIELD,...",
                "help": "task fields of --tasks kept out of the ConfigMap, so that no episode can read them (the "
                "expected answer): only the client's grader (--grader) sees them",
            },
            "--grader": {
                "metavar": "FILE.py",
                "help": "grade each validated episode here, on the client, not in the pod: FILE.py defines "
                "grade(task, info) -> float, given the episode's whole task (private fields too) and its reward "
                "event's info; its result is the episode's reward, the pod's own kept as pod_reward",
            },
            "--tags": {
                "type": tags_arg,
                "default": {},
                "metavar": "JSON",
                "help": 'your own metadata as one JSON object (a policy version, a step: \'{"policy": "v7"}\'), '
                "carried as given by every rewards.jsonl line, results.json and the JUnit properties (tag.KEY); at "
                f"most {TAG_KEYS_LIMIT} keys and {TAGS_LIMIT} bytes",
            },
            "--episode-timeout": {
                "type": whole_number(1, MAX_WAIT_SECONDS),
                "metavar": "SECONDS",
                "help": "each episode pod's own activeDeadlineSeconds: a hung episode fails alone, as its own failure "
                "(default: --timeout less a tenth, at most 30 s less; at most --timeout)",
            },
            "--infra-retries": {
                "type": whole_number(0, MAX_INFRA_RETRIES, ""),
                "default": 0,
                "metavar": "K",
                "help": "run an episode whose pod was lost to the infrastructure (evicted, preempted, its node deleted "
                "or tainted node.kubernetes.io/out-of-service: DisruptionTarget; not a node that only stopped "
                "answering, whose pod stays Running) again, up to K times, by the Job's podFailurePolicy; an episode "
                "that failed by its own doing is never retried (default 0: a lost pod fails the run; K > 0 needs "
                "Kubernetes 1.29 or later)",
            },
            "--max-artifact-bytes": {
                "type": artifact_budget,
                "default": DEFAULT_MAX_ARTIFACT_BYTES,
                "metavar": "BYTES",
                "help": "the most bytes of artifacts one episode may save (files its worker writes under "
                f"${ARTIFACTS_ENV}, sent through its log to DIR/artifacts/POD/); an episode over it fails (default "
                f"{DEFAULT_MAX_ARTIFACT_BYTES:,} = 1Mi, at most {MAX_ARTIFACT_BYTES_LIMIT:,} = 4Mi, well under the "
                "kubelet's 10 MiB log rotation)",
            },
            "--dry-run": {"action": "store_true", "help": "write the manifests to DIR and contact no cluster"},
            "--quiet --json --kubelet-metrics": None,
            "--warmup": {
                "action": "store_true",
                "help": "before the measured rounds, one warm-up episode on each eligible node, all at once "
                "(DIR/warmup/)",
            },
            "--pin-image": {
                "nargs": "?",
                "const": "",
                "type": pinned_image_arg,
                "metavar": "REPO@sha256:DIGEST",
                "help": "run the measured Jobs by digest: the imageID the nodes ran in the warm-up (or a one-episode "
                "probe Job), or the digest given",
            },
        },
        cluster,
        (
            "CI reports (written on failure too; see the README's CI section)",
            {
                "--junit": "write a JUnit XML report: one test suite per round, one test case per episode and per "
                "--threshold",
                "--metrics-file": None,
            },
        ),
    )
    command(
        "cleanup",
        "delete what a run created, after checking ownership",
        "Read DIR/receipt.json, check the namespace's and Jobs' UIDs and labels, then delete the Jobs (foreground) "
        "and the namespace. Keeps DIR.",
        {
            "--output": "the run's output directory (holds receipt.json)",
            "--timeout": {
                "default": CLEANUP_WAIT_SECONDS,
                "help": f"how long to wait for the Jobs and then the namespace to go (default {CLEANUP_WAIT_SECONDS})",
            },
        },
        cluster,
    )
    command(
        "check",
        "preflight: can this cluster run the batch? (creates nothing)",
        None,
        {
            "--count": f"episodes to plan capacity for (default {DEFAULT_COUNT}, at most {MAX_COUNT}, as `run`)",
            "--parallelism": {
                "type": parallelism_arg,
                "metavar": "P|auto",
                "help": "episodes at once, as `run --parallelism` (default: N): the capacity is planned for P; auto: "
                "room for at least one, as `run --parallelism auto` needs",
            },
            "--allow-large": None,
            "--runtime": "RuntimeClass to check, or 'none'",
            "--image": "image the run would use (reported only)",
            "--ephemeral-storage": "each episode's ephemeral-storage request, counted in the capacity (default "
            f"{DEFAULT_EPHEMERAL_STORAGE})",
            "--queue": "also review the permissions `run --queue` needs (create, get, delete localqueues) and say "
            "whether this Kueue ClusterQueue exists",
            "--kubelet-metrics": "also check the permission `run --kubelet-metrics` needs (get nodes/proxy, list "
            "nodes)",
            "--json": "print one JSON object, every finding and the verdict, instead of the lines",
        },
        cluster,
    )
    command(
        "compare",
        "show several runs' figures side by side",
        None,
        {
            "directories": {
                "nargs": "+",
                "metavar": "DIR",
                "help": "output directories of finished runs; the first is the baseline for ratios",
            },
            "--format": {
                "choices": ("text", "markdown", "json", "guide"),
                "default": "text",
                "help": "guide: the guide's section 六 table, its rows in its order, one column per run",
            },
            "--lang --reference": None,
            "--allow-different-counts": {
                "action": "store_true",
                "help": "compare runs with different episode counts anyway (refused by default, as the guide advises: "
                "a batch figure grows with the batch, a p95 of more episodes reaches further into the tail)",
            },
        },
    )
    command(
        "show-worker",
        "print the built-in episode worker (or, with --template, a minimal worker to start from)",
        "Print the worker that runs in every sandbox, as a starting point for `run --worker FILE.py`.",
        {"--template": {"action": "store_true", "help": "print a minimal custom worker that reads its task instead"}},
    )
    command(
        "reproduce",
        "the guide's whole experiment, then its table",
        "Run, in the guide's order, DIR/parallel (N at once), DIR/sequential (one at a time) and DIR/warm (--warmup "
        "--rounds K), all with the image digest the first group resolves, each in its own namespace, cleaned up once "
        "its diagnostics are saved; write DIR/report.md and DIR/report.json.",
        {
            "--output": "new directory for the three groups",
            "--count": "tasks per group and round (default 10)",
            "--rounds": {"default": 3, "help": "rounds of the warm group (default 3)"},
            "--image --runtime --timeout --ephemeral-storage --workspace-size": None,
            "--cleanup": {
                "choices": ("on-success", "always"),
                "default": "on-success",
                "help": "on-success (default): keep a failed group's namespace for inspection; always: delete it too",
            },
            "--allow-large --quiet --kubelet-metrics --lang --reference": None,
            "--threshold": f"a latency budget every group's run must keep (repeatable); a breach lets the experiment "
            f"go on, then exits {EXIT_THRESHOLD}; metrics: {', '.join(THRESHOLD_METRICS)}",
            "--json": "print report.json (the experiment, its table and its verdict) instead of the table and the "
            "verdict",
            "--junit": "write a JUnit XML report of every group: one suite per round, one test case per episode "
            "(written on failure too)",
            "--metrics-file": "write every group's figures as rl_batch_demo_* gauges in the Prometheus text format, "
            "labelled group=parallel|sequential|warm (written on failure too)",
        },
        cluster,
    )
    return parser


def check_counts(
    parser: argparse.ArgumentParser, count: int, parallelism: int, rounds: int, allow_large: bool, given: str
) -> None:
    """The limits on a batch's size, checked before any work starts, each named by the flag the
    user gave (`given` says what set the count: "--count 25", "--tasks FILE (25 tasks)", ...)."""
    # the hard limit first: past it, --allow-large would not help, so the fix must not suggest it
    if count > MAX_COUNT_LARGE:
        parser.error(f"{given} is more than {MAX_COUNT_LARGE}, the most --allow-large allows")
    if count > MAX_COUNT and not allow_large:
        parser.error(f"{given} is more than {MAX_COUNT}; pass --allow-large for up to {MAX_COUNT_LARGE}")
    if parallelism > count:
        parser.error(f"--parallelism {parallelism} is more than {given}")
    if rounds > MAX_ROUNDS:
        parser.error(f"--rounds {rounds} is more than {MAX_ROUNDS}")


def run_settings(args: argparse.Namespace) -> RunSettings:
    """What `run` was asked to do: its flags, and the files they name (--worker, --tasks) read and
    checked once, before any work starts; a bad file or flag combination is a usage error."""
    parser: argparse.ArgumentParser = args.subparser
    worker_source, worker_file, tasks, count = WORKER_SOURCE, None, None, args.count
    given = f"--count {count}"
    try:
        if args.worker:
            path = Path(args.worker)
            worker_source, worker_file = check_worker_source(read_input_file(path, "--worker"), str(path)), path.name
        if args.tasks:
            path = Path(args.tasks)
            listed = getattr(args, "tasks_given", None)  # the Python API's list of tasks, as JSON lines
            tasks = tuple(parse_tasks(listed if listed is not None else read_input_file(path, "--tasks"), str(path)))
            if count is not None and count != len(tasks):
                raise DemoError(
                    f"--count {count} does not match the {len(tasks)} tasks in {path} (one episode per line); "
                    "leave --count out or make them agree",
                    EXIT_USAGE,
                )
            count, given = len(tasks), f"--tasks {path} ({len(tasks)} tasks)"
        private = tuple(field for field in (args.private_fields or "").split(",") if field)
        if private and tasks is None:
            raise DemoError("--private-fields needs --tasks: it keeps fields of the tasks out of the pods", EXIT_USAGE)
        unknown = [field for field in private if tasks and not any(field in task for task in tasks)]
        if unknown:  # a typo would keep nothing private, and the real field readable by every pod
            raise DemoError(
                f"--private-fields names {', '.join(repr(field) for field in unknown)}, which no task of "
                f"{args.tasks} has: name the fields to keep out of the pods as the tasks spell them",
                EXIT_USAGE,
            )
        public = tuple({k: v for k, v in task.items() if k not in private} for task in tasks) if tasks else tasks
        grade = load_grader(Path(args.grader)) if args.grader else None
        # the API server refuses a ConfigMap over its object size limit: refused here, before any work
        problem = configmap_size_problem(
            configmap_manifest(NAMESPACE_PREFIX + "0" * 12, "0" * 12, worker_source, public, LAUNCHER_SOURCE)
        )
        if problem:
            raise DemoError(problem, EXIT_USAGE)
    except DemoError as error:
        parser.error(str(error))
    if count is None:
        count, given = DEFAULT_COUNT, f"--count {DEFAULT_COUNT} (the default)"
    auto = args.parallelism == "auto"
    parallelism = count if auto else args.parallelism or count
    check_counts(parser, count, parallelism, args.rounds, args.allow_large, given)
    if args.dry_run and (args.warmup or args.pin_image == ""):
        parser.error(
            "--dry-run contacts no cluster, so it cannot list the nodes to warm up or resolve a digest; "
            "pass --pin-image=REPO@sha256:DIGEST to see the pinned manifests"
        )
    if args.stop_after is not None and args.stop_after > count:
        parser.error(f"--stop-after {args.stop_after} is more than the {count} episodes of a round ({given})")
    if args.episode_timeout is not None and args.episode_timeout > args.timeout:
        parser.error(
            f"--episode-timeout {args.episode_timeout} is longer than --timeout {args.timeout}: the Job's deadline "
            "would stop every episode first; give a shorter --episode-timeout or a longer --timeout"
        )
    if args.dry_run and auto:
        parser.error("--dry-run contacts no cluster, so it cannot count the nodes' room for --parallelism auto")
    return dataclasses.replace(
        _flag_settings(args, count, parallelism),
        json_summary=args.json,
        worker_source=worker_source,
        # --worker's runs through the launcher (it sends what the worker left under
        # RL_DEMO_ARTIFACTS); the built-in worker sends its own files and prints the end line
        # itself, so its pods start one interpreter fewer
        launcher_source=LAUNCHER_SOURCE if worker_file is not None else "",
        worker_file=worker_file,
        tasks=tasks,
        max_failed_episodes=args.max_failed_episodes,
        failed_episode_reward=args.failed_episode_reward,
        episode_timeout=args.episode_timeout,
        stop_after=args.stop_after,
        tags=args.tags,
        private_fields=private,
        grade=grade,
        grader_name=Path(args.grader).name if args.grader else None,
        infra_retries=args.infra_retries,
        max_artifact_bytes=args.max_artifact_bytes,
        queue=args.queue,
        warmup=args.warmup,
        pin_image=args.pin_image,
        dry_run=args.dry_run,
        junit=args.junit,
        metrics_file=args.metrics_file,
        parallelism_auto=auto,
    )


def reproduce_settings(args: argparse.Namespace) -> RunSettings:
    """What every group of `reproduce` shares (each group's own: reproduce_group_settings)."""
    check_counts(args.subparser, args.count, args.count, args.rounds, args.allow_large, f"--count {args.count}")
    return _flag_settings(args, args.count, args.count)


def reproduce_group_settings(argv: Sequence[str]) -> RunSettings:
    """A group's settings, read from the `run` command line reproduce_group_argv spells, which
    report.json records: one spelling of each group, parsed as `run` parses it."""
    return run_settings(build_parser().parse_args(list(argv)))


def _flag_settings(args: argparse.Namespace, count: int, parallelism: int) -> RunSettings:
    """The settings `run` and `reproduce` read from the same flags, with the built-in worker."""
    if parse_quantity(args.workspace_size) > parse_quantity(args.ephemeral_storage):
        # /workspace is on the node's disk and counts against the pod's limit: the limit would evict first
        args.subparser.error(
            f"--workspace-size {args.workspace_size} is more than --ephemeral-storage {args.ephemeral_storage}: "
            "/workspace counts against the pod's ephemeral storage, so the pod's limit would evict it first"
        )
    return RunSettings(
        output=Path(args.output),
        count=count,
        parallelism=parallelism,
        rounds=args.rounds,
        image=args.image,
        runtime=None if args.runtime == NO_RUNTIME else args.runtime,
        deadline_seconds=args.timeout,
        cleanup_policy=args.cleanup,
        thresholds=dict(args.threshold or []),
        quiet=args.quiet,
        json_summary=False,
        kubectl_timeout=float(args.kubectl_timeout),
        worker_source=WORKER_SOURCE,
        kubelet_metrics=args.kubelet_metrics,
        ephemeral_storage=args.ephemeral_storage,
        workspace_size=args.workspace_size,
    )


def invoked_as(plugin: bool = False) -> str:
    """The command the user typed to start this tool: `kubectl rl-batch-demo` as a kubectl plugin,
    `rl-batch-demo` as the installed command, else `python3 FILE`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if plugin or name in PLUGIN_FILE_NAMES:
        return PLUGIN_COMMAND
    if name == INSTALLED_COMMAND:
        return INSTALLED_COMMAND
    try:
        relative = os.path.relpath(__file__)
    except OSError:  # the working directory was removed: the path as Python has it
        relative = ".."
    return f"python3 {shlex.quote(__file__ if relative.startswith('..') else relative)}"


def prepared_command(args: argparse.Namespace, tool: str) -> Callable[[], int]:
    """The chosen command with what it needs (the typed settings of `run` and `reproduce`, the
    worker's text, how the user started this tool), read and checked: a usage error stops here."""
    if args.command == "run":
        settings = run_settings(args)
        return lambda: cmd_run_reported(settings, make_kubectl(args), tool)
    if args.command == "reproduce":
        base = reproduce_settings(args)
        return lambda: cmd_reproduce(args, base, tool, reproduce_group_settings)
    if args.command == "show-worker":
        source = WORKER_TEMPLATE if args.template else WORKER_SOURCE
        return lambda: cmd_show_worker(source)
    if args.command == "check":  # held to run's limits, so that a ready check means run would start
        parallelism = args.count if args.parallelism in (None, "auto") else args.parallelism
        check_counts(args.subparser, args.count, parallelism, 1, args.allow_large, f"--count {args.count}")
    command = {"check": cmd_check, "cleanup": cmd_cleanup, "compare": cmd_compare}[args.command]
    return lambda: command(args)


def plugin_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the installed kubectl-rl_batch_demo: `kubectl rl-batch-demo ...`."""
    return main(argv, plugin=True)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Optional[Sequence[str]] = None, *, plugin: bool = False) -> int:
    previous = None
    if threading.current_thread() is threading.main_thread():  # first: from here on SIGTERM is a Ctrl-C
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        tool = invoked_as(plugin)
        args = build_parser(tool).parse_command_line(argv)
        return int(prepared_command(args, tool)())
    except (Exception, KeyboardInterrupt) as raised:  # SystemExit (argparse's usage errors) passes through
        outcome = outcome_of(raised, printing=True)
        if outcome.kind == STDOUT_CLOSED:  # `| head`: the work itself is done
            discard_stdout()
        elif outcome.kind == INTERRUPTED:
            print("rl-batch-demo: interrupted", file=sys.stderr)
        elif outcome.kind == BUG:  # its traceback for the report, then the exit code error.json gives it
            import traceback  # noqa: PLC0415 - only a bug needs it

            traceback.print_exception(type(raised), raised, raised.__traceback__, file=sys.stderr)
            print(
                f"rl-batch-demo: error: {printable(outcome.message)}; the traceback above is for a bug report",
                file=sys.stderr,
            )
        else:  # wrapped at spaces on a terminal, whole in a log
            say_stderr(f"rl-batch-demo: error: {outcome.message}")
        return outcome.exit_code
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_as_script() -> typing.NoReturn:
    """`python3 rl_batch_demo.py ...`: main(), then the process ends at once. By then every file is
    written and closed, every kubectl has been waited for and every thread that mattered joined;
    what the interpreter's own teardown would still do is free this module's objects one by one
    and run nothing the tool registered (it registers no atexit handler), which took 30 to 100 ms
    on a loaded 2-core machine (docs/benchmark.md): the run's end, as a user or CI sees it."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone (`| head`), or the stream closed
            stream.flush()
    os._exit(code)
