"""The JSON API over real HTTP on 127.0.0.1, served by a real ``serve`` subprocess."""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import apsw
import pytest
from agentledger.http import ApiServer
from agentledger.ledger.db import open_writer
from conftest import REPO
from served import Served
from serving import wait_for


@pytest.fixture(scope="module")
def api(tmp_path_factory, oc_corpus):
    tmp = tmp_path_factory.mktemp("http")
    root = tmp / "state"
    shutil.copytree(oc_corpus, root)
    db = tmp / "ledger.db"
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "--db", str(db), "serve", "--listen",
                             "127.0.0.1:0", str(root)], stderr=subprocess.PIPE, text=True, cwd=REPO)
    address = None
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        m = re.search(r'listening on (http://[^\s"]+)', line)
        if m:
            address = m.group(1)
        if "caught up" in line:
            break
    assert address, lines
    yield address
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_sessions_usage_and_costs(api, oc_expected):
    status, rows = get(f"{api}/v1/sessions?limit=500")
    assert status == 200 and len(rows) == 49
    status, usage = get(f"{api}/v1/usage")
    assert usage["cost_usd"] == pytest.approx(oc_expected["totals"]["cost_usd"])
    status, costs = get(f"{api}/v1/costs?group_by=day&since=2026-10-02&until=2026-10-02T23:59:59.999Z")
    assert status == 200 and [r["day"] for r in costs["rows"]] == ["2026-10-02"]
    assert round(costs["rows"][0]["cost_usd"] * 10**12) == oc_expected["per_day"]["2026-10-02"]["cost_pico_usd"]
    # Under tz, a date is that zone's day: the whole of it, as the zone's own row of it.
    status, every = get(f"{api}/v1/costs?group_by=day&tz=Asia/Kolkata")
    status, costs = get(f"{api}/v1/costs?group_by=day&tz=Asia/Kolkata&since=2026-10-02&until=2026-10-02")
    assert costs["rows"] == [r for r in every["rows"] if r["day"] == "2026-10-02"]
    # The same object as costs --json: the window's total beside the rows a limit cuts.
    status, costs = get(f"{api}/v1/costs?group_by=model&limit=1")
    assert status == 200 and len(costs["rows"]) == 1 and costs["total"]["groups"] > 1
    assert costs["total"]["cost_usd"] == pytest.approx(usage["cost_usd"])


def test_one_session_by_key_and_unknown(api, oc_expected):
    want = oc_expected["sessions_sample"][0]
    status, d = get(f"{api}/v1/sessions/{want['sessionId']}")
    assert status == 200 and round(d["cost_usd"] * 10**12) == want["cost_pico_usd"]
    status, d = get(f"{api}/v1/sessions/agent%3Amain%3Anope")
    assert status == 404 and "no session" in d["error"]


def test_a_subagent_s_key_is_asked_with_its_slash_as_it_is_or_percent_encoded(tmp_path, claude_corpus):
    # The key's raw slash split the path before it was read: 404 "no such endpoint", %2F alone worked.
    served = Served.on(tmp_path, claude_corpus, fmt="claude-code")
    served.start()
    try:
        served.wait_ready()
        keys = [s["session_key"] for s in served.get("/v1/sessions?limit=500")[1]]
        key = next(k for k in keys if k.startswith("agent:claude-code:subagent:"))
        encoded = urllib.parse.quote(key, safe=":")
        assert "/" in key and "/" not in encoded
        for view in ("", "/hot", "/forecast"):
            raw, quoted = (served.get(f"/v1/sessions/{k}{view}") for k in (key, encoded))
            assert raw[0] == quoted[0] == 200, (view, raw)
            assert raw[1]["session_key"] == quoted[1]["session_key"] == key
            assert raw[1]["cost_usd"] == quoted[1]["cost_usd"] > 0
        # A key's own slash given as %2F is not taken for the path's: no such session.
        assert served.get(f"/v1/sessions/{encoded}%2Fhot")[0] == 404
    finally:
        served.stop()


