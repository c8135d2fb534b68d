"""Decoder for Claude Code transcripts (FORMATS.md §3).

``projects/<encoded-cwd>/<sessionId>.jsonl`` is one session; its side branches, Task
subagents and /btw side questions alike, write ``<sessionId>/subagents/agent-<agentId>.jsonl``
in newer versions, or inline lines marked ``isSidechain`` (with ``agentId``) in older ones. A
workflow's subagents (the Workflow tool's, deep research's) write theirs in
``<sessionId>/subagents/workflows/<run>/``.

Identity: ``sessions.session_id`` is Claude Code's own ``sessionId`` (what its hooks send
as ``session_id``), ``session_key`` is ``agent:claude-code:<sessionId>`` and the agent is
``claude-code``. A Task subagent is a session of its own, ``<sessionId>/<agentId>`` keyed
``agent:claude-code:subagent:<sessionId>/<agentId>`` (agent ids are short: the parent's id
keeps two sessions' subagents apart); its spend rolls up into the parent's family. A forked
session's file starts with copies of its origin's entries: each is read as the entry it copies
(see ``_copied_entry``), so the origin's history is the origin's, once.

Nothing on a side branch's own lines says whether it is a Task subagent or a /btw question:
only the Task's result (``toolUseResult.agentId``) or a SubagentStart hook says so, and
either may be read before or after the branch. So every call on a branch names the child
session it would be (``LlmCall.branch``), and the result or hook names that session; the
ledger puts a branch's calls in the child once it is named, whatever the order (see
ledger/side_branches.py), and leaves a branch never named (/btw) in the parent. The Task's spawn
is recorded under ``agent:claude-code:subagent:<tool_use id>`` until its result names the
child (or a hook of the subagent does: its SubagentStart, or without one its first tool event, when
only one Task the session was asked about can be its own), whose key the subagent row then takes. A Task
run in the background (``run_in_background``) has its result written as soon as its subagent is launched
(``toolUseResult`` ``isAsync``, status ``async_launched``), while the subagent works on: that result names the
child and ends nothing (as does a Task's that launched its subagent remotely, ``remote_launched``). Such a
subagent ends by the notification Claude Code writes into the session when it is over (see _NOTIFICATIONS), or by
its SubagentStop hook, or, with neither, is settled by reconcile once its own lines have stopped for the grace (see
ledger/reconcile.py). A Task
whose result is an error that names no child (refused, denied, failed before a subagent ran) ends the subagent
its spawn recorded, in error (see ledger/side_branches.py). Tool calls on a branch name it too, and count
in the child session the same way; they stay in the parent's turn (a subagent's work is no
run, so the run that spawned it counts them). A Task a subagent starts (every subagent's
transcript lies in the session's subagents/ folder, however deep) names its branch too: the
child it spawns is the subagent's once the branch is named, the session's until then, so the
session's family counts it all along. A compaction on a branch is the child's at once: it is
the branch's own context that was compacted, whatever the branch turns out to be.

One response is streamed as one line per content block, each repeating ``message.id`` and
``requestId`` with a usage snapshot that grows: every line names the call
``<sessionId>:<message.id>:<requestId>`` and the ledger keeps the largest. ``message.id`` alone
does not name a call: a gateway may give two requests the same one. A side branch that replays
a main-branch response does so under a new request id, so each line also names its response
(``<sessionId>:<message.id>``): a side-branch call whose response a main-branch call gave is
that call's replay, never counted, nor are the tool calls it repeats, whichever line is read
first (see ledger/writer.py and ledger/side_branches.py). A copied tool_result line names no
response: the ledger knows it as a branch's result of a call the branch did not start. A line
without a request id names its call by the response alone, as ledgers written before request ids
counted did.

A run is one main-chain prompt's turn, whether the prompt is a string or blocks (text with a
pasted image, say). What a typed local command writes (/model, /cost, /compact, a ``!`` shell
command, and their output) is no prompt, nor is a background task's notification (see
``_NOTIFICATIONS``); a custom command's or skill's loading line is, and a local command that asks
the model begins its turn when the model answers (see ``_ECHO``). A run
ends where the transcript says so (a stop reason that ends the turn, ``turn_duration``), where
the user interrupts it (``interrupted``), or, failing both, at the session's next prompt: an
implied end the ledger lets any reported one replace. A last turn with none of these is settled
by reconcile (see ledger/reconcile.py). However it ended, a turn the user did not stop went as its last
answer did: one whose last main-branch answer is an API error Claude Code wrote in the model's place
(``isApiErrorMessage``: "prompt is too long", an overload it gave up retrying) failed with that error,
and one Claude Code answered after such an error, retrying within the turn, is ok (see ledger/side_branches.py).
"""

