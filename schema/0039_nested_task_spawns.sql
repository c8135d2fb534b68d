-- A Task a subagent started is spawned by that subagent's session (see 0036), which an older agentledger left
-- under its root, with no branch to say so. The Task's call kept the branch it was made on (tool_calls.branch),
-- and the subagent's row the Task it was spawned by: as a spawn key, or as its key until a result named it.
UPDATE subagents SET branch = tc.branch
FROM tool_calls AS tc
WHERE subagents.source = 'claude-code' AND subagents.branch IS NULL
  AND tc.source = 'claude-code' AND tc.branch IS NOT NULL
  -- The call id each key holds, by equality first: one probe of tool_calls_of_claude_code (0024) a subagent,
  -- where the keys alone compared every subagent with every call made on a branch (38 s at 6,700 subagents).
  AND tc.tool_call_id IN (substr(subagents.spawn_key, 28), substr(subagents.child_session_key, 28))
  AND 'agent:claude-code:subagent:' || tc.tool_call_id IN (subagents.spawn_key, subagents.child_session_key);
-- A branch already named is a session: the subagents it spawned are its children now, as the writer moves
-- them when an event names it.
UPDATE subagents SET parent_session_key = s.session_key
FROM sessions AS s
WHERE s.session_id = subagents.branch AND subagents.parent_session_key IS NOT s.session_key;
