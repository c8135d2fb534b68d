"""Matching files on disk to the ledger's checkpoints, and reading what is new.

Each scan lists the files of every root, identifies them (see identity.py) and
decides, per known file, what happened since the last look: appended, renamed
by rotation, copied then truncated, truncated in place, replaced on a reused
inode, or deleted (with unread bytes counted as lost). Reading then goes
through the descriptors opened during the scan, so a rotation between scan and
read cannot make us read the wrong file. A scan holds at most half the
descriptor limit: a file past that is opened again to be read, and read only
while its path still holds the file the scan saw (else the next scan finds where it
went; one deleted in between is past reading, its unread bytes counted as lost).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agentledger.defaults import DEFAULT_MAX_LINE
from agentledger.faults import fault
from agentledger.ledger.writer import FileRow, LedgerWriter, Unreadable
from agentledger.regular import open_regular
from agentledger.tail.identity import fingerprint, hash_tail, holds_checkpoint
from agentledger.sources import UNREAD_BESIDE
from agentledger.sources.common import ledger_name
from agentledger.tail.layouts import LAYOUTS, Candidate
from agentledger.tail.reader import ReadResult, read_lines

# Big batches make catch-up cheap (fewer commits); live appends come in small ones anyway.
DEFAULT_BATCH_LINES = 20_000
ACTIVE = ("live", "rotated")
log = logging.getLogger("agentledger.tail")
# path -> the reason last warned of, for what this process could not read: every pass looks at every
# path again, and a pipeline built anew after a stall would otherwise warn again.
_TOLD: dict[str, str] = {}
# What opening a listed file can fail with because it is no longer there: a race with a rename or a delete.
_GONE = (errno.ENOENT, errno.ENOTDIR)


class OutOfDescriptors(OSError):
    """A file a pass must look at could not be opened for want of a descriptor: nothing of it is
    settled (taken for gone, it would count as lost), and a later pass or run with more reads on."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def _open_fd(path: str) -> int | None:
    """A descriptor of the file at ``path``; None if it is no regular file (see regular.py)."""
    try:
        return open_regular(path)
    except OSError as exc:
        if exc.errno == errno.EMFILE:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            raise OutOfDescriptors(exc.errno, f"too many open files, {limit} being this process's limit: raise it "
                                   "(ulimit -n, or LimitNOFILE= in a systemd unit)", path) from None
        if exc.errno == errno.ENFILE:
            raise OutOfDescriptors(exc.errno, "too many open files in the system: raise its limit "
                                   "(sysctl fs.file-max)", path) from None
        raise


class ReadBackFailed(Exception):
    """Lines already read could not be read again now (see Tailer.read_back): a later pass tries again."""


@dataclass(slots=True)
class Physical:
    """One file on disk as seen by a scan, with a descriptor held open until the read is done (-1 if
    none is held: see ``_opened``)."""

    path: str  # as the ledger records it (see ``ledger_name``)
    fs_path: str  # as the file system knows it: where its decoder looks for the files beside it
    root: str  # as the ledger records it too
    live: bool
    order: tuple
    fd: int
    dev: int
    ino: int
    size: int
    mtime_ns: int
    fp: bytes | None
    unchanged: bool = False  # since it was read to its end: not opened at all

    @property
    def status(self) -> str:
        """The status of its ledger row: the file still written, or one rotated away."""
        return "live" if self.live else "rotated"


@dataclass(slots=True)
class Chunk:
    """Complete lines read from one file, not yet committed."""

    row: FileRow
    path: str
    start: int
    result: ReadResult
    size: int
    tail_len: int = 0  # the last bytes read, which the checkpoint keeps a hash of (see FileRow)
    tail_hash: bytes | None = None

    @property
    def lines(self) -> int:
        return len(self.result.lines) + len(self.result.too_long)


@dataclass(slots=True)
class ScanReport:
    files: int = 0
    rotated: int = 0
    truncated: int = 0
    lost: int = 0
    lost_bytes: int = 0
    unreadable_files: int = 0
    unreadable_dirs: int = 0
    events: list[tuple[str, str, int | None]] = field(default_factory=list)  # (event, path, bytes)


