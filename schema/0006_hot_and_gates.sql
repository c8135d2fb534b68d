-- Change positions, so a cached view of a session (the daemon's hot store) can tell whether
-- the ledger moved on since it was built: every committed batch takes the next number, and
-- every session instance the batch changed records it.
CREATE TABLE ledger_position (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);
INSERT INTO ledger_position (id, seq) VALUES (1, 0);

CREATE TABLE session_changes (
    session_id TEXT PRIMARY KEY,
    seq        INTEGER NOT NULL
) WITHOUT ROWID;

-- Every gate decision that was not a plain allow, as it was answered.
CREATE TABLE gate_decisions (
    ts_ms       INTEGER NOT NULL,
    gate        TEXT NOT NULL,
    scope       TEXT NOT NULL,
    metric      TEXT NOT NULL,
    decision    TEXT NOT NULL,   -- 'warn' | 'block'
    session_key TEXT,
    agent_id    TEXT,
    tool        TEXT,
    value       REAL NOT NULL,
    limit_value REAL NOT NULL,
    reason      TEXT NOT NULL,
    asked_via   TEXT NOT NULL    -- 'http' | 'claude-code' | ...
);
CREATE INDEX gate_decisions_by_time ON gate_decisions (ts_ms);

-- Decisions per gate and outcome, allows included, so counters survive restarts.
CREATE TABLE gate_decision_counts (
    gate     TEXT NOT NULL,
    decision TEXT NOT NULL,
    count    INTEGER NOT NULL,
    PRIMARY KEY (gate, decision)
) WITHOUT ROWID;
