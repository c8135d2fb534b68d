-- The times of the model-call lines read on a side branch before anything named it a session (see 0013).
-- A read after the naming puts every such line in the child session's span; a read before keeps of a call
-- only its row, dated by one line (a streamed response's best, writer._keyed_calls) or by none (a replay
-- of a main-branch call). The child takes the span of all of them when it is named, whatever the order.
CREATE TABLE branch_spans (
    branch   TEXT PRIMARY KEY,
    first_ms INTEGER NOT NULL,
    last_ms  INTEGER NOT NULL
) WITHOUT ROWID;

-- An older ledger kept no such times. Where a branch has a transcript of its own
-- (<sessionId>/subagents/agent-<agentId>.jsonl), that file's events still date each of its model-call
-- lines; an API error line is no call of the branch (its row names none). Lines retention has pruned
-- the kind of, and inline branches of older versions, keep the times of their rows.
CREATE TEMP TABLE branch_lines AS
WITH branches AS (
    SELECT DISTINCT branch, '/' || replace(branch, '/', '/subagents/agent-') || '.jsonl' AS tail,
           'agent-' || substr(branch, instr(branch, '/') + 1) || '.jsonl' AS name
    FROM llm_calls WHERE branch IS NOT NULL
),
-- A branch meets only the files of its own file's name (what follows a path's last '/') before tails are
-- compared: comparing every branch with every file took minutes at thousands of subagents.
file_names AS MATERIALIZED (
    SELECT id, path, substr(path, length(rtrim(path, replace(path, '/', ''))) + 1) AS name
    FROM files WHERE source = 'claude-code'
),
branch_files AS MATERIALIZED (
    SELECT f.id, b.branch FROM branches AS b
    JOIN file_names AS f ON f.name = b.name AND substr(f.path, -length(b.tail)) = b.tail
),
-- One pass over the events (none is indexed by file), and only then a look at the calls of those few.
file_lines AS MATERIALIZED (
    SELECT bf.branch, e.ts_ms, e.id FROM events AS e JOIN branch_files AS bf ON bf.id = e.file_id
    WHERE e.kind = 'llm.call'
)
SELECT branch, ts_ms FROM llm_calls WHERE branch IS NOT NULL AND session_id IS NOT branch
UNION ALL
SELECT branch, ts_ms FROM file_lines AS l
WHERE NOT EXISTS (SELECT 1 FROM llm_calls AS c WHERE c.ts_ms = l.ts_ms AND c.event_id = l.id AND c.branch IS NULL);

-- A branch already named is a session whose span takes those times now; the others wait for their naming.
UPDATE sessions SET first_ms = min(sessions.first_ms, lines.first_ms), last_ms = max(sessions.last_ms, lines.last_ms)
FROM (SELECT branch, min(ts_ms) AS first_ms, max(ts_ms) AS last_ms FROM temp.branch_lines GROUP BY branch) AS lines
WHERE sessions.session_id = lines.branch;
INSERT INTO branch_spans (branch, first_ms, last_ms)
SELECT branch, min(ts_ms), max(ts_ms) FROM temp.branch_lines
WHERE branch NOT IN (SELECT session_id FROM sessions)
GROUP BY branch;
DROP TABLE temp.branch_lines;
