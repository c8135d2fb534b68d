"""Query answers equal the corpus truth, window edges are exact, filters are injection-proof."""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json
import re
import shutil
import subprocess
import urllib.request
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner
from conftest import as_of_version, cli_env, cli_json, ingest, metric_counters
from hypothesis import given, settings
from hypothesis import strategies as st
from terminal import on_a_terminal

from agentledger.cli import cli
from agentledger.ledger import queries
from agentledger.ledger.db import open_reader, open_writer
from agentledger.timeutil import iso


@pytest.fixture(scope="module")
def corpus_db(tmp_path_factory, oc_corpus) -> Path:
    db = tmp_path_factory.mktemp("q") / "ledger.db"
    ingest(db, oc_corpus)
    return db


def _q(db: Path, fn, *args, **window):
    conn = open_reader(db)
    try:
        return fn(conn, queries.Window(**window), *args)
    finally:
        conn.close()


def _cli(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args], capture_output=True,
                          text=True, timeout=60)


def _table(text: str) -> list[list[str]]:
    """A table as printed to a pipe, its cells split where two spaces or more part them."""
    return [re.split(r"(?<=\S) {2,}", line) for line in text.splitlines()]


def test_costs_by_model_and_day_match_expected(corpus_db, oc_expected):
    by_model = {r["model"]: r for r in _q(corpus_db, queries.costs, "model")}
    assert set(by_model) == set(oc_expected["per_model"])  # no empty rows from count-only slots
    for model, want in oc_expected["per_model"].items():
        assert by_model[model]["llm_calls"] == want["llm_calls"]
        assert by_model[model]["total_tokens"] == want["total"]
        assert round(by_model[model]["cost_usd"] * 10**12) == want["cost_pico_usd"]
    by_day = {r["day"]: r for r in _q(corpus_db, queries.costs, "day")}
    for day, want in oc_expected["per_day"].items():
        assert round(by_day[day]["cost_usd"] * 10**12) == want["cost_pico_usd"]
        assert by_day[day]["llm_calls"] == want["llm_calls"]


def test_costs_by_tool_match_expected(corpus_db, oc_expected):
    rows = {r["tool"]: r for r in _q(corpus_db, queries.costs, "tool")}
    for name, want in oc_expected["detail"]["tool_calls_by_name"].items():
        assert (rows[name]["calls"], rows[name]["errors"]) == (want["calls"], want["failed"])


def test_tz_moves_spend_across_the_day_boundary(corpus_db):
    utc = {r["day"]: r["cost_usd"] for r in _q(corpus_db, queries.costs, "day", queries.zone("UTC"))}
    la = {r["day"]: r["cost_usd"] for r in _q(corpus_db, queries.costs, "day", queries.zone("America/Los_Angeles"))}
    tokyo = {r["day"]: r["cost_usd"] for r in _q(corpus_db, queries.costs, "day", queries.zone("Asia/Kolkata"))}
    assert sum(utc.values()) == pytest.approx(sum(la.values())) == pytest.approx(sum(tokyo.values()))
    assert "2026-09-30" in la and "2026-09-30" not in utc  # early-UTC spend belongs to the evening before
    conn = open_reader(corpus_db)
    # Ground truth from the rows themselves, in the zone (+05:30 exercises a half-hour offset).
    want: dict[str, int] = {}
    zone = dt.timezone(dt.timedelta(hours=5, minutes=30))
    for ts, cost in conn.execute("SELECT ts_ms, cost_pico FROM llm_calls"):
        day = dt.datetime.fromtimestamp(ts / 1000, tz=zone).date().isoformat()
        want[day] = want.get(day, 0) + cost
    conn.close()
    assert {d: round(c * 10**12) for d, c in tokyo.items()} == want


@settings(max_examples=60, deadline=None)
@given(a=st.integers(1_790_800_000_000, 1_791_300_000_000), span=st.integers(0, 3 * 86_400_000))
def test_window_sums_are_exact_at_any_edges(corpus_db, a, span):
    b = a + span
    u = _q(corpus_db, queries.usage, since=a, until=b)
    conn = open_reader(corpus_db)
    calls, cost = conn.execute(
        "SELECT count(*), coalesce(sum(cost_pico), 0) FROM llm_calls WHERE ts_ms BETWEEN ? AND ?", (a, b)).fetchall()[0]
    runs = conn.execute("SELECT count(*) FROM runs WHERE coalesce(started_ms, ended_ms) BETWEEN ? AND ?",
                        (a, b)).fetchall()[0][0]
    tools = conn.execute("SELECT count(*) FROM tool_calls WHERE coalesce(started_ms, ended_ms) BETWEEN ? AND ?",
                         (a, b)).fetchall()[0][0]
    conn.close()
    assert (u["llm_calls"] + u["llm_errors"], round(u["cost_usd"] * 10**12), u["runs"], u["tool_calls"]) == \
        (calls, cost, runs, tools)


@pytest.mark.parametrize("evil", ["'; DROP TABLE llm_calls; --", "%", "_", "main' OR '1'='1"])
def test_injection_attempts_are_harmless(corpus_db, evil):
    for args in (["sessions", "--agent", evil, "--json"], ["usage", "--agent", evil, "--json"],
                 ["costs", "--agent", evil, "--json"]):
        out = _cli(corpus_db, *args)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc == [] or doc.get("llm_calls") == 0 or (doc["rows"] == [] and doc["total"]["llm_calls"] == 0)
    assert _q(corpus_db, queries.usage)["llm_calls"] == 397  # nothing was dropped
    # Bytes no command line can carry still reach the queries only as bound values.
    assert _q(corpus_db, queries.sessions, agent=evil + "\x00") == []


def test_bad_group_by_and_tz_are_clear_errors(corpus_db):
    out = _cli(corpus_db, "costs", "--group-by", "session_id; DROP TABLE runs")
    assert out.returncode == 2 and "--group-by" in out.stderr
    out = _cli(corpus_db, "costs", "--group-by", "day", "--tz", "Nowhere/Special")
    assert out.returncode == 2 and "unknown time zone" in out.stderr


def test_csv_output(corpus_db):
    out = _cli(corpus_db, "costs", "--group-by", "agent", "--csv")
    lines = out.stdout.splitlines()
    assert lines[0].startswith("agent_id,llm_calls")
    assert {line.split(",")[0] for line in lines[1:]} == {"main", "work"}


def test_family_cost_and_tree_match_expected_children(corpus_db, oc_expected):
    conn = open_reader(corpus_db)
    try:
        for want in oc_expected["sessions_sample"]:
            if not want["children"]:
                continue
            d = queries.session_detail(conn, want["sessionId"])
            assert round(d["cost_usd"] * 10**12) == want["cost_pico_usd"]
            assert d["family_cost_usd"] == pytest.approx(want["cost_including_children"], abs=1e-9)
            node = queries.tree(conn, want["sessionKey"])
            kids = {c["session_key"] for c in node["children"]}
            assert {c["sessionKey"] for c in want["children"]} <= kids
            assert sum(round(c["cumulative_cost_usd"] * 10**12) for c in node["children"]) + \
                round(node["own_cost_usd"] * 10**12) == round(node["cumulative_cost_usd"] * 10**12)
    finally:
        conn.close()


