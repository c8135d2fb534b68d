"""Retention: raw rows past their age go, totals and exactly-once stay, the file shrinks."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import orjson
import pytest
from conftest import as_of_version, cli_env, ingest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledgerdump import dump, rows, scalar, verify
from logwriter import LogDir
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentledger.ledger import queries, retention
from agentledger.ledger.db import WriterLock, open_reader, open_writer
from agentledger.metrics import registry_for
from agentledger.synth import Gateway


def _ms(day: str) -> int:
    return int(dt.datetime.fromisoformat(day).replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


CORPUS_MID = _ms("2026-10-03")  # the shared corpus spans 2026-10-01 .. 2026-10-06
AFTER_ALL = _ms("2027-01-01")


def agentledger(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args], capture_output=True,
                          text=True, env=cli_env(db), timeout=120)


def _picture(db: Path) -> dict:
    """What a user sees of the totals: usage, sessions, costs, runs, tools, and every counter."""
    conn = open_reader(db)
    try:
        w = queries.Window()
        seen = {"usage": queries.usage(conn, w), "sessions": queries.sessions(conn, w),
                "costs": {g: queries.costs(conn, w, g) for g in ("model", "day", "session", "tool")},
                "runs": queries.runs(conn, w), "tools": queries.tools(conn, w),
                "tree": [queries.tree(conn, s["session_key"]) for s in queries.sessions(conn, w) if s["session_key"]]}
    finally:
        conn.close()
    counters = {}
    for family in text_string_to_metric_families(generate_latest(registry_for(db)).decode()):
        if family.type == "counter":
            counters.update({(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples})
    return seen | {"counters": counters}


def _prune(db: Path, horizon_ms: int, **kwargs) -> retention.Pruned:
    conn = open_writer(db)
    try:
        return retention.prune(conn, horizon_ms, **kwargs)
    finally:
        conn.close()


def _pending(db: Path, horizon_ms: int) -> retention.Pruned:
    conn = open_reader(db)
    try:
        return retention.pending(conn, horizon_ms)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def corpus_ledger(oc_corpus: Path, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("corpus") / "ledger.db"
    ingest(db, oc_corpus)
    return db


@pytest.fixture
def ledger(corpus_ledger: Path, tmp_path: Path) -> Path:
    db = tmp_path / "ledger.db"
    shutil.copy(corpus_ledger, db)
    return db


def test_pruning_keeps_every_total_and_counter(ledger: Path):
    before = _picture(ledger)
    events = scalar(ledger, "SELECT count(*) FROM events")
    old = scalar(ledger, "SELECT count(*) FROM events WHERE ts_ms < ?", (CORPUS_MID,))
    rejects = scalar(ledger, "SELECT count(*) FROM rejects")
    assert 0 < old < events and rejects > 0

    done = _prune(ledger, CORPUS_MID)
    assert done.events == old and done.messages > 0 and done.usage_snapshots > 0
    assert verify(ledger) == []
    assert _picture(ledger) == before
    # Old events keep their key only; newer ones are whole.
    assert scalar(ledger, "SELECT count(*) FROM events") == events
    assert scalar(ledger, "SELECT count(*) FROM events WHERE kind = '' AND ts_ms >= ?", (CORPUS_MID,)) == 0
    assert scalar(ledger, "SELECT count(*) FROM events WHERE kind <> '' AND ts_ms < ?", (CORPUS_MID,)) == 0
    assert scalar(ledger, "SELECT count(*) FROM messages WHERE ts_ms < ?", (CORPUS_MID,)) == 0

    done = _prune(ledger, AFTER_ALL)
    assert done.reject_heads == rejects
    assert verify(ledger) == []
    assert _picture(ledger) == before
    assert scalar(ledger, "SELECT count(*) FROM rejects WHERE length(head) = 0") == rejects
    assert scalar(ledger, "SELECT count(*) FROM messages") == 0
    conn = open_reader(ledger)
    try:
        assert list(queries.events(conn, queries.Window())) == []
        assert len(queries.rejects(conn, queries.Window())) == rejects
    finally:
        conn.close()
    assert agentledger(ledger, "verify").returncode == 0


def test_a_snapshot_standing_in_for_a_run_cost_stays(tmp_path: Path):
    """A run with no llm.call is priced from its usage snapshot: pruning must not take it, nor one no run of
    its session had begun at (the end of a run whose start the log lost may still claim it). One of a run with
    calls of its own goes."""
    tdir = tmp_path / "root" / "agents" / "main" / "telemetry"
    tdir.mkdir(parents=True)
    ids = {"agentId": "main", "sessionKey": "agent:main:main", "sessionId": "sid-1"}
    lines = [
        {"id": "evt_0000000000000001", "ts": 1000, "kind": "run.start", "runId": "r1",
         "data": {"model": "m", "provider": "p"}, **ids},
        {"id": "evt_0000000000000002", "ts": 2000, "kind": "usage.snapshot",
         "data": {"provider": "p", "model": "m", "usage": {"total": 10}, "costUsd": 0.5}, **ids},
        {"id": "evt_0000000000000003", "ts": 3000, "kind": "run.end", "runId": "r1",
         "data": {"model": "m", "provider": "p", "usage": {"total": 10}}, **ids},
        {"id": "evt_0000000000000004", "ts": 4000, "kind": "usage.snapshot",
         "data": {"provider": "p", "model": "m", "usage": {"total": 10}, "costUsd": 0.5},
         **ids | {"sessionId": "sid-2", "sessionKey": "agent:main:other"}},
    ]
    third = ids | {"sessionId": "sid-3", "sessionKey": "agent:main:third"}
    lines += [
        {"id": "evt_0000000000000005", "ts": 5000, "kind": "run.start", "runId": "r3",
         "data": {"model": "m", "provider": "p"}, **third},
        {"id": "evt_0000000000000006", "ts": 5500, "kind": "llm.call", "runId": "r3",
         "data": {"provider": "p", "model": "m", "delta": {"total": 10}, "costUsd": 0.25}, **third},
        {"id": "evt_0000000000000007", "ts": 5900, "kind": "usage.snapshot",
         "data": {"provider": "p", "model": "m", "usage": {"total": 10}, "costUsd": 0.25}, **third},
        {"id": "evt_0000000000000008", "ts": 6000, "kind": "run.end", "runId": "r3",
         "data": {"model": "m", "provider": "p", "usage": {"total": 10}}, **third},
    ]
    (tdir / "events.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    db = tmp_path / "ledger.db"
    ingest(db, tmp_path / "root")
    before = _picture(db)
    assert before["usage"]["cost_usd"] == 0.75

    assert _prune(db, AFTER_ALL).usage_snapshots == 1  # only r3's
    assert _picture(db) == before
    assert [s for (s,) in rows(db, "SELECT session_id FROM usage_snapshots ORDER BY 1")] == ["sid-1", "sid-2"]


def test_a_late_snapshot_stays_while_it_stands_in_for_its_own_run(tmp_path: Path):
    """A run's snapshot written just after the session's next run began is still the run's: kept while
    that run made no model call (r1), pruned when it made some (r3), whatever the next run made, once that
    has ended: till then its end may say the snapshot's totals, and make it its own."""
    tdir = tmp_path / "root" / "agents" / "main" / "telemetry"
    tdir.mkdir(parents=True)
    ids = {"agentId": "main", "sessionKey": "agent:main:main", "sessionId": "sid-1"}
    lines = []

    def add(ts: int, kind: str, data: dict, run: str | None = None) -> None:
        lines.append({"id": f"evt_{len(lines) + 1:016x}", "ts": ts, "kind": kind, "data": data, **ids,
                      **({"runId": run} if run else {})})

    def run_end(ts: int, run: str, total: int) -> None:
        add(ts, "run.end", {"model": "m", "provider": "p", "usage": {"total": total}}, run)

    def snapshot(ts: int, total: int, cost: float) -> None:
        add(ts, "usage.snapshot", {"provider": "p", "model": "m", "usage": {"total": total}, "costUsd": cost})

    def llm_call(ts: int, run: str, total: int, cost: float) -> None:
        add(ts, "llm.call", {"callIndex": 0, "provider": "p", "model": "m", "delta": {"total": total},
                             "costUsd": cost}, run)

    add(1000, "run.start", {"model": "m", "provider": "p"}, "r1")
    run_end(2000, "r1", 10)
    add(2010, "run.start", {"model": "m", "provider": "p"}, "r2")
    snapshot(2020, 10, 0.5)  # r1's
    llm_call(3000, "r2", 20, 0.25)
    snapshot(3010, 20, 0.25)  # r2's
    run_end(3020, "r2", 20)
    add(4000, "run.start", {"model": "m", "provider": "p"}, "r3")
    llm_call(4500, "r3", 30, 0.125)
    run_end(5000, "r3", 30)
    add(5010, "run.start", {"model": "m", "provider": "p"}, "r4")
    snapshot(5020, 30, 0.125)  # r3's: no cost of r4, which made no call
    run_end(5030, "r4", 0)
    log = tdir / "events.jsonl"
    log.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines[:-1]))
    db = tmp_path / "ledger.db"
    ingest(db, tmp_path / "root")
    before = _picture(db)
    assert before["usage"]["cost_usd"] == 0.875
    assert {r["run_id"]: r["cost_usd"] for r in before["runs"]} == {"r1": 0.5, "r2": 0.25, "r3": 0.125, "r4": 0.0}

    assert _pending(db, AFTER_ALL).usage_snapshots == 1
    assert _prune(db, AFTER_ALL).usage_snapshots == 1  # r2's: r4 is still open
    assert _picture(db) == before
    with log.open("ab") as f:
        f.write(orjson.dumps(lines[-1]) + b"\n")
    ingest(db, tmp_path / "root")
    before = _picture(db)
    assert before["usage"]["cost_usd"] == 0.875
    assert _prune(db, AFTER_ALL).usage_snapshots == 1  # r3's
    assert _picture(db) == before
    assert scalar(db, "SELECT ts_ms FROM usage_snapshots") == 2020


