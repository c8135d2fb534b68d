"""The single writer: one transaction per batch holds the facts and the file checkpoint.

A batch is either wholly in the ledger or wholly out of it, and every fact is
guarded by its event id, so re-reading lines (after a crash, or from a copy of a
file) never counts anything twice. Entity rows are upserts written so that the
order of events does not matter: an end before its start still yields one row.
What Claude Code's side branches and Task subagents add to a batch of theirs is
side_branches.py's, at the points of the transaction its SideBranches names; only
the dropping of a branch's replayed calls and tool starts stays here (_keyed_calls,
_rows_told), for it decides which of the batch's own rows are written.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

import apsw
import orjson

from agentledger.defaults import DEFAULT_IDLE_S
from agentledger.facts import (
    ENDED_BY,
    Compaction,
    Fact,
    LlmCall,
    Message,
    RawEvent,
    Reject,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    SubagentEnded,
    SubagentLaunched,
    SubagentSpawned,
    Tokens,
    ToolEnded,
    ToolObserved,
    ToolStarted,
    UsageSnapshot,
)
from agentledger.faults import fault
from agentledger.ledger import agents, queries, rollups
from agentledger.ledger.checkpointer import Checkpointer
from agentledger.ledger.db import WAL_LIMIT_BYTES, restart_wal
from agentledger.ledger.lifecycle import RESTART_CUT_RUN, RESTART_CUT_SUBAGENT, Lifecycle
from agentledger.ledger.rows import (
    CHILD_WORDS,
    DROP_TOOL_ROW,
    FILL_TOOL,
    LLM_CALL_COLUMNS,
    NAMED_SESSIONS,
    RESPONSE_CALLS,
    RUN_ACTIVITY,
    RUN_BEGUN_BY,
    TAKE_OVER_HOOK_ROW,
    Part,
    spawn_upsert,
)
from agentledger.ledger.side_branches import (
    BRANCH_EVENT,
    BRANCH_SPAN,
    NoSideBranches,
    SideBranches,
    pair_task,
)
from agentledger.ledger.verify import rebuild_keys
from agentledger.sources.claude_code import SOURCE as CLAUDE_CODE
from agentledger.sources.claude_code import branch_key
from agentledger.sources.claude_code_hooks import ended_again
from agentledger.sources.oc_transcript import SOURCE as OC_TRANSCRIPT

if TYPE_CHECKING:
    from agentledger.sources.claude_code_hooks import HookEvent

# A WAL restart first tries without waiting for readers: between their statements there is
# usually a moment when none reads the WAL. Each failure waits longer the next time, up to the
# last step, and the next attempt comes WAL_RETRY_FACTOR times that wait later (at least
# WAL_RETRY_MIN_S), so at most a fifth of the writer's time goes to waiting for readers.
WAL_RESTART_WAITS_MS = (0, 5, 20, 50, 100, 200, 400, 800)
WAL_RETRY_FACTOR = 4
WAL_RETRY_MIN_S = 0.05
# Errors that come from one value in the data, not from the database or the machine.
_DATA_ERRORS = (OverflowError, apsw.ConstraintError, apsw.MismatchError, apsw.TooBigError,
                apsw.RangeError)


# Errors after which SQLite may have rolled back the whole transaction on its own.
_ROLLED_BACK = (apsw.FullError, apsw.IOError, apsw.NoMemError, apsw.BusyError, apsw.InterruptError,
                apsw.CorruptError)


class CheckpointConflict(Exception):
    """The file's stored offset is not where this batch starts: someone else advanced it."""


@dataclass(slots=True)
class Batch:
    """Complete lines ``[start_offset, end_offset)`` of one file, decoded."""

    file_id: int
    path: str
    start_offset: int
    end_offset: int
    lines: int
    size: int
    facts: list[tuple[int, int, Fact]] = field(default_factory=list)  # (offset, line length, fact)
    rejects: list[Reject] = field(default_factory=list)
    tail_len: int = 0  # the bytes before end_offset the checkpoint keeps a hash of (see FileRow)
    tail_hash: bytes | None = None
    # Its model calls' figures replace those another copy of the same entries gave before (OpenClaw's
    # transcript store over its JSONL files, FORMATS.md §2), so which copy was read first does not matter.
    prevails: bool = False


@dataclass(slots=True)
class FileRow:
    id: int
    source: str
    root: str
    path: str
    fingerprint: bytes
    dev: int
    ino: int
    offset: int
    lines: int
    size: int
    status: str
    lost_bytes: int | None
    # The checkpoint's last bytes (their length and hash): the file still holds them there, or
    # it was rewritten since. 0: unknown, a line end is all there is to go by.
    tail_len: int = 0
    tail_hash: bytes | None = None


class Unreadable(NamedTuple):
    """A file or directory under a root that could not be read, by path (as the ledger names it)."""

    root: str
    kind: str  # file | directory
    reason: str  # as the operating system gave it


