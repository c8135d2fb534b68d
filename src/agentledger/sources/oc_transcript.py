"""Decoder for OpenClaw session transcripts (FORMATS.md §2).

One transcript file is one session: ``agents/<agentId>/sessions/<sessionId>.jsonl``, kept
under ``<sessionId>.jsonl.reset.<ts>`` / ``.deleted.<ts>`` once archived. Who the lines
belong to comes from the path and from ``sessions.json`` beside it, never from lines read
before, so a read that resumes mid-file (after a restart or a rename) decodes as a
straight read would. ``sessions.json``'s token and cost fields are last-run snapshots and
are never read.

A session's key is the one ``sessions.json`` lists it under. A transcript it no longer lists (an
archive, or a live one whose entry OpenClaw's maintenance pruned) takes the key the files beside it still name: the subagent key its parent's spawn names,
or else the ``spawnedBy`` that ``sessions.json`` still lists the children of its own spawns
under (it was that key's session when it spawned them; only a key of its own agent, and of
several, the one its earliest answered spawn's child names); with neither, a key of its
own, ``agent:<agentId>:<sessionId>``. Only what is on disk now names an archive's key,
never what the ledger read before, so a session followed while live and then archived
takes the archive's key too, and a guess again once the children that named its key leave
``sessions.json``: a ledger that followed it and one that reads the same files afresh
agree. A subagent is the exception: the key its parent gave it names it better than one
guessed once it left sessions.json, so the ledger keeps it until sessions.json lists
another session under it (``yields_to``).

Each user message starts a run (a turn); each assistant line is one LLM call with the
producer's own cost estimate; ``toolCall`` blocks pair with ``toolResult`` lines.

A subagent's transcript archived after it ended is no longer in ``sessions.json``; what
still names it is its parent's ``sessions_spawn`` call (the task, when it was asked) and
result (the child's session key). The child's first user message is that task, and its
header was written while the spawn was being answered: the decoder matches the two by
reading the transcripts beside it on disk, and the rows of the sessions OpenClaw's SQLite store
keeps with no transcript there, so which file the ledger reads first does not matter. Nothing writes that a subagent ended either: the end of its turn (a final stop reason
in its own transcript) is its end.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import mmap
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from agentledger import jsontext
from agentledger.facts import (
    Compaction,
    Fact,
    LlmCall,
    Marker,
    RawEvent,
    Reject,
    RunEnded,
    RunStarted,
    SessionStarted,
    SubagentEnded,
    SubagentSpawned,
    Tokens,
    ToolEnded,
    ToolStarted,
)
from agentledger.ledger.rollups import is_subagent_key
from agentledger.regular import open_regular, read_regular
from agentledger.sources import oc_store
from agentledger.sources.common import (
    RunLookup,
    RunTracker,
    agent_from_key,
    agents_dir,
    count,
    derived_id,
    duration,
    error_text,
    integer,
    iso_ms,
    json_object,
    ledger_name,
    line_id,
    logged_cost,
    reject,
    text,
    tool_target,
)

log = logging.getLogger("agentledger.ingest")

SOURCE = "oc-transcript"
INDEX_NAME = "sessions.json"
SPAWN_TOOL = "sessions_spawn"
# <sessionId>[-topic-<id>].jsonl, optionally archived as .reset.<ts> / .deleted.<ts>. A topic id may hold
# dots (OpenClaw encodes it with encodeURIComponent, and a Slack thread's ts is one): it ends at the first
# ".jsonl" the rest of the name reads after.
_NAME = re.compile(r"^(?P<id>.+?)(?:-topic-.+?)?\.jsonl(?:\.(?P<archive>reset|deleted)\.(?P<at>.+))?$")
# An archive's time: ISO 8601 with dashes for the colons a file name may not hold, or Unix ms.
_ARCHIVED_AT = re.compile(r"(?P<day>\d{4}-\d\d-\d\d)T(?P<h>\d\d)-(?P<m>\d\d)-(?P<s>\d\d(?:\.\d+)?Z)|(?P<ms>\d{10,})")
# Stop reasons after which the turn is over (toolUse continues it with the tools' results), and the
# outcome each gives a subagent whose turn it is, in the words of telemetry's subagent.end.
_OUTCOMES = {"stop": "ok", "length": "ok", "error": "error", "aborted": "killed"}
_MARKERS = frozenset({"model_change", "thinking_level_change", "custom", "branch_summary", "label",
                      "session_info", "custom_message"})


def session_id_of(name: str) -> str | None:
    m = _NAME.match(name)
    return m["id"] if m else None


def is_transcript(name: str) -> bool:
    return _NAME.match(name) is not None and not name.endswith(".lock")


def transcripts_in(folder: str) -> dict[str, list[str]]:
    """session id → its JSONL transcripts in the folder, live or archived, in name order."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    out: dict[str, list[str]] = {}
    for name in names:
        sid = session_id_of(name) if is_transcript(name) else None
        if sid is not None:
            out.setdefault(sid, []).append(os.path.join(folder, name))
    return out


