"""Session lifecycle, batch by batch: active → (suspended → active)* → ended.

A gateway restart shows in one agent's log as its ``seq`` dropping back towards 0 (at the
same or a later time), or as silence longer than the idle time with no line missing in
between (``seq`` moved on by about one). Sessions last seen active in that log are
suspended at its last event before the restart, and the runs, tool calls and subagents they
had open are interrupted at once: a late end still wins, but later lines of theirs that are no end
do not bring them back. The next event of a suspended session makes it active again and closes the
suspension, which keeps how long it was away.
A later line of the log that carries ``seq`` on (or starts it again) but is stamped within the idle
time after the near end of a silence, the log's latest restart still standing, shows the far end was
stamped ahead of the clock (a host clock stepped forward, then back): the silence is taken back, its
suspensions and what it cut off with it, as if never seen, whether its lines came in one batch or many,
and the restart before it stands again. The log's clock goes back to that line, so that a restart
after it is seen.
An event naming no session but its run (a tool call, a spawn) is its run's session's; one read
before anything said whose its run is counts once that is known, before the lines read since.
Its key alone does not say: until a line names the key's new instance (``session.start`` names
no key), the key still leads to the one before it. ``session.start`` with ``resumedFrom`` ends the
old instance (reason ``reset``) and gives both the same session key, all along a chain of
resets; ``subagent.end`` ends the child's session. A transcript archived by a reset or a
deletion ends its session too (``end_archived``). A session the user quit (reason ``end``) and
then took up again (a ``SessionStarted`` that ``continues`` it: Claude Code's --resume) is active
again, its end gone; a later end ends it at its own time.

Transitions follow the file order of the batch's new facts, starting from what the ledger
held before the batch, and the log's position is written in the same transaction: the
outcome does not depend on where batches were cut or how often agentledger restarted.
End reasons rank reset > end > subagent > deleted (a deletion says only that the session is gone,
the others why), and a session ended more than once ended at the earliest of those times, so
neither depends on arrival order either.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import apsw
import orjson

from agentledger.facts import (
    Compaction,
    Fact,
    LlmCall,
    SessionEnded,
    SessionStarted,
    SubagentEnded,
)
from agentledger.ledger import rollups
from agentledger.ledger.verify import NEXT_CONTEXT_MS, rebuild_keys

_MAX_SEQ_STEP = 16  # lines a log may skip (malformed, torn) and still count as read without a gap
_MAX_REORDER = 16  # lines a gateway may write out of their seq order
# Less than this after its last line, a log whose seq steps back by no more than _MAX_REORDER is a
# line written out of order, not a gateway's new process: none starts and writes that fast. A crash
# loop that quick goes unseen as restarts; its open runs are still interrupted by reconcile.
_COMEBACK_MS = 1000
_REASON_RANK = {None: 0, "deleted": 1, "subagent": 2, "end": 3, "reset": 4}
_AWAY = ("suspended", "interrupted")

_READ_STATES = """
SELECT s.session_id, s.status, s.end_reason, s.session_key, s.resumed_from, s.log_id,
       coalesce(s.started_ms, s.first_ms), (SELECT max(p.from_ms) FROM session_suspensions AS p
                                            WHERE p.session_id = s.session_id AND p.until_ms IS NULL)
FROM sessions AS s WHERE s.session_id IN (SELECT value FROM json_each(?))
"""
_CLOCKS = "SELECT log, id, last_seq, last_ms FROM log_clocks WHERE log IN (SELECT value FROM json_each(?))"
# A log's latest restart (?2 NULL) or the one before the restart whose first event was at ?2.
_RESTART_BEFORE = """
SELECT last_ms, ts_ms, cause FROM gateway_restarts WHERE log_id = ?1 AND (?2 IS NULL OR ts_ms < ?2)
ORDER BY ts_ms DESC LIMIT 1
"""
# The sessions a stored silence (its near end, its log) suspended.
_SILENCED = """
SELECT p.session_id FROM session_suspensions AS p JOIN sessions AS s ON s.session_id = p.session_id
WHERE p.from_ms = ? AND p.cause = 'idle' AND s.log_id = ?
"""
_OPEN_IN_LOG = "SELECT session_id FROM sessions INDEXED BY sessions_open WHERE log_id = ? AND status = 'active'"
_BY_KEY = "SELECT session_id FROM sessions WHERE session_key IN (SELECT value FROM json_each(?))"
_SUCCESSORS = """
SELECT session_id, resumed_from, coalesce(started_ms, first_ms) FROM sessions INDEXED BY sessions_by_resumed
WHERE resumed_from IN (SELECT value FROM json_each(?))
"""
_ENDED_SUBAGENTS = """
SELECT child_session_key, ended_ms FROM subagents
WHERE status = 'ended' AND child_session_key IN (SELECT value FROM json_each(?))
"""
# The earliest end stands, whichever was read first: an archive's end may come before a line read late;
# of a session taken up again (?6) only the batch's end after that, if any.
_WRITE_STATE = """
UPDATE sessions SET status = ?1, end_reason = ?2, log_id = ?3,
                    ended_ms = iif(?6, ?4, min(coalesce(ended_ms, ?4), coalesce(?4, ended_ms)))
