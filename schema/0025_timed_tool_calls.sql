-- Tool calls per slot and per day that reported a duration: duration_ms sums those alone, so a tool none
-- of whose calls reported one took an unknown time, not none. Filled in place from the rows (a refill
-- would renumber tool_days' rows, whose order says which tools the metrics name first).
ALTER TABLE tool_slots ADD COLUMN timed_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tool_days ADD COLUMN timed_calls INTEGER NOT NULL DEFAULT 0;
UPDATE tool_slots SET timed_calls = t.n
FROM (SELECT s - s % 900000 AS slot_ms, coalesce(agent_id, '') AS agent_id, coalesce(tool_name, '') AS tool_name,
             count(*) AS n
      FROM (SELECT *, coalesce(started_ms, ended_ms) AS s FROM tool_calls)
      WHERE s IS NOT NULL AND duration_ms IS NOT NULL GROUP BY 1, 2, 3) AS t
WHERE tool_slots.slot_ms = t.slot_ms AND tool_slots.agent_id = t.agent_id AND tool_slots.tool_name = t.tool_name;
UPDATE tool_days SET timed_calls = t.n
FROM (SELECT s - s % 86400000 AS slot_ms, coalesce(agent_id, '') AS agent_id, coalesce(tool_name, '') AS tool_name,
             count(*) AS n
      FROM (SELECT *, coalesce(started_ms, ended_ms) AS s FROM tool_calls)
      WHERE s IS NOT NULL AND duration_ms IS NOT NULL GROUP BY 1, 2, 3) AS t
WHERE tool_days.slot_ms = t.slot_ms AND tool_days.agent_id = t.agent_id AND tool_days.tool_name = t.tool_name;
