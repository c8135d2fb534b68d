"""Many requests at once: the descriptors the daemon holds on the ledger do not grow with a burst, and the
readers it keeps between requests hold no snapshot."""

from __future__ import annotations

import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from agentledger.http import READERS, ApiServer
from agentledger.ledger.db import open_writer
from conftest import ingest
from logwriter import LogDir, llm_call
from served import Served
from serving import write_config

GATES = """
[[gates]]
name = "session-cost"
scope = "session"
metric = "cost_usd"
limit = 5.0
"""


def test_a_burst_of_requests_leaves_no_more_descriptors_on_the_ledger_than_its_readers(tmp_path):
    # SQLite keeps a closed connection's descriptor while another connection of the process holds a lock on
    # the file, as the writer's always does: a reader per request left as many open as requests had run at once.
    logs = LogDir(tmp_path / "logs")
    logs.append(b"".join(llm_call(n, session=f"s{n % 500}") for n in range(1, 20_001)))
    served = Served(write_config(tmp_path, tmp_path / "logs", extra=GATES))
    served.start()
    served.wait_ready(60)
    paths = ["/v1/usage", "/v1/sessions", "/v1/overview", "/metrics", "/ui", "/readyz",
             "/v1/sessions/agent:main:s1/hot", "/v1/sessions/agent:main:s1/forecast"]
    clients = 100
    start = threading.Barrier(clients)

    def ask(i: int) -> set[int]:
        """Each path in turn, for two seconds."""
        start.wait()
        statuses, ends = set(), time.monotonic() + 2
        while time.monotonic() < ends:
            with urllib.request.urlopen(served.url + paths[i % len(paths)], timeout=30) as reply:
                reply.read()
                statuses.add(reply.status)
            i += 1
        return statuses

    try:
        before = served.descriptors(on=served.db)
        with ThreadPoolExecutor(clients) as pool:
            assert set().union(*pool.map(ask, range(clients))) == {200}
        assert served.descriptors(on=served.db) <= before + 2 * READERS  # kept ones, and a scrape's own
    finally:
        served.stop()


def test_the_readers_kept_between_requests_hold_no_snapshot(tmp_path):
    # A reader kept in its read transaction would hold the writer's checkpoints short of the WAL's end.
    logs = LogDir(tmp_path / "logs")
    logs.append(b"".join(llm_call(n) for n in range(1, 101)))
    db = tmp_path / "ledger.db"
    ingest(db, logs.root)
    server = ApiServer(db, "127.0.0.1:0")
    server.start()
    writer = open_writer(db)
    try:
        for path in ("/v1/usage", "/v1/sessions/agent:main:s1", "/v1/sessions/agent:main:s1/forecast",
                     "/v1/overview", "/metrics", "/ui"):
            for _ in range(3):
                with urllib.request.urlopen(server.address + path, timeout=10) as reply:
                    assert reply.status == 200, path
        logs.append(b"".join(llm_call(n) for n in range(101, 201)))
        ingest(db, logs.root)
        assert writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0] == 0  # not busy
        assert (tmp_path / "ledger.db-wal").stat().st_size == 0
    finally:
        writer.close()
        server.close()
