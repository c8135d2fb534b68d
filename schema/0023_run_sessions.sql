-- A run's session as its events say, whichever kind names both: the session of the earliest event of
-- the run that names one (of two at once, the lesser id). A tool call names no session of its own
-- (OpenClaw's tool.* carry none), so it counts in its run's: the runs row's when a run.start or run.end
-- made one, else this. A log that begins mid-run, the run then killed, has no runs row for that run,
-- but its model calls say whose run it is.
ALTER TABLE run_activity ADD COLUMN session_id TEXT;
ALTER TABLE run_activity ADD COLUMN session_ms INTEGER;  -- the time of the event that said so
-- What the ledger holds of the events that name both: runs and model calls.
UPDATE run_activity SET (session_id, session_ms) = (
    SELECT session_id, ts FROM (
        SELECT session_id, coalesce(started_ms, ended_ms) AS ts FROM runs
        WHERE run_id = run_activity.run_id AND session_id IS NOT NULL
        UNION ALL
        SELECT session_id, ts_ms FROM llm_calls WHERE run_id = run_activity.run_id AND session_id IS NOT NULL
    ) WHERE ts IS NOT NULL ORDER BY ts, session_id LIMIT 1);
-- A session's span reaches the events of its runs (its tool calls') through run_activity: now those of
-- the runs known only this way too. (The migration refills what is derived from the sessions' spans.)
UPDATE sessions SET first_ms = min(sessions.first_ms, w.first_ms), last_ms = max(sessions.last_ms, w.last_ms)
FROM (SELECT a.session_id, min(a.first_ms) AS first_ms, max(a.last_ms) AS last_ms
      FROM run_activity AS a LEFT JOIN runs AS r ON r.run_id = a.run_id
      WHERE a.session_id IS NOT NULL AND r.session_id IS NULL GROUP BY a.session_id) AS w
WHERE sessions.session_id = w.session_id;
-- A session lists the tool calls it counts: found by index through its runs, these among them.
CREATE INDEX run_activity_by_session ON run_activity (session_id) WHERE session_id IS NOT NULL;
