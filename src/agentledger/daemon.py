"""``serve``: catch up, then follow the sources live until asked to stop.

inotify (through watchdog) wakes the loop as soon as a file changes; a periodic
rescan catches anything it missed (network filesystems, overflowed queues).
The first SIGTERM/SIGINT finishes the batch in flight and exits 0; a second one
exits at once. SIGHUP does the same when the daemon runs on a terminal (the terminal
closed); without one (under systemd) no terminal can close, so it is an operator's
signal: told as a warning, and the daemon runs on (see ``_hangup``).
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
from agentledger import signals
from agentledger.config import Config, Origins, default_sources, demo_dir, demo_ledger, openclaw_format, out_of_reach
from agentledger.facts import ToolObserved
from agentledger.faults import fault, limit_ledger
from agentledger.gates import GateKeeper
from agentledger.hot.sessions import HotSessions
from agentledger.http import ApiServer, Health
from agentledger.ingest import Pipeline, SourceSpec, specs_from, specs_from_pairs, warn_empty_roots
from agentledger.ledger import queries
from agentledger.ledger.db import LedgerBusy, ReaderPool, WriterLock
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.retention import Pruner
from agentledger.ledger.writer import LedgerWriter, now_ms
from agentledger.tail.tailer import OutOfDescriptors
from agentledger.metrics import FLOORS_FILE, CounterFloors
from agentledger.notify import Notifier
from agentledger.pricing import Pricer
from agentledger.sources.claude_code_hooks import HookInbox
from agentledger.watching import Changes

log = logging.getLogger("agentledger.daemon")


def _say(message: str, level: int = logging.INFO) -> None:
    """A line worth knowing: text on a terminal, JSON elsewhere (see logs.py)."""
    log.log(level, message)


_HOLDS = {"oc-telemetry": "OpenClaw telemetry", "oc-transcript": "OpenClaw transcripts"}
_UNTOLD = "holds no agent's telemetry or sessions yet: its logs are read once it does"


def _look_again(changes: Changes, undecided: list[str]) -> list[tuple[str, str]]:
    """Watches each root where it leads now, and chooses the format of the OpenClaw state dirs in
    ``undecided`` that now tell it, as a start would have: (format, root) for each, which leave it."""
    appeared, moved = changes.follow()
    for root in appeared:
        if root not in undecided:
            _say(f"{root} appeared: reading it")
    for root, real in moved:  # made again, or a symlink switched
        _say(f"{root} is another directory now{'' if real == root else f' ({real})'}: reading it")
    told = []
    for root in list(undecided):
        fmt = openclaw_format(Path(root))
        if fmt is not None:
            undecided.remove(root)
            told.append((fmt, root))
            _say(f"{root} holds {_HOLDS[fmt]}: reading it as {fmt}")
        elif root in appeared:
            _say(f"{root} appeared, {_UNTOLD}")
    return told


def _tell_waiting(root: str, undecided: bool, awaited: bool) -> None:
    """Why a root is not read yet: it does not exist, or (``undecided``) holds no agent's logs yet, or is out
    of reach, told with the system's reason: "does not exist yet" sent the operator looking for a gateway that
    had written there all along."""
    why = out_of_reach(Path(root, "agents") if undecided else Path(root))
    if why and undecided:
        _say(f"{root} cannot be read ({why}): waiting for it, its logs are read once it can be", logging.WARNING)
    elif why:
        return  # its tailer tells it, as it does every directory it cannot list
    elif not awaited:
        _say(f"{root} {_UNTOLD}")
    elif undecided:
        _say(f"{root} does not exist yet: waiting for it, its logs are read once it holds an agent's telemetry or "
             "sessions")
    else:
        _say(f"{root} does not exist yet: waiting for it, its logs are read once it appears")


def _start_demo(directory: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agentledger.demo", "--parent", str(os.getpid()), str(directory)])


RECONCILE_EVERY_S = 60.0
# Chores a busy loop does at most this often rather than on every pass: recording what gates
# answered (a transaction of its own) and expiring hot views (a walk over all of them); the
# flusher looks for views due this often too.
CHORES_EVERY_S = 0.25
WATCHDOG_MAX_WAIT_S = 1.0  # the loop wakes at least this often, so watchdog pings keep flowing


HANGUP_TOLD = ("SIGHUP: agentledger does not reload on SIGHUP and keeps running; restart it to apply a changed "
               "configuration (systemctl restart agentledger); SIGTERM stops it")


def _hangup(signum: int) -> None:
    """A SIGHUP without a controlling terminal (under systemd): no terminal closed, so an operator sent
    it (`systemctl kill -s HUP`, `kill -HUP`), most likely expecting a reload. Stopping would be for
    good: exit 0 is no failure to Restart=on-failure. Told from the signals thread (see signals.Relay),
    so logging cannot re-enter a write the signal interrupted."""
    _say(HANGUP_TOLD, logging.WARNING)


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


class LiveState:
    """What follows each committed transaction: hot views and gate caches move with the ledger."""

    def __init__(self, conn, hot: HotSessions, keeper: GateKeeper):
        self.conn = conn
        self.hot = hot
        self.keeper = keeper
        self.following = False  # while catching up, views are rebuilt once at the end instead
        keeper.catching_up = True  # and a session the gates do not know may be one not read yet
        # Sessions committed but not yet refreshed (reading the ledger failed): kept until a refresh succeeds.
        self.pending: set[str] = set()
        self.position = 0

    def committed(self, sessions: set[str], position: int) -> None:
        fault("after_commit")
        self.position = position
        if self.following:
            self.pending |= sessions
            self.settle()
        else:  # views looked up meanwhile would otherwise stay behind this batch
            self.keeper.advance(position)

    def settle(self) -> None:
        """Memory (hot views, gates) moves to the last commit: the views it changed are read here, on the
        writer's connection, with no lock held; only putting them waits for gate questions (see GateKeeper)."""
        if self.pending or self.keeper.position != self.position:
            views = self.hot.read(self.conn, self.pending)
            self.keeper.advance(self.position, views)
            self.pending = set()

    def caught_up(self) -> None:
        self.position = queries.ledger_position(self.conn)  # a start that read nothing new committed nothing
        self.keeper.advance(self.position)  # first: views are trusted only at the position memory is at
        rebuilt = self.hot.validate(self.conn)
        if rebuilt:
            log.info("hot store: %d recovered session views differed from the ledger and were rebuilt", rebuilt)
        self.following = True
        self.keeper.catching_up = False


