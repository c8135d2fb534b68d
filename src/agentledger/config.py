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


def claude_config_dirs() -> list[Path]:
    """Claude Code's config dirs: $CLAUDE_CONFIG_DIR (a comma list), else ~/.config/claude and ~/.claude."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    if env:
        return [Path(p.strip()).expanduser() for p in env.split(",") if p.strip()]
    home = Path.home()
    return [d for d in (home / ".config" / "claude", home / ".claude") if d.is_dir()]


def default_sources() -> list[tuple[str, Path]]:
    """(format, root) for every producer found in its usual place; empty when there is none."""
    pairs: list[tuple[str, Path]] = []
    for state in openclaw_state_dirs():
        if state.is_dir():
            # Telemetry and transcripts record the same model calls: read one of them, the
            # telemetry extension's where it is installed (it also sees subagents and messages).
            has_telemetry = any((agent / "telemetry").is_dir() for agent in (state / "agents").glob("*"))
            pairs.append(("oc-telemetry" if has_telemetry else "oc-transcript", state))
    pairs += [("claude-code", d) for d in claude_config_dirs() if d.is_dir()]
    return pairs
