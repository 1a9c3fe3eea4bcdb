"""Errors: the one user-facing error type, DemoError, and its exit codes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import NamedTuple, Optional, Sequence, Tuple

from .constants import (
    _GENERIC_NOT_FOUND,
    _KLOG_LINE,
    _NOT_AN_API_SERVER_MARKERS,
    _NOT_APPLIED_MARKERS,
    _TRANSIENT_MARKERS,
    _UNREACHABLE_MESSAGES,
    _WARNING_PREFIX,
    EXIT_CLUSTER,
    EXIT_EPISODE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)

# Errors #######################################################################
# The one user-facing error type, DemoError with its exit code (main() catches it), and its kinds.
# Uses the constants.


class DemoError(Exception):
    """An expected failure: one sentence for the user and the exit code that classifies it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def bug_message(bug: BaseException) -> str:
    """An unexpected exception, a bug, as error.json, the CI reports and stderr name it (exit 3)."""
    return f"unexpected error (a bug in rl-batch-demo): {bug!r}"


# The kinds of Outcome: how a command ended when something was raised.
EXPECTED = "expected"  # a DemoError, or the run's output directory that could not be written
BUG = "bug"  # any other Exception: exit 3, and its traceback shows
INTERRUPTED = "interrupted"  # KeyboardInterrupt (Ctrl-C, SIGTERM), or what the API caller's handler raised
STDOUT_CLOSED = "stdout closed"  # the reader of stdout went away (`| head`): the work itself is done


class Outcome(NamedTuple):
    """What a raised exception ends a command with: its exit code, its one sentence (as error.json
    and stderr give it), and its kind. pre-commit's error_handler is the model: one place maps
    an exception to the documented exit code, so that every command and the API agree."""

    exit_code: int
    message: str
    kind: str
    raised: BaseException

    def error(self) -> DemoError:
        """The DemoError it counts as: the one raised, or one with this outcome's code and sentence."""
        if isinstance(self.raised, DemoError):
            return self.raised
        return DemoError(self.message, self.exit_code)


def outcome_of(raised: BaseException, output: Optional[Path] = None, printing: bool = False) -> Outcome:
    """Classify what was raised. With `output` (a run writing its directory), an OSError is that
    directory's (a full disk, lost permissions: exit 2); for the command line (`printing`), a
    BrokenPipeError is stdout's reader gone (exit 0); any other OSError is a bug like any other
    Exception (exit 3). Every BaseException that is not an Exception is an interruption (exit 130)."""
    if isinstance(raised, DemoError):
        return Outcome(raised.exit_code, str(raised), EXPECTED, raised)
    if isinstance(raised, OSError) and output is not None:
        message = (
            f"cannot write the run's output ({raised.strerror or raised}: {raised.filename}); "
            f"check the free space and permissions of {output}"
        )
        return Outcome(EXIT_USAGE, message, EXPECTED, raised)
    if isinstance(raised, BrokenPipeError) and printing:
        return Outcome(EXIT_OK, "the reader of stdout went away", STDOUT_CLOSED, raised)
    if isinstance(raised, Exception):
        return Outcome(EXIT_CLUSTER, bug_message(raised), BUG, raised)
    return Outcome(EXIT_INTERRUPTED, "interrupted", INTERRUPTED, raised)


class EpisodeInvalid(DemoError):
    """An episode broke one of the validation rules."""

    def __init__(self, pod: str, rule: str, inspect: str) -> None:
        super().__init__(f"episode {pod}: {rule}; inspect {inspect}", EXIT_EPISODE)
        self.pod = pod
        self.rule = rule
        self.inspect = inspect


class EventParseError(ValueError):
    """A line that claims to be an event but is not a valid one."""


