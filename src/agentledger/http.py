"""The daemon's HTTP listener: the query API as JSON, read-only, loopback by default.

Requests read through a few read-only connections they share (``Readers``), so readers never hold the
write lock and a slow client never blocks ingestion; connections.py bounds the connections served.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit
from zoneinfo import ZoneInfo

import apsw
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agentledger.config import GateConfig, HttpConfig, parse_listen
from agentledger.facts import ToolObserved
from agentledger import jsontext, ui
from agentledger.connections import BUSY, Listener
from agentledger.forecast import Forecaster
from agentledger.gates import Decision, GateKeeper, hot_json
from agentledger.ledger import queries
from agentledger.ledger.db import LedgerError, ReaderPool, open_reader
from agentledger.metrics import CounterFloors, registry_for
from agentledger.sources import claude_code_hooks
from agentledger.overview import overview
from agentledger.timeutil import parse_time

log = logging.getLogger("agentledger.http")


class BadRequest(ValueError):
    pass


READERS = 8  # requests reading the ledger at once; others wait for one of them
READER_WAIT_S = 10.0


class Readers:
    """At most ``size`` read-only connections to the ledger at once, kept between requests.

    Not one per request: SQLite keeps a closed connection's descriptor open while another connection of the
    process holds a lock on the file, as the writer's always does, so a burst of requests left as many
    descriptors on the ledger as had read at once, for good."""

    def __init__(self, db: Path, size: int = READERS, wait_s: float = READER_WAIT_S):
        self.db, self.size, self.wait_s = db, size, wait_s
        self._pool = ReaderPool(db, size)
        self._slots = threading.BoundedSemaphore(size)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One of the ``size``, for a read that opens a connection of its own (a scrape's, a probe's)."""
        if not self._slots.acquire(timeout=self.wait_s):
            raise LedgerError(f"all {self.size} readers of the ledger stayed busy for {self.wait_s:g} s: try again")
        try:
            yield
        finally:
            self._slots.release()

    @contextmanager
    def snapshot(self) -> Iterator[apsw.Connection]:
        """A kept connection in a read transaction of its own: an answer's parts agree while the writer commits.
        The transaction ends before the connection is kept again: an idle reader holding a snapshot would
        stop the writer's checkpoints from reaching the end of the write-ahead log."""
        with self.slot(), self._pool.connection() as conn, conn:
            yield conn

    def close(self) -> None:
        self._pool.close()


class Health:
    """What /healthz and /readyz report; the daemon's loop writes it, request threads read it."""

    STALL_S = 30.0  # the loop ticks at least every second; this much silence means it is stuck

    def __init__(self) -> None:
        self.caught_up = False
        self.trouble: str | None = None  # why ingest is paused (a full disk, a held lock), while it is
        self.last_tick = time.monotonic()

    def tick(self) -> None:
        self.last_tick = time.monotonic()

    def alive(self) -> tuple[int, dict]:
        stalled = time.monotonic() - self.last_tick
        if stalled > self.STALL_S:
            return 503, {"status": "stalled", "seconds_since_last_pass": round(stalled, 1)}
        return 200, {"status": "ok"}

    def ready(self) -> tuple[int, dict]:
        trouble = self.trouble
        if trouble is not None:
            return 503, {"ready": False, "reason": trouble}
        if not self.caught_up:
            return 503, {"ready": False, "reason": "catching up"}
        return 200, {"ready": True}


def _time(params: dict[str, list[str]], name: str, zone: dt.tzinfo) -> int | None:
    value = _filter(params, name)
    try:
        return parse_time(value, end=name == "until", zone=zone) if value else None
    except ValueError as exc:
        raise BadRequest(f"{name}: {exc}") from None


