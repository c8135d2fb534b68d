"""Whose a model call or a tool call is when its line names no agent (FORMATS.md §1: OpenClaw's llm.call never
does, and a session key such as ``global`` names none either).

Such a row takes its run's agent, else its session's (its own, else its run's), else the agent whose folder its
file is in (Fact.agent_folder), and says so (``agent_inferred``). A run's or a session's agent is the first any of
its lines names and never changes after, so a row whose run or session a later batch first gives an agent takes
it then: a call read before its run's start ends with the agent it has when read after. The rollups move with
every row that changes agent, so they stay equal to a recomputation.
"""

from __future__ import annotations

import apsw
import orjson

from agentledger.facts import Fact, LlmCall, ToolEnded, ToolObserved, ToolStarted
from agentledger.ledger import rollups
from agentledger.ledger.rows import LLM_CALL_COLUMNS
from agentledger.sources.oc_telemetry import SOURCE, folder_agent


def _inferred(table: str) -> str:
    """The agent a row of ``table`` with no agent of its own takes: its run's, its session's, else what it
    holds (its folder's, or none)."""
    return f"""coalesce(
    (SELECT r.agent_id FROM runs AS r WHERE r.run_id = {table}.run_id),
    (SELECT s.agent_id FROM sessions AS s WHERE s.session_id = coalesce({table}.session_id, (
        SELECT coalesce(r.session_id, a.session_id) FROM run_activity AS a LEFT JOIN runs AS r USING (run_id)
        WHERE a.run_id = {table}.run_id))),
    {table}.agent_id)"""


# The runs of sessions (parameter 2) whose rows name no session of their own but their run's.
_RUNS_OF_SESSIONS = ("SELECT run_id FROM runs WHERE session_id IN (SELECT value FROM json_each(?2)) "
                     "UNION ALL SELECT run_id FROM run_activity WHERE session_id IN (SELECT value FROM json_each(?2))")
# The batch's calls whose lines name no agent ([ts_ms, event id] each) take theirs, as the batch left their runs
# and sessions, before the rollups count them.
_INFER_CALLS = f"""
UPDATE llm_calls SET agent_id = {_inferred('llm_calls')}, agent_inferred = 1
WHERE id IN (SELECT l.id FROM json_each(?) AS j JOIN llm_calls AS l ON l.ts_ms = j.value ->> 0
                                                                AND l.event_id = j.value ->> 1)
RETURNING ts_ms, event_id, agent_id
"""
# The inferred calls of runs (parameter 1) and sessions (parameter 2) a batch first gave an agent that take another
# now (not the batch's own): each part by an index, llm_calls_inferred_by_run and _by_session (0048).
_GIVEN_CALLS = f"""
SELECT id, {LLM_CALL_COLUMNS} FROM llm_calls
WHERE agent_inferred AND run_id IN (SELECT value FROM json_each(?1) UNION ALL {_RUNS_OF_SESSIONS})
  AND agent_id IS NOT {_inferred('llm_calls')}
UNION
SELECT id, {LLM_CALL_COLUMNS} FROM llm_calls WHERE agent_inferred AND session_id IN (SELECT value FROM json_each(?2))
  AND agent_id IS NOT {_inferred('llm_calls')}
"""
_FILL_CALLS = (f"UPDATE llm_calls SET agent_id = {_inferred('llm_calls')} "
               "WHERE id IN (SELECT value FROM json_each(?)) RETURNING id, agent_id")

# Of the batch's tool calls ([run id, call id] each), those whose rows hold no agent a line named.
_BATCH_TOOLS = """
SELECT tc.run_id, tc.tool_call_id FROM json_each(?) AS j
JOIN tool_calls AS tc ON tc.run_id = j.value ->> 0 AND tc.tool_call_id = j.value ->> 1
WHERE tc.agent_id IS NULL OR tc.agent_inferred
"""
# The inferred tool calls of runs (parameter 1) and of sessions (parameter 2, through their runs: a call with a
# session of its own is a Claude Code side branch's, whose lines all name their agent) a batch first gave an agent.
_GIVEN_TOOLS = f"""
SELECT run_id, tool_call_id FROM tool_calls
WHERE agent_inferred AND run_id IN (SELECT value FROM json_each(?1) UNION ALL {_RUNS_OF_SESSIONS})
  AND agent_id IS NOT {_inferred('tool_calls')}
"""
# Each row [run id, call id, the agent a line of the batch names, its lines' folder]: a line that names the agent
# wins over an inferred one, as the first line naming it wins over later ones.
_FILL_TOOLS = f"""
UPDATE tool_calls SET agent_id = coalesce(j.value ->> 2, {_inferred('tool_calls')}, j.value ->> 3),
                      agent_inferred = j.value ->> 2 IS NULL
FROM json_each(?) AS j WHERE tool_calls.run_id = j.value ->> 0 AND tool_calls.tool_call_id = j.value ->> 1
"""

# The tool facts in the order the writer upserts them (see writer._ORDER): the first agent named wins.
_TOOL_ORDER = {ToolStarted: 0, ToolEnded: 1, ToolObserved: 2}


