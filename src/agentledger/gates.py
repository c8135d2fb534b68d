"""Real-time gates: may this session make its next tool call?

A session-scoped gate reads the session's hot view (memory, kept equal to the ledger);
a day-scoped gate reads the ledger's rollups for the current day in the configured
time zone, cached until the next committed batch. A value at or over its limit trips
the gate: block gates before warn gates, in the order the config lists them.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import math
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from zoneinfo import ZoneInfo

from prometheus_client import Histogram, disable_created_metrics

from agentledger.config import GateConfig
from agentledger.hot.sessions import HotSession, HotSessions, Totals
from agentledger.ledger import queries
from agentledger.ledger.db import ReaderPool
from agentledger.sources.common import agent_from_key
from agentledger.timeutil import iso
from agentledger.units import PICO_PER_USD

_CHECK_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
_NOUNS = {"tokens": "tokens", "tool_calls": "tool calls", "llm_calls": "LLM calls", "tool_errors": "tool errors"}
# How long a tool call answered here may wait to be recorded before it stops counting: past any catch-up
# (a hook event the inbox refused, or one a failed pass lost, is let go at once, see ``recorded``).
_UNRECORDED_S = 3600.0
_RECENT = 4096  # recorded calls whose answers are kept for a hook sent again
_COUNTED = ("tool_calls", "tool_errors")  # the measures a tool call answered here moves before it is recorded

# The histogram's start time would be served, in Prometheus' text format, as a gauge family of its own
# (agentledger_gate_check_duration_seconds_created) that no dashboard asks for.
disable_created_metrics()


@dataclass(frozen=True, slots=True)
class Decision:
    decision: str  # allow | warn | block
    reason: str
    gate: str | None = None
    scope: str | None = None
    metric: str | None = None
    value: float | int | None = None
    limit: float | int | None = None
    session_key: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    tool: str | None = None
    ts_ms: int = 0
    via: str = "http"  # how it was asked: http (GET /v1/gate), claude-code (the hook endpoint)

    def as_json(self) -> dict:
        """The decision, with the ``block``/``blockReason`` pair OpenClaw's before_tool_call takes."""
        return {"decision": self.decision, "gate": self.gate, "scope": self.scope, "metric": self.metric,
                "value": self.value, "limit": self.limit, "reason": self.reason, "session_key": self.session_key,
                "session_id": self.session_id, "tool": self.tool, "block": self.decision == "block",
                "blockReason": self.reason if self.decision == "block" else None}


def exact(totals: Totals | dict, metric: str) -> int:
    """A gate metric read off session or day totals, exactly: cost in pico-USD."""
    get = totals.get if isinstance(totals, dict) else lambda name: getattr(totals, name)
    if metric == "cost_usd":
        return get("cost_pico")
    if metric == "tokens":
        return get("total_tokens")
    if metric == "llm_calls":
        return get("llm_calls") + get("llm_errors")
    return get(metric)


def shown(metric: str, value: int) -> float | int:
    """An exact metric value as decisions and views show it: cost in USD, as the ledger's reports round it."""
    return round(value / PICO_PER_USD, 12) if metric == "cost_usd" else value


def measure(totals: Totals | dict, metric: str) -> float | int:
    """A gate metric read off session or day totals, as shown."""
    return shown(metric, exact(totals, metric))


def threshold(gate: GateConfig) -> int | float:
    """The smallest exact value that trips ``gate``: its limit in pico-USD for cost, exactly as the
    config wrote it in decimal (a float product would be off by a few pico-USD for large limits)."""
    if gate.metric == "cost_usd":
        return math.ceil(Decimal(repr(gate.limit)) * PICO_PER_USD)
    return gate.limit


