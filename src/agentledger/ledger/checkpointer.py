"""WAL checkpoints on a thread of their own, so that commits do not run them.

SQLite's automatic checkpoint runs inside the commit that takes the WAL past its threshold:
that commit, and every line waiting on it, pays for copying the WAL back into the database
and syncing it. Here the writer's commits only signal (a WAL hook, which replaces the
automatic checkpoint on the writer's connection), and a second connection checkpoints.
apsw releases the GIL while SQLite works, so the copy and the sync run beside the writer.

PASSIVE checkpoints never wait for readers or the writer; what they leave, the next one
takes. While the writer is busy, its next transaction starts writing before a checkpoint
ends, so the WAL never starts over by itself: it grows to the writer's WAL bound
(``LedgerWriter.bound_wal``), whose restart checkpoint the writer still runs itself. That
bound also keeps the WAL in check should this thread fail.
"""

from __future__ import annotations

import logging
import threading

import apsw

log = logging.getLogger("agentledger.ledger")

# SQLite's own default threshold (wal_autocheckpoint): pages in the WAL before a checkpoint is due.
CHECKPOINT_PAGES = 1000


class Checkpointer:
    """Checkpoints ``conn``'s database from another connection whenever its WAL holds
    ``pages`` pages or more after a commit. ``close`` before closing ``conn``."""

    def __init__(self, conn: apsw.Connection, pages: int = CHECKPOINT_PAGES):
        self.pages = pages
        self.checkpoints = 0  # done so far, for tests and benchmarks
        self._writer = conn
        self._automatic = conn.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0]  # given back at close
        self._own = apsw.Connection(conn.filename, flags=apsw.SQLITE_OPEN_READWRITE)
        self._due = threading.Event()
        self._closing = False
        conn.set_wal_hook(self._committed)
        self._thread = threading.Thread(target=self._run, name="wal-checkpoints", daemon=True)
        self._thread.start()

    def _committed(self, conn: apsw.Connection, name: str, pages: int) -> int:
        # In the writer's COMMIT: signal and return at once.
        if pages >= self.pages and name == "main":
            self._due.set()
        return apsw.SQLITE_OK

    def _run(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            if self._closing:
                return
            try:
                self._own.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.checkpoints += 1
            except apsw.BusyError:
                pass  # another checkpoint is under way (the writer restarting its WAL): the next commit asks again
            except apsw.Error as exc:
                log.warning("WAL checkpoint failed (%s); the writer's WAL bound still applies", exc)

    def close(self) -> None:
        """Stop the thread and give the writer's connection SQLite's automatic checkpoints back."""
        if self._closing:
            return
        self._closing = True
        self._due.set()
        self._thread.join()
        self._own.close()
        self._writer.set_wal_hook(None)
        self._writer.wal_autocheckpoint(self._automatic)
