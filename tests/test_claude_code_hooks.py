"""Claude Code hook events as facts: one tool-call row per call whichever of hook and transcript comes first."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from conftest import CORPUS, REPO, cli_env, cli_json, forbid_call_scans, ingest, listed_as_counted
from served import serve
from serving import wait_for, write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledgerdump import rows, scalar
from test_transcript_sources import (BTW_AGENT, CHILD_ID, CHILD_KEY, PARENT_KEY, TASK_AGENT, WANT_TASK_OUTCOME,
                                     _task_lines, _task_outcome, background_task_lines, cc_assistant, cc_prompt,
                                     cc_result)
from test_transcript_sources import SESSION as TASK_SESSION

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.verify import check_rollups
from agentledger.ledger.writer import ApplyResult, LedgerWriter
from agentledger.sources.claude_code_hooks import BadHook, HookInbox, decode, denied, event_id
from agentledger.timeutil import iso

SESSION = "55ce2f8e-7bd3-476b-8d50-d9696fdbeb2c"
KEY = f"agent:claude-code:{SESSION}"
PROJECT = "projects/-home-dev-src-web-frontend"
TRANSCRIPT = f"{PROJECT}/{SESSION}.jsonl"
SEARCH = "toolu_01NTZcpPJ1oEJlRunP5tzM8D"  # in the transcript too, in the session's first run
BASH = "toolu_01Hk2mYQeV7pAcRzTb9nJx4W"  # told by the hooks alone
FIRST_RUN = "cb6a88ec-a587-41fb-96ab-65635ec6de0d"
SECOND_RUN = "133ba100"  # prefix of the second prompt's uuid
TRANSCRIPT_TOOLS = 14  # tool_use blocks in the session's transcript
RECEIVED_MS = 1_800_000_000_000  # after every line of the transcript


@pytest.fixture(scope="module")
def payloads() -> list[dict]:
    path = CORPUS / "claude-code" / "hooks.jsonl"
    if not path.is_file():
        pytest.skip(f"shared corpus not found at {path}")
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def transcript_lines() -> list[bytes]:
    return (CORPUS / "claude-code" / TRANSCRIPT).read_bytes().splitlines(keepends=True)


def post(db: Path, payloads: list[dict], received_ms: int = RECEIVED_MS) -> ApplyResult:
    """What the daemon does with hook POSTs: decode in the request, write what the loop drains."""
    inbox = HookInbox()
    for n, payload in enumerate(payloads):
        inbox.put(decode(payload, received_ms + n))
    conn = open_writer(db)
    try:
        return LedgerWriter(conn).apply_hook_events(inbox.drain()[0])
    finally:
        conn.close()


def write_transcript(root: Path, lines: list[bytes]) -> None:
    path = root / TRANSCRIPT
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.writelines(lines)


def tool_rows(db: Path, call_id: str) -> list[tuple]:
    conn = open_reader(db)
    try:
        return conn.execute("SELECT run_id, source, status, started_ms, ended_ms, duration_ms, error, exec_command "
                            "FROM tool_calls WHERE tool_call_id = ?", (call_id,)).fetchall()
    finally:
        conn.close()


def session_tools(db: Path) -> dict[str, int]:
    conn = open_reader(db)
    try:
        detail = queries.session_detail(conn, KEY)
        assert not check_rollups(conn)
    finally:
        conn.close()
    ids = [t["tool_call_id"] for t in detail["tool_calls"]]
    return {i: ids.count(i) for i in ids}


def test_hook_tool_calls_show_at_once_then_merge_into_the_transcripts_rows(db, tmp_path, payloads, transcript_lines):
    root = tmp_path / "claude"
    write_transcript(root, transcript_lines[:2])  # the prompt is on disk before its tools run
    ingest(db, root, fmt="claude-code")
    post(db, payloads)
    assert session_tools(db) == {SEARCH: 1, BASH: 1}
    conn = open_reader(db)
    tools = {t["tool"]: (t["calls"], t["errors"]) for t in queries.tools(conn, queries.Window())}
    conn.close()
    assert tools == {"WebSearch": (1, 0), "Bash": (1, 1)}
    (search,) = tool_rows(db, SEARCH)
    assert search[:3] == (FIRST_RUN, "claude-code-hook", "ok") and search[5] == 1840
    (bash,) = tool_rows(db, BASH)
    assert bash[2] == "error" and bash[6].startswith("Exit code 1") and bash[7] == "npm test"

    write_transcript(root, transcript_lines[2:])
    ingest(db, root, fmt="claude-code")
    counts = session_tools(db)
    assert len(counts) == TRANSCRIPT_TOOLS + 1 and set(counts.values()) == {1}
    (search,) = tool_rows(db, SEARCH)
    # The transcript's times and outcome win; the duration only the hook knew stays.
    assert search[:3] == (FIRST_RUN, "claude-code", "ok") and search[3] < RECEIVED_MS and search[5] == 1840
    assert scalar(db, "SELECT status FROM sessions WHERE session_id = ?", (SESSION,)) == "ended"


def test_hooks_before_any_transcript_line_are_moved_to_the_run_the_transcript_tells(db, tmp_path, payloads,
                                                                                      transcript_lines):
    post(db, payloads)
    assert [r[0] for r in tool_rows(db, SEARCH)] == [""]  # no run known yet
    root = tmp_path / "claude"
    write_transcript(root, transcript_lines)
    ingest(db, root, fmt="claude-code")
    (search,) = tool_rows(db, SEARCH)
    assert search[:2] == (FIRST_RUN, "claude-code") and search[5] == 1840
    # The hooks-only Bash call has no run of the session, but names it: the session counts it, and lists it.
    counts = session_tools(db)
    assert counts[BASH] == 1 and len(counts) == TRANSCRIPT_TOOLS + 1
    assert scalar(db, "SELECT count(*) FROM tool_calls") == TRANSCRIPT_TOOLS + 1
    conn = open_reader(db)
    assert queries.usage(conn, queries.Window())["tool_calls"] == TRANSCRIPT_TOOLS + 1
    conn.close()


def test_hooks_after_the_transcript_fill_in_and_never_override(db, tmp_path, payloads, claude_corpus):
    root = tmp_path / "claude"
    shutil.copytree(claude_corpus / "projects", root / "projects")
    ingest(db, root, fmt="claude-code")
    before = tool_rows(db, SEARCH)
    post(db, payloads)
    (after,) = tool_rows(db, SEARCH)
    assert after[:5] == before[0][:5] and before[0][5] is None and after[5] == 1840
    (bash,) = tool_rows(db, BASH)
    assert bash[0].startswith(SECOND_RUN)  # the run its session was in when the hook arrived
    assert len(session_tools(db)) == TRANSCRIPT_TOOLS + 1


def test_a_late_session_start_hook_never_starts_a_session_after_its_first_line(db, tmp_path, payloads, claude_corpus):
    # A startup hook sent again after the transcript was read (a replay, a retry) moved the start to its
    # arrival: later than the session's first activity, and its duration ran to some 50 days.
    root = tmp_path / "claude"
    shutil.copytree(claude_corpus / "projects", root / "projects")
    ingest(db, root, fmt="claude-code")
    assert any(p.get("hook_event_name") == "SessionStart" and p.get("session_id") == SESSION for p in payloads)
    post(db, payloads)
    started, first = rows(db, "SELECT started_ms, first_ms FROM sessions WHERE session_id = ?", (SESSION,))[0]
    assert started is not None and started <= first < RECEIVED_MS


@pytest.mark.parametrize("order", ["hooks-alone", "hooks-first", "transcripts-first"])
def test_hooked_tool_calls_are_listed_where_they_are_counted_run_or_no_run(db, tmp_path, payloads, claude_corpus,
                                                                           order, monkeypatch):
    forbid_call_scans(monkeypatch)  # calls with no run are found by index too
    root = tmp_path / "claude"
    if order != "hooks-alone":
        shutil.copytree(claude_corpus / "projects", root / "projects")
    if order == "transcripts-first":
        ingest(db, root, fmt="claude-code")
    post(db, payloads)
    if order == "hooks-first":
        ingest(db, root, fmt="claude-code")
    d = cli_json(db, "session", SESSION)
    assert [t["tool_call_id"] for t in d["tool_calls"]].count(BASH) == 1
    assert len(d["tool_calls"]) == d["instances"][0]["tool_calls"] == (2 if order == "hooks-alone"
                                                                        else TRANSCRIPT_TOOLS + 1)
    assert len(cli_json(db, "timeline", SESSION, "--kinds", "tool")) == len(d["tool_calls"])
    conn = open_reader(db)
    try:
        assert listed_as_counted(conn) == []
    finally:
        conn.close()


def test_a_hook_event_sent_again_changes_nothing_even_after_a_restart(db, payloads):
    assert post(db, payloads).duplicate_facts == 0
    picture = ("SELECT * FROM tool_calls", "SELECT * FROM sessions", "SELECT * FROM hook_events",
               "SELECT ts_ms, id, kind FROM events", "SELECT * FROM session_totals", "SELECT * FROM tool_slots")

    def snapshot():
        conn = open_reader(db)
        try:
            return [sorted(conn.execute(sql).fetchall(), key=repr) for sql in picture]
        finally:
            conn.close()

    first = snapshot()
    assert scalar(db, "SELECT count(*) FROM hook_events") == len(payloads)
    again = post(db, payloads, RECEIVED_MS + 60_000)  # a new writer, later arrival times
    assert snapshot() == first
    assert (again.new_facts, again.duplicate_facts) == (0, len(payloads))


def test_durations_no_tool_takes_are_not_recorded_and_cannot_overflow_the_rollups(db):
    """Two calls claiming 2**63-1 ms each used to overflow the rollups' sum and stop the daemon."""
    done = {"session_id": SESSION, "hook_event_name": "PostToolUse", "tool_name": "Bash"}
    post(db, [{**done, "tool_use_id": f"toolu_{n}", "duration_ms": ms}
              for n, ms in enumerate((2**63 - 1, 2**63 - 1, -5, 1500))])
    assert sorted(tool_rows(db, f"toolu_{n}")[0][5] or 0 for n in range(4)) == [0, 0, 0, 1500]
    conn = open_reader(db)
    try:
        assert not check_rollups(conn)
    finally:
        conn.close()


