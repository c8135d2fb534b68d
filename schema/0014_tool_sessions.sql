-- A tool call counts in its own session: the one its line names (`session_id`), or, for a call
-- made on a side branch (`branch`, as on llm_calls), the branch's session once an event names
-- it. Rows from before this column fall back to their run's session, as they were counted.
-- `session_key` stays what the line said, so that a hook's account of the call still finds it.
ALTER TABLE tool_calls ADD COLUMN session_id TEXT;
ALTER TABLE tool_calls ADD COLUMN branch TEXT;
CREATE INDEX tool_calls_by_branch ON tool_calls (branch) WHERE branch IS NOT NULL;
