"""A run's usage.snapshot cost is a fallback for runs without per-call facts, never added on top."""

from __future__ import annotations

import random
import subprocess
import sys

import apsw
import orjson
import pytest
from conftest import as_of_version, cli_json, ingest, metric_counters
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ledgerdump import verify
from logwriter import LogDir

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.verify import SNAPSHOT_OF_RUN, repair_rollups

T = 1_790_000_000_000


def ev(n: int, kind: str, data: dict, **env) -> bytes:
    base = {"id": f"evt_{n:016x}", "ts": T + n * 1000, "seq": n, "agentId": "main",
            "sessionKey": "agent:main:main", "sessionId": "S", "kind": kind, "data": data, "source": "hook"}
    base.update(env)
    return orjson.dumps(base) + b"\n"


def snapshot(n: int, cost: float, **env) -> bytes:
    return ev(n, "usage.snapshot", {"provider": "p", "model": "m", "costUsd": cost,
                                    "usage": {"input": 1, "output": 1, "total": 2}}, agentId="unknown", **env)


def run(n: int, run_id: str, *, calls: list[float], snap: float, **env) -> bytes:
    out = ev(n, "run.start", {"model": "m", "provider": "p"}, runId=run_id, **env)
    for i, c in enumerate(calls):
        out += ev(n + 1 + i, "llm.call", {"callIndex": i, "provider": "p", "model": "m", "costUsd": c,
                                          "delta": {"input": 1, "output": 1, "total": 2}},
                  runId=run_id, agentId="unknown", **env)
    k = n + 1 + len(calls)
    return out + snapshot(k, snap, **env) + ev(k + 1, "run.end", {"model": "m", "provider": "p"}, runId=run_id, **env)


def _migrated_from(db, version: int) -> None:
    """The ledger taken back to schema ``version``, as an older agentledger left it, then opened by this one."""
    conn = apsw.Connection(str(db))
    try:
        as_of_version(conn, version)
    finally:
        conn.close()
    open_writer(db).close()


@pytest.mark.parametrize("order", ["in order", "reversed"])
def test_snapshot_cost_only_for_runs_without_calls(tmp_path, db, order):
    logs = LogDir(tmp_path / "state")
    lines = [run(10, "R1", calls=[0.25, 0.5], snap=0.75) + run(30, "R2", calls=[], snap=2.0)]
    data = b"".join(lines)
    if order == "reversed":
        data = b"".join(reversed(data.splitlines(keepends=True)))
    logs.append(data)
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        u = queries.usage(conn, queries.Window())
        (s,) = queries.sessions(conn, queries.Window())
    finally:
        conn.close()
    # R1: its two calls (0.75); R2: no calls, so its snapshot (2.0). Never 0.75 + 0.75 + 2.0.
    assert u["cost_usd"] == pytest.approx(2.75)
    assert s["cost_usd"] == pytest.approx(2.75)
    assert u["llm_calls"] == 2 and u["runs"] == 2


def test_runs_cost_what_they_count_in_every_total(tmp_path, db):
    """A run without model calls costs its snapshot in the runs list, one run, top runs and a session's runs,
    as it does in usage: the runs' costs add up to usage's."""
    logs = LogDir(tmp_path / "state")
    logs.append(run(10, "R1", calls=[0.25, 0.5], snap=0.75) + run(30, "R2", calls=[], snap=2.0))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        w = queries.Window()
        by_id = {r["run_id"]: r["cost_usd"] for r in queries.runs(conn, w)}
        assert by_id == {"R1": pytest.approx(0.75), "R2": pytest.approx(2.0)}
        assert sum(by_id.values()) == pytest.approx(queries.usage(conn, w)["cost_usd"])
        assert queries.run_detail(conn, "R2")["cost_usd"] == pytest.approx(2.0)
        assert [r["run_id"] for r in queries.top(conn, w, "runs")] == ["R2", "R1"]
        detail = queries.session_detail(conn, "agent:main:main")
        assert {r["run_id"]: r["cost_usd"] for r in detail["runs"]} == by_id
    finally:
        conn.close()


@pytest.mark.parametrize(("first", "second", "want"), [
    ({"calls": [], "snap": 1.0}, {"calls": [], "snap": 2.0}, 3.0),
    ({"calls": [], "snap": 1.0}, {"calls": [5.0], "snap": 5.0}, 6.0),
])
def test_a_snapshot_is_the_fallback_of_its_own_run_only(tmp_path, db, first, second, want):
    """A snapshot up to a minute after a run's end may be that run's: not once the session's next run began."""
    logs = LogDir(tmp_path / "state")
    logs.append(run(10, "R1", **first) + run(20, "R2", **second))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        assert queries.usage(conn, queries.Window())["cost_usd"] == pytest.approx(want)
        (s,) = queries.sessions(conn, queries.Window())
        assert s["cost_usd"] == pytest.approx(want)
    finally:
        conn.close()


