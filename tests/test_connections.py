"""Many connections at once: more held idle than the daemon has descriptors for, or a burst of requests.
Gates are still answered, ingest goes on, the daemon does not spin, the descriptors it holds on the ledger do
not grow with the burst, and the readers it keeps between requests hold no snapshot."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from zoneinfo import ZoneInfo

from agentledger.gates import GateKeeper
from agentledger.hot.sessions import HotSessions
from agentledger.http import READERS, ApiServer
from agentledger.ledger.db import ReaderPool, open_writer
from conftest import ingest
from logwriter import LogDir, llm_call
from served import Served, count
from serving import GATES, http_get, wait_for, write_config

GATE = "/v1/gate?session_key=agent:main:s1&tool=exec"
HALF_A_REQUEST = b"GET /metrics HTTP/1.1\r\n"  # a request line, and headers never ended


def _served(tmp_path) -> tuple[Served, LogDir]:
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    return Served(write_config(tmp_path, tmp_path / "logs", extra=GATES, rescan_s=0.1)), logs


def _hold(url: str, n: int) -> list[socket.socket]:
    """``n`` connections, each having sent half a request and nothing more: the client keeps them open."""
    address = urllib.parse.urlsplit(url)
    held = []
    for _ in range(n):
        sock = socket.create_connection((address.hostname, address.port), timeout=10)
        sock.sendall(HALF_A_REQUEST)
        held.append(sock)
    return held


def _busy_fraction(served: Served, seconds: float = 3.0) -> float:
    """The share of ``seconds`` the process spent on a CPU."""
    cpu, started = served.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return (served.cpu_seconds() - cpu) / (time.monotonic() - started)


def _gate_allows(served: Served) -> bool:
    code, body = served.get(GATE)  # a client's 10 s: a gate left unanswered fails open
    return code == 200 and body["decision"] == "allow" and body["reason"] == "within every gate"


def test_more_idle_connections_than_descriptors_leave_gates_ingest_and_probes_answering(tmp_path):
    # At 256 descriptors, 300 clients each holding half a request once took every one: the connections nobody
    # answered yet waited, a gate with them, ingest paused, and accept() failing spun a CPU.
    served, logs = _served(tmp_path)
    served.start_limited(256)
    try:
        served.wait_ready()
        held = _hold(served.url, 300)
        try:
            assert _gate_allows(served)
            logs.append(llm_call(2))
            wait_for(lambda: count(served.db, "SELECT count(*) FROM events") == 2, 10, "the new line indexed")
            assert served.get("/readyz") == (200, {"ready": True})
            assert _busy_fraction(served) < 0.3
        finally:
            for sock in held:
                sock.close()
        assert "failed" not in served.log() and "paused" not in served.log()
    finally:
        served.stop()


def test_out_of_descriptors_the_daemon_closes_idle_connections_for_a_gate_and_does_not_spin(tmp_path):
    # The rest of the process holds most of its descriptors, leaving fewer than the 32 connections (a quarter of
    # 128) it serves: accept() fails. It once failed again at once, for as long as the clients stayed.
    served, _ = _served(tmp_path)
    served.start_limited(128, taken=88)
    try:
        served.wait_ready()
        assert _gate_allows(served)  # its reader opened, as a running daemon's is
        held = _hold(served.url, 100)
        try:
            assert _busy_fraction(served) < 0.3
            assert _gate_allows(served)
        finally:
            for sock in held:
                sock.close()
        assert served.log().count("out of file descriptors for connections") == 1, served.log()
    finally:
        served.stop()


def test_http_max_connections_bounds_the_connections_held_open(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTLEDGER_HTTP_MAX_CONNECTIONS", "4")
    served, _ = _served(tmp_path)
    served.start()
    try:
        served.wait_ready()
        before = served.descriptors()
        held = _hold(served.url, 20)
        try:
            wait_for(lambda: served.descriptors() <= before + 4, 10, "the connections past 4 closed")
            assert _gate_allows(served)
        finally:
            for sock in held:
                sock.close()
    finally:
        served.stop()


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


def test_queries_past_their_share_of_connections_are_refused_and_gates_still_answered(tmp_path):
    # Requests waiting for the ledger's readers hold their connections: queries and scrapes enough took every
    # one, and a gate asking then was not answered.
    db = tmp_path / "ledger.db"
    open_writer(db).close()
    hot, readers = HotSessions(tmp_path / "hot"), ReaderPool(db)
    server = ApiServer(db, "127.0.0.1:0", keeper=GateKeeper((), hot, readers, ZoneInfo("UTC")), max_connections=8)
    server.start()
    try:
        with ThreadPoolExecutor(7) as pool:
            with ExitStack() as busy:
                for _ in range(READERS):  # every reader busy: queries wait for one
                    busy.enter_context(server.readers.slot())
                waiting = [pool.submit(http_get, server.address, "/v1/usage") for _ in range(7)]
                # An eighth of the connections is kept from them: with seven waiting, no other query is taken.
                # (Asked before the seven are, a query would wait for a reader too.)
                wait_for(lambda: server.httpd.others_bound == server.httpd.others_busy == 7, 10, "seven waiting")
                assert http_get(server.address, "/v1/hot")[0] == 503
                with urllib.request.urlopen(server.address + "/v1/gate?session_key=k&tool=t", timeout=10) as reply:
                    assert json.loads(reply.read())["decision"] == "allow"
                assert http_get(server.address, "/healthz") == (200, {"status": "ok"})
                try:
                    urllib.request.urlopen(server.address + "/v1/sessions", timeout=10)
                except urllib.error.HTTPError as refused:
                    assert refused.code == 503 and refused.headers["Retry-After"] == "1"
                    assert json.loads(refused.read()) == {"error": "too many requests at once: try again in a second"}
                else:
                    raise AssertionError("a query past its share was answered")
            assert [w.result()[0] for w in waiting] == [200] * 7  # answered once a reader was free
    finally:
        server.close()
        hot.close()
        readers.close()


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
