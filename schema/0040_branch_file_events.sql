-- An older agentledger filed a compaction, and an API error, read in a subagent's own transcript
-- (<sessionId>/subagents/agent-<agentId>.jsonl) under its parent session. The event of each still names its
-- file (see 0037): the compaction is the branch's at once, keyed by the session the branch becomes; the API
-- error is a call of the branch, counted in its session once one is named, as a read of it now leaves them.
CREATE TEMP TABLE branch_files AS
WITH branches AS (
    SELECT DISTINCT branch, '/' || replace(branch, '/', '/subagents/agent-') || '.jsonl' AS tail,
           'agent-' || substr(branch, instr(branch, '/') + 1) || '.jsonl' AS name
    FROM llm_calls WHERE branch IS NOT NULL
),
-- Files meet branches of their own name first, as in 0037.
file_names AS MATERIALIZED (
    SELECT id, path, substr(path, length(rtrim(path, replace(path, '/', ''))) + 1) AS name
    FROM files WHERE source = 'claude-code'
)
SELECT f.id, b.branch FROM branches AS b
JOIN file_names AS f ON f.name = b.name AND substr(f.path, -length(b.tail)) = b.tail;

UPDATE compactions SET session_key = 'agent:claude-code:subagent:' || bf.branch
FROM events AS e JOIN temp.branch_files AS bf ON bf.id = e.file_id
WHERE compactions.source = 'claude-code' AND e.ts_ms = compactions.ts_ms AND e.id = compactions.event_id;
UPDATE events SET session_key = 'agent:claude-code:subagent:' || bf.branch
FROM temp.branch_files AS bf
WHERE events.kind = 'compaction' AND bf.id = events.file_id;

UPDATE llm_calls SET branch = bf.branch, sidechain = 1, session_id = coalesce(s.session_id, llm_calls.session_id),
                     session_key = coalesce(s.session_key, llm_calls.session_key)
FROM events AS e JOIN temp.branch_files AS bf ON bf.id = e.file_id LEFT JOIN sessions AS s ON s.session_id = bf.branch
WHERE llm_calls.source = 'claude-code' AND llm_calls.branch IS NULL AND llm_calls.error IS NOT NULL
  AND e.ts_ms = llm_calls.ts_ms AND e.id = llm_calls.event_id;
DROP TABLE temp.branch_files;
