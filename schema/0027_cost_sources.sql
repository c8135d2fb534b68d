-- Spend per provider × model × where its cost came from (llm_calls.cost_source: 'log', 'transcript' or
-- 'priced'), with the usage-snapshot costs of runs without model calls as the log's: what /metrics serves
-- as agentledger_cost_usd_total{provider,model,cost_source}, read at every scrape without walking the runs.
-- Kept by the writer in the same transaction as the other rollups; `reprice` moves a call's cost between
-- its sources. Filled from the rows by the migration (db.REFILLS).
CREATE TABLE cost_source_totals (
    provider    TEXT NOT NULL,
    model       TEXT NOT NULL,
    cost_source TEXT NOT NULL,
    cost_pico   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (provider, model, cost_source)
) WITHOUT ROWID;

-- The snapshot fallback costs of each session instance's runs without model calls, by their provider and
-- model: what a batch takes out of cost_source_totals before it adds what the sessions it changed now cost.
CREATE TABLE session_fallback_costs (
    session_id TEXT NOT NULL,
    provider   TEXT NOT NULL,
    model      TEXT NOT NULL,
    cost_pico  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, provider, model)
) WITHOUT ROWID;