def test_bad_parameters_are_400(api):
    assert get(f"{api}/v1/costs?group_by=nope")[0] == 400
    for group_by in ("model", "day", "tool"):  # not only where days are counted, as the CLI's --tz
        status, body = get(f"{api}/v1/costs?group_by={group_by}&tz=Nope")
        assert status == 400 and body["error"].startswith("unknown time zone 'Nope'"), (group_by, body)
    status, body = get(f"{api}/v1/sessions?since=yesterday")
    assert status == 400 and body["error"].startswith("since: cannot read time")
    status, body = get(f"{api}/v1/usage?until=tomorrow")
    assert status == 400 and body["error"].startswith("until: cannot read time")
    assert get(f"{api}/v1/sessions?limit=-1")[0] == 400
    for route in ("usage?", "sessions?", "costs?group_by=model&"):  # an empty window is no "nothing happened"
        status, body = get(f"{api}/v1/{route}since=2026-10-05&until=2026-10-01")
        assert status == 400 and body["error"].startswith("since is after until"), (route, body)
    assert get(f"{api}/v1/nothing")[0] == 404
    assert get(f"{api}/healthz") == (200, {"status": "ok"})
    # A misspelt parameter is a mistake told, not a different question answered (every agent's totals).
    for url, name in [("/v1/usage?agnet=work", "agnet"), ("/v1/costs?groupby=day", "groupby"),
                      ("/v1/sessions?limt=1", "limt"), ("/v1/sessions/agent:main:main?since=1d", "since"),
                      ("/v1/overview?agent=main", "agent"), ("/v1/usage?limit=1", "limit"),
                      ("/v1/hot?since=1d", "since")]:
        status, body = get(api + url)
        assert status == 400 and f"has no parameter {name!r}" in body["error"], (url, body)
    # A blank filter is refused as the CLI refuses it: read as not given, an empty $AGENT got every agent's spend.
    for url, name in [("/v1/usage?agent=", "agent"), ("/v1/sessions?agent=", "agent"),
                      ("/v1/costs?group_by=day&agent=", "agent"), ("/v1/hot?agent=", "agent"),
                      ("/v1/usage?since=", "since"), ("/v1/sessions?until=", "until"), ("/v1/sessions?limit=", "limit"),
                      ("/v1/overview?limit=", "limit"), ("/v1/costs?group_by=", "group_by"), ("/v1/costs?tz=", "tz"),
                      ("/v1/usage?agent=main&agent=", "agent")]:
        status, body = get(api + url)
        assert (status, body) == (400, {"error": f"{name} is blank: give it a value, or leave {name} out"}), url
    assert get(f"{api}/v1/usage?agent=main&since=2026-01-01&until=2099-01-01")[0] == 200
    assert get(f"{api}/v1/overview?limit=3")[0] == 200


def test_limits_past_64_bits_are_400_and_ages_older_than_the_ledger_an_answer(api):
    for limit in ("9223372036854775808", "9" * 5000, "%C2%B2"):  # '²' is a digit int() refuses
        status, body = get(f"{api}/v1/sessions?limit={limit}")
        assert (status, body) == (400, {"error": "limit must be a whole number from 1 to 9223372036854775807"})
    assert get(f"{api}/v1/sessions?limit=9223372036854775807")[1] == get(f"{api}/v1/sessions?limit=500")[1]
    # An age longer than the ledger means since its first event; a window ending then holds nothing.
    assert get(f"{api}/v1/sessions?since=999999999999d&limit=500") == get(f"{api}/v1/sessions?limit=500")
    assert get(f"{api}/v1/costs?since=999999999999d") == get(f"{api}/v1/costs")
    status, usage = get(f"{api}/v1/usage?until=999999999999d")
    assert status == 200 and usage["sessions"] == 0 and usage["cost_usd"] == 0


@pytest.fixture
def idle(tmp_path):
    """``serve`` with nothing to read, caught up, stopped after the test."""
    (tmp_path / "logs").mkdir()
    served = Served.on(tmp_path, tmp_path / "logs")
    served.start()
    try:
        served.wait_ready()
        yield served
    finally:
        served.stop()


