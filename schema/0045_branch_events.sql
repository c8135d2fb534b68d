-- The events of the lines read on a side branch before anything named it a session (see 0013, 0037) that a
-- read after the naming keys by that session: its model calls' lines, each line of a streamed call, and its
-- Tasks' spawns. A read before the naming keys them by the session whose line it is; the naming then takes
-- them to the branch's session (side_branches._side_branches), as it does the calls and the spawns, so that every
-- order of reading leaves the same events.
CREATE TABLE branch_events (
    branch TEXT    NOT NULL,
    ts_ms  INTEGER NOT NULL,
    id     INTEGER NOT NULL,
    PRIMARY KEY (branch, ts_ms, id)
) WITHOUT ROWID;

-- An older agentledger left such events under their line's session, named or not. A call's row names the
-- event of one of its lines; a branch with a transcript of its own still names every one by its file (see
-- 0037), whether or not a call's row is left of it (a replay's is the main branch's, see branch_spans). Events
-- retention has reduced show no key, and keep none.
CREATE TEMP TABLE branch_lines AS
WITH calls AS (
    SELECT branch, max(ts_ms) AS last_ms FROM llm_calls WHERE branch IS NOT NULL GROUP BY branch
),
branches AS (
    SELECT branch, '/' || replace(branch, '/', '/subagents/agent-') || '.jsonl' AS tail,
           'agent-' || substr(branch, instr(branch, '/') + 1) || '.jsonl' AS name
    FROM (SELECT branch FROM calls UNION SELECT branch FROM branch_spans)
),
-- Each file's name (what follows its path's last '/', which rtrim strips back to) is read once, and a branch
-- meets the files of its own file's name by equality: only those few compare whole tails, not every pair.
file_names AS MATERIALIZED (
    SELECT id, path, substr(path, length(rtrim(path, replace(path, '/', ''))) + 1) AS name
    FROM files WHERE source = 'claude-code'
),
branch_files AS MATERIALIZED (
    SELECT f.id, b.branch FROM branches AS b
    JOIN file_names AS f ON f.name = b.name AND substr(f.path, -length(b.tail)) = b.tail
),
-- A branch with no file of its own wrote its lines in its session's (older versions, a /btw question), where
-- of a streamed call only the line its row keeps names the branch, and of a replay of a main-branch call none.
-- Those lines are the session's within the span of the branch's that no other call's row names, outside
-- subagents' own files (whose lines read before their naming bear the session's key too); a line within two
-- such branches' spans is neither's. The span is branch_spans' until the branch is named; after, from its
-- session's first line to its last call (the session's span runs on to the Task's result).
inline AS MATERIALIZED (
    SELECT * FROM (SELECT branch, first_ms, last_ms FROM branch_spans
                   UNION
                   SELECT s.session_id, s.first_ms, c.last_ms FROM calls AS c
                   JOIN sessions AS s ON s.session_id = c.branch)
    WHERE branch NOT IN (SELECT branch FROM branch_files)
),
-- Each span is a range of the events' time (+: no index of their keys built for the statement instead).
inline_lines AS (
    SELECT i.branch, e.ts_ms, e.id FROM inline AS i
    JOIN events AS e ON e.ts_ms BETWEEN i.first_ms AND i.last_ms
    WHERE e.kind IN ('llm.call', 'subagent.spawn')
      AND +e.session_key = 'agent:claude-code:' || substr(i.branch, 1, instr(i.branch, '/') - 1)
      AND e.file_id NOT IN (SELECT id FROM branch_files)
      AND NOT EXISTS (SELECT 1 FROM llm_calls AS c
                      WHERE c.ts_ms = e.ts_ms AND c.event_id = e.id AND c.branch IS NOT i.branch)
)
SELECT branch, ts_ms, event_id AS id FROM llm_calls WHERE branch IS NOT NULL
UNION
SELECT bf.branch, e.ts_ms, e.id FROM events AS e JOIN branch_files AS bf ON bf.id = e.file_id
WHERE e.kind IN ('llm.call', 'subagent.spawn')
UNION
SELECT min(branch), ts_ms, id FROM inline_lines GROUP BY ts_ms, id HAVING count(DISTINCT branch) = 1;

-- A branch already named is a session whose key those events take now; the others wait for their naming.
UPDATE events SET session_key = s.session_key
FROM temp.branch_lines AS l JOIN sessions AS s ON s.session_id = l.branch
WHERE events.ts_ms = l.ts_ms AND events.id = l.id AND events.kind <> '';
INSERT INTO branch_events (branch, ts_ms, id)
SELECT branch, ts_ms, id FROM temp.branch_lines WHERE branch NOT IN (SELECT session_id FROM sessions);
DROP TABLE temp.branch_lines;
