"""Query flatness: the same queries on a small and a large ledger.

    python bench/queries.py [--small 100000] [--large 10000000] [--days 30] [--workdir /tmp/agentledger-bench-q]

Builds (or reuses, under --workdir) a corpus and a ledger of each size, both spanning the same
--days (rollups are per time bucket, so "flat" means: more events in the same period cost no more
to query; a longer history does add day rows), with bench/gen.py and
agentledger's own catch-up, then times `sessions --limit 50`, `usage`, `costs --group-by model`
and `costs --group-by day` through the query API on a read-only connection (median of 7 runs,
after one warm-up). Rollups should make the large/small ratio stay under 2x. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gen import generate  # noqa: E402

from agentledger.ingest import Pipeline, specs_from  # noqa: E402
from agentledger.ledger import queries  # noqa: E402
from agentledger.ledger.db import open_reader, open_writer  # noqa: E402
from agentledger.ledger.writer import LedgerWriter  # noqa: E402

QUERIES = {
    "sessions --limit 50": lambda c: queries.sessions(c, queries.Window(limit=50)),
    "usage": lambda c: queries.usage(c, queries.Window()),
    "costs --group-by model": lambda c: queries.costs(c, queries.Window(), "model"),
    "costs --group-by day": lambda c: queries.costs(c, queries.Window(), "day"),
}


def ledger(workdir: Path, events: int, days: float) -> Path:
    name = f"{events}-{days:g}d"
    corpus = workdir / f"corpus-{name}"
    db = workdir / f"ledger-{name}.db"
    if not (corpus / "bench-manifest.json").exists():
        print(f"generating {events:,} events over {days:g} days ...", flush=True)
        generate(corpus, events, days=days)
    done = workdir / f"ledger-{name}.done"
    if not done.exists():
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        print(f"indexing {events:,} events ...", flush=True)
        started = time.perf_counter()
        conn = open_writer(db)
        stats = Pipeline(LedgerWriter(conn), specs_from("oc-telemetry", [corpus])).catch_up()
        conn.close()
        seconds = time.perf_counter() - started
        print(f"  {stats.events:,} events in {seconds:.1f} s ({stats.events / seconds:,.0f} events/s)", flush=True)
        done.write_text(f"{stats.events} {seconds:.1f}\n")
    return db


def timings(db: Path) -> dict[str, float]:
    conn = open_reader(db)
    out = {}
    try:
        for name, run in QUERIES.items():
            run(conn)
            samples = []
            for _ in range(7):
                started = time.perf_counter()
                run(conn)
                samples.append(time.perf_counter() - started)
            out[name] = statistics.median(samples)
    finally:
        conn.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--days", type=float, default=30.0, help="time span of both corpora")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/agentledger-bench-q"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    small, large = ledger(args.workdir, args.small, args.days), ledger(args.workdir, args.large, args.days)
    for db in (small, large):
        open_writer(db).close()  # bring a reused ledger up to this version's schema
    a, b = timings(small), timings(large)
    print(f"\n{'query':26s} {args.small:>12,} ev {args.large:>14,} ev   ratio (target <= 2.0)")
    for name in QUERIES:
        ratio = b[name] / a[name]
        print(f"{name:26s} {a[name] * 1000:12.2f} ms {b[name] * 1000:14.2f} ms   {ratio:5.2f} "
              f"{'ok' if ratio <= 2.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
