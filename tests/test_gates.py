"""Gates over a real ledger fed batch by batch, as the daemon feeds them."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import threading
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import orjson
import pytest
from conftest import CORPUS, cli_json, ingest
from logwriter import BASE_TS, LogDir, event
from prometheus_client.parser import text_string_to_metric_families
from test_transcript_sources import CHILD_KEY, PARENT_KEY, TASK_AGENT, _task_lines
from test_transcript_sources import SESSION as TASK_SESSION

from agentledger.config import GateConfig
from agentledger.daemon import LiveState, _reconcile, _record_hooks
from agentledger.gates import GateKeeper, hot_json
from agentledger.hot.sessions import HotSessions
from agentledger.http import claude_code_answer, take_claude_code_hook
from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger import queries
from agentledger.ledger.db import ReaderPool, open_reader, open_writer
from agentledger.ledger.writer import LedgerWriter
from agentledger.metrics import registry_for
from agentledger.sources.claude_code_hooks import HookInbox
from prometheus_client import generate_latest

NOW_MS = BASE_TS + 3_600_000


def llm(n: int, cost_usd: float, *, session: str = "s1", agent: str = "main", ts: int | None = None,
        total: int = 10, model: str = "claude-sonnet-4-5", **keyed) -> bytes:
    """``keyed``: the line's run and session id, when not ``event``'s."""
    return event(n, "llm.call", {"callIndex": n, "provider": "anthropic", "model": model,
                                 "delta": {"input": total, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                                           "total": total}, "costUsd": cost_usd},
                 session=session, agent=agent, ts=ts, **keyed)


def tool_end(n: int, name: str = "exec", *, error: bool = False, session: str = "s1") -> bytes:
    return event(n, "tool.end", {"toolName": name, "toolCallId": f"call-{n}", "isError": error, "durationMs": 5},
                 session=session)


class Ledger:
    """A ledger, its hot views and gate keeper, fed one ``add`` (one committed batch) at a time."""

    def __init__(self, tmp_path: Path, gates: list[dict], tz: str = "UTC", now_ms: int = NOW_MS,
                 max_entries: int = 128):
        self.root = tmp_path / "state"
        self.logs = {}
        self.db = tmp_path / "ledger.db"
        self.conn = open_writer(self.db)
        self.writer = LedgerWriter(self.conn)
        self.hot = HotSessions(tmp_path / "hot", flush_interval_s=0, max_entries=max_entries)
        self.readers = ReaderPool(self.db)
        self.keeper = GateKeeper(tuple(GateConfig(**g) for g in gates), self.hot, self.readers, ZoneInfo(tz),
                                 clock=lambda: now_ms / 1000)
        self.live = LiveState(self.conn, self.hot, self.keeper)
        self.live.caught_up()
        self.pipeline = Pipeline(self.writer, specs_from("oc-telemetry", [self.root]),
                                 after_commit=lambda r: self.live.committed(r.sessions, r.position))

    def add(self, *lines: bytes, agent: str = "main") -> None:
        logs = self.logs.setdefault(agent, LogDir(self.root, agent))
        logs.append(b"".join(lines))
        self.pipeline.run_once()

    def ask(self, key: str = "agent:main:s1", tool: str = "exec"):
        return self.keeper.decide(key, tool)

    def close(self) -> None:
        self.hot.close()
        self.readers.close()
        self.conn.close()


@pytest.fixture
def ledger_with(tmp_path):
    made = []

    def make(gates: list[dict], **kwargs) -> Ledger:
        made.append(Ledger(tmp_path, gates, **kwargs))
        return made[-1]

    yield make
    for ledger in made:
        ledger.close()


def gate(**kw) -> dict:
    return {"name": "g", "scope": "session", "metric": "cost_usd", "limit": 3.0} | kw


def test_a_session_crossing_its_budget_is_blocked_on_the_next_call_and_not_before(ledger_with):
    ledger = ledger_with([gate(name="session-cost", limit=3.0)])
    ledger.add(llm(1, 1.0))
    assert ledger.ask().decision == "allow"
    ledger.add(llm(2, 1.5))
    first = ledger.ask()
    assert first.decision == "allow" and first.reason == "within every gate"
    ledger.add(llm(3, 0.62))
    d = ledger.ask()
    assert d.decision == "block"
    assert d.as_json() == {
        "decision": "block", "gate": "session-cost", "scope": "session", "metric": "cost_usd", "value": 3.12,
        "limit": 3.0, "session_key": "agent:main:s1", "session_id": "sid-s1", "tool": "exec", "block": True,
        "reason": "session agent:main:s1 spent $3.12 of its $3.00 budget (gate session-cost)",
        "blockReason": "session agent:main:s1 spent $3.12 of its $3.00 budget (gate session-cost)",
    }


def test_a_budget_finer_than_a_cent_is_named_as_configured(ledger_with):
    ledger = ledger_with([gate(name="tiny", limit=0.015)])
    ledger.add(llm(1, 0.0175))
    assert ledger.ask().reason == "session agent:main:s1 spent $0.018 of its $0.015 budget (gate tiny)"


def test_a_question_asked_after_a_commit_before_memory_follows_it_measures_the_commit(ledger_with):
    ledger = ledger_with([gate(name="session-cost", limit=3.0)])
    ledger.add(llm(1, 2.0))
    assert ledger.ask().decision == "allow"  # memory holds the session's view now
    ledger.logs["main"].append(llm(2, 1.5))
    Pipeline(ledger.writer, specs_from("oc-telemetry", [ledger.root])).run_once()  # committed, memory not moved
    assert ledger.ask().reason == "session agent:main:s1 spent $3.50 of its $3.00 budget (gate session-cost)"
    with ledger.readers.connection() as conn:
        assert ledger.hot.lookup(conn, "agent:main:s1").own.cost_pico == 3_500_000_000_000


def test_a_view_a_question_read_before_a_commit_is_not_taken_for_the_commits(ledger_with, monkeypatch):
    """More busy sessions than memory holds: the refresh after a commit leaves out a session it has no room
    for; a question that began reading before the commit put that session's view in memory before memory
    moved, and it was trusted as the commit's: the session over its budget was allowed, commit after commit."""
    ledger = ledger_with([gate(name="cost", limit=1.0)], max_entries=1)
    ledger.add(llm(1, 0.5, session="a", ts=NOW_MS - 5000), llm(2, 0.5, session="b", ts=NOW_MS - 4000))
    assert ledger.ask("agent:main:a").decision == "allow"  # a's view is the one memory holds
    read = ledger.hot.read
    with ledger.readers.connection() as question, monkeypatch.context() as m:
        question.execute("BEGIN")
        queries.ledger_position(question)  # the question reads the ledger from here on, as it is before the commit

        def read_then_question_puts_b(conn, sessions):
            views = read(conn, sessions)
            ledger.hot.lookup(question, "agent:main:b")
            return views

        m.setattr(ledger.hot, "read", read_then_question_puts_b)
        ledger.add(llm(3, 0.7, session="b", ts=NOW_MS - 3000))
        question.execute("COMMIT")
    blocked = "session agent:main:b spent $1.20 of its $1.00 budget (gate cost)"
    assert ledger.ask("agent:main:b").reason == blocked
    ledger.add(llm(4, 0.1, session="a", ts=NOW_MS - 2000))  # a commit that leaves b alone
    assert ledger.ask("agent:main:b").reason == blocked


def test_zero_cost_calls_never_trip_a_cost_gate(ledger_with):
    ledger = ledger_with([gate(limit=0.000001)])
    ledger.add(*(llm(n, 0.0, model="local-free") for n in range(1, 200)))
    assert ledger.ask().decision == "allow"