def _reconcile(writer: LedgerWriter, grace_s: float, live: LiveState) -> None:
    done = reconcile(writer, now_ms(), grace_s)
    if done.position:  # 0: nothing was open too long, nothing committed: memory stays where it is
        live.committed(done.sessions, done.position)
    if done.runs or done.tool_calls or done.subagents:
        log.info("interrupted after %.0fs without an end: %d runs, %d tool calls, %d subagents", grace_s,
                 done.runs, done.tool_calls, done.subagents)


def _record_gates(writer: LedgerWriter, keeper: GateKeeper) -> None:
    decisions, counts = keeper.drain()
    writer.record_gate_decisions(decisions, counts)
    for d in decisions:  # warn and block only: allows are counted, not told
        log.warning("gate %s: %s %s for tool %s: %s", d.gate, d.decision, d.session_key, d.tool, d.reason)


def _record_hooks(writer: LedgerWriter, hooks: HookInbox, live: LiveState) -> None:
    events, refused = hooks.drain()
    if refused:
        log.warning("%d Claude Code hook events were not recorded: more arrived than could wait for the ledger",
                    refused)
    if events:
        calls = [e.fact.tool_call_id for e in events if e.name == "PreToolUse" and isinstance(e.fact, ToolObserved)]
        try:
            result = writer.apply_hook_events(events)  # gate questions go on meanwhile
        except BaseException:
            live.keeper.lost(calls)  # with the failed write: their transcripts tell them
            raise
        # The gates counted these calls from their answers: from the views that hold this commit on, the ledger does.
        live.keeper.recorded(calls, result.position)
        live.committed(result.sessions, result.position)


# What stops a pass without anything being wrong with the data: the ledger's disk is full, an I/O
# error, another process holding the ledger's write lock past the busy timeout, no file descriptor left.
STALLS = (apsw.FullError, apsw.IOError, apsw.BusyError, apsw.LockedError, OSError)
BACKOFF_S = (0.25, 5.0)  # the first and the longest wait before trying a stalled pass again


