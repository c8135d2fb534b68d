"""The HTTP listener's connections: how many it serves at once, and what a connection past them gets.

Each connection holds a thread and a descriptor for as long as it is open, idle ones too: a keep-alive
client between its requests, or one that sent half a request and stopped. So at most ``bound`` are served at
once. Past it, the connection idle longest is closed to make room for the new one, which a gate's asking
never has to wait for; only when every one is still answering a request a moment later is the new one
refused (a 503 sent without a thread of its own, and closed). Requests other than gates, hooks and the liveness probe answer on
at most seven eighths of them: however many queries and scrapes run, the rest is left to gates.
"""

from __future__ import annotations

import errno
import logging
import math
import resource
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer

import orjson

log = logging.getLogger("agentledger.http")

# A backlog of 128, not the stdlib's 5: a Claude Code turn's parallel tool calls each open a connection to
# ask, and a connect dropped by a full backlog waits a second or more to be retried, which can take a
# PreToolUse hook past its timeout, and the call through ungated.
LISTEN_BACKLOG = 128
BUSY = "too many requests at once: try again in a second"
_BUSY_BODY = orjson.dumps({"error": BUSY})
_BUSY_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
               b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))
# accept() failing for want of a descriptor leaves the connection queued and the listening socket readable:
# tried again at once, it fails again at once, for as long as the descriptors stay taken.
_OUT_OF_FDS_WAIT_S = 0.1
_MADE_ROOM_WAIT_S = 0.01  # for the connection just closed to let go of its descriptor
# How long a new connection waits for one answering a request to be done, before it is refused: a client has
# its answer a moment before the thread that sent it takes up its next request, and asks again at once.
_ROOM_WAIT_S = 0.05
_EPISODE_S = 5.0  # failures closer together than this are one episode, logged once


def bound(max_connections: int) -> int:
    """``max_connections``, but at most a quarter of the open-file limit: ingest holds up to half of it
    while a pass reads (tail/tailer.py), and the readers, the writer and the rest need theirs."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max_connections if soft == resource.RLIM_INFINITY else max(2, min(max_connections, soft // 4))


class Listener(ThreadingHTTPServer):
    """Serves at most ``bound(max_connections)`` connections at once, each on a thread (see the module's doc).

    Handlers call ``begin`` once they have read a request, and ``end`` once they have answered it."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], handler: type, family: socket.AddressFamily,
                 max_connections: int):
        self.address_family = family
        self.bound = bound(max_connections)
        self.others_bound = self.bound - max(1, self.bound // 8)
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)  # told when a connection falls idle or closes
        # Open connections waiting for a request, in the order they fell idle: the first, idle longest.
        self._idle: dict[socket.socket, None] = {}
        self._busy: dict[socket.socket, bool] = {}  # answering a request: whether one room is kept for
        self._out_of_fds_at = -math.inf
        super().__init__(address, handler)

    @property
    def others_busy(self) -> int:
        """How many connections answer a request other than a gate's, a hook's or the liveness probe's."""
        return sum(not kept for kept in self._busy.values())

    def get_request(self) -> tuple[socket.socket, object]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self._out_of_descriptors(exc)
            raise  # the stdlib's loop lets the failed accept go

    def _out_of_descriptors(self, exc: OSError) -> None:
        with self._lock:
            held = len(self._idle) + len(self._busy)
            made_room = self._close_idlest()
        now = time.monotonic()
        if now - self._out_of_fds_at > _EPISODE_S:
            log.warning("out of file descriptors for connections (%s) with %d open: closing those idle longest for "
                        "new ones; raise the open-file limit (ulimit -n, LimitNOFILE= in the systemd unit) or lower "
                        "[http] max_connections", exc.strerror, held)
        self._out_of_fds_at = now
        time.sleep(_MADE_ROOM_WAIT_S if made_room else _OUT_OF_FDS_WAIT_S)

    def process_request(self, request: socket.socket, client_address) -> None:
        with self._answered:
            room = self._answered.wait_for(
                lambda: len(self._idle) + len(self._busy) < self.bound or self._close_idlest(), _ROOM_WAIT_S)
            if room:
                self._idle[request] = None
        if room:
            super().process_request(request, client_address)
            return
        try:
            request.setblocking(False)  # a new connection's send buffer takes the reply whole: never wait on it
            request.send(_BUSY_REPLY)
        except OSError:
            pass
        self.shutdown_request(request)

    def _close_idlest(self) -> bool:
        """Closes the connection idle longest, if one is; the caller holds ``_lock``. Its thread, waiting for
        a request, reads the end of the connection and lets it go."""
        idlest = next(iter(self._idle), None)
        if idlest is None:
            return False
        del self._idle[idlest]
        try:
            idlest.shutdown(socket.SHUT_RDWR)
        except OSError:  # the client has closed it already
            pass
        return True

    def begin(self, request: socket.socket, kept: bool) -> bool:
        """Whether the request just read on ``request`` is to be answered (``kept``: it is one of those room is
        kept for): not when the connection was closed meanwhile to make room, nor when other requests take
        their share already."""
        with self._lock:
            if request not in self._idle or (not kept and self.others_busy >= self.others_bound):
                return False
            del self._idle[request]
            self._busy[request] = kept
            return True

    def end(self, request: socket.socket) -> None:
        with self._answered:
            del self._busy[request]
            self._idle[request] = None
            self._answered.notify()

    def shutdown_request(self, request: socket.socket) -> None:
        with self._answered:
            self._idle.pop(request, None)
            self._answered.notify()
        super().shutdown_request(request)

    def handle_error(self, request: socket.socket, client_address) -> None:
        """What the stdlib prints to stderr raw, the daemon's log says in its format: a client that hung up
        mid-answer (a timeout of its own, or its connection closed to make room) is no fault of the daemon's,
        anything else is."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            log.debug("%s hung up before its answer was sent: %s", client_address[0], exc)
        else:
            log.exception("request from %s failed", client_address[0])
