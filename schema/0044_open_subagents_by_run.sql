-- The running subagents of a run: reconciliation asks, for every open run and open tool call,
-- whether a child it spawned still shows life. Keyed by the child, subagents_open could only
-- answer by reading every running subagent for each of them.
CREATE INDEX subagents_open_by_run ON subagents (parent_run_id) WHERE status = 'running';
