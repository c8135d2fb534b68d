"""``agentledger verify``: recompute every rollup from the base rows and compare."""

from __future__ import annotations

import sys

import click

from agentledger.cli import cli
from agentledger.cli.output import emit_json
from agentledger.ledger.db import open_reader
from agentledger.ledger.verify import ROLLUPS, check_checkpoints, check_rollups


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
@click.pass_obj
def verify(obj, as_json: bool) -> None:
    """Recompute every rollup from the base rows and check file checkpoints; exit 1 on any difference."""
    conn = open_reader(obj.db)
    try:
        conn.execute("BEGIN")  # one snapshot for both sides of every comparison
        diffs = check_rollups(conn)
        problems = check_checkpoints(conn)
        conn.execute("COMMIT")
    finally:
        conn.close()
    if as_json:
        emit_json({
            "ok": not diffs and not problems,
            "rollups": [{"table": d.table, "key": list(d.key), "stored": d.stored, "recomputed": d.recomputed}
                        for d in diffs],
            "checkpoints": problems,
        })
    else:
        for d in diffs[:50]:
            click.echo(d.describe())
        if len(diffs) > 50:
            click.echo(f"... and {len(diffs) - 50} more differences")
        for p in problems:
            click.echo(p)
        if not diffs and not problems:
            click.echo(f"ok: {len(ROLLUPS)} rollups equal their recomputation; checkpoints on line boundaries")
        else:
            tables = sorted({d.table for d in diffs})
            click.echo(f"FAILED: {len(diffs)} rollup differences ({', '.join(tables) or 'none'}), "
                       f"{len(problems)} checkpoint problems", err=True)
    sys.exit(1 if diffs or problems else 0)