def test_the_inbox_refuses_past_its_limit_and_says_how_many():
    inbox = HookInbox(limit=2)
    stop = {"session_id": SESSION, "hook_event_name": "Stop"}
    assert [inbox.put(decode({**stop, "n": n}, RECEIVED_MS)) for n in range(3)] == [True, True, False]
    events, refused = inbox.drain()
    assert len(events) == 2 and refused == 1 and inbox.drain() == ([], 0)


def test_event_identity():
    base = {"session_id": SESSION, "hook_event_name": "PreToolUse", "tool_use_id": "toolu_1", "tool_name": "Bash"}
    assert event_id("PreToolUse", SESSION, base) == event_id("PreToolUse", SESSION, {**base, "cwd": "/elsewhere"})
    assert event_id("PreToolUse", SESSION, base) != event_id("PostToolUse", SESSION, base)
    stop = {"session_id": SESSION, "hook_event_name": "Stop", "last_assistant_message": "done"}
    assert event_id("Stop", SESSION, stop) == event_id("Stop", SESSION, dict(reversed(stop.items())))
    assert event_id("Stop", SESSION, stop) != event_id("Stop", SESSION, {**stop, "last_assistant_message": "again"})


@pytest.mark.parametrize("payload", [[], {"hook_event_name": "Stop"}, {"session_id": SESSION},
                                     {"session_id": 5, "hook_event_name": "Stop"}])