def matches(name: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _totals_json(t: Totals) -> dict:
    return {"cost_usd": measure(t, "cost_usd"), "llm_calls": t.llm_calls, "llm_errors": t.llm_errors,
            "input_tokens": t.input_tokens, "output_tokens": t.output_tokens, "cache_read_tokens": t.cache_read_tokens,
            "cache_write_tokens": t.cache_write_tokens, "total_tokens": t.total_tokens,
            "unpriced_calls": t.unpriced_calls, "tool_calls": t.tool_calls, "tool_errors": t.tool_errors}


def hot_json(state: HotSession) -> dict:
    """A session's hot view as gates see it (``sessions --live``, ``/v1/sessions/{key}/hot``)."""
    return {"session_key": state.session_key, "session_id": state.session_id, "agent_id": state.agent_id,
            "status": state.status, "started_at": iso(state.started_ms), "ended_at": iso(state.ended_ms),
            "last_activity_at": iso(state.last_activity_ms), "current_run": state.current_run,
            **_totals_json(state.own), "family": _totals_json(state.family)}


def _amount(metric: str, value: float) -> str:
    if metric == "cost_usd":
        return f"${value:,.2f}"
    return f"{value:,.0f}"


def _limit(gate: GateConfig) -> float | int:
    return gate.limit if gate.metric == "cost_usd" or gate.limit != int(gate.limit) else int(gate.limit)


def _unpriced(n: int) -> str:
    return f"{n:,} unpriced call{'' if n == 1 else 's'}"


def _reason(gate: GateConfig, who: str, value: float, zone: str, unpriced: int) -> str:
    used, limit = _amount(gate.metric, value), _amount(gate.metric, gate.limit)
    period = f" today ({zone})" if gate.scope.endswith("-day") else ""
    budget = "daily budget" if period else "budget"
    if gate.metric == "cost_usd":
        # Their cost is unknown, not $0: whoever reads the decision must know the spend may be higher.
        unknown = f", not counting {_unpriced(unpriced)}" if unpriced else ""
        text = f"{who} spent {used} of its {limit} {budget}{period}{unknown}"
    else:
        text = f"{who} used {used} {_NOUNS[gate.metric]} of its {limit} limit{period}"
    return f"{text} (gate {gate.name})"


def _within(unpriced: list[tuple[GateConfig, str, int]]) -> str:
    """The reason of an allow; it names the cost gates that could not count every call."""
    if not unpriced:
        return "within every gate"
    return "within every gate, not counting " + "; ".join(
        f"{_unpriced(n)} of {who} (gate {gate.name})" for gate, who, n in unpriced)


@dataclass(slots=True)
class _Answered:
    """A tool call answered here, waiting for the daemon to record it."""

    session_key: str | None  # as asked: its hook events name it so, whether or not the ledger knows it yet
    agent: str | None
    day: int  # the start of the day it was answered in
    failed: bool  # denied: recorded as a failed call
    at: float  # monotonic
    decision: Decision

    def counts_in(self, gate: GateConfig, session_key: str | None, agent: str | None, day: int) -> bool:
        if gate.scope in ("session", "session-family"):
            return self.session_key == session_key
        if gate.scope == "agent-day":
            return self.agent == agent and self.day == day
        return self.day == day


def day_bounds(now_ms: int, zone: ZoneInfo) -> tuple[int, int]:
    """The day in ``zone`` that holds ``now_ms``, as [start, end) in ms."""
    day = dt.datetime.fromtimestamp(now_ms / 1000, zone).date()
    start, end = (int(dt.datetime.combine(d, dt.time(), zone).timestamp() * 1000)
                  for d in (day, day + dt.timedelta(days=1)))  # a DST day is 23 or 25 hours
    return start, end


class GateKeeper:
    """Answers gate questions from request threads; the daemon drains what to record."""

    def __init__(self, gates: tuple[GateConfig, ...], hot: HotSessions, readers: ReaderPool, zone: ZoneInfo,
                 clock: Callable[[], float] = time.time):
        self.gates = gates
        self._thresholds = {gate: threshold(gate) for gate in gates}
        self.hot = hot
        self.readers = readers
        self.zone = zone
        self.clock = clock
        self.position = 0  # the last batch the daemon committed; day caches older than it are stale
        self._lock = threading.Lock()
        self._days: dict[tuple, tuple[int, dict]] = {}
        self._today = (0, 0)  # [start, end) of the current day in ``zone``: most questions fall inside it
        self._applicable: dict[tuple[str, str], tuple[GateConfig, ...]] = {}  # (tool, agent) → its gates
        self._pending: list[Decision] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        # A tool call this process answered counts from its answer on, not from when the ledger has it: each
        # waits here, by tool_use_id, until the daemon has recorded its hook event (``recorded``), and adds to
        # what its session, agent and day measure unless the ledger holds it already (its transcript line
        # read first). Once recorded, it counts where the ledger counts it (a Task subagent's call in the
        # subagent's session), and its answer is kept a while for the same hook sent again.
        self._unrecorded: dict[str, _Answered] = {}
        self._recent: OrderedDict[str, Decision] = OrderedDict()
        self._told: tuple[int, set[str], set[str]] = (-1, set(), set())  # (position, ids asked, ids told) last read
        self._calls = threading.Lock()  # one question (and a tool call's count) at a time: parallel calls queue
        self.checks = Histogram("agentledger_gate_check_duration_seconds", "Time to answer one gate question.",
                                registry=None, buckets=_CHECK_BUCKETS)

    def decide(self, session_key: str | None, tool: str | None, via: str = "http") -> Decision:
        started = time.perf_counter()
        with self._calls:  # not while hook events are recorded (see ``recorded``)
            decision = self._decide(session_key, tool, via)
        self.checks.observe(time.perf_counter() - started)
        return decision

    def decide_call(self, session_key: str, tool: str, agent: str, call_id: str | None) -> Decision:
        """The decision on a tool call this process records itself (a Claude Code hook's), counted at once:
        Claude Code runs a turn's tool calls in parallel, and each asks before the ledger holds the others.
        ``agent``: the agent the call is recorded under, which a session the ledger does not know yet is of;
        ``call_id``: its tool_use_id (None: a call that will not be recorded, not counted), by which a call
        asked about again (a retry) counts once and is answered as it was."""
        started = time.perf_counter()
        with self._calls:
            answered = self._unrecorded.get(call_id) if call_id is not None else None
            earlier = answered.decision if answered is not None else self._recent.get(call_id)
            if earlier is None:
                decision = self._decide(session_key, tool, "claude-code", agent, count=call_id)
            else:
                decision = earlier
                self._tell(decision)
        self.checks.observe(time.perf_counter() - started)
        return decision

    def recorded(self, call_ids: list[str], record: Callable[[], None] = lambda: None) -> None:
        """These calls wait no longer once ``record`` has committed their hook events and refreshed the hot
        views, or failed to (a failed pass lost them: their transcript tells them), or at once when nothing
        records them (the inbox refused them). No call is decided meanwhile: one that read the ledger with
        them in it, and counted them as waiting too, would count them twice."""
        with self._calls:
            try:
                record()
            finally:
                for call_id in call_ids:
                    answered = self._unrecorded.pop(call_id, None)
                    if answered is not None:
                        self._recent[call_id] = answered.decision
                while len(self._recent) > _RECENT:
                    self._recent.popitem(last=False)

    def _decide(self, session_key: str | None, tool: str | None, via: str, agent: str | None = None,
                count: str | None = None) -> Decision:
        """``count``: the tool_use_id of a call this decision counts (``decide_call``)."""
        now_ms = int(self.clock() * 1000)
        day = self._day_bounds(now_ms)[0]
        seen = self.position  # what the hot views and day totals read below are at least as new as
        with self.readers.connection() as conn:
            state = self.hot.lookup(conn, session_key) if session_key else None
            if state is not None:
                agent = state.agent_id
            elif agent is None:
                agent = agent_from_key(session_key)
            applicable = self._gates_for(tool or "", agent or "")
            waiting = self._waiting(conn, seen) if any(g.metric in _COUNTED for g in applicable) else []
            tripped, unpriced = [], []
            for gate in applicable:
                totals, who = self._totals(conn, gate, state, agent, now_ms)
                extra = 0
                if gate.metric in _COUNTED:
                    # A denied call its transcript told first is a running call there until its hook is
                    # recorded: it counts as a call once, as an error only here.
                    extra = sum(1 for w, told in waiting if w.counts_in(gate, session_key, agent, day)
                                and (w.failed if gate.metric == "tool_errors" else not told))
                    if totals is None and extra and gate.scope != "agent-day":
                        totals, who = Totals(), f"session {session_key}"  # unknown to the ledger, not to us
                if totals is None:
                    continue
                value = exact(totals, gate.metric) + extra
                unknown = exact(totals, "unpriced_calls") if gate.metric == "cost_usd" else 0
                if value >= self._thresholds[gate]:
                    tripped.append((gate, shown(gate.metric, value), who, unknown))
                elif unknown:
                    unpriced.append((gate, who, unknown))
        base = {"session_key": state.session_key if state else session_key,
                "session_id": state.session_id if state else None,
                "agent_id": state.agent_id if state else None, "tool": tool, "ts_ms": now_ms, "via": via}
        tripped.sort(key=lambda t: t[0].action != "block")  # stable: config order within an action
        if tripped:
            gate, value, who, unknown = tripped[0]
            decision = Decision(gate.action, _reason(gate, who, value, self.zone.key, unknown), gate.name, gate.scope,
                                gate.metric, value, _limit(gate), **base)
        elif session_key and state is None:
            decision = Decision("allow", f"unknown session {session_key!r}: no session gate applies", **base)
        elif not applicable:
            decision = Decision("allow", f"no gate applies to tool {tool!r}", **base)
        else:
            decision = Decision("allow", _within(unpriced), **base)
        self._tell(decision)
        if count is not None:  # a denied call is recorded too, as a failed one
            self._unrecorded[count] = _Answered(session_key, agent, day, decision.decision == "block",
                                                time.monotonic(), decision)
        return decision

    def _tell(self, decision: Decision) -> None:
        with self._lock:
            self._counts[(decision.gate or "", decision.decision)] += 1
            if decision.decision != "allow":
                self._pending.append(decision)

    def _waiting(self, conn, seen: int) -> list[tuple[_Answered, bool]]:
        """The calls answered here and not recorded yet, each with whether a transcript told the ledger of it
        by ledger position ``seen``, which the hot views and day totals read hold. Told by a later commit,
        the totals may not count it yet: it is taken for untold (counted, perhaps twice for a moment,
        rather than not at all). Caller holds ``_calls``: calls waiting too long are let go here."""
        now = time.monotonic()
        for call_id in [c for c, a in self._unrecorded.items() if now - a.at > _UNRECORDED_S]:
            del self._unrecorded[call_id]
        waiting = list(self._unrecorded.items())
        if not waiting:
            return []
        # Read again only when the ledger moved or a call came to wait since: not once a question.
        position, asked, told = self._told
        if position != seen or not self._unrecorded.keys() <= asked:
            position, told = queries.claude_code_tool_calls(conn, list(self._unrecorded))
            self._told = (position, set(self._unrecorded), told)
        if position != seen:
            told = set()
        return [(a, c in told) for c, a in waiting]

    def _gates_for(self, tool: str, agent: str) -> tuple[GateConfig, ...]:
        found = self._applicable.get((tool, agent))
        if found is None:
            if len(self._applicable) > 4096:  # tool and agent names are few; a flood of made-up ones is not kept
                self._applicable.clear()
            found = self._applicable[(tool, agent)] = tuple(
                g for g in self.gates if matches(tool, g.tools) and matches(agent, g.agents))
        return found

    def _day_bounds(self, now_ms: int) -> tuple[int, int]:
        today = self._today
        if not today[0] <= now_ms < today[1]:
            today = self._today = day_bounds(now_ms, self.zone)
        return today

    def drain(self) -> tuple[list[Decision], Counter]:
        """Decisions to record and counts to add since the last drain."""
        with self._lock:
            pending, counts = self._pending, self._counts
            self._pending, self._counts = [], Counter()
        return pending, counts

    def _totals(self, conn, gate: GateConfig, state: HotSession | None, agent: str | None,
                now_ms: int) -> tuple[Totals | dict | None, str]:
        """What ``gate`` measures, and who spent it; None when the gate does not apply. ``agent``: the
        session's, known to a session the ledger does not hold yet from its key."""
        if gate.scope == "session":
            return (None, "") if state is None else (state.own, f"session {state.session_key}")
        if gate.scope == "session-family":
            if state is None:
                return None, ""
            return state.family, f"session {state.session_key} with its subagents"
        if gate.scope == "agent-day":
            if not agent:
                return None, ""
        else:
            agent = None
        return self._day(conn, agent, now_ms), (f"agent {agent}" if agent else "all agents together")

    def _day(self, conn, agent: str | None, now_ms: int) -> dict:
        start, end = self._day_bounds(now_ms)
        key = (agent, start)
        with self._lock:
            cached = self._days.get(key)
            position = self.position
        if cached is not None and cached[0] == position:
            return cached[1]
        totals = queries.day_totals(conn, start, end - 1, agent)
        with self._lock:
            if len(self._days) > 1024:  # yesterday's and departed agents' entries
                self._days.clear()
            self._days[key] = (position, totals)
        return totals
