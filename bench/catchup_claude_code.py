"""Catch-up of a Claude Code corpus: agentledger's CLI cold and warm, beside ccusage when it is installed.

    python bench/catchup_claude_code.py [--mb 500] [--seed 1] [--keep DIR | --corpus DIR]
                                        [--ccusage PATH] [--json]

1. Generates a corpus (bench/gen_claude_code.py) in a temp dir, or into DIR with --keep (kept
   afterwards), or reuses a config dir with --corpus DIR; then reads every file once so that
   every tool starts from the page cache.
2. Cold: ``agentledger ingest --format claude-code ROOT`` into a fresh ledger, then
   ``agentledger sessions --json`` (every session); warm: ``sessions --json`` alone, on the
   ledger the cold run left (best of three).
3. ccusage (``--ccusage PATH``, else ``ccusage`` on PATH or in ./node_modules/.bin):
   ``ccusage session --json --offline`` with ``CLAUDE_CONFIG_DIR`` set to the corpus and an
   empty HOME, so that it reads the corpus alone. A ccusage session is what agentledger calls
   a session's family (the session and its Task subagents, ``<sessionId>/<agentId>``): the
   two are compared session by session.

Each command is a child process whose wall time and peak RSS (``wait4``'s ``ru_maxrss``) are
reported. Figures are printed, never asserted; the run fails (exit 1) only if agentledger's
totals differ from what the generator wrote (its manifest).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

RSS_TARGET = 200e6
# Manifest count → `usage --json` key: what a correct catch-up must reproduce exactly.
CHECKS = {"sessions": "sessions", "subagent_files": "subagent_sessions", "runs": "runs", "llm_calls": "llm_calls", "llm_errors": "llm_errors", "tool_calls": "tool_calls",
          "tool_errors": "tool_errors", "compactions": "compactions", "input": "input_tokens",
          "output": "output_tokens", "cache_read": "cache_read_tokens", "cache_write": "cache_write_tokens"}


def _run(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd``; its stdout, wall seconds and peak RSS (that child's own, from wait4)."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"catchup_claude_code.py: {' '.join(cmd[:4])} ... exited {proc.returncode}")
    rss = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024
    # CPU time as well as wall time: on a busy machine it is the steadier of the two.
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_rss": rss, "stdout": text}


def _warm_cache(root: Path) -> tuple[int, int]:
    files = nbytes = 0
    for path in root.rglob("*.jsonl"):
        with open(path, "rb") as fh:
            while chunk := fh.read(8 << 20):
                nbytes += len(chunk)
        files += 1
    return files, nbytes


def _find_ccusage(given: Path | None) -> str | None:
    if given:
        return str(given)
    found = shutil.which("ccusage")
    local = Path("node_modules/.bin/ccusage")
    return found or (str(local.resolve()) if local.exists() else None)


def measure_agentledger(root: Path, db: Path, prices: Path | None) -> dict:
    al = [sys.executable, "-m", "agentledger", "--db", str(db)]
    priced = ["--prices", str(prices)] if prices else []
    ingest = _run(al + ["ingest", "--format", "claude-code", "--json", *priced, str(root)])
    every = ["sessions", "--json", "--limit", str(10**9)]
    first = _run(al + every)
    warm = min((_run(al + every) for _ in range(3)), key=lambda r: r["seconds"])
    usage = json.loads(_run(al + ["usage", "--json"])["stdout"])
    verify = subprocess.run(al + ["verify"], check=False, capture_output=True, text=True)
    stats = json.loads(ingest["stdout"])
    listed = json.loads(warm["stdout"])
    return {"ingest": {k: ingest[k] for k in ("seconds", "cpu_seconds", "peak_rss")}, "stats": stats,
            "sessions_cold": {k: first[k] for k in ("seconds", "cpu_seconds", "peak_rss")},
            "sessions_warm": {k: warm[k] for k in ("seconds", "cpu_seconds", "peak_rss")},
            "sessions_listed": sum(not s["is_subagent"] for s in listed), "families": _families(listed),
            "usage": usage,
            "verify_ok": verify.returncode == 0, "db_bytes": db.stat().st_size,
            "prices": f"override file {prices}" if prices else "bundled price history (genai-prices)"}


_FAMILY_SUMS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd")


def _families(sessions: list[dict]) -> dict[str, tuple]:
    """Per top-level session id: its own totals plus its Task subagents' (``<sessionId>/<agentId>``)."""
    out: dict[str, list] = {}
    for s in sessions:
        acc = out.setdefault(s["session_id"].split("/")[0], [0] * len(_FAMILY_SUMS))
        for i, k in enumerate(_FAMILY_SUMS):
            acc[i] += s[k]
    return {sid: tuple(acc) for sid, acc in out.items()}