def test_a_payload_that_is_no_hook_event_is_refused(payload):
    with pytest.raises(BadHook):
        decode(payload, RECEIVED_MS)


@pytest.mark.parametrize("source", [[], {}, None, 5])
def test_a_session_start_whose_source_is_no_text_is_a_marker_not_a_failure(source):
    # An unhashable source ([] or {}) answered the hook's POST with a 500.
    event = decode({"session_id": SESSION, "hook_event_name": "SessionStart", "source": source}, RECEIVED_MS)
    assert event.fact.kind == "hook.SessionStart"


def test_a_denied_tool_call_is_recorded_as_failed():
    pre = {"session_id": SESSION, "hook_event_name": "PreToolUse", "tool_use_id": "toolu_1", "tool_name": "Bash",
           "tool_input": {"command": "rm -rf build"}}
    fact = denied(decode(pre, RECEIVED_MS), "over budget").fact
    assert (fact.status, fact.error, fact.exec_command) == ("error", "over budget", "rm -rf build")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_interleaving_of_hooks_and_transcript_gives_one_row_per_call(tmp_path_factory, payloads,
                                                                         transcript_lines, data):
    tmp = tmp_path_factory.mktemp("interleave")
    db, root = tmp / "l.db", tmp / "claude"
    cuts = sorted(data.draw(st.sets(st.integers(1, len(transcript_lines) - 1), max_size=3)))
    chunks = [transcript_lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(transcript_lines)])]
    steps = [("t", c) for c in chunks] + [("h", p) for p in payloads]
    order = data.draw(st.permutations(range(len(steps))))
    # Transcript chunks keep their order (a file only grows); hooks may come at any point.
    transcript = iter(chunks)
    for n, i in enumerate(order):
        kind, item = steps[i]
        if kind == "t":
            write_transcript(root, next(transcript))
            ingest(db, root, fmt="claude-code")
        else:
            post(db, [item], RECEIVED_MS + n)
    counts = session_tools(db)
    assert set(counts.values()) == {1}
    assert scalar(db, "SELECT count(*) FROM tool_calls") == TRANSCRIPT_TOOLS + 1
    (search,) = tool_rows(db, SEARCH)
    assert search[:3] == (FIRST_RUN, "claude-code", "ok") and search[5] == 1840


# -- a real daemon ------------------------------------------------------------------------------
def _cli(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args], capture_output=True,
                          text=True, cwd=REPO, env=cli_env(db), timeout=60, check=False)


