"""Decoder for the OpenClaw telemetry extension's ``events*.jsonl`` (FORMATS.md §1)."""

from __future__ import annotations

import functools
import os

from agentledger.facts import (
    Compaction,
    Fact,
    LlmCall,
    Marker,
    Message,
    RawEvent,
    Reject,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    SubagentEnded,
    SubagentSpawned,
    Tokens,
    ToolEnded,
    ToolStarted,
    UsageSnapshot,
)
from agentledger.sources.common import (
    MAX_TIME_MS,
    RunLookup,
    agent_from_key,
    agents_dir,
    command,
    count,
    duration,
    epoch_ms,
    error_text,
    flag,
    integer,
    json_object,
    ledger_name,
    line_id,
    logged_cost,
    reject,
    text,
    tool_target,
)

SOURCE = "oc-telemetry"
_EVT_PREFIX = "evt_"
_TWO_63 = 1 << 63
_TWO_64 = 1 << 64
_from_bytes = int.from_bytes
_from_hex = bytes.fromhex


def _event_id(value: object, line: bytes) -> int:
    if value.__class__ is str and value:
        if len(value) == 20 and value[:4] == _EVT_PREFIX:
            digits = value[4:]
            if digits.isalnum():
                try:  # the common case, in 0.6 of int()'s time: 16 ASCII hex digits are 8 bytes
                    return _from_bytes(_from_hex(digits), "big", signed=True)
                except ValueError:
                    pass
                try:  # int() takes any script's digits too, and ids read so must stay as they were
                    n = int(digits, 16)
                except ValueError:
                    pass
                else:
                    return n - _TWO_64 if n >= _TWO_63 else n
        return line_id(value.encode("utf-8", "surrogatepass"))
    return line_id(line)


def _tokens(value: object) -> Tokens:
    if not isinstance(value, dict):
        return Tokens()
    t = Tokens(
        input=count(value.get("input")),
        output=count(value.get("output")),
        cache_read=count(value.get("cacheRead")),
        cache_write=count(value.get("cacheWrite")),
    )
    total = count(value.get("total"))
    t.total = total or (t.input + t.output + t.cache_read + t.cache_write)
    return t


def _error(env: dict, data: dict) -> str | None:
    err = env.get("error")
    return error_text(data.get("error") if err is None else err)


def _session_started(base: tuple, data: dict, env: dict) -> Fact:
    return SessionStarted(*base, resumed_from=text(data.get("resumedFrom")))


def _session_ended(base: tuple, data: dict, env: dict) -> Fact:
    return SessionEnded(
        *base,
        message_count=integer(data.get("messageCount")),
        duration_ms=duration(data.get("durationMs")),
    )


def _run_started(base: tuple, data: dict, env: dict) -> Fact:
    return RunStarted(
        *base,
        model=text(data.get("model")),
        provider=text(data.get("provider")),
        is_heartbeat=flag(data.get("isHeartbeat")),
        is_followup=flag(data.get("isFollowup")),
        origin_channel=text(data.get("originChannel")),
    )


def _run_ended(base: tuple, data: dict, env: dict) -> Fact:
    return RunEnded(
        *base,
        model=text(data.get("model")),
        provider=text(data.get("provider")),
        duration_ms=duration(data.get("durationMs")),
        usage=_tokens(data.get("usage")),
        tool_call_count=integer(data.get("toolCallCount")),
        stop_reason=text(data.get("stopReason")),
        error=_error(env, {}),
    )


def _llm_call(base: tuple, data: dict, env: dict) -> Fact:
    tokens = _tokens(data.get("delta"))
    return LlmCall(
        *base,
        provider=text(data.get("provider")),
        model=text(data.get("model")),
        call_index=integer(data.get("callIndex")),
        tokens=tokens,
        cost_pico=logged_cost(data.get("costUsd"), tokens),
        duration_ms=duration(data.get("durationMs")),
        error=_error(env, {}),
        context_tokens=_context_used(data.get("context")),
    )


def _context_used(value: object) -> int | None:
    if not isinstance(value, dict):
        return None
    return count(value.get("used")) or None


def _usage_snapshot(base: tuple, data: dict, env: dict) -> Fact:
    tokens = _tokens(data.get("usage"))
    return UsageSnapshot(
        *base,
        provider=text(data.get("provider")),
        model=text(data.get("model")),
        tokens=tokens,
        cost_pico=logged_cost(data.get("costUsd"), tokens),
    )


def _tool_call_id(data: dict) -> str | None:
    return text(data.get("toolCallId"))


def _tool_started(base: tuple, data: dict, env: dict) -> Fact | None:
    call_id = _tool_call_id(data)
    if call_id is None:
        return None
    path, command = tool_target(data.get("params"))
    return ToolStarted(*base, tool_name=text(data.get("toolName")), tool_call_id=call_id, file_path=path,
                       exec_command=command)


def _tool_ended(base: tuple, data: dict, env: dict) -> Fact | None:
    call_id = _tool_call_id(data)
    if call_id is None:
        return None
    return ToolEnded(
        *base,
        tool_name=text(data.get("toolName")),
        tool_call_id=call_id,
        is_error=flag(data.get("isError")),
        duration_ms=duration(data.get("durationMs")),
        error=_error(env, data),
        file_path=text(data.get("filePath")),
        exec_command=command(data.get("execCommand")),
    )