def _why(exc: BaseException) -> str:
    if isinstance(exc, apsw.FullError) or getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
        what = "disk full"
    elif isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        what = "the ledger is locked by another process"
    elif isinstance(exc, OutOfDescriptors):
        what = "out of file descriptors"
    else:
        what = "I/O error"
    return f"ingest paused, {what}: {exc}"


class _Flusher(threading.Thread):
    """Writes the hot views due to disk, off the ingest thread: each file is fsynced, and a flush
    of a few hundred views took the ingest thread half a second. A flush that fails (a full state
    dir) is tried again at the next period, told once until one succeeds; ingest goes on
    meanwhile: the views are a cache of the ledger, which must not stop for them."""

    def __init__(self, hot: HotSessions, flush_interval_s: float):
        super().__init__(name="hot-flush", daemon=True)
        self.hot = hot
        self.period_s = min(CHORES_EVERY_S, max(flush_interval_s, 0.05))
        self.done = threading.Event()
        self.error: str | None = None  # why the last flush failed; no file name, so a repeat is seen as one

    def run(self) -> None:
        while not self.done.wait(self.period_s):
            try:
                self.hot.flush_due()
            except OSError as exc:
                self._failed(exc.strerror or str(exc))
            else:
                if self.error is not None:
                    _say("hot store: session views are written again")
                self.error = None

    def _failed(self, why: str) -> None:
        if why != self.error:
            _say(f"hot store: cannot write session views ({why}); ingest and gates go on, the views are "
                 "written when it can", logging.ERROR)
        self.error = why

    def close(self) -> None:
        self.done.set()
        self.join()


class _Follower:
    """Catch-up, then one pass per wake-up; a stalled pass pauses ingest and is tried again later.

    A stall rolls its batch back, so nothing advances while it lasts; /readyz says why. The
    next attempt starts from the ledger's checkpoints with a new pipeline, as a restart would,
    and waits longer after each failure (BACKOFF_S)."""

    def __init__(self, writer: LedgerWriter, live: LiveState, config: Config, pipeline, health: Health,
                 hooks: HookInbox, changes: Changes, demo: bool):
        self.writer = writer
        self.demo = demo  # its writer fills the directory as the daemon starts: nothing to warn of
        self.changes = changes
        self.next_full_scan = 0.0
        self.next_chores = 0.0
        self.hooks = hooks
        self.pruner = Pruner(config.retention.raw_days) if config.retention.raw_days > 0 else None
        self.live = live
        self.config = config
        self.make_pipeline = pipeline
        self.health = health
        self.pipeline: Pipeline | None = None
        self.caught_up = False
        self.next_reconcile = 0.0
        self.delay = 0.0
        self.retry_at = 0.0

    def due(self) -> bool:
        return time.monotonic() >= self.retry_at

    def rebuild(self) -> None:
        """The next pass starts from the ledger's checkpoints with a new pipeline and scans in full."""
        self.pipeline = None
        self.next_full_scan = 0.0

    def step(self) -> None:
        try:
            limit_ledger(self.writer.conn)
            if self.pipeline is None:
                self.pipeline = self.make_pipeline()
            if self.caught_up:
                self._follow()
            else:
                self._catch_up()
        except STALLS as exc:
            self.rebuild()  # what the failed pass was told is gone with it
            self.delay = min(max(self.delay * 2, BACKOFF_S[0]), BACKOFF_S[1])
            self.retry_at = time.monotonic() + self.delay
            reason = _why(exc)
            if self.health.trouble != reason:
                _say(f"{reason}; trying again", logging.ERROR)
            self.health.trouble = reason
            return
        if self.health.trouble is not None:
            _say("ingest resumed")
            self.health.trouble = None
        self.delay = 0.0

    def _catch_up(self) -> None:
        started = time.monotonic()
        stats = self.pipeline.catch_up()
        done = (f"{stats.lines} lines, {stats.events} new events, {stats.rejects} rejected "
                f"in {time.monotonic() - started:.1f}s")
        if self.pipeline.stop.is_set():
            # Asked to stop before it read everything: the lines not read yet may end the runs, tool
            # calls and subagents still open in those read, so none is interrupted (the orphan pass
            # runs after a complete catch-up only). The next start reads on from the checkpoints.
            _say(f"stopped during catch-up after {done}; nothing open was interrupted, as the unread lines "
                 "may end it: the next start reads on from there")
            return
        self.changes.follow_links(self.pipeline.listed_dirs())
        if not self.demo:
            warn_empty_roots(self.pipeline, waiting=True)
        self.live.caught_up()
        # What is alive now stays for the daemon's life; left in the collector, every full
        # collection would walk it while a gate question waits for the interpreter lock.
        gc.collect()
        gc.freeze()
        _say(f"caught up: {done}; following live")
        self.caught_up = self.health.caught_up = True
        self._reconcile()

    def _follow(self) -> None:
        now = time.monotonic()
        if now >= self.next_chores:
            self.next_chores = now + CHORES_EVERY_S
            _record_gates(self.writer, self.live.keeper)
            self.live.hot.expire()
        self.live.settle()
        written = self.changes.take()
        # Between full scans (every rescan_s, or when inotify saw files come or go), a pass reads
        # only the files written to; a full one catches what inotify missed (network
        # filesystems, an overflowed queue).
        if written is None or now >= self.next_full_scan:
            self.next_full_scan = now + self.config.rescan_s
            written = None
        stats = self.pipeline.run_once(written)
        if written is None:
            self.changes.follow_links(self.pipeline.listed_dirs())
        # After the files: a hook's tool call then finds the run its transcript already told.
        _record_hooks(self.writer, self.hooks, self.live)
        if self.pruner is not None:
            self.pruner.tick(self.writer.conn, now_ms())
        if time.monotonic() >= self.next_reconcile:
            self._reconcile()
        if stats.rejects:
            log.warning("%d lines rejected (see `agentledger rejects`)", stats.rejects)
        if stats.lines:
            log.debug("indexed %d lines (%d new events, %d rejected)", stats.lines, stats.events, stats.rejects)

    def _reconcile(self) -> None:
        _reconcile(self.writer, self.config.reconcile.grace_s, self.live)
        self.next_reconcile = time.monotonic() + RECONCILE_EVERY_S