def _json(db: Path, *args: str):
    out = _cli(db, *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_live_daemon_shows_hooked_tool_calls_at_once_and_never_doubles_them(tmp_path, payloads, transcript_lines):
    root = tmp_path / "claude"
    write_transcript(root, transcript_lines[:2])  # the session's first prompt, as Claude Code writes it
    config = write_config(tmp_path, root, fmt="claude-code", extra="")
    db = tmp_path / "ledger.db"

    def tool_ids():
        return [t["tool_call_id"] for t in _json(db, "session", KEY)["tool_calls"]]

    def hooked(payload: dict) -> tuple[int, object]:
        return served.post("/v1/hooks/claude-code", payload)

    served = serve(config)
    try:
        wait_for(lambda: _cli(db, "session", KEY).returncode == 0)
        assert [hooked(p) for p in payloads] == [(200, {})] * len(payloads)
        assert sorted(wait_for(lambda: len(tool_ids()) == 2 and tool_ids())) == sorted([SEARCH, BASH])
        tools = {t["tool"]: (t["calls"], t["errors"]) for t in _json(db, "tools")}
        assert tools == {"WebSearch": (1, 0), "Bash": (1, 1)}

        write_transcript(root, transcript_lines[2:])
        wait_for(lambda: len(tool_ids()) == TRANSCRIPT_TOOLS + 1)
        detail = _json(db, "session", KEY)
        assert [t["tool_call_id"] for t in detail["tool_calls"]].count(SEARCH) == 1
        (search,) = [t for t in detail["tool_calls"] if t["tool_call_id"] == SEARCH]
        assert search["status"] == "ok" and search["duration_ms"] == 1840 and search["run_id"] == FIRST_RUN
        assert detail["instances"][0]["status"] == "ended"  # SessionEnd: only the hook tells
        assert served.stop() == 0, served.log()
    finally:
        served.kill()

    served = serve(config)  # restarted: the same POSTs again, then one new event to know they were all written
    try:
        assert [hooked(p)[0] for p in payloads] == [200] * len(payloads)
        hooked({"session_id": SESSION, "hook_event_name": "Stop", "last_assistant_message": "and now?"})
        wait_for(lambda: len(_json(db, "events", "--kind", "hook.Stop")) == 2)
        again = _json(db, "session", KEY)
        for d in (again, detail):  # the new Stop is new activity; nothing else may move
            for k in ("last_activity_at", "duration_s"):
                d["instances"][0].pop(k)
        assert again == detail
        assert _cli(db, "verify").returncode == 0
        assert served.stop() == 0, served.log()
    finally:
        served.kill()


def test_the_readme_registers_every_hook_event_at_the_endpoint_with_short_timeouts():
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Claude Code hooks"):]
    settings = json.loads(section[section.index("```json") + 7:section.index("```", section.index("```json") + 7)])
    events = {"SessionStart", "SessionEnd", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure",
              "SubagentStart", "SubagentStop", "PreCompact", "PostCompact", "Stop"}
    assert set(settings["hooks"]) == events
    for groups in settings["hooks"].values():
        (hook,) = [h for g in groups for h in g["hooks"]]
        assert hook["type"] == "http" and hook["url"].endswith("/v1/hooks/claude-code") and hook["timeout"] <= 3


def test_subagent_hooks_name_the_same_child_session_as_the_transcript(tmp_path, db):
    parent, child, btw = _task_lines()
    hook = {"session_id": TASK_SESSION, "agent_id": TASK_AGENT, "agent_type": "general-purpose",
            "transcript_path": f"/home/dev/.claude/{PROJECT}/{TASK_SESSION}.jsonl"}
    started_ms = 1_790_848_802_000  # 2026-10-01T10:00:02Z, as the subagent starts
    post(db, [{**hook, "hook_event_name": "SubagentStart"}], started_ms)
    project = tmp_path / "claude" / PROJECT
    sub = project / TASK_SESSION / "subagents"
    sub.mkdir(parents=True)
    (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child))
    (sub / f"agent-{BTW_AGENT}.jsonl").write_bytes(b"".join(btw))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    # Before the Task's result is read, the hook already put the subagent's calls in its own session.
    assert scalar(db, "SELECT session_key FROM sessions WHERE session_id = ?", (CHILD_ID,)) == CHILD_KEY
    assert scalar(db, "SELECT count(*) FROM llm_calls WHERE session_id = ?", (CHILD_ID,)) == 2
    post(db, [{**hook, "hook_event_name": "SubagentStop"}], started_ms + 17_000)
    (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _task_outcome(db) == WANT_TASK_OUTCOME


@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-first", "transcripts-first"])
def test_a_tool_call_a_subagent_asks_about_is_the_subagent_s_from_its_hook_on(tmp_path, db, hooks_first):
    """Inside a Task subagent, a tool event names the subagent (agent_id): the call is in the subagent's
    session before its transcript line is read, and one call once it is, whichever comes first."""
    parent, child, btw = _task_lines()
    hook = {"session_id": TASK_SESSION, "agent_id": TASK_AGENT, "agent_type": "general-purpose",
            "transcript_path": f"/home/dev/.claude/{PROJECT}/{TASK_SESSION}.jsonl"}
    started_ms = 1_790_848_802_000  # 2026-10-01T10:00:02Z
    tool = {"tool_name": "Grep", "tool_input": {"pattern": "paginate"}, "tool_use_id": "toolu_grep"}
    project = tmp_path / "claude" / PROJECT
    sub = project / TASK_SESSION / "subagents"
    sub.mkdir(parents=True)
    if not hooks_first:
        (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child))
        ingest(db, tmp_path / "claude", fmt="claude-code")
    post(db, [{**hook, "hook_event_name": "SubagentStart"},
              {**hook, **tool, "hook_event_name": "PreToolUse"}], started_ms)
    if hooks_first:
        assert rows(db, "SELECT session_id, status FROM tool_calls") == [(CHILD_ID, "running")]
    assert cli_json(db, "session", PARENT_KEY)["tool_calls"] == []
    post(db, [{**hook, **tool, "hook_event_name": "PostToolUse", "duration_ms": 900}], started_ms + 2000)
    (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child))
    (sub / f"agent-{BTW_AGENT}.jsonl").write_bytes(b"".join(btw))
    (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _task_outcome(db) == WANT_TASK_OUTCOME
    assert rows(db, "SELECT session_id, duration_ms FROM tool_calls WHERE tool_call_id = 'toolu_grep'") == \
        [(CHILD_ID, 900)]


def test_a_subagent_known_only_from_its_hooks_ends_at_its_stop_hook(db):
    """Without its transcripts (not read, or not kept), SubagentStop is the only word of the end: the
    subagent is not left running, to be taken for interrupted once its grace runs out."""
    hook = {"session_id": TASK_SESSION, "agent_id": TASK_AGENT, "agent_type": "general-purpose",
            "transcript_path": f"/home/dev/.claude/{PROJECT}/{TASK_SESSION}.jsonl"}
    started_ms = 1_790_848_802_000  # 2026-10-01T10:00:02Z
    post(db, [{**hook, "hook_event_name": "SubagentStart"}], started_ms)
    (row,) = cli_json(db, "subagents")
    assert (row["child_session_key"], row["status"]) == (CHILD_KEY, "running")
    post(db, [{**hook, "hook_event_name": "SubagentStop"}] * 2, started_ms + 17_000)  # sent twice: one end
    (row,) = cli_json(db, "subagents")
    assert (row["status"], row["ended_at"], row["outcome"]) == ("ended", "2026-10-01T10:00:19.000Z", None)
    assert cli_json(db, "usage")["subagents"] == 1


@pytest.mark.parametrize("stop_first", [True, False], ids=["stop-hook-first", "transcripts-first"])
def test_a_background_task_subagent_ends_at_its_stop_hook_not_at_its_launch(tmp_path, db, stop_first):
    """A background Task's result only says its subagent was launched; the subagent's SubagentStop, when it
    is done, is its end, whether that hook comes before the result is read or after."""
    parent, child = background_task_lines()
    project = tmp_path / "claude" / PROJECT
    sub = project / TASK_SESSION / "subagents"
    sub.mkdir(parents=True)
    hook = {"session_id": TASK_SESSION, "agent_id": TASK_AGENT, "agent_type": "general-purpose",
            "transcript_path": str(project / f"{TASK_SESSION}.jsonl")}
    post(db, [{**hook, "hook_event_name": "SubagentStart"}], 1_790_848_802_000)  # 2026-10-01T10:00:02Z
    stop = [{**hook, "hook_event_name": "SubagentStop"}]
    if stop_first:
        post(db, stop, 1_790_848_810_000)
    (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child))
    (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    if not stop_first:
        post(db, stop, 1_790_848_810_000)
    (row,) = cli_json(db, "subagents")
    assert (row["child_session_key"], row["status"], row["spawned_at"], row["ended_at"]) == (
        CHILD_KEY, "ended", "2026-10-01T10:00:01.000Z", "2026-10-01T10:00:10.000Z")
    assert [s["ended_at"] for s in cli_json(db, "sessions") if s["session_id"] == CHILD_ID] == [
        "2026-10-01T10:00:10.000Z"]
    conn = open_reader(db)
    try:
        assert check_rollups(conn) == []
    finally:
        conn.close()


@pytest.mark.parametrize("task_first", [True, False], ids=["task-line-first", "hook-first"])
def test_a_running_task_subagent_s_spend_counts_in_its_session_s_family_once_its_start_hook_came(
        tmp_path, db, task_first):
    """SubagentStart moves the subagent's calls to its own session; its spawn by the session comes with it,
    so the family (what a family gate measures) holds them while the subagent runs, not only once the Task's
    result is read. The result then merges that spawn with the Task's: one subagent."""
    parent, child, btw = _task_lines()
    project = tmp_path / "claude" / PROJECT
    sub = project / TASK_SESSION / "subagents"
    sub.mkdir(parents=True)
    transcript = project / f"{TASK_SESSION}.jsonl"
    hook = {"session_id": TASK_SESSION, "agent_id": TASK_AGENT, "agent_type": "general-purpose",
            "transcript_path": str(transcript), "hook_event_name": "SubagentStart"}
    if task_first:  # the prompt and the Task call, read before the subagent starts
        transcript.write_bytes(b"".join(parent[:2]))
        ingest(db, tmp_path / "claude", fmt="claude-code")
    post(db, [hook], 1_790_848_802_000)
    (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    running = cli_json(db, "session", PARENT_KEY)
    own_child = cli_json(db, "session", CHILD_KEY)["cost_usd"]
    assert own_child > 0
    assert running["family_cost_usd"] == pytest.approx(running["cost_usd"] + own_child, abs=1e-9)
    assert [s["child_session_key"] for s in running["subagents"] if s["child_session_key"] == CHILD_KEY] == [CHILD_KEY]
    transcript.write_bytes(b"".join(parent))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    (sub / f"agent-{BTW_AGENT}.jsonl").write_bytes(b"".join(btw))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _task_outcome(db) == WANT_TASK_OUTCOME


_TASK_HOOK = {"session_id": TASK_SESSION, "transcript_path": f"/home/dev/.claude/{PROJECT}/{TASK_SESSION}.jsonl",
              "cwd": "/home/dev/src/app"}
_TASK_ASKED = {**_TASK_HOOK, "hook_event_name": "PreToolUse", "tool_name": "Task", "tool_use_id": "toolu_task",
               "tool_input": {"description": "Find callers", "prompt": "List callers",
                              "subagent_type": "general-purpose"}}
_TASK_STARTED = {**_TASK_HOOK, "hook_event_name": "SubagentStart", "agent_id": TASK_AGENT,
                 "agent_type": "general-purpose"}


def _listed_subagents(db: Path) -> list[tuple]:
    return [(s["child_session_key"], s["label"], s["mode"], s["status"], s["cost_usd"] > 0)
            for s in cli_json(db, "subagents")]


def _play_task_scene(tmp_path: Path, db: Path, parent: list[bytes], child: list[bytes], order: tuple[str, ...],
                     **more: Callable[[], object]) -> tuple[Path, Path]:
    """Steps of a Task's scene in ``order``, each followed by an ingest: the Task asked about (its PreToolUse),
    its transcript line written, the child's lines written, and ``more``. Returns the project directory and
    the Task session's subagents directory."""
    project = tmp_path / "claude" / PROJECT
    sub = project / TASK_SESSION / "subagents"
    sub.mkdir(parents=True)
    steps = {"asked": lambda: post(db, [_TASK_ASKED], 1_790_848_801_500),
             "task-line": lambda: (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent[:2])),
             "child": lambda: (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child)), **more}
    for step in order:
        steps[step]()
        ingest(db, tmp_path / "claude", fmt="claude-code")
    return project, sub


