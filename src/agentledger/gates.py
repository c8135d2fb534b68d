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
from agentledger.hot.sessions import HotSession, HotSessions, Totals, view_of
from agentledger.ledger import queries
from agentledger.ledger.db import ReaderPool
from agentledger.sources.common import agent_from_key
from agentledger.timeutil import iso
from agentledger.units import PICO_PER_USD

_CHECK_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1)
_NOUNS = {"tokens": "tokens", "tool_calls": "tool calls", "llm_calls": "LLM calls", "tool_errors": "tool errors"}
# How long a tool call answered here may wait to be recorded before it stops counting: past any catch-up
# (a hook event the inbox refused, or one a failed pass lost, is let go at once: see ``decide_call`` and ``lost``).
_UNRECORDED_S = 3600.0
_RECENT = 4096  # recorded calls whose answers are kept for a hook sent again
_COUNTED = ("tool_calls", "tool_errors")  # the measures a tool call answered here moves before it is recorded
# Told with what lets a call through while a catch-up reads the backlog: what is not read yet is not measured.
_UNREAD = ": the logs are still being read"

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


def _amount(metric: str, value: float, places: int = 2) -> str:
    if metric == "cost_usd":
        return f"${value:,.{places}f}"
    return f"{value:,.0f}"


def _places(limit: float) -> int:
    """Decimals that show a dollar budget as configured: cents, or as many more as it has (up to a
    millionth). A budget of $0.015 shown as $0.01 would contradict the spend said to exceed it."""
    return next((places for places in range(2, 6) if round(limit, places) == limit), 6)


def shown_limit(gate: GateConfig) -> float | int:
    return gate.limit if gate.metric == "cost_usd" else int(gate.limit)  # a count's is whole (see GateConfig)


def _unpriced(n: int) -> str:
    return f"{n:,} unpriced call{'' if n == 1 else 's'}"


def _reason(gate: GateConfig, who: str, value: float, zone: str, unpriced: int) -> str:
    places = _places(gate.limit)
    used, limit = _amount(gate.metric, value, places), _amount(gate.metric, gate.limit, places)
    period = f" today ({zone})" if gate.scope.endswith("-day") else ""
    budget = "daily budget" if period else "budget"
    if gate.metric == "cost_usd":
        # Their cost is unknown, not $0: whoever reads the decision must know the spend may be higher.
        unknown = f", not counting {_unpriced(unpriced)}" if unpriced else ""
        text = f"{who} spent {used} of its {limit} {budget}{period}{unknown}"
    else:
        noun = _NOUNS[gate.metric]
        text = f"{who} used {used} {noun[:-1] if used == '1' else noun} of its {limit} limit{period}"
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
    parent_key: str | None = None  # a Task subagent's call: the session whose family counts it too
    recorded_at: int | None = None  # the ledger position its hook event was committed at, once it was

    def counts_in(self, gate: GateConfig, session_key: str | None, agent: str | None, day: int) -> bool:
        if gate.scope == "session-family" and self.parent_key is not None and self.parent_key == session_key:
            return True
        if gate.scope in ("session", "session-family"):
            return self.session_key == session_key
        if gate.scope == "agent-day":
            return self.agent == agent and self.day == day
        return self.day == day


class _Moved(Exception):
    """The ledger is past the position a question began measuring at from memory (see ``_At``)."""


class _At:
    """The one ledger position a question measures everything at, and how it reads there.

    It starts at the keeper's: the hot views in memory, and the day totals and told calls cached at it,
    all hold the ledger there, and a question that needs nothing else reads one row, the ledger's position:
    memory moves a moment after each commit, and a question asked in that moment would have answered from
    the commit before. The first read of the ledger opens one read transaction and finds the ledger's own
    position: the same, and memory and ledger agree; past it (a commit whose views are not in memory yet),
    the question goes on from the ledger alone, at the ledger's position, and measures again if it had used
    memory already."""

    def __init__(self, conn, position: int | None):
        self.conn = conn
        self.position = position
        # Whether memory may be read: it holds the ledger at ``position``, still the ledger's.
        self.memory = position is not None and queries.ledger_position(conn) == position
        self.used = False  # whether something held at ``position`` was used
        self.begun = False

    def holds(self, position: int) -> bool:
        """Whether what was read at ``position`` may be used (taken as used if it may)."""
        if position != self.position:
            return False
        self.used = True
        return True

    def ledger(self):
        """The connection, in a read transaction at ``position``; raises ``_Moved`` when that cannot be."""
        if not self.begun:
            self.conn.execute("BEGIN")
            self.begun = True
            now = queries.ledger_position(self.conn)
            if now != self.position:
                self.memory, self.position = False, now
                if self.used:
                    raise _Moved
        return self.conn

    def end(self) -> None:
        if self.begun:
            self.begun = False
            self.conn.execute("COMMIT")


