"""Catch-up throughput: agentledger against a plain orjson loop over the same corpus.

    python bench/catchup.py [--events 1000000] [--agents 2] [--seed 1] [--keep DIR | --corpus DIR] [--breakdown] [--json]

1. Generates a corpus (bench/gen.py) in a temp dir, or into DIR with --keep (kept afterwards),
   or reuses an existing state dir with --corpus DIR.
2. Baseline: read every telemetry file line by line and ``orjson.loads`` each line.
3. agentledger: ``Pipeline(LedgerWriter(open_writer(db), background_checkpoints=True),
   specs_from("oc-telemetry", [root])).catch_up()`` on a fresh DB in a temp dir, as ``agentledger ingest`` does.

4. With --breakdown, two more measurements say where the catch-up's time goes: the same loop as the
   baseline decoding and pricing each line as the pipeline does (no ledger), and a second catch-up
   with SQLite's statement profile on (``SQLITE_TRACE_PROFILE``), whose summed statement times are
   the time spent inside SQLite. The profile slows that run a little: its total is not the figure.

Each measurement runs in its own child process, so its peak RSS (VmHWM on Linux, else
``getrusage``) is that of the measurement alone. Figures and the ratio against the target are
printed, never asserted; the run fails (exit 1) only if the ledger did not index exactly the
events of the corpus.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TARGET_RATIO = 0.25
CORPUS_GLOB = "agents/*/telemetry/events*.jsonl"


def _peak_rss_bytes() -> int:
    """Peak RSS of this process.

    On Linux, ``getrusage().ru_maxrss`` keeps the parent's high-water mark across fork+exec, so a
    child started by a big parent reports the parent's peak; /proc's VmHWM is this image's own.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB


def _files(root: Path) -> list[Path]:
    return sorted(root.glob(CORPUS_GLOB))


# -- measurements (each in a child process) ------------------------------------------------
def measure_baseline(root: Path) -> dict:
    import orjson

    files = _files(root)
    for path in files:  # warm the page cache so both measurements read from memory
        with open(path, "rb") as fh:
            while fh.read(8 << 20):
                pass
    loads = orjson.loads
    lines = nbytes = 0
    t0 = time.perf_counter()
    for path in files:
        with open(path, "rb") as fh:
            for line in fh:
                loads(line)
                lines += 1
                nbytes += len(line)
    seconds = time.perf_counter() - t0
    return {"events": lines, "bytes": nbytes, "files": len(files), "seconds": seconds,
            "peak_rss": _peak_rss_bytes()}


def measure_decode(root: Path) -> dict:
    """The baseline's loop, decoding and pricing each line as the pipeline does: the part of a catch-up
    that needs no ledger."""
    from agentledger.facts import LlmCall
    from agentledger.pricing import Pricer
    from agentledger.sources.oc_telemetry import decode

    files = _files(root)
    for path in files:
        with open(path, "rb") as fh:
            while fh.read(8 << 20):
                pass
    price = Pricer().apply
    lines = 0
    t0 = time.perf_counter()
    for path in files:
        with open(path, "rb") as fh:
            offset = 0
            for line in fh:
                fact = decode(line.rstrip(b"\n"), offset)
                if type(fact) is LlmCall:
                    price(fact)
                offset += len(line)
                lines += 1
    return {"events": lines, "seconds": time.perf_counter() - t0}


