-- A run without model calls whose usage snapshot has tokens and no cost counts as one unpriced call, as a
-- call without a cost does: each session's fallbacks keep how many such runs they hold, refilled from the
-- rows by the migration (db.REFILLS).
ALTER TABLE session_fallback_costs ADD COLUMN unpriced_calls INTEGER NOT NULL DEFAULT 0;
