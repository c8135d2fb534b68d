"""The refresh of a parent's hot view, by the number of its subagents.

    python bench/family.py [--subagents 5000 10000 20000 40000] [--repeat 15] [--workdir DIR] [--json]

For each size, a telemetry log of one parent session and that many subagents (each spawned by the
parent's run, making one $0.001 call, then ending) is caught up into a fresh ledger by the pipeline
`agentledger ingest` runs. Then one more call of a subagent is committed as a live batch, and what
the daemon does after it is timed --repeat times: ``HotSessions.read`` of the sessions the batch
changed (the subagent, and its parent, whose family view moves), on the writer's connection.
Reported per size: the best and median wall time, the best CPU time, the CPU time per subagent and
its growth from the size before (twice the subagents for twice the time is linear). Figures are
printed, never asserted; the run fails (exit 1) only if the parent's family view does not count
every call of the log.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

from agentledger.hot.sessions import HotSessions
from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger.db import open_writer
from agentledger.ledger.writer import LedgerWriter

PARENT = "agent:main:main"
T0 = 1_790_000_000_000
CALL_PICO = 1_000_000_000  # $0.001


class _Log:
    """One agent's live telemetry file, written line by line."""

    def __init__(self, root: Path) -> None:
        folder = root / "agents" / "main" / "telemetry"
        folder.mkdir(parents=True)
        self.path = folder / "events.jsonl"
        self.n = 0

    def line(self, kind: str, key: str, sid: str, run: str, data: dict) -> bytes:
        self.n += 1
        return orjson.dumps({"id": f"evt_{self.n:016x}", "ts": T0 + self.n, "seq": self.n, "agentId": "main",
                             "sessionKey": key, "sessionId": sid, "runId": run, "kind": kind, "data": data,
                             "source": "diagnostic_event"}) + b"\n"

    def call(self, key: str) -> bytes:
        return self.line("llm.call", key, f"sid-{key}", f"run-{key}",
                         {"callIndex": self.n, "provider": "anthropic", "model": "claude-sonnet-4-5",
                          "delta": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "total": 2},
                          "costUsd": CALL_PICO / 10**12})

    def append(self, lines: list[bytes]) -> None:
        with open(self.path, "ab") as fh:
            fh.write(b"".join(lines))


def _family_log(root: Path, subagents: int) -> _Log:
    log = _Log(root)
    lines = [log.call(PARENT)]
    for i in range(subagents):
        child = f"agent:main:subagent:c{i}"
        lines += [log.line("subagent.spawn", PARENT, "unknown", f"run-{PARENT}",
                           {"childSessionKey": child, "agentId": "main", "label": f"c{i}", "mode": "run"}),
                  log.call(child),
                  log.line("subagent.end", child, "unknown", f"run-{child}",
                           {"targetSessionKey": child, "outcome": "ok", "durationMs": 5})]
    log.append(lines)
    return log


def measure(workdir: Path, subagents: int, repeat: int) -> dict:
    root = workdir / f"state-{subagents}"
    log = _family_log(root, subagents)
    conn = open_writer(workdir / f"ledger-{subagents}.db")
    writer = LedgerWriter(conn)
    changed: list[set[str]] = []
    pipeline = Pipeline(writer, specs_from("oc-telemetry", [root]), after_commit=lambda r: changed.append(r.sessions))
    started = time.perf_counter()
    pipeline.catch_up()
    built = time.perf_counter() - started
    changed.clear()
    log.append([log.call("agent:main:subagent:c0")])
    pipeline.run_once()
    sessions = set().union(*changed)
    hot = HotSessions(workdir / f"hot-{subagents}")
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        views = hot.read(conn, sessions)
        cpus.append(time.process_time() - c)
        walls.append(time.perf_counter() - w)
    family = views[PARENT].family
    writer.close()
    conn.close()
    calls = subagents + 2  # the parent's, one a subagent, and the live batch's
    return {"subagents": subagents, "views": sorted(views), "build_s": round(built, 2),
            "best_ms": round(min(walls) * 1000, 2), "median_ms": round(statistics.median(walls) * 1000, 2),
            "cpu_ms": round(min(cpus) * 1000, 2), "cpu_us_per_subagent": round(min(cpus) / subagents * 1e6, 3),
            "family_ok": (family.llm_calls, family.cost_pico) == (calls, calls * CALL_PICO)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subagents", type=int, nargs="+", default=[5_000, 10_000, 20_000, 40_000])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--workdir", type=Path, help="keep the logs and ledgers here (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentledger-family-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for n in sorted(args.subagents):
            rows.append(measure(workdir, n, args.repeat))
            if not args.json:
                r, before = rows[-1], rows[-2] if len(rows) > 1 else None
                growth = f"{r['cpu_ms'] / before['cpu_ms']:.2f}x for {n / before['subagents']:.1f}x" if before else "-"
                print(f"{n:>8,} subagents: refresh best {r['best_ms']:8.1f} ms, median {r['median_ms']:8.1f} ms, "
                      f"CPU {r['cpu_ms']:8.1f} ms ({r['cpu_us_per_subagent']:.2f} us a subagent), growth {growth}"
                      f"{'' if r['family_ok'] else '  FAMILY TOTALS WRONG'}  [ledger built in {r['build_s']} s]",
                      flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0 if all(r["family_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