TAIL_BYTES = 65536  # of the last line read, what a checkpoint keeps a hash of


def _tail(fd: int, res: ReadResult) -> tuple[int, bytes | None]:
    """Length and hash of the last line ``res`` consumed (its last TAIL_BYTES), read back from the file."""
    starts = [items[-1][0] for items in (res.lines, res.too_long) if items]
    n = min(res.end - max(starts), TAIL_BYTES) if starts else 0
    data = os.pread(fd, n, res.end - n) if n else b""
    return (n, hash_tail(data)) if n and len(data) == n else (0, None)


def _reads_on(p: Physical, row: FileRow) -> bool:
    """Whether reading can go on at the row's checkpoint: the file still holds there the last line
    read (``holds_checkpoint``). Unchanged since read to its end, it is taken to; so is one no longer
    at its path, which the read finds so too and reads nothing of."""
    if row.offset == 0 or p.unchanged:
        return True
    with _opened(p) as fd:
        return fd is None or holds_checkpoint(fd, row.offset, row.tail_len, row.tail_hash)


def _reopen(p: Physical) -> int | None:
    """A descriptor of the file the scan saw, by its path again: None if the path holds another now."""
    fd = _open_fd(p.fs_path)
    if fd is None:
        return None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) == (p.dev, p.ino):
        return fd
    os.close(fd)
    return None


