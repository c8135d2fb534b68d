"""The demo: a live writer feeding a telemetry directory the way an OpenClaw gateway would.

Run as ``python -m agentledger.demo DIR``. On a fresh directory it first writes two
days of history (rotated daily files), then appends live events, rotating by
rename when the UTC day changes. The history is written aside and renamed into
place whole: a writer stopped before it is done leaves none of it, and the next
start writes it all.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import orjson

from agentledger.synth import Gateway

HISTORY_DAYS = 2


def _day(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d")


class Writer:
    """Appends events to ``events.jsonl`` and renames it aside when the UTC day changes."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.live = self.dir / "events.jsonl"
        self.fh = open(self.live, "ab")
        self.day = self._first_day()

    def _first_day(self) -> str | None:
        try:
            with open(self.live, "rb") as f:
                first = f.readline()
            return _day(orjson.loads(first)["ts"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, event: dict) -> None:
        day = _day(event["ts"])
        if self.day is not None and day != self.day:
            self.fh.close()
            os.rename(self.live, self.dir / f"events.{self.day}.jsonl")
            self.fh = open(self.live, "ab")
        self.day = day
        self.fh.write(orjson.dumps(event) + b"\n")

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def run(directory: Path, rate: float, seed: int, parent: int) -> None:
    """Writes until SIGTERM, or until ``parent`` is no longer this process's parent: a daemon
    killed outright (SIGKILL, OOM) cannot stop its writer, which would append for good."""
    telemetry = directory / "agents" / "main" / "telemetry"
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    now = time.time_ns() // 1_000_000
    fresh = not telemetry.exists()
    gw = Gateway(seed=seed, agents=("main",), start_ms=now - HISTORY_DAYS * 86_400_000 if fresh else now)
    stream = gw.events()
    if fresh:
        # Outside agents/, where no reader looks: a history cut short there (SIGTERM, SIGKILL) is never
        # indexed, so writing it again from the start duplicates nothing a reader saw.
        aside = directory / ".history"
        shutil.rmtree(aside, ignore_errors=True)
        history = Writer(aside)
        while not stopping and gw.clock < now - 60_000:
            history.write(next(stream))
        history.close()
        if stopping:
            shutil.rmtree(aside)
            return
        telemetry.parent.mkdir(parents=True, exist_ok=True)
        os.rename(aside, telemetry)
    writer = Writer(telemetry)
    while not stopping and os.getppid() == parent:
        event = next(stream)
        # Live events carry the wall clock, at random gaps averaging 1/rate.
        event["ts"] = time.time_ns() // 1_000_000
        gw.clock = event["ts"]
        writer.write(event)
        writer.flush()
        time.sleep(gw.rng.expovariate(rate) if rate > 0 else 1.0)
    writer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentledger.demo", description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="demo state dir (gets agents/main/telemetry/)")
    parser.add_argument("--rate", type=float, default=3.0, help="events per second (default 3)")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="random seed")
    # Named by the daemon: one that died before this process got here has already handed it on.
    parser.add_argument("--parent", type=int, default=os.getppid(), help="stop once this pid is not the parent")
    args = parser.parse_args(argv)
    run(args.directory, args.rate, args.seed, args.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