def test_a_run_read_without_its_start_still_falls_back_on_its_snapshot(tmp_path, db):
    """A log that begins mid-run holds the run's end (with its duration) and its snapshot, not its start."""
    logs = LogDir(tmp_path / "state")
    lines = run(10, "R1", calls=[], snap=0.75).splitlines(keepends=True)
    logs.append(b"".join(lines[1:-1]) + ev(12, "run.end", {"model": "m", "provider": "p", "durationMs": 2000},
                                          runId="R1"))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        assert queries.usage(conn, queries.Window())["cost_usd"] == pytest.approx(0.75)
    finally:
        conn.close()


@pytest.mark.parametrize("window", [{}, {"since": T + 30_000}, {"until": T + 29_000}, {"agent": "main"},
                                    {"since": T + 30_000, "until": T + 40_000}])
def test_every_grouping_adds_up_to_usage(tmp_path, db, window):
    logs = LogDir(tmp_path / "state")
    logs.append(run(10, "R1", calls=[0.25, 0.5], snap=0.75) + run(30, "R2", calls=[], snap=2.0))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        w = queries.Window(**window)
        want = queries.usage(conn, w)["cost_usd"]
        for group_by in ("model", "provider", "agent", "session", "day"):
            rows = queries.costs(conn, w, group_by, queries.zone("Asia/Tokyo"))
            assert sum(r["cost_usd"] for r in rows) == pytest.approx(want), group_by
        assert sum(r["cost_usd"] for r in queries.daily_costs_by_model(conn, w)) == pytest.approx(want)
        assert sum(r["cost_usd"] for r in queries.top(conn, w, "models")) == pytest.approx(want)
        if "since" in window:  # only R2, which has no model calls: its snapshot's tokens and cost, under its model
            assert queries.costs(conn, w, "model") == [{
                "model": "m", "llm_calls": 0, "llm_errors": 0, "input_tokens": 1, "output_tokens": 1,
                "cache_read_tokens": 0, "cache_write_tokens": 0, "total_tokens": 2, "cost_usd": 2.0,
                "unpriced_calls": 0}]
    finally:
        conn.close()


