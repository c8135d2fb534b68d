"""Transcript sources read live: streaming lines of one call, resets while tailing, resumed reads."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import orjson
import pytest
from conftest import CORPUS, as_of_version, cli_env, cli_json, followed_then_afresh, ingest, metric_counters, settle
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ledgerdump import dump, rollups, rows, scalar, usage, verify

from agentledger.config import GateConfig
from agentledger.defaults import DEFAULT_MAX_LINE
from agentledger.gates import GateKeeper
from agentledger.hot.sessions import HotSessions
from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger import queries, retention
from agentledger.ledger.db import ReaderPool, open_reader, open_writer
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.verify import check_rollups, rebuild_rollups
from agentledger.ledger.writer import LedgerWriter, now_ms
from agentledger.sources import oc_transcript
from agentledger.sources.common import derived_id, line_id

SESSION = "5f0c1b52-0000-4000-8000-000000000001"
MODEL = "claude-sonnet-4-5-20250929"


def _line(obj: dict) -> bytes:
    return orjson.dumps(obj) + b"\n"


_CACHE_USAGE = {"cache_read_input_tokens": 1000, "cache_creation_input_tokens": 300,
                "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200}}


def cc_assistant(uuid: str, message_id: str, block: dict, *, output: int, second: int, sidechain: bool = False,
                 request: str = "req_1", stop: str | None = None, model: str = MODEL, usage: dict = _CACHE_USAGE,
                 **envelope) -> bytes:
    """An assistant line of 10 input and ``output`` tokens; ``usage`` holds its other usage fields (a cache
    read and writes unless told), ``envelope`` any other top-level field."""
    return _line({"type": "assistant", "uuid": uuid, "sessionId": SESSION, "isSidechain": sidechain,
                  "timestamp": f"2026-10-01T10:00:{second:02d}.000Z", "requestId": request,
                  "message": {"id": message_id, "model": model, "content": [block], "stop_reason": stop,
                              "usage": {"input_tokens": 10, "output_tokens": output} | usage}} | envelope)


def cc_prompt(uuid: str, text: str, second: int) -> bytes:
    return _line({"type": "user", "uuid": uuid, "sessionId": SESSION, "isSidechain": False,
                  "timestamp": f"2026-10-01T10:00:{second:02d}.000Z", "message": {"role": "user", "content": text}})


def cc_result(uuid: str, tool_use_id: str, second: int, is_error: bool = False) -> bytes:
    return _line({"type": "user", "uuid": uuid, "sessionId": SESSION, "isSidechain": False,
                  "timestamp": f"2026-10-01T10:00:{second:02d}.000Z",
                  "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id,
                                                           "content": "ok", "is_error": is_error}]}})


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "claude" / "projects" / "-home-dev-src-app"
    project.mkdir(parents=True)
    return project


def _calls(db: Path) -> list[tuple]:
    return rows(db, "SELECT call_key, input_tokens, output_tokens, cache_write_1h_tokens, ts_ms "
                           "FROM llm_calls ORDER BY id")


def _clean(db: Path) -> None:
    conn = open_reader(db)
    try:
        assert check_rollups(conn) == []
    finally:
        conn.close()


def test_a_streamed_response_is_one_call_with_its_final_usage_across_ingests(tmp_path, db):
    project = _project(tmp_path)
    transcript = project / f"{SESSION}.jsonl"
    lines = [
        cc_prompt("u1", "fix the flaky test", 0),
        cc_assistant("a1", "msg_1", {"type": "thinking", "thinking": "..."}, output=3, second=1),
        cc_assistant("a2", "msg_1", {"type": "text", "text": "Looking."}, output=7, second=2),
        cc_assistant("a3", "msg_1", {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
                     output=412, second=3, stop="tool_use"),
        cc_result("r1", "toolu_1", 4),
    ]
    transcript.write_bytes(b"".join(lines[:2]))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert [row[:3] for row in _calls(db)] == [(f"{SESSION}:msg_1:req_1", 10, 3)]
    _clean(db)
    with transcript.open("ab") as f:
        f.write(b"".join(lines[2:]))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    calls = _calls(db)
    assert [row[:4] for row in calls] == [(f"{SESSION}:msg_1:req_1", 10, 412, 200)]
    assert calls[0][4] % 60_000 == 3_000  # the call is dated by the line that carried its final usage
    _clean(db)
    # Reading the whole file again, or a copy of it, changes nothing.
    assert ingest(db, tmp_path / "claude", fmt="claude-code").events == 0
    assert scalar(db, "SELECT count(*) FROM tool_calls WHERE status = 'ok'") == 1
    usage = subprocess.run([sys.executable, "-m", "agentledger", "usage", "--json"], env=cli_env(db),
                           capture_output=True, check=True)
    u = orjson.loads(usage.stdout)
    assert (u["llm_calls"], u["output_tokens"], u["unpriced_calls"]) == (1, 412, 0)
    assert u["cost_usd"] > 0


def _tools_by_run(db: Path, *runs: str) -> list[list[tuple]]:
    return [[(t["tool_name"], t["status"]) for t in cli_json(db, "run", run)["tool_calls_list"]] for run in runs]


@pytest.mark.parametrize("cut", [None, 3], ids=["one-ingest", "the-result-read-later"])
def test_a_tool_result_written_after_the_next_prompt_ends_the_call_of_the_turn_that_asked(tmp_path, db, cut):
    """The user may prompt again while a tool runs: the result written after that prompt ended a second call in
    the new turn, and the turn that asked for it kept its call open, then interrupted."""
    project = _project(tmp_path)
    transcript = project / f"{SESSION}.jsonl"
    lines = [cc_prompt("u1", "run the tests", 0),
             cc_assistant("a1", "msg_1", {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
                          output=80, second=1, stop="tool_use"),
             cc_prompt("u2", "and check lint", 10),
             cc_result("r1", "toolu_1", 11),
             cc_assistant("a2", "msg_2", {"type": "text", "text": "Both pass."}, output=40, second=12, request="req_2",
                          stop="end_turn")]
    _read_cut_at(db, transcript, lines, cut, tmp_path / "claude", "claude-code")
    u = usage(db)
    assert (u["tool_calls"], u["tool_errors"], u["interrupted_runs"]) == (1, 0, 0)
    assert _tools_by_run(db, "u1", "u2") == [[("Bash", "ok")], []]
    _clean(db)


def _read_cut_at(db, path: Path, lines: list[bytes], cut: int | None, root: Path, fmt: str) -> None:
    """``lines`` written to ``path`` and read; with ``cut``, the lines from there on appended and read again."""
    path.write_bytes(b"".join(lines[:cut]))
    ingest(db, root, fmt=fmt)
    if cut is not None:
        with path.open("ab") as f:
            f.write(b"".join(lines[cut:]))
        ingest(db, root, fmt=fmt)
    settle(db)


@pytest.mark.parametrize("cut", [None, 4], ids=["one-ingest", "the-result-read-later"])
def test_a_tool_result_written_after_the_next_user_message_ends_the_call_of_the_run_that_asked(tmp_path, db, cut):
    """OpenClaw's transcripts too: a toolResult written after the user's next message ended a second call."""
    sid = "807d602d-0000-4000-8000-000000000003"
    path = _sessions_dir(tmp_path, "agent:main:main", sid) / f"{sid}.jsonl"
    lines = [oc_header(sid), oc_user("u1", 1), oc_assistant("a1", 2, tool="call_1"), oc_user("u2", 3),
             oc_result("t1", 4, "call_1"), oc_assistant("a2", 5)]
    _read_cut_at(db, path, lines, cut, tmp_path / "state", "oc-transcript")
    assert (usage(db)["tool_calls"], usage(db)["tool_errors"]) == (1, 0)
    assert _tools_by_run(db, f"{sid}:u1", f"{sid}:u2") == [[("exec", "ok")], []]
    _clean(db)


@pytest.mark.parametrize("usage", [
    {"input_tokens": 100_000, "input_tokens_details": {"cached_tokens": 90_000}, "output_tokens": 1000},
    {"prompt_tokens": 100_000, "prompt_tokens_details": {"cached_tokens": 90_000}, "completion_tokens": 1000}],
    ids=["responses", "chat-completions"])
def test_openai_usage_through_a_gateway_counts_its_cached_tokens_inside_input_once(tmp_path, db, usage):
    """A gpt-5 call through a gateway reports OpenAI's usage, whose input holds the cached tokens: the
    Responses API's form (input_tokens_details) as Chat Completions' (prompt_tokens) is priced so."""
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0) + cc_assistant("a1", "msg_1", {"type": "text", "text": "Done."}, output=0,
                                                second=1, stop="end_turn", model="gpt-5", usage=usage))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    u = cli_json(db, "usage")
    assert (u["input_tokens"], u["cache_read_tokens"], u["cache_write_tokens"], u["output_tokens"]) == (
        10_000, 90_000, 0, 1000)
    assert (u["cost_usd"], u["unpriced_calls"]) == (pytest.approx(0.03375, abs=1e-9), 0)


def test_a_message_claude_code_wrote_itself_is_no_call_and_its_api_error_placeholder_a_failed_one(tmp_path, db):
    """Claude Code writes some assistant lines itself as model "<synthetic>" with no usage: a message of
    its own ("No response requested.") asked no model anything, an API error's placeholder
    (isApiErrorMessage) is a call that failed."""
    project = _project(tmp_path)
    zero = {"input_tokens": 0, "output_tokens": 0}
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0)
        + cc_assistant("a1", "msg_1", {"type": "text", "text": "No response requested."}, output=0, second=1,
                       stop="stop_sequence", model="<synthetic>", usage=zero)
        + cc_prompt("u2", "again", 2)
        + cc_assistant("a2", "msg_2", {"type": "text", "text": "API Error: 529 Overloaded"}, output=0, second=3,
                       stop="stop_sequence", model="<synthetic>", usage=zero, isApiErrorMessage=True)
        + cc_assistant("a3", "msg_3", {"type": "text", "text": "Done."}, output=5, second=4, stop="end_turn"))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    settle(db)
    u = cli_json(db, "usage")
    assert (u["runs"], u["llm_calls"], u["llm_errors"], u["output_tokens"]) == (2, 1, 1, 5)
    assert sorted((r["run_id"], r["llm_calls"], r["llm_errors"]) for r in cli_json(db, "runs")) == [
        ("u1", 0, 0), ("u2", 1, 1)]


TOO_LONG = "API Error: 400 prompt is too long: 210000 tokens > 200000 maximum"
OVERLOADED = "API Error: 529 Overloaded"


def cc_api_error(uuid: str, second: int, error: str) -> bytes:
    """The answer Claude Code writes in the model's place when a request failed for good."""
    return cc_assistant(uuid, f"msg_{uuid}", {"type": "text", "text": error}, output=0, second=second,
                        stop="stop_sequence", model="<synthetic>", usage={"input_tokens": 0, "output_tokens": 0},
                        isApiErrorMessage=True)


def cc_turn_duration(uuid: str, second: int) -> bytes:
    return _line({"type": "system", "subtype": "turn_duration", "durationMs": 1000, "uuid": uuid, "sessionId": SESSION,
                  "isSidechain": False, "timestamp": f"2026-10-01T10:00:{second:02d}.000Z"})


def _api_error_turns() -> list[bytes]:
    """Three turns: one answered only by an API error, one Claude Code retried after one (a side question
    failing in it too), and a last one answered only by an API error, which nothing ends."""
    return [
        cc_prompt("u1", "summarize everything", 0),
        cc_api_error("e1", 1, TOO_LONG),
        cc_turn_duration("d1", 2),
        cc_prompt("u2", "fix the flaky test", 10),
        cc_api_error("e2", 11, OVERLOADED),
        cc_assistant("a2", "msg_2", {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}, output=30,
                     second=14, request="req_2", stop="tool_use"),
        cc_result("r2", "toolu_1", 15),
        cc_assistant("a3", "msg_3", {"type": "text", "text": "Fixed."}, output=9, second=16, request="req_3"),
        cc_turn_duration("d2", 17),
        _side(BTW_AGENT, cc_api_error("b1", 18, OVERLOADED)),
        cc_prompt("u3", "and the docs?", 30),
        cc_api_error("e3", 31, OVERLOADED),
    ]


def _in_two_reads(tmp_path: Path, lines: list[bytes], picture) -> dict:
    """``picture(db)`` of a ledger for every cut of one transcript's ``lines`` into two reads, each read then
    settled as serve would, keyed by where the first read stopped."""
    pictures = {}
    for cut in range(len(lines)):
        db, root = tmp_path / f"cut-{cut}" / "l.db", tmp_path / f"cut-{cut}" / "claude"
        transcript = root / "projects" / "-home-dev-src-app" / f"{SESSION}.jsonl"
        transcript.parent.mkdir(parents=True)
        for part in (lines[:cut], lines[cut:]):
            with transcript.open("ab") as f:
                f.writelines(part)
            ingest(db, root, fmt="claude-code")
            settle(db)
        _clean(db)
        pictures[cut] = picture(db)
    return pictures


def test_a_turn_whose_last_answer_is_an_api_error_failed_with_it_wherever_reads_stop(tmp_path):
    """Claude Code writes an API error it gave up on as the model's answer, and may retry within the turn
    after one: a turn fails with the error its last answer is, however it ended (turn_duration, reconcile),
    and one answered since is ok, however the lines are split across reads."""
    lines = _api_error_turns()
    pictures = _in_two_reads(tmp_path, lines, lambda db: rows(
        db, "SELECT run_id, status, error, ended_ms % 60000, stop_reason FROM runs ORDER BY 1"))
    assert [row[:3] for row in pictures[0]] == [("u1", "error", TOO_LONG), ("u2", "ok", None),
                                                ("u3", "error", OVERLOADED)]
    assert {cut: picture for cut, picture in pictures.items() if picture != pictures[0]} == {}
    assert [(e["kind"], e["id"], e["error"]) for e in cli_json(tmp_path / "cut-0" / "l.db", "errors")] == [
        ("run", "u3", OVERLOADED), ("run", "u1", TOO_LONG)]
    u = usage(tmp_path / "cut-0" / "l.db")
    assert (u["runs"], u["failed_runs"], u["interrupted_runs"], u["llm_errors"]) == (3, 2, 0, 4)


def _reported_turns(duration_first: bool) -> list[bytes]:
    """Two turns, each reported over as its last answer's stop reason and by a turn_duration line, which the
    file gives after the answer, as Claude Code writes it, or before."""
    turns = [
        [cc_prompt("u1", "fix the build", 0),
         cc_assistant("a1", "msg_1", {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}, output=20,
                      second=1, stop="tool_use"),
         cc_result("r1", "toolu_1", 2),
         cc_assistant("a2", "msg_2", {"type": "text", "text": "Done."}, output=5, second=3, request="req_2",
                      stop="end_turn"),
         cc_turn_duration("d1", 4)],
        [cc_prompt("u2", "explain it all", 10),
         cc_assistant("a3", "msg_3", {"type": "text", "text": "It is"}, output=9, second=11, request="req_3",
                      stop="max_tokens"),
         cc_turn_duration("d2", 12)],
    ]
    if duration_first:
        for turn in turns:
            turn[-2:] = turn[:-3:-1]
    return [line for turn in turns for line in turn]


@pytest.mark.parametrize("duration_first", [False, True])
def test_a_turn_keeps_its_answers_stop_reason_and_takes_turn_durations_duration_wherever_reads_stop(
        tmp_path, duration_first):
    """A turn's end is reported twice: its last answer's stop reason, and a turn_duration line with how long it
    took. The run has both, whichever line is read first and however the lines are split across reads."""
    lines = _reported_turns(duration_first)
    pictures = _in_two_reads(tmp_path, lines, lambda db: [
        tuple(r[k] for k in ("run_id", "status", "ended_at", "duration_ms", "stop_reason"))
        for r in (cli_json(db, "run", run) for run in ("u1", "u2"))])
    assert pictures[0] == [("u1", "ok", "2026-10-01T10:00:04.000Z", 1000, "end_turn"),
                           ("u2", "ok", "2026-10-01T10:00:12.000Z", 1000, "max_tokens")]
    assert {cut: picture for cut, picture in pictures.items() if picture != pictures[0]} == {}


def test_a_gateways_models_are_spend_of_the_provider_the_price_table_lists_them_under(tmp_path, db):
    """Claude Code through a gateway may call another provider's models: each is that provider's spend,
    and a model the price table does not know names no provider."""
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(cc_prompt("u1", "hi", 0) + b"".join(
        cc_assistant(f"a{i}", f"msg_{i}", {"type": "text", "text": "Done."}, output=100, second=i, model=model)
        for i, model in enumerate((MODEL, "gpt-5", "gpt-5-mini", "our-own-model"), 1)))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    grouped = cli_json(db, "costs", "--group-by", "provider")["rows"]
    assert sorted((r["provider"] or "", r["llm_calls"]) for r in grouped) == [
        ("", 1), ("anthropic", 1), ("openai", 2)]


def test_a_side_branch_replay_never_counts_again_whatever_is_read_first(tmp_path, db):
    project = _project(tmp_path)
    sub = project / SESSION / "subagents"
    sub.mkdir(parents=True)
    # The side branch's file is read first here (a second root), then the session.
    (sub / "agent-a1b2c3d4.jsonl").write_bytes(
        cc_assistant("s1", "msg_1", {"type": "text", "text": "hi"}, output=900, second=9, sidechain=True,
                     request="req_replay")
        + cc_assistant("s2", "msg_side", {"type": "text", "text": "side"}, output=50, second=10, sidechain=True,
                       request="req_side", stop="end_turn"))
    ingest(db, sub, fmt="claude-code")
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hello", 0)
        + cc_assistant("a1", "msg_1", {"type": "text", "text": "hi"}, output=120, second=1, stop="end_turn"))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert sorted(row[:3] for row in _calls(db)) == [(f"{SESSION}:msg_1:req_1", 10, 120),
                                                          (f"{SESSION}:msg_side:req_side", 10, 50)]
    _clean(db)


@pytest.mark.parametrize("copy_request", [None, "req_copy"], ids=["copied-as-is", "under-a-request-of-its-own"])
@pytest.mark.parametrize("order", ["session-first", "subagent-first", "in-one-read"])
def test_a_side_branchs_copy_of_an_api_error_placeholder_is_no_second_failed_call(tmp_path, db, order,
                                                                                   copy_request):
    """Claude Code writes an API error's placeholder with no request id; a subagent's transcript that copies
    the session's lines copies it too, under a uuid of its own: one failed call, the session's, whichever
    file is read first."""
    parent, child, _ = _task_lines()
    placeholder = orjson.loads(cc_api_error("e0", 1, OVERLOADED))
    del placeholder["requestId"]
    copy = placeholder | {"uuid": "c_e0", "timestamp": "2026-10-01T10:00:02.000Z"}
    if copy_request is not None:
        copy["requestId"] = copy_request
    project = _project(tmp_path)
    files = {project / f"{SESSION}.jsonl": [parent[0], _line(placeholder), *parent[1:]],
             project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl": [_side(TASK_AGENT, _line(copy)), *child]}
    reads = {"session-first": [list(files)[:1], list(files)], "subagent-first": [list(files)[1:], list(files)],
             "in-one-read": [list(files)]}[order]
    for paths in reads:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"".join(files[path]))
        ingest(db, tmp_path / "claude", fmt="claude-code")
    u = usage(db)
    assert (u["llm_calls"], u["llm_errors"]) == (4, 1)
    assert {s["session_id"]: (s["llm_calls"], s["llm_errors"]) for s in cli_json(db, "sessions")} == {
        SESSION: (2, 1), CHILD_ID: (2, 0)}
    _clean(db)


