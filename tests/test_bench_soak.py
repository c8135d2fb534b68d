"""The soak times the daemon: its own probe must not cost what it measures."""

from __future__ import annotations

import sys
from pathlib import Path

from agentledger.ledger.db import open_writer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import soak  # noqa: E402 (found through the path above)


def test_the_probe_finds_its_line_through_the_primary_key_not_a_scan(tmp_path):
    # It looks every 2 ms while the ledger grows by millions of rows: a scan took 121 ms each time.
    conn = open_writer(tmp_path / "ledger.db")
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + soak.PROBE_LOOKUP, (1_790_000_000_000, 1))]
    assert plan == ["SEARCH events USING PRIMARY KEY (ts_ms=? AND id=?)"]
