"""Errors: the one user-facing error type, DemoError, and its exit codes."""

from __future__ import annotations

import re
import shlex
from typing import Optional, Sequence, Tuple

from .constants import (
    _KLOG_LINE,
    _NOT_APPLIED_MARKERS,
    _TRANSIENT_MARKERS,
    _UNREACHABLE_MESSAGES,
    _WARNING_PREFIX,
    EXIT_CLUSTER,
    EXIT_EPISODE,
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
        self.unreachable = unreachable is not None
        if unreachable is not None:
            context = next((arg.split("=", 1)[1] for arg in argv if arg.startswith("--context=")), None)
            message = unreachable_message(server or unreachable[0], context, unreachable[1])
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

    @property
    def not_found(self) -> bool:
        """The object is gone (`Error from server (NotFound)`), e.g. deleted between a read and a delete."""
        return "(NotFound)" in self.stderr


class KubectlTimeout(DemoError):
    """kubectl did not answer within its process timeout; whether the request took effect is unknown."""


class JobRefused(DemoError):
    """The cluster changed what the run's Job runs, or gave it to another controller: the run deletes
    its Job and stops, since what it would measure is not what it asked for."""

    def __init__(self, what: str) -> None:
        super().__init__(what, EXIT_CLUSTER)
        self.what = what