@pytest.mark.parametrize(("metric", "limit", "lines", "noun"), [
    ("tokens", 30, [llm(1, 0, total=10), llm(2, 0, total=10), llm(3, 0, total=10)], "30 tokens of its 30 limit"),
    ("llm_calls", 2, [llm(1, 0), llm(2, 0)], "2 LLM calls of its 2 limit"),
    ("tool_calls", 2, [tool_end(1), tool_end(2, error=True)], "2 tool calls of its 2 limit"),
    ("tool_errors", 2, [tool_end(1, error=True), tool_end(2), tool_end(3, error=True)],
     "2 tool errors of its 2 limit"),
])
def test_each_metric_trips_exactly_at_its_limit(ledger_with, metric, limit, lines, noun):
    ledger = ledger_with([gate(metric=metric, limit=limit)])
    ledger.add(*lines[:-1])  # tool events name their session: no run needs to be known
    assert ledger.ask().decision == "allow"
    ledger.add(lines[-1])
    d = ledger.ask()
    assert (d.decision, d.metric, d.value, d.limit) == ("block", metric, limit, limit)
    assert d.reason == f"session agent:main:s1 used {noun} (gate g)"


def test_a_cost_just_under_the_limit_does_not_trip_and_is_shown_as_the_ledger_has_it(ledger_with):
    ledger = ledger_with([gate(limit=1.0)])
    ledger.add(llm(1, 0.99999951))
    d = ledger.ask()
    assert (d.decision, d.reason) == ("allow", "within every gate")
    ledger.add(llm(2, 0.00000049))
    d = ledger.ask()
    assert (d.decision, d.value) == ("block", 1.0)
    assert queries.sessions(ledger.conn, queries.Window())[0]["cost_usd"] == 1.0


def test_a_blocked_cost_shows_the_exact_spend(ledger_with):
    ledger = ledger_with([gate(limit=1.0)])
    ledger.add(llm(1, 1.00000049))
    assert ledger.ask().value == queries.sessions(ledger.conn, queries.Window())[0]["cost_usd"] == 1.00000049


def unpriced(n: int, *, ts: int | None = None) -> bytes:
    """A model call with no cost of its own, of a model no price table knows."""
    return event(n, "llm.call", {"callIndex": n, "provider": "acme", "model": "acme-unknown-9",
                                 "delta": {"input": 5_000_000, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                                           "total": 5_000_000}}, ts=ts)


def test_unpriced_calls_are_told_in_views_and_decisions_never_taken_as_free(ledger_with):
    ledger = ledger_with([gate(limit=1.0), gate(name="today", scope="global-day", limit=5.0)])
    ledger.add(llm(1, 0.5, ts=NOW_MS - 3000), unpriced(2, ts=NOW_MS - 2000), unpriced(3, ts=NOW_MS - 1000))
    view = hot_json(ledger.hot.lookup(ledger.conn, "agent:main:s1"))
    assert (view["cost_usd"], view["unpriced_calls"], view["family"]["unpriced_calls"]) == (0.5, 2, 2)
    assert ledger.ask().reason == ("within every gate, not counting 2 unpriced calls of session agent:main:s1 "
                                   "(gate g); 2 unpriced calls of all agents together (gate today)")
    ledger.add(llm(4, 0.75, ts=NOW_MS - 500))
    d = ledger.ask()
    assert (d.decision, d.reason) == ("block", "session agent:main:s1 spent $1.25 of its $1.00 budget, "
                                               "not counting 2 unpriced calls (gate g)")


def test_a_run_without_calls_at_an_unknown_cost_is_told_as_one_unpriced_call(ledger_with):
    """Its usage snapshot says tokens beside a costUsd of 0: a model OpenClaw could not price."""
    ledger = ledger_with([gate(limit=1.0)])
    ledger.add(event(1, "run.start", {"provider": "acme", "model": "acme-unknown-9"}),
               event(2, "usage.snapshot", {"provider": "acme", "model": "acme-unknown-9", "costUsd": 0,
                                           "usage": {"input": 900, "output": 100, "total": 1000}}),
               event(3, "run.end", {"provider": "acme", "model": "acme-unknown-9"}))
    view = hot_json(ledger.hot.lookup(ledger.conn, "agent:main:s1"))
    assert (view["cost_usd"], view["total_tokens"], view["unpriced_calls"]) == (0, 1000, 1)
    assert ledger.ask().reason == "within every gate, not counting 1 unpriced call of session agent:main:s1 (gate g)"


def test_tool_globs_choose_which_calls_a_gate_guards(ledger_with):
    ledger = ledger_with([gate(tools=["exec*", "browser"], limit=1.0)])
    ledger.add(llm(1, 2.0))
    assert ledger.ask(tool="exec_command").decision == "block"
    assert ledger.ask(tool="browser").decision == "block"
    d = ledger.ask(tool="read")
    assert (d.decision, d.reason) == ("allow", "no gate applies to tool 'read'")
    # Asked with a blank tool (tool=, toolName=), as a caller that does not know it may: "tool None" named none.
    d = ledger.ask(tool=None)
    assert (d.decision, d.reason) == ("allow", "no gate applies to a call whose tool is not named")


def test_block_gates_win_over_warn_gates_and_warnings_pass(ledger_with):
    ledger = ledger_with([gate(name="soft", action="warn", limit=1.0), gate(name="hard", limit=2.0)])
    ledger.add(llm(1, 1.5))
    d = ledger.ask()
    assert (d.decision, d.gate) == ("warn", "soft")
    assert not d.as_json()["block"]
    ledger.add(llm(2, 1.0))
    assert (ledger.ask().decision, ledger.ask().gate) == ("block", "hard")


def test_unknown_sessions_are_allowed_and_told_why(ledger_with):
    ledger = ledger_with([gate(limit=1.0)])
    d = ledger.ask("agent:main:nobody")
    assert (d.decision, d.reason) == ("allow", "unknown session 'agent:main:nobody': no session gate applies")
    # While serve's first catch-up reads the backlog, the session may just not be read yet: the reason says so.
    LiveState(ledger.conn, ledger.hot, ledger.keeper)  # as serve starts: following nothing yet
    assert ledger.ask("agent:main:nobody").reason == \
        "unknown session 'agent:main:nobody': the logs are still being read: no session gate applies"
    ledger.live.caught_up()
    assert ledger.ask("agent:main:nobody").reason == d.reason


def test_what_lets_a_call_through_while_catching_up_says_the_logs_are_still_being_read(ledger_with):
    """A known session was answered from a backlog read in part as if it were all: "within every gate"."""
    ledger = ledger_with([gate(name="soft", action="warn", limit=1.0), gate(name="hard", limit=2.0)])
    ledger.add(llm(1, 0.5, session="s1"), llm(2, 1.25, session="s2"), llm(3, 2.5, session="s3"))
    LiveState(ledger.conn, ledger.hot, ledger.keeper)  # as serve starts: following nothing yet
    reasons = {s: ledger.ask(f"agent:main:{s}").reason for s in ("s1", "s2", "s3")}
    assert reasons == {
        "s1": "within every gate: the logs are still being read",
        "s2": "session agent:main:s2 spent $1.25 of its $1.00 budget (gate soft): the logs are still being read",
        "s3": "session agent:main:s3 spent $2.50 of its $2.00 budget (gate hard): the logs are still being read",
    }
    ledger.live.caught_up()
    assert ledger.ask("agent:main:s1").reason == "within every gate"
    assert ledger.ask("agent:main:s2").reason == "session agent:main:s2 spent $1.25 of its $1.00 budget (gate soft)"


