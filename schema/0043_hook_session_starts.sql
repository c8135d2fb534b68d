-- A SessionEnd hook's identity counts its session's SessionStarts before it (see
-- sources/claude_code_hooks.py), so a session resumed after it ended can end again: each
-- SessionEnd looks them up, without reading every hook event the ledger ever received.
CREATE INDEX hook_session_starts ON hook_events (session_id) WHERE event = 'SessionStart';