def test_what_no_handler_expects_is_a_500_and_a_logged_traceback(idle):
    # A ledger edited under the daemon: every query of the day rollups now fails in SQLite.
    conn = apsw.Connection(str(idle.db))
    conn.setbusytimeout(10_000)  # the daemon may be writing (its first reconcile, a prune)
    conn.execute("DROP TABLE usage_days")
    conn.close()
    told = "internal error: the daemon's log has the traceback"
    assert get(f"{idle.url}/v1/usage") == (500, {"error": told})
    for path, body in (("/ui", f"{told}\n"), ("/metrics", f"# {told}\n")):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(idle.url + path, timeout=10)
        assert (err.value.code, err.value.read().decode()) == (500, body)
    def logged() -> list[dict]:
        return [json.loads(line) for line in idle.stderr if '"level":"error"' in line]

    # An answer may reach the client before its log line reaches the collector.
    failed = wait_for(lambda: len(logged()) >= 3 and logged(), what="three tracebacks logged")
    assert [f["msg"] for f in failed] == ["GET /v1/usage failed", "GET /ui failed", "GET /metrics failed"]
    assert all("no such table: usage_days" in f["exc"] for f in failed)
    assert "Exception occurred during processing of request" not in idle.log()  # the stdlib's dropped one


def test_a_client_that_hangs_up_mid_request_leaves_no_raw_traceback_in_the_log(idle):
    # The stdlib printed "Exception occurred during processing of request" and a traceback to stderr, lines
    # outside the log's format (JSON here): a client's own timeout is no fault of the daemon's.
    url = urllib.parse.urlsplit(idle.url)
    for _ in range(3):
        sock = socket.create_connection((url.hostname, url.port), timeout=10)
        sock.sendall(b"GET /v1/usage HTTP/1.1\r\nHost: x\r\n")  # its headers never end
        time.sleep(0.2)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, as a client that gave up sends
    assert get(f"{idle.url}/healthz") == (200, {"status": "ok"})
    idle.stop()
    assert [line for line in idle.log().splitlines() if not line.startswith("{")] == []


def _exchange(api: str, request: bytes) -> bytes:
    """Everything the daemon answers ``request`` with on one connection, read until it closes."""
    url = urllib.parse.urlsplit(api)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):  # a timeout here is a connection left open
            reply += chunk
    return reply


@pytest.mark.parametrize("request_bytes, status", [
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"414"),
    (b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n", b"431"),
])
def test_what_the_server_refuses_before_any_endpoint_is_answered_in_json(api, request_bytes, status):
    # A request line too long or too many headers got the stdlib's HTML page from a JSON API.
    head, _, body = _exchange(api, request_bytes).partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == status
    assert b"Content-Type: application/json" in head.split(b"\r\n")
    assert set(json.loads(body)) == {"error"}


def test_a_request_without_headers_is_answered(api):
    # HTTP/0.9: no version, no headers; the reply is the body alone.
    assert json.loads(_exchange(api, b"GET /healthz\r\n\r\n")) == {"status": "ok"}