@pytest.mark.parametrize("order", [
    ("asked", "task-line", "started", "child"), ("task-line", "asked", "started", "child"),
    ("asked", "started", "task-line", "child"), ("asked", "started", "child", "task-line"),
    ("child", "asked", "started", "task-line")])
def test_a_running_task_subagent_is_listed_once_whichever_of_hooks_and_transcript_come_first(tmp_path, db, order):
    """The Task's PreToolUse, then its SubagentStart (Claude Code sends them in that order): the only Task of
    the session asked and still running is the subagent's, so its spawn is the child's row from then on, with
    the Task's label and the child's key and spend, whenever the transcript's lines are read."""
    parent, child, btw = _task_lines()
    project, sub = _play_task_scene(tmp_path, db, parent, child, order,
                                    started=lambda: post(db, [_TASK_STARTED], 1_790_848_802_000))
    assert _listed_subagents(db) == [(CHILD_KEY, "Find callers", "general-purpose", "running", True)]
    assert cli_json(db, "usage")["subagents"] == 1
    (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent))
    (sub / f"agent-{BTW_AGENT}.jsonl").write_bytes(b"".join(btw))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _task_outcome(db) == WANT_TASK_OUTCOME
    post(db, [_TASK_ASKED, _TASK_STARTED], 1_790_848_900_000)  # sent again: nothing changes
    assert ingest(db, tmp_path / "claude", fmt="claude-code").events == 0
    assert _task_outcome(db) == WANT_TASK_OUTCOME


