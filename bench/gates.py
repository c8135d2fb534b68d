"""Gate benchmarks: decision latency over HTTP, `agentledger gate` start-up, memory vs sessions seen.

    python bench/gates.py [--events 100000] [--rate 1000] [--seconds 10] [--sessions 1000,100000]

1. A real `serve` over a generated corpus with four gates; a client asks GET /v1/gate at a fixed
   rate over keep-alive connections, for the 100 most recent sessions of the corpus (an active
   set that fits the hot store, as a gateway's live sessions do). Reported: p50/p99 inside the
   handler (the Server-Timing header) and end to end. Targets: p99 <= 1 ms / <= 5 ms.
2. Wall time of `agentledger gate --hook claude-code` (daemon answering) against `python3 -c pass`,
   alternating runs, medians. Target: ratio <= 2.
3. Peak RSS of a daemon-like process (ledger writer + hot views fed after each commit + gates)
   that has seen N sessions live, for each N. Target: 100k / 1k <= 1.3 (the LRU bounds memory).

Figures are printed, never asserted. Scratch files go in a new temp dir under --tmp (default: the
system's), removed when the run ends.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen import generate  # noqa: E402

GATES = """
[[gates]]
name = "session-cost"
scope = "session"
metric = "cost_usd"
limit = 5.0

[[gates]]
name = "family-cost"
scope = "session-family"
metric = "cost_usd"
limit = 20.0

[[gates]]
name = "agent-day"
scope = "agent-day"
metric = "tokens"
limit = 1e12

