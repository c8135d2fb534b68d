"""A bounded in-memory cache of per-session state, written back to one file per session.

The ledger stays the source of truth: this store only spares the daemon a replay
of a session's whole history after a restart. Each file records the last ledger
batch its state reflects (``position``), so the caller replays only what came
after, and a file that cannot be trusted (torn, of another shape, stored under another
key) is set aside and reads as absent: the caller rebuilds that session.

Files are replaced atomically (temp file, fsync, rename, fsync of the directory),
so after a crash a file holds the previous state or the new one, never a mix.
One store owns its directory: a second process on it would see its temp files
removed and its writes overwritten.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from agentledger.faults import fault
from agentledger.regular import read_regular

T = TypeVar("T")

SESSIONS = "sessions"
SUFFIX = ".json"
TMP_PREFIX = ".tmp-"
DIR_MODE = 0o700
FILE_MODE = 0o600


@dataclass(slots=True)
class _Entry(Generic[T]):
    state: T
    created_at: float  # wall clock: comparable across restarts, unlike the store's clock
    updated_at: float
    position: int | None
    dirty: bool
    used_at: float  # store clock, for LRU order and TTL
    flushed_at: float  # store clock


@dataclass(slots=True, frozen=True)
class _Stored:
    key: str
    created_at: float
    updated_at: float
    position: int | None
    state: dict


def file_name(key: str) -> str:
    """The file a key lives in: a hash, so no key can name a path outside the directory."""
    # surrogatepass: every Python str, even one holding a lone surrogate, has a name.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest() + SUFFIX


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _parse(data: bytes) -> _Stored | None:
    """The record in a session file's bytes, or None when they are not one."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # bad JSON or UTF-8; absurd nesting
        return None
    if not isinstance(doc, dict) or "position" not in doc:
        return None
    key, created, updated, position, state = (
        doc.get(field) for field in ("key", "created_at", "updated_at", "position", "state"))
    if not (isinstance(key, str) and _is_time(created) and _is_time(updated) and isinstance(state, dict)):
        return None
    if position is not None and (not isinstance(position, int) or isinstance(position, bool)):
        return None
    return _Stored(key, float(created), float(updated), position, state)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(directory: Path, name: str, data: bytes) -> None:
    tmp = directory / f"{TMP_PREFIX}{name}.{secrets.token_hex(6)}"
    f = os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE),
                  "wb")
    try:
        with f:
            os.fchmod(f.fileno(), FILE_MODE)  # os.open's mode is narrowed by the umask; this makes it exact
            half = len(data) // 2
            f.write(data[:half])
            f.flush()
            fault("mid_state_write")
            f.write(data[half:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # Without this the rename itself may not survive a power loss.
    _fsync_dir(directory)


def _make_private_dir(path: Path) -> bool:
    """Create ``path`` as 0700; False if it already existed."""
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        return False
    _make_private(path)  # mkdir's mode is narrowed by the umask too
    _fsync_dir(path.parent)
    return True


def _make_private(directory: Path) -> None:
    """Mode 0700 on ``directory`` itself; NotADirectoryError for anything else found there, a symlink included:
    what a symlink or a stray file names is not the store's to change."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, DIR_MODE)
    finally:
        os.close(fd)


class SessionRuntimeStore(Generic[T]):
    """Per-session state of type T: an LRU of at most ``max_entries`` in memory, the rest on disk.

    Updates mark an entry dirty; dirty entries reach disk when ``maybe_flush`` finds
    their last flush older than ``flush_interval_s`` (0: at every update), and when
    flushed or closed. An entry evicted while dirty keeps its record in memory until the
    next flush writes it, and is served from there meanwhile; unless ``write_back`` is
    False (for state the caller can rebuild, where a write per eviction costs more than a
    rebuild): then an evicted entry is dropped unwritten and the next flush deletes its file,
    and at start the files beyond ``max_entries`` are deleted, so only what is in memory
    stays on disk.
    Thread-safe: files are written outside the lock that reads take, so a slow disk never
    holds up a reader.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        create: Callable[[], T],
        dump: Callable[[T], dict],
        load: Callable[[dict], T],
        max_entries: int = 128,
        flush_interval_s: float = 5.0,
        ttl_s: float = 0.0,
        write_back: bool = True,
        on_evict: Callable[[str, T], None] | None = None,
        on_recover: Callable[[str, T], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if flush_interval_s < 0 or ttl_s < 0:
            raise ValueError("flush_interval_s and ttl_s must not be negative")
        self._create = create
        self._dump = dump
        self._load = load
        self._max_entries = max_entries
        self._flush_interval_s = flush_interval_s
        self._ttl_s = ttl_s
        self._write_back = write_back
        self._on_evict = on_evict
        self._on_recover = on_recover
        self._clock = clock
        self._lock = threading.RLock()
        # Serializes file writes and deletes; taken before ``_lock``, never while holding it.
        self._io_lock = threading.Lock()
        self._unwritten: dict[str, bytes] = {}  # records not yet known to be on disk, by key
        self._entries: OrderedDict[str, _Entry[T]] = OrderedDict()  # least recently used first
        self._on_disk: set[str] = set()  # keys with a trusted file, so has() and keys() need no I/O
        self._doomed: set[str] = set()  # keys evicted without write-back whose files the next flush deletes
        self.quarantined = 0  # files set aside as untrustworthy since this store opened

        self._root = Path(state_dir)
        self._dir = self._root / SESSIONS
        self._make_dirs()
        self._recover()

    # -- reading -----------------------------------------------------------

    def get(self, key: str) -> T | None:
        """The state for ``key`` (loaded from disk if evicted), or None."""
        with self._lock:
            entry = self._lookup(key)
            return None if entry is None else entry.state

    def peek(self, key: str) -> T | None:
        """The state for ``key`` if it is in memory, else None; not a use: the LRU order and the idle
        time stay as they were, so a walk over every entry evicts nothing it would not have."""
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.state

    def get_or_create(self, key: str) -> T:
        """The state for ``key``; a new one from ``create`` (and dirty) if there is none."""
        with self._lock:
            entry = self._lookup(key)
            created = entry is None
            if created:
                entry = self._insert(key)
                self._dirtied(entry)
        if created:
            self._flush_if_eager(key)
        return entry.state

    def has(self, key: str) -> bool:
        """Whether ``key`` has state, in memory or on disk; does not count as a use."""
        with self._lock:
            return key in self._entries or key in self._unwritten or key in self._on_disk

    def position(self, key: str) -> int | None:
        """The last ledger batch the state for ``key`` reflects; None if unknown or absent."""
        with self._lock:
            entry = self._lookup(key)
            return None if entry is None else entry.position

    def keys(self) -> set[str]:
        """Every key with state, in memory or on disk."""
        with self._lock:
            return set(self._entries) | set(self._unwritten) | self._on_disk

    def size(self) -> int:
        """Entries in memory."""
        with self._lock:
            return len(self._entries)

    def fits(self, key: str) -> bool:
        """Whether an update of ``key`` now would evict nothing: it is in memory, or there is room."""
        with self._lock:
            return key in self._entries or len(self._entries) < self._max_entries

    # -- writing -----------------------------------------------------------

    def update(self, key: str, mutator: Callable[[T], None], position: int | None = None) -> T:
        """Apply ``mutator`` to the state for ``key`` (created if missing) and mark it dirty.

        ``position`` is the last ledger batch the state now reflects. If ``mutator``
        raises, the possibly half-changed state is dropped from memory: the key
        falls back to its last flushed state and position, which still agree.
        """
        with self._lock:
            entry = self._lookup(key) or self._insert(key)
            try:
                mutator(entry.state)
            except BaseException:
                self._entries.pop(key, None)
                raise
            if position is not None:
                entry.position = position
            self._dirtied(entry)
        self._flush_if_eager(key)
        return entry.state

    def delete(self, key: str) -> None:
        """Forget ``key`` in memory and on disk."""
        with self._io_lock:  # not while a flush may still write it back
            with self._lock:
                self._entries.pop(key, None)
                self._unwritten.pop(key, None)
                self._on_disk.discard(key)
            try:
                os.unlink(self._dir / file_name(key))
            except FileNotFoundError:
                return
            _fsync_dir(self._dir)  # else a crash could bring the session back

    def flush(self, key: str) -> None:
        self._flush(lambda k, entry, now: k == key)

    def flush_all(self) -> None:
        self._flush(lambda k, entry, now: True)

    def close(self) -> None:
        """Write every dirty entry; the store stays usable."""
        self.flush_all()

    def maybe_flush(self) -> None:
        """Evict entries idle longer than ``ttl_s``, then flush those dirty longer than the interval."""
        with self._lock:
            if self._ttl_s:
                now = self._clock()
                # Oldest use first, so the scan stops at the first entry still in use.
                while self._entries:
                    key, entry = next(iter(self._entries.items()))
                    if now - entry.used_at <= self._ttl_s:
                        break
                    self._evict(key)
        self._flush(lambda k, entry, now: now - entry.flushed_at >= self._flush_interval_s)

    # -- internals ---------------------------------------------------------

    def _make_dirs(self) -> None:
        self._root.parent.mkdir(parents=True, exist_ok=True)
        _make_private_dir(self._root)
        if not _make_private_dir(self._dir):
            _make_private(self._dir)

    def _write(self, key: str, data: bytes) -> None:
        try:
            _write_atomically(self._dir, file_name(key), data)
        except FileNotFoundError:
            # The directory was removed under us (a cache cleaner, say): what is in memory is all
            # there is now, and its files are what a restart needs.
            self._make_dirs()
            _write_atomically(self._dir, file_name(key), data)

    def _flush(self, due: Callable[[str, _Entry[T], float], bool]) -> None:
        """Write the records of dirty entries ``due`` says to, and of every evicted dirty entry.

        The records are taken under the lock; the files are written after it is released."""
        with self._io_lock:
            with self._lock:
                doomed, self._doomed = self._doomed, set()
                now = self._clock()
                for key, entry in self._entries.items():
                    if entry.dirty and due(key, entry, now):
                        self._unwritten[key] = self._record(key, entry)
                        entry.dirty = False
                        entry.flushed_at = now
                batch = list(self._unwritten.items())
            for key in doomed:  # first: a key put back since is written again below
                # No fsync of the directory: a file a crash brings back is checked like any other.
                with suppress(FileNotFoundError):
                    os.unlink(self._dir / file_name(key))
            for key, data in batch:
                # A failure leaves this record and the rest in ``_unwritten``: the next flush tries again.
                self._write(key, data)
                with self._lock:
                    if self._unwritten.get(key) is data:  # else a newer record came meanwhile
                        del self._unwritten[key]
                    if key not in self._doomed:  # else evicted while being written: the next flush deletes it
                        self._on_disk.add(key)

    def _flush_if_eager(self, key: str) -> None:
        if self._flush_interval_s == 0:
            try:
                self.flush(key)
            except OSError:
                # The record stays unwritten: the next maybe_flush tries it again and raises to its
                # caller. An update is not a write; it must not fail for want of disk.
                pass

    def _record(self, key: str, entry: _Entry[T]) -> bytes:
        doc = {"key": key, "created_at": entry.created_at, "updated_at": entry.updated_at,
               "position": entry.position, "state": self._dump(entry.state)}
        # ensure_ascii keeps any key, lone surrogates included, representable.
        return json.dumps(doc, separators=(",", ":")).encode("ascii")

    def _lookup(self, key: str) -> _Entry[T] | None:
        """The entry for ``key``, now the most recently used, loading it from disk if needed."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._read_entry(key)
            if entry is None:
                return None
            self._entries[key] = entry
            self._evict_overflow()
        else:
            self._entries.move_to_end(key)
            entry.used_at = self._clock()
        return entry

    def _insert(self, key: str) -> _Entry[T]:
        now, wall = self._clock(), time.time()
        # flushed_at starts now so a new entry waits one interval, like any other change.
        entry = _Entry(self._create(), wall, wall, None, True, now, now)
        self._entries[key] = entry
        self._evict_overflow()
        return entry

    def _dirtied(self, entry: _Entry[T]) -> None:
        entry.updated_at = time.time()
        entry.dirty = True

    def _evict(self, key: str) -> None:
        entry = self._entries.pop(key)
        if self._write_back:
            if entry.dirty:
                self._unwritten[key] = self._record(key, entry)  # written by the next flush
        elif key in self._on_disk or key in self._unwritten:
            # Rebuilt when asked again: a file kept would only pile up, and be read at every start.
            self._unwritten.pop(key, None)
            self._on_disk.discard(key)
            self._doomed.add(key)
        if self._on_evict is not None:
            self._on_evict(key, entry.state)

    def _evict_overflow(self) -> None:
        while len(self._entries) > self._max_entries:
            self._evict(next(iter(self._entries)))

    def _read_entry(self, key: str) -> _Entry[T] | None:
        name = file_name(key)
        unwritten = self._unwritten.get(key)
        if unwritten is not None:
            return self._materialize(name, _parse(unwritten))
        if key not in self._on_disk:
            return None
        stored = self._read(name, key)
        if stored is None:
            self._on_disk.discard(key)
            return None
        return self._materialize(name, stored)

    def _materialize(self, name: str, stored: _Stored) -> _Entry[T] | None:
        try:
            state = self._load(stored.state)
        except Exception:
            # A state the caller's model rejects is as wrong-shaped as a torn file.
            self._quarantine(name)
            self._on_disk.discard(stored.key)
            return None
        now = self._clock()
        return _Entry(state, stored.created_at, stored.updated_at, stored.position, False, now, now)

    def _read(self, name: str, key: str | None) -> _Stored | None:
        """The trusted record in file ``name``; anything else is quarantined and reads as absent.

        ``key`` is the key asked for; at start there is none and the name is the claim.
        """
        try:
            # O_NOFOLLOW: a symlink planted under a session's name is refused, not followed.
            data = read_regular(self._dir / name, flags=os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError:  # a symlink under a session's name
            data = None
        stored = _parse(data) if data is not None else None
        if stored is None or file_name(stored.key) != name or (key is not None and stored.key != key):
            self._quarantine(name)
            return None
        return stored

    def _quarantine(self, name: str) -> None:
        # Renamed, not deleted: the evidence stays for whoever investigates.
        stamp = int(time.time())
        target = self._dir / f"{name}.corrupt-{stamp}"
        n = 0
        while target.exists():  # the same file set aside twice in one second
            n += 1
            target = self._dir / f"{name}.corrupt-{stamp}.{n}"
        try:
            os.rename(self._dir / name, target)
        except FileNotFoundError:
            return
        self.quarantined += 1

    def _recover(self) -> None:
        found: list[tuple[float, float, str, _Stored]] = []
        with os.scandir(self._dir) as it:
            for dirent in it:
                if dirent.name.startswith(TMP_PREFIX):
                    # A write that never reached its rename; the final file still holds the previous state.
                    with suppress(FileNotFoundError):
                        os.unlink(dirent.path)
                    continue
                if not dirent.name.endswith(SUFFIX):
                    continue  # quarantined files, and anything else that is not ours
                stored = self._read(dirent.name, None)
                if stored is not None:
                    found.append((stored.updated_at, dirent.stat(follow_symlinks=False).st_mtime,
                                  dirent.name, stored))
        found.sort(key=lambda f: (f[0], f[1]), reverse=True)
        for _, _, name, stored in found:
            if len(self._entries) < self._max_entries:
                self._load_recovered(name, stored)
            elif self._write_back:
                self._on_disk.add(stored.key)
            else:
                with suppress(FileNotFoundError):
                    os.unlink(self._dir / name)

    def _load_recovered(self, name: str, stored: _Stored) -> None:
        entry = self._materialize(name, stored)
        if entry is None:
            return
        self._on_disk.add(stored.key)
        self._entries[stored.key] = entry
        # Newest first in, so each goes to the least recently used end.
        self._entries.move_to_end(stored.key, last=False)
        if self._on_recover is not None:
            self._on_recover(stored.key, entry.state)
