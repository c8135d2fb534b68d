"""Log lines: human text on a terminal, one JSON object per line anywhere else.

JSON lines are what journald and log shippers take apart best. Under systemd, when stderr is
the journal's own stream, each line (in either format) also starts with its syslog priority
(``<4>``), which journald strips and keeps, so ``journalctl -p warning`` filters by level.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

import orjson

from agentledger.shown import escaped
from agentledger.timeutil import iso

LEVELS = ("debug", "info", "warning", "error")
_SYSLOG_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


def _priority(level: int) -> str:
    return f"<{_SYSLOG_PRIORITY.get(level, 6)}>"


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg"}`` (plus ``exc`` with a traceback), one line each."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": iso(int(record.created * 1000)), "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out).decode()


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, one line a record. A message may quote what a request or a log gave
    (a session key, a tool name): what is not printable is written as escapes (``\\n``, ``\\x1b``), as a
    terminal or the journal would act on it rather than show it (a newline starts a forged record, an escape
    sequence rewrites the screen or the clipboard). A traceback follows on lines of its own, as it is."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escaped(super().formatMessage(record))


class _JournalFormatter(logging.Formatter):
    """Another formatter's lines, each with its record's priority in front: journald takes every line of
    a stream as an entry of its own, so a text traceback's lines need it as much as the first."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = _priority(record.levelno)
        return "\n".join(prefix + line for line in self.inner.format(record).split("\n"))


def _is_journal(stream: TextIO) -> bool:
    """systemd sets $JOURNAL_STREAM to ``device:inode`` of the stream it connected to the journal."""
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(device), int(inode))
    except (ValueError, OSError):
        return False


def journal_prefix(level: int, stream: TextIO) -> str:
    """What a line written to ``stream`` outside logging starts with: its syslog priority when the
    stream is the journal, else nothing."""
    return _priority(level) if _is_journal(stream) else ""


def level_number(level: str | int) -> int:
    if isinstance(level, int):
        return level
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}: use one of {', '.join(LEVELS)}")
    return getattr(logging, level.upper())


class _Handler(logging.StreamHandler):
    """The handler ``setup`` installs, so that calling it again replaces it."""


def setup(level: str | int = "warning", json: bool | None = None, stream: TextIO | None = None) -> None:
    """Send agentledger's logs at ``level`` and above, and other libraries' warnings, to ``stream``
    (stderr); ``json`` None means JSON unless the stream is a terminal. Calling it again replaces
    the previous setup."""
    stream = stream if stream is not None else sys.stderr
    if json is None:
        json = not stream.isatty()
    handler = _Handler(stream)
    formatter = JsonFormatter() if json else TextFormatter()
    handler.setFormatter(_JournalFormatter(formatter) if _is_journal(stream) else formatter)
    # On the root logger, so what a library says (watchdog's errors) comes out in the same
    # format, and only from warning on; agentledger's own lines at the level asked for.
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("agentledger").setLevel(level_number(level))