def _cannot_make(exc: OSError) -> str:
    """Why a directory could not be made, in the words an operator fixes it by: what stands in its way, by name."""
    if not isinstance(exc, (FileExistsError, NotADirectoryError)):
        return exc.strerror
    if exc.filename is None:
        return "a part of that path is not a directory"
    path = Path(exc.filename)
    # The OS names the path it was making, which may lie beneath the file in the way. A symlink to a
    # directory above it is followed as the OS follows it; the path itself may be one the store refuses.
    way = next((p for p in (*reversed(path.parents), path) if os.path.lexists(p) and not p.is_dir()), None)
    if way is None:  # gone again since (a race): nothing left to name
        return "a part of that path is not a directory"
    return f"{way} is {'a symbolic link' if way.is_symlink() else 'a file'}, not a directory"


# Under the demo's directory: the logs apart from its ledger and state dir, which the watch on the logs
# would otherwise see written on every commit and flush.
DEMO_LOGS = "logs"


def _roots(config: Config, origins: Origins,
           demo: bool | None) -> tuple[Config, list[SourceSpec], list[str], Path | None] | str:
    """The configuration to run on (the demo's own when it runs), the sources to follow, the OpenClaw state
    dirs whose format is not known yet, and the demo's directory when there are none, its logs' directory
    made here: its writer starts later, once a failed start is no longer one line; or why it cannot start."""
    # --demo stands in for the configured sources, as ROOT does (serve refuses it beside ROOT or --source).
    if config.sources and not demo:
        return config, specs_from_pairs([(s.format, s.root) for s in config.sources]), [], None
    found = [] if demo else default_sources(awaiting=True)
    if found:
        return (config, specs_from_pairs([(fmt, root) for fmt, root in found if fmt is not None]),
                [str(root) for fmt, root in found if fmt is None], None)
    if demo is False:
        return ("no agent logs found ($OPENCLAW_STATE_DIR, ~/.openclaw, $CLAUDE_CONFIG_DIR, ~/.config/claude, ~/.claude): "
                "pass ROOT, --source FORMAT=ROOT or use --demo")
    home = demo_dir()
    own = _demo_config(config, origins, bool(demo), home)
    if isinstance(own, str):
        return own
    try:
        (home / DEMO_LOGS).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot run the demo in {home}: {_cannot_make(exc)}; {_DEMO_FIX}"
    return own, specs_from("oc-telemetry", [home / DEMO_LOGS]), [], home


