"""Claude Code hook events (FORMATS.md §3) as facts: the live side of a Claude Code session.

Claude Code POSTs every hook event to ``/v1/hooks/claude-code``. Each becomes facts of the
same session the transcript decoder (``claude_code.py``) keys: ``session_id`` is Claude Code's
``sessionId``, the key ``agent:claude-code:<sessionId>``. A tool call shows up as soon as its
PreToolUse arrives, seconds before its transcript line is read; the ledger merges the two by
``tool_use_id`` and the transcript's account wins wherever both say something. Hooks carry no
tokens and no cost. SubagentStart and SubagentStop name the Task subagent's own session
(``<session_id>/<agent_id>``, as the transcript does), and so do the tool events of the calls the
subagent makes (their ``agent_id``), so its calls go there even before the
Task's result is read; SubagentStart records its spawn by the session too, so the session's
family (and its gates) counts what the subagent spends while it runs, and SubagentStop its end.
Where no SubagentStart is sent (only PreToolUse is registered, say), the subagent's first tool
event the ledger records tells that spawn instead (HookEvent.spawn), once: the family counts the
subagent's calls once they are recorded, not only while they wait to be.
That spawn takes the one the Task's call recorded at once when only one Task of the session can be
the subagent's (see side_branches.pair_task), else when the Task's result is read (_merge_spawns); the
result's end, the surer word, says how the subagent ended.

A payload has no time and no id of its own, so an event's identity is what distinguishes it
from any other event: a tool event's ``tool_use_id``, a subagent event's ``agent_id``, and
for the rest the whole payload. A POST sent twice (a retry, or again after a restart) is
the same event and is recorded once; two events that say exactly the same thing (a second
identical prompt, say) are recorded once too, which costs only a marker, never a call. A
``SessionEnd`` is also told apart by how many ``SessionStart`` events of its session came before
it (``ended_again``): a session resumed after it ended can end again with the very same payload.

Request threads decode and queue (``HookInbox.put``); the daemon's loop writes what it
drains in its own transaction, so answering a hook never waits for the ledger.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import orjson

from agentledger.facts import Fact, Marker, SessionEnded, SessionStarted, SubagentEnded, SubagentSpawned, ToolObserved
from agentledger.sources.claude_code import AGENT, SOURCE, child_key, child_session_id, session_key
from agentledger.sources.common import derived_id, duration, error_text, line_id, text, tool_target

TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
SUBAGENT_EVENTS = frozenset({"SubagentStart", "SubagentStop"})
# SessionStart's ``source``: these begin a conversation; "resume" and "compact" continue one, and
# "resume" (--resume/--continue) may take up a session that ended.
_NEW_SESSION = frozenset({"startup", "clear"})
_RESUMED = "resume"


class BadHook(ValueError):
    """A payload that is not a Claude Code hook event (answered 400, never queued)."""


@dataclass(frozen=True, slots=True)
class HookEvent:
    """One received hook event: its identity, when it arrived, and its fact (and any more it tells)."""

    id: int
    ts_ms: int
    session_id: str
    name: str
    fact: Fact
    more: tuple[Fact, ...] = ()
    # A Task subagent's tool event: its spawn by the session, for the ledger to record should it not know
    # yet who spawned the subagent (its SubagentStart never came, or not yet).
    spawn: SubagentSpawned | None = None


def event_id(name: str, session_id: str, payload: dict) -> int:
    """What makes a hook event unique (see the module's docstring)."""
    if name in TOOL_EVENTS and text(payload.get("tool_use_id")):
        basis = f"{name}\0{session_id}\0{payload['tool_use_id']}".encode()
    elif name in SUBAGENT_EVENTS and text(payload.get("agent_id")):
        basis = f"{name}\0{session_id}\0{payload['agent_id']}".encode()
    else:
        basis = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    return line_id(basis)


def _tool(base: dict, name: str, payload: dict) -> ToolObserved:
    path, command = tool_target(payload.get("tool_input"))
    status, error = "running", None
    if name == "PostToolUse":
        status = "ok"
    elif name == "PostToolUseFailure":
        status, error = "error", error_text(payload.get("error")) or "tool failed"
    return ToolObserved(**base, tool_name=text(payload.get("tool_name")), tool_call_id=payload["tool_use_id"],
                        status=status, error=error, duration_ms=duration(payload.get("duration_ms")),
                        file_path=path, exec_command=command)


def _spawned(told: dict, child: dict, payload: dict) -> SubagentSpawned:
    """The session's spawn of its Task subagent (``child``'s ids) that a subagent's event tells (``told``:
    the spawn's own base fields)."""
    return SubagentSpawned(**told | {"kind": "subagent.spawn"}, child_session_key=child["session_key"],
                           child_agent_id=AGENT, mode=text(payload.get("agent_type")))


def _child(session_id: str, agent_id: str) -> dict:
    """The ids of the Task subagent ``agent_id``'s own session."""
    return {"session_key": child_key(session_id, agent_id), "session_id": child_session_id(session_id, agent_id)}


def asking(session_id: str, agent_id: object) -> tuple[str, str | None]:
    """(key of the session whose tool call a PreToolUse asks about, key of the session that spawned it):
    asked from inside a Task subagent (a payload's ``agent_id``), the call is the subagent's own session's,
    in its parent's family; else the session's own, spawned by none a hook names."""
    agent = text(agent_id)
    if agent is None:
        return session_key(session_id), None
    return child_key(session_id, agent), session_key(session_id)


def decode(payload: object, received_ms: int) -> HookEvent:
    """A hook payload → its event."""
    if not isinstance(payload, dict):
        raise BadHook("a hook payload is a JSON object")
    name, session_id = text(payload.get("hook_event_name")), text(payload.get("session_id"))
    if name is None or session_id is None:
        raise BadHook("a hook payload needs string hook_event_name and session_id")
    eid = event_id(name, session_id, payload)
    base = {"event_id": eid, "ts_ms": received_ms, "kind": f"hook.{name}", "source": SOURCE, "agent_id": AGENT,
            "session_key": session_key(session_id), "session_id": session_id}
    fact: Fact
    more: tuple[Fact, ...] = ()
    spawn = None
    told = base | {"event_id": derived_id(eid, 1)}
    if name in TOOL_EVENTS and text(payload.get("tool_use_id")):
        # Asked from inside a Task subagent (agent_id), the call is the subagent's, in its own session.
        agent = text(payload.get("agent_id"))
        child = {} if agent is None else _child(session_id, agent)
        fact = _tool(base | child, name, payload)
        spawn = _spawned(told, child, payload) if child else None
    elif name == "SessionStart" and text(payload.get("source")) in _NEW_SESSION:
        fact = SessionStarted(**base)
    elif name == "SessionStart" and text(payload.get("source")) == _RESUMED:
        fact = SessionStarted(**base, continues=True)
    elif name == "SessionEnd":
        fact = SessionEnded(**base)
    elif name in SUBAGENT_EVENTS and text(payload.get("agent_id")):
        child = _child(session_id, payload["agent_id"])
        fact = Marker(**base | child)
        if name == "SubagentStart":
            more = (_spawned(told, child, payload),)
        else:  # the session's word that its subagent is done; the Task's result, once read, says how
            more = (SubagentEnded(**told | {"kind": "subagent.stop"}, child_session_key=child["session_key"]),)
    else:
        fact = Marker(**base)
    return HookEvent(eid, received_ms, session_id, name, fact, more, spawn)


def ended_again(event: HookEvent, starts: int) -> HookEvent:
    """A SessionEnd's event once the ledger said how many SessionStarts of its session it recorded
    before it: one sent again is the same event, one after a resume a new end."""
    if not starts:
        return event
    eid = derived_id(event.id, starts)
    return replace(event, id=eid, fact=replace(event.fact, event_id=eid))


def denied(event: HookEvent, reason: str) -> HookEvent:
    """A PreToolUse's event once a gate denied its call: the call will never run, it failed for ``reason``."""
    if not isinstance(event.fact, ToolObserved):
        return event
    return replace(event, fact=replace(event.fact, status="error", error=reason))


class HookInbox:
    """Hook events waiting for the daemon's writer; request threads put, the daemon loop drains.

    Bounded: while the daemon cannot write (a long catch-up), events past ``limit`` are refused
    and counted rather than held without end; Claude Code goes on regardless."""

    def __init__(self, wake: Callable[[], None] = lambda: None, limit: int = 100_000):
        self.wake = wake
        self.limit = limit
        self.refused = 0
        self._lock = threading.Lock()
        self._pending: list[HookEvent] = []

    def put(self, event: HookEvent) -> bool:
        with self._lock:
            if len(self._pending) >= self.limit:
                self.refused += 1
                return False
            self._pending.append(event)
        self.wake()
        return True

    def drain(self) -> tuple[list[HookEvent], int]:
        """The events to write, and how many were refused since the last drain."""
        with self._lock:
            pending, self._pending = self._pending, []
            refused, self.refused = self.refused, 0
        return pending, refused