def _same_family(ours: tuple | None, theirs: tuple) -> bool:
    return ours is not None and ours[:4] == theirs[:4] and abs(ours[4] - theirs[4]) <= 1e-6


def measure_ccusage(exe: str, root: Path, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAUDE")}
    env |= {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(root), "NO_COLOR": "1"}
    res = _run([exe, "session", "--json", "--offline"], env)
    data = json.loads(res["stdout"])
    return {"seconds": res["seconds"], "cpu_seconds": res["cpu_seconds"], "peak_rss": res["peak_rss"],
            "sessions": len(data.get("session", [])),
            "families": {s.get("sessionId") or s.get("period"): (
                s["inputTokens"], s["outputTokens"], s["cacheReadTokens"], s["cacheCreationTokens"],
                s["totalCost"]) for s in data.get("session", [])},
            "totals": data.get("totals", {})}


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def report(corpus: dict, led: dict, cc: dict | None) -> tuple[str, bool]:
    st, usage = led["stats"], led["usage"]
    ingest_s = led["ingest"]["seconds"]
    mismatches = [f"{k}: corpus {corpus[k]:,}, ledger {usage[v]:,}" for k, v in CHECKS.items()
                  if k in corpus and corpus[k] != usage[v]]
    ok = not mismatches and st["rejected_lines"] == 0 and led["verify_ok"]
    def row(name: str, *runs: dict) -> tuple[str, ...]:
        rss = max(r["peak_rss"] for r in runs)
        return (name, f"{sum(r['seconds'] for r in runs):.2f}", f"{sum(r['cpu_seconds'] for r in runs):.2f}",
                _mb(rss) if len(runs) == 1 else "")

    rows = [("", "wall s", "CPU s", "peak RSS"),
            row("agentledger ingest", led["ingest"]),
            row("agentledger sessions (first)", led["sessions_cold"]),
            row("agentledger cold (ingest + sessions)", led["ingest"], led["sessions_cold"]),
            row("agentledger warm (sessions alone)", led["sessions_warm"])]
    if cc:
        rows.append(row("ccusage session --json --offline", cc))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [f"prices: {led['prices']}",
           f"corpus: {_mb(corpus['bytes'])}, {corpus['lines']:,} lines, {corpus['files']:,} files, "
           f"{corpus['sessions']:,} sessions ({corpus['where']})", ""]
    out += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    rss = led["ingest"]["peak_rss"]
    out += ["",
            f"ingest: {st['events'] / ingest_s:,.0f} events/s, {st['lines'] / ingest_s:,.0f} lines/s, "
            f"{st['bytes'] / 1e6 / ingest_s:,.1f} MB/s ({st['events']:,} events from {st['lines']:,} lines; "
            f"{st['events'] / led['ingest']['cpu_seconds']:,.0f} events per CPU second); "
            f"peak RSS {_mb(rss)} (target < {_mb(RSS_TARGET)}: {'met' if rss < RSS_TARGET else 'NOT met'})",
            f"ledger: {_mb(led['db_bytes'])}; sessions listed: {led['sessions_listed']:,}; "
            f"verify: {'ok' if led['verify_ok'] else 'FAILED'}",
            f"correctness against the generator's manifest: {'OK' if ok else 'MISMATCH'}"
            + "".join(f"\n  {m}" for m in mismatches)]
    if cc:
        t = cc["totals"]
        pairs = [("sessions", led["sessions_listed"], cc["sessions"]),
                 ("input tokens", usage["input_tokens"], t.get("inputTokens")),
                 ("output tokens", usage["output_tokens"], t.get("outputTokens")),
                 ("cache read tokens", usage["cache_read_tokens"], t.get("cacheReadTokens")),
                 ("cache write tokens", usage["cache_write_tokens"], t.get("cacheCreationTokens")),
                 ("cost USD", round(usage["cost_usd"], 6), round(t.get("totalCost", 0.0), 6))]
        out += ["", "totals: agentledger / ccusage"]
        out += [f"  {name}: {a:,} / {b:,}" + ("" if a == b else f"  (ccusage {((b or 0) - a) / a:+.2%})" if a else "")
                for name, a, b in pairs]
        out.append(f"  corpus truth: {corpus['sessions']:,} sessions ({corpus['subagent_files']:,} subagent files)")
        same = sum(_same_family(led["families"].get(sid), fam) for sid, fam in cc["families"].items())
        out.append(f"  per session (with its subagents): {same:,} of {len(cc['families']):,} equal "
                   "(tokens exact, cost to 1e-6 USD)")
    return "\n".join(out), ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=500.0, help="corpus size to generate (default 500 MB)")
    ap.add_argument("--seed", type=int, default=1)
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--keep", type=Path, metavar="DIR", help="generate the corpus into DIR and keep it")
    where.add_argument("--corpus", type=Path, metavar="DIR", help="reuse a corpus made by gen_claude_code.py")
    ap.add_argument("--ccusage", type=Path, metavar="PATH", help="the ccusage executable (default: found on PATH)")
    ap.add_argument("--prices", type=Path, metavar="FILE",
                    help="a price override file for ingest (default: the bundled price history)")
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args(argv)

    from gen_claude_code import generate, read_manifest

    cleanup: list[Path] = []
    try:
        if args.corpus:
            root = args.corpus.resolve()
            manifest = read_manifest(root)
            if manifest is None:
                print(f"catchup_claude_code.py: {root} has no bench-manifest.json: make it with gen_claude_code.py",
                      file=sys.stderr)
                return 2
            corpus = manifest | {"where": f"reused {root}"}
        else:
            root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="agentledger-bench-cc-"))
            if not args.keep:
                cleanup.append(root)
            print(f"generating about {args.mb:,.0f} MB into {root} ...", file=sys.stderr)
            corpus = generate(root, args.mb, args.seed)
            corpus["where"] = f"kept in {root}" if args.keep else "temp dir, removed"
            print(f"  {_mb(corpus['bytes'])} in {corpus['files']} files, {corpus['seconds']:.1f} s", file=sys.stderr)
        _warm_cache(root)
        work = Path(tempfile.mkdtemp(prefix="agentledger-bench-cc-db-"))
        cleanup.append(work)
        print("agentledger: ingest, then sessions ...", file=sys.stderr)
        led = measure_agentledger(root, work / "ledger.db", args.prices)
        cc = None
        exe = _find_ccusage(args.ccusage)
        if exe:
            print(f"ccusage: {exe} session --json --offline ...", file=sys.stderr)
            home = work / "home"
            home.mkdir()
            cc = measure_ccusage(exe, root, home)
        else:
            print("ccusage not found (npm install ccusage, then --ccusage PATH): skipped", file=sys.stderr)
        text, ok = report(corpus, led, cc)
        print(text)
        if args.json:
            per_session = {"families"}  # compared above; thousands of rows are no figure
            print(json.dumps({"corpus": corpus, "agentledger": {k: v for k, v in led.items() if k not in per_session},
                              "ccusage": cc and {k: v for k, v in cc.items() if k not in per_session}}, indent=2))
        return 0 if ok else 1
    finally:
        for path in cleanup:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
