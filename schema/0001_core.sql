-- The core ledger: tailed files with their checkpoints, every event seen, and the
-- entities rebuilt from them. Costs are integer pico-USD (exact sums).

CREATE TABLE files (
    id            INTEGER PRIMARY KEY,
    source        TEXT    NOT NULL,           -- input format
    root          TEXT    NOT NULL,           -- the configured root it was found under
    path          TEXT    NOT NULL,           -- where it was last seen
    fingerprint   BLOB    NOT NULL,           -- hash of its first complete line
    dev           INTEGER NOT NULL,
    ino           INTEGER NOT NULL,
    offset        INTEGER NOT NULL DEFAULT 0, -- bytes indexed; always on a line boundary
    lines         INTEGER NOT NULL DEFAULT 0, -- complete lines indexed
    size          INTEGER NOT NULL DEFAULT 0, -- size when last seen
    status        TEXT    NOT NULL DEFAULT 'live', -- live | rotated | gone | lost | truncated
    lost_bytes    INTEGER,                    -- unread bytes when it vanished (NULL: unknown)
    first_seen_ms INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL
);
CREATE INDEX files_by_fingerprint ON files (source, fingerprint);

CREATE TABLE file_events (
    id      INTEGER PRIMARY KEY,
    ts_ms   INTEGER NOT NULL,
    file_id INTEGER,
    path    TEXT    NOT NULL,
    event   TEXT    NOT NULL,                 -- rotate | truncate | lost | copy | reuse
    bytes   INTEGER,
    detail  TEXT
);

CREATE TABLE rejects (
    id      INTEGER PRIMARY KEY,
    ts_ms   INTEGER NOT NULL,                 -- when it was read
    file_id INTEGER NOT NULL,
    path    TEXT    NOT NULL,
    offset  INTEGER NOT NULL,
    length  INTEGER NOT NULL,
    reason  TEXT    NOT NULL,
    head    BLOB    NOT NULL,                 -- first bytes, for a human to look at
    UNIQUE (file_id, offset)
);

-- One row per distinct event ever indexed: the idempotency guard. Keyed by time first so
-- that inserts land near the end of the tree (a random 64-bit key alone scatters every
-- batch across the whole table, about ten times slower). Unknown kinds keep their raw
-- line so that a later version can decode them.
CREATE TABLE events (
    ts_ms       INTEGER NOT NULL,
    id          INTEGER NOT NULL,             -- 64-bit event id
    file_id     INTEGER NOT NULL,
    offset      INTEGER NOT NULL,
    kind        TEXT    NOT NULL,
    agent_id    TEXT,
    session_key TEXT,
    raw         BLOB,
    PRIMARY KEY (ts_ms, id)
) WITHOUT ROWID;

CREATE TABLE sessions (
    session_id    TEXT PRIMARY KEY,
    session_key   TEXT,                       -- learnt from any event carrying both ids
    agent_id      TEXT,
    source        TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'active', -- active | ended
    started_ms    INTEGER,                    -- session.start
    ended_ms      INTEGER,                    -- session.end
    resumed_from  TEXT,
    message_count INTEGER,
    duration_ms   INTEGER,
    first_ms      INTEGER NOT NULL,           -- first event of this session instance
    last_ms       INTEGER NOT NULL
);
CREATE INDEX sessions_by_key ON sessions (session_key);

CREATE TABLE runs (
    run_id         TEXT PRIMARY KEY,
    session_key    TEXT,
    session_id     TEXT,
    agent_id       TEXT,
    source         TEXT NOT NULL,
    model          TEXT,
    provider       TEXT,
    status         TEXT NOT NULL,             -- running | ok | error
    started_ms     INTEGER,
    ended_ms       INTEGER,
    duration_ms    INTEGER,
    stop_reason    TEXT,
    error          TEXT,
    is_heartbeat   INTEGER NOT NULL DEFAULT 0,
    is_followup    INTEGER NOT NULL DEFAULT 0,
    origin_channel TEXT,
    tool_call_count INTEGER,
    input_tokens   INTEGER,                   -- run.end usage (NULL until it ends)
    output_tokens  INTEGER,
    cache_read_tokens  INTEGER,
    cache_write_tokens INTEGER,
    total_tokens   INTEGER
);
CREATE INDEX runs_by_session ON runs (session_id);