from __future__ import annotations

import json
import re
from pathlib import PurePath

from agentledger.facts import (
    Compaction,
    Fact,
    LlmCall,
    Marker,
    RawEvent,
    Reject,
    RunEnded,
    RunStarted,
    SubagentEnded,
    SubagentLaunched,
    SubagentSpawned,
    Tokens,
    ToolEnded,
    ToolStarted,
)
from agentledger.defaults import HEAD_BYTES
from agentledger.pricing import exclusive, provider_of
from agentledger.sources.common import (
    RunLookup,
    RunTracker,
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

SOURCE = "claude-code"
AGENT = "claude-code"
SYNTHETIC = "<synthetic>"
# These lines can be hundreds of MB and say nothing about spend: recognised by their first
# bytes and never parsed (see skipped_head).
_SNAPSHOT = "file-history-snapshot"
_SNAPSHOT_MARK = _SNAPSHOT.encode()
_JSON_SPACE = " \t\r\n"
_SCAN = json.JSONDecoder().raw_decode
# The record types the ledger reads, whose lines must carry what it needs (a time, first). Claude Code
# writes others beside them, more with each release: `summary`, `ai-title`, `custom-title`,
# `agent-name`, `last-prompt`, `permission-mode`, `mode`, `relocated`, `content-replacement`…, titles
# and settings that mostly have no time of their own. Such a line is neither an event nor a fault:
# with no time it is skipped, with one it is kept whole (a RawEvent) for a later version to read.
_INDEXED = frozenset({"user", "assistant", "system"})
TASK_TOOLS = frozenset({"Task", "Agent"})
# A Task's result's status when it only launched its subagent, to work in the background or remotely: the subagent
# has only begun.
_LAUNCHES = frozenset({"async_launched", "remote_launched"})
# What Claude Code writes into the session, as a user line, when a task it runs in the background is over (a
# background Task's subagent, a background shell command): "<task-notification>\n<task-id>…</task-id>\n
# [<tool-use-id>…</tool-use-id>\n]<output-file>…</output-file>\n<status>…</status>\n<summary>…</summary>…", or in
# older releases "<agent-notification>\n<agent-id>…</agent-id>…". Newer releases mark it isMeta (and may add
# origin.kind "task-notification"), older ones not. Nobody typed it: it is folded into the turn under way, or the
# model answers it as it would an isMeta line, so it starts and ends no turn (see FileDecoder._notified).
_NOTIFICATIONS = ("<task-notification>", "<agent-notification>")
_NOTIFICATION_ORIGIN = "task-notification"
_NOTIFICATION_TAG = re.compile(r"<(task-id|agent-id|tool-use-id|status)>\s*([^<]*?)\s*</\1>")
# A notification's status → the outcome it gives the subagent; one stopped before its end (by the user, or the
# model) was killed, as the ledger calls a subagent its requester stopped (telemetry's, an aborted OpenClaw turn's).
_NOTIFIED = {"completed": "ok", "failed": "error", "killed": "killed"}
# Blocks a prompt is written as when it is more than text (a pasted image or document).
_PROMPT_BLOCKS = frozenset({"text", "image", "document"})
_INTERRUPT = "[Request interrupted by user"
# How Claude Code writes a slash command as the user's lines (its processSlashCommand):
# - a prompt command (a custom command, a skill, /init, /review…) as its loading metadata,
#   "<command-message>name</command-message>\n<command-name>/name</command-name>[\n<command-args>…]", then
#   the prompt it expands into as an isMeta line; it always asks the model (shouldQuery), so the metadata
#   line, which carries the uuid of the user's input, is that turn's prompt like any prompt;
# - any other command (local: /model, /cost, /clear, /compact…; local-jsx: /config, /goal…) as the echo of
#   what was typed, "<command-name>/name</command-name>\n<command-message>name</command-message>\n
#   <command-args>…</command-args>", and its output "<local-command-stdout>…" or "<local-command-stderr>…"
#   (an isMeta "<local-command-caveat>" before them). It does not ask the model, unless it says so and adds
#   isMeta lines for the model to answer (/goal sets a goal and asks, onDone's shouldQuery and metaMessages);
# - a "!" shell command as "<bash-input>…" and its output as "<bash-stdout>…<bash-stderr>…": no turn either.
# So a command's echo and any local output is no prompt: none starts or ends a turn. A local command that
# does ask the model (echo, output, an isMeta line, then an answer) begins its turn when the answer comes
# (see FileDecoder._user), as the next prompt would have. Lines a tool adds to its own turn (a skill's
# body, tagged sourceToolUseID) are no prompt either.
_ECHO = "<command-name>"
_LOCAL = ("<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>", "<bash-input>",
          "<bash-stdout>", "<bash-stderr>")
_TYPED, _RAN, _ASKED = "typed", "ran", "asked"  # how far a local command has gone (see FileDecoder._user)
# A main-branch response that stops for these reasons ends the turn (tool_use continues it).
_TURN_OVER = frozenset({"end_turn", "stop_sequence", "max_tokens", "refusal"})
# How many folders below a session's subagents/ folder a subagent's transcript may lie: Task subagents
# write theirs in it however deep they are nested, a workflow's (deep research's too) two below, in
# workflows/<run>/, beside the run's journal.jsonl; one more level is looked in, should that grow.
SUBAGENT_DEPTH = 3
WORKFLOW_AGENT = "workflow-subagent"  # a workflow's subagent's mode, as Claude Code names its type


def subagents_level(path: PurePath) -> int | None:
    """How many folders above a subagent's transcript its session's ``subagents/`` folder is: 0 for
    ``subagents/agent-<id>.jsonl``, 2 for a workflow's ``subagents/workflows/<run>/agent-<id>.jsonl``
    (at most SUBAGENT_DEPTH); None for a session's own transcript."""
    for up, folder in enumerate(path.parents[:SUBAGENT_DEPTH + 1]):
        if folder.name == "subagents" and (up == 0 or path.name.startswith("agent-")):
            return up
    return None


def session_key(session_id: str) -> str:
    return f"agent:{AGENT}:{session_id}"


def spawn_key(tool_use_id: str) -> str:
    """A Task subagent's key until its result names the child."""
    return f"agent:{AGENT}:subagent:{tool_use_id}"


def child_session_id(session_id: str, agent_id: str) -> str:
    return f"{session_id}/{agent_id}"


def child_key(session_id: str, agent_id: str) -> str:
    return branch_key(child_session_id(session_id, agent_id))


def branch_key(branch: str) -> str:
    """The key of the subagent whose session is the side branch ``branch`` (``<sessionId>/<agentId>``)."""
    return f"agent:{AGENT}:subagent:{branch}"


def skipped_head(head: bytes) -> bool:
    """Whether a line beginning with ``head`` is a file-history snapshot, skipped unread however long
    it is: the object's own ``type`` says so among the keys ``head`` holds whole. Claude Code writes
    it first; a line whose first bytes do not reach it is read, or rejected if too long to be."""
    return _SNAPSHOT_MARK in head and _head_type(head.decode("utf-8", "replace")) == _SNAPSHOT


def _head_type(head: str) -> object:
    """The top-level ``type`` of the JSON object ``head`` begins, None unless ``head`` holds it whole
    (a nested object's ``type`` is inside a value, decoded past whole)."""
    pos = _skip_space(head, 0)
    if head[pos:pos + 1] != "{":
        return None
    try:
        while True:
            key, pos = _SCAN(head, _skip_space(head, pos + 1))
            pos = _skip_space(head, pos)
            if key.__class__ is not str or head[pos] != ":":
                return None
            value, pos = _SCAN(head, _skip_space(head, pos + 1))
            if key == "type":
                return value
            pos = _skip_space(head, pos)
            if head[pos] != ",":
                return None
    except (ValueError, IndexError):  # the head ends, or is no JSON, before the key
        return None


def _skip_space(s: str, pos: int) -> int:
    while pos < len(s) and s[pos] in _JSON_SPACE:
        pos += 1
    return pos


def _tokens(usage: dict) -> Tokens:
    # OpenAI-style usage through a gateway counts cached tokens inside the prompt: Chat Completions' as
    # prompt_tokens, the Responses API's as input_tokens, named so by its input_tokens_details.
    if "prompt_tokens" in usage:
        return _openai(usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("prompt_tokens_details"))
    details = usage.get("input_tokens_details")
    if isinstance(details, dict) and "cached_tokens" in details:
        return _openai(usage.get("input_tokens"), usage.get("output_tokens"), details)
    t = Tokens(input=count(usage.get("input_tokens")), output=count(usage.get("output_tokens")),
               cache_read=count(usage.get("cache_read_input_tokens")),
               cache_write=count(usage.get("cache_creation_input_tokens")))
    split = usage.get("cache_creation")
    if isinstance(split, dict):
        t.cache_write_1h = min(count(split.get("ephemeral_1h_input_tokens")), t.cache_write)
    t.total = t.input + t.output + t.cache_read + t.cache_write
    return t


def _openai(prompt: object, completion: object, details: object) -> Tokens:
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return exclusive(Tokens(input=count(prompt), output=count(completion), cache_read=cached))


def _speed(usage: dict) -> str | None:
    """The speed a call ran at where it was not the standard one (fast mode is priced apart)."""
    speed = text(usage.get("speed"))
    return None if speed == "standard" else speed


def _inference_geo(usage: dict) -> str | None:
    """Where a call's inference was confined to ("us"), None for the default global routing, or for
    a model that takes no such setting ("not_available")."""
    geo = text(usage.get("inference_geo"))
    return None if geo in ("global", "not_available") else geo


# More web searches than this in one call is garbage: a call's searches are capped by its tool's max_uses.
_MAX_SEARCHES = 10_000


def _web_searches(usage: dict) -> int:
    """The web searches the API ran for a call, each charged apart from the tokens. Web fetches cost
    nothing beyond the tokens of what they fetched, so only their tokens count."""
    tools = usage.get("server_tool_use")
    n = count(tools.get("web_search_requests")) if isinstance(tools, dict) else 0
    return n if n <= _MAX_SEARCHES else 0


def provider_of_model(model: str | None) -> str | None:
    """Claude Code's own models are Anthropic's, new ones before the price table knows them too; a
    gateway's other models are the provider's the table lists them under."""
    if not model:
        return None
    return "anthropic" if model.startswith("claude") else provider_of(model)


class FileDecoder:
    """Decodes the lines of one Claude Code transcript; built afresh for each read of the file."""

    def __init__(self, path: str, lookup: RunLookup):
        p = PurePath(path)
        up = subagents_level(p)
        self.subagent_file = up is not None
        # A main transcript is named after its session; a subagent's lies in that session's folder.
        name = ledger_name(p.name)
        self.path_session = ledger_name(p.parents[up + 1].name) if up is not None else name.removesuffix(".jsonl")
        self.path_agent = name.removeprefix("agent-").removesuffix(".jsonl") if self.subagent_file else None
        # A workflow's subagent: the run it is an agent of (see _spawned_by_workflow).
        self.workflow = ledger_name(p.parent.name) if up == 2 and p.parents[1].name == "workflows" else None
        # Side-branch files start no runs: their lines join the run of the session at their time.
        self.runs = RunTracker(lookup, None if self.subagent_file else self.path_session)
        # session → [uuid, time, how far] of the local command typed since the session's last prompt (see _user)
        self.commands: dict[str, list] = {}

    def __call__(self, line: bytes, offset: int) -> Fact | Reject | list[Fact]:
        if skipped_head(line[:HEAD_BYTES]):
            return []  # an object that says it is a snapshot; a line that is no object at all is rejected
        obj = json_object(line, offset)
        if obj.__class__ is Reject:
            return obj
        kind = obj.get("type")
        if kind.__class__ is not str or not kind:
            return reject(line, offset, "missing field 'type'")
        ts = iso_ms(obj.get("timestamp"))
        if ts is None:
            if kind not in _INDEXED:
                return []
            return reject(line, offset, "missing or invalid field 'timestamp'")
        copied = _copied_entry(obj)
        if copied is None:
            session_id = text(obj.get("sessionId")) or self.path_session
            uuid = text(obj.get("uuid"))
        else:  # a fork's copy of another session's entry is that entry, whichever file is read
            session_id, uuid = copied
        base = {"event_id": line_id(uuid.encode() if uuid else line), "ts_ms": ts, "source": SOURCE,
                "agent_id": AGENT, "session_key": session_key(session_id), "session_id": session_id}
        sidechain = obj.get("isSidechain") is True
        agent = (text(obj.get("agentId")) or self.path_agent) if sidechain or self.subagent_file else None
        branch = agent and child_session_id(session_id, agent)
        msg = obj.get("message")
        if kind in ("assistant", "user") and isinstance(msg, dict):
            decoded = (self._assistant(base, obj, msg, sidechain, branch) if kind == "assistant"
                       else self._user(base, obj, msg, sidechain, uuid, branch))
            if offset == 0 and self.workflow is not None and agent:
                # The first line of a workflow's subagent's transcript (see _spawned_by_workflow).
                return self._spawned_by_workflow(base, agent, decoded)
            return decoded
        if kind == "system":
            return self._system(base, obj, uuid, branch)
        return RawEvent(**base, kind=kind, raw=line)

    def _spawned_by_workflow(self, base: dict, agent: str, decoded: Fact | list[Fact]) -> list[Fact]:
        """A workflow's subagent is spawned by no Task, and no result names it: only the place of its
        transcript says it is a subagent of the session. So the transcript's first line also records
        the spawn, in the child's own word (its workflow run as its label), and names the child session
        its calls then go to: a subagent session of the parent, whose family counts it."""
        child = child_key(base["session_id"], agent)
        return _numbered(base, decoded, [
            SubagentSpawned(**base, kind="subagent.spawn", run_id=self._run(base), child_session_key=child,
                            child_agent_id=AGENT, label=self.workflow, mode=WORKFLOW_AGENT, by_child=True),
            Marker(**base | {"session_key": child, "session_id": child_session_id(base["session_id"], agent)},
                   kind="subagent.start")])

    def _run(self, base: dict) -> str | None:
        return self.runs.current(base["session_id"], base["ts_ms"])

    def _assistant(self, base: dict, obj: dict, msg: dict, sidechain: bool, branch: str | None) -> Fact | list[Fact]:
        typed = None if sidechain else self.commands.pop(base["session_id"], None)
        if typed is not None and typed[2] == _ASKED:  # the answer to a local command that asked (see _ECHO)
            begun = self._command_turn(base, typed)
            return _numbered(base, self._response(base, obj, msg, sidechain, branch), begun)
        return self._response(base, obj, msg, sidechain, branch)

    def _response(self, base: dict, obj: dict, msg: dict, sidechain: bool, branch: str | None) -> Fact | list[Fact]:
        run_id = self._run(base)
        model = text(msg.get("model"))
        message_id = text(msg.get("id"))
        if model == SYNTHETIC and obj.get("isApiErrorMessage") is not True:
            # A message Claude Code wrote itself ("No response requested."): no model was called.
            return Marker(**base, kind="assistant.synthetic")
        message_key = f"{base['session_id']}:{message_id}" if message_id else None
        request_id = text(obj.get("requestId"))
        call_key = f"{message_key}:{request_id}" if message_key and request_id else message_key
        if obj.get("isApiErrorMessage") is True:
            # An API error shown as a message: a failed call, with no usage and no call of its own, that ends no
            # turn (Claude Code may retry after it) but fails one it is the last answer of (see the module's doc).
            # A side branch's is its branch's, not the turn's. A side branch copies it as it copies any response
            # of the main branch: its keys make the copy the replay it is.
            return LlmCall(**base, kind="llm.call", run_id=run_id, model=None, tokens=Tokens(),
                           error=_first_text(msg.get("content")) or "API error", call_key=call_key,
                           message_key=message_key, sidechain=sidechain, branch=branch)
        usage = msg.get("usage")
        if not isinstance(usage, dict):
            usage = {}  # a missing or malformed usage reports nothing
        tokens = _tokens(usage)
        # Older transcripts (costUSD went in 2025) carry the producer's cost of each response: the log's
        # word, kept (a streamed response's lines each carry one, and the call keeps one line's).
        call = LlmCall(**base, kind="llm.call", run_id=run_id, provider=provider_of_model(model), model=model,
                       tokens=tokens, cost_pico=logged_cost(obj.get("costUSD"), tokens),
                       speed=_speed(usage), web_searches=_web_searches(usage), inference_geo=_inference_geo(usage),
                       call_key=call_key, message_key=message_key, sidechain=sidechain, branch=branch)
        facts: list[Fact] = [call]
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                if not (isinstance(block, dict) and block.get("type") == "tool_use" and text(block.get("id"))):
                    continue
                ids = {"event_id": derived_id(base["event_id"], len(facts))}
                path, command = tool_target(block.get("input"))
                facts.append(ToolStarted(**base | ids, kind="tool.start", run_id=run_id,
                                         tool_name=text(block.get("name")), tool_call_id=block["id"], branch=branch,
                                         message_key=message_key, file_path=path, exec_command=command))
                if block.get("name") in TASK_TOOLS:
                    task = block.get("input") if isinstance(block.get("input"), dict) else {}
                    ids = {"event_id": derived_id(base["event_id"], len(facts))}
                    facts.append(SubagentSpawned(**base | ids, kind="subagent.spawn", run_id=run_id,
                                                 child_session_key=spawn_key(block["id"]), child_agent_id=AGENT,
                                                 label=text(task.get("description")),
                                                 mode=text(task.get("subagent_type")), branch=branch,
                                                 message_key=message_key))
        if not sidechain and run_id is not None and msg.get("stop_reason") in _TURN_OVER:
            facts.append(RunEnded(**base | {"event_id": derived_id(base["event_id"], len(facts))}, kind="run.end",
                                  run_id=run_id, model=model, provider=call.provider,
                                  stop_reason=msg["stop_reason"]))
        return facts[0] if len(facts) == 1 else facts

    def _user(self, base: dict, obj: dict, msg: dict, sidechain: bool, uuid: str | None,
              branch: str | None) -> Fact | list[Fact]:
        content = msg.get("content")
        session_id = base["session_id"]
        interrupt = not sidechain and _is_interrupt(content)
        if not interrupt and _is_prompt(content):
            if obj.get("sourceToolUseID") is not None:
                return Marker(**base, kind="user.message")  # a tool's addition to its own turn (see _ECHO)
            opening = _opening(content)
            if opening.startswith(_NOTIFICATIONS) or _origin(obj) == _NOTIFICATION_ORIGIN:
                return self._notified(base, opening)
            # What a typed local command writes (see _ECHO): no turn. Which command it was, and how far it
            # went, is followed within this read only: a read that begins between a local command and the
            # model's answer to it has the answer join the session's run, as any line does.
            if opening.startswith(_LOCAL):
                self._ran(base, sidechain)
                return Marker(**base, kind="user.local_command")
            if opening.startswith(_ECHO):
                self._typed(base, sidechain, uuid)
                return Marker(**base, kind="user.command")
            if sidechain or obj.get("isCompactSummary") is True or obj.get("isMeta") is True or not uuid:
                typed = None if sidechain or obj.get("isMeta") is not True else self.commands.get(session_id)
                if typed is not None:
                    typed[2] = _ASKED  # a local command gave the model something to answer
                return Marker(**base, kind="user.prompt")
            self.commands.pop(session_id, None)
            start, *ended = self._begin_turn(base, uuid)
            return _numbered(base, start, ended) if ended else start
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
                   and text(b.get("tool_use_id"))] if isinstance(content, list) else []
        if not results and not interrupt:
            return Marker(**base, kind="user.message")
        begun: list[Fact] = []
        typed = self.commands.pop(session_id, None) if interrupt else None
        if typed is not None and typed[2] == _TYPED:
            # A prompt command stopped before it ran (the user's Esc while it expanded) is written as its
            # echo and this line: the command's own end, no turn's.
            return Marker(**base, kind="user.interrupt")
        if typed is not None and typed[2] == _ASKED:
            begun = self._command_turn(base, typed)  # the user stopped the turn the command asked for
        run_id = self._run(base)
        if interrupt and run_id is None:
            return Marker(**base, kind="user.interrupt")
        outcome = obj.get("toolUseResult")
        facts: list[Fact] = []
        for block in results:
            is_error = block.get("is_error") is True
            facts.append(ToolEnded(**base | {"event_id": derived_id(base["event_id"], len(facts))}, kind="tool.end",
                                   run_id=run_id, tool_call_id=block["tool_use_id"], is_error=is_error,
                                   error=_first_text(block.get("content")) if is_error else None, branch=branch))
            if isinstance(outcome, dict) and text(outcome.get("agentId")) and len(results) == 1:
                # A Task's result names the subagent it ran, and its branch is the child session (an event
                # of that session is what makes it one). The subagent is over, unless the Task launched it
                # to work in the background: then it has only begun (see the module's doc).
                child = (base["session_id"], outcome["agentId"])
                ids = {"event_id": derived_id(base["event_id"], len(facts))}
                if not is_error and _launched(outcome):
                    facts.append(SubagentLaunched(**base | ids, kind="subagent.launch", run_id=run_id,
                                                  child_session_key=child_key(*child),
                                                  spawn_key=spawn_key(block["tool_use_id"])))
                else:
                    facts.append(SubagentEnded(**base | ids, kind="subagent.end", run_id=run_id,
                                               child_session_key=child_key(*child),
                                               spawn_key=spawn_key(block["tool_use_id"]),
                                               outcome="error" if is_error else text(outcome.get("status")) or "ok",
                                               duration_ms=duration(outcome.get("totalDurationMs"))))
                facts.append(Marker(**base | {"event_id": derived_id(base["event_id"], len(facts)),
                                              "session_key": child_key(*child),
                                              "session_id": child_session_id(*child)}, kind="subagent.result"))
        if interrupt:
            facts.append(RunEnded(**base | {"event_id": derived_id(base["event_id"], len(facts))}, kind="run.end",
                                  run_id=run_id, ended_by="user", stop_reason="user_interrupt"))
        if begun:
            return _numbered(base, facts, begun)
        return facts[0] if len(facts) == 1 else facts

    def _notified(self, base: dict, note: str) -> Fact | list[Fact]:
        """A background task's notification (see _NOTIFICATIONS): no prompt, and the end of the subagent it names.

        A background shell command's notification reads as an agent's, the shell's id in <task-id>, and this read
        may not have met the launch that would tell them apart (it may lie in an earlier read). So the end is
        launched_only: the writer ends the subagent the ledger holds by that id (or by its Task's spawn) and makes
        no row for an id it holds none by. A Task's spawn and launch come before its notification in this file,
        so they are in the ledger, or in the same batch, wherever the file's reads were cut."""
        marker = Marker(**base, kind="user.notification")
        tags = dict(_NOTIFICATION_TAG.findall(note))
        agent, outcome = tags.get("task-id") or tags.get("agent-id"), _NOTIFIED.get(tags.get("status"))
        if not agent or outcome is None:
            return marker
        tool_use = tags.get("tool-use-id")
        return _numbered(base, marker, [SubagentEnded(**base, kind="subagent.end",
                                                      child_session_key=child_key(base["session_id"], agent),
                                                      spawn_key=spawn_key(tool_use) if tool_use else None,
                                                      outcome=outcome, launched_only=True)])

    def _typed(self, base: dict, sidechain: bool, uuid: str | None) -> None:
        """A local command's echo: the command the session's next lines may answer (see _ECHO)."""
        if not sidechain and uuid:
            self.commands[base["session_id"]] = [uuid, base["ts_ms"], _TYPED]

    def _ran(self, base: dict, sidechain: bool) -> None:
        """A local command's output: the command ran, so an interruption after it is the turn's (see _user)."""
        typed = None if sidechain else self.commands.get(base["session_id"])
        if typed is not None and typed[2] == _TYPED:
            typed[2] = _RAN

    def _command_turn(self, base: dict, typed: list) -> list[Fact]:
        """The turn of a local command that asked the model (see _ECHO): it begins at the command, as a
        prompt's turn does. Its facts' ids are the caller's to give."""
        uuid, ts = typed[:2]
        return self._begin_turn(base | {"ts_ms": ts}, uuid)

    def _begin_turn(self, at: dict, run_id: str) -> list[Fact]:
        """A turn begun at ``at``, a prompt's line or a local command's: its start and, if a turn came
        before it, that turn's end, both with ``at``'s id for the caller to number among its line's facts."""
        session_id = at["session_id"]
        # Claude Code mostly writes no stop reason, so many turns are never said to end: the
        # next prompt ends the one before it (a reported end, before or after, outranks this).
        previous = self.runs.previous(session_id, at["ts_ms"])
        self.runs.start(session_id, run_id)
        facts: list[Fact] = [RunStarted(**at, kind="run.start", run_id=run_id)]
        if previous is not None:
            facts.append(RunEnded(**at, kind="run.end", run_id=previous, ended_by="next_prompt",
                                  stop_reason="next_prompt"))
        return facts

    def _system(self, base: dict, obj: dict, uuid: str | None, branch: str | None) -> Fact:
        subtype = text(obj.get("subtype")) or "system"
        if subtype == "local_command":
            # Newer releases may write a local command's echo and output as system lines: followed as the user
            # lines are (see _ECHO).
            opening, sidechain = _opening(obj.get("content")), obj.get("isSidechain") is True
            if opening.startswith(_ECHO):
                self._typed(base, sidechain, uuid)
            elif opening.startswith(_LOCAL):
                self._ran(base, sidechain)
        if subtype == "compact_boundary":
            meta = obj.get("compactMetadata")
            # What a branch compacts is its own context, never its parent's, whether or not the branch is
            # named yet; the line names no session instance, which only a result or a hook makes a branch.
            at = base if branch is None else base | {"session_key": branch_key(branch), "session_id": None}
            return Compaction(**at, kind="compaction", run_id=self._run(base), phase="start",
                              token_count=integer(meta.get("preTokens")) if isinstance(meta, dict) else None)
        if subtype == "turn_duration" and obj.get("isSidechain") is not True:
            run_id = self._run(base)
            if run_id is not None:
                return RunEnded(**base, kind="run.end", run_id=run_id, duration_ms=duration(obj.get("durationMs")))
        return Marker(**base, kind=f"system.{subtype}")


