"""The shared oc-transcript and claude-code corpora give exactly the totals counted while they were written."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from conftest import cli_json, forbid_call_scans, ingest, listed_as_counted, settle
from ledgerdump import dump, scalar

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader
from agentledger.ledger.verify import check_rollups


def _ingest_settled(db: Path, root: Path, fmt: str) -> None:
    ingest(db, root, fmt=fmt)
    settle(db)


def _read(db: Path, fn, *args):
    conn = open_reader(db)
    try:
        return fn(conn, *args)
    finally:
        conn.close()


def _rows(db: Path, sql: str) -> list[tuple]:
    return _read(db, lambda conn: conn.execute(sql).fetchall())


@pytest.fixture(scope="module")
def transcript_db(tmp_path_factory, transcript_corpus) -> Path:
    db = tmp_path_factory.mktemp("oc-transcript") / "ledger.db"
    _ingest_settled(db, transcript_corpus, "oc-transcript")
    return db


@pytest.fixture(scope="module")
def claude_db(tmp_path_factory, claude_corpus) -> Path:
    db = tmp_path_factory.mktemp("claude-code") / "ledger.db"
    _ingest_settled(db, claude_corpus, "claude-code")
    return db


def _expected(root: Path) -> dict:
    return json.loads((root / "expected.json").read_text())


def _assert_tokens(u: dict, tokens: dict) -> None:
    assert (u["input_tokens"], u["output_tokens"], u["cache_read_tokens"], u["cache_write_tokens"],
            u["total_tokens"]) == (tokens["input"], tokens["output"], tokens["cacheRead"], tokens["cacheWrite"],
                                   tokens["total"])


def _per_model(db: Path) -> dict:
    rows = _rows(db, "SELECT model, count(*), sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), "
                     "sum(cache_write_tokens), sum(total_tokens) FROM llm_calls WHERE error IS NULL GROUP BY model")
    return {m: dict(zip(("llm_calls", "input", "output", "cacheRead", "cacheWrite", "total"), r)) for m, *r in rows}


def _per_day(db: Path) -> dict:
    rows = _rows(db, "SELECT date(ts_ms / 1000, 'unixepoch'), count(*), sum(input_tokens), sum(output_tokens), "
                     "sum(cache_read_tokens), sum(cache_write_tokens) FROM llm_calls WHERE error IS NULL GROUP BY 1")
    return {d: dict(zip(("llm_calls", "input", "output", "cacheRead", "cacheWrite"), r)) for d, *r in rows}


def _spanning_midnight(db: Path) -> int:
    """Top-level sessions active on both sides of a UTC midnight."""
    return scalar(db, "SELECT count(*) FROM sessions WHERE session_key NOT LIKE '%:subagent:%' AND "
                      "date(coalesce(started_ms, first_ms) / 1000, 'unixepoch') != date(last_ms / 1000, 'unixepoch')")


def _want(table: dict, keys: tuple[str, ...]) -> dict:
    return {k: {f: v[f] for f in keys} for k, v in table.items()}


# -- oc-transcript ---------------------------------------------------------------------------------

def test_transcript_totals(transcript_db, transcript_corpus):
    want = _expected(transcript_corpus)
    t = want["totals"]
    u = _read(transcript_db, queries.usage, queries.Window())
    _assert_tokens(u, t["tokens"])
    # Reset and deleted archives hold most of the spend: they are read, and counted once.
    assert scalar(transcript_db, "SELECT sum(cost_pico) FROM llm_calls") == t["cost_pico_usd"]
    assert u["cost_usd"] == pytest.approx(t["cost_usd"], abs=1e-6)
    assert u["unpriced_calls"] == 0
    assert u["llm_calls"] == t["llm_calls"]
    assert u["llm_errors"] == want["detail"]["assistant_error_lines"]
    assert u["runs"] == t["runs"]
    assert (u["tool_calls"], u["tool_errors"]) == (t["tool_calls"], t["failed_tool_calls"])
    assert scalar(transcript_db, "SELECT count(*) FROM tool_calls WHERE status = 'interrupted'") \
        == t["orphaned_tool_calls"]
    # Every orphaned turn is interrupted, one whose refused first call (a 429) was retried too; no turn's
    # last call failed, so none failed.
    assert (u["interrupted_runs"], u["failed_runs"], u["open_runs"]) == (t["orphaned_runs"], 0, 0)
    assert u["subagents"] == t["subagents"]
    assert u["compactions"] == t["compactions"]
    assert u["rejected_lines"] == want["lines"]["malformed"]["total"]
    # Archived subagent transcripts, which sessions.json no longer lists, are still subagents.
    assert (u["sessions"], u["subagent_sessions"]) == (t["sessions"], t["subagent_sessions"])
    detail = want["detail"]
    nonzero = sum(len(re.findall(rb'"exitCode":[1-9]', p.read_bytes()))
                  for p in transcript_corpus.glob("agents/*/sessions/*.jsonl*"))
    assert nonzero > 0
    assert _rows(transcript_db, "SELECT status, count(*) FROM tool_calls WHERE exit_code != 0 GROUP BY 1") \
        == [("ok", nonzero)]
    assert scalar(transcript_db, "SELECT count(*) FROM events WHERE kind = 'model_change'") == detail["model_change"]
    assert _spanning_midnight(transcript_db) == t["sessions_spanning_midnight_utc"]
    assert _read(transcript_db, check_rollups) == []


@pytest.mark.parametrize("fixture", ["transcript_db", "claude_db"])
def test_runs_count_model_calls_as_usage_does(request, fixture):
    """A failed call (an error turn, a synthetic API-error line) is a run's llm_error, not one of its llm_calls."""
    db = request.getfixturevalue(fixture)
    u = _read(db, queries.usage, queries.Window())
    runs = _read(db, queries.runs, queries.Window())
    assert u["llm_errors"] > 0
    assert sum(r["llm_calls"] for r in runs) == u["llm_calls"]
    assert sum(r["llm_errors"] for r in runs) == u["llm_errors"]


