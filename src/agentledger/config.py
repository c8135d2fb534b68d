"""Where things live by default."""

from __future__ import annotations

import os
from pathlib import Path


def state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "agentledger"


def default_db() -> Path:
    env = os.environ.get("AGENTLEDGER_DB")
    return Path(env).expanduser() if env else state_home() / "ledger.db"


def demo_dir() -> Path:
    return state_home() / "demo"


def openclaw_state_dirs() -> list[Path]:
    """OpenClaw's state dir: $OPENCLAW_STATE_DIR, else ~/.openclaw, else its legacy names."""
    env = os.environ.get("OPENCLAW_STATE_DIR")
    if env:
        return [Path(env).expanduser()]
    home = Path.home()
    for name in (".openclaw", ".clawdbot", ".moltbot", ".moldbot"):
        if (home / name).is_dir():
            return [home / name]
    return []
