-- A background Task's result (status async_launched) is written as its subagent starts, and an older
-- agentledger took it for the subagent's end: the subagent, and its session, ended at its launch. Neither
-- did: both are open again, as a read of their lines now leaves them, for the subagent's own end or
-- reconcile to settle. The end that result outranked (a SubagentStop read before it) was not kept.
UPDATE sessions SET status = 'active', end_reason = NULL, ended_ms = NULL
WHERE end_reason = 'subagent' AND session_key IN (
    SELECT child_session_key FROM subagents WHERE source = 'claude-code' AND outcome = 'async_launched');
UPDATE subagents SET status = 'running', ended_ms = NULL, duration_ms = NULL, outcome = NULL, end_rank = 0
WHERE source = 'claude-code' AND outcome = 'async_launched';
