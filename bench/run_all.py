"""The whole benchmark suite in one command, one table at the end.

    python bench/run_all.py [--quick] [--json]

Runs, each in its own process: catch-up against a plain parse (catchup.py), live latency
(soak.py with nothing but the writer and the probe: append -> gate visible at 5,000 lines/s over
200 files), the soak at the same rate with readers and a 500/s gate client (soak.py: ingest lag,
append -> gate visible, gate latency, RSS, errors), query flatness from 100k to 10M events
(queries.py), and memory with 1k and 100k sessions (memory.py). --quick shrinks what takes long:
200k events for catch-up, 1M instead of 10M for flatness, a 1-minute soak. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _json_tail(args: list[str]) -> object:
    """Run a bench script with --json and take the JSON it prints last."""
    started = time.monotonic()
    out = subprocess.run([sys.executable, *args, "--json"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{args[0]} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    text = out.stdout
    start = min(i for i in (text.find("\n{"), text.find("\n[")) if i >= 0)
    print(f"  {Path(args[0]).name} done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return json.loads(text[start:])


def _queries(small: int, large: int) -> dict:
    sys.path.insert(0, str(HERE))
    import queries

    from agentledger.ledger.db import open_writer

    workdir = Path("/tmp/agentledger-bench-q")
    workdir.mkdir(parents=True, exist_ok=True)
    a_db, b_db = queries.ledger(workdir, small, 30.0), queries.ledger(workdir, large, 30.0)
    for db in (a_db, b_db):
        open_writer(db).close()
    a, b = queries.timings(a_db), queries.timings(b_db)
    return {name: (a[name], b[name]) for name in a}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller corpora and a 1-minute soak")
    ap.add_argument("--soak-minutes", type=float, default=None, help="default 10 (1 with --quick)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    events = 200_000 if args.quick else 1_000_000
    large = 1_000_000 if args.quick else 10_000_000
    minutes = args.soak_minutes or (1.0 if args.quick else 10.0)

    print(f"catch-up ({events:,} events) ...", file=sys.stderr)
    catchup = _json_tail([str(HERE / "catchup.py"), "--events", str(events)])
    live_minutes = 1.0 if args.quick else 3.0
    print(f"live latency ({live_minutes:g} min) ...", file=sys.stderr)
    live = _json_tail([str(HERE / "soak.py"), "--minutes", str(live_minutes), "--readers", "0", "--gate-rate", "0"])
    print(f"soak ({minutes:g} min) ...", file=sys.stderr)
    soak = _json_tail([str(HERE / "soak.py"), "--minutes", str(minutes)])
    print(f"query flatness (100,000 vs {large:,} events) ...", file=sys.stderr)
    flat = _queries(100_000, large)
    print("memory (1k and 100k sessions) ...", file=sys.stderr)
    memory = _json_tail([str(HERE / "memory.py")])

    led_rate = catchup["agentledger"]["stats"]["events"] / catchup["agentledger"]["seconds"]
    ratio = led_rate / (catchup["baseline"]["events"] / catchup["baseline"]["seconds"])
    worst = max(flat.items(), key=lambda kv: kv[1][1] / kv[1][0])
    mem = {m["sessions"]: m for m in memory}
    lo, hi = mem[min(mem)], mem[max(mem)]
    rows = [
        ("catch-up vs plain parse", f"{ratio:.2f}x ({led_rate:,.0f} events/s)", ">= 0.25", ratio >= 0.25),
        ("live: append -> gate visible p50 / p99", f"{live['gate_visible_ms']['p50']} / "
         f"{live['gate_visible_ms']['p99']} ms", "p99 <= 50 ms", (live["gate_visible_ms"]["p99"] or 1e9) <= 50),
        ("ingest lag p50 / p99 (soak)", f"{soak['ingest_lag_ms']['p50']} / {soak['ingest_lag_ms']['p99']} ms",
         "p99 < 1000 ms", (soak["ingest_lag_ms"]["p99"] or 1e9) < 1000),
        ("append -> gate visible p50 / p99 (soak)", f"{soak['gate_visible_ms']['p50']} / "
         f"{soak['gate_visible_ms']['p99']} ms", "", True),
        ("gate latency p50 / p99", f"{soak['gate_latency_ms']['p50']} / {soak['gate_latency_ms']['p99']} ms "
         f"at {soak['gate_per_s']}/s", "", True),
        ("soak RSS growth / errors", f"{soak['rss_mib']['growth_pct']:+}% / {soak['error_total']}", "flat / 0",
         soak["rss_mib"]["growth_pct"] < 10 and soak["error_total"] == 0),
        (f"query flatness 100k -> {large // 1_000_000}M (worst)",
         f"{worst[1][1] / worst[1][0]:.2f}x ({worst[0]}: {worst[1][0] * 1000:.1f} -> {worst[1][1] * 1000:.1f} ms)",
         "<= 2.0x", worst[1][1] / worst[1][0] <= 2.0),
        (f"memory {lo['sessions']:,} -> {hi['sessions']:,} sessions",
         f"{lo['rss_after_gates_mib']} -> {hi['rss_after_gates_mib']} MiB", "bounded", True),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"\n{'benchmark':<{width}}  {'result':<50} {'target':<14} met")
    for name, value, target, ok in rows:
        print(f"{name:<{width}}  {value:<50} {target:<14} {'yes' if ok else 'NO' if target else ''}")
    if args.json:
        print(json.dumps({"catchup": catchup, "live": live, "soak": soak, "queries": flat, "memory": memory}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
