"""Short texts for amounts and durations, the same in the terminal and on the web page."""

from __future__ import annotations

from collections.abc import Callable

DASH = "—"
# A call of unknown cost (mostly a model missing from the price table) is left out of a cost: never a silent
# $0. A price added for its model does not price every such call (README: Prices), so the note says so.
UNPRICED_NOTE = ("* leaves out model calls of unknown cost (unpriced_calls in --json): add their models to the "
                 "price file and run `agentledger reprice` (a few stay unpriced: see Prices in the README)")


def usd(value: float | None) -> str:
    """Dollars with cents, or four decimals under a dollar (model calls cost fractions of a cent)."""
    if value is None:
        return DASH
    if value == 0:
        return "$0"
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4f}"


def cost(value: float | None, unpriced: int | None, text: Callable[[float | None], str] = usd) -> str:
    """A cost as ``text`` shows it, marked when it leaves out ``unpriced`` calls (``≥$0.0021*``), a starred
    dash when nothing of it is known (``—*``); ``UNPRICED_NOTE`` is the footnote to the star."""
    if not unpriced:
        return text(value)
    return f"{DASH}*" if not value else f"≥{text(value)}*"


def amount(metric: str, value: float | None) -> str:
    """A gate metric's value: dollars for cost, whole numbers for counts."""
    if metric == "cost_usd":
        return usd(value)
    return DASH if value is None else f"{value:,.0f}"


def per_hour(metric: str, rate: float | None) -> str:
    """A rate per hour (``$0.42/h``, ``12/h``); a dash when it is nil, as for a session that spends nothing now."""
    return f"{amount(metric, rate)}/h" if rate else DASH


def burn(session: dict) -> str:
    """A session's spend per hour now (as the hot views and the overview give it), marked as ``cost`` marks it."""
    return cost(session["burn_usd_per_hour"], session["recent_unpriced_calls"], lambda r: per_hour("cost_usd", r))


def gate_value(gate: dict) -> str:
    """What a gate (as the forecast gives it) has counted so far, marked as ``cost`` marks it."""
    return cost(gate["value"], gate["unpriced_calls"], lambda v: amount(gate["metric"], v))


def duration(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d4h``; a dash when there is none."""
    if seconds is None:
        return DASH
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600}h"


def tokens(value: float | None) -> str:
    """Token counts the way people read them: 950, 12.3k, 4.1M."""
    if value is None:
        return DASH
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.1f}{suffix}"
    return f"{value:.0f}"