def test_transcript_traps_are_avoided(transcript_db, transcript_corpus):
    traps = _expected(transcript_corpus)["detail"]["traps"]
    u = _read(transcript_db, queries.usage, queries.Window())
    assert u["total_tokens"] != traps["tokens_total_if_reset_and_deleted_archives_are_skipped"]
    assert u["cost_usd"] != pytest.approx(traps["cost_usd_if_sessions_json_estimatedCostUsd_is_summed"])


def test_transcript_per_model_and_day(transcript_db, transcript_corpus):
    want = _expected(transcript_corpus)
    keys = ("llm_calls", "input", "output", "cacheRead", "cacheWrite")
    assert _want(_per_model(transcript_db), keys) == _want(want["per_model"], keys)
    assert _per_day(transcript_db) == _want(want["per_day"], keys)
    cost = dict(_rows(transcript_db, "SELECT model, sum(cost_pico) FROM llm_calls GROUP BY model"))
    assert cost == {m: v["cost_pico_usd"] for m, v in want["per_model"].items()}


def test_transcript_sessions_sample(transcript_db, transcript_corpus):
    by_id = {s["session_id"]: s for s in _read(transcript_db, queries.sessions, queries.Window())}
    listed = {entry["sessionId"] for index in transcript_corpus.glob("agents/*/sessions/sessions.json")
              for entry in json.loads(index.read_text()).values()}
    sample = _expected(transcript_corpus)["sessions_sample"]
    children = [child for want in sample for child in want["children"]]
    assert any(child["sessionId"] not in listed for child in children)
    for want in sample + children:
        got = by_id[want["sessionId"]]
        assert got["agent_id"] == want["agentId"]
        # An archived session is no longer in sessions.json: it keeps a key of its own, unless it was a
        # subagent, whose parent's spawn still names it (no archive of the sample spawned a subagent
        # sessions.json still lists, whose spawnedBy would name its key).
        key = want["sessionKey"] if want["sessionId"] in listed or want["kind"] == "subagent" \
            else f"agent:{want['agentId']}:{want['sessionId']}"
        assert got["session_key"] == key
        assert got["is_subagent"] == (want["kind"] == "subagent")
        assert (got["runs"], got["llm_calls"], got["tool_calls"]) == (want["runs"], want["llm_calls"],
                                                                     want["tool_calls"])
        assert (got["input_tokens"], got["output_tokens"]) == (want["tokens"]["input"], want["tokens"]["output"])


