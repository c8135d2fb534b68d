"""Soak: a real ``serve`` under steady load, with readers and a gate client, for minutes on end.

    python bench/soak.py [--minutes 10] [--rate 5000] [--files 200] [--gate-rate 500] [--readers 2]
                         [--workdir DIR] [--json]

A writer appends --rate priced calls per second spread over --files live telemetry files (one
per agent); --readers threads run the CLI (`sessions`, `usage`, `costs`) back to back on the
same ledger; a client asks `GET /v1/gate` --gate-rate times per second over keep-alive
connections. Every 200 ms a probe line is appended to one of the files and timed twice: until
the ledger holds it (ingest lag) and until its session's hot view, what gates read, counts it
(append → gate visible). The daemon's RSS and the WAL's size are sampled every 5 s.

Reported: ingest lag and gate-visible latency p50/p99, gate latency p50/p99, RSS over time
(first and last sample after warm-up, and the growth between them), WAL size, and errors
(failed gate requests, failed CLI runs, rejected lines, lines missing at the end, an unclean
exit): the targets are lag p99 < 1 s, flat RSS and zero errors; with --readers 0 --gate-rate 0
(the live-latency run: nothing but the writer and the probe) gate-visible p99 <= 50 ms.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import compileall
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import apsw
import orjson

PROBE_AGENT = "probe"
# By the ledger's whole key: the id alone is no index's prefix, and a scan of a ledger growing by
# millions of rows every 2 ms would time the probe, not the daemon.
PROBE_LOOKUP = "SELECT 1 FROM events WHERE ts_ms = ? AND id = ?"


def _line(n: int, agent: str, ts: int) -> bytes:
    return orjson.dumps({
        "id": f"evt_{n:016x}", "ts": ts, "seq": n, "agentId": agent,
        "sessionKey": f"agent:{agent}:main", "sessionId": f"sid-{agent}", "runId": f"run-{agent}",
        "kind": "llm.call", "source": "diagnostic_event",
        "data": {"callIndex": n, "provider": "anthropic", "model": "claude-sonnet-4-5",
                 "delta": {"input": 100, "output": 20, "cacheRead": 0, "cacheWrite": 0, "total": 120},
                 "costUsd": 0.0005, "durationMs": 900},
    }) + b"\n"


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Soak:
    def __init__(self, args: argparse.Namespace, workdir: Path):
        self.args = args
        self.root = workdir / "logs"
        self.db = workdir / "ledger.db"
        self.agents = [f"a{i:03d}" for i in range(args.files - 1)] + [PROBE_AGENT]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.n = 0
        self.written = 0
        self.lag: list[float] = []
        self.visible: list[float] = []
        self.gate: list[float] = []
        self.errors: dict[str, int] = {"gate": 0, "cli": 0, "probe": 0}
        self.cli_runs = 0
        self.samples: list[tuple[float, int, int]] = []  # (seconds in, rss, wal bytes)
        self.files = {}
        for agent in self.agents:
            directory = self.root / "agents" / agent / "telemetry"
            directory.mkdir(parents=True, exist_ok=True)
            self.files[agent] = open(directory / "events.jsonl", "ab")  # noqa: SIM115 (open for the whole run)
        self.config = workdir / "config.toml"
        self.config.write_text(f"""
db = "{self.db}"

[http]
listen = "127.0.0.1:0"

[store]
state_dir = "{workdir / 'state'}"

[[sources]]
format = "oc-telemetry"
root = "{self.root}"

