-- OpenClaw telemetry writes a costUsd of 0 beside tokens for a model it could not price (FORMATS.md §2):
-- no free call but an unknown cost, which an older agentledger kept as the log's $0. Its llm.call and
-- usage.snapshot rows become what a read of them now stores for a model the price table does not know
-- (no cost: counted unpriced), refilled into the rollups (db.REFILLS); `agentledger reprice` prices the
-- ones the table knows. Transcripts' zeros beside tokens were always read so.
UPDATE llm_calls SET cost_pico = NULL, cost_source = NULL
WHERE source = 'oc-telemetry' AND cost_pico = 0 AND cost_source = 'log' AND total_tokens > 0;
UPDATE usage_snapshots SET cost_pico = NULL
WHERE cost_pico = 0 AND cost_source = 'log' AND total_tokens > 0;