def _window(params: dict[str, list[str]], default_limit: int | None,
            zone: dt.tzinfo = dt.timezone.utc) -> queries.Window:
    """``zone``: where a date or a time without an offset is read (the zone the answer counts days in)."""
    since, until = _time(params, "since", zone), _time(params, "until", zone)
    limit = _filter(params, "limit")
    limit = default_limit if limit is None else ui.whole(limit, "limit", 1, queries.MAX_LIMIT)
    try:
        return queries.Window(since=since, until=until, agent=_filter(params, "agent"), limit=limit)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _error(text: str) -> bytes:
    return orjson.dumps({"error": text})


def _one(params: dict[str, list[str]], name: str) -> str | None:
    """The parameter's last value; None when it is not given or blank."""
    values = params.get(name)
    return values[-1] or None if values else None


def _filter(params: dict[str, list[str]], name: str) -> str | None:
    """A filter's last value; None when it is not given. A blank one is refused, as the CLI refuses it: read
    as not given, a script's empty $AGENT was answered every agent's spend."""
    values = params.get(name)
    if values and not values[-1]:
        raise BadRequest(f"{name} is blank: give it a value, or leave {name} out")
    return values[-1] if values else None


def _hot(keeper: GateKeeper | None, readers: Readers, key: str) -> tuple[int, object]:
    if keeper is None:
        return 503, {"error": "hot session views are served by `agentledger serve` only"}
    with readers.snapshot() as conn:
        state = keeper.hot.lookup(conn, key)
    if state is None:
        return 404, {"error": f"no session {key!r} (give a session key or a session id)"}
    return 200, hot_json(state)


def _gate(keeper: GateKeeper | None, params: dict[str, list[str]]) -> tuple[int, object]:
    if keeper is None:
        return 503, {"error": "gates are answered by `agentledger serve` only"}
    key = _one(params, "session_key") or _one(params, "sessionKey") or _one(params, "session_id")
    tool = _one(params, "tool") or _one(params, "toolName")
    # A misspelt parameter must not turn every gate into an allow: both are asked for, the tool
    # possibly blank (a caller that does not know the tool's name still has its session measured).
    if key is None or ("tool" not in params and "toolName" not in params):
        raise BadRequest("a gate decision needs session_key and tool: GET /v1/gate?session_key=KEY&tool=NAME")
    return 200, keeper.decide(key, tool).as_json()


def claude_code_answer(keeper: GateKeeper, payload: object, call_id: str | None = None,
                       queue: Callable[[Decision], bool] | None = None) -> dict:
    """Claude Code's hook protocol: a PreToolUse that a gate blocks gets the deny JSON; all else ``{}``.
    ``call_id``: the tool_use_id of a call whose event this process records, which counts from now on;
    ``queue``: queues that event, told the decision (see ``GateKeeper.decide_call``)."""
    if not isinstance(payload, dict):
        raise BadRequest("a hook payload is a JSON object")
    if payload.get("hook_event_name") != "PreToolUse":
        return {}
    key, tool = payload.get("session_id"), payload.get("tool_name")
    if not isinstance(key, str) or not isinstance(tool, str):
        raise BadRequest("a PreToolUse payload needs string session_id and tool_name")
    # Asked by its key, as the ledger names the session: a session not read yet is named alike. A Task
    # subagent's call is its own session's, and its parent's family's.
    asked, parent = claude_code_hooks.asking(key, payload.get("agent_id"))
    decision = keeper.decide_call(asked, tool, claude_code_hooks.AGENT, call_id, queue, parent)
    if decision.decision != "block":
        return {}
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": decision.reason}}