# Reset archives sessions.json forgot, each with the subagent it spawned that sessions.json still lists.
_SPAWNER_ARCHIVES = {
    "2a7d0d39-8946-4396-a6f5-eeda8063a19a":
        ("agent:main:main", "agent:main:subagent:52f3a66c-6404-46a1-8e51-f5752f0c3344"),
    "32009995-5111-4928-b736-aebe23f8ab87":
        ("agent:work:main", "agent:work:subagent:8e777309-3c45-4068-be7b-51d1b03346d3"),
}


def test_transcript_archives_are_under_the_key_their_listed_subagents_were_spawned_by(transcript_db,
                                                                                      transcript_corpus):
    spawned_by = {key: entry.get("spawnedBy") for index in transcript_corpus.glob("agents/*/sessions/sessions.json")
                  for key, entry in json.loads(index.read_text()).items()}
    keys = dict(_rows(transcript_db, "SELECT session_id, session_key FROM sessions"))
    for archive, (key, child) in _SPAWNER_ARCHIVES.items():
        assert spawned_by[child] == key
        assert keys[archive] == key
        detail = cli_json(transcript_db, "session", key)
        assert archive in [i["session_id"] for i in detail["instances"]]
        assert child in [c["child_session_key"] for c in detail["subagents"]]
        assert child in [c["session_key"] for c in cli_json(transcript_db, "tree", key)["children"]]


def _archived_at(stamp: str) -> int:
    """An archive name's time: Unix ms, or ISO 8601 with dashes for the time's colons."""
    if stamp.isdigit():
        return int(stamp)
    day, _, time = stamp.partition("T")
    return int(datetime.fromisoformat(f"{day}T{time[:8].replace('-', ':')}{time[8:]}").timestamp() * 1000)


def test_transcript_archives_end_their_sessions_and_live_transcripts_stay_open(transcript_db, transcript_corpus):
    archives = {}
    for path in transcript_corpus.glob("agents/*/sessions/*.jsonl.*"):
        sid, _, archive = path.name.partition(".jsonl.")
        reason, _, stamp = archive.partition(".")
        archives[sid] = (reason, _archived_at(stamp))
    assert len(archives) == 16
    sessions = {s["session_id"]: s for s in cli_json(transcript_db, "sessions", "--limit", "1000")}
    for sid, (reason, at) in archives.items():
        got = sessions[sid]
        if got["is_subagent"]:  # its own turn's end came first, and says more than the deletion
            assert (reason, got["status"], got["end_reason"]) == ("deleted", "ended", "subagent")
            assert _ms(got["ended_at"]) <= at
        else:
            assert (got["status"], got["end_reason"], _ms(got["ended_at"])) == ("ended", reason, at), sid
    live = [s for sid, s in sessions.items() if sid not in archives and not s["is_subagent"]]
    assert len(live) == 31 and {s["status"] for s in live} == {"active"}


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def _assert_instance_family(db: Path, sid: str, family_usd: float, children: list[str]) -> None:
    """``session``, ``tree`` and ``timeline`` of a session id: that instance alone, with the subagents it
    spawned and their cost (a reset starts a new instance of the key; the others' are not its)."""
    d = cli_json(db, "session", sid)
    assert [i["session_id"] for i in d["instances"]] == [sid]
    assert d["family_cost_usd"] == pytest.approx(family_usd, abs=1e-6), sid
    assert sorted(c["child_session_key"] for c in d["subagents"]) == sorted(children), sid
    node = cli_json(db, "tree", sid)
    assert node["cumulative_cost_usd"] == pytest.approx(family_usd, abs=1e-6), sid
    assert sorted(c["session_key"] for c in node["children"]) == sorted(children)
    assert sorted(i["id"] for i in cli_json(db, "timeline", sid, "--kinds", "subagent")) == sorted(children)


def test_transcript_session_id_family_is_that_instance_s(transcript_db, transcript_corpus):
    for want in _expected(transcript_corpus)["sessions_sample"]:
        _assert_instance_family(transcript_db, want["sessionId"], want["cost_including_children"],
                                [c["sessionKey"] for c in want["children"]])


