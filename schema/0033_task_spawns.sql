-- A Task subagent's row names the Task whose spawn it holds (that spawn's provisional key), once something
-- says which Task it is: the Task's result, or its SubagentStart hook when the session had one Task that
-- may be it. A spawn line read after that goes to the child's row, never makes a second one.
ALTER TABLE subagents ADD COLUMN spawn_key TEXT;
CREATE INDEX subagents_by_spawn_key ON subagents (spawn_key) WHERE spawn_key IS NOT NULL;
