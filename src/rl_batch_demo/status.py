"""Status on stderr: the progress line and the one-line messages."""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from typing import Any, Dict, Mapping, Optional, Tuple

from .core_reports import printable
from .records import TIMING

# Status on stderr #############################################################
# Warnings and the progress line: stderr only, stdout carries the summary. Uses the records and
# the reports' escaping.


def say_stderr(message: str) -> None:
    print(printable(message), file=sys.stderr, flush=True)


def rewrites_in_place(stream: Any, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether a status line may be rewritten in place (a carriage return and an erase-line
    escape): only on a terminal, not under TERM=dumb, and not with NO_COLOR set to any non-empty
    value (no-color.org); otherwise the output holds no escape sequence at all."""
    environ = os.environ if environ is None else environ
    if environ.get("TERM") == "dumb" or environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """One rewriting line on a terminal; in a log (or under TERM=dumb or NO_COLOR), a line per
    change, at most one a second (so 1,000 pods do not print 3,000 lines) plus the final state;
    silent with --quiet. Each says the counts, the time elapsed and the time left to the deadline."""

    def __init__(
        self,
        enabled: bool,
        stream: Any = None,
        log_interval: Optional[float] = None,
        environ: Optional[Mapping[str, str]] = None,
        columns: Optional[int] = None,
    ) -> None:
        self.enabled = enabled
        self.columns = columns  # the terminal's width; None: asked each time (it may be resized)
        self.log_interval = TIMING.progress_log_interval if log_interval is None else log_interval
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = rewrites_in_place(self.stream, environ)
        self.printed_state: Optional[str] = None
        self.pending: Optional[Tuple[str, str]] = None  # (state, line)
        self.printed_at = -math.inf
        self.dirty = False

    def update(
        self,
        label: str,
        elapsed: float,
        counts: Dict[str, int],
        left: Optional[float] = None,
        queued: bool = False,
        note: str = "",
    ) -> None:
        """The counts of `label`'s pods, `elapsed` seconds since its submission, `left` seconds
        until the client stops waiting (None: no deadline to show); `queued`: the Job waits,
        suspended, for a queue to admit it; `note`: what else the line must say (a node that
        stopped answering, lost_node_note)."""
        if not self.enabled:
            return
        state = ", ".join(f"{counts.get(phase, 0)} {phase}" for phase in ("created", "running", "succeeded", "failed"))
        state = "queued: suspended until a queue admits it" if queued else state
        state = f"{state}; {note}" if note else state
        times = f"{elapsed:.1f} s elapsed" + (f", {max(left, 0.0):.0f} s left" if left is not None else "")
        if self.interactive:
            columns = self.columns or shutil.get_terminal_size().columns
            line = f"{label} ({times}): {state}"[: max(columns - 1, 20)]  # never wraps
            self.stream.write(f"\r\033[K{line}")
            self.stream.flush()
            self.dirty = True
            return
        if state == self.printed_state:
            self.pending = None
            return
        self.pending = (state, f"{label} ({times}): {state}\n")
        if time.monotonic() - self.printed_at >= self.log_interval:
            self._flush_pending()

    def _flush_pending(self) -> None:
        if self.pending is not None:
            self.printed_state, line = self.pending
            self.stream.write(line)
            self.stream.flush()
            self.printed_at = time.monotonic()
            self.pending = None

    def finish(self) -> None:
        if self.dirty:
            self.stream.write("\n")
            self.stream.flush()
            self.dirty = False
        self._flush_pending()