def test_transcript_sessions_list_the_calls_they_count(transcript_db, monkeypatch):
    forbid_call_scans(monkeypatch)
    assert _read(transcript_db, listed_as_counted) == []


def test_transcript_reingest_and_copy_change_nothing(tmp_path, transcript_corpus):
    db = tmp_path / "ledger.db"
    ingest(db, transcript_corpus, fmt="oc-transcript")
    before = dump(db)
    again = ingest(db, transcript_corpus, fmt="oc-transcript")
    assert (again.lines, again.events) == (0, 0)
    copy = tmp_path / "copy"
    shutil.copytree(transcript_corpus, copy)
    assert ingest(db, copy, fmt="oc-transcript").events == 0
    assert dump(db) == before


def _copy_missing(src: Path, dst: Path) -> None:
    """Every file under ``src`` not at ``dst`` yet, copied there (a file already there is left as read)."""
    for path in src.rglob("*"):
        target = dst / path.relative_to(src)
        if path.is_file() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def test_transcript_subagents_are_the_same_whichever_transcripts_are_read_first(tmp_path, transcript_db,
                                                                                 transcript_corpus):
    # A subagent listed in sessions.json is spawned by its own header and by its parent's sessions_spawn
    # result: whichever was read last decided its parent run, label and spawn time.
    copy = tmp_path / "corpus"
    for index in transcript_corpus.glob("agents/*/sessions/sessions.json"):
        children = [e["sessionId"] for e in json.loads(index.read_bytes()).values() if e.get("spawnedBy")]
        for path in [index, *(index.parent / f"{sid}.jsonl" for sid in children)]:
            if path.exists():
                (copy / index.parent.relative_to(transcript_corpus)).mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copy / path.relative_to(transcript_corpus))
    db = tmp_path / "ledger.db"
    ingest(db, copy, fmt="oc-transcript")  # the subagents' own transcripts first, then the rest
    _copy_missing(transcript_corpus, copy)
    _ingest_settled(db, copy, "oc-transcript")
    rows = "SELECT * FROM subagents ORDER BY child_session_key"
    assert _rows(db, rows) == _rows(transcript_db, rows)
    assert _read(db, check_rollups) == []


def test_a_subagent_has_the_label_and_mode_its_parent_s_spawn_call_asked_for(transcript_db, transcript_corpus):
    """Also a subagent whose own transcript was archived, which sessions.json no longer lists with its label."""
    asked, answered = {}, {}
    for path in transcript_corpus.rglob("*.jsonl*"):
        for line in path.read_bytes().splitlines():
            if b"sessions_spawn" not in line:
                continue
            msg = json.loads(line).get("message", {})
            for block in msg.get("content") or []:
                if isinstance(block, dict) and block.get("name") == "sessions_spawn":
                    asked[block["id"]] = block["arguments"]
            if msg.get("role") == "toolResult" and not msg.get("isError"):
                child = json.loads(msg["content"][0]["text"]).get("childSessionKey")
                answered[child] = asked[msg["toolCallId"]]
    rows = {r["child_session_key"]: r for r in cli_json(transcript_db, "subagents", "--limit", "500")}
    assert answered and set(answered) <= set(rows)
    for child, args in answered.items():
        assert (rows[child]["label"], rows[child]["mode"]) == (args["label"], args["mode"]), child


# -- claude-code -----------------------------------------------------------------------------------

def test_a_timeline_shows_a_call_of_no_model_as_a_dash_not_as_none(claude_db):
    """Claude Code's API-error placeholders name no model."""
    (session_id,) = _rows(claude_db, "SELECT session_id FROM llm_calls WHERE model IS NULL LIMIT 1")[0]
    items = cli_json(claude_db, "timeline", session_id, "--json")
    unnamed = [i for i in items if i["kind"] == "llm" and i["what"].startswith("- ")]
    assert unnamed and not any("None" in i["what"] for i in items)


