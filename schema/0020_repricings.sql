-- How many `reprice` runs changed a cost in this ledger. Repricing moves calls from one metric series
-- to another (unpriced to priced), so the highest values the daemon served (metrics.CounterFloors,
-- kept across restarts) stand only while this count is what it was when they were served.
ALTER TABLE ledger_position ADD COLUMN repricings INTEGER NOT NULL DEFAULT 0;
