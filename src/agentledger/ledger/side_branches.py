"""Claude Code's side branches and Task subagents in the ledger, whichever of their lines is read first.

A side branch (a Task subagent's, a /btw question's) writes its lines beside its session's, each naming the
child session it would be; only the Task's result or a hook of the subagent says it is one, before or after
the branch is read (see sources/claude_code.py). Here is what the writer makes of that: a branch's calls, tool
calls, spawns and events go to the child's session once any event names it, and to the run of their time once
that run is known; a branch's replays of calls and results it did not make count nothing; a Task's spawn takes
the child's key once its result, its subagent's end or SubagentStart names it; a failed Task ends its subagent;
and a turn goes as its last main-branch answer did. ``SideBranches`` brings this into the writer's transaction,
batch by batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import apsw
import orjson

from agentledger.facts import (
    Fact,
    LlmCall,
    Marker,
    SubagentEnded,
    SubagentLaunched,
    SubagentSpawned,
    ToolEnded,
    ToolStarted,
)
from agentledger.ledger import queries, rollups
from agentledger.ledger.rows import (DROP_TOOL_ROW, LLM_CALL_COLUMNS, NAMED_SESSIONS, RESPONSE_CALLS, RUN_ACTIVITY,
                                     RUN_BEGUN_BY, TAKE_OVER_HOOK_ROW, Part, spawn_upsert)
from agentledger.sources.claude_code import (
    AGENT,
    TASK_TOOLS,
    child_key,
    child_session_id,
    spawn_key,
)
from agentledger.sources.claude_code import SOURCE as CLAUDE_CODE
from agentledger.sources.claude_code_hooks import event_id

# Calls of side branches that have become sessions but are still where they were made.
_BRANCH_CALLS = (
    f"SELECT id, {LLM_CALL_COLUMNS} FROM llm_calls WHERE branch IN (SELECT value FROM json_each(?)) "
    "AND session_id IS NOT branch"
)
_MOVE_CALL = "UPDATE llm_calls SET session_key = ?, session_id = ? WHERE id = ?"
# Subagents spawned on these side branches, with the branch and the parent they have.
_BRANCH_SPAWNS = (
    "SELECT child_session_key, branch, parent_session_key FROM subagents "
    "WHERE branch IN (SELECT value FROM json_each(?))"
)
_SET_PARENT = "UPDATE subagents SET parent_session_key = ? WHERE child_session_key = ?"
# The times of model-call lines read on side branches no event had named yet (see 0037): the session a
# branch becomes spans them all, though its calls' rows keep one line's time each, or none.
BRANCH_SPAN = """
INSERT INTO branch_spans (branch, first_ms, last_ms) VALUES (?, ?, ?)
ON CONFLICT (branch) DO UPDATE SET first_ms = min(branch_spans.first_ms, excluded.first_ms),
                                   last_ms = max(branch_spans.last_ms, excluded.last_ms)