def measure_agentledger(root: Path, db: Path, profile_sql: bool = False) -> dict:
    from agentledger.ingest import Pipeline, specs_from
    from agentledger.ledger.db import open_writer
    from agentledger.ledger.writer import LedgerWriter

    t0 = time.perf_counter()
    conn = open_writer(db)
    statements: dict[str, list] = {}
    if profile_sql:
        import apsw

        def traced(event: dict) -> None:
            acc = statements.setdefault(" ".join(event["sql"].split())[:90], [0, 0])
            acc[0] += event["nanoseconds"]
            acc[1] += 1

        conn.trace_v2(apsw.SQLITE_TRACE_PROFILE, traced)
    writer = LedgerWriter(conn, background_checkpoints=True)  # as `agentledger ingest` runs it
    pipeline = Pipeline(writer, specs_from("oc-telemetry", [root]))
    t1 = time.perf_counter()
    stats = pipeline.catch_up()
    t2 = time.perf_counter()
    writer.close()
    conn.close()  # the last connection to close checkpoints the WAL into the database
    t3 = time.perf_counter()
    import apsw

    check = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    indexed_rows = check.execute("SELECT count(*) FROM events").fetchall()[0][0]
    check.close()
    wal = Path(str(db) + "-wal")
    return {
        "stats": stats.as_dict(),
        "seconds": t2 - t1,
        "open_seconds": t1 - t0,
        "close_seconds": t3 - t2,
        "db_bytes": db.stat().st_size,
        "wal_bytes": wal.stat().st_size if wal.exists() else 0,
        "event_rows": indexed_rows,
        "peak_rss": _peak_rss_bytes(),
        "sql_seconds": sum(ns for ns, _ in statements.values()) / 1e9,
        "dearest_sql": [(round(ns / 1e9, 3), n, sql) for sql, (ns, n) in
                        sorted(statements.items(), key=lambda kv: -kv[1][0])[:5]],
    }


def _code_version() -> str:
    """agentledger's version and, in a git checkout, the commit (``+dirty`` if src/ has changes)."""
    try:
        from importlib.metadata import version

        out = f"agentledger {version('agentledger')}"
    except Exception:
        out = "agentledger"
    repo = HERE.parent
    if (repo / ".git").exists():
        try:
            head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True, timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "src", "schema"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            if head:
                out += f" at {head}{'+dirty' if dirty else ''}"
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def _child(kind: str, *args: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, *args]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"catchup.py: the {kind} measurement failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- report --------------------------------------------------------------------------------
def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def breakdown(base: dict, led: dict, dec: dict, prof: dict) -> str:
    """Where the catch-up's time went, each part as a share of it, and what the target leaves."""
    total = led["seconds"]
    sql = prof["sql_seconds"]
    budget = base["seconds"] / TARGET_RATIO
    out = ["", "where the catch-up's time went (separate runs; shares of its {:.2f} s):".format(total),
           f"  read, decode and price every line (no ledger):  {dec['seconds']:6.2f} s  {dec['seconds'] / total:5.1%}",
           f"  inside SQLite (statement profile, its own run): {sql:6.2f} s  {sql / total:5.1%}",
           f"  the rest (the pipeline's and writer's Python):  {max(total - dec['seconds'] - sql, 0):6.2f} s",
           f"the target leaves {budget:.2f} s for all of it ({TARGET_RATIO}x a {base['seconds']:.2f} s parse)",
           "dearest statements (seconds, runs, statement):"]
    out += [f"  {sec:7.3f} {n:8,d}  {sql_text}" for sec, n, sql_text in prof["dearest_sql"]]
    return "\n".join(out)


