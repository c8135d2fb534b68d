"""Telling systemd how the daemon is doing (sd_notify over $NOTIFY_SOCKET, stdlib only).

Without NOTIFY_SOCKET (not started by systemd) every call is a no-op. A message that
cannot be sent is dropped: systemd's watchdog, not an exception here, is what notices
a daemon that stopped talking.
"""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None):
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self._addr: str | bytes | None = None
        if path.startswith("@"):
            self._addr = b"\0" + path[1:].encode()  # abstract namespace
        elif path.startswith("/"):
            self._addr = path
        usec = env.get("WATCHDOG_USEC", "")
        # Ping at half the interval systemd allows, so one slow pass never trips it.
        self._watchdog_s = int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 else None
        self._last_ping = 0.0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) if self._addr is not None else None

    @property
    def interval_s(self) -> float | None:
        """How often the watchdog wants a ping, or None when there is no watchdog."""
        return self._watchdog_s

    def send(self, *fields: str) -> None:
        if self._sock is None:
            return
        try:
            self._sock.sendto("\n".join(fields).encode(), self._addr)
        except OSError:
            pass

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> None:
        """WATCHDOG=1, at most as often as the watchdog interval needs."""
        if self._watchdog_s is None:
            return
        now = time.monotonic()
        if now - self._last_ping >= self._watchdog_s:
            self._last_ping = now
            self.send("WATCHDOG=1")
