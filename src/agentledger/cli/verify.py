"""``agentledger verify``: recompute every rollup from the base rows and compare; ``--repair``."""

from __future__ import annotations

import os
import sys
from contextlib import closing

import apsw
import click

from agentledger.cli import cli
from agentledger.cli.output import emit_json
from agentledger.ledger.db import (LedgerBusy, LedgerDamaged, LedgerError, WriterLock, damaged, ledger_exists,
                                   open_reader)
from agentledger.ledger.verify import (ROLLUPS, Difference, check_checkpoints, check_file, check_rollups,
                                       repair_rollups)
from agentledger.shown import one_line


def _repair(db) -> list[Difference]:
    """The rollups rebuilt from the rows when any differs, holding the writer lock; the differences found."""
    if not ledger_exists(db):  # the lock would make its directory, and the writer a new ledger
        raise LedgerError(f"no ledger at {db}: nothing to repair (pass --db)")
    try:  # a member of the ledger's group may read it, not write it: not a matter of another --db
        os.close(os.open(db, os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        raise LedgerError(f"cannot repair {db}: {exc.strerror}; `verify --repair` writes the ledger: run it as the "
                          "ledger's owner (the service's: sudo -u agentledger), with `serve` stopped") from None
    try:
        lock = WriterLock(db)
    except LedgerBusy as exc:
        raise LedgerBusy(f"{exc}; `verify --repair` rewrites the rollups `serve` keeps: stop `serve` first, "
                         "repair, then start it again") from None
    with lock, closing(lock.open()) as conn:
        return repair_rollups(conn)


@cli.command()
@click.option("--repair", is_flag=True,
              help="First rebuild every rollup from the base rows if any differs (one transaction; needs the "
                   "writer lock, so stop `serve` first), then verify again. Checkpoints are not changed.")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
@click.pass_obj
def verify(obj, repair: bool, as_json: bool) -> None:
    """Check the ledger's file is whole, recompute every rollup from the base rows and check file checkpoints;
    exit 1 on damage or any difference.

    With --repair, rollups that differ are first rebuilt from the rows (sessions, runs, model and tool
    calls, ...), which the logs are not needed for; the exit code is then the verification's after it."""
    try:
        repaired = _repair(obj.db) if repair else None
        conn = open_reader(obj.db)
        try:
            conn.execute("BEGIN")  # one snapshot for both sides of every comparison
            found = check_file(conn)
            if found is not None:
                raise damaged(obj.db, found)
            diffs = check_rollups(conn)
            problems, changed = check_checkpoints(conn)
            conn.execute("COMMIT")
        finally:
            conn.close()
    except (LedgerDamaged, apsw.CorruptError, apsw.NotADBError) as exc:
        # What verify is there to find: a failed verification (exit 1), not a --db to change.
        failed = click.ClickException(str(exc if isinstance(exc, LedgerDamaged) else damaged(obj.db, exc)))
        failed.exit_code = 1
        raise failed from None
    fixed = sorted({d.table for d in repaired or ()})
    if as_json:
        emit_json({
            "ok": not diffs and not problems,
            "rollups": [{"table": d.table, "key": list(d.key), "stored": d.stored, "recomputed": d.recomputed}
                        for d in diffs],
            "checkpoints": problems,
            "changed_files": changed,
        } | ({} if repaired is None else {"repaired": {"differences": len(repaired), "tables": fixed}}))
    else:
        if repaired:
            click.echo(f"repaired: {len(repaired)} rollup differences ({', '.join(fixed)}); every rollup rebuilt "
                       "from the base rows")
        elif repaired is not None:
            click.echo("nothing to repair: every rollup equals its recomputation")
        # A difference names its rollup's key (a session key, a model), a checkpoint its file: the logs' text.
        for d in diffs[:50]:
            click.echo(one_line(d.describe()))
        if len(diffs) > 50:
            click.echo(f"... and {len(diffs) - 50} more differences")
        for p in problems + changed:
            click.echo(one_line(p))
        if not diffs and not problems:
            since = f"; files changed since they were read: {len(changed)}, told above" if changed else ""
            click.echo(f"ok: {len(ROLLUPS)} rollups equal their recomputation; checkpoints on line boundaries{since}")
        else:
            tables = sorted({d.table for d in diffs})
            notes = []
            if diffs and not repair:
                notes.append("`agentledger verify --repair` rebuilds the rollups from the rows")
            if problems and repair:
                notes.append("--repair rebuilds rollups only: the next `ingest` or `serve` reads a file whose "
                             "checkpoint is off a line boundary again from its start")
            click.echo(f"FAILED: {len(diffs)} rollup differences ({', '.join(tables) or 'none'}), "
                       f"{len(problems)} checkpoint problems{''.join('; ' + n for n in notes)}", err=True)
    sys.exit(1 if diffs or problems else 0)