@dataclass(slots=True)
class ApplyResult:
    new_facts: int
    duplicate_facts: int
    rejects: int
    sessions: set[str] = field(default_factory=set)  # session instances the batch changed
    position: int = 0  # the ledger position this batch committed as
    interrupted: tuple[int, int, int] = (0, 0, 0)  # runs, tool calls, subagents a gateway restart cut off

    def add(self, other: ApplyResult) -> None:
        self.new_facts += other.new_facts
        self.duplicate_facts += other.duplicate_facts
        self.rejects += other.rejects
        self.sessions |= other.sessions
        self.interrupted = tuple(a + b for a, b in zip(self.interrupted, other.interrupted))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_INSERT_EVENT = (
    "INSERT OR IGNORE INTO events (id, file_id, offset, ts_ms, kind, agent_id, session_key, raw) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# Retention reduces events in time order from a cursor (retention._EVENTS_CURSOR). History indexed
# after a pass with a time before its cursor (a new agent or source, logs serve waited for) moves
# it back, in the transaction that indexes it, or no pass would ever reach that history.
_PRUNE_FROM = "UPDATE retention SET events_ms = ? WHERE id = 1 AND events_ms > ?"
_EXISTING_EVENTS = (
    "SELECT e.ts_ms, e.id FROM json_each(?) AS j "
    "JOIN events AS e ON e.ts_ms = j.value ->> 0 AND e.id = j.value ->> 1"
)
# The events of lines decoded again that tell a fact of theirs under another id: its older copies (see OpenBatches.rekey).
_OLDER_COPIES = """
DELETE FROM events WHERE (ts_ms, id) IN (
    SELECT e.ts_ms, e.id FROM json_each(?2) AS j
    JOIN events AS e ON e.ts_ms = j.value ->> 0 AND e.id <> j.value ->> 1
    WHERE e.file_id = ?1 AND e.offset = j.value ->> 2 AND e.kind = j.value ->> 3)
"""

_UPSERT_SESSION = """
INSERT INTO sessions (session_id, session_key, agent_id, source, first_ms, last_ms)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (session_id) DO UPDATE SET
    session_key = coalesce(sessions.session_key, excluded.session_key),
    agent_id    = coalesce(sessions.agent_id, excluded.agent_id),
    first_ms    = min(sessions.first_ms, excluded.first_ms),
    last_ms     = max(sessions.last_ms, excluded.last_ms)
"""
# ?4: the start is dated by its arrival (a Claude Code hook's), so one sent again late is no later than the
# session's first line; a log's own start is when it says.
_SESSION_STARTED = (
    "UPDATE sessions SET started_ms = iif(?4, min(?1, coalesce(first_ms, ?1)), ?1), "
    "resumed_from = coalesce(?2, resumed_from) WHERE session_id = ?3"
)
# The earliest end stands (as lifecycle's _WRITE_STATE keeps it): a reset or a subagent end read in an
# earlier batch may have ended the session before this line says.
_SESSION_ENDED = (
    "UPDATE sessions SET ended_ms = min(coalesce(ended_ms, ?1), ?1), message_count = ?2, duration_ms = ?3, "
    "status = 'ended' WHERE session_id = ?4"
)

_RUN_STARTED = """
INSERT INTO runs (run_id, session_key, session_id, agent_id, source, model, provider, status,
                  started_ms, is_heartbeat, is_followup, origin_channel)
VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    session_key    = coalesce(runs.session_key, excluded.session_key),
    session_id     = coalesce(runs.session_id, excluded.session_id),
    agent_id       = coalesce(runs.agent_id, excluded.agent_id),
    -- The start says best what the run asked for; a start that does not say keeps what its end said.
    model          = coalesce(excluded.model, runs.model),
    provider       = coalesce(excluded.provider, runs.provider),
    started_ms     = excluded.started_ms,
    is_heartbeat   = excluded.is_heartbeat,
    is_followup    = excluded.is_followup,
    origin_channel = coalesce(excluded.origin_channel, runs.origin_channel)
"""
# An end replaces the recorded one if it is surer (runs.end_rank): an end that reconcile settled on gives way
# to any, one implied by the next prompt to any reported one; a less sure end changes nothing. Two ends as sure
# say together how the run ended, whatever their order (Claude Code reports a turn's stop reason on its last
# answer and its duration on a turn_duration line): the later time, each figure either gives, and how it went
# (status, stop reason, error) as the one that says so has it.
_SURER = "excluded.end_rank > runs.end_rank"
_SAYS_OUTCOME = "excluded.stop_reason IS NOT NULL OR excluded.error IS NOT NULL"
_RUN_END_SETS = ",\n    ".join(
    [f"{c} = iif({_SURER} OR {_SAYS_OUTCOME}, excluded.{c}, runs.{c})" for c in ("status", "stop_reason", "error")]
    + [f"ended_ms = iif({_SURER}, excluded.ended_ms, max(excluded.ended_ms, runs.ended_ms))"]
    + [f"{c} = iif({_SURER}, excluded.{c}, coalesce(excluded.{c}, runs.{c}))"
       for c in ("duration_ms", "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
                 "cache_write_tokens", "total_tokens")])
_RUN_ENDED = f"""
INSERT INTO runs (run_id, session_key, session_id, agent_id, source, model, provider, status,
                  ended_ms, duration_ms, stop_reason, error, tool_call_count,
                  input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, total_tokens, end_rank)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    session_key = coalesce(runs.session_key, excluded.session_key),
    session_id  = coalesce(runs.session_id, excluded.session_id),
    agent_id    = coalesce(runs.agent_id, excluded.agent_id),
    model       = coalesce(runs.model, excluded.model),
    provider    = coalesce(runs.provider, excluded.provider),
    {_RUN_END_SETS},
    end_rank    = excluded.end_rank
WHERE excluded.end_rank >= runs.end_rank
"""
# A transcript's failed call is one attempt (FORMATS.md §2: one line per LLM call), and OpenClaw retries
# a refused one (a 429) within the same turn: an end in error that a successful call of the run came
# after did not end it. The run is open again, as the retry left it: a later end ends it, and reconcile
# interrupts it if its tools never answer.
_RETRIED_RUNS = """
UPDATE runs SET status = 'running', ended_ms = NULL, duration_ms = NULL, stop_reason = NULL, error = NULL,
                end_rank = 0
WHERE run_id IN (SELECT value FROM json_each(?1)) AND source = ?2 AND stop_reason = 'error'
  AND EXISTS (SELECT 1 FROM llm_calls AS c WHERE c.run_id = runs.run_id AND c.error IS NULL
                                             AND c.ts_ms > runs.ended_ms)
"""
# Reconcile's word on a run that never said it ended (end_rank 0) is a guess on the lines read by then: a
# Claude Code run it ended at its last answer, any run it cut off as silent past the grace (see reconcile.py).
# Lines of it read later (a slow tool's result, the next model call) make it what a read of all its lines is
# before reconcile: open, with the tool calls reconcile cut off still waiting, so that the next reconcile
# settles it on everything, in every order. A tool call's own end, or the run's, read in the same batch still
# wins. What a gateway restart cut off stays so (lifecycle.RESTART_CUT_RUN).
_SETTLED_RUNS = f"""
SELECT r.run_id FROM json_each(?) AS j JOIN runs AS r ON r.run_id = j.value
LEFT JOIN run_activity AS a ON a.run_id = r.run_id
WHERE r.status != 'running' AND r.end_rank = 0 AND NOT {RESTART_CUT_RUN}
"""
_CUT_TOOLS = """
SELECT run_id, tool_call_id FROM tool_calls
WHERE run_id IN (SELECT value FROM json_each(?)) AND status = 'interrupted' AND ended_ms IS NULL
"""
_REOPEN_SETTLED_RUNS = """
UPDATE runs SET status = 'running', ended_ms = NULL
WHERE run_id IN (SELECT value FROM json_each(?)) AND status != 'running' AND end_rank = 0
"""
_REOPEN_CUT_TOOLS = """
UPDATE tool_calls SET status = 'running'
WHERE (run_id, tool_call_id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))
  AND status = 'interrupted' AND ended_ms IS NULL
"""
# A subagent reconcile cut off whose child's session writes again was only slow, and the run that spawned it
# was waiting on it (reconcile._WAITING): both are open again, for the next reconcile to settle on all the
# lines, unless a gateway restart cut them off.
_CUT_SUBAGENTS = f"""
SELECT s.child_session_key, s.parent_run_id FROM json_each(?) AS j
JOIN subagents AS s ON s.child_session_key = j.value
LEFT JOIN runs AS r ON r.run_id = s.parent_run_id LEFT JOIN run_activity AS a ON a.run_id = s.parent_run_id
WHERE s.status = 'interrupted' AND NOT {RESTART_CUT_SUBAGENT}
"""
_REOPEN_CUT_SUBAGENTS = """
UPDATE subagents SET status = 'running'
WHERE child_session_key IN (SELECT value FROM json_each(?)) AND status = 'interrupted'
"""
_LLM_CALL = f"INSERT INTO llm_calls ({LLM_CALL_COLUMNS}) VALUES ({', '.join('?' * 27)})"
_DROP_KEYED_CALL = "DELETE FROM llm_calls WHERE call_key = ?"
# The stored calls of these events ([ts_ms, event id] each).
_EVENT_CALLS = (
    f"SELECT l.id, {LLM_CALL_COLUMNS} FROM json_each(?) AS j "
    "JOIN llm_calls AS l ON l.ts_ms = j.value ->> 0 AND l.event_id = j.value ->> 1"
)
_DROP_CALLS = "DELETE FROM llm_calls WHERE id IN (SELECT value FROM json_each(?))"
# Of these subagents, those whose row holds no word of the child's own (see rows.CHILD_WORDS), or that have none.
_UNTOLD_SPAWNS = """
SELECT value FROM json_each(?) WHERE NOT EXISTS (
    SELECT 1 FROM subagents WHERE child_session_key = value AND told_by_child != 0)
"""
_SESSION_KEY = "SELECT session_key, first_ms, last_ms FROM sessions WHERE session_id = ?"
_SESSIONS_OF_KEY = "SELECT session_id FROM sessions WHERE session_key = ?"
# A session's rows take its new key in place of the old; what has no session id of its own (its
# compactions and events) is known by its key and its time: a key has one session at a time.
_REKEY_SESSION = (
    "UPDATE sessions SET session_key = :key WHERE session_id = :session",
    "UPDATE runs SET session_key = :key WHERE session_id = :session AND session_key = :old",
    "UPDATE llm_calls SET session_key = :key WHERE run_id IN (SELECT run_id FROM runs WHERE session_id = :session) "
    "AND session_id = :session AND session_key = :old",
    "UPDATE llm_calls SET session_key = :key WHERE run_id IS NULL AND session_id = :session AND session_key = :old",
    "UPDATE tool_calls SET session_key = :key WHERE run_id IN (SELECT run_id FROM runs WHERE session_id = :session "
    "UNION SELECT a.run_id FROM run_activity AS a LEFT JOIN runs AS r USING (run_id) "
    "WHERE a.session_id = :session AND r.session_id IS NULL) AND session_key = :old",
    "UPDATE usage_snapshots SET session_key = :key WHERE session_id = :session AND session_key = :old",
    "UPDATE compactions SET session_key = :key WHERE session_key = :old AND ts_ms BETWEEN :first AND :last",
    "UPDATE events SET session_key = :key WHERE ts_ms BETWEEN :first AND :last AND session_key = :old",
    "UPDATE subagents SET parent_session_key = :key WHERE parent_session_key = :old "
    "AND parent_run_id IN (SELECT run_id FROM runs WHERE session_id = :session)",
)
_RUN_AT = RUN_BEGUN_BY.format("?1", "?2")
_LATEST_RUN = (
    "SELECT run_id FROM runs WHERE session_id = ? ORDER BY coalesce(started_ms, ended_ms) DESC LIMIT 1"
)
_USAGE_SNAPSHOT = """
INSERT INTO usage_snapshots (event_id, ts_ms, session_key, session_id, provider, model, input_tokens, output_tokens,
                             cache_read_tokens, cache_write_tokens, total_tokens, cost_pico, cost_source)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
# A call keeps the first session a line gave it (a side branch's moves it later: _MOVE_BRANCH_TOOLS in side_branches.py),
# and is on the branch its latest line names: a main-branch line takes back a call a side branch's replay of it was
# read first for (the replay's own lines are dropped, see _keyed_calls).
_TOOL_BRANCH = """
    session_id  = iif(excluded.branch IS NULL AND tool_calls.branch IS NOT NULL,
                      coalesce(excluded.session_id, tool_calls.session_id),
                      coalesce(tool_calls.session_id, excluded.session_id)),
    branch      = excluded.branch"""
# A start names the file or command a call was asked for (transcripts do); what its end says wins.
_TOOL_STARTED = f"""
INSERT INTO tool_calls (run_id, tool_call_id, tool_name, source, agent_id, session_key, status, started_ms,
                        file_path, exec_command, session_id, branch)
VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)
ON CONFLICT (run_id, tool_call_id) DO UPDATE SET
    tool_name    = coalesce(tool_calls.tool_name, excluded.tool_name),
    agent_id     = coalesce(tool_calls.agent_id, excluded.agent_id),
    session_key  = coalesce(tool_calls.session_key, excluded.session_key),
    started_ms   = excluded.started_ms,
    file_path    = coalesce(tool_calls.file_path, excluded.file_path),
    exec_command = coalesce(tool_calls.exec_command, excluded.exec_command),{_TOOL_BRANCH}