def day_bounds(now_ms: int, zone: ZoneInfo) -> tuple[int, int]:
    """The day in ``zone`` that holds ``now_ms``, as [start, end) in ms."""
    day = dt.datetime.fromtimestamp(now_ms / 1000, zone).date()
    start, end = (int(dt.datetime.combine(d, dt.time(), zone).timestamp() * 1000)
                  for d in (day, day + dt.timedelta(days=1)))  # a DST day is 23 or 25 hours
    return start, end


class GateKeeper:
    """Answers gate questions from request threads; the daemon drains what to record.

    A Claude Code tool call counts from its answer on (``decide_call``), not from when the ledger
    has it: until then it waits in ``_unrecorded`` and adds to what its session, agent and day
    measure wherever the ledger does not hold it yet. No call may count twice, nor not at all, while
    its hook event is written. Holding questions back meanwhile would have each wait for a SQLite
    commit (milliseconds, where an answer takes microseconds); the rule is kept by positions instead:

    - Every question measures at one ledger position (``_At``): memory's, where the hot views, the day
      totals cached and which waiting calls the ledger holds all agree, or the ledger's own, read in
      one transaction. It adds a waiting call only where the ledger at that position does not hold it
      (``queries.claude_code_tool_calls``, read at that position too), whoever told the ledger of it:
      its transcript or its own hook event.
    - Memory moves only in ``advance``, under ``_calls``, which every question holds from start to end:
      the views a commit changed, read right after it on the writer's connection (at its position
      exactly: the writer is the only one), are put, the position moves, and the calls whose hook
      events are committed at or before it are let go, all at once for every question. The commit and
      those reads happen before, outside the lock: a question waits only for other questions and for
      those puts, in memory.

    So for a call whose hook event is committed at position H, a question before ``advance(H)``
    measures either from memory, below H, where the ledger does not hold the call and it is added as
    waiting; or from the ledger at H or past it, which holds the call and says so. From ``advance(H)``
    on, memory holds it and it is not waiting. A transcript line telling a waiting call is the same
    case without the letting go, so a pass's commit no longer has a call counted twice until the views
    catch up. A call stops waiting before memory holds it only when nothing will record it: the inbox
    refused its only event (``decide_call``), or the write of its events failed (``lost``: its
    transcript tells it).
    """

    def __init__(self, gates: tuple[GateConfig, ...], hot: HotSessions, readers: ReaderPool, zone: ZoneInfo,
                 clock: Callable[[], float] = time.time):
        self.gates = gates
        self._thresholds = {gate: threshold(gate) for gate in gates}
        self.hot = hot
        self.readers = readers
        self.zone = zone
        self.clock = clock
        self._lock = threading.Lock()  # the decisions and counts to drain
        self._days: dict[tuple, tuple[int, dict]] = {}  # (agent, day start) → (the position read at, totals)
        self._today = (0, 0)  # [start, end) of the current day in ``zone``: most questions fall inside it
        self._applicable: dict[tuple[str, str], tuple[GateConfig, ...]] = {}  # (tool, agent) → its gates
        self._pending: list[Decision] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        # The calls answered here and not recorded yet, by tool_use_id; once recorded, a call counts where
        # the ledger counts it (a Task subagent's call in the subagent's session), and its answer is kept a
        # while in ``_recent`` for the same hook sent again.
        self._unrecorded: dict[str, _Answered] = {}
        self._recent: OrderedDict[str, _Answered] = OrderedDict()
        # (position, ids asked, {id: failed} of those the ledger held there), last read
        self._told: tuple[int, set[str], dict[str, bool]] = (-1, set(), {})
        self._calls = threading.Lock()  # one question (and a tool call's count) at a time: parallel calls queue
        # While a catch-up reads the backlog (LiveState), what is not read yet is not measured: a session the
        # ledger does not know may be one of it.
        self.catching_up = False
        self.checks = Histogram("agentledger_gate_check_duration_seconds", "Time to answer one gate question.",
                                registry=None, buckets=_CHECK_BUCKETS)

    @property
    def position(self) -> int | None:
        """The ledger position memory holds (the hot views'); moved by ``advance``, None before the first."""
        return self.hot.position

    def decide(self, session_key: str | None, tool: str | None, via: str = "http") -> Decision:
        started = time.perf_counter()
        with self._calls:
            decision = self._decide(session_key, tool, via)[0]
        self.checks.observe(time.perf_counter() - started)
        return decision

    def decide_call(self, session_key: str, tool: str, agent: str, call_id: str | None,
                    queue: Callable[[Decision], bool] | None = None, parent_key: str | None = None) -> Decision:
        """The decision on a tool call this process records itself (a Claude Code hook's), counted at once:
        Claude Code runs a turn's tool calls in parallel, and each asks before the ledger holds the others.
        ``agent``: the agent the call is recorded under, which a session the ledger does not know yet is of;
        ``parent_key``: the session that spawned ``session_key``, when a Task subagent asks: its family
        gates measure the call too (see ``_measure``);
        ``call_id``: its tool_use_id (None: a call that will not be recorded, not counted), by which a call
        asked about again (a retry) counts once and is answered as it was; ``queue``: queues its hook event,
        told the decision, and says whether it was taken (None: taken elsewhere). Called before the next
        question: a call counts only while an event of it will be recorded, and a retry the inbox refuses
        must not let go of the call its first event still stands for."""
        started = time.perf_counter()
        with self._calls:
            waiting = self._unrecorded.get(call_id) if call_id is not None else None
            earlier = waiting or (self._recent.get(call_id) if call_id is not None else None)
            if earlier is None:
                decision, answered = self._decide(session_key, tool, "claude-code", agent, call_id, parent_key)
            else:
                decision, answered = earlier.decision, earlier
                self._tell(decision)
            queued = queue is None or queue(decision)
            if call_id is not None and waiting is None:
                if earlier is not None and earlier.recorded_at is not None:
                    pass  # the ledger holds it: this event changes nothing
                elif queued:  # waits until recorded; a retry of a call the inbox refused, or a write lost, too
                    answered.at = time.monotonic()
                    self._unrecorded[call_id] = answered
                elif earlier is None:  # refused, never to count; a retry is answered alike
                    self._remember(call_id, answered)
        self.checks.observe(time.perf_counter() - started)
        return decision

    def recorded(self, call_ids: list[str], at: int) -> None:
        """These calls' hook events were committed at ledger position ``at``: they wait until memory holds it
        (``advance``)."""
        with self._calls:
            position = self.position or 0
            for call_id in call_ids:
                answered = self._unrecorded.get(call_id)
                if answered is None or answered.recorded_at is not None:
                    continue
                answered.recorded_at = at
                if at <= position:
                    self._let_go(call_id)

    def lost(self, call_ids: list[str]) -> None:
        """Nothing will record these calls' hook events (a failed write lost them: their transcripts tell
        them): they wait no longer. One sent again, and queued, waits again."""
        with self._calls:
            for call_id in call_ids:
                if call_id in self._unrecorded and self._unrecorded[call_id].recorded_at is None:
                    self._let_go(call_id)

    def advance(self, position: int, views: dict[str, HotSession | None] | None = None) -> None:
        """Memory moves to ledger position ``position``: ``views`` are those ``HotSessions.read`` read there of
        the sessions the transactions since the last move changed (None: not read, as while catching up:
        every view is checked again before it is trusted). Memory only: questions wait for it."""
        with self._calls:
            if views is None:
                self.hot.stale(position)
            else:
                self.hot.apply(views, position)
            for call_id in [c for c, a in self._unrecorded.items()
                            if a.recorded_at is not None and a.recorded_at <= position]:
                self._let_go(call_id)

    def _let_go(self, call_id: str) -> None:
        self._remember(call_id, self._unrecorded.pop(call_id))

    def _remember(self, call_id: str, answered: _Answered) -> None:
        self._recent[call_id] = answered
        self._recent.move_to_end(call_id)
        while len(self._recent) > _RECENT:
            self._recent.popitem(last=False)

    def _decide(self, session_key: str | None, tool: str | None, via: str, agent: str | None = None,
                call_id: str | None = None, parent_key: str | None = None) -> tuple[Decision, _Answered | None]:
        """``call_id``: the decision is on this tool call, which counts from now (``decide_call``): its
        waiting entry comes with it. ``parent_key``: as ``decide_call``'s."""
        now_ms = int(self.clock() * 1000)
        day = self._day_bounds(now_ms)[0]
        # Taken before measuring: a catch-up that ends meanwhile still left the measure short.
        unread = _UNREAD if self.catching_up else ""
        with self.readers.connection() as conn:
            at = _At(conn, self.position)
            try:
                measured = self._measure(at, session_key, parent_key, tool, agent, now_ms, day, call_id)
            except _Moved:  # memory was behind the ledger read: all again, from the ledger alone
                measured = self._measure(at, session_key, parent_key, tool, agent, now_ms, day, call_id)
            at.end()
        state, named, parent, parent_named, agent, applicable, tripped, unpriced = measured
        base = {"session_key": state.session_key if state else session_key,
                "session_id": state.session_id if state else None,
                "agent_id": agent, "tool": tool, "ts_ms": now_ms, "via": via}
        tripped.sort(key=lambda t: t[0].action != "block")  # stable: config order within an action
        if tripped:
            gate, value, who, unknown = tripped[0]
            # A block says so too: the rest of the logs may hold a reset, which a session gate measures from
            # instead, or move a side branch's spend to its subagent.
            reason = _reason(gate, who, value, self.zone.key, unknown) + unread
            decision = Decision(gate.action, reason, gate.name, gate.scope, gate.metric, value, shown_limit(gate), **base)
        elif session_key and state is None and parent is None:
            decision = Decision("allow", f"unknown session {session_key!r}{unread}: no session gate applies", **base)
        elif not applicable:
            # A call asked about without its tool's name: only gates for every tool ("*") apply to it.
            what = f"tool {tool!r}" if tool else "a call whose tool is not named"
            decision = Decision("allow", f"no gate applies to {what}", **base)
        else:
            decision = Decision("allow", _within(unpriced) + unread, **base)
        self._tell(decision)
        if call_id is None:
            return decision, None
        # A denied call is recorded too, as a failed one.
        return decision, _Answered(named, agent, day, decision.decision == "block", time.monotonic(), decision,
                                   parent_named)

    def _measure(self, at: _At, session_key: str | None, parent_key: str | None, tool: str | None,
                 agent: str | None, now_ms: int, day: int, call_id: str | None) -> tuple:
        """(the session's view, the name its waiting calls go by, its parent's view and name (``parent_key``,
        if given), its agent, the gates that apply, those tripped, those whose measure leaves unpriced calls
        out).

        A Task subagent's call (``parent_key`` given) is its own session's: the subagent's session and
        session-family gates measure it, and so do its parent's session-family gates, whose family counts
        it; the parent's session gates do not, counting only what the parent spends itself."""
        state = self._view(at, session_key) if session_key else None
        if state is not None:
            # Asked by id or by key, a session's waiting calls are told by its key.
            session_key, agent = state.session_key or session_key, state.agent_id
        elif agent is None:
            agent = agent_from_key(session_key)
        parent = self._view(at, parent_key) if parent_key else None
        if parent is not None:
            parent_key = parent.session_key or parent_key
        applicable = self._gates_for(tool or "", agent or "")
        counted = any(g.metric in _COUNTED for g in applicable)
        waiting = self._waiting(at) if counted else []
        calls_gated = call_id is not None and any(g.metric == "tool_calls" for g in applicable)
        ahead = self._not_made_yet(at, call_id) if calls_gated else None
        tripped, unpriced = [], []
        for gate, view, named in self._measured(applicable, state, session_key, parent, parent_key):
            totals, who = self._totals(at, gate, view, agent, now_ms)
            extra = 0
            if gate.metric in _COUNTED:
                # A denied call its transcript told first is a running call there until its hook is
                # recorded: it counts as a call once, as an error here until the ledger's is one.
                extra = sum(1 for w, held, failed in waiting if w.counts_in(gate, named, agent, day)
                            and (w.failed and not failed if gate.metric == "tool_errors" else not held))
                # The calls a turn's transcript told before their hooks asked (the one asked about too)
                # are not made yet: each counts from its own answer, so a limit of N lets N of them
                # through. They are in the run's session: a day, or the family of the session whose turn it
                # is, holds them all (a subagent's too); a session alone, or a subagent's family, its own.
                alone = gate.scope == "session" or (
                    gate.scope == "session-family" and named != (parent_key or session_key))
                if gate.metric == "tool_calls" and ahead is not None and (
                        not alone or (view is not None and ahead[0] == view.session_id)):
                    extra -= ahead[1]
                if totals is None and extra > 0 and gate.scope != "agent-day":
                    totals, who = Totals(), f"session {named}"  # unknown to the ledger, not to us
            if totals is None:
                continue
            value = max(exact(totals, gate.metric) + extra, 0)
            unknown = exact(totals, "unpriced_calls") if gate.metric == "cost_usd" else 0
            if value >= self._thresholds[gate]:
                tripped.append((gate, shown(gate.metric, value), who, unknown))
            elif unknown:
                unpriced.append((gate, who, unknown))
        return state, session_key, parent, parent_key, agent, applicable, tripped, unpriced

    @staticmethod
    def _measured(applicable: tuple[GateConfig, ...], state: HotSession | None, session_key: str | None,
                  parent: HotSession | None, parent_key: str | None) -> list[tuple]:
        """(gate, the view it measures, the key its waiting calls go by) of each measure a question takes: one
        a gate, and a second of a family gate when a subagent asks, its parent's family (see ``_measure``)."""
        out = []
        for gate in applicable:  # in the config's order: of the tripped, the first listed decides
            out.append((gate, state, session_key))
            if parent_key is not None and gate.scope == "session-family":
                out.append((gate, parent, parent_key))
        return out

    def _view(self, at: _At, key: str) -> HotSession | None:
        if at.memory:
            state = self.hot.remembered(key)
            if state is not None:
                at.used = True
                return state
        conn = at.ledger()
        if at.memory:  # the ledger is where memory is: the view read there is kept
            return self.hot.lookup(conn, key)
        return view_of(conn, key)

    def _tell(self, decision: Decision) -> None:
        with self._lock:
            self._counts[(decision.gate or "", decision.decision)] += 1
            if decision.decision != "allow":
                self._pending.append(decision)

    def _waiting(self, at: _At) -> list[tuple[_Answered, bool, bool]]:
        """The calls answered here and not recorded yet, each with whether the ledger holds it at ``at``'s
        position (a transcript told it, or its hook event is committed and memory has not caught up) and
        whether as failed. Caller holds ``_calls``: calls waiting too long are let go here."""
        now = time.monotonic()
        for call_id in [c for c, a in self._unrecorded.items() if now - a.at > _UNRECORDED_S]:
            self._let_go(call_id)
        if not self._unrecorded:
            return []
        # Read again only when the position moved or a call came to wait since: not once a question.
        position, asked, held = self._told
        if not (self._unrecorded.keys() <= asked and at.holds(position)):
            conn = at.ledger()
            held = queries.claude_code_tool_calls(conn, list(self._unrecorded))
            self._told = (at.position, set(self._unrecorded), held)
        return [(a, c in held, held.get(c, False)) for c, a in self._unrecorded.items()]

    def _not_made_yet(self, at: _At, call_id: str) -> tuple[str | None, int] | None:
        """(session id, how many) of the calls the ledger holds at ``at``'s position that are not made yet
        as the call ``call_id`` is asked about: itself, and the calls of its run its transcript told that
        are still running and were never answered here (Claude Code writes a turn's parallel tool_use
        blocks, then asks about each). None if the ledger does not hold the call. A call answered by a
        daemon before a restart is such a call again until it ends."""
        found = queries.claude_code_open_siblings(at.ledger(), call_id)
        if found is None:
            return None
        session_id, running = found
        unanswered = {c for c in running if c not in self._unrecorded and c not in self._recent}
        return session_id, len(unanswered | {call_id})

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

    def _totals(self, at: _At, gate: GateConfig, state: HotSession | None, agent: str | None,
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
        return self._day(at, agent, now_ms), (f"agent {agent}" if agent else "all agents together")

    def _day(self, at: _At, agent: str | None, now_ms: int) -> dict:
        """The day's totals at ``at``'s position, cached until memory moves (questions hold ``_calls``)."""
        start, end = self._day_bounds(now_ms)
        key = (agent, start)
        cached = self._days.get(key)
        if cached is not None and at.holds(cached[0]):
            return cached[1]
        conn = at.ledger()
        if len(self._days) > 1024:  # yesterday's and departed agents' entries
            self._days.clear()
        totals = queries.day_totals(conn, start, end - 1, agent)
        self._days[key] = (at.position, totals)
        return totals