def test_session_detail_runs_tools_and_model_split(corpus_db, oc_expected):
    want = next(s for s in oc_expected["sessions_sample"] if s["tool_calls"] and len(s["per_model"]) > 1)
    out = _cli(corpus_db, "session", want["sessionId"], "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert len(d["runs"]) == want["runs"]
    assert len(d["tool_calls"]) == want["tool_calls"]
    by_model = {m["model"]: m for m in d["cost_by_model"]}
    for model, m in want["per_model"].items():
        assert round(by_model[model]["cost_usd"] * 10**12) == m["cost_pico_usd"]


@pytest.mark.parametrize("args", [["session", "no-such-session"], ["run", "no-such-run"], ["tree", "nope"],
                                  ["timeline", "nope"]])
def test_unknown_key_is_one_line_exit_1(corpus_db, args):
    out = _cli(corpus_db, *args)
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("agentledger: no ")


def test_every_list_command_answers_json(corpus_db):
    for args in (["runs"], ["tools"], ["errors"], ["subagents"], ["events", "--kind", "run.end"], ["files"],
                 ["top", "runs"], ["top", "tools"], ["top", "models"], ["top", "sessions"],
                 ["timeline", "agent:main:main", "--kinds", "tool,compaction"]):
        out = _cli(corpus_db, *args, "--json")
        assert out.returncode == 0, (args, out.stderr)
        rows = json.loads(out.stdout)
        assert isinstance(rows, list) and rows, args


# A number as a table or the tree prints it (1,040,960 0.0986 ≥0.0021* $2.8243), standing alone between
# spaces or borders.
_PRINTED_NUMBER = re.compile(r"(?<![^\s│┃])≥?\$?[\d,.]*\d[\d,.]*\*?(?![^\s│┃])")
_FAMILY = "agent:main:telegram:group:-1008604883638"  # a session with subagents
_WIDTHS = (30, 40, 48, 60, 80)


def _punctuated(text: str) -> set[str]:
    """The numbers in ``text`` wide enough for a comma or a point, which a fold would show in pieces."""
    return {n for n in _PRINTED_NUMBER.findall(text) if "," in n or "." in n}


@pytest.mark.parametrize("args", [
    ["sessions"], ["runs"], ["tools"], ["costs"], ["costs", "--group-by", "tool"], ["usage"], ["top", "runs"],
    ["top", "tools"], ["top", "models"], ["top", "sessions"], ["errors"], ["events"], ["subagents"],
    ["tree", _FAMILY], ["timeline", _FAMILY], ["session", _FAMILY], ["run", "{run}"],
], ids=" ".join)
def test_a_terminal_of_any_width_shows_each_number_whole_or_names_its_column(corpus_db, args):
    # At 48 columns `sessions` printed tokens as "1,040" over ",960", at 40 costs as "0.09" over "86":
    # when the text could not keep 10 characters, rich folded every column, numbers too.
    run_id = cli_json(corpus_db, "session", _FAMILY)["runs"][0]["run_id"]
    args = [a.format(run=run_id) for a in args]
    piped = CliRunner().invoke(cli, ["--db", str(corpus_db), *args], catch_exceptions=False).output
    whole = _punctuated(piped)
    assert whole, piped
    with ThreadPoolExecutor(5) as pool:
        shown = dict(zip(_WIDTHS, pool.map(lambda w: on_a_terminal(args, cli_env(corpus_db), w), _WIDTHS)))
    for width, screen in shown.items():
        assert _punctuated(screen) <= whole, (width, screen)
        # A number missing is one whose column the table says it left out.
        assert _punctuated(screen) == whole or "too narrow for" in screen, (width, screen)
        if args[0] == "tree":  # its lines ran past the edge, for the terminal to break anywhere
            table = screen.partition("(too narrow for ")[0]
            assert max(map(len, table.splitlines())) <= width, (width, screen)
    assert _punctuated(shown[80]) == whole, shown[80]


@pytest.mark.parametrize("args", [
    ["sessions"], ["runs"], ["costs"], ["costs", "--group-by", "session"], ["costs", "--group-by", "tool"],
    ["costs", "--group-by", "day"], ["costs", "--latency"], ["tools"], ["events"], ["files"], ["errors"],
    ["subagents"], ["top", "runs"], ["top", "tools"], ["top", "models"], ["top", "sessions"], ["rejects"],
    ["timeline", "agent:main:main"], ["usage"]])
def test_csv_has_its_header_row_even_when_nothing_matches(corpus_db, args):
    """A script reads the same columns whatever the answer: an empty one was no bytes at all."""
    full = _cli(corpus_db, *args, "--csv")
    assert full.returncode == 0 and full.stdout.count("\n") > 1, (args, full.stderr)
    header = full.stdout.splitlines()[0]
    none = [["--agent", "nobody"]] if args[0] not in ("rejects", "timeline") else []
    for narrow in none + [["--since", "2030-01-01"]]:
        out = _cli(corpus_db, *args, "--csv", *narrow)
        assert out.returncode == 0, (args, narrow, out.stderr)
        lines = out.stdout.splitlines()
        assert lines[0] == header, (args, narrow)
        assert len(lines) == (2 if args[0] == "usage" else 1), (args, narrow)  # usage is one row of zeros


def test_tool_percentiles(corpus_db):
    rows = {r["tool"]: r for r in _q(corpus_db, queries.tools)}
    conn = open_reader(corpus_db)
    durations = sorted(d for (d,) in conn.execute(
        "SELECT duration_ms FROM tool_calls WHERE tool_name = 'read' AND duration_ms IS NOT NULL"))
    conn.close()
    import numpy as np

    assert rows["read"]["p50_ms"] == round(float(np.percentile(durations, 50)), 1)
    assert rows["read"]["p99_ms"] <= max(durations)


def _timed_and_untimed_tools(tmp_path: Path) -> Path:
    """read: two calls, one that told its duration (1.5 s); grep: two calls that told none."""
    log = _HookLog()
    key = "agent:main:main"
    log.ev("tool.end", {"toolName": "read", "toolCallId": "T1", "durationMs": 1500}, key, "S1", "R1")
    log.ev("tool.end", {"toolName": "read", "toolCallId": "T2"}, key, "S1", "R1")
    log.ev("tool.end", {"toolName": "grep", "toolCallId": "T3"}, key, "S1", "R1")
    log.ev("tool.end", {"toolName": "grep", "toolCallId": "T4"}, key, "S1", "R1")
    return log.ledger(tmp_path)


def test_a_tool_whose_calls_told_no_duration_took_an_unknown_time(tmp_path):
    db = _timed_and_untimed_tools(tmp_path)
    rows = {r["tool"]: r for r in json.loads(_cli(db, "tools", "--json").stdout)}
    assert (rows["read"]["duration_s"], rows["read"]["p50_ms"]) == (1.5, 1500.0)  # the calls that told it
    assert (rows["grep"]["duration_s"], rows["grep"]["p50_ms"]) == (None, None)
    csv_rows = {r["tool"]: r for r in csv.DictReader(_cli(db, "tools", "--csv").stdout.splitlines())}
    assert (csv_rows["grep"]["duration_s"], csv_rows["read"]["duration_s"]) == ("", "1.5")


def test_a_run_s_failed_model_call_is_marked_as_failed(tmp_path):
    # It was listed as one more call of 0 tokens costing 0.0000: two calls where the run counts one and an error.
    log = _HookLog()
    key, model = "agent:main:main", {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    log.ev("run.start", model, key, "S1", "R1")
    log.ev("llm.call", {**model, "callIndex": 0, "costUsd": 0.5, "delta": {"input": 1, "output": 1, "total": 2}},
           key, "S1", "R1")
    log.ev("llm.call", {**model, "callIndex": 1, "delta": {"total": 0}}, key, "S1", "R1", error="overloaded_error")
    log.ev("run.end", model, key, "S1", "R1")
    db = log.ledger(tmp_path)
    out = _cli(db, "run", "R1").stdout
    header, ok, failed = out.partition("model calls (2)\n")[2].splitlines()[:3]
    assert header.split()[-1] == "error"
    assert (ok.split()[-1], failed.split()[-1]) == ("-", "overloaded_error")


def test_the_tools_table_shows_each_tool_s_total_time(tmp_path):
    # Only --json and --csv had it, where the README says tools shows it.
    db = _timed_and_untimed_tools(tmp_path)
    header, *lines = _cli(db, "tools").stdout.splitlines()
    assert header.split()[-2:] == ["time", "s"]
    assert {line.split()[0]: line.split()[-1] for line in lines} == {"read": "1.5000", "grep": "-"}


def test_costs_by_tool_keep_a_time_no_call_reported_unknown(tmp_path):
    # The rollups summed a missing duration as 0: grep, whose calls never told theirs, showed 0.0 s.
    db = _timed_and_untimed_tools(tmp_path)
    doc = json.loads(_cli(db, "costs", "--group-by", "tool", "--json").stdout)
    rows = {r["tool"]: r for r in doc["rows"]}
    assert (rows["read"]["calls"], rows["read"]["duration_s"]) == (2, 1.5)  # the calls that told it
    assert (rows["grep"]["calls"], rows["grep"]["duration_s"]) == (2, None)
    assert (doc["total"]["calls"], doc["total"]["duration_s"]) == (4, 1.5)
    # The same from the rows at a window's edges as from the rollups inside it.
    edge = json.loads(_cli(db, "costs", "--group-by", "tool", "--json", "--since",
                           "2026-09-21T14:13:20Z").stdout)
    assert {r["tool"]: r["duration_s"] for r in edge["rows"]} == {"read": 1.5, "grep": None}
    table = dict(line.split(None, 1) for line in _cli(db, "costs", "--group-by", "tool").stdout.splitlines())
    assert table["grep"].split() == ["2", "0", "-"] and table["read"].split() == ["2", "0", "1.5000"]
    csv_rows = {r["tool"]: r for r in csv.DictReader(_cli(db, "costs", "--group-by", "tool", "--csv").stdout
                                                     .splitlines())}
    assert (csv_rows["grep"]["duration_s"], csv_rows["read"]["duration_s"]) == ("", "1.5")
    only_grep = json.loads(_cli(db, "costs", "--group-by", "tool", "--json", "--limit", "1").stdout)
    assert only_grep["total"]["duration_s"] == 1.5


def test_a_ledger_from_before_timed_tool_calls_tells_unknown_times_once_migrated(tmp_path):
    log = _HookLog()
    log.ev("tool.end", {"toolName": "read", "toolCallId": "T1", "durationMs": 1500}, "agent:main:main", "S1", "R1")
    log.ev("tool.end", {"toolName": "grep", "toolCallId": "T2"}, "agent:main:main", "S1", "R1")
    db = log.ledger(tmp_path)
    conn = apsw.Connection(str(db))  # as the ledger was before: no count of the calls that told a time
    as_of_version(conn, 24)
    conn.close()
    open_writer(db).close()
    assert _cli(db, "verify").returncode == 0
    for window in ([], ["--since", "2026-09-21T14:13:20Z"]):  # the rollups, and the rows at an edge
        doc = json.loads(_cli(db, "costs", "--group-by", "tool", "--json", *window).stdout)
        assert {r["tool"]: r["duration_s"] for r in doc["rows"]} == {"read": 1.5, "grep": None}, window


def test_model_latency_percentiles(corpus_db):
    out = _cli(corpus_db, "costs", "--group-by", "model", "--latency", "--json")
    rows = {r["model"]: r for r in json.loads(out.stdout)["rows"]}
    conn = open_reader(corpus_db)
    durations = [d for (d,) in conn.execute(
        "SELECT duration_ms FROM llm_calls WHERE model = 'gpt-5' AND duration_ms IS NOT NULL")]
    conn.close()
    import numpy as np

    assert rows["gpt-5"]["p95_ms"] == round(float(np.percentile(durations, 95)), 1)
    assert _cli(corpus_db, "costs", "--group-by", "day", "--latency").returncode == 2


class _HookLog:
    """Hook events of one agent, numbered in the order given, ingested into a real ledger."""

    T0 = 1_790_000_000_000

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def ev(self, kind: str, data: dict, key: str, sid: str = "unknown", run: str | None = None,
           error: str | None = None) -> None:
        import orjson

        n = len(self.lines) + 1
        e = {"id": f"evt_{n:016x}", "ts": self.T0 + n, "seq": n, "agentId": "main", "sessionKey": key,
             "sessionId": sid, "kind": kind, "data": data, "source": "hook"}
        if run:
            e["runId"] = run
        if error:
            e["error"] = {"message": error}
        self.lines.append(orjson.dumps(e))

    def call(self, key: str, sid: str, run: str, cost: float | None) -> None:
        """A run of one model call; with no ``cost``, of a model no price table knows."""
        model, provider = ("m", "p") if cost is not None else ("acme-unknown-9", "acme")
        priced = {} if cost is None else {"costUsd": cost}
        self.ev("run.start", {"model": model, "provider": provider}, key, sid, run)
        self.ev("llm.call", {"callIndex": 0, "provider": provider, "model": model, **priced,
                             "delta": {"input": 1, "output": 1, "total": 2}}, key, sid, run)
        self.ev("run.end", {"model": model, "provider": provider}, key, sid, run)

    def spawn(self, parent: str, run: str, child: str, label: str | None = None) -> None:
        data = {"childSessionKey": child, "agentId": "main"} | ({"label": label} if label else {})
        self.ev("subagent.spawn", data, parent, run=run)

    def snapshot_run(self, key: str, sid: str, run: str, cost: float) -> None:
        """A run of no model call: it costs what its usage snapshot says."""
        self.ev("run.start", {"model": "m", "provider": "p"}, key, sid, run)
        self.ev("usage.snapshot", {"provider": "p", "model": "m", "costUsd": cost,
                                   "usage": {"input": 1, "output": 1, "total": 2}}, key, sid)
        self.ev("run.end", {"model": "m", "provider": "p"}, key, sid, run)

    def ledger(self, tmp_path: Path) -> Path:
        from logwriter import LogDir

        logs = LogDir(tmp_path / "state")
        logs.append(b"\n".join(self.lines) + b"\n")
        db = tmp_path / "l.db"
        ingest(db, logs.root)
        return db


def test_three_level_subagent_tree_family_totals(tmp_path):
    log = _HookLog()
    root, child, grandchild = "agent:main:main", "agent:main:subagent:c1", "agent:main:subagent:g1"
    log.call(root, "S0", "R0", 1.0)
    log.spawn(root, "R0", child, "child")
    log.call(child, "S1", "R1", 0.25)
    log.spawn(child, "R1", grandchild, "grandchild")
    log.call(grandchild, "S2", "R2", 0.125)
    log.spawn(root, "R0", "agent:main:subagent:c2")
    log.call("agent:main:subagent:c2", "S3", "R3", 0.0625)
    conn = open_reader(log.ledger(tmp_path))
    try:
        node = queries.tree(conn, root)
        d = queries.session_detail(conn, root)
    finally:
        conn.close()
    assert node["own_cost_usd"] == 1.0
    assert node["cumulative_cost_usd"] == 1.0 + 0.25 + 0.125 + 0.0625
    kid = next(c for c in node["children"] if c["session_key"] == child)
    assert kid["cumulative_cost_usd"] == 0.375 and kid["children"][0]["session_key"] == grandchild
    assert d["family_cost_usd"] == node["cumulative_cost_usd"]


def _deep_loads(text: str):
    """JSON nested deeper than the decoder recurses by default."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        return json.loads(text)
    finally:
        sys.setrecursionlimit(limit)


def test_a_chain_of_subagents_deeper_than_python_recurses_has_its_tree(tmp_path):
    """Each subagent spawns the next, 1,100 deep (a tree's JSON nests two levels a subagent; orjson stops at
    255, Python at 1,000 calls): `tree` prints it, as JSON and as a table, with each node's family cost."""
    depth = 1_100
    keys = ["agent:main:main", *(f"agent:main:subagent:{i}" for i in range(1, depth + 1))]
    log = _HookLog()
    for i, key in enumerate(keys):
        log.call(key, f"S{i}", f"R{i}", None if i == depth else 0.25)  # the deepest's model has no price
        if i < depth:
            log.spawn(key, f"R{i}", keys[i + 1], "next")
    db = log.ledger(tmp_path)
    out = _cli(db, "tree", keys[0], "--json")
    assert (out.returncode, out.stderr) == (0, "")
    node = _deep_loads(out.stdout)
    for i, key in enumerate(keys):
        assert (node["session_key"], node["own_cost_usd"], node["cumulative_cost_usd"],
                node["cumulative_unpriced_calls"]) == (key, 0.0 if i == depth else 0.25, (depth - i) * 0.25, 1)
        assert len(node["children"]) == (i < depth)
        node = node["children"][0] if node["children"] else None
    table = _cli(db, "tree", keys[0])
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert _table(lines[1]) == [[keys[0], "-", "0.2500", "≥275.00*"]]
    assert lines[depth + 1].startswith(" " * 2 * depth + keys[depth] + "  next  ")


def test_a_tree_of_subagents_over_9000_dollars_each_adds_up_in_pico_dollars(tmp_path):
    # Each node's cumulative cost was rebuilt from its children's floats, which past 2**53 pico-dollars ($9,007)
    # no longer hold every pico-dollar: 8 of 13 nodes of this chain came out off their family's exact spend.
    from agentledger.sources.common import cost_pico

    keys = ["agent:main:main", *(f"agent:main:subagent:{i}" for i in range(1, 13))]
    log, own = _HookLog(), []
    for i, key in enumerate(keys):
        costs = [999.123456789012 - (i * 10 + n) * 0.000000000311 for n in range(10)]
        own.append(sum(map(cost_pico, costs)))
        for n, cost in enumerate(costs):
            log.call(key, f"S{i}", f"R{i}-{n}", cost)
        if i + 1 < len(keys):
            log.spawn(key, f"R{i}-9", keys[i + 1])
    node, cumulative = json.loads(_cli(log.ledger(tmp_path), "tree", keys[0], "--json").stdout), []
    while node:
        cumulative.append(node["cumulative_cost_usd"])
        node = node["children"][0] if node["children"] else None
    assert cumulative == [round(sum(own[i:]) / 10**12, 12) for i in range(len(keys))]


def _nested(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=4))


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(), _nested, max_leaves=30)