@pytest.mark.parametrize("types", [("Explore", "general-purpose"), ("general-purpose", "general-purpose")],
                         ids=["of-two-types", "of-one-type"])
def test_concurrent_tasks_are_paired_with_their_subagents_only_when_the_type_tells_which(tmp_path, db, types):
    """Two Tasks of one turn, both asked before either subagent starts: SubagentStart names no Task, so a
    subagent takes a Task's spawn only when its type leaves one Task it can be. Of one type, either could be
    it: the Tasks' and the subagents' rows stay apart until the results say which is whose (here the second
    Task's subagent starts first), never merged with the wrong Task."""
    project = tmp_path / "claude" / PROJECT
    project.mkdir(parents=True)
    agents = {"toolu_a": "aaaa1111", "toolu_b": "bbbb2222"}
    labels = {"toolu_a": "Map the routes", "toolu_b": "Read the tests"}
    tasks = [{"type": "tool_use", "id": call, "name": "Task",
              "input": {"description": labels[call], "prompt": labels[call], "subagent_type": kind}}
             for call, kind in zip(agents, types)]
    results = []
    for n, call in enumerate(agents):
        result = orjson.loads(cc_result(f"r{n}", call, 20 + n))
        result["toolUseResult"] = {"status": "completed", "agentId": agents[call], "totalDurationMs": 9_000}
        results.append(orjson.dumps(result) + b"\n")
    transcript = project / f"{TASK_SESSION}.jsonl"
    transcript.write_bytes(cc_prompt("u1", "look around", 0) + b"".join(
        cc_assistant(f"a{n}", "msg_p1", task, output=60, second=1, stop="tool_use") for n, task in enumerate(tasks)))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    asked = [{**_TASK_ASKED, "tool_use_id": t["id"], "tool_input": t["input"]} for t in tasks]
    started = [{**_TASK_STARTED, "agent_id": agents[t["id"]], "agent_type": t["input"]["subagent_type"]}
               for t in reversed(tasks)]
    post(db, [*asked, *started], 1_790_848_801_000)
    keys = {call: f"agent:claude-code:subagent:{TASK_SESSION}/{agent}" for call, agent in agents.items()}
    running = {(key, label) for key, label, *_ in _listed_subagents(db)}
    if types[0] != types[1]:
        assert running == {(keys[call], labels[call]) for call in agents}
    else:
        assert running == {*((keys[call], None) for call in agents),
                           *((f"agent:claude-code:subagent:{call}", labels[call]) for call in agents)}
    with transcript.open("ab") as f:
        f.writelines(results)
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert sorted((key, label, status) for key, label, _, status, _ in _listed_subagents(db)) == sorted(
        (keys[call], labels[call], "ended") for call in agents)


