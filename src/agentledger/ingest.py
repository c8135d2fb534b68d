"""The ingest pipeline: tail → decode → ledger, a pass's batches of every file committed together."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from agentledger.defaults import HEAD_BYTES
from agentledger.facts import Fact, Reject
from agentledger.ledger.writer import ApplyResult, Batch, FileRow, LedgerWriter, OpenBatches
from agentledger.pricing import Pricer
from agentledger.sources import KEY_INPUTS, SKIPPED_HEADS, Decoder, asks_ledger, oc_transcript, opener_for
from agentledger.tail.layouts import LAYOUTS, kept_in_place
from agentledger.tail.tailer import DEFAULT_BATCH_LINES, DEFAULT_MAX_LINE, Chunk, Physical, ReadBackFailed, Tailer
from agentledger.tail.transcript_store import StoreReader, stores

log = logging.getLogger("agentledger.ingest")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    format: str
    roots: tuple[str, ...]


@dataclass(slots=True)
class IngestStats:
    lines: int = 0
    bytes: int = 0
    events: int = 0
    duplicates: int = 0
    rejects: int = 0
    files: int = 0
    rotated: int = 0
    truncated: int = 0
    lost_files: int = 0
    lost_bytes: int = 0
    unreadable_files: int = 0
    unreadable_dirs: int = 0

    def add(self, other: IngestStats) -> None:
        for name in ("lines", "bytes", "events", "duplicates", "rejects", "rotated", "truncated",
                     "lost_files", "lost_bytes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        # Every pass sees the same files again: how many there are, not a sum.
        for name in ("files", "unreadable_files", "unreadable_dirs"):
            setattr(self, name, max(getattr(self, name), getattr(other, name)))

    def as_dict(self) -> dict:
        return {
            "lines": self.lines, "bytes": self.bytes, "events": self.events,
            "duplicates": self.duplicates, "rejected_lines": self.rejects, "files": self.files,
            "rotations": self.rotated, "truncations": self.truncated, "lost_files": self.lost_files,
            "lost_bytes": self.lost_bytes, "unreadable_files": self.unreadable_files,
            "unreadable_dirs": self.unreadable_dirs,
        }


@dataclass(slots=True)
class _Pending:
    """What a pass applied to its open transaction and has not committed yet."""

    batches: OpenBatches | None = None
    chunks: list[Chunk] = field(default_factory=list)
    read: list[tuple[FileRow, Physical]] = field(default_factory=list)  # files read to where those chunks end
    settled: dict[int, tuple] = field(default_factory=dict)  # see Pipeline._settled
    lines: int = 0
    bytes: int = 0


class Pipeline:
    def __init__(
        self,
        writer: LedgerWriter,
        specs: list[SourceSpec],
        *,
        max_line: int = DEFAULT_MAX_LINE,
        batch_lines: int = DEFAULT_BATCH_LINES,
        stop: threading.Event | None = None,
        on_total: Callable[[int], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
        after_commit: Callable[[ApplyResult], None] | None = None,
        pricer: Pricer | None = None,
    ):
        self.writer = writer
        # The commands pass the pricer of their configuration; without one, the bundled table alone.
        self.pricer = pricer or Pricer()
        self.max_line = max_line
        self.batch_lines = batch_lines
        self.stop = stop or threading.Event()
        self.on_total = on_total
        self.on_progress = on_progress
        self.after_commit = after_commit
        self.tailers = [
            (Tailer(writer, spec.format, list(spec.roots), max_line=max_line, batch_lines=batch_lines),
             opener_for(spec.format),
             StoreReader(writer, list(spec.roots)) if spec.format == "oc-transcript" else None,
             asks_ledger(spec.format), KEY_INPUTS.get(spec.format))
            for spec in specs
        ]
        # file id → (what its decoder learnt its key from, the writer's rekey count then) when the ledger
        # last held its session as the decoder would: while both are so and it has nothing new, no decoder
        # is built for it (a full pass looks at every transcript, every rescan_s).
        self._settled: dict[int, tuple] = {}
        # Subagents whose own word on their spawn the ledger was asked for (see _keys_due), and given it by
        # decoding their lines again where it lacked it: once is enough. A word once told stays, and a header
        # that tells none (rejected, or cut) would otherwise be decoded again every pass.
        self._told_again: set[str] = set()

    def _batch(self, chunk: Chunk, decode: Decoder, prevails: bool = False) -> Batch:
        facts: list[tuple[int, int, Fact]] = []
        rejects: list[Reject] = []
        pricers = self.pricer.by_fact  # the facts that come without a cost and are priced here
        for off, line in chunk.result.lines:
            try:
                out = decode(line, off)
            except Exception as exc:  # a decoder bug must cost one line, never the stream
                out = Reject(offset=off, length=len(line), reason=f"decoder error: {type(exc).__name__}: {exc}"[:300],
                             head=line[:HEAD_BYTES])
            t = type(out)
            if t is Reject:
                rejects.append(out)
            elif t is list:
                for fact in out:
                    price = pricers.get(type(fact))
                    if price is not None:
                        price(fact)
                    facts.append((off, len(line), fact))
            else:
                price = pricers.get(t)
                if price is not None:
                    price(out)
                facts.append((off, len(line), out))
        skipped = SKIPPED_HEADS.get(chunk.row.source)
        for off, length, head in chunk.result.too_long:
            if skipped is not None and skipped(head):
                continue  # a line the decoder would skip unread is no fault for being long
            rejects.append(Reject(offset=off, length=length,
                                  reason=f"line of {length} bytes exceeds max_line ({self.max_line})", head=head))
        res = chunk.result
        return Batch(
            file_id=chunk.row.id, path=chunk.path, start_offset=chunk.start, end_offset=res.end,
            lines=chunk.lines, size=chunk.size, facts=facts, rejects=rejects, tail_len=chunk.tail_len,
            tail_hash=chunk.tail_hash, prevails=prevails,
        )

    def run_once(self, written: set[str] | None = None) -> IngestStats:
        """One scan of every source and a read of everything new; stops early when asked to.

        ``written``: the paths written to since the last pass, when that is all that happened
        (inotify says so): only those are looked at, unless one of them turns out to have been
        rotated or truncated, which takes a full scan of its source.

        The batches of all the files a pass reads over a source commit in one transaction, so a
        pass over many files costs one commit and one hot-view refresh rather than one per file;
        a transaction holds at most ``batch_lines`` lines (one chunk of a big file), so a backlog
        still commits in bounded pieces."""
        # Every archived transcript a pass decodes is keyed by the same spawns beside it: looked for once.
        with oc_transcript.one_look():
            return self._pass(written)

    def _pass(self, written: set[str] | None) -> IngestStats:
        stats = IngestStats()
        for tailer, opener, store, in_order, key_inputs in self.tailers:
            if store is not None:  # before the files: where both copies hold an entry, the store's row is indexed
                self._read_store(store, opener, stats)
            scanned = tailer.scan_written(written) if written is not None else None
            pairs, opened, report = scanned or tailer.scan()
            pending = _Pending()
            try:
                stats.files += report.files
                stats.rotated += report.rotated
                stats.truncated += report.truncated
                stats.lost_files += report.lost
                stats.lost_bytes += report.lost_bytes
                stats.unreadable_files += report.unreadable_files
                stats.unreadable_dirs += report.unreadable_dirs
                for name, path, nbytes in report.events:
                    level = logging.WARNING if name in ("lost", "truncate") else logging.INFO
                    log.log(level, "file %s: %s%s", name, path, f" ({nbytes} bytes unread)" if nbytes else "")
                if self.on_total:
                    self.on_total(sum(max(p.size - row.offset, 0) for row, p in pairs))
                for row, p in pairs:
                    if self.stop.is_set():
                        break
                    quiet = not tailer.has_news(row, p)
                    if quiet and (key_inputs is None  # its decoder would claim no key: nothing to do
                                  or self._settled.get(row.id) == (key_inputs(p.fs_path), self.writer.rekeys)):
                        pending.read.append((row, p))
                        continue
                    # Built per read from the path as it is now: a renamed file decodes the same.
                    decode = opener(p.fs_path, self.writer.run_at)
                    rekeys = self.writer.rekeys
                    if self._settle_key(pending, decode, partial(tailer.read_back, row, p)) and quiet:
                        pending.settled[row.id] = (decode.inputs, rekeys)
                    for chunk in tailer.read(row, p):
                        if pending.lines + chunk.lines > self.batch_lines:
                            self._commit(tailer, pending, stats)
                        self._apply(pending, chunk, decode, in_order)
                        # The tailer reads a file's next chunk only once this one is committed.
                        if chunk.result.end < p.size or self.stop.is_set():
                            self._commit(tailer, pending, stats)
                        if self.stop.is_set():
                            break
                    pending.read.append((row, p))
                # Now: the next source's scan records new files in transactions of its own.
                self._commit(tailer, pending, stats)
                stats.unreadable_files += tailer.record_unreadable()
                if written is None and not self.stop.is_set():  # a full scan: its files not listed are gone
                    listed = {row.id for row, _ in pairs}
                    self._settled = {fid: s for fid, s in self._settled.items()
                                     if fid in listed or fid not in tailer.rows}  # other sources' kept
            except BaseException as exc:
                if pending.batches is not None:
                    pending.batches.abandon(exc)
                raise
            finally:
                tailer.close(opened)
        return stats

    def _keys_due(self, decoders: list[Decoder]) -> tuple[list[tuple[str, str]], dict[str, str]]:
        """A decoder that learns its session's key from the files beside it (sources/__init__.py) may
        learn another one than it did before: once archived, a session leaves sessions.json. The
        ledger's key for the session is made the decoder's, whether or not there are lines to read,
        so a ledger that followed the session and one that reads it afresh agree, unless the decoder
        yields to the key the ledger holds. A subagent's own transcript tells its spawn once sessions.json
        names its parent, which may be after its lines were read under the key its parent's spawn gave:
        the key is the same, but the ledger, lacking the child's word, is given it again, so its lines
        are decoded anew (see _rederived). Returns the (session, key) pairs to give the ledger, and the
        keys it holds."""
        told = [d for d in decoders if _claims_key(d)]
        if not told:
            return [], {}
        held = self.writer.session_keys([d.session_id for d in told])
        due = [(d.session_id, d.session_key) for d in told
               if held.get(d.session_id, d.session_key) != d.session_key and not d.yields_to(held[d.session_id])]
        kept = [d for d in told if held.get(d.session_id) == d.session_key and _tells_spawn(d)
                and d.session_id not in self._told_again]
        if kept:
            untold = self.writer.untold_spawns([d.session_key for d in kept])
            self._told_again.update(d.session_id for d in kept)
            due += [(d.session_id, d.session_key) for d in kept if d.session_key in untold]
        return due, held

    def _settle_key(self, pending: _Pending, decode: Decoder, read_back: Callable[[], Iterator[Chunk]]) -> bool:
        """Give the ledger the decoder's key when due (see _keys_due), with what the lines already read
        (``read_back``) yield under it (see _rederived); says whether the ledger held the session as the
        decoder would have it, or the decoder claims no key. A session the ledger does not hold yet is
        not settled: another file's lines may bring it in under another key."""
        due, held = self._keys_due([decode])
        for pair in due:
            if pending.batches is None:
                pending.batches = self.writer.begin()
            try:
                pending.batches.rekey(*pair, self._rederived(decode, held[pair[0]], read_back))
            except ReadBackFailed as exc:
                log.info("session %s keeps its key until its lines can be read again (%s)", pair[0], exc)
                self._told_again.discard(pair[0])
                return False
        return not _claims_key(decode) or (not due and decode.session_id in held)

    def _rederived(self, decode: Decoder, held: str, read_back: Callable[[], Iterator[Chunk]]) -> Iterator[Batch]:
        """The lines read before a session was given another key were decoded under the one ``held``
        before (or under this one, before sessions.json named who spawned it): some facts only a key
        yields (a subagent's end, see FileDecoder.rederives) are missing, which a straight read of the
        file under its new key has. Those lines are decoded again, as
        batches for the transaction that changes the key (OpenBatches.rekey), so neither can be
        committed without the other. Only the facts a key gives are kept of them (FileDecoder.keyed): the rest
        were indexed when the lines were read. ``decode`` reads on from where they end, as a straight read would."""
        rederives = getattr(decode, "rederives", None)
        if rederives is None or not rederives(held):
            return
        for chunk in read_back():
            row = chunk.row
            facts = [item for item in self._batch(chunk, decode).facts if decode.keyed(item[2])]
            yield Batch(file_id=row.id, path=chunk.path, start_offset=row.offset, end_offset=row.offset, lines=0,
                        size=row.size, facts=facts, tail_len=row.tail_len, tail_hash=row.tail_hash)

    def _read_store(self, store: StoreReader, opener, stats: IngestStats) -> None:
        """A transcript store's new rows, one transaction per page (its checkpoint is the next ``seq``);
        the sessions the store names as due a key are keyed as their files would be (see _keys_due),
        together, before its rows are read."""
        due: list[Decoder] = []
        built: dict[str, Decoder] = {}  # the due sessions' decoders, which read their pages too
        decode, decoding = None, None
        for chunk, path in store.chunks(self.max_line):
            if chunk is None:
                built[path] = opener(path, self.writer.run_at)
                due.append(built[path])
                continue
            if due:
                self._rekey(due, stats, store)
                due = []
            if path != decoding:  # a session's pages come one after another, read as one file's chunks
                decode, decoding = built.pop(path, None) or opener(path, self.writer.run_at), path
            batch = self._batch(chunk, decode, prevails=True)  # the store's row wins over its JSONL copy
            result = self.writer.apply(batch)
            store.advance(chunk)
            rows = chunk.result  # offsets are row numbers (seq), so the bytes are counted
            self._committed(stats, result, batch.lines,
                            sum(len(line) for _, line in rows.lines) + sum(n for _, n, _ in rows.too_long))
            if self.stop.is_set():
                return
        if due:
            self._rekey(due, stats, store)

    def _rekey(self, decoders: list[Decoder], stats: IngestStats, store: StoreReader) -> None:
        """The store's sessions due a key keyed in one transaction, with what their rows already read
        yield under it (see _rederived)."""
        keys, held = self._keys_due(decoders)
        if not keys:
            return
        due = set(keys)
        opened = self.writer.begin()
        try:
            for decode in decoders:
                if _claims_key(decode) and (decode.session_id, decode.session_key) in due:
                    read_back = partial(store.read_back, decode.inputs.path, self.max_line)
                    try:
                        opened.rekey(decode.session_id, decode.session_key,
                                     self._rederived(decode, held[decode.session_id], read_back))
                    except ReadBackFailed as exc:
                        log.info("session %s keeps its key until its rows can be read again (%s)",
                                 decode.session_id, exc)
                        self._told_again.discard(decode.session_id)
                        store.key_again(decode.inputs.path)
            result = opened.commit()
        except BaseException as exc:
            opened.abandon(exc)
            raise
        self._committed(stats, result, 0, 0)

    def _apply(self, pending: _Pending, chunk: Chunk, decode: Decoder, in_order: bool) -> None:
        """``in_order``: the batch is written before the next is decoded (its decoder asks the
        ledger); otherwise the pass's batches are written together at the commit."""
        if pending.batches is None:
            pending.batches = self.writer.begin()
        batch = self._batch(chunk, decode)
        if in_order:
            pending.batches.apply(batch)
        else:
            pending.batches.add(batch)
        pending.chunks.append(chunk)
        pending.lines += batch.lines
        pending.bytes += batch.end_offset - batch.start_offset

    def _commit(self, tailer: Tailer, pending: _Pending, stats: IngestStats) -> None:
        if pending.batches is not None:
            result = pending.batches.commit()
            pending.batches = None
            for chunk in pending.chunks:
                tailer.advance(chunk)
            self._committed(stats, result, pending.lines, pending.bytes)
        for row, p in pending.read:
            tailer.finished(row, p)
        self._settled.update(pending.settled)
        pending.chunks.clear()
        pending.read.clear()
        pending.settled.clear()
        pending.lines = pending.bytes = 0

    def _committed(self, stats: IngestStats, result: ApplyResult, lines: int, nbytes: int) -> None:
        stats.lines += lines
        stats.bytes += nbytes
        stats.events += result.new_facts
        stats.duplicates += result.duplicate_facts
        stats.rejects += result.rejects
        if self.after_commit:
            self.after_commit(result)
        if self.on_progress:
            self.on_progress(nbytes)

    def listed_dirs(self) -> set[str]:
        """The directories the tailers' last full scans found files in, by the names they list them under."""
        return set().union(*(tailer.listed_dirs() for tailer, *_ in self.tailers))

    def empty_roots(self) -> list[tuple[str, str]]:
        """(format, root) for every root whose last full scan found nothing of its format, readable or
        not (a transcript store counts): most likely a root given in the wrong format, or none yet."""
        return [(tailer.source, root) for tailer, _, store, _, _ in self.tailers for root in tailer.empty_roots
                if store is None or not stores(root)]

    def catch_up(self, max_passes: int = 5) -> IngestStats:
        """Read until a pass finds nothing new (what was appended or rotated meanwhile too)."""
        total = IngestStats()
        with _rare_collections():
            for _ in range(max_passes):
                stats = self.run_once()
                total.add(stats)
                if stats.lines == 0 or self.stop.is_set():
                    break
        return total