def test_claude_code_totals(claude_db, claude_corpus):
    want = _expected(claude_corpus)
    t = want["totals"]
    u = _read(claude_db, queries.usage, queries.Window())
    _assert_tokens(u, t["tokens"])
    assert scalar(claude_db, "SELECT sum(cache_write_1h_tokens) FROM llm_calls") == t["tokens"]["cacheWrite1h"]
    # Claude Code writes no cost: every call is priced from the offline table at its date.
    assert u["unpriced_calls"] == 0
    assert scalar(claude_db, "SELECT count(*) FROM llm_calls WHERE error IS NULL AND cost_source != 'priced'") == 0
    assert u["cost_usd"] == pytest.approx(t["reference_cost_usd"], abs=1e-6)
    assert u["llm_calls"] == t["llm_calls"]
    assert u["llm_errors"] == want["detail"]["assistant_synthetic_error_lines"]
    assert (u["tool_calls"], u["tool_errors"]) == (t["tool_calls"], t["failed_tool_calls"])
    # Task subagents are sessions of their own; /btw side questions are not (they stay in their session).
    assert (u["sessions"], u["subagent_sessions"]) == (t["sessions"], t["subagent_sessions"])
    assert t["subagent_sessions"] == want["detail"]["task_subagents"]
    assert u["runs"] == t["runs"]
    # Orphans are the last turns of killed sessions, left waiting on a tool; the turns users stopped are
    # interrupted too, with an end of their own; every other turn ended, said so or not.
    interrupted = dict(_rows(claude_db, "SELECT coalesce(stop_reason, ''), count(*) FROM runs "
                                        "WHERE status = 'interrupted' GROUP BY 1"))
    assert interrupted == {"": t["orphaned_runs"], "user_interrupt": want["detail"]["interrupt_lines"]}
    assert (u["interrupted_runs"], u["open_runs"], u["failed_runs"]) == (
        t["orphaned_runs"] + want["detail"]["interrupt_lines"], 0, 0)
    assert scalar(claude_db, "SELECT count(*) FROM tool_calls WHERE status = 'interrupted'") \
        == t["orphaned_tool_calls"]
    assert u["subagents"] == t["subagents"]
    assert u["compactions"] == t["compactions"]
    assert u["rejected_lines"] == want["lines"]["malformed"]["total"]
    assert _spanning_midnight(claude_db) == t["sessions_spanning_midnight_utc"]
    assert _read(claude_db, check_rollups) == []


def test_a_task_s_side_branch_read_before_its_result_leaves_the_parent_as_one_read_does(tmp_path, claude_corpus):
    """The side branch's calls are read into the parent first, then move to the subagent once its Task's
    result names it: the parent's models are those of its own calls, as if the file were read at once."""
    src = claude_corpus / "projects" / "-home-dev-src-web-frontend" / "d4db2feb-93ac-490d-9e4a-803792719d71.jsonl"
    key = "agent:claude-code:d4db2feb-93ac-490d-9e4a-803792719d71"
    folder = tmp_path / "steps" / "projects" / "p"
    folder.mkdir(parents=True)
    (folder / src.name).write_bytes(b"".join(src.read_bytes().splitlines(keepends=True)[:10]))
    ingest(tmp_path / "steps.db", tmp_path / "steps", fmt="claude-code")
    shutil.copy(src, folder / src.name)
    ingest(tmp_path / "steps.db", tmp_path / "steps", fmt="claude-code")
    ingest(tmp_path / "once.db", tmp_path / "steps", fmt="claude-code")
    by_model = [_read(tmp_path / db, queries.session_detail, key)["cost_by_model"] for db in ("steps.db", "once.db")]
    assert by_model[0] == by_model[1]
    assert all(m["llm_calls"] or m["llm_errors"] for m in by_model[0])


def _prompt_lines(lines: list[bytes]) -> list[int]:
    """Where a main transcript's prompts are (lines a user typed, each the start of a run)."""
    at = []
    for n, line in enumerate(lines):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if obj.get("type") == "user" and not obj.get("isSidechain") and not obj.get("isMeta") \
                and not obj.get("isCompactSummary") and isinstance((obj.get("message") or {}).get("content"), str):
            at.append(n)
    return at


def _runs(db: Path) -> list[dict]:
    return sorted(cli_json(db, "runs", "--limit", "10000"), key=lambda r: r["run_id"])


