"""Field coercions shared by decoders: producers are sloppy, the ledger is not."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from collections.abc import Callable

import orjson

from agentledger import jsontext
from agentledger.defaults import HEAD_BYTES
from agentledger.facts import Reject, Tokens
from agentledger.units import MAX_CALL_COST_USD, PICO_PER_USD

# (session id, at or before this time or None for the latest) → the session's run then.
RunLookup = Callable[[str, "int | None"], "str | None"]

MISSING = "unknown"


def text(value: object) -> str | None:
    """A non-empty string, with the producers' "unknown" placeholder read as missing."""
    # Exact type checks: this runs several times per event, and str subclasses never come from JSON.
    if value.__class__ is str and value and value != MISSING:
        return value
    return None


def integer(value: object) -> int | None:
    # bool is an int subclass; a flag is never a count.
    if value.__class__ is int:
        return value if -(2**63) <= value < 2**63 else None
    if isinstance(value, float) and value == value and abs(value) < 2**63:
        return int(value)
    if value.__class__ is str:
        n = _number_text(value)
        return None if n is None else integer(n)
    return None


# A number a producer wrote as a JSON string ("1000", "0.01"). Only a plain decimal one: int() and
# float() also take spaces, underscores, other scripts' digits, "nan" and "inf", none of which is a
# number written as text. No count, duration or cost needs more characters than this.
_NUMBER_TEXT = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_MAX_NUMBER_TEXT = 40


def _number_text(value: str) -> int | float | None:
    """The number a string spells in plain decimal, None when it spells none."""
    if len(value) > _MAX_NUMBER_TEXT or (found := _NUMBER_TEXT.fullmatch(value)) is None:
        return None
    return int(value) if found.lastindex is None else float(value)


# No single call uses a billion tokens (contexts hold a few million); anything larger is garbage.
# A trillion, the cap this once was, priced at $75 per million tokens, overflowed one call's
# 64-bit pico-USD cost.
MAX_TOKENS = 10**9


def count(value: object) -> int:
    n = value if value.__class__ is int else integer(value)
    return n if n is not None and 0 < n <= MAX_TOKENS else 0


# 9999-12-31T23:59:59.999Z, the last instant a date can show: a time past it is no time a log was
# written at, and no query could print it.
MAX_TIME_MS = 253_402_300_799_999


def epoch_ms(value: object) -> int | None:
    """A Unix time in ms; None for a negative one or one past year 9999."""
    n = value if value.__class__ is int else integer(value) if value.__class__ is float and value >= 0 else None
    return n if n is not None and 0 <= n <= MAX_TIME_MS else None


# Ten years: no call, run or session lasts longer. Rollups sum durations, and two garbage values
# near 2**63 would overflow their 64-bit sums.
MAX_DURATION_MS = 10 * 366 * 86_400_000


def duration(value: object) -> int | None:
    """A length of time in ms; None for a negative or implausible one."""
    n = value if value.__class__ is int else integer(value)
    return n if n is not None and 0 <= n <= MAX_DURATION_MS else None


# Where a tool call's input names the file it touches (Claude Code's Read/Edit/Write/NotebookEdit,
# OpenClaw's read/write/edit), and the command a shell runs; a command is kept to this many characters.
_PATH_FIELDS = ("file_path", "notebook_path", "path")
MAX_COMMAND = 2000


def tool_target(arguments: object) -> tuple[str | None, str | None]:
    """(file path, shell command) a tool call's input names, each None when it names none."""
    if not isinstance(arguments, dict):
        return None, None
    path = next((arguments[f] for f in _PATH_FIELDS if text(arguments.get(f))), None)
    return path, command(arguments.get("command"))


def command(value: object) -> str | None:
    """A shell command as the ledger keeps it: text, cut at MAX_COMMAND characters."""
    found = text(value)
    return found[:MAX_COMMAND] if found else None


def flag(value: object) -> bool:
    return value is True


def line_id(line: bytes) -> int:
    """A stable signed 64-bit id for a line that carries no usable id of its own."""
    return int.from_bytes(hashlib.blake2b(line, digest_size=8).digest(), "big", signed=True)


