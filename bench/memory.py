"""Memory with many sessions: the daemon's RSS after catching up on 1k and on 100k sessions and
answering gates about them.

    python bench/memory.py [--sessions 1000 100000] [--asks 5000] [--json]

For each size: a corpus of two priced calls per session over 100 telemetry files, a real
``serve`` that catches up on it, then gate questions about --asks sessions spread over all of
them (each loads a hot view; the hot store keeps at most its max_entries in memory). Reported:
RSS when caught up, RSS after the gates, and the peak (VmHWM). The hot store is bounded, so the
100k figure should stay near the 1k one; the SQLite page cache (64 MiB at most) is the rest.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson

FILES = 100


def _status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def corpus(root: Path, sessions: int) -> None:
    handles = []
    for i in range(FILES):
        directory = root / "agents" / f"a{i:02d}" / "telemetry"
        directory.mkdir(parents=True)
        handles.append(open(directory / "events.jsonl", "wb"))  # noqa: SIM115 (closed below)
    n = 0
    for s in range(sessions):
        fh = handles[s % FILES]
        for _ in range(2):
            n += 1
            fh.write(orjson.dumps({
                "id": f"evt_{n:016x}", "ts": 1_790_000_000_000 + n, "seq": n, "agentId": f"a{s % FILES:02d}",
                "sessionKey": f"agent:a{s % FILES:02d}:s{s}", "sessionId": f"sid-{s}", "runId": f"run-{s}",
                "kind": "llm.call", "source": "diagnostic_event",
                "data": {"provider": "anthropic", "model": "claude-sonnet-4-5", "costUsd": 0.001,
                         "delta": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "total": 15}}}) + b"\n")
    for fh in handles:
        fh.close()


def measure(workdir: Path, sessions: int, asks: int) -> dict:
    root = workdir / f"logs-{sessions}"
    corpus(root, sessions)
    config = workdir / f"config-{sessions}.toml"
    config.write_text(f"""
db = "{workdir / f'ledger-{sessions}.db'}"

[http]
listen = "127.0.0.1:0"

[store]
state_dir = "{workdir / f'state-{sessions}'}"

[[sources]]
format = "oc-telemetry"
root = "{root}"

[[gates]]
name = "session-budget"
scope = "session"
metric = "cost_usd"
limit = 100.0
""")
    daemon = subprocess.Popen([sys.executable, "-m", "agentledger", "--config", str(config), "serve"],
                              stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in daemon.stderr:
            m = re.search(r'listening on (http://[^\s"]+)', line)
            if m:
                url = m.group(1)
                break
        started = time.monotonic()
        while True:
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=10) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.2)
        caught_up_s = time.monotonic() - started
        caught_up = _status(daemon.pid, "VmRSS")
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        step = max(1, sessions // asks)
        asked = 0
        for s in range(0, sessions, step):
            conn.request("GET", f"/v1/gate?session_key=agent:a{s % FILES:02d}:s{s}&tool=exec")
            body = json.loads(conn.getresponse().read())
            assert body["decision"] == "allow" and body["session_id"] == f"sid-{s}", body
            asked += 1
        conn.close()
        return {"sessions": sessions, "catch_up_s": round(caught_up_s, 1), "gates_asked": asked,
                "rss_caught_up_mib": round(caught_up / 2**20, 1),
                "rss_after_gates_mib": round(_status(daemon.pid, "VmRSS") / 2**20, 1),
                "peak_rss_mib": round(_status(daemon.pid, "VmHWM") / 2**20, 1)}
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--asks", type=int, default=5000, help="gate questions per size, spread over its sessions")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="agentledger-mem-"))
    try:
        results = [measure(workdir, n, args.asks) for n in args.sessions]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for r in results:
        print(f"{r['sessions']:>8,} sessions: caught up in {r['catch_up_s']} s, RSS {r['rss_caught_up_mib']} MiB; "
              f"after {r['gates_asked']:,} gates {r['rss_after_gates_mib']} MiB; peak {r['peak_rss_mib']} MiB")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
