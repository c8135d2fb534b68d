"""Orphan reconciliation: what started and never ended becomes ``interrupted``.

A run, tool call or subagent still open ``grace`` after its last sign of life is marked
interrupted (a run waiting on a subagent that still shows life has not been silent), in a ledger
transaction that moves the rollups with it; so is a run whose session was suspended by a gateway restart after the run's last sign of life, without
waiting. A session suspended by a restart and not back within ``grace`` of the restart has
vanished: interrupted too. A late event still wins: the writer's upserts set the real outcome over
``interrupted``, and a session's next event makes it active again. A cut for silence is only a guess: a
later line of the run, or of a subagent's child session, opens them again in the writer (_SETTLED_RUNS), and
the next pass settles them on all their lines, as one after a read of them all at once would.

Claude Code rarely writes that a turn is over: its last response simply asks for no tool. A
Claude Code run past the grace that has a response and no tool call still waiting for its
result finished: it ends instead, at its last sign of life, as its last answer went (``ok`` unless that
was an API error, see side_branches._TURN_OUTCOMES). Only a run left waiting on
a tool, as a killed session leaves its last turn, is orphaned. Either end is settled on the lines
read so far: a later line of the run (a slow tool's result) opens it again in the writer, and the
next pass settles it on all of them.

Nothing in an OpenClaw transcript says its session ended: its reset or deletion shows only as
the file renamed to an archive (``<id>.jsonl.reset.<ts>`` / ``.deleted.<ts>``). A session whose
transcripts on disk are all archives ends then, reason ``reset`` or ``deleted`` (lifecycle.
end_archived). It is the files' names that say so, not their lines: a ledger that read the
transcript live and followed its rename, perhaps without reading its first line again, ends it
as one that reads the archive afresh does.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import orjson

from agentledger.defaults import DEFAULT_GRACE_S
from agentledger.ledger import rollups
from agentledger.ledger.lifecycle import end_archived
from agentledger.ledger.side_branches import turn_outcomes
from agentledger.ledger.writer import LedgerWriter
from agentledger.sources import oc_transcript
from agentledger.sources.claude_code import SOURCE as CLAUDE_CODE

# A subagent's last sign of life: its spawn, or its session's last event.
_CHILD_LIFE = ("max(coalesce({a}.spawned_ms, 0), "
               "coalesce((SELECT max(last_ms) FROM sessions WHERE session_key = {a}.child_session_key), 0))")
# A run waiting on a subagent that still shows life (a Task, a spawn awaiting its answer) is no orphan,
# and neither is its open tool call: its own log stays silent for as long as the child works.
_WAITING = ("EXISTS (SELECT 1 FROM subagents AS c INDEXED BY subagents_open_by_run WHERE c.status = 'running' "
            f"AND c.parent_run_id = {{run}} AND {_CHILD_LIFE.format(a='c')} >= ?1)")
_OPEN_RUNS = f"""
SELECT r.run_id FROM runs AS r INDEXED BY runs_open LEFT JOIN run_activity AS a ON a.run_id = r.run_id
WHERE r.status = 'running' AND (
    (max(coalesce(a.last_ms, 0), coalesce(r.started_ms, 0)) < ?1 AND NOT {_WAITING.format(run='r.run_id')})
    OR max(coalesce(a.last_ms, 0), coalesce(r.started_ms, 0)) <= (
        SELECT max(p.from_ms) FROM sessions AS s JOIN session_suspensions AS p ON p.session_id = s.session_id
        WHERE s.session_id = r.session_id AND s.status IN ('suspended', 'interrupted') AND p.until_ms IS NULL))
"""
# Of those open runs, the ones that finished without saying so (see above).
_FINISHED_RUNS = """
SELECT r.run_id FROM json_each(?1) AS j JOIN runs AS r ON r.run_id = j.value
WHERE r.source = ?2
  AND EXISTS (SELECT 1 FROM run_llm_totals AS t WHERE t.run_id = r.run_id AND t.llm_calls > 0)
  AND NOT EXISTS (SELECT 1 FROM tool_calls AS tc WHERE tc.run_id = r.run_id AND tc.status = 'running')
"""
_FINISH_RUN = """
UPDATE runs SET status = 'ok', ended_ms = (SELECT last_ms FROM run_activity WHERE run_id = ?1)
WHERE run_id = ?1 AND status = 'running'
"""
_OPEN_TOOLS = f"""
SELECT run_id, tool_call_id FROM tool_calls AS t INDEXED BY tool_calls_open
WHERE status = 'running' AND ((coalesce(started_ms, ended_ms, 0) < ?1 AND NOT {_WAITING.format(run='t.run_id')})
                              OR run_id IN (SELECT value FROM json_each(?2)))
