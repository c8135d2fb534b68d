"""Decoder for OpenClaw session transcripts (FORMATS.md §2).

One transcript file is one session: ``agents/<agentId>/sessions/<sessionId>.jsonl``, kept
under ``<sessionId>.jsonl.reset.<ts>`` / ``.deleted.<ts>`` once archived. Who the lines
belong to comes from the path and from ``sessions.json`` beside it, never from lines read
before, so a read that resumes mid-file (after a restart or a rename) decodes as a
straight read would. ``sessions.json``'s token and cost fields are last-run snapshots and
are never read.

Each user message starts a run (a turn); each assistant line is one LLM call with the
producer's own cost estimate; ``toolCall`` blocks pair with ``toolResult`` lines.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePath

import orjson

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
    SubagentSpawned,
    Tokens,
    ToolEnded,
    ToolStarted,
)
from agentledger.sources.common import (
    RunLookup,
    RunTracker,
    agent_from_key,
    cost_pico,
    count,
    derived_id,
    error_text,
    integer,
    iso_ms,
    json_object,
    line_id,
    reject,
    text,
)

SOURCE = "oc-transcript"
INDEX_NAME = "sessions.json"
SPAWN_TOOL = "sessions_spawn"
# <sessionId>[-topic-<id>].jsonl, optionally archived as .reset.<ts> / .deleted.<ts>
_NAME = re.compile(r"^(?P<id>.+?)(?:-topic-[^.]+)?\.jsonl(?:\.(?P<archive>reset|deleted)\..+)?$")
# Stop reasons after which the turn is over (toolUse continues it with the tools' results).
_FINAL = frozenset({"stop", "length", "error", "aborted"})
_MARKERS = frozenset({"model_change", "thinking_level_change", "custom", "branch_summary", "label",
                      "session_info", "custom_message"})


def session_id_of(name: str) -> str | None:
    m = _NAME.match(name)
    return m["id"] if m else None


def is_transcript(name: str) -> bool:
    return _NAME.match(name) is not None and not name.endswith(".lock")


def is_live(name: str) -> bool:
    m = _NAME.match(name)
    return m is not None and m["archive"] is None


# sessions.json per directory, reread only when it changes: (mtime_ns, size) → {sessionId: entry}.
_INDEX_CACHE: dict[str, tuple[tuple[int, int], dict[str, dict]]] = {}


def _index(directory: str) -> dict[str, dict]:
    """sessionId → {"key": sessionKey, "spawnedBy": parent key} from the folder's sessions.json."""
    path = os.path.join(directory, INDEX_NAME)
    try:
        st = os.stat(path)
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _INDEX_CACHE.get(directory)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        with open(path, "rb") as f:
            doc = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        doc = {}
    by_id: dict[str, dict] = {}
    if isinstance(doc, dict):
        for key, entry in doc.items():
            if isinstance(entry, dict) and text(entry.get("sessionId")):
                by_id[entry["sessionId"]] = {"key": key, "spawnedBy": text(entry.get("spawnedBy")),
                                             "label": text(entry.get("label"))}
    _INDEX_CACHE[directory] = (stamp, by_id)
    return by_id


def _tokens(usage: object) -> Tokens:
    if not isinstance(usage, dict):
        return Tokens()
    t = Tokens(input=count(usage.get("input")), output=count(usage.get("output")),
               cache_read=count(usage.get("cacheRead")), cache_write=count(usage.get("cacheWrite")))
    t.total = count(usage.get("totalTokens")) or t.input + t.output + t.cache_read + t.cache_write
    return t