def test_a_snapshot_read_before_its_runs_end_stays_through_a_prune(tmp_path: Path):
    """OpenClaw writes a run's usage snapshot just before its run.end: a prune between the reads of the two
    found no run it was of yet, took it, and the run without model calls, once ended, cost nothing."""
    two_days_ago = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000) - 2 * retention.DAY_MS
    ids = {"agentId": "main", "sessionKey": "agent:main:main", "sessionId": "sid-1", "runId": "r1"}
    run = {"model": "gpt-4o", "provider": "openai"}
    usage = {"input": 1000, "output": 100, "total": 1100}
    lines = [orjson.dumps({"id": f"evt_{n:016x}", "ts": two_days_ago + at, "kind": kind, "data": data, **ids}) + b"\n"
             for n, (at, kind, data) in enumerate([
                 (0, "run.start", run),
                 (110_000, "llm.output", run | {"usage": usage}),
                 (120_000, "usage.snapshot", run | {"usage": usage, "costUsd": 0.5}),
                 (120_050, "run.end", run | {"usage": usage, "durationMs": 120_050, "stopReason": "stop"}),
             ], start=1)]
    at_once = tmp_path / "at-once"
    LogDir(at_once).append(b"".join(lines))
    assert agentledger(tmp_path / "at-once.db", "ingest", str(at_once)).returncode == 0
    db = tmp_path / "ledger.db"
    logs = LogDir(tmp_path / "root")
    logs.append(b"".join(lines[:-1]))
    assert agentledger(db, "ingest", str(logs.root)).returncode == 0
    pruned = agentledger(db, "prune", "--older-than", "1", "--json")
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["usage_snapshots"] == 0
    logs.append(lines[-1])
    assert agentledger(db, "ingest", str(logs.root)).returncode == 0
    usage_json = json.loads(agentledger(db, "usage", "--json").stdout)
    assert (usage_json["total_tokens"], usage_json["cost_usd"]) == (1100, 0.5)
    assert usage_json == json.loads(agentledger(tmp_path / "at-once.db", "usage", "--json").stdout)
    assert agentledger(db, "verify").returncode == 0


