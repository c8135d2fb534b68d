"""The daemon's HTTP listener: the query API as JSON, read-only, loopback by default.

Each request opens its own read-only connection, so readers never hold the write
lock and a slow client never blocks ingestion.
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agentledger.ledger import queries
from agentledger.ledger.db import LedgerError, open_reader
from agentledger.metrics import registry_for
from agentledger.timeutil import parse_time

log = logging.getLogger("agentledger.http")
DEFAULT_LISTEN = "127.0.0.1:9464"


class BadRequest(ValueError):
    pass


class Health:
    """What /healthz and /readyz report; the daemon's loop writes it, request threads read it."""

    STALL_S = 30.0  # the loop ticks at least every second; this much silence means it is stuck

    def __init__(self) -> None:
        self.caught_up = False
        self.last_tick = time.monotonic()

    def tick(self) -> None:
        self.last_tick = time.monotonic()

    def alive(self) -> tuple[int, dict]:
        stalled = time.monotonic() - self.last_tick
        if stalled > self.STALL_S:
            return 503, {"status": "stalled", "seconds_since_last_pass": round(stalled, 1)}
        return 200, {"status": "ok"}

    def ready(self) -> tuple[int, dict]:
        if not self.caught_up:
            return 503, {"ready": False, "reason": "catching up"}
        return 200, {"ready": True}


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"cannot listen on {value!r}: give HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _window(params: dict[str, list[str]], default_limit: int | None) -> queries.Window:
    def one(name: str) -> str | None:
        values = params.get(name)
        return values[-1] if values else None

    try:
        since = parse_time(one("since")) if one("since") else None
        until = parse_time(one("until")) if one("until") else None
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    limit = one("limit")
    if limit is not None and (not limit.isdigit() or int(limit) < 1):
        raise BadRequest("limit must be a positive whole number")
    return queries.Window(since=since, until=until, agent=one("agent"),
                          limit=int(limit) if limit is not None else default_limit)


def _route(db: Path, health: Health, path: str, params: dict[str, list[str]]) -> tuple[int, object]:
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts == ["healthz"]:
        return health.alive()
    if parts == ["readyz"]:
        status, body = health.ready()
        if status == 200:
            try:  # ready also means the ledger answers
                open_reader(db).close()
            except LedgerError as exc:
                return 503, {"ready": False, "reason": str(exc)}
        return status, body
    if len(parts) < 2 or parts[0] != "v1":
        return 404, {"error": f"no such endpoint {path!r}"}
    conn = open_reader(db)
    try:
        if parts[1:] == ["sessions"]:
            return 200, queries.sessions(conn, _window(params, 50))
        if parts[1] == "sessions" and len(parts) == 3:
            return 200, queries.session_detail(conn, parts[2])
        if parts[1:] == ["usage"]:
            return 200, queries.usage(conn, _window(params, None))
        if parts[1:] == ["costs"]:
            group_by = (params.get("group_by") or ["model"])[-1]
            tz = (params.get("tz") or ["UTC"])[-1]
            return 200, queries.costs(conn, _window(params, None), group_by, tz)
        return 404, {"error": f"no such endpoint {path!r}"}
    finally:
        conn.close()


class _Handler(BaseHTTPRequestHandler):
    server_version = "agentledger"
    db: Path
    health: Health

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        url = urlsplit(self.path)
        if url.path == "/metrics":
            self._metrics()
            return
        try:
            status, body = _route(self.db, self.health, url.path, parse_qs(url.query))
        except queries.NotFound as exc:
            status, body = 404, {"error": str(exc).strip('"')}
        except (BadRequest, ValueError) as exc:
            status, body = 400, {"error": str(exc)}
        except LedgerError as exc:
            status, body = 503, {"error": str(exc)}
        data = orjson.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _metrics(self) -> None:
        try:
            data, status, ctype = generate_latest(registry_for(self.db)), 200, CONTENT_TYPE_LATEST
        except LedgerError as exc:
            data, status, ctype = f"# {exc}\n".encode(), 503, "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)


class ApiServer:
    """Serves in a background thread until ``close``."""

    def __init__(self, db: Path, listen: str, health: Health | None = None):
        host, port = parse_listen(listen)
        self.health = health or Health()
        handler = type("Handler", (_Handler,), {"db": db, "health": self.health})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