WHERE session_id = ?5
"""
_ENDS = "SELECT session_id, status, end_reason, ended_ms, last_ms FROM sessions " \
        "WHERE session_id IN (SELECT value FROM json_each(?))"
_END = "UPDATE sessions SET status = 'ended', end_reason = ?, ended_ms = ? WHERE session_id = ?"
_CLOSE_SUSPENSION = ("UPDATE session_suspensions SET until_ms = max(coalesce(?1, from_ms), from_ms) "
                     "WHERE session_id = ?2 AND until_ms IS NULL")
# One hop of a reset link: the instance that has no key takes its partner's, if that has one.
_KEY_FROM_PREDECESSOR = """
UPDATE sessions SET session_key = (SELECT o.session_key FROM sessions AS o WHERE o.session_id = sessions.resumed_from)
WHERE session_id IN (SELECT value FROM json_each(?)) AND session_key IS NULL AND resumed_from IS NOT NULL
  AND (SELECT o.session_key FROM sessions AS o WHERE o.session_id = sessions.resumed_from) IS NOT NULL
"""
_KEY_FROM_SUCCESSOR = """
UPDATE sessions SET session_key = (SELECT n.session_key FROM sessions AS n INDEXED BY sessions_by_resumed
                                   WHERE n.resumed_from = sessions.session_id AND n.session_key IS NOT NULL
                                   ORDER BY n.session_id LIMIT 1)
WHERE session_id IN (SELECT value FROM json_each(?)) AND session_key IS NULL
  AND EXISTS (SELECT 1 FROM sessions AS n INDEXED BY sessions_by_resumed
              WHERE n.resumed_from = sessions.session_id AND n.session_key IS NOT NULL)
"""
# The stored instances reset links tie to these, on through those without a key (a keyed one passes
# its own on): the ones a key learnt now reaches, however many resets away. UNION visits each once.
_KEYLESS_CHAIN = """
WITH RECURSIVE chain (session_id, keyless) AS (
    SELECT value, 1 FROM json_each(?1)
    UNION
    SELECT o.session_id, o.session_key IS NULL FROM chain AS c JOIN sessions AS s ON s.session_id = c.session_id
    JOIN sessions AS o ON o.session_id = s.resumed_from WHERE c.keyless
    UNION
    SELECT n.session_id, n.session_key IS NULL FROM chain AS c
    JOIN sessions AS n INDEXED BY sessions_by_resumed ON n.resumed_from = c.session_id WHERE c.keyless
    LIMIT ?2
)
SELECT session_id FROM chain
"""
_MAX_CHAIN = 10_000  # instances one chain walk visits at most
# A run's earliest stored sign of life after ?2 and up to ?3 (?4: its first, which may be no tool call's).
# Not at ?2 itself: that is when the session left, its log's last event before the restart.
_RUN_ACTIVITY_AFTER = """
SELECT min(t) FROM (SELECT started_ms AS t FROM tool_calls WHERE run_id = ?1
                    UNION ALL SELECT ended_ms FROM tool_calls WHERE run_id = ?1 UNION ALL SELECT ?4)
