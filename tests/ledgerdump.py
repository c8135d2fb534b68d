"""A comparable picture of a ledger: everything a user can see, nothing that depends on read order."""

from __future__ import annotations

from pathlib import Path

import apsw

_TABLES = {
    "events": "SELECT e.id, f.fingerprint, e.offset, e.ts_ms, e.kind, e.agent_id, e.session_key, e.raw "
              "FROM events e JOIN files f ON f.id = e.file_id",
    "sessions": "SELECT * FROM sessions",
    "runs": "SELECT * FROM runs",
    "llm_calls": "SELECT * FROM llm_calls",
    "usage_snapshots": "SELECT * FROM usage_snapshots",
    "tool_calls": "SELECT * FROM tool_calls",
    "subagents": "SELECT * FROM subagents",
    "compactions": "SELECT * FROM compactions",
    "messages": "SELECT * FROM messages",
    "rejects": "SELECT f.fingerprint, r.offset, r.length, r.reason, r.head FROM rejects r "
               "JOIN files f ON f.id = r.file_id",
    "checkpoints": "SELECT fingerprint, offset, lines FROM files",
    "session_ids": "SELECT * FROM session_ids",
    "session_suspensions": "SELECT * FROM session_suspensions",
    "gateway_restarts": "SELECT c.log, g.ts_ms, g.last_ms, g.cause FROM gateway_restarts g "
                        "JOIN log_clocks c ON c.id = g.log_id",
    "log_clocks": "SELECT log, last_seq, last_ms FROM log_clocks",
    "compaction_pairs": "SELECT * FROM compaction_pairs",
}


# Fact tables number their rows in arrival order, which differs between two equal ledgers.
_ARRIVAL_ID = {"llm_calls", "usage_snapshots", "compactions", "messages"}


def dump(db: Path, tables: tuple[str, ...] = tuple(_TABLES)) -> dict[str, list[tuple]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        out = {}
        for name in tables:
            rows = conn.execute(_TABLES[name]).fetchall()
            if name in _ARRIVAL_ID:
                rows = [row[1:] for row in rows]
            out[name] = sorted(rows, key=repr)
        return out
    finally:
        conn.close()


def rollups(db: Path) -> dict[str, list[tuple]]:
    """Every rollup table's rows; a row a move emptied is no row, as ``verify`` sees it."""
    from agentledger.ledger.verify import ROLLUPS

    out = {}
    for r in ROLLUPS:
        found = rows(db, f"SELECT {', '.join(r.keys + r.values)} FROM {r.table}")
        out[r.table] = sorted((row for row in found if any(row[len(r.keys):])), key=repr)
    return out


def rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """What a query of the ledger at ``db`` returns, read on a connection of its own."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def scalar(db: Path, sql: str, params: tuple = ()):
    return rows(db, sql, params)[0][0]


def usage(db: Path, **window) -> dict:
    """``agentledger usage`` as the query module answers it (all time unless ``window`` says)."""
    from agentledger.ledger import queries
    from agentledger.ledger.db import open_reader

    conn = open_reader(db)
    try:
        return queries.usage(conn, queries.Window(**window))
    finally:
        conn.close()


def verify(db: Path) -> list:
    """What ``agentledger verify`` finds: rollups that differ from a recomputation (none when sound)."""
    from agentledger.ledger.db import open_reader
    from agentledger.ledger.verify import check_rollups

    conn = open_reader(db)
    try:
        return check_rollups(conn)
    finally:
        conn.close()