_DEMO_FIX = ("set $XDG_STATE_HOME to a directory agentledger can create and write, or pass ROOT or --source "
             "FORMAT=ROOT to read agent logs")


def _demo_config(config: Config, origins: Origins, asked: bool, home: Path) -> Config | str:
    """The configuration the demo runs on: its invented events go to a ledger and a state dir of its own,
    which a real run's totals, hot views, metric floors and day budgets never read; or why it cannot run.
    $AGENTLEDGER_DB and the config's `db` name the ledger real logs fill: only a --db given with --demo is
    the demo's."""
    db = demo_ledger()
    if origins.on_command_line(("db",)):
        if not asked:
            return (f"no agent logs found, and the demo writes its invented events into {config.db} only when asked: "
                    "pass --demo to run it there, drop --db to run it on a ledger of its own, or pass ROOT or "
                    "--source FORMAT=ROOT to read agent logs")
        db = config.db
    return config.model_copy(update={"db": db, "store": config.store.model_copy(update={"state_dir": home})})


def _open_hot(config: Config, origins: Origins, demo_home: Path | None) -> HotSessions | str:
    """The hot store under the state dir (the demo's directory, for the demo); or why it cannot be there, and
    what to do."""
    where = config.store.state_dir / "hot"
    try:
        return HotSessions(where, max_entries=config.store.max_entries, flush_interval_s=config.store.flush_interval_s,
                           ttl_s=config.store.ttl_s, end_grace_s=config.store.end_grace_s)
    except OSError as exc:
        why = _cannot_make(exc)
    if demo_home is not None:  # no setting names it: the fix is the demo's directory's
        return f"cannot run the demo in {demo_home}: cannot keep the hot store in {where}: {why}; {_DEMO_FIX}"
    # Named as it was given, a former name too: a value given again under the other name clashes with it.
    key, origin = origins.of(("store", "state_dir"))
    fix, given = ("point it at", f"from {origin}") if origin else \
        ("set it ([store] state_dir, or $AGENTLEDGER_STORE_STATE_DIR) to", "the default")
    return (f"{key}: cannot keep the hot store in {where}: {why}; {fix} a directory agentledger can create and write "
            f"(under systemd: one in ReadWritePaths=) ({given})")


