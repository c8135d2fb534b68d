"""``agentledger config``: what the daemon and commands will actually use."""

from __future__ import annotations

import os

import click

from agentledger.cli import cli
from agentledger.cli.output import emit_json
from agentledger.config import config_file, to_toml


@cli.group()
def config() -> None:
    """Inspect the configuration (file < $AGENTLEDGER_* environment < flags)."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
@click.pass_obj
def show(obj, as_json: bool) -> None:
    """Print the effective configuration, as a TOML file that would give the same."""
    cfg = obj.config
    if as_json:
        emit_json(cfg.model_dump(mode="json"))
        return
    path, required = config_file(obj.config_path, os.environ)
    origin = str(path) if path is not None and (required or os.path.exists(path)) else "built-in defaults only"
    click.echo(f"# effective configuration; file: {origin}")
    click.echo(to_toml(cfg), nl=False)
