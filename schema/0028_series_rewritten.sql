-- Spend series are split by where each cost came from, and runs without calls now count their snapshot's
-- cost in them (0027): the highest values `serve` kept of the old series (metric-floors.json) would hold a
-- `log` series at a sum that included every source's costs. A new epoch, as after a reprice, lets them
-- start again from the ledger's sums. A ledger that holds nothing yet has served no series to keep.
UPDATE ledger_position SET repricings = repricings + 1 WHERE id = 1 AND EXISTS (SELECT 1 FROM events);