def take_claude_code_hook(keeper: GateKeeper, inbox: claude_code_hooks.HookInbox, payload: object,
                          received_ms: int) -> dict:
    """A hook event the daemon records: answered (claude_code_answer), then queued for its writer, the answer
    not waiting. Read before it is answered: a payload refused (400) counts toward no gate, and a tool call
    counts only while an event of it will be recorded (it names its tool_use_id): one the inbox refuses
    never does, and a retry the inbox refuses leaves the call its first event stands for counted."""
    event = claude_code_hooks.decode(payload, received_ms)
    if event.name != "PreToolUse":
        inbox.put(event)
        return {}

    def queue(decision: Decision) -> bool:
        """Queued as the call was answered: a denied call is recorded as failed."""
        return inbox.put(claude_code_hooks.denied(event, decision.reason) if decision.decision == "block" else event)

    call_id = event.fact.tool_call_id if isinstance(event.fact, ToolObserved) else None
    return claude_code_answer(keeper, payload, call_id, queue)


def _gates_of(keeper: GateKeeper | None) -> tuple[tuple[GateConfig, ...], ZoneInfo]:
    """The daemon's gates and the zone its days start in; none outside ``serve``."""
    return (keeper.gates, keeper.zone) if keeper is not None else ((), ZoneInfo("UTC"))


def _ready(readers: Readers, health: Health) -> tuple[int, dict]:
    status, body = health.ready()
    if status == 200:
        try:  # ready also means the ledger answers
            with readers.slot():
                open_reader(readers.db).close()
        except LedgerError as exc:
            return 503, {"ready": False, "reason": str(exc)}
    return status, body


def _hot_views(keeper: GateKeeper | None, params: dict[str, list[str]]) -> tuple[int, object]:
    if keeper is None:
        return 503, {"error": "hot session views are served by `agentledger serve` only"}
    w = _window(params, 50)
    views = [hot_json(v) for v in keeper.hot.views() if w.agent is None or v.agent_id == w.agent]
    return 200, views[: w.limit]


def _overview(conn: apsw.Connection, keeper: GateKeeper | None, params: dict[str, list[str]]) -> dict:
    gates, zone = _gates_of(keeper)
    limit = _filter(params, "limit")
    limit = 8 if limit is None else ui.whole(limit, "limit", 1, OVERVIEW_MAX)
    return overview(conn, gates, zone, int(time.time() * 1000), sessions=limit)


def _forecast(conn: apsw.Connection, keeper: GateKeeper | None, key: str) -> dict:
    gates, zone = _gates_of(keeper)
    return Forecaster(conn, gates, zone, int(time.time() * 1000)).session(key)


def _costs(conn: apsw.Connection, params: dict[str, list[str]]) -> dict:
    group_by = _filter(params, "group_by") or "model"
    # Whatever the grouping: a zone that does not exist is a mistake to tell, not one to answer past.
    local = queries.zone(_filter(params, "tz") or "UTC")
    return queries.costs_report(conn, _window(params, None, local), group_by, local)


_SESSION_VIEWS = ("hot", "forecast")


def _segments(path: str) -> list[str]:
    """The path's segments, unquoted, a session's key one of them whatever it holds: everything between
    ``/v1/sessions/`` and an optional last ``/hot`` or ``/forecast``. A Claude Code subagent's key has a slash
    (``<session_id>/<agent_id>``), which clients send as it is; one given as %2F is the key's own, unquoted
    after the split."""
    raw = path.strip("/").split("/")
    if raw[:2] == ["v1", "sessions"] and len(raw) > 3:
        view = raw[-1:] if raw[-1] in _SESSION_VIEWS else []
        raw = raw[:2] + ["/".join(raw[2:len(raw) - len(view)])] + view
    return [unquote(p) for p in raw]


_READS = ("GET", "HEAD")
_Answer = Callable[[], tuple[int, object]]