[[gates]]
name = "session-budget"
scope = "session"
metric = "cost_usd"
limit = 1000000.0
""")

    # -- the load --------------------------------------------------------------------------------
    def append(self, agent: str, count: int = 1) -> tuple[int, int]:
        """Append ``count`` lines; the ledger key (ts, id) of the last one."""
        with self.lock:
            first = self.n + 1
            self.n += count
            self.written += count
        ts = time.time_ns() // 1_000_000
        fh = self.files[agent]
        fh.write(b"".join(_line(first + i, agent, ts) for i in range(count)))
        fh.flush()
        return ts, first + count - 1

    def writer(self) -> None:
        tick = 0.01
        per_tick = self.args.rate * tick
        due = 0.0
        started = time.monotonic()
        i = 0
        loaders = self.agents[:-1]
        while not self.stop.is_set():
            due += per_tick
            lines = int(due)
            due -= lines
            # A few files per tick, in turn, so every file sees appends every second or so.
            step = max(1, lines // 5)
            while lines > 0:
                take = min(step, lines)
                self.append(loaders[i % len(loaders)], take)
                lines -= take
                i += 1
            i += 1
            started += tick
            time.sleep(max(0.0, started - time.monotonic()))

    def probe(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        ledger = apsw.Connection(f"file:{self.db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        ledger.setbusytimeout(5000)
        calls = 1  # the line every file starts with
        while not self.stop.is_set():
            ts, n = self.append(PROBE_AGENT)
            calls += 1
            t0 = time.monotonic()
            in_ledger = in_view = None
            while (in_ledger is None or in_view is None) and time.monotonic() - t0 < 30:
                if in_view is None:
                    conn.request("GET", f"/v1/sessions/agent:{PROBE_AGENT}:main/hot")
                    body = conn.getresponse().read()
                    if json.loads(body).get("llm_calls") == calls:
                        in_view = time.monotonic() - t0
                if in_ledger is None and ledger.execute(PROBE_LOOKUP, (ts, n)).fetchall():
                    in_ledger = time.monotonic() - t0
                time.sleep(0.002)
            if in_ledger is None or in_view is None:
                print(f"soak: probe {n} not seen (ledger {in_ledger}, view {in_view}): {body[:300]!r}", file=sys.stderr)
                self.errors["probe"] += 1
            else:
                self.lag.append(in_ledger)
                self.visible.append(in_view)
            self.stop.wait(max(0.0, 0.2 - (time.monotonic() - t0)))
        ledger.close()

    def gates(self, url: str, rate: float) -> None:
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        started = time.monotonic()
        k = 0
        while not self.stop.is_set():
            agent = self.agents[k % len(self.agents)]
            t0 = time.monotonic()
            try:
                conn.request("GET", f"/v1/gate?session_key=agent:{agent}:main&tool=exec")
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200 or json.loads(body)["decision"] != "allow":
                    self.errors["gate"] += 1
            except (OSError, http.client.HTTPException, ValueError):
                self.errors["gate"] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
            self.gate.append(time.monotonic() - t0)
            k += 1
            wait = started + k / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)

    def reader(self, index: int) -> None:
        commands = (["sessions", "--json", "--limit", "50"], ["usage", "--json"],
                    ["costs", "--group-by", "model", "--json"])
        k = index
        while not self.stop.is_set():
            ran = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(self.db),
                                  *commands[k % len(commands)]], capture_output=True, check=False)
            self.cli_runs += 1
            if ran.returncode != 0:
                self.errors["cli"] += 1
            k += 1

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> dict:
        # The daemon and every CLI reader start as an installed package does, from bytecode: with
        # PYTHONDONTWRITEBYTECODE set (as in some containers) a source checkout would otherwise be
        # compiled again by each of the readers' hundreds of processes.
        import agentledger

        compileall.compile_dir(Path(agentledger.__file__).parent, quiet=1)
        env = dict(os.environ)
        env.pop("AGENTLEDGER_FAULT", None)
        for agent in self.agents:  # every file exists with a first line before the daemon starts
            self.append(agent)
        daemon = subprocess.Popen([sys.executable, "-m", "agentledger", "--config", str(self.config), "serve"],
                                  stderr=subprocess.PIPE, text=True, env=env)
        log: list[str] = []
        url = None
        for line in daemon.stderr:
            log.append(line)
            m = re.search(r'listening on (http://[^\s"]+)', line)
            if m:
                url = m.group(1)
                break
        if url is None:
            raise SystemExit("soak: serve did not start: " + "".join(log))
        drain = threading.Thread(target=lambda: log.extend(daemon.stderr), daemon=True)
        drain.start()
        threads = [threading.Thread(target=self.writer), threading.Thread(target=self.probe, args=(url,))]
        threads += [threading.Thread(target=self.gates, args=(url, self.args.gate_rate / 2)) for _ in range(2)]
        threads += [threading.Thread(target=self.reader, args=(i,)) for i in range(self.args.readers)]
        started = time.monotonic()
        for t in threads:
            t.start()
        wal = Path(f"{self.db}-wal")
        try:
            while time.monotonic() - started < self.args.minutes * 60:
                time.sleep(5)
                self.samples.append((time.monotonic() - started, rss_bytes(daemon.pid),
                                     wal.stat().st_size if wal.exists() else 0))
                print(f"  {self.samples[-1][0]:5.0f} s  {self.written:>10,} lines  RSS "
                      f"{self.samples[-1][1] / 2**20:6.1f} MiB  WAL {self.samples[-1][2] / 2**20:6.1f} MiB  "
                      f"lag p99 {1000 * (percentile(self.lag[-50:], 0.99) or 0):6.0f} ms", file=sys.stderr)
        finally:
            self.stop.set()
            for t in threads:
                t.join()
        seconds = time.monotonic() - started
        ledger = apsw.Connection(f"file:{self.db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            indexed = ledger.execute("SELECT count(*) FROM events").fetchall()[0][0]
            if indexed >= self.written:
                break
            time.sleep(0.2)
        rejects = ledger.execute("SELECT count(*) FROM rejects").fetchall()[0][0]
        ledger.close()
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=60)
        drain.join(timeout=10)
        for fh in self.files.values():
            fh.close()
        tracebacks = sum("Traceback" in line for line in log)
        errors = {**self.errors, "rejected_lines": rejects, "missing_lines": max(self.written - indexed, 0),
                  "daemon_exit": int(code != 0), "tracebacks": tracebacks}
        # Warm-up: SQLite's page cache (64 MiB) fills in the first minute or so at this rate.
        warm = [s for s in self.samples if s[0] >= min(120.0, seconds / 3)] or self.samples
        return {
            "minutes": round(seconds / 60, 2), "lines": self.written, "lines_per_s": round(self.written / seconds),
            "files": len(self.agents), "gate_requests": len(self.gate),
            "alone": self.args.readers == 0 and self.args.gate_rate == 0,  # the live-latency run
            "gate_per_s": round(len(self.gate) / seconds), "cli_runs": self.cli_runs, "probes": len(self.lag),
            "ingest_lag_ms": {"p50": _ms(percentile(self.lag, 0.5)), "p99": _ms(percentile(self.lag, 0.99))},
            "gate_visible_ms": {"p50": _ms(percentile(self.visible, 0.5)), "p99": _ms(percentile(self.visible, 0.99))},
            "gate_latency_ms": {"p50": _ms(percentile(self.gate, 0.5)), "p99": _ms(percentile(self.gate, 0.99))},
            "rss_mib": {"first": _mib(warm[0][1]), "last": _mib(warm[-1][1]),
                        "max": _mib(max(s[1] for s in self.samples)),
                        "growth_pct": round(100 * (warm[-1][1] - warm[0][1]) / warm[0][1], 1)},
            "rss_series_mib": [(round(t), _mib(r)) for t, r, _ in self.samples],
            "wal_mib": {"last": _mib(self.samples[-1][2]), "max": _mib(max(s[2] for s in self.samples))},
            "errors": errors, "error_total": sum(errors.values()),
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


def report(res: dict) -> str:
    def met(ok: bool) -> str:
        return "ok" if ok else "NOT met"

    lag, vis, gate, rss = res["ingest_lag_ms"], res["gate_visible_ms"], res["gate_latency_ms"], res["rss_mib"]
    rows = [
        ("duration", f"{res['minutes']} min", ""),
        ("lines written", f"{res['lines']:,} ({res['lines_per_s']:,}/s over {res['files']} files)", ""),
        ("ingest lag p50 / p99", f"{lag['p50']} / {lag['p99']} ms", met((lag["p99"] or 1e9) < 1000) + " (p99 < 1 s)"),
        ("append -> gate visible p50 / p99", f"{vis['p50']} / {vis['p99']} ms",
         met((vis["p99"] or 1e9) <= 50) + " (p99 <= 50 ms, the live run's target)" if res["alone"] else ""),
        ("gate latency p50 / p99", f"{gate['p50']} / {gate['p99']} ms ({res['gate_per_s']}/s)", ""),
        ("CLI reader runs", f"{res['cli_runs']}", ""),
        ("daemon RSS after warm-up", f"{rss['first']} -> {rss['last']} MiB ({rss['growth_pct']:+}%), max {rss['max']}",
         met(rss["growth_pct"] < 10) + " (flat: < 10% growth)"),
        ("WAL size last / max", f"{res['wal_mib']['last']} / {res['wal_mib']['max']} MiB", ""),
        ("errors", ", ".join(f"{k} {v}" for k, v in res["errors"].items()), met(res["error_total"] == 0) + " (zero)"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name:<{width}}  {value:<55} {target}" for name, value, target in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=5000, help="lines per second")
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--gate-rate", type=float, default=500.0, help="gate requests per second")
    ap.add_argument("--readers", type=int, default=2, help="CLI reader threads")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the logs and ledger here (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args(argv)
    if args.files < 2:
        ap.error("--files must be at least 2 (one of them carries the probes)")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentledger-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        print(f"soak: {args.minutes:g} min at {args.rate:,} lines/s over {args.files} files, gates at "
              f"{args.gate_rate:g}/s, {args.readers} CLI readers; in {workdir}", file=sys.stderr)
        res = Soak(args, workdir).run()
        print(report(res))
        if args.json:
            print(json.dumps(res, indent=2))
        return 0
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
