"""``agentledger prune``: drop raw rows past their retention, and give the space back."""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path

import click

from agentledger.cli import cli
from agentledger.cli.output import emit_json, emit_pairs
from agentledger.defaults import MAX_RAW_DAYS
from agentledger.ledger import retention
from agentledger.ledger.db import LedgerBusy, LedgerError, WriterLock, ledger_exists, open_reader
from agentledger.ledger.writer import now_ms
from agentledger.timeutil import iso


_LABELS = {"events": "events (reduced to their key)", "messages": "message previews",
           "usage_snapshots": "usage snapshots", "reject_heads": "reject heads", "gate_decisions": "gate decisions"}


def _size(db: Path) -> int:
    return sum(os.path.getsize(p) for p in (db, Path(f"{db}-wal")) if p.exists())


def _free(conn) -> int:
    """The free space inside the ledger file: what giving pages back would still take off it."""
    return retention.free_pages(conn) * conn.execute("PRAGMA page_size").fetchall()[0][0]


def _emit_json(dry_run: bool, days: int, horizon: int | None, result: retention.Pruned, before: int,
               after: int | None, free: int) -> None:
    emit_json({"dry_run": dry_run, "older_than_days": days, "horizon": iso(horizon)}
              | {name: getattr(result, name) for name in result.COUNTS}
              | {"size_bytes_before": before, "size_bytes_after": after,
                 "reclaimed_bytes": None if dry_run else result.reclaimed_bytes, "free_bytes": free})


@cli.command()
@click.option("--older-than", "days", type=click.IntRange(1, MAX_RAW_DAYS), default=None, metavar="DAYS",
              help="Prune raw rows older than this many days (default: config `[retention] raw_days`, 30).")
@click.option("--dry-run", is_flag=True, help="Only count what would be pruned; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@click.pass_obj
def prune(obj, days: int | None, dry_run: bool, as_json: bool) -> None:
    """Prune raw rows older than DAYS: event payloads, message previews, spare usage snapshots,
    reject heads, gate decision logs. Without --older-than, the retention `serve` keeps.

    Totals, rollups, sessions, runs, model and tool calls stay, and so does every event's id:
    re-reading old logs still counts nothing twice. The freed space goes back to the file system.
    """
    if not ledger_exists(obj.db):
        raise LedgerError(f"no ledger at {obj.db}: nothing to prune (pass --db)")
    from_flag = days is not None
    if not from_flag:
        days = obj.config.retention.raw_days
        if days == 0:
            conn = open_reader(obj.db)  # a file that is no ledger is still refused
            try:
                free = _free(conn)
            finally:
                conn.close()
            if as_json:
                size = _size(obj.db)
                _emit_json(dry_run, 0, None, retention.Pruned(horizon_ms=0), size, None if dry_run else size, free)
            else:
                click.echo("raw rows are kept for ever ([retention] raw_days = 0): nothing pruned; "
                           "pass --older-than DAYS to prune anyway")
            return
    horizon = retention.horizon(now_ms(), days)
    before = _size(obj.db)
    if dry_run:
        conn = open_reader(obj.db)
        try:
            result = retention.pending(conn, horizon)
            free = _free(conn)
        finally:
            conn.close()
    else:
        try:
            lock = WriterLock(obj.db)
        except LedgerBusy as exc:
            raise LedgerBusy(f"{exc}; a running `serve` prunes by itself") from None
        with lock, closing(lock.open()) as conn:
            result = retention.prune(conn, horizon)
            result.reclaimed_bytes = retention.reclaim(conn)
            # The file shrinks when the WAL is written back; empty it too.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            free = _free(conn)  # left after the prune: measured, as for a dry run
    after = None if dry_run else _size(obj.db)
    if as_json:
        _emit_json(dry_run, days, horizon, result, before, after, free)
        return
    origin = "--older-than" if from_flag else "[retention] raw_days"
    click.echo(f"{'would prune' if dry_run else 'pruned'} raw rows older than {iso(horizon)} "
               f"({days} days, {origin}):")
    pairs: list[tuple[str, object]] = [(label, getattr(result, name)) for name, label in _LABELS.items()]
    if dry_run:
        pairs.append(("ledger size", f"{before / 1e6:,.1f} MB ({free / 1e6:,.1f} MB of it free)"))
    else:
        pairs.append(("ledger size", f"{before / 1e6:,.1f} MB -> {after / 1e6:,.1f} MB"))
    emit_pairs(pairs)
