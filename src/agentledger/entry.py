"""The ``agentledger`` executable: ``gate`` skips the full command-line stack to start fast."""

from __future__ import annotations

import sys


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "gate":
        from agentledger.hook import main as gate

        sys.exit(gate(sys.argv[2:]))
    from agentledger.cli import main as cli

    cli()