-- First and last event of each run, whatever kind carried its id (tool events carry no
-- sessionId, so a session's activity span reaches them only through here).
CREATE TABLE run_activity (
    run_id   TEXT PRIMARY KEY,
    first_ms INTEGER NOT NULL,
    last_ms  INTEGER NOT NULL
) WITHOUT ROWID;

-- Fact tables append in arrival order; the events table already guarantees each
-- event id is applied once.
CREATE TABLE llm_calls (
    id                 INTEGER PRIMARY KEY,
    event_id           INTEGER NOT NULL,
    ts_ms              INTEGER NOT NULL,
    source             TEXT NOT NULL,
    agent_id           TEXT,
    session_key        TEXT,
    session_id         TEXT,
    run_id             TEXT,
    provider           TEXT,
    model              TEXT,
    call_index         INTEGER,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    total_tokens       INTEGER NOT NULL,
    cost_pico          INTEGER,               -- NULL: no cost known (unpriced)
    cost_source        TEXT,
    duration_ms        INTEGER,
    error              TEXT
);

CREATE TABLE usage_snapshots (
    id                 INTEGER PRIMARY KEY,
    event_id           INTEGER NOT NULL,
    ts_ms              INTEGER NOT NULL,
    session_key        TEXT,
    session_id         TEXT,
    provider           TEXT,
    model              TEXT,
    total_tokens       INTEGER NOT NULL,
    cost_pico          INTEGER
);
CREATE INDEX usage_snapshots_by_session ON usage_snapshots (session_id, ts_ms);

CREATE TABLE tool_calls (
    run_id       TEXT NOT NULL,               -- '' when the event carried none
    tool_call_id TEXT NOT NULL,
    tool_name    TEXT,
    source       TEXT NOT NULL,
    agent_id     TEXT,
    session_key  TEXT,
    status       TEXT NOT NULL,               -- running | ok | error
    started_ms   INTEGER,
    ended_ms     INTEGER,
    duration_ms  INTEGER,
    error        TEXT,
    file_path    TEXT,
    exec_command TEXT,
    PRIMARY KEY (run_id, tool_call_id)
) WITHOUT ROWID;

CREATE TABLE subagents (
    child_session_key  TEXT PRIMARY KEY,
    parent_session_key TEXT,
    parent_run_id      TEXT,
    source             TEXT NOT NULL,
    child_agent_id     TEXT,
    label              TEXT,
    mode               TEXT,
    status             TEXT NOT NULL,         -- running | ended
    spawned_ms         INTEGER,
    ended_ms           INTEGER,
    duration_ms        INTEGER,
    outcome            TEXT,
    reason             TEXT,
    model              TEXT
);
CREATE INDEX subagents_by_parent ON subagents (parent_session_key);

CREATE TABLE compactions (
    id               INTEGER PRIMARY KEY,
    event_id         INTEGER NOT NULL,
    ts_ms            INTEGER NOT NULL,
    phase            TEXT NOT NULL,           -- start | end
    source           TEXT NOT NULL,
    agent_id         TEXT,
    session_key      TEXT,
    message_count    INTEGER,
    compacting_count INTEGER,
    token_count      INTEGER,
    compacted_count  INTEGER
);

CREATE TABLE messages (
    id          INTEGER PRIMARY KEY,
    event_id    INTEGER NOT NULL,
    ts_ms       INTEGER NOT NULL,
    direction   TEXT NOT NULL,
    source      TEXT NOT NULL,
    session_key TEXT,
    channel     TEXT,
    peer        TEXT,
    preview     TEXT,
    success     INTEGER,
    error       TEXT
);
