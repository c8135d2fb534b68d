-- An agentledger from before OpenClaw transcript entries were known by their id in their session (see
-- sources/oc_transcript.py) made a line's event ids from its bytes. A later one that gave such a session a
-- key that yields more (a subagent's, once its parent's spawn or sessions.json named it) decoded the lines
-- it had read again, and indexed every fact of them a second time under the ids made now: each model call
-- and compaction counted twice, and `events` listed each line twice. A read now keeps only what the key adds.
--
-- The two copies of a line are its events at one time, file and offset: one line gives one model call or
-- compaction. The copy read again is kept, under the id a read afresh gives it: its row came last. Events
-- retention has reduced keep no offset, and their copies stay (README, Upgrading).
CREATE TEMP TABLE line_copies (
    ts_ms      INTEGER NOT NULL,
    file_id    INTEGER NOT NULL,
    offset     INTEGER NOT NULL,
    id         INTEGER NOT NULL,   -- the event of the copy to drop: a line's first, whose id the others follow
    row_id     INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    session_id TEXT               -- a model call's
);

-- Only a time that more than one call shares is looked at: a scan of llm_calls_by_ts, not of the calls.
INSERT INTO temp.line_copies
WITH shared AS MATERIALIZED (SELECT ts_ms FROM llm_calls GROUP BY ts_ms HAVING count(*) > 1)
SELECT DISTINCT ea.ts_ms, ea.file_id, ea.offset, a.event_id, a.id, 'llm.call', a.session_id
FROM shared AS s
JOIN llm_calls AS a ON a.ts_ms = s.ts_ms
JOIN events AS ea ON ea.ts_ms = a.ts_ms AND ea.id = a.event_id
JOIN llm_calls AS b ON b.ts_ms = a.ts_ms AND b.id > a.id
JOIN events AS eb ON eb.ts_ms = b.ts_ms AND eb.id = b.event_id
WHERE a.source = 'oc-transcript' AND b.source = 'oc-transcript' AND ea.kind = 'llm.call' AND eb.kind = 'llm.call'
  AND eb.file_id = ea.file_id AND eb.offset = ea.offset;

-- A compaction's copies share its session's key (compactions_by_key) and time.
INSERT INTO temp.line_copies
SELECT DISTINCT ea.ts_ms, ea.file_id, ea.offset, a.event_id, a.id, 'compaction', NULL
FROM compactions AS a
JOIN events AS ea ON ea.ts_ms = a.ts_ms AND ea.id = a.event_id
JOIN compactions AS b ON b.session_key = a.session_key AND b.ts_ms = a.ts_ms AND b.id > a.id
JOIN events AS eb ON eb.ts_ms = b.ts_ms AND eb.id = b.event_id
WHERE a.source = 'oc-transcript' AND b.source = 'oc-transcript' AND ea.kind = 'compaction'
  AND eb.kind = 'compaction' AND eb.file_id = ea.file_id AND eb.offset = ea.offset;

DELETE FROM llm_calls WHERE id IN (SELECT row_id FROM temp.line_copies WHERE kind = 'llm.call');
DELETE FROM compactions WHERE id IN (SELECT row_id FROM temp.line_copies WHERE kind = 'compaction');

-- The events of those copies: a line's first, and those whose ids follow it at that line (a model call's tool
-- starts, its run's end).
DELETE FROM events WHERE (ts_ms, id) IN (
    WITH RECURSIVE copy_events (ts_ms, file_id, offset, id) AS (
        SELECT ts_ms, file_id, offset, id FROM temp.line_copies
        UNION ALL
        SELECT e.ts_ms, e.file_id, e.offset, e.id FROM copy_events AS c
        JOIN events AS e ON e.ts_ms = c.ts_ms AND e.id = c.id + 1
        WHERE e.file_id = c.file_id AND e.offset = c.offset
    )
    SELECT ts_ms, id FROM copy_events
);

-- The other lines of the files those copies are in were read twice too. A line gives at most one event of a kind
-- but tool.start (one per tool call of an answer, whose copies went with it); no row tells which of two was read
-- again, and both say the same: the one with the lower id goes. Each session's span is a range of the events'
-- time (CROSS, +: not a scan of every event, nor an index of their files built for the statement).
DELETE FROM events WHERE (ts_ms, id) IN (
    WITH spans AS MATERIALIZED (
        SELECT DISTINCT c.file_id, s.first_ms, s.last_ms
        FROM temp.line_copies AS c JOIN sessions AS s ON s.session_id = c.session_id
    )
    SELECT e.ts_ms, e.id
    FROM spans AS sp
    CROSS JOIN events AS e ON e.ts_ms BETWEEN sp.first_ms AND sp.last_ms
    JOIN events AS t ON t.ts_ms = e.ts_ms AND t.id > e.id
    WHERE +e.file_id = sp.file_id AND e.kind NOT IN ('', 'tool.start', 'llm.call', 'compaction')
      AND t.file_id = e.file_id AND t.offset = e.offset AND t.kind = e.kind
);

DROP TABLE temp.line_copies;