[[gates]]
name = "fleet-day"
scope = "global-day"
metric = "cost_usd"
limit = 1e9
"""


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _serve(work: Path, root: Path, gates: str = GATES) -> tuple[subprocess.Popen, str]:
    """A `serve` of ``root`` with ``gates`` (TOML), caught up: the process and its host:port."""
    config = work / "config.toml"
    config.write_text(f'db = "{work / "ledger.db"}"\n[http]\nlisten = "127.0.0.1:0"\n[store]\n'
                      f'state_dir = "{work / "state"}"\n[[sources]]\nformat = "oc-telemetry"\nroot = "{root}"\n' + gates)
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "--config", str(config), "serve"],
                            stderr=subprocess.PIPE, text=True)
    url = None
    try:
        for line in proc.stderr:
            m = re.search(r'listening on http://([^\s"]+)', line)
            if m:
                url = m.group(1)
            if "following live" in line:
                break
    except BaseException:  # Ctrl-C during the catch-up: no serve left writing in a scratch dir being removed
        proc.kill()
        proc.wait()
        raise
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
    assert url, "serve did not start"
    return proc, url


def _session_keys(db: Path, limit: int = 100) -> list[str]:
    import apsw

    conn = apsw.Connection(f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    keys = [k for (k,) in conn.execute("SELECT session_key FROM sessions WHERE session_key IS NOT NULL "
                                       "ORDER BY last_ms DESC LIMIT ?", (limit,))]
    conn.close()
    return keys


class Client:
    """Keep-alive connections to ``host:port``, one per thread; each request's in-handler and end-to-end time
    in ms."""

    def __init__(self, url: str, timeout: float = 10.0):
        host, port = url.rsplit(":", 1)
        self.host, self.port, self.timeout = host, int(port), timeout
        self.local = threading.local()
        self.lock = threading.Lock()
        self.errors: Counter[str] = Counter()  # by kind: the figure to report is how many failed, and how

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return conn

    def request(self, method: str, path: str, body: bytes | None = None,
                expect: bytes | None = None) -> tuple[float, float] | None:
        """The timings of a 200 whose body holds ``expect``; None for any other answer or none."""
        conn = self._conn()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        started = time.perf_counter()
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            elapsed = (time.perf_counter() - started) * 1000
            if response.status != 200 or (expect is not None and expect not in answer):
                raise RuntimeError(response.status)
        except Exception as exc:  # counted, not raised
            with self.lock:
                self.errors[type(exc).__name__] += 1
            conn.close()
            self.local.conn = None
            return None
        timing = response.getheader("Server-Timing", "")
        return float(timing.split("dur=")[1]) if "dur=" in timing else float("nan"), elapsed


def ask_gates(client: Client, path: Callable[[int], str], rate: float, deadline: float,
              out: list[tuple[float, float]], first_at: float | None = None) -> None:
    """Gate questions, GET ``path(n)`` for n = 0, 1, ..., at ``rate`` per second from ``first_at`` (default
    now) until ``deadline``; each decision's timings go to ``out``. Paced by the clock, not by the answers:
    a slow answer is not followed by fewer questions."""
    interval, n = 1 / rate, 0
    next_at = time.monotonic() if first_at is None else first_at
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        got = client.request("GET", path(n), expect=b'"decision"')
        n += 1
        if got is not None:
            out.append(got)


def latency(url: str, keys: list[str], rate: int, seconds: float, workers: int = 4) -> dict:
    """Ask at ``rate`` requests/s in total, spread over ``workers`` keep-alive connections."""
    client = Client(url)
    timings: list[tuple[float, float]] = []
    started = time.monotonic()
    deadline = started + seconds

    def worker(offset: int) -> None:
        # Staggered, so that together the workers ask at an even pace.
        ask_gates(client, lambda n: f"/v1/gate?session_key={keys[(offset + n * workers) % len(keys)]}&tool=exec",
                  rate / workers, deadline, timings, first_at=started + offset / rate)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    handler, end_to_end = [h for h, _ in timings], [e for _, e in timings]
    return {"requests": len(end_to_end), "errors": sum(client.errors.values()), "rate": len(end_to_end) / seconds,
            "handler_p50_ms": _pct(handler, 0.5), "handler_p99_ms": _pct(handler, 0.99),
            "e2e_p50_ms": _pct(end_to_end, 0.5), "e2e_p99_ms": _pct(end_to_end, 0.99)}


def startup(url: str, key: str, runs: int = 30) -> dict:
    """Median wall time of the gate command (asking the daemon) and of a bare interpreter."""
    exe = Path(sys.executable).with_name("agentledger")
    payload = json.dumps({"session_id": key, "hook_event_name": "PreToolUse", "tool_name": "Bash",
                          "tool_input": {"command": "ls"}, "tool_use_id": "toolu_bench"}).encode()
    gate_cmd = [str(exe), "gate", "--hook", "claude-code", "--url", f"http://{url}"]
    bare = [sys.executable, "-c", "pass"]  # the interpreter the command itself runs on
    times: dict[str, list[float]] = {"gate": [], "bare": []}
    for _ in range(runs):
        for name, cmd in (("gate", gate_cmd), ("bare", bare)):
            started = time.perf_counter()
            subprocess.run(cmd, input=payload, capture_output=True, check=True)
            times[name].append((time.perf_counter() - started) * 1000)
    gate, base = statistics.median(times["gate"]), statistics.median(times["bare"])
    return {"gate_ms": gate, "python_ms": base, "ratio": gate / base}


_RSS_CHILD = r"""
import resource, sys
from pathlib import Path
from zoneinfo import ZoneInfo
from agentledger.config import GateConfig
from agentledger.daemon import LiveState
from agentledger.facts import LlmCall, Tokens
from agentledger.gates import GateKeeper
from agentledger.hot.sessions import HotSessions
from agentledger.ledger.db import ReaderPool, open_writer
from agentledger.ledger.writer import LedgerWriter

work, n = Path(sys.argv[1]), int(sys.argv[2])
conn = open_writer(work / "ledger.db")
writer = LedgerWriter(conn)
row = writer.add_file("oc-telemetry", str(work), str(work / "f"), b"x", 0, 0, 0, "active")
hot = HotSessions(work / "hot", max_entries=128, flush_interval_s=5.0)
readers = ReaderPool(work / "ledger.db")
keeper = GateKeeper((GateConfig(name="s", scope="session", metric="cost_usd", limit=5.0),), hot, readers,
                    ZoneInfo("UTC"))
