-- The events of the lines read on a side branch before anything named it a session (see 0013, 0037) that a
-- read after the naming keys by that session: its model calls' lines, each line of a streamed call, and its
-- Tasks' spawns. A read before the naming keys them by the session whose line it is; the naming then takes
-- them to the branch's session (writer._side_branches), as it does the calls and the spawns, so that every
-- order of reading leaves the same events.
CREATE TABLE branch_events (
    branch TEXT    NOT NULL,
    ts_ms  INTEGER NOT NULL,
    id     INTEGER NOT NULL,
    PRIMARY KEY (branch, ts_ms, id)
) WITHOUT ROWID;

-- An older agentledger left such events under their line's session, named or not. A call's row names the
-- event of one of its lines; a branch with a transcript of its own still names every one by its file (see
-- 0037). Events retention has reduced show no key, and keep none.
CREATE TEMP TABLE branch_lines AS
WITH branches AS (
    SELECT DISTINCT branch, '/' || replace(branch, '/', '/subagents/agent-') || '.jsonl' AS tail,
           'agent-' || substr(branch, instr(branch, '/') + 1) || '.jsonl' AS name
    FROM llm_calls WHERE branch IS NOT NULL
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
)
SELECT branch, ts_ms, event_id AS id FROM llm_calls WHERE branch IS NOT NULL
UNION
SELECT bf.branch, e.ts_ms, e.id FROM events AS e JOIN branch_files AS bf ON bf.id = e.file_id
WHERE e.kind IN ('llm.call', 'subagent.spawn');

-- A branch already named is a session whose key those events take now; the others wait for their naming.
UPDATE events SET session_key = s.session_key
FROM temp.branch_lines AS l JOIN sessions AS s ON s.session_id = l.branch
WHERE events.ts_ms = l.ts_ms AND events.id = l.id AND events.kind <> '';
INSERT INTO branch_events (branch, ts_ms, id)
SELECT branch, ts_ms, id FROM temp.branch_lines WHERE branch NOT IN (SELECT session_id FROM sessions);
DROP TABLE temp.branch_lines;
