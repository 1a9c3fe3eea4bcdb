"""Status on stderr: the progress line and the one-line messages."""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from typing import Any, Dict, Mapping, Optional, Tuple

from .constants import TERMINAL_COLUMNS_UNKNOWN
from .core_reports import _display_width, fit_lines, printable, shorten
from .records import TIMING

# Status on stderr #############################################################
# Warnings and the progress line: stderr only, stdout carries the summary. Uses the records and
# the reports' escaping.


def discard_stdout() -> None:
    """Point stdout at /dev/null once its reader went away (`| head`), so that no later write,
    Python's own flush at exit included, raises BrokenPipeError again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def terminal_width(stream: Any, environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """The columns a line written to `stream` may take: None when it is not a terminal (a CI log,
    a file, a pipe keep full lines); else COLUMNS when it holds a positive number (as the shells
    and Python's shutil read it), else the terminal's own size, else 80."""
    if not getattr(stream, "isatty", lambda: False)():
        return None
    environ = os.environ if environ is None else environ
    columns = environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or TERMINAL_COLUMNS_UNKNOWN
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return TERMINAL_COLUMNS_UNKNOWN


def say(message: str, stream: Any = None, whole: Optional[str] = None) -> None:
    """One message on `stream` (stdout by default) with its control characters escaped, each
    line wrapped at spaces to fit a terminal (fit_lines), whole elsewhere. `whole`, a command
    the message ends with, is never broken (a command copied from two lines would run its first
    half): when the line does not fit, it starts a line of its own."""
    stream = sys.stdout if stream is None else stream
    clear_progress(stream)
    text, width = printable(message, keep_newlines=True), terminal_width(stream)
    command = printable(whole) if whole is not None else None
    if command and width is not None and fit_lines(text, width) != text and text.endswith(command):
        text = fit_lines(text[: -len(command)].rstrip(), width) + "\n" + shell_lines(command, width)
    else:
        text = fit_lines(text, width)
    stream.write(text + "\n")
    stream.flush()


def shell_lines(command: str, width: int, prefix: str = "  ", comment: str = "") -> str:
    """A shell command after `prefix` on lines of at most `width` columns, broken only between
    its words with a backslash-newline (the shell joins them back), so it can be copied as shown;
    a word wider than the line is cut the same way inside it, unless it is quoted. `comment`
    ("# ...") ends the last line, or has a line of its own when it does not fit there."""
    try:
        words = [shlex.quote(word) for word in shlex.split(command)]
    except ValueError:  # not one a shell reads: shown whole
        words = [command]
    lines, line = [], prefix
    indent = " " * (len(prefix) + 4)
    previous = ""
    for word in words:
        if line.strip() and _display_width(f"{line} {word} \\") > width:
            # A word that filled its line alone leaves no room for the break's " \\": its end
            # goes to a line of its own first (unquoted only, as below).
            if _display_width(line + " \\") > width and not previous.startswith(("'", '"')) and width > 4:
                lines.append(line[: width - 2] + "\\")
                line = line[width - 2 :]
            lines.append(line + " \\")
            line = indent
        previous = word
        line += ("" if line == prefix or not line.strip() else " ") + word
        # An unquoted word too long for a line is cut with a backslash-newline inside it, which the
        # shell removes (POSIX "Escape Character"), its rest at the start of the next line (an indent
        # there would split the word); inside quotes it would not be removed, so those stay whole.
        while _display_width(line) > width and not word.startswith(("'", '"')) and width > len(indent) + 2:
            room = width - 1
            lines.append(line[:room] + "\\")
            line = line[room:]
        # A quoted word too wide (a label selector with spaces): cut into quoted pieces joined by
        # backslash-newlines outside the quotes, which the shell removes: 'ab'\<newline>'cd' is abcd.
        if _display_width(line) > width and word.startswith("'") and width > len(indent) + 8:
            line = line[: len(line) - len(word)]
            rest = shlex.split(word)[0]
            while rest:
                room = max(1, width - _display_width(line) - 4)
                piece, rest = rest[:room], rest[room:]
                line += (
                    shlex.quote(piece)
                    if piece.strip() and " " not in piece
                    else "'" + piece.replace("'", "'\"'\"'") + "'"
                )
                if rest:
                    lines.append(line + "\\")
                    line = ""
    if comment and _display_width(f"{line}  {comment}") > width:
        lines.append(line)
        line = " " * len(prefix) + comment
    elif comment:
        line += f"  {comment}"
    return "\n".join([*lines, line])


def say_stderr(message: str, whole: Optional[str] = None) -> None:
    """A one-line message on stderr: escaped, wrapped to fit a terminal (say)."""
    say(printable(message), sys.stderr, whole)


def rewrites_in_place(stream: Any, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether a status line may be rewritten in place (a carriage return and an erase-line
    escape): only on a terminal, not under TERM=dumb, and not with NO_COLOR set to any non-empty
    value (no-color.org); otherwise the output holds no escape sequence at all."""
    environ = os.environ if environ is None else environ
    if environ.get("TERM") == "dumb" or environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def clear_progress(stream: Any) -> None:
    """Before a message on `stream`: erase the progress line being rewritten there, if any, so the
    message starts its own line instead of being glued to it (the next update draws it again)."""
    shown = Progress.on_screen
    if shown is not None and shown.dirty and shown.stream is stream:
        stream.write("\r\033[K")
        shown.dirty = False


class Progress:
    """One rewriting line on a terminal; in a log (or under TERM=dumb or NO_COLOR), a line per
    change, at most one a second (so 1,000 pods do not print 3,000 lines) plus the final state;
    silent with --quiet. Each says the counts, the time elapsed and the time left to the deadline."""

    on_screen: Optional[Progress] = None  # the line being rewritten on a terminal (one screen, one line)

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
        self.environ = environ
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
        # What a user waits for first, the Job's name last: a narrow terminal cuts only the name.
        line = f"{state}; {times}; {label}"
        if self.interactive:
            columns = self.columns or terminal_width(self.stream, self.environ) or TERMINAL_COLUMNS_UNKNOWN
            # one column short of the width: a line filling the last column wraps on some terminals
            self.stream.write(f"\r\033[K{shorten(printable(line), max(columns - 1, 1))}")
            Progress.on_screen = self
            self.stream.flush()
            self.dirty = True
            return
        if state == self.printed_state:
            self.pending = None
            return
        self.pending = (state, printable(line) + "\n")
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
