-- Subagents spawned per slot and per day, so usage counts them without scanning them.
-- (The migration refills both tables from the rows once the columns exist.)
ALTER TABLE usage_slots ADD COLUMN subagents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_days ADD COLUMN subagents INTEGER NOT NULL DEFAULT 0;
