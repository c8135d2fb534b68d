"""Orphan reconciliation: what started and never ended becomes ``interrupted``.

A run, tool call or subagent still open ``grace`` after its last sign of life is marked
interrupted, in a ledger transaction that moves the rollups with it; so is a run whose
session was suspended by a gateway restart after the run's last sign of life, without
waiting. A session suspended by a restart and not back within ``grace`` has vanished:
interrupted too. A late event still wins: the writer's upserts set the real outcome over
``interrupted``, and a session's next event makes it active again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from agentledger.ledger import rollups
from agentledger.ledger.writer import LedgerWriter

DEFAULT_GRACE_S = 600

_OPEN_RUNS = """
SELECT r.run_id FROM runs AS r INDEXED BY runs_open LEFT JOIN run_activity AS a ON a.run_id = r.run_id
WHERE r.status = 'running' AND (
    max(coalesce(a.last_ms, 0), coalesce(r.started_ms, 0)) < ?1
    OR max(coalesce(a.last_ms, 0), coalesce(r.started_ms, 0)) <= (
        SELECT max(p.from_ms) FROM sessions AS s JOIN session_suspensions AS p ON p.session_id = s.session_id
        WHERE s.session_id = r.session_id AND s.status IN ('suspended', 'interrupted') AND p.until_ms IS NULL))
"""
_OPEN_TOOLS = """
SELECT run_id, tool_call_id FROM tool_calls INDEXED BY tool_calls_open
WHERE status = 'running' AND (coalesce(started_ms, ended_ms, 0) < ?1 OR run_id IN (SELECT value FROM json_each(?2)))
"""
_VANISHED_SESSIONS = """
SELECT session_id FROM sessions INDEXED BY sessions_suspended WHERE status = 'suspended' AND last_ms < ?
"""
_OPEN_SUBAGENTS = """
SELECT a.child_session_key FROM subagents AS a INDEXED BY subagents_open
WHERE a.status = 'running' AND max(coalesce(a.spawned_ms, 0),
    coalesce((SELECT max(last_ms) FROM sessions WHERE session_key = a.child_session_key), 0)) < ?
"""


@dataclass(slots=True)
class Reconciled:
    runs: int = 0
    tool_calls: int = 0
    subagents: int = 0
    interrupted_sessions: int = 0
    sessions: set[str] = field(default_factory=set)  # session instances whose rows changed
    position: int = 0


def reconcile(writer: LedgerWriter, now_ms: int, grace_s: float = DEFAULT_GRACE_S) -> Reconciled:
    """Mark what has been open longer than ``grace_s`` as interrupted; idempotent."""
    cutoff = now_ms - int(grace_s * 1000)
    with writer.transaction() as conn:
        runs = [r for (r,) in conn.execute(_OPEN_RUNS, (cutoff,))]
        tools = [(r, t) for r, t in conn.execute(_OPEN_TOOLS, (cutoff, orjson.dumps(runs).decode()))]
        subagents = [k for (k,) in conn.execute(_OPEN_SUBAGENTS, (cutoff,))]
        vanished = [s for (s,) in conn.execute(_VANISHED_SESSIONS, (cutoff,))]
        if not (runs or tools or subagents or vanished):
            return Reconciled()
        tracker = rollups.Tracker(conn, set(runs), set(tools), set(), set(subagents))
        tracker.before()
        conn.executemany("UPDATE runs SET status = 'interrupted' WHERE run_id = ? AND status = 'running'",
                         [(r,) for r in runs])
        conn.executemany("UPDATE tool_calls SET status = 'interrupted' "
                         "WHERE run_id = ? AND tool_call_id = ? AND status = 'running'", tools)
        conn.executemany("UPDATE subagents SET status = 'interrupted' "
                         "WHERE child_session_key = ? AND status = 'running'", [(k,) for k in subagents])
        tracker.after([], [])
        conn.executemany("UPDATE sessions SET status = 'interrupted' WHERE session_id = ? AND status = 'suspended'",
                         [(s,) for s in vanished])
        touched = tracker.touched | set(vanished)
        position = rollups.advance_position(conn, touched)
    return Reconciled(len(runs), len(tools), len(subagents), len(vanished), touched, position)
