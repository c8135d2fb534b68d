-- A random name for this ledger, drawn once when it is created. Change positions start again at 1
-- in every ledger, so a cached view (the daemon's hot store) records the ledger it was read from
-- too: one read from a ledger since deleted and built again is not taken for this one's.
CREATE TABLE ledger_identity (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    ledger_id TEXT NOT NULL
);
INSERT INTO ledger_identity (id, ledger_id) VALUES (1, lower(hex(randomblob(16))));
