-- Retention's cursor (0008) only moved forward, so events an older agentledger indexed after a
-- pass, with times before where it had got to, were never pruned. The writer now moves the cursor
-- back when it indexes such an event; this moves it back once for those indexed before, to the
-- oldest event still whole. The scan stops at that event, and the next pass goes on from there.
UPDATE retention SET events_ms = (SELECT min(ts_ms) FROM events WHERE kind <> '')
WHERE id = 1 AND events_ms > (SELECT min(ts_ms) FROM events WHERE kind <> '');