def _copied_entry(obj: dict) -> tuple[str, str] | None:
    """(session, uuid) of the entry a forked session's line copies, None for a line of its own.

    Claude Code 2.1 forks (``/branch``, ``--resume … --fork-session``, the SDK's ``forkSession``)
    begin the new session's file with copies of the origin's main-chain entries, each written under
    the fork's ``sessionId`` and stamped ``forkedFrom: {sessionId, messageUuid}`` with the origin
    and the uuid of the entry copied; the copy's own uuid is that one (``/branch``) or a fresh one
    (``forkSession``). Read as that entry of that session, a copy is the very event its original
    is, with the same run, calls and keys: the history counts once, in the origin, whichever file
    is read first or if the origin's file is gone. Older forks kept the origin's ``sessionId``
    and uuid on the copies, which name the original already."""
    forked = obj.get("forkedFrom")
    if forked.__class__ is dict:
        session_id, entry = text(forked.get("sessionId")), text(forked.get("messageUuid"))
        if session_id and entry:
            return session_id, entry
    return None


def _launched(outcome: dict) -> bool:
    """Whether a Task's result (its ``toolUseResult``) says it launched its subagent, in the background
    (``run_in_background``) or remotely, rather than ran it to its end."""
    return outcome.get("isAsync") is True or outcome.get("status") in _LAUNCHES