def run_daemon(config: Config, origins: Origins, *, demo: bool | None = None, pricer: Pricer | None = None) -> int:
    """``origins``: where each setting of ``config`` was given, to name one that fails only when used."""
    # Gate questions are answered on request threads while this one ingests; with the default
    # 5 ms switch interval a question could wait that long for the interpreter lock.
    sys.setswitchinterval(0.0005)
    stop = threading.Event()
    wake = threading.Event()
    notifier = Notifier()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            os._exit(128 + signum)
        notifier.stopping()
        stop.set()
        wake.set()

    relay = signals.relay()
    actions = dict.fromkeys(relay.stops, on_signal)
    if not relay.terminal:
        actions[signal.SIGHUP] = _hangup
    relay.act(actions)
    if stop.is_set():  # asked for while it started: nothing is open yet, nothing to finish
        _say("stopped")
        return 0
    found = _roots(config, origins, demo)
    if isinstance(found, str):
        _say(found, logging.ERROR)
        return 2
    config, specs, undecided, demo_home = found
    db = config.db
    try:
        lock = WriterLock(db)
    except LedgerBusy as exc:
        _say(str(exc), logging.ERROR)
        return 1
    with lock:
        hot = _open_hot(config, origins, demo_home)
        if isinstance(hot, str):
            _say(hot, logging.ERROR)
            return 2
        roots = [r for spec in specs for r in spec.roots] + undecided
        where = ", ".join(roots)
        conn = lock.open()
        api = None
        if hot.store.quarantined:
            log.warning("hot store: %d unreadable session files set aside; those sessions are rebuilt from the ledger",
                        hot.store.quarantined)
        readers = ReaderPool(db)
        keeper = GateKeeper(config.gates, hot, readers, config.zone)
        writer = LedgerWriter(conn, idle_s=config.reconcile.idle_s, background_checkpoints=True)
        live = LiveState(conn, hot, keeper)
        hooks = HookInbox(wake=wake.set)
        demo_proc = None
        try:
            if demo_home is not None:
                # Started only here, where the finally below ends it: a start that fails any earlier
                # would leave it appending to the demo directory for good.
                why = "--demo" if demo else "no agent logs found"
                whose = "its own ledger" if db == demo_ledger() else "the ledger --db names,"
                _say(f"{why}: running the demo in {demo_home} (a live writer appends invented events); they go to "
                     f"{whose} {db}, not the default one real logs fill: query it with "
                     f"`agentledger --db {shlex.quote(str(db))} usage`")
                demo_proc = _start_demo(demo_home / DEMO_LOGS)
            try:
                api = ApiServer(db, config.http.listen, keeper=keeper, top_n=config.metrics.top_n, hooks=hooks,
                                floors=CounterFloors(config.store.state_dir / FLOORS_FILE),
                                max_connections=config.http.max_connections)
            except OSError as exc:
                _say(f"cannot listen on {config.http.listen}: {exc.strerror}; pass --listen HOST:PORT", logging.ERROR)
                return 2
            api.start()
            _say(f"listening on {api.address}")
            # Ready once queries can be answered: a long catch-up is progress, not a failed start.
            notifier.ready(f"catching up on {where}")
            progress = _Progress(notifier, api.health)

            def pipeline() -> Pipeline:
                # Built anew after a stalled pass: from the checkpoints, exactly as a restart would.
                return Pipeline(writer, specs, max_line=config.max_line, stop=stop, on_progress=progress.advance,
                                after_commit=lambda result: live.committed(result.sessions, result.position),
                                pricer=pricer)

            _say(f"ledger {db}; catching up on {where}")
            changes = Changes(wake, config.rescan_s)
            changes.start()
            for root in roots:
                changes.watch(root)
            for root in roots:
                if root in changes.awaited or root in undecided:
                    _tell_waiting(root, root in undecided, root in changes.awaited)
            flusher = _Flusher(hot, config.store.flush_interval_s)
            flusher.start()
            follower = _Follower(writer, live, config, pipeline, api.health, hooks, changes, demo_home is not None)
            try:
                while not stop.is_set():
                    notifier.watchdog()
                    api.health.tick()
                    told = _look_again(changes, undecided)
                    if told:
                        specs[:] = specs_from_pairs([(spec.format, r) for spec in specs for r in spec.roots] + told)
                        follower.rebuild()
                        wake.set()  # found by a look, not by inotify: the pass need not wait for a wake-up
                    if follower.caught_up or not follower.due():
                        # No pause after a wake-up to gather a burst: appends that come during a pass
                        # make up the next one, and waiting only added to every line's latency.
                        wake.wait(min(config.rescan_s, WATCHDOG_MAX_WAIT_S, notifier.interval_s or WATCHDOG_MAX_WAIT_S))
                        wake.clear()  # what changes from here on sets it again, for the next pass
                    if stop.is_set():
                        break
                    if not follower.due():
                        continue
                    was_caught_up = follower.caught_up
                    follower.step()
                    if follower.caught_up and not was_caught_up:
                        notifier.status(f"following {sum(len(spec.roots) for spec in specs)} source root(s); caught up")
            finally:
                flusher.close()  # before hot.close(), which writes what is left
                changes.close()
        finally:
            if demo_proc is not None:  # first: nothing that fails below may leave it running
                demo_proc.terminate()
                try:
                    demo_proc.wait(timeout=10)
                except subprocess.TimeoutExpired:  # the rest of the shutdown must still run
                    demo_proc.kill()
                    demo_proc.wait()
            if api is not None:
                api.close()
            # Each tried whatever became of the one before, and told alone: the ledger and the state dir
            # may be on different disks.
            last = (
                (lambda: _record_gates(writer, keeper), "gate decisions", "those not recorded yet are lost"),
                (lambda: _record_hooks(writer, hooks, live), "Claude Code hook events", "they are lost"),
                (hot.close, "hot views", "they are rebuilt from the ledger at the next start"),
            )
            for save, what, outcome in last:
                try:
                    save()
                except STALLS as exc:
                    _say(f"could not save {what} at exit ({exc}); {outcome}", logging.ERROR)
            readers.close()
            writer.close()
            conn.close()
    _say("stopped")
    return 0