"""
# Those of branches that are sessions now: the batch's sessions take them, and no later batch needs them.
_TAKE_BRANCH_SPANS = (
    "DELETE FROM branch_spans WHERE branch IN (SELECT value FROM json_each(?)) RETURNING branch, first_ms, last_ms"
)
# The events of model-call and spawn lines read on side branches no event had named yet (see 0045), and those
# of branches that are sessions now, which take the key a read of those lines now gives them. An event retention
# has reduced shows no key, whenever its branch was named.
BRANCH_EVENT = "INSERT INTO branch_events (branch, ts_ms, id) VALUES (?, ?, ?)"
_TAKE_BRANCH_EVENTS = (
    "DELETE FROM branch_events WHERE branch IN (SELECT value FROM json_each(?)) RETURNING branch, ts_ms, id"
)
_KEY_BRANCH_EVENT = "UPDATE events SET session_key = ? WHERE ts_ms = ? AND id = ? AND kind <> ''"
# Tool calls of side branches that are sessions (or that these events name) but still counted where made.
_BRANCH_TOOLS = (
    "SELECT run_id, tool_call_id FROM tool_calls WHERE branch IN (SELECT value FROM json_each(?)) "
    "AND session_id IS NOT branch"
)
_MOVE_BRANCH_TOOLS = (
    "UPDATE tool_calls SET session_id = branch "
    "WHERE (run_id, tool_call_id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?)) "
    "AND session_id IS NOT branch AND branch IN (SELECT session_id FROM sessions)"
)
# Tool calls on the side branches whose names start so (one session's, see _replayed_tools).
_SIDE_TOOLS = "SELECT run_id, tool_call_id FROM tool_calls WHERE branch > ? AND branch < ?"
_RENAME_SUBAGENT = "UPDATE subagents SET child_session_key = ? WHERE child_session_key = ?"
_SUBAGENT_KEYS = "SELECT child_session_key FROM subagents WHERE child_session_key IN (SELECT value FROM json_each(?))"
_DROP_SUBAGENT = "DELETE FROM subagents WHERE child_session_key = ?"
_HOLD_SPAWN = "UPDATE subagents SET spawn_key = ? WHERE child_session_key = ?"
# Which of these (branch, call) pairs a side branch's own start put on that branch.
_BRANCH_ROWS = (
    "SELECT tc.branch, tc.tool_call_id FROM json_each(?) AS j "
    "JOIN tool_calls AS tc ON tc.branch = j.value ->> 0 AND tc.tool_call_id = j.value ->> 1"
)
# Rows of these sessions' side branches ([session, lowest, highest branch, time] each) that may not be in
# the run their session was in at their time, now that runs begun at that time are known: those stored
# under no run, and those of that time or later. Each with that run (None: none the ledger knows) and the
# one it is in, where the two differ. A branch written inline in its session's file (older versions) is in
# that run already: a transcript is written in time order.
_MISPLACED_TOOLS = f"""
SELECT * FROM (
    SELECT ({RUN_BEGUN_BY.format("j.value ->> 0", "coalesce(tc.started_ms, tc.ended_ms)")}) AS run,
           tc.run_id, tc.tool_call_id, tc.started_ms, tc.ended_ms
    FROM json_each(?) AS j
    JOIN tool_calls AS tc ON tc.branch > j.value ->> 1 AND tc.branch < j.value ->> 2
    WHERE tc.run_id = '' OR coalesce(tc.started_ms, tc.ended_ms) >= j.value ->> 3)
WHERE run IS NOT NULL AND run != run_id
"""
_MISPLACED_CALLS = f"""
SELECT * FROM (
    SELECT ({RUN_BEGUN_BY.format("j.value ->> 0", "l.ts_ms")}) AS run, l.id, {LLM_CALL_COLUMNS}
    FROM json_each(?) AS j
    JOIN llm_calls AS l ON l.branch > j.value ->> 1 AND l.branch < j.value ->> 2
    WHERE l.run_id IS NULL OR l.ts_ms >= j.value ->> 3)
WHERE run IS NOT NULL AND run IS NOT run_id
"""
# Subagents of these sessions ([session, lowest, highest child key, time] each) spawned under no run, or at
# that time or later, take the run their session was in when they were spawned, as calls do (see above): a
# workflow's agent tells its own spawn (see claude_code.py), as a side branch's Task does, and their
# transcripts may be read before their session's prompt. A spawn on the main branch is in that run already.
_MISPLACED_SPAWNS = f"""
UPDATE subagents SET parent_run_id = ({RUN_BEGUN_BY.format("j.value ->> 0", "subagents.spawned_ms")})
FROM json_each(?) AS j
WHERE subagents.spawned_ms IS NOT NULL AND (subagents.parent_run_id IS NULL OR subagents.spawned_ms >= j.value ->> 3)
  AND subagents.child_session_key > j.value ->> 1 AND subagents.child_session_key < j.value ->> 2