def test_a_post_of_unknown_length_is_answered_once_and_closed(api):
    # Chunked on a keep-alive connection: read as the next request, a chunk's size line got an answer of its own.
    body = b'{"hook_event_name": "SessionStart", "session_id": "s", "padding": "' + b"x" * 40 + b'"}'
    reply = _exchange(api, b"POST /v1/hooks/claude-code HTTP/1.1\r\nHost: agentledger\r\nTransfer-Encoding: chunked\r\n"
                      b"Content-Type: application/json\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    head, _, data = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"\r\nConnection: close" in head
    assert json.loads(data) == {"error": "send a Content-Length"}


@pytest.mark.parametrize("framing", [
    b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /v1/hooks/claude-code HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n",
], ids=["get-with-length", "get-chunked", "post-chunked-and-length"])
def test_a_body_the_daemon_does_not_read_never_becomes_a_request(api, framing):
    # A GET's body, or a length beside chunked framing, was read as the next request on the connection.
    inner = b"GET /v1/usage HTTP/1.1\r\nHost: a\r\n\r\n"
    head = framing % len(inner) if b"%d" in framing else framing
    reply = _exchange(api, head + inner + b"GET /readyz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    replies = re.findall(rb"HTTP/1\.1 \d{3} ", reply)  # a reply's body runs straight into the next status line
    assert len(replies) == 1, replies
    assert replies[0].startswith(b"HTTP/1.1 400 " if head.startswith(b"POST") else b"HTTP/1.1 200 ")


@pytest.mark.parametrize("lengths", [(b"0", b"%d"), (b"%d", b"%d")], ids=["differing", "repeated"])
def test_a_request_with_two_lengths_is_refused_and_its_body_never_becomes_a_request(api, lengths):
    # The first of two Content-Length headers framed the body: "0" then the real length left the body on the
    # connection, read as a request of its own.
    inner = b"GET /v1/usage HTTP/1.1\r\nHost: a\r\n\r\n"
    head = b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + b"".join(b"Content-Length: " + n + b"\r\n" for n in lengths)
    reply = _exchange(api, (head + b"\r\n") % tuple(len(inner) for n in lengths if n == b"%d") + inner)
    replies = re.findall(rb"HTTP/1\.1 \d{3} ", reply)
    assert replies == [b"HTTP/1.1 400 "], reply
    assert b"\r\nConnection: close" in reply
    assert json.loads(reply.partition(b"\r\n\r\n")[2]) == {"error": "send one Content-Length"}


@pytest.fixture
def short_lived(tmp_path):
    """An API server in this process whose connections close after 0.5 s without a byte."""
    db = tmp_path / "ledger.db"
    open_writer(db).close()
    server = ApiServer(db, "127.0.0.1:0", idle_timeout_s=0.5)
    server.start()
    yield server.address
    server.close()


@pytest.mark.parametrize("sent", [b"", b"GET /heal", b"POST /v1/hooks/claude-code HTTP/1.1\r\nHost: a\r\n"
                                  b"Content-Length: 100\r\n\r\n{\"hook_event_name\": "],
                         ids=["nothing", "half-a-request-line", "half-a-body"])
def test_a_client_that_stalls_is_closed_and_others_are_answered_meanwhile(short_lived, sent, caplog):
    # Without a socket timeout, a client that connected and stalled held its thread until it hung up.
    url = urllib.parse.urlsplit(short_lived)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(sent)
        assert get(f"{short_lived}/healthz") == (200, {"status": "ok"})
        started = time.monotonic()
        assert sock.recv(65536) == b""  # closed by the server, not answered: there is no request to answer
        assert time.monotonic() - started < 5
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def _ask(api: str, method: str, path: str, body: bytes | None = None) -> tuple[int, str | None, bytes]:
    """Status, Allow header and body of one request."""
    url = urllib.parse.urlsplit(api)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Allow"), resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("GET", "/v1/hooks/claude-code", "POST"), ("POST", "/metrics", "GET, HEAD"), ("POST", "/v1/gate", "GET"),
    ("PUT", "/v1/usage", "GET, HEAD"), ("DELETE", "/v1/sessions/agent%3Amain%3As1", "GET, HEAD"),
    ("PATCH", "/v1/hooks/claude-code", "POST"), ("HEAD", "/v1/gate", "GET"), ("OPTIONS", "/v1/usage", "GET, HEAD"),
    ("TRACE", "/healthz", "GET, HEAD"), ("PROPFIND", "/v1/hooks/claude-code", "POST"),
])
def test_a_method_an_endpoint_does_not_answer_is_405_naming_the_one_it_does(api, method, path, allow):
    # Was a 404 saying the endpoint does not exist, or the stdlib's 501 HTML page for a method the handler had no
    # do_<METHOD> for (OPTIONS, TRACE, any it never heard of).
    status, allowed, data = _ask(api, method, path, b"{}" if method in ("POST", "PUT", "PATCH") else None)
    assert (status, allowed) == (405, allow)
    if method != "HEAD":  # a HEAD answer has no body
        want = allow.split(",")[0]
        assert json.loads(data) == {"error": f"{urllib.parse.urlsplit(path).path} does not answer {method}: use {want}"}


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "PROPFIND"])
def test_any_method_on_no_endpoint_is_a_json_404(api, method):
    status, allowed, data = _ask(api, method, "/v1/nothing", b"{}" if method != "DELETE" else None)
    assert (status, allowed, json.loads(data)) == (404, None, {"error": "no such endpoint '/v1/nothing'"})