def copies_of(path: str) -> list[str]:
    """The transcripts of the session ``path`` is one of (it among them if it is still there)."""
    folder, name = os.path.split(path)
    return transcripts_in(folder).get(session_id_of(name) or "", [])


def is_live(name: str) -> bool:
    m = _NAME.match(name)
    return m is not None and m["archive"] is None


# sessions.json per directory, reread only when it changes: (inode, mtime_ns, size) → {sessionId: entry}.
# The inode too: a file written whole and renamed into place may keep its size within one mtime tick.
_INDEX_CACHE: dict[str, tuple[tuple[int, int, int], dict[str, dict]]] = {}
# sessions.json path → why it could not be read, or read as a listing, while so: told once a reason.
_UNREAD_INDEXES: dict[str, str] = {}


def archived(name: str) -> tuple[str, str, int | None] | None:
    """An archived transcript's (session id, ``reset`` | ``deleted``, when its name says it was archived,
    None when the name's time does not read); None for any other name."""
    m = _NAME.match(name)
    if m is None or m["archive"] is None:
        return None
    at = _ARCHIVED_AT.fullmatch(m["at"])
    if at is None:
        return m["id"], m["archive"], None
    if at["ms"]:
        return m["id"], m["archive"], int(at["ms"])
    return m["id"], m["archive"], iso_ms(f"{at['day']}T{at['h']}:{at['m']}:{at['s']}")


def index(directory: str) -> dict[str, dict]:
    """sessionId → {"key": sessionKey, "spawnedBy": parent key} from the folder's sessions.json."""
    path = os.path.join(directory, INDEX_NAME)
    try:
        st = os.stat(path)
    except OSError:
        _readable_again(path)
        return {}
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    cached = _INDEX_CACHE.get(directory)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    last = cached[1] if cached is not None else {}
    try:
        data = read_regular(path)
    except OSError as exc:
        # Not remembered under its stamp: what makes it readable again (its mode) may leave that as it is.
        _unread(path, exc.strerror or str(exc))
        return last
    if data is None:
        reason = "not a regular file"
    else:
        try:
            doc = jsontext.loads(data or b"{}")
            reason = None if isinstance(doc, dict) else "not a JSON object"
        except orjson.JSONDecodeError as exc:
            reason = f"not a JSON object: {exc.msg}"
    if reason is not None:
        # Remembered under its stamp, still marked: only a rewrite, which changes the stamp, can mend it.
        _unread(path, reason)
        _INDEX_CACHE[directory] = (stamp, last)
        return last
    _readable_again(path)
    by_id: dict[str, dict] = {}
    for key, entry in doc.items():
        if isinstance(entry, dict) and text(entry.get("sessionId")):
            by_id[entry["sessionId"]] = {"key": key, "spawnedBy": text(entry.get("spawnedBy")),
                                         "label": text(entry.get("label"))}
    _INDEX_CACHE[directory] = (stamp, by_id)
    return by_id


def _unread(path: str, reason: str) -> None:
    if _UNREAD_INDEXES.get(path) != reason:
        _UNREAD_INDEXES[path] = reason
        log.warning("cannot read file %s: %s; until it can be read, the sessions it lists are keyed as "
                    "it last listed them, or as if it listed none", path, reason)


def _readable_again(path: str) -> None:
    if _UNREAD_INDEXES.pop(path, None) is not None:
        log.info("%s can be read again, or is gone", path)


def unread_indexes() -> dict[str, str]:
    """Every sessions.json that could not be read, or read as a listing, at the last look, by path, with
    the reason."""
    return dict(_UNREAD_INDEXES)


def index_unread(directory: str) -> bool:
    """Whether the folder's sessions.json could not be read at the last look: what ``index`` says of it
    then may change with nothing of the file's stamp changing."""
    return os.path.join(directory, INDEX_NAME) in _UNREAD_INDEXES


# How far from the spawn's answer a child's header may be written and still be its child.
_SPAWN_WINDOW_MS = 60_000
# A child's head (header to first user message) is read from at most this many bytes, or store rows.
_HEAD_LIMIT = 1 << 20
_HEAD_ROWS = 64
_SPAWN_MARK = SPAWN_TOOL.encode()


@dataclass(frozen=True, slots=True)
class _Spawn:
    task: str
    answered_ms: int  # the time of the spawn's result
    child_key: str


