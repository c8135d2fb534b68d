"""OpenClaw's SQLite copy of its session transcripts (FORMATS.md §2), followed like a log.

Newer OpenClaw releases keep the transcript entries in
``<state>/agents/<agentId>/agent/openclaw-agent.sqlite``, table
``transcript_events(session_id, seq, event_json, created_at)``, beside or instead of the
JSONL files. Each session's rows are followed as the lines of one file would be: a ``files``
row (source ``oc-transcript-sqlite``, path ``<store>#<session_id>``) keeps the next ``seq``
to read as its offset, advanced in the transaction that writes the rows' facts, so every
row is indexed exactly once across restarts and crashes.

The store is the producer's: it is opened read-only, and read one page of rows per
statement, so a read transaction never outlives the page and is never held while the ledger
writes. A row decodes exactly as the JSONL line of the same entry would, to the same event
ids, so the two copies never count twice (an entry without an id, known only by its bytes, is
read as the line of its JSONL copy that holds it); the stores are read before the files, so where
both hold an entry the row is the one indexed, and a row read after its line (a store that
appeared later) still gives the line's model call its figures (``Batch.prevails``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import mmap
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import orjson

from agentledger import jsontext
from agentledger.ledger.writer import FileRow, LedgerWriter
from agentledger.regular import open_regular
from agentledger.sources import oc_transcript
from agentledger.sources.oc_store import SESSIONS, looks, open_store, sessions_beside, store_of
from agentledger.sources.common import ledger_name, text
from agentledger.tail.reader import ReadResult
from agentledger.tail.tailer import Chunk, ReadBackFailed

log = logging.getLogger("agentledger.ingest")

STORE_SOURCE = "oc-transcript-sqlite"
PAGE_ROWS = 2000
_HEAD = 200

_QUIET_NS = 2_000_000_000
# Rows longer than max_line are never loaded: their length and first bytes are enough to reject them.
_PAGE = """
SELECT seq, CASE WHEN length(CAST(event_json AS BLOB)) <= ?3 THEN CAST(event_json AS BLOB) END,
       length(CAST(event_json AS BLOB)), substr(CAST(event_json AS BLOB), 1, ?4)
