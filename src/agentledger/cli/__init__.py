"""The ``agentledger`` command."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from agentledger import __version__
from agentledger.config import default_db
from agentledger.ledger.db import LedgerError


class Context:
    def __init__(self, db: Path):
        self.db = db


class _Group(click.Group):
    """Turns expected operational errors into one line and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (LedgerError, ValueError) as exc:
            click.echo(f"agentledger: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="agentledger")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Ledger database (default: $AGENTLEDGER_DB, else $XDG_STATE_HOME/agentledger/ledger.db).")
@click.option("-v", "--verbose", is_flag=True, help="Log file events and progress to stderr.")
@click.pass_context
def main(ctx: click.Context, db: Path | None, verbose: bool) -> None:
    """Index AI-agent gateway logs into a local ledger and ask it questions."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.obj = Context(db if db is not None else default_db())


from agentledger.cli import ingest, queries, serve  # noqa: E402  (commands register on main)

__all__ = ["main", "ingest", "queries", "serve"]
