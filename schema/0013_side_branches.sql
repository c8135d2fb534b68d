-- Side branches of a session (Claude Code's Task subagents and /btw questions): a call made on
-- one names the session the branch would be (`branch`). Once any event names that session (a
-- Task's result, a SubagentStart hook) the branch's calls are that session's, whichever was read
-- first; until then, and for branches never named, they stay the session's that made them.
ALTER TABLE llm_calls ADD COLUMN branch TEXT;
CREATE INDEX llm_calls_by_branch ON llm_calls (branch) WHERE branch IS NOT NULL;
