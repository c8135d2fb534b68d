"""Retention: raw rows older than a horizon are pruned while the ledger keeps serving.

Raw, and pruned once older than the horizon:

- ``events``: reduced to their key ``(ts_ms, id)`` and file. The key is the exactly-once guard
  and stays for good: re-reading an old line, or ingesting a copy of an old file, still finds its
  id and changes nothing. Its kind, offset, agent, session key and the raw line of an unknown kind
  go (about two thirds of the row); ``agentledger events`` no longer lists it.
- ``messages``: message previews. Nothing counts them.
- ``usage_snapshots``: except those of a run without model calls, all of them: a reprice may make another
  of them the one that stands in for its cost (verify.RUN_SNAPSHOT picks the costliest). Nor those whose
  run is not settled yet (verify.SNAPSHOT_OWNER_SETTLED): the end of a run without calls read later claims one.
- ``rejects``: the first bytes kept for a human to look at. The row itself (file, offset,
  length, reason) stays: rejected-line counts are made of it.
- ``gate_decisions``: the log of warn and block answers (their counts are kept apart).

Everything a rollup or a total is defined from stays (sessions, runs, llm_calls, tool_calls,
subagents, compactions), as do the rollups, files and file events: ``verify`` still holds and
no Prometheus counter moves backwards.

Each batch is its own short write transaction, so a writer waits for one batch at most. Freed
pages go back to the file system through incremental auto-vacuum (``reclaim``).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import apsw

from agentledger.ledger.verify import SNAPSHOT_OWNER, SNAPSHOT_OWNER_SETTLED
from agentledger.ledger.writer import LedgerWriter
from agentledger.timeutil import iso

log = logging.getLogger("agentledger.retention")

DAY_MS = 86_400_000
BATCH_ROWS = 2000
RECLAIM_PAGES = 2048  # per daemon tick: 8 MiB of 4 KiB pages
_INCREMENTAL = 2  # PRAGMA auto_vacuum


@dataclass(frozen=True, slots=True)
class _Rows:
    """Raw rows of one rowid table. ``source`` names it (``u`` for snapshots, as SNAPSHOT_OWNER
    expects); ``action`` prunes the rows it is given; ``prunable`` holds for an old row still to prune."""

    name: str
    source: str
    action: str
    prunable: str = "1"

    def step_sql(self) -> str:
        return (f"{self.action} WHERE rowid IN (SELECT rowid FROM {self.source} WHERE rowid > ? AND ts_ms < ? "
                f"AND {self.prunable} ORDER BY rowid LIMIT ?) RETURNING rowid")

    def count_sql(self) -> str:
        return f"SELECT count(*) FROM {self.source} WHERE ts_ms < ? AND {self.prunable}"


_ROWS = (
    _Rows("messages", "messages", "DELETE FROM messages"),
    # A snapshot stays while the run it is of has no model call (its cost is that run's), and while which run
    # it is of may still change: a run's end read after a prune must find the snapshot it falls back to.
    _Rows("usage_snapshots", "usage_snapshots AS u", "DELETE FROM usage_snapshots",
          f"{SNAPSHOT_OWNER_SETTLED} AND "
          f"NOT EXISTS (SELECT 1 FROM runs_without_calls AS w WHERE w.run_id = {SNAPSHOT_OWNER})"),
    _Rows("reject_heads", "rejects", "UPDATE rejects SET head = x''", "length(head) > 0"),
    _Rows("gate_decisions", "gate_decisions", "DELETE FROM gate_decisions"),
)

# Everything older than the cursor has been reduced: the writer moves it back when it indexes an
# event older than it (see writer._PRUNE_FROM), so a pass starts there instead of at the oldest key.
_EVENTS_CURSOR = "SELECT events_ms FROM retention WHERE id = 1"
_EVENTS_PENDING = "SELECT count(*) FROM events WHERE ts_ms >= ? AND ts_ms < ? AND kind <> ''"
# How far a batch goes: the time of the last of the next ``batch_rows`` events, counting those
# already reduced. History indexed late moves the cursor back over keys pruned long ago, and a
# batch bounded by what it takes would read them all in one go.
_EVENTS_REACH = ("SELECT count(*), max(ts_ms) FROM (SELECT ts_ms FROM events WHERE ts_ms >= ? AND ts_ms < ? "
                 "ORDER BY ts_ms LIMIT ?)")
# Delete, then insert the bare keys again: an UPDATE would shrink the rows inside their pages,
# which all stay allocated; deleting frees whole pages and the keys go back in densely packed.
_EVENTS_TAKE = """
DELETE FROM events WHERE (ts_ms, id) IN (SELECT ts_ms, id FROM events WHERE ts_ms >= ? AND ts_ms < ? AND kind <> '')
RETURNING ts_ms, id, file_id
"""
_EVENTS_KEEP = "INSERT INTO events (ts_ms, id, file_id, offset, kind) VALUES (?, ?, ?, 0, '')"
_EVENTS_ADVANCE = "UPDATE retention SET events_ms = max(events_ms, ?) WHERE id = 1"


@dataclass(slots=True)
class Pruned:
    """Rows pruned (or, from ``pending``, still to prune) older than ``horizon_ms``."""

    horizon_ms: int
    events: int = 0  # reduced to their key
    messages: int = 0
    usage_snapshots: int = 0
    reject_heads: int = 0
    gate_decisions: int = 0
    reclaimed_bytes: int = 0
    done: bool = True  # nothing older than the horizon is left to prune

    COUNTS = ("events", "messages", "usage_snapshots", "reject_heads", "gate_decisions")

    def rows(self) -> int:
        return sum(getattr(self, name) for name in self.COUNTS)

    def add(self, other: Pruned) -> None:
        for name in self.COUNTS + ("reclaimed_bytes",):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.done = other.done

    def describe(self) -> str:
        return (f"{self.events} events reduced to their key, {self.messages} messages, {self.usage_snapshots} "
                f"usage snapshots, {self.reject_heads} reject heads, {self.gate_decisions} gate decisions")


def horizon(now_ms: int, raw_days: float) -> int:
    """Rows older than this (ms) are raw rows past their retention."""
    return now_ms - int(raw_days * DAY_MS)


def pending(conn: apsw.Connection, horizon_ms: int) -> Pruned:
    """What ``prune`` would take at ``horizon_ms``: read-only, for ``--dry-run``."""
    cursor = conn.execute(_EVENTS_CURSOR).fetchall()[0][0]
    out = Pruned(horizon_ms, events=conn.execute(_EVENTS_PENDING, (cursor, horizon_ms)).fetchall()[0][0])
    for rows in _ROWS:
        setattr(out, rows.name, conn.execute(rows.count_sql(), (horizon_ms,)).fetchall()[0][0])
    out.done = out.rows() == 0
    return out


def prune(conn: apsw.Connection, horizon_ms: int, *, batch_rows: int = BATCH_ROWS,
          deadline: float | None = None) -> Pruned:
    """Prune every raw row older than ``horizon_ms``, one write transaction per batch.

    With ``deadline`` (a ``time.monotonic()`` value) it returns after the batch that passes it,
    with ``done`` false; the next call carries on where this one stopped."""
    out = Pruned(horizon_ms)
    transaction = LedgerWriter(conn).transaction

    def out_of_time() -> bool:
        if deadline is not None and time.monotonic() >= deadline:
            out.done = False
        return not out.done

    # Events in time order from the cursor, a batch at a time.
    while True:
        with transaction():
            cursor = conn.execute(_EVENTS_CURSOR).fetchall()[0][0]
            seen, last = conn.execute(_EVENTS_REACH, (cursor, horizon_ms, batch_rows)).fetchall()[0]
            finished = seen < batch_rows
            # Up to the end of the last millisecond seen: the next batch starts after all of it.
            until = horizon_ms if finished else last + 1
            taken = conn.execute(_EVENTS_TAKE, (cursor, until)).fetchall()
            conn.executemany(_EVENTS_KEEP, taken)
            conn.execute(_EVENTS_ADVANCE, (until,))
        out.events += len(taken)
        if finished:
            break
        if out_of_time():
            return out
    for rows in _ROWS:
        sql = rows.step_sql()
        after = 0
        while True:
            with transaction():
                ids = conn.execute(sql, (after, horizon_ms, batch_rows)).fetchall()
            setattr(out, rows.name, getattr(out, rows.name) + len(ids))
            if len(ids) < batch_rows:
                break
            after = max(i for (i,) in ids)
            if out_of_time():
                return out
    return out


def free_pages(conn: apsw.Connection) -> int:
    return conn.execute("PRAGMA freelist_count").fetchall()[0][0]


def reclaim(conn: apsw.Connection, max_pages: int | None = None) -> int:
    """Return free pages to the file system (all of them, or ``max_pages``); bytes freed.

    In WAL mode the file itself shrinks at the next checkpoint."""
    page_size = conn.execute("PRAGMA page_size").fetchall()[0][0]
    before = free_pages(conn)
    # The pragma frees one page per step: it has to be read to its end.
    conn.execute(f"PRAGMA incremental_vacuum({int(max_pages or 0):d})").fetchall()
    return (before - free_pages(conn)) * page_size


def ensure_incremental_vacuum(conn: apsw.Connection, path: str | Path) -> bool:
    """Switch a ledger made without incremental auto-vacuum to it; True if it had to.

    A new ledger gets it before its first table (``open_writer``). An older one needs a VACUUM,
    which rewrites the whole file and cannot run inside a transaction, so not in a migration:
    it runs here once, when the writer opens the ledger, holding the writer lock, before
    anything else uses it."""
    if conn.execute("PRAGMA auto_vacuum").fetchall()[0][0] == _INCREMENTAL:
        return False
    log.warning("rewriting %s once (%.1f MB) so that pruned space goes back to the file system",
                path, os.path.getsize(path) / 1e6)
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    # VACUUM builds a full copy in temporary storage: on disk, however temp_store is set, or a
    # large ledger would need as much memory as it takes disk.
    temp_store = conn.execute("PRAGMA temp_store").fetchall()[0][0]
    conn.execute("PRAGMA temp_store = FILE")
    try:
        conn.execute("VACUUM")
    finally:
        conn.execute(f"PRAGMA temp_store = {int(temp_store):d}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return True


class Pruner:
    """Retention from inside the daemon's loop: call ``tick()`` every iteration.

    A tick stops after the batch that passes ``budget_s``, so ingest and watchdog pings are
    never held up for long; a new pass starts ``every_s`` after the last one finished."""

    def __init__(self, raw_days: float, *, every_s: float = 3600.0, budget_s: float = 0.2,
                 batch_rows: int = BATCH_ROWS):
        if raw_days <= 0:
            raise ValueError(f"retention must keep raw rows for a positive number of days, not {raw_days}")
        self.raw_days = raw_days
        self.every_s = every_s
        self.budget_s = budget_s
        self.batch_rows = batch_rows
        self._next = 0.0  # time.monotonic() of the next pass
        self._pass: Pruned | None = None  # the pass in progress

    def tick(self, conn: apsw.Connection, now_ms: int) -> Pruned | None:
        """Prune for a moment; returns the pass once it has finished (and logs it), else None."""
        start = time.monotonic()
        if self._pass is None:
            if start < self._next:
                return None
            self._pass = Pruned(horizon(now_ms, self.raw_days))
        current = self._pass
        # Once everything is pruned, a tick that only reclaims finds nothing more here, cheaply.
        step = prune(conn, current.horizon_ms, batch_rows=self.batch_rows, deadline=start + self.budget_s)
        current.add(step)
        if not step.done:
            return None
        freed = reclaim(conn, RECLAIM_PAGES)
        current.reclaimed_bytes += freed
        if freed and free_pages(conn):
            return None
        self._pass = None
        self._next = time.monotonic() + self.every_s
        if current.rows() or current.reclaimed_bytes:
            log.info("pruned raw rows older than %s: %s; %.1f MB returned to the file system",
                     iso(current.horizon_ms), current.describe(), current.reclaimed_bytes / 1e6)
        return current