@pytest.mark.parametrize("order", [("use", "pre", "result", "post"), ("use", "result", "pre", "post"),
                                   ("use", "pre", "post", "result"), ("pre", "use", "post", "result")])
def test_a_subagent_s_tool_call_is_one_row_when_its_line_is_read_in_its_session_s_run_before_its_hooks(
        tmp_path, db, order):
    """The session's prompt read first, the subagent's lines are in its run (its parent's, on the subagent's
    branch): a hook of the call, arriving after its line, lands on that row, not a second one."""
    parent, child, btw = _task_lines()
    project = tmp_path / "claude" / PROJECT
    sub = project / TASK_SESSION / "subagents"
    sub.mkdir(parents=True)
    (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent[:2]))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    post(db, [_TASK_ASKED, _TASK_STARTED], 1_790_848_801_500)
    grep = {**_TASK_STARTED, "tool_name": "Grep", "tool_input": {"pattern": "paginate"}, "tool_use_id": "toolu_grep"}
    hooks = [{**grep, "hook_event_name": "PreToolUse"}, {**grep, "hook_event_name": "PostToolUse", "duration_ms": 900}]
    steps = {"use": lambda: (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child[:2])),
             "result": lambda: (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child)),
             "pre": lambda: post(db, hooks[:1], 1_790_848_803_500),
             "post": lambda: post(db, hooks[1:], 1_790_848_804_500)}
    for step in order:
        steps[step]()
        ingest(db, tmp_path / "claude", fmt="claude-code")
        assert {t["tool"]: t["calls"] for t in cli_json(db, "tools")} == {"Task": 1, "Grep": 1}, step
    assert [t["duration_ms"] for t in cli_json(db, "session", CHILD_KEY)["tool_calls"]] == [900]
    post(db, hooks, 1_790_848_900_000)  # sent again, after a restart: nothing changes
    assert {t["tool"]: t["calls"] for t in cli_json(db, "tools")} == {"Task": 1, "Grep": 1}
    (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent))
    (sub / f"agent-{BTW_AGENT}.jsonl").write_bytes(b"".join(btw))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _task_outcome(db) == WANT_TASK_OUTCOME