def test_metrics_hold_a_counter_the_ledger_corrects_downwards(tmp_path):
    """A replay counted before it is found out leaves the ledger's sum lower than it was: served
    as it is, Prometheus would read a reset and count the whole counter again."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    from served import serve
    from serving import wait_for, write_config

    project = _project(tmp_path)
    sub = project / SESSION / "subagents"
    sub.mkdir(parents=True)
    key = ("agentledger_tokens_total", (("model", MODEL), ("provider", "anthropic"), ("token_type", "output")))

    def output_tokens() -> float:
        with urllib.request.urlopen(served.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return next((s.value for f in text_string_to_metric_families(text) for s in f.samples
                     if (s.name, tuple(sorted(s.labels.items()))) == key), 0.0)

    served = serve(write_config(tmp_path, tmp_path / "claude", fmt="claude-code", extra=""))
    try:
        (sub / "agent-a1b2c3d4.jsonl").write_bytes(
            cc_assistant("s1", "msg_1", {"type": "text", "text": "hi"}, output=900, second=9, sidechain=True,
                         request="req_replay"))
        wait_for(lambda: output_tokens() == 900, what="the replay counted")
        main = project / f"{SESSION}.jsonl"
        main.write_bytes(cc_prompt("u1", "hello", 0)
                         + cc_assistant("a1", "msg_1", {"type": "text", "text": "hi"}, output=120, second=1))
        wait_for(lambda: usage(tmp_path / "ledger.db")["output_tokens"] == 120, what="the replay found out")
        assert output_tokens() == 900
        with main.open("ab") as f:
            f.write(cc_assistant("a2", "msg_2", {"type": "text", "text": "more"}, output=1000, second=2,
                                 request="req_2"))
        wait_for(lambda: usage(tmp_path / "ledger.db")["output_tokens"] == 1120, what="the next call")
        assert output_tokens() == 1120  # past its highest, the counter is the ledger's sum again
        with (sub / "agent-a1b2c3d4.jsonl").open("ab") as f:
            f.write(cc_assistant("s2", "msg_3", {"type": "text", "text": "again"}, output=500, second=19,
                                 sidechain=True, request="req_replay_3"))
        wait_for(lambda: output_tokens() == 1620, what="the second replay counted")
    finally:
        served.stop(signal.SIGKILL)
    # Found out while the daemon is down: the restart's catch-up lowers the sum, and the counter holds.
    with main.open("ab") as f:
        f.write(cc_assistant("a3", "msg_3", {"type": "text", "text": "again"}, output=20, second=3, request="req_3"))
    served = serve(write_config(tmp_path, tmp_path / "claude", fmt="claude-code", extra=""))
    try:
        assert usage(tmp_path / "ledger.db")["output_tokens"] == 1140
        assert output_tokens() == 1620
    finally:
        served.stop()


def test_metrics_count_a_run_whose_outcome_is_revised_under_each_outcome_and_still_see_the_next_failure(tmp_path):
    """A turn answers, goes on, fails with an API error and is answered on retry: its run goes ok, error,
    ok. The failure it went through counts, and a later run's real failure raises the counter again,
    across a kill -9 too: held as a correction, the error series would hide it from ``increase()``."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    from served import serve
    from serving import wait_for, write_config

    main = _project(tmp_path) / f"{SESSION}.jsonl"
    db = tmp_path / "ledger.db"

    def runs_total() -> dict[str, float]:
        with urllib.request.urlopen(served.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return {s.labels["outcome"]: s.value for f in text_string_to_metric_families(text)
                for s in f.samples if s.name == "agentledger_runs_total"}

    def statuses() -> list[str]:
        return [status for (status,) in rows(db, "SELECT status FROM runs ORDER BY started_ms")]

    def append(*lines: bytes) -> None:
        with main.open("ab") as f:
            f.writelines(lines)

    config = write_config(tmp_path, tmp_path / "claude", fmt="claude-code", extra="")
    served = serve(config)
    try:
        append(cc_prompt("u1", "fix it", 0),
               cc_assistant("a1", "msg_1", {"type": "text", "text": "Fixed."}, output=50, second=1, stop="end_turn"))
        wait_for(lambda: statuses() == ["ok"], what="the turn answered")
        assert runs_total() == {"ok": 1, "error": 0}
        append(cc_api_error("e1", 2, OVERLOADED))
        wait_for(lambda: statuses() == ["error"], what="the turn failed")
        assert runs_total() == {"ok": 1, "error": 1}
        append(cc_assistant("a2", "msg_2", {"type": "text", "text": "Done."}, output=9, second=4, stop="end_turn",
                            request="req_2"), cc_turn_duration("d1", 5))
        wait_for(lambda: statuses() == ["ok"], what="the retry answered")
        assert runs_total() == {"ok": 2, "error": 1}
    finally:
        served.stop(signal.SIGKILL)
    served = serve(config)
    try:
        assert runs_total() == {"ok": 2, "error": 1}
        append(cc_prompt("u2", "more", 10), cc_api_error("e2", 11, OVERLOADED), cc_turn_duration("d2", 12))
        wait_for(lambda: statuses() == ["ok", "error"], what="the second turn failed")
        assert runs_total() == {"ok": 2, "error": 2}
    finally:
        served.stop()


def _floored(floors, ok: int, error: int, tokens: int) -> tuple[float, float, float]:
    """A scrape of a ledger with ``ok`` and ``error`` runs and ``tokens`` tokens, held by ``floors``
    (metrics.CounterFloors): runs ok, runs in error, tokens, as served."""
    from prometheus_client.core import CounterMetricFamily

    runs = CounterMetricFamily("agentledger_runs", "", labels=["outcome"])
    runs.add_metric(["ok"], ok)
    runs.add_metric(["error"], error)
    spent = CounterMetricFamily("agentledger_tokens", "", labels=["model"])
    spent.add_metric(["m"], tokens)
    floors.hold(["ledger", 1], [runs, spent])
    return (*(s.value for s in runs.samples), spent.samples[0].value)


def test_metric_floors_hold_what_the_ledger_took_back_but_not_what_moved_to_another_outcome(tmp_path):
    from agentledger.metrics import CounterFloors

    path = tmp_path / "metric-floors.json"
    floors = CounterFloors(path)
    assert _floored(floors, 3, 1, 100) == (3, 1, 100)
    assert _floored(floors, 2, 1, 90) == (3, 1, 100)  # a replayed run and its tokens found out: held
    assert _floored(floors, 3, 1, 95) == (3, 1, 100)  # the next run refills what was taken back
    assert _floored(floors, 2, 2, 95) == (3, 2, 100)  # a run's outcome revised: moved, not taken back
    assert _floored(floors, 3, 1, 95) == (4, 2, 100)  # and back: it counts under each outcome it reached
    floors = CounterFloors(path)  # a restart keeps all of it
    assert _floored(floors, 3, 2, 120) == (4, 3, 120)  # another run fails: it counts
    # A file kept before moves were told apart: what lies below its values was taken back.
    path.write_bytes(orjson.dumps({"epoch": ["ledger", 1], "samples": [
        ["agentledger_runs_total", [["outcome", "ok"]], 5], ["agentledger_runs_total", [["outcome", "error"]], 2],
        ["agentledger_tokens_total", [["model", "m"]], 150]]}))
    floors = CounterFloors(path)
    assert _floored(floors, 3, 3, 120) == (5, 3, 150)
    assert _floored(floors, 4, 3, 160) == (5, 3, 160)


def test_a_scrape_while_a_run_is_open_again_changes_no_count(tmp_path):
    """A turn ended at the grace (ok) goes on, so it runs again, and fails; the next turn answers. A scrape
    while it ran again held its ok as taken back, and that hid the next turn's ok from the counter."""
    from agentledger.metrics import CounterFloors

    main = _project(tmp_path) / f"{SESSION}.jsonl"
    db = tmp_path / "ledger.db"
    every, not_while_running = CounterFloors(), CounterFloors()

    def runs_total(floors: CounterFloors) -> dict[str, float]:
        return {dict(labels)["outcome"]: value for (name, labels), value in metric_counters(db, floors=floors).items()
                if name == "agentledger_runs_total"}

    def step(status: list[str], *lines: bytes) -> None:
        with main.open("ab") as f:
            f.writelines(lines)
        ingest(db, tmp_path / "claude", fmt="claude-code")
        if status == ["running"]:
            runs_total(every)
        else:
            settle(db)
            assert runs_total(every) == runs_total(not_while_running)
        assert [s for (s,) in rows(db, "SELECT status FROM runs ORDER BY started_ms")] == status

    step(["ok"], cc_prompt("u1", "fix it", 0), cc_assistant("a1", "msg_1", {"type": "text", "text": "On it."},
                                                            output=50, second=1))
    step(["running"], cc_assistant("a2", "msg_2", {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
                                   output=5, second=3, request="req_2"))
    step(["error"], cc_result("r1", "toolu_1", 4), cc_api_error("e1", 5, OVERLOADED), cc_turn_duration("d1", 6))
    step(["error", "ok"], cc_prompt("u2", "more", 10),
         cc_assistant("a3", "msg_3", {"type": "text", "text": "Done."}, output=9, second=11, stop="end_turn",
                      request="req_3"))
    assert runs_total(every) == runs_total(not_while_running) == {"ok": 2, "error": 1}


@st.composite
def _ledger_states(draw) -> list[tuple[tuple[int, int, int], bool]]:
    """(ok runs, runs in error, tokens) one after another, each with whether a scrape must see it: between two
    that must be seen, states lower in every count than both (runs open again, a correction still to be
    refilled) that a scrape may see or not."""
    counts = st.tuples(*[st.integers(0, 5)] * 3)
    seen = draw(st.lists(counts, min_size=2, max_size=6))
    states = []
    for a, b in zip(seen, seen[1:]):
        states.append((a, True))
        low = st.tuples(*(st.integers(0, min(x, y)) for x, y in zip(a, b)))
        states += [(state, False) for state in draw(st.lists(low, max_size=3))]
    return [*states, (seen[-1], True)]


@given(states=_ledger_states(), scraped=st.data())
@settings(max_examples=300, deadline=None)
def test_counters_never_go_down_and_are_the_same_whether_or_not_scrapes_saw_runs_open_again(states, scraped):
    from agentledger.metrics import CounterFloors

    every, some = CounterFloors(), CounterFloors()
    last = (0, 0, 0)
    for state, must in states:
        now = _floored(every, *state)
        assert all(b >= a for a, b in zip(last, now)), (last, now)
        last = now
        if must:
            assert _floored(some, *state) == now
        elif scraped.draw(st.booleans()):
            _floored(some, *state)


def _oc_line(obj: dict) -> bytes:
    return orjson.dumps(obj) + b"\n"


def oc_header(session_id: str) -> bytes:
    return _oc_line({"type": "session", "version": 3, "id": session_id, "timestamp": "2026-10-01T08:00:00.000Z"})


def oc_user(entry: str, second: int) -> bytes:
    return _oc_line({"type": "message", "id": entry, "timestamp": f"2026-10-01T08:00:{second:02d}.000Z",
                     "message": {"role": "user", "content": "hi", "timestamp": 1}})


def oc_assistant(entry: str, second: int, *, tool: str | None = None, cost: float = 0.01,
                 model: str = "claude-sonnet-4-5") -> bytes:
    content = [{"type": "toolCall", "id": tool, "name": "exec", "arguments": {}}] if tool else []
    return _oc_line({"type": "message", "id": entry, "timestamp": f"2026-10-01T08:00:{second:02d}.000Z",
                     "message": {"role": "assistant", "content": content, "provider": "anthropic", "model": model,
                                 "stopReason": "toolUse" if tool else "stop",
                                 "usage": {"input": 5, "output": 7, "cacheRead": 0, "cacheWrite": 0,
                                           "totalTokens": 12, "cost": {"total": cost}}}})


def oc_result(entry: str, second: int, tool: str, exit_code: int = 0) -> bytes:
    return _oc_line({"type": "message", "id": entry, "timestamp": f"2026-10-01T08:00:{second:02d}.000Z",
                     "message": {"role": "toolResult", "toolCallId": tool, "toolName": "exec", "isError": False,
                                 "details": {"exitCode": exit_code}}})


def oc_refused(entry: str, second: int) -> bytes:
    """The line of a call the provider refused: no usage, stopReason error."""
    return _oc_line({"type": "message", "id": entry, "timestamp": f"2026-10-01T08:00:{second:02d}.000Z",
                     "message": {"role": "assistant", "content": [], "provider": "openai", "model": "gpt-5",
                                 "stopReason": "error", "errorMessage": "429 rate limit reached",
                                 "usage": {"input": 0, "output": 0, "totalTokens": 0, "cost": {"total": 0}}}})


def _sessions_dir(tmp_path: Path, key: str, session_id: str) -> Path:
    sdir = tmp_path / "state" / "agents" / "main" / "sessions"
    sdir.mkdir(parents=True)
    (sdir / "sessions.json").write_bytes(orjson.dumps({key: {"sessionId": session_id, "inputTokens": 999999,
                                                             "estimatedCostUsd": 123.0}}))
    return sdir


def test_a_reset_while_tailing_is_a_rotation_and_nothing_is_lost_or_counted_twice(tmp_path, db):
    sid = "0b7bec4a-3902-43fd-bcbe-a4d347d8d807"
    sdir = _sessions_dir(tmp_path, "agent:main:main", sid)
    live = sdir / f"{sid}.jsonl"
    live.write_bytes(oc_header(sid) + oc_user("u1", 1) + oc_assistant("a1", 2))
    conn = open_writer(db)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [tmp_path / "state"]))
        pipeline.run_once()
        # Appended, then archived by a reset before the next look.
        with live.open("ab") as f:
            f.write(oc_user("u2", 3) + oc_assistant("a2", 4))
        os.rename(live, sdir / f"{sid}.jsonl.reset.2026-10-01T08-01-00.000Z")
        stats = pipeline.run_once()
        assert (stats.rotated, stats.lost_files) == (1, 0)
        assert pipeline.run_once().lines == 0
    finally:
        conn.close()
    assert scalar(db, "SELECT count(*) FROM files") == 1
    assert scalar(db, "SELECT count(*) FROM llm_calls") == 2
    assert scalar(db, "SELECT sum(cost_pico) FROM llm_calls") == 2 * 10**10
    # sessions.json's snapshot figures are never taken as totals; the key comes from it.
    assert rows(db, "SELECT session_key, input_tokens FROM sessions JOIN session_totals USING (session_id)") \
        == [("agent:main:main", 10)]
    _clean(db)


def _topic_sessions(db: Path) -> list[tuple]:
    return sorted((r["session_id"], r["session_key"], r["llm_calls"], r["end_reason"], r["ended_at"])
                  for r in cli_json(db, "sessions"))


# What OpenClaw's encodeURIComponent leaves of a topic id, dots included (a Slack thread's ts has one). A
# topic id holding ".jsonl." would make an archive's name read as a live one's: no name can tell them apart.
_TOPIC_IDS = st.text("abcXYZ0189-_.!~*'()%", min_size=1, max_size=20).filter(lambda t: ".jsonl." not in t)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=_TOPIC_IDS)
@example(topic="1712345678.123456")
def test_a_topic_transcript_is_its_sessions_whatever_its_topic_id_live_or_archived(tmp_path_factory, topic):
    tmp = tmp_path_factory.mktemp("topic")
    sdir = _sessions_dir(tmp, f"agent:main:slack:channel:c1:thread:{topic}", "sid3")
    for sid in ("sid2", "sid3"):
        (sdir / f"{sid}-topic-{topic}.jsonl").write_bytes(oc_header(sid) + oc_user("u1", 1) + oc_assistant("a1", 2))
    with followed_then_afresh(tmp, tmp / "state") as ledgers:
        ledgers.pipeline.run_once()
        # Followed while live, then archived by a reset; an archive of a deleted session appears beside them.
        os.rename(sdir / f"sid2-topic-{topic}.jsonl", sdir / f"sid2-topic-{topic}.jsonl.reset.2026-10-01T08-01-00.000Z")
        (sdir / f"sid1-topic-{topic}.jsonl.deleted.1790841720000").write_bytes(
            oc_header("sid1") + oc_user("u1", 1) + oc_assistant("a1", 2))
        ledgers.pipeline.run_once()
    settle(ledgers.followed)
    settle(ledgers.afresh)
    want = [("sid1", "agent:main:sid1", 1, "deleted", "2026-10-01T08:02:00.000Z"),
            ("sid2", "agent:main:sid2", 1, "reset", "2026-10-01T08:01:00.000Z"),
            ("sid3", f"agent:main:slack:channel:c1:thread:{topic}", 1, None, None)]
    assert _topic_sessions(ledgers.followed) == _topic_sessions(ledgers.afresh) == want


def test_a_read_resumed_after_a_restart_pairs_tools_with_the_run_they_belong_to(tmp_path, db):
    sid = "11446b2a-bd58-431d-9dfc-a853117a5255"
    sdir = _sessions_dir(tmp_path, "agent:main:telegram:direct:1", sid)
    path = sdir / f"{sid}.jsonl"
    path.write_bytes(oc_header(sid) + oc_user("u1", 1) + oc_assistant("a1", 2, tool="call_1"))
    ingest(db, tmp_path / "state", fmt="oc-transcript")
    with path.open("ab") as f:
        f.write(oc_result("t1", 3, "call_1", exit_code=2) + oc_assistant("a2", 4))
    ingest(db, tmp_path / "state", fmt="oc-transcript")  # a new process: only the ledger remembers the run
    assert rows(db, "SELECT run_id, status, exit_code FROM tool_calls") == [(f"{sid}:u1", "ok", 2)]
    assert rows(db, "SELECT run_id, status FROM runs") == [(f"{sid}:u1", "ok")]
    assert rows(db, "SELECT llm_calls, tool_calls, tool_errors FROM session_totals") == [(2, 1, 0)]
    _clean(db)


@pytest.mark.parametrize(("retry", "status"), [("left-waiting-on-its-tools", "interrupted"), ("answered", "ok"),
                                               ("none", "error")])
@pytest.mark.parametrize("passes", [1, 2])
def test_a_refused_call_retried_within_its_turn_is_not_how_the_turn_ended(tmp_path, db, retry, status, passes):
    # OpenClaw retries a call the provider refused (a 429) within the same turn. The refusal's line ended the
    # turn in error, and a retry whose tool calls never got results left it there, stale 429 and all, where
    # an orphaned turn is interrupted.
    sid = "807d602d-0000-4000-8000-000000000001"
    path = _sessions_dir(tmp_path, "agent:main:main", sid) / f"{sid}.jsonl"
    retried = {"left-waiting-on-its-tools": [oc_assistant("a2", 3, tool="call_1")],
               "answered": [oc_assistant("a2", 3, tool="call_1"), oc_result("t1", 4, "call_1"), oc_assistant("a3", 5)],
               "none": []}[retry]
    lines = [oc_header(sid), oc_user("u1", 1), oc_refused("a1", 2), *retried]
    cut = 3 if passes == 2 else len(lines)
    path.write_bytes(b"".join(lines[:cut]))
    ingest(db, tmp_path / "state", fmt="oc-transcript")
    settle(db)
    with path.open("ab") as f:
        f.write(b"".join(lines[cut:]))
    ingest(db, tmp_path / "state", fmt="oc-transcript")
    settle(db)
    assert rows(db, "SELECT status, error FROM runs") == [
        (status, "429 rate limit reached" if status == "error" else None)]
    u = usage(db)
    assert (u["interrupted_runs"], u["failed_runs"], u["open_runs"]) == (
        status == "interrupted", status == "error", 0)
    _clean(db)


def test_an_exec_result_gives_its_tool_call_the_duration_it_reports(tmp_path, db):
    # Every OpenClaw transcript tool call had a null duration, though an exec's result says how long it ran.
    sid = "807d602d-0000-4000-8000-000000000002"
    path = _sessions_dir(tmp_path, "agent:main:main", sid) / f"{sid}.jsonl"
    timed = oc_result("t1", 3, "call_1").replace(b'"exitCode":0', b'"exitCode":0,"durationMs":1500')
    path.write_bytes(oc_header(sid) + oc_user("u1", 1) + oc_assistant("a1", 2, tool="call_1") + timed)
    ingest(db, tmp_path / "state", fmt="oc-transcript")
    assert [(r["tool"], r["calls"], r["duration_s"]) for r in cli_json(db, "tools")] == [("exec", 1, 1.5)]
    _clean(db)


def test_huge_file_snapshots_are_skipped_unread(tmp_path, db):
    project = _project(tmp_path)
    snapshot = b'{"type":"file-history-snapshot","messageId":"x","snapshot":{"blob":"' + b"a" * 3_000_000 + b'\n'
    (project / f"{SESSION}.jsonl").write_bytes(cc_prompt("u1", "hi", 0) + snapshot + cc_prompt("u2", "again", 5))
    stats = ingest(db, tmp_path / "claude", fmt="claude-code")
    # The snapshot line is not even valid JSON: it was recognised by its first bytes, not parsed.
    assert (stats.lines, stats.rejects) == (3, 0)
    assert scalar(db, "SELECT count(*) FROM runs") == 2


def _snapshot(fields: bytes, size: int) -> bytes:
    """A file-history-snapshot line of about ``size`` bytes, its ``fields`` before its snapshot."""
    return b"{" + fields + b'"snapshot":{"blob":"' + b"a" * size + b'"}}\n'


def test_a_snapshot_longer_than_max_line_is_skipped_not_rejected(tmp_path, db):
    """Snapshots can be hundreds of MB, past any max_line: one whose first bytes say it is one is skipped,
    wherever its type is among them. A line whose first bytes cannot tell stays a reject, as does a long
    line that merely mentions snapshots."""
    project = _project(tmp_path)
    said_late = b'"isSnapshotUpdate": false, "messageId": "m1", "type": "file-history-snapshot", '
    said_past_the_head = _snapshot(b'"messageId":"m2",', 4000)[:-3] + b'},"type":"file-history-snapshot"}\n'
    mention = cc_prompt("u3", "the file-history-snapshot " + "b" * 4000, 3)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0) + _snapshot(b'"type":"file-history-snapshot","messageId":"m0",', 4000)
        + _snapshot(said_late, 4000) + cc_prompt("u2", "again", 2) + said_past_the_head + mention)
    out = cli_json(db, "ingest", "--source", f"claude-code={tmp_path / 'claude'}", "--max-line", "1024")
    assert (out["lines"], out["rejected_lines"]) == (6, 2)
    u = cli_json(db, "usage")
    assert (u["runs"], u["rejected_lines"]) == (2, 2)
    assert sorted(r["reason"] for r in cli_json(db, "rejects")) == sorted(
        f"line of {len(line) - 1} bytes exceeds max_line (1024)" for line in (said_past_the_head, mention))


@pytest.mark.parametrize("own", [["history.jsonl"], ["history.jsonl", "settings.json"]])
def test_a_claude_code_config_dir_before_its_first_session_has_none_of_its_own_files_read(tmp_path, db,
                                                                                           claude_corpus, own):
    # With no projects/ yet it was read as a project's dir: its history.jsonl was a rejected line, for good.
    config = tmp_path / "claude"
    config.mkdir()
    for name in own:
        (config / name).write_bytes(orjson.dumps({"display": "fix the bug", "pastedContents": {},
                                                  "timestamp": 1790000000000, "project": "/home/dev/x"}) + b"\n")
    first = ingest(db, config, fmt="claude-code")
    assert (first.files, first.rejects) == (0, 0)
    shutil.copytree(claude_corpus / "projects", config / "projects")
    ingest(db, config, fmt="claude-code")
    fresh = tmp_path / "fresh.db"
    ingest(fresh, config, fmt="claude-code")
    assert usage(db)["rejected_lines"] == usage(fresh)["rejected_lines"]
    assert dump(db) == dump(fresh)


def test_a_snapshot_longer_than_the_default_max_line_is_skipped_not_rejected(tmp_path, db):
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0) + _snapshot(b'"type":"file-history-snapshot",', DEFAULT_MAX_LINE)
        + cc_prompt("u2", "again", 5))
    stats = ingest(db, tmp_path / "claude", fmt="claude-code")
    assert (stats.lines, stats.rejects) == (3, 0)
    settle(db)
    assert (cli_json(db, "usage")["runs"], cli_json(db, "rejects")) == (2, [])


def test_records_the_ledger_does_not_read_are_skipped_and_broken_lines_are_still_rejects(tmp_path, db):
    """Claude Code writes titles and settings beside the conversation, with no time of their own, more of
    them each release: none is a reject, a record type not known yet neither. A line of a type the ledger
    reads that lacks its time, a line that is no JSON and one that is no object stay rejects."""
    project = _project(tmp_path)
    meta = [{"type": "permission-mode", "permissionMode": "default", "sessionId": SESSION},
            {"type": "ai-title", "aiTitle": "Fix the flaky test", "sessionId": SESSION},
            {"type": "custom-title", "customTitle": "flaky", "sessionId": SESSION},
            {"type": "agent-name", "agentName": "flaky", "sessionId": SESSION},
            {"type": "last-prompt", "lastPrompt": "fix the flaky test", "sessionId": SESSION},
            {"type": "mode", "mode": "plan", "sessionId": SESSION},
            {"type": "summary", "summary": "Flaky test", "leafUuid": "a1"},
            {"type": "relocated", "relocatedCwd": "/home/dev/src/app2", "sessionId": SESSION},
            {"type": "some-record-of-2027", "sessionId": SESSION}]
    untimed = orjson.loads(cc_prompt("u9", "and this?", 9))
    del untimed["timestamp"]
    (project / f"{SESSION}.jsonl").write_bytes(
        _line(meta[0]) + cc_prompt("u1", "fix the flaky test", 0)
        + cc_assistant("a1", "msg_1", {"type": "text", "text": "Fixed."}, output=50, second=1, stop="end_turn")
        + b"".join(map(_line, meta[1:])) + b'{"type": "user", "uuid": \n' + b"[1, 2]\n" + _line(untimed))
    stats = ingest(db, tmp_path / "claude", fmt="claude-code")
    assert (stats.lines, stats.rejects) == (len(meta) + 5, 3)
    settle(db)
    u = cli_json(db, "usage")
    assert (u["sessions"], u["runs"], u["interrupted_runs"], u["llm_calls"], u["output_tokens"], u["rejected_lines"]) \
        == (1, 1, 0, 1, 50, 3)
    assert sorted(r["reason"].split(":")[0] for r in cli_json(db, "rejects")) == [
        "invalid JSON", "missing or invalid field 'timestamp'", "not a JSON object (list)"]


@pytest.mark.parametrize("stamp", ["1969-12-31T23:50:00.000Z", "0001-01-01T00:00:00+01:00",
                                   "9999-12-31T23:00:00-05:00"])
def test_a_line_timed_before_1970_or_past_9999_in_utc_is_a_reject_and_the_rest_is_indexed(tmp_path, db, stamp):
    # Past 9999 once in UTC, pricing it stopped ingest and serve ("year 0 is out of range") with nothing
    # indexed; before 1970 it was indexed into day slots SQLite's own arithmetic disagrees with (verify failed).
    project = _project(tmp_path)
    early = cc_assistant("a0", "msg_0", {"type": "text", "text": "x"}, output=7, second=0, request="req_0")
    (project / f"{SESSION}.jsonl").write_bytes(
        early.replace(b"2026-10-01T10:00:00.000Z", stamp.encode()) + cc_prompt("u1", "hi", 1)
        + cc_assistant("a1", "msg_1", {"type": "text", "text": "x"}, output=5, second=2))
    stats = ingest(db, tmp_path / "claude", fmt="claude-code")
    assert (stats.lines, stats.rejects) == (3, 1)
    u = cli_json(db, "usage")
    assert (u["llm_calls"], u["output_tokens"], u["rejected_lines"]) == (1, 5, 1)
    assert [r["reason"] for r in cli_json(db, "rejects")] == ["missing or invalid field 'timestamp'"]
    assert verify(db) == []


