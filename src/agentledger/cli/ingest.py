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
from agentledger.ledger.lifecycle import DEFAULT_IDLE_S
from agentledger.ledger.reconcile import DEFAULT_GRACE_S, reconcile
from agentledger.ledger.writer import LedgerWriter, now_ms
from agentledger.sources import FORMATS
from agentledger.tail.tailer import DEFAULT_MAX_LINE


def _progress_pipeline(writer, specs, max_line):
    """A pipeline that drives a rich progress bar (only on a terminal)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

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
@click.option("--max-line", type=click.IntRange(min=1024), default=DEFAULT_MAX_LINE, show_default=True,
              help="Longest line indexed, in bytes; longer lines are rejected without being held in memory.")
@click.option("--grace", type=click.FloatRange(min=0), default=DEFAULT_GRACE_S, show_default=True, metavar="SECONDS",
              help="Runs, tool calls and subagents open longer than this are marked interrupted.")
@click.option("--idle", type=click.FloatRange(min=1), default=DEFAULT_IDLE_S, show_default=True, metavar="SECONDS",
              help="A log silent longer than this counts as a gateway restart: its open sessions are suspended.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.argument("roots", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.pass_obj
def ingest(obj, fmt: str, max_line: int, grace: float, idle: float, as_json: bool, roots: tuple[Path, ...]) -> None:
    """Catch up once on ROOTS (state dirs or telemetry dirs) and exit."""
    lock = writer_lock(obj.db)
    conn = open_writer(obj.db)
    writer = LedgerWriter(conn, idle_s=idle)
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
    # Runs cut off by a gateway restart were interrupted as their batch was written; the rest now.
    runs, tools, subagents = writer.interrupted
    summary = stats.as_dict() | {"interrupted_runs": runs + interrupted.runs,
                                 "interrupted_tool_calls": tools + interrupted.tool_calls,
                                 "interrupted_subagents": subagents + interrupted.subagents,
                                 "interrupted_sessions": interrupted.interrupted_sessions}
    if as_json:
        emit_json(summary)
    else:
        emit_pairs([(k.replace("_", " "), v) for k, v in summary.items()])
