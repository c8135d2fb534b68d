-- A subagent's end is told twice by OpenClaw: subagent.stop (its requester's view) and
-- subagent.end (the child's, with the time it ended). Whichever arrives first, subagent.end's
-- fields win and subagent.stop's fill what it leaves out: the rank of the surest end written.
ALTER TABLE subagents ADD COLUMN end_rank INTEGER NOT NULL DEFAULT 0;