def test_head_is_answered_as_get_without_the_body(api):
    for path in ("/v1/usage", "/healthz", "/metrics", "/ui"):
        assert _ask(api, "HEAD", path) == (200, None, b""), path
    # One keep-alive connection: a HEAD answer carries no body to be read as the next answer.
    reply = _exchange(api, b"HEAD /v1/usage HTTP/1.1\r\nHost: a\r\n\r\nHEAD /nothing HTTP/1.1\r\nHost: a\r\n\r\n"
                           b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    heads = reply.split(b"\r\n\r\n")
    assert [h.split(b"\r\n")[0] for h in heads[:3]] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found",
                                                         b"HTTP/1.1 200 OK"]
    assert json.loads(heads[3]) == {"status": "ok"}
    length = re.search(rb"Content-Length: (\d+)", heads[0]).group(1)
    assert int(length) == len(_ask(api, "GET", "/v1/usage")[2])


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1) to listen on")
def test_serve_listens_on_an_ipv6_literal(tmp_path):
    (tmp_path / "logs").mkdir()
    served = Served.on(tmp_path, tmp_path / "logs")
    served.config.write_text(served.config.read_text().replace('listen = "127.0.0.1:0"', 'listen = "[::1]:0"'))
    served.start()
    try:
        assert re.fullmatch(r"http://\[::1\]:\d+", served.url), served.log()
        assert served.get("/healthz") == (200, {"status": "ok"})
    finally:
        served.stop()


def test_metrics_parse_and_equal_the_ledger(api, oc_expected):
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{api}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    want_types = {
        "agentledger_tokens": "counter", "agentledger_cost_usd": "counter", "agentledger_llm_calls": "counter",
        "agentledger_tool_calls": "counter", "agentledger_runs": "counter", "agentledger_runs_running": "gauge",
        "agentledger_runs_interrupted": "gauge", "agentledger_sessions": "counter",
        "agentledger_sessions_active": "gauge", "agentledger_ingest_lines": "counter",
        "agentledger_files_tailed": "gauge", "agentledger_ingest_lag_seconds": "gauge",
        "agentledger_db_size_bytes": "gauge", "agentledger_build_info": "gauge",
    }
    for name, kind in want_types.items():
        assert families[name].type == kind, name

    def total(name, **labels):
        return sum(s.value for s in families[name].samples
                   if s.name.endswith("_total") or families[name].type == "gauge"
                   if all(s.labels.get(k) == v for k, v in labels.items()))

    t = oc_expected["totals"]
    assert total("agentledger_cost_usd") == pytest.approx(t["cost_usd"])
    assert total("agentledger_tokens", token_type="input") == t["tokens"]["input"]
    assert total("agentledger_tokens", token_type="cache_read") == t["tokens"]["cacheRead"]
    assert total("agentledger_llm_calls") == t["llm_calls"]
    assert total("agentledger_tool_calls") + t["orphaned_tool_calls"] == t["tool_calls"]  # ended calls only
    assert total("agentledger_tool_calls", outcome="error") == t["failed_tool_calls"]
    running = [s.value for s in families["agentledger_runs_running"].samples]
    interrupted = [s.value for s in families["agentledger_runs_interrupted"].samples]
    assert interrupted == [t["orphaned_runs"]]
    assert total("agentledger_runs") + running[0] + interrupted[0] == t["runs"]
    assert total("agentledger_ingest_lines", result="rejected") == oc_expected["lines"]["malformed"]["total"]
    assert total("agentledger_ingest_lines") == oc_expected["lines"]["physical"]
    # No label ever carries an id.
    for family in families.values():
        for sample in family.samples:
            for value in sample.labels.values():
                assert not re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-|evt_|toolu_", value), sample


def test_health_and_readiness(api):
    assert get(f"{api}/healthz") == (200, {"status": "ok"})
    assert get(f"{api}/readyz") == (200, {"ready": True})  # the fixture waited for the catch-up


