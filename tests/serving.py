"""A real ``agentledger serve`` subprocess for tests that look at it from outside: a browser, a terminal."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import REPO, cli_env

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
                 rescan_s: float = 0.2) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f"""
db = "{tmp_path / 'ledger.db'}"
state_dir = "{tmp_path / 'state'}"
listen = "127.0.0.1:0"
rescan_s = {rescan_s}

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


class Served:
    """``serve`` with a config file, until ``stop``; ``url`` once it listens and has caught up."""

    def __init__(self, config: Path, tmp_path: Path):
        self.config = config
        self.env = cli_env(tmp_path / "ledger.db")
        self.proc = subprocess.Popen([sys.executable, "-m", "agentledger", "--config", str(config), "serve"],
                                     stderr=subprocess.PIPE, text=True, cwd=REPO, env=self.env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = re.search(r'listening on (http://[^\s"]+)', self.proc.stderr.readline())
            if m:
                self.url = m.group(1)
                break
        else:
            self.stop()
            raise AssertionError("serve did not start listening")
        wait_for(lambda: self.get("/readyz")[0] == 200, what="serve caught up")

    def get(self, path: str) -> tuple[int, object]:
        return http_get(self.url, path)

    def post(self, path: str, body: dict) -> tuple[int, object]:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        self.proc.stderr.close()
        return code