"""
_SET_CALL_RUN = "UPDATE llm_calls SET run_id = ? WHERE id = ?"
# The row of the spawn key ?2 into the child's ?1 (both are there, see _merge_spawns), as the spawn's own
# upsert would have put it there: the child's row holds what both say.
_MERGE_SPAWN = spawn_upsert("SELECT ?1, parent_session_key, parent_run_id, source, child_agent_id, label, mode, "
                            "status, spawned_ms, told_by_child, branch FROM subagents WHERE child_session_key = ?2")
# Claude Code writes an API error that ended a request as an answer of its own (isApiErrorMessage), and may
# retry within the turn after one: a Claude Code turn went as its last main-branch answer did, whatever ended it
# (a stop reason, turn_duration, the next prompt, reconcile). One whose last answer is such an error failed with
# it; one answered since is ok. A turn the user stopped stays interrupted, an open one open. An older agentledger
# kept an API error with no key and no branch, a side branch's (a /btw question's) as the main branch's: one such
# after its turn had ended was no answer of the turn.
_TURN_OUTCOMES = f"""
UPDATE runs SET (status, error) = (
    SELECT iif(last.error IS NULL, 'ok', 'error'), last.error
    FROM (SELECT (SELECT c.error FROM llm_calls AS c WHERE c.run_id = runs.run_id AND c.branch IS NULL
                    AND (c.call_key IS NOT NULL OR c.ts_ms <= runs.ended_ms)
                  ORDER BY c.ts_ms DESC, c.error IS NULL DESC LIMIT 1) AS error) AS last)
