"""The normalized vocabulary every source decoder emits and the ledger consumes.

Facts are flat (no nested objects) so the ledger can bind them straight into
rows. Costs are integer pico-USD so that sums are exact however many calls add up.
"""

from __future__ import annotations

from dataclasses import dataclass


# The common fields are positional, every kind's own keyword-only: a decoder builds a line's common part
# once as a tuple and passes it to whichever kind the line is: about half the cost of 18 keywords.
@dataclass(slots=True)
class Fact:
    event_id: int  # signed 64-bit, stable across copies of the same line
    ts_ms: int
    kind: str
    source: str
    agent_id: str | None = None
    session_key: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    seq: int | None = None  # the producer's per-process counter, where it has one: a drop means it restarted
    # Of a line that names no agent, the agent whose folder its file is in (``agents/<id>/``): whose the fact is
    # when neither its run nor its session names one either (the ledger's to know, see ledger/agents.py).
    agent_folder: str | None = None


@dataclass(slots=True, kw_only=True)
class Tokens:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cache_write_1h: int = 0  # the part of cache_write kept for an hour (priced higher than 5 minutes)
    total: int = 0


@dataclass(slots=True, kw_only=True)
class SessionStarted(Fact):
    resumed_from: str | None = None
    # The same session taken up again after it ended (Claude Code's --resume/--continue): its end no longer stands.
    continues: bool = False


@dataclass(slots=True, kw_only=True)
class SessionEnded(Fact):
    message_count: int | None = None
    duration_ms: int | None = None


@dataclass(slots=True, kw_only=True)
class RunStarted(Fact):
    model: str | None = None
    provider: str | None = None
    is_heartbeat: bool = False
    is_followup: bool = False
    origin_channel: str | None = None


# How a run's end is known, weakest first: the session's next prompt implies it, the producer
# reports it, the user stopped the run. The ledger never lets a weaker end replace a stronger one.
ENDED_BY = ("next_prompt", "report", "user")


@dataclass(slots=True, kw_only=True)
class RunEnded(Fact):
    ended_by: str = "report"  # one of ENDED_BY; "user" makes the run interrupted
    model: str | None = None
    provider: str | None = None
    duration_ms: int | None = None
    usage: Tokens | None = None
    tool_call_count: int | None = None
    stop_reason: str | None = None
    error: str | None = None


@dataclass(slots=True, kw_only=True)
class LlmCall(Fact):
    provider: str | None = None
    model: str | None = None
    call_index: int | None = None
    tokens: Tokens
    cost_pico: int | None = None  # None: the source carried no cost (the pipeline may price it)
    cost_source: str = "log"  # "log" | "transcript" | "priced"
    duration_ms: int | None = None
    error: str | None = None
    # Sources that repeat one call over several lines (streaming snapshots) name it, so the
    # ledger keeps one row per call with the best of its lines; None: the line is the call.
    call_key: str | None = None
    # The response the call answered with, which several calls may share (a gateway that reuses
    # response ids, a side branch replaying a main-branch response). A side-branch call whose
    # response a main-branch call also gave is a replay of it, never counted.
    message_key: str | None = None
    sidechain: bool = False
    context_tokens: int | None = None  # the context window in use at this call
    # A call on a side branch names the session the branch becomes if any event names that session
    # (a subagent's); until one does, the call stays in ``session_id``'s session.
    branch: str | None = None
    # What the call's price depends on beside its tokens, kept so a reprice prices it as it ran:
    # the speed the producer reported where it was not the standard one (Anthropic's "fast"), and
    # the web searches the provider ran for it (charged per search, apart from the tokens), and where
    # the call's inference was confined to, where not to the default, global, routing (Anthropic's "us").
    speed: str | None = None
    web_searches: int = 0
    inference_geo: str | None = None


