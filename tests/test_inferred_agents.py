"""Whose spend a line that names no agent is: its run's agent, else its session's, else its folder's
(FORMATS.md §1: llm.call carries agentId "unknown"; OpenClaw's global session scope keys sessions ``global``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import cli_env, cli_json, ingest
from ledgerdump import verify
from logwriter import BASE_TS, event_id

MODEL = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
USAGE = {"input": 300, "output": 30, "cacheRead": 0, "cacheWrite": 0, "total": 330}


def line(n: int, kind: str, data: dict, *, agent: str = "unknown", key: str | None = "global",
         session: str | None = "s1", run: str | None = "r1") -> bytes:
    """A telemetry line at BASE_TS + n: ``None`` leaves an id out, as OpenClaw writes "unknown"."""
    ev = {"id": event_id(n), "ts": BASE_TS + n, "seq": n, "agentId": agent, "sessionKey": key or "unknown",
          "sessionId": session or "unknown", "kind": kind, "data": data, "source": "hook"}
    if run is not None:
        ev["runId"] = run
    return orjson.dumps(ev) + b"\n"


def run_start(n: int = 1, agent: str = "work") -> bytes:
    return line(n, "run.start", MODEL, agent=agent)


def run_end(n: int = 9, agent: str = "work") -> bytes:
    return line(n, "run.end", {**MODEL, "usage": USAGE, "stopReason": "stop"}, agent=agent)


def call(n: int = 2, *, key: str | None = "global", session: str | None = "s1", run: str | None = "r1") -> bytes:
    """A $0.50 llm.call, naming no agent as OpenClaw's do."""
    return line(n, "llm.call", {**MODEL, "delta": USAGE, "costUsd": 0.5}, key=key, session=session, run=run)


def tool(n: int = 3, *, agent: str = "unknown") -> bytes:
    return line(n, "tool.end", {"toolName": "exec", "toolCallId": f"t{n}", "isError": False, "durationMs": 5},
                agent=agent, session=None)


def write(folder: Path, *lines: bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "events.jsonl", "ab") as f:
        f.write(b"".join(lines))


def by_agent(db: Path) -> dict:
    return {row["agent_id"]: row["cost_usd"] for row in cli_json(db, "costs", "--group-by", "agent")["rows"]}


def tools_of(db: Path, agent: str) -> int:
    return sum(row["calls"] for row in cli_json(db, "tools", "--agent", agent))


@pytest.mark.parametrize("key", ["global", None], ids=["global-key", "no-key"])
@pytest.mark.parametrize("folder_agent", ["work", "main"])
def test_a_call_naming_no_agent_is_its_runs_agents_in_usage_costs_and_sessions(tmp_path, db, key, folder_agent):
    """The call's run names the agent; its own line and key do not. Its folder, where the gateway keeps
    another agent's log (its default agent's), says less than its run."""
    root = tmp_path / "state"
    write(root / "agents" / folder_agent / "telemetry", run_start(), call(key=key), run_end())
    ingest(db, root)
    env = cli_env(db)
    usage = subprocess.run([sys.executable, "-m", "agentledger", "usage", "--agent", "work", "--json"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert usage.returncode == 0, usage.stderr
    spent = orjson.loads(usage.stdout)
    assert (spent["llm_calls"], spent["cost_usd"], spent["total_tokens"]) == (1, 0.5, 330)
    assert by_agent(db) == {"work": 0.5}
    assert [s["cost_usd"] for s in cli_json(db, "sessions", "--agent", "work")] == [0.5]
    assert verify(db) == []


@pytest.mark.parametrize("folder", ["agents/main/telemetry", "."], ids=["other-agents-folder", "bare-telemetry-dir"])
def test_a_call_and_a_tool_call_read_before_their_runs_start_end_with_its_agent(tmp_path, folder):
    """Read in one pass in the log's order, or the calls first and the run's lines in a later ingest: the same
    spend and tool calls under the run's agent, none under its folder's or none, and rollups that verify."""
    ledgers = {}
    for order in ("in-order", "calls-first"):
        root = tmp_path / order
        db = ledgers[order] = tmp_path / f"{order}.db"
        if order == "in-order":
            write(root / folder, run_start(), call(), tool(), run_end())
        else:
            write(root / folder, call(), tool())
            ingest(db, root)
            assert by_agent(db) == {"main" if folder != "." else None: 0.5}
            write(root / folder, run_start(), run_end())
        ingest(db, root)
    for db in ledgers.values():
        assert by_agent(db) == {"work": 0.5}
        assert (tools_of(db, "work"), tools_of(db, "main")) == (1, 0)
        assert cli_json(db, "usage", "--agent", "work")["llm_calls"] == 1
        assert verify(db) == []


def test_a_call_of_no_run_is_its_sessions_agents_and_failing_that_its_folders(tmp_path, db):
    """session.start names the agent of s1; s2's lines name none, nor its run: its folder does."""
    root = tmp_path / "state"
    write(root / "agents" / "ops" / "telemetry",
          line(1, "session.start", {"sessionId": "s1"}, agent="work", key=None, run=None),
          call(2, run=None), call(3, session="s2", run="r2"),
          line(4, "compaction.start", {"messageCount": 9}, key="global", session=None, run=None))
    ingest(db, root)
    assert by_agent(db) == {"work": 0.5, "ops": 0.5}
    assert cli_json(db, "usage", "--agent", "ops")["compactions"] == 1
    assert verify(db) == []


def test_a_call_read_before_its_session_names_its_agent_moves_to_that_agent(tmp_path, db):
    """The session's start, which names the agent, is read in a later ingest than its call: the call, filed under
    its folder's agent until then, moves to the session's, its rollups with it."""
    root = tmp_path / "state"
    write(root / "agents" / "ops" / "telemetry", call(2, run=None))
    ingest(db, root)
    assert by_agent(db) == {"ops": 0.5}
    write(root / "agents" / "ops" / "telemetry",
          line(3, "session.start", {"sessionId": "s1"}, agent="work", key=None, run=None))
    ingest(db, root)
    assert by_agent(db) == {"work": 0.5}
    assert cli_json(db, "usage", "--agent", "ops")["llm_calls"] == 0
    assert verify(db) == []


def test_an_older_ledgers_calls_of_no_agent_take_their_runs_on_upgrade(tmp_path, db):
    """An older agentledger stored such calls under no agent: the upgrade files them as a fresh read does."""
    from test_pricing import _as_an_older_version_stored

    root = tmp_path / "state"
    write(root / "agents" / "main" / "telemetry", run_start(), call(), tool(), run_end(),
          call(20, session="s2", run="r2"), line(21, "compaction.start", {}, session=None, run=None))
    ingest(db, root)
    fresh = tmp_path / "fresh.db"
    ingest(fresh, root)
    _as_an_older_version_stored(db, 47, "UPDATE llm_calls SET agent_id = NULL", "UPDATE tool_calls SET agent_id = NULL",
                                "UPDATE compactions SET agent_id = NULL")
    assert by_agent(db) == by_agent(fresh) == {"work": 0.5, "main": 0.5}
    assert tools_of(db, "work") == tools_of(fresh, "work") == 1
    assert cli_json(db, "usage", "--agent", "main") == cli_json(fresh, "usage", "--agent", "main")
    assert verify(db) == []
