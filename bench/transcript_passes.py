"""What a pass over an OpenClaw sessions folder costs once it holds many sessions.

    python bench/transcript_passes.py [--sessions 2000] [--workdir DIR] [--json]

Builds three state dirs of ``--sessions`` sessions each: two kept in the transcript store
(``openclaw-agent.sqlite``), one with nothing else (the baseline) and one where every session was
also reset into a ``<sid>.jsonl.reset.<ts>`` archive, and a third where every session is a live
``<sid>.jsonl`` file (a gateway without the store). For each it times the catch-up, a pass with
nothing new (the daemon makes one every rescan_s), and a pass after a sessions.json write (what
the gateway does every turn), and prints the archived folder's cost as a ratio of the baseline's.
The goals: a pass after a write stays within 100 ms per 1,000 archives, and grows with what
changed, not with archives x transcripts. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import apsw
import orjson

from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger.db import open_writer
from agentledger.ledger.writer import LedgerWriter

WRITES = 5


def _entry(kind: str, entry_id: str, second: int, **fields) -> dict:
    return {"type": kind, "id": entry_id, "parentId": None,
            "timestamp": f"2026-10-01T08:{second // 60:02d}:{second % 60:02d}.000Z", **fields}


def _session(sid: str) -> list[dict]:
    return [
        {"type": "session", "version": 3, "id": sid, "timestamp": "2026-10-01T08:00:00.000Z"},
        _entry("message", "u1", 1, message={"role": "user", "content": "hello " + "x" * 2000, "timestamp": 1}),
        _entry("message", "a1", 2, message={
            "role": "assistant", "content": [], "provider": "anthropic", "model": "claude-sonnet-4-5",
            "stopReason": "stop", "usage": {"input": 5, "output": 7, "cacheRead": 0, "cacheWrite": 0,
                                            "totalTokens": 12, "cost": {"total": 0.01}}}),
    ]


def _state(root: Path, sessions: int, layout: str) -> tuple[Path, list[str]]:
    """``layout``: "store", "archives" (the store, and an archive of each) or "files" (live files only)."""
    state = root / "state"
    folder = state / "agents" / "main" / "sessions"
    agent = state / "agents" / "main" / "agent"
    folder.mkdir(parents=True)
    agent.mkdir(parents=True)
    store = apsw.Connection(str(agent / "openclaw-agent.sqlite"))
    store.execute("PRAGMA journal_mode = WAL")
    store.execute("CREATE TABLE transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                  "event_json TEXT, created_at INTEGER, PRIMARY KEY (session_id, seq))")
    ids = [str(uuid.UUID(int=i + 1)) for i in range(sessions)]
    with store:
        for sid in ids:
            lines = _session(sid)
            if layout != "files":
                store.executemany("INSERT INTO transcript_events VALUES (?, ?, ?, 0)",
                                  [(sid, seq, orjson.dumps(line).decode()) for seq, line in enumerate(lines)])
            if layout != "store":
                name = f"{sid}.jsonl" if layout == "files" else f"{sid}.jsonl.reset.2026-10-01T09-00-00.000Z"
                (folder / name).write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    store.close()
    return state, ids


def _write_index(state: Path, live: str, turn: int) -> None:
    (state / "agents" / "main" / "sessions" / "sessions.json").write_bytes(
        orjson.dumps({"agent:main:main": {"sessionId": live, "updatedAt": turn}}))


def measure(root: Path, sessions: int, layout: str) -> dict:
    state, ids = _state(root, sessions, layout)
    _write_index(state, ids[-1], 0)
    conn = open_writer(root / "ledger.db")
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        started = time.perf_counter()
        pipeline.catch_up()
        catch_up = time.perf_counter() - started
        time.sleep(2.2)  # past the file system's time granularity: later passes see a changed index
        pipeline.run_once()
        started = time.perf_counter()
        pipeline.run_once()
        idle = time.perf_counter() - started
        after_write = []
        for turn in range(1, WRITES + 1):
            _write_index(state, ids[-1], turn)
            started = time.perf_counter()
            pipeline.run_once()
            after_write.append(time.perf_counter() - started)
    finally:
        conn.close()
    return {"catch_up_s": catch_up, "idle_pass_ms": idle * 1000,
            "pass_after_write_ms": statistics.median(after_write) * 1000}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory, removed after")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentledger-bench-t-"))
    try:
        plain = measure(workdir / "plain", args.sessions, "store")
        archived = measure(workdir / "archived", args.sessions, "archives")
        files = measure(workdir / "files", args.sessions, "files")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    per_thousand = archived["pass_after_write_ms"] / (args.sessions / 1000)
    print(f"{args.sessions:,} sessions                                catch-up   idle pass   pass after a write")
    for name, m in (("store only (baseline)", plain), ("store + one archive each", archived),
                    ("live JSONL files, no store", files)):
        print(f"  {name:<40} {m['catch_up_s']:7.2f} s {m['idle_pass_ms']:8.1f} ms {m['pass_after_write_ms']:10.1f} ms")
    print(f"ratio archived/baseline: catch-up {archived['catch_up_s'] / plain['catch_up_s']:.1f}x, "
          f"pass after a write {archived['pass_after_write_ms'] / max(plain['pass_after_write_ms'], 1e-3):.1f}x")
    met = "met" if per_thousand <= 100 else "NOT met"
    print(f"pass after a write: {per_thousand:.1f} ms per 1,000 archives (goal <= 100: {met})")
    if args.json:
        print(json.dumps({"sessions": args.sessions, "baseline": plain, "archived": archived, "files": files,
                          "ms_per_1000_archives": per_thousand}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