@given(_JSON_VALUES)
@settings(max_examples=300, deadline=None)
def test_nested_json_is_the_json_every_other_command_prints(value):
    """`tree --json` walks its nesting itself: the text is orjson's, as every other command's --json."""
    from agentledger.cli.output import emit_json, emit_nested_json

    texts = []
    for emit in (emit_json, emit_nested_json):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            emit(value)
        texts.append(out.getvalue())
    assert texts[0] == texts[1]


def test_a_session_id_is_one_instance_of_its_key_with_the_subagents_it_spawned(tmp_path):
    log = _HookLog()
    key, a, b = "agent:main:main", "agent:main:subagent:a", "agent:main:subagent:b"
    log.call(key, "S1", "R1", 1.0)
    log.spawn(key, "R1", a, "a")
    log.call(a, "SA", "RA", 0.25)
    log.call(key, "S2", "R2", 2.0)  # a reset: the key's next instance, current from here on
    log.spawn(key, "R2", b, "b")
    log.call(b, "SB", "RB", 0.5)
    db = log.ledger(tmp_path)
    conn = open_reader(db)
    try:
        scopes = {name: (queries.session_detail(conn, name), queries.tree(conn, name),
                         queries.timeline(conn, name, ["subagent"])) for name in ("S1", "S2", key)}
    finally:
        conn.close()
    for name, instances, own, family, kids in (("S1", ["S1"], 1.0, 1.25, [a]), ("S2", ["S2"], 2.0, 2.5, [b]),
                                               (key, ["S1", "S2"], 3.0, 3.75, [a, b])):
        d, node, spawns = scopes[name]
        assert sorted(i["session_id"] for i in d["instances"]) == instances
        assert (d["cost_usd"], d["family_cost_usd"]) == (own, family), name
        assert sorted(c["child_session_key"] for c in d["subagents"]) == kids, name
        assert (node["own_cost_usd"], node["cumulative_cost_usd"]) == (own, family), name
        assert [c["session_key"] for c in node["children"]] == kids, name
        assert sorted(i["id"] for i in spawns) == kids, name
    assert _table(_cli(db, "tree", "S1").stdout) == [["session", "label", "own $", "total $"],
                                                      [f"{key} (session S1)", "-", "1.0000", "1.2500"],
                                                      [f"  {a}", "a", "0.2500", "0.2500"]]
    assert _table(_cli(db, "tree", key).stdout)[1] == [key, "-", "3.0000", "3.7500"]


