"""The daemon dies at each named fault point; after a restart nothing is lost or counted twice.

Each test arms one point (``AGENTLEDGER_FAULT=point:N``), feeds a real ``serve`` until the
process ends there, restarts it unarmed, feeds it more, and then compares the ledger with a
clean one-shot build of the same files, runs verify, and checks the hot views it left on disk
against a replay of the ledger.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO
from logwriter import LogDir, llm_call
from served import (
    Served,
    assert_consistent,
    assert_equals_clean_build,
    assert_hot_views_equal_ledger,
    count,
    wait_for,
)

from agentledger.faults import EXIT_CODE, POINTS
from agentledger.hot.store import SESSIONS, TMP_PREFIX

SESSION_NAMES = ("s1", "s2", "s3")
KEYS = {f"agent:main:{s}" for s in SESSION_NAMES}


class Feed:
    """Appends priced calls for three sessions, rotating by rename when asked."""

    def __init__(self, logs: LogDir):
        self.logs = logs
        self.n = 0

    def step(self, lines: int = 4, rotate: bool = False) -> None:
        if rotate and self.logs.live.exists():
            self.logs.rotate()
        data = b"".join(llm_call(self.n + i + 1, session=SESSION_NAMES[(self.n + i) % 3], cost_pico=(self.n + i + 1)
                                 * 1_000_000) for i in range(lines))
        self.logs.append(data)
        self.n += lines


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_fault_point_loses_and_doubles_nothing(tmp_path, point):
    logs = LogDir(tmp_path / "logs")
    feed = Feed(logs)
    feed.step(10)
    rotate = point == "after_rotate"
    daemon = Served.on(tmp_path, logs.root)
    daemon.start(fault=f"{point}:3")
    deadline = time.monotonic() + 60
    while daemon.proc.poll() is None and time.monotonic() < deadline:
        feed.step(rotate=rotate)
        time.sleep(0.15)
    assert daemon.wait() == EXIT_CODE, daemon.log()
    assert f"fault {point} fired" in daemon.log()
    if point == "mid_state_write":  # it did die with half a state file written
        assert any(p.name.startswith(TMP_PREFIX) for p in (daemon.state_dir / "hot" / SESSIONS).iterdir())

    daemon.start()
    for _ in range(5):
        feed.step(rotate=rotate)
        time.sleep(0.1)
    wait_for(lambda: count(daemon.db, "SELECT count(*) FROM events") == feed.n, what=f"{feed.n} events")
    assert daemon.stop() == 0, daemon.log()

    assert count(daemon.db, "SELECT count(*) FROM llm_calls") == feed.n
    assert count(daemon.db, "SELECT sum(cost_pico) FROM llm_calls") == sum(range(1, feed.n + 1)) * 1_000_000
    assert_consistent(daemon.db)
    assert_equals_clean_build(daemon.db, logs.root, tmp_path)
    assert_hot_views_equal_ledger(daemon.db, daemon.state_dir, KEYS)


def test_a_kill_before_the_commit_of_a_pass_over_many_files_loses_and_doubles_none_of_them(tmp_path):
    root = tmp_path / "logs"
    files = [LogDir(root, agent=f"a{i}") for i in range(12)]
    keys = {f"agent:main:s{i}" for i in range(len(files))}
    n = 0

    def feed() -> None:  # one call in each file
        nonlocal n
        for i, logs in enumerate(files):
            n += 1
            logs.append(llm_call(n, session=f"s{i}", cost_pico=n * 1_000_000))

    def events() -> int:
        return count(daemon.db, "SELECT count(*) FROM events")

    feed()
    daemon = Served.on(tmp_path, root)
    daemon.start()
    wait_for(lambda: events() == n, what="the first lines")
    assert daemon.stop() == 0, daemon.log()
    feed()  # while it is down: the catch-up pass reads all twelve files at once
    daemon.start(fault="before_commit:2")
    # The first commit holds the whole pass: committing file by file would die at the second file.
    wait_for(lambda: events() == n, what="the catch-up pass over every file")
    feed()
    assert daemon.wait() == EXIT_CODE, daemon.log()
    assert events() == n - len(files)  # nothing of the pass that died before its commit

    daemon.start()
    wait_for(lambda: events() == n, what="the lines of the pass that died")
    feed()  # and a live pass, which builds the hot views
    wait_for(lambda: events() == n, what=f"{n} events")
    assert daemon.stop() == 0, daemon.log()
    assert count(daemon.db, "SELECT count(*) FROM llm_calls") == n
    assert count(daemon.db, "SELECT sum(cost_pico) FROM llm_calls") == sum(range(1, n + 1)) * 1_000_000
    assert_consistent(daemon.db)
    assert_equals_clean_build(daemon.db, root, tmp_path)
    assert_hot_views_equal_ledger(daemon.db, daemon.state_dir, keys)


def test_hot_views_reach_disk_while_the_daemon_runs_and_survive_kill_9(tmp_path):
    """The views are flushed every interval by a thread of the daemon's own, not at exit only."""
    logs = LogDir(tmp_path / "logs")
    feed = Feed(logs)
    feed.step(lines=3)
    daemon = Served.on(tmp_path, logs.root, flush_interval_s=0.2)
    daemon.start()
    sessions = daemon.state_dir / "hot" / SESSIONS

    def flushed_at(position: int) -> bool:
        records = [json.loads(p.read_bytes()) for p in sessions.glob("*") if not p.name.startswith(TMP_PREFIX)]
        return len(records) == len(KEYS) and all(r["position"] >= position for r in records)

    try:
        wait_for(lambda: count(daemon.db, "SELECT count(*) FROM events") == feed.n, what="the first lines")
        feed.step(lines=6)  # a live pass: every session's view moves
        wait_for(lambda: count(daemon.db, "SELECT count(*) FROM events") == feed.n, what="the live lines")
        position = count(daemon.db, "SELECT seq FROM ledger_position")
        wait_for(lambda: flushed_at(position), what="the views on disk")
    finally:
        daemon.stop(signal.SIGKILL)
    assert_hot_views_equal_ledger(daemon.db, daemon.state_dir, KEYS)


def test_a_misspelt_fault_stops_the_daemon_with_the_names_it_knows(tmp_path):
    env = {"AGENTLEDGER_FAULT": "before_comit:1", "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([sys.executable, "-c", "import agentledger.faults"], capture_output=True, text=True,
                         cwd=REPO, env=env)
    assert ran.returncode == 1
    assert "before_commit, after_commit" in ran.stderr
