"""Read-only queries of OpenClaw's SQLite transcript store (FORMATS.md §2): the follower of its rows
(tail/transcript_store.py) and the transcript decoder's look for spawns beside a session both ask it."""

from __future__ import annotations

import os
import urllib.parse

import apsw

from agentledger.regular import nothing_but_regular

STORE_NAME = "openclaw-agent.sqlite"
# A producer writing in rollback-journal mode locks readers out while it commits: wait that long, then try
# again at the next pass rather than stall the other sources.
_BUSY_MS = 500
SESSIONS = "SELECT session_id, max(seq) FROM transcript_events WHERE session_id IS NOT NULL GROUP BY session_id"


def store_of(agent_dir: str | os.PathLike) -> str:
    """Where an agent's store lies: ``<agent dir>/agent/``, beside its ``sessions/`` folder."""
    return os.path.join(agent_dir, "agent", STORE_NAME)


def sessions_beside(store: str) -> str:
    """The sessions folder of the agent whose store ``store`` is."""
    return os.path.join(os.path.dirname(os.path.dirname(store)), "sessions")


def looks(*paths: str) -> tuple:
    """How each of ``paths`` looks now (device, inode, size, mtime), None for one that is not there: what
    tells whether a store, its WAL or what lies beside them changed since the last look."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def open_store(path: str) -> apsw.Connection:
    # SQLite opens the store, and a journal left beside it, by their names, and would wait on a FIFO there.
    if not (nothing_but_regular(path) and nothing_but_regular(f"{path}-journal")):
        raise apsw.CantOpenError(f"{path}: it or its journal is not a regular file")
    # The name's own bytes, escaped: a name need not be UTF-8, and a ?, # or % in it is not the URI's.
    uri = f"file:{urllib.parse.quote(os.fsencode(path))}?mode=ro"
    conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.setbusytimeout(_BUSY_MS)
    return conn


# What the spawn scan asks (sources/oc_transcript.py): rows naming a word, from a seq on, and a session's first rows.
_NAMING = """
SELECT session_id, seq, CAST(event_json AS BLOB) FROM transcript_events
WHERE session_id = ?1 AND seq >= ?2 AND seq <= ?4 AND instr(CAST(event_json AS BLOB), ?3) > 0 ORDER BY seq
"""
_FIRST = "SELECT CAST(event_json AS BLOB) FROM transcript_events WHERE session_id = ? ORDER BY seq LIMIT ?"


def rows_naming(store: str, since: dict[str, int], word: bytes) -> dict[str, tuple[int, list[bytes]]] | None:
    """session → (its next seq, its rows from ``since[session]`` on holding ``word``), for every session of the
    store: only the rows added since the last look are read. None if the store cannot be read now."""
    try:
        conn = open_store(store)
    except apsw.Error:
        return None
    try:
        out: dict[str, tuple[int, list[bytes]]] = {}
        for session_id, last in conn.execute(SESSIONS).fetchall():
            if not isinstance(session_id, str) or not isinstance(last, int):
                continue
            start = since.get(session_id, 0)
            # Up to the last seq listed: a row committed since is the next look's.
            found = [bytes(body) for _, _, body in conn.execute(_NAMING, (session_id, start, word, last)).fetchall()
                     if body is not None] if last >= start else []
            out[session_id] = (max(start, last + 1), found)
        return out
    except apsw.Error:
        return None
    finally:
        conn.close()


def first_rows(store: str, session_id: str, limit: int) -> list[bytes]:
    """A session's first rows, as its transcript's first lines."""
    try:
        conn = open_store(store)
    except apsw.Error:
        return []
    try:
        return [bytes(body) for (body,) in conn.execute(_FIRST, (session_id, limit)).fetchall() if body is not None]
    except apsw.Error:
        return []
    finally:
        conn.close()