def _subagent_spawned(base: tuple, data: dict, env: dict) -> Fact | None:
    child = text(data.get("childSessionKey"))
    if child is None:
        return None
    return SubagentSpawned(
        *base,
        child_session_key=child,
        child_agent_id=text(data.get("agentId")),
        label=text(data.get("label")),
        mode=text(data.get("mode")),
    )


def _subagent_ended(base: tuple, data: dict, env: dict) -> Fact | None:
    child = text(data.get("childSessionKey")) or text(data.get("targetSessionKey"))
    if child is None:
        return None
    return SubagentEnded(
        *base,
        child_session_key=child,
        outcome=text(data.get("outcome")),
        reason=text(data.get("reason")),
        duration_ms=duration(data.get("durationMs")),
        ended_ms=epoch_ms(data.get("endedAt")),
        model=text(data.get("model")),
    )


def _compaction(phase: str):
    def build(base: tuple, data: dict, env: dict) -> Fact:
        return Compaction(
            *base,
            phase=phase,
            message_count=integer(data.get("messageCount")),
            compacting_count=integer(data.get("compactingCount")),
            token_count=integer(data.get("tokenCount")),
            compacted_count=integer(data.get("compactedCount")),
        )

    return build


def _preview(value: object) -> str | None:
    s = text(value)
    return s[:500] if s else None


def _message_inbound(base: tuple, data: dict, env: dict) -> Fact:
    return Message(
        *base,
        direction="inbound",
        channel=text(data.get("channel")),
        peer=text(data.get("from")),
        preview=_preview(data.get("contentPreview")),
    )


def _message_outbound(base: tuple, data: dict, env: dict) -> Fact:
    success = data.get("success")
    return Message(
        *base,
        direction="outbound",
        channel=text(data.get("channel")),
        peer=text(data.get("to")),
        preview=_preview(data.get("contentPreview")),
        success=success if isinstance(success, bool) else None,
        error=_error(env, data),
    )


def _marker(base: tuple, data: dict, env: dict) -> Fact:
    return Marker(*base)


_BUILDERS = {
    "session.start": _session_started,
    "session.end": _session_ended,
    "run.start": _run_started,
    "run.end": _run_ended,
    "llm.call": _llm_call,
    "usage.snapshot": _usage_snapshot,
    "tool.start": _tool_started,
    "tool.end": _tool_ended,
    "subagent.spawn": _subagent_spawned,
    "subagent.stop": _subagent_ended,
    "subagent.end": _subagent_ended,
    "compaction.start": _compaction("start"),
    "compaction.end": _compaction("end"),
    "message.inbound": _message_inbound,
    "message.outbound": _message_outbound,
    "llm.input": _marker,
    "llm.output": _marker,
}


def folder_agent(path: str) -> str | None:
    """The agent whose log ``path`` is by where it lies, ``<state>/agents/<agentId>/telemetry/``; None elsewhere
    (a telemetry directory kept anywhere else names no agent)."""
    folder = os.path.dirname(path)
    if os.path.basename(folder) != "telemetry":
        return None
    agents, agent = agents_dir(folder)
    return text(ledger_name(agent)) if agents is not None else None


def opener(path: str, lookup: RunLookup):
    """The decoder of the file at ``path``: ``decode`` knowing the agent its folder names. It asks the
    ledger nothing (``lookup`` is unused): a line is the same fact whichever file is read first."""
    agent = folder_agent(path)
    return decode if agent is None else functools.partial(decode, agent_folder=agent)


def decode(line: bytes, offset: int, agent_folder: str | None = None) -> Fact | Reject:
    """One line (without its newline) at ``offset`` → a fact, or a reject saying why not; ``agent_folder``: the
    agent whose folder the line's file is in (see Fact.agent_folder)."""
    env = json_object(line, offset)
    if env.__class__ is Reject:
        return env
    kind = env.get("kind")
    if kind.__class__ is not str or not kind:
        return reject(line, offset, "missing field 'kind'")
    ts = env.get("ts")
    if ts.__class__ is not int or not 0 <= ts <= MAX_TIME_MS:
        ts = epoch_ms(ts)
        if ts is None:
            return reject(line, offset, "missing or invalid field 'ts'")
    data = env.get("data")
    if data.__class__ is not dict:
        data = {}
    session_key = text(env.get("sessionKey"))
    agent = text(env.get("agentId")) or agent_from_key(session_key)
    # Fact's common fields, in its order (see facts.Fact).
    base = (_event_id(env.get("id"), line), ts, kind, SOURCE, agent, session_key,
            text(env.get("sessionId")) or text(data.get("sessionId")), text(env.get("runId")), integer(env.get("seq")),
            None if agent else agent_folder)
    builder = _BUILDERS.get(kind)
    if builder is None:
        return RawEvent(*base, raw=line)
    fact = builder(base, data, env)
    if fact is None:
        return reject(line, offset, f"{kind} without its identifying field")
    return fact