WHERE t > ?2 AND t <= ?3
"""
_SPANS = "SELECT session_id, session_key, coalesce(started_ms, first_ms) FROM sessions " \
         "WHERE session_id IN (SELECT value FROM json_each(?))"
# Keys with a compaction that ended within the hour before one of the batch's model calls: that
# call may be the one that tells its size after.
_COMPACTIONS_NEAR = """
SELECT p.session_key, min(coalesce(p.started_ms, p.ended_ms)) FROM json_each(?) AS j
JOIN compaction_pairs AS p ON p.session_key = j.value ->> 0
WHERE p.ended_ms BETWEEN j.value ->> 1 AND j.value ->> 2
GROUP BY 1
"""
def _cut_off(state: str) -> tuple[str, str, str]:
    """What a restart cut off, ``state`` 'running': the suspended sessions' (?1) runs open at the point their
    gateway went away (?2), those runs' tool calls, and the subagents that died with them. 'interrupted':
    what a restart taken back had cut off and has not ended since, bar what was open before the log's
    restart before it (?3 for runs, ?4 for subagents), which that one cut off."""
    def where(t: str) -> str:
        return f"{t}.status = 'running'" if state == "running" else \
            f"{t}.status = 'interrupted' AND {t}.ended_ms IS NULL"

    def index(name: str) -> str:  # the partial indexes hold only what is running
        return f"INDEXED BY {name}" if state == "running" else ""

    runs = f"""
SELECT r.run_id FROM runs AS r {index('runs_open')} LEFT JOIN run_activity AS a ON a.run_id = r.run_id
WHERE {where('r')} AND r.session_id IN (SELECT value FROM json_each(?1))
  AND coalesce(r.started_ms, a.first_ms) <= ?2 AND (?3 IS NULL OR coalesce(r.started_ms, a.first_ms) > ?3)
"""
    tools = f"""
SELECT t.run_id, t.tool_call_id FROM tool_calls AS t {index('tool_calls_open')}
WHERE {where('t')} AND t.run_id IN (SELECT value FROM json_each(?1)) AND coalesce(t.started_ms, t.ended_ms) <= ?2
"""
    # A child dies with its gateway whether or not it wrote a line: the suspended sessions' own subagents (?1:
    # their keys) and those their runs spawned (?2), or their key when no line says whose the spawning run is.
    subagents = f"""
SELECT s.child_session_key FROM subagents AS s {index('subagents_open')}
LEFT JOIN runs AS r ON r.run_id = s.parent_run_id LEFT JOIN run_activity AS a ON a.run_id = s.parent_run_id
WHERE {where('s')} AND coalesce(s.spawned_ms, 0) <= ?3 AND (?4 IS NULL OR coalesce(s.spawned_ms, 0) > ?4)
  AND (s.child_session_key IN (SELECT value FROM json_each(?1)) OR {rollups.RUN_SESSION} IN (SELECT value FROM json_each(?2))
       OR ({rollups.RUN_SESSION} IS NULL AND s.parent_session_key IN (SELECT value FROM json_each(?1))))