def test_a_block_while_catching_up_says_the_logs_are_still_being_read_for_a_reset_may_lift_it(ledger_with):
    # The session was reset while serve was down: until the catch-up reads the reset, the key's instance read
    # so far is over its budget, and the block it gives is taken back once the reset is read.
    ledger = ledger_with([gate(name="sc", limit=1.0)])
    ledger.add(event(1, "session.start", {"sessionId": "A"}, session="main", session_id="A", run="run-A"),
               llm(2, 5.0, session="main", session_id="A", run="run-A"))
    LiveState(ledger.conn, ledger.hot, ledger.keeper)  # as serve starts: following nothing yet
    blocked = ledger.ask("agent:main:main")
    assert (blocked.decision, blocked.reason) == (
        "block", "session agent:main:main spent $5.00 of its $1.00 budget (gate sc): the logs are still being read")
    ledger.add(event(3, "session.start", {"sessionId": "B", "resumedFrom": "A"}, session="main", session_id="B",
                     run="run-B"), llm(4, 0.1, session="main", session_id="B", run="run-B"))
    ledger.live.caught_up()
    assert ledger.ask("agent:main:main").decision == "allow"


def test_the_family_scope_adds_subagents_spend(ledger_with):
    ledger = ledger_with([gate(name="own", limit=3.0), gate(name="family", scope="session-family", limit=3.0)])
    child = "agent:main:subagent:abc"
    ledger.add(llm(1, 1.0),
               event(2, "subagent.spawn", {"childSessionKey": child, "agentId": "main", "label": "research"}),
               llm(3, 1.0, session="subagent:abc"))
    assert ledger.ask().decision == "allow"
    ledger.add(llm(4, 1.25, session="subagent:abc"))  # only the child spends: the parent's family view moves
    d = ledger.ask()
    assert (d.decision, d.gate, d.value) == ("block", "family", 3.25)
    assert d.reason == "session agent:main:s1 with its subagents spent $3.25 of its $3.00 budget (gate family)"
    assert ledger.ask(child).decision == "allow"  # the child's own family is only itself


def spawn(n: int, child: str, run: str) -> bytes:
    """A spawn line as OpenClaw writes it: the parent's key and run, no session id."""
    return event(n, "subagent.spawn", {"childSessionKey": child, "agentId": "main", "label": "x"}, run=run,
                 session_id="unknown")


def test_a_spawn_before_its_run_is_known_moves_the_parents_family_at_once(ledger_with):
    ledger = ledger_with([gate(name="fam", scope="session-family", limit=1.0)])
    ledger.add(llm(1, 0.10))
    assert ledger.ask().decision == "allow"
    ledger.add(llm(2, 2.0, session="subagent:c1"))  # the child spends before its spawn line is read
    ledger.add(spawn(3, "agent:main:subagent:c1", run="run-not-started-yet"))
    d = ledger.ask()
    assert (d.decision, d.value) == ("block", 2.1)


def test_a_spawn_read_while_the_daemon_was_down_moves_the_recovered_family(ledger_with, tmp_path):
    ledger = ledger_with([gate(name="fam", scope="session-family", limit=1.0)])
    ledger.add(llm(1, 0.10))
    ledger.add(llm(2, 2.0, session="subagent:c1"))
    ledger.add(llm(3, 0.10))
    assert ledger.ask().decision == "allow"
    ledger.hot.close()
    ledger.pipeline.after_commit = None  # the daemon is down
    ledger.add(spawn(4, "agent:main:subagent:c1", run="run-s1"))
    again = HotSessions(tmp_path / "hot")
    assert again.validate(ledger.conn) == 2  # the parent's view and the child's
    assert again.lookup(ledger.conn, "agent:main:s1").family.cost_pico == 2_200_000_000_000


def test_a_subagent_s_spend_read_while_the_daemon_was_down_moves_the_recovered_family(ledger_with, tmp_path):
    """The parent's own sums did not move, one of its subagents' did: its view from before is not trusted."""
    ledger = ledger_with([gate(name="fam", scope="session-family", limit=5.0)])
    ledger.add(llm(1, 0.10), spawn(2, "agent:main:subagent:c1", run="run-s1"),
               spawn(3, "agent:main:subagent:c2", run="run-s1"), llm(4, 0.5, session="subagent:c1"),
               llm(5, 0.5, session="subagent:c2"))
    assert ledger.ask().decision == "allow"
    ledger.hot.close()
    ledger.pipeline.after_commit = None  # the daemon is down
    for n, child in ((6, "c1"), (7, "c2")):
        ledger.add(llm(n, 1.0, session=f"subagent:{child}"))
        again = HotSessions(tmp_path / "hot")
        assert again.validate(ledger.conn) == 2, child  # the parent's view and the child's
        assert again.lookup(ledger.conn, "agent:main:s1").family.cost_pico == (n - 4) * 1_000_000_000_000 + \
            100_000_000_000, child
        again.close()


def test_an_earlier_instances_family_ends_where_its_successor_began(ledger_with):
    ledger = ledger_with([gate(name="fam-cost", scope="session-family", limit=2.0)])
    for n, (sid, resumed, own, child, spent) in enumerate([("S1", {}, 0.8, "c1", 0.9),
                                                           ("S2", {"resumedFrom": "S1"}, 0.3, "c2", 0.4)]):
        instance = {"session": "main", "session_id": sid, "run": f"run-{sid}"}
        ledger.add(event(10 * n + 1, "session.start", {"sessionId": sid, **resumed}, **instance),
                   llm(10 * n + 2, own, **instance),
                   event(10 * n + 3, "subagent.spawn", {"childSessionKey": f"agent:main:subagent:{child}",
                                                        "agentId": "main", "label": child}, **instance),
                   llm(10 * n + 4, spent, session=f"subagent:{child}"))
    for key, family in (("S1", 1.7), ("S2", 0.7), ("agent:main:main", 0.7)):
        assert (ledger.ask(key, "x").decision, hot_json(ledger.hot.lookup(ledger.conn, key))["family"]["cost_usd"]) \
            == ("allow", family), key
    for sid, family in (("S1", 1.7), ("S2", 0.7)):
        assert cli_json(ledger.db, "session", sid)["family_cost_usd"] == family
        assert cli_json(ledger.db, "tree", sid)["cumulative_cost_usd"] == family


def test_day_scopes_count_today_in_the_configured_zone(ledger_with):
    berlin = ZoneInfo("Europe/Berlin")
    midnight = dt.datetime.fromtimestamp(NOW_MS / 1000, berlin).replace(hour=0, minute=0, second=0, microsecond=0)
    today = int(midnight.timestamp() * 1000)
    ledger = ledger_with([gate(name="main-day", scope="agent-day", limit=2.0, agents=["main"]),
                          gate(name="all-day", scope="global-day", limit=5.0)], tz="Europe/Berlin")
    ledger.add(llm(1, 100.0, ts=today - 60_000), llm(2, 1.0, ts=today + 60_000))  # yesterday's spend is not today's
    ledger.add(llm(3, 2.5, session="x", agent="ops", ts=today + 120_000), agent="ops")
    assert ledger.ask().decision == "allow"
    ledger.add(llm(4, 1.0, ts=today + 180_000))
    d = ledger.ask()
    assert (d.gate, d.value) == ("main-day", 2.0)
    assert d.reason == "agent main spent $2.00 of its $2.00 daily budget today (Europe/Berlin) (gate main-day)"
    assert ledger.ask("agent:ops:x").decision == "allow"
    ledger.add(llm(5, 0.5, session="x", agent="ops", ts=today + 240_000), agent="ops")
    d = ledger.ask("agent:ops:x")
    assert (d.decision, d.gate, d.value) == ("block", "all-day", 5.0)
    assert d.reason == "all agents together spent $5.00 of its $5.00 daily budget today (Europe/Berlin) (gate all-day)"


