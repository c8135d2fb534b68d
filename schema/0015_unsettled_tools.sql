-- Tool calls still running or cut off by a restart, by tool: metrics count a call under its
-- outcome only once it has one, so that a counter never gives back what it showed. A late end
-- still settles an interrupted call; the few unsettled calls are counted through this index
-- instead of a scan of every call.
CREATE INDEX tool_calls_unsettled ON tool_calls (tool_name) WHERE status IN ('running', 'interrupted');