"""
    return runs, tools, subagents


_CUT = _cut_off("running")
_CUT_BACK = _cut_off("interrupted")


def _new_process(seq: int, new: int, after_ms: int) -> bool:
    """Whether ``new`` coming ``after_ms`` after ``seq`` is a new process's count. One counts from 0; a line
    written out of order only steps back a little, which near a process's start is back to 0 too: there,
    only time tells them apart."""
    return new < seq and new <= seq // 2 and (seq - new > _MAX_REORDER or after_ms >= _COMEBACK_MS)

# Whether a gateway restart cut off the interrupted run ``r`` (its run_activity ``a``), or subagent ``s`` (its
# spawning run's ``r`` and ``a``): a session ``_interrupt`` would have taken it with was suspended after it
# began. The lines say so, whenever they are read: later lines of it do not open it again (see the writer's
# _SETTLED_RUNS), as they would not in a read of them all at once, which ends the batch with that cut.
RESTART_CUT_RUN = """EXISTS (SELECT 1 FROM session_suspensions AS p WHERE p.session_id = r.session_id
                            AND p.from_ms >= coalesce(r.started_ms, a.first_ms))"""
RESTART_CUT_SUBAGENT = f"""EXISTS (
    SELECT 1 FROM session_suspensions AS p WHERE p.from_ms >= coalesce(s.spawned_ms, 0) AND p.session_id IN (
        SELECT session_id FROM sessions WHERE session_key = s.child_session_key
        UNION ALL SELECT {rollups.RUN_SESSION}
        UNION ALL SELECT session_id FROM sessions
        WHERE {rollups.RUN_SESSION} IS NULL AND session_key = s.parent_session_key))"""


def _json(values) -> str:
    return orjson.dumps(sorted(values)).decode()


def _stronger(reason: str | None, other: str | None) -> str | None:
    return other if _REASON_RANK[other] > _REASON_RANK[reason] else reason


def _earliest(ts: int | None, other: int | None) -> int | None:
    return ts if other is None else other if ts is None else min(ts, other)


def end_archived(conn: apsw.Connection, archives: dict[str, tuple[tuple[str, int | None], ...]]) -> set[str]:
    """End the sessions whose transcripts were archived: session id → each archive's (reason, time, None
    when unknown: then the session's last activity). Ends already known fold in as the lines' own ends
    do, so the outcome does not depend on whether the archive or the lines were seen first; idempotent.
    Returns the sessions whose rows changed."""
    rows = []
    for sid, status, reason, ended, last in conn.execute(_ENDS, (_json(archives),)):
        new_reason, new_end = reason, ended
        for why, at in archives[sid]:
            new_reason = _stronger(new_reason, why)
            new_end = _earliest(new_end, last if at is None else at)
        if (status, reason, ended) != ("ended", new_reason, new_end):
            rows.append((new_reason, new_end, sid))
    conn.executemany(_END, rows)
    # As a line's end does (``resume`` in _replay): a session away when it ended is back then.
    conn.executemany(_CLOSE_SUSPENSION, [(end, sid) for _, end, sid in rows])
    return {sid for *_, sid in rows}


@dataclass(slots=True)
class _Session:
    status: str | None  # None: not in the ledger yet
    end_reason: str | None
    key: str | None
    resumed_from: str | None
    log_id: int | None
    start: int | None
    away_since: int | None  # the open suspension, if any
    ended_at: int | None = None  # the earliest end time the batch tells
    changed: bool = False
    reopened: bool = False  # taken up again after its end: the stored end time no longer stands


@dataclass(slots=True)
class _Restart:
    index: int  # position in its log's facts of the first fact after it
    cause: str  # seq | idle
    last_ms: int
    ts_ms: int
    suspended: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Log:
    """One agent's log within a batch: its new facts in file order and its clock before and after."""

    name: str  # the directory of the log's files
    facts: list[Fact]
    id: int | None = None
    last_seq: int | None = None  # where the log was before the batch
    last_ms: int | None = None
    new_seq: int | None = None  # and after it
    new_ms: int | None = None
    restarts: list[_Restart] = field(default_factory=list)
    taken_back: dict[int, _Restart] = field(default_factory=dict)  # stored silences the line at each index undid

    def find_restarts(self, idle_ms: int, stored: Callable[[int | None], _Restart | None]) -> None:
        """``stored(ts)``: the log's latest restart in the ledger before the one whose first event was at ``ts``
        (None: the latest of all), index -1."""
        seq, last = self.last_seq, self.last_ms
        below = None  # the far end of the earliest stored restart taken back: those before it stand
        for i, f in enumerate(self.facts):
            ts = f.ts_ms
            # Without a process counter (transcripts, hooks) a pause is a person pausing, not a
            # gateway restarting: such logs never suspend anything.
            counted = last is not None and f.seq is not None and seq is not None
            if last is not None and ts < last:
                # Older than what the log already showed: read late, which says nothing about now. Unless it
                # carries the count on (or starts it again: a new process) and is stamped within the idle time
                # after the near end of the log's latest restart still standing, a silence: then its far end
                # was stamped ahead of the clock (one stepped forward, then back) and the log was never silent.
                # Its clock goes back with the line.
                if not counted:
                    continue
                silence = self.restarts[-1] if self.restarts else stored(below) if self.id is not None else None
                if silence is None or silence.cause != "idle" or not silence.last_ms < ts <= silence.last_ms + idle_ms:
                    continue
                new_process = _new_process(seq, f.seq, ts - silence.last_ms)
                if not (new_process or seq < f.seq <= seq + _MAX_SEQ_STEP):
                    continue
                # The restart before it stands again, and may be undone in turn.
                if self.restarts:
                    self.restarts.pop()
                else:
                    self.taken_back[i], below = silence, silence.ts_ms
                if new_process:  # the lines stamped ahead cannot say when the old one went: after the near end
                    self.restarts.append(_Restart(i, "seq", silence.last_ms, ts))
            elif counted:
                if _new_process(seq, f.seq, ts - last):
                    self.restarts.append(_Restart(i, "seq", last, ts))
                # Silence is only silence when no line in between is missing (unread or lost).
                elif ts - last > idle_ms and f.seq - seq <= _MAX_SEQ_STEP:
                    self.restarts.append(_Restart(i, "idle", last, ts))
            if f.seq is not None:
                seq = f.seq
            last = ts
        self.new_seq, self.new_ms = seq, last