def _cut_inside_an_emoji(fmt: str, tmp_path: Path) -> tuple[Path, Path, bytes]:
    """The root of a file of ``fmt`` whose tool call and its failed result each hold MARK (in the tool's name
    and in a preview), the file, and the line of the call again."""
    if fmt == "oc-telemetry":
        from logwriter import LogDir, event

        logs = LogDir(tmp_path / "state")
        call = event(1, "tool.start", {"toolName": "exMARKec", "toolCallId": "tc1"})
        logs.append(call + event(2, "tool.end", {"toolName": "exMARKec", "toolCallId": "tc1", "isError": True,
                                                 "durationMs": 5, "error": "failed", "result": "party MARK"}))
        return logs.root, logs.live, call
    if fmt == "oc-transcript":
        sid = "0b7bec4a-3902-43fd-bcbe-a4d347d8d807"
        transcript = _sessions_dir(tmp_path, "agent:main:main", sid) / f"{sid}.jsonl"
        call = oc_assistant("a1", 2, tool="tc1").replace(b'"exec"', b'"exMARKec"')
        result = _oc_line({"type": "message", "id": "r1", "timestamp": "2026-10-01T08:00:03.000Z",
                           "message": {"role": "toolResult", "toolCallId": "tc1", "toolName": "exMARKec",
                                       "isError": True, "content": [{"type": "text", "text": "party MARK"}]}})
        transcript.write_bytes(oc_header(sid) + oc_user("u1", 1) + call + result)
        return tmp_path / "state", transcript, call
    transcript = _project(tmp_path) / f"{SESSION}.jsonl"
    call = cc_assistant("a1", "msg_1", {"type": "tool_use", "id": "toolu_1", "name": "exMARKec", "input": {}},
                        output=5, second=1, stop="tool_use")
    result = cc_result("r1", "toolu_1", 2, is_error=True).replace(b'"ok"', b'"party MARK"')
    transcript.write_bytes(cc_prompt("u1", "hi", 0) + call + result)
    return tmp_path / "claude", transcript, call


@pytest.mark.parametrize("fmt", ["oc-telemetry", "oc-transcript", "claude-code"])
@pytest.mark.parametrize("half", [rb"\ud83c", rb"\uDF89"])
def test_a_line_holding_half_a_surrogate_pair_is_indexed_with_a_replacement_character(tmp_path, db, fmt, half):
    # What JS writes for a string it cut inside an emoji (String.slice, then JSON.stringify): the half left,
    # escaped alone. Such a line was rejected whole: the tool call lost its failure, or the call itself.
    root, path, call = _cut_inside_an_emoji(fmt, tmp_path)
    broken = call.replace(b"\n", b"").replace(b"}", b"},", 1) + b"\n"  # the half, and a real fault too
    path.write_bytes((path.read_bytes() + broken).replace(b"MARK", half))
    out = subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--json", "--source",
                          f"{fmt}={root}"], env=cli_env(db), capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    tools = cli_json(db, "tools")
    assert [(t["tool"], t["calls"], t["errors"]) for t in tools] == [("ex\ufffdec", 1, 1)]
    (reject,) = cli_json(db, "rejects")
    assert reject["reason"].startswith("invalid JSON: ") and "surrogate" not in reject["reason"], reject


def test_several_sources_at_once_and_a_bad_source_flag(tmp_path, db):
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0) + cc_assistant("a1", "msg_1", {"type": "text", "text": "x"}, output=5, second=1))
    sid = "e0d235fc-d368-469e-be13-2dc0f3afab3b"
    sdir = _sessions_dir(tmp_path, "agent:main:main", sid)
    (sdir / f"{sid}.jsonl").write_bytes(oc_header(sid) + oc_user("u1", 1) + oc_assistant("a1", 2))
    (sdir / f"{sid}.jsonl.lock").write_bytes(b"not a transcript\n")
    env = cli_env(db)
    out = subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--json",
                          "--source", f"claude-code={tmp_path / 'claude'}",
                          "--source", f"oc-transcript={tmp_path / 'state'}"], env=env, capture_output=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert orjson.loads(out.stdout)["files"] == 2
    assert rows(db, "SELECT source, count(*) FROM llm_calls GROUP BY 1 ORDER BY 1") == [
        ("claude-code", 1), ("oc-transcript", 1)]
    for bad, words in ((f"nonsense={tmp_path}", "unknown format 'nonsense'"), ("claude-code", "FORMAT=ROOT"),
                       (f"claude-code={tmp_path / 'missing'}", "does not exist: correct the path, or run serve")):
        out = subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--source", bad], env=env,
                             capture_output=True, text=True, check=False)
        assert out.returncode == 2
        assert len(out.stderr.strip().splitlines()) == 1 and words in out.stderr, out.stderr


def _at(minute: int, second: int) -> str:
    return f"2026-10-01T09:{minute:02d}:{second:02d}.000Z"


def _spawn_call(entry: str, call: str, task: str, minute: int) -> bytes:
    return _oc_line({"type": "message", "id": entry, "timestamp": _at(minute, 0),
                     "message": {"role": "assistant", "provider": "anthropic", "model": "claude-sonnet-4-5",
                                 "content": [{"type": "toolCall", "id": call, "name": "sessions_spawn",
                                              "arguments": {"task": task, "label": "review"}}],
                                 "stopReason": "toolUse", "usage": {"input": 5, "output": 7, "cost": {"total": 0.01}}}})


def _spawn_result(entry: str, call: str, child_key: str, minute: int) -> bytes:
    body = orjson.dumps({"status": "accepted", "childSessionKey": child_key, "runId": "r"}).decode()
    return _oc_line({"type": "message", "id": entry, "timestamp": _at(minute, 2),
                     "message": {"role": "toolResult", "toolCallId": call, "toolName": "sessions_spawn",
                                 "content": [{"type": "text", "text": body}], "isError": False}})


def _child(session_id: str, task: str, minute: int) -> list[bytes]:
    """A subagent's transcript: its header written while the spawn is answered, then its task and answer."""
    return [_oc_line({"type": "session", "version": 3, "id": session_id, "timestamp": _at(minute, 1)}),
            _oc_line({"type": "message", "id": "c1", "timestamp": _at(minute, 3),
                      "message": {"role": "user", "content": [{"type": "text", "text": task}]}}),
            _oc_line({"type": "message", "id": "c2", "timestamp": _at(minute, 9),
                      "message": {"role": "assistant", "provider": "anthropic", "model": "claude-haiku-4-5",
                                  "content": [], "stopReason": "stop",
                                  "usage": {"input": 3, "output": 4, "cost": {"total": 0.001}}}})]


def test_archived_subagent_transcripts_are_found_by_their_parents_spawn_whichever_is_read_first(tmp_path, db):
    state = tmp_path / "state"
    parent_dir = state / "agents" / "work" / "sessions"
    child_dir = state / "agents" / "main" / "sessions"  # read before the parent's: "main" sorts first
    parent_dir.mkdir(parents=True)
    child_dir.mkdir(parents=True)
    parent = "7a0c2f4e-0000-4000-8000-000000000001"
    (parent_dir / "sessions.json").write_bytes(orjson.dumps({"agent:work:main": {"sessionId": parent}}))
    task = "Review src/auth for missing checks; report, do not edit."
    # The same task spawned twice: each child is the one whose header was written as its spawn was answered.
    (parent_dir / f"{parent}.jsonl").write_bytes(
        oc_header(parent) + _spawn_call("p1", "call_a", task, 10)
        + _spawn_result("p2", "call_a", "agent:main:subagent:aaaa", 10) + _spawn_call("p3", "call_b", task, 40)
        + _spawn_result("p4", "call_b", "agent:main:subagent:bbbb", 40))
    first, second, stranger = ("c0ffee00-0000-4000-8000-00000000000" + n for n in "123")
    (child_dir / f"{second}.jsonl.deleted.2026-10-01T10-00-00.000Z").write_bytes(b"".join(_child(second, task, 40)))
    (child_dir / f"{stranger}.jsonl.reset.2026-10-01T10-00-00.000Z").write_bytes(
        b"".join(_child(stranger, "what is on my calendar?", 10)))
    archived = child_dir / f"{first}.jsonl.deleted.2026-10-01T10-00-00.000Z"
    lines = _child(first, task, 10)
    archived.write_bytes(b"".join(lines[:2]))
    ingest(db, state, fmt="oc-transcript")
    with archived.open("ab") as f:  # the rest is read by a new process, which opens the file afresh
        f.write(b"".join(lines[2:]))
    ingest(db, state, fmt="oc-transcript")
    assert sorted(rows(db, "SELECT session_id, session_key FROM sessions")) == [
        (parent, "agent:work:main"), (first, "agent:main:subagent:aaaa"), (second, "agent:main:subagent:bbbb"),
        (stranger, f"agent:main:{stranger}")]
    # Every row of a child carries its key, whichever read wrote it.
    assert sorted(rows(db, "SELECT DISTINCT session_id, session_key FROM llm_calls WHERE session_id != ?",
                              (parent,))) == [(first, "agent:main:subagent:aaaa"), (second, "agent:main:subagent:bbbb"),
                                              (stranger, f"agent:main:{stranger}")]
    assert sorted(rows(db, "SELECT child_session_key, parent_session_key FROM subagents")) == [
        ("agent:main:subagent:aaaa", "agent:work:main"), ("agent:main:subagent:bbbb", "agent:work:main")]
    usage = subprocess.run([sys.executable, "-m", "agentledger", "usage", "--json"], env=cli_env(db),
                           capture_output=True, check=True)
    u = orjson.loads(usage.stdout)
    assert (u["sessions"], u["subagent_sessions"]) == (2, 2)
    _clean(db)


@pytest.mark.parametrize("fifo", ["agents/work/sessions/0000-0000.jsonl.reset.2026-10-02T00-00-00.000Z",
                                  "agents/other/sessions/sessions.json", "agents/work/agent/openclaw-agent.sqlite"],
                         ids=["transcript", "sessions-json", "store"])
def test_a_fifo_named_like_an_openclaw_file_is_passed_over_not_waited_on(tmp_path, db, transcript_corpus, fifo):
    # Opening one waited for a writer: ingest never returned.
    state = tmp_path / "state"
    shutil.copytree(transcript_corpus / "agents" / "work", state / "agents" / "work")
    clean = tmp_path / "clean.db"
    ingest(clean, state, fmt="oc-transcript")
    (state / fifo).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(state / fifo)
    out = subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--format", "oc-transcript", str(state)],
                         env=cli_env(db), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    settle(clean)
    assert dump(db) == dump(clean)


def test_a_backup_folder_outside_the_agents_tree_is_keyed_by_the_agent_its_sessions_json_names(tmp_path, db):
    # Outside agents/<id>/sessions every session had no agent, and those sessions.json no longer lists no key:
    # --agent and costs by agent lost them all.
    backup = tmp_path / "backup"
    backup.mkdir()
    parent, child, stranger = (f"7a0c2f4e-0000-4000-8000-00000000000{n}" for n in "123")
    (backup / "sessions.json").write_bytes(orjson.dumps({"agent:main:main": {"sessionId": parent}}))
    task = "Review src/auth for missing checks; report, do not edit."
    (backup / f"{parent}.jsonl").write_bytes(oc_header(parent) + _spawn_call("p1", "call_a", task, 10)
                                             + _spawn_result("p2", "call_a", "agent:main:subagent:aaaa", 10))
    for session, first in ((child, task), (stranger, "what is on my calendar?")):
        (backup / f"{session}.jsonl.deleted.2026-10-01T10-00-00.000Z").write_bytes(b"".join(_child(session, first, 10)))
    ingest(db, backup, fmt="oc-transcript")
    assert sorted((s["session_id"], s["session_key"], s["agent_id"]) for s in cli_json(db, "sessions")) == [
        (parent, "agent:main:main", "main"), (child, "agent:main:subagent:aaaa", "main"),
        (stranger, f"agent:main:{stranger}", "main")]
    costs = cli_json(db, "costs", "--group-by", "agent", "--since", "2026-01-01")
    assert [(r["agent_id"], r["llm_calls"]) for r in costs["rows"]] == [("main", 3)]
    assert len(cli_json(db, "sessions", "--agent", "main")) == 3
    _clean(db)


def test_parallel_spawns_of_one_task_each_name_one_archive_and_only_the_whole_task_matches(tmp_path, db):
    # Both children's headers were written before either spawn was answered: each archive took the spawn
    # nearest its header on its own, both the first, and the second spawn's child had no session. An archive
    # whose first message only held the task took a spawn too.
    state = tmp_path / "state"
    sessions = state / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    parent = "7a0c2f4e-0000-4000-8000-000000000001"
    (sessions / "sessions.json").write_bytes(orjson.dumps({"agent:main:main": {"sessionId": parent}}))
    task = "Review src/auth for missing checks; report, do not edit."
    (sessions / f"{parent}.jsonl").write_bytes(
        oc_header(parent) + _spawn_call("p1", "call_a", task, 10) + _spawn_call("p2", "call_b", task, 10)
        + _spawn_result("p3", "call_a", "agent:main:subagent:aaaa", 10)
        + _spawn_result("p4", "call_b", "agent:main:subagent:bbbb", 10))
    # The later header's file lists first: the order of the headers pairs them, not the listing.
    later, earlier, longer = ("c0ffee00-0000-4000-8000-00000000000" + n for n in "123")
    lines = {earlier: _child(earlier, task, 10), later: _child(later, task, 10),
             longer: _child(longer, f"{task} Then fix what you find.", 10)}
    lines[later][0] = lines[later][0].replace(b"09:10:01.000Z", b"09:10:01.500Z")
    for session, its in lines.items():
        (sessions / f"{session}.jsonl.deleted.2026-10-01T10-00-00.000Z").write_bytes(b"".join(its))
    ingest(db, state, fmt="oc-transcript")
    assert sorted(rows(db, "SELECT session_id, session_key FROM sessions WHERE session_id != ?",
                              (parent,))) == [(later, "agent:main:subagent:bbbb"), (earlier, "agent:main:subagent:aaaa"),
                                              (longer, f"agent:main:{longer}")]
    assert usage(db)["subagent_sessions"] == 2
    _clean(db)


def _subagent_end(db: Path, child_key: str) -> tuple[list[tuple], list[tuple]]:
    """(the subagent's status, outcome and end; its child session's status and end reason)."""
    return (rows(db, "SELECT status, outcome, ended_ms FROM subagents WHERE child_session_key = ?",
                        (child_key,)),
            rows(db, "SELECT status, end_reason FROM sessions WHERE session_key = ?", (child_key,)))


@pytest.mark.parametrize("parent_agent", ["work", "alpha"], ids=["child-first", "parent-first"])
@pytest.mark.parametrize("passes", [1, 2])
def test_a_subagent_ends_when_its_childs_run_does_whichever_transcript_is_read_first(tmp_path, db, parent_agent,
                                                                                     passes):
    # Transcripts carry no subagent.end: every subagent stayed running, reconcile then called it interrupted,
    # and its child's session stayed active, though the child's run had ended with stopReason "stop".
    state = tmp_path / "state"
    parent_dir = state / "agents" / parent_agent / "sessions"
    child_dir = state / "agents" / "main" / "sessions"
    parent_dir.mkdir(parents=True)
    child_dir.mkdir(parents=True)
    parent, child = "7a0c2f4e-0000-4000-8000-000000000001", "c0ffee00-0000-4000-8000-000000000001"
    key = "agent:main:subagent:aaaa"
    (parent_dir / "sessions.json").write_bytes(orjson.dumps({f"agent:{parent_agent}:main": {"sessionId": parent}}))
    task = "Review src/auth for missing checks; report, do not edit."
    parent_lines = [oc_header(parent) + oc_user("p0", 1), _spawn_call("p1", "call_a", task, 10),
                    _spawn_result("p2", "call_a", key, 10)]
    child_lines = _child(child, task, 10)
    parent_path = parent_dir / f"{parent}.jsonl"
    child_path = child_dir / f"{child}.jsonl.deleted.2026-10-01T10-00-00.000Z"
    cut = (2, 2) if passes == 2 else (3, 3)  # the second pass reads the spawn's answer and the child's end
    parent_path.write_bytes(b"".join(parent_lines[:cut[0]]))
    child_path.write_bytes(b"".join(child_lines[:cut[1]]))
    ingest(db, state, fmt="oc-transcript")
    with parent_path.open("ab") as p, child_path.open("ab") as c:
        p.write(b"".join(parent_lines[cut[0]:]))
        c.write(b"".join(child_lines[cut[1]:]))
    ingest(db, state, fmt="oc-transcript")
    settle(db)
    end = scalar(db, "SELECT ended_ms FROM runs WHERE session_id = ?", (child,))
    assert _subagent_end(db, key) == ([("ended", "ok", end)], [("ended", "subagent")])
    assert rows(db, "SELECT parent_session_key, parent_run_id FROM subagents") == [
        (f"agent:{parent_agent}:main", f"{parent}:p0")]
    _clean(db)


@pytest.mark.parametrize(("stop", "outcome"), [("stop", "ok"), ("error", "error"), ("aborted", "killed")])
def test_a_subagents_end_read_after_reconcile_cut_it_off_still_wins(tmp_path, db, stop, outcome):
    sdir = _sessions_dir(tmp_path, "agent:main:main", SESSION)
    child = "c0ffee00-0000-4000-8000-000000000002"
    key = "agent:main:subagent:bbbb"
    (sdir / "sessions.json").write_bytes(orjson.dumps({
        "agent:main:main": {"sessionId": SESSION},
        key: {"sessionId": child, "spawnedBy": "agent:main:main", "label": "review"}}))
    head, task, answer = _child(child, "Review src/auth", 10)
    (sdir / f"{child}.jsonl").write_bytes(head + task)
    ingest(db, tmp_path / "state", fmt="oc-transcript")
    settle(db)
    assert _subagent_end(db, key) == ([("interrupted", None, None)], [("active", None)])
    with (sdir / f"{child}.jsonl").open("ab") as f:
        f.write(answer.replace(b'"stopReason":"stop"', f'"stopReason":"{stop}"'.encode()))
    ingest(db, tmp_path / "state", fmt="oc-transcript")
    settle(db)
    assert _subagent_end(db, key) == ([("ended", outcome, scalar(db, "SELECT max(ts_ms) FROM llm_calls"))],
                                      [("ended", "subagent")])
    _clean(db)


SPAWNER, SPAWNED = "7a0c2f4e-0000-4000-8000-0000000000a1", "c0ffee00-0000-4000-8000-0000000000a1"
SPAWNED_KEY = "agent:main:subagent:feed"
# (parent key, parent run, child agent, label, mode, spawned at): the parent's result of its spawn call says
# its run and when the spawn was answered (09:10:02), the child's header its label from sessions.json.
SPAWN_ROW = ("agent:main:main", f"{SPAWNER}:p0", "main", "review", None, 1790845802000)


def write_spawn_index(sessions: Path) -> None:
    """sessions.json listing the spawning session and its child, with the child's parent and label."""
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "sessions.json").write_bytes(orjson.dumps({
        "agent:main:main": {"sessionId": SPAWNER},
        SPAWNED_KEY: {"sessionId": SPAWNED, "spawnedBy": "agent:main:main", "label": "review"}}))


def spawn_transcripts() -> dict[str, list[bytes]]:
    """The lines of the spawning session and of its child, by session id."""
    task = "Review src/auth for missing checks; report, do not edit."
    return {SPAWNER: [oc_header(SPAWNER), oc_user("p0", 1), _spawn_call("p1", "call_a", task, 10),
                      _spawn_result("p2", "call_a", SPAWNED_KEY, 10)],
            SPAWNED: _child(SPAWNED, task, 10)}


def spawn_row(db: Path) -> list[tuple]:
    return rows(db, "SELECT parent_session_key, parent_run_id, child_agent_id, label, mode, spawned_ms "
                           "FROM subagents WHERE child_session_key = ?", (SPAWNED_KEY,))


@pytest.mark.parametrize("reads", [[SPAWNER, SPAWNED], [SPAWNED, SPAWNER], [f"{SPAWNER} {SPAWNED}"]],
                         ids=["parent-first", "child-first", "one-pass"])
def test_a_subagents_spawn_row_holds_what_its_parent_and_its_child_said_whichever_is_read_first(tmp_path, db,
                                                                                                reads):
    # Each spawn line overwrote the row: read last, the child's header left no parent run and the header's
    # time, the parent's result no label.
    state = tmp_path / "state"
    sessions = state / "agents" / "main" / "sessions"
    write_spawn_index(sessions)
    lines = spawn_transcripts()
    for read in reads:  # each read by a process of its own: the others are not there yet
        for session in read.split():
            (sessions / f"{session}.jsonl").write_bytes(b"".join(lines[session]))
        ingest(db, state, fmt="oc-transcript")
    assert spawn_row(db) == [SPAWN_ROW]
    assert usage(db)["subagents"] == 1
    _clean(db)


def test_a_subagent_whose_header_tells_no_spawn_is_decoded_again_once_not_every_pass(tmp_path, monkeypatch):
    # Listed with its spawner, its header rejected (a time before 1970): the ledger never got the child's word,
    # so every pass keyed it again and decoded its whole file anew in a write transaction.
    from agentledger.ledger.writer import OpenBatches

    corpus = CORPUS / "oc-transcript" / "agents" / "main" / "sessions"
    child, key = "5cf06d19-51ec-4340-9b7d-e79968e528f1", "agent:main:subagent:52f3a66c-6404-46a1-8e51-f5752f0c3344"
    sessions = tmp_path / "state" / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    lines = (corpus / f"{child}.jsonl").read_bytes().splitlines(keepends=True)
    lines[0] = lines[0].replace(b'"2026-10-02T03:49:20.330Z"', b'"1969-12-31T00:00:00.000Z"')
    (sessions / f"{child}.jsonl").write_bytes(b"".join(lines))
    entry = orjson.loads((corpus / "sessions.json").read_bytes())[key]
    (sessions / "sessions.json").write_bytes(orjson.dumps({key: entry}))
    rekeys = []
    real = OpenBatches.rekey
    monkeypatch.setattr(OpenBatches, "rekey", lambda self, *args: rekeys.append(args[:2]) or real(self, *args))
    conn = open_writer(tmp_path / "l.db")
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [tmp_path / "state"]))
        events = [pipeline.run_once().events for _ in range(4)]
        assert events[0] > 0 and events[1:] == [0, 0, 0]
    finally:
        conn.close()
    assert rekeys == [(child, key)]


@pytest.mark.parametrize("order", ["index-first", "index-after", "followed"])
def test_a_subagent_is_what_its_sessions_json_entry_says_whether_that_came_before_or_after_its_transcript(
        tmp_path, order):
    # Read before sessions.json listed it, the child took its key from its parent's spawn; once listed it kept
    # that key, so its header was never decoded again: the spawn it tells was never indexed and the parent's
    # label stayed.
    state = tmp_path / "state"
    sessions = state / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    lines = spawn_transcripts()
    call = orjson.loads(lines[SPAWNER][2])
    call["message"]["content"][0]["arguments"] |= {"label": "auth-review", "mode": "run"}
    lines[SPAWNER][2] = orjson.dumps(call) + b"\n"

    def transcripts() -> None:
        for session, body in lines.items():
            (sessions / f"{session}.jsonl").write_bytes(b"".join(body))

    def index() -> None:
        write_spawn_index(sessions)
        listed = orjson.loads((sessions / "sessions.json").read_bytes())
        listed[SPAWNED_KEY]["label"] = "store-label"
        (sessions / "sessions.json").write_bytes(orjson.dumps(listed))

    db, events = tmp_path / "ledger.db", 0
    if order == "followed":  # one pipeline's passes, as serve makes them
        conn = open_writer(db)
        try:
            pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
            for write in (transcripts, index):
                write()
                events += sum(pipeline.run_once().events for _ in range(2))
        finally:
            conn.close()
    else:  # each read by a process of its own
        for writes in ([index, transcripts],) if order == "index-first" else ([transcripts], [index]):
            for write in writes:
                write()
            events += ingest(db, state, fmt="oc-transcript").events
    afresh = tmp_path / "afresh.db"
    assert events == ingest(afresh, state, fmt="oc-transcript").events
    children = cli_json(db, "subagents")
    assert [(c["child_session_key"], c["label"], c["mode"]) for c in children] == [
        (SPAWNED_KEY, "store-label", "run")]
    assert children == cli_json(afresh, "subagents")
    assert len(cli_json(db, "events")) == len(cli_json(afresh, "events")) == events
    assert rows(db, "SELECT told_by_child FROM subagents") == [(3,)]