def _gained(old: dict, new: dict, at: int) -> list[str]:
    """The keys of rows (``new``, by key) whose agent (column ``at``) the batch gave them first."""
    return sorted(key for key, row in new.items()
                  if row[at] is not None and (key not in old or old[key][at] is None))


def _tools_told(facts: list[Fact]) -> dict[tuple[str, str], list]:
    """The batch's tool calls, each with [the agent its lines name first, the folder of its lines]."""
    tools: dict[tuple[str, str], list] = {}
    for f in facts:
        order = _TOOL_ORDER.get(type(f))
        if order is not None:
            told = tools.setdefault((f.run_id or "", f.tool_call_id), [None, None, None])
            if f.agent_id is not None and (told[0] is None or order < told[2]):
                told[0], told[2] = f.agent_id, order
            told[1] = told[1] or f.agent_folder
    return tools


# Of the rows an older agentledger left with no agent, model calls and compactions take their folder's, where their
# event names their file (retention keeps it); a tool call's row names no event.
_FOLDER_ROWS = """
UPDATE {table} SET {inferred}agent_id = (
    SELECT fa.agent FROM events AS e JOIN temp.folder_agents AS fa USING (file_id)
    WHERE e.ts_ms = {table}.ts_ms AND e.id = {table}.event_id)
WHERE agent_id IS NULL
"""


def settle_inferred_agents(conn: apsw.Connection) -> None:
    """Migration 0048, done as a read of the rows' lines now does: the rows an older agentledger left with no
    agent take their folder's (as the decoder finds it), then their run's or session's (as the writer does)."""
    conn.execute("CREATE TEMP TABLE folder_agents (file_id INTEGER PRIMARY KEY, agent TEXT NOT NULL)")
    conn.executemany("INSERT INTO temp.folder_agents VALUES (?, ?)", [
        (file_id, agent) for file_id, path in conn.execute("SELECT id, path FROM files WHERE source = ?", (SOURCE,))
        if (agent := folder_agent(path)) is not None])
    conn.execute(_FOLDER_ROWS.format(table="llm_calls", inferred="agent_inferred = 1, "))
    conn.execute("UPDATE tool_calls SET agent_inferred = 1 WHERE agent_id IS NULL")
    conn.execute(_FOLDER_ROWS.format(table="compactions", inferred=""))
    conn.execute("DROP TABLE temp.folder_agents")
    for table in ("llm_calls", "tool_calls"):
        conn.execute(f"UPDATE {table} SET agent_id = {_inferred(table)} WHERE agent_inferred")


def infer_calls(conn: apsw.Connection, facts: list[Fact], rows: list[tuple]) -> list[tuple]:
    """The batch's llm_calls rows (``rows``, as inserted) with the agents its calls that name none take, written
    to the ledger too; after the batch's upserts, before the rollups count the rows."""
    calls = [(f.ts_ms, f.event_id) for f in facts if type(f) is LlmCall and f.agent_id is None]
    if not calls:
        return rows
    found = {(ts, eid): agent for ts, eid, agent in conn.execute(_INFER_CALLS, (orjson.dumps(calls).decode(),))}
    # a row is (event id, ts_ms, source, agent, ...): see writer._llm_call
    return [(*row[:3], found[(row[1], row[0])], *row[4:]) if (row[1], row[0]) in found else row for row in rows]


def follow(conn: apsw.Connection, facts: list[Fact], tracker: rollups.Tracker) -> set[str]:
    """Move the inferred rows of the runs and sessions the batch first named an agent of to that agent, and give
    the batch's tool calls whose lines name none theirs; after ``tracker.after``. Returns the sessions whose rows
    changed."""
    runs = _gained(tracker.old_runs, tracker.new_runs, 2)
    sessions = _gained(tracker.old_sessions, tracker.new_sessions, 2)
    tools = _tools_told(facts)
    if not (runs or sessions or tools):
        return set()
    given = (orjson.dumps(runs).decode(), orjson.dumps(sessions).decode())
    touched = _follow_calls(conn, given) if runs or sessions else set()
    _fill_tools(conn, given, tools)
    return touched


def _follow_calls(conn: apsw.Connection, given: tuple[str, str]) -> set[str]:
    old = {row[0]: row[1:] for row in conn.execute(_GIVEN_CALLS, given)}
    if not old:
        return set()
    ids = orjson.dumps(list(old)).decode()
    new = [(*old[i][:3], agent, *old[i][4:]) for i, agent in conn.execute(_FILL_CALLS, (ids,))]
    return rollups.move_llm_calls(conn, list(old.values()), new)


def _fill_tools(conn: apsw.Connection, given: tuple[str, str], tools: dict[tuple[str, str], list]) -> None:
    rows: dict[tuple[str, str], list] = {}
    if tools:
        for key in conn.execute(_BATCH_TOOLS, (orjson.dumps(list(tools)).decode(),)):
            rows[key] = [*key, *tools[key][:2]]
    for key in conn.execute(_GIVEN_TOOLS, given):
        rows.setdefault(key, [*key, None, None])
    if not rows:
        return
    keys = sorted(rows)
    old = rollups.tool_rows(conn, keys)
    conn.execute(_FILL_TOOLS, (orjson.dumps(list(rows.values())).decode(),))
    rollups.move_tool_calls(conn, list(old.values()), list(rollups.tool_rows(conn, keys).values()))
