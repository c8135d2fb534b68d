-- Claude Code hook events. A hook payload carries no time and no id of its own: the ledger
-- keeps each event's identity (see sources/claude_code_hooks.py) with the time it first
-- arrived, so a repeated POST, before or after a restart, is recognised and changes nothing.
CREATE TABLE hook_events (
    id         INTEGER PRIMARY KEY,  -- 64-bit event id
    ts_ms      INTEGER NOT NULL,     -- when it first arrived
    session_id TEXT,
    event      TEXT NOT NULL         -- hook_event_name
);
-- Tool calls known so far only from a hook: the transcript's line of the same call finds them
-- here by id and takes them over. Stays as small as the calls whose transcript lags.
CREATE INDEX tool_calls_from_hooks ON tool_calls (tool_call_id) WHERE source = 'claude-code-hook';
