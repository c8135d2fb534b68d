-- Runs, tool calls and subagents still open: what reconciliation looks at every minute.
-- Partial indexes stay as small as the set of open things, however large the ledger.
CREATE INDEX runs_open ON runs (run_id) WHERE status = 'running';
CREATE INDEX tool_calls_open ON tool_calls (run_id, tool_call_id) WHERE status = 'running';
CREATE INDEX subagents_open ON subagents (child_session_key) WHERE status = 'running';
