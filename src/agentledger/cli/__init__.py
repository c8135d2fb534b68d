"""The ``agentledger`` command."""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import apsw
import click

from agentledger import __version__, logs
from agentledger.config import Config, Origins, listen_url, load_with_origins
from agentledger.ledger.db import LedgerBusy, LedgerError, damaged
from agentledger.ledger.queries import NotFound


class Context:
    """What every command shares: the effective configuration, read when first needed."""

    def __init__(self, config_path: str | None, db: str | None):
        self.config_path = config_path
        self.db_flag = db
        self._config: Config | None = None
        self.origins = Origins()  # where the configuration's settings were given, once it is read
        self.log_chosen = False  # --log-level or -v given
        self.log_json: bool | None = None  # None: JSON unless stderr is a terminal

    def configure(self, flags: dict | None = None, *, roots_exist: bool = False) -> Config:
        """The configuration with this command's flags (by dotted key path) on top; None means not given.
        ``roots_exist``: as ``load`` takes it."""
        self._config, self.origins = load_with_origins(self.config_path, {"db": self.db_flag, **(flags or {})},
                                                       roots_exist=roots_exist)
        return self._config

    @property
    def config(self) -> Config:
        return self._config or self.configure()

    @property
    def db(self) -> Path:
        return self.config.db


def _fail(message: str, code: int = 2) -> None:
    # Click lays some messages out on several lines ("Choose from:\n\truns,..."): an error is one line.
    message = " ".join(line.strip() for line in message.splitlines() if line.strip())
    # Under systemd, a line without a priority is journald's default, info: `journalctl -p warning`
    # then hid why the unit stopped.
    click.echo(f"{logs.journal_prefix(logging.ERROR, sys.stderr)}agentledger: {message}", err=True)
    sys.exit(code)


def daemon_url(flag: str | None, config: Config) -> str:
    """The running daemon: --url, else $AGENTLEDGER_URL, else the config's listen address."""
    from agentledger.address import client_url

    try:
        return client_url(flag, listen_url(config.http.listen), ("http", "https"))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _named_context(args: list[str]) -> click.Context:
    """The context of the command ``args`` name, read as far as they go: click leaves it off some usage
    errors (an option given without its value), where the help to see is still that command's."""
    ctx = click.Context(cli, info_name="agentledger", resilient_parsing=True)
    while isinstance(ctx.command, click.Group):
        # A group's own parse: its options read, the command's name and its args left.
        rest = click.Command.parse_args(ctx.command, ctx, list(args))
        command = ctx.command.get_command(ctx, rest[0]) if rest else None
        if command is None:
            break
        ctx, args = click.Context(command, parent=ctx, info_name=rest[0], resilient_parsing=True), rest[1:]
    return ctx


def main(args: list[str] | None = None) -> None:
    """Console entry point: usage and configuration errors are one line and exit code 2 (a group's help,
    shown for want of a command, keeps its lines)."""
    try:
        code = cli.main(args=args, prog_name="agentledger", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        # A group given no command: its help is what a new user asked for, laid out as help is.
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        ctx = exc.ctx or _named_context(sys.argv[1:] if args is None else args)
        where = f"agentledger {ctx.command_path.partition(' ')[2]}".strip()
        _fail(f"{exc.format_message()} (see `{where} --help`)")
    except LedgerBusy as exc:
        _fail(str(exc), 1)
    except NotFound as exc:
        _fail(str(exc).strip('"'), 1)
    except (LedgerError, ValueError) as exc:
        _fail(str(exc))
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        # Found by whichever read or write reached the damage first, in any command.
        _fail(str(damaged(None, exc)))
    except click.Abort:
        _fail("aborted", 130)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


class LazyGroup(click.Group):
    """A group that imports a command's module (one of this package's) only when the command is
    asked for, to run or for its help; the module registers its commands on the group."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy  # command name -> module

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands.keys() | self.lazy.keys())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            importlib.import_module(f"{__name__}.{self.lazy[cmd_name]}")
        return self.commands.get(cmd_name)


# Where each command is defined. A query loads the read side only; the pipeline, writer and
# daemon load for the commands that run them.
_QUERIES = ("costs", "errors", "events", "files", "inputs", "rejects", "run", "runs", "session", "sessions",
            "subagents", "timeline", "tools", "top", "tree", "usage")
COMMANDS = {"config": "config", "ingest": "ingest", "reprice": "ingest", "prune": "prune", "serve": "serve",
            "verify": "verify", "watch": "watch", **dict.fromkeys(_QUERIES, "queries")}


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.version_option(__version__, prog_name="agentledger")
# Both as they are given, checked where $AGENTLEDGER_CONFIG and $AGENTLEDGER_DB are: click's own check of a
# directory named no fix, and Path("") was "." (a directory).
@click.option("--config", "config_path", metavar="FILE", default=None,
              help="TOML config file (default: $AGENTLEDGER_CONFIG, else $XDG_CONFIG_HOME/agentledger/config.toml).")
@click.option("--db", metavar="FILE", default=None,
              help="Ledger database (default: $AGENTLEDGER_DB, else config `db`, else "
                   "$XDG_STATE_HOME/agentledger/ledger.db; serve's demo keeps one of its own unless given).")
@click.option("-v", "--verbose", is_flag=True, help="Log file events and progress to stderr (--log-level info).")
@click.option("--log-level", type=click.Choice(logs.LEVELS, case_sensitive=False), default=None,
              help="Least severe log lines shown on stderr [default: warning (info for serve), or info with -v].")
@click.option("--log-format", type=click.Choice(("auto", "text", "json")), default="auto", show_default=True,
              help="Log lines as text or one JSON object each; auto: text on a terminal, else JSON.")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, db: str | None, verbose: bool, log_level: str | None,
        log_format: str) -> None:
    """Index AI-agent gateway logs into a local ledger and ask it questions."""
    json = {"auto": None, "text": False, "json": True}[log_format]
    logs.setup(log_level or ("info" if verbose else "warning"), json=json)
    ctx.obj = Context(config_path, db)
    ctx.obj.log_chosen, ctx.obj.log_json = log_level is not None or verbose, json


@cli.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def gate(args: tuple[str, ...]) -> None:
    """Ask the running daemon's gates about a tool call (Claude Code hook: --hook claude-code).

    `agentledger gate --help` lists its options."""
    from agentledger.hook import main as gate_main

    sys.exit(gate_main(list(args)))