def test_a_session_known_only_by_its_id(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    lines = [orjson.loads(line) for line in
             (run(10, "R1", calls=[0.25], snap=0.25) + run(30, "R2", calls=[], snap=2.0)).splitlines()]
    logs.append(b"".join(orjson.dumps({k: v for k, v in line.items() if k != "sessionKey"}) + b"\n"
                         for line in lines))
    ingest(db, logs.root)

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    detail = orjson.loads(cli("session", "S", "--json"))
    assert detail["session_key"] is None and detail["cost_usd"] == pytest.approx(2.25)
    assert cli("session", "S").splitlines()[0].split() == ["session", "S"]
    node = orjson.loads(cli("tree", "S", "--json"))
    assert node["own_cost_usd"] == pytest.approx(2.25) and node["cumulative_cost_usd"] == pytest.approx(2.25)


def test_a_sessions_cost_by_model_adds_up_to_its_cost(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(run(10, "R1", calls=[0.25, 0.5], snap=0.75) + run(30, "R2", calls=[], snap=2.0))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        d = queries.session_detail(conn, "agent:main:main")
    finally:
        conn.close()
    assert [(r["model"], r["llm_calls"], r["cost_usd"]) for r in d["cost_by_model"]] == [("m", 2, 2.75)]
    assert d["cost_usd"] == pytest.approx(2.75)


# -- which run a snapshot is of ------------------------------------------------------------------------
# A snapshot names no run. The gateway may write a run's snapshot a moment after the session's next run
# began; the run.end it closes carries the same usage totals, which no other run's end does.

def _usage(total: int) -> dict:
    return {"input": total - total // 4, "output": total // 4, "cacheRead": 0, "cacheWrite": 0, "total": total}


def at(ms: int, kind: str, data: dict, *, run_id: str | None = None, **env) -> bytes:
    """A line at T + ``ms``: its id is its time, so lines may be put in any order."""
    if run_id is not None:
        env["runId"] = run_id
    return ev(ms, kind, data, ts=T + ms, **env)


def start(ms: int, run_id: str) -> bytes:
    return at(ms, "run.start", {"model": "m", "provider": "p"}, run_id=run_id)


def end(ms: int, run_id: str, total: int | None) -> bytes:
    data = {"model": "m", "provider": "p", "durationMs": 1000}
    if total is not None:
        data["usage"] = _usage(total)
    return at(ms, "run.end", data, run_id=run_id)


def call(ms: int, run_id: str, cost: float, total: int) -> bytes:
    return at(ms, "llm.call", {"callIndex": 0, "provider": "p", "model": "m", "costUsd": cost,
                               "delta": _usage(total)}, run_id=run_id, agentId="unknown")


def snap(ms: int, cost: float, total: int, model: str = "m") -> bytes:
    return at(ms, "usage.snapshot", {"provider": "p", "model": model, "costUsd": cost, "usage": _usage(total)},
              agentId="unknown")


def _ingested(tmp_path, db, lines: list[bytes], order: str = "in order"):
    if order == "reversed":
        lines = list(reversed(lines))
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(lines))
    ingest(db, logs.root)
    return open_reader(db)


def _run_costs(conn) -> dict[str, float]:
    return {r["run_id"]: r["cost_usd"] for r in queries.runs(conn, queries.Window())}


def _every_total(conn) -> list[float]:
    """The session's cost as each view that shows it adds it up."""
    w = queries.Window()
    detail = queries.session_detail(conn, "agent:main:main")
    timeline = queries.timeline(conn, "agent:main:main", ["run"])
    return [queries.usage(conn, w)["cost_usd"], queries.sessions(conn, w)[0]["cost_usd"], detail["cost_usd"],
            sum(r["cost_usd"] for r in detail["runs"]), sum(r["cost_usd"] for r in detail["cost_by_model"]),
            sum(r["cost_usd"] for r in queries.runs(conn, w)), sum(r["cost_usd"] for r in queries.top(conn, w, "runs")),
            sum(i["cost_usd"] or 0 for i in timeline), queries.tree(conn, "agent:main:main")["own_cost_usd"],
            queries.hot_session(conn, "agent:main:main")["cost_pico"] / 10**12,
            *(sum(r["cost_usd"] for r in queries.costs(conn, w, g)) for g in ("model", "agent", "session", "day"))]


# Run A makes no model call and ends (its end says 100 tokens); run B starts; then A's snapshot (100 tokens,
# $1) is written; then B's call ($0.50) and B's own snapshot and end (30 tokens).
LATE_SNAPSHOT = [start(10_000, "A"), end(12_000, "A", 100), start(12_050, "B"), snap(12_080, 1.0, 100),
                 call(15_000, "B", 0.5, 30), snap(15_010, 0.5, 30), end(15_030, "B", 30)]


@pytest.mark.parametrize("order", ["in order", "reversed"])
def test_a_snapshot_written_after_the_next_run_began_is_its_own_run_s(tmp_path, db, order):
    """A's snapshot came after B's start; its totals are A's end's: it is A's cost, not B's (B has its calls)."""
    conn = _ingested(tmp_path, db, LATE_SNAPSHOT, order)
    try:
        assert _run_costs(conn) == {"A": pytest.approx(1.0), "B": pytest.approx(0.5)}
        assert _every_total(conn) == [pytest.approx(1.5)] * 14
        assert queries.run_detail(conn, "A")["cost_usd"] == pytest.approx(1.0)
        day = queries.costs(conn, queries.Window(since=T + 10_000, until=T + 11_000), "model")
        assert [(r["model"], r["llm_calls"], r["cost_usd"]) for r in day] == [("m", 0, 1.0)]  # at A's start
    finally:
        conn.close()


def test_a_late_snapshot_whose_run_ends_after_it_is_its_run_s_once_that_end_is_read(tmp_path, db):
    """The end may follow the snapshot (the gateway writes a run's snapshot just before its end): read
    together, or the end in a later pass, A's snapshot is A's."""
    lines = [start(10_000, "A"), start(12_050, "B"), snap(12_080, 1.0, 100), end(12_100, "A", 100),
             call(15_000, "B", 0.5, 30), snap(15_010, 0.5, 30), end(15_030, "B", 30)]
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(lines[:3]))
    ingest(db, logs.root)
    logs.append(b"".join(lines[3:]))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        assert _run_costs(conn) == {"A": pytest.approx(1.0), "B": pytest.approx(0.5)}
        assert _every_total(conn) == [pytest.approx(1.5)] * 14
    finally:
        conn.close()


@pytest.mark.parametrize("order", ["in order", "reversed"])
def test_a_late_snapshot_counts_once_when_neither_run_made_calls(tmp_path, db, order):
    """B makes no call either: A costs its snapshot and B its own, never B the larger of both and A nothing."""
    lines = [start(10_000, "A"), end(12_000, "A", 100), start(12_050, "B"), snap(12_080, 1.0, 100),
             snap(15_010, 2.0, 30), end(15_030, "B", 30)]
    conn = _ingested(tmp_path, db, lines, order)
    try:
        assert _run_costs(conn) == {"A": pytest.approx(1.0), "B": pytest.approx(2.0)}
        assert _every_total(conn) == [pytest.approx(3.0)] * 14
    finally:
        conn.close()


def test_the_late_snapshot_of_a_run_with_calls_is_no_cost_of_the_next(tmp_path, db):
    """A made its calls; its snapshot, late, is still A's: B (no calls, no snapshot of its own yet) does not
    count it on top of A's calls."""
    lines = [start(10_000, "A"), call(11_000, "A", 0.75, 100), end(12_000, "A", 100), start(12_050, "B"),
             snap(12_080, 0.75, 100)]
    conn = _ingested(tmp_path, db, lines)
    try:
        assert _run_costs(conn) == {"A": pytest.approx(0.75), "B": 0.0}
        assert _every_total(conn) == [pytest.approx(0.75)] * 14
    finally:
        conn.close()


@pytest.mark.parametrize(("a_total", "b_total", "owner"), [
    (None, None, "B"),  # no end tells A's totals: the run begun last before the snapshot, as ever
    (None, 100, "B"),
    (100, 100, "B"),    # both ends say so: the run begun last
    (100, 30, "A"),
    (7, None, "B"),     # A's end says other totals: B's (its end not read yet)
])
def test_a_snapshot_after_the_next_run_began_is_that_run_s_unless_the_earlier_run_s_end_says_otherwise(
        tmp_path, db, a_total, b_total, owner):
    lines = [start(10_000, "A"), end(12_000, "A", a_total), start(12_050, "B"), snap(12_080, 1.0, 100)]
    if b_total is not None:
        lines.append(end(15_030, "B", b_total))
    conn = _ingested(tmp_path, db, lines)
    try:
        assert _run_costs(conn) == {"A": 0.0, "B": 0.0, owner: pytest.approx(1.0)}
        assert _every_total(conn) == [pytest.approx(1.0)] * 14
    finally:
        conn.close()


def test_ordinary_snapshots_stay_with_their_runs(tmp_path, db):
    """Each snapshot before its run's end, the next run later: every run its own, whatever the totals."""
    lines = [start(10_000, "A"), snap(11_990, 1.0, 100), end(12_000, "A", 100),
             start(20_000, "B"), snap(21_990, 2.0, 100), end(22_000, "B", 100),  # the same totals as A's
             start(30_000, "C"), call(31_000, "C", 0.5, 30), snap(31_990, 0.5, 30), end(32_000, "C", 30),
             start(40_000, "D"), snap(41_990, 4.0, 30), end(42_000, "D", 30)]
    conn = _ingested(tmp_path, db, lines)
    try:
        assert _run_costs(conn) == {"A": pytest.approx(1.0), "B": pytest.approx(2.0), "C": pytest.approx(0.5),
                                    "D": pytest.approx(4.0)}
        assert _every_total(conn) == [pytest.approx(7.5)] * 14
    finally:
        conn.close()


def test_runs_begun_at_the_same_instant_share_no_snapshot(tmp_path, db):
    """Two runs of a session begun in the same millisecond: their one snapshot counts once."""
    lines = [start(10_000, "A"), start(10_000 + 1, "B"), snap(11_000, 1.0, 100)]
    lines[1] = ev(10_001, "run.start", {"model": "m", "provider": "p"}, ts=T + 10_000, runId="B")
    conn = _ingested(tmp_path, db, lines)
    try:
        costs = _run_costs(conn)
        assert sorted(costs.values()) == [0.0, pytest.approx(1.0)]
        assert _every_total(conn) == [pytest.approx(1.0)] * 14
    finally:
        conn.close()


# A run of the property below: whether it makes a call, and when its snapshot is written: none, just
# before its end, or just after the next run began (late); then how long until the next run begins.
_RUN = st.tuples(st.booleans(), st.sampled_from(["none", "timely", "late"]), st.sampled_from([50, 5_000, 120_000]))


@settings(max_examples=40, deadline=None)
@given(runs=st.lists(_RUN, min_size=1, max_size=6), seed=st.randoms(use_true_random=False))
@example(runs=[(False, "late", 50), (True, "late", 5_000), (False, "late", 50), (False, "timely", 50)],
         seed=random.Random(1))
def test_each_run_without_calls_costs_its_own_snapshot_and_no_snapshot_counts_twice(tmp_path_factory, runs, seed):
    """A session's runs, each ended with its own totals, snapshots written in time or late, the lines in
    any order: a run without calls costs its own snapshot, one with calls its calls, and each snapshot is
    of one run at most."""
    lines, want, clock = [], {}, 10_000
    late: list[bytes] = []  # the snapshot the previous run left to write after this one began
    for i, (calls, when, gap) in enumerate(runs):
        rid, total, cost = f"R{i}", 100 + i, (i + 1) / 8
        lines += [start(clock, rid), *late]
        late = []
        if calls:
            lines.append(call(clock + 100, rid, cost / 2, total))
        if when == "timely":
            lines.append(snap(clock + 995, cost / 2 if calls else cost, total))
        elif when == "late" and gap < 60_000 and i + 1 < len(runs):
            late = [snap(clock + 1_000 + gap + 10, cost / 2 if calls else cost, total)]
        lines.append(end(clock + 1_000, rid, total))
        want[rid] = cost / 2 if calls else cost if when == "timely" or late else 0.0
        clock += 1_000 + gap
    seed.shuffle(lines)
    db = tmp_path_factory.mktemp("runs") / "ledger.db"
    conn = _ingested(db.parent, db, lines)
    try:
        assert _run_costs(conn) == {rid: pytest.approx(cost) for rid, cost in want.items()}
        assert _every_total(conn) == [pytest.approx(sum(want.values()))] * 14
        owners = conn.execute(f"SELECT u.id, count(r.run_id) FROM usage_snapshots AS u "
                              f"LEFT JOIN runs AS r ON {SNAPSHOT_OF_RUN} GROUP BY u.id").fetchall()
        assert {n for _, n in owners} <= {1}
    finally:
        conn.close()


def test_the_fallback_of_a_few_sessions_reads_only_theirs(tmp_path, db):
    # Old telemetry has no llm.call lines: every run falls back to its snapshot, and a question about the
    # sessions a batch changed (the hot views', a sessions page's) reads what the writer kept of those
    # sessions alone, never every run's fallback again.
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(run(100 * i, f"R{i}", calls=[], snap=0.5 + i, sessionId=f"S{i % 3}")
                         for i in range(9)))
    ingest(db, logs.root)
    conn = open_reader(db)
    try:
        # each session's three snapshots: their tokens (input 1, output 1, total 2 each), their cost, and
        # how many had no cost
        assert queries._session_fallbacks(conn, ["S1", "S2"]) == {
            "S1": [3, 3, 0, 0, 6, round((1.5 + 4.5 + 7.5) * 10**12), 0],
            "S2": [3, 3, 0, 0, 6, round((2.5 + 5.5 + 8.5) * 10**12), 0]}
        params = [orjson.dumps(["S1"]).decode()]
        sql = queries._SESSION_FALLBACKS.format(keys="session_id", where=queries._OF_SESSIONS)
        plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    finally:
        conn.close()
    assert "SCAN session_fallback_costs" not in plan and "runs" not in plan, plan


