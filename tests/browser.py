"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
the standard library is enough, no driver or websocket package.

Chromium reads commands from its fd 3 and writes replies and events to its fd 4, each one a
JSON text ended by a NUL byte.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--remote-debugging-pipe"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _above(fd: int, floor: int = 10) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)
    os.close(fd)
    return high


class Browser:
    def __init__(self, executable: str, profile: Path):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # bash puts the pipes at the descriptors Chromium expects; moved above them first, so
        # that putting one at 3 cannot overwrite the other.
        to_chrome_r, from_chrome_w = _above(to_chrome_r), _above(from_chrome_w)
        script = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.proc = subprocess.Popen(["bash", "-c", script, executable, *FLAGS, f"--user-data-dir={profile}"],
                                     pass_fds=(to_chrome_r, from_chrome_w), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next = 0
        self._replies: dict[int, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_chrome, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                msg = json.loads(raw)
                if "id" in msg:
                    self._replies[msg["id"]].put(msg)
                else:
                    self.events.put(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:
        with self._lock:
            self._next += 1
            ident = self._next
            self._replies[ident] = queue.Queue()
        msg = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        reply = self._replies[ident].get(timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def wait_event(self, method: str, session: str, seen: list[dict], timeout: float = 30.0) -> dict:
        """Wait for one event; every event read meanwhile is kept in ``seen``."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            seen.append(msg)
            if msg.get("method") == method and msg.get("sessionId") == session:
                return msg

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, queue.Empty, OSError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)


class Page:
    """One tab, with what its console and runtime reported."""

    def __init__(self, browser: Browser, width: int, height: int, mobile: bool = False):
        self.browser = browser
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None) -> dict:
        return self.browser.send(method, params, self.session)

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})
        self.browser.wait_event("Page.loadEventFired", self.session, self.events)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads the page reported so far."""
        while not self.browser.events.empty():
            self.events.append(self.browser.events.get())
        out = []
        for e in self.events:
            if e.get("sessionId") != self.session:
                continue
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("text", "exception"))
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(p["entry"]["text"])
        return out

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))
        return path