def _ids_before_entry_ids(db: Path) -> None:
    """The transcripts' events in the ledger at ``db`` under the ids an agentledger from before entries were known
    by their id gave them: a line's first fact's made from its session and its bytes, the others following it."""
    conn = open_writer(db)
    try:
        files = conn.execute("SELECT id, path FROM files WHERE source = 'oc-transcript'").fetchall()
        for file_id, path in files:
            session, offset = oc_transcript.session_id_of(Path(path).name), 0
            for line in Path(path).read_bytes().splitlines():
                entry = orjson.loads(line)
                now = line_id(f"{session}\n{entry['type']}\n{entry['id']}".encode())
                before = line_id(f"{session}\n".encode() + line)
                for ts, event in conn.execute("SELECT ts_ms, id FROM events WHERE file_id = ? AND offset = ?",
                                              (file_id, offset)).fetchall():
                    older = derived_id(before, event - now)
                    conn.execute("UPDATE events SET id = ? WHERE ts_ms = ? AND id = ?", (older, ts, event))
                    for table in ("llm_calls", "compactions"):
                        conn.execute(f"UPDATE {table} SET event_id = ? WHERE ts_ms = ? AND event_id = ?",
                                     (older, ts, event))
                offset += len(line) + 1
    finally:
        conn.close()


def _after_an_older_read(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """(the state dir, the ledger): the spawner's and its subagent's transcripts read by an agentledger from before
    entries were known by their id, then something that has the subagent's lines decoded again, not read yet:
    sessions.json naming who spawned it ("told-again"), or a ledger that held it under another key than the
    subagent's while sessions.json said who spawned it ("keyed-anew")."""
    state = tmp_path / "state"
    sessions = state / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    if how == "keyed-anew":
        write_spawn_index(sessions)
    for session, body in spawn_transcripts().items():
        (sessions / f"{session}.jsonl").write_bytes(b"".join(body))
    db = tmp_path / "ledger.db"
    ingest(db, state, fmt="oc-transcript")
    _ids_before_entry_ids(db)
    if how == "told-again":
        write_spawn_index(sessions)
    else:
        conn = open_writer(db)
        try:
            conn.execute("UPDATE sessions SET session_key = ? WHERE session_id = ?", (f"agent:main:{SPAWNED}", SPAWNED))
            rebuild_rollups(conn)
        finally:
            conn.close()
    return state, db


@pytest.mark.parametrize("how", ["told-again", "keyed-anew"])
def test_a_subagent_an_older_ledger_read_counts_each_call_once_once_decoded_again(tmp_path, how):
    # Once sessions.json named its spawner, or the subagent took its own key, its lines were decoded again for
    # what that adds (the spawn its header tells, its end), and every fact of theirs was indexed a second time
    # under the ids made now: its model call counted twice (llm_calls, tokens, cost), `events` listed each line
    # twice.
    state, db = _after_an_older_read(tmp_path, how)
    ingest(db, state, fmt="oc-transcript")
    afresh = tmp_path / "afresh.db"
    ingest(afresh, state, fmt="oc-transcript")
    assert cli_json(db, "usage") == cli_json(afresh, "usage")
    assert cli_json(db, "usage")["llm_calls"] == 2
    assert sorted(e["kind"] for e in cli_json(db, "events")) == sorted(e["kind"] for e in cli_json(afresh, "events"))
    assert rows(db, "SELECT told_by_child FROM subagents") == [(3,)]
    verify = subprocess.run([sys.executable, "-m", "agentledger", "verify"], env=cli_env(db),
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_an_upgraded_ledger_that_counted_a_subagents_calls_twice_counts_them_once_migrated(
        tmp_path, monkeypatch, oc_corpus, claude_corpus):
    """An agentledger before 0046 decoded the subagent's lines again and indexed each twice (see the test above):
    migrating keeps one copy of each, and leaves the other sources' calls as they were."""
    from agentledger.ledger import writer

    state, db = _after_an_older_read(tmp_path, "told-again")
    ingest(db, oc_corpus)
    ingest(db, claude_corpus, fmt="claude-code")
    with monkeypatch.context() as older:  # as it read them: every fact of a line again, no copy dropped
        older.setattr(oc_transcript.FileDecoder, "keyed", staticmethod(lambda fact: True))
        older.setattr(writer, "_OLDER_COPIES", "SELECT ?1, ?2")
        ingest(db, state, fmt="oc-transcript")
    assert rows(db, "SELECT count(*) FROM llm_calls WHERE session_id = ?", (SPAWNED,)) == [(2,)]
    others = "SELECT * FROM llm_calls WHERE source <> 'oc-transcript' ORDER BY id"
    before = rows(db, others)
    conn = open_writer(db)
    try:
        as_of_version(conn, 45)
    finally:
        conn.close()
    ingest(db, state, fmt="oc-transcript")  # migrates first
    afresh = tmp_path / "afresh.db"
    ingest(afresh, state, fmt="oc-transcript")
    ingest(afresh, oc_corpus)
    ingest(afresh, claude_corpus, fmt="claude-code")
    assert cli_json(db, "usage") == cli_json(afresh, "usage")
    assert rows(db, others) == before
    child = "SELECT event_id FROM llm_calls WHERE session_id = ?"  # the copy a fresh read makes
    assert rows(db, child, (SPAWNED,)) == rows(afresh, child, (SPAWNED,))
    kinds = "SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind"
    assert rows(db, kinds) == rows(afresh, kinds)
    verify = subprocess.run([sys.executable, "-m", "agentledger", "verify"], env=cli_env(db),
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


# What the interpreter opens and lists while a test watches (sys.audit); a hook stays for the process.
_WATCHED: list[tuple[str, str]] | None = None


def _audit(event: str, args: tuple) -> None:
    if _WATCHED is not None and event in ("open", "os.scandir") and isinstance(args[0], str):
        _WATCHED.append((event, args[0]))


sys.addaudithook(_audit)


def _watch(run) -> tuple[list[str], int]:
    """(names of the transcripts ``run`` opened, how many times it listed a sessions folder)."""
    global _WATCHED
    _WATCHED = []
    try:
        run()
        seen = _WATCHED
    finally:
        _WATCHED = None
    opened = sorted({Path(path).name for event, path in seen
                     if event == "open" and Path(path).parent.name == "sessions" and ".jsonl" in path})
    return opened, sum(1 for event, path in seen if event == "os.scandir" and Path(path).name == "sessions")


def test_a_pass_over_many_archives_reads_only_the_transcripts_that_changed_and_keys_them_as_a_fresh_read(
        tmp_path, db):
    """Each archive is keyed by the spawns in every transcript beside it: a pass looks at the folder once
    and reads only what grew, not every transcript once per archive."""
    state = tmp_path / "state"
    sessions = state / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    parent = "7a0c2f4e-0000-4000-8000-000000000001"
    children = [f"c0ffee00-0000-4000-8000-{n:012d}" for n in range(12)]

    def listing(turn: int) -> None:  # the gateway rewrites sessions.json after each turn
        sessions.joinpath("sessions.json").write_bytes(
            orjson.dumps({"agent:main:main": {"sessionId": parent, "updatedAt": turn}}))

    def spawn(n: int) -> bytes:
        task = f"Review module {n}; report, do not edit."
        (sessions / f"{children[n]}.jsonl.deleted.2026-10-01T10-00-00.000Z").write_bytes(
            b"".join(_child(children[n], task, n)))
        return (_spawn_call(f"p{n}a", f"call_{n}", task, n)
                + _spawn_result(f"p{n}b", f"call_{n}", f"agent:main:subagent:{n:04d}", n))

    listing(0)
    (sessions / f"{parent}.jsonl").write_bytes(oc_header(parent) + b"".join(spawn(n) for n in range(11)))
    conn = open_writer(db)
    try:
        pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-transcript", [state]))
        pipeline.catch_up()
        listing(1)
        assert _watch(pipeline.run_once) == ([], 1)
        listing(2)
        with (sessions / f"{parent}.jsonl").open("ab") as f:
            f.write(spawn(11))
        grown = sorted([f"{parent}.jsonl", f"{children[11]}.jsonl.deleted.2026-10-01T10-00-00.000Z"])
        assert _watch(pipeline.run_once) == (grown, 1)
    finally:
        conn.close()
    ingest(db, state, fmt="oc-transcript")  # restarted: what was read is not read again
    fresh = tmp_path / "fresh.db"
    subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--format", "oc-transcript", str(state)],
                   env=cli_env(fresh), capture_output=True, check=True)
    keys = "SELECT session_id, session_key FROM sessions ORDER BY session_id"
    assert rows(db, keys) == rows(fresh, keys)
    assert dict(rows(db, keys))[children[11]] == "agent:main:subagent:0011"
    family = ("SELECT child_session_key, parent_session_key FROM subagents ORDER BY 1",
              "SELECT session_key, count(*), sum(cost_pico) FROM llm_calls GROUP BY 1 ORDER BY 1")
    for sql in family:
        assert rows(db, sql) == rows(fresh, sql)
    _clean(db)


def test_a_session_archived_during_a_pass_is_not_keyed_by_its_own_spawns(tmp_path):
    """A pass looks at a folder's spawns once; a session archived after that look still only meets the spawns
    of the other transcripts, as the folder now holds them."""
    sessions = tmp_path / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    other, parent = "0dd00000-0000-4000-8000-000000000001", "7a0c2f4e-0000-4000-8000-000000000001"
    task = "Review src/auth"
    (sessions / f"{other}.jsonl.reset.2026-10-01T10-00-00.000Z").write_bytes(b"".join(_child(other, "hi", 30)))
    # Its own first message holds the task it spawned a minute after it started.
    (sessions / f"{parent}.jsonl").write_bytes(
        b"".join(_child(parent, task, 10)[:2]) + _spawn_call("p1", "call_a", task, 10)
        + _spawn_result("p2", "call_a", "agent:main:subagent:aaaa", 10))
    with oc_transcript.one_look():
        first = next(sessions.glob("*.reset.*"))
        assert oc_transcript.FileDecoder(str(first), None).session_key == f"agent:main:{other}"
        time.sleep(0.05)  # the folder's next change is stamped with a later time
        archived = sessions / f"{parent}.jsonl.reset.2026-10-01T11-00-00.000Z"
        (sessions / f"{parent}.jsonl").rename(archived)
        assert oc_transcript.FileDecoder(str(archived), None).session_key == f"agent:main:{parent}"


def test_an_archive_takes_the_parent_its_earliest_listed_child_of_its_own_agent_names(tmp_path):
    sessions = {agent: tmp_path / "agents" / agent / "sessions" for agent in ("main", "work")}
    listed = {"agent:work:subagent:a": "agent:work:main", "agent:main:subagent:b": "agent:main:telegram:direct:1",
              "agent:main:subagent:c": "agent:main:main"}
    for agent, folder in sessions.items():
        folder.mkdir(parents=True)
        (folder / "sessions.json").write_bytes(orjson.dumps({
            key: {"sessionId": f"{key[-1]}0000000", "spawnedBy": parent}
            for key, parent in listed.items() if key.startswith(f"agent:{agent}:")}))
    spawner = "7a0c2f4e-0000-4000-8000-000000000001"
    archive = sessions["main"] / f"{spawner}.jsonl.reset.2026-10-01T10-00-00.000Z"
    archive.write_bytes(oc_header(spawner) + b"".join(
        _spawn_call(f"p{n}", f"call_{n}", f"task {n}", minute) + _spawn_result(f"r{n}", f"call_{n}", key, minute)
        for n, (minute, key) in enumerate(zip((10, 20, 30), listed))))
    # Its first child runs as another agent, whose key it never had.
    decode = oc_transcript.FileDecoder(str(archive), None)
    assert (decode.session_key, decode.guessed) == ("agent:main:telegram:direct:1", False)


def test_a_spawn_answered_after_its_transcript_was_archived_under_its_read_keeps_its_label(tmp_path):
    # A reset renames the live transcript while a read of it is under way: the spawn's words were looked for
    # under the old name, found nowhere, and the subagent kept no label or mode for good.
    folder = _sessions_dir(tmp_path, "agent:main:main", "7a0c2f4e-0000-4000-8000-000000000001")
    live = folder / "7a0c2f4e-0000-4000-8000-000000000001.jsonl"
    live.write_bytes(oc_header("7a0c2f4e-0000-4000-8000-000000000001") + _spawn_call("p1", "call_1", "task", 10)
                     + _spawn_result("r1", "call_1", "agent:main:subagent:x", 10))
    decode = oc_transcript.FileDecoder(str(live), lambda session_id, ts_ms: None)
    live.rename(folder / f"{live.name}.reset.2026-10-01T10-00-00.000Z")
    lines = live.with_name(f"{live.name}.reset.2026-10-01T10-00-00.000Z").read_bytes().splitlines(keepends=True)
    facts = decode(lines[-1], sum(map(len, lines[:-1])))
    spawn = next(f for f in facts if f.kind == "subagent.spawn")
    assert (spawn.child_session_key, spawn.label) == ("agent:main:subagent:x", "review")


# -- Task subagents and /btw side questions ------------------------------------------------------

TASK_AGENT, BTW_AGENT = "a1b2c3d4", "b9e8f7a6"
CHILD_ID = f"{SESSION}/{TASK_AGENT}"
CHILD_KEY = f"agent:claude-code:subagent:{CHILD_ID}"
PARENT_KEY = f"agent:claude-code:{SESSION}"


def _side(agent: str, line: bytes) -> bytes:
    """A line of a side branch: the same line, marked as written by ``agent``."""
    return _line(orjson.loads(line) | {"isSidechain": True, "agentId": agent})


def _task_child(*seconds: int) -> list[bytes]:
    """The Task subagent's lines: its prompt, a Grep, the Grep's result, its answer, at these seconds."""
    prompt, grep, grepped, answer = seconds
    return [_side(TASK_AGENT, line) for line in (
        cc_prompt("c0", "List callers", prompt),
        cc_assistant("c1", "msg_c1", {"type": "tool_use", "id": "toolu_grep", "name": "Grep", "input": {}},
                     output=300, second=grep, request="req_c1", stop="tool_use"),
        cc_result("c2", "toolu_grep", grepped),
        cc_assistant("c3", "msg_c2", {"type": "text", "text": "Two."}, output=40, second=answer, request="req_c2",
                     stop="end_turn"))]


def _btw_question(asked: int, answered: int) -> list[bytes]:
    """A /btw side question's lines, asked and answered at these seconds."""
    return [_side(BTW_AGENT, line) for line in (
        cc_prompt("b0", "btw, which file failed?", asked),
        cc_assistant("b1", "msg_b1", {"type": "text", "text": "test_orders.py"}, output=25, second=answered,
                     request="req_b1", stop="end_turn"))]


def _task_lines() -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(the session's own lines, its Task subagent's, its /btw question's), in the order they were written."""
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task",
            "input": {"description": "Find callers", "prompt": "List callers", "subagent_type": "general-purpose"}}
    result = orjson.loads(cc_result("r_task", "toolu_task", 20))
    result["toolUseResult"] = {"status": "completed", "agentId": TASK_AGENT, "totalDurationMs": 12_000}
    parent = [cc_prompt("u1", "who calls paginate?", 0),
              cc_assistant("a1", "msg_p1", task, output=60, second=1, stop="tool_use"),
              _line(result),
              cc_assistant("a2", "msg_p2", {"type": "text", "text": "Two callers."}, output=80, second=21,
                           stop="end_turn")]
    child = _task_child(2, 3, 4, 19)
    btw = _btw_question(30, 31)
    return parent, child, btw


def _task_outcome(db: Path) -> dict:
    """What a user sees of the scenario: the sessions' own spend, the family's, the subagent row."""
    conn = open_reader(db)
    try:
        assert check_rollups(conn) == []
        u = queries.usage(conn, queries.Window())
        own = {s["session_id"]: (s["session_key"], s["is_subagent"], s["llm_calls"], s["output_tokens"], s["runs"],
                                 s["tool_calls"]) for s in queries.sessions(conn, queries.Window())}
        detail = queries.session_detail(conn, PARENT_KEY)
        listed = {sid: ([i["kind"] for i in queries.timeline(conn, sid, ["llm", "tool"])].count("llm"),
                        len(queries.session_detail(conn, sid)["tool_calls"])) for sid in own}
        return {"counts": (u["sessions"], u["subagent_sessions"], u["subagents"], u["runs"], u["llm_calls"],
                           u["output_tokens"], u["tool_calls"]),
                "listed": listed,
                "own": own, "family_is_all": detail["family_cost_usd"] == pytest.approx(u["cost_usd"], abs=1e-9),
                "subagents": [(c["child_session_key"], c["parent_session_key"], c["label"], c["status"], c["outcome"])
                              for c in detail["subagents"]]}
    finally:
        conn.close()


WANT_TASK_OUTCOME = {
    "counts": (1, 1, 1, 1, 5, 505, 2),
    # The /btw question (25 output tokens) stays in the session; the Task subagent's calls, model and
    # tool alike, are the child's (the session's one tool call is the Task itself).
    "own": {SESSION: (PARENT_KEY, False, 3, 165, 1, 1), CHILD_ID: (CHILD_KEY, True, 2, 340, 0, 1)},
    # `timeline` and `session` list those calls where they are counted: (model calls, tool calls).
    "listed": {SESSION: (3, 1), CHILD_ID: (2, 1)},
    "family_is_all": True,
    "subagents": [(CHILD_KEY, PARENT_KEY, "Find callers", "ended", "completed")],
}


def _inline(parent: list[bytes], child: list[bytes], btw: list[bytes]) -> list[bytes]:
    """An older session's one file: the subagent's lines between its spawn and its result."""
    return parent[:2] + child + parent[2:] + btw


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_inline_task_subagent_is_a_session_of_its_own_wherever_reads_stop(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("inline")
    db, root = tmp / "l.db", tmp / "claude"
    transcript = root / "projects" / "-home-dev-src-app" / f"{SESSION}.jsonl"
    transcript.parent.mkdir(parents=True)
    lines = _inline(*_task_lines())
    cuts = sorted(data.draw(st.sets(st.integers(1, len(lines) - 1), max_size=4)))
    for a, b in zip([0, *cuts], [*cuts, len(lines)]):
        with transcript.open("ab") as f:
            f.writelines(lines[a:b])
        ingest(db, root, fmt="claude-code")
    assert _task_outcome(db) == WANT_TASK_OUTCOME


def _streamed_task_lines() -> tuple[list[bytes], list[bytes]]:
    """The session's own lines and its Task subagent's, whose first answer is streamed over two lines: its
    thinking at second 3, then its Grep at 5, the line with the call's final usage (the one its row keeps)."""
    parent, _, _ = _task_lines()
    child = _task_child(2, 5, 6, 19)
    thinking = _side(TASK_AGENT, cc_assistant("c1t", "msg_c1", {"type": "thinking", "thinking": "..."}, output=5,
                                              second=3, request="req_c1"))
    return parent, [child[0], thinking, *child[1:]]


def _child_times(db: Path) -> tuple:
    """The subagent's session as `sessions` lists it: its start, end and duration."""
    conn = open_reader(db)
    try:
        [child] = queries.sessions(conn, queries.Window(), session_ids=[CHILD_ID])
        return child["started_at"], child["ended_at"], child["duration_s"]
    finally:
        conn.close()


def test_a_task_subagent_begins_at_its_first_streamed_line_wherever_reads_of_its_session_stop(tmp_path):
    """A read that stops after the subagent's streamed answer, before the Task's result names the subagent,
    keeps of that answer only its row, dated by the Grep line; the subagent begins at the answer's first line
    all the same, as in one read of the whole file."""
    parent, child = _streamed_task_lines()
    root = tmp_path / "claude-root"
    transcript = root / "claude" / "projects" / "-home-dev-src-app" / f"{SESSION}.jsonl"
    lines = _inline(parent, child, [])
    want = _read_in_steps(root, [{transcript: lines}])
    assert _child_times(root / "l.db") == ("2026-10-01T10:00:03.000Z", "2026-10-01T10:00:20.000Z", 17.0)
    for cut in range(1, len(lines)):
        assert _read_in_steps(root, [{transcript: lines[:cut]}, {transcript: lines}]) == want, cut


def _but_last_logs(picture: dict) -> dict:
    """A read's picture without the log each session was last seen in (sessions.log_id, the last column):
    which of a session's files a read met last, not anything their lines say."""
    return picture | {"sessions": [row[:-1] for row in picture["sessions"]]}


def test_a_task_subagents_file_read_before_the_tasks_result_begins_it_at_its_first_streamed_line(tmp_path):
    """As `serve` reads them while they are written: the subagent's file as far as it has got, alone or with
    the session up to its Task call, and only then the Task's result."""
    parent, child = _streamed_task_lines()
    root = tmp_path / "claude-root"
    project = root / "claude" / "projects" / "-home-dev-src-app"
    session, subagent = project / f"{SESSION}.jsonl", project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl"
    want = _but_last_logs(_read_in_steps(root, [{session: parent, subagent: child}]))
    assert _child_times(root / "l.db") == ("2026-10-01T10:00:03.000Z", "2026-10-01T10:00:20.000Z", 17.0)
    for cut in range(1, len(child) + 1):
        for first in ({subagent: child[:cut]}, {session: parent[:2], subagent: child[:cut]}):
            picture = _read_in_steps(root, [first, {session: parent, subagent: child}])
            assert _but_last_logs(picture) == want, (cut, len(first))


def _older(db: Path, version: int | None = None, before: int = 37) -> None:
    """The ledger at ``db`` as an agentledger from before migration ``before`` (0037 or 0045) leaves it: no
    times of lines read on a side branch before it was named (before 0037), nor their events (0045), which its
    naming leaves under the session whose lines they are; and at schema ``version``, if given, to be migrated
    by the next writer."""
    conn = open_writer(db)
    try:
        if before <= 37:
            conn.execute("DELETE FROM branch_spans")
        conn.execute("DELETE FROM branch_events")
        if version is not None:
            as_of_version(conn, version)
    finally:
        conn.close()


@pytest.mark.parametrize("named", ["before-the-upgrade", "after-it"])
def test_an_older_ledgers_task_subagent_begins_at_its_first_streamed_line_once_migrated(tmp_path, named):
    """An older agentledger kept of the subagent's lines read before the Task's result only its calls' rows,
    one line's time each. The subagent's file is its own, so its events still date every line: migrating
    begins the subagent where one read of the files does, whether the result was read before the upgrade
    or is read after it."""
    parent, child = _streamed_task_lines()
    root = tmp_path / "claude-root"
    project = root / "claude" / "projects" / "-home-dev-src-app"
    session, subagent = project / f"{SESSION}.jsonl", project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl"
    want = _but_last_logs(_read_in_steps(root, [{session: parent, subagent: child}]))
    db = root / "l.db"
    _read_in_steps(root, [{subagent: child[:3]}])  # its streamed answer, and no more yet
    if named == "before-the-upgrade":
        _older(db)
        session.write_bytes(b"".join(parent))
        subagent.write_bytes(b"".join(child))
        ingest(db, root / "claude", fmt="claude-code")
        assert _child_times(db)[0] == "2026-10-01T10:00:05.000Z"  # the Grep line's time, as the older one left it
    _older(db, 36)
    session.write_bytes(b"".join(parent))
    subagent.write_bytes(b"".join(child))
    ingest(db, root / "claude", fmt="claude-code")  # migrates first
    assert _but_last_logs(_picture(db)) == want
    assert _child_times(db) == ("2026-10-01T10:00:03.000Z", "2026-10-01T10:00:20.000Z", 17.0)


@pytest.mark.parametrize("named", ["before-the-upgrade", "after-it"])
def test_an_older_ledgers_inline_subagents_streamed_lines_are_its_events_once_migrated(tmp_path, named):
    """An agentledger before 0045 left the lines read on a side branch before the Task's result named it under
    the session whose lines they are. In an older session's one file, of the subagent's streamed answer only
    the line its row keeps names the branch; the other (its thinking) is the subagent's all the same once
    migrated: `events` lists it there, as one read of the file does, whether the result was read before the
    upgrade or is read after it."""
    parent, child = _streamed_task_lines()
    root = tmp_path / "claude-root"
    transcript = root / "claude" / "projects" / "-home-dev-src-app" / f"{SESSION}.jsonl"
    lines = _inline(parent, child, [])
    db = root / "l.db"

    def seen() -> dict:
        return _picture(db) | {"listed": cli_json(db, "events", "--limit", "1000")}

    _read_in_steps(root, [{transcript: lines}])
    want = seen()
    assert [e["session_key"] for e in want["listed"] if e["kind"] == "llm.call"].count(CHILD_KEY) == 3
    _read_in_steps(root, [{transcript: lines[:5]}])  # the session up to the subagent's streamed answer
    if named == "before-the-upgrade":
        _older(db, before=45)
        transcript.write_bytes(b"".join(lines))
        ingest(db, root / "claude", fmt="claude-code")
    _older(db, 44, before=45)
    transcript.write_bytes(b"".join(lines))
    ingest(db, root / "claude", fmt="claude-code")  # migrates first
    assert seen() == want


def test_an_older_ledgers_subagent_read_as_far_as_its_copy_of_a_parent_call_is_keyed_by_it_once_migrated(tmp_path):
    """A subagent's transcript opens with a copy of its parent's Bash call, which leaves no row of the
    subagent's (the call is the parent's). An agentledger before 0045 read that far left the copy's line under
    the session; its file is the subagent's own, so migrating keys it by the subagent once the Task's result
    names it, as one read of the files does."""
    bash = {"type": "tool_use", "id": "toolu_bash", "name": "Bash", "input": {"command": "pytest"}}
    parent, child, _ = _task_lines()
    parent = [parent[0], cc_assistant("a0", "msg_p0", bash, output=30, second=1, request="req_p0", stop="tool_use"),
              cc_result("r0", "toolu_bash", 1), *parent[1:]]
    child = [_side(TASK_AGENT, cc_assistant("c_", "msg_p0", bash, output=30, second=2, request="req_copy",
                                            stop="tool_use")), *child]
    root = tmp_path / "claude-root"
    project = root / "claude" / "projects" / "-home-dev-src-app"
    session, subagent = project / f"{SESSION}.jsonl", project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl"
    db = root / "l.db"

    def seen() -> dict:
        return _but_last_logs(_picture(db)) | {"listed": cli_json(db, "events", "--limit", "1000")}

    _read_in_steps(root, [{session: parent, subagent: child}])
    want = seen()
    _read_in_steps(root, [{session: parent[:4], subagent: child[:1]}])  # the Task called, its subagent's copy
    _older(db, 44, before=45)
    session.write_bytes(b"".join(parent))
    subagent.write_bytes(b"".join(child))
    ingest(db, root / "claude", fmt="claude-code")  # migrates first
    assert seen() == want


def _read_one_by_one(tmp_path: Path, db: Path, parent: list[bytes], subagents: dict[str, list[bytes]],
                     child_first: bool) -> None:
    """The session's transcript and its subagents' files ({agent id: lines}), each in a read of its own, the
    others not there yet: the subagents' first, or last."""
    project = _project(tmp_path)
    sub = project / SESSION / "subagents"
    sub.mkdir(parents=True)
    files = {sub / f"agent-{agent}.jsonl": lines for agent, lines in subagents.items()}
    files[project / f"{SESSION}.jsonl"] = parent
    for path in sorted(files, key=lambda p: (p.parent == sub) != child_first):
        path.write_bytes(b"".join(files[path]))
        ingest(db, tmp_path / "claude", fmt="claude-code")


@pytest.mark.parametrize("child_first", [True, False], ids=["subagent-file-first", "session-first"])
def test_a_task_subagents_file_is_a_session_of_its_own_whichever_is_read_first(tmp_path, db, child_first):
    parent, child, btw = _task_lines()
    _read_one_by_one(tmp_path, db, parent, {TASK_AGENT: child, BTW_AGENT: btw}, child_first)
    assert _task_outcome(db) == WANT_TASK_OUTCOME
    # Read again, or copied, nothing changes.
    assert ingest(db, tmp_path / "claude", fmt="claude-code").events == 0
    assert _task_outcome(db) == WANT_TASK_OUTCOME


def _compacted(second: int, tokens: int) -> bytes:
    """The subagent's own context compacted at ``second``, ``tokens`` long before."""
    return _side(TASK_AGENT, _line({"type": "system", "subtype": "compact_boundary", "uuid": "c_compact",
                                    "sessionId": SESSION, "timestamp": f"2026-10-01T10:00:{second:02d}.000Z",
                                    "content": "Conversation compacted",
                                    "compactMetadata": {"trigger": "auto", "preTokens": tokens}}))


@pytest.mark.parametrize("child_first", [True, False], ids=["subagent-file-first", "session-first"])
def test_a_compaction_in_a_task_subagents_transcript_is_the_subagents_own(tmp_path, db, child_first):
    parent, child, _ = _task_lines()
    _read_one_by_one(tmp_path, db, parent, {TASK_AGENT: [*child[:3], _compacted(5, 150_000), *child[3:]]}, child_first)
    listed = {sid: [(c["session_key"], c["session_id"], c["token_count"]) for c in cli_json(db, "session", sid)
                    ["compactions"]] for sid in (SESSION, CHILD_ID)}
    assert listed == {SESSION: [], CHILD_ID: [(CHILD_KEY, CHILD_ID, 150_000)]}
    assert usage(db)["compactions"] == 1
    _clean(db)


DEEP_AGENT = "c5d6e7f8"
DEEP_KEY = f"agent:claude-code:subagent:{SESSION}/{DEEP_AGENT}"


def _nested_task_files(project: Path) -> dict[Path, list[bytes]]:
    """A session whose Task subagent starts a Task of its own: the session's transcript, its subagent's
    (which spawns the other), and the other's, all three in the session's ``subagents/``."""
    parent, _, _ = _task_lines()
    task = {"type": "tool_use", "id": "toolu_deep", "name": "Task",
            "input": {"description": "Read the tests", "prompt": "Read them", "subagent_type": "Explore"}}
    result = orjson.loads(cc_result("c2", "toolu_deep", 15))
    result["toolUseResult"] = {"status": "completed", "agentId": DEEP_AGENT, "totalDurationMs": 10_000}
    child = [_side(TASK_AGENT, line) for line in (
        cc_prompt("c0", "List callers", 2),
        cc_assistant("c1", "msg_c1", task, output=300, second=3, request="req_c1", stop="tool_use"),
        _line(result),
        cc_assistant("c3", "msg_c2", {"type": "text", "text": "Two."}, output=40, second=19, request="req_c2",
                     stop="end_turn"))]
    deeper = [_side(DEEP_AGENT, line) for line in (
        cc_prompt("d0", "Read them", 4),
        cc_assistant("d1", "msg_d1", {"type": "text", "text": "Read."}, output=500, second=10, request="req_d1",
                     stop="end_turn"))]
    sub = project / SESSION / "subagents"
    return {project / f"{SESSION}.jsonl": parent, sub / f"agent-{TASK_AGENT}.jsonl": child,
            sub / f"agent-{DEEP_AGENT}.jsonl": deeper}


def _tree(db: Path) -> list[tuple]:
    """``tree``'s nodes, depth first: (depth, key, label, own cost, cumulative cost)."""
    def walk(node: dict, depth: int) -> list[tuple]:
        return [(depth, node["session_key"], node["label"], node["own_cost_usd"], node["cumulative_cost_usd"]),
                *(n for child in node["children"] for n in walk(child, depth + 1))]
    return walk(cli_json(db, "tree", SESSION), 0)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0), (2, 0, 1)],
                         ids=["session-first", "deepest-first", "subagent-first", "deepest-then-session"])