def test_every_snapshot_of_a_run_without_calls_stays_as_a_reprice_may_make_another_stand_in(tmp_path: Path):
    """r1's first snapshot carries the log's cost and its later one none, of a model no table prices: the first
    stands in for r1. Both stay, since a price for the model makes the later, costlier one stand in instead."""
    tdir = tmp_path / "root" / "agents" / "main" / "telemetry"
    tdir.mkdir(parents=True)
    ids = {"agentId": "main", "sessionKey": "agent:main:main", "sessionId": "sid-1"}
    run = {"model": "in-house-llm", "provider": "p"}
    lines = [
        {"id": "evt_0000000000000001", "ts": 1000, "kind": "run.start", "runId": "r1", "data": run, **ids},
        {"id": "evt_0000000000000002", "ts": 2000, "kind": "usage.snapshot",
         "data": run | {"usage": {"input": 100, "output": 10, "total": 110}, "costUsd": 0.001}, **ids},
        {"id": "evt_0000000000000003", "ts": 2500, "kind": "usage.snapshot",
         "data": run | {"usage": {"input": 400, "output": 40, "total": 440}}, **ids},
        {"id": "evt_0000000000000004", "ts": 3000, "kind": "run.end", "runId": "r1", "data": run, **ids},
    ]
    (tdir / "events.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    db = tmp_path / "ledger.db"
    ingest(db, tmp_path / "root")
    before = _picture(db)
    assert before["usage"]["cost_usd"] == 0.001

    assert _prune(db, AFTER_ALL).usage_snapshots == 0
    assert _picture(db) == before
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."in-house-llm"]\ninput = 10\noutput = 100\n')
    assert agentledger(db, "reprice", "--prices", str(prices)).returncode == 0
    assert _picture(db)["usage"]["cost_usd"] == pytest.approx(400 * 10e-6 + 40 * 100e-6)
    assert verify(db) == []


