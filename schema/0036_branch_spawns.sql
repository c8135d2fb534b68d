-- A Task started on a side branch (a subagent's own Task) is spawned by the branch's session once an
-- event names it, as the branch's calls are counted there (llm_calls.branch); until then, and for
-- a branch never named, by the session whose line it is. `branch` is the branch of the line that says
-- who spawned the subagent. Rows from before this column keep the parent they were given.
ALTER TABLE subagents ADD COLUMN branch TEXT;
CREATE INDEX subagents_by_branch ON subagents (branch) WHERE branch IS NOT NULL;