def test_a_task_a_subagent_starts_is_that_subagents_child_whichever_is_read_first(tmp_path, db, order):
    files = _nested_task_files(_project(tmp_path))
    paths = list(files)
    paths[1].parent.mkdir(parents=True)
    for i in order:
        paths[i].write_bytes(b"".join(files[paths[i]]))
        ingest(db, tmp_path / "claude", fmt="claude-code")
    tree = _tree(db)
    assert [node[:3] for node in tree] == [(0, PARENT_KEY, None), (1, CHILD_KEY, "Find callers"),
                                           (2, DEEP_KEY, "Read the tests")]
    (_, _, _, _, total), (_, _, _, dig_own, dig_total), (_, _, _, deep_own, deep_total) = tree
    assert dig_total == pytest.approx(dig_own + deep_own) and deep_total == deep_own
    assert total == pytest.approx(usage(db)["cost_usd"])
    listed = {s["child_session_key"]: s["parent_session_key"] for s in cli_json(db, "subagents")}
    assert listed == {CHILD_KEY: PARENT_KEY, DEEP_KEY: CHILD_KEY}
    _clean(db)


def test_a_task_a_subagent_starts_counts_in_the_session_before_that_subagent_is_named(tmp_path, db):
    files = _nested_task_files(_project(tmp_path))
    parent, child, deeper = files
    deeper.parent.mkdir(parents=True)
    for path in (child, deeper):  # no result has named the first subagent yet
        path.write_bytes(b"".join(files[path]))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    # The first subagent's calls are still the session's own, and so is the Task it started.
    assert [node[:2] for node in _tree(db)] == [(0, PARENT_KEY), (1, DEEP_KEY)]
    assert _tree(db)[0][4] == pytest.approx(usage(db)["cost_usd"])
    parent.write_bytes(b"".join(files[parent]))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert [node[:2] for node in _tree(db)] == [(0, PARENT_KEY), (1, CHILD_KEY), (2, DEEP_KEY)]
    _clean(db)


def test_a_side_question_never_named_stays_in_its_session(tmp_path, db):
    parent, _, btw = _task_lines()
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(b"".join([parent[0], parent[3], *btw]))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    u = usage(db)
    assert (u["sessions"], u["subagent_sessions"], u["subagents"], u["llm_calls"], u["output_tokens"]) == (
        1, 0, 0, 2, 105)
    assert scalar(db, "SELECT count(*) FROM sessions") == 1
    _clean(db)


def _refused_task_lines() -> list[bytes]:
    """A turn whose Bash call fails and whose Task the user refuses, then stops."""
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task",
            "input": {"description": "Find callers", "prompt": "List callers", "subagent_type": "Explore"}}
    refused = orjson.loads(cc_result("r_task", "toolu_task", 5, is_error=True)) | {
        "toolUseResult": "Error: The user doesn't want to proceed with this tool use."}
    return [cc_prompt("u1", "who calls paginate?", 0),
            cc_assistant("a1", "msg_1", {"type": "tool_use", "id": "toolu_bash", "name": "Bash", "input": {}},
                         output=20, second=1, stop="tool_use"),
            cc_result("r_bash", "toolu_bash", 2, is_error=True),
            cc_assistant("a2", "msg_2", task, output=60, second=3, request="req_2", stop="tool_use"),
            _line(refused),
            cc_user("i1", [{"type": "text", "text": "[Request interrupted by user for tool use]"}], 5)]


@pytest.mark.parametrize("passes", [1, 2])
def test_a_task_refused_before_a_subagent_ran_ends_its_subagent_in_error(tmp_path, db, passes):
    """A Task the user refuses (or that fails before a subagent runs) gets an error for its result, naming
    no subagent: the subagent its call spawned ends there, in error, where reconcile called it interrupted,
    whether or not reconcile cut it off before the result was read. Another tool's failure spawns none."""
    lines = _refused_task_lines()
    transcript = _project(tmp_path) / f"{SESSION}.jsonl"
    cut = 4 if passes == 2 else len(lines)
    for part in (lines[:cut], lines[cut:]):
        with transcript.open("ab") as f:
            f.writelines(part)
        ingest(db, tmp_path / "claude", fmt="claude-code")
        settle(db)
    subagents = [(s["child_session_key"], s["status"], s["outcome"], s["ended_at"]) for s in cli_json(db, "subagents")]
    assert subagents == [("agent:claude-code:subagent:toolu_task", "ended", "error", "2026-10-01T10:00:05.000Z")]
    u = usage(db)
    assert (u["subagents"], u["tool_errors"], u["interrupted_runs"]) == (1, 2, 1)
    _clean(db)


def background_task_lines(launch: str = "async_launched") -> tuple[list[bytes], list[bytes]]:
    """The session's own lines and its Task subagent's file, the Task run in the background (or remotely, its
    ``launch`` status remote_launched): its result, at second 2, says only that the subagent was launched,
    which works on until second 9."""
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task",
            "input": {"description": "Find callers", "prompt": "List callers", "subagent_type": "general-purpose",
                      "run_in_background": True}}
    launched = orjson.loads(cc_result("r_task", "toolu_task", 2)) | {"toolUseResult": {
        "isAsync": launch == "async_launched", "status": launch, "agentId": TASK_AGENT, "description": "Find callers",
        "prompt": "List callers", "outputFile": f"/tmp/claude/tasks/{TASK_AGENT}.output"}}
    parent = [cc_prompt("u1", "who calls paginate?", 0),
              cc_assistant("a1", "msg_p1", task, output=60, second=1, stop="tool_use"),
              _line(launched),
              cc_assistant("a2", "msg_p2", {"type": "text", "text": "It is looking."}, output=80, second=3,
                           request="req_p2", stop="end_turn")]
    return parent, _task_child(2, 4, 5, 9)


def _subagent_rows(db: Path) -> list[tuple]:
    return [(s["child_session_key"], s["status"], s["outcome"], s["spawned_at"], s["ended_at"])
            for s in cli_json(db, "subagents")]


def test_a_task_run_in_the_background_does_not_end_its_subagent_at_its_launch_wherever_reads_stop(tmp_path):
    """A background Task's result is written as its subagent starts: the subagent, its own session all the
    same, works on, however its files' lines are split across reads; reconcile settles it, as any subagent
    nothing ended, once its lines have stopped for the grace."""
    parent, child = background_task_lines()
    root = tmp_path / "claude-root"
    project = root / "claude" / "projects" / "-home-dev-src-app"
    session, subagent = project / f"{SESSION}.jsonl", project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl"
    db = root / "l.db"
    want = _but_last_logs(_read_in_steps(root, [{session: parent, subagent: child}]))
    assert _subagent_rows(db) == [(CHILD_KEY, "running", None, "2026-10-01T10:00:01.000Z", None)]
    [child_session] = [s for s in cli_json(db, "sessions") if s["session_id"] == CHILD_ID]
    assert (child_session["session_key"], child_session["ended_at"], child_session["last_activity_at"],
            child_session["llm_calls"]) == (CHILD_KEY, None, "2026-10-01T10:00:09.000Z", 2)
    for cut in range(1, len(parent)):
        for first in ({session: parent[:cut]}, {session: parent[:cut], subagent: child[:2]}, {subagent: child}):
            picture = _read_in_steps(root, [first, {session: parent, subagent: child}])
            assert _but_last_logs(picture) == want, (cut, list(first))
    settle(db)
    assert _subagent_rows(db) == [(CHILD_KEY, "interrupted", None, "2026-10-01T10:00:01.000Z", None)]
    _clean(db)


@pytest.mark.parametrize("launch, version", [("async_launched", 37), ("remote_launched", 41)])
def test_an_older_ledgers_background_task_subagent_is_open_again_once_migrated(tmp_path, launch, version):
    """An older agentledger ended a background (or remote) Task's subagent, and its session, at the launch:
    migrating leaves them as a read of the files now does."""
    parent, child = background_task_lines(launch)
    root = tmp_path / "claude-root"
    project = root / "claude" / "projects" / "-home-dev-src-app"
    files = {project / f"{SESSION}.jsonl": parent, project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl": child}
    want = _read_in_steps(root, [files])
    db = root / "l.db"
    conn = open_writer(db)
    try:  # what the launch's end left
        conn.execute("UPDATE subagents SET status = 'ended', ended_ms = 1790848802000, outcome = ?, "
                     "end_rank = 2 WHERE child_session_key = ?", (launch, CHILD_KEY))
        conn.execute("UPDATE sessions SET status = 'ended', end_reason = 'subagent', ended_ms = 1790848802000 "
                     "WHERE session_id = ?", (CHILD_ID,))
        as_of_version(conn, version)
    finally:
        conn.close()
    ingest(db, root / "claude", fmt="claude-code")  # migrates first
    assert _picture(db) == want


def cc_notification(uuid: str, task: str, status: str, second: float, *, summary: str,
                    tool_use: str | None = None, older: bool = False, **envelope) -> bytes:
    """What Claude Code writes into the session when a task it ran in the background is over: a
    <task-notification> (its <tool-use-id> in newer releases only), or in older ones an <agent-notification>."""
    if older:
        note = (f"<agent-notification>\n<agent-id>{task}</agent-id>\n<status>{status}</status>\n"
                f"<summary>{summary}</summary>\n</agent-notification>")
    else:
        called = f"<tool-use-id>{tool_use}</tool-use-id>\n" if tool_use else ""
        note = (f"<task-notification>\n<task-id>{task}</task-id>\n{called}"
                f"<output-file>/tmp/claude/tasks/{task}.output</output-file>\n<status>{status}</status>\n"
                f"<summary>{summary}</summary>\n</task-notification>")
    return cc_user(uuid, note, second, **envelope)


def _background_task_call(second: int) -> list[bytes]:
    """The model's call of a Task in the background, and its result: the subagent launched."""
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task",
            "input": {"description": "Find callers", "prompt": "List callers", "subagent_type": "general-purpose",
                      "run_in_background": True}}
    launched = orjson.loads(cc_result("r_task", "toolu_task", second + 1)) | {"toolUseResult": {
        "isAsync": True, "status": "async_launched", "agentId": TASK_AGENT}}
    return [cc_assistant("a1", "msg_p1", task, output=60, second=second, stop="tool_use"), _line(launched)]


def _session_rows(db: Path) -> dict:
    """The session's runs and subagents, as `runs` and `subagents` list them once the logs are long finished."""
    return {"runs": [(r["run_id"], r["status"], r["stop_reason"], r["ended_at"][17:], r["llm_calls"])
                     for r in cli_json(db, "runs")],
            "subagents": [row[:3] + tuple(t and t[17:] for t in row[3:]) for row in _subagent_rows(db)]}


@pytest.mark.parametrize("written_as, status, outcome", [
    ("task-notification", "completed", "ok"),
    ("task-notification-meta", "killed", "killed"),
    ("agent-notification", "failed", "error")])
def test_a_background_subagents_notification_mid_turn_ends_the_subagent_and_no_turn_wherever_reads_stop(
        tmp_path, written_as, status, outcome):
    """The background subagent finishes while the model waits on another tool: Claude Code writes its
    notification into the session, to fold it into the turn under way. It is no prompt, as older releases
    wrote it (no isMeta) or newer ones do: the turn goes on to its own end, one run, and the subagent ends
    as the notification says, where reconcile would have called it interrupted, however reads are cut."""
    bash = {"type": "tool_use", "id": "toolu_bash", "name": "Bash", "input": {"command": "pytest"}}
    envelope = {"isMeta": True, "origin": {"kind": "task-notification"}} if written_as.endswith("meta") else {}
    notified = cc_notification("n1", TASK_AGENT, status, 4, summary=f'Agent "Find callers" {status}',
                               tool_use=None if written_as == "agent-notification" else "toolu_task",
                               older=written_as == "agent-notification", **envelope)
    lines = [cc_prompt("u1", "who calls paginate?", 0), *_background_task_call(1),
             cc_assistant("a2", "msg_p2", bash, output=20, second=3, request="req_p2", stop="tool_use"),
             notified, cc_result("r_bash", "toolu_bash", 5),
             cc_assistant("a3", "msg_p3", {"type": "text", "text": "Two callers; tests pass."}, output=30, second=6,
                          request="req_p3", stop="end_turn")]
    pictures = _in_two_reads(tmp_path, lines, _session_rows)
    assert pictures[0] == {"runs": [("u1", "ok", "end_turn", "06.000Z", 3)],
                           "subagents": [(CHILD_KEY, "ended", outcome, "01.000Z", "04.000Z")]}
    assert {cut: picture for cut, picture in pictures.items() if picture != pictures[0]} == {}


def test_notifications_the_model_answers_join_its_run_and_a_shell_commands_makes_no_subagent_wherever_reads_stop(
        tmp_path):
    """Once the turn is over, the model answers each notification: its answer joins the session's run, as
    one to any line nobody typed does, and the next prompt starts the next run. A background shell command's
    notification reads as a subagent's, its shell's id in <task-id>: it ends none, and makes none."""
    bash = {"type": "tool_use", "id": "toolu_bash", "name": "Bash",
            "input": {"command": "npm test", "run_in_background": True}}
    running = orjson.loads(cc_result("r_bash", "toolu_bash", 4)) | {"toolUseResult": {"backgroundTaskId": "b7f2c1"}}
    lines = [cc_prompt("u1", "who calls paginate? and run the tests", 0), *_background_task_call(1),
             cc_assistant("a2", "msg_p2", bash, output=20, second=3, request="req_p2", stop="tool_use"),
             _line(running),
             cc_assistant("a6", "msg_p6", {"type": "text", "text": "Both running."}, output=9, second=5,
                          request="req_p6", stop="end_turn"),
             cc_notification("n1", "b7f2c1", "completed", 10, tool_use="toolu_bash",
                             summary='Background command "npm test" completed (exit code 0)'),
             cc_assistant("a4", "msg_p4", {"type": "text", "text": "Tests pass."}, output=9, second=11,
                          request="req_p4", stop="end_turn"),
             cc_notification("n2", TASK_AGENT, "completed", 20, tool_use="toolu_task",
                             summary='Agent "Find callers" completed'),
             cc_assistant("a5", "msg_p5", {"type": "text", "text": "Two callers."}, output=9, second=21,
                          request="req_p5", stop="end_turn"),
             *_later_turn(30)]
    pictures = _in_two_reads(tmp_path, lines, _session_rows)
    assert pictures[0] == {"runs": [("u2", "ok", "end_turn", "31.000Z", 1), ("u1", "ok", "end_turn", "21.000Z", 5)],
                           "subagents": [(CHILD_KEY, "ended", "ok", "01.000Z", "20.000Z")]}
    assert {cut: picture for cut, picture in pictures.items() if picture != pictures[0]} == {}


def test_a_background_subagents_notification_ends_it_and_its_session_whichever_file_is_read_first(tmp_path):
    """The subagent's own file and the session's notification that it completed, read in any order and
    cut anywhere: the subagent, and its session, end at the notification."""
    parent, child = background_task_lines()
    parent.append(cc_notification("n1", TASK_AGENT, "completed", 10, tool_use="toolu_task",
                                  summary='Agent "Find callers" completed'))
    root = tmp_path / "claude-root"
    project = root / "claude" / "projects" / "-home-dev-src-app"
    session, subagent = project / f"{SESSION}.jsonl", project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl"
    db = root / "l.db"
    want = _but_last_logs(_read_in_steps(root, [{session: parent, subagent: child}]))
    settle(db)
    assert _subagent_rows(db) == [(CHILD_KEY, "ended", "ok", "2026-10-01T10:00:01.000Z", "2026-10-01T10:00:10.000Z")]
    [child_session] = [s for s in cli_json(db, "sessions") if s["session_id"] == CHILD_ID]
    assert (child_session["status"], child_session["ended_at"]) == ("ended", "2026-10-01T10:00:10.000Z")
    for cut in range(1, len(parent)):
        for first in ({session: parent[:cut]}, {session: parent[:cut], subagent: child[:2]}, {subagent: child}):
            picture = _read_in_steps(root, [first, {session: parent, subagent: child}])
            assert _but_last_logs(picture) == want, (cut, list(first))
    _clean(db)