def test_an_agent_day_gate_counts_the_calls_that_name_no_agent_as_their_runs_agents(ledger_with):
    """OpenClaw's llm.call names no agent, and a session keyed ``global`` none either: the run's start does.
    The call counts in that agent's day, in whichever agent's folder the gateway keeps the log."""
    from test_inferred_agents import call, run_start

    ledger = ledger_with([gate(name="work-day", scope="agent-day", limit=1.0, agents=["work"])])
    ledger.add(run_start(1), agent="main")
    assert ledger.ask("global").decision == "allow"
    ledger.add(call(2), call(3), call(4), agent="main")
    d = ledger.ask("global")
    assert (d.decision, d.gate, d.value) == ("block", "work-day", 1.5)
    assert d.reason == "agent work spent $1.50 of its $1.00 daily budget today (UTC) (gate work-day)"


def test_a_day_gate_starts_from_zero_when_the_clock_passes_midnight(ledger_with):
    midnight = (NOW_MS // 86_400_000 + 1) * 86_400_000
    ledger = ledger_with([gate(name="all-day", scope="global-day", limit=2.0)])
    now = [midnight - 1_000]
    ledger.keeper.clock = lambda: now[0] / 1000
    ledger.add(llm(1, 2.5, ts=midnight - 60_000))
    assert ledger.ask().decision == "block"
    now[0] = midnight + 1_000  # the same keeper, asked again a second after midnight
    assert ledger.ask().decision == "allow"
    ledger.add(llm(2, 2.0, ts=midnight + 500))
    assert (ledger.ask().decision, ledger.ask().value) == ("block", 2.0)


def test_blocks_and_warnings_are_recorded_and_counted(ledger_with):
    ledger = ledger_with([gate(name="soft", action="warn", limit=1.0), gate(name="hard", limit=2.0)])
    ledger.add(llm(1, 1.5))
    ledger.ask()
    ledger.add(llm(2, 1.0))
    ledger.ask()
    ledger.ask(tool="exec")
    ledger.ask("agent:main:nobody")
    decisions, counts = ledger.keeper.drain()
    ledger.writer.record_gate_decisions(decisions, counts)
    assert ledger.keeper.drain() == ([], {})
    conn = open_reader(ledger.db)
    rows = conn.execute("SELECT gate, decision, session_key, tool, value, limit_value, asked_via FROM gate_decisions "
                        "ORDER BY rowid").fetchall()
    assert rows == [("soft", "warn", "agent:main:s1", "exec", 1.5, 1.0, "http"),
                    ("hard", "block", "agent:main:s1", "exec", 2.5, 2.0, "http"),
                    ("hard", "block", "agent:main:s1", "exec", 2.5, 2.0, "http")]
    conn.close()
    text = generate_latest(registry_for(ledger.db, extra=[ledger.keeper.checks])).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    got = {(s.labels["gate"], s.labels["decision"]): s.value
           for s in families["agentledger_gate_decisions"].samples if s.name.endswith("_total")}
    assert got == {("soft", "warn"): 1, ("hard", "block"): 2, ("", "allow"): 1}
    checks = families["agentledger_gate_check_duration_seconds"]
    assert checks.type == "histogram"
    assert [s.value for s in checks.samples if s.name.endswith("_count")] == [4]


def test_a_hot_view_equals_the_ledger_and_recovers_from_its_file(ledger_with, tmp_path):
    ledger = ledger_with([])
    ledger.add(event(0, "run.start", {"model": "m"}))
    for n in range(1, 30, 3):
        ledger.add(llm(n, 0.25), tool_end(n + 1, error=n % 2 == 0), event(n + 2, "run.start", {"model": "m"},
                                                                           run=f"run-{n}"))
    conn = open_reader(ledger.db)
    view = ledger.hot.lookup(conn, "agent:main:s1")
    assert hot_json(view) == hot_json(_replayed(conn, "agent:main:s1"))
    assert (view.own.llm_calls, view.own.tool_calls, view.own.cost_pico) == (10, 10, 2_500_000_000_000)
    assert view.current_run == "run-28"
    ledger.hot.close()

    # A restart with nothing new: the file is trusted as it is.
    again = HotSessions(tmp_path / "hot")
    assert again.recovered == ["agent:main:s1"]
    assert again.validate(conn) == 0
    assert hot_json(again.lookup(conn, "agent:main:s1")) == hot_json(view)

    # The ledger moved on while the hot store was down: the view is rebuilt, not served stale.
    ledger.pipeline.after_commit = None
    ledger.add(llm(100, 1.0))
    third = HotSessions(tmp_path / "hot")
    assert third.validate(conn) == 1
    assert third.lookup(conn, "agent:main:s1").own.cost_pico == 3_500_000_000_000
    conn.close()


def test_recovered_views_pushed_out_by_questions_before_the_catch_up_ends_are_rebuilt(ledger_with, tmp_path):
    # Gate questions about other sessions during the catch-up after a restart evicted the recovered views
    # before they were checked: serve then died at the end of the catch-up ('NoneType' has no 'ledger').
    ledger = ledger_with([])
    for n, session in enumerate(("s1", "s2", "s3", "s4")):
        ledger.add(llm(n + 1, 0.25, session=session))
    conn = open_reader(ledger.db)
    keys = [f"agent:main:s{n}" for n in range(1, 5)]
    for key in keys:
        ledger.hot.lookup(conn, key)
    ledger.hot.close()
    again = HotSessions(tmp_path / "hot", max_entries=2)
    recovered = list(again.recovered)
    assert len(recovered) == 2
    for key in set(keys) - set(recovered):
        assert again.lookup(conn, key).own.cost_pico == 250_000_000_000
    assert again.validate(conn) == 2
    assert [again.lookup(conn, key).own.cost_pico for key in recovered] == [250_000_000_000] * 2
    conn.close()


def test_a_view_dropped_while_it_is_asked_for_is_read_again_not_taken_for_an_unknown_session(ledger_with, tmp_path):
    # expire() and the TTL drop views outside the lock gate questions hold: a question between the check and
    # the read answered 500, or None (an unknown session, allowed).
    ledger = ledger_with([])
    ledger.add(llm(1, 0.25))
    conn = open_reader(ledger.db)
    hot = HotSessions(tmp_path / "hot2")
    key = "agent:main:s1"
    assert hot.lookup(conn, key) is not None
    hot.recovered.append(key)
    hot._fresh.discard(key)  # as stale() leaves it after a catch-up batch
    real_get, calls = hot.store.get, []

    def dropped_after_first_get(k):
        calls.append(k)
        state = real_get(k)
        if len(calls) == 1:
            hot.store.delete(k)  # what expire() does, outside the lock, right then
        return state

    hot.store.get = dropped_after_first_get
    view = hot.lookup(conn, key)
    assert view is not None and view.own.cost_pico == 250_000_000_000
    conn.close()


def test_views_kept_from_a_ledger_built_again_are_not_trusted(ledger_with, tmp_path):
    first = ledger_with([gate(limit=1.0)])
    for n in range(1, 21):
        first.add(llm(n, 0.25))
    _drop_blocked_ledger(first, tmp_path)
    # Built again from logs that now hold less: its positions start at 1 again.
    shutil.rmtree(first.root)
    LogDir(first.root).append(llm(100, 0.10))
    ingest(first.db, first.root)
    _allows_at(ledger_with([gate(limit=1.0)]), 0.1)


def test_views_kept_past_a_restored_copy_of_the_ledger_are_not_trusted(ledger_with, tmp_path):
    first = ledger_with([gate(limit=1.0)])
    first.add(llm(1, 0.25))
    first.conn.execute("VACUUM INTO ?", (str(tmp_path / "backup.db"),))
    for n in range(2, 21):
        first.add(llm(n, 0.25))
    _drop_blocked_ledger(first, tmp_path)
    (tmp_path / "backup.db").rename(first.db)
    _allows_at(ledger_with([gate(limit=1.0)]), 0.25)


def _drop_blocked_ledger(ledger, tmp_path) -> None:
    """The session is blocked; then its ledger is deleted, the hot store's files kept."""
    assert ledger.ask().decision == "block"
    ledger.close()
    for path in tmp_path.glob("ledger.db*"):
        path.unlink()


def _allows_at(ledger, cost_usd: float) -> None:
    """The gate answers from the ledger now in place, not from the views kept of the old one."""
    assert ledger.ask().decision == "allow"
    assert hot_json(ledger.hot.lookup(ledger.conn, "agent:main:s1"))["cost_usd"] == cost_usd


def _replayed(conn, key):
    from agentledger.hot.sessions import _from_ledger

    return _from_ledger(queries.hot_session(conn, key))


def test_an_ended_session_leaves_the_hot_store_after_the_grace(ledger_with):
    ledger = ledger_with([])
    ledger.add(llm(1, 0.5), event(2, "session.end", {"sessionId": "sid-s1", "messageCount": 3, "durationMs": 10},
                                  ts=BASE_TS + 10))
    assert ledger.hot.store.has("agent:main:s1")
    assert ledger.hot.expire(now_ms=BASE_TS + 10 + 299_000) == []
    assert ledger.hot.expire(now_ms=BASE_TS + 10 + 301_000) == ["agent:main:s1"]
    assert not ledger.hot.store.has("agent:main:s1")
    # Still answered from the ledger.
    assert ledger.ask().decision == "allow"
    assert ledger.hot.lookup(ledger.conn, "agent:main:s1").status == "ended"


def test_expiring_and_listing_views_do_not_keep_idle_ones_in_memory(ledger_with, tmp_path):
    ledger = ledger_with([])
    ledger.add(llm(1, 0.5))
    hot = HotSessions(tmp_path / "hot-ttl", ttl_s=0.5)
    assert hot.lookup(ledger.conn, "agent:main:s1") is not None
    for _ in range(4):  # the daemon's chores while no one asks about the session
        time.sleep(0.3)
        hot.expire()
        hot.views()
        hot.flush_due()
    assert hot.size() == 0


def test_expiring_and_listing_views_leave_the_least_recently_asked_to_go_first(ledger_with, tmp_path):
    ledger = ledger_with([])
    keys = [f"agent:main:{name}" for name in "abcd"]
    ledger.add(*(llm(n, 0.5, session=key.rsplit(":", 1)[1]) for n, key in enumerate(keys, 1)))
    hot = HotSessions(tmp_path / "hot-lru", max_entries=3)
    for key in [*keys[:3], keys[0], keys[1]]:  # c is now the least recently asked
        hot.lookup(ledger.conn, key)
    hot.expire()
    hot.views()
    hot.lookup(ledger.conn, keys[3])
    assert sorted(v.session_key for v in hot.views()) == [keys[0], keys[1], keys[3]]


def test_ended_sessions_leave_no_view_files_behind_however_many_were_asked(ledger_with, tmp_path):
    ledger = ledger_with([gate()])
    hot = ledger.keeper.hot = ledger.live.hot = HotSessions(tmp_path / "hot-few", max_entries=2, flush_interval_s=0)
    for n in range(10):
        ledger.add(llm(n, 0.1, session=f"s{n}"))
        assert ledger.ask(f"agent:main:s{n}").decision == "allow"
    ledger.add(*(event(100 + n, "session.end", {"sessionId": f"sid-s{n}", "messageCount": 1, "durationMs": 5},
                       session=f"s{n}") for n in range(10)))
    assert len(hot.expire(now_ms=NOW_MS + 86_400_000)) == 2  # the two in memory; the others left with their files
    hot.close()
    assert list((tmp_path / "hot-few" / "sessions").iterdir()) == []


def _hook_payloads() -> list[dict]:
    path = CORPUS / "claude-code" / "hooks.jsonl"
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_claude_code_hook_answers_follow_the_protocol(ledger_with):
    ledger = ledger_with([gate(name="all-day", scope="global-day", limit=1.0, tools=["Bash", "Web*"])])
    payloads = _hook_payloads()
    pre = [p for p in payloads if p["hook_event_name"] == "PreToolUse"]
    assert pre
    for payload in payloads:  # nothing spent yet: every event is answered with {}
        assert claude_code_answer(ledger.keeper, payload) == {}
    ledger.add(llm(1, 1.5, ts=NOW_MS - 1000))
    for payload in pre:  # other calls: one asked about again before it is recorded is answered as it was
        answer = claude_code_answer(ledger.keeper, {**payload, "tool_use_id": payload["tool_use_id"] + "-next"})
        if payload["tool_name"] in ("Bash",) or payload["tool_name"].startswith("Web"):
            assert answer == {"hookSpecificOutput": {
                "hookEventName": "PreToolUse", "permissionDecision": "deny",
                "permissionDecisionReason": "all agents together spent $1.50 of its $1.00 daily budget today (UTC) "
                                            "(gate all-day)"}}
        else:
            assert answer == {}
    for payload in payloads:
        if payload["hook_event_name"] != "PreToolUse":
            assert claude_code_answer(ledger.keeper, payload) == {}


class _Hooks:
    """Claude Code PreToolUse hooks answered by ``ledger``'s keeper and queued, recorded when ``record`` says,
    as the daemon answers them and records them after each pass."""

    def __init__(self, ledger: Ledger, session: str = "0b5c3f7e-cc11-4d7e-9c5e-0d2b7f0f9a11"):
        self.ledger, self.session = ledger, session
        self.tool = "Bash"
        self.inbox = HookInbox()

    def pre(self, call_id: str, agent: str | None = None) -> bool:
        """Whether the call was allowed; ``agent``: the Task subagent that asks, if one does."""
        payload = {"session_id": self.session, "transcript_path": "/t.jsonl", "cwd": "/",
                   "hook_event_name": "PreToolUse", "tool_name": self.tool, "tool_input": {"command": "ls"},
                   "tool_use_id": call_id}
        if agent is not None:
            payload |= {"agent_id": agent, "agent_type": "general-purpose"}
        return take_claude_code_hook(self.ledger.keeper, self.inbox, payload, NOW_MS) == {}

    def record(self) -> None:
        _record_hooks(self.ledger.writer, self.inbox, self.ledger.live)


def test_a_tool_call_counts_from_its_answer_once_however_often_it_is_asked(ledger_with):
    """Claude Code asks about a turn's tool calls together, before the ledger holds any of them; a call
    asked about again (a retried hook) is one call."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=2)])
    hooks = _Hooks(ledger)
    # A session the ledger does not know yet: its first turn's calls count from their answers.
    assert [hooks.pre(f"toolu_{i}") for i in range(4)] == [True, True, False, False]
    hooks.record()
    assert [hooks.pre("toolu_4"), hooks.pre("toolu_4")] == [False, False]
    hooks.record()
    with ledger.readers.connection() as conn:
        state = ledger.hot.lookup(conn, hooks.session)
    assert (state.own.tool_calls, state.own.tool_errors) == (5, 3)

    other = _Hooks(ledger, "11111111-2222-3333-4444-555555555555")
    assert other.pre("toolu_a") is True
    other.record()
    assert other.pre("toolu_b") is True
    assert other.pre("toolu_b") is True  # asked again before it was recorded: still the second call
    assert other.pre("toolu_c") is False


def test_a_claude_code_session_is_named_by_its_key_before_and_after_the_ledger_holds_it(ledger_with):
    """Decisions on a session not read yet name it as the ledger will: one session, one key, one agent."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=1)])
    hooks = _Hooks(ledger)
    key = f"agent:claude-code:{hooks.session}"
    assert [hooks.pre("toolu_1"), hooks.pre("toolu_2")] == [True, False]
    hooks.record()
    assert hooks.pre("toolu_3") is False
    blocked, _ = ledger.keeper.drain()
    assert [(d.session_key, d.agent_id) for d in blocked] == [(key, "claude-code")] * 2
    assert [d.value for d in blocked] == [1, 2]
    assert blocked[0].reason == f"session {key} used 1 tool call of its 1 limit (gate tools)"


def test_once_recorded_the_ledger_s_count_is_the_truth_again(ledger_with):
    """A call counted from its answer stops counting so once the ledger holds it, which may count it
    elsewhere (a subagent's call moves to the subagent's session): the count is the ledger's again."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=2)])
    keeper = ledger.keeper
    assert [keeper.decide_call("s-new", "Bash", "claude-code", f"t{i}").decision for i in range(3)] == \
        ["allow", "allow", "block"]
    keeper.recorded(["t0", "t1", "t2"], keeper.position)  # recorded elsewhere: the ledger holds nothing of s-new
    assert keeper.decide_call("s-new", "Bash", "claude-code", "t3").decision == "allow"
    # Sent again once recorded, a call is answered as it was, and counts no more than once.
    assert keeper.decide_call("s-new", "Bash", "claude-code", "t1").decision == "allow"
    assert keeper.decide_call("s-new", "Bash", "claude-code", "t4").decision == "allow"
    assert keeper.decide_call("s-new", "Bash", "claude-code", "t5").decision == "block"


def test_calls_waiting_to_be_recorded_add_to_what_other_agents_spent_today(ledger_with):
    ledger = ledger_with([gate(name="today", scope="global-day", metric="tool_calls", limit=3)])
    hooks = _Hooks(ledger)
    assert [hooks.pre("toolu_1"), hooks.pre("toolu_2")] == [True, True]
    ledger.add(tool_end(1, session="s1"), tool_end(2, session="s2"))  # an OpenClaw agent's, read meanwhile
    assert ledger.ask("agent:main:s1").decision == "block"
    assert hooks.pre("toolu_3") is False
    hooks.record()
    assert ledger.ask("agent:main:s1").value == 5


_SID = "0b5c3f7e-cc11-4d7e-9c5e-0d2b7f0f9a11"


def _turn(turn: int, calls: list[tuple[str, str]]) -> bytes:
    """A Claude Code turn as its transcript tells it before its tools run: the prompt, then the assistant's
    tool_use blocks ((id, tool) each)."""
    blocks = [{"type": "tool_use", "id": i, "name": tool, "input": {"command": "ls"}} for i, tool in calls]
    lines = [{"type": "user", "uuid": f"u{turn}", "parentUuid": f"a{turn - 1}" if turn else None, "sessionId": _SID,
              "isSidechain": False, "timestamp": f"2026-11-23T10:0{turn}:00.000Z",
              "message": {"role": "user", "content": "go"}},
             {"type": "assistant", "uuid": f"a{turn}", "parentUuid": f"u{turn}", "sessionId": _SID,
              "isSidechain": False, "requestId": f"req_{turn}", "timestamp": f"2026-11-23T10:0{turn}:01.000Z",
              "message": {"id": f"msg_{turn}", "model": "claude-sonnet-4-5", "role": "assistant", "content": blocks,
                          "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 1}}}]
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def _transcript(tmp_path: Path, ledger: Ledger, after_commit=None) -> tuple[Path, Pipeline]:
    project = tmp_path / "claude" / "projects" / "-p"
    project.mkdir(parents=True)
    committed = lambda r: ledger.live.committed(r.sessions, r.position)  # noqa: E731
    return project / f"{_SID}.jsonl", Pipeline(ledger.writer, specs_from("claude-code", [tmp_path / "claude"]),
                                                after_commit=after_commit or committed)


def test_a_call_its_transcript_told_first_counts_once(tmp_path, ledger_with):
    """Claude Code writes a turn's tool_use blocks before it runs them: read first, each is one call when its
    hook asks, not two."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=6),
                          gate(name="today", scope="global-day", metric="tool_calls", limit=7)])
    path, pipeline = _transcript(tmp_path, ledger)
    path.write_bytes(_turn(0, [(f"toolu_{i}", "Bash") for i in range(4)]))
    pipeline.run_once()
    hooks = _Hooks(ledger, _SID)
    assert [hooks.pre(f"toolu_{i}") for i in range(4)] == [True, True, True, True]
    assert [hooks.pre("toolu_new_1"), hooks.pre("toolu_new_2"), hooks.pre("toolu_new_3")] == [True, True, False]


