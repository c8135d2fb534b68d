-- An older agentledger ended a Claude Code turn at its last answer however that answer went, and left the
-- subagent of a Task refused before it ran open. The rows hold what the writer's rules need to end them as a
-- read of their lines now does: those rules run once this schema is in place (db.SETTLES), stated only once.
SELECT 1;
