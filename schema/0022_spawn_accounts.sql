-- A subagent's spawn is told twice by OpenClaw transcripts: by its parent's sessions_spawn result and by
-- the child's own transcript header. Whichever is read first, the row holds what both say (see the
-- writer's _SUBAGENT_SPAWNED): the child's word on what it is wins over its parent's, so the row keeps
-- which of its fields hold the child's word (1 child_agent_id, 2 label, 4 mode).
ALTER TABLE subagents ADD COLUMN told_by_child INTEGER NOT NULL DEFAULT 0;