def test_calls_told_by_a_pass_not_yet_in_the_views_still_count(tmp_path, ledger_with):
    """Between a pass's commit of a turn's tool_use lines and the hot views' refresh, the calls answered
    before and not recorded yet are in neither the views nor told: they count as waiting."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=4)])
    hooks = _Hooks(ledger, _SID)
    asked = []

    def after_commit(result):
        if asked == []:  # hooks answered right after the pass's commit, before the refresh
            asked.extend(hooks.pre(f"toolu_{i}") for i in (3, 4, 5))
        ledger.live.committed(result.sessions, result.position)

    path, pipeline = _transcript(tmp_path, ledger)
    path.write_bytes(_turn(0, [("toolu_0", "Bash")]))
    pipeline.run_once()
    assert [hooks.pre("toolu_1"), hooks.pre("toolu_2")] == [True, True]
    pipeline.after_commit = after_commit
    with path.open("ab") as f:
        f.write(_turn(1, [("toolu_1", "Bash"), ("toolu_2", "Bash")]))
    pipeline.run_once()
    assert asked == [True, False, False]


def test_a_denied_call_its_transcript_told_first_counts_as_failed(tmp_path, ledger_with):
    ledger = ledger_with([gate(name="bash", metric="tool_calls", limit=1, tools=("Bash",)),
                          gate(name="errors", metric="tool_errors", limit=1, tools=("Read",))])
    path, pipeline = _transcript(tmp_path, ledger)
    path.write_bytes(_turn(0, [("toolu_0", "Bash"), ("toolu_1", "Bash")]))
    pipeline.run_once()
    hooks = _Hooks(ledger, _SID)
    assert hooks.pre("toolu_0") is True  # the first of two Bash calls under a limit of one
    assert hooks.pre("toolu_1") is False  # the second: denied, recorded as failed
    hooks.tool = "Read"
    assert hooks.pre("toolu_r") is False  # one failed call already, before its hook event is recorded


@pytest.mark.parametrize("limit", [1, 2, 4, 6])
def test_a_limit_lets_exactly_that_many_of_a_turn_s_calls_through_when_its_transcript_told_them_first(
        tmp_path, ledger_with, limit):
    """Claude Code writes a turn's parallel tool_use blocks, then asks about each: the calls told are not
    made yet, and a limit of N lets N of them through, not fewer."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=limit),
                          gate(name="family", scope="session-family", metric="tool_calls", limit=limit),
                          gate(name="today", scope="agent-day", metric="tool_calls", limit=limit)])
    path, pipeline = _transcript(tmp_path, ledger)
    path.write_bytes(_turn(0, [(f"toolu_{i}", "Bash") for i in range(4)]))
    pipeline.run_once()
    hooks = _Hooks(ledger, _SID)
    allowed = [hooks.pre(f"toolu_{i}") for i in range(4)] + [hooks.pre("toolu_next")]
    assert allowed == [i < limit for i in range(5)]
    hooks.record()
    with ledger.readers.connection() as conn:
        state = ledger.hot.lookup(conn, _SID)
    assert (state.own.tool_calls, state.own.tool_errors) == (5, 5 - min(limit, 5))


