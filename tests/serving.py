"""What a test of a real ``agentledger serve`` needs around it: its config, its logs, and asking it over HTTP."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

GATES = """
[[gates]]
name = "session-cost"
scope = "session"
metric = "cost_usd"
limit = 5.0

[[gates]]
name = "fleet-day"
scope = "global-day"
metric = "cost_usd"
limit = 50.0
"""


def copy_logs(src: Path, dst: Path) -> Path:
    """A writable copy of a corpus (the shared one is read-only), so tests can append to it."""
    shutil.copytree(src, dst)
    for path in dst.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def write_config(tmp_path: Path, root: Path, fmt: str = "oc-telemetry", extra: str = GATES, *,
                 rescan_s: float = 0.2, state_dir: Path | None = None, flush_interval_s: float = 5.0,
                 max_entries: int = 128) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f"""
db = "{tmp_path / 'ledger.db'}"
rescan_s = {rescan_s}

[http]
listen = "127.0.0.1:0"

[store]
state_dir = "{state_dir or tmp_path / 'state'}"
flush_interval_s = {flush_interval_s}
max_entries = {max_entries}

[[sources]]
format = "{fmt}"
root = "{root}"
{extra}""")
    return path


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout}s")


def http_get(url: str, path: str) -> tuple[int, object]:
    """Status and JSON body of a GET, error statuses included."""
    try:
        with urllib.request.urlopen(url + path, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
