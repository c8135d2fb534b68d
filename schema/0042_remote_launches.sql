-- A Task that launched its subagent to run remotely is answered at once (status remote_launched), and an older
-- agentledger took that answer for the subagent's end, as one before 0038 took a background Task's: the subagent,
-- and its session, are open again, as a read of their lines now leaves them, to end as a background Task's
-- subagent does.
UPDATE sessions SET status = 'active', end_reason = NULL, ended_ms = NULL
WHERE end_reason = 'subagent' AND session_key IN (
    SELECT child_session_key FROM subagents WHERE source = 'claude-code' AND outcome = 'remote_launched');
UPDATE subagents SET status = 'running', ended_ms = NULL, duration_ms = NULL, outcome = NULL, end_rank = 0
WHERE source = 'claude-code' AND outcome = 'remote_launched';