def test_calls_naming_another_session_than_their_run_s_are_listed_where_they_count(tmp_path):
    from conftest import listed_as_counted

    log = _HookLog()
    key = "agent:main:main"
    log.call(key, "S1", "R1", 1.0)
    # The run goes on across a reset: its next calls name the key's new instance, which counts them.
    log.ev("llm.call", {"callIndex": 1, "provider": "p", "model": "m", "costUsd": 0.5,
                        "delta": {"input": 1, "output": 1, "total": 2}}, key, "S2", "R1")
    log.ev("tool.start", {"toolName": "read", "toolCallId": "T1"}, key, "S2", "R1")
    log.ev("tool.end", {"toolName": "read", "toolCallId": "T1"}, key, "S2", "R1")
    conn = open_reader(log.ledger(tmp_path))
    try:
        assert listed_as_counted(conn) == []
        listed = {sid: [(i["kind"], i["cost_usd"]) for i in queries.timeline(conn, sid, ["llm", "tool"])]
                  for sid in ("S1", "S2")}
        tools = [t["tool_call_id"] for t in queries.session_detail(conn, "S2")["tool_calls"]]
    finally:
        conn.close()
    assert listed == {"S1": [("llm", 1.0)], "S2": [("llm", 0.5), ("tool", None)]}
    assert tools == ["T1"]


def test_a_timeline_shows_a_subagent_of_no_label_as_a_dash_not_as_none(tmp_path):
    log = _HookLog()
    root, child = "agent:main:main", "agent:main:subagent:c1"
    log.call(root, "S0", "R0", 1.0)
    log.spawn(root, "R0", child)
    db = log.ledger(tmp_path)
    (item,) = json.loads(_cli(db, "timeline", root, "--kinds", "subagent", "--json").stdout)
    assert item["what"].split()[0] == "-"
    (row,) = [line for line in _cli(db, "timeline", root, "--kinds", "subagent").stdout.splitlines()
              if " subagent " in line]
    assert "None" not in row and " - " in row


def test_subagent_tree_and_timeline_costs_mark_the_unpriced_calls_they_leave_out(tmp_path):
    log = _HookLog()
    root, part, blind = "agent:main:main", "agent:main:subagent:part", "agent:main:subagent:blind"
    log.call(root, "S0", "R0", 1.0)
    log.spawn(root, "R0", part, "part")
    log.call(part, "S1", "R1", 0.25)
    log.call(part, "S1", "R2", None)
    log.spawn(root, "R0", blind, "blind")
    log.call(blind, "S2", "R3", None)
    db = log.ledger(tmp_path)

    def text(*args: str) -> list[str]:
        out = _cli(db, *args)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    def cost_of(lines: list[str], name: str) -> str:
        (line,) = [line for line in lines if line.startswith(name) or f" {name} " in line]
        return line.split()[-1]

    note = "* leaves out model calls of unknown cost"
    subagents = text("subagents")
    assert (cost_of(subagents, part), cost_of(subagents, blind)) == ("≥0.2500*", "—*")
    assert sum(note in line for line in subagents) == 1
    by_child = {r["child_session_key"]: r for r in json.loads(_cli(db, "subagents", "--json").stdout)}
    assert (by_child[part]["unpriced_calls"], by_child[blind]["unpriced_calls"]) == (1, 1)

    tree = text("tree", root)
    assert _table("\n".join(tree[:4])) == [["session", "label", "own $", "total $"], [root, "-", "1.0000", "≥1.2500*"],
                                          [f"  {part}", "part", "≥0.2500*", "≥0.2500*"],
                                          [f"  {blind}", "blind", "—*", "—*"]]
    assert tree[4].startswith(note) and sum(note in line for line in tree) == 1
    node = json.loads(_cli(db, "tree", root, "--json").stdout)
    assert (node["own_unpriced_calls"], node["cumulative_unpriced_calls"]) == (0, 2)
    assert [(c["own_unpriced_calls"], c["cumulative_unpriced_calls"]) for c in node["children"]] == [(1, 1), (1, 1)]

    root_timeline = text("timeline", root)
    assert (cost_of(root_timeline, "part"), cost_of(root_timeline, "blind")) == ("≥0.2500*", "—*")
    part_timeline = text("timeline", part, "--kinds", "llm")
    assert [line.split()[-1] for line in part_timeline[1:3]] == ["0.2500", "—*"]
    assert part_timeline[3].startswith(note)
    items = json.loads(_cli(db, "timeline", part, "--kinds", "llm,run", "--json").stdout)
    assert [(i["kind"], i["cost_usd"], i["unpriced_calls"]) for i in items] == [
        ("run", 0.25, 0), ("llm", 0.25, 0), ("run", 0.0, 1), ("llm", None, 1)]

    session = text("session", root)
    assert (cost_of(session, "cost $"), cost_of(session, "with subagents $")) == ("1.0000", "≥1.2500*")
    assert sum(note in line for line in session) == 1
    d = json.loads(_cli(db, "session", root, "--json").stdout)
    assert (d["unpriced_calls"], d["family_unpriced_calls"]) == (0, 2)
    calls = json.loads(_cli(db, "run", "R2", "--json").stdout)["model_calls"]
    assert [(c["cost_usd"], c["unpriced_calls"]) for c in calls] == [(None, 1)]
    (call,) = [line.split() for line in text("run", "R2") if line.startswith("2026-")]
    assert call[1:4] == ["acme-unknown-9", "2", "—*"]


_PICO = 10**12
_ROOT = "agent:main:main"


def _family(n: int) -> tuple[_HookLog, dict[str, tuple[int, int]], dict[str, list[str]]]:
    """A root session with ``n`` subagents: every third spawns two of its own, every fourth is costed by
    its usage snapshot alone, every fifth also makes a call no price table knows. With each key's own
    spend (pico-USD, unpriced calls) and its children in spawn order, reckoned as the log is written."""
    log = _HookLog()
    own: dict[str, tuple[int, int]] = {}
    kids: dict[str, list[str]] = {}

    def session(key: str, parent: str | None, i: int) -> None:
        cost = (i + 1) / 64  # exact in binary: sums compare exactly
        if parent is not None:
            log.spawn(parent, f"R-{parent}", key, f"L{i}")
            kids[parent].append(key)
        kids[key] = []
        if i % 4 == 3:
            log.snapshot_run(key, f"S-{key}", f"R-{key}", cost)
        else:
            log.call(key, f"S-{key}", f"R-{key}", cost)
        if i % 5 == 4:
            log.call(key, f"S-{key}", f"R2-{key}", None)
        own[key] = (round(cost * _PICO), int(i % 5 == 4))

    session(_ROOT, None, 0)
    for i in range(1, n + 1):
        child = f"agent:main:subagent:c{i}"
        session(child, _ROOT, i)
        if i % 3 == 0:
            for j in (1, 2):
                session(f"{child}:g{j}", child, n + 2 * i + j)
    return log, own, kids


def _subtree(key: str, own: dict[str, tuple[int, int]], kids: dict[str, list[str]]) -> tuple[int, int]:
    cost, unpriced = own[key]
    for kid in kids[key]:
        c, u = _subtree(kid, own, kids)
        cost, unpriced = cost + c, unpriced + u
    return cost, unpriced