@dataclass(slots=True)
class _Scanned:
    """What one transcript's complete lines up to ``offset`` say about the spawns it made."""

    ino: int
    offset: int = 0
    asked: dict[str, str] = field(default_factory=dict)  # toolCall id → task, not answered yet
    spawns: list[_Spawn] = field(default_factory=list)
    words: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # toolCall id → (label, mode)


# Transcripts only grow until they are archived (a rename keeps the inode): each is read once, onward.
_SPAWN_CACHE: dict[str, _Scanned] = {}
# The same, for the decoders' _spawn_words: apart, so that a decoder's read never passes for the folder
# looks' (see _folder), which rebuild a folder's spawns only when one of its files had something new.
_WORDS_CACHE: dict[str, _Scanned] = {}
_WORDS_CACHED = 4096


def _scan_spawns(path: str, cache: dict[str, _Scanned]) -> bool:
    """Reads what was added to one transcript since the last look into ``cache`` for answered
    sessions_spawn calls; whether there was anything to read."""
    known = cache.get(path)
    try:
        st = os.stat(path)
        if known is not None and known.ino == st.st_ino and known.offset == st.st_size:
            return False
        fd = open_regular(path)
        if fd is None:  # named like a transcript, and no file to read (a FIFO, say)
            return False
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if known is None or known.ino != st.st_ino or st.st_size < known.offset:
                known = cache[path] = _Scanned(st.st_ino)
            if st.st_size > known.offset:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    _scan_lines(known, data)
    except (OSError, ValueError):  # gone, or emptied since it was looked at
        pass
    return True


def _scan_lines(known: _Scanned, data: mmap.mmap) -> None:
    """Only the lines that name the spawn tool are parsed; complete lines only."""
    end = data.rfind(b"\n", known.offset) + 1
    hit = data.find(_SPAWN_MARK, known.offset, end)
    while hit != -1:
        start = data.rfind(b"\n", 0, hit) + 1
        stop = data.find(b"\n", hit, end)
        _note_spawn(known, data[start:stop])
        hit = data.find(_SPAWN_MARK, stop, end)
    known.offset = max(known.offset, end)


def _note_spawn(scanned: _Scanned, line: bytes) -> None:
    try:
        obj = jsontext.loads(line)
    except orjson.JSONDecodeError:
        return
    msg = obj.get("message") if isinstance(obj, dict) else None
    ts = iso_ms(obj.get("timestamp")) if isinstance(msg, dict) else None
    if ts is None:
        return
    if msg.get("role") == "assistant" and isinstance(msg.get("content"), list):
        for block in msg["content"]:
            if isinstance(block, dict) and block.get("type") == "toolCall" and block.get("name") == SPAWN_TOOL \
                    and text(block.get("id")) and isinstance(block.get("arguments"), dict):
                args = block["arguments"]
                if text(args.get("task")):
                    scanned.asked[block["id"]] = args["task"]
                words = (text(args.get("label")), text(args.get("mode")))
                if words != (None, None):
                    scanned.words[block["id"]] = words
    elif msg.get("role") == "toolResult" and msg.get("toolName") == SPAWN_TOOL and msg.get("isError") is not True:
        task = scanned.asked.pop(text(msg.get("toolCallId")) or "", None)
        child = _spawned_key(msg.get("content"))
        if task is not None and child is not None:
            scanned.spawns.append(_Spawn(task=task, answered_ms=ts, child_key=child))


def _spawn_words(path: str, call_id: str) -> tuple[str | None, str | None]:
    """(label, mode) a transcript's sessions_spawn call ``call_id`` asked for. Its line is before its
    result's in the same file, wherever a read of the file began: read from the file, not from lines
    decoded so far, a followed ledger and one read afresh learn the same. A file archived by a reset since
    its read began is under another name by now: the session's other transcripts are looked in then."""
    words = _words_in(path, call_id)
    if words is not None or os.path.exists(path):
        return words or (None, None)
    for other in copies_of(path):
        words = _words_in(other, call_id)
        if words is not None:
            return words
    return None, None


def _words_in(path: str, call_id: str) -> tuple[str | None, str | None] | None:
    known = _WORDS_CACHE.get(path)
    if known is None or call_id not in known.words:
        if known is None and len(_WORDS_CACHE) >= _WORDS_CACHED:  # archived and deleted files' entries
            _WORDS_CACHE.clear()
        _scan_spawns(path, _WORDS_CACHE)
        known = _WORDS_CACHE.get(path)
    return known.words.get(call_id) if known is not None else None


# path → (how it looked: the file's (ino, size, mtime_ns), or the store's looks for a session only the store
# keeps; head): an archive's key is looked for again whenever the folders beside it change, and its head never
# moves.
_HEADS: dict[str, tuple[tuple, tuple[int, str] | None]] = {}