def ledger_name(path: str) -> str:
    """A path, or a name taken from one, as the ledger and the logs write it. Their text is UTF-8 and
    a file name need not be: a byte that does not decode is written ``\\xNN``, so a directory named so
    is read like any other. Decoders are given the name the file system knows, to find the files
    beside theirs, and name what they take from it so."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def agent_from_key(session_key: str | None) -> str | None:
    """Session keys look like ``agent:<agentId>:<rest>``."""
    if session_key and session_key.startswith("agent:"):
        agent, sep, _ = session_key[6:].partition(":")
        if sep and agent:
            return agent
    return None


def agents_dir(folder: str) -> tuple[str | None, str]:
    """(``<state>/agents``, the agent's name) of an agent's folder ``<state>/agents/<agent>/<folder>``
    (its ``sessions`` or ``telemetry``); (None, "") for a folder elsewhere."""
    agents, agent = os.path.split(os.path.dirname(folder))
    if agent and os.path.basename(agents) == "agents" and os.path.basename(folder):
        return agents, agent
    return None, ""


def reject(line: bytes, offset: int, reason: str) -> Reject:
    return Reject(offset=offset, length=len(line), reason=reason[:300], head=line[:HEAD_BYTES])


_BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark


def json_object(line: bytes, offset: int) -> dict | Reject:
    """The line as a JSON object, or the reject saying why it is not one."""
    try:
        obj = jsontext.loads(line)
    except orjson.JSONDecodeError as exc:
        if line.startswith(_BOM):
            # What an editor or a Windows tool puts before a file's first line: no part of the line.
            obj = json_object(line[len(_BOM):], offset)
            return obj if obj.__class__ is dict else reject(line, offset, obj.reason)
        if not line.strip():
            return reject(line, offset, "blank line")
        reason = "invalid UTF-8" if "utf-8" in str(exc).lower() else "invalid JSON"
        return reject(line, offset, f"{reason}: {exc}")
    if obj.__class__ is not dict:
        return reject(line, offset, f"not a JSON object ({type(obj).__name__})")
    return obj


def iso_ms(value: object) -> int | None:
    """An ISO 8601 time (``2026-10-01T17:54:14.049Z``) → Unix ms, None when it is not one or lies outside
    what ``epoch_ms`` takes: the ledger holds no time before 1970 (its day slots and SQLite's would part)
    nor past 9999 in UTC (``0001-01-01T00:00+01:00`` is the year 0 there)."""
    if value.__class__ is not str or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    ms = int(parsed.timestamp() * 1000)
    return ms if 0 <= ms <= MAX_TIME_MS else None


def derived_id(base: int, index: int) -> int:
    """The id of the index-th fact of a line whose first fact has id ``base`` (signed 64-bit)."""
    n = (base + index) & 0xFFFF_FFFF_FFFF_FFFF
    return n - (1 << 64) if n >= 1 << 63 else n


def cost_pico(value: object) -> int | None:
    """A producer's USD cost → pico-USD; None for anything that is not a plausible cost."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if value.__class__ is not str or (value := _number_text(value)) is None:
            return None
    if not 0 <= value <= MAX_CALL_COST_USD:  # NaN fails every comparison
        return None
    return round(value * PICO_PER_USD)


def logged_cost(value: object, tokens: Tokens) -> int | None:
    """The cost a producer logged for ``tokens`` (cost_pico), None when there is none to keep. A 0 beside
    tokens is no free call but a model the producer could not price (FORMATS.md §2): left to be priced
    here, or counted unpriced, never shown as $0."""
    cost = cost_pico(value)
    return None if cost == 0 and tokens.total else cost


def error_text(value: object) -> str | None:
    if isinstance(value, dict):
        value = value.get("message")
    if isinstance(value, str) and value:
        return value[:2000]
    return None


class RunTracker:
    """Which run a transcript line belongs to: the latest user turn before it.

    Transcripts name the turn only on its first line, so the decoder follows the file. A
    read that resumes mid-file asks the ledger for the session's latest run instead of
    remembering lines it read before, so a restart attributes exactly as a straight read.
    A file may hold lines of other sessions (a resumed or forked one starts with copies of
    its origin's): each session's turns are followed apart."""

    def __init__(self, lookup: RunLookup, session_id: str | None):
        self.lookup = lookup
        self.session_id = session_id
        self._runs: dict[str | None, str | None] = {}  # session → its run as this read follows it
        self._begun: set[str | None] = set()  # sessions this read has seen a turn begin in

    def start(self, session_id: str | None, run_id: str) -> None:
        self._runs[session_id] = run_id
        self._begun.add(session_id)

    def previous(self, session_id: str, ts_ms: int) -> str | None:
        """The run a new turn of ``session_id`` at ``ts_ms`` follows: the turn of that session this read
        began last, else the session's run begun before ``ts_ms`` (never a later one: a copy of the
        file read again must find nothing to end)."""
        if session_id in self._begun:
            return self._runs[session_id]
        return self.lookup(session_id, ts_ms - 1)

    def current(self, session_id: str | None = None, ts_ms: int | None = None) -> str | None:
        """The run of ``session_id`` (the file's own session when None) at a line of ``ts_ms``."""
        if session_id is None:
            session_id = self.session_id
        if session_id in self._runs:
            return self._runs[session_id]
        if session_id != self.session_id:
            return self.lookup(session_id, ts_ms)  # a line of another session (e.g. a side branch)
        run = self._runs[session_id] = self.lookup(session_id, None) if session_id is not None else None
        return run