def _route(readers: Readers, health: Health, keeper: GateKeeper | None, path: str,
           params: dict[str, list[str]]) -> tuple[tuple[str, ...], tuple[str, ...] | None, _Answer] | None:
    """The methods the JSON endpoint at ``path`` answers, the parameters it reads (None: any, unread ones let
    be), and its answer; None when there is no such endpoint."""

    def reading(query: Callable[[apsw.Connection], object]) -> _Answer:
        def answer() -> tuple[int, object]:
            with readers.snapshot() as conn:
                return 200, query(conn)
        return answer

    match _segments(path):
        case ["healthz"]:
            return _READS, None, health.alive
        case ["readyz"]:
            return _READS, None, lambda: _ready(readers, health)
        case ["v1", "gate"]:
            # Not HEAD: a decision is counted, and a block recorded, for an answer HEAD never shows. Other
            # parameters are let be: a gateway's hook may send more context than the gates read.
            return ("GET",), None, lambda: _gate(keeper, params)
        case ["v1", "hot"]:
            return _READS, ("agent", "limit"), lambda: _hot_views(keeper, params)
        case ["v1", "sessions", key, "hot"]:
            return _READS, (), lambda: _hot(keeper, readers, key)
        case ["v1", "sessions", key, "forecast"]:
            return _READS, (), reading(lambda conn: _forecast(conn, keeper, key))
        case ["v1", "overview"]:
            return _READS, ("limit",), reading(lambda conn: _overview(conn, keeper, params))
        case ["v1", "sessions"]:
            return _READS, _WINDOW, reading(lambda conn: queries.sessions(conn, _window(params, 50)))
        case ["v1", "sessions", key]:
            return _READS, (), reading(lambda conn: queries.session_detail(conn, key))
        case ["v1", "usage"]:
            return _READS, _WINDOW[:3], reading(lambda conn: queries.usage(conn, _window(params, None)))
        case ["v1", "costs"]:
            return _READS, (*_WINDOW, "group_by", "tz"), reading(lambda conn: _costs(conn, params))
    return None


_WINDOW = ("since", "until", "agent", "limit")  # what _window reads; usage has no rows to limit


def _only(params: dict[str, list[str]], path: str, takes: tuple[str, ...]) -> None:
    """A parameter the endpoint does not read is a mistake to tell: a misspelt ``agnet`` answered every
    agent's totals as if they were one agent's."""
    unknown = sorted(set(params) - set(takes))
    if unknown:
        known = f"it takes {', '.join(takes)}" if takes else "it takes none"
        raise BadRequest(f"{path} has no parameter {unknown[0]!r}: {known}")


OVERVIEW_MAX = 50  # each session listed costs a forecast
MAX_BODY = 32 << 20  # a PreToolUse payload carries the tool's input, e.g. a whole file to write
# Each connection holds a thread: one that sends nothing, or stalls mid-request, for this long is closed, so
# idle or stuck clients cannot pile threads up. A hook client's keep-alive connection idle past it is closed
# too, and the client connects again.
IDLE_TIMEOUT_S = 60.0
MAX_CONNECTIONS = HttpConfig().max_connections
# What the connections kept from other requests answer: gates, hooks, and the liveness probe, which reads
# nothing and must not read a busy daemon as a stalled one.
_KEPT_FOR = ("/v1/gate", "/v1/hooks/claude-code", "/healthz")