def _head(path: str) -> tuple[int, str] | None:
    """(header time, first user message text) of a transcript, from its first lines."""
    try:
        st = os.stat(path)
    except OSError:
        return _stored_head(path)
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _HEADS.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        head = _head_of((read_regular(path, _HEAD_LIMIT) or b"").splitlines())
    except OSError:
        return None  # looked for again next time: a change of mode leaves its stamp as it was
    _HEADS[path] = (stamp, head)
    return head


def _stored_head(path: str) -> tuple[int, str] | None:
    """The head of a session the store beside its folder keeps with no transcript (``path`` names none): once
    its first message is there, it stays; until then it is looked for again only once the store changed."""
    folder, name = os.path.split(path)
    store = oc_store.store_of(os.path.dirname(folder))
    cached = _HEADS.get(path)
    if cached is not None and (cached[1] is not None or cached[0] == oc_store.looks(store, f"{store}-wal")):
        return cached[1]
    session_id = session_id_of(ledger_name(name))
    if session_id is None:
        return None
    look = oc_store.looks(store, f"{store}-wal")
    head = _head_of(oc_store.first_rows(store, session_id, _HEAD_ROWS))
    _HEADS[path] = (look, head)
    return head


def _head_of(lines: list[bytes]) -> tuple[int, str] | None:
    header_ms = None
    for line in lines:
        try:
            obj = jsontext.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        if obj.get("type") == "session" and header_ms is None:
            header_ms = iso_ms(obj.get("timestamp"))
        msg = obj.get("message")
        if obj.get("type") == "message" and isinstance(msg, dict) and msg.get("role") == "user":
            words = _all_text(msg.get("content"))
            return (header_ms, words) if header_ms is not None and words else None
    return None


# store → (how it and its WAL looked at the last scan, session → what its rows say of its spawns): each row is
# scanned once, onward, as a transcript's lines are.
_STORED: dict[str, tuple[tuple, dict[str, _Scanned]]] = {}


def _scan_store(sdir: str) -> tuple[bool, dict[str, _Scanned]]:
    """The sessions the store beside a sessions folder keeps, with the spawns their rows added since the last
    look; whether there was anything to read. A session whose JSONL transcripts are gone is only there."""
    store = oc_store.store_of(os.path.dirname(sdir))
    look = oc_store.looks(store, f"{store}-wal")
    known = _STORED.get(store)
    if look[0] is None:
        _STORED.pop(store, None)
        return known is not None, {}
    if known is not None and known[0] == look:
        return False, known[1]
    sessions = known[1] if known is not None else {}
    found = oc_store.rows_naming(store, {sid: s.offset for sid, s in sessions.items()}, _SPAWN_MARK)
    if found is None:  # locked a moment: looked at again next time
        return False, sessions
    for session_id, (end, lines) in found.items():
        scanned = sessions.setdefault(session_id, _Scanned(-1))
        for line in lines:
            _note_spawn(scanned, line)
        scanned.offset = end
    _STORED[store] = (look, sessions)
    return True, sessions


@dataclass(slots=True)
class _Folder:
    """The answered spawns of one sessions folder's transcripts, by the time of their answer."""

    stamp: tuple[int, int] | None  # the folder's (inode, mtime_ns) before it was listed
    paths: list[str]  # its transcripts, in the order they were listed
    spawns: list[tuple[int, int, str, _Spawn]]  # (answered_ms, place in listing order, transcript, spawn)


_FOLDERS: dict[str, _Folder] = {}
_pass = threading.local()


@contextlib.contextmanager
def one_look() -> Iterator[None]:
    """Within it, each sessions folder's transcripts are looked at once, however many archives beside
    them are decoded: every archive asks after the same spawns, and a look stats every transcript."""
    outer = getattr(_pass, "looked", None)
    outer_keys = getattr(_pass, "keys", None)
    outer_rivals = getattr(_pass, "rivals", None)
    _pass.looked = set() if outer is None else outer
    _pass.keys = {} if outer_keys is None else outer_keys  # see _folder_keys
    _pass.rivals = {} if outer_rivals is None else outer_rivals  # see _rivals
    try:
        yield
    finally:
        _pass.looked, _pass.keys, _pass.rivals = outer, outer_keys, outer_rivals