@contextmanager
def _opened(p: Physical, failed: type[Exception] | None = None) -> Iterator[int | None]:
    """The descriptor the scan holds of ``p``, else one opened again (``_reopen``) for the block; None if
    that fails: renamed, gone or unreadable since, which the next scan tells. Out of descriptors raises:
    a pass that went on without the file would take what it holds as read. A caller that must know the
    lines could not be read (``failed``) has that raised instead, whatever the reason; None still means
    the path holds another file now."""
    if p.fd >= 0:
        yield p.fd
        return
    try:
        fd = _reopen(p)
    except OSError as exc:
        if failed is not None:
            raise failed(f"{p.path}: {exc}") from None
        if isinstance(exc, OutOfDescriptors):
            raise
        fd = None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _raise_fd_limit() -> int:
    """A scan holds changed files open until they are read, so a catch-up over thousands of files
    needs thousands of descriptors: take the hard limit, not the soft default (often 1024). Returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class Tailer:
    """Follows every file of one source format under its roots."""

    def __init__(
        self,
        writer: LedgerWriter,
        source: str,
        roots: list[str | Path],
        *,
        max_line: int = DEFAULT_MAX_LINE,
        batch_lines: int = DEFAULT_BATCH_LINES,
        batch_bytes: int = 16 * 1024 * 1024,
    ):
        # What a scan may hold: the other half is for the rest of the process (the ledger, HTTP
        # connections, the files read past it, opened again one at a time).
        self._hold = _raise_fd_limit() // 2
        self.writer = writer
        self.source = source
        self._given = [os.path.expanduser(r) for r in roots]
        self.roots: list[str] = []
        self._ledger_roots: set[str] = set()
        self._resolve()
        self.layout = LAYOUTS[source]
        self.max_line = max_line
        self.batch_lines = batch_lines
        self.batch_bytes = batch_bytes
        self.rows: dict[int, FileRow] = {}
        self.by_fp: dict[bytes, list[FileRow]] = {}
        for row in writer.load_files(source):
            self._remember(row)
        self._first_scan = True
        self._pending_long: dict[int, tuple[int, int]] = {}
        # (dev, ino) -> (size, mtime_ns, fp) of files already read to their end.
        self._unchanged: dict[tuple[int, int], tuple[int, int, bytes]] = {}
        self._listed: dict[str, tuple[str, Candidate]] = {}  # path -> (root, candidate) at the last listing
        self._recorded = writer.unreadable_inputs(source)  # as the ledger lists them
        # What the scan under way could not read (by path as the ledger names it), and the inodes of those
        # files that could be told, with their sizes: a followed file among them is neither gone nor lost.
        self._unreadable: dict[str, Unreadable] = {}
        self._unread_inodes: dict[tuple[int, int], int] = {}
        self._beside = UNREAD_BESIDE.get(source)  # None for a format whose decoders read nothing beside its files
        self._beside_listed: set[str] = set()  # what the ledger lists of what they could not read
        self.empty_roots: list[str] = []  # roots whose last listing found nothing, readable or not

    # -- scanning ----------------------------------------------------------------
    def _resolve(self) -> None:
        """Each root as it leads now, looked at again by every full scan: one that is a symlink is read where it
        points at this scan, as a one-shot read of it would be. What was read where it led before stays as it
        was read: the files there are those of another root now, neither gone nor lost. os.path.realpath, not
        Path.resolve(), which raises on a symlink loop: listing the root tells it."""
        roots = [os.path.realpath(r) for r in self._given]
        if roots != self.roots:
            self.roots = roots
            self._ledger_roots = {ledger_name(r) for r in roots}

    def _list(self) -> list[tuple[str, Candidate]]:
        found = []
        self.empty_roots = []
        for root in self.roots:
            unlistable: dict[str, str] = {}
            listed = self.layout(Path(root), unlistable)
            if not listed and not unlistable:
                self.empty_roots.append(root)
            found.extend((root, c) for c in listed)
            for path, why in unlistable.items():
                self._unreadable[ledger_name(path)] = Unreadable(ledger_name(root), "directory", why)
        self._listed = {c.path: (root, c) for root, c in found}
        return found

    def listed_dirs(self) -> set[str]:
        """The directories the last full scan found files in."""
        return {os.path.dirname(path) for path in self._listed}

    def _cannot_read(self, root: str, cand: Candidate, exc: OSError, st: os.stat_result | None = None) -> None:
        """A listed file that is there and cannot be read (its mode, an I/O error): kept for the scan to tell."""
        self._unreadable[ledger_name(cand.path)] = Unreadable(ledger_name(root), "file", exc.strerror or str(exc))
        if st is not None:
            self._unread_inodes[(st.st_dev, st.st_ino)] = st.st_size

    def _open(self, root: str, cand: Candidate, hold: bool = True) -> Physical | None:
        """The file as it is now; its descriptor held open if ``hold``."""
        try:
            st = os.stat(cand.path)
        except OSError as exc:
            if exc.errno not in _GONE:
                self._cannot_read(root, cand, exc)
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        known = self._unchanged.get((st.st_dev, st.st_ino))
        if known is not None and known[0] == st.st_size and known[1] == st.st_mtime_ns:
            return Physical(ledger_name(cand.path), cand.path, ledger_name(root), cand.live, cand.order, -1, st.st_dev,
                            st.st_ino, st.st_size, st.st_mtime_ns, known[2], unchanged=True)
        try:
            fd = _open_fd(cand.path)
        except OSError as exc:
            if isinstance(exc, OutOfDescriptors):
                raise  # the file is there: taking it for gone would settle it as lost
            if exc.errno not in _GONE:
                self._cannot_read(root, cand, exc, st)
            return None
        if fd is None:  # no longer a regular file since the stat
            return None
        try:
            st = os.fstat(fd)
            fp = fingerprint(fd)
        except OSError as exc:
            os.close(fd)
            self._cannot_read(root, cand, exc, st)
            return None
        if not hold:
            os.close(fd)
            fd = -1
        return Physical(ledger_name(cand.path), cand.path, ledger_name(root), cand.live, cand.order, fd, st.st_dev,
                        st.st_ino, st.st_size, st.st_mtime_ns, fp)

    def _snapshot(self) -> list[Physical]:
        found: list[Physical] = []
        held = 0
        try:
            for root, cand in self._list():
                p = self._open(root, cand, hold=held < self._hold)
                if p is not None:
                    found.append(p)
                    held += p.fd >= 0
        except BaseException:
            self.close(found)  # out of descriptors, most likely: held on to, they would keep it so
            raise
        return found

    @staticmethod
    def close(physicals: list[Physical]) -> None:
        for p in physicals:
            if p.fd >= 0:
                os.close(p.fd)
                p.fd = -1

    def scan(self) -> tuple[list[tuple[FileRow, Physical]], list[Physical], ScanReport]:
        """Identify every file; returns (readable pairs oldest first, all opened files, report).

        A file on disk is the known file with the same inode and first line. Failing that,
        it continues a known file with the same first line whose inode no longer holds it
        (renamed across filesystems, copied then truncated, restored). Otherwise it is new.
        The caller reads the pairs, then passes the opened files to ``close``; a scan that fails closes
        them itself.
        """
        self._unreadable, self._unread_inodes = {}, {}
        self._resolve()
        physicals = self._snapshot()
        try:
            return self._pair(physicals)
        except BaseException:
            self.close(physicals)
            raise

    def _pair(self, physicals: list[Physical]) -> tuple[list[tuple[FileRow, Physical]], list[Physical], ScanReport]:
        report = ScanReport()
        claimed: dict[int, Physical] = {}
        unmatched: list[Physical] = []
        inodes: set[tuple[int, int]] = set()
        for p in physicals:
            if p.fp is None or (p.dev, p.ino) in inodes:
                continue  # no complete first line yet, or a second name (hard link) of one file
            inodes.add((p.dev, p.ino))
            row = self._same_inode(p)
            if row is not None and row.id not in claimed:
                claimed[row.id] = p
            else:
                unmatched.append(p)
        new: list[Physical] = []
        by_fp: dict[bytes, list[Physical]] = {}
        for p in unmatched:
            by_fp.setdefault(p.fp, []).append(p)
        for fp, same in by_fp.items():
            group = sorted(same, key=self._preference, reverse=True)
            heirs = sorted((r for r in self.by_fp.get(fp, ()) if r.id not in claimed and r.status in ACTIVE),
                           key=lambda r: r.id, reverse=True)
            for row, p in zip(heirs, group):
                claimed[row.id] = p
            new.extend(group[len(heirs):])
        held: dict[bytes, int] = {}
        for p in physicals:
            if p.fp is not None:
                held[p.fp] = max(held.get(p.fp, 0), p.size)
        pairs = []
        for row_id, p in claimed.items():
            row = self.rows[row_id]
            self._follow(row, p, held, report)
            pairs.append((row, p))
        for p in new:
            pairs.append((self._new_file(p, report), p))
        if self._unread_inodes:
            self._grown_unread()
        missing = [r for r in self.rows.values() if r.status in ACTIVE and r.root in self._ledger_roots
                   and r.id not in claimed and not self._unread(r)]
        if missing:
            # A rename racing the directory listing can hide a file for one listing: look again,
            # one file at a time (the first look's files held open, or known by device and inode). A copy another row
            # follows is no such file: a copy taken before its original was truncated (logrotate's
            # copytruncate, seen between the two) is a file of its own, and the original is gone.
            followed = {(p.dev, p.ino) for p in claimed.values()}
            seen_again = set()
            for root, cand in self._list():
                p = self._open(root, cand, hold=False)
                if p is not None and (p.dev, p.ino) not in followed:
                    seen_again.add(p.fp)
            places = {(p.dev, p.ino, p.path) for p in physicals}
            for row in missing:
                if row.fingerprint not in seen_again:
                    self._vanished(row, held, places, report)
        self._first_scan = False
        report.files = len(pairs)
        self._tell_unreadable(report)
        pairs.sort(key=lambda rp: rp[1].order)
        return pairs, physicals, report

    def _unread(self, row: FileRow) -> bool:
        """Whether a followed file the listing did not find may be one that could not be read: its
        inode or its path, or a directory above it. Its bytes are still there, to be read from its
        checkpoint once they can be: neither gone nor lost."""
        return ((row.dev, row.ino) in self._unread_inodes or row.path in self._unreadable
                or any(row.path.startswith(path + os.sep) for path, u in self._unreadable.items()
                       if u.kind == "directory"))

    def _grown_unread(self) -> None:
        """A followed file that cannot be read keeps the size it was seen at (``inputs`` shows it): what it
        holds past its checkpoint is unread, and lost if it goes before it can be read."""
        for row in self.rows.values():
            size = self._unread_inodes.get((row.dev, row.ino), 0)
            if row.status in ACTIVE and size > row.size:
                row.size = size
                self.writer.update_file(row)

    def _tell_unreadable(self, report: ScanReport) -> None:
        """Count what the scan could not read, and warn of each path once per reason."""
        for path, u in self._unreadable.items():
            if u.kind == "file":
                report.unreadable_files += 1
            else:
                report.unreadable_dirs += 1
            if _TOLD.get(path) != u.reason:
                _TOLD[path] = u.reason
                what = "read file" if u.kind == "file" else "list directory"
                log.warning("cannot %s %s: %s; what is in it is indexed once it can be read", what, path, u.reason)

    def record_unreadable(self) -> int:
        """Have the ledger list (``inputs``) what the last full scan could not read, and what the format's
        decoders could not read beside the files under these roots (an OpenClaw sessions.json): called once
        a pass's reads are done, as the decoders look at those only as they read. Written only when it
        changed, as a pass looks at every path again. Returns how many of the decoders' there are."""
        beside = self._beside_unreadable()
        found = self._unreadable | beside
        mine = {path: u for path, u in self._recorded.items() if u.root in self._ledger_roots}
        for path in mine.keys() - found.keys():
            _TOLD.pop(path, None)
            if path not in self._beside_listed:  # the decoders, who warned of it, tell that themselves
                log.info("%s can be read again, or is gone", path)
        self._beside_listed = set(beside)
        if mine != found:
            self.writer.record_unreadable(self.source, self._ledger_roots, found)
            self._recorded = {path: u for path, u in self._recorded.items() if path not in mine} | found
        return len(beside)

    def _beside_unreadable(self) -> dict[str, Unreadable]:
        """The decoders' files that could not be read (see ``record_unreadable``), by path under the root
        they lie in. The decoders were given paths as these roots list them (resolved, see ``_resolve``):
        resolving them again would take one in an agent folder linked from elsewhere out of its root. One
        that is gone since is no longer listed: the decoders forget it only when they look at its folder."""
        found = {}
        for path, why in (self._beside() if self._beside else {}).items():
            root = next((r for r in self.roots if path.startswith(r + os.sep)), None)
            # Another root's, or another ledger's in this process, is not this tailer's to list.
            if root is not None and os.path.lexists(path):
                found[ledger_name(path)] = Unreadable(ledger_name(root), "file", why)
        return found

    def scan_written(self, paths: set[str]) -> tuple[list[tuple[FileRow, Physical]], list[Physical], ScanReport] | None:
        """Like ``scan``, over only the files inotify saw written to since the last pass, when each
        is a known file at its known place that only grew; None when anything else happened (a
        rotation, a truncation, a new first line), for the caller to scan in full.

        A write to a path the last listing did not hold changes nothing this format follows:
        whether a file is followed depends on its name and place, and naming a file (creating,
        moving) is an event of its own that calls for a full scan."""
        if self._first_scan:
            return None
        physicals: list[Physical] = []
        pairs = []
        held = 0
        try:
            for path in paths:
                listed = self._listed.get(path)
                if listed is None:
                    continue
                p = self._open(*listed, hold=held < self._hold)
                if p is None:
                    self.close(physicals)
                    return None
                physicals.append(p)
                held += p.fd >= 0
                if p.fp is None:
                    continue  # no complete first line yet: a full scan would not pair it either
                row = self._same_inode(p)
                if (row is None or row.path != p.path or p.size < row.offset
                        or not _reads_on(p, row) or row.status != p.status):
                    self.close(physicals)
                    return None
                pairs.append((row, p))
        except BaseException:
            self.close(physicals)
            raise
        pairs.sort(key=lambda rp: rp[1].order)
        return pairs, physicals, ScanReport(files=len(pairs))

    def _same_inode(self, p: Physical) -> FileRow | None:
        for row in self.by_fp.get(p.fp, ()):
            if (row.dev, row.ino) == (p.dev, p.ino):
                return row
        return None

    @staticmethod
    def _preference(p: Physical) -> tuple:
        """Of several copies of one file, continue with the one still being written, else the largest."""
        return (p.live, p.size)

    def _new_file(self, p: Physical, report: ScanReport) -> FileRow:
        row = self.writer.add_file(self.source, p.root, p.path, p.fp, p.dev, p.ino, p.size,
                                   p.status)
        self._remember(row)
        return row

    def _remember(self, row: FileRow) -> None:
        self.rows[row.id] = row
        self.by_fp.setdefault(row.fingerprint, []).append(row)

    def _follow(self, row: FileRow, p: Physical, held: dict[bytes, int], report: ScanReport) -> None:
        """Move a known file's row to where it is now; ``held`` as ``_unread_bytes`` takes it."""
        event, unread = None, 0
        came_back = row.status not in ACTIVE
        same_inode = (row.dev, row.ino) == (p.dev, p.ino)
        shorter = p.size < row.offset
        if shorter or not _reads_on(p, row):
            # The same first line written again (truncated in place, or an older copy put back) and
            # maybe written to since: where it parts from what was read is unknown, so it is read
            # from its start and the lines indexed before are found by their ids.
            detail = f"size {p.size} < offset {row.offset}" if shorter else \
                f"the line read last is no longer before offset {row.offset}"
            unread = self._unread_bytes(row, held)
            event = ("truncate", unread or None, detail)
            report.truncated += 1
            row.offset = row.lines = row.tail_len = 0
            row.tail_hash = None
            self._pending_long.pop(row.id, None)  # what a long line was scanned to is gone with it
            row.size = p.size  # what it held before is gone: kept, it would count as unread
        elif row.path != p.path or not same_inode:
            if row.status == "live" and not p.live:
                event = ("rotate", None, f"from {row.path}")
                report.rotated += 1
            elif not same_inode:
                event = ("copy", None, f"continued from {row.path} in a copy")
            else:
                event = ("move", None, f"from {row.path}")
        status = p.status
        changed = (event is not None or row.status != status or row.root != p.root)
        row.path, row.dev, row.ino, row.root, row.status = p.path, p.dev, p.ino, p.root, status
        if p.size > row.size:
            row.size = p.size
        if changed:
            if came_back:
                row.lost_bytes = None  # settled as lost or gone, and on disk after all
            if unread:
                self._lose(row, unread, report)
            self.writer.update_file(row, event)
            if event:
                report.events.append((event[0], p.path, event[1]))
                if event[0] == "rotate":
                    fault("after_rotate")

    def _unread_bytes(self, row: FileRow, held: dict[bytes, int]) -> int:
        """What a file held that is gone from it (deleted, or truncated in place) and was read neither from it
        nor from a copy of it (the same first line), such as logrotate's copytruncate leaves: what a copy was
        read to, or holds on disk to be read (in this pass, perhaps after its original is settled, or the
        next), was not lost. ``held``: the largest size on disk per first line."""
        read = [r.offset for r in self.by_fp[row.fingerprint]]
        return max(row.size - max(read + [held.get(row.fingerprint, 0)]), 0)

    @staticmethod
    def _lose(row: FileRow, unread: int, report: ScanReport) -> None:
        """Count bytes a file lost before they were read: on its row, added to what it lost before (truncated
        again, or deleted once truncated), and in the report."""
        row.lost_bytes = (row.lost_bytes or 0) + unread
        report.lost += 1
        report.lost_bytes += unread

    def _vanished(self, row: FileRow, held: dict[bytes, int], places: set[tuple[int, int, str]],
                  report: ScanReport) -> None:
        """Settle a known file whose content is no longer on disk; ``places``: (device, inode, path) of
        every file on disk."""
        unread = self._unread_bytes(row, held)
        was_live = row.status == "live"
        replaced = (row.dev, row.ino, row.path) in places
        if replaced:
            # Same inode at the same path with another first line: truncated (and maybe rewritten),
            # or deleted and recreated on a reused inode. Either way the old content is gone.
            row.status = "truncated"
            detail = "first line changed: content replaced"
            if self._first_scan and was_live and not unread:
                detail += " while agentledger was not running; unread bytes unknown"
            event = ("truncate", unread or None, detail)
            report.truncated += 1
        elif unread:
            row.status = "lost"
            event = ("lost", unread, "deleted before it was read to the end")
        elif self._first_scan and was_live:
            row.status = "lost"
            report.lost += 1
            event = ("lost", None, "vanished while agentledger was not running; unread bytes unknown")
        else:
            row.status = "gone"
            event = None
        if unread:
            self._lose(row, unread, report)
        self.writer.update_file(row, event)
        if event:
            report.events.append((event[0], row.path, event[1]))

    # -- reading -----------------------------------------------------------------
    def has_news(self, row: FileRow, p: Physical) -> bool:
        """Whether ``read`` may find lines: not if the file is unchanged since it was read to its end
        (``finished`` remembers it), or holds no more than was read."""
        return not p.unchanged and (p.size > row.offset or row.id in self._pending_long)

    def read(self, row: FileRow, p: Physical) -> Iterator[Chunk]:
        """Chunks of complete lines from the row's offset; call ``advance`` after committing each."""
        if not self.has_news(row, p):
            return
        with _opened(p) as fd:
            if fd is None:
                return
            while True:
                start = row.offset
                res = read_lines(
                    fd, start,
                    max_lines=self.batch_lines, max_bytes=self.batch_bytes, max_line=self.max_line,
                    resume_long=self._pending_long.get(row.id),
                )
                if res.pending_long is not None:
                    self._pending_long[row.id] = res.pending_long
                else:
                    self._pending_long.pop(row.id, None)
                if res.end == start:
                    return
                if fingerprint(fd) != row.fingerprint:
                    return  # truncated and rewritten since the scan: these lines belong to the file it is now
                yield Chunk(row, p.path, start, res, max(p.size, res.end), *_tail(fd, res))
                if row.offset != res.end:
                    return  # the caller did not commit; stop rather than skip lines
                if res.end >= p.size and res.pending_long is None:
                    return  # all the scan saw: what was written since, the next pass reads

    def read_back(self, row: FileRow, p: Physical) -> Iterator[Chunk]:
        """Chunks of the complete lines before the row's checkpoint, read again from the file's start:
        their facts decoded anew (see Pipeline._rederived). Nothing is advanced, and only their facts are
        taken. Nothing, if the file is no longer the one the row follows;
        ReadBackFailed if it cannot be read now (renamed or unreadable since the scan)."""
        with _opened(p, ReadBackFailed) as fd:
            if fd is None or fingerprint(fd) != row.fingerprint:
                return
            start, end = 0, row.offset
            while start < end:
                res = read_lines(fd, start, max_lines=self.batch_lines, max_bytes=self.batch_bytes,
                                 max_line=self.max_line)
                if res.end == start:
                    return  # shorter than its checkpoint: the next scan sees the truncation
                res.lines = [(off, line) for off, line in res.lines if off < end]
                res.end = min(res.end, end)
                yield Chunk(row, p.path, start, res, row.size, row.tail_len, row.tail_hash)
                start = res.end

    def advance(self, chunk: Chunk) -> None:
        chunk.row.offset = chunk.result.end
        chunk.row.tail_len, chunk.row.tail_hash = chunk.tail_len, chunk.tail_hash
        chunk.row.lines += chunk.lines
        if chunk.size > chunk.row.size:
            chunk.row.size = chunk.size

    def finished(self, row: FileRow, p: Physical) -> None:
        """Remember a file read to its end so an unchanged one is not reopened next scan."""
        if row.offset >= p.size and row.id not in self._pending_long and p.fp is not None:
            self._unchanged[(p.dev, p.ino)] = (p.size, p.mtime_ns, p.fp)