def kubectl_message(stderr: str) -> str:
    """kubectl's own message in its stderr: the first line that is neither a klog line nor a
    server warning (the last line when there is nothing else)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    own = (line for line in lines if not (re.match(_KLOG_LINE, line) or line.startswith(_WARNING_PREFIX)))
    return next(own, lines[-1] if lines else "(no message)")


def unreachable_reason(message: str) -> Optional[Tuple[str, str]]:
    """(host, reason) when kubectl's message says no answer came from the API server (host "" when
    the message does not name it); None for any other message. A dial error is shortened to its
    cause: "dial tcp 10.0.0.1:6443: connect: connection refused" becomes "connection refused"."""
    for pattern in _UNREACHABLE_MESSAGES:
        match = re.match(pattern, message)
        if match:
            found = match.groupdict()
            reason = found["reason"]
            if reason == "refused" or reason.startswith("dial tcp"):
                reason = "connection refused" if reason == "refused" else reason.rsplit(": ", 1)[-1]
            host = found.get("host") or re.sub(r"^\w+://([^/]+).*$", r"\1", found.get("url") or "")
            lookup = re.search(r"\blookup (\S+?)(?: on \S+)?: no such host$", message)
            return host or (lookup.group(1) if lookup else ""), reason
    return None


def unreachable_message(server: Optional[str], context: Optional[str], reason: str) -> str:
    """One line for an API server that did not answer: which server, which context, what to check."""
    where = f"the API server {server}" if server else "the API server"
    named = f" of context {context}" if context else ""
    probe = shlex.join(["kubectl", *(["--context", context] if context else []), "cluster-info"])
    if "x509:" in reason or reason.startswith("tls: failed to verify"):
        return (
            f"cannot verify {where}{named} ({reason}); check the certificate-authority of the context's "
            f"cluster in the kubeconfig, or `{probe}`"
        )
    return f"cannot reach {where}{named} ({reason}); check the network/VPN and that the cluster runs, or `{probe}`"


def not_an_api_server(argv: Sequence[str], stderr: str) -> bool:
    """Whether kubectl's stderr says that the server answered, but not as a Kubernetes API server:
    404 to API discovery or to the OpenAPI document (_NOT_AN_API_SERVER_MARKERS), or to /version
    (`kubectl version`), which every API server serves."""
    if any(marker in stderr for marker in _NOT_AN_API_SERVER_MARKERS):
        return True
    version = "version" in argv[1:] and not any(arg in ("get", "create", "logs") for arg in argv[1:])
    return version and kubectl_message(stderr) == f"Error from server (NotFound): {_GENERIC_NOT_FOUND}"


def not_an_api_server_message(server: Optional[str], context: Optional[str]) -> str:
    """One line for a URL that answers HTTP but is no Kubernetes API server."""
    where = f"the server {server}" if server else "the context's server"
    named = f" of context {context}" if context else ""
    probe = shlex.join(["kubectl", *(["--context", context] if context else []), "cluster-info"])
    return (
        f"{where}{named} answers, but not as a Kubernetes API server (404 Not Found for the API's own paths, "
        f"such as /version and /api: an HTTP proxy or another web server at that URL?); check the server URL "
        f"and port of the context's cluster in the kubeconfig, and any proxy settings (HTTPS_PROXY), or `{probe}`"
    )


class KubectlFailure(DemoError):
    """kubectl ran and exited non-zero. When no answer came from the API server, the message says
    so in one line naming the server (`server`, else the host kubectl names) and the context."""

    def __init__(
        self, argv: Sequence[str], returncode: int, stderr: str, stdout: str = "", server: Optional[str] = None
    ) -> None:
        self.stderr = stderr
        self.stdout = stdout
        self.first_line = kubectl_message(stderr)
        self.command = shlex.join(["kubectl", *argv[1:]])
        unreachable = unreachable_reason(self.first_line)
        foreign = unreachable is None and not_an_api_server(argv, stderr)
        # either way no call can succeed: the caller stops at the first, with this one line
        self.unreachable = unreachable is not None or foreign
        context = next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--context=")), None)
        if unreachable is not None:
            message = unreachable_message(server or unreachable[0], context, unreachable[1])
        elif foreign:
            message = not_an_api_server_message(server, context)
        else:
            message = f"`{self.command}` failed (exit {returncode}): {self.first_line}"
        super().__init__(message, EXIT_CLUSTER)

    @property
    def transient(self) -> bool:
        lowered = self.stderr.lower()
        return any(marker in lowered for marker in _TRANSIENT_MARKERS)

    @property
    def not_applied(self) -> bool:
        lowered = self.stderr.lower()
        return any(marker in lowered for marker in _NOT_APPLIED_MARKERS)

    @property
    def already_exists(self) -> bool:
        return "(AlreadyExists)" in self.stderr


class KubectlTimeout(DemoError):
    """kubectl did not answer within its process timeout; whether the request took effect is unknown."""


class JobRefused(DemoError):
    """The cluster changed what the run's Job runs, or gave it to another controller: the run deletes
    its Job and stops, since what it would measure is not what it asked for."""

    def __init__(self, what: str) -> None:
        super().__init__(what, EXIT_CLUSTER)
        self.what = what
