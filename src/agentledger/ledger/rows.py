"""What the single writer (writer.py) and its rules for Claude Code's side branches (side_branches.py)
both take or run: the shape of a batch's facts, and the statements on the rows that both write or read.
"""

from __future__ import annotations

from agentledger.facts import Fact

Part = tuple[int, str, list[tuple[int, int, Fact]]]  # a file's id, path and (offset, length, fact) items

# A run's session is what the earliest of its events that names one says (of two at once, the lesser id),
# whatever order they are read in: a tool call naming no session counts in it when no runs row says whose
# the run is (see verify.TOOL_SESSION).
_EARLIER_SESSION = ("excluded.session_id IS NOT NULL AND (run_activity.session_id IS NULL OR "
                    "(excluded.session_ms, excluded.session_id) < (run_activity.session_ms, run_activity.session_id))")
RUN_ACTIVITY = f"""
INSERT INTO run_activity (run_id, first_ms, last_ms, session_ms, session_id) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    first_ms   = min(run_activity.first_ms, excluded.first_ms),
    last_ms    = max(run_activity.last_ms, excluded.last_ms),
    session_ms = iif({_EARLIER_SESSION}, excluded.session_ms, run_activity.session_ms),
    session_id = iif({_EARLIER_SESSION}, excluded.session_id, run_activity.session_id)
"""

LLM_CALL_COLUMNS = (
    "event_id, ts_ms, source, agent_id, session_key, session_id, run_id, provider, model, call_index, "
    "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, total_tokens, cost_pico, cost_source, "
    "duration_ms, error, call_key, sidechain, cache_write_1h_tokens, context_tokens, branch, speed, "
    "web_searches, inference_geo"
)

# The stored calls of these responses (LlmCall.message_key): a call's key is its response's, or
# that followed by ':' and the request's id.
RESPONSE_CALLS = f"""
SELECT j.value, {LLM_CALL_COLUMNS} FROM json_each(?1) AS j JOIN llm_calls ON call_key = j.value
UNION ALL
SELECT j.value, {LLM_CALL_COLUMNS} FROM json_each(?1) AS j
JOIN llm_calls ON call_key > j.value || ':' AND call_key < j.value || ';'
"""

NAMED_SESSIONS = "SELECT session_id, session_key FROM sessions WHERE session_id IN (SELECT value FROM json_each(?))"

# The run a session was in at a time: the latest begun by then.
RUN_BEGUN_BY = "SELECT run_id FROM runs WHERE session_id = {} AND started_ms <= {} ORDER BY started_ms DESC LIMIT 1"

# A hook's account of a tool call (or a hook-made row being taken over) only fills in what the
# row does not say yet: a transcript's start, end, status and error are never overridden.
FILL_TOOL = """
ON CONFLICT (run_id, tool_call_id) DO UPDATE SET
    tool_name    = coalesce(tool_calls.tool_name, excluded.tool_name),
    agent_id     = coalesce(tool_calls.agent_id, excluded.agent_id),
    session_key  = coalesce(tool_calls.session_key, excluded.session_key),
    status       = CASE WHEN tool_calls.ended_ms IS NULL AND excluded.ended_ms IS NOT NULL
                        THEN excluded.status ELSE tool_calls.status END,
    error        = CASE WHEN tool_calls.ended_ms IS NULL THEN excluded.error ELSE tool_calls.error END,
    started_ms   = coalesce(tool_calls.started_ms, excluded.started_ms),
    ended_ms     = coalesce(tool_calls.ended_ms, excluded.ended_ms),
    duration_ms  = coalesce(tool_calls.duration_ms, excluded.duration_ms),
    file_path    = coalesce(tool_calls.file_path, excluded.file_path),
    exec_command = coalesce(tool_calls.exec_command, excluded.exec_command),
    session_id   = coalesce(tool_calls.session_id, excluded.session_id),
    branch       = coalesce(tool_calls.branch, excluded.branch)
"""