def _folder(sdir: str) -> _Folder:
    try:
        st = os.stat(sdir)
        stamp = (st.st_ino, st.st_mtime_ns)
    except OSError:
        stamp = None
    looked = getattr(_pass, "looked", None)
    known = _FOLDERS.get(sdir)
    # Looked at once a pass, and again once a file is named there: a session archived meanwhile must not
    # meet its own spawns under its former name.
    if known is not None and looked is not None and sdir in looked and known.stamp == stamp:
        return known
    if looked is not None:
        looked.add(sdir)
    try:
        entries = [e for e in os.scandir(sdir) if is_transcript(e.name)]
    except OSError:
        entries = []
    read = [_scan_spawns(e.path, _SPAWN_CACHE) for e in entries]
    paths = [e.path for e in entries]
    # The store's sessions with no transcript here are looked at as the transcripts they would be.
    stored, sessions = _scan_store(sdir)
    on_disk = {session_id_of(ledger_name(e.name)) for e in entries}
    for session_id in sorted(set(sessions) - on_disk):
        paths.append(path := os.path.join(sdir, f"{session_id}.jsonl"))
        _SPAWN_CACHE[path] = sessions[session_id]
    read.append(stored)
    if known is not None and not any(read) and paths == known.paths:
        known.stamp = stamp
        return known
    for gone in set(known.paths if known else ()) - set(paths):
        _SPAWN_CACHE.pop(gone, None)
        _HEADS.pop(gone, None)
    listed = [(spawn.answered_ms, path, spawn) for path in paths
              for spawn in (_SPAWN_CACHE[path].spawns if path in _SPAWN_CACHE else ())]
    known = _FOLDERS[sdir] = _Folder(stamp, paths, sorted((ms, place, path, spawn)
                                                          for place, (ms, path, spawn) in enumerate(listed)))
    return known


def _archived_child_key(path: str, agent_id: str | None, folders: tuple, listed: dict[str, str | None],
                        rivals: tuple[tuple[int, str, str], ...]) -> str | None:
    """The key an unlisted transcript had as a subagent: that of the spawn nearest its header in time
    whose task is its first message (None: no spawn beside it asked for it); of spawns as near, the
    first listed. A spawn names one child: the transcripts of ``rivals`` (those beside it with the same
    first message, see ``key_inputs``) choose first when their header is earlier, and what they choose is no longer there to
    choose. ``folders``: the answered spawns of each sessions folder beside it (_Folder.spawns)."""
    head = _head(path)
    if head is None:
        return None
    taken: set[str] = set()
    for header_ms, first, claimant in sorted(set(rivals) | {(*head, path)}):
        found = _nearest_spawn(claimant, header_ms, first, agent_id, folders, listed, taken)
        if claimant == path:
            return found
        if found is not None:
            taken.add(found)
    return None


def _nearest_spawn(path: str, header_ms: int, first: str, agent_id: str | None, folders: tuple,
                   listed: dict[str, str | None], taken: set[str]) -> str | None:
    best: tuple[int, str] | None = None
    for spawns in folders:
        lo = bisect.bisect_left(spawns, (header_ms - _SPAWN_WINDOW_MS,))
        hi = bisect.bisect_left(spawns, (header_ms + _SPAWN_WINDOW_MS + 1,))
        for _, _, where, spawn in sorted(spawns[lo:hi], key=lambda s: s[1]):
            gap = abs(header_ms - spawn.answered_ms)
            if (where != path and (best is None or gap < best[0]) and spawn.task == first
                    and spawn.child_key not in listed and spawn.child_key not in taken
                    and agent_from_key(spawn.child_key) == agent_id):
                best = (gap, spawn.child_key)
    return best[1] if best else None


def _rivals(folder: str, by_id: dict[str, dict]) -> tuple[tuple[int, str, str], ...]:
    """(header time, first message, path) of each transcript of ``folder`` its sessions.json does not
    list: those that may claim the same spawn. Looked at once a pass (see ``one_look``)."""
    memo = getattr(_pass, "rivals", None)
    known = memo.get(folder) if memo is not None else None
    if known is None:
        known = tuple((*head, path) for path in _folder(folder).paths
                      if session_id_of(ledger_name(os.path.basename(path))) not in by_id
                      and (head := _head(path)) is not None)
        if memo is not None:
            memo[folder] = known
    return known


def _spawner_key(spawned: tuple[_Spawn, ...], agent_id: str | None, listed: dict[str, str | None]) -> str | None:
    """The key an archived transcript was listed under while it spawned: the spawnedBy its children's
    sessions.json entries name, when it is a key of its own agent; of the keys they name, that of its
    earliest answered spawn (None: no child of it is listed so)."""
    named = [(spawn.answered_ms, parent) for spawn in spawned
             if (parent := listed.get(spawn.child_key)) is not None and agent_from_key(parent) == agent_id]
    return min(named, key=lambda n: n[0])[1] if named else None


def _tokens(usage: object) -> Tokens:
    if not isinstance(usage, dict):
        return Tokens()
    t = Tokens(input=count(usage.get("input")), output=count(usage.get("output")),
               cache_read=count(usage.get("cacheRead")), cache_write=count(usage.get("cacheWrite")))
    t.total = count(usage.get("totalTokens")) or t.input + t.output + t.cache_read + t.cache_write
    return t