def test_a_task_launched_to_run_remotely_has_only_begun_its_subagent(tmp_path, db):
    """A Task whose subagent was launched to run remotely answers at once (status remote_launched): the
    subagent has only begun, as a background one has."""
    parent, _ = background_task_lines("remote_launched")
    (_project(tmp_path) / f"{SESSION}.jsonl").write_bytes(b"".join(parent))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _subagent_rows(db) == [(CHILD_KEY, "running", None, "2026-10-01T10:00:01.000Z", None)]
    _clean(db)


def test_a_task_subagents_hot_view_and_gates_count_its_tool_calls(tmp_path, db):
    parent, child, _ = _task_lines()
    project = _project(tmp_path)
    sub = project / SESSION / "subagents"
    sub.mkdir(parents=True)
    (sub / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child))
    (project / f"{SESSION}.jsonl").write_bytes(b"".join(parent))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    hot, readers = HotSessions(tmp_path / "hot", flush_interval_s=0), ReaderPool(db)
    try:
        keeper = GateKeeper((GateConfig(name="tools", scope="session", metric="tool_calls", limit=1),), hot, readers,
                            ZoneInfo("UTC"))
        with readers.connection() as conn:
            views = {key: hot.lookup(conn, key) for key in (CHILD_KEY, PARENT_KEY)}
        # The subagent's Grep is its own; the parent's family adds it to the parent's Task.
        assert (views[CHILD_KEY].own.tool_calls, views[PARENT_KEY].own.tool_calls,
                views[PARENT_KEY].family.tool_calls) == (1, 1, 2)
        d = keeper.decide(CHILD_KEY, "Grep")
        assert (d.decision, d.gate, d.value) == ("block", "tools", 1)
        assert d.reason == f"session {CHILD_KEY} used 1 tool call of its 1 limit (gate tools)"
    finally:
        hot.close()
        readers.close()


# -- A workflow's subagents (Workflow tool, deep research) -------------------------------------------

WF_RUN, WF_AGENTS = "wf_5e7a91c2-b3d", ("a51f0e9d2c4b67183", "a6b2c8d0e4f913572")
WF_IDS = tuple(f"{SESSION}/{agent}" for agent in WF_AGENTS)
WF_KEYS = tuple(f"agent:claude-code:subagent:{sid}" for sid in WF_IDS)


def _workflow_files(project: Path) -> dict[Path, bytes]:
    """A session that ran a workflow of two agents, as Claude Code leaves it: the session's transcript, each
    agent's beside its sidecar in ``subagents/workflows/<run>/``, the run's journal of what the agents
    returned, and the run's record and script in the session's ``workflows/``. No Task spawns the agents,
    and no result names them."""
    launch = {"type": "tool_use", "id": "toolu_wf", "name": "Workflow", "input": {"scriptPath": "audit.js"}}
    result = orjson.loads(cc_result("r_wf", "toolu_wf", 2))
    result["toolUseResult"] = {"status": "async_launched", "taskType": "local_workflow", "runId": WF_RUN}
    parent = [cc_prompt("u1", "audit the docs", 0),
              cc_assistant("a1", "msg_p1", launch, output=60, second=1, stop="tool_use"), _line(result),
              cc_assistant("a2", "msg_p2", {"type": "text", "text": "Two stale pages."}, output=80, second=30,
                           request="req_p2", stop="end_turn")]
    first, second = WF_AGENTS
    read = {"type": "tool_use", "id": "toolu_read", "name": "Read", "input": {"file_path": "/repo/README.md"}}
    agents = {first: [_side(first, line) for line in (
        cc_prompt("w1", "Check README.md", 3),
        cc_assistant("w2", "msg_w1", read, output=200, second=4, request="req_w1", stop="tool_use"),
        cc_result("w3", "toolu_read", 5),
        cc_assistant("w4", "msg_w2", {"type": "text", "text": "Stale."}, output=30, second=6, request="req_w2",
                     stop="end_turn"))],
        second: [_side(second, line) for line in (
            cc_prompt("v1", "Check INSTALL.md", 3),
            cc_assistant("v2", "msg_v1", {"type": "text", "text": "Stale."}, output=50, second=7, request="req_v1",
                         stop="end_turn"))]}
    run = project / SESSION / "subagents" / "workflows" / WF_RUN
    files = {project / f"{SESSION}.jsonl": b"".join(parent)}
    for agent, lines in agents.items():
        files[run / f"agent-{agent}.jsonl"] = b"".join(lines)
        files[run / f"agent-{agent}.meta.json"] = b'{"agentType":"workflow-subagent","spawnDepth":1}'
    files[run / "journal.jsonl"] = b"".join(
        _line({"type": "started", "key": f"v2:{agent}", "agentId": agent})
        + _line({"type": "result", "key": f"v2:{agent}", "agentId": agent, "result": "Stale."}) for agent in agents)
    files[project / SESSION / "workflows" / f"{WF_RUN}.json"] = orjson.dumps({"runId": WF_RUN, "totalTokens": 1})
    files[project / SESSION / "workflows" / "scripts" / f"audit-{WF_RUN}.js"] = b"export const meta = {}\n"
    return files


WANT_WORKFLOW_OUTCOME = {
    # Each agent is a subagent session of the session that ran the workflow; the session keeps its own calls.
    "counts": (1, 2, 2, 1, 5, 420, 2),
    "own": {SESSION: (PARENT_KEY, False, 2, 140, 1, 1), WF_IDS[0]: (WF_KEYS[0], True, 2, 230, 0, 1),
            WF_IDS[1]: (WF_KEYS[1], True, 1, 50, 0, 0)},
    "listed": {SESSION: (2, 1), WF_IDS[0]: (2, 1), WF_IDS[1]: (1, 0)},
    "family_is_all": True,
    "subagents": [(key, PARENT_KEY, WF_RUN, "running", None) for key in WF_KEYS],
}


def _write(files: dict[Path, bytes]) -> None:
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


@pytest.mark.parametrize("agents_first", [True, False], ids=["agents-first", "session-first"])
def test_a_workflows_agents_are_subagent_sessions_of_the_session_that_ran_it(tmp_path, db, agents_first):
    project = _project(tmp_path)
    files = _workflow_files(project)
    main = project / f"{SESSION}.jsonl"
    rest = [p for p in files if p != main]
    for part in (rest, [main]) if agents_first else ([main], rest):
        _write({p: files[p] for p in part})
        ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _task_outcome(db) == WANT_WORKFLOW_OUTCOME
    assert rows(db, "SELECT child_session_key, mode, parent_run_id FROM subagents ORDER BY 1") == [
        (key, "workflow-subagent", "u1") for key in WF_KEYS]
    # Only the agents' transcripts are read: no sidecar, journal or run record, and nothing rejected.
    listed = cli_json(db, "inputs")
    transcripts = [p for p in files if p.suffix == ".jsonl" and p.name.startswith(("agent-", SESSION))]
    assert sorted(row["path"] for row in listed) == sorted(map(str, transcripts))
    assert {row["status"] for row in listed} == {"live"}
    assert usage(db)["rejected_lines"] == 0
    # `session KEY` and `usage` agree: the session's with-subagents cost is all of it.
    detail = cli_json(db, "session", PARENT_KEY)
    assert detail["family_cost_usd"] == pytest.approx(usage(db)["cost_usd"], abs=1e-9)
    assert detail["cost_usd"] < detail["family_cost_usd"]
    # Read again, nothing changes.
    assert ingest(db, tmp_path / "claude", fmt="claude-code").events == 0
    assert _task_outcome(db) == WANT_WORKFLOW_OUTCOME


def test_a_workflows_agents_read_before_the_prompt_of_their_turn_are_that_turns(tmp_path, db):
    """The agents' transcripts read while the turn before the workflow's was the session's latest: once the
    workflow's prompt is read, their spawns and calls are its turn's, as when it is read first."""
    project = _project(tmp_path)
    files = _workflow_files(project)
    main = project / f"{SESSION}.jsonl"
    earlier = cc_user("u0", "hello", 0, timestamp="2026-10-01T09:59:00.000Z")
    _write({path: earlier if path == main else data for path, data in files.items()})
    ingest(db, tmp_path / "claude", fmt="claude-code")
    _write({main: earlier + files[main]})
    ingest(db, tmp_path / "claude", fmt="claude-code")
    assert rows(db, "SELECT child_session_key, parent_run_id FROM subagents ORDER BY 1") == [
        (key, "u1") for key in WF_KEYS]
    assert rows(db, "SELECT run_id, count(*) FROM llm_calls GROUP BY 1") == [("u1", 5)]
    _clean(db)


@pytest.mark.parametrize("where", ["subagents", "workflows", "run"])
def test_a_root_in_a_sessions_subagents_folder_reads_only_the_agents_transcripts(tmp_path, db, where):
    project = _project(tmp_path)
    files = _workflow_files(project)
    _write(files)
    root = {"subagents": project / SESSION / "subagents", "workflows": project / SESSION / "subagents" / "workflows",
            "run": project / SESSION / "subagents" / "workflows" / WF_RUN}[where]
    ingest(db, root, fmt="claude-code")
    assert sorted(row["path"] for row in cli_json(db, "inputs")) == sorted(
        str(p) for p in files if p.suffix == ".jsonl" and p.name.startswith("agent-"))
    u = usage(db)
    assert (u["rejected_lines"], u["subagent_sessions"], u["llm_calls"], u["output_tokens"]) == (0, 2, 3, 280)

def test_a_ledger_read_before_workflows_were_found_reads_only_their_agents_once_they_are(tmp_path, db, monkeypatch):
    """A ledger written while only ``subagents/agent-*.jsonl`` was looked for knows the files it read by
    inode and first line: none of them is read again, and the workflow's agents join the ledger as they
    would a fresh one."""
    from agentledger.tail import layouts

    def flat_only(root: Path, unreadable: dict[str, str]) -> list:
        return [c for c in layouts.claude_code_files(root, unreadable) if "workflows" not in Path(c.path).parts]

    project = _project(tmp_path)
    files = _workflow_files(project)
    files[project / SESSION / "subagents" / f"agent-{BTW_AGENT}.jsonl"] = b"".join(_task_lines()[2])
    _write(files)
    with monkeypatch.context() as m:
        m.setitem(layouts.LAYOUTS, "claude-code", flat_only)
        before = ingest(db, tmp_path / "claude", fmt="claude-code")
    assert (before.files, usage(db)["subagent_sessions"]) == (2, 0)
    after = ingest(db, tmp_path / "claude", fmt="claude-code")
    nested = [data for path, data in files.items() if "workflows" in path.parts and path.name.startswith("agent-")]
    assert (after.lines, after.duplicates) == (sum(data.count(b"\n") for data in nested), 0)
    fresh = tmp_path / "fresh.db"
    ingest(fresh, tmp_path / "claude", fmt="claude-code")
    tables = ("sessions", "runs", "llm_calls", "tool_calls", "subagents", "rejects")
    assert dump(db, tables) == dump(fresh, tables)
    assert usage(db) == usage(fresh)


def test_a_workflow_begun_after_serve_started_is_followed(tmp_path):
    """Claude Code makes the run's folders as the workflow starts: inotify's word that they appeared is
    enough for the daemon to find its agents (the periodic rescan is an hour away)."""
    from served import serve
    from serving import wait_for, write_config

    project = _project(tmp_path)
    files = _workflow_files(project)
    main = project / f"{SESSION}.jsonl"
    _write({main: files[main]})
    served = serve(write_config(tmp_path, tmp_path / "claude", fmt="claude-code", extra="", rescan_s=3600))
    try:
        db = tmp_path / "ledger.db"
        wait_for(lambda: usage(db)["llm_calls"] == 2, what="the session read")
        _write({p: data for p, data in files.items() if p != main})
        wait_for(lambda: usage(db)["llm_calls"] == 5, what="the workflow's agents read")
        u = usage(db)
        assert (u["sessions"], u["subagent_sessions"], u["subagents"], u["output_tokens"]) == (1, 2, 2, 420)
        assert cli_json(db, "session", PARENT_KEY)["family_cost_usd"] == pytest.approx(u["cost_usd"], abs=1e-9)
    finally:
        served.stop()


def _read_interleaved(data: st.DataObject, root: Path, files: dict[Path, list[bytes]]) -> None:
    """Write each file's lines in chunks, the files' chunks interleaved as drawn, ingesting after each:
    any file may be read first, and any read may stop mid-file."""
    chunks = {}
    for path, lines in files.items():
        cuts = sorted(data.draw(st.sets(st.integers(1, len(lines) - 1), max_size=2)))
        chunks[path] = [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)])]
    while chunks:
        path = data.draw(st.sampled_from(sorted(chunks)))
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as f:
            f.writelines(chunks[path].pop(0))
        if not chunks[path]:
            del chunks[path]
        ingest(root / "l.db", root / "claude", fmt="claude-code")