def report(corpus: dict, base: dict, led: dict) -> tuple[str, bool]:
    st = led["stats"]
    b_rate = base["events"] / base["seconds"] if base["seconds"] else float("inf")
    l_rate = st["events"] / led["seconds"] if led["seconds"] else float("inf")
    ratio = l_rate / b_rate if b_rate else 0.0
    expected = corpus["events"]
    ok = (st["events"] == expected and led["event_rows"] == expected and st["rejected_lines"] == 0
          and st["duplicates"] == 0 and base["events"] == expected)
    rows = [
        ("", "events", "seconds", "events/s", "MB/s", "peak RSS"),
        ("baseline (orjson loop)", f"{base['events']:,}", f"{base['seconds']:.2f}", f"{b_rate:,.0f}",
         f"{base['bytes'] / 1e6 / base['seconds']:,.1f}", _mb(base["peak_rss"])),
        ("agentledger catch_up()", f"{st['events']:,}", f"{led['seconds']:.2f}", f"{l_rate:,.0f}",
         f"{st['bytes'] / 1e6 / led['seconds']:,.1f}", _mb(led["peak_rss"])),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [f"code: {_code_version()}, Python {sys.version.split()[0]}",
           f"corpus: {corpus['events']:,} events, {_mb(corpus['bytes'])}, {corpus['files']} files "
           f"({corpus['where']})", ""]
    for r in rows:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    out += [
        "",
        f"ratio agentledger/baseline: {ratio:.3f}   (target >= {TARGET_RATIO}: "
        f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})",
        f"ledger: {_mb(led['db_bytes'])} database + {_mb(led['wal_bytes'])} WAL after close "
        f"({led['db_bytes'] / max(corpus['bytes'], 1):.2f}x the corpus); open {led['open_seconds']:.2f} s, "
        f"close/checkpoint {led['close_seconds']:.2f} s",
        f"pipeline: {st['lines']:,} lines, {st['files']} files, {st['rotations']} rotations, "
        f"{st['duplicates']} duplicates, {st['rejected_lines']} rejected lines",
        f"correctness: indexed {st['events']:,} events ({led['event_rows']:,} rows in events), "
        f"corpus has {expected:,}: {'OK' if ok else 'MISMATCH'}",
    ]
    return "\n".join(out), ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events to generate (default 1,000,000)")
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--keep", type=Path, metavar="DIR", help="generate the corpus into DIR and keep it")
    where.add_argument("--corpus", type=Path, metavar="DIR", help="reuse an existing state dir as the corpus")
    ap.add_argument("--breakdown", action="store_true",
                    help="also measure decoding alone and the time inside SQLite (two more runs)")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        kind, *rest = args.child
        if kind == "baseline":
            res = measure_baseline(Path(rest[0]))
        elif kind == "agentledger":
            res = measure_agentledger(Path(rest[0]), Path(rest[1]), profile_sql=rest[2:] == ["profile"])
        elif kind == "decode":
            res = measure_decode(Path(rest[0]))
        else:
            raise SystemExit(f"unknown child {kind!r}")
        print(json.dumps(res))
        return 0

    from gen import generate, read_manifest

    cleanup: list[Path] = []
    try:
        if args.corpus:
            root = args.corpus.resolve()
            if not _files(root):
                print(f"catchup.py: no {CORPUS_GLOB} under {root}", file=sys.stderr)
                return 2
            manifest = read_manifest(root)
            corpus = {"where": f"reused {root}"}
            if manifest:
                corpus.update(events=manifest["events"], bytes=manifest["bytes"], files=manifest["files"])
            print(f"reusing corpus {root}", file=sys.stderr)
        else:
            if args.keep:
                root = args.keep.resolve()
                where_txt = f"kept in {root}"
            else:
                root = Path(tempfile.mkdtemp(prefix="agentledger-bench-corpus-"))
                cleanup.append(root)
                where_txt = "temp dir, removed"
            print(f"generating {args.events:,} events into {root} ...", file=sys.stderr)
            gen = generate(root, args.events, args.agents, args.seed)
            corpus = {"where": where_txt, "events": gen["events"], "bytes": gen["bytes"], "files": gen["files"]}
            print(f"  {_mb(gen['bytes'])} in {gen['files']} files, {gen['seconds']:.1f} s", file=sys.stderr)

        print("baseline: orjson.loads over every line ...", file=sys.stderr)
        base = _child("baseline", str(root))
        if "events" not in corpus:  # a corpus not made by gen.py: its line count is the reference
            corpus.update(events=base["events"], bytes=base["bytes"], files=base["files"])

        dbdir = Path(tempfile.mkdtemp(prefix="agentledger-bench-db-"))
        cleanup.append(dbdir)
        print("agentledger: catch_up() into a fresh ledger ...", file=sys.stderr)
        led = _child("agentledger", str(root), str(dbdir / "ledger.sqlite"))

        text, ok = report(corpus, base, led)
        figures = {"corpus": corpus, "baseline": base, "agentledger": led, "target_ratio": TARGET_RATIO}
        if args.breakdown:
            print("breakdown: decoding alone, then a catch-up with the statement profile ...", file=sys.stderr)
            dec = _child("decode", str(root))
            prof = _child("agentledger", str(root), str(dbdir / "profiled.sqlite"), "profile")
            text += breakdown(base, led, dec, prof)
            figures.update(decode=dec, profiled=prof)
        print(text)
        if args.json:
            print(json.dumps(figures, indent=2))
        return 0 if ok else 1
    finally:
        for path in cleanup:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