"""
# What an end sets on the row of its call, alone or with its start (_TOOL_STARTED_ENDED).
_END_SETS = f"""
    tool_name    = coalesce(tool_calls.tool_name, excluded.tool_name),
    agent_id     = coalesce(tool_calls.agent_id, excluded.agent_id),
    session_key  = coalesce(tool_calls.session_key, excluded.session_key),
    status       = excluded.status,
    ended_ms     = excluded.ended_ms,
    duration_ms  = coalesce(excluded.duration_ms, tool_calls.duration_ms),
    error        = excluded.error,
    file_path    = coalesce(excluded.file_path, tool_calls.file_path),
    exec_command = coalesce(excluded.exec_command, tool_calls.exec_command),
    exit_code    = excluded.exit_code,{_TOOL_BRANCH}
"""
_TOOL_ENDED = f"""
INSERT INTO tool_calls (run_id, tool_call_id, tool_name, source, agent_id, session_key, status,
                        ended_ms, duration_ms, error, file_path, exec_command, exit_code, session_id, branch)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, tool_call_id) DO UPDATE SET{_END_SETS}"""
# A call whose start and end are both in the batch: one statement doing what _TOOL_STARTED and
# then _TOOL_ENDED would (see _pair_tools), which halves the probes of a table keyed at random.
_TOOL_STARTED_ENDED = f"""
INSERT INTO tool_calls (run_id, tool_call_id, tool_name, source, agent_id, session_key, status, started_ms,
                        ended_ms, duration_ms, error, file_path, exec_command, exit_code, session_id, branch)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, tool_call_id) DO UPDATE SET started_ms = excluded.started_ms,{_END_SETS}"""
# Rows a hook made carry this source until a transcript line of the same call takes them over.
HOOK_ROW_SOURCE = "claude-code-hook"
_TOOL_OBSERVED = f"""
INSERT INTO tool_calls (run_id, tool_call_id, tool_name, source, agent_id, session_key, status,
                        started_ms, ended_ms, duration_ms, error, file_path, exec_command, session_id)
