-- A Claude Code tool call answered by a gate counts from its answer until the ledger holds it: whether a
-- transcript told it already is looked up by its id (run_id is not known to the hook).
CREATE INDEX tool_calls_of_claude_code ON tool_calls (tool_call_id) WHERE source = 'claude-code';