# -- a run without model calls counts its snapshot's tokens with its cost ---------------------------------

def _kinds(i: int, o: int) -> dict:
    return {"input": i, "output": o, "cacheRead": 0, "cacheWrite": 0, "total": i + o}


# R1 makes one model call (1,200 tokens, $0.01); R2 makes none: its end and its snapshot say 3,100 tokens,
# and the snapshot $0.50.
NO_CALLS = [start(10_000, "R1"),
            at(11_000, "llm.call", {"callIndex": 0, "provider": "p", "model": "m", "costUsd": 0.01,
                                    "delta": _kinds(1000, 200)}, run_id="R1", agentId="unknown"),
            at(12_000, "run.end", {"model": "m", "provider": "p", "usage": _kinds(1000, 200)}, run_id="R1"),
            start(20_000, "R2"),
            at(21_000, "usage.snapshot", {"provider": "p", "model": "m", "costUsd": 0.5, "usage": _kinds(2000, 1100)},
               agentId="unknown"),
            at(22_000, "run.end", {"model": "m", "provider": "p", "usage": _kinds(2000, 1100)}, run_id="R2")]
SPENT = {"input_tokens": 3000, "output_tokens": 1300, "cache_read_tokens": 0, "cache_write_tokens": 0,
         "total_tokens": 4300, "cost_usd": pytest.approx(0.51)}