def test_a_large_family_s_costs_add_up_in_subagents_tree_and_session(tmp_path):
    log, own, kids = _family(30)
    conn = open_reader(log.ledger(tmp_path))
    try:
        rows = queries.subagents(conn, queries.Window())
        node = queries.tree(conn, _ROOT)
        d = queries.session_detail(conn, _ROOT)
    finally:
        conn.close()
    assert {r["child_session_key"]: (round(r["cost_usd"] * _PICO), r["unpriced_calls"]) for r in rows} == \
        {key: spend for key, spend in own.items() if key != _ROOT}
    assert [r["child_session_key"] for r in rows] == [k for k in reversed(list(own)) if k != _ROOT]

    def check(n: dict) -> None:
        key = n["session_key"]
        assert [c["session_key"] for c in n["children"]] == kids[key]
        assert (round(n["own_cost_usd"] * _PICO), n["own_unpriced_calls"]) == own[key]
        assert (round(n["cumulative_cost_usd"] * _PICO), n["cumulative_unpriced_calls"]) == _subtree(key, own, kids)
        for c in n["children"]:
            check(c)

    check(node)
    assert len(own) == 51 and sum(u for _, u in own.values()) == 10
    assert (round(d["family_cost_usd"] * _PICO), d["family_unpriced_calls"]) == _subtree(_ROOT, own, kids)
    assert (round(d["cost_usd"] * _PICO), d["unpriced_calls"]) == own[_ROOT]
    assert {s["child_session_key"]: (round(s["cost_usd"] * _PICO), s["unpriced_calls"]) for s in d["subagents"]} == \
        {key: own[key] for key in kids[_ROOT]}


def _logged_usage(log: _HookLog) -> dict[str, tuple[int, int]]:
    """(model calls, tokens) each session key's lines tell, snapshots' tokens included: reckoned from the log."""
    import orjson

    usage: dict[str, tuple[int, int]] = {}
    for line in log.lines:
        e = orjson.loads(line)
        calls, tokens = usage.get(e["sessionKey"], (0, 0))
        if e["kind"] == "llm.call":
            usage[e["sessionKey"]] = (calls + 1, tokens + e["data"]["delta"]["total"])
        elif e["kind"] == "usage.snapshot":
            usage[e["sessionKey"]] = (calls, tokens + e["data"]["usage"]["total"])
    return usage


def test_the_hot_views_of_a_family_of_thousands_are_the_sums_of_their_subtrees(tmp_path):
    """What gates measure: each view's family is its own spend plus every subagent's below it, at any depth,
    snapshot fallbacks and unpriced calls included; the refresh after a grandchild's batch reads it and its
    ancestors, and a view asked for by session id is the one asked for by key."""
    from agentledger.hot.sessions import HotSessions

    log, own, kids = _family(2_000)
    usage = _logged_usage(log)

    def subtree(key: str) -> tuple[int, int, int, int]:
        calls, tokens = usage[key]
        below = [subtree(kid) for kid in kids[key]]
        return (own[key][0] + sum(b[0] for b in below), own[key][1] + sum(b[1] for b in below),
                calls + sum(b[2] for b in below), tokens + sum(b[3] for b in below))

    def figures(totals) -> tuple[int, int, int, int]:
        return totals["cost_pico"], totals["unpriced_calls"], totals["llm_calls"], totals["total_tokens"]

    conn = open_reader(log.ledger(tmp_path))
    try:
        views = queries.hot_sessions(conn, [*own, "S-" + _ROOT])
        grandchild = "agent:main:subagent:c3:g2"
        # None: a key it may be held under (the session ids here) but not read, as no view is held under it
        refreshed = {key: hot for key, hot in HotSessions(tmp_path / "hot").read(conn, ["S-" + grandchild]).items()
                     if hot is not None}
        detail = queries.session_detail(conn, _ROOT)
    finally:
        conn.close()
    assert len(own) == 3_333
    assert {key: (figures(views[key]), figures(views[key]["family"])) for key in own} == \
        {key: ((*own[key], *usage[key]), subtree(key)) for key in own}
    assert views["S-" + _ROOT] == views[_ROOT]
    assert round(detail["family_cost_usd"] * _PICO) == views[_ROOT]["family"]["cost_pico"]
    assert set(refreshed) == {grandchild, "agent:main:subagent:c3", _ROOT}
    assert {key: (hot.family.cost_pico, hot.family.unpriced_calls) for key, hot in refreshed.items()} == \
        {key: subtree(key)[:2] for key in refreshed}


def _statements(db: Path) -> dict[str, int]:
    """How many statements each family read runs."""
    conn = open_reader(db)
    ran: list[str] = []
    conn.set_profile(lambda sql, _ns: ran.append(sql))
    counts = {}
    try:
        for name, read in (("subagents", lambda: queries.subagents(conn, queries.Window())),
                           ("tree", lambda: queries.tree(conn, _ROOT)),
                           ("session", lambda: queries.session_detail(conn, _ROOT)),
                           ("hot view", lambda: queries.hot_sessions(conn, [_ROOT, "S-" + _ROOT]))):
            ran.clear()
            read()
            counts[name] = len(ran)
    finally:
        conn.close()
    return counts


def test_a_family_is_read_in_as_many_statements_however_many_subagents(tmp_path):
    small, large = (_statements(_family(n)[0].ledger(tmp_path / str(n))) for n in (10, 30))
    assert small == large


def test_a_subagent_cycle_still_ends_with_finite_totals(tmp_path):
    log = _HookLog()
    a, b = "agent:main:subagent:a", "agent:main:subagent:b"
    log.call(a, "SA", "RA", 0.5)
    log.spawn(a, "RA", b, "b")
    log.call(b, "SB", "RB", 0.25)
    log.call(b, "SB", "RB2", None)
    log.spawn(b, "RB", a, "a")
    conn = open_reader(log.ledger(tmp_path))
    try:
        node = queries.tree(conn, a)
        d = queries.session_detail(conn, a)
        rows = queries.subagents(conn, queries.Window())
        hot = queries.hot_session(conn, a)
    finally:
        conn.close()
    assert [c["session_key"] for c in node["children"]] == [b] and node["children"][0]["children"] == []
    assert (node["cumulative_cost_usd"], node["cumulative_unpriced_calls"]) == (0.75, 1)
    assert {r["child_session_key"]: (r["cost_usd"], r["unpriced_calls"]) for r in rows} == {a: (0.5, 0), b: (0.25, 1)}
    # The cycle back to the session is not its cost a second time.
    assert (d["family_cost_usd"], d["family_unpriced_calls"]) == (0.75, 1)
    assert (hot["family"]["cost_pico"], hot["family"]["unpriced_calls"]) == (750_000_000_000, 1)


def test_metric_labels_are_capped_to_top_n(corpus_db, oc_expected):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from agentledger.metrics import registry_for

    text = generate_latest(registry_for(corpus_db, top_n=3)).decode()
    tools = next(f for f in text_string_to_metric_families(text) if f.name == "agentledger_tool_calls")
    names = {s.labels["tool"] for s in tools.samples}
    assert len(names) == 4 and "_other" in names
    t = oc_expected["totals"]
    assert sum(s.value for s in tools.samples) == t["tool_calls"] - t["orphaned_tool_calls"]  # ended calls only


def test_capped_label_series_never_go_back_as_other_values_grow(tmp_path, db):
    """A value moving from ``_other`` to a label of its own took its tokens, cost and durations
    out of ``_other``, which Prometheus reads as a counter reset: picked by call count, a model
    with few dear calls left ``_other`` and its cost went down; picked by the day of their first
    event, one read late with an older day did."""
    import random

    from logwriter import LogDir, event

    rng = random.Random(7)
    logs = LogDir(tmp_path / "state")
    models, tools = ["m-a", "m-b", "m-c", "m-d"], ["read", "write", "exec", "grep"]
    seen, n = [], 0
    for day in (2, 3, 0, 1):  # older logs read last
        for _ in range(6):
            lines = []
            for _ in range(rng.randint(1, 4)):
                n += 1
                ts = 1_790_000_000_000 + day * 86_400_000 + n
                model = rng.choice(models[: day + 1])
                lines.append(event(n, "llm.call", {
                    "provider": rng.choice(["p1", "p2"]), "model": model, "durationMs": rng.randint(1, 90_000),
                    "delta": {"input": rng.randint(1, 9), "output": 1},
                    "costUsd": rng.choice([0.001, 5.0])}, ts=ts))
                n += 1
                tool = rng.choice(tools[: day + 1])
                lines.append(event(n, "tool.end", {"toolName": tool, "toolCallId": f"t{n}",
                                                   "durationMs": rng.randint(1, 60_000),
                                                   "isError": rng.random() < 0.3}, ts=ts + 1))
            logs.append(b"".join(lines))
            ingest(db, logs.root)
            seen.append(metric_counters(db, top_n=2))
    assert any(k[1] == (("model", "_other"), ("provider", "p1"), ("token_type", "input")) for k in seen[-1])
    for before, after in zip(seen, seen[1:]):
        assert all(after.get(key, 0) >= value for key, value in before.items()), \
            [(key, value, after.get(key)) for key, value in before.items() if after.get(key, 0) < value]


def test_metric_floors_kept_in_a_file_that_cannot_be_read_start_from_the_ledger(corpus_db, tmp_path):
    from agentledger.metrics import CounterFloors

    path = tmp_path / "metric-floors.json"
    path.write_bytes(b'{"epoch": "torn')
    assert metric_counters(corpus_db, floors=CounterFloors(path)) == metric_counters(corpus_db)  # nothing held
    assert json.loads(path.read_bytes())["samples"]  # and kept anew for the next start


