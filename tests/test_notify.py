"""systemd integration, with a datagram socket standing in for systemd: READY, WATCHDOG, STOPPING."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from conftest import REPO, cli_env
from logwriter import LogDir, llm_call


def _messages(sock: socket.socket, until: str, timeout: float = 20.0) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data = sock.recv(4096).decode()
        except socket.timeout:
            break
        got += data.split("\n")
        if until in got:
            return got
    raise AssertionError(f"never got {until!r}; got {got}")


def test_ready_watchdog_stopping(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(llm_call(n) for n in range(1, 100)))
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    env = cli_env(tmp_path / "ledger.db")
    env["NOTIFY_SOCKET"] = str(path)
    env["WATCHDOG_USEC"] = "400000"
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "serve", "--listen", "127.0.0.1:0", "--rescan",
                             "5", str(logs.root)], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        first = _messages(sock, "READY=1")
        assert any(m.startswith("STATUS=catching up") for m in first)
        _messages(sock, "STATUS=following 1 source root(s); caught up")
        logs.append(b"".join(llm_call(n) for n in range(100, 150)))  # a live batch after the catch-up
        # The loop waits up to 5 s between rescans, yet the watchdog (0.4 s) keeps being fed.
        pings = 0
        deadline = time.monotonic() + 10
        later: list[str] = []
        while time.monotonic() < deadline and pings < 3:
            got = _messages(sock, "WATCHDOG=1", timeout=2)
            later += got
            pings += got.count("WATCHDOG=1")
        assert pings >= 3
        assert not any(m.startswith("STATUS=catching up") for m in later), later
        proc.send_signal(signal.SIGTERM)
        assert "STOPPING=1" in _messages(sock, "STOPPING=1")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()


def test_a_second_writer_on_the_same_ledger_is_refused(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    db = tmp_path / "ledger.db"
    first = subprocess.Popen([sys.executable, "-m", "agentledger", "--db", str(db), "serve", "--listen",
                              "127.0.0.1:0", str(logs.root)], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "caught up" not in line:
            line = first.stderr.readline()
            assert line, "the first daemon died"
        second = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "serve", "--listen",
                                 "127.0.0.1:0", str(logs.root)], cwd=REPO, capture_output=True, text=True,
                                timeout=30)
        assert second.returncode == 1 and "another agentledger process is writing" in second.stderr
        ingest = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "ingest", str(logs.root)],
                                cwd=REPO, capture_output=True, text=True, timeout=30)
        assert ingest.returncode == 1 and len(ingest.stderr.strip().splitlines()) == 1
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