def test_side_branch_calls_are_in_the_run_of_their_time_whichever_prompt_was_read_first(tmp_path, claude_corpus):
    """Each session with side-branch transcripts, its own transcript read up to one of its prompts and every
    side branch whole, then the rest: a side branch's call made after that prompt is in that prompt's run,
    as in a read of the final files, not in the run that was the session's latest when the call was read."""
    sessions = sorted(path.parent.with_suffix(".jsonl") for path in claude_corpus.glob("projects/*/*/subagents"))
    assert sessions
    for session in sessions:
        lines = session.read_bytes().splitlines(keepends=True)
        folder = tmp_path / session.stem / "projects" / "p"
        shutil.copytree(session.with_suffix("") / "subagents", folder / session.stem / "subagents")
        (folder / session.name).write_bytes(b"".join(lines))
        ingest(tmp_path / session.stem / "fresh.db", folder.parents[1], fmt="claude-code")
        want = _runs(tmp_path / session.stem / "fresh.db")
        for cut in _prompt_lines(lines):
            db = tmp_path / session.stem / f"cut-{cut}.db"
            (folder / session.name).write_bytes(b"".join(lines[:cut]))
            ingest(db, folder.parents[1], fmt="claude-code")
            (folder / session.name).write_bytes(b"".join(lines))
            ingest(db, folder.parents[1], fmt="claude-code")
            assert _runs(db) == want, (session.stem, cut)
            assert _read(db, check_rollups) == [], (session.stem, cut)


def test_claude_code_traps_are_avoided(claude_db, claude_corpus):
    traps = _expected(claude_corpus)["detail"]["traps"]
    u = _read(claude_db, queries.usage, queries.Window())
    assert u["total_tokens"] != traps["tokens_if_every_assistant_line_is_summed"]["total"]
    assert u["total_tokens"] != traps["tokens_if_sidechain_replays_are_counted"]["total"]
    assert u["llm_calls"] != traps["llm_calls_if_sidechain_replays_are_counted"]


def test_claude_code_per_model_and_day(claude_db, claude_corpus):
    want = _expected(claude_corpus)
    keys = ("llm_calls", "input", "output", "cacheRead", "cacheWrite")
    assert _want(_per_model(claude_db), keys) == _want(want["per_model"], keys)
    assert _per_day(claude_db) == _want(want["per_day"], keys)
    cost = dict(_rows(claude_db, "SELECT model, sum(cost_pico) FROM llm_calls WHERE error IS NULL GROUP BY 1"))
    for model, v in want["per_model"].items():
        assert cost[model] / 10**12 == pytest.approx(v["reference_cost_usd"], abs=1e-6), model


def _tokens(row: dict) -> tuple[int, ...]:
    return row["input_tokens"], row["output_tokens"], row["cache_read_tokens"], row["cache_write_tokens"]


def _want_tokens(want: dict) -> tuple[int, ...]:
    return want["input"], want["output"], want["cacheRead"], want["cacheWrite"]


def test_claude_code_sessions_are_keyed_by_their_session_id(claude_db, claude_corpus):
    by_id = {s["session_id"]: s for s in _read(claude_db, queries.sessions, queries.Window())}
    sample = _expected(claude_corpus)["sessions_sample"]
    assert any(want["children"] for want in sample)
    for want in sample:
        sid = want["sessionId"]
        got = by_id[sid]
        assert got["session_key"] == f"agent:claude-code:{sid}"
        assert (got["source"], got["is_subagent"]) == ("claude-code", False)
        # The session's own spend leaves its Task subagents out; its family (what ccusage calls
        # the session) puts them back.
        assert _tokens(got) == _want_tokens(want["tokens"])
        assert got["llm_calls"] == want["llm_calls"]
        # Tool calls too: a subagent's are its own, not its parent's.
        assert (got["tool_calls"], got["tool_errors"]) == (want["tool_calls"], want["failed_tool_calls"])
        detail = _read(claude_db, queries.session_detail, got["session_key"])
        assert detail["family_cost_usd"] == pytest.approx(want["reference_cost_usd_including_children"], abs=1e-6)
        assert sorted(c["child_session_key"] for c in detail["subagents"]) == sorted(
            f"agent:claude-code:subagent:{sid}/{c['agentId']}" for c in want["children"])
        for child in want["children"]:
            row = by_id[f"{sid}/{child['agentId']}"]
            assert (row["is_subagent"], row["status"], row["end_reason"]) == (True, "ended", "subagent")
            assert row["runs"] == child["runs"] == 0
            assert _tokens(row) == _want_tokens(child["tokens"])
            assert row["llm_calls"] == child["llm_calls"]
            assert (row["tool_calls"], row["tool_errors"]) == (child["tool_calls"], child["failed_tool_calls"])