def test_metric_floors_stand_only_for_the_label_cap_and_ledger_they_were_served_under(corpus_db, tmp_path):
    # Another top_n moves counts between a value's series and _other: floors held across it count them twice.
    from agentledger.metrics import CounterFloors

    path = tmp_path / "metric-floors.json"
    highest = {key: value * 10 for key, value in metric_counters(corpus_db, top_n=3, floors=CounterFloors(path)).items()}
    saved = json.loads(path.read_bytes())
    path.write_bytes(json.dumps({**saved, "samples": [[n, [list(kv) for kv in labels], highest[(n, labels)]]
                                                      for n, labels in highest]}).encode())
    assert metric_counters(corpus_db, top_n=3, floors=CounterFloors(path)) == highest  # held across a restart
    assert metric_counters(corpus_db, top_n=5, floors=CounterFloors(path)) == metric_counters(corpus_db, top_n=5)
    other = tmp_path / "other.json"
    other.write_bytes(json.dumps({**saved, "epoch": ["another ledger", 0, 3]}).encode())
    assert metric_counters(corpus_db, top_n=3, floors=CounterFloors(other)) == metric_counters(corpus_db, top_n=3)


def test_timeline_holds_every_model_and_tool_call_of_the_session(corpus_db, oc_expected):
    want = next(s for s in oc_expected["sessions_sample"] if s["tool_calls"] and s["llm_calls"] > 3)
    conn = open_reader(corpus_db)
    try:
        items = queries.timeline(conn, want["sessionId"])
    finally:
        conn.close()
    kinds = [i["kind"] for i in items]
    assert kinds.count("llm") == want["llm_calls"]
    assert kinds.count("tool") == want["tool_calls"]
    assert kinds.count("run") == want["runs"]
    assert [i["at"] for i in items] == sorted(i["at"] for i in items)
    assert round(sum(i["cost_usd"] for i in items if i["kind"] == "llm") * 10**12) == want["cost_pico_usd"]


def test_a_subagent_spawn_extends_its_parent_session_span(tmp_path):
    import orjson
    from logwriter import LogDir

    t0 = 1_790_000_000_000

    def ev(n, kind, data, **env):
        base = {"id": f"evt_{n:016x}", "ts": t0 + n * 1000, "seq": n, "agentId": "main",
                "sessionKey": "agent:main:main", "sessionId": "S", "runId": "R", "kind": kind, "data": data,
                "source": "hook"}
        base.update(env)
        return orjson.dumps(base) + b"\n"

    logs = LogDir(tmp_path / "state")
    logs.append(ev(1, "run.start", {"model": "m", "provider": "p"}))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    # A later batch whose only event is the spawn: it names the run and the key, not the session id.
    logs.append(ev(9, "subagent.spawn", {"childSessionKey": "agent:main:subagent:x"}, sessionId="unknown"))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        (s,) = queries.sessions(conn, queries.Window(), session_ids=["S"])
    finally:
        conn.close()
    assert s["last_activity_at"] == "2026-09-21T14:13:29.000Z"


@pytest.mark.parametrize("group_by", ["model", "provider", "agent", "session", "day"])
def test_every_grouping_of_one_day_adds_up_to_that_day(corpus_db, oc_expected, group_by):
    day = oc_expected["per_day"]["2026-10-02"]
    rows = json.loads(_cli(corpus_db, "costs", "--json", "--group-by", group_by, "--since", "2026-10-02",
                           "--until", "2026-10-02T23:59:59.999Z").stdout)["rows"]
    assert round(sum(r["cost_usd"] for r in rows) * 10**12) == pytest.approx(day["cost_pico_usd"], abs=len(rows))
    assert sum(r["llm_calls"] for r in rows) == day["llm_calls"]


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/New_York"])
def test_a_day_asked_for_under_tz_is_that_zone_s_whole_day(corpus_db, zone):
    every = json.loads(_cli(corpus_db, "costs", "--json", "--group-by", "day", "--tz", zone).stdout)["rows"]
    day = next(r for r in every if r["day"] == "2026-10-02")
    one = json.loads(_cli(corpus_db, "costs", "--json", "--group-by", "day", "--tz", zone, "--since", "2026-10-02",
                          "--until", "2026-10-02").stdout)["rows"]
    assert one == [day]
    local = json.loads(_cli(corpus_db, "costs", "--json", "--group-by", "day", "--tz", zone, "--since",
                            "2026-10-02T00:00:00", "--until", "2026-10-02T23:59:59.999").stdout)["rows"]
    assert local == [day]  # a time without an offset is the zone's too


def test_the_last_day_there_is_counts_under_a_zone_whose_clock_is_past_it_already(tmp_path):
    # 9999-12-31T23:00Z is a time the decoder takes, but Tokyo's clock is in the year 10000 then: costs by day
    # in Tokyo ended in a traceback (exit 1).
    from logwriter import LogDir, llm_call

    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1) + llm_call(2, ts=253_402_297_200_000))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    rows = cli_json(db, "costs", "--group-by", "day", "--tz", "Asia/Tokyo")["rows"]
    assert [(r["day"], r["llm_calls"]) for r in rows] == [("2026-09-21", 1), ("9999-12-31", 1)]


def test_a_session_of_many_instances_costs_exactly_what_usage_says(tmp_path):
    # Its cost was a float sum over the instances: 300 resets of one call each came to 370.370367036901, not
    # the 370.3703670369 usage and its cost by model give.
    from logwriter import LogDir, event

    logs = LogDir(tmp_path / "logs")
    for n in range(1, 301):
        logs.append(event(n, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                          "delta": {"input": 1, "output": 1, "total": 2}, "costUsd": 1.234567890123},
                          session="main", session_id=f"sid-{n}", run=f"run-{n}", ts=1_790_000_000_000 + n * 1000))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    detail = cli_json(db, "session", "agent:main:main")
    assert len(detail["instances"]) == 300
    assert detail["cost_usd"] == detail["family_cost_usd"] == cli_json(db, "usage")["cost_usd"] == 370.3703670369


def test_a_session_over_9000_dollars_costs_exactly_its_instances_sum(tmp_path):
    # Its cost was rebuilt from each instance's float, which past 2**53 pico-dollars ($9,007) holds no longer
    # every pico-dollar: some sessions came out a few pico-dollars off their own instance.
    from logwriter import LogDir, event

    logs = LogDir(tmp_path / "logs")
    for n in range(400):  # 40 sessions of 10 calls of about $999
        cost = 999.123456789012 - n * 0.000000000311
        logs.append(event(n + 1, "llm.call", {"callIndex": n, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                              "delta": {"input": 1, "output": 1, "total": 2}, "costUsd": cost},
                          session=f"k{n // 10}", ts=1_790_000_000_000 + n * 1000))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        details = [queries.session_detail(conn, f"agent:main:k{k}") for k in range(40)]
    finally:
        conn.close()
    assert [d["cost_usd"] for d in details] == [d["instances"][0]["cost_usd"] for d in details]
    assert all(d["cost_usd"] > 9_000 for d in details)


@pytest.mark.parametrize("asked", ["cli", "http"])
def test_a_session_is_read_in_one_snapshot_while_the_writer_commits(tmp_path, monkeypatch, asked):
    # Each statement read the ledger as it was then: a session's instances counted 2 calls and its cost by
    # model 3 when serve committed between them, from the CLI and from GET /v1/sessions/{key} alike.
    from logwriter import LogDir, llm_call

    import agentledger.cli.queries as cli_queries
    import agentledger.ledger.db as ledger_db  # where the HTTP readers, kept between requests, are opened
    from agentledger.http import ApiServer

    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1) + llm_call(2))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    reads = []

    def commit_after_the_first_read(sql):
        if sql.split(None, 1)[0].upper() in ("SELECT", "WITH"):
            reads.append(sql)
            if len(reads) == 2:  # the answer has read already: a commit now is past its snapshot
                logs.append(llm_call(3))
                ingest(db, logs.root)
        return True

    def traced(path):
        conn = open_reader(path)
        conn.exec_trace = lambda cursor, sql, bindings: commit_after_the_first_read(sql)
        return conn

    monkeypatch.setattr(cli_queries if asked == "cli" else ledger_db, "open_reader", traced)
    if asked == "cli":
        out = json.loads(CliRunner().invoke(cli, ["--db", str(db), "session", "agent:main:s1", "--json"],
                                            catch_exceptions=False).output)
    else:
        server = ApiServer(db, "127.0.0.1:0")
        server.start()
        try:
            with urllib.request.urlopen(f"{server.address}/v1/sessions/agent:main:s1", timeout=30) as response:
                out = json.loads(response.read())
        finally:
            server.close()
    assert len(reads) >= 2
    assert sum(i["llm_calls"] for i in out["instances"]) == sum(m["llm_calls"] for m in out["cost_by_model"]) == 2