FROM transcript_events WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?5
"""


def stores(root: str) -> list[str]:
    """The stores under a state dir (``agents/*/agent/``), or beside a sessions dir given as the root."""
    base = Path(root)
    if base.name == "sessions":
        found = [store_of(base.parent)]
    else:
        try:
            agents = sorted(os.listdir(base / "agents"))
        except OSError:  # none, or out of reach: the transcripts' listing of the same directory tells which
            agents = []
        found = [store_of(base / "agents" / agent) for agent in agents]
    # os.path.isfile: Path.is_file() raised in an agent's directory that cannot be searched.
    return [p for p in found if os.path.isfile(p)]


class StoreReader:
    """Reads what is new in the transcript stores under some roots, one page of one session at a time."""

    def __init__(self, writer: LedgerWriter, roots: list[str], page_rows: int = PAGE_ROWS):
        self.writer = writer
        self.roots = roots
        self.page_rows = page_rows
        self.rows: dict[str, FileRow] = {row.path: row for row in writer.load_files(STORE_SOURCE)}
        self.read_at: dict[str, tuple] = {}  # store → how its files looked when it was last read to the end
        self.failing: dict[str, str] = {}  # store → why it could not be read last time
        # store → session → (the transcript path it decodes as, its sessions.json entry) when it was last
        # named as due a key: all its key depends on, but for spawns in files, which the files' reads follow.
        self.keyed: dict[str, dict[str, tuple]] = {}
        # transcript path named as due a key by the current or last pass → (store, session)
        self.named: dict[str, tuple[str, str]] = {}

    def chunks(self, max_line: int) -> Iterator[tuple[Chunk | None, str]]:
        """(rows not indexed yet as a chunk, the transcript path they decode as); the caller commits each
        chunk before asking for the next, and calls ``advance`` once it has. A session new to this reader,
        or whose path or sessions.json entry changed since, comes as (None, its path), new rows or not:
        the key its rows take may have changed. A store's (None, path) all come before its chunks, so
        their keys can be looked up together."""
        # The caller keys what a pass names before that pass ends (Pipeline._read_store), so an earlier
        # pass's names are never asked for again. Not dropped per store: a store with no new rows leaves
        # its sessions to be keyed with the next store's.
        self.named.clear()
        for root in self.roots:
            for store in stores(root):
                yield from self._store(root, store, max_line)

    def _store(self, root: str, store: str, max_line: int) -> Iterator[tuple[Chunk, str]]:
        # Listing a store's sessions reads its whole index: skipped while neither it, its WAL nor what
        # keys its sessions (the sessions folder beside it, and its sessions.json) changed.
        sessions_dir = sessions_beside(store)
        look = looks(store, f"{store}-wal", sessions_dir, os.path.join(sessions_dir, oc_transcript.INDEX_NAME))
        if look[0] is None or self.read_at.get(store) == look:
            return
        try:
            conn = open_store(store)
        except apsw.Error as exc:  # unreadable (its mode, say): told once, looked at again next pass
            self._unreadable(store, exc)
            return
        try:
            try:
                sessions = conn.execute(SESSIONS).fetchall()
            except apsw.Error as exc:
                self._unreadable(store, exc)
                return
            transcripts = oc_transcript.transcripts_in(sessions_dir)
            index = oc_transcript.index(sessions_dir)
            keyed = self.keyed.setdefault(store, {})
            listed_keys = None  # beside any of the sessions: they share the folder
            listed = []
            for session_id, last in sessions:
                if not isinstance(session_id, str) or not isinstance(last, int):
                    continue
                # Decoded as its JSONL file would be (an archive of it included), so the key it gets agrees.
                path = (transcripts.get(session_id) or [os.path.join(sessions_dir, f"{session_id}.jsonl")])[0]
                listed.append((session_id, last, path))
                entry = index.get(session_id)
                if entry is None and listed_keys is None:
                    listed_keys = frozenset(oc_transcript.listed_beside(path).items())
                # One sessions.json forgot may keep the key it had, until sessions.json lists another under it,
                # or take the one its children's entries say spawned them.
                seen = (path, entry if entry is not None else listed_keys)
                if keyed.get(session_id) != seen:
                    keyed[session_id] = seen
                    self.named[path] = (store, session_id)
                    yield None, path
            for session_id, last, path in listed:
                row = self._row(root, store, session_id, look[0])
                while row.offset <= last:
                    try:
                        page = conn.execute(_PAGE, (session_id, row.offset, max_line, _HEAD,
                                                    self.page_rows)).fetchall()
                    except apsw.Error as exc:
                        self._unreadable(store, exc)
                        return
                    if not page:
                        break
                    yield _chunk(row, page, functools.partial(transcripts.get, session_id, [])), path
            # A write in the same clock tick as the last one leaves size and mtime as they were: only a
            # look taken once the files had been quiet a while can vouch for having seen everything.
            # Nor can one taken while sessions.json could not be read: it may become readable unchanged.
            if time.time_ns() - max(s[3] for s in look if s is not None) > _QUIET_NS \
                    and not oc_transcript.index_unread(sessions_dir):
                self.read_at[store] = look
            self.failing.pop(store, None)
        finally:
            conn.close()

    def _unreadable(self, store: str, exc: apsw.Error) -> None:
        """Said once per new reason: a store its producer holds locked a moment is read next pass anyway."""
        reason = f"{type(exc).__name__}: {exc}"
        if self.failing.get(store) != reason and not isinstance(exc, apsw.BusyError):
            log.warning("transcript store %s cannot be read (%s); trying again next pass", store, reason)
        self.failing[store] = reason

    def _row(self, root: str, store: str, session_id: str, st: tuple[int, int, int, int]) -> FileRow:
        """The session's ``files`` row, named as the tailer names files (see ``ledger_name``)."""
        path = _row_path(store, session_id)
        row = self.rows.get(path)
        if row is None:
            fingerprint = hashlib.blake2b(session_id.encode(), digest_size=16).digest()
            row = self.rows[path] = self.writer.add_file(STORE_SOURCE, ledger_name(root), path, fingerprint, st[0],
                                                         st[1], 0, "live")
        return row

    def read_back(self, path: str, max_line: int) -> Iterator[Chunk]:
        """The rows already indexed of the session last named as due a key under the transcript ``path``
        (see ``chunks``), read again from its first: their facts decoded anew (see Pipeline._rederived).
        Nothing is advanced, and only their facts are taken. ReadBackFailed if the store cannot be read now
        (a producer holding it past the busy wait): see ``key_again``."""
        store, session_id = self.named.get(path, (None, None))
        row = self.rows.get(_row_path(store, session_id)) if store is not None else None
        if row is None or row.offset <= 0:
            return
        try:
            conn = open_store(store)
        except apsw.Error as exc:
            raise ReadBackFailed(f"{store}: {exc}") from None
        try:
            seq = 0
            while seq < row.offset:
                try:
                    page = conn.execute(_PAGE, (session_id, seq, max_line, _HEAD, self.page_rows)).fetchall()
                except apsw.Error as exc:
                    raise ReadBackFailed(f"{store}: {exc}") from None
                page = [r for r in page if r[0] < row.offset]
                if not page:
                    return
                chunk = _chunk(row, page, functools.partial(oc_transcript.copies_of, path))
                yield chunk
                seq = chunk.result.end
        finally:
            conn.close()

    def key_again(self, path: str) -> None:
        """The session last named under ``path`` is named as due a key again on the next pass (its key could
        not be given it now), though nothing in its store changed."""
        store, session_id = self.named.get(path, (None, None))
        if store is not None:
            self.keyed.get(store, {}).pop(session_id, None)
            self.read_at.pop(store, None)

    @staticmethod
    def advance(chunk: Chunk) -> None:
        chunk.row.offset = chunk.result.end
        chunk.row.size = max(chunk.row.size, chunk.size)


def _row_path(store: str, session_id: str) -> str:
    """A store session's ``files`` path, named as the tailer names files (see ``ledger_name``)."""
    return f"{ledger_name(store)}#{session_id}"


def _chunk(row: FileRow, page: list[tuple], transcripts: Callable[[], list[str]]) -> Chunk:
    """``transcripts``: the session's JSONL copies, asked for once a row needs them."""
    result = ReadResult()
    copies: list[str] | None = None
    for seq, body, length, head in page:
        if body is not None or length is None:  # an empty row is rejected as a blank line would be
            line = bytes(body or b"")
            entry = _idless(line)
            if entry is not None:
                if copies is None:
                    copies = transcripts()
                line = _copied_line(entry, copies) or line
            result.lines.append((seq, line))
        else:
            result.too_long.append((seq, length, bytes(head)))
    result.end = page[-1][0] + 1
    return Chunk(row=row, path=row.path, start=row.offset, result=result, size=result.end)


# A row whose id is among its first fields, before any nested value: a top-level key, seen without parsing the
# row, which the decoder parses anyway. (In valid JSON an unescaped quote followed by ``id":`` opens a key.)
_LEADING_ID = re.compile(rb'\{[^{\[]*?(?<!\\)"id":"[^"]')


def _idless(line: bytes) -> dict | None:
    """The entry of a row that carries no id of its own, which the decoder can only know by its bytes."""
    if _LEADING_ID.match(line):
        return None
    try:
        entry = jsontext.loads(line)
    except orjson.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) and not text(entry.get("id")) else None


def _copied_line(entry: dict, copies: list[str]) -> bytes | None:
    """The line of a JSONL copy holding the same entry as a row without an id, however each copy serializes it:
    read as that line, the row is the event the line is. The line's bytes, not a form both could be rewritten
    to, because ledgers already hold the ids of lines they read, and a file read again must find them.
    Only the lines holding the entry's timestamp are parsed."""
    stamp = entry.get("timestamp")
    if not isinstance(stamp, str):
        return None
    mark = orjson.dumps(stamp)
    for path in copies:
        try:
            fd = open_regular(path)
            if fd is None:  # named like a copy, and no file to read (a FIFO, say)
                continue
            with open(fd, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                hit = data.find(mark)
                while hit != -1:
                    start = data.rfind(b"\n", 0, hit) + 1
                    stop = data.find(b"\n", hit)
                    if stop == -1:  # a torn last line, not a line yet
                        break
                    line = data[start:stop]
                    with contextlib.suppress(orjson.JSONDecodeError):
                        if jsontext.loads(line) == entry:
                            return line
                    hit = data.find(mark, stop)
        except (OSError, ValueError):  # gone, or empty
            continue
    return None
