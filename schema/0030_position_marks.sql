-- A restored copy of the ledger numbers the commits it makes after the copy was taken as the original
-- numbered its own: a hot view kept at position N could not tell the copy's N from the original's.
-- Every commit now also draws a random mark, kept with the position and with each session instance it
-- changed, so a view names the very commit its sums last changed at (queries.hot_sessions), which no
-- other history of the ledger made. The changes made before share one mark, drawn here: a copy taken
-- before this migration draws its own when it is migrated.
ALTER TABLE ledger_position ADD COLUMN mark TEXT NOT NULL DEFAULT '';
UPDATE ledger_position SET mark = lower(hex(randomblob(8))) WHERE id = 1;
ALTER TABLE session_changes ADD COLUMN mark TEXT NOT NULL DEFAULT '';
UPDATE session_changes SET mark = (SELECT mark FROM ledger_position WHERE id = 1);