def test_rereading_pruned_logs_counts_nothing_twice(ledger: Path, oc_corpus: Path, tmp_path: Path):
    before = _picture(ledger)
    _prune(ledger, AFTER_ALL)
    # A copy of every file next to the originals: the originals keep their checkpoints, the
    # copies are new files read from the start, and every line's event is found by its key alone.
    copy = tmp_path / "copy"
    shutil.copytree(oc_corpus / "agents", copy / "agents")
    stats = ingest(ledger, oc_corpus, copy)
    assert stats.lines > 0 and stats.events == 0 and stats.duplicates > 0
    assert verify(ledger) == []
    after = _picture(ledger)
    # The copy's malformed lines are new rejects (they are in new files); nothing else moved.
    assert after["usage"] | {"rejected_lines": 0} == before["usage"] | {"rejected_lines": 0}
    assert after["sessions"] == before["sessions"] and after["costs"] == before["costs"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=_ms("2026-09-30"), max_value=_ms("2026-10-07")),
       batch_rows=st.integers(min_value=1, max_value=400))
def test_any_horizon_and_batch_size(corpus_ledger: Path, tmp_path_factory, cut: int, batch_rows: int):
    db = tmp_path_factory.mktemp("prop") / "ledger.db"
    shutil.copy(corpus_ledger, db)
    before = _picture(db)
    expected = _pending(db, cut)
    done = _prune(db, cut, batch_rows=batch_rows)
    assert [getattr(done, n) for n in done.COUNTS] == [getattr(expected, n) for n in done.COUNTS]
    assert _pending(db, cut).rows() == 0
    assert scalar(db, "SELECT count(*) FROM events WHERE kind = ''") == scalar(
        db, "SELECT count(*) FROM events WHERE ts_ms < ?", (cut,))
    assert verify(db) == []
    assert _picture(db) == before


def test_a_deadline_splits_the_work_and_the_next_call_goes_on(ledger: Path):
    expected = _pending(ledger, AFTER_ALL)
    total = retention.Pruned(AFTER_ALL)
    calls = 0
    while True:
        calls += 1
        step = _prune(ledger, AFTER_ALL, batch_rows=100, deadline=0.0)  # long past: one batch per call
        total.add(step)
        if step.done:
            break
    assert calls > expected.events // 100
    assert [getattr(total, n) for n in total.COUNTS] == [getattr(expected, n) for n in total.COUNTS]
    assert verify(ledger) == []


def _synthetic(root: Path, n: int, seed: int = 7) -> Path:
    """Appends ``n`` gateway events from 1970 (past any retention); each seed's come later than the last's."""
    tdir = root / "agents" / "main" / "telemetry"
    tdir.mkdir(parents=True, exist_ok=True)
    gateway = Gateway(seed=seed, agents=("main",), start_ms=seed * 10**10).events()
    with open(tdir / "events.jsonl", "ab") as fh:
        for _ in range(n):
            fh.write(orjson.dumps(next(gateway)) + b"\n")
    return root


