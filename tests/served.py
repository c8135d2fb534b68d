"""A real ``agentledger serve`` subprocess for tests, and the checks that a ledger came out right."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
from conftest import REPO, cli_env, ingest
from ledgerdump import dump
from serving import http_get, wait_for  # noqa: F401  (wait_for: the fault and stress tests take it from here)

from agentledger.hot.sessions import HotSessions, _from_ledger
from agentledger.ledger import queries
from agentledger.ledger.db import LedgerError, open_reader
from agentledger.ledger.verify import check_checkpoints, check_rollups


class Served:
    """``serve`` on one root with its own config; stderr is collected as it comes."""

    def __init__(self, tmp_path: Path, root: Path, *, flush_interval_s: float = 0.0, rescan_s: float = 0.1,
                 fmt: str = "oc-telemetry", state_dir: Path | None = None):
        self.tmp_path = tmp_path
        self.db = tmp_path / "ledger.db"
        self.state_dir = state_dir or tmp_path / "state-dir"
        self.config = tmp_path / "config.toml"
        self.config.write_text(f"""
db = "{self.db}"
state_dir = "{self.state_dir}"
listen = "127.0.0.1:0"
rescan_s = {rescan_s}

[hot]
flush_interval_s = {flush_interval_s}

[[sources]]
format = "{fmt}"
root = "{root}"
""")
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.stderr: list[str] = []

    def start(self, fault: str | None = None, wait_listening: bool = True) -> None:
        env = cli_env(self.db)
        env.pop("AGENTLEDGER_FAULT", None)
        if fault:
            env["AGENTLEDGER_FAULT"] = fault
        self.stderr = []
        self.url = None
        listening = threading.Event()
        self.proc = subprocess.Popen([sys.executable, "-m", "agentledger", "--config", str(self.config), "serve"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)

        def collect(stream, lines: list[str]) -> None:
            for line in stream:
                lines.append(line)
                m = re.search(r'listening on (http://[^\s"]+)', line)
                if m:
                    self.url = m.group(1)
                    listening.set()
            stream.close()
            listening.set()

        self.reader = threading.Thread(target=collect, args=(self.proc.stderr, self.stderr), daemon=True)
        self.reader.start()
        if wait_listening:
            listening.wait(60)
            assert self.url is not None, "serve did not start listening: " + "".join(self.stderr)

    def log(self) -> str:
        return "".join(self.stderr)

    def get(self, path: str) -> tuple[int, object]:
        return http_get(self.url, path)

    def wait(self, timeout: float = 60.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.wait()


def count(db: Path, sql: str, params: tuple = ()) -> int:
    """A count read the way a user's query reads it; 0 while the ledger is not there yet."""
    if not db.exists():
        return 0
    try:
        conn = open_reader(db)
    except (LedgerError, apsw.Error):
        return 0  # being created or migrated
    try:
        return conn.execute(sql, params).fetchall()[0][0]
    finally:
        conn.close()


def assert_consistent(db: Path, checkpoints: bool = True) -> None:
    """``verify`` is clean: every rollup equals its recomputation, every checkpoint sits on a line boundary.

    Checkpoints are checked against the files as they are now: only meaningful once nothing writes them."""
    conn = open_reader(db)
    try:
        conn.execute("BEGIN")
        diffs, problems = check_rollups(conn), check_checkpoints(conn) if checkpoints else []
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert not diffs, [d.describe() for d in diffs[:10]]
    assert not problems, problems[:10]


def assert_equals_clean_build(db: Path, root: Path, tmp_path: Path, fmt: str = "oc-telemetry") -> None:
    clean = tmp_path / f"clean-{time.monotonic_ns()}.db"
    ingest(clean, root, fmt=fmt)
    assert dump(db) == dump(clean)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{clean}{suffix}").unlink(missing_ok=True)


def assert_hot_views_equal_ledger(db: Path, state_dir: Path, keys: set[str]) -> None:
    """The hot views a stopped daemon left on disk are those a replay of the ledger gives."""
    hot = HotSessions(state_dir / "hot")
    assert keys <= hot.store.keys()
    conn = open_reader(db)
    try:
        for key in hot.store.keys():
            view = queries.hot_session(conn, key)
            assert view is not None, key
            assert hot.store.get(key) == _from_ledger(view), key
    finally:
        conn.close()
    assert hot.store.quarantined == 0