def test_not_ready_while_catching_up_and_gates_say_the_logs_are_still_being_read(tmp_path):
    """A gate answered from a backlog read in part let a session through that the rest of it put over its
    budget: what lets a call through says the logs are still being read, of a known session as of one not
    read yet."""
    from logwriter import LogDir, llm_call

    logs = LogDir(tmp_path / "state")
    with open(logs.live, "wb") as f:
        for n in range(1, 150_001):
            f.write(llm_call(n))  # $0.15 in all, over the budget from two thirds of the backlog on
    gates = [{"name": "sc", "scope": "session", "metric": "cost_usd", "limit": 0.1}]
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "--db", str(tmp_path / "l.db"), "serve",
                             "--listen", "127.0.0.1:0", str(logs.root)], stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env={**os.environ, "AGENTLEDGER_GATES": json.dumps(gates)})
    try:
        address = None
        while address is None:
            line = proc.stderr.readline()
            assert line, "serve died"
            m = re.search(r'listening on (http://[^\s"]+)', line)
            address = m.group(1) if m else None
        status, body = get(f"{address}/readyz")
        assert (status, body) == (503, {"ready": False, "reason": "catching up"})
        assert get(f"{address}/healthz")[0] == 200
        assert get(f"{address}/v1/gate?session_key=agent:main:nobody&tool=exec")[1]["reason"] == \
            "unknown session 'agent:main:nobody': the logs are still being read: no session gate applies"
        allowed = set()
        deadline = time.monotonic() + 120
        while get(f"{address}/readyz")[0] != 200:
            assert time.monotonic() < deadline
            answer = get(f"{address}/v1/gate?session_key=agent:main:s1&tool=exec")[1]
            if answer["decision"] == "allow" and answer["session_id"]:
                allowed.add(answer["reason"])
            time.sleep(0.05)
        assert allowed == {"within every gate: the logs are still being read"}
        assert get(f"{address}/v1/gate?session_key=agent:main:s1&tool=exec")[1]["reason"] == \
            "session agent:main:s1 spent $0.15 of its $0.10 budget (gate sc)"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def _durations_in(corpus: Path) -> tuple[dict, dict]:
    """Model-call and tool-call durations (ms) straight from the corpus lines, by model and by tool."""
    llm: dict = {}
    tools: dict = {}
    for path in corpus.rglob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            try:
                ev = json.loads(line)
                data = ev["data"]
            except (ValueError, KeyError, TypeError):
                continue
            d = data.get("durationMs") if isinstance(data, dict) else None
            if not isinstance(d, int):
                continue
            if ev.get("kind") == "llm.call":
                llm.setdefault(data.get("model"), []).append(d)
            elif ev.get("kind") == "tool.end":
                tools.setdefault(data.get("toolName"), []).append(d)
    return llm, tools


def test_duration_histograms_follow_opentelemetry_and_the_calls(api, oc_corpus):
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{api}/metrics", timeout=10) as resp:
        families = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
    llm, tools = _durations_in(oc_corpus)
    for name, label, calls in (("gen_ai_client_operation_duration_seconds", "gen_ai_request_model", llm),
                               ("gen_ai_execute_tool_duration_seconds", "gen_ai_tool_name", tools)):
        family = families[name]
        assert family.type == "histogram"
        counts = {s.labels[label]: s.value for s in family.samples if s.name.endswith("_count")}
        sums = {s.labels[label]: s.value for s in family.samples if s.name.endswith("_sum")}
        assert counts == {k: len(v) for k, v in calls.items()}
        assert sums == pytest.approx({k: sum(v) / 1000 for k, v in calls.items()})
        # Buckets are cumulative and end at the count; a call of 1 s is within le="1.28".
        for key, durations in calls.items():
            within = {s.labels["le"]: s.value for s in family.samples
                      if s.name.endswith("_bucket") and s.labels[label] == key}
            assert within["+Inf"] == len(durations)
            assert within["1.28"] == sum(d <= 1280 for d in durations)


def test_a_burst_of_connections_is_held_until_the_daemon_takes_them(tmp_path):
    # Claude Code asks once per parallel tool call, each on a connection of its own: connects beyond the
    # listen backlog are dropped and retried seconds later, past a hook's timeout. None is taken here (the
    # server is not serving yet), so every connect the kernel completes was held by the backlog.
    from agentledger.http import ApiServer

    server = ApiServer(tmp_path / "ledger.db", "127.0.0.1:0")
    socks = []
    try:
        for _ in range(64):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(server.httpd.server_address)
            socks.append(s)
        pending, deadline = list(socks), time.monotonic() + 10
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], pending, [], 0.5)
            pending = [s for s in pending if s not in writable]
        assert not pending, f"{len(pending)} of 64 connects not held"
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for s in socks)
    finally:
        for s in socks:
            s.close()
        server.httpd.server_close()