@dataclass(frozen=True, slots=True)
class _Identity:
    """What the key a ``FileDecoder`` claims for its transcript, and what that key yields to, are learnt
    from: the path, and what the files beside it said at one look (see ``_folder_keys``)."""

    path: str  # as the file system knows it; a renamed file keeps its ledger row, not its identity
    session_id: str | None
    agent_id: str | None
    entry: dict  # its sessions.json entry, {} when it lists none
    # Unlisted, an agent's transcript guesses its key (it may find it in a spawn beside it, or in what its
    # own spawns' children are listed as), and the folders beside it are inputs too:
    guesses: bool = False
    # every key the sessions.json files beside it list (what a guess yields to), with the spawnedBy each names
    listed: dict[str, str | None] = field(default_factory=dict)
    spawns: tuple = ()  # the answered spawns of the folders beside it, which may name its key
    spawned: tuple[_Spawn, ...] = ()  # its own answered spawns, whose children's entries may name it
    rivals: tuple[tuple[int, str, str], ...] = ()  # the unlisted ones beside it of its first message, which may claim first


def key_inputs(path: str) -> _Identity:
    """What a ``FileDecoder`` of ``path`` learns its key from: equal inputs, equal claims. A full pass
    builds no decoder for a transcript with nothing new to read whose claim it has settled with equal
    inputs before (the decoder's own, ``FileDecoder.inputs``): string operations, not PurePath."""
    folder, name = os.path.split(path)
    agent_id, by_id, siblings, listed = _folder_keys(folder)
    m = _NAME.match(ledger_name(name))
    session_id = m["id"] if m else None
    entry = by_id.get(session_id or "", {})
    agent_id = agent_id or agent_from_key(entry.get("key"))
    if entry or agent_id is None or session_id is None:
        return _Identity(path, session_id, agent_id, entry)
    # A live transcript may be unlisted too (OpenClaw's maintenance prunes entries of running sessions):
    # it is found by the same spawns as an archive, or following it and reading it afresh would disagree.
    spawns = tuple(_folder(sdir).spawns for sdir in siblings)
    own = _SPAWN_CACHE.get(path)  # looked at with its folder, just now
    # Only a transcript with its first message may take its spawn: another coming or going changes nothing.
    head = _head(path)
    rivals = tuple(r for r in _rivals(folder, by_id) if head is not None and r[1] == head[1])
    return _Identity(path, session_id, agent_id, entry, True, listed, spawns, tuple(own.spawns) if own else (),
                     rivals)


def _folder_keys(folder: str) -> tuple[str | None, dict[str, dict], list[str], dict[str, str | None]]:
    """(its agent; its sessions.json by id; the sessions folders beside it; the keys those list, with the
    spawnedBy of each) of a sessions folder: looked at once a pass (see ``one_look``), not once a transcript,
    so what a decoder learns its key from is what the pass recorded of it. Outside an ``agents/`` tree (a
    backup, say) its agent is the one its sessions.json's keys all name, None if they name several or none."""
    memo = getattr(_pass, "keys", None)
    known = memo.get(folder) if memo is not None else None
    if known is None:
        siblings = _sibling_dirs(folder)
        agents, agent = agents_dir(folder)
        by_id = index(folder)
        if agents is None:
            named = {agent_from_key(entry["key"]) for entry in by_id.values()}
            own = named.pop() if len(named) == 1 else None
        else:
            own = ledger_name(agent)
        known = (own, by_id, siblings, _listed_keys(siblings))
        if memo is not None:
            memo[folder] = known
    return known


