-- A run without model calls counts the tokens of the usage snapshot it takes its cost from, by kind, as
-- it counts that cost: a snapshot keeps its usage by kind, not its total alone (NULL: read before this,
-- when only the total was kept).
ALTER TABLE usage_snapshots ADD COLUMN input_tokens INTEGER;
ALTER TABLE usage_snapshots ADD COLUMN output_tokens INTEGER;
ALTER TABLE usage_snapshots ADD COLUMN cache_read_tokens INTEGER;
ALTER TABLE usage_snapshots ADD COLUMN cache_write_tokens INTEGER;

-- The lines of the snapshots kept so far are not read again. A snapshot is written at its run's end, so the
-- run.end of its session that says the same total, within the span a snapshot of it may have (see
-- verify.SNAPSHOT_OF_RUN), says its usage by kind; a snapshot no end matches keeps its total alone.
UPDATE usage_snapshots
SET input_tokens = r.input_tokens, output_tokens = r.output_tokens, cache_read_tokens = r.cache_read_tokens,
    cache_write_tokens = r.cache_write_tokens
FROM runs AS r
WHERE r.session_id = usage_snapshots.session_id AND usage_snapshots.total_tokens > 0
  AND r.total_tokens = usage_snapshots.total_tokens AND r.input_tokens IS NOT NULL
  AND usage_snapshots.ts_ms BETWEEN coalesce(r.started_ms, r.ended_ms - r.duration_ms, r.ended_ms)
                                AND coalesce(r.ended_ms, r.started_ms) + 60000;

-- Each session's fallbacks carry those tokens beside their cost: refilled from the rows by the migration
-- (db.REFILLS), as the hot views, `sessions` and /metrics read them there.
ALTER TABLE session_fallback_costs ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_fallback_costs ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_fallback_costs ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_fallback_costs ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_fallback_costs ADD COLUMN total_tokens INTEGER NOT NULL DEFAULT 0;
