"""The ``agentledger`` executable: ``gate`` skips the full command-line stack to start fast, and
``serve`` catches its signals before loading it."""

from __future__ import annotations

import sys

# The group's options (agentledger.cli) that take a value: the word after one names no command.
GROUP_VALUED = ("--config", "--db", "--log-level", "--log-format")


def _command(args: list[str]) -> str | None:
    """The command ``args`` name, past the group's options."""
    value_next = False
    for arg in args:
        if value_next:
            value_next = False
        elif arg in GROUP_VALUED:
            value_next = True
        elif not arg.startswith("-"):
            return arg
    return None


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "gate":
        from agentledger.hook import main as gate

        sys.exit(gate(sys.argv[2:]))
    if _command(sys.argv[1:]) == "serve":
        # Loading the command line and reading the configuration take a good part of a second: a stop
        # asked for meanwhile is held for the daemon (see agentledger.signals), not left to kill it.
        from agentledger import signals

        signals.relay()
    from agentledger.cli import main as cli

    cli()
