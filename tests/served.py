"""A real ``agentledger serve`` subprocess for tests, and the checks that a ledger came out right."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import apsw
from conftest import REPO, cli_env, ingest
from ledgerdump import dump
from serving import http_get, wait_for, write_config

from agentledger.hot.sessions import HotSessions, _from_ledger
from agentledger.ledger import queries
from agentledger.ledger.db import LedgerError, open_reader
from agentledger.ledger.verify import check_checkpoints, check_rollups


class Served:
    """``serve`` on a config file, until ``stop``; ``url`` once it listens. Its stderr is collected as it
    comes for as long as it runs: a serve whose stderr nobody reads blocks once it logs a pipe's worth."""

    def __init__(self, config: Path, *options: str):
        """``options``: agentledger's own, given before ``serve`` (``--log-format text``)."""
        self.config, self.options = config, options
        settings = tomllib.loads(config.read_text())
        self.db, self.state_dir = Path(settings["db"]), Path(settings["store"]["state_dir"])
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.stderr: list[str] = []

    @classmethod
    def on(cls, tmp_path: Path, root: Path, *, flush_interval_s: float = 0.0, rescan_s: float = 0.1,
           fmt: str = "oc-telemetry", state_dir: Path | None = None) -> Served:
        """On ``root`` alone with a config of its own in ``tmp_path``, hot views on disk as soon as they change."""
        return cls(write_config(tmp_path, root, fmt, "", rescan_s=rescan_s, state_dir=state_dir,
                                flush_interval_s=flush_interval_s))

    def start(self, fault: str | None = None, wait_listening: bool = True, **popen) -> None:
        """``popen``: for the process, as subprocess.Popen takes it (limits in ``preexec_fn``, ``pass_fds``)."""
        env = cli_env(self.db)
        env.pop("AGENTLEDGER_FAULT", None)
        if fault:
            env["AGENTLEDGER_FAULT"] = fault
        self.stderr = []
        self.url = None
        listening = threading.Event()
        self.proc = subprocess.Popen([sys.executable, "-m", "agentledger", *self.options, "--config",
                                      str(self.config), "serve"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
                                     **popen)

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
            if self.url is None:
                raise self._failed("serve did not start listening")

    def start_limited(self, limit: int, taken: int = 0) -> None:
        """``start`` under an open-file limit of ``limit``, soft and hard, with ``taken`` descriptors already open
        in it, as the rest of a process may hold them (connections, other libraries)."""
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(taken)]
        try:
            self.start(preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)), pass_fds=held)
        finally:
            for fd in held:
                os.close(fd)

    def descriptors(self, on: Path | None = None) -> int:
        """How many descriptors the process holds open; with ``on``, how many of them are that file."""
        fds = f"/proc/{self.proc.pid}/fd"
        if on is None:
            return len(os.listdir(fds))
        held = 0
        for fd in os.listdir(fds):
            try:
                held += os.readlink(f"{fds}/{fd}") == str(on)
            except FileNotFoundError:  # closed meanwhile
                pass
        return held

    def cpu_seconds(self) -> float:
        """The CPU time the process has used so far, its threads' all together."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until /readyz says serve has caught up with its sources."""
        try:
            wait_for(lambda: self.proc.poll() is not None or self._ready(), timeout)
        except AssertionError:
            raise self._failed(f"serve not ready in {timeout}s") from None
        if self.proc.poll() is not None:
            raise self._failed(f"serve exited with {self.proc.returncode} before it was ready")

    def _ready(self) -> bool:
        try:
            return self.get("/readyz")[0] == 200
        except urllib.error.URLError:
            return False  # no longer listening: its exit is told with its log

    def _failed(self, why: str) -> AssertionError:
        return AssertionError(f"{why}; its log:\n{self.log()}")

    def log(self) -> str:
        return "".join(self.stderr)

    def get(self, path: str) -> tuple[int, object]:
        return http_get(self.url, path)

    def post(self, path: str, body: dict) -> tuple[int, object]:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())

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


def serve(config: Path, *options: str) -> Served:
    """``serve`` on ``config``, once it has caught up with its sources."""
    served = Served(config, *options)
    try:
        served.start()
        served.wait_ready()
    except BaseException:
        served.kill()  # not left running for the rest of the session
        raise
    return served


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
        diffs, problems = check_rollups(conn), check_checkpoints(conn)[0] if checkpoints else []
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