def test_calls_told_one_at_a_time_before_their_hooks_are_each_counted_once(tmp_path, ledger_with):
    """A turn's calls one after another, each read from the transcript before its hook asks: a limit of 4
    lets 4 through."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=4)])
    path, pipeline = _transcript(tmp_path, ledger)
    hooks = _Hooks(ledger, _SID)
    answers = []
    for i in range(6):
        with path.open("ab") as f:
            f.write(_turn(i, [(f"toolu_{i}", "Bash")]))
        pipeline.run_once()
        answers.append(hooks.pre(f"toolu_{i}"))
        hooks.record()
    assert answers == [True, True, True, True, False, False]


def test_a_call_asked_again_after_a_restart_is_not_counted_against_itself(tmp_path, ledger_with):
    """A daemon that restarts forgets its answers; a hook sent again for a call the ledger holds is measured
    without that call among those made before it."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=2)])
    hooks = _Hooks(ledger, _SID)
    assert [hooks.pre("toolu_0"), hooks.pre("toolu_1")] == [True, True]
    hooks.record()
    restarted = GateKeeper(ledger.keeper.gates, ledger.hot, ledger.readers, ZoneInfo("UTC"),
                           clock=lambda: NOW_MS / 1000)
    assert restarted.decide_call(_SID, "Bash", "claude-code", "toolu_1").decision == "allow"
    assert restarted.decide_call(_SID, "Bash", "claude-code", "toolu_2").decision == "block"