def _origin(obj: dict) -> object:
    """What a user line says it came from, in newer releases: the kind of its ``origin``."""
    origin = obj.get("origin")
    return origin.get("kind") if isinstance(origin, dict) else None


def _numbered(base: dict, facts: Fact | list[Fact], more: list[Fact]) -> list[Fact]:
    """A line's facts, then ``more``, each of these with the id of its place among them."""
    facts = facts if isinstance(facts, list) else [facts]
    for i, fact in enumerate(more, len(facts)):
        fact.event_id = derived_id(base["event_id"], i)
    return facts + more


def _opening(content: object) -> str:
    """The text a user line begins with: its string, or its first text block's."""
    if isinstance(content, str):
        return content.lstrip()
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                return block["text"].lstrip()
    return ""


def _is_prompt(content: object) -> bool:
    """What the user wrote: a string, or blocks of what a user writes with none of a tool's results."""
    if isinstance(content, str):
        return True
    if not isinstance(content, list):
        return False
    kinds = {b.get("type") for b in content if isinstance(b, dict)}
    return bool(kinds & _PROMPT_BLOCKS) and "tool_result" not in kinds


def _is_interrupt(content: object) -> bool:
    """The marker Claude Code writes as the user's line when they stop a turn ("[Request interrupted by user]",
    "... for tool use]"), as a plain string or a text block."""
    if isinstance(content, str):
        return content.startswith(_INTERRUPT)
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        and b["text"].startswith(_INTERRUPT) for b in content)


def _first_text(content: object) -> str | None:
    if isinstance(content, str):
        return error_text(content)
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str) and block["text"]:
                return block["text"][:2000]
    return None
