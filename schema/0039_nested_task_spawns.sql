-- A Task a subagent started is spawned by that subagent's session (see 0036), which an older agentledger left
-- under its root, with no branch to say so. The Task's call kept the branch it was made on (tool_calls.branch),
-- and the subagent's row the Task it was spawned by: as a spawn key, or as its key until a result named it.
UPDATE subagents SET branch = tc.branch
FROM tool_calls AS tc
WHERE subagents.source = 'claude-code' AND subagents.branch IS NULL
  AND tc.source = 'claude-code' AND tc.branch IS NOT NULL
  AND 'agent:claude-code:subagent:' || tc.tool_call_id IN (subagents.spawn_key, subagents.child_session_key);
-- A branch already named is a session: the subagents it spawned are its children now, as the writer moves
-- them when an event names it.
UPDATE subagents SET parent_session_key = s.session_key
FROM sessions AS s
WHERE s.session_id = subagents.branch AND subagents.parent_session_key IS NOT s.session_key;