@dataclass(slots=True)
class Lifecycle:
    """Brackets a batch like rollups.Tracker: ``before()``, the upserts, ``link()``, the rollups, ``after()``.

    A batch may hold the files of several logs (a live pass): each log is walked in turn, in the
    order the batch lists them, from the states the logs before it left, as if each had been a
    batch of its own."""

    conn: apsw.Connection
    logs: list[_Log]
    idle_ms: int
    facts: list[Fact] = field(default_factory=list)  # every log's, in batch order
    successors: dict[str, tuple[str, int]] = field(default_factory=dict)  # old id → (new id, its start)
    ended_subagents: dict[str, int] = field(default_factory=dict)  # child key → end time
    states: dict[str, _Session] = field(default_factory=dict)
    links: set[str] = field(default_factory=set)  # instances a reset ties to a batch's instance
    named: set[str] = field(default_factory=set)  # instances the batch's lines name
    touched: set[str] = field(default_factory=set)
    interrupted: list[int] = field(default_factory=lambda: [0, 0, 0])  # runs, tool calls, subagents

    @classmethod
    def for_batch(cls, conn: apsw.Connection, files: list[tuple[str, list[Fact]]], idle_ms: int) -> Lifecycle:
        """``files``: (path, its new facts in file order), in batch order; files of one log go together."""
        logs: dict[str, _Log] = {}
        for path, facts in files:
            name = os.path.dirname(path)
            log = logs.get(name)
            if log is None:
                logs[name] = _Log(name, list(facts))
            else:
                log.facts.extend(facts)
        return cls(conn, list(logs.values()), idle_ms, [f for log in logs.values() for f in log.facts])

    # -- before the upserts ---------------------------------------------------------
    def before(self) -> set[str]:
        """Read what the batch starts from; returns the sessions whose rows a reset link may change."""
        conn = self.conn
        by_name = {log.name: log for log in self.logs}
        for name, log_id, last_seq, last_ms in conn.execute(_CLOCKS, (_json(by_name),)):
            log = by_name[name]
            log.id, log.last_seq, log.last_ms = log_id, last_seq, last_ms
        for log in self.logs:
            log.find_restarts(self.idle_ms, functools.cache(functools.partial(self._restart_before, log.id)))
        ids = self.named = {f.session_id for f in self.facts if f.session_id is not None}
        predecessors = {f.resumed_from for f in self.facts if type(f) is SessionStarted and f.resumed_from}
        self.successors = {old: (new, start) for new, old, start in conn.execute(_SUCCESSORS, (_json(ids),))}
        wanted = ids | predecessors
        ended_children = {f.child_session_key for f in self.facts if type(f) is SubagentEnded}
        if ended_children:
            wanted |= {sid for (sid,) in conn.execute(_BY_KEY, (_json(ended_children),))}
        keys = {f.session_key for f in self.facts if f.session_key is not None}
        self.ended_subagents = dict(conn.execute(_ENDED_SUBAGENTS, (_json(keys),))) if keys else {}
        for log in self.logs:
            if log.restarts and log.id is not None:
                wanted |= {sid for (sid,) in conn.execute(_OPEN_IN_LOG, (log.id,))}
            for silence in log.taken_back.values():
                silence.suspended = [sid for (sid,) in conn.execute(_SILENCED, (silence.last_ms, log.id))]
                wanted |= set(silence.suspended)
        self._load(wanted)
        self.links = predecessors | {new for new, _ in self.successors.values()} | {
            s.resumed_from for s in self.states.values() if s.resumed_from} | {
            f.session_id for f in self.facts if type(f) is SessionStarted and f.resumed_from}
        if self.links:
            self.links |= {sid for (sid,) in conn.execute(_KEYLESS_CHAIN, (_json(self.links), _MAX_CHAIN))}
        return self.links

    def _restart_before(self, log_id: int, ts: int | None) -> _Restart | None:
        for last_ms, ts_ms, cause in self.conn.execute(_RESTART_BEFORE, (log_id, ts)):
            return _Restart(-1, cause, last_ms, ts_ms)
        return None

    def _load(self, ids: set[str]) -> None:
        for sid, status, reason, key, resumed, log_id, start, away in self.conn.execute(_READ_STATES, (_json(ids),)):
            self.states[sid] = _Session(status, reason, key, resumed, log_id, start, away)

    # -- between the upserts and the rollups ------------------------------------------
    def link(self) -> None:
        """A reset's two instances share one session key: the one without takes the other's, hop by hop
        along the whole chain (a round moves a key at least one hop, or nothing is left to move)."""
        if self.links:
            linked = self.links | set(self.states)
            ids = _json(linked)
            for _ in linked:
                before = self.conn.total_changes()
                self.conn.execute(_KEY_FROM_PREDECESSOR, (ids,))
                self.conn.execute(_KEY_FROM_SUCCESSOR, (ids,))
                if self.conn.total_changes() == before:
                    break

    # -- after the rollups --------------------------------------------------------------
    def after(self, tracker: rollups.Tracker) -> set[str]:
        """Write the transitions; returns the session instances whose rows changed.

        ``tracker`` is the batch's: what it read before the upserts says which sessions moved."""
        conn = self.conn
        # A batch with nothing new from a log (only duplicates, e.g. a copy) leaves its clock as it was.
        for log in self.logs:
            if log.new_ms is not None and log.id is None:
                log.id = conn.execute("INSERT INTO log_clocks (log, last_seq, last_ms) VALUES (?, ?, ?) RETURNING id",
                                      (log.name, log.new_seq, log.new_ms)).fetchall()[0][0]
        conn.executemany("UPDATE log_clocks SET last_seq = ?, last_ms = ? WHERE id = ?",
                         [(log.new_seq, log.new_ms, log.id) for log in self.logs if log.new_ms is not None])
        self._derive(tracker)  # first: the replay looks key-only lines' instances up in the mapping
        runs = self._owners(tracker)
        suspensions, closed = self._replay(runs, self._late(tracker, runs))
        changed = [(s.status, s.end_reason, s.log_id, s.ended_at, sid, s.reopened) for sid, s in self.states.items()
                   if s.changed and s.status is not None]
        conn.executemany(_WRITE_STATE, changed)
        self.touched |= {row[4] for row in changed}
        conn.executemany("UPDATE session_suspensions SET until_ms = ? WHERE session_id = ? AND until_ms IS NULL",
                         closed)
        for log in self.logs:
            for silence in log.taken_back.values():
                self._take_back(log, silence)
        conn.executemany("INSERT OR REPLACE INTO session_suspensions (session_id, from_ms, until_ms, cause) "
                         "VALUES (?, ?, ?, ?)", suspensions)
        for log in self.logs:
            if log.restarts:
                conn.executemany("INSERT OR IGNORE INTO gateway_restarts (log_id, ts_ms, last_ms, cause) "
                                 "VALUES (?, ?, ?, ?)", [(log.id, r.ts_ms, r.last_ms, r.cause) for r in log.restarts])
                for restart in log.restarts:
                    self._interrupt(restart)
        return self.touched

    def _state(self, sid: str) -> _Session:
        s = self.states.get(sid)
        if s is None:
            s = self.states[sid] = _Session(None, None, None, None, None, None, None)
        return s

    def _owners(self, tracker: rollups.Tracker) -> dict[str, str]:
        """The instances of the batch's lines that name none, through their runs: run → its session (also
        for the runs whose stored lines named none, see ``_late``). Those instances' states join the
        batch's. A line whose run's session is not known yet is not looked up by its key: until a later
        line names the key's new instance (a session.start names no key), the key still leads to the one
        before it, which the line would bring back; it counts once its run's session is known."""
        unnamed = [f for f in self.facts if f.session_id is None]
        wanted = {f.run_id for f in unnamed if f.run_id is not None} | {
            run_id for run_id, row in tracker.old_runs.items() if row[11] is None and row[9] is not None}
        # Their sessions as the rollups count them, read by the tracker after the batch's rows (every run the
        # batch has a line of is one it reads).
        runs = {run_id: row[11] for run_id in wanted if (row := tracker.new_runs.get(run_id)) and row[11] is not None}
        # Instances the batch names and the ledger did not hold are new: they start where first named.
        self._load(set(runs.values()) - self.states.keys() - self.named)
        return runs

    def _late(self, tracker: rollups.Tracker, runs: dict[str, str]) -> dict[str, int]:
        """Sessions away when the batch began that lines of earlier batches show back, lines whose run's
        session this batch made known: session → the earliest of them after it left. Those lines come
        before the batch's in the file, so they count first, as in a batch that held them all."""
        late: dict[str, int] = {}
        for run_id, row in tracker.old_runs.items():
            sid = runs.get(run_id)
            s = self.states.get(sid)
            if row[11] is not None or row[9] is None or s is None or s.status not in _AWAY:
                continue
            ((ts,),) = self.conn.execute(_RUN_ACTIVITY_AFTER, (run_id, s.away_since or 0, row[10], row[9]))
            if ts is not None:
                late[sid] = min(late.get(sid, ts), ts)
        return late

    def _replay(self, runs: dict[str, str], late: dict[str, int]) -> tuple[list[tuple], list[tuple]]:
        """Walk each log in file order, after the lines of earlier batches that ``late`` says are back;
        returns new suspension rows and closed open ones. A line naming no session is its run's session's
        (``_owners``), and brings it back as its own lines do."""
        suspensions: list[list] = []  # [session, from, until, cause]
        opened: dict[str, list] = {}
        closed = []
        ended_children = dict(self.ended_subagents)
        successors = {old: start for old, (_, start) in self.successors.items()}

        def resume(sid: str, s: _Session, ts: int) -> None:
            row = opened.pop(sid, None)
            if row is not None:
                row[2] = ts
            elif s.away_since is not None:
                closed.append((ts, sid))
            s.away_since = None

        def back(sid: str, s: _Session, ts: int) -> None:
            if s.status in _AWAY and ts >= (s.away_since or 0):  # an event from before it left: still away
                resume(sid, s, ts)
                s.status, s.changed = "active", True

        def end(sid: str, s: _Session, reason: str, ts: int | None) -> None:
            if s.status in _AWAY:
                resume(sid, s, max(ts or f.ts_ms, s.away_since or 0))
            s.end_reason = _stronger(s.end_reason, reason)
            s.status = "ended"
            s.ended_at = _earliest(s.ended_at, ts)
            s.changed = True

        for sid, ts in late.items():
            back(sid, self.states[sid], ts)
        for log, taken_back, restart, f in self._walk():
            for sid in taken_back.suspended if taken_back is not None else ():
                s = self.states[sid]
                if s.status in _AWAY and s.away_since == taken_back.last_ms:
                    s.status, s.away_since, s.changed = "active", None, True
            if restart is not None:
                for sid, s in self.states.items():
                    if s.status == "active" and s.log_id == log.id:
                        s.status, s.away_since, s.changed = "suspended", restart.last_ms, True
                        opened[sid] = row = [sid, restart.last_ms, None, restart.cause]
                        suspensions.append(row)
                        restart.suspended.append(sid)
            t = type(f)
            if t is SubagentEnded:
                ended_children[f.child_session_key] = f.ended_ms or f.ts_ms
                for sid, s in self.states.items():
                    if s.key == f.child_session_key and s.status is not None:
                        end(sid, s, "subagent", f.ended_ms or f.ts_ms)
            sid = f.session_id
            if sid is None:
                owner = runs.get(f.run_id)
                if owner in self.states:
                    back(owner, self.states[owner], f.ts_ms)
                continue
            s = self._state(sid)
            if s.status is None:
                s.status, s.changed = "active", True
            if s.key is None:
                s.key = f.session_key
            if s.log_id != log.id:
                s.log_id, s.changed = log.id, True
            back(sid, s, f.ts_ms)
            if t is SessionEnded:
                end(sid, s, "end", f.ts_ms)
            elif t is SessionStarted and f.continues and s.status == "ended" and s.end_reason == "end":
                # Only a quit is taken back: a reset or a subagent's end says the session is over for good.
                s.status, s.end_reason, s.ended_at, s.reopened, s.changed = "active", None, None, True, True
            elif t is SessionStarted and f.resumed_from:
                successors[f.resumed_from] = f.ts_ms
                old = self.states.get(f.resumed_from)
                if old is not None and old.status is not None:
                    end(f.resumed_from, old, "reset", f.ts_ms)
            if s.status != "ended":
                if sid in successors:
                    end(sid, s, "reset", successors[sid])
                elif s.key in ended_children:
                    end(sid, s, "subagent", ended_children[s.key])
        return [tuple(row) for row in suspensions], closed

    def _walk(self) -> Iterator[tuple[_Log, _Restart | None, _Restart | None, Fact]]:
        """Every fact, log by log in batch order, with the stored silence it showed was none and the restart
        its log saw just before it."""
        for log in self.logs:
            at = {r.index: r for r in log.restarts}
            for i, f in enumerate(log.facts):
                yield log, log.taken_back.get(i), at.get(i), f

    def _interrupt(self, restart: _Restart) -> None:
        """What the suspended sessions had open when their gateway went away cannot end any more."""
        self.interrupted = [a + b for a, b in zip(self.interrupted, self._cut(restart, _CUT, None, "interrupted"))]

    def _take_back(self, log: _Log, silence: _Restart) -> None:
        """A silence of an earlier batch was none: its restart, the suspensions it began and what it cut off
        go, as if never seen (the replay brought its sessions back)."""
        conn = self.conn
        conn.execute("DELETE FROM gateway_restarts WHERE log_id = ? AND ts_ms = ?", (log.id, silence.ts_ms))
        conn.executemany("DELETE FROM session_suspensions WHERE session_id = ? AND from_ms = ? AND cause = 'idle'",
                         [(sid, silence.last_ms) for sid in silence.suspended])
        before = self._restart_before(log.id, silence.ts_ms)
        self._cut(silence, _CUT_BACK, before and before.last_ms, "running")
        self.touched |= set(silence.suspended)

    def _cut(self, restart: _Restart, queries: tuple[str, str, str], since: int | None, status: str) -> list[int]:
        """Set what ``queries`` find of the restart's suspended sessions to ``status``; returns how many runs,
        tool calls and subagents."""
        if not restart.suspended:
            return [0, 0, 0]
        conn, point = self.conn, restart.last_ms
        sessions = _json(restart.suspended)
        runs_at, tools_at, subagents_at = queries
        runs = [r for (r,) in conn.execute(runs_at, (sessions, point, since))]
        tools = [tuple(k) for k in conn.execute(tools_at, (_json(runs), point))] if runs else []
        keys = {self.states[sid].key for sid in restart.suspended} - {None}
        subagents = [k for (k,) in conn.execute(subagents_at, (_json(keys), sessions, point, since))]
        if runs or tools or subagents:
            tracker = rollups.Tracker(conn, set(runs), set(tools), set(), set(subagents))
            tracker.before()
            conn.executemany("UPDATE runs SET status = ? WHERE run_id = ?", [(status, r) for r in runs])
            conn.executemany("UPDATE tool_calls SET status = ? WHERE run_id = ? AND tool_call_id = ?",
                             [(status, *k) for k in tools])
            conn.executemany("UPDATE subagents SET status = ? WHERE child_session_key = ?",
                             [(status, k) for k in subagents])
            tracker.after([], [])
            self.touched |= tracker.touched
        return [len(runs), len(tools), len(subagents)]

    def _derive(self, tracker: rollups.Tracker) -> None:
        """Bring the key mapping and the compaction rows up to date from where the batch changed them."""
        conn = self.conn
        before = {row[0]: (row[3], row[1]) for row in tracker.old_sessions.values()}
        moved: dict[str, int] = {}
        for sid, key, start in conn.execute(_SPANS, (_json(tracker.session_ids),)):
            old_key, old_start = before.get(sid, (None, None))
            if key is not None and (old_key, old_start) != (key, start):
                ts = start if old_key is None or old_start is None else min(start, old_start)
                moved[key] = min(moved.get(key, ts), ts)
        whole = rebuild_keys(conn, "session_ids", moved)
        since: dict[str, int | None] = {k: None if k in whole else ts for k, ts in moved.items()}

        def changed(key: str, ts: int) -> None:
            if key in since and (since[key] is None or since[key] <= ts):
                return
            since[key] = ts

        calls: dict[str, list[int]] = {}  # key → first and last model call reporting its context
        for f in self.facts:
            if type(f) is Compaction and f.session_key:
                changed(f.session_key, f.ts_ms)
            elif type(f) is LlmCall and f.context_tokens and f.session_key:
                span = calls.setdefault(f.session_key, [f.ts_ms, f.ts_ms])
                span[0], span[1] = min(span[0], f.ts_ms), max(span[1], f.ts_ms)
        if calls:
            near = orjson.dumps([[k, lo - NEXT_CONTEXT_MS, hi] for k, (lo, hi) in calls.items()]).decode()
            for key, ts in conn.execute(_COMPACTIONS_NEAR, (near,)):
                changed(key, ts)
        rebuild_keys(conn, "compaction_pairs", since)