live = LiveState(conn, hot, keeper)
live.caught_up()
from agentledger.ledger.writer import Batch
offset, per_batch, event = 0, 200, 0
for start in range(0, n, per_batch):
    facts = []
    for i in range(start, min(n, start + per_batch)):
        event += 1
        facts.append((offset, 100, LlmCall(event_id=event, ts_ms=1_790_000_000_000 + event, kind="llm.call",
                      source="oc-telemetry", agent_id="main", session_key=f"agent:main:s{i}", session_id=f"sid-{i}",
                      run_id=f"run-{i}", provider="anthropic", model="m", tokens=Tokens(input=10, total=10),
                      cost_pico=10**9)))
        offset += 100
    result = writer.apply(Batch(row.id, str(work / "f"), offset - 100 * len(facts), offset, len(facts), offset,
                                facts))
    live.committed(result.sessions, result.position)
    keeper.decide(f"agent:main:s{start}", "exec")
    hot.expire()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, hot.size())
"""


def memory(sessions: list[int], tmp: Path) -> dict:
    out = {}
    for n in sessions:
        work = Path(tempfile.mkdtemp(prefix=f"rss-{n}-", dir=tmp))
        ran = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(work), str(n)], capture_output=True, text=True,
                             check=True)
        rss_kb, in_memory = ran.stdout.split()
        out[str(n)] = {"peak_rss_mb": int(rss_kb) / 1024, "views_in_memory": int(in_memory)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sessions", default="1000,100000")
    parser.add_argument("--tmp", type=Path, default=None,
                        help="where the scratch dir goes (tmpfs such as /dev/shm keeps fsync cheap)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentledger-gates-", dir=args.tmp) as scratch:
        tmp = Path(scratch)
        corpus = tmp / "corpus"
        # Recent events, so the daemon's retention has nothing to prune while it is measured.
        generate(corpus, args.events, days=2, start=(dt.date.today() - dt.timedelta(days=3)).isoformat())
        proc, url = _serve(tmp, corpus)
        try:
            keys = _session_keys(tmp / "ledger.db")
            lat = latency(url, keys, args.rate, args.seconds)
            start = startup(url, keys[0])
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        mem = memory([int(s) for s in args.sessions.split(",")], tmp)
    print(f"decisions over HTTP at {args.rate}/s for {args.seconds:.0f} s ({lat['requests']} asked, "
          f"{lat['errors']} errors, {lat['rate']:.0f}/s achieved; {len(keys)} sessions):")
    print(f"  inside the handler  p50 {lat['handler_p50_ms']:.3f} ms  p99 {lat['handler_p99_ms']:.3f} ms"
          f"  (target p99 <= 1 ms: {'met' if lat['handler_p99_ms'] <= 1 else 'NOT met'})")
    print(f"  end to end          p50 {lat['e2e_p50_ms']:.3f} ms  p99 {lat['e2e_p99_ms']:.3f} ms"
          f"  (target p99 <= 5 ms: {'met' if lat['e2e_p99_ms'] <= 5 else 'NOT met'})")
    print(f"`agentledger gate --hook claude-code` {start['gate_ms']:.1f} ms vs `python -c pass` "
          f"{start['python_ms']:.1f} ms: ratio {start['ratio']:.2f} (target <= 2: "
          f"{'met' if start['ratio'] <= 2 else 'NOT met'})")
    sizes = sorted(mem, key=int)
    for n in sizes:
        print(f"{int(n):>8,} sessions seen live: peak RSS {mem[n]['peak_rss_mb']:.1f} MB, "
              f"{mem[n]['views_in_memory']} views in memory")
    ratio = mem[sizes[-1]]["peak_rss_mb"] / mem[sizes[0]]["peak_rss_mb"]
    print(f"RSS ratio {int(sizes[-1]):,} / {int(sizes[0]):,} sessions: {ratio:.2f} (target <= 1.3: "
          f"{'met' if ratio <= 1.3 else 'NOT met'})")
    print(orjson.dumps({"latency": lat, "startup": start, "memory": mem}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