def _checkpointed_size(db: Path) -> int:
    conn = open_writer(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return os.path.getsize(db)


def test_prune_command_shrinks_the_file_and_verify_stays_clean(tmp_path: Path):
    db = tmp_path / "ledger.db"
    ingest(db, _synthetic(tmp_path / "root", 20_000))  # events from 1970: all past any retention
    size = _checkpointed_size(db)
    before = _picture(db)

    dry = agentledger(db, "prune", "--dry-run", "--json", "--older-than", "30")
    assert dry.returncode == 0, dry.stderr
    would = json.loads(dry.stdout)
    assert would["events"] == 20_000 and would["messages"] > 0 and would["dry_run"] is True
    assert os.path.getsize(db) == size

    out = agentledger(db, "prune", "--json", "--older-than", "30")
    assert out.returncode == 0, out.stderr
    did = json.loads(out.stdout)
    assert {n: did[n] for n in retention.Pruned.COUNTS} == {n: would[n] for n in retention.Pruned.COUNTS}
    assert did["reclaimed_bytes"] > 0 and did["size_bytes_after"] == os.path.getsize(db)
    assert os.path.getsize(db) < 0.85 * size  # event labels, messages and spare snapshots are a good part of it
    assert _picture(db) == before
    assert agentledger(db, "verify").returncode == 0

    again = json.loads(agentledger(db, "prune", "--json", "--older-than", "30").stdout)
    assert sum(again[n] for n in retention.Pruned.COUNTS) == 0


def test_dry_run_changes_nothing(ledger: Path):
    before = dump(ledger)
    out = agentledger(ledger, "prune", "--dry-run", "--older-than", "1")
    assert out.returncode == 0 and "would prune" in out.stdout
    assert dump(ledger) == before


def test_prune_keeps_the_configured_retention(tmp_path: Path):
    """Without --older-than, prune takes the age serve keeps, from the config file or the environment."""
    root = tmp_path / "root"
    tdir = root / "agents" / "main" / "telemetry"
    tdir.mkdir(parents=True)
    forty_days_ago = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000) - 40 * retention.DAY_MS
    gateway = Gateway(seed=3, agents=("main",), start_ms=forty_days_ago).events()
    (tdir / "events.jsonl").write_bytes(b"".join(orjson.dumps(next(gateway)) + b"\n" for _ in range(200)))
    db = tmp_path / "ledger.db"
    ingest(db, root)
    before = dump(db)
    config = tmp_path / "keep90.toml"
    config.write_text("[retention]\nraw_days = 90\n")

    def prune(*args: str, raw_days: str | None = None) -> subprocess.CompletedProcess:
        """``prune`` with ``args``, and only ``raw_days`` (not the tests' 0) in the environment."""
        env = {k: v for k, v in cli_env(db).items() if k != "AGENTLEDGER_RETENTION_RAW_DAYS"}
        if raw_days is not None:
            env["AGENTLEDGER_RETENTION_RAW_DAYS"] = raw_days
        return subprocess.run([sys.executable, "-m", "agentledger", "--config", str(config), "prune", *args],
                              capture_output=True, text=True, env=env, timeout=120)

    kept = prune("--json")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["older_than_days"] == 90 and json.loads(kept.stdout)["events"] == 0
    assert "(90 days, [retention] raw_days)" in prune("--dry-run").stdout
    forever = prune(raw_days="0")
    assert forever.returncode == 0 and len(forever.stdout.strip().splitlines()) == 1
    assert "kept for ever" in forever.stdout
    # Scripts get the usual object: the same fields, nothing pruned, no horizon.
    kept_for_ever = json.loads(prune("--json", raw_days="0").stdout)
    assert kept_for_ever.keys() == json.loads(kept.stdout).keys()
    assert (kept_for_ever["horizon"], kept_for_ever["events"], kept_for_ever["reclaimed_bytes"]) == (None, 0, 0)
    assert dump(db) == before

    out = prune("--json", raw_days="20")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["events"] == 200
    assert scalar(db, "SELECT count(*) FROM events WHERE kind <> ''") == 0


def test_prune_refuses_while_another_process_writes(ledger: Path):
    with WriterLock(ledger):
        out = agentledger(ledger, "prune", "--older-than", "30")
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1 and "prunes by itself" in out.stderr
    assert agentledger(ledger, "prune", "--dry-run").returncode == 0  # reading needs no lock
    assert agentledger(ledger, "prune", "--older-than", "30").returncode == 0  # the other writer is gone