def _spent(row: dict) -> dict:
    return {k: row[k] for k in SPENT}


def test_a_run_without_calls_counts_its_snapshot_s_tokens_where_it_counts_its_cost(tmp_path, db):
    """Every report that counts R2's snapshot cost counts the tokens of that snapshot beside it, by kind."""
    _ingested(tmp_path, db, NO_CALLS).close()
    runs = {r["run_id"]: (r["total_tokens"], r["cost_usd"]) for r in cli_json(db, "runs")}
    assert runs == {"R1": (1200, pytest.approx(0.01)), "R2": (3100, pytest.approx(0.5))}
    assert cli_json(db, "run", "R2")["total_tokens"] == 3100
    assert _spent(cli_json(db, "usage")) == SPENT
    for group_by in ("model", "provider", "agent", "session", "day"):
        assert _spent(cli_json(db, "costs", "--group-by", group_by)["total"]) == SPENT, group_by
    assert _spent(cli_json(db, "costs", "--group-by", "model", "--since", "2026-09-21T14:13:40Z")["total"]) == {
        "input_tokens": 2000, "output_tokens": 1100, "cache_read_tokens": 0, "cache_write_tokens": 0,
        "total_tokens": 3100, "cost_usd": pytest.approx(0.5)}  # R2 alone
    (session,) = cli_json(db, "sessions")
    assert _spent(session) == SPENT
    detail = cli_json(db, "session", "agent:main:main")
    assert [_spent(r) for r in detail["cost_by_model"]] == [SPENT]
    conn = open_reader(db)
    try:
        hot = queries.hot_session(conn, "agent:main:main")
        assert {k: hot[k] for k in ("input_tokens", "output_tokens", "total_tokens")} == {
            "input_tokens": 3000, "output_tokens": 1300, "total_tokens": 4300}
        assert hot["family"]["total_tokens"] == 4300
        assert queries.day_totals(conn, T, T + 86_400_000)["total_tokens"] == 4300
    finally:
        conn.close()
    tokens = {dict(labels)["token_type"]: value for (name, labels), value in metric_counters(db).items()
              if name == "agentledger_tokens_total"}
    assert tokens == {"input": 3000, "output": 1300, "cache_read": 0, "cache_write": 0}
    assert verify(db) == []