def _claims_key(decode: Decoder) -> bool:
    return getattr(decode, "session_id", None) is not None and getattr(decode, "session_key", None) is not None


def _tells_spawn(decode: Decoder) -> bool:
    tells = getattr(decode, "tells_spawn", None)
    return tells is not None and tells()


@contextlib.contextmanager
def _rare_collections() -> Iterator[None]:
    """A batch's lines, facts and rows live until it commits, and at the default threshold (700
    new objects) the cycle collector walked them again and again while they grew, only to find
    them still alive: about a tenth of a catch-up. They are freed by reference counting, so the
    collector need not run as often while a backlog is read."""
    before = gc.get_threshold()
    gc.set_threshold(100_000, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def warn_empty_roots(pipeline: Pipeline, *, waiting: bool = False) -> None:
    """One line per root that holds nothing in its format, naming a format it does hold. ``waiting``: a
    daemon's, which reads what comes later, and tells of a root that does not exist yet on its own."""
    for fmt, root in pipeline.empty_roots():
        if waiting and not os.path.isdir(root):
            continue
        held = {other: files for other, layout in LAYOUTS.items()
                if other != fmt and (files := layout(Path(root), {}))}
        # Of the formats whose layout lists files here, the one whose files lie where its producer
        # keeps them is what the root holds; the first listed stands for a tie.
        named = sorted(held, key=lambda other: not any(kept_in_place(other, c.path) for c in held[other]))
        hint = f"; it holds {named[0]} files: read it as {named[0]}" if named else ""
        log.warning("%s holds no %s files%s%s", root, fmt, " yet: they are read once they appear" if waiting else "",
                    hint)


def specs_from(fmt: str, roots: list[str | Path]) -> list[SourceSpec]:
    return [SourceSpec(fmt, tuple(str(Path(r).expanduser()) for r in roots))]


def specs_from_pairs(pairs: list[tuple[str, str | Path]]) -> list[SourceSpec]:
    """(format, root) pairs, as flags or a config file list them → one spec per format, in first-seen order."""
    by_format: dict[str, list[str]] = {}
    for fmt, root in pairs:
        opener_for(fmt)  # an unknown format is refused before anything is read
        roots = by_format.setdefault(fmt, [])
        path = str(Path(root).expanduser())
        if path not in roots:
            roots.append(path)
    return [SourceSpec(fmt, tuple(roots)) for fmt, roots in by_format.items()]
