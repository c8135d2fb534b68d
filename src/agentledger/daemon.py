"""``serve``: catch up, then follow the sources live until asked to stop.

inotify (through watchdog) wakes the loop as soon as a file changes; a periodic
rescan catches anything it missed (network filesystems, overflowed queues).
The first SIGTERM/SIGINT finishes the batch in flight and exits 0; a second one
exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer

from agentledger.config import demo_dir, openclaw_state_dirs
from agentledger.http import DEFAULT_LISTEN, ApiServer, Health
from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger.db import LedgerBusy, open_writer, writer_lock
from agentledger.ledger.lifecycle import DEFAULT_IDLE_S
from agentledger.ledger.reconcile import DEFAULT_GRACE_S, reconcile
from agentledger.ledger.writer import LedgerWriter, now_ms
from agentledger.notify import Notifier

log = logging.getLogger("agentledger.daemon")


class _Wake(FileSystemEventHandler):
    def __init__(self, wake: threading.Event):
        self.wake = wake

    def on_any_event(self, event) -> None:
        self.wake.set()


def _say(message: str) -> None:
    print(f"agentledger: {message}", file=sys.stderr, flush=True)


def _start_demo(directory: Path) -> subprocess.Popen:
    directory.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "agentledger.demo", str(directory)])


RECONCILE_EVERY_S = 60.0
WATCHDOG_MAX_WAIT_S = 1.0  # the loop wakes at least this often, so watchdog pings keep flowing


class _Progress:
    """Catch-up progress for systemd: the watchdog is fed and STATUS updated per batch."""

    def __init__(self, notifier: Notifier, health: Health):
        self.notifier = notifier
        self.health = health
        self.bytes = 0
        self._last = 0.0

    def advance(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.notifier.watchdog()
        self.health.tick()
        now = time.monotonic()
        # Once caught up, live batches only feed the watchdog.
        if not self.health.caught_up and now - self._last >= 1.0:
            self._last = now
            self.notifier.status(f"catching up: {self.bytes / 1e6:,.1f} MB indexed")


def _reconcile(writer: LedgerWriter, grace_s: float) -> None:
    done = reconcile(writer, now_ms(), grace_s)
    if done.runs or done.tool_calls or done.subagents:
        log.info("interrupted after %.0fs without an end: %d runs, %d tool calls, %d subagents", grace_s,
                 done.runs, done.tool_calls, done.subagents)


def run_daemon(db: Path, fmt: str, roots: list[Path], *, max_line: int, rescan_s: float,
               demo: bool | None, listen: str = DEFAULT_LISTEN, grace_s: float = DEFAULT_GRACE_S,
               idle_s: float = DEFAULT_IDLE_S) -> int:
    stop = threading.Event()
    wake = threading.Event()
    notifier = Notifier()

    def on_signal(signum, frame):
        if stop.is_set():
            os._exit(128 + signum)
        notifier.stopping()
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        lock = writer_lock(db)
    except LedgerBusy as exc:
        _say(str(exc))
        return 1
    demo_proc = None
    if not roots:
        found = [] if demo else openclaw_state_dirs()
        if found:
            roots = found
        elif demo is False:
            _say("no OpenClaw state dir found ($OPENCLAW_STATE_DIR, ~/.openclaw): pass ROOT or use --demo")
            return 2
        else:
            roots = [demo_dir()]
            demo_proc = _start_demo(roots[0])
            _say(f"no agent logs found: running the demo in {roots[0]} (a live writer appends events)")
    conn = open_writer(db)
    api = None
    try:
        try:
            api = ApiServer(db, listen)
        except OSError as exc:
            _say(f"cannot listen on {listen}: {exc.strerror}; pass --listen HOST:PORT")
            return 2
        api.start()
        _say(f"listening on {api.address}")
        # Ready once queries can be answered: a long catch-up is progress, not a failed start.
        notifier.ready(f"catching up on {', '.join(str(r) for r in roots)}")
        progress = _Progress(notifier, api.health)
        writer = LedgerWriter(conn, idle_s=idle_s)
        pipeline = Pipeline(writer, specs_from(fmt, roots), max_line=max_line, stop=stop,
                            on_progress=progress.advance)
        _say(f"ledger {db}; catching up on {', '.join(str(r) for r in roots)}")
        started = time.monotonic()
        stats = pipeline.catch_up()
        _say(f"caught up: {stats.lines} lines, {stats.events} new events, {stats.rejects} rejected "
             f"in {time.monotonic() - started:.1f}s; following live")
        api.health.caught_up = True
        notifier.status(f"following {len(roots)} source root(s); caught up")
        _reconcile(writer, grace_s)
        next_reconcile = time.monotonic() + RECONCILE_EVERY_S
        observer = Observer()
        for root in roots:
            if Path(root).is_dir():
                observer.schedule(_Wake(wake), str(root), recursive=True)
        observer.start()
        try:
            while not stop.is_set():
                notifier.watchdog()
                api.health.tick()
                wake.wait(min(rescan_s, WATCHDOG_MAX_WAIT_S, notifier.interval_s or WATCHDOG_MAX_WAIT_S))
                wake.clear()
                if stop.is_set():
                    break
                stats = pipeline.run_once()
                if time.monotonic() >= next_reconcile:
                    _reconcile(writer, grace_s)
                    next_reconcile = time.monotonic() + RECONCILE_EVERY_S
                if stats.lines:
                    log.info("indexed %d lines (%d new events, %d rejected)", stats.lines, stats.events,
                             stats.rejects)
        finally:
            observer.stop()
            observer.join(timeout=5)
    finally:
        if api is not None:
            api.close()
        conn.close()
        os.close(lock)
        if demo_proc is not None:
            demo_proc.terminate()
            demo_proc.wait(timeout=10)
    _say("stopped")
    return 0