def test_verify_checks_the_fallback_tokens_and_repair_restores_them(tmp_path, db):
    _ingested(tmp_path, db, NO_CALLS).close()
    conn = open_writer(db)
    try:
        conn.execute("UPDATE session_fallback_costs SET input_tokens = 7, total_tokens = 7")
    finally:
        conn.close()
    assert [d.table for d in verify(db)] == ["session_fallback_costs"]
    assert cli_json(db, "sessions")[0]["total_tokens"] == 1207  # what the stored fallback says, until repaired
    conn = open_writer(db)
    try:
        repair_rollups(conn)
    finally:
        conn.close()
    assert verify(db) == []
    assert _spent(cli_json(db, "sessions")[0]) == SPENT


def test_a_ledger_from_before_fallback_tokens_gets_them_from_its_runs_ends(tmp_path, db):
    """Snapshots read before their kinds were kept: the migration takes them from the run.end that says the
    same total. R3's end says none: its snapshot counts its total alone."""
    r3 = [start(30_000, "R3"),
          at(31_000, "usage.snapshot", {"provider": "p", "model": "m", "costUsd": 0.25, "usage": _kinds(400, 100)},
             agentId="unknown"),
          at(32_000, "run.end", {"model": "m", "provider": "p"}, run_id="R3")]
    _ingested(tmp_path, db, NO_CALLS + r3).close()
    _migrated_from(db, 28)
    assert _spent(cli_json(db, "usage")) == {**SPENT, "total_tokens": 4800, "cost_usd": pytest.approx(0.76)}
    assert {r["run_id"]: r["total_tokens"] for r in cli_json(db, "runs")} == {"R1": 1200, "R2": 3100, "R3": 500}
    assert verify(db) == []


@pytest.mark.parametrize("cost", [None, 0.5])
def test_a_run_falls_back_to_the_same_snapshot_whatever_order_its_ties_were_read_in(tmp_path, cost):
    """Two snapshots of one run without calls say the same cost (or none) and different tokens: the run
    counts the one with more tokens, read in either order, in the runs list and in the totals alike."""
    def snap(n: int, total: int) -> bytes:
        data = {"provider": "p", "model": "m", "usage": {"input": total - 1, "output": 1, "total": total}}
        if cost is not None:
            data["costUsd"] = cost
        return ev(n, "usage.snapshot", data, agentId="unknown")

    start = ev(1, "run.start", {"model": "m", "provider": "p"}, runId="R1")
    end = ev(9, "run.end", {"model": "m", "provider": "p"}, runId="R1")
    seen = []
    for order in ((snap(2, 300), snap(3, 200)), (snap(3, 200), snap(2, 300))):
        db = tmp_path / f"{len(seen)}.db"
        logs = LogDir(tmp_path / f"state{len(seen)}")
        logs.append(start + b"".join(order) + end)
        ingest(db, logs.root)
        (r,) = cli_json(db, "runs")
        u = cli_json(db, "usage")
        seen.append((r["total_tokens"], u["total_tokens"], u["input_tokens"], r["cost_usd"], u["cost_usd"]))
        assert verify(db) == []
    assert seen[0] == seen[1] == (300, 300, 299, cost or 0, cost or 0)