def _own(db: Path) -> dict:
    conn = open_reader(db)
    try:
        assert check_rollups(conn) == []
        return {s["session_id"]: (s["llm_calls"], s["output_tokens"], s["tool_calls"])
                for s in queries.sessions(conn, queries.Window())}
    finally:
        conn.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_requests_sharing_a_response_id_are_two_calls_and_a_replay_of_one_is_none(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("requests")
    project = root / "claude" / "projects" / "-home-dev-src-app"
    text = {"type": "text", "text": "ok"}
    # A gateway numbering its responses gives two requests of the session one response id.
    session = [cc_prompt("u1", "first", 0),
               cc_assistant("a1", "msg_gw1_000001", text, output=5, second=1, request="req_A"),
               cc_assistant("a2", "msg_gw1_000001", text, output=50, second=2, request="req_A", stop="end_turn"),
               cc_prompt("u2", "second", 10),
               cc_assistant("a3", "msg_gw1_000001", text, output=70, second=11, request="req_B", stop="end_turn")]
    # A side question replays the second under a request of its own, then asks its own.
    side = [_side(BTW_AGENT, cc_assistant("b1", "msg_gw1_000001", text, output=900, second=12, request="req_R")),
            _side(BTW_AGENT, cc_assistant("b2", "msg_btw", text, output=25, second=13, request="req_btw",
                                          stop="end_turn"))]
    _read_interleaved(data, root, {project / f"{SESSION}.jsonl": session,
                                   project / SESSION / "subagents" / f"agent-{BTW_AGENT}.jsonl": side})
    u = usage(root / "l.db")
    assert (u["llm_calls"], u["input_tokens"], u["output_tokens"]) == (3, 30, 145)
    assert _own(root / "l.db") == {SESSION: (3, 145, 0)}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_subagent_replaying_a_parent_tool_call_leaves_the_call_in_the_parent(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("replay")
    project = root / "claude" / "projects" / "-home-dev-src-app"
    bash = {"type": "tool_use", "id": "toolu_bash", "name": "Bash", "input": {"command": "pytest"}}
    parent, child, _ = _task_lines()
    parent = [parent[0], cc_assistant("a0", "msg_p0", bash, output=30, second=1, request="req_p0", stop="tool_use"),
              cc_result("r0", "toolu_bash", 1), *parent[1:]]
    # The subagent's transcript opens with a copy of the parent's Bash call, under a request of its own, and
    # of its result.
    child = [_side(TASK_AGENT, cc_assistant("c_", "msg_p0", bash, output=30, second=2, request="req_copy",
                                            stop="tool_use")), _side(TASK_AGENT, cc_result("c_r", "toolu_bash", 2)),
             *child]
    subagent = project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl"
    _read_interleaved(data, root, {project / f"{SESSION}.jsonl": parent, subagent: child})
    # The parent's Bash and Task are its own; the subagent made one Grep call, and two model calls.
    assert _own(root / "l.db") == {SESSION: (3, 170, 2), CHILD_ID: (2, 340, 1)}
    assert usage(root / "l.db")["tool_calls"] == 3


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_subagents_tool_call_is_one_row_whatever_part_of_it_is_read_before_its_sessions_prompt(
        tmp_path_factory, data):
    """The subagent's file may be read, in part, before its session's first prompt is: its Grep's start,
    end or both then find no run, and its model calls neither. They are the prompt's run's all the same."""
    root = tmp_path_factory.mktemp("prompt-later")
    project = root / "claude" / "projects" / "-home-dev-src-app"
    parent, child, _ = _task_lines()
    _read_interleaved(data, root, {project / f"{SESSION}.jsonl": parent,
                                   project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl": child})
    db = root / "l.db"
    assert sorted(rows(db, "SELECT tool_call_id, run_id, session_id, status, started_ms % 60000, "
                                  "ended_ms % 60000 FROM tool_calls")) == [
        ("toolu_grep", "u1", CHILD_ID, "ok", 3_000, 4_000), ("toolu_task", "u1", SESSION, "ok", 1_000, 20_000)]
    assert rows(db, "SELECT run_id, count(*) FROM llm_calls GROUP BY 1") == [("u1", 4)]
    assert _own(db) == {SESSION: (2, 140, 1), CHILD_ID: (2, 340, 1)}
    assert rows(db, "SELECT tool_name, sum(calls) FROM tool_days GROUP BY 1 ORDER BY 1") == [
        ("Grep", 1), ("Task", 1)]


# What a read leaves, whatever its order: every row, events included, and every run-level table beside them.
_SAME_ROWS = ("events", "sessions", "runs", "llm_calls", "usage_snapshots", "tool_calls", "subagents", "compactions",
              "messages", "rejects", "checkpoints", "session_ids", "compaction_pairs")
_RUN_TABLES = ("run_activity", "run_tool_totals", "run_llm_totals", "runs_without_calls", "session_totals")


def _read_in_steps(root: Path, steps: list[dict[Path, list[bytes]]], then=None) -> dict:
    """A fresh ledger read in ``steps`` (the files each step writes, then a read, then ``then`` of the
    ledger's path if given); what it holds."""
    shutil.rmtree(root, ignore_errors=True)
    for files in steps:
        for path, lines in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"".join(lines))
        ingest(root / "l.db", root / "claude", fmt="claude-code")
        if then is not None:
            then(root / "l.db")
    return _picture(root / "l.db")


def _picture(db: Path) -> dict:
    """What the ledger at ``db`` holds: every row, and the run-level tables beside them (see _SAME_ROWS)."""
    _clean(db)
    conn = open_reader(db)
    try:
        runs = {run_id: queries.run_detail(conn, run_id) for (run_id,) in conn.execute("SELECT run_id FROM runs")}
    finally:
        conn.close()
    # Each of these tables is keyed by its first column; a row emptied by a move is no row (as verify says).
    return dump(db, _SAME_ROWS) | {t: sorted((row for row in rows(db, f"SELECT * FROM {t}") if any(row[1:])),
                                             key=repr) for t in _RUN_TABLES} | {"run detail": runs}


def _later_turn(second: int) -> list[bytes]:
    """The session's next prompt, at ``second``, and its answer a second later."""
    return [cc_prompt("u2", "and the tests?", second),
            cc_assistant("a3", "msg_p3", {"type": "text", "text": "None."}, output=9, second=second + 1,
                         request="req_p3", stop="end_turn")]


def _copied_task(parent: list[bytes]) -> list[bytes]:
    """A side question's copy of the parent's Task call (under a request of its own) and of its result."""
    call = orjson.loads(parent[1]) | {"uuid": "b_1", "timestamp": "2026-10-01T10:00:29.000Z", "requestId": "req_copy"}
    result = orjson.loads(parent[2]) | {"uuid": "b_2", "timestamp": "2026-10-01T10:00:29.500Z"}
    return [_side(BTW_AGENT, _line(call)), _side(BTW_AGENT, _line(result))]


@pytest.mark.parametrize("order", ["subagent-first", "in-one-read", "subagent-first-mid-turn"])
def test_a_subagents_calls_read_before_its_sessions_prompt_join_the_run_that_prompt_starts(tmp_path, order):
    """A subagent's file read whole before its session's: its Grep (start and end) and model calls found
    no run. Once the prompt is read they are in its run, as a read of the session first puts them."""
    root = tmp_path / "claude-root"
    project = root / "claude" / "projects" / "-home-dev-src-app"
    parent, child, _ = _task_lines()
    # A later turn: the subagent's calls are in the run of their time, not the session's latest.
    parent += _later_turn(40)
    if order.endswith("mid-turn"):  # read up to the Task call: the run's activity since is the subagent's
        parent = parent[:2]
    session = {project / f"{SESSION}.jsonl": parent}
    subagent = {project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl": child}
    want = _read_in_steps(root, [session, subagent])
    u1 = want["run detail"]["u1"]
    assert (u1["tool_calls"], u1["llm_calls"]) == ((2, 3) if order.endswith("mid-turn") else (2, 4))
    got = _read_in_steps(root, [session | subagent] if order == "in-one-read" else [subagent, session])
    assert got == want


def _branches_of_every_kind(project: Path) -> dict[Path, list[bytes]]:
    """The session's transcript and its branches': its Task subagent streams its own Task call over two lines
    (its thinking first), has its context compacted, and is named by the Task's result; the subagent's Task's
    child is named by that Task's result; a /btw question is named by nothing."""
    files = _nested_task_files(project)
    subagent = project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl"
    prompt, task, result, answer = files[subagent]
    thinking = _side(TASK_AGENT, cc_assistant("c1t", "msg_c1", {"type": "thinking", "thinking": "..."}, output=5,
                                              second=3, request="req_c1"))
    files[subagent] = [prompt, thinking, task, result, _compacted(16, 150_000), answer]
    files[subagent.with_name(f"agent-{BTW_AGENT}.jsonl")] = _btw_question(30, 31)
    return files


@pytest.mark.parametrize("order", [(1, 2, 3, 0), (2, 1, 0, 3), (3, 2, 1, 0), (1, 0, 2, 3)],
                         ids=["branches-first", "deepest-first", "btw-then-deepest-first", "subagent-first"])
def test_a_branchs_events_are_keyed_as_a_read_in_one_go_keys_them_whichever_file_is_read_first(tmp_path, order):
    """A branch's model-call lines (each line of a streamed one) and its Tasks' spawns are indexed under its
    session once a result names it, as its calls and spawns are counted there. Read before the naming, their
    events take that session's key when it comes: `events` lists them, and every table and rollup holds them,
    as one read of all the files does."""
    root = tmp_path / "claude-root"
    files = _branches_of_every_kind(root / "claude" / "projects" / "-home-dev-src-app")
    paths = list(files)
    db = root / "l.db"

    def seen() -> dict:
        return _but_last_logs(_picture(db)) | rollups(db) | {"listed": cli_json(db, "events", "--limit", "1000")}

    _read_in_steps(root, [files])
    want = seen()
    keyed = {e["session_key"] for e in want["listed"] if e["kind"] in ("llm.call", "subagent.spawn")}
    assert keyed == {PARENT_KEY, CHILD_KEY, DEEP_KEY}
    _read_in_steps(root, [{paths[i]: files[paths[i]]} for i in order])
    assert seen() == want


def _pruned(db: Path) -> None:
    """Every raw row retention keeps for a while pruned, as it does once they are older than its horizon."""
    conn = open_writer(db)
    try:
        retention.prune(conn, now_ms())
    finally:
        conn.close()


def test_a_branchs_event_retention_reduced_before_the_branch_was_named_shows_no_key(tmp_path):
    """Retention reduces an event to its key: a branch's line reduced before a result names the branch shows
    no session after the naming, as one reduced after it does."""
    root = tmp_path / "claude-root"
    files = _branches_of_every_kind(root / "claude" / "projects" / "-home-dev-src-app")
    session, *branches = files
    want = _but_last_logs(_read_in_steps(root, [files], then=_pruned))
    assert {row[6] for row in want["events"]} == {None}
    steps = [{path: files[path] for path in branches}, {session: files[session]}]
    assert _but_last_logs(_read_in_steps(root, steps, then=_pruned)) == want


def _turns_and_branches(project: Path) -> dict[Path, list[bytes]]:
    """A session's files: its first turn stopped before any answer; a second that starts a Task in the
    background, whose subagent writes a file of its own and is still at work, its Grep running, when the
    third turn begins; a side question asked during the third (a file of its own too)."""
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task",
            "input": {"description": "Find callers", "prompt": "List callers", "subagent_type": "general-purpose",
                      "run_in_background": True}}
    launched = orjson.loads(cc_result("r_task", "toolu_task", 7))
    launched["toolUseResult"] = {"status": "async_launched", "agentId": TASK_AGENT}
    parent = [cc_prompt("u0", "look at paginate", 0), cc_user("i0", "[Request interrupted by user]", 1),
              cc_prompt("u1", "who calls paginate?", 5),
              cc_assistant("a1", "msg_p1", task, output=60, second=6, stop="tool_use"), _line(launched),
              cc_assistant("a2", "msg_p2", {"type": "text", "text": "Looking."}, output=8, second=8, stop="end_turn"),
              *_later_turn(10)]
    child = _task_child(7, 8, 12, 13)
    btw = _btw_question(14, 15)
    subagents = project / SESSION / "subagents"
    return {project / f"{SESSION}.jsonl": parent, subagents / f"agent-{TASK_AGENT}.jsonl": child,
            subagents / f"agent-{BTW_AGENT}.jsonl": btw}


def _run_picture(db: Path) -> dict:
    """What a ledger says of each run and of the calls in it, rollups checked."""
    _clean(db)
    totals = {t: sorted((row for row in rows(db, f"SELECT * FROM {t}") if any(row[1:])), key=repr)
              for t in ("run_llm_totals", "run_tool_totals", "runs_without_calls")}
    return dump(db, ("runs", "llm_calls", "tool_calls", "subagents")) | totals


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_side_branchs_calls_are_in_the_run_of_their_time_whichever_prompt_was_read_first(tmp_path_factory, data):
    """A side branch's line read before the prompt of its time's turn found the turn before as the session's
    latest: once that prompt is read, the line's calls are its run's, as when it is read first. A turn left
    with no call of its own is a run without calls again, and a tool call the prompt came during is one
    row, in the turn it began in."""
    root = tmp_path_factory.mktemp("later-prompt")
    files = _turns_and_branches(root / "claude" / "projects" / "-home-dev-src-app")
    _read_interleaved(data, root, files)
    ingest(root / "fresh.db", root / "claude", fmt="claude-code")
    assert _run_picture(root / "l.db") == _run_picture(root / "fresh.db")
    assert rows(root / "fresh.db", "SELECT run_id, count(*) FROM llm_calls GROUP BY 1") == [
        ("u1", 3), ("u2", 3)]
    assert rows(root / "fresh.db", "SELECT run_id, tool_call_id, started_ms % 60000, ended_ms % 60000 "
                                          "FROM tool_calls ORDER BY 2") == [
        ("u1", "toolu_grep", 8_000, 12_000), ("u1", "toolu_task", 6_000, 7_000)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_side_branch_replaying_a_task_call_leaves_the_subagent_as_the_session_spawned_it(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("task-replay")
    project = root / "claude" / "projects" / "-home-dev-src-app"
    parent, child, btw = _task_lines()
    # The side question's transcript opens with a copy of the parent's Task call and of its result.
    _read_interleaved(data, root, {
        project / f"{SESSION}.jsonl": parent,
        project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl": child,
        project / SESSION / "subagents" / f"agent-{BTW_AGENT}.jsonl": [*_copied_task(parent), *btw]})
    db = root / "l.db"
    assert rows(db, "SELECT child_session_key, parent_session_key, parent_run_id, label, mode, status, outcome, "
                           "spawned_ms % 60000, ended_ms % 60000 FROM subagents") == [
        (CHILD_KEY, PARENT_KEY, "u1", "Find callers", "general-purpose", "ended", "completed", 1_000, 20_000)]
    assert rows(db, "SELECT run_id, session_id, branch, status, started_ms % 60000, ended_ms % 60000 "
                           "FROM tool_calls WHERE tool_call_id = 'toolu_task'") == [
        ("u1", SESSION, None, "ok", 1_000, 20_000)]
    assert _own(db) == {SESSION: (3, 165, 1), CHILD_ID: (2, 340, 1)}
    u = usage(db)
    assert (u["subagents"], u["rejected_lines"]) == (1, 0)


@pytest.mark.parametrize("order", ["session-first", "replay-before-the-tasks-result", "in-one-read",
                                   "replay-first", "replay-first-then-the-task-before-its-result"])
def test_a_side_branch_replaying_a_task_calls_result_changes_nothing_of_the_call(tmp_path, order):
    """A side branch that copies the session's Task call copies its result too: a line with no response
    id, the subagent's id in its outcome, in a later turn than the call.

    Read before the session's own lines, the copy cannot be told from a result of the branch's own yet:
    the call, the subagent and every total still end up as the session's lines set them, but the child
    session's end and last activity keep the copy's time (a session's span only ever widens)."""
    root = tmp_path / "claude-root"
    project = root / "claude" / "projects" / "-home-dev-src-app"
    parent, child, btw = _task_lines()
    parent += _later_turn(25)
    replay = _copied_task(parent)
    session, subagents = project / f"{SESSION}.jsonl", project / SESSION / "subagents"
    task, side = subagents / f"agent-{TASK_AGENT}.jsonl", subagents / f"agent-{BTW_AGENT}.jsonl"

    def read(side_lines: list[bytes]) -> dict:
        whole = {session: parent, task: child, side: side_lines}
        steps = {"session-first": [{session: parent}, {task: child}, {side: side_lines}],
                 "replay-before-the-tasks-result": [{session: parent[:2]}, {side: side_lines}, {session: parent},
                                                    {task: child}],
                 "in-one-read": [whole],
                 "replay-first": [{side: side_lines}, {session: parent}, {task: child}],
                 "replay-first-then-the-task-before-its-result": [{side: side_lines}, {session: parent[:2]},
                                                                  {session: parent}, {task: child}]}[order]
        picture = _read_in_steps(root, steps)
        del picture["checkpoints"], picture["events"]  # the side branch's file is another, with lines of its own
        if order.startswith("replay-first"):
            picture["sessions"] = [row[:6] + row[7:11] + row[12:] if row[0] == CHILD_ID else row
                                   for row in picture["sessions"]]
        picture["usage"] = usage(root / "l.db")
        return picture

    want = read(btw)
    assert (want["usage"]["tool_calls"], want["usage"]["subagents"], want["usage"]["rejected_lines"]) == (2, 1, 0)
    assert read(replay + btw) == want


def test_a_call_stored_under_its_response_alone_is_the_call_its_later_lines_name_with_a_request(tmp_path, db):
    """Ledgers keyed a call by its response id alone before request ids counted: a stream read on
    both sides of an upgrade is still one call."""
    project = _project(tmp_path)
    transcript = project / f"{SESSION}.jsonl"
    first = orjson.loads(cc_assistant("a1", "msg_1", {"type": "text", "text": "x"}, output=3, second=1))
    del first["requestId"]
    transcript.write_bytes(cc_prompt("u1", "hi", 0) + _line(first))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    with transcript.open("ab") as f:
        f.write(cc_assistant("a2", "msg_1", {"type": "text", "text": "y"}, output=400, second=2, stop="end_turn"))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    u = usage(db)
    assert (u["llm_calls"], u["input_tokens"], u["output_tokens"]) == (1, 10, 400)
    _clean(db)


FORK = "5f0c1b52-0000-4000-8000-0000000000f2"


@pytest.mark.parametrize("origin_first", [True, False], ids=["origin-first", "fork-first"])
def test_a_fork_that_copies_its_origins_lines_neither_ends_nor_joins_the_origins_last_run(tmp_path, db,
                                                                                         origin_first):
    project = _project(tmp_path)
    bash = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "sleep 600"}}
    # The origin's last turn was killed while its tool ran: nothing says it ended.
    origin = [cc_prompt("u1", "one", 0),
              cc_assistant("a1", "msg_1", {"type": "text", "text": "x"}, output=5, second=1, stop="end_turn"),
              cc_prompt("u2", "two", 10),
              cc_assistant("a2", "msg_2", bash, output=5, second=11, request="req_2", stop="tool_use")]
    own = [orjson.loads(line) | {"sessionId": FORK} for line in (
        cc_assistant("f0", "msg_f0", {"type": "text", "text": "resumed"}, output=7, second=40, request="req_f0"),
        cc_prompt("f1", "three", 50),
        cc_assistant("f2", "msg_f1", {"type": "text", "text": "y"}, output=9, second=51, request="req_f1",
                     stop="end_turn"))]
    files = {project / f"{SESSION}.jsonl": b"".join(origin),
             project / f"{FORK}.jsonl": b"".join(origin) + b"".join(map(_line, own))}
    for path in sorted(files, key=lambda p: (p.name.startswith(FORK)) != origin_first):
        path.write_bytes(files[path])
        ingest(db, tmp_path / "claude", fmt="claude-code")
    env = cli_env(db)
    subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--format", "claude-code",
                    str(tmp_path / "claude")], env=env, capture_output=True, check=True)
    out = subprocess.run([sys.executable, "-m", "agentledger", "runs", "--json"], env=env, capture_output=True,
                         check=True)
    runs = {(r["session_id"], r["started_at"]): (r["status"], r["stop_reason"], r["llm_calls"])
            for r in orjson.loads(out.stdout)}
    # The fork's own line before its first prompt is a call of the fork, in no run of the origin's.
    assert runs == {(SESSION, "2026-10-01T10:00:00.000Z"): ("ok", "end_turn", 1),
                    (SESSION, "2026-10-01T10:00:10.000Z"): ("interrupted", None, 1),
                    (FORK, "2026-10-01T10:00:50.000Z"): ("ok", "end_turn", 1)}
    u = usage(db)
    assert (u["runs"], u["interrupted_runs"], u["llm_calls"]) == (3, 1, 4)


def _origin_turns() -> list[bytes]:
    """Two turns of the session: a Bash call and its answer, then a question."""
    bash = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "pytest"}}
    return [cc_prompt("u1", "run the tests", 0),
            cc_assistant("a1", "msg_1", bash, output=40, second=1, stop="tool_use"),
            cc_result("r1", "toolu_1", 2),
            cc_assistant("a2", "msg_2", {"type": "text", "text": "All pass."}, output=30, second=3, request="req_2",
                         stop="end_turn"),
            cc_prompt("u2", "and the lint?", 10),
            cc_assistant("a3", "msg_3", {"type": "text", "text": "Clean."}, output=20, second=11, request="req_3",
                         stop="end_turn")]


def _forked(origin: list[bytes], style: str) -> list[bytes]:
    """The head of a Claude Code 2.1 fork's file: each of the origin's entries under the fork's sessionId,
    stamped ``forkedFrom``. ``/branch`` keeps each entry's uuid; the SDK's ``forkSession`` gives each a
    fresh one and dates the last copy when it made the fork."""
    copies = []
    for i, line in enumerate(origin):
        entry = orjson.loads(line)
        copy = entry | {"sessionId": FORK, "forkedFrom": {"sessionId": SESSION, "messageUuid": entry["uuid"]}}
        if style == "fork-session":
            copy["uuid"] = f"f0c0{i:04d}-0000-4000-8000-000000000000"
            if i == len(origin) - 1:
                copy["timestamp"] = "2026-10-01T10:00:45.000Z"
        copies.append(_line(copy))
    return copies


def _fork_turn() -> list[bytes]:
    """The fork's own first turn."""
    return [_line(orjson.loads(line) | {"sessionId": FORK}) for line in (
        cc_prompt("f1", "try it the other way", 50),
        cc_assistant("f2", "msg_f1", {"type": "text", "text": "Done."}, output=9, second=51, request="req_f1",
                     stop="end_turn"))]


def _fork_picture(db: Path) -> dict:
    """What ``usage`` and ``sessions`` tell of each session, and what ``verify`` finds."""
    settle(db)
    sessions = {s["session_id"]: (s["runs"], s["llm_calls"], s["tool_calls"], s["output_tokens"],
                                  s["cache_write_tokens"], s["cost_usd"]) for s in cli_json(db, "sessions")}
    u = cli_json(db, "usage")
    return {"sessions": sessions, "verify": verify(db),
            "usage": {k: u[k] for k in ("sessions", "runs", "interrupted_runs", "llm_calls", "tool_calls",
                                        "output_tokens", "cost_usd", "rejected_lines")}}


@pytest.mark.parametrize("style", ["branch", "fork-session"])
@pytest.mark.parametrize("order", ["origin-first", "fork-first", "fork-alone"])
def test_a_forks_copies_of_its_origins_history_count_once_in_the_origin(tmp_path, style, order):
    """A fork's file starts with copies of its origin's entries under the fork's own sessionId: they are
    the origin's turns, counted once and in the origin, whichever file is read first and when the origin's
    file is gone; the fork's own turn is the fork's."""
    origin = _origin_turns()
    want_db, db = tmp_path / "want.db", tmp_path / "ledger.db"
    project = _project(tmp_path)
    # What the ledger should hold: the origin read alone, and the fork's own turn.
    (project / f"{SESSION}.jsonl").write_bytes(b"".join(origin))
    (project / f"{FORK}.jsonl").write_bytes(b"".join(_fork_turn()))
    ingest(want_db, tmp_path / "claude", fmt="claude-code")
    want = _fork_picture(want_db)
    assert want["sessions"][SESSION][:3] == (2, 3, 1) and want["sessions"][FORK][:3] == (1, 1, 0)
    assert (want["usage"]["sessions"], want["usage"]["runs"], want["usage"]["llm_calls"]) == (2, 3, 4)

    files = {project / f"{SESSION}.jsonl": origin, project / f"{FORK}.jsonl": _forked(origin, style) + _fork_turn()}
    for path in files:
        path.unlink()
    steps = {"origin-first": list(files), "fork-first": list(files)[::-1], "fork-alone": list(files)[1:]}[order]
    for path in steps:  # each file in a read of its own: the other is not there yet
        path.write_bytes(b"".join(files[path]))
        ingest(db, tmp_path / "claude", fmt="claude-code")
    assert ingest(db, tmp_path / "claude", fmt="claude-code").events == 0  # read again, nothing changes
    assert _fork_picture(db) == want


@pytest.mark.parametrize("style", ["branch", "fork-session"])
@pytest.mark.parametrize("order", ["origin-first", "fork-first", "without-origin"])
def test_a_forks_copy_of_a_task_leaves_the_subagent_its_origins(tmp_path, db, style, order):
    """The copied Task call and result name the origin's subagent: the subagent, its spend and the spawning
    turn stay the origin's, as if the fork had never been made."""
    parent, child, btw = _task_lines()
    project = _project(tmp_path)
    sub = project / SESSION / "subagents"
    files = {project / f"{SESSION}.jsonl": parent, project / f"{FORK}.jsonl": _forked(parent, style),
             sub / f"agent-{TASK_AGENT}.jsonl": child, sub / f"agent-{BTW_AGENT}.jsonl": btw}
    steps = list(files) if order == "origin-first" else list(files)[1:] if order == "without-origin" else [
        *list(files)[1:], list(files)[0]]
    for path in steps:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(files[path]))
        ingest(db, tmp_path / "claude", fmt="claude-code")
    assert _task_outcome(db) == WANT_TASK_OUTCOME


def test_a_prompt_written_as_blocks_with_an_image_is_a_turn_of_its_own(tmp_path, db):
    project = _project(tmp_path)
    pasted = orjson.loads(cc_prompt("u2", "", 0)) | {"timestamp": "2026-10-01T10:10:00.000Z"}
    pasted["message"]["content"] = [{"type": "text", "text": "what is wrong in this screenshot?"},
                                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                 "data": "iVBORw0KGgo="}}]
    answer = orjson.loads(cc_assistant("a2", "msg_2", {"type": "text", "text": "The margin."}, output=300, second=1,
                                       request="req_2", stop="end_turn")) | {"timestamp": "2026-10-01T10:10:01.000Z"}
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "first question", 0)
        + cc_assistant("a1", "msg_1", {"type": "text", "text": "x"}, output=10, second=1, stop="end_turn")
        + _line(pasted) + _line(answer))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    out = subprocess.run([sys.executable, "-m", "agentledger", "runs", "--json"], env=cli_env(db),
                         capture_output=True, check=True)
    assert sorted((r["started_at"], r["ended_at"], r["llm_calls"]) for r in orjson.loads(out.stdout)) == [
        ("2026-10-01T10:00:00.000Z", "2026-10-01T10:00:01.000Z", 1),
        ("2026-10-01T10:10:00.000Z", "2026-10-01T10:10:01.000Z", 1)]
    _clean(db)


# -- slash commands ---------------------------------------------------------------------------------

def cc_user(uuid: str, content: object, second: float, **envelope) -> bytes:
    """A user line as Claude Code writes it, with ``content`` and any other envelope fields."""
    line = orjson.loads(cc_prompt(uuid, "", 0)) | {"timestamp": f"2026-10-01T10:00:{second:06.3f}Z"} | envelope
    line["message"]["content"] = content
    return _line(line)


CAVEAT = ("<local-command-caveat>Caveat: The messages below were generated by the user while running local "
          "commands. DO NOT respond to these messages or otherwise consider them in your response unless the user "
          "explicitly asks you to.</local-command-caveat>")


def _local_command(uuid: str, name: str, args: str, output: str, second: float) -> list[bytes]:
    """A local command as Claude Code writes it: the caveat, the echo of what was typed, its output."""
    return [cc_user(f"{uuid}c", CAVEAT, second, isMeta=True),
            cc_user(uuid, f"<command-name>/{name}</command-name>\n<command-message>{name}</command-message>\n"
                          f"<command-args>{args}</command-args>", second),
            cc_user(f"{uuid}o", f"<local-command-stdout>{output}</local-command-stdout>", second + 0.1)]


def _commands_session() -> list[bytes]:
    """A session's turns between local commands, a `!` shell command and a /compact, and a custom command's
    turn: its loading line, the prompt it expands into (isMeta), the model's work on it."""
    bash = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "gh pr diff 42"}}
    return [*_local_command("m1", "model", "opus", "Set model to opus", 0),
            cc_user("b1", "<bash-input>git status</bash-input>", 1),
            cc_user("b2", "<bash-stdout>nothing to commit</bash-stdout><bash-stderr></bash-stderr>", 1.1),
            cc_prompt("u1", "why does the build fail?", 2),
            cc_assistant("a1", "msg_1", {"type": "text", "text": "A missing import."}, output=10, second=3),
            cc_user("k1", "<command-message>review</command-message>\n<command-name>/review</command-name>\n"
                          "<command-args>42</command-args>", 10),
            cc_user("k2", [{"type": "text", "text": "Review pull request 42: read its diff, then list problems."}],
                    10, isMeta=True),
            cc_assistant("a2", "msg_2", bash, output=20, second=11, request="req_2", stop="tool_use"),
            cc_result("r2", "toolu_1", 12),
            cc_assistant("a3", "msg_3", {"type": "text", "text": "Two problems."}, output=30, second=13,
                         request="req_3"),
            _line({"type": "system", "subtype": "compact_boundary", "uuid": "s0", "sessionId": SESSION,
                   "timestamp": "2026-10-01T10:00:30.000Z", "compactMetadata": {"trigger": "manual",
                                                                                "preTokens": 52000}}),
            cc_user("s1", "This session is being continued from a previous conversation.", 30, isCompactSummary=True),
            *_local_command("s2", "compact", "", "Compacted (ctrl+o to see full summary)", 30),
            cc_prompt("u2", "and now?", 40),
            cc_assistant("a4", "msg_4", {"type": "text", "text": "It builds."}, output=40, second=41,
                         request="req_4"),
            *_local_command("x1", "cost", "", "Total cost: $0.02", 50)]


def _commands_picture(db: Path) -> dict:
    """What ``usage`` and ``runs`` show once the logs are long finished."""
    settle(db)
    u = cli_json(db, "usage")
    return {"usage": {k: u[k] for k in ("runs", "interrupted_runs", "llm_calls", "tool_calls", "compactions",
                                        "rejected_lines")},
            "runs": {r["run_id"]: (r["started_at"][17:], r["status"], r["llm_calls"], r["tool_calls"])
                     for r in cli_json(db, "runs")}}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_local_commands_are_no_turns_and_a_custom_command_is_one_wherever_reads_stop(tmp_path_factory, data):
    """/model, /cost, /compact and a `!` command write the user lines of what was typed and of its output:
    none is a prompt, so none is a run, and the last, after the session's last turn, is no interrupted one.
    A custom command's loading line starts the turn the model works on."""
    tmp = tmp_path_factory.mktemp("commands")
    db, transcript = tmp / "l.db", _project(tmp) / f"{SESSION}.jsonl"
    lines = _commands_session()
    cuts = sorted(data.draw(st.sets(st.integers(1, len(lines) - 1), max_size=4)))
    for a, b in zip([0, *cuts], [*cuts, len(lines)]):
        with transcript.open("ab") as f:
            f.writelines(lines[a:b])
        ingest(db, tmp / "claude", fmt="claude-code")
    assert _commands_picture(db) == {
        "usage": {"runs": 3, "interrupted_runs": 0, "llm_calls": 4, "tool_calls": 1, "compactions": 1,
                  "rejected_lines": 0},
        "runs": {"u1": ("02.000Z", "ok", 1, 0), "k1": ("10.000Z", "ok", 2, 1), "u2": ("40.000Z", "ok", 1, 0)}}


def _as_system(lines: list[bytes]) -> list[bytes]:
    """A local command's user lines as newer releases may write them: system lines of the same content."""
    return [_line({"type": "system", "subtype": "local_command", "uuid": (u := orjson.loads(line))["uuid"],
                   "sessionId": SESSION, "timestamp": u["timestamp"], "content": u["message"]["content"],
                   "level": "info"}) for line in lines]


def _goal(second: int) -> list[bytes]:
    """A local command that asks the model (Claude Code's /goal): its echo, its output, then what it gives the
    model to answer, as an isMeta line."""
    return [cc_user("g1", "<command-name>/goal</command-name>\n<command-message>goal</command-message>\n"
                          "<command-args>all tests pass</command-args>", second),
            cc_user("g2", "<local-command-stdout>Goal set: all tests pass</local-command-stdout>", second + 0.1),
            cc_user("g3", "Work toward the goal until this holds: all tests pass", second + 0.1, isMeta=True)]


@pytest.mark.parametrize("case", ["goal-answered", "goal-answered-in-system-lines", "goal-stopped-before-its-answer",
                                  "command-stopped-before-it-ran", "skill-the-model-ran"])