@pytest.mark.parametrize("order", [
    ("asked", "task-line", "grep", "child"), ("task-line", "asked", "grep", "child"),
    ("asked", "grep", "task-line", "child"), ("asked", "grep", "child", "task-line"),
    ("child", "asked", "grep", "task-line"), ("task-line", "child", "asked", "grep")])
def test_a_subagent_whose_start_hook_never_came_is_its_session_s_once_its_first_call_is_recorded(
        tmp_path, db, order):
    """Only PreToolUse registered: the subagent's first call the ledger records ties it to its session, as
    SubagentStart would (and to the one Task asked that can be its own), so the family counts it and
    `subagents` lists it once, whichever of the hooks and the lines is read first."""
    parent, child, btw = _task_lines()
    grep = {**_TASK_STARTED, "hook_event_name": "PreToolUse", "tool_name": "Grep",
            "tool_input": {"pattern": "paginate"}, "tool_use_id": "toolu_grep"}
    project, sub = _play_task_scene(tmp_path, db, parent, child, order,
                                    grep=lambda: post(db, [grep], 1_790_848_803_500))
    assert _listed_subagents(db) == [(CHILD_KEY, "Find callers", "general-purpose", "running", True)]
    running = cli_json(db, "session", PARENT_KEY)
    own_child = cli_json(db, "session", CHILD_KEY)["cost_usd"]
    assert running["family_cost_usd"] == pytest.approx(running["cost_usd"] + own_child, abs=1e-9)
    (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent))
    (sub / f"agent-{BTW_AGENT}.jsonl").write_bytes(b"".join(btw))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _task_outcome(db) == WANT_TASK_OUTCOME
    post(db, [_TASK_ASKED, grep], 1_790_848_900_000)  # sent again: nothing changes
    assert _task_outcome(db) == WANT_TASK_OUTCOME


def test_a_hook_event_names_no_file_and_no_offset_in_it(db, payloads):
    # Posted, not read from a file: it showed offset 0 beside no file, as if at the start of one.
    post(db, payloads)
    events = _json(db, "events", "--limit", "500")
    assert len(events) >= len(payloads)  # a hook may tell a subagent's spawn or stop too
    assert {(r["file"], r["offset"]) for r in events} == {(None, None)}
    header, *lines = _cli(db, "events", "--limit", "500").stdout.splitlines()
    assert header.split()[-2:] == ["file", "offset"]
    assert {tuple(line.split()[-2:]) for line in lines} == {("-", "-")}


def _resumed_session(db: Path, batches: list[list[dict]]) -> dict:
    """The session as ``sessions --json`` shows it once these hook batches were written, one ms apart."""
    received = RECEIVED_MS
    for batch in batches:
        post(db, batch, received)
        received += len(batch)
    conn = open_reader(db)
    try:
        assert not check_rollups(conn)
    finally:
        conn.close()
    (session,) = cli_json(db, "sessions")
    return {k: session[k] for k in ("status", "ended_at", "last_activity_at", "end_reason")}


def _at(ms: int) -> str:
    return iso(RECEIVED_MS + ms)


@pytest.mark.parametrize("split", [False, True], ids=["one batch", "each alone"])
def test_a_session_resumed_after_its_end_is_active_again_and_its_next_end_stands(tmp_path, split):
    quit_ = {"session_id": SESSION, "hook_event_name": "SessionEnd", "reason": "prompt_input_exit"}
    resume = {"session_id": SESSION, "hook_event_name": "SessionStart", "source": "resume"}
    prompt = {"session_id": SESSION, "hook_event_name": "UserPromptSubmit", "prompt": "and then?"}
    events = [quit_, resume, prompt]
    cut = (lambda es: [[e] for e in es]) if split else (lambda es: [es])
    assert _resumed_session(tmp_path / "a.db", cut(events)) == {
        "status": "active", "ended_at": None, "last_activity_at": _at(2), "end_reason": None}
    # The same quit again, after the resume: a new end, at its own time, not a copy of the first.
    assert _resumed_session(tmp_path / "b.db", cut([*events, quit_])) == {
        "status": "ended", "ended_at": _at(3), "last_activity_at": _at(3), "end_reason": "end"}
    # A quit sent twice with no resume between is one end, at the first's time.
    assert _resumed_session(tmp_path / "c.db", cut([quit_, quit_])) == {
        "status": "ended", "ended_at": _at(0), "last_activity_at": _at(0), "end_reason": "end"}