# -- a run without calls whose snapshot has no cost counts as one unpriced call ----------------------------

def _r2_snapshot_costs(cost: float | None) -> list[bytes]:
    """NO_CALLS, R2's snapshot saying ``cost`` beside its 3,100 tokens (None: no costUsd at all)."""
    data = {"provider": "p", "model": "m", "usage": _kinds(2000, 1100)}
    if cost is not None:
        data["costUsd"] = cost
    return [*NO_CALLS[:4], at(21_000, "usage.snapshot", data, agentId="unknown"), NO_CALLS[5]]


def _unpriced_where_its_tokens_count(db) -> dict[str, object]:
    """R2's tokens (3,100 of 4,300) and the unpriced calls beside them, in every report that counts them."""
    detail = cli_json(db, "session", "agent:main:main")
    seen = {"runs": {r["run_id"]: r["unpriced_calls"] for r in cli_json(db, "runs")},
            "run": cli_json(db, "run", "R2")["unpriced_calls"], "usage": cli_json(db, "usage")["unpriced_calls"],
            "sessions": cli_json(db, "sessions")[0]["unpriced_calls"], "session": detail["unpriced_calls"],
            "by model": sum(r["unpriced_calls"] for r in detail["cost_by_model"]),
            "tree": cli_json(db, "tree", "agent:main:main")["own_unpriced_calls"],
            "timeline": {i["id"]: i["unpriced_calls"] for i in cli_json(db, "timeline", "agent:main:main")
                         if i["kind"] == "run"}}
    for group_by in ("model", "provider", "agent", "session", "day"):
        seen[f"costs by {group_by}"] = cli_json(db, "costs", "--group-by", group_by)["total"]["unpriced_calls"]
    conn = open_reader(db)
    try:
        hot = queries.hot_session(conn, "agent:main:main")
        seen["hot"] = (hot["unpriced_calls"], hot["family"]["unpriced_calls"], hot["total_tokens"])
        day = queries.day_totals(conn, T, T + 86_400_000)
        seen["day"] = (day["unpriced_calls"], day["total_tokens"])
    finally:
        conn.close()
    return seen


def _unpriced_everywhere(n: int) -> dict[str, object]:
    costs = {f"costs by {g}": n for g in ("model", "provider", "agent", "session", "day")}
    return {"runs": {"R1": 0, "R2": n}, "run": n, "usage": n, "sessions": n, "session": n, "by model": n,
            "tree": n, "timeline": {"R1": 0, "R2": n}, **costs, "hot": (n, n, 4300), "day": (n, 4300)}


@pytest.mark.parametrize("cost", [0, None])
def test_a_run_without_calls_whose_snapshot_has_no_cost_counts_one_unpriced_call(tmp_path, db, cost):
    """R2's tokens count at no known cost: never $0 silently, but one unpriced call wherever they count.
    /metrics counts model calls alone: R2 made none."""
    _ingested(tmp_path, db, _r2_snapshot_costs(cost)).close()
    assert _unpriced_where_its_tokens_count(db) == _unpriced_everywhere(1)
    assert cli_json(db, "usage")["cost_usd"] == pytest.approx(0.01)
    assert {r["run_id"]: r["cost_usd"] for r in cli_json(db, "runs")} == {"R1": pytest.approx(0.01), "R2": 0}
    unpriced_metric = [value for (name, labels), value in metric_counters(db).items()
                       if name == "agentledger_llm_calls_total" and dict(labels)["priced"] == "false"]
    assert unpriced_metric == [0]
    assert verify(db) == []


def test_a_run_without_calls_whose_snapshot_has_a_cost_counts_no_unpriced_call(tmp_path, db):
    _ingested(tmp_path, db, _r2_snapshot_costs(0.5)).close()
    assert _unpriced_where_its_tokens_count(db) == _unpriced_everywhere(0)
    assert cli_json(db, "usage")["cost_usd"] == pytest.approx(0.51)
    assert verify(db) == []


