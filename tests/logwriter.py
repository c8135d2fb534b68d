"""A real log writer for tests: appends, tears, rotates, truncates and copies telemetry files.

Imported by tests for step-by-step scenarios, and run as a subprocess
(``python logwriter.py DIR ...``) to write concurrently with a daemon.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

import orjson

BASE_TS = 1_790_000_000_000


def event_id(n: int) -> str:
    return "evt_%016x" % n


def llm_call(n: int, *, cost_pico: int = 1_000_000, ts: int | None = None, session: str = "s1",
             pad: int = 0) -> bytes:
    """A priced llm.call line with a unique id; ``pad`` makes it longer."""
    ev = {
        "id": event_id(n), "ts": ts if ts is not None else BASE_TS + n, "seq": n, "agentId": "unknown",
        "sessionKey": f"agent:main:{session}", "sessionId": f"sid-{session}", "runId": f"run-{session}",
        "kind": "llm.call",
        "data": {"callIndex": n, "provider": "anthropic", "model": "claude-sonnet-4-5",
                 "delta": {"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4, "total": 10},
                 "costUsd": cost_pico / 10**12, "pad": "x" * pad},
        "source": "diagnostic_event",
    }
    return orjson.dumps(ev) + b"\n"


def event(n: int, kind: str, data: dict, *, session: str = "s1", agent: str = "main", ts: int | None = None,
          run: str | None = None, session_id: str | None = None) -> bytes:
    """Any telemetry line, keyed like ``llm_call``'s: session ``agent:<agent>:<session>``, id ``sid-<session>``."""
    ev = {
        "id": event_id(n), "ts": ts if ts is not None else BASE_TS + n, "seq": n, "agentId": agent,
        "sessionKey": f"agent:{agent}:{session}", "sessionId": session_id or f"sid-{session}",
        "runId": run or f"run-{session}", "kind": kind, "data": data, "source": "diagnostic_event",
    }
    return orjson.dumps(ev) + b"\n"


def partly_priced_log(root: Path) -> LogDir:
    """Two sessions of the last seconds: s1 with a $0.50 call and a call of a model with no price,
    s2 with nothing but a call of that model."""
    logs = LogDir(root)
    now = time.time_ns() // 1_000_000
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                      "delta": {"input": 900, "output": 100, "cacheRead": 0, "cacheWrite": 0,
                                                "total": 1000}, "costUsd": 0.5}, ts=now - 3000))
    for n, session in ((2, "s1"), (3, "s2")):
        logs.append(event(n, "llm.call", {"callIndex": n, "provider": "acme", "model": "acme-unknown-9",
                                          "delta": {"input": 10, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                                                    "total": 10}}, session=session, ts=now - 2000))
    return logs


class LogDir:
    """One telemetry directory: ``events.jsonl`` plus rotated files."""

    def __init__(self, root: Path, agent: str = "main"):
        self.root = root
        self.dir = root / "agents" / agent / "telemetry"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.live = self.dir / "events.jsonl"
        self.day = 1

    def append(self, data: bytes) -> None:
        with open(self.live, "ab") as f:
            f.write(data)

    def rotated_name(self) -> Path:
        day = dt.date(2026, 10, 1) + dt.timedelta(days=self.day - 1)
        self.day += 1
        return self.dir / f"events.{day.isoformat()}.jsonl"

    def rotate(self) -> Path:
        """Rename rotation, as OpenClaw does it; the next append creates a new live file."""
        target = self.rotated_name()
        os.rename(self.live, target)
        return target

    def copytruncate(self) -> Path:
        target = self.rotated_name()
        shutil.copyfile(self.live, target)
        os.truncate(self.live, 0)
        return target

    def truncate(self) -> None:
        os.truncate(self.live, 0)


def run_writer(root: Path, seconds: float, rate: int, rotate_every: int, seed: int) -> int:
    """Append synthetic gateway events, tearing some writes and rotating by rename."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from agentledger.synth import Gateway

    rng = random.Random(seed)
    logs = LogDir(root)
    gateway = Gateway(seed=seed, agents=("main",), start_ms=BASE_TS)
    stream = gateway.events()
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    deadline = time.monotonic() + seconds
    written = 0
    fh = open(logs.live, "ab")
    while not stopping and time.monotonic() < deadline:
        line = orjson.dumps(next(stream)) + b"\n"
        if rng.random() < 0.01:
            line = b'{"id": "broken' + b"\n"  # a malformed line now and then
        if rng.random() < 0.05:
            cut = rng.randrange(1, len(line))
            fh.write(line[:cut])
            fh.flush()
            time.sleep(0.002)
            fh.write(line[cut:])
        else:
            fh.write(line)
        fh.flush()
        written += 1
        if written % rotate_every == 0:
            fh.close()
            logs.rotate()
            fh = open(logs.live, "ab")
        if written % max(rate // 100, 1) == 0:
            time.sleep(0.01)
    fh.close()
    return written


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=2000, help="approximate lines per second")
    parser.add_argument("--rotate-every", type=int, default=700)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    n = run_writer(args.root, args.seconds, args.rate, args.rotate_every, args.seed)
    print(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
