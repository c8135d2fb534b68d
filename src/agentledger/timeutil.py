"""Time parsing and formatting at the edges: the ledger itself only knows Unix milliseconds UTC."""

from __future__ import annotations

import datetime as dt
import re
import time

_RELATIVE = re.compile(r"^(\d+)([smhdw])$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def parse_time(value: str, *, now_ms: int | None = None) -> int:
    """``2026-11-01``, an ISO 8601 time (naive means UTC), or ``7d``/``24h``/``30m`` ago → ms."""
    value = value.strip()
    m = _RELATIVE.match(value)
    if m:
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        return now - int(m[1]) * _UNIT_MS[m[2]]
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read time {value!r}: use a date (2026-11-01), an ISO time (2026-11-01T08:00:00Z) "
            "or an age (30m, 24h, 7d)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return int(parsed.timestamp() * 1000)


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )
