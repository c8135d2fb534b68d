"""``agentledger ingest``: catch up once and exit; ``agentledger reprice``."""

from __future__ import annotations

import os
import sys
from contextlib import closing
from pathlib import Path

import click

from agentledger.cli import cli
from agentledger.cli.output import emit_json, emit_pairs
from agentledger.config import (Config, Origins, default_sources, expand, missing_env_dirs, path_problem, prices_beside,
                                root_problem)
from agentledger.defaults import FORMATS, MAX_WAIT_S
from agentledger.ingest import Pipeline, specs_from_pairs, warn_empty_roots
from agentledger.ledger import reprice as repricing
from agentledger.ledger.db import LedgerError, WriterLock, ledger_exists
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.writer import LedgerWriter, now_ms
from agentledger.pricing import Pricer
from agentledger.tail.tailer import OutOfDescriptors


def _source(ctx, param, values: tuple[str, ...]) -> list[tuple[str, Path]]:
    pairs = []
    for value in values:
        fmt, sep, root = value.partition("=")
        if not sep or not root:
            raise click.BadParameter(f"{value!r} is not FORMAT=ROOT (e.g. claude-code=~/.claude)")
        if fmt not in FORMATS:
            raise click.BadParameter(f"unknown format {fmt!r} in {value!r}: choose one of {', '.join(FORMATS)}")
        # One that does not exist yet: serve waits for it, ingest refuses it (the configuration's check).
        try:
            pairs.append((fmt, RootPath(must_exist=False).convert(root, param, ctx)))
        except click.BadParameter as exc:
            raise click.BadParameter(f"{exc.message} (in {value!r})") from None
    return pairs


def _price_file(ctx, param, value: str | None) -> Path | None:
    """--prices as given, checked as a configured price file is and then read as it is, for its words when it
    is missing or no file (click's own check named no fix). An empty one names no file: as a Path, it was
    the working directory."""
    if value is None:
        return None
    problem = path_problem(value)
    if problem:
        raise click.BadParameter(f"{problem}: give the price file's path")
    try:
        return expand(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_PRICES_DEFAULT = ("default: config `prices` ($AGENTLEDGER_PRICES), else prices.toml beside the config file: "
                   "$XDG_CONFIG_HOME/agentledger/prices.toml by default; the same for ingest, serve and reprice")

source_options = [
    click.option("--format", "fmt", type=click.Choice(FORMATS), default="oc-telemetry", show_default=True,
                 help="Input format of the ROOT arguments."),
    click.option("--source", "sources", multiple=True, callback=_source, metavar="FORMAT=ROOT",
                 help="A source to read, e.g. claude-code=~/.claude; repeat for several."),
    click.option("--prices", callback=_price_file, metavar="FILE", default=None,
                 help="Price overrides (TOML [prices.\"model\"] input/output/cache_read/cache_write/cache_write_1h per "
                      f"million tokens; {_PRICES_DEFAULT})."),
]


def with_sources(f):
    for option in reversed(source_options):
        f = option(f)
    return f


def pricer_for(prices: Path | None, config: Config, origins: Origins) -> Pricer:
    """The pricer of --prices, else of the configuration's price file: the same for every command
    given the same configuration, so calls ``serve`` prices cost what ``reprice`` made the old ones.
    A file that cannot be read, or priced from, is named with where it was named: the fix is made there."""
    try:
        return Pricer.from_file(prices or config.prices)
    except ValueError as exc:
        origin = "--prices" if prices else origins.of(("prices",))[1]  # None: found beside the config file
        raise ValueError(f"{exc} (from {origin})" if origin else str(exc)) from None


def _progress_pipeline(writer, specs, max_line, pricer):
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
        writer, specs, max_line=max_line, pricer=pricer,
        on_total=lambda n: progress.update(task, total=(progress.tasks[0].completed + n)),
        on_progress=lambda n: progress.advance(task, n),
    )
    return pipeline, progress


class RootPath(click.Path):
    """A ROOT argument, refused as a configured root is (see root_problem), in the same words: an empty one
    too (as a Path it would be the working directory, read or followed without a word). Not click.Path's own
    checks: they called a root it could not look into missing or unreadable, where a configured one is read
    and reported unreadable, with the system's reason, and named no fix for one that is a file. A leading
    ``~`` is expanded, as in any other root: a quoted one, or one from a unit's ExecStart, reaches here as it
    was written. ``must_exist``: for a one-shot read, which has nothing to wait for."""

    def __init__(self, *, must_exist: bool):
        super().__init__(readable=False, path_type=Path)
        self.must_exist = must_exist

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            if not value.strip():
                self.fail("is empty: give the directory to read", param, ctx)
            try:
                value = str(expand(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        root = super().convert(value, param, ctx)
        problem = root_problem(root, must_exist=self.must_exist)
        if problem:
            self.fail(f"{str(root)!r} {problem}", param, ctx)
        return root


class _Stopped(click.ClickException):
    exit_code = 2  # stopped by how the machine is set up, not by the ledger or the logs


@cli.command()
@with_sources
@click.option("--max-line", type=click.IntRange(min=1024), default=None,
              help="Longest line indexed, in bytes; longer lines are rejected without being held in memory "
                   "(config `max_line`, default 32 MiB).")
@click.option("--grace", type=click.FloatRange(min=0, max=MAX_WAIT_S), default=None, metavar="SECONDS",
              help="Runs, tool calls and subagents open longer than this become interrupted "
                   "(config `[reconcile] grace_s`).")
@click.option("--idle", type=click.FloatRange(min=1, max=MAX_WAIT_S), default=None, metavar="SECONDS",
              help="A log silent longer than this counts as a gateway restart: its open sessions are suspended "
                   "(config `[reconcile] idle_s`, default 1800).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.argument("roots", nargs=-1, type=RootPath(must_exist=True))
@click.pass_obj
def ingest(obj, fmt: str, sources: list, prices: Path | None, max_line: int | None, grace: float | None,
           idle: float | None, as_json: bool, roots: tuple[Path, ...]) -> None:
    """Catch up once on ROOTS (in --format) and every --source, then exit.

    Without either it reads the config's [[sources]] (each root must exist), else what it finds:
    OpenClaw's state dir ($OPENCLAW_STATE_DIR, ~/.openclaw) and Claude Code's ($CLAUDE_CONFIG_DIR,
    else ~/.config/claude and ~/.claude)."""
    # ROOT arguments (in --format) plus every --source replace the config's sources, as for serve.
    pairs = [(fmt, r) for r in roots] + list(sources)
    config = obj.configure({"max_line": max_line, "reconcile.grace_s": grace, "reconcile.idle_s": idle,
                            "sources": [{"format": f, "root": str(r)} for f, r in pairs] or None}, roots_exist=True)
    max_line, grace = config.max_line, config.reconcile.grace_s
    if not config.sources and (missing := missing_env_dirs()):
        raise click.UsageError(f"{', '.join(missing)} does not exist: fix or unset it, or pass ROOT..., "
                               "or --source FORMAT=ROOT")
    specs = specs_from_pairs([(s.format, s.root) for s in config.sources] or default_sources())
    if not specs:
        raise click.UsageError("no sources found: pass ROOT..., or --source FORMAT=ROOT")
    pricer = pricer_for(prices, config, obj.origins)
    with WriterLock(obj.db) as lock, closing(lock.open()) as conn:
        writer = LedgerWriter(conn, idle_s=config.reconcile.idle_s, background_checkpoints=True)
        try:
            if sys.stderr.isatty() and not as_json:
                pipeline, progress = _progress_pipeline(writer, specs, max_line, pricer)
                with progress:
                    stats = pipeline.catch_up()
            else:
                pipeline = Pipeline(writer, specs, max_line=max_line, pricer=pricer)
                stats = pipeline.catch_up()
            warn_empty_roots(pipeline)
            interrupted = reconcile(writer, now_ms(), grace)
        except OutOfDescriptors as exc:
            raise _Stopped(f"ingest stopped, out of file descriptors: {exc}; what it read is kept, and the next "
                           "run reads on") from None
        finally:
            writer.close()
    # Runs cut off by a gateway restart were interrupted as their batch was written; the rest now.
    runs, tools, subagents = writer.interrupted
    summary = stats.as_dict() | {"interrupted_runs": runs + interrupted.runs,
                                 "interrupted_tool_calls": tools + interrupted.tool_calls,
                                 "interrupted_subagents": subagents + interrupted.subagents,
                                 "interrupted_sessions": interrupted.interrupted_sessions,
                                 "archived_sessions_ended": interrupted.archived_sessions}
    if as_json:
        emit_json(summary)
    else:
        emit_pairs([(k.replace("_", " "), v) for k, v in summary.items()])


@cli.command()
@click.option("--prices", callback=_price_file, metavar="FILE", default=None,
              help=f"Price overrides ({_PRICES_DEFAULT}).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def reprice(obj, prices: Path | None, as_json: bool) -> None:
    """Price again every call priced here (or left unpriced), with today's price table and overrides.

    Costs the logs carried are never touched; rollups move with the rows. Claude Code calls and runs that
    name no provider first take the one the price table lists their model under. Give it the configuration
    `serve` runs with (--config), so that both read the same price file."""
    if not ledger_exists(obj.db):
        raise LedgerError(f"no ledger at {obj.db}: nothing to reprice (pass --db)")
    configured = obj.config.prices
    pricer = pricer_for(prices, obj.config, obj.origins)
    with WriterLock(obj.db) as lock, closing(lock.open()) as conn:
        result = repricing.reprice(LedgerWriter(conn), pricer)
    summary = {"calls_checked": result.checked, "calls_changed": result.changed, "unpriced_calls": result.unpriced,
               "snapshots_changed": result.snapshots_changed, "calls_given_provider": result.calls_given_provider,
               "runs_given_provider": result.runs_given_provider,
               "prices": str(prices or configured) if prices or configured else None}
    if prices is not None and (configured is None or not _same_file(prices, configured)):
        # The calls indexed from now on would be priced from the configured file, not from this one.
        click.echo(f"agentledger: --prices {prices} is not the configuration's price file "
                   f"({configured or 'none: the bundled table alone'}), which serve and ingest price new calls "
                   f"from: copy it to {configured or prices_beside(obj.config_path, os.environ)}, or set `prices` in the config to it",
                   err=True)
    unmatched = pricer.unmatched()
    # A mistyped model id otherwise just leaves the old price, with "calls changed 0" as the only sign.
    for key in unmatched:
        click.echo(f'agentledger: price override "{key}" matched no call to price', err=True)
    if as_json:
        emit_json(summary | {"unmatched_overrides": unmatched})
    else:
        summary["prices"] = summary["prices"] or "the bundled table (no price file)"
        emit_pairs([(k.replace("_", " "), v) for k, v in summary.items()])


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


