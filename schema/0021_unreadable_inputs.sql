-- Files and directories under a source's roots that could not be read when last looked at (their
-- mode, a symlink loop): `inputs` lists them with the reason, so a log the ledger holds nothing of
-- is never only missing. A path leaves once it can be read, or is gone.
CREATE TABLE unreadable_inputs (
    source   TEXT    NOT NULL,
    root     TEXT    NOT NULL,
    path     TEXT    NOT NULL,
    kind     TEXT    NOT NULL,  -- file | directory
    reason   TEXT    NOT NULL,  -- as the operating system gave it
    since_ms INTEGER NOT NULL,  -- when it was first found so
    PRIMARY KEY (source, path)
);