TAKE_OVER_HOOK_ROW = f"""
INSERT INTO tool_calls (run_id, tool_call_id, tool_name, source, agent_id, session_key, status,
                        started_ms, ended_ms, duration_ms, error, file_path, exec_command, exit_code, session_id,
                        branch)
SELECT ?1, tool_call_id, tool_name, ?2, agent_id, session_key, status, started_ms, ended_ms, duration_ms, error,
       file_path, exec_command, exit_code, session_id, branch
FROM tool_calls WHERE run_id = ?3 AND tool_call_id = ?4
{FILL_TOOL}"""

DROP_TOOL_ROW = "DELETE FROM tool_calls WHERE run_id = ? AND tool_call_id = ?"

# A subagent's spawn may be told by several lines: OpenClaw's by its parent's sessions_spawn result and by
# its own transcript's header, a Task's by the call and by a side branch's replay of it read first. Its row
# is what they all say, whatever order they come in: a field one line leaves empty never erases what another
# said, and where two say something the surer account picks.
# - Who spawned it and when (parent key, run, time, and the side branch it was spawned on) come together
#   from one line: the one that names the parent's run, then the earliest. Only the parent's own record of
#   the spawn knows the run, and it is written as the spawn is answered; a child's header knows only its
#   parent's key (from sessions.json) and when the child began. A later line of the same kind repeats the
#   spawn (a replay is written after the call it copies). Ties of time go to the lesser run, then key.
# - What it is (agent, label, mode), field by field: the child's own word (SubagentSpawned.by_child) over
#   its parent's, for it runs as that agent and sessions.json lists it under that label; of two words alike,
#   the lesser value. told_by_child keeps which fields hold the child's word (CHILD_WORDS).
CHILD_WORDS = (("child_agent_id", 1), ("label", 2), ("mode", 4))


def _spawner_rank(row: str) -> str:
    """Of the lines that say who spawned a subagent, the least by this decides (see above)."""
    return (f"({row}.parent_run_id IS NULL, {row}.spawned_ms, coalesce({row}.parent_run_id, ''), "
            f"coalesce({row}.parent_session_key, ''))")


def _word_rank(row: str, column: str, bit: int) -> str:
    """Of the words on what a subagent is, the least by this stays: any before none, the child's first."""
    return f"({row}.{column} IS NULL, ({row}.told_by_child & {bit}) = 0, {row}.{column})"


def spawn_upsert(values: str) -> str:
    """An upsert of a subagent's spawn from ``values`` (a VALUES or a SELECT of its columns): what the spawn
    line (excluded) and the subagent's row say together. A row no spawn was read for yet (its end made
    it) has no spawn time."""
    spawner = f"subagents.spawned_ms IS NULL OR {_spawner_rank('excluded')} < {_spawner_rank('subagents')}"
    sets = [f"{c} = iif({spawner}, coalesce(excluded.{c}, subagents.{c}), coalesce(subagents.{c}, excluded.{c}))"
            for c in ("parent_session_key", "parent_run_id", "spawned_ms")]
    # A branch goes with the parent key its line gave, a main-branch line's none too: it is what moves that key.
    sets.append(f"branch = iif({spawner}, excluded.branch, subagents.branch)")
    words = {c: f"{_word_rank('excluded', c, bit)} < {_word_rank('subagents', c, bit)}" for c, bit in CHILD_WORDS}
    sets += [f"{c} = iif({words[c]}, excluded.{c}, subagents.{c})" for c, _ in CHILD_WORDS]
    told = " | ".join(f"(iif({words[c]}, excluded.told_by_child, subagents.told_by_child) & {bit})"
                      for c, bit in CHILD_WORDS)
    sets = ",\n    ".join([*sets, f"told_by_child = {told}"])
    return f"""
INSERT INTO subagents (child_session_key, parent_session_key, parent_run_id, source, child_agent_id,
                       label, mode, status, spawned_ms, told_by_child, branch)
{values}
ON CONFLICT (child_session_key) DO UPDATE SET
    {sets}
"""

