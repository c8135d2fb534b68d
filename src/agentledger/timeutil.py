"""Time parsing and formatting at the edges: the ledger itself only knows Unix milliseconds UTC."""

from __future__ import annotations

import datetime as dt
import re
import time

_RELATIVE = re.compile(r"^(\d+)([smhdw])$")
_WEEK = re.compile(r"^\d{4}-?W\d{2}$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
# The ledger holds no time before 1970 (event times are checked at decoding) and Python's dates
# end with 9999: a bound outside is the same bound as these, and cannot overflow a query's integers.
EARLIEST_MS = 0
LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def parse_time(value: str, *, now_ms: int | None = None, end: bool = False,
               zone: dt.tzinfo = dt.timezone.utc) -> int:
    """``2026-11-01``, an ISO 8601 time, or ``7d``/``24h``/``30m`` ago → ms, held within
    [EARLIEST_MS, LATEST_MS] (``100000d`` means since the first event). A date, and a time that names no
    offset, are read in ``zone`` (the zone days are counted in, UTC unless told). ``end``: the time is
    where an inclusive range ends, so a date means its last millisecond: ``--until 2026-11-01`` takes in
    that day, as ``--since 2026-11-01`` does."""
    value = value.strip()
    m = _RELATIVE.match(value)
    if m and len(m[1]) > 15:  # older than 1970 in any unit, and too long for int() past 4300 digits
        return EARLIEST_MS
    if m:
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        return min(max(now - int(m[1]) * _UNIT_MS[m[2]], EARLIEST_MS), LATEST_MS)
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read time {value!r}: use a date (2026-11-01), an ISO time (2026-11-01T08:00:00Z) "
            "or an age (30m, 24h, 7d)"
        ) from None
    if end and (days := _days_of(value)):
        try:  # the next day's first instant, less one: a day of a zone's clock change is not 24 hours
            parsed = dt.datetime.combine(parsed.date() + dt.timedelta(days=days), dt.time())
        except OverflowError:  # the end of 9999-12-31
            return LATEST_MS
        return min(max(_ms(parsed.replace(tzinfo=zone)) - 1, EARLIEST_MS), LATEST_MS)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone)
    return min(max(_ms(parsed), EARLIEST_MS), LATEST_MS)


def _days_of(value: str) -> int:
    """How many days ``value`` names: 1 for a day in any form ISO 8601 gives one (``2026-11-01``, ``20261101``,
    ``2026-W44-7``), 7 for a week (``2026-W44``, which parsed as its Monday), 0 for a time."""
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return 0
    return 7 if _WEEK.match(value) else 1


def _ms(moment: dt.datetime) -> int:
    try:
        return int(moment.timestamp() * 1000)
    except (OverflowError, ValueError):  # a zone's offset taking 0001-01-01 or 9999-12-31 off the calendar
        return EARLIEST_MS if moment.year < 2 else LATEST_MS


def iso(ms: int | None) -> str | None:
    """None also for a time no date can show: a ledger written before such times were rejected may
    hold one, and every query that prints it would fail."""
    if ms is None:
        return None
    try:
        at = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    except (OverflowError, ValueError, OSError):
        return None
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