def test_a_command_that_asks_the_model_is_a_turn_of_its_own_and_one_that_does_not_ends_none(tmp_path, db, case):
    first = [cc_prompt("u1", "fix the tests", 0),
             cc_assistant("a1", "msg_1", {"type": "text", "text": "Fixed one."}, output=10, second=1, stop="end_turn")]
    interrupt = cc_user("i1", "[Request interrupted by user]", 12)
    answer = cc_assistant("a2", "msg_2", {"type": "text", "text": "All pass now."}, output=20, second=13,
                          request="req_2", stop="end_turn")
    skill = {"type": "tool_use", "id": "toolu_s", "name": "SlashCommand", "input": {"command": "/fix-tests"}}
    as_system = _as_system(_goal(10)[:2])
    lines = {
        "goal-answered": [*first, *_goal(10), answer],
        "goal-answered-in-system-lines": [*first, *as_system, _goal(10)[2], answer],
        "goal-stopped-before-its-answer": [*first, *_goal(10), interrupt],
        # Esc while a custom command expands: its echo, then the interruption; the model is never asked.
        "command-stopped-before-it-ran": [*first, cc_user("k1", "<command-name>/review</command-name>\n"
                                                                "<command-message>review</command-message>\n"
                                                                "<command-args>42</command-args>", 10), interrupt],
        # The model runs a command itself: the lines the tool adds are its turn's, tagged with the tool's call.
        "skill-the-model-ran": [cc_prompt("u1", "fix the tests", 0),
                                cc_assistant("a1", "msg_1", skill, output=10, second=1, stop="tool_use"),
                                cc_result("r1", "toolu_s", 2),
                                cc_user("s1", "<command-message>fix-tests is running…</command-message>\n"
                                              "<command-name>/fix-tests</command-name>", 2, sourceToolUseID="toolu_s"),
                                cc_user("s2", [{"type": "text", "text": "Run the tests, fix what fails."}], 2,
                                        isMeta=True, sourceToolUseID="toolu_s"),
                                answer],
    }[case]
    (_project(tmp_path) / f"{SESSION}.jsonl").write_bytes(b"".join(lines))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    picture = _commands_picture(db)
    del picture["usage"]["compactions"], picture["usage"]["tool_calls"]
    assert picture == {
        "goal-answered": {"usage": {"runs": 2, "interrupted_runs": 0, "llm_calls": 2, "rejected_lines": 0},
                          "runs": {"u1": ("00.000Z", "ok", 1, 0), "g1": ("10.000Z", "ok", 1, 0)}},
        "goal-answered-in-system-lines": {"usage": {"runs": 2, "interrupted_runs": 0, "llm_calls": 2,
                                                    "rejected_lines": 0},
                                          "runs": {"u1": ("00.000Z", "ok", 1, 0), "g1": ("10.000Z", "ok", 1, 0)}},
        "goal-stopped-before-its-answer": {"usage": {"runs": 2, "interrupted_runs": 1, "llm_calls": 1,
                                                     "rejected_lines": 0},
                                           "runs": {"u1": ("00.000Z", "ok", 1, 0),
                                                    "g1": ("10.000Z", "interrupted", 0, 0)}},
        "command-stopped-before-it-ran": {"usage": {"runs": 1, "interrupted_runs": 0, "llm_calls": 1,
                                                    "rejected_lines": 0},
                                          "runs": {"u1": ("00.000Z", "ok", 1, 0)}},
        "skill-the-model-ran": {"usage": {"runs": 1, "interrupted_runs": 0, "llm_calls": 2, "rejected_lines": 0},
                                "runs": {"u1": ("00.000Z", "ok", 2, 1)}},
    }[case]


@pytest.mark.parametrize("written_as", ["user-lines", "system-lines"])
def test_a_turn_stopped_after_a_local_command_ran_in_it_is_interrupted_however_the_command_is_written(
        tmp_path, db, written_as):
    """/model run while the model waits on a tool, then the user's Esc: the command ran, so the interruption
    is the turn's, not a command's stopped before it ran."""
    bash = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}
    caveat, *command = _local_command("m1", "model", "opus", "Set model to opus", 5)
    lines = [cc_prompt("u1", "build it", 0),
             cc_assistant("a1", "msg_1", bash, output=10, second=1, stop="tool_use"),
             caveat, *(command if written_as == "user-lines" else _as_system(command)),
             cc_user("i1", "[Request interrupted by user for tool use]", 6),
             cc_prompt("u2", "try again", 10),
             cc_assistant("a2", "msg_2", {"type": "text", "text": "Built."}, output=20, second=11,
                          request="req_2", stop="end_turn")]
    (_project(tmp_path) / f"{SESSION}.jsonl").write_bytes(b"".join(lines))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    picture = _commands_picture(db)
    assert picture["usage"]["interrupted_runs"] == 1
    assert picture["runs"] == {"u1": ("00.000Z", "interrupted", 1, 1), "u2": ("10.000Z", "ok", 1, 0)}


def test_a_spawn_s_label_and_mode_are_learnt_when_its_call_was_read_before_a_restart(tmp_path):
    """The result names the child, its call (read before, by another process) the label and the mode."""
    state = tmp_path / "state"
    shutil.copytree(CORPUS / "oc-transcript", state)
    parent = next(p for p in sorted(state.rglob("*.jsonl")) if b'"name":"sessions_spawn"' in p.read_bytes())
    whole = parent.read_bytes()
    cut = whole.index(b"\n", whole.index(b'"name":"sessions_spawn"')) + 1
    parent.write_bytes(whole[:cut])
    with followed_then_afresh(tmp_path, state) as ledgers:
        ledgers.pipeline.run_once()
        oc_transcript._WORDS_CACHE.clear()  # a restart: the call's line is behind the file's checkpoint
        parent.write_bytes(whole)
        ledgers.pipeline.run_once()
    assert dump(ledgers.followed, ("subagents",)) == dump(ledgers.afresh, ("subagents",))
    listed = cli_json(ledgers.followed, "subagents", "--limit", "500")
    assert listed and all(r["label"] and r["mode"] == "run" for r in listed)


@pytest.mark.parametrize("appended", [True, False], ids=["lines-read-from-the-archive", "nothing-left-to-read"])
def test_a_reset_session_has_the_same_key_followed_live_as_read_afresh(tmp_path, appended):
    old, new = "0c0c0c0c-1111-4111-8111-111111111111", "0d0d0d0d-2222-4222-8222-222222222222"
    sdir = _sessions_dir(tmp_path, "agent:main:main", old)
    live = sdir / f"{old}.jsonl"
    live.write_bytes(oc_header(old) + oc_user("u1", 1) + oc_assistant("a1", 2, cost=0.5)
                     + _oc_line({"type": "compaction", "id": "k1", "timestamp": "2026-10-01T08:00:02.500Z",
                                 "summary": "so far", "firstKeptEntryId": "a1", "tokensBefore": 5000}))
    with followed_then_afresh(tmp_path, tmp_path / "state") as ledgers:
        ledgers.pipeline.run_once()
        if appended:  # written just before the reset, and read from the archive
            with live.open("ab") as f:
                f.write(oc_user("u2", 3) + oc_assistant("a2", 4, cost=0.25))
        # A reset: the transcript is archived and the key names a new session.
        os.rename(live, sdir / f"{old}.jsonl.reset.2026-10-01T08-01-00.000Z")
        (sdir / "sessions.json").write_bytes(orjson.dumps({"agent:main:main": {"sessionId": new}}))
        (sdir / f"{new}.jsonl").write_bytes(oc_header(new) + oc_user("u1", 10) + oc_assistant("a1", 11, cost=1.0))
        ledgers.pipeline.catch_up()
    got = keys_seen(ledgers.followed, old)
    assert got[0] == [(f"agent:main:{old}", old, 0.75 if appended else 0.5), ("agent:main:main", new, 1.0)]
    assert got[1][1]["compactions"] != []
    assert got == keys_seen(ledgers.afresh, old)


def keys_seen(db: Path, old: str) -> tuple:
    """What the CLI shows of a reset's two sessions: every session's key, id and cost, and the detail of
    ``agent:main:main`` and of the old session's own key."""
    _clean(db)
    cli = [sys.executable, "-m", "agentledger"]
    sessions, *detail = (orjson.loads(subprocess.run(cli + args, env=cli_env(db), capture_output=True,
                                                     check=True).stdout)
                         for args in (["sessions", "--json"], ["session", "agent:main:main", "--json"],
                                      ["session", f"agent:main:{old}", "--json"]))
    return sorted((s["session_key"], s["session_id"], s["cost_usd"]) for s in sessions), detail


ARCHIVED = "0e0e0e0e-3333-4333-8333-333333333333"
ARCHIVE_NAMES = {  # suffix → the end reason and time its name says (None: a time that does not read)
    "reset.2026-10-01T08-01-00.000Z": ("reset", 1790841660000),
    "deleted.1790841700000": ("deleted", 1790841700000),
    "deleted.2026-10-01T08-01-99": ("deleted", None),
}
SECOND_2 = 1790841602000  # 2026-10-01T08:00:02Z, the time of oc_assistant(..., 2)


def _archive_states(db: Path) -> list[tuple]:
    _clean(db)
    return rows(db, "SELECT session_id, session_key, status, end_reason, ended_ms, first_ms, last_ms "
                           "FROM sessions ORDER BY session_id")


def _reconciled(writer: LedgerWriter) -> int:
    return reconcile(writer, now_ms()).archived_sessions


@pytest.mark.parametrize("suffix", ARCHIVE_NAMES)
def test_an_archive_ends_its_session_when_its_name_says_and_a_live_transcript_stays_open(tmp_path, db, suffix):
    live = "0f0f0f0f-4444-4444-8444-444444444444"
    sdir = _sessions_dir(tmp_path, "agent:main:main", live)
    (sdir / f"{ARCHIVED}.jsonl.{suffix}").write_bytes(oc_header(ARCHIVED) + oc_user("u1", 1) + oc_assistant("a1", 2))
    (sdir / f"{live}.jsonl").write_bytes(oc_header(live) + oc_user("u1", 5) + oc_assistant("a1", 6))
    ingest(db, tmp_path / "state", fmt="oc-transcript")
    settle(db)
    states = {row[0]: row[2:5] for row in _archive_states(db)}
    reason, ended = ARCHIVE_NAMES[suffix]
    assert states == {ARCHIVED: ("ended", reason, ended or SECOND_2), live: ("active", None, None)}
    conn = open_writer(db)
    try:
        assert _reconciled(LedgerWriter(conn)) == 0  # idempotent: nothing to commit a minute later
    finally:
        conn.close()


@pytest.mark.parametrize("appended", [False, True])
@pytest.mark.parametrize("suffix", ARCHIVE_NAMES)
def test_an_archived_session_ends_the_same_followed_live_as_read_afresh(tmp_path, suffix, appended):
    sdir = _sessions_dir(tmp_path, f"agent:main:{ARCHIVED}", ARCHIVED)
    live = sdir / f"{ARCHIVED}.jsonl"
    live.write_bytes(oc_header(ARCHIVED) + oc_user("u1", 1) + oc_assistant("a1", 2))
    archive = sdir / f"{ARCHIVED}.jsonl.{suffix}"
    with followed_then_afresh(tmp_path, tmp_path / "state") as ledgers:
        writer = ledgers.pipeline.writer
        ledgers.pipeline.run_once()
        assert _reconciled(writer) == 0  # live: still open
        if appended:  # written just before the archiving, and read from the archive
            with live.open("ab") as f:
                f.write(oc_user("u2", 3) + oc_assistant("a2", 4))
        os.rename(live, archive)
        ledgers.pipeline.catch_up()
        assert _reconciled(writer) == 1
        reason, ended = ARCHIVE_NAMES[suffix]
        if ended is not None:
            # A line written to the archive after the time its name says: counted, and the session
            # stays ended then.
            with archive.open("ab") as f:
                f.write(_oc_line({"type": "message", "id": "u9", "timestamp": "2026-10-01T09:00:00.000Z",
                                  "message": {"role": "user", "content": "late", "timestamp": 1}}))
            ledgers.pipeline.catch_up()
            assert _reconciled(writer) == 0
    settle(ledgers.afresh)
    got = _archive_states(ledgers.followed)
    assert [row[2:5] for row in got] == [("ended", reason, ended or SECOND_2 + 2000 * appended)]
    assert got == _archive_states(ledgers.afresh)


RESET_NEW = "0d0d0d0d-2222-4222-8222-222222222222"


def _index_after_reset(sessions: Path, child_listed: bool) -> None:
    """sessions.json once SPAWNER was reset: agent:main:main names a new session, and SPAWNER's child is
    listed as spawned by agent:main:main while ``child_listed``."""
    index = {"agent:main:main": {"sessionId": RESET_NEW}}
    if child_listed:
        index[SPAWNED_KEY] = {"sessionId": SPAWNED, "spawnedBy": "agent:main:main", "label": "review"}
    (sessions / "sessions.json").write_bytes(orjson.dumps(index))


def _family_of_main(db: Path) -> tuple:
    """Every session's key and id, and the instances and subagents ``session`` and ``tree`` show of
    agent:main:main."""
    _clean(db)
    detail, tree = cli_json(db, "session", "agent:main:main"), cli_json(db, "tree", "agent:main:main")
    return (sorted(rows(db, "SELECT session_key, session_id FROM sessions")),
            sorted(i["session_id"] for i in detail["instances"]),
            sorted(c["child_session_key"] for c in detail["subagents"]),
            sorted(c["session_key"] for c in tree["children"]))


@pytest.mark.parametrize("child_left", [False, True], ids=["child-listed", "child-left-since"])
def test_an_archive_has_the_key_its_listed_child_was_spawned_by_followed_live_as_read_afresh(tmp_path, child_left):
    # A reset session's archive was keyed as a guess, though sessions.json still listed the subagent it spawned
    # as spawned by agent:main:main: that instance and its subagent were missing from agent:main:main's family.
    state = tmp_path / "state"
    sessions = state / "agents" / "main" / "sessions"
    write_spawn_index(sessions)
    for session, lines in spawn_transcripts().items():
        (sessions / f"{session}.jsonl").write_bytes(b"".join(lines))
    with followed_then_afresh(tmp_path, state) as ledgers:
        ledgers.pipeline.run_once()
        (sessions / f"{SPAWNER}.jsonl").rename(sessions / f"{SPAWNER}.jsonl.reset.2026-10-01T10-00-00.000Z")
        _index_after_reset(sessions, child_listed=True)
        (sessions / f"{RESET_NEW}.jsonl").write_bytes(oc_header(RESET_NEW) + oc_user("n1", 1) + oc_assistant("n2", 2))
        ledgers.pipeline.catch_up()
        if child_left:
            assert ("agent:main:main", SPAWNER) in _family_of_main(ledgers.followed)[0]
            # The subagent's transcript archived and forgotten: nothing the spawner archive holds is new, so
            # only its key inputs say it is due another key.
            (sessions / f"{SPAWNED}.jsonl").rename(sessions / f"{SPAWNED}.jsonl.deleted.2026-10-01T11-00-00.000Z")
            _index_after_reset(sessions, child_listed=False)
            ledgers.pipeline.catch_up()
    got = _family_of_main(ledgers.followed)
    spawner_key = f"agent:main:{SPAWNER}" if child_left else "agent:main:main"
    # The subagent keeps its key either way: its parent's spawn names it once sessions.json no longer does.
    assert got[0] == sorted([("agent:main:main", RESET_NEW), (spawner_key, SPAWNER), (SPAWNED_KEY, SPAWNED)])
    assert got[1:] == (([RESET_NEW], [], []) if child_left else ([RESET_NEW, SPAWNER], [SPAWNED_KEY], [SPAWNED_KEY]))
    assert got == _family_of_main(ledgers.afresh)
    for db in (ledgers.followed, ledgers.afresh):
        assert spawn_row(db)[0][:2] == (spawner_key, f"{SPAWNER}:p0")


def test_a_subagent_read_live_while_unlisted_ends_as_a_fresh_read_of_its_archive_does(tmp_path, transcript_corpus):
    # Read while sessions.json did not list it, a subagent's live transcript took a guessed key, which is no
    # subagent's: its final turn gave no subagent end, and the subagent was cut off as interrupted. Its
    # parent's spawn names it live as it does once archived.
    state = tmp_path / "state"
    shutil.copytree(transcript_corpus / "agents", state / "agents")
    sessions = state / "agents" / "main" / "sessions"
    for path in state.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    archive = next(sessions.glob("9c82e72e-*.jsonl.deleted.*"))
    live = sessions / "9c82e72e-108e-45f2-82f3-4fdcaab71348.jsonl"
    key = "agent:main:subagent:68f7a048-23b6-445c-a412-0ac9f9a75e02"
    stepwise, fresh = tmp_path / "stepwise.db", tmp_path / "fresh.db"
    archive.rename(live)
    first = ingest(stepwise, state, fmt="oc-transcript")
    settle(stepwise)  # what `agentledger ingest` does last: a subagent still running is cut off
    assert _subagent_end(stepwise, key)[0][0][:2] == ("ended", "ok")
    live.rename(archive)
    second = ingest(stepwise, state, fmt="oc-transcript")
    settle(stepwise)
    whole = ingest(fresh, state, fmt="oc-transcript")
    settle(fresh)
    assert _subagent_end(stepwise, key) == _subagent_end(fresh, key)
    assert [row[:2] for row in _subagent_end(fresh, key)[0]] == [("ended", "ok")]
    assert _subagent_end(fresh, key)[1] == [("ended", "subagent")]
    for db in (stepwise, fresh):
        assert rows(db, "SELECT reason FROM subagents WHERE child_session_key = ?", (key,)) == [("stop",)]
    # Archiving it gives nothing new: no line counts twice.
    assert (second.lines, second.bytes, second.duplicates, second.rejects) == (0, 0, 0, 0)
    assert first.events + second.events == whole.events
    assert (first.lines, first.rejects) == (whole.lines, whole.rejects)
    assert rows(stepwise, "SELECT sum(lines), sum(offset) FROM files") == \
        rows(fresh, "SELECT sum(lines), sum(offset) FROM files")
    for sql in ("SELECT count(*) FROM events", "SELECT * FROM subagents ORDER BY child_session_key",
                "SELECT session_key, session_id, status, ended_ms, end_reason FROM sessions ORDER BY session_id"):
        assert rows(stepwise, sql) == rows(fresh, sql), sql
    _clean(stepwise)
    verify = subprocess.run([sys.executable, "-m", "agentledger", "verify"], env=cli_env(stepwise),
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_live_subagent_sessions_json_forgot_has_its_spawns_key_followed_live_as_read_afresh(tmp_path):
    # OpenClaw's maintenance pruned a running subagent's entry; its transcript stayed live. Followed, it kept
    # the subagent key; read afresh, it took a guessed key of its own: one more session, active, and a
    # subagent row naming a child with no session.
    state = tmp_path / "state"
    sessions = state / "agents" / "main" / "sessions"
    write_spawn_index(sessions)
    lines = spawn_transcripts()
    (sessions / f"{SPAWNER}.jsonl").write_bytes(b"".join(lines[SPAWNER]))
    (sessions / f"{SPAWNED}.jsonl").write_bytes(b"".join(lines[SPAWNED][:2]))
    with followed_then_afresh(tmp_path, state) as ledgers:
        ledgers.pipeline.run_once()
        (sessions / "sessions.json").write_bytes(orjson.dumps({"agent:main:main": {"sessionId": SPAWNER}}))
        with (sessions / f"{SPAWNED}.jsonl").open("ab") as f:
            f.write(lines[SPAWNED][2])
        ledgers.pipeline.catch_up()
    picture = "SELECT session_key, session_id, status, end_reason FROM sessions ORDER BY session_id"
    for db in (ledgers.followed, ledgers.afresh):
        settle(db)
        assert rows(db, picture) == [("agent:main:main", SPAWNER, "active", None),
                                            (SPAWNED_KEY, SPAWNED, "ended", "subagent")], db
        assert _subagent_end(db, SPAWNED_KEY)[0][0][:2] == ("ended", "ok")
    assert usage(ledgers.afresh)["subagent_sessions"] == usage(ledgers.followed)["subagent_sessions"] == 1


ROOT_KEY = f"agent:claude-code:{SESSION}"
# API errors kept no key and no branch, and were the root session's, their events too, whatever file they were in.
_KEYLESS_ERRORS = ("UPDATE llm_calls SET call_key = NULL, branch = NULL, sidechain = 0, session_id = :session, "
                   "session_key = :root WHERE error IS NOT NULL",
                   "UPDATE events SET session_key = :root "
                   "WHERE id IN (SELECT event_id FROM llm_calls WHERE error IS NOT NULL)")
# What an agentledger from before schema 0039 left of each case's rows, where a read now leaves more; its
# rollups counted those rows as they were (rebuilt from them once faked).
_OLDER_ROWS = {
    # No turn failed with an API error.
    "api-error": (*_KEYLESS_ERRORS, "UPDATE runs SET status = 'ok', error = NULL WHERE status = 'error'"),
    "nested-task": ("UPDATE subagents SET branch = NULL, parent_session_key = :root",
                    "UPDATE events SET session_key = :root WHERE kind = 'subagent.spawn'"),
    "refused-task": ("UPDATE subagents SET status = 'interrupted', ended_ms = NULL, outcome = NULL, end_rank = 0",),
    "subagent-compaction": ("UPDATE compactions SET session_key = :root",
                            "UPDATE events SET session_key = :root WHERE kind = 'compaction'"),
    "subagent-api-error": _KEYLESS_ERRORS,
}


def _upgrade_case(project: Path, case: str) -> dict[Path, list[bytes]]:
    sub = project / SESSION / "subagents" / f"agent-{TASK_AGENT}.jsonl"
    if case == "api-error":
        return {project / f"{SESSION}.jsonl": _api_error_turns()}
    if case == "nested-task":
        return _nested_task_files(project)
    if case == "refused-task":
        return {project / f"{SESSION}.jsonl": _refused_task_lines()}
    parent, child, _ = _task_lines()
    inside = (_compacted(5, 150_000) if case == "subagent-compaction"
              else _side(TASK_AGENT, cc_api_error("c_err", 4, OVERLOADED)))
    return {project / f"{SESSION}.jsonl": parent, sub: [*child[:3], inside, *child[3:]]}


def _shown(db: Path) -> dict:
    """What the queries show of runs, subagents, sessions and the session's tree."""
    sessions = cli_json(db, "sessions")
    return {"runs": [(r["run_id"], r["status"], r.get("error")) for r in cli_json(db, "runs", "--limit", "100")],
            "usage": {k: cli_json(db, "usage")[k] for k in ("failed_runs", "llm_errors", "compactions")},
            "subagents": [(s["child_session_key"], s["parent_session_key"], s["status"], s["outcome"])
                          for s in cli_json(db, "subagents")],
            "sessions": [(s["session_key"], s["llm_errors"], len(cli_json(db, "session", s["session_key"])
                                                                 .get("compactions", []))) for s in sessions],
            "tree": _tree(db)}


@pytest.mark.parametrize(("case", "cut"), [*((case, None) for case in _OLDER_ROWS), ("api-error", 10)],
                         ids=[*_OLDER_ROWS, "api-error-read-to-a-side-error"])
def test_an_older_ledger_shows_what_a_fresh_read_does_once_migrated(tmp_path, case, cut):
    """An older agentledger kept the rows a read of these files makes now, less what it did not know: API
    errors of no branch, subagents' Tasks under the root, refused Tasks' subagents open, a subagent's own
    compactions and API errors in its parent. Migrating, and reading the rest of the files, shows what one
    fresh read of them does; a side question's API error kept after its turn's end fails no turn."""
    files = _upgrade_case(_project(tmp_path / "fresh"), case)
    for path, lines in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(lines))
    ingest(tmp_path / "fresh.db", tmp_path / "fresh" / "claude", fmt="claude-code")
    settle(tmp_path / "fresh.db")
    files = _upgrade_case(_project(tmp_path / "old"), case)
    for path, lines in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(lines[:cut]))
    db = tmp_path / "old.db"
    ingest(db, tmp_path / "old" / "claude", fmt="claude-code")
    settle(db)
    conn = open_writer(db)
    try:
        for sql in _OLDER_ROWS[case]:
            conn.execute(sql, {"session": SESSION, "root": ROOT_KEY})
        rebuild_rollups(conn)
        as_of_version(conn, 38)
    finally:
        conn.close()
    for path, lines in files.items():
        path.write_bytes(b"".join(lines))
    ingest(db, tmp_path / "old" / "claude", fmt="claude-code")  # migrates first
    settle(db)
    assert _shown(db) == _shown(tmp_path / "fresh.db")
