-- The usage and tool rollups again per UTC day (slot_ms = the day's start), so a long window
-- reads whole days, then 15-minute slots for its partial days, then rows for its partial
-- slots: query time does not grow with history. Filled from the slots they sum.
CREATE TABLE usage_days AS SELECT * FROM usage_slots WHERE 0;
CREATE UNIQUE INDEX usage_days_key ON usage_days (slot_ms, agent_id, provider, model);
CREATE TABLE tool_days AS SELECT * FROM tool_slots WHERE 0;
CREATE UNIQUE INDEX tool_days_key ON tool_days (slot_ms, agent_id, tool_name);

INSERT INTO usage_days
SELECT slot_ms - slot_ms % 86400000, agent_id, provider, model, sum(llm_calls), sum(llm_errors), sum(input_tokens),
       sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens), sum(total_tokens), sum(cost_pico),
       sum(unpriced_calls), sum(runs), sum(runs_running), sum(runs_ok), sum(runs_error), sum(runs_interrupted),
       sum(sessions), sum(subagent_sessions), sum(compactions)
FROM usage_slots GROUP BY 1, 2, 3, 4;

INSERT INTO tool_days
SELECT slot_ms - slot_ms % 86400000, agent_id, tool_name, sum(calls), sum(errors), sum(duration_ms)
FROM tool_slots GROUP BY 1, 2, 3;
