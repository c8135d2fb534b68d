-- A tool call's end is paired with its start by the call's id in its session, whichever run each names (the
-- writer's _ends_with_their_starts and _rows_told): an end may name a later run than its start, or none. Such a
-- row lacks its end or its start until the other line comes; a call whose start and end are read together never
-- enters, so a catch-up pays next to nothing for it. Claude Code's rows are found by id already (0024).
CREATE INDEX tool_calls_half ON tool_calls (tool_call_id) WHERE started_ms IS NULL OR ended_ms IS NULL;