class _Handler(BaseHTTPRequestHandler):
    server_version = "agentledger"
    protocol_version = "HTTP/1.1"  # keep-alive: a hook client asks many times
    # Headers and body go out as two writes; with Nagle on, a keep-alive client's delayed ACK
    # would hold the body back ~40 ms.
    disable_nagle_algorithm = True
    timeout = IDLE_TIMEOUT_S  # read by StreamRequestHandler.setup: each read and write on the socket
    server: Listener
    db: Path
    readers: Readers
    health: Health
    keeper: GateKeeper | None
    hooks: claude_code_hooks.HookInbox | None
    top_n: int
    floors: CounterFloors

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        if not self.server.begin(self.request, url.path.rstrip("/") in _KEPT_FOR):
            self.close_connection = True  # a body left unread, and a client best asking again later
            self._reply(503, "application/json", _error(BUSY), (("Retry-After", "1"),))
            return
        try:
            self._answer_request(url)
        finally:
            self.server.end(self.request)

    def _answer_request(self, url: SplitResult) -> None:
        if len(self.headers.get_all("Content-Length", ())) > 1:
            # Which of them frames the body is a guess another hop may make differently (RFC 9112 §6.3): its
            # bytes could be taken for a request of their own.
            self.close_connection = True
            self._reply(400, "application/json", _error("send one Content-Length"))
            return
        methods, answer = self._endpoint(url)
        # Only a POST endpoint reads a body; one left unread must not be taken for the next request.
        reads_body = self.command == "POST" and "POST" in methods
        if not reads_body and ("Transfer-Encoding" in self.headers
                               or self.headers.get("Content-Length", "0").strip() not in ("", "0")):
            self.close_connection = True
        if self.command in methods:
            answer()
        elif methods:
            self._reply(405, "application/json", _error(f"{url.path} does not answer {self.command}: use {methods[0]}"),
                        (("Allow", ", ".join(methods)),))
        else:
            self._reply(404, "application/json", _error(f"no such endpoint {url.path!r}"))

    def __getattr__(self, name: str):
        # Every method goes to _dispatch, which answers one an endpoint does not take (OPTIONS, TRACE, one never
        # heard of) with a 405 naming those it does, where http.server answered a 501 HTML page.
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    def _endpoint(self, url: SplitResult) -> tuple[tuple[str, ...], Callable[[], None] | None]:
        """The methods the endpoint at ``url`` answers, and what answers them; none when there is no such endpoint."""
        if url.path == "/metrics":
            return _READS, self._metrics
        if url.path in ("/ui", "/ui/"):
            return _READS, lambda: self._ui(parse_qs(url.query))
        if url.path.rstrip("/") == "/v1/hooks/claude-code":
            return ("POST",), lambda: self._answer(self._hook)
        # Blank values kept: a gate asked for a tool whose name is not known sends tool= (see _gate).
        params = parse_qs(url.query, keep_blank_values=True)
        found = _route(self.readers, self.health, self.keeper, url.path, params)
        if found is None:
            return (), None
        methods, takes, route = found

        def checked() -> tuple[int, object]:
            if takes is not None:
                _only(params, url.path, takes)
            return route()
        return methods, lambda: self._answer(checked)

    def _hook(self) -> tuple[int, object]:
        length = self.headers.get("Content-Length", "")
        # With Transfer-Encoding as well, the length is not the body's (RFC 9112 §6.3).
        if not length.isdecimal() or "Transfer-Encoding" in self.headers:
            self.close_connection = True  # a body of unknown length must not be taken for the next request
            raise BadRequest("send a Content-Length")
        if int(length) > MAX_BODY:
            self.close_connection = True  # the unread body must not be taken for the next request
            return 413, {"error": f"body over {MAX_BODY} bytes"}
        body = self.rfile.read(int(length))
        if self.keeper is None:
            return 503, {"error": "hooks are answered by `agentledger serve` only"}
        try:
            payload = jsontext.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"the body is not JSON: {exc}") from None
        received_ms = time.time_ns() // 1_000_000
        if self.hooks is None:
            return 200, claude_code_answer(self.keeper, payload)
        return 200, take_claude_code_hook(self.keeper, self.hooks, payload, received_ms)

    def _answer(self, route) -> None:
        started = time.perf_counter()
        try:
            status, body = route()
            data = orjson.dumps(body)  # in here: a body it cannot encode is a failure to answer too
        except queries.NotFound as exc:
            status, data = 404, _error(str(exc).strip('"'))
        except (BadRequest, ValueError) as exc:
            status, data = 400, _error(str(exc))
        except LedgerError as exc:
            status, data = 503, _error(str(exc))
        except TimeoutError:
            raise  # a body that stalled past the idle timeout: http.server closes the connection, nothing to answer
        except Exception:
            status, data = 500, _error(self._failed())
        elapsed_ms = (time.perf_counter() - started) * 1000
        self._reply(status, "application/json", data,
                    (("Server-Timing", f"app;dur={elapsed_ms:.3f}"),))  # time inside the handler

    def _metrics(self) -> None:
        try:
            extra = [self.keeper.checks] if self.keeper is not None else []
            registry = registry_for(self.db, self.top_n, extra, self.floors)
            with self.readers.slot():  # the scrape opens its reader of its own
                data, status, ctype = generate_latest(registry), 200, CONTENT_TYPE_LATEST
        except LedgerError as exc:
            data, status, ctype = f"# {exc}\n".encode(), 503, "text/plain"
        except Exception:
            data, status, ctype = f"# {self._failed()}\n".encode(), 500, "text/plain"
        self._reply(status, ctype, data)

    def _ui(self, params: dict[str, list[str]]) -> None:
        gates, zone = _gates_of(self.keeper)
        try:
            _only(params, "/ui", ui.PARAMS)
            with self.readers.snapshot() as conn:  # one snapshot, as every JSON answer is read in
                data, status = ui.page(conn, gates, zone, int(time.time() * 1000), params).encode(), 200
            ctype = "text/html; charset=utf-8"
        except (ui.BadParam, BadRequest) as exc:
            data, status, ctype = f"{exc}\n".encode(), 400, "text/plain; charset=utf-8"
        except LedgerError as exc:
            data, status, ctype = f"{exc}\n".encode(), 503, "text/plain; charset=utf-8"
        except Exception:
            data, status, ctype = f"{self._failed()}\n".encode(), 500, "text/plain; charset=utf-8"
        self._reply(status, ctype, data, (("Content-Security-Policy", ui.CSP), ("X-Content-Type-Options", "nosniff")))

    def _reply(self, status: int, ctype: str, data: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":  # HEAD is answered as GET is, but for the body
            self.wfile.write(data)

    def _failed(self) -> str:
        """Logs the exception being handled, with its traceback; returns what the client is told instead.

        A dropped connection tells a client nothing (an empty reply, as from a network fault);
        a 500 says the daemon failed, and the log says where."""
        log.exception("%s %s failed", self.command, self.path)
        return "internal error: the daemon's log has the traceback"

    def end_headers(self) -> None:
        # A keep-alive client must not send its next request down a connection about to close
        # (the stdlib's own error replies say so already).
        told = getattr(self, "_headers_buffer", ())  # none at all for an HTTP/0.9 request, which has no headers
        if self.close_connection and not any(h.lower().startswith(b"connection:") for h in told):
            self.send_header("Connection", "close")
        super().end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What the stdlib answers by itself (a request line too long, too many headers, an HTTP version it does
        not speak) is JSON, as every other answer: its own is an HTML page."""
        self.close_connection = True
        body = _error(message or self.responses.get(code, ("error",))[0])
        self.send_response(code, message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if getattr(self, "command", None) != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)


class ApiServer:
    """Serves in a background thread until ``close``."""

    def __init__(self, db: Path, listen: str, health: Health | None = None, keeper: GateKeeper | None = None,
                 top_n: int = 20, hooks: claude_code_hooks.HookInbox | None = None,
                 floors: CounterFloors | None = None, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS):
        host, port = parse_listen(listen)
        self.health = health or Health()
        self.readers = Readers(db)
        handler = type("Handler", (_Handler,), {"db": db, "readers": self.readers, "health": self.health,
                                                "keeper": keeper, "hooks": hooks, "top_n": top_n,
                                                "floors": floors or CounterFloors(), "timeout": idle_timeout_s})
        # The stdlib's server is IPv4 only; a host with a colon is an IPv6 literal (a name resolves as IPv4).
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.httpd = Listener((host, port), handler, family, max_connections)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        if self.httpd.address_family == socket.AF_INET6:
            host = f"[{host}]"  # in a URL, the literal's colons would read as the port's
        return f"http://{host}:{port}"

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.readers.close()
