-- A usage.snapshot (which names no run) belongs to the run of its session begun last before it:
-- finding that run is a range probe of this index. It serves every lookup of a session's runs
-- the index it replaces did.
CREATE INDEX IF NOT EXISTS runs_by_session_start ON runs (session_id, started_ms);
DROP INDEX IF EXISTS runs_by_session;
