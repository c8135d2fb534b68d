"""Update a few sessions as fast as it can, every update flushed, until killed.

Run by the kill -9 test in test_hot_store.py: ``python hot_store_writer.py STATE_DIR``.
After each update is on disk it prints ``<key index> <n>``. Imports only the store,
so it starts writing quickly.
"""

from __future__ import annotations

import sys

from agentledger.hot.store import SessionRuntimeStore

KEYS = ["agent:main:s1", "agent:main:s2", "../../etc/passwd", "a\x00b"]


def pad_for(n: int) -> str:
    # Sizes up to ~60 KB: a write torn anywhere would leave a padding that does not match n.
    return "x" * (997 * (n % 61))


def _bump(state: dict) -> None:
    state["n"] += 1
    state["pad"] = pad_for(state["n"])


def main(state_dir: str) -> None:
    # Fewer slots than keys, so evictions and reloads happen too.
    store = SessionRuntimeStore(state_dir, create=lambda: {"n": 0, "pad": ""}, dump=dict, load=dict,
                                max_entries=2, flush_interval_s=0)
    i = 0
    while True:
        index = i % len(KEYS)
        current = store.get(KEYS[index])
        n = (current["n"] if current else 0) + 1
        store.update(KEYS[index], _bump, position=n)  # position tracks n, so the test can check they agree
        sys.stdout.write(f"{index} {n}\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    main(sys.argv[1])