def test_calls_a_pass_tells_count_once_before_the_views_catch_up(tmp_path, ledger_with):
    """Between a pass's commit of a turn's tool_use lines and the views' refresh, a question that must read
    the day from the ledger finds the calls answered before there: they count once, not also as waiting."""
    ledger = ledger_with([gate(name="claude-today", scope="agent-day", metric="tool_calls", limit=4)],
                         now_ms=int(dt.datetime(2026, 11, 23, 10, 5, tzinfo=dt.timezone.utc).timestamp() * 1000))
    hooks = _Hooks(ledger, _SID)
    path, pipeline = _transcript(tmp_path, ledger)
    path.write_bytes(_turn(0, [("toolu_0", "Bash")]))
    pipeline.run_once()
    assert [hooks.pre("toolu_1"), hooks.pre("toolu_2")] == [True, True]
    ledger.add(llm(1, 0.5))  # another agent's pass, asked about by no one: the day read is behind the views
    asked = []

    def after_commit(result):
        if not asked:  # answered right after the pass's commit, before the refresh
            asked.append(hooks.pre("toolu_3"))
        ledger.live.committed(result.sessions, result.position)

    pipeline.after_commit = after_commit
    with path.open("ab") as f:
        f.write(_turn(1, [("toolu_1", "Bash"), ("toolu_2", "Bash")]))
    pipeline.run_once()
    assert asked == [True]  # three calls, each once, under a limit of four
    assert hooks.pre("toolu_4") is False


def test_a_reconcile_with_nothing_to_do_leaves_calls_counted_once(tmp_path, ledger_with):
    """The daemon reconciles every minute; one that finds nothing open too long commits nothing, and the
    calls a transcript told while their hooks wait to be recorded still count once."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=3)])
    path, pipeline = _transcript(tmp_path, ledger)
    path.write_bytes(_turn(0, [("toolu_0", "Bash"), ("toolu_1", "Bash")]))
    pipeline.run_once()
    hooks = _Hooks(ledger, _SID)
    assert hooks.pre("toolu_0") is True
    _reconcile(ledger.writer, 1e9, ledger.live)  # nothing is that old
    assert [hooks.pre("toolu_1"), hooks.pre("toolu_2"), hooks.pre("toolu_3")] == [True, True, False]


@pytest.mark.parametrize("held", ["before its commit", "after its commit"])
def test_questions_are_answered_while_hook_events_are_written_each_call_counted_once(ledger_with, held):
    """Writing a pass's hook events (a SQLite commit, then the views it changed) does not hold up gate
    questions: they are answered meanwhile, and count each call once, whether the ledger holds the calls
    being written by then or not."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=5),
                          gate(name="claude-today", scope="agent-day", metric="tool_calls", limit=100)])
    hooks = _Hooks(ledger)
    assert [hooks.pre("toolu_0"), hooks.pre("toolu_1")] == [True, True]
    hooks.record()
    assert [hooks.pre("toolu_2"), hooks.pre("toolu_3")] == [True, True]
    writing, release, resumed = threading.Event(), threading.Event(), threading.Event()
    apply = ledger.writer.apply_hook_events

    def held_up(events):
        def hold() -> None:
            writing.set()
            release.wait(30)  # this long only if a question waits for the write: released once they are answered
            resumed.set()

        if held == "before its commit":
            hold()
            return apply(events)
        result = apply(events)
        hold()
        return result

    ledger.writer.apply_hook_events = held_up
    recording = threading.Thread(target=hooks.record)  # the events of toolu_2 and toolu_3
    recording.start()
    try:
        assert writing.wait(30)
        answers = [hooks.pre("toolu_3"), hooks.pre("toolu_4"), hooks.pre("toolu_5")]
        asked = ledger.keeper.decide(hooks.session, "Bash")
        answered_meanwhile = not resumed.is_set()
    finally:
        release.set()
        recording.join()
    assert answered_meanwhile, "the questions waited for the hook writer"
    # toolu_3 asked again is the same call; toolu_4 is the fifth call, toolu_5 the sixth, over the limit.
    assert answers == [True, True, False]
    assert (asked.decision, asked.value) == ("block", 6)
    hooks.record()
    view = hot_json(_view(ledger, hooks.session))
    assert (view["tool_calls"], view["tool_errors"]) == (6, 1)


def _view(ledger: Ledger, key: str):
    with ledger.readers.connection() as conn:
        return ledger.hot.lookup(conn, key)


def test_a_call_asked_again_while_the_inbox_is_full_is_answered_alike_and_counts_once(ledger_with):
    """A retried PreToolUse the full inbox refuses leaves its call counted, its first event still to be
    recorded; and a retry taken where the first event was refused makes the call count from then on."""
    ledger = ledger_with([gate(name="tools", metric="tool_calls", limit=2)])
    hooks = _Hooks(ledger)
    hooks.inbox.limit = 1
    assert hooks.pre("toolu_0") is True  # queued: the inbox is full
    assert hooks.pre("toolu_0") is True  # asked again, refused: answered as it was
    hooks.inbox.limit = 100
    assert [hooks.pre("toolu_1"), hooks.pre("toolu_2")] == [True, False]
    hooks.record()
    view = hot_json(_view(ledger, hooks.session))
    assert (view["tool_calls"], view["tool_errors"]) == (3, 1)

    other = _Hooks(ledger, "11111111-2222-3333-4444-555555555555")
    other.inbox.limit = 0
    assert other.pre("toolu_a") is True  # refused: it will not be recorded, so it does not count
    other.inbox.limit = 100
    assert other.pre("toolu_a") is True  # asked again and queued: answered alike, and it counts from now
    assert [other.pre("toolu_b"), other.pre("toolu_c")] == [True, False]
    other.record()
    view = hot_json(_view(ledger, other.session))
    assert (view["tool_calls"], view["tool_errors"]) == (3, 1)