@dataclass(slots=True, kw_only=True)
class UsageSnapshot(Fact):
    """A run's cumulative usage; its cost is a fallback for runs with no per-call facts."""

    provider: str | None = None
    model: str | None = None
    tokens: Tokens
    cost_pico: int | None = None
    cost_source: str = "log"  # "log" | "priced" (from its tokens, when the log carried no cost), as a call's


@dataclass(slots=True, kw_only=True)
class ToolStarted(Fact):
    tool_name: str | None = None
    tool_call_id: str
    file_path: str | None = None  # what the call was asked to touch or run, where its start says so
    exec_command: str | None = None
    branch: str | None = None  # as LlmCall.branch: the call is that session's once an event names it
    message_key: str | None = None  # as LlmCall.message_key: a replay's tool calls are the main branch's


@dataclass(slots=True, kw_only=True)
class ToolEnded(Fact):
    tool_name: str | None = None
    tool_call_id: str
    is_error: bool = False
    duration_ms: int | None = None
    error: str | None = None
    file_path: str | None = None
    exec_command: str | None = None
    exit_code: int | None = None  # a command's exit status, which producers do not count as an error
    branch: str | None = None  # as ToolStarted.branch


@dataclass(slots=True, kw_only=True)
class ToolObserved(Fact):
    """A tool call as a live hook reports it, ahead of the transcript line that will tell it in full.

    It fills in what the ledger does not know yet and never overrides what a transcript said;
    the ledger finds the call's row by ``tool_call_id`` (the run is the ledger's to resolve)."""

    tool_name: str | None = None
    tool_call_id: str
    status: str  # running | ok | error
    duration_ms: int | None = None
    error: str | None = None
    file_path: str | None = None
    exec_command: str | None = None


@dataclass(slots=True, kw_only=True)
class SubagentSpawned(Fact):
    child_session_key: str
    child_agent_id: str | None = None
    label: str | None = None
    mode: str | None = None
    branch: str | None = None  # as ToolStarted.branch
    message_key: str | None = None  # as ToolStarted.message_key: a replay's spawn is the main branch's
    # The child's own account of its spawn (its transcript's header), not its parent's: the ledger takes
    # what the subagent is from the child's word before its parent's (see the writer's _SUBAGENT_SPAWNED).
    by_child: bool = False


@dataclass(slots=True, kw_only=True)
class SubagentEnded(Fact):
    """Either of the producer's two end events; the ledger merges them into one row."""

    child_session_key: str
    outcome: str | None = None
    reason: str | None = None
    duration_ms: int | None = None
    ended_ms: int | None = None
    model: str | None = None
    # The key the spawn recorded when the child's own key was not known yet: the row takes this one.
    spawn_key: str | None = None
    # Told by a line that may name no subagent at all (a background task's notification): it ends the row the
    # ledger holds for the child, or the spawn, and makes none.
    launched_only: bool = False


@dataclass(slots=True, kw_only=True)
class SubagentLaunched(Fact):
    """The child a spawn started working in the background: it names the child as an end does, and ends
    nothing (the child's own end, or reconcile, does)."""

    child_session_key: str
    spawn_key: str  # as SubagentEnded.spawn_key


@dataclass(slots=True, kw_only=True)
class Compaction(Fact):
    phase: str  # "start" | "end"
    message_count: int | None = None
    compacting_count: int | None = None
    token_count: int | None = None
    compacted_count: int | None = None


@dataclass(slots=True, kw_only=True)
class Message(Fact):
    direction: str  # "inbound" | "outbound"
    channel: str | None = None
    peer: str | None = None
    preview: str | None = None
    success: bool | None = None
    error: str | None = None


@dataclass(slots=True, kw_only=True)
class Marker(Fact):
    """A known event kind the ledger only counts (e.g. llm.input, llm.output)."""


@dataclass(slots=True, kw_only=True)
class RawEvent(Fact):
    """An event kind this version does not understand, kept whole for later."""

    raw: bytes


@dataclass(slots=True, kw_only=True)
class Reject:
    """A line that could not become a fact: recorded with where it was, never dropped."""

    offset: int
    length: int
    reason: str
    head: bytes