class FileDecoder:
    """Decodes the lines of one transcript file; built afresh for each read of the file."""

    def __init__(self, path: str, lookup: RunLookup):
        self.inputs = me = key_inputs(path)
        self.session_id, self.agent_id = me.session_id, me.agent_id
        self.session_key = me.entry.get("key")
        self.guessed = False
        if me.guesses:
            found = (_archived_child_key(path, me.agent_id, me.spawns, me.listed, me.rivals)
                     or _spawner_key(me.spawned, me.agent_id, me.listed)) if me.spawns else None
            self.guessed = found is None
            self.session_key = found or f"agent:{self.agent_id}:{self.session_id}"
        self.spawned_by = me.entry.get("spawnedBy")
        self.label = me.entry.get("label")
        self.runs = RunTracker(lookup, self.session_id)

    def yields_to(self, held: str) -> bool:
        """Whether the key the ledger holds for the session stands against this decoder's. A subagent's
        key was learnt from sessions.json or its parent's spawn while they named it; a key of its own
        guessed once sessions.json forgot it, with nothing beside it to say otherwise, knows less. Only
        another session listed under that key now takes it away."""
        return self.guessed and is_subagent_key(held) and held not in self.inputs.listed

    def rederives(self, held: str) -> bool:
        """Whether the lines the ledger indexed while it held the session under ``held`` may lack facts
        this decoder's key yields them: a subagent's end, which only a subagent key has, and the spawn
        its header tells, which only a parent sessions.json names gives. Facts are never taken back, so
        a key that stops being a subagent's has nothing to give again (their ids do not depend on it)."""
        return (is_subagent_key(self.session_key) and not is_subagent_key(held)) or self.spawned_by is not None

    @staticmethod
    def keyed(fact: Fact) -> bool:
        """Whether ``fact`` is one that only a key gives (see rederives): a subagent's end, its header's spawn.
        A line decoded again gave its other facts when it was first read, under ids that an agentledger from
        before entries were known by their id (see __call__) made from the line's bytes: decoded again, they
        would be indexed a second time under the ids made now, each model call counted twice."""
        return fact.__class__ is SubagentEnded or (fact.__class__ is SubagentSpawned and fact.by_child)

    def tells_spawn(self) -> bool:
        """Whether its header tells its own spawn: only once sessions.json names who spawned it. A ledger that
        read the header before then, under the key the parent's spawn gave, lacks it (see Pipeline._keys_due)."""
        return bool(self.spawned_by and self.session_key)

    def __call__(self, line: bytes, offset: int) -> Fact | Reject | list[Fact]:
        obj = json_object(line, offset)
        if obj.__class__ is Reject:
            return obj
        kind = obj.get("type")
        if kind.__class__ is not str or not kind:
            return reject(line, offset, "missing field 'type'")
        ts = iso_ms(obj.get("timestamp"))
        if ts is None:
            return reject(line, offset, "missing or invalid field 'timestamp'")
        # An entry is known by its id within its session, so its JSONL line and its row in the SQLite
        # store (see tail/transcript_store.py) are one event, however each serializes it.
        entry = text(obj.get("id"))
        ident = f"{self.session_id}\n{kind}\n{entry}".encode() if entry else f"{self.session_id}\n".encode() + line
        base = {"event_id": line_id(ident), "ts_ms": ts, "source": SOURCE,
                "agent_id": self.agent_id, "session_key": self.session_key, "session_id": self.session_id}
        if kind == "session":
            return self._header(base)
        if kind == "message":
            msg = obj.get("message")
            if not isinstance(msg, dict):
                return reject(line, offset, "message without its 'message' object")
            return self._message(base, obj, msg, line, offset)
        if kind == "compaction":
            return Compaction(**base, kind="compaction", run_id=self.runs.current(), phase="start",
                              token_count=integer(obj.get("tokensBefore")))
        if kind in _MARKERS:
            return Marker(**base, kind=kind)
        return RawEvent(**base, kind=kind, raw=line)

    def _header(self, base: dict) -> Fact | list[Fact]:
        started = SessionStarted(**base, kind="session.start")
        if not self.tells_spawn():
            return started
        # A subagent's own transcript is where its spawn is certain (its parent's tool call
        # only asks for one), so the spawn is recorded with the child's first line. It knows no parent run:
        # the parent's result of its spawn call, if read, tells that (the ledger keeps what both say).
        spawn = SubagentSpawned(**base | {"event_id": derived_id(base["event_id"], 1),
                                          "session_key": self.spawned_by, "session_id": None},
                                kind="subagent.spawn", child_session_key=self.session_key,
                                child_agent_id=self.agent_id, label=self.label, by_child=True)
        return [started, spawn]

    def _message(self, base: dict, obj: dict, msg: dict, line: bytes, offset: int) -> Fact | Reject | list[Fact]:
        role = msg.get("role")
        if role == "user":
            run_id = f"{self.session_id}:{text(obj.get('id')) or base['event_id']}"
            self.runs.start(self.session_id, run_id)
            return RunStarted(**base, kind="run.start", run_id=run_id)
        if role == "assistant":
            return self._assistant(base, msg)
        if role == "toolResult":
            call_id = text(msg.get("toolCallId"))
            if call_id is None:
                return reject(line, offset, "toolResult without its 'toolCallId'")
            details = msg.get("details") if isinstance(msg.get("details"), dict) else {}
            exit_code = integer(details.get("exitCode"))
            is_error = msg.get("isError") is True
            run_id = self.runs.current()
            name = text(msg.get("toolName"))
            ended = ToolEnded(**base, kind="tool.end", run_id=run_id, tool_name=name, tool_call_id=call_id,
                              is_error=is_error, error=_content_text(msg.get("content")) if is_error else None,
                              exit_code=exit_code, duration_ms=duration(details.get("durationMs")))
            child = _spawned_key(msg.get("content")) if name == SPAWN_TOOL and not is_error else None
            if child is None:
                return ended
            # The spawn's result is the one place that names the child: its own transcript may be
            # archived where sessions.json no longer lists it.
            label, mode = _spawn_words(self.inputs.path, call_id)
            return [ended, SubagentSpawned(**base | {"event_id": derived_id(base["event_id"], 1)},
                                           kind="subagent.spawn", run_id=run_id, child_session_key=child,
                                           child_agent_id=agent_from_key(child), label=label, mode=mode)]
        return Marker(**base, kind=f"message.{role}" if isinstance(role, str) and role else "message")

    def _assistant(self, base: dict, msg: dict) -> Fact | list[Fact]:
        run_id = self.runs.current()
        stop = text(msg.get("stopReason"))
        usage = msg.get("usage")
        tokens = _tokens(usage)
        cost = logged_cost(usage["cost"].get("total"), tokens) if isinstance(usage, dict) and isinstance(
            usage.get("cost"), dict) else None
        error = (error_text(msg.get("errorMessage")) or "error") if stop == "error" else None
        requested = integer(msg.get("timestamp"))
        ts = base["ts_ms"]
        call = LlmCall(**base, kind="llm.call", run_id=run_id, provider=text(msg.get("provider")),
                       model=text(msg.get("model")), tokens=tokens, cost_pico=cost, cost_source="transcript",
                       duration_ms=ts - requested if requested is not None and 0 <= ts - requested < 86_400_000
                       else None, error=error)
        facts: list[Fact] = [call]
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "toolCall" and text(block.get("id")):
                    path, command = tool_target(block.get("arguments"))
                    facts.append(ToolStarted(**base | {"event_id": derived_id(base["event_id"], len(facts))},
                                             kind="tool.start", run_id=run_id, tool_name=text(block.get("name")),
                                             tool_call_id=block["id"], file_path=path, exec_command=command))
        if stop in _OUTCOMES and run_id is not None:
            facts.append(RunEnded(**base | {"event_id": derived_id(base["event_id"], len(facts))}, kind="run.end",
                                  run_id=run_id, model=call.model, provider=call.provider, stop_reason=stop,
                                  error=error))
            if is_subagent_key(self.session_key):
                # A transcript writes no subagent.end: a subagent is the task its first message gave it, so
                # its turn's end is its own, and ends its session too, as subagent.end would.
                facts.append(SubagentEnded(**base | {"event_id": derived_id(base["event_id"], len(facts))},
                                           kind="subagent.end", run_id=run_id, child_session_key=self.session_key,
                                           outcome=_OUTCOMES[stop], reason=stop, model=call.model))
        return facts[0] if len(facts) == 1 else facts


