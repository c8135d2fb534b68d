-- A usage snapshot that carries tokens and no cost is priced here from its tokens, as a model call is
-- ('priced'; 'log': the cost the log carried, or none). The run it stands for then counts that cost, and
-- /metrics counts it under cost_source 'priced': each session's fallbacks keep how much of their cost was
-- priced here. No snapshot was priced before this, so there is nothing to refill; `agentledger reprice`
-- prices the ones read before.
ALTER TABLE usage_snapshots ADD COLUMN cost_source TEXT NOT NULL DEFAULT 'log';
ALTER TABLE session_fallback_costs ADD COLUMN priced_pico INTEGER NOT NULL DEFAULT 0;