def test_a_failed_model_call_counts_once_toward_an_llm_calls_gate(ledger_with):
    ledger = ledger_with([gate(name="calls", metric="llm_calls", limit=3),
                          gate(name="calls-today", scope="global-day", metric="llm_calls", limit=3)])
    failed = orjson.loads(llm(2, 0.0, ts=NOW_MS - 1000))
    failed["error"] = {"message": "overloaded"}
    ledger.add(llm(1, 0.0, ts=NOW_MS - 2000), orjson.dumps(failed) + b"\n")
    assert ledger.ask().decision == "allow"  # two calls, one of them failed: 2 of 3
    view = hot_json(ledger.hot.lookup(ledger.conn, "agent:main:s1"))
    assert (view["llm_calls"], view["llm_errors"]) == (1, 1)
    ledger.add(llm(3, 0.0, ts=NOW_MS - 500))
    d = ledger.ask()
    assert (d.decision, d.gate, d.value) == ("block", "calls", 3)


def _subagent_at_work(tmp_path: Path, ledger: Ledger) -> _Hooks:
    """A Claude Code session whose Task subagent is at work: the session's prompt and Task, the subagent's
    lines so far and its SubagentStart are in the ledger. The session itself spent $0.002805, the subagent
    $0.00891 (its family's $0.011715 in all); each made one tool call."""
    parent, child, _ = _task_lines()
    project = tmp_path / "claude" / "projects" / "-p"
    subagents = project / TASK_SESSION / "subagents"
    subagents.mkdir(parents=True)
    (project / f"{TASK_SESSION}.jsonl").write_bytes(b"".join(parent[:2]))
    (subagents / f"agent-{TASK_AGENT}.jsonl").write_bytes(b"".join(child))
    hooks = _Hooks(ledger, TASK_SESSION)
    started = {"session_id": TASK_SESSION, "hook_event_name": "SubagentStart", "agent_id": TASK_AGENT,
               "agent_type": "general-purpose"}
    take_claude_code_hook(ledger.keeper, hooks.inbox, started, NOW_MS)
    hooks.record()
    Pipeline(ledger.writer, specs_from("claude-code", [tmp_path / "claude"]),
             after_commit=lambda r: ledger.live.committed(r.sessions, r.position)).run_once()
    return hooks


def test_a_subagent_s_tool_call_is_gated_by_its_own_session_s_spend_not_its_parent_s(tmp_path, ledger_with):
    """Inside a Task subagent (the hook's agent_id), a session gate measures the subagent's own session: the
    parent's own spend leaves the subagent's out, and the subagent's is what it spent."""
    ledger = ledger_with([gate(name="own", limit=0.005)])
    hooks = _subagent_at_work(tmp_path, ledger)
    assert hooks.pre("toolu_parent") is True  # the session's own $0.002805
    assert hooks.pre("toolu_sub", agent=TASK_AGENT) is False
    blocked, _ = ledger.keeper.drain()
    assert [(d.gate, d.session_key, d.value) for d in blocked] == [("own", CHILD_KEY, 0.00891)]
    assert blocked[0].reason == f"session {CHILD_KEY} spent $0.009 of its $0.005 budget (gate own)"


def test_a_subagent_s_tool_call_is_gated_by_its_parent_s_family(tmp_path, ledger_with):
    """The session that started the subagent counts it in its family: a family budget over stops the
    subagent's next call too."""
    ledger = ledger_with([gate(name="family", scope="session-family", limit=0.01)])
    hooks = _subagent_at_work(tmp_path, ledger)
    assert hooks.pre("toolu_sub", agent=TASK_AGENT) is False
    (d,), _ = ledger.keeper.drain()
    assert (d.gate, d.session_key, d.value) == ("family", CHILD_KEY, 0.011715)
    assert d.reason == f"session {PARENT_KEY} with its subagents spent $0.01 of its $0.01 budget (gate family)"
    assert ledger.keeper.decide(CHILD_KEY, "Bash").decision == "allow"  # the subagent's own family is itself


def test_calls_a_subagent_was_let_make_count_in_its_parent_s_family_at_once(tmp_path, ledger_with):
    ledger = ledger_with([gate(name="family-tools", scope="session-family", metric="tool_calls", limit=3)])
    hooks = _subagent_at_work(tmp_path, ledger)  # the session's Task and the subagent's Grep: 2 of 3
    assert hooks.pre("toolu_sub", agent=TASK_AGENT) is True
    assert hooks.pre("toolu_parent") is False  # the subagent's call counts before the ledger has it
    hooks.record()
    assert (_view(ledger, PARENT_KEY).family.tool_calls, _view(ledger, CHILD_KEY).own.tool_calls) == (4, 2)


@pytest.mark.parametrize("scope, limit", [("session", 4), ("session-family", 5)])  # the family counts the Task too
def test_a_subagent_s_calls_its_transcript_told_first_count_once_each_when_recorded(tmp_path, ledger_with,
                                                                                     scope, limit):
    """A Task subagent's turn of parallel calls, read in its session's run before their hooks ask: each
    recorded hook is that call, counted once, so a limit of 4 lets 4 of the subagent's calls through."""
    ledger = ledger_with([gate(name="tools", scope=scope, metric="tool_calls", limit=limit)])
    path, pipeline = _transcript(tmp_path, ledger)
    path.write_bytes(_turn(0, [("toolu_task", "Task")]))
    pipeline.run_once()
    hooks = _Hooks(ledger, _SID)
    assert hooks.pre("toolu_task") is True
    take_claude_code_hook(ledger.keeper, hooks.inbox, {"session_id": _SID, "hook_event_name": "SubagentStart",
                                                       "agent_id": "a1", "agent_type": "general-purpose"}, NOW_MS)
    hooks.record()
    grep = [{"type": "tool_use", "id": f"toolu_g{i}", "name": "Grep", "input": {"pattern": str(i)}} for i in range(6)]
    lines = [{"type": "user", "uuid": "c0", "sessionId": _SID, "isSidechain": True, "agentId": "a1",
              "timestamp": "2026-11-23T10:00:02.000Z", "message": {"role": "user", "content": "look"}},
             {"type": "assistant", "uuid": "c1", "parentUuid": "c0", "sessionId": _SID, "isSidechain": True,
              "agentId": "a1", "requestId": "req_c1", "timestamp": "2026-11-23T10:00:03.000Z",
              "message": {"id": "msg_c1", "model": "claude-sonnet-4-5", "role": "assistant", "content": grep,
                          "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}}]
    (path.parent / _SID / "subagents").mkdir(parents=True)
    (path.parent / _SID / "subagents" / "agent-a1.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    pipeline.run_once()
    allowed = []
    for i in range(6):
        allowed.append(hooks.pre(f"toolu_g{i}", agent="a1"))
        hooks.record()
    assert allowed == [True] * 4 + [False] * 2
    assert {t["tool"]: t["calls"] for t in cli_json(ledger.db, "tools")} == {"Task": 1, "Grep": 6}


def test_a_subagent_s_recorded_calls_count_in_its_parent_s_family_without_its_start_hook(ledger_with):
    """Only PreToolUse registered: no SubagentStart ties the subagent to its session. Its first call recorded
    does, so its calls count in the family once recorded as they did while they waited to be."""
    ledger = ledger_with([gate(name="family-tools", scope="session-family", metric="tool_calls", limit=4)])
    hooks = _Hooks(ledger, _SID)
    assert [hooks.pre("toolu_p1"), hooks.pre("toolu_p2")] == [True, True]
    hooks.tool = "Task"
    assert hooks.pre("toolu_task") is True
    hooks.record()
    hooks.tool = "Grep"
    allowed = []
    for i in range(3):
        allowed.append(hooks.pre(f"toolu_s{i}", agent="a1"))
        hooks.record()
    assert allowed == [True, False, False]
    parent = f"agent:claude-code:{_SID}"
    assert (_view(ledger, parent).own.tool_calls, _view(ledger, parent).family.tool_calls) == (3, 6)
    assert [(s["child_session_key"], s["parent_session_key"]) for s in cli_json(ledger.db, "subagents")] == \
        [(f"agent:claude-code:subagent:{_SID}/a1", parent)]