def test_a_ledger_from_before_unpriced_fallbacks_counts_them_once_migrated(tmp_path, db):
    _ingested(tmp_path, db, _r2_snapshot_costs(0)).close()
    _migrated_from(db, 30)
    assert _unpriced_where_its_tokens_count(db) == _unpriced_everywhere(1)
    assert verify(db) == []


# -- a snapshot without a cost, of a model the price table knows, is priced from its tokens ---------------

SONNET = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
# R2's 2,000 input and 1,100 output tokens at Claude Sonnet 4.5's $3 and $15 per million.
R2_PRICED = 2000 * 3e-6 + 1100 * 15e-6


def _known_model_without_cost() -> list[bytes]:
    """NO_CALLS with R2 (and its snapshot, which says no cost) of a model the bundled table prices."""
    return [*NO_CALLS[:3], at(20_000, "run.start", SONNET, run_id="R2"),
            at(21_000, "usage.snapshot", {**SONNET, "usage": _kinds(2000, 1100)}, agentId="unknown"),
            at(22_000, "run.end", {**SONNET, "usage": _kinds(2000, 1100)}, run_id="R2")]


def _priced_where_its_cost_counts(db) -> dict[str, object]:
    detail = cli_json(db, "session", "agent:main:main")
    return {"runs": {r["run_id"]: r["cost_usd"] for r in cli_json(db, "runs")},
            "run": cli_json(db, "run", "R2")["cost_usd"], "usage": cli_json(db, "usage")["cost_usd"],
            "sessions": cli_json(db, "sessions")[0]["cost_usd"], "session": detail["cost_usd"],
            "by model": {r["model"]: r["cost_usd"] for r in detail["cost_by_model"]},
            **{f"costs by {g}": cli_json(db, "costs", "--group-by", g)["total"]["cost_usd"]
               for g in ("model", "provider", "agent", "session", "day")},
            "/metrics": {dict(labels)["cost_source"]: value for (name, labels), value in metric_counters(db).items()
                         if name == "agentledger_cost_usd_total" and dict(labels)["model"] == SONNET["model"]}}


def _priced_everywhere(r2: float) -> dict[str, object]:
    total = pytest.approx(0.01 + r2)
    return {"runs": {"R1": pytest.approx(0.01), "R2": pytest.approx(r2)}, "run": pytest.approx(r2), "usage": total,
            "sessions": total, "session": total,
            "by model": {"m": pytest.approx(0.01), SONNET["model"]: pytest.approx(r2)},
            **{f"costs by {g}": total for g in ("model", "provider", "agent", "session", "day")},
            "/metrics": {"priced": pytest.approx(r2)}}


def test_a_run_without_calls_whose_snapshot_has_no_cost_is_priced_from_its_tokens(tmp_path, db):
    """R2's snapshot names a model the price table knows: its tokens are priced as a call's would be, in
    every total, and count as priced (by /metrics too), not as one unpriced call."""
    _ingested(tmp_path, db, _known_model_without_cost()).close()
    assert _priced_where_its_cost_counts(db) == _priced_everywhere(R2_PRICED)
    assert _unpriced_where_its_tokens_count(db) == _unpriced_everywhere(0)
    assert verify(db) == []


def test_reprice_prices_a_snapshot_again_and_every_total_follows(tmp_path, db):
    """A price override for R2's model, then `reprice`: the snapshot priced at ingest takes the new price,
    every total and /metrics with it, and the rollups still equal their recomputation."""
    _ingested(tmp_path, db, _known_model_without_cost()).close()
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."claude-sonnet-4-5"]\ninput = 10\noutput = 100\ncache_read = 1\ncache_write = 12\n')
    out = cli_json(db, "reprice", "--prices", str(prices))
    assert (out["calls_changed"], out["snapshots_changed"]) == (0, 1)
    assert _priced_where_its_cost_counts(db) == _priced_everywhere(2000 * 10e-6 + 1100 * 100e-6)
    assert verify(db) == []
    assert cli_json(db, "reprice", "--prices", str(prices))["snapshots_changed"] == 0


def test_reprice_counts_the_unpriced_calls_usage_counts_after_it(tmp_path, db):
    """R2 has no model calls and its snapshot no cost, of a model the table does not know: after `reprice`
    it still counts as one unpriced call in `usage`, and reprice's own count says so, not 0."""
    _ingested(tmp_path, db, _r2_snapshot_costs(None)).close()
    assert cli_json(db, "reprice")["unpriced_calls"] == cli_json(db, "usage")["unpriced_calls"] == 1