def test_prune_without_a_config_keeps_the_built_in_thirty_days(ledger: Path, monkeypatch):
    # The tests' own setting (raw_days = 0) hid it: the built-in default crashed prune with a traceback.
    monkeypatch.delenv("AGENTLEDGER_RETENTION_RAW_DAYS")
    out = agentledger(ledger, "prune", "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["older_than_days"] == 30


def test_a_bad_age_or_a_missing_ledger_is_one_line(ledger: Path, tmp_path: Path):
    out = agentledger(ledger, "prune", "--older-than", "0")
    assert out.returncode == 2 and "--older-than" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    missing = tmp_path / "nowhere.db"
    out = agentledger(missing, "prune")
    assert out.returncode == 2 and "no ledger at" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not missing.exists()


def test_the_pruner_works_between_batches_of_ingest(tmp_path: Path, caplog):
    """The daemon's view: ticks interleaved with ingest, a little work per tick, then a pause."""
    root = tmp_path / "root"
    db = tmp_path / "ledger.db"
    pruner = retention.Pruner(30, every_s=3600, budget_s=0.0, batch_rows=200)
    conn = open_writer(db)
    finished = []
    caplog.set_level("INFO", logger="agentledger.retention")
    try:
        for seed in range(4):
            _synthetic(root, 1500, seed)
            ingest(db, root)
            result = pruner.tick(conn, now_ms=AFTER_ALL)
            if result is not None:
                finished.append(result)
        while not finished:
            result = pruner.tick(conn, now_ms=AFTER_ALL)
            if result is not None:
                finished.append(result)
        assert pruner.tick(conn, now_ms=AFTER_ALL) is None  # the next pass waits an hour
    finally:
        conn.close()
    assert len(finished) == 1 and finished[0].events > 0 and finished[0].reclaimed_bytes > 0
    (line,) = [r.getMessage() for r in caplog.records if r.name == "agentledger.retention"]
    assert f"{finished[0].events} events reduced to their key" in line and "returned to the file system" in line
    assert verify(db) == []
    assert scalar(db, "SELECT count(*) FROM events WHERE kind <> ''") == 6000 - finished[0].events
    # The same events again, in a copy read from the start: nothing new.
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    stats = ingest(db, root, copy)
    assert stats.duplicates == 6000 and stats.events == 0


def _recent(root: Path, n: int, now: int) -> Path:
    """``n`` gateway events of the day before ``now``: within any retention."""
    tdir = root / "agents" / "main" / "telemetry"
    tdir.mkdir(parents=True)
    gateway = Gateway(seed=99, agents=("main",), start_ms=now - retention.DAY_MS).events()
    (tdir / "events.jsonl").write_bytes(b"".join(orjson.dumps(next(gateway)) + b"\n" for _ in range(n)))
    return root


def _listed(db: Path, *args: str) -> list[dict]:
    out = agentledger(db, "events", "--json", "--limit", "100000", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_history_indexed_after_a_prune_is_pruned_by_the_next(tmp_path: Path):
    """A new agent or source on a pruned ledger: its old history went past every later prune, dry run included."""
    db = tmp_path / "ledger.db"
    now = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)
    ingest(db, _recent(tmp_path / "recent", 50, now))
    first = agentledger(db, "prune", "--json", "--older-than", "30")
    assert first.returncode == 0 and json.loads(first.stdout)["events"] == 0
    ingest(db, _synthetic(tmp_path / "old", 300))  # from 1970
    assert len(_listed(db, "--until", "30d")) == 300

    dry = agentledger(db, "prune", "--dry-run", "--json", "--older-than", "30")
    assert json.loads(dry.stdout)["events"] == 300
    did = agentledger(db, "prune", "--json", "--older-than", "30")
    assert did.returncode == 0 and json.loads(did.stdout)["events"] == 300
    assert _listed(db, "--until", "30d") == []
    assert len(_listed(db)) == 50
    assert verify(db) == []


def test_the_daemons_next_pass_prunes_history_that_came_after_its_last(tmp_path: Path):
    """serve started before its logs existed: its first pass found nothing, and the history that came
    next stayed whole through every later pass and restart."""
    db = tmp_path / "ledger.db"
    conn = open_writer(db)
    try:
        assert retention.Pruner(30, every_s=0).tick(conn, now_ms=AFTER_ALL).events == 0
        _synthetic(tmp_path / "root", 400)
        ingest(db, tmp_path / "root")
        pruner = retention.Pruner(30, every_s=0, budget_s=0.0, batch_rows=100)  # as after a restart
        passed = None
        while passed is None:
            passed = pruner.tick(conn, now_ms=AFTER_ALL)
    finally:
        conn.close()
    assert passed.events == 400
    assert scalar(db, "SELECT count(*) FROM events WHERE kind <> ''") == 0
    assert verify(db) == []


def test_going_back_for_late_history_still_stops_at_each_deadline(tmp_path: Path):
    """History older than every key pruned so far sends the next pass back over those keys: it goes
    through them a batch at a time, as through any other, rather than in one long transaction."""
    db = tmp_path / "ledger.db"
    ingest(db, _synthetic(tmp_path / "root", 1000, seed=7))
    assert _prune(db, AFTER_ALL).events == 1000
    ingest(db, _synthetic(tmp_path / "older", 10, seed=1))  # before all of those
    steps = []
    while not steps or not steps[-1].done:
        steps.append(_prune(db, AFTER_ALL, batch_rows=100, deadline=0.0))
    assert sum(step.events for step in steps) == 10
    assert len(steps) > 1000 // 100
    assert scalar(db, "SELECT count(*) FROM events WHERE kind <> ''") == 0
    assert scalar(db, "SELECT count(*) FROM events") == 1010


def test_an_upgraded_ledger_prunes_the_history_its_cursor_had_passed(tmp_path: Path):
    """History indexed late by an older agentledger, whose cursor had moved past it for good."""
    db = tmp_path / "ledger.db"
    ingest(db, _synthetic(tmp_path / "root", 300))
    conn = open_writer(db)
    try:  # as a pass at that horizon left it, before the history came
        conn.execute("UPDATE retention SET events_ms = ?", (AFTER_ALL,))
        assert retention.pending(conn, AFTER_ALL).events == 0
        as_of_version(conn, 34)
    finally:
        conn.close()
    assert _prune(db, AFTER_ALL).events == 300  # the writer opening it upgrades it first
    assert scalar(db, "SELECT count(*) FROM events WHERE kind <> ''") == 0
    assert verify(db) == []


def test_an_older_ledger_switches_to_incremental_vacuum_once(ledger: Path, caplog):
    # As a ledger from before retention: a file without auto-vacuum (the switch does not depend
    # on the schema version, so later migrations cannot get in its way).
    conn = apsw.Connection(str(ledger))
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    version = conn.execute("PRAGMA user_version").fetchall()[0][0]
    conn.close()
    before = dump(ledger)
    conn = open_writer(ledger)
    try:
        assert conn.execute("PRAGMA auto_vacuum").fetchall()[0][0] == 2
        assert conn.execute("PRAGMA user_version").fetchall()[0][0] == version
    finally:
        conn.close()
    assert "rewriting" in caplog.text
    assert dump(ledger) == before
    assert verify(ledger) == []
    caplog.clear()
    open_writer(ledger).close()
    assert "rewriting" not in caplog.text


def test_a_new_ledger_is_incremental_from_the_start(db: Path):
    open_writer(db).close()
    assert scalar(db, "PRAGMA auto_vacuum") == 2


def test_prune_json_reports_the_free_space_it_measured(tmp_path: Path):
    """`free_bytes` was 0 after a real prune and with raw_days = 0 whatever the file held: never measured."""
    db = tmp_path / "ledger.db"
    ingest(db, _synthetic(tmp_path / "root", 2_000))
    conn = open_writer(db)
    try:  # free pages inside the file: a table filled, then dropped
        conn.execute("CREATE TABLE scratch (b BLOB)")
        conn.execute("INSERT INTO scratch VALUES (zeroblob(1000000))")
        conn.execute("DROP TABLE scratch")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        page = conn.execute("PRAGMA page_size").fetchall()[0][0]
    finally:
        conn.close()

    def free_now() -> int:
        reader = open_reader(db)
        try:
            return retention.free_pages(reader) * page
        finally:
            reader.close()

    free = free_now()
    assert free >= 1_000_000
    for args in (("--dry-run",), ()):  # raw_days = 0 (the tests' environment): nothing pruned, the space told
        out = agentledger(db, "prune", "--json", *args)
        assert out.returncode == 0, out.stderr
        assert (json.loads(out.stdout)["reclaimed_bytes"] in (None, 0), json.loads(out.stdout)["free_bytes"]) == (
            True, free), args
    assert json.loads(agentledger(db, "prune", "--json", "--dry-run", "--older-than", "30").stdout)["free_bytes"] \
        == free
    did = json.loads(agentledger(db, "prune", "--json", "--older-than", "30").stdout)
    assert did["reclaimed_bytes"] >= free and did["free_bytes"] == free_now() == 0
