-- Session lifecycle: active → (suspended → active)* → ended, or interrupted when a session
-- suspended by a gateway restart never came back. A restart is seen in one agent's log: its
-- `seq` drops back, or it falls silent for longer than the idle time.
ALTER TABLE sessions ADD COLUMN end_reason TEXT;  -- end (session.end) | reset (a successor resumed from it) | subagent
ALTER TABLE sessions ADD COLUMN log_id INTEGER;   -- the log (log_clocks.id) it was last seen in
CREATE INDEX sessions_open ON sessions (log_id) WHERE status = 'active';
CREATE INDEX sessions_suspended ON sessions (session_id) WHERE status = 'suspended';
CREATE INDEX sessions_by_resumed ON sessions (resumed_from) WHERE resumed_from IS NOT NULL;

UPDATE sessions SET end_reason = 'end' WHERE status = 'ended';
UPDATE sessions SET status = 'ended', end_reason = 'reset',
    ended_ms = coalesce(ended_ms, (SELECT min(coalesce(n.started_ms, n.first_ms)) FROM sessions AS n
                                   WHERE n.resumed_from = sessions.session_id))
WHERE session_id IN (SELECT resumed_from FROM sessions WHERE resumed_from IS NOT NULL);

-- Where each log was read up to, in the producer's own numbering: what restart detection
-- compares the next event with. Written in the batch's transaction, so it survives our restarts.
CREATE TABLE log_clocks (
    id       INTEGER PRIMARY KEY,
    log      TEXT NOT NULL UNIQUE,   -- the directory holding one agent's log files
    last_seq INTEGER,
    last_ms  INTEGER NOT NULL
);

CREATE TABLE gateway_restarts (
    log_id  INTEGER NOT NULL,
    ts_ms   INTEGER NOT NULL,        -- the first event after it
    last_ms INTEGER NOT NULL,        -- the last event before it: where open sessions were suspended
    cause   TEXT NOT NULL,           -- seq | idle
    PRIMARY KEY (log_id, ts_ms)
) WITHOUT ROWID;

CREATE TABLE session_suspensions (
    session_id TEXT NOT NULL,
    from_ms    INTEGER NOT NULL,
    until_ms   INTEGER,              -- its next event, its end or its reset; NULL while away
    cause      TEXT NOT NULL,        -- seq | idle
    PRIMARY KEY (session_id, from_ms)
) WITHOUT ROWID;

-- sessionKey ↔ sessionId with validity intervals: an instance holds its key from its start
-- until the next instance of the key starts. Derived from sessions (see verify.py).
CREATE TABLE session_ids (
    session_id     TEXT PRIMARY KEY,
    session_key    TEXT NOT NULL,
    valid_from_ms  INTEGER NOT NULL,
    valid_until_ms INTEGER           -- NULL: the key's latest instance
) WITHOUT ROWID;
CREATE INDEX session_ids_by_key ON session_ids (session_key, valid_from_ms);

-- One row per compaction: its start and end events paired, attributed to a session instance
-- through session_ids. Derived from the compactions events (see verify.py).
CREATE TABLE compaction_pairs (
    session_key      TEXT NOT NULL,
    started_ms       INTEGER,
    ended_ms         INTEGER,
    session_id       TEXT,
    agent_id         TEXT,
    messages_before  INTEGER,
    messages_after   INTEGER,
    compacting_count INTEGER,
    compacted_count  INTEGER,
    tokens_before    INTEGER,
    tokens_after     INTEGER         -- reported by the end event, else the context at the next model call
);
CREATE INDEX compaction_pairs_by_key ON compaction_pairs (session_key, coalesce(started_ms, ended_ms));

-- Context window in use at each model call: a compaction's size after it.
ALTER TABLE llm_calls ADD COLUMN context_tokens INTEGER;
-- Where a key's instances change, the mapping is rebuilt from there on, not from the key's first.
CREATE INDEX sessions_by_key_start ON sessions (session_key, coalesce(started_ms, first_ms));
