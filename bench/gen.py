"""Generate a synthetic OpenClaw state dir for benchmarks.

    python bench/gen.py OUTDIR --events N [--agents 2] [--seed S] [--days D] [--start YYYY-MM-DD]

Writes ``OUTDIR/agents/<agent>/telemetry/events.YYYY-MM-DD.jsonl`` (one file per UTC day of the
events, as OpenClaw's daily rotation leaves them) and ``events.jsonl`` (the live file: the last
day). Each agent has its own ``agentledger.synth.Gateway`` (seed ``S + index``), so timestamps
increase strictly within every file; the N events are split evenly across agents. Same
arguments, same bytes. ``--days D`` rescales time so that each agent's events span about D days
(default: the generator's own pace, roughly 5.5 s per event and agent).

Other bench scripts import ``generate``:

    sys.path.insert(0, str(Path(__file__).parent)); from gen import generate
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import sys
import time
from pathlib import Path

import orjson

from agentledger.synth import Gateway

DAY_MS = 86_400_000
AGENT_NAMES = ("main", "work", "ops", "research", "home", "dev", "media", "finance")
DEFAULT_START = "2025-01-01"
FLUSH_BYTES = 8 << 20
PILOT_EVENTS = 20_000
MANIFEST = "bench-manifest.json"


def agent_names(n: int) -> list[str]:
    if n < 1:
        raise ValueError("at least one agent")
    return [AGENT_NAMES[i] if i < len(AGENT_NAMES) else f"agent{i}" for i in range(n)]


def _start_ms(start: str | int | None) -> int:
    if isinstance(start, int):
        return start
    day = dt.date.fromisoformat(start or DEFAULT_START)
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp() * 1000)


def _day_name(ts_ms: int) -> str:
    return dt.datetime.fromtimestamp(ts_ms / 1000, dt.timezone.utc).strftime("events.%Y-%m-%d.jsonl")


def _mean_step_ms(seed: int, agent: str, n: int) -> float:
    """Average ms between events of a Gateway, from its first events (a cheap pilot run)."""
    gw = Gateway(seed=seed, agents=(agent,), start_ms=0)
    last = 0
    count = 0
    for ev in itertools.islice(gw.events(), max(1, min(n, PILOT_EVENTS))):
        last = ev["ts"]
        count += 1
    return last / count


def _write_agent(tdir: Path, agent: str, n: int, seed: int, start_ms: int, days: float | None) -> dict:
    """One agent's events, split into one file per UTC day; the last day is the live file."""
    tdir.mkdir(parents=True, exist_ok=True)
    scale = None
    if days is not None and n > 1:
        scale = days * DAY_MS / (_mean_step_ms(seed, agent, n) * n)
    gw = Gateway(seed=seed, agents=(agent,), start_ms=0)
    dumps = orjson.dumps
    files: list[tuple[Path, int]] = []  # (path, last ts)
    first_ts = None
    buf: list[bytes] = []
    buf_bytes = 0
    fh = None
    cur_day = None
    cur_path = None
    last_ts = -1
    prev_out = None
    for ev in itertools.islice(gw.events(), n):
        if scale is None:
            ts = start_ms + ev["ts"]
        else:
            ts = start_ms + int(ev["ts"] * scale)
            if prev_out is not None and ts <= prev_out:
                ts = prev_out + 1
            prev_out = ts
            data = ev["data"]
            if "endedAt" in data:
                data["endedAt"] = start_ms + int(data["endedAt"] * scale)
        ev["ts"] = ts
        if first_ts is None:
            first_ts = ts
        day = ts // DAY_MS
        if day != cur_day:
            if fh is not None:
                fh.write(b"".join(buf))
                fh.close()
                files.append((cur_path, last_ts))
                buf, buf_bytes = [], 0
            cur_day = day
            cur_path = tdir / _day_name(ts)
            fh = open(cur_path, "wb", buffering=0)
        line = dumps(ev, option=orjson.OPT_APPEND_NEWLINE)
        buf.append(line)
        buf_bytes += len(line)
        last_ts = ts
        if buf_bytes >= FLUSH_BYTES:
            fh.write(b"".join(buf))
            buf, buf_bytes = [], 0
    if fh is not None:
        fh.write(b"".join(buf))
        fh.close()
        files.append((cur_path, last_ts))
    if files:
        # The producer renames the live file on the first write of a new UTC day: the last day
        # is still events.jsonl.
        live = tdir / "events.jsonl"
        os.replace(files[-1][0], live)
        files[-1] = (live, files[-1][1])
    for path, ts in files:  # mtimes as the producer would have left them (retention goes by mtime)
        os.utime(path, ns=(ts * 1_000_000, ts * 1_000_000))
    nbytes = sum(path.stat().st_size for path, _ in files)
    return {"events": n, "bytes": nbytes, "files": len(files),
            "first_ts": first_ts, "last_ts": last_ts if n else None}


def generate(outdir: str | os.PathLike, events: int, agents: int = 2, seed: int = 1, *,
             days: float | None = None, start: str | int | None = None) -> dict:
    """Write a corpus under ``outdir``; returns counts (events, bytes, files, per agent, seconds).

    ``outdir`` must not already hold telemetry files (they would be mixed with the new ones).
    """
    outdir = Path(outdir)
    if events < 0:
        raise ValueError("events must be >= 0")
    names = agent_names(agents)
    existing = list(outdir.glob("agents/*/telemetry/events*.jsonl"))
    if existing:
        raise FileExistsError(f"{outdir} already holds {len(existing)} telemetry files: use an empty directory")
    t0 = time.perf_counter()
    start_ms = _start_ms(start)
    per_agent = {}
    base, extra = divmod(events, agents)
    for i, name in enumerate(names):
        n = base + (1 if i < extra else 0)
        per_agent[name] = _write_agent(outdir / "agents" / name / "telemetry", name, n, seed + i, start_ms, days)
    result = {
        "events": sum(a["events"] for a in per_agent.values()),
        "bytes": sum(a["bytes"] for a in per_agent.values()),
        "files": sum(a["files"] for a in per_agent.values()),
        "agents": per_agent,
        "seed": seed,
        "days": days,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    (outdir / MANIFEST).write_text(json.dumps(result, indent=2) + "\n")
    return result


def read_manifest(outdir: str | os.PathLike) -> dict | None:
    """The counts ``generate`` left in ``outdir``, if it made that corpus."""
    try:
        return json.loads((Path(outdir) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path, help="state dir to create (agents/<agent>/telemetry/...)")
    ap.add_argument("--events", type=int, required=True, help="total events, split across agents")
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--days", type=float, default=None,
                    help="spread each agent's events over about D days (default: the generator's pace)")
    ap.add_argument("--start", default=DEFAULT_START, help="UTC date of the first event (YYYY-MM-DD)")
    args = ap.parse_args(argv)
    try:
        res = generate(args.outdir, args.events, args.agents, args.seed, days=args.days, start=args.start)
    except (ValueError, FileExistsError) as exc:
        print(f"gen.py: {exc}", file=sys.stderr)
        return 2
    span = {name: (a["first_ts"], a["last_ts"]) for name, a in res["agents"].items()}
    print(f"{res['events']:,} events, {res['bytes'] / 1e6:,.1f} MB, {res['files']} files "
          f"in {res['seconds']:.1f} s -> {args.outdir}")
    for name, (first, last) in span.items():
        if first is not None:
            print(f"  {name}: {res['agents'][name]['events']:,} events, {res['agents'][name]['files']} files, "
                  f"{(last - first) / DAY_MS:.1f} days")
    return 0


if __name__ == "__main__":
    sys.exit(main())