def _spawned_key(content: object) -> str | None:
    """``childSessionKey`` from a sessions_spawn result (JSON inside its text block)."""
    body = _content_text(content)
    if not body or "childSessionKey" not in body:
        return None
    try:
        doc = jsontext.loads(body)
    except orjson.JSONDecodeError:
        return None
    return text(doc.get("childSessionKey")) if isinstance(doc, dict) else None


def _sibling_dirs(folder: str) -> list[str]:
    """The sessions folders of every agent beside the sessions ``folder`` (a subagent may run as
    another agent than its parent), or the folder alone outside an ``agents/`` tree."""
    agents, _ = agents_dir(folder)
    if agents is not None:
        try:
            return [os.path.join(agents, a, "sessions") for a in sorted(os.listdir(agents))]
        except OSError:
            pass
    return [folder]


# sibling folders → (their indexes, the keys those list): every archive decoded asks, and a union of
# sessions.json files is as long as they are.
_LISTED: dict[tuple[str, ...], tuple[list[dict], dict[str, str | None]]] = {}


def _listed_keys(siblings: list[str]) -> dict[str, str | None]:
    """Every session key the ``sessions.json`` files of the sessions folders ``siblings`` list, with the
    key of the session that spawned it (its ``spawnedBy``), None when it names none."""
    dirs = tuple(siblings)
    indexes = [index(d) for d in dirs]
    cached = _LISTED.get(dirs)
    # index() hands back the same dict while its sessions.json is unchanged (a new empty one while there is none).
    if cached is not None and all(a is b or not (a or b) for a, b in zip(cached[0], indexes)):
        return cached[1]
    keys = {entry["key"]: entry["spawnedBy"] for by_id in indexes for entry in by_id.values()}
    _LISTED[dirs] = (indexes, keys)
    return keys


def listed_beside(path: str) -> dict[str, str | None]:
    """Every session key the ``sessions.json`` files beside the transcript ``path`` list, with the
    spawnedBy each names: the key of a session they forgot depends on them."""
    return _folder_keys(os.path.dirname(path))[3]


def _all_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _content_text(content: object) -> str | None:
    if isinstance(content, str):
        return content[:2000] or None
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str) and block["text"]:
                return block["text"][:2000]
    return None
