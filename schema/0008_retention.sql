-- Retention (ledger/retention.py): how far raw events have been pruned. An event older than the
-- horizon keeps only its key (ts_ms, id) and file: still the guard that makes re-reading its line
-- harmless, without the labels and payload that made the row large. Everything before
-- `events_ms` has been reduced, so each pass starts there instead of rescanning the pruned past.
CREATE TABLE retention (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    events_ms INTEGER NOT NULL
);
INSERT INTO retention (id, events_ms) VALUES (1, -9223372036854775808);