VALUES (?, ?, ?, '{HOOK_ROW_SOURCE}', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
{FILL_TOOL}"""
# The row of a call, wherever the session's runs put it (or under no run). A Task subagent's session has no
# runs: the transcript writes its calls in its parent's, under the parent's key, on the subagent's branch.
_TOOL_ROW_OF_SESSION = f"""
SELECT run_id FROM tool_calls WHERE tool_call_id = ?2 AND branch = ?1 AND source = '{CLAUDE_CODE}'
UNION ALL
SELECT run_id FROM tool_calls
WHERE tool_call_id = ?2 AND session_key = ?3
  AND run_id IN (SELECT run_id FROM runs WHERE session_id = ?1 UNION ALL SELECT '')
"""
_HOOK_ROWS = f"""
SELECT tc.run_id, tc.tool_call_id, tc.session_key FROM json_each(?) AS j
JOIN tool_calls AS tc ON tc.tool_call_id = j.value AND tc.source = '{HOOK_ROW_SOURCE}'
"""
# The rows of these calls (by id) that may be one with a line of theirs, wherever the lines put them (_place tells
# which are one call's): Claude Code's, any (a hook may have ended one before the transcript's end line is read), and
# the others' that lack their start or their end.
_CALL_COLUMNS = ("tc.tool_call_id, tc.run_id, tc.started_ms IS NOT NULL, tc.source, tc.branch, tc.session_id, "
                 "tc.session_key")
_CALL_ROWS = f"""
SELECT {_CALL_COLUMNS} FROM json_each(?1) AS j
JOIN tool_calls AS tc ON tc.tool_call_id = j.value AND tc.source = '{CLAUDE_CODE}'
UNION
SELECT {_CALL_COLUMNS} FROM json_each(?1) AS j
JOIN tool_calls AS tc ON tc.tool_call_id = j.value AND (tc.started_ms IS NULL OR tc.ended_ms IS NULL)
"""
_CLAIM_HOOK_ROW = "UPDATE tool_calls SET source = ? WHERE run_id = ? AND tool_call_id = ?"
_HOOK_EVENT = "INSERT OR IGNORE INTO hook_events (id, ts_ms, session_id, event) VALUES (?, ?, ?, ?)"
HOOK_FILE_ID = 0  # events.file_id of what arrived through the hook endpoint rather than a file
HOOK_LOG = "<claude-code hooks>/events"  # the "log" lifecycle keeps a clock for; hooks carry no counter

_SUBAGENT_SPAWNED = spawn_upsert("VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)")
# Of two ends, the surer one's fields win and the other's fill its gaps, whatever their order. The Task's
# result names the Task whose spawn the row holds (spawn_key): the surest word on it, kept whoever else spoke.
# An end told launched_only makes no row: by the time it is written, the spawn it ends has its row under the child's
# key (the end's spawn key renamed to it first, see side_branches._rename_subagents).
_SUBAGENT_ENDED = """
INSERT INTO subagents (child_session_key, source, status, ended_ms, duration_ms, outcome, reason, model, end_rank,
                       spawn_key)
SELECT ?1, ?2, 'ended', ?3, ?4, ?5, ?6, ?7, ?8, ?9
WHERE NOT ?10 OR EXISTS (SELECT 1 FROM subagents WHERE child_session_key = ?1)
ON CONFLICT (child_session_key) DO UPDATE SET
    status      = 'ended',
    spawn_key   = coalesce(excluded.spawn_key, subagents.spawn_key),
    ended_ms    = iif(excluded.end_rank >= subagents.end_rank, coalesce(excluded.ended_ms, subagents.ended_ms),
                      coalesce(subagents.ended_ms, excluded.ended_ms)),
    duration_ms = iif(excluded.end_rank >= subagents.end_rank, coalesce(excluded.duration_ms, subagents.duration_ms),
                      coalesce(subagents.duration_ms, excluded.duration_ms)),
    outcome     = iif(excluded.end_rank >= subagents.end_rank, coalesce(excluded.outcome, subagents.outcome),
                      coalesce(subagents.outcome, excluded.outcome)),
    reason      = iif(excluded.end_rank >= subagents.end_rank, coalesce(excluded.reason, subagents.reason),
                      coalesce(subagents.reason, excluded.reason)),
    model       = iif(excluded.end_rank >= subagents.end_rank, coalesce(excluded.model, subagents.model),
                      coalesce(subagents.model, excluded.model)),
    end_rank    = max(excluded.end_rank, subagents.end_rank)
"""
# A background Task's result holds the Task's spawn on the child's row, as an end's does, and touches nothing else:
# an end read before it (the child's SubagentStop) stands.
_SUBAGENT_LAUNCHED = """
INSERT INTO subagents (child_session_key, source, status, spawn_key) VALUES (?, ?, 'running', ?)
ON CONFLICT (child_session_key) DO UPDATE SET spawn_key = coalesce(excluded.spawn_key, subagents.spawn_key)
"""
_COMPACTION = """
INSERT INTO compactions (event_id, ts_ms, phase, source, agent_id, session_key, message_count,
                                   compacting_count, token_count, compacted_count)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_MESSAGE = """
INSERT INTO messages (event_id, ts_ms, direction, source, session_key, channel, peer, preview, success, error)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
# A line of a file, or of a copy of it (the same first line), already rejected is not rejected again:
# the same place, length and first bytes (or first bytes retention emptied) are the same line, as the
# same id is the same event. A copy's bad lines are then counted as a fresh read of the files counts them.
# A first line that is itself rejected names no event: files that begin with the same bad line may differ.
_REJECT = """
INSERT OR IGNORE INTO rejects (ts_ms, file_id, path, offset, length, reason, head)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7
WHERE NOT EXISTS (
    SELECT 1 FROM files AS f
    JOIN files AS copy ON copy.source = f.source AND copy.fingerprint = f.fingerprint
    JOIN rejects AS r ON r.file_id = copy.id AND r.offset = ?4
    WHERE f.id = ?2 AND r.length = ?5 AND r.head IN (?7, x'')
      AND NOT EXISTS (SELECT 1 FROM rejects AS first WHERE first.file_id = copy.id AND first.offset = 0)
)
"""
_GATE_DECISION = """
INSERT INTO gate_decisions (ts_ms, gate, scope, metric, decision, session_key, agent_id, tool, value, limit_value,
                            reason, asked_via)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_GATE_COUNT = """
INSERT INTO gate_decision_counts (gate, decision, count) VALUES (?, ?, ?)
ON CONFLICT (gate, decision) DO UPDATE SET count = count + excluded.count
"""
_CHECKPOINT = """
UPDATE files SET offset = ?, lines = lines + ?, size = max(size, ?), path = ?, updated_ms = ?, tail_len = ?,
                 tail_hash = ?
WHERE id = ? AND offset = ?
"""


def _llm_call(f: LlmCall) -> tuple:
    k = f.tokens
    # A line naming no agent is its folder's until its run's or session's is known (see agents.py).
    return (f.event_id, f.ts_ms, f.source, f.agent_id or f.agent_folder, f.session_key, f.session_id, f.run_id,
            f.provider, f.model, f.call_index, k.input, k.output, k.cache_read, k.cache_write, k.total, f.cost_pico,
            f.cost_source if f.cost_pico is not None else None, f.duration_ms, f.error, f.call_key, int(f.sidechain),
            k.cache_write_1h, f.context_tokens, f.branch, f.speed, f.web_searches,
            f.inference_geo)


def _rank(row: tuple) -> tuple:
    """Which of two rows of one call to keep: the main branch's, then the most output, then the most tokens."""
    return (not row[20], row[11], row[14])


def _rivals(a: tuple, b: tuple, response: str) -> bool:
    """Whether only one of two llm_calls rows of one response may stay.

    A side branch's row and a main branch's are a replay and the call it replays. On one branch,
    rows of two requests are two calls (a gateway reused the response id); a row keyed by the
    response alone (no request id was written, or it was stored before request ids counted) may
    be any request's, so it is the same call as each."""
    if a[20] != b[20]:
        return True
    return a[19] == b[19] or response in (a[19], b[19])


def _prevailing_calls(conn: apsw.Connection, copies: list[LlmCall]) -> tuple[list[tuple], list[tuple]]:
    """The llm_calls rows to insert for calls indexed before whose prevailing copy (see Batch.prevails) says
    otherwise, and the stored rows they replace, which are dropped. Whose call it is (its session, key and
    run) stays as the ledger holds it; what the call was and cost is the copy's."""
    told = {(f.ts_ms, f.event_id): _llm_call(f) for f in copies}
    taken, dropped, ids = [], [], []
    for row_id, *stored in conn.execute(_EVENT_CALLS, (orjson.dumps(list(told)).decode(),)).fetchall():
        row = (*stored[:7], *told[(stored[1], stored[0])][7:])
        if row != tuple(stored):
            ids.append(row_id)
            taken.append(row)
            dropped.append(tuple(stored))
    if ids:
        conn.execute(_DROP_CALLS, (orjson.dumps(ids).decode(),))
    return taken, dropped


def _tool_started(f: ToolStarted) -> tuple:
    return (f.run_id or "", f.tool_call_id, f.tool_name, f.source, f.agent_id, f.session_key, f.ts_ms, f.file_path,
            f.exec_command, f.session_id, f.branch)


def _tool_ended(f: ToolEnded) -> tuple:
    return (f.run_id or "", f.tool_call_id, f.tool_name, f.source, f.agent_id, f.session_key,
            "error" if f.is_error else "ok", f.ts_ms, f.duration_ms, f.error, f.file_path, f.exec_command,
            f.exit_code, f.session_id, f.branch)


def _first(a, b):
    return a if a is not None else b


def _pair_tools(rows: dict[str, list[tuple]], branched: set[str]) -> None:
    """Fold each call with exactly one start and one end in the batch into a _TOOL_STARTED_ENDED row.

    The statements run starts first, then ends, whatever the order of the lines, so the folded row
    takes what a start and then an end would leave: the first non-null of name, agent, session key
    and session in that order, the start's time and the end's outcome, and their branch. A start and
    an end on different branches are left as they are, and so is a start without a session of a call
    whose stored row is on a side branch (its id in ``branched``): a main-branch line taking a call
    back from a branch sets the session to its own, which one statement could not do as two would."""
    starts, ends = rows.get(_TOOL_STARTED), rows.get(_TOOL_ENDED)
    if not starts or not ends:
        return
    start_of: dict[tuple, tuple | None] = {}
    for row in starts:
        key = (row[0], row[1])
        start_of[key] = None if key in start_of else row  # None: more than one start, left as they are
    end_of: dict[tuple, tuple | None] = {}
    for row in ends:
        key = (row[0], row[1])
        if key in start_of:
            end_of[key] = None if key in end_of else row
    pairs = {key: (start, end) for key, end in end_of.items()
             if end is not None and (start := start_of[key]) is not None and start[10] == end[14]
             and (start[9] is not None or key[1] not in branched)}
    if not pairs:
        return
    rows[_TOOL_STARTED] = [row for row in starts if (row[0], row[1]) not in pairs]
    rows[_TOOL_ENDED] = [row for row in ends if (row[0], row[1]) not in pairs]
    rows[_TOOL_STARTED_ENDED] = [
        (e[0], e[1], _first(s[2], e[2]), s[3], _first(s[4], e[4]), _first(s[5], e[5]), e[6], s[6], e[7], e[8], e[9],
         _first(e[10], s[7]), _first(e[11], s[8]), e[12], _first(s[9], e[13]), e[14])
        for s, e in pairs.values()
    ]


def _place(source: str, call_id: str, branch: str | None, session_id: str | None, session_key: str | None) -> tuple:
    """What makes tool lines, and rows, one call's: its id in its source, on its side branch if it is on one (a
    branch replays its session's calls under their ids), else in its session, by id where the line names one
    (telemetry's tool events name only the key)."""
    if branch is not None:
        return source, call_id, branch
    if session_id is not None:
        return source, call_id, None, session_id
    return source, call_id, None, None, session_key


def _ends_with_their_starts(conn: apsw.Connection, facts: list[Fact]) -> None:
    """A tool call is one row, in the run of its start. Its end may name another run, or none: a transcript's
    result names the turn of its own time, a later one when the user's next prompt came while the tool ran (or,
    on a side branch, while a subagent worked in the background), and a telemetry tool.end may lack its runId.
    It takes its start's run, the batch's start's or the stored one's, or the call would be two rows; a start
    under no run leaves the end its own, where _rows_told moves the start's row. Only the ends whose start is
    not in the batch are looked up."""
    starts: dict[tuple, str | None] = {}
    ends: list[tuple[tuple, ToolEnded]] = []
    for f in facts:
        t = type(f)
        if t is ToolStarted:
            starts[_place(f.source, f.tool_call_id, f.branch, f.session_id, f.session_key)] = f.run_id
        elif t is ToolEnded:
            ends.append((_place(f.source, f.tool_call_id, f.branch, f.session_id, f.session_key), f))
    asked = {place for place, _ in ends if place not in starts}
    if asked:
        ids = orjson.dumps(sorted({place[1] for place in asked})).decode()
        for call_id, run_id, started, source, *where in conn.execute(_CALL_ROWS, (ids,)):
            place = _place(source, call_id, *where)
            if started and place in asked and starts.get(place) is None:  # of two starts, one with a run
                starts[place] = run_id or None
    for place, f in ends:
        f.run_id = starts.get(place) or f.run_id


def _tool_observed(f: ToolObserved) -> tuple:
    ended = f.ts_ms if f.status != "running" else None
    return (f.run_id or "", f.tool_call_id, f.tool_name, f.agent_id, f.session_key, f.status,
            f.ts_ms if ended is None else None, ended, f.duration_ms, f.error, f.file_path, f.exec_command,
            f.session_id)


def _run_started(f: RunStarted) -> tuple | None:
    if not f.run_id:
        return None
    return (f.run_id, f.session_key, f.session_id, f.agent_id, f.source, f.model, f.provider, f.ts_ms,
            int(f.is_heartbeat), int(f.is_followup), f.origin_channel)


def _run_ended(f: RunEnded) -> tuple | None:
    if not f.run_id:
        return None
    u = f.usage or Tokens()
    status = "error" if f.error else "interrupted" if f.ended_by == "user" else "ok"
    return (f.run_id, f.session_key, f.session_id, f.agent_id, f.source, f.model, f.provider,
            status, f.ts_ms, f.duration_ms, f.stop_reason, f.error, f.tool_call_count,
            u.input, u.output, u.cache_read, u.cache_write, u.total, _END_RANK[f.ended_by])


_END_RANK = {name: rank for rank, name in enumerate(ENDED_BY, start=1)}


def _usage_snapshot(f: UsageSnapshot) -> tuple:
    t = f.tokens
    return (f.event_id, f.ts_ms, f.session_key, f.session_id, f.provider, f.model, t.input, t.output, t.cache_read,
            t.cache_write, t.total, f.cost_pico, f.cost_source)


def _session_started(f: SessionStarted) -> tuple | None:
    # A resumed session began when it first did: taking it up again moves no start.
    if not f.session_id or f.continues:
        return None
    return (f.ts_ms, f.resumed_from, f.session_id, f.source == CLAUDE_CODE)


def _session_ended(f: SessionEnded) -> tuple | None:
    return (f.ts_ms, f.message_count, f.duration_ms, f.session_id) if f.session_id else None


def _subagent_spawned(f: SubagentSpawned) -> tuple:
    return (f.child_session_key, f.session_key, f.run_id, f.source, f.child_agent_id, f.label, f.mode, f.ts_ms,
            _told_by_child(f), f.branch)


def _told_by_child(f: SubagentSpawned) -> int:
    """The told_by_child bits of the fields a child's own spawn line gives; a parent's line gives none."""
    if not f.by_child:
        return 0
    return sum(bit for column, bit in CHILD_WORDS if getattr(f, column) is not None)


def _subagent_ended(f: SubagentEnded) -> tuple:
    # subagent.stop is the requester's word that the child is done; every other end is the child's own.
    rank = 1 if f.kind == "subagent.stop" else 2
    return (f.child_session_key, f.source, f.ended_ms or f.ts_ms, f.duration_ms, f.outcome, f.reason, f.model, rank,
            f.spawn_key, f.launched_only)


def _subagent_launched(f: SubagentLaunched) -> tuple:
    return (f.child_session_key, f.source, f.spawn_key)


def _compaction(f: Compaction) -> tuple:
    # A compaction names no run nor session id: its line's agent, else its folder's, is all there is to go by.
    return (f.event_id, f.ts_ms, f.phase, f.source, f.agent_id or f.agent_folder, f.session_key, f.message_count,
            f.compacting_count, f.token_count, f.compacted_count)


def _message(f: Message) -> tuple:
    return (f.event_id, f.ts_ms, f.direction, f.source, f.session_key, f.channel, f.peer, f.preview,
            None if f.success is None else int(f.success), f.error)


# Fact type → (statement, row builder). Facts of other types (markers, raw events) only
# need their events row. Statements run in this order: session rows must exist before the
# session.start/end updates touch them.
_STATEMENTS: dict[type, tuple[str, object]] = {
    LlmCall: (_LLM_CALL, _llm_call),
    UsageSnapshot: (_USAGE_SNAPSHOT, _usage_snapshot),
    RunStarted: (_RUN_STARTED, _run_started),
    RunEnded: (_RUN_ENDED, _run_ended),
    ToolStarted: (_TOOL_STARTED, _tool_started),
    ToolEnded: (_TOOL_ENDED, _tool_ended),
    ToolObserved: (_TOOL_OBSERVED, _tool_observed),
    SubagentSpawned: (_SUBAGENT_SPAWNED, _subagent_spawned),
    SubagentEnded: (_SUBAGENT_ENDED, _subagent_ended),
    SubagentLaunched: (_SUBAGENT_LAUNCHED, _subagent_launched),
    Compaction: (_COMPACTION, _compaction),
    Message: (_MESSAGE, _message),
    SessionStarted: (_SESSION_STARTED, _session_started),
    SessionEnded: (_SESSION_ENDED, _session_ended),
}
_ORDER = tuple(sql for sql, _ in _STATEMENTS.values())
_ORDER = _ORDER[:_ORDER.index(_TOOL_ENDED)] + (_TOOL_STARTED_ENDED,) + _ORDER[_ORDER.index(_TOOL_ENDED):]
# Before them, what lines of side branches no event has named yet leave for when one does (see side_branches.py).
_ORDER = (BRANCH_SPAN, BRANCH_EVENT, *_ORDER)


@dataclass(slots=True)
class _Prepared:
    """Everything a batch of new facts writes, built in one pass over them."""

    events: list[tuple] = field(default_factory=list)
    rows: dict[str, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    sessions: dict[str, list] = field(default_factory=dict)  # id → [id, key, agent, source, first, last]
    # run id → [first, last, session time, session] of this batch's facts (see rows.RUN_ACTIVITY)
    runs: dict[str, list] = field(default_factory=dict)
    tool_keys: set[tuple[str, str]] = field(default_factory=set)  # tool calls this batch upserts
    responses: dict[str, str] = field(default_factory=dict)  # call key → LlmCall.message_key
    side_tools: dict[tuple[str, str], str] = field(default_factory=dict)  # side-branch tool starts' responses
    side_spawns: dict[int, str] = field(default_factory=dict)  # side-branch spawns' responses, by id() of their row
    subagent_keys: set[str] = field(default_factory=set)  # subagents this batch upserts


def _prepare(parts: list[Part]) -> _Prepared:
    out = _Prepared()
    events, rows, sessions, runs = out.events, out.rows, out.sessions, out.runs
    statements = _STATEMENTS
    unnamed: dict[str, list[int]] = {}  # branch no event names → [first, last] of its calls (BRANCH_SPAN)
    for file_id, _, items in parts:
        for off, _, f in items:
            t = type(f)
            ts = f.ts_ms
            events.append((f.event_id, file_id, off, ts, f.kind, f.agent_id, f.session_key,
                           f.raw if t is RawEvent else None))
            spec = statements.get(t)
            if spec is not None:
                row = spec[1](f)
                if row is not None:
                    rows[spec[0]].append(row)
                    if t is ToolStarted or t is ToolEnded or t is ToolObserved:
                        out.tool_keys.add((row[0], row[1]))
                        if t is ToolStarted and f.branch is not None and f.message_key is not None:
                            out.side_tools[(row[0], row[1])] = f.message_key
                    elif t is LlmCall:
                        if f.call_key is not None:
                            out.responses[f.call_key] = f.message_key or f.call_key
                        if f.branch is not None and f.session_id != f.branch:
                            span = unnamed.setdefault(f.branch, [ts, ts])
                            span[0], span[1] = min(span[0], ts), max(span[1], ts)
                            rows[BRANCH_EVENT].append((f.branch, ts, f.event_id))
                    elif t is SubagentSpawned or t is SubagentEnded or t is SubagentLaunched:
                        out.subagent_keys.add(row[0])
                        if t is SubagentSpawned and f.branch is not None:
                            if f.message_key is not None:
                                out.side_spawns[id(row)] = f.message_key
                            if f.session_id != f.branch:
                                rows[BRANCH_EVENT].append((f.branch, ts, f.event_id))
            sid = f.session_id
            if sid is not None:
                agg = sessions.get(sid)
                if agg is None:
                    sessions[sid] = [sid, f.session_key, f.agent_id, f.source, ts, ts]
                else:
                    if agg[1] is None:
                        agg[1] = f.session_key
                    if agg[2] is None:
                        agg[2] = f.agent_id
                    if ts < agg[4]:
                        agg[4] = ts
                    elif ts > agg[5]:
                        agg[5] = ts
            rid = f.run_id
            if rid is not None:
                span = runs.get(rid)
                if span is None:
                    runs[rid] = [ts, ts, ts if sid is not None else None, sid]
                    continue
                if ts < span[0]:
                    span[0] = ts
                elif ts > span[1]:
                    span[1] = ts
                # The earliest fact naming a session, of two at once the lesser id (no tuples: once a fact).
                if sid is not None and (span[3] is None or ts < span[2] or (ts == span[2] and sid < span[3])):
                    span[2], span[3] = ts, sid
    if unnamed:
        rows[BRANCH_SPAN] = [(branch, *span) for branch, span in unnamed.items()]
    return out


def _reopen_retried(conn: apsw.Connection, facts: list[Fact]) -> None:
    """Open again the transcript runs whose end in error a successful call of theirs came after (see
    _RETRIED_RUNS): the batch's own ends, and the stored ends of runs the batch has calls of. Their runs
    are the batch's, so the rollups follow."""
    runs = {f.run_id for f in facts if f.source == OC_TRANSCRIPT and f.run_id is not None
            and (type(f) is LlmCall or type(f) is RunEnded)}
    if runs:
        conn.execute(_RETRIED_RUNS, (orjson.dumps(sorted(runs)).decode(), OC_TRANSCRIPT))


def _settled(conn: apsw.Connection, runs: Iterable[str], facts: list[Fact]
             ) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """What reconcile settled that these lines show going on: the subagents whose child's session they are
    of, the runs they or those subagents' spawns are of, those runs' tool calls it cut off (see
    _SETTLED_RUNS, _CUT_SUBAGENTS)."""
    keys = {f.session_key for f in facts if f.session_key is not None}
    subagents = conn.execute(_CUT_SUBAGENTS, (orjson.dumps(sorted(keys)).decode(),)).fetchall() if keys else []
    wanted = set(runs) | {run_id for _, run_id in subagents if run_id is not None}
    settled = [r for (r,) in conn.execute(_SETTLED_RUNS, (orjson.dumps(sorted(wanted)).decode(),))] if wanted else []
    tools = conn.execute(_CUT_TOOLS, (orjson.dumps(settled).decode(),)).fetchall() if settled else []
    return settled, tools, [key for key, _ in subagents]


def _reopen_settled(conn: apsw.Connection, runs: list[str], tools: list[tuple[str, str]],
                    subagents: list[str]) -> None:
    """Open again what ``_settled`` found, but what the batch's own lines ended. It is the batch's, so
    the rollups follow."""
    if tools:
        conn.execute(_REOPEN_CUT_TOOLS, (orjson.dumps(tools).decode(),))
    if runs:
        conn.execute(_REOPEN_SETTLED_RUNS, (orjson.dumps(runs).decode(),))
    if subagents:
        conn.execute(_REOPEN_CUT_SUBAGENTS, (orjson.dumps(subagents).decode(),))


def _rekey_session(conn: apsw.Connection, session_id: str, key: str) -> set[str]:
    """The session, and every row that names it by key, under ``key``; the rollups and the tables
    derived per key follow. Returns the sessions whose views changed: this one, and the old key's."""
    rows = conn.execute(_SESSION_KEY, (session_id,)).fetchall()
    if not rows or rows[0][0] in (None, key):
        return set()
    old, first_ms, last_ms = rows[0]
    touched = {session_id} | {sid for (sid,) in conn.execute(_SESSIONS_OF_KEY, (old,))}
    tracker = rollups.Tracker(conn, set(), set(), {session_id}, set())
    tracker.before()
    for sql in _REKEY_SESSION:
        conn.execute(sql, {"key": key, "session": session_id, "old": old, "first": first_ms, "last": last_ms})
    # The old key first: an instance is one row of session_ids, which the new key's rebuild adds again.
    for table in ("session_ids", "compaction_pairs"):
        rebuild_keys(conn, table, {old: None})
        rebuild_keys(conn, table, {key: None})
    tracker.after([], [])
    return touched | tracker.touched


class OpenBatches:
    """A transaction batches of several files go into, until ``commit``.

    One commit for a whole live pass instead of one per file: the facts and checkpoints of
    every batch commit together or not at all, under one ledger position, and each batch keeps
    its compare-and-set checkpoint. A value SQLite refuses still costs only its line; a
    checkpoint that moved under us refuses them all. Batches given to ``add`` wait and are
    written together, in one round of statements (a pass over 200 files would otherwise pay
    each statement 200 times); ``apply`` writes the waiting ones and then its own at once,
    for a decoder that reads the ledger (a subagent's lines join the run its session's file
    started, perhaps earlier in the same pass). Whatever fails before the commit goes to
    ``abandon``."""

    def __init__(self, writer: LedgerWriter):
        self.writer = writer
        self.result = ApplyResult(0, 0, 0)
        self.ts = now_ms()
        self.waiting: list[Batch] = []
        writer.conn.execute("BEGIN IMMEDIATE")

    def add(self, batch: Batch) -> None:
        self.waiting.append(batch)

    def apply(self, batch: Batch) -> None:
        self.add(batch)
        self._write()

    def _write(self) -> None:
        if self.waiting:
            batches, self.waiting = self.waiting, []
            self.result.add(self.writer._apply_batches(self.writer.conn, batches, self.ts))

    def rekey(self, session_id: str, session_key: str, rederived: Iterable[Batch] = ()) -> None:
        """Give a session another key (see _rekey_session; the one it has changes nothing but what
        ``rederived`` adds), in this transaction, with ``rederived``: batches of
        the facts that lines the files' checkpoints are already past yield under the new key (see
        Pipeline._rederived). Each starts and ends at its file's checkpoint, which it checks and leaves
        where it is (``lines`` 0); every fact indexed before is a duplicate, counted as nothing, so only
        what the new key yields that the old one did not is new. An agentledger from before transcript entries
        were known by their id made a line's ids from its bytes: an event of a fact's kind at the fact's line
        under another id (the spawn a subagent's header told it) is the fact's older copy, and goes as the
        fact is applied again. Both or neither: whatever ``rederived`` raises (lines that cannot be read again
        now) leaves the key and the ledger as they were."""
        self._write()
        saved = replace(self.result, sessions=set(self.result.sessions))
        conn = self.writer.conn
        try:
            with conn:  # a savepoint
                touched = _rekey_session(conn, session_id, session_key)
                for batch in rederived:
                    assert batch.start_offset == batch.end_offset and batch.lines == 0 and not batch.rejects
                    result = self.writer._apply_batches(conn, [batch], self.ts)
                    result.duplicate_facts = 0
                    told = [(f.ts_ms, f.event_id, offset, f.kind) for offset, _, f in batch.facts]
                    conn.execute(_OLDER_COPIES, (batch.file_id, orjson.dumps(told).decode()))
                    self.result.add(result)
        except BaseException:
            self.result = saved
            raise
        if touched:  # a key unchanged, or a session not held, leaves every settled claim as it was
            self.writer.rekeys += 1
        self.result.sessions |= touched

    def commit(self) -> ApplyResult:
        """Commit; the result sums every batch's, with the union of the sessions they changed."""
        self._write()
        conn, result = self.writer.conn, self.result
        result.position = rollups.advance_position(conn, result.sessions)
        fault("before_commit")
        conn.execute("COMMIT")
        self.writer.interrupted = [a + b for a, b in zip(self.writer.interrupted, result.interrupted)]
        self.writer.bound_wal()
        return result

    def abandon(self, exc: BaseException) -> None:
        self.writer.roll_back(exc)


class LedgerWriter:
    """Owns the write connection. Not thread-safe: one writer per ledger, by design."""

    def __init__(self, conn: apsw.Connection, idle_s: float = DEFAULT_IDLE_S, wal_limit: int = WAL_LIMIT_BYTES,
                 background_checkpoints: bool = False):
        """``idle_s``: a log silent longer than this is taken as its gateway having restarted;
        ``wal_limit``: the WAL size past which a commit is followed by a restart of the WAL;
        ``background_checkpoints``: checkpoint on a thread of its own (see checkpointer.py) until ``close``."""
        self.conn = conn
        self.checkpointer = Checkpointer(conn) if background_checkpoints else None
        self.idle_ms = int(idle_s * 1000)
        self.interrupted = [0, 0, 0]  # committed so far: runs, tool calls, subagents cut off by restarts
        self.rekeys = 0  # sessions given another key so far (committed or not): what a key was checked against
        # session → the archives' ends reconcile folded into it and committed: an archive's name never changes,
        # so a session whose archives are as they were has nothing new to fold (see reconcile._archives)
        self.archive_ends: dict[str, tuple] = {}
        self.wal_limit = wal_limit
        self._wal = f"{conn.filename}-wal"
        self._wal_retry_at = 0.0
        self._wal_failures = 0  # restarts in a row that found a reader still on the WAL

    def close(self) -> None:
        """Stop what runs beside the writer; the connection stays open, its owner closes it."""
        if self.checkpointer is not None:
            self.checkpointer.close()

    def bound_wal(self) -> None:
        """Keep the WAL near ``wal_limit`` however busy the readers (see db.WAL_LIMIT_BYTES)."""
        if time.monotonic() < self._wal_retry_at:
            return
        try:
            size = os.stat(self._wal).st_size
        except FileNotFoundError:
            return
        if size <= self.wal_limit:
            return
        wait_ms = WAL_RESTART_WAITS_MS[min(self._wal_failures, len(WAL_RESTART_WAITS_MS) - 1)]
        if restart_wal(self.conn, wait_ms):
            self._wal_failures = 0
        else:
            self._wal_failures += 1
            self._wal_retry_at = time.monotonic() + max(WAL_RETRY_MIN_S, WAL_RETRY_FACTOR * wait_ms / 1000)

    @contextmanager
    def transaction(self):
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException as exc:
            self.roll_back(exc)
            raise
        self.conn.execute("COMMIT")

    def roll_back(self, exc: BaseException) -> None:
        """End the open transaction after ``exc``, which the caller raises on."""
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
            return
        # SQLite rolled the transaction back itself (a full disk, an I/O error), so releasing the
        # savepoints on the way out failed too: raise the error that says what happened.
        cause = exc
        while cause is not None and not isinstance(cause, _ROLLED_BACK):
            cause = cause.__context__
        if cause is not None:
            raise cause from None

    # -- batches -----------------------------------------------------------------
    def apply(self, batch: Batch) -> ApplyResult:
        return self.apply_many([batch])

    def apply_many(self, batches: list[Batch]) -> ApplyResult:
        """Several batches (of several files) in one transaction, written together; see ``OpenBatches``."""
        opened = self.begin()
        try:
            for batch in batches:
                opened.add(batch)
            return opened.commit()
        except BaseException as exc:
            opened.abandon(exc)
            raise

    def begin(self) -> OpenBatches:
        return OpenBatches(self)

    def _apply_batches(self, conn: apsw.Connection, batches: list[Batch], ts: int) -> ApplyResult:
        """The batches' facts in one round of statements, then each file's rejects and checkpoint."""
        refused: list[tuple[Batch, Reject]] = []
        try:
            with conn:  # a savepoint: a value SQLite refuses must not cost the batches
                result = self._apply_facts(conn, [(b.file_id, b.path, b.facts) for b in batches],
                                           {b.file_id for b in batches if b.prevails})
        except _DATA_ERRORS:
            if len(batches) > 1:  # find the file that holds it
                result = ApplyResult(0, 0, 0)
                for batch in batches:
                    result.add(self._apply_batches(conn, [batch], ts))
                return result
            result, one_by_one = self._apply_one_by_one(conn, batches[0])
            refused = [(batches[0], r) for r in one_by_one]
        rejects = [(b, r) for b in batches for r in b.rejects] + refused
        before = conn.total_changes()
        if rejects:
            conn.executemany(_REJECT, [
                (ts, b.file_id, b.path, r.offset, r.length, r.reason, r.head) for b, r in rejects
            ])
        # A file read again from its start (restored in place), or a copy of one, meets bad lines already
        # rejected: they were counted (see _REJECT).
        result.rejects = conn.total_changes() - before
        before = conn.total_changes()
        conn.executemany(_CHECKPOINT, [
            (b.end_offset, b.lines, b.size, b.path, ts, b.tail_len, b.tail_hash, b.file_id, b.start_offset)
            for b in batches
        ])
        if conn.total_changes() - before != len(batches):
            moved = [b for b in batches
                     if conn.execute("SELECT offset FROM files WHERE id = ?", (b.file_id,)).fetchall() != [(b.end_offset,)]]
            raise CheckpointConflict("; ".join(f"file {b.file_id} ({b.path}) is not at offset {b.start_offset}"
                                               for b in moved or batches))
        return result

    def _apply_one_by_one(self, conn: apsw.Connection, batch: Batch) -> tuple[ApplyResult, list[Reject]]:
        """The slow path: each fact in its own savepoint; the ones SQLite refuses become rejects."""
        total = ApplyResult(0, 0, 0)
        refused = []
        for item in batch.facts:
            try:
                with conn:
                    one = self._apply_facts(conn, [(batch.file_id, batch.path, [item])],
                                            {batch.file_id} if batch.prevails else set())
            except _DATA_ERRORS as exc:
                refused.append(Reject(offset=item[0], length=item[1], reason=f"could not be stored: {exc}"[:300],
                                      head=b""))
                continue
            total.add(one)
        return total, refused

    def _apply_facts(self, conn: apsw.Connection, parts: list[Part],
                     prevailing: set[int] | frozenset[int] = frozenset()) -> ApplyResult:
        """Insert the batch's events, then the entity rows of those that were new; the model calls of
        the files in ``prevailing`` indexed before take those files' figures (see Batch.prevails)."""
        facts = [item[2] for _, _, items in parts for item in items]
        sources = {f.source for f in facts}
        # Only Claude Code sessions have side branches: other batches skip every lookup of them.
        branches = (SideBranches.for_batch(conn, parts, facts) if CLAUDE_CODE in sources
                    else NoSideBranches(parts, facts))
        parts, facts = branches.parts, branches.facts
        _ends_with_their_starts(conn, facts)
        fresh = parts
        copies: list[LlmCall] = []
        prepared = _prepare(parts)
        conn.execute("SAVEPOINT events")
        before = conn.total_changes()
        conn.executemany(_INSERT_EVENT, prepared.events)
        if conn.total_changes() - before != len(facts):
            # Some were indexed before (a copy, a re-read, a repeated id): start over with only
            # the new ones, keeping the first of each id within the batch.
            conn.execute("ROLLBACK TO events")
            keys = orjson.dumps([(f.ts_ms, f.event_id) for f in facts]).decode()
            seen = set(conn.execute(_EXISTING_EVENTS, (keys,)).fetchall())
            copies = [item[2] for file_id, _, items in parts if file_id in prevailing for item in items
                      if type(item[2]) is LlmCall and (item[2].ts_ms, item[2].event_id) in seen]
            fresh = []
            for file_id, path, items in parts:
                kept = []
                for item in items:
                    key = (item[2].ts_ms, item[2].event_id)
                    if key not in seen:
                        seen.add(key)
                        kept.append(item)
                fresh.append((file_id, path, kept))
            prepared = _prepare(fresh)
            conn.executemany(_INSERT_EVENT, prepared.events)
        conn.execute("RELEASE events")
        if prepared.events:
            oldest = min(e[3] for e in prepared.events)
            conn.execute(_PRUNE_FROM, (oldest, oldest))
        lifecycle = Lifecycle.for_batch(conn, [(path, [item[2] for item in items]) for _, path, items in fresh],
                                        self.idle_ms)
        linked = lifecycle.before()
        added, replaced = self._keyed_calls(conn, prepared)  # first: a replay's tool calls are no takeover
        if copies:
            taken, dropped = _prevailing_calls(conn, copies)
            prepared.rows[_LLM_CALL] = added = [*added, *taken]
            replaced = [*replaced, *dropped]
        takeovers = self._rows_told(conn, prepared)
        replays = branches.before(prepared.sessions, prepared.tool_keys)
        settled_runs, cut_tools, cut_subagents = _settled(conn, prepared.runs, lifecycle.facts)
        prepared.tool_keys.update(cut_tools)
        prepared.subagent_keys.update(cut_subagents)
        tracker = rollups.Tracker(conn, set(prepared.runs) | set(settled_runs), prepared.tool_keys,
                                  set(prepared.sessions) | linked, prepared.subagent_keys)
        tracker.before()
        for old_run, call_id, run_id, source in takeovers:
            if old_run == run_id:
                conn.execute(_CLAIM_HOOK_ROW, (source, run_id, call_id))
            else:
                conn.execute(TAKE_OVER_HOOK_ROW, (run_id, source, old_run, call_id))
                conn.execute(DROP_TOOL_ROW, (old_run, call_id))
        conn.executemany(DROP_TOOL_ROW, replays)
        conn.executemany(_UPSERT_SESSION, [tuple(agg) for agg in prepared.sessions.values()])
        conn.executemany(RUN_ACTIVITY, [(rid, *span) for rid, span in prepared.runs.items()])
        # Only now: the hook takeover above reads each line's own row.
        _pair_tools(prepared.rows, {row[1] for row in tracker.old_tools.values() if row[8] is not None})
        for sql in _ORDER:
            rows = prepared.rows.get(sql)
            if rows:
                conn.executemany(sql, rows)
        branches.after_upserts(prepared.tool_keys)
        _reopen_settled(conn, settled_runs, cut_tools, cut_subagents)  # after the upserts: what they ended stays
        branches.settle_ends(prepared.runs)
        if OC_TRANSCRIPT in sources:  # only transcripts' turns are retried within (see _RETRIED_RUNS)
            _reopen_retried(conn, lifecycle.facts)
        lifecycle.link()
        added = agents.infer_calls(conn, lifecycle.facts, added)
        tracker.after(added, prepared.rows.get(_COMPACTION, []), replaced)
        inferred = agents.follow(conn, lifecycle.facts, tracker)
        moved = branches.after(prepared.rows.get(_RUN_STARTED, ()))
        changed = lifecycle.after(tracker)
        new = len(lifecycle.facts)
        return ApplyResult(new_facts=new, duplicate_facts=len(facts) - new, rejects=0,
                           sessions=tracker.touched | changed | moved | inferred,
                           interrupted=tuple(lifecycle.interrupted))

    @staticmethod
    def _rows_told(conn: apsw.Connection, prepared: _Prepared) -> list[tuple[str, str, str, str]]:
        """Rows made elsewhere for calls this batch's lines tell: (their run, call id, the line's run, source).

        A hook could only guess the run; the transcript knows it. A line read before its session's run
        was (a subagent's file read ahead of the session's prompt) found no run, and so did a telemetry
        tool.end without its runId: the call's line that names its run (its start, or on a side branch
        its end) does. So does a start whose end, read first, named another run. Either way the row
        moves to the line's run, where the line's own upsert completes it rather than starting a second
        row of the call (its old key joins the batch's tool keys, so the rollups follow the move)."""
        told: dict[str, tuple] = {}
        # The calls the batch has one line of (and whether it is the start): the others' rows are the batch's own.
        lone: dict[str, tuple[tuple, bool]] = {}
        for sql in (_TOOL_STARTED, _TOOL_ENDED):
            for row in prepared.rows.get(sql, ()):
                if row[1] in told:
                    lone.pop(row[1], None)
                else:
                    told[row[1]] = row
                    lone[row[1]] = row, sql is _TOOL_STARTED
        if not told:
            return []
        out = []
        for run_id, call_id, key in conn.execute(_HOOK_ROWS, (orjson.dumps(list(told)).decode(),)):
            row = told[call_id]
            # A hook asked from inside a Task subagent put its row in the subagent's session, whose lines
            # are its parent's, on the subagent's branch (a start's or an end's branch is its last value).
            if key == row[5] or (row[-1] is not None and key == branch_key(row[-1])):
                out.append((run_id, call_id, row[0], row[3]))
                prepared.tool_keys.add((run_id, call_id))
        placed = [call_id for call_id, (row, _) in lone.items() if row[0]]
        if placed:
            # Only the same call's rows (see _place; a line's session and branch are its row's last values): a
            # main-branch line of a call a branch replayed leaves the replay's row to side_branches._replayed_tools.
            for call_id, run_id, started, source, *where in conn.execute(_CALL_ROWS, (orjson.dumps(placed).decode(),)):
                row, start = lone[call_id]
                if (run_id != row[0] and (run_id == "" or (start and not started))
                        and _place(source, call_id, *where) == _place(row[3], call_id, row[-1], row[-2], row[5])):
                    out.append((run_id, call_id, row[0], row[3]))
                    prepared.tool_keys.add((run_id, call_id))
        return out

    # -- hook events ---------------------------------------------------------------
    def apply_hook_events(self, events: list[HookEvent]) -> ApplyResult:
        """Record the hook events not recorded before, in one transaction.

        A hook's tool call lands on the row the ledger already has for it (any run of its
        session), else under the run its session is in, else under no run. A Task subagent's
        tool call records its spawn when nothing told the ledger yet who spawned it."""
        with self.transaction() as conn:
            items = []
            runs: dict[str, str] = {}
            started = []
            spawned: set[str] = set()  # the subagents whose spawner the ledger knows, or this batch tells
            sent_before = 0
            for event in events:
                if event.name == "SessionEnd":
                    event = ended_again(event, queries.session_starts(conn, event.session_id))
                conn.execute(_HOOK_EVENT, (event.id, event.ts_ms, event.session_id, event.name))
                if conn.changes() != 1:
                    sent_before += 1
                    continue
                if event.name == "SubagentStart" and event.more:
                    started.append(event.more[0])
                    spawned.add(event.more[0].child_session_key)
                elif event.spawn is not None and event.spawn.child_session_key not in spawned:
                    spawned.add(event.spawn.child_session_key)
                    # No SubagentStart came (only PreToolUse may be registered): the family would count
                    # the subagent's calls while they wait to be recorded and drop them once they are.
                    if not queries.spawner_known(conn, event.spawn.child_session_key):
                        started.append(event.spawn)
                        items.append((0, 0, event.spawn))
                fact = event.fact
                if type(fact) is ToolObserved:
                    if fact.tool_call_id not in runs:
                        rows = conn.execute(_TOOL_ROW_OF_SESSION,
                                            (fact.session_id, fact.tool_call_id, fact.session_key)).fetchall()
                        runs[fact.tool_call_id] = rows[0][0] if rows else self.run_at(fact.session_id, fact.ts_ms) or ""
                    fact.run_id = runs[fact.tool_call_id] or None
                items.append((0, 0, fact))
                items.extend((0, 0, more) for more in event.more)
            result = self._apply_facts(conn, [(HOOK_FILE_ID, HOOK_LOG, items)]) if items else ApplyResult(0, 0, 0)
            for spawn in started:  # once the batch's PreToolUse events are recorded, in the order they came
                result.sessions |= pair_task(conn, spawn)
            result.duplicate_facts += sent_before
            result.position = rollups.advance_position(conn, result.sessions)
        return result

    # -- gate decisions ------------------------------------------------------------
    def record_gate_decisions(self, decisions: list, counts: dict[tuple[str, str], int]) -> None:
        """Keep what gates answered: every warn/block whole, every decision in the counts."""
        if not decisions and not counts:
            return
        with self.transaction() as conn:
            conn.executemany(_GATE_DECISION, [
                (d.ts_ms, d.gate, d.scope, d.metric, d.decision, d.session_key, d.agent_id, d.tool, d.value, d.limit,
                 d.reason, d.via) for d in decisions])
            conn.executemany(_GATE_COUNT, [(gate, decision, n) for (gate, decision), n in counts.items()])

    @staticmethod
    def _keyed_calls(conn: apsw.Connection, prepared: _Prepared) -> tuple[list[tuple], list[tuple]]:
        """Settle calls that several lines describe: one row per call, the best line's.

        Leaves in ``prepared.rows`` only the llm_calls rows to insert, and no tool starts or
        spawns of replays; returns (rows the rollups gain, rows they lose). Rows of one response are
        rivals when they are one call's lines or when one is a side branch's replay of the
        other (see _rivals); of rivals only the best stays, whichever was read first. A better
        line of a known call replaces its row, so the rollups move by the difference and a
        call is never counted twice, whatever order its lines come in."""
        rows = prepared.rows
        calls = rows.get(_LLM_CALL)
        if not calls:
            return [], []
        plain = [row for row in calls if row[19] is None]
        keyed = [row for row in calls if row[19] is not None]
        if not keyed:
            return calls, []
        responses = prepared.responses
        kept: dict[str, list[tuple]] = defaultdict(list)
        for response, *row in conn.execute(RESPONSE_CALLS, (orjson.dumps(sorted(set(responses.values()))).decode(),)):
            kept[response].append(tuple(row))
        stored = {row[19]: row for group in kept.values() for row in group}
        for row in sorted(keyed, key=_rank, reverse=True):  # stable: of equal lines the first read stays
            response = responses[row[19]]
            group = kept[response]
            rivals = [other for other in group if _rivals(row, other, response)]
            if all(_rank(row) > _rank(other) for other in rivals):
                group[:] = [other for other in group if not any(other is r for r in rivals)] + [row]
        stays = {id(row) for group in kept.values() for row in group}
        replaced = [row for row in stored.values() if id(row) not in stays]
        if replaced:
            conn.executemany(_DROP_KEYED_CALL, [(row[19],) for row in replaced])
        added = plain + [row for row in keyed if id(row) in stays]
        rows[_LLM_CALL] = added
        on_main = {response for response, group in kept.items() if any(not row[20] for row in group)}
        starts = rows.get(_TOOL_STARTED)
        if starts and prepared.side_tools:
            rows[_TOOL_STARTED] = [row for row in starts if row[10] is None
                                   or prepared.side_tools.get((row[0], row[1])) not in on_main]
        spawns = rows.get(_SUBAGENT_SPAWNED)
        if spawns and prepared.side_spawns:
            # A replay's spawn would move the subagent to the replay's time and run, or, once the
            # Task's result has given the subagent its own key, spawn it a second time.
            rows[_SUBAGENT_SPAWNED] = [row for row in spawns if prepared.side_spawns.get(id(row)) not in on_main]
        return added, replaced

    def session_keys(self, session_ids: list[str]) -> dict[str, str]:
        """The key of each of these sessions the ledger holds with one, in one statement however many are asked."""
        return {sid: key for sid, key in self.conn.execute(NAMED_SESSIONS, (orjson.dumps(session_ids).decode(),))
                if key is not None}

    def untold_spawns(self, child_keys: list[str]) -> set[str]:
        """Those of these subagents whose spawn the ledger knows only from its parent, if at all."""
        return {key for (key,) in self.conn.execute(_UNTOLD_SPAWNS, (orjson.dumps(child_keys).decode(),))}

    def run_at(self, session_id: str, ts_ms: int | None) -> str | None:
        """The run a session was in at ``ts_ms`` (None: its latest), as far as the ledger knows."""
        if ts_ms is None:
            rows = self.conn.execute(_LATEST_RUN, (session_id,)).fetchall()
        else:
            rows = self.conn.execute(_RUN_AT, (session_id, ts_ms)).fetchall()
        return rows[0][0] if rows else None

    # -- files -------------------------------------------------------------------
    def load_files(self, source: str) -> list[FileRow]:
        return [FileRow(*row) for row in self.conn.execute(
            "SELECT id, source, root, path, fingerprint, dev, ino, offset, lines, size, status, lost_bytes, tail_len, "
            "tail_hash FROM files WHERE source = ? ORDER BY id", (source,))]

    def unreadable_inputs(self, source: str) -> dict[str, Unreadable]:
        return {path: Unreadable(root, kind, reason) for path, root, kind, reason in self.conn.execute(
            "SELECT path, root, kind, reason FROM unreadable_inputs WHERE source = ?", (source,))}

    def record_unreadable(self, source: str, roots: Iterable[str], found: dict[str, Unreadable]) -> None:
        """What under ``roots`` could not be read at the last look: ``found``, and nothing else. A path
        that stays so keeps the time it was first found so."""
        ts = now_ms()
        with self.transaction() as conn:
            since = dict(conn.execute("SELECT path, since_ms FROM unreadable_inputs WHERE source = ?", (source,)))
            conn.executemany("DELETE FROM unreadable_inputs WHERE source = ? AND root = ?",
                             [(source, root) for root in roots])
            conn.executemany(
                "INSERT OR REPLACE INTO unreadable_inputs (source, root, path, kind, reason, since_ms) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(source, u.root, path, u.kind, u.reason, since.get(path, ts)) for path, u in found.items()])

    def add_file(self, source: str, root: str, path: str, fingerprint: bytes, dev: int, ino: int,
                 size: int, status: str) -> FileRow:
        ts = now_ms()
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO files (source, root, path, fingerprint, dev, ino, size, status, first_seen_ms, "
                "updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (source, root, path, fingerprint, dev, ino, size, status, ts, ts),
            )
            file_id = conn.last_insert_rowid()
        return FileRow(file_id, source, root, path, fingerprint, dev, ino, 0, 0, size, status, None)

    def update_file(self, row: FileRow, event: tuple[str, int | None, str] | None = None) -> None:
        """Persist where a file now is (path, inode, checkpoint, size, status), with an optional file event."""
        ts = now_ms()
        with self.transaction() as conn:
            conn.execute(
                "UPDATE files SET root = ?, path = ?, dev = ?, ino = ?, offset = ?, lines = ?, size = ?, status = ?, "
                "lost_bytes = ?, updated_ms = ?, tail_len = ?, tail_hash = ? WHERE id = ?",
                (row.root, row.path, row.dev, row.ino, row.offset, row.lines, row.size, row.status, row.lost_bytes,
                 ts, row.tail_len, row.tail_hash, row.id),
            )
            if event is not None:
                name, nbytes, detail = event
                conn.execute(
                    "INSERT INTO file_events (ts_ms, file_id, path, event, bytes, detail) VALUES (?, ?, ?, ?, ?, ?)",
                    (ts, row.id, row.path, name, nbytes, detail),
                )