def test_claude_code_skips_file_snapshots_without_an_event(claude_db, claude_corpus):
    want = _expected(claude_corpus)
    assert scalar(claude_db, "SELECT count(*) FROM events WHERE kind = 'file-history-snapshot'") == 0
    assert scalar(claude_db, "SELECT sum(lines) FROM files") == want["lines"]["physical"]


def _asked_paths(root: Path, block_type: str, field: str) -> list[str]:
    """Every file path the corpus's tool calls were asked to touch, read from the raw lines (one per
    call however many lines repeat it: streamed and side-branch copies)."""
    import orjson

    paths: dict[str, str] = {}
    for path in root.rglob("*.jsonl*"):
        for line in path.read_bytes().splitlines():
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            content = (obj.get("message") or {}).get("content") if isinstance(obj, dict) else None
            for block in content if isinstance(content, list) else ():
                args = block.get(field) if isinstance(block, dict) and block.get("type") == block_type else None
                target = next((args[f] for f in ("file_path", "notebook_path", "path")
                               if isinstance(args, dict) and isinstance(args.get(f), str) and args[f]), None)
                if target is not None:
                    paths[block["id"]] = target
    return sorted(paths.values())


@pytest.mark.parametrize("fmt", ["oc-transcript", "claude-code"])
def test_files_lists_what_transcript_tool_calls_were_asked_to_touch(request, fmt):
    # Only telemetry (tool.end's filePath) and hooks named files: `files` was empty for transcripts.
    db, root = ((request.getfixturevalue("transcript_db"), request.getfixturevalue("transcript_corpus"))
                if fmt == "oc-transcript" else
                (request.getfixturevalue("claude_db"), request.getfixturevalue("claude_corpus")))
    block, field = ("toolCall", "arguments") if fmt == "oc-transcript" else ("tool_use", "input")
    listed = _read(db, lambda conn, w: list(queries.files(conn, w)), queries.Window(limit=queries.MAX_LIMIT))
    assert sorted(r["file_path"] for r in listed) == _asked_paths(root, block, field)


def test_claude_code_session_id_family_is_that_session_s(claude_db, claude_corpus):
    for want in _expected(claude_corpus)["sessions_sample"]:
        sid = want["sessionId"]
        _assert_instance_family(claude_db, sid, want["reference_cost_usd_including_children"],
                                [f"agent:claude-code:subagent:{sid}/{c['agentId']}" for c in want["children"]])


def test_claude_code_sessions_list_the_calls_they_count(claude_db, claude_corpus, monkeypatch):
    forbid_call_scans(monkeypatch)
    assert _read(claude_db, listed_as_counted) == []
    # A Task subagent's calls name its parent's turn, but are the subagent's: listed there, not in the parent.
    parent = next(w for w in _expected(claude_corpus)["sessions_sample"] if w["children"])
    own = {s["session_id"]: s for s in _read(claude_db, queries.sessions, queries.Window())}
    items = cli_json(claude_db, "timeline", parent["sessionId"])
    assert sum(i["cost_usd"] for i in items if i["kind"] == "llm") == pytest.approx(
        own[parent["sessionId"]]["cost_usd"], abs=1e-9)
    for child in parent["children"]:
        sid = f"{parent['sessionId']}/{child['agentId']}"
        kinds = [i["kind"] for i in cli_json(claude_db, "timeline", sid)]
        assert (kinds.count("llm"), kinds.count("tool")) == (child["llm_calls"], child["tool_calls"]), sid
        assert len(cli_json(claude_db, "session", sid)["tool_calls"]) == child["tool_calls"]