WHERE run_id IN (SELECT value FROM json_each(?)) AND source = '{CLAUDE_CODE}' AND status IN ('ok', 'error')
"""
# A Task whose result is an error naming no subagent (the user refused it, a hook denied it, it failed before a
# subagent ran) has no subagent that will ever say it ended: the row its spawn made ends with that result, in
# error, as a result naming the subagent would end it (the surest word, see the writer's _SUBAGENT_ENDED).
# Whichever of the Task's lines is read last ends it; a row a Task's result ended already keeps that end.
_FAILED_TASKS = f"""
SELECT ?2 || tool_call_id, ended_ms FROM tool_calls
WHERE tool_call_id IN (SELECT value FROM json_each(?1)) AND source = '{CLAUDE_CODE}' AND status = 'error'
"""
# What an older ledger holds for those rules to settle (see settle_upgraded_ends).
_ENDED_TURNS = f"SELECT run_id FROM runs WHERE source = '{CLAUDE_CODE}' AND status IN ('ok', 'error')"
_FAILED_CALLS = f"SELECT tool_call_id FROM tool_calls WHERE source = '{CLAUDE_CODE}' AND status = 'error'"
_END_FAILED_TASK = """
UPDATE subagents SET status = 'ended', ended_ms = ?2, outcome = 'error', end_rank = 2
WHERE (child_session_key = ?1 OR spawn_key = ?1) AND spawned_ms IS NOT NULL AND end_rank < 2
"""


def _replayed_results(conn: apsw.Connection, parts: list[Part]) -> dict[tuple[int, int], str | None]:
    """The batch's side-branch tool_result lines that copy another branch's, by (file id, offset), with
    their session: a branch's result of a call it did not start. Such a line names no response to tell
    it by, as a copied tool_use line does. A branch's file holds a call's start before its result, so
    the branch's own start is in the batch or stored on the branch, unless that start was a copy too
    (its response is the main branch's, see LedgerWriter._keyed_calls) or a main-branch line took the call back."""
    ends, starts, main = [], {}, set()
    for file_id, _, items in parts:
        for off, _, f in items:
            t = type(f)
            if t is ToolEnded and f.branch is not None:
                ends.append((file_id, off, (f.branch, f.tool_call_id), f.session_id))
            elif t is ToolStarted and f.branch is not None:
                starts[(f.branch, f.tool_call_id)] = f.message_key
            elif t is LlmCall and not f.sidechain and f.message_key is not None:
                main.add(f.message_key)
    if not ends:
        return {}
    asked = sorted({call for _, _, call, _ in ends if call not in starts})
    own = {tuple(row) for row in conn.execute(_BRANCH_ROWS, (orjson.dumps(asked).decode(),))} if asked else set()
    responses = sorted({starts[call] for _, _, call, _ in ends if call in starts} - main - {None})
    if responses:
        main |= {response for response, *row in conn.execute(RESPONSE_CALLS, (orjson.dumps(responses).decode(),))
                 if not row[20]}
    return {(file_id, off): session_id for file_id, off, call, session_id in ends
            if (starts[call] in main if call in starts else call not in own)}


def _as_events(parts: list[Part], lines: dict[tuple[int, int], str | None]) -> list[Part]:
    """The facts of these lines as bare events: a copy is indexed, but says nothing of the call, the
    subagent or the child session it repeats. It stays a line of its own session's run at its time, as
    it is when read before what it copies."""
    return [(file_id, path, [(off, n, _bare(f, lines[(file_id, off)]) if (file_id, off) in lines else f)
                             for off, n, f in items])
            for file_id, path, items in parts]


def _bare(f: Fact, session_id: str | None) -> Marker:
    own = f.session_id == session_id
    return Marker(event_id=f.event_id, ts_ms=f.ts_ms, kind=f.kind, source=f.source, agent_id=f.agent_id,
                  session_key=f.session_key, session_id=session_id if own else None, run_id=f.run_id if own else None)


def _rename_subagents(conn: apsw.Connection, facts: list[Fact]) -> set[str]:
    """A subagent spawned under a provisional key takes the child's key once an end (or a background Task's
    result) names both.

    The row's contribution to every rollup stays as it was; the batch's own spawns take the key too, and
    so do those of a Task whose spawn a child's row holds already (its SubagentStart told which Task it
    was: see pair_task). Where the child's key has a row already, the spawn's goes into it (see
    _merge_spawns). Returns the sessions whose totals moved."""
    renames = {f.spawn_key: f.child_session_key for f in facts
               if (type(f) is SubagentEnded or type(f) is SubagentLaunched) and f.spawn_key}
    spawns = [f for f in facts if type(f) is SubagentSpawned]
    tasks = [f.child_session_key for f in spawns if f.source == CLAUDE_CODE and f.child_session_key not in renames]
    held = queries.spawns_held(conn, tasks) if tasks else {}
    for f in spawns:
        f.child_session_key = renames.get(f.child_session_key) or held.get(f.child_session_key, f.child_session_key)
    if not renames:
        return set()
    keys = orjson.dumps(sorted({*renames, *renames.values()})).decode()
    stored = {key for (key,) in conn.execute(_SUBAGENT_KEYS, (keys,))}
    conn.executemany(_RENAME_SUBAGENT, [(new, old) for old, new in renames.items() if new not in stored])
    return _merge_spawns(conn, [(new, old) for old, new in renames.items() if {old, new} <= stored])


def _merge_spawns(conn: apsw.Connection, merges: list[tuple[str, str]]) -> set[str]:
    """(child key, spawn key) pairs that both have a row: an end read before the session's spawn (a side
    branch's copy of the Task's result) gave the child its row, and the spawn read since made one under
    the spawn key. The spawn's account goes onto the child's row, as the spawn's own upsert would have
    put it there, and the spawn key's row goes; the rollups follow. Returns the sessions whose totals moved."""
    if not merges:
        return set()
    tracker = rollups.Tracker(conn, set(), set(), set(), {key for pair in merges for key in pair})
    tracker.before()
    conn.executemany(_MERGE_SPAWN, merges)
    conn.executemany(_DROP_SUBAGENT, [(old,) for _, old in merges])
    tracker.after([], [])
    return tracker.touched


def pair_task(conn: apsw.Connection, started: SubagentSpawned) -> set[str]:
    """A Task subagent's SubagentStart (``started``; without one, the spawn its first tool event recorded
    told) gives its row the spawn of its Task, when only one Task of the session can be it, so that a
    running subagent is one row, not its Task's and its own until the Task's result is read. The hook
    names no Task. Claude Code asks the Task's PreToolUse before the subagent starts, so the Tasks that
    may be its own are the session's still running, their spawns held by no subagent, of the type it is
    (as far as known), not asked after it started. It is paired only
    when one Task is left and its PreToolUse was asked: a transcript read ahead can add Tasks (never
    asked here, or not yet), which then leave it unpaired. Concurrent Tasks of one type stay two rows
    each until their results. Returns the sessions whose totals moved."""
    child, session = started.child_session_key, started.session_id
    if session is None or queries.spawn_held_by(conn, child) is not None:
        return set()
    open_tasks = queries.open_tasks(conn, session, sorted(TASK_TOOLS), spawn_key(""))
    maybe = [call for call, mode in open_tasks.items() if None in (mode, started.mode) or mode == started.mode]
    asked_ids = {call: event_id("PreToolUse", session, {"tool_use_id": call}) for call in maybe}
    asked = queries.hook_event_times(conn, list(asked_ids.values()))
    maybe = [call for call in maybe if asked.get(asked_ids[call], started.ts_ms) <= started.ts_ms]
    if len(maybe) != 1 or asked_ids[maybe[0]] not in asked:
        return set()
    task = spawn_key(maybe[0])
    # The Task's line read already made its spawn's row: it goes into the child's.
    stored = conn.execute(_SUBAGENT_KEYS, (orjson.dumps([task]).decode(),)).fetchall()
    moved = _merge_spawns(conn, [(child, task)]) if stored else set()
    conn.execute(_HOLD_SPAWN, (task, child))
    return moved


def _side_branches(conn: apsw.Connection, facts: list[Fact]) -> tuple[dict[str, list], set[str]]:
    """Calls on a side branch belong to the branch's session once any event names it (LlmCall.branch),
    and so do the subagents spawned there (SubagentSpawned.branch): a subagent's Task spawns its child.

    The batch's calls and spawns whose branch is a session (already, or named in this batch) go there,
    their events keyed by it; the stored ones of branches this batch names move there, their events too
    (_TAKE_BRANCH_EVENTS), the rollups following. Returns what the branches this batch names add to their
    sessions' spans ({id: [id, key, agent, source, first, last]}): their moved calls, and every line of
    theirs read before (_TAKE_BRANCH_SPANS), as a read of those lines now would; and the sessions whose
    totals moved."""
    named: dict[str, str | None] = {}
    branches = set()
    for f in facts:
        if f.session_id is not None and named.get(f.session_id) is None:
            named[f.session_id] = f.session_key
        if (type(f) is LlmCall or type(f) is SubagentSpawned) and f.branch is not None:
            branches.add(f.branch)
    if branches:
        known = {b: named[b] for b in branches if b in named}
        if len(known) < len(branches):
            known.update(conn.execute(NAMED_SESSIONS, (orjson.dumps(sorted(branches - known.keys())).decode(),)))
        for f in facts:
            if (type(f) is LlmCall or type(f) is SubagentSpawned) and f.branch in known:
                f.session_id, f.session_key = f.branch, known[f.branch]
    if not named:
        return {}, set()
    moved = _branch_spawns(conn, named)
    ids = orjson.dumps(sorted(named)).decode()
    conn.executemany(_KEY_BRANCH_EVENT, [(named[branch], ts, event) for branch, ts, event
                                         in conn.execute(_TAKE_BRANCH_EVENTS, (ids,)).fetchall()])
    spans = {sid: [sid, named[sid], AGENT, CLAUDE_CODE, first, last]
             for sid, first, last in conn.execute(_TAKE_BRANCH_SPANS, (ids,))}
    old = [tuple(row) for row in conn.execute(_BRANCH_CALLS, (ids,))]
    if not old:
        return spans, moved
    new = []
    for rid, *row in old:
        sid = row[23]
        row[4], row[5] = named[sid], sid
        new.append(tuple(row))
        span = spans.get(sid)
        if span is None:
            spans[sid] = [sid, named[sid], row[3], row[2], row[1], row[1]]
        else:
            span[4], span[5] = min(span[4], row[1]), max(span[5], row[1])
    conn.executemany(_MOVE_CALL, [(row[4], row[5], rid) for rid, row in zip((r[0] for r in old), new)])
    return spans, moved | rollups.move_llm_calls(conn, [row[1:] for row in old], new)


def _branch_spawns(conn: apsw.Connection, named: dict[str, str | None]) -> set[str]:
    """The stored subagents spawned on the side branches that are these sessions ({id: key}) but still by
    the session whose line spawned them take the branch's session as their parent; the families follow.
    Returns the sessions whose views moved."""
    moves = [(named[branch], child) for child, branch, parent in
             conn.execute(_BRANCH_SPAWNS, (orjson.dumps(sorted(named)).decode(),)) if parent != named[branch]]
    if not moves:
        return set()
    tracker = rollups.Tracker(conn, set(), set(), set(), {child for _, child in moves})
    tracker.before()
    conn.executemany(_SET_PARENT, moves)
    tracker.after([], [])
    return tracker.touched


def _branch_tools(conn: apsw.Connection, facts: list[Fact], tool_keys: set[tuple[str, str]]) -> bool:
    """Tool calls on a side branch count in its session once any event names it, as its calls do.

    The rows that may move are the batch's own and the stored ones of branches this batch names;
    the latter join ``tool_keys``, so the rollups follow. Says whether _MOVE_BRANCH_TOOLS is due
    once the batch's rows (its sessions' included) are written."""
    named = {f.session_id for f in facts if f.session_id is not None}
    found = conn.execute(_BRANCH_TOOLS, (orjson.dumps(sorted(named)).decode(),)).fetchall() if named else []
    tool_keys.update(tuple(key) for key in found)
    return bool(found) or any((type(f) is ToolStarted or type(f) is ToolEnded) and f.branch is not None
                              for f in facts)


def _replayed_tools(conn: apsw.Connection, facts: list[Fact]) -> list[tuple[str, str]]:
    """Rows a side branch's replay made for tool calls that the batch's main-branch lines tell in
    another run: the call is the main branch's alone (a replay read first was dated, and so put in a
    run, by when it was copied). In the same run the main line's upsert takes the row back."""
    told: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for f in facts:
        if (type(f) is ToolStarted or type(f) is ToolEnded) and f.branch is None and f.source == CLAUDE_CODE \
                and f.session_id is not None:
            told[f.session_id][f.tool_call_id].add(f.run_id or "")
    out = []
    for session_id, calls in told.items():
        for run_id, call_id in conn.execute(_SIDE_TOOLS, _branch_bounds(session_id)):
            if call_id in calls and run_id not in calls[call_id]:
                out.append((run_id, call_id))
    return out


def _bounds(prefix: str) -> tuple[str, str]:
    """Bounds, both excluded, of the strings that start with ``prefix`` (which ends in ``/``)."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _branch_bounds(session_id: str) -> tuple[str, str]:
    """Bounds, both excluded, of the names of a session's side branches."""
    return _bounds(child_session_id(session_id, ""))


def _run_starts(rows: Iterable[tuple]) -> dict[str, int]:
    """Each Claude Code session's earliest start among these rows of the writer's _RUN_STARTED."""
    begun: dict[str, int] = {}
    for row in rows:
        if row[4] == CLAUDE_CODE:
            begun[row[2]] = min(row[7], begun.get(row[2], row[7]))
    return begun


def _side_rows_into_runs(conn: apsw.Connection, begun: dict[str, int]) -> set[str]:
    """Rows of these sessions' side branches join the run of their time, now that the ledger knows it:
    ``begun`` has each session's earliest run start in the batch. A side branch's line takes the run its
    session was in at its time as far as the ledger knew when it was read: none, if it was read before its
    session's prompt (a subagent's file read first), or an earlier turn, if it was read before the prompt
    of the turn it was made in. A read of the prompt first puts it in that prompt's run. The rollups and
    the run's activity follow (the run it leaves keeps the span it had: a span only ever widens), and so
    does the run of a spawn. Returns the sessions whose totals moved."""
    if not begun:
        return set()
    sessions = sorted(begun.items())
    children = orjson.dumps([(sid, *_bounds(child_key(sid, "")), ts) for sid, ts in sessions]).decode()
    conn.execute(_MISPLACED_SPAWNS, (children,))  # no total counts a spawn's run
    bounds = orjson.dumps([(sid, *_branch_bounds(sid), ts) for sid, ts in sessions]).decode()
    tools = conn.execute(_MISPLACED_TOOLS, (bounds,)).fetchall()
    calls = conn.execute(_MISPLACED_CALLS, (bounds,)).fetchall()
    if not tools and not calls:
        return set()
    times = [(run_id, ts) for run_id, _, _, started, ended in tools for ts in (started, ended) if ts is not None]
    times += [(call[0], call[3]) for call in calls]  # (run, id, event_id, ts_ms, ...)
    spans: dict[str, list[int]] = {}
    for run_id, ts in times:
        span = spans.setdefault(run_id, [ts, ts])
        span[0], span[1] = min(span[0], ts), max(span[1], ts)
    keys = {key for run_id, old_run, call_id, _, _ in tools for key in ((run_id, call_id), (old_run, call_id))}
    tracker = rollups.Tracker(conn, set(spans), keys, set(), set())
    tracker.before()
    for run_id, old_run, call_id, _, _ in tools:
        # A line of the call read since the prompt may have started a row there: this one fills its gaps.
        conn.execute(TAKE_OVER_HOOK_ROW, (run_id, CLAUDE_CODE, old_run, call_id))
        conn.execute(DROP_TOOL_ROW, (old_run, call_id))
    conn.executemany(_SET_CALL_RUN, [(run_id, rid) for run_id, rid, *_ in calls])
    conn.executemany(RUN_ACTIVITY, [(run_id, a, b, None, None) for run_id, (a, b) in spans.items()])
    old = [tuple(row) for _, _, *row in calls]
    tracker.after([(*row[:6], run_id, *row[7:]) for (run_id, *_), row in zip(calls, old)], [], old)
    return tracker.touched


def _end_failed_tasks(conn: apsw.Connection, facts: list[Fact]) -> None:
    """End the subagents of the Tasks among the batch's calls that failed (see _FAILED_TASKS): a failed
    result's line, or a Task's own once its call is known to have failed."""
    _end_tasks_of(conn, {f.tool_call_id for f in facts if f.source == CLAUDE_CODE and (
        (type(f) is ToolEnded and f.is_error) or (type(f) is ToolStarted and f.tool_name in TASK_TOOLS))})


def _end_tasks_of(conn: apsw.Connection, calls: Collection[str]) -> None:
    if calls:
        failed = conn.execute(_FAILED_TASKS, (orjson.dumps(sorted(calls)).decode(), spawn_key(""))).fetchall()
        conn.executemany(_END_FAILED_TASK, failed)


def settle_upgraded_ends(conn: apsw.Connection) -> None:
    """End the Claude Code turns and refused Tasks an older agentledger stored as a read of their lines ends them
    now (_TURN_OUTCOMES, _FAILED_TASKS): it kept what those rules need, not what they make of it. The
    migration that runs this refills the rollups the runs and subagents count in."""
    turn_outcomes(conn, [run for (run,) in conn.execute(_ENDED_TURNS)])
    _end_tasks_of(conn, [call for (call,) in conn.execute(_FAILED_CALLS)])


def turn_outcomes(conn: apsw.Connection, runs: Collection[str]) -> None:
    """Give these runs, those of them that are ended Claude Code turns, the outcome of their last answer (see
    _TURN_OUTCOMES). The caller's rollup tracker follows the runs."""
    if runs:
        conn.execute(_TURN_OUTCOMES, (orjson.dumps(sorted(runs)).decode(),))


def _widen(sessions: dict[str, list], spans: dict[str, list]) -> None:
    """Fold the moved calls' times into the batch's session rows."""
    for sid, span in spans.items():
        agg = sessions.get(sid)
        if agg is None:
            sessions[sid] = span
        else:
            agg[4], agg[5] = min(agg[4], span[4]), max(agg[5], span[5])


@dataclass(slots=True)
class SideBranches:
    """A Claude Code batch's side branches at the points of the writer's transaction where they step in, in
    this order (as lifecycle.Lifecycle brackets a batch): ``for_batch`` before the batch's events are inserted,
    ``before`` ahead of the rollups tracker, ``after_upserts`` once the batch's rows are written, ``settle_ends``
    once reconcile's settling of what the batch shows going on is undone, and ``after`` after the rollups."""

    conn: apsw.Connection
    parts: list[Part]  # the batch's, a branch's copies of results as bare events (see _replayed_results)
    facts: list[Fact]  # those of ``parts``, in order
    spans: dict[str, list]  # what the branches the batch names add to their sessions' rows (see _side_branches)
    moved: set[str]  # the sessions whose totals the branches moved
    branch_tools: bool = False  # whether _MOVE_BRANCH_TOOLS is due (see _branch_tools)

    @classmethod
    def for_batch(cls, conn: apsw.Connection, parts: list[Part], facts: list[Fact]) -> SideBranches:
        """``facts``: those of ``parts``, in order. Settles, before their events are inserted, what the lines
        are: a branch's copy of a result is a bare event, the spawns an end names take the child's key, and calls
        and spawns of branches that are sessions go to them (a branch's tool call ends in its start's run, as
        every call does: see the writer's _ends_with_their_starts)."""
        replayed = _replayed_results(conn, parts)
        if replayed:
            parts = _as_events(parts, replayed)
            facts = [item[2] for _, _, items in parts for item in items]
        renamed = _rename_subagents(conn, facts)
        spans, moved = _side_branches(conn, facts)
        return cls(conn, parts, facts, spans, moved | renamed)

    def before(self, sessions: dict[str, list], tool_keys: set[tuple[str, str]]) -> list[tuple[str, str]]:
        """Ahead of the rollups tracker: the batch's session rows (``sessions``, {id: [id, key, agent, source,
        first, last]}) take in the spans of the branches it names, and ``tool_keys`` the tool calls the branches
        move, for the tracker to follow. Returns the rows of replayed tool calls to drop (see _replayed_tools)."""
        _widen(sessions, self.spans)
        self.branch_tools = _branch_tools(self.conn, self.facts, tool_keys)
        replays = _replayed_tools(self.conn, self.facts)
        tool_keys.update(replays)
        return replays

    def after_upserts(self, tool_keys: set[tuple[str, str]]) -> None:
        """Once the batch's rows are written, its branches' tool calls (``tool_keys``) count in the sessions the
        branches are (see _branch_tools)."""
        if self.branch_tools:
            self.conn.execute(_MOVE_BRANCH_TOOLS, (orjson.dumps(sorted(tool_keys)).decode(),))

    def settle_ends(self, runs: Collection[str]) -> None:
        """The batch's failed Tasks end their subagents, and its ``runs`` that are ended turns go as their last
        answers did."""
        _end_failed_tasks(self.conn, self.facts)
        turn_outcomes(self.conn, runs)

    def after(self, run_starts: Iterable[tuple]) -> set[str]:
        """After the rollups, with the batch's rows of the writer's _RUN_STARTED: the branches' rows join the runs
        of their time (see _side_rows_into_runs). Returns the sessions whose totals the branches moved."""
        return self.moved | _side_rows_into_runs(self.conn, _run_starts(run_starts))


@dataclass(slots=True)
class NoSideBranches:
    """SideBranches of a batch with no Claude Code line: its lines have no side branch, so they are what they say
    and no step has anything to do."""

    parts: list[Part]
    facts: list[Fact]

    def before(self, sessions: dict[str, list], tool_keys: set[tuple[str, str]]) -> list[tuple[str, str]]:
        return []

    def after_upserts(self, tool_keys: set[tuple[str, str]]) -> None:
        pass

    def settle_ends(self, runs: Collection[str]) -> None:
        pass

    def after(self, run_starts: Iterable[tuple]) -> set[str]:
        return set()
