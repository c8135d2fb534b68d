"""``agentledger ingest``: catch up once and exit."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from agentledger.cli import cli
from agentledger.cli.output import emit_json, emit_pairs
from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger.db import open_writer, writer_lock
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.writer import LedgerWriter, now_ms
from agentledger.sources import FORMATS


def _progress_pipeline(writer, specs, max_line):
    """A pipeline that drives a rich progress bar (only on a terminal)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    progress = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(), transient=True)
    task = progress.add_task("indexing", total=None)
    pipeline = Pipeline(
        writer, specs, max_line=max_line,
        on_total=lambda n: progress.update(task, total=(progress.tasks[0].completed + n)),
        on_progress=lambda n: progress.advance(task, n),
    )
    return pipeline, progress


@cli.command()
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="oc-telemetry", show_default=True,
              help="Input format of the roots.")
@click.option("--max-line", type=click.IntRange(min=1024), default=None,
              help="Longest line indexed, in bytes; longer lines are rejected without being held in memory "
                   "(config `max_line`, default 32 MiB).")
@click.option("--grace", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Runs, tool calls and subagents open longer than this become interrupted (config `grace_s`).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.argument("roots", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.pass_obj
def ingest(obj, fmt: str, max_line: int | None, grace: float | None, as_json: bool, roots: tuple[Path, ...]) -> None:
    """Catch up once on ROOTS (state dirs or telemetry dirs) and exit."""
    config = obj.configure(max_line=max_line, grace_s=grace)
    max_line, grace = config.max_line, config.grace_s
    lock = writer_lock(obj.db)
    conn = open_writer(obj.db)
    writer = LedgerWriter(conn)
    specs = specs_from(fmt, list(roots))
    if sys.stderr.isatty() and not as_json:
        pipeline, progress = _progress_pipeline(writer, specs, max_line)
        with progress:
            stats = pipeline.catch_up()
    else:
        stats = Pipeline(writer, specs, max_line=max_line).catch_up()
    interrupted = reconcile(writer, now_ms(), grace)
    conn.close()
    os.close(lock)
    summary = stats.as_dict() | {"interrupted_runs": interrupted.runs, "interrupted_tool_calls": interrupted.tool_calls,
                                 "interrupted_subagents": interrupted.subagents}
    if as_json:
        emit_json(summary)
    else:
        emit_pairs([(k.replace("_", " "), v) for k, v in summary.items()])
