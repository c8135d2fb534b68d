-- A model call or tool call whose line names no agent (OpenClaw's llm.call never does; a session key such as
-- `global` names none either) is its run's agent's, else its session's, else that of the agent whose folder
-- (`agents/<id>/telemetry/`) its file is in: agent_inferred says the row's agent is so found, and so follows the
-- agent its run or session is first given later (ledger/agents.py). An older agentledger left such rows with
-- none: they are found so now, refilled into the rollups (db.REFILLS), as a read of their lines now leaves them.
ALTER TABLE llm_calls ADD COLUMN agent_inferred INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tool_calls ADD COLUMN agent_inferred INTEGER NOT NULL DEFAULT 0;
-- The calls a run's or a session's first named agent takes.
CREATE INDEX llm_calls_inferred_by_run ON llm_calls (run_id) WHERE agent_inferred;
CREATE INDEX llm_calls_inferred_by_session ON llm_calls (session_id) WHERE agent_inferred;

-- The agent whose folder each telemetry file lies in, by its path: <state>/agents/<id>/telemetry/<name>. A path's
-- folder is what its last '/' ends (rtrim strips the name back to it).
CREATE TEMP TABLE folder_agents AS
WITH d AS (SELECT id, substr(path, 1, length(rtrim(path, replace(path, '/', ''))) - 1) AS dir
           FROM files WHERE source = 'oc-telemetry'),
a AS (SELECT id, substr(dir, 1, length(dir) - length('/telemetry')) AS agent_dir FROM d WHERE dir GLOB '*/telemetry'),
n AS (SELECT id, agent_dir, substr(agent_dir, length(rtrim(agent_dir, replace(agent_dir, '/', ''))) + 1) AS agent
      FROM a)
SELECT id AS file_id, agent FROM n
WHERE agent NOT IN ('', 'unknown') AND substr(agent_dir, 1, length(agent_dir) - length(agent) - 1) GLOB '*/agents';

-- The calls whose lines named no agent: their folder's, where their event names its file (retention keeps it). A
-- tool call's row names no event: its run's or its session's agent is all it takes here.
UPDATE llm_calls SET agent_inferred = 1, agent_id = (
    SELECT fa.agent FROM events AS e JOIN temp.folder_agents AS fa USING (file_id)
    WHERE e.ts_ms = llm_calls.ts_ms AND e.id = llm_calls.event_id)
WHERE agent_id IS NULL;
UPDATE tool_calls SET agent_inferred = 1 WHERE agent_id IS NULL;
UPDATE compactions SET agent_id = (
    SELECT fa.agent FROM events AS e JOIN temp.folder_agents AS fa USING (file_id)
    WHERE e.ts_ms = compactions.ts_ms AND e.id = compactions.event_id)
WHERE agent_id IS NULL;
DROP TABLE temp.folder_agents;

-- Then their run's agent, else their session's, wherever one is known: the writer's rule, applied once the
-- migrations are done (db.SETTLES, agents.settle_inferred_agents).
