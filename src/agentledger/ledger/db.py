"""Connections and migrations.

Writers get WAL with synchronous=NORMAL (a committed batch survives a process
crash; an OS crash may lose the last batches, which the checkpoints then re-read).
Readers are query-only, so they can never take the write lock.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import importlib
import os
import re
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

# Installed, the migrations ship inside the package; in a source checkout they are schema/.
_PACKAGED = Path(__file__).resolve().parents[1] / "schema"
SCHEMA_DIR = _PACKAGED if _PACKAGED.is_dir() else Path(__file__).resolve().parents[3] / "schema"
BUSY_TIMEOUT_MS = 10_000
# Readers that never pause (gate clients, dashboards, queries back to back) keep the WAL from
# ever starting over: each checkpoint copies its pages back, but the file only grows (1.4 GB in
# a 10-minute soak). Past this size the writer waits for the reads of the moment to end (see
# writer.WAL_RESTART_WAITS_MS), so that its next transaction starts the WAL from the
# beginning, cut back to this size.
WAL_LIMIT_BYTES = 64 * 2**20
# Migrations after which rollups are recomputed from the rows (None: every rollup there is).
REFILLS: dict[int, tuple[str, ...] | None] = {2: None, 4: ("usage_slots", "usage_days"),
                                             9: ("session_ids", "compaction_pairs"), 11: ("duration_buckets",),
                                             14: ("session_totals",),
                                             23: ("session_totals", "usage_slots", "usage_days", "session_ids",
                                                  "compaction_pairs"),
                                             27: ("cost_source_totals", "session_fallback_costs"),
                                             29: ("session_fallback_costs",), 31: ("session_fallback_costs",),
                                             34: ("session_totals", "run_llm_totals", "session_model_totals",
                                                  "usage_slots", "usage_days", "cost_source_totals",
                                                  "session_fallback_costs"),
                                             37: ("usage_slots", "usage_days", "session_ids", "compaction_pairs"),
                                             40: ("session_totals", "session_model_totals", "compaction_pairs"),
                                             41: ("usage_slots", "usage_days"),
                                             46: ("duration_buckets", "session_totals", "run_llm_totals",
                                                  "session_model_totals", "usage_slots", "usage_days",
                                                  "cost_source_totals", "compaction_pairs"),
                                             48: ("usage_slots", "usage_days", "tool_slots", "tool_days",
                                                  "compaction_pairs")}
# Migrations finished by a rule the writer applies (a function of a module of ledger/, named here), where a fresh
# read and the migrated rows must agree: stated once, it runs after the last migration's SQL, on the schema the
# writer's statements are written for, and before the refills.
SETTLES: dict[int, tuple[str, str]] = {41: ("side_branches", "settle_upgraded_ends"),
                                       48: ("agents", "settle_inferred_agents")}
_MIGRATION = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class LedgerError(Exception):
    """The database cannot be used as asked (missing, newer schema, locked)."""


class LedgerBusy(LedgerError):
    """Another agentledger process is already the writer of this ledger."""


class NotALedger(LedgerError):
    """The file is no ledger this agentledger may write (another program's database, a newer ledger):
    every writer is refused it, whenever it asks."""


class LedgerDamaged(LedgerError):
    """SQLite finds the ledger's file malformed (cut short, pages overwritten): no command can use it."""


def damaged(path: Path | None, why: object) -> LedgerDamaged:
    """The ledger at ``path`` (None: the one the command was given) found damaged, for ``why``, and the ways
    back: a backup, else a read of the logs still on disk into a new ledger."""
    what = "the ledger" if path is None else f"the ledger {path}"
    return LedgerDamaged(f"{what} is damaged ({why}): restore it from a backup, or move it aside (with its -wal "
                         "and -shm) and read the logs again into a new one with `agentledger ingest`")


def _nameable(path: Path) -> None:
    """Refuses a path that is not UTF-8 (a legal Linux file name): SQLite is given file names as UTF-8 text."""
    try:
        str(path).encode()
    except UnicodeEncodeError:
        from agentledger.sources.common import ledger_name

        raise LedgerError(f"cannot open a ledger at {ledger_name(str(path))}: its path is not UTF-8, which SQLite "
                          "cannot open; rename it (or the directory it is in), or pass --db with another "
                          "path") from None


class WriterLock:
    """This process as the only writer of the ledger at ``path``, until ``close`` (or the end of its
    ``with`` block); ``open`` opens the ledger.

    Two tailers on one ledger would race on the same checkpoints, so a second one is refused
    at once rather than left to fail mid-batch."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        _nameable(self.path)
        _make_parent(self.path)
        lock = Path(f"{path}.lock")
        try:
            try:
                self._fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                self._made: Path | None = lock
            except FileExistsError:
                self._fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self._made = None
        except OSError as exc:
            raise _unwritable(self.path, exc) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise LedgerBusy(f"another agentledger process is writing {path} (stop it, or pass another --db)") from None

    def open(self) -> apsw.Connection:
        """The ledger opened for writing (``open_writer``). One refused (another program's database, a
        newer ledger) keeps no lock file this lock made beside it: the file is left as it was found.
        Any other writer would be refused that same file, so none can be holding the lock removed; a
        refusal that may pass (a permission, a read-only mount) keeps it, as any writer may get past it.

        Close it before the lock ends (``with lock, closing(lock.open()) as conn:``): closing still
        writes, a last checkpoint of the WAL; an apsw connection's own ``with`` is a transaction."""
        try:
            return open_writer(self.path)
        except NotALedger:
            if self._made is not None:
                self._made.unlink(missing_ok=True)
            raise

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def migrations(schema_dir: Path = SCHEMA_DIR) -> list[tuple[int, Path]]:
    found = []
    for path in sorted(schema_dir.iterdir()):
        m = _MIGRATION.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    numbers = [n for n, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        raise LedgerError(f"migrations in {schema_dir} are not numbered 1..N: {numbers}")
    return found


_WRITABLE = ("pass --db (or set db) with a path in a directory agentledger can create and write "
             "(under systemd: one in ReadWritePaths=)")


def _unwritable(path: Path, exc: OSError) -> LedgerError:
    """Why the ledger at ``path`` cannot be written, as one line: a setting to change, not a crash,
    so that a service manager does not restart it in a loop."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        why = "a part of its directory is a file"
    else:
        why = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return LedgerError(f"cannot write a ledger at {path}: {why}; {_WRITABLE}")


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(path, exc) from None


def _not_a_ledger(path: Path, what: str = "not a SQLite database") -> LedgerError:
    return NotALedger(f"{path} is not a ledger ({what}): pass --db with a ledger, or a new path")


def _columns(conn: apsw.Connection, table: str) -> frozenset[str]:
    return frozenset(row[0] for row in conn.execute("SELECT name FROM pragma_table_info(?)", (table,)))


@functools.cache
def _first_tables() -> dict[str, frozenset[str]]:
    """The tables the first migration makes, with their columns: a ledger of every version has them (later
    migrations add tables and columns, and take none away)."""
    conn = apsw.Connection(":memory:")
    try:
        conn.execute(migrations()[0][1].read_text())
        names = [row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        return {name: _columns(conn, name) for name in names}
    finally:
        conn.close()


def _schema_version(conn: apsw.Connection, path: Path, use: str) -> int:
    """The ledger's schema version; refuses a database of something else, or of a newer agentledger,
    which this one cannot ``use`` ("read", "write"). A ledger is told by the tables its first migration
    made, not by its version alone: many programs set one of their own (PRAGMA user_version), and
    migrating their file would write the ledger's tables into it. That migration sets the version in
    the transaction that makes its tables, so a file without tables is a ledger only at version 0, one
    not written yet."""
    version = conn.execute("PRAGMA user_version").fetchall()[0][0]
    if conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()[0][0]:
        if not version or any(not columns <= _columns(conn, table) for table, columns in _first_tables().items()):
            raise _not_a_ledger(path, "a SQLite database with other tables")
    elif version:
        raise _not_a_ledger(path, "an empty SQLite database another program gave a version")
    latest = len(migrations())
    if version > latest:
        raise NotALedger(f"{path}: schema version {version} is newer than this agentledger's ({latest}); "
                         f"upgrade agentledger to {use} it")
    return version


def _unusable(path: Path, exc: apsw.NotADBError | apsw.CorruptError) -> LedgerError:
    return _not_a_ledger(path) if isinstance(exc, apsw.NotADBError) else damaged(path, exc)


def _pragmas(conn: apsw.Connection) -> None:
    conn.setbusytimeout(BUSY_TIMEOUT_MS)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA temp_store = MEMORY")


def open_writer(path: str | Path) -> apsw.Connection:
    """Open (creating if needed) the ledger for writing and bring its schema up to date."""
    path = Path(path)
    _nameable(path)
    _make_parent(path)
    try:
        conn = _readied(apsw.Connection(str(path)), _ready_to_write, path)
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        raise _unusable(path, exc) from None
    except (apsw.CantOpenError, apsw.ReadOnlyError, apsw.PermissionsError) as exc:
        raise LedgerError(f"cannot write a ledger at {path}: {exc}; {_others_beside(path) or _WRITABLE}") from None
    return conn


def _others_beside(path: Path) -> str | None:
    """The fix when the ledger's -wal or -shm belongs to a user this one cannot write as: a query by another
    user who may read the ledger but not write it, while no daemon ran, makes them (SQLite gives them the
    ledger's mode, and its owner only as root), and SQLite cannot use them."""
    real = os.path.realpath(path)
    theirs, holds = [], False
    for name in (f"{real}-wal", f"{real}-shm"):
        try:
            st = os.stat(name)
        except OSError:
            continue
        if st.st_uid != os.geteuid() and not os.access(name, os.W_OK):
            theirs.append(name)
            holds |= name.endswith("-wal") and st.st_size > 0
    if not theirs:
        return None
    if holds:  # commits not yet in the ledger's file: removed, they would be lost
        return (f"{' and '.join(theirs)} belong to another user and hold commits not yet folded into the "
                "ledger; run a query or `agentledger serve` once as that user (or as root), which folds them in")
    return (f"{' and '.join(theirs)} belong to another user, whose query left them while no daemon ran; "
            "remove them while no agentledger runs on the ledger, or run as that user")


def _ready_to_write(conn: apsw.Connection, path: Path) -> None:
    _pragmas(conn)
    # Before any pragma that writes (the auto-vacuum, the journal mode): another program's file is left as
    # it was found.
    _schema_version(conn, path, "write")
    # Takes effect only on a new file, before its first table; older ledgers switch below.
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchall()[0][0]
    if mode != "wal":
        raise LedgerError(f"{path}: could not switch to WAL journal (got {mode!r})")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
    # 16 MiB: a larger page cache bought under 10% catch-up speed and made memory grow with the
    # ledger instead of staying flat.
    conn.execute("PRAGMA cache_size = -16384")
    migrate(conn)
    from agentledger.ledger.retention import ensure_incremental_vacuum

    ensure_incremental_vacuum(conn, path)


def restart_wal(conn: apsw.Connection, wait_ms: int) -> bool:
    """Checkpoint the whole WAL and wait up to ``wait_ms`` until no reader still uses it, so the
    next transaction writes it from the start. False when a reader took longer: try again later."""
    conn.setbusytimeout(wait_ms)
    try:
        busy = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()[0][0]
    except apsw.BusyError:
        busy = 1
    finally:
        conn.setbusytimeout(BUSY_TIMEOUT_MS)
    return not busy


def _cannot_read(path: Path, why: object) -> LedgerError:
    return LedgerError(f"cannot read {path} ({why}): run as a member of the ledger's group while the daemon is "
                       "running, or as its owner")


def ledger_exists(path: Path) -> bool:
    """Whether a file is at ``path``. One out of reach (a directory above it cannot be searched, where
    Path.exists() raised) is refused as one that cannot be read, with the system's reason."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # no group or owner reads through links that go round
            raise LedgerError(f"cannot read {path}: it is a loop of symbolic links: point the link at the ledger's "
                              "file, or pass another --db") from None
        raise _cannot_read(path, exc.strerror) from None
    return True


def open_reader(path: str | Path) -> apsw.Connection:
    """A query-only connection: queries never hold the write lock."""
    path = Path(path)
    _nameable(path)
    if not ledger_exists(path):
        raise LedgerError(f"no ledger at {path}: run `agentledger ingest` or `agentledger serve` first, or pass --db")
    # SQLite keeps the -wal and -shm beside the file a link leads to: what is beside the link tells nothing
    # of them (a WAL a daemon writes there, read through a link in a read-only place as an immutable file,
    # read as damaged).
    path = Path(os.path.realpath(path))
    beside_unwritable = not os.access(path.parent, os.W_OK)
    # Opened for writing where this user may write the ledger and its directory, though it only reads: the
    # last connection to close then removes the -wal and -shm beside the ledger, where a read-only one
    # cannot (every query left them, and a copy of the directory carried them). SQLite removes them only
    # when no other connection has the ledger open, so never under a writer.
    writable = not beside_unwritable and os.access(path, os.W_OK)
    # A URI, for its mode: a path's '#', '?' and '%' would otherwise end or escape its name.
    uri = f"file:{urllib.parse.quote(str(path.absolute()))}?mode={'rw' if writable else 'ro'}"
    # In a directory this user cannot write (a read-only mount, a snapshot), SQLite cannot make the
    # shared-memory file every read of a WAL ledger goes through. With no write-ahead log beside it, no
    # writer can change the ledger (one would make the log there first): it is read as it lies.
    wal = os.path.exists(f"{path}-wal")
    if beside_unwritable and not wal:
        uri += "&immutable=1"
    try:
        conn = _readied(apsw.Connection(uri, flags=(apsw.SQLITE_OPEN_READWRITE if writable else apsw.SQLITE_OPEN_READONLY)
                                        | apsw.SQLITE_OPEN_URI), _ready_to_read, path)
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        raise _unusable(path, exc) from None
    except (apsw.CantOpenError, apsw.ReadOnlyError, apsw.PermissionsError, PermissionError) as exc:
        if beside_unwritable and wal and not os.path.exists(f"{path}-shm"):
            raise LedgerError(f"cannot read {path} ({exc}): its directory cannot be written, and SQLite makes "
                              f"the ledger's {path.name}-shm beside it while {path.name}-wal is there (a daemon "
                              "writing, or one killed); start and stop `agentledger serve` once, or copy the "
                              "ledger with its -wal somewhere writable") from None
        hint = _others_beside(path)
        if hint:
            raise LedgerError(f"cannot read {path} ({exc}): {hint}") from None
        raise _cannot_read(path, exc) from None
    return conn


def _readied(conn: apsw.Connection, ready: Callable[[apsw.Connection, Path], None], path: Path) -> apsw.Connection:
    """``conn`` once ``ready`` found it a ledger to use; closed as it was found if not."""
    try:
        ready(conn, path)
    except BaseException:
        _close_as_found(conn)
        raise
    return conn


def _close_as_found(conn: apsw.Connection) -> None:
    """Close a file refused (another program's database, a newer ledger) without the checkpoint the last
    connection to a WAL database makes as it closes: it would write that file's log into it."""
    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    conn.close()


def _ready_to_read(conn: apsw.Connection, path: Path) -> None:
    _pragmas(conn)
    conn.execute("PRAGMA query_only = ON")
    version = _schema_version(conn, path, "read")
    if version == 0:  # no tables (see _schema_version): created, its first transaction not committed yet
        raise LedgerError(f"no ledger at {path} yet: an empty database, which the first `agentledger ingest` or "
                          "`serve` on it fills; wait for its first commit, or pass --db")
    latest = len(migrations())
    if version != latest:
        raise LedgerError(
            f"{path}: schema version {version}, this agentledger expects {latest}; "
            "run `agentledger ingest` or `serve` once to migrate"
        )


def migrate(conn: apsw.Connection) -> int:
    """Apply pending migrations in one transaction, then refill the rollups they call for.

    Refilling after the last migration means the rollups are recomputed with the definitions
    that match the final schema, and a crash midway leaves the ledger as it was."""
    current = conn.execute("PRAGMA user_version").fetchall()[0][0]
    pending = migrations()[current:]
    if not pending:
        return current
    conn.execute("BEGIN IMMEDIATE")
    try:
        refill: set[str] | None = set()
        for number, path in pending:
            conn.execute(path.read_text())
            if number in REFILLS:
                tables = REFILLS[number]
                refill = None if tables is None or refill is None else refill | set(tables)
        settles = [SETTLES[number] for number, _ in pending if number in SETTLES]
        for module, name in settles:
            getattr(importlib.import_module(f"agentledger.ledger.{module}"), name)(conn)
        if refill is None or refill:
            from agentledger.ledger.verify import rebuild_rollups, rebuild_rollups_as_a_change

            tables = None if refill is None else tuple(refill)
            if current:
                # Hot views and metric floors kept from before were built from the former rollups.
                rebuild_rollups_as_a_change(conn, tables)
            else:
                rebuild_rollups(conn, tables)
        conn.execute(f"PRAGMA user_version = {pending[-1][0]:d}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return pending[-1][0]


class ReaderPool:
    """Query-only connections reused across requests: opening one costs more than a gate decision.

    A plain list: ``pop`` and ``append`` are atomic, so taking and returning a connection needs no
    lock for request threads to wait on."""

    def __init__(self, path: str | Path, size: int = 8):
        self.path = path
        self.size = size
        self._idle: list[apsw.Connection] = []

    @contextmanager
    def connection(self) -> Iterator[apsw.Connection]:
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = open_reader(self.path)
        try:
            yield conn
        except BaseException:
            conn.close()  # it may be mid-transaction; a fresh one is cheaper than finding out
            raise
        if len(self._idle) < self.size:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.pop().close()
            except IndexError:
                return