def test_an_answer_piped_to_a_reader_that_has_not_read_it_yet_holds_no_snapshot(tmp_path):
    # `agentledger events | less`, the pager left open: the answer's snapshot was held until the pipe drained,
    # and serve could not checkpoint the WAL meanwhile.
    from logwriter import LogDir, llm_call

    logs = LogDir(tmp_path / "logs")
    logs.append(b"".join(llm_call(n) for n in range(1, 3001)))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    reader = subprocess.Popen([sys.executable, "-m", "agentledger", "--db", str(db), "events", "--limit", "3000",
                               "--json"], env=cli_env(db), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        writer = open_writer(db)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not _blocked_writing(reader.pid):
                time.sleep(0.05)
            assert reader.poll() is None, "the answer fit the pipe"
            logs.append(b"".join(llm_call(n) for n in range(3001, 3101)))
            ingest(db, logs.root)
            busy, _, _ = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
            assert busy == 0
        finally:
            writer.close()
    finally:
        out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0 and len(json.loads(out)) == 3000


def _blocked_writing(pid: int) -> bool:
    """Whether the process waits to write into a full pipe."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text().endswith("pipe_write")  # anon_pipe_write on newer kernels
    except OSError:
        return False


@pytest.mark.parametrize("command", [["session", "agent:main:main"], ["run", "x"], ["tree", "agent:main:main"]])
@pytest.mark.parametrize("flag", [["--since", "1d"], ["--until", "1d"], ["--agent", "main"], ["--limit", "1"],
                                  ["--csv"]])
def test_one_session_or_run_refuses_flags_it_would_ignore(corpus_db, command, flag):
    out = _cli(corpus_db, *command, *flag)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and f"No such option '{flag[0]}'" in out.stderr


def test_timeline_keeps_to_its_window(corpus_db):
    every = json.loads(_cli(corpus_db, "timeline", "agent:main:main", "--json").stdout)
    day = json.loads(_cli(corpus_db, "timeline", "agent:main:main", "--json", "--since", "2026-10-02",
                          "--until", "2026-10-02T23:59:59.999Z").stdout)
    assert day == [i for i in every if i["at"] and "2026-10-02" <= i["at"] < "2026-10-03"]
    assert 0 < len(day) < len(every)
    out = _cli(corpus_db, "timeline", "agent:main:main", "--agent", "main")
    assert out.returncode == 2 and "No such option '--agent'" in out.stderr


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_timeline_s_limit_kinds_and_window_cut_the_whole_timeline(corpus_db, data):
    """Each kind reads only its rows of the window, the first --limit of them: the answer is still the
    whole timeline's, filtered then cut, ties in time in the same order."""
    conn = open_reader(corpus_db)
    try:
        names = sorted({n for row in conn.execute("SELECT session_key, session_id FROM sessions") for n in row if n})
        name = data.draw(st.sampled_from(names))
        every = queries.timeline(conn, name)
        kinds = data.draw(st.none() | st.lists(st.sampled_from(queries.TIMELINE_KINDS), min_size=1, unique=True))
        times = sorted({round(dt.datetime.fromisoformat(i["at"]).timestamp() * 1000) for i in every if i["at"]})
        edge = st.none() | st.sampled_from(times or [0]).flatmap(lambda ms: st.sampled_from([ms - 1, ms, ms + 1]))
        since, until = sorted(data.draw(st.tuples(edge, edge)), key=lambda ms: -1 if ms is None else ms)
        limit = data.draw(st.none() | st.integers(1, len(every) + 1))
        got = queries.timeline(conn, name, kinds, queries.Window(since=since, until=until, limit=limit))
    finally:
        conn.close()
    lo, hi = iso(since) or "", iso(until) or "~"
    want = [i for i in every if (kinds is None or i["kind"] in kinds)
            and (since is None and until is None or i["at"] and lo <= i["at"] <= hi)]
    assert got == want[:limit]


def test_a_short_or_narrow_timeline_reads_only_the_rows_it_shows(tmp_path):
    """`timeline --limit 5`, `--kinds compaction` and a window after the session built the whole session
    first: every call of it came up from SQLite, however few were shown."""
    log = _HookLog()
    key = "agent:main:main"
    for r in range(3):
        log.ev("run.start", {"model": "m", "provider": "p"}, key, "S1", f"R{r}")
        for t in range(200):
            log.ev("tool.end", {"toolName": "read", "toolCallId": f"T{r}.{t}"}, key, "S1", f"R{r}")
        log.ev("run.end", {"model": "m", "provider": "p"}, key, "S1", f"R{r}")
    db = log.ledger(tmp_path)
    conn = open_reader(db)
    read = 0

    def counted(cursor, row):
        nonlocal read
        read += 1
        return row

    try:
        every = queries.timeline(conn, key)
        assert len(every) == 3 + 3 * 200
        conn.row_trace = counted
        for kinds, w, shown in ((None, queries.Window(limit=5), every[:5]), (["compaction"], queries.Window(), []),
                                (None, queries.Window(since=4_000_000_000_000), [])):
            read = 0
            assert queries.timeline(conn, key, kinds, w) == shown
            assert read <= 5 * 6 + 5, (kinds, w, read)  # each kind's first five, and the session's own few rows
    finally:
        conn.close()


@pytest.mark.parametrize("command, flag", [(["rejects"], ["--agent", "main"]), (["usage"], ["--limit", "1"])])
def test_list_commands_refuse_flags_they_would_ignore(corpus_db, command, flag):
    """A rejected line could not be read, so it names no agent; usage is one row."""
    out = _cli(corpus_db, *command, *flag)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and f"No such option '{flag[0]}'" in out.stderr


def test_sessions_refuse_a_daemon_url_without_live(corpus_db):
    out = _cli(corpus_db, "sessions", "--url", "http://127.0.0.1:9")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "--url" in out.stderr and "only with --live" in out.stderr


def test_rejected_lines_of_one_agent_are_unknown(corpus_db):
    every = json.loads(_cli(corpus_db, "usage", "--json").stdout)
    main = json.loads(_cli(corpus_db, "usage", "--json", "--agent", "main").stdout)
    assert every["rejected_lines"] == 4 and main["rejected_lines"] is None  # not all 4, as if main's
    table = dict(line.rsplit(None, 1) for line in _cli(corpus_db, "usage", "--agent", "main").stdout.splitlines())
    assert table["rejected lines"] == "-"


@pytest.mark.parametrize("kinds", ["", " ", "run,", "run,,tool", "runs"])
def test_timeline_refuses_a_blank_or_unknown_kind(corpus_db, kinds):
    out = _cli(corpus_db, "timeline", "agent:main:main", "--kinds", kinds)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "--kinds" in out.stderr and "unknown kind" in out.stderr
    assert "choose from run, llm, tool" in out.stderr


def test_live_sessions_refuse_a_window(corpus_db):
    out = _cli(corpus_db, "sessions", "--live", "--since", "1d", "--url", "http://127.0.0.1:9")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--since/--until" in out.stderr


def test_costs_total_is_the_window_s_whatever_the_limit(corpus_db):
    want = json.loads(_cli(corpus_db, "usage", "--json").stdout)["cost_usd"]
    for group_by in ("model", "session", "day"):
        lines = _cli(corpus_db, "costs", "--group-by", group_by, "--limit", "2").stdout.splitlines()
        assert len(lines) == 4 and lines[-1].startswith("TOTAL of all ")
        assert float(lines[-1].split()[-1]) == pytest.approx(want, abs=5e-5)


def test_costs_json_carries_the_window_s_total_whatever_the_limit(corpus_db):
    # --json gave the rows alone: under --limit a script could not tell the total the table prints.
    usage = json.loads(_cli(corpus_db, "usage", "--json").stdout)
    for group_by in ("model", "provider", "agent", "session", "day"):
        every = json.loads(_cli(corpus_db, "costs", "--group-by", group_by, "--json").stdout)
        cut = json.loads(_cli(corpus_db, "costs", "--group-by", group_by, "--limit", "1", "--json").stdout)
        assert every["group_by"] == cut["group_by"] == group_by
        assert cut["rows"] == every["rows"][:1] and len(every["rows"]) > 1
        assert cut["total"] == every["total"] and every["total"]["groups"] == len(every["rows"])
        total = every["total"]
        assert total["cost_usd"] == pytest.approx(usage["cost_usd"], abs=1e-9)
        assert (total["llm_calls"], total["llm_errors"], total["total_tokens"], total["unpriced_calls"]) == \
            (usage["llm_calls"], usage["llm_errors"], usage["total_tokens"], usage["unpriced_calls"])
    tools = json.loads(_cli(corpus_db, "costs", "--group-by", "tool", "--limit", "1", "--json").stdout)
    assert len(tools["rows"]) == 1 and tools["total"]["groups"] > 1
    assert (tools["total"]["calls"], tools["total"]["errors"]) == (usage["tool_calls"], usage["tool_errors"])
    # CSV stays a table of the rows.
    lines = _cli(corpus_db, "costs", "--group-by", "model", "--limit", "2", "--csv").stdout.splitlines()
    assert len(lines) == 3 and not any("TOTAL" in line for line in lines)


@pytest.mark.parametrize("args, code, say", [
    (["session", b"\xff"], 1, "agentledger: no session"), (["run", b"\xff"], 1, "agentledger: no run"),
    (["tree", b"\xff"], 1, "agentledger: no session"), (["timeline", b"\xff"], 1, "agentledger: no session"),
    (["events", "--kind", b"\xff"], 0, "no events match"), (["sessions", "--agent", b"\xff"], 0, "no sessions match"),
    (["files", "--path", b"\xff"], 0, "no tool calls touched"),
])
def test_an_argument_that_is_not_utf8_finds_nothing(corpus_db, args, code, say):
    out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(corpus_db), *args], capture_output=True,
                         timeout=60)
    assert out.returncode == code, out.stderr
    text = (out.stderr if code else out.stdout).decode()
    assert text.count("\n") == 1 and text.startswith(say)


