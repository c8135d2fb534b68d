"""Hot views asked for while the daemon is still catching up follow the batches committed after."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from zoneinfo import ZoneInfo

import pytest
from logwriter import LogDir, event, llm_call

from agentledger.daemon import LiveState
from agentledger.gates import GateKeeper
from agentledger.hot.sessions import HotSessions
from agentledger.hot.store import file_name
from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger.db import ReaderPool, open_writer
from agentledger.ledger.writer import LedgerWriter

KEY = "agent:main:s1"


@contextmanager
def _following(tmp_path, logs: LogDir):
    """The daemon's wiring: a pipeline whose commits refresh the hot views gates read."""
    conn = open_writer(tmp_path / "ledger.db")
    readers = ReaderPool(tmp_path / "ledger.db")
    hot = HotSessions(tmp_path / "hot", flush_interval_s=0)
    live = LiveState(conn, hot, GateKeeper((), hot, readers, ZoneInfo("UTC")))
    pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-telemetry", [logs.root]),
                        after_commit=lambda result: live.committed(result.sessions, result.position))
    try:
        yield pipeline, live, hot, readers
    finally:
        hot.close()
        readers.close()
        conn.close()


def test_a_view_looked_up_during_catch_up_is_not_left_behind(tmp_path):
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    with _following(tmp_path, logs) as (pipeline, live, hot, readers):
        def calls() -> int:
            with readers.connection() as reader:
                return hot.lookup(reader, KEY).own.llm_calls

        pipeline.run_once()  # a first catch-up pass; a gate asks about the session in between
        assert calls() == 1
        logs.append(llm_call(2))
        pipeline.run_once()  # a second pass of the catch-up: no refresh yet, the view must not lag
        assert calls() == 2
        live.caught_up()
        assert calls() == 2
        logs.append(llm_call(3))
        pipeline.run_once()  # following: refreshed after the commit
        assert calls() == 3


def test_a_view_read_again_unchanged_is_not_written_again(tmp_path):
    """A gate question may build a view between a commit and the refresh after it; the refresh
    then reads the same view, which must not cost a second write of its state file."""
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    conn = open_writer(tmp_path / "ledger.db")
    readers = ReaderPool(tmp_path / "ledger.db")
    hot = HotSessions(tmp_path / "hot", flush_interval_s=0)  # every put is written at once
    results = []
    pipeline = Pipeline(LedgerWriter(conn), specs_from("oc-telemetry", [logs.root]), after_commit=results.append)

    def state_file() -> os.stat_result:
        (path,) = (tmp_path / "hot" / "sessions").glob("*.json")
        return os.stat(path)

    try:
        pipeline.run_once()
        with readers.connection() as reader:
            assert hot.lookup(reader, KEY).own.llm_calls == 1  # the question comes first
        written = state_file()
        hot.apply(hot.read(conn, results[-1].sessions), results[-1].position)
        assert state_file().st_ino == written.st_ino  # not replaced
        logs.append(llm_call(2))
        pipeline.run_once()
        hot.apply(hot.read(conn, results[-1].sessions), results[-1].position)
        assert state_file().st_ino != written.st_ino  # a view that moved is written
        with readers.connection() as reader:
            assert hot.lookup(reader, KEY).own.llm_calls == 2
    finally:
        hot.close()
        readers.close()
        conn.close()


def test_a_view_asked_for_by_session_id_follows_the_ledger(tmp_path):
    """Claude Code's hooks ask gates by session id: that view must move with every commit, its
    subagents' included, as the view asked for by key does; a session is listed once."""
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    logs.append(event(2, "subagent.spawn", {"childSessionKey": "agent:main:subagent:c1"}))
    with _following(tmp_path, logs) as (pipeline, live, hot, readers):
        def view(key: str):
            with readers.connection() as reader:
                return hot.lookup(reader, key)

        pipeline.run_once()
        live.caught_up()
        assert view("sid-s1").own.cost_pico == 1_000_000
        assert view(KEY).own.cost_pico == 1_000_000
        logs.append(llm_call(3, cost_pico=5_000_000_000_000))
        pipeline.run_once()
        assert view("sid-s1").own.cost_pico == 5_000_001_000_000
        logs.append(llm_call(4, cost_pico=7_000_000, session="subagent:c1"))
        pipeline.run_once()
        assert view("sid-s1").family.cost_pico == 5_000_008_000_000
        assert [(v.session_key, v.own.cost_pico) for v in hot.views() if v.session_id == "sid-s1"] == \
            [(KEY, 5_000_001_000_000)]


@pytest.mark.parametrize("field, value", [
    ("started_ms", "1700000000000"), ("ended_ms", 1.5), ("status", 3), ("session_key", None),
    ("current_run", ["r"]), ("own", {"cost_pico": True}), ("family", {"llm_calls": "2"}), ("own", None),
])
def test_a_view_file_with_a_field_of_another_type_is_set_aside_and_rebuilt(tmp_path, field, value):
    # Trusted on its marks alone, such a view failed every answer it was in until its session changed.
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    with _following(tmp_path, logs) as (pipeline, live, hot, readers):
        pipeline.run_once()
        live.caught_up()
        with readers.connection() as reader:
            view = hot.lookup(reader, KEY)
    path = tmp_path / "hot" / "sessions" / file_name(KEY)
    doc = json.loads(path.read_bytes())
    doc["state"][field] = value
    path.write_text(json.dumps(doc))
    again = HotSessions(tmp_path / "hot")
    assert (again.store.quarantined, again.recovered) == (1, [])
    assert [p.name.partition(".corrupt-")[:2] for p in path.parent.iterdir()] == [(path.name, ".corrupt-")]
    readers = ReaderPool(tmp_path / "ledger.db")
    try:
        with readers.connection() as reader:
            assert again.lookup(reader, KEY) == view
    finally:
        readers.close()
