"""Hot per-session aggregates: what gates read, kept in memory and equal to the ledger.

Every value is copied from the ledger's rollups, never accumulated here, so refreshing a
session twice, or after a crash, cannot count anything twice: a hot view is a replay of
the ledger by construction. The daemon refreshes the views it holds of the sessions each
committed transaction changed; a view that was not kept fresh this way (recovered from disk,
or reloaded after eviction) is checked against the ledger's, value for value, before it is
trusted, and a session without a view in memory gets one from the ledger when asked.

The views trusted in memory all equal the ledger at one position, ``HotSessions.position``: the
daemon moves it with the views a commit changed (``apply``), and a view read from the ledger is
trusted only when it was read there. Gates count on it: what they add to a view is what the ledger
at that position does not hold yet (see ``GateKeeper``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import apsw

from agentledger.hot.store import SessionRuntimeStore
from agentledger.ledger import queries


@dataclass(slots=True)
class Totals:
    llm_calls: int = 0
    llm_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost_pico: int = 0
    unpriced_calls: int = 0  # calls without a price: their cost is unknown, not counted in cost_pico
    tool_calls: int = 0
    tool_errors: int = 0


@dataclass(slots=True)
class HotSession:
    session_key: str = ""
    session_id: str | None = None
    agent_id: str | None = None
    status: str | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    last_activity_ms: int | None = None
    current_run: str | None = None
    own: Totals = field(default_factory=Totals)
    family: Totals = field(default_factory=Totals)  # own plus the subagents spawned while it was current
    ledger: str | None = None  # the ledger read (see queries.ledger_id): its positions mean nothing in another
    changed: str | None = None  # the commit its sums last changed at (see queries.hot_sessions)


_TOTAL_NAMES = tuple(f.name for f in fields(Totals))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# What a field of a view may hold, by its annotation: a field of a type not here fails at import, not in a file.
_HOLDS = {
    "str": lambda v: isinstance(v, str),
    "str | None": lambda v: v is None or isinstance(v, str),
    "int | None": lambda v: v is None or _is_int(v),
}
_PLAIN = tuple((f.name, _HOLDS[f.type]) for f in fields(HotSession) if f.type != "Totals")


def _dump(state: HotSession) -> dict:
    return asdict(state)


def _load(doc: dict) -> HotSession:
    """The view a file holds; ValueError unless every field holds its type (the store sets such a file aside):
    a view is trusted on its values, and one of another type fails whoever reads it."""
    def totals(value) -> Totals:
        if not isinstance(value, dict):
            raise ValueError("totals must be an object")
        # A file from before a total was kept lacks it; the ledger check rebuilds such a view anyway.
        counts = {k: value.get(k, 0) for k in _TOTAL_NAMES}
        if not all(_is_int(v) for v in counts.values()):
            raise ValueError("totals must be integers")
        return Totals(**counts)

    plain = {name: doc.get(name) for name, _ in _PLAIN}
    wrong = next((name for name, holds in _PLAIN if not holds(plain[name])), None)
    if wrong is not None:
        raise ValueError(f"{wrong} is not of its type")
    return HotSession(**plain, own=totals(doc.get("own")), family=totals(doc.get("family")))


def _from_ledger(view: dict) -> HotSession:
    return HotSession(
        session_key=view["session_key"], session_id=view["session_id"], agent_id=view["agent_id"],
        status=view["status"], started_ms=view["started_ms"], ended_ms=view["ended_ms"],
        last_activity_ms=view["last_activity_ms"], current_run=view["current_run"],
        own=Totals(**{k: view[k] for k in _TOTAL_NAMES}), family=Totals(**view["family"]), ledger=view["ledger"],
        changed=view["changed"],
    )


def view_of(conn: apsw.Connection, key: str) -> HotSession | None:
    """The view of ``key`` as ``conn`` reads the ledger, kept nowhere; None for a session the ledger does not know."""
    view = queries.hot_session(conn, key)
    return None if view is None else _from_ledger(view)


def _assign(source: HotSession) -> Callable[[HotSession], None]:
    def mutate(state: HotSession) -> None:
        for f in fields(HotSession):
            setattr(state, f.name, getattr(source, f.name))
    return mutate


class HotSessions:
    """The daemon's hot views, bounded by a ``SessionRuntimeStore`` (LRU + state files)."""

    def __init__(self, state_dir: Path, *, max_entries: int = 128, flush_interval_s: float = 5.0,
                 ttl_s: float = 0.0, end_grace_s: float = 300.0):
        self._lock = threading.RLock()
        self._fresh: set[str] = set()  # keys whose in-memory view is known to equal the ledger at ``position``
        # The ledger position the fresh views equal, moved by ``apply`` and ``stale`` only; None until the daemon
        # first moves it: a view is trusted as read, wherever that was.
        self.position: int | None = None
        self.recovered: list[str] = []
        self.end_grace_s = end_grace_s
        self.store: SessionRuntimeStore[HotSession] = SessionRuntimeStore(
            state_dir, create=HotSession, dump=_dump, load=_load, max_entries=max_entries,
            flush_interval_s=flush_interval_s, ttl_s=ttl_s,
            # A view is rebuilt from the ledger in well under a millisecond; writing (and fsyncing)
            # one per eviction cost more than that whenever more sessions were busy than fit.
            write_back=False,
            on_evict=lambda key, _: self._fresh.discard(key),
            on_recover=lambda key, _: self.recovered.append(key),
        )

    # -- the writer's side ----------------------------------------------------------------

    def validate(self, conn: apsw.Connection) -> int:
        """Trust recovered views the ledger has not changed since; rebuild the others. Returns how many
        were rebuilt."""
        with self._lock:
            keys, self.recovered = self.recovered, []
            return sum(self._check(conn, key)[1] for key in keys if key not in self._fresh)

    def stale(self, position: int) -> None:
        """The ledger moved to ``position`` without ``apply`` (a catch-up batch): check each view again before
        trusting it."""
        with self._lock:
            if position != self.position:
                self.recovered.extend(self._fresh)
                self._fresh.clear()
                self.position = position

    def read(self, conn: apsw.Connection, session_ids: Iterable[str]) -> dict[str, HotSession | None]:
        """The views of sessions a committed transaction changed (and of their ancestors), read on the
        connection that committed it, right after: at its position exactly. Every key such a view may be
        held under is there, None where it was not read.

        Only views held in memory, or that fit beside them: evicting one view to make room for
        another, every pass, would churn the LRU that lookups keep; the others are built from
        the ledger when asked."""
        ids = list(session_ids)
        if not ids:
            return {}
        # Read without the lock, so gate questions go on meanwhile.
        keys, aliases = queries.session_keys_of(conn, ids)
        # A view asked for by session id (as Claude Code's hooks ask) is held under the id: it is
        # brought up to date as long as it is held, but never made room for.
        held = [key for key in keys if self.store.fits(key)] + \
            [sid for sid in aliases - keys if self.store.has(sid) and self.store.fits(sid)]
        found = queries.hot_sessions(conn, held)
        return {key: _from_ledger(found[key]) if key in found else None for key in keys | aliases}

    def apply(self, views: dict[str, HotSession | None], position: int) -> None:
        """Put the views ``read`` at ``position`` and move the memory there, at once for every reader: the
        views it did not name are those the transactions up to ``position`` left as they were. Memory only
        (and a file write when flush_interval_s is 0), so the gate questions that wait for it wait little."""
        with self._lock:
            if self.position is None:  # the views trusted so far were read anywhere
                self.stale(position)
            self.position = position
            for key, hot in views.items():
                if hot is not None and self.store.fits(key):  # the views put before it may have filled the room
                    self._put_view(key, hot, position)
                else:
                    # Not read here, yet maybe put since by a question that read it before the commit (room
                    # it had not when read() looked): trusted, it would pass for the view at ``position``.
                    self._fresh.discard(key)

    def expire(self, now_ms: int | None = None) -> list[str]:
        """Drop views of sessions that ended longer than the grace ago."""
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        dropped = []
        with self._lock:
            for key in list(self._fresh):
                state = self.store.peek(key)  # a chore, not a use: idle views must still age out
                if state is not None and state.ended_ms is not None and \
                        now_ms - state.ended_ms > self.end_grace_s * 1000:
                    self._fresh.discard(key)
                    dropped.append(key)
        # Outside the lock: a delete waits for a flush in progress, gate questions must not.
        for key in dropped:
            self.store.delete(key)
        return dropped

    def flush_due(self) -> None:
        """Write the views due (see ``SessionRuntimeStore.maybe_flush``); evict those idle past the TTL."""
        self.store.maybe_flush()

    def close(self) -> None:
        self.store.close()

    # -- the readers' side ----------------------------------------------------------------

    def lookup(self, conn: apsw.Connection, key: str) -> HotSession | None:
        """The view of ``key`` as the ledger has it now; None for a session the ledger does not know."""
        with self._lock:
            # Memory moves a moment after each commit: the view is fresh only while the ledger is still there.
            if key in self._fresh and queries.ledger_position(conn) == self.position:
                state = self.store.get(key)
                if state is not None:  # else dropped since, outside the lock: read again below
                    return state
            with conn:  # one snapshot: the view is read at the position it is put with
                if self.store.get(key) is not None:
                    return self._check(conn, key)[0]
                position = queries.ledger_position(conn)
                view = queries.hot_session(conn, key)
            if view is None:
                return None
            hot = _from_ledger(view)
            # Kept even when ended: the next question is answered from memory; expire() drops it.
            self._put_view(key, hot, position)
            return hot

    def remembered(self, key: str) -> HotSession | None:
        """The view of ``key`` if memory holds it as the ledger has it at ``position``, else None."""
        with self._lock:
            return self.store.get(key) if key in self._fresh else None

    def size(self) -> int:
        return self.store.size()

    def views(self) -> list[HotSession]:
        """The views in memory that equal the ledger, most recently active first, each session once
        (a view asked for by session id may be held beside the one asked for by key)."""
        with self._lock:
            states = [s for s in (self.store.peek(k) for k in list(self._fresh)) if s is not None]
        unique = {(s.session_key, s.session_id): s for s in states}
        return sorted(unique.values(), key=lambda s: s.last_activity_ms or 0, reverse=True)

    # -- internals --------------------------------------------------------------------

    def _check(self, conn: apsw.Connection, key: str) -> tuple[HotSession | None, int]:
        """Keep a stored view if it equals the ledger's, else rebuild it. ``conn`` reads one snapshot (a
        transaction, or the writer's own). Returns the view as the ledger has it (None for a session it does
        not know), and 1 if rebuilt."""
        with conn:
            now = queries.ledger_position(conn)
            view = queries.hot_session(conn, key)
        if view is None:
            self.store.delete(key)
            return None, 1
        # Gone already, maybe: gate questions about other sessions evict views, and expire() and the TTL
        # drop them outside the lock. Then it is rebuilt like a view that changed.
        stored = self.store.get(key)
        hot = _from_ledger(view)
        # Every value, read here anyway, not only the marks of the ledger and the commit it was read at (the
        # commit's mark, not only its position: a restored copy of the ledger reaches the positions the view
        # may have been read at with commits of its own): a file edited by hand keeps its marks.
        if stored == hot:
            self._trust(key, now)
            return stored, 0
        self._put_view(key, hot, now)
        return hot, 1

    def _put_view(self, key: str, hot: HotSession, position: int) -> None:
        """``hot``: the view of ``key`` as the ledger had it at ``position``."""
        # The same view is often read twice: a question that builds it between a commit and the
        # refresh after it. Put again, it would be written (and fsynced) again for nothing; the
        # older position it keeps is still one its sums are good for.
        if self.store.get(key) != hot:
            self.store.update(key, _assign(hot), position=position)
        self._trust(key, position)

    def _trust(self, key: str, position: int) -> None:
        """The view of ``key`` equals the ledger at ``position``: trusted as it is only if that is where
        memory is. Read past it (the ledger moved and ``apply`` has not come yet), it is checked again
        when next asked for; otherwise a gate would take it for one read at ``self.position``."""
        if self.position is None or position == self.position:
            self._fresh.add(key)
        else:
            self._fresh.discard(key)