class FileDecoder:
    """Decodes the lines of one transcript file; built afresh for each read of the file."""

    def __init__(self, path: str, lookup: RunLookup):
        p = PurePath(path)
        self.session_id = session_id_of(p.name)
        parts = p.parts
        self.agent_id = parts[-3] if len(parts) >= 4 and parts[-4] == "agents" else None
        entry = _index(str(p.parent)).get(self.session_id or "", {})
        self.session_key = entry.get("key") or (
            f"agent:{self.agent_id}:{self.session_id}" if self.agent_id and self.session_id else None)
        self.spawned_by = entry.get("spawnedBy")
        self.label = entry.get("label")
        self.runs = RunTracker(lookup, self.session_id)

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
        base = {"event_id": line_id(f"{self.session_id}\n".encode() + line), "ts_ms": ts, "source": SOURCE,
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
        if not (self.spawned_by and self.session_key):
            return started
        # A subagent's own transcript is where its spawn is certain (its parent's tool call
        # only asks for one), so the spawn is recorded with the child's first line.
        spawn = SubagentSpawned(**base | {"event_id": derived_id(base["event_id"], 1),
                                          "session_key": self.spawned_by, "session_id": None},
                                kind="subagent.spawn", child_session_key=self.session_key,
                                child_agent_id=self.agent_id, label=self.label)
        return [started, spawn]

    def _message(self, base: dict, obj: dict, msg: dict, line: bytes, offset: int) -> Fact | Reject | list[Fact]:
        role = msg.get("role")
        if role == "user":
            run_id = f"{self.session_id}:{text(obj.get('id')) or base['event_id']}"
            self.runs.start(run_id)
            return RunStarted(**base, kind="run.start", run_id=run_id)
        if role == "assistant":
            return self._assistant(base, msg)
        if role == "toolResult":
            call_id = text(msg.get("toolCallId"))
            if call_id is None:
                return reject(line, offset, "toolResult without its 'toolCallId'")
            details = msg.get("details")
            exit_code = integer(details.get("exitCode")) if isinstance(details, dict) else None
            is_error = msg.get("isError") is True
            run_id = self.runs.current()
            name = text(msg.get("toolName"))
            ended = ToolEnded(**base, kind="tool.end", run_id=run_id, tool_name=name, tool_call_id=call_id,
                              is_error=is_error, error=_content_text(msg.get("content")) if is_error else None,
                              exit_code=exit_code)
            child = _spawned_key(msg.get("content")) if name == SPAWN_TOOL and not is_error else None
            if child is None:
                return ended
            # The spawn's result is the one place that names the child: its own transcript may be
            # archived where sessions.json no longer lists it.
            return [ended, SubagentSpawned(**base | {"event_id": derived_id(base["event_id"], 1)},
                                           kind="subagent.spawn", run_id=run_id, child_session_key=child,
                                           child_agent_id=agent_from_key(child))]
        return Marker(**base, kind=f"message.{role}" if isinstance(role, str) and role else "message")

    def _assistant(self, base: dict, msg: dict) -> Fact | list[Fact]:
        run_id = self.runs.current()
        stop = text(msg.get("stopReason"))
        usage = msg.get("usage")
        tokens = _tokens(usage)
        cost = cost_pico(usage.get("cost", {}).get("total")) if isinstance(usage, dict) and isinstance(
            usage.get("cost"), dict) else None
        if cost == 0 and tokens.total:
            cost = None  # the producer's estimate is 0 for models it cannot price: price it here
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
                    facts.append(ToolStarted(**base | {"event_id": derived_id(base["event_id"], len(facts))},
                                             kind="tool.start", run_id=run_id, tool_name=text(block.get("name")),
                                             tool_call_id=block["id"]))
        if stop in _FINAL and run_id is not None:
            facts.append(RunEnded(**base | {"event_id": derived_id(base["event_id"], len(facts))}, kind="run.end",
                                  run_id=run_id, model=call.model, provider=call.provider, stop_reason=stop,
                                  error=error))
        return facts[0] if len(facts) == 1 else facts


def _spawned_key(content: object) -> str | None:
    """``childSessionKey`` from a sessions_spawn result (JSON inside its text block)."""
    body = _content_text(content)
    if not body or "childSessionKey" not in body:
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return text(doc.get("childSessionKey")) if isinstance(doc, dict) else None


def _content_text(content: object) -> str | None:
    if isinstance(content, str):
        return content[:2000] or None
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str) and block["text"]:
                return block["text"][:2000]
    return None
