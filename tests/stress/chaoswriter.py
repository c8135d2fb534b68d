"""A log writer that appends, tears, rotates, copies, copy-truncates and truncates at random.

Run as a subprocess next to a daemon that is being killed: ``python chaoswriter.py ROOT
--journal FILE --seed S``. Line n is a priced call with event id n and a cost of n micro-USD,
so the ledger can be checked against what was written without reading the files back. Ids
run from 1 to the count printed on stdout at SIGTERM; the journal names every range of them
that a truncation in place destroyed (``destroyed FIRST LAST``): those lines are indexed only
if the daemon read them before they were gone.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from logwriter import LogDir, llm_call

SESSIONS = tuple(f"c{i}" for i in range(8))
# Chances, per write, of each thing that happens to files besides appending.
ROTATE, COPYTRUNCATE, TRUNCATE, COPY = 0.02, 0.01, 0.01, 0.01


def line(n: int) -> bytes:
    return llm_call(n, session=SESSIONS[n % len(SESSIONS)], cost_pico=n * 1_000_000)


class Chaos:
    def __init__(self, root: Path, journal: Path, seed: int):
        self.rng = random.Random(seed)
        self.logs = LogDir(root)
        self.journal = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.n = 0
        self.live_first = 1  # the first id the live file holds
        self.rotated: list[Path] = []

    def write(self, lines: int) -> None:
        with open(self.logs.live, "ab") as f:
            for _ in range(lines):
                self.n += 1
                data = line(self.n)
                if self.rng.random() < 0.05:  # a torn write: the reader sees half a line for a moment
                    cut = self.rng.randrange(1, len(data))
                    f.write(data[:cut])
                    f.flush()
                    time.sleep(0.002)
                    data = data[cut:]
                f.write(data)
            f.flush()

    def disturb(self) -> None:
        r = self.rng.random()
        live = self.logs.live
        if not live.exists() or live.stat().st_size == 0:
            return
        if r < ROTATE:
            self.rotated.append(self.logs.rotate())
            self.live_first = self.n + 1
        elif r < ROTATE + COPYTRUNCATE:
            self.rotated.append(self.logs.copytruncate())
            self.live_first = self.n + 1
        elif r < ROTATE + COPYTRUNCATE + TRUNCATE:
            self.logs.truncate()
            os.write(self.journal, f"destroyed {self.live_first} {self.n}\n".encode())
            self.live_first = self.n + 1
        elif r < ROTATE + COPYTRUNCATE + TRUNCATE + COPY and self.rotated:
            # A second copy of a rotated file (a restore, a backup left beside it): nothing new in it.
            target = self.logs.rotated_name()
            shutil.copyfile(self.rng.choice(self.rotated), target)
            self.rotated.append(target)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--rate", type=int, default=1000, help="about this many lines per second")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    chaos = Chaos(args.root, args.journal, args.seed)
    tick = 0.01
    while not stopping:
        chaos.write(chaos.rng.randint(1, max(2 * int(args.rate * tick), 1)))
        chaos.disturb()
        time.sleep(tick)
    print(chaos.n, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
