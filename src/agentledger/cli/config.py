"""``agentledger config``: what the daemon and commands will actually use."""

from __future__ import annotations

import os

import click

from agentledger.cli import cli
from agentledger.cli.output import emit_json
from agentledger.config import config_file, not_utf8, to_json, to_toml


@cli.group()
def config() -> None:
    """Inspect the configuration (file < $AGENTLEDGER_* environment < flags)."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
@click.pass_obj
def show(obj, as_json: bool) -> None:
    """Print the effective configuration, as a TOML file that would give the same."""
    cfg = obj.config
    for key, shown, env in not_utf8(cfg):
        # Said, not only shown: the text printed names another file than the one in effect.
        held = ("written with \\xNN for each byte that is not" if as_json else
                f"written as a comment, so that this output read as a config file leaves it unset; set it by ${env}")
        click.echo(f"agentledger: {key}: {shown} is not UTF-8, which {'JSON' if as_json else 'TOML'} cannot hold: "
                   f"{held}", err=True)
    if as_json:
        emit_json(to_json(cfg))
        return
    path, required = config_file(obj.config_path, os.environ)
    origin = str(path) if path is not None and (required or os.path.exists(path)) else "built-in defaults only"
    click.echo(f"# effective configuration; file: {origin}")
    click.echo(to_toml(cfg), nl=False)
