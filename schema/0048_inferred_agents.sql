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

-- The rows an older agentledger left with none are found so once the migrations are done, by the rules the
-- decoder and the writer follow (db.SETTLES, agents.settle_inferred_agents).
