-- Transcript sources. Claude Code writes one line per content block of a model response,
-- each repeating the response's id with a growing usage snapshot: the ledger keeps one
-- llm_calls row per call key and replaces it when a better line of the same call arrives.
ALTER TABLE llm_calls ADD COLUMN call_key TEXT;
ALTER TABLE llm_calls ADD COLUMN sidechain INTEGER NOT NULL DEFAULT 0;
-- Cache writes kept for an hour cost more than five-minute ones: kept apart so repricing can tell.
ALTER TABLE llm_calls ADD COLUMN cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX llm_calls_by_call_key ON llm_calls (call_key) WHERE call_key IS NOT NULL;
-- Calls whose cost was priced here (or could not be): what `agentledger reprice` revisits.
CREATE INDEX llm_calls_priced ON llm_calls (id) WHERE cost_source = 'priced' OR cost_pico IS NULL;
-- An exec that exited non-zero is not a failed tool call to its producer; its status is kept.
ALTER TABLE tool_calls ADD COLUMN exit_code INTEGER;
