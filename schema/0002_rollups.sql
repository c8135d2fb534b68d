-- Materialized rollups, kept by the writer in the same transaction as the base rows, so a
-- rollup always equals a recomputation from the rows (`agentledger verify` proves it).
-- For every entity a batch touches the writer subtracts what its old row contributed and
-- adds what its new row does: an end before its start, a late session id, a changed
-- status all land in the right place. (Row triggers did the same, five times slower.)

-- Per session instance.
CREATE TABLE session_totals (
    session_id         TEXT PRIMARY KEY,
    llm_calls          INTEGER NOT NULL DEFAULT 0,  -- every llm.call row, errors included
    llm_errors         INTEGER NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens       INTEGER NOT NULL DEFAULT 0,
    cost_pico          INTEGER NOT NULL DEFAULT 0,
    unpriced_calls     INTEGER NOT NULL DEFAULT 0,
    runs               INTEGER NOT NULL DEFAULT 0,
    tool_calls         INTEGER NOT NULL DEFAULT 0,
    tool_errors        INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Tool calls per run: how a run's tools reach its session once the run names it.
CREATE TABLE run_tool_totals (
    run_id      TEXT PRIMARY KEY,
    tool_calls  INTEGER NOT NULL DEFAULT 0,
    tool_errors INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- LLM usage and runs per 15-minute slot (UTC) × agent × provider × model. Every real time
-- zone offset is a multiple of 15 minutes, so days in any zone are exact sums of slots.
CREATE TABLE usage_slots (
    slot_ms            INTEGER NOT NULL,
    agent_id           TEXT NOT NULL,           -- '' when unknown
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    llm_calls          INTEGER NOT NULL DEFAULT 0,
    llm_errors         INTEGER NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens       INTEGER NOT NULL DEFAULT 0,
    cost_pico          INTEGER NOT NULL DEFAULT 0,
    unpriced_calls     INTEGER NOT NULL DEFAULT 0,
    runs               INTEGER NOT NULL DEFAULT 0,  -- by start (else end) time
    runs_running       INTEGER NOT NULL DEFAULT 0,
    runs_ok            INTEGER NOT NULL DEFAULT 0,
    runs_error         INTEGER NOT NULL DEFAULT 0,
    runs_interrupted   INTEGER NOT NULL DEFAULT 0,
    sessions           INTEGER NOT NULL DEFAULT 0,  -- by start (else first event); provider = model = ''
    subagent_sessions  INTEGER NOT NULL DEFAULT 0,
    compactions        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (slot_ms, agent_id, provider, model)
) WITHOUT ROWID;

-- Tool calls per 15-minute slot (of the call's start, else its end) × agent × tool.
CREATE TABLE tool_slots (
    slot_ms     INTEGER NOT NULL,
    agent_id    TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    calls       INTEGER NOT NULL DEFAULT 0,
    errors      INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER NOT NULL DEFAULT 0,      -- sum over calls that reported one
    PRIMARY KEY (slot_ms, agent_id, tool_name)
) WITHOUT ROWID;

CREATE INDEX sessions_by_last ON sessions (last_ms);

-- LLM usage per run (a run with none falls back to its usage snapshot's cost) and per
-- session × provider × model (a session's cost by model).
CREATE TABLE run_llm_totals (
    run_id             TEXT NOT NULL,
    llm_calls          INTEGER NOT NULL DEFAULT 0,
    llm_errors         INTEGER NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens       INTEGER NOT NULL DEFAULT 0,
    cost_pico          INTEGER NOT NULL DEFAULT 0,
    unpriced_calls     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id)
) WITHOUT ROWID;

CREATE TABLE session_model_totals (
    session_id         TEXT NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    llm_calls          INTEGER NOT NULL DEFAULT 0,
    llm_errors         INTEGER NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens       INTEGER NOT NULL DEFAULT 0,
    cost_pico          INTEGER NOT NULL DEFAULT 0,
    unpriced_calls     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, provider, model)
) WITHOUT ROWID;

-- Lists ordered by time. (Indexes keyed by random ids are left out on purpose: each costs
-- several microseconds per ingested event.)

CREATE INDEX compactions_by_key ON compactions (session_key, ts_ms);
CREATE INDEX subagents_by_spawn ON subagents (spawned_ms);
-- Time-ordered, so cheap to keep: the partial 15-minute slots at the edges of a query
-- window are summed from the base rows through these.
CREATE INDEX llm_calls_by_ts ON llm_calls (ts_ms);
CREATE INDEX runs_by_time ON runs (coalesce(started_ms, ended_ms));
CREATE INDEX tool_calls_by_time ON tool_calls (coalesce(started_ms, ended_ms));
-- One run's model calls, for `run ID` and `timeline`.
CREATE INDEX llm_calls_by_run ON llm_calls (run_id);
CREATE INDEX sessions_by_start ON sessions (coalesce(started_ms, first_ms));

-- Runs with no LLM call (yet): the only ones whose usage snapshot may stand in for cost.
CREATE TABLE runs_without_calls (
    run_id  TEXT PRIMARY KEY,
    present INTEGER NOT NULL DEFAULT 1
) WITHOUT ROWID;