"""
# Away since its gateway restarted: the first event after the restart, which the suspension
# knows by the restart's last event before it. A session idle longer than the grace before the
# restart is no less able to come back after it.
_VANISHED_SESSIONS = """
SELECT s.session_id FROM sessions AS s INDEXED BY sessions_suspended
WHERE s.status = 'suspended' AND coalesce((
    SELECT max(coalesce(g.ts_ms, p.from_ms)) FROM session_suspensions AS p
    LEFT JOIN gateway_restarts AS g ON g.last_ms = p.from_ms AND g.cause = p.cause
    WHERE p.session_id = s.session_id AND p.until_ms IS NULL), s.last_ms) < ?
"""
_OPEN_SUBAGENTS = f"""
SELECT a.child_session_key FROM subagents AS a INDEXED BY subagents_open
WHERE a.status = 'running' AND {_CHILD_LIFE.format(a='a')} < ?1
"""


# The transcripts on disk as last seen (a file gone since, or replaced, no longer says where its session is).
_TRANSCRIPTS = "SELECT path FROM files WHERE source = ? AND status IN ('live', 'rotated')"


def _archives(conn) -> dict[str, tuple[tuple[str, int | None], ...]]:
    """Session id → its archives' (reason, time), for the sessions with no live transcript left."""
    archives: dict[str, list[tuple[str, int | None]]] = {}
    live = set()
    for (path,) in conn.execute(_TRANSCRIPTS, (oc_transcript.SOURCE,)):
        sid, end = _transcript_name(path)
        if end is None:
            live.add(sid)
        else:
            archives.setdefault(sid, []).append(end)
    return {sid: tuple(sorted(ends, key=repr)) for sid, ends in archives.items() if sid not in live}


@functools.lru_cache(maxsize=1 << 16)
def _transcript_name(path: str) -> tuple[str | None, tuple[str, int | None] | None]:
    """(session id, (reason, time) if it is an archive) of a transcript's path: every reconcile reads
    every one, and a name never changes."""
    name = os.path.basename(path)
    archive = oc_transcript.archived(name)
    if archive is None:
        return oc_transcript.session_id_of(name), None
    sid, reason, at = archive
    return sid, (reason, at)


@dataclass(slots=True)
class Reconciled:
    runs: int = 0  # interrupted
    finished_runs: int = 0  # ended ok: they finished without saying so
    tool_calls: int = 0
    subagents: int = 0
    interrupted_sessions: int = 0
    archived_sessions: int = 0  # ended, or their end changed, by their transcripts' archiving
    sessions: set[str] = field(default_factory=set)  # session instances whose rows changed
    position: int = 0


def reconcile(writer: LedgerWriter, now_ms: int, grace_s: float = DEFAULT_GRACE_S) -> Reconciled:
    """Mark what has been open longer than ``grace_s`` as interrupted; idempotent."""
    cutoff = now_ms - int(grace_s * 1000)
    with writer.transaction() as conn:
        open_runs = [r for (r,) in conn.execute(_OPEN_RUNS, (cutoff,))]
        finished = [r for (r,) in conn.execute(_FINISHED_RUNS, (orjson.dumps(open_runs).decode(), CLAUDE_CODE))]
        runs = sorted(set(open_runs) - set(finished))
        tools = [(r, t) for r, t in conn.execute(_OPEN_TOOLS, (cutoff, orjson.dumps(runs).decode()))]
        subagents = [k for (k,) in conn.execute(_OPEN_SUBAGENTS, (cutoff,))]
        vanished = [s for (s,) in conn.execute(_VANISHED_SESSIONS, (cutoff,))]
        archives = {sid: ends for sid, ends in _archives(conn).items() if writer.archive_ends.get(sid) != ends}
        archived = end_archived(conn, archives) if archives else set()
        if not (open_runs or tools or subagents or vanished or archived):
            writer.archive_ends.update(archives)  # nothing to commit: they hold what the archives say
            return Reconciled()
        tracker = rollups.Tracker(conn, set(open_runs), set(tools), set(), set(subagents))
        tracker.before()
        conn.executemany(_FINISH_RUN, [(r,) for r in finished])
        turn_outcomes(conn, finished)
        conn.executemany("UPDATE runs SET status = 'interrupted' WHERE run_id = ? AND status = 'running'",
                         [(r,) for r in runs])
        conn.executemany("UPDATE tool_calls SET status = 'interrupted' "
                         "WHERE run_id = ? AND tool_call_id = ? AND status = 'running'", tools)
        conn.executemany("UPDATE subagents SET status = 'interrupted' "
                         "WHERE child_session_key = ? AND status = 'running'", [(k,) for k in subagents])
        tracker.after([], [])
        conn.executemany("UPDATE sessions SET status = 'interrupted' WHERE session_id = ? AND status = 'suspended'",
                         [(s,) for s in vanished])
        touched = tracker.touched | set(vanished) | archived
        position = rollups.advance_position(conn, touched)
    writer.archive_ends.update(archives)  # committed
    return Reconciled(len(runs), len(finished), len(tools), len(subagents), len(vanished), len(archived), touched,
                      position)