def test_a_date_until_takes_in_that_day_as_a_date_since_does(corpus_db, oc_expected):
    # A date read as its first millisecond left the day out: --since D --until D was always empty.
    day = oc_expected["per_day"]["2026-10-02"]
    out = _cli(corpus_db, "usage", "--since", "2026-10-02", "--until", "2026-10-02", "--json")
    got = json.loads(out.stdout)
    assert (got["llm_calls"], round(got["cost_usd"], 8)) == (day["llm_calls"], round(day["cost_usd"], 8))
    two = json.loads(_cli(corpus_db, "usage", "--since", "2026-10-02", "--until", "2026-10-03", "--json").stdout)
    assert two["llm_calls"] == day["llm_calls"] + oc_expected["per_day"]["2026-10-03"]["llm_calls"]
    # An exact time stays exact.
    edge = json.loads(_cli(corpus_db, "usage", "--until", "2026-10-02T00:00:00Z", "--json").stdout)
    assert edge["llm_calls"] == oc_expected["per_day"]["2026-10-01"]["llm_calls"]


def test_costs_and_top_by_session_tell_instances_of_one_key_apart(corpus_db):
    # A key reset several times has several rows: with no id column they read as one session repeated.
    for args in (("costs", "--group-by", "session"), ("top", "sessions")):
        out = _cli(corpus_db, *args)
        assert out.returncode == 0, out.stderr
        header, *rows = out.stdout.splitlines()
        assert header.split()[:2] == ["session", "id"]
        keyed = [row.split()[:2] for row in rows if not row.startswith("TOTAL")]
        assert len({key for key, _ in keyed}) < len(keyed) == len({sid for _, sid in keyed})


def test_metric_floors_kept_before_spend_was_split_by_source_hold_no_series(corpus_db, tmp_path):
    # 0027 split the spend series by source and added the snapshot fallbacks: highest values kept of the
    # old layout held `log` at a sum that took in every source's costs, and hid new spend from delta().
    from agentledger.metrics import CounterFloors

    db = tmp_path / "ledger.db"
    shutil.copyfile(corpus_db, db)
    path = tmp_path / "metric-floors.json"
    metric_counters(db, floors=CounterFloors(path))
    saved = json.loads(path.read_bytes())
    path.write_bytes(json.dumps({**saved, "samples": [[n, labels, value * 10] for n, labels, value, *_ in saved["samples"]]})
                     .encode())
    conn = apsw.Connection(str(db))
    as_of_version(conn, 27)
    conn.close()
    open_writer(db).close()
    assert metric_counters(db, floors=CounterFloors(path)) == metric_counters(db)


def test_a_turn_cut_short_names_the_model_its_calls_used(tmp_path, db):
    """A transcript's turn says its model only at its end: one that never ended (here its tool call got no
    result) still shows the model its last call used, in `runs`, `run` and a session's page."""
    from test_transcript_sources import _sessions_dir, oc_assistant, oc_header, oc_result, oc_user

    sid = "5a5a5a5a-1111-4111-8111-111111111111"
    sdir = _sessions_dir(tmp_path, "agent:main:main", sid)
    (sdir / f"{sid}.jsonl").write_bytes(oc_header(sid) + oc_user("u1", 1)
                                        + oc_assistant("a1", 2, tool="call-0", model="m-old") + oc_result("r1", 3, "call-0")
                                        + oc_assistant("a2", 4, tool="call-1", model="m-new"))
    ingest(db, tmp_path / "state", fmt="oc-transcript")
    (run,) = cli_json(db, "runs")
    assert (run["status"], run["model"], run["provider"]) == ("running", "m-new", "anthropic")
    assert cli_json(db, "run", run["run_id"])["model"] == "m-new"
    assert [r["model"] for r in cli_json(db, "session", "agent:main:main")["runs"]] == ["m-new"]


def test_numbers_a_producer_wrote_as_strings_count(tmp_path):
    """A count, duration or cost written as a JSON string ("1000", "0.01") is the number it spells: they were
    read as no tokens and no cost. A string that is no plain decimal number (" 1000", "1_000") still counts
    for nothing."""
    log = _HookLog()
    key = "agent:main:main"
    log.ev("llm.call", {"callIndex": "0", "provider": "p", "model": "m", "costUsd": "0.01", "durationMs": "1500",
                        "delta": {"input": "1000", "output": "200", "total": "1200"}}, key, "S1", "R1")
    log.ev("llm.call", {"callIndex": "1", "provider": "p", "model": "m", "costUsd": "0.02",
                        "delta": {"input": " 1000", "output": "1_000", "total": "2"}}, key, "S1", "R1")
    log.ev("tool.end", {"toolName": "read", "toolCallId": "T1", "durationMs": "2500"}, key, "S1", "R1")
    db = log.ledger(tmp_path)
    usage = cli_json(db, "usage")
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (1000, 200, 1202)
    assert (usage["cost_usd"], usage["unpriced_calls"]) == (0.03, 0)
    (tool,) = cli_json(db, "tools")
    assert tool["duration_s"] == 2.5



@pytest.mark.parametrize("ends_first", [False, True])
@pytest.mark.parametrize("read_apart", [False, True])  # in one batch, or the second half by a later ingest
def test_a_telemetry_tool_call_s_file_and_command_are_its_start_s_unless_its_end_names_them(
        tmp_path, ends_first, read_apart):
    """tool.start's params name what a call was asked to touch or run: only tool.end's filePath and
    execCommand were read, so a call that ended without them, or never ended, named no file or command."""
    from logwriter import LogDir

    key, sid, run = "agent:main:main", "S1", "R1"
    log = _HookLog()
    log.ev("run.start", {"model": "m", "provider": "p"}, key, sid, run)
    for call, tool, params in (("T1", "read", {"file_path": "/home/alice/notes/todo.md"}),
                               ("T2", "exec", {"command": "rm -rf /tmp/foo", "workdir": "/tmp"}),
                               ("T3", "write", {"path": "/a/asked.md"}),
                               ("T4", "edit", {"file_path": "/a/kept.md"})):
        log.ev("tool.start", {"toolName": tool, "toolCallId": call, "params": params}, key, run=run)
    starts = len(log.lines)
    log.ev("tool.end", {"toolName": "exec", "toolCallId": "T2", "isError": False}, key, run=run)
    log.ev("tool.end", {"toolName": "write", "toolCallId": "T3", "filePath": "/a/written.md"}, key, run=run)
    log.ev("tool.end", {"toolName": "edit", "toolCallId": "T4"}, key, run=run)
    halves = [log.lines[:starts], log.lines[starts:]]
    if ends_first:
        halves.reverse()
    logs, db = LogDir(tmp_path / "state"), tmp_path / "l.db"
    for lines in halves if read_apart else [halves[0] + halves[1]]:
        logs.append(b"\n".join(lines) + b"\n")
        ingest(db, logs.root)
    want = {"T1": "/home/alice/notes/todo.md", "T3": "/a/written.md", "T4": "/a/kept.md"}
    assert {r["tool_call_id"]: r["file_path"] for r in cli_json(db, "files")} == want
    assert {r["tool_call_id"]: r["file_path"] for r in cli_json(db, "run", run)["tool_calls_list"]} == {
        **want, "T2": None}
    conn = open_reader(db)
    try:
        assert conn.execute("SELECT tool_call_id, exec_command FROM tool_calls WHERE exec_command IS NOT NULL"
                            ).fetchall() == [("T2", "rm -rf /tmp/foo")]
    finally:
        conn.close()


def test_a_time_no_date_can_show_left_by_an_older_version_fails_no_query(corpus_db, tmp_path):
    # Such times are rejected now; a ledger that indexed one made `sessions`, `events` and /metrics fail.
    db = tmp_path / "ledger.db"
    shutil.copyfile(corpus_db, db)
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE sessions SET last_ms = 100000000000000000 WHERE rowid = (SELECT min(rowid) FROM sessions)")
    conn.execute("UPDATE events SET ts_ms = 100000000000000000 WHERE (ts_ms, id) = "
                 "(SELECT ts_ms, id FROM events ORDER BY ts_ms DESC LIMIT 1)")
    conn.close()
    for args in (["sessions"], ["events"], ["sessions", "--json"], ["events", "--json"]):
        out = _cli(db, *args)
        assert out.returncode == 0, (args, out.stderr)
