"""``agentledger watch`` in a real terminal (tmux, 80×24): it starts, shows a corpus session with its
cost, follows new lines, and quits with exit code 0."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from conftest import REPO, cli_env, ingest
from logwriter import LogDir, event, partly_priced_log
from served import serve
from serving import copy_logs, write_config
from terminal import Terminal, needs_tmux, on_a_terminal

from agentledger import display
from agentledger.ledger import queries
from agentledger.ledger.db import open_reader

pytestmark = needs_tmux


def _latest(db: Path) -> dict:
    conn = open_reader(db)
    try:
        return queries.sessions(conn, queries.Window(limit=1))[0]
    finally:
        conn.close()


def _spend(logs: Path, latest: dict, cost: float) -> None:
    """A model call in the latest session, now, appended to its agent's live telemetry file."""
    agent = latest["agent_id"]
    session = latest["session_key"].removeprefix(f"agent:{agent}:")
    line = event(990_001, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                       "delta": {"input": 900, "output": 100, "cacheRead": 0, "cacheWrite": 0,
                                                 "total": 1000}, "costUsd": cost},
                 agent=agent, session=session, session_id=latest["session_id"], run="run-watch",
                 ts=time.time_ns() // 1_000_000)
    with open(logs / "agents" / agent / "telemetry" / "events.jsonl", "ab") as f:
        f.write(line)


@pytest.fixture
def env(tmp_path) -> dict:
    env = cli_env(tmp_path / "ledger.db")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")
    env.pop("AGENTLEDGER_URL", None)
    return env


def test_watch_follows_the_daemon_and_quits_on_q(oc_corpus, tmp_path, env):
    logs = copy_logs(oc_corpus, tmp_path / "logs")
    served = serve(write_config(tmp_path, logs))
    term = None
    try:
        latest = _latest(tmp_path / "ledger.db")
        term = Terminal(tmp_path, ["--config", str(served.config), "watch", "--url", served.url], env)
        key = latest["session_key"]
        screen = term.shows("from the daemon at", key[:28], display.usd(latest["cost_usd"]))
        assert max(len(line) for line in screen.splitlines()) <= 80
        assert "session-cost" in screen and "fleet-day" in screen  # the config's gates, with their headroom

        _spend(logs, latest, 1.25)
        term.shows(display.usd(latest["cost_usd"] + 1.25), "$7.50")  # the new cost, and $1.25 in 10 min is $7.50/h
        term.press("q")
        assert term.exit_code() == 0
    finally:
        if term is not None:
            term.close()
        served.stop()


def test_watch_reads_the_ledger_when_no_daemon_answers_and_quits_on_ctrl_c(oc_corpus, tmp_path, env):
    logs = copy_logs(oc_corpus, tmp_path / "logs")
    db = tmp_path / "ledger.db"
    ingest(db, logs)
    latest = _latest(db)
    term = Terminal(tmp_path, ["watch", "--url", "http://127.0.0.1:9"], env)  # nothing listens there
    try:
        term.shows("read-only", latest["session_key"][:28], display.usd(latest["cost_usd"]))
        _spend(logs, latest, 0.5)
        subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--format", "oc-telemetry", str(logs)],
                       cwd=REPO, env=env, check=True, capture_output=True, timeout=60)
        term.shows(display.usd(latest["cost_usd"] + 0.5))
        term.press("C-c")
        assert term.exit_code() == 0
    finally:
        term.close()


def test_watch_prints_one_snapshot_when_not_on_a_terminal(oc_corpus, tmp_path, env):
    db = tmp_path / "ledger.db"
    ingest(db, oc_corpus)
    latest = _latest(db)
    ran = subprocess.run([sys.executable, "-m", "agentledger", "watch", "--url", "http://127.0.0.1:9"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert latest["session_key"] in ran.stdout and display.usd(latest["cost_usd"]) in ran.stdout
    bad = subprocess.run([sys.executable, "-m", "agentledger", "watch", "--interval", "0"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--interval" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(tmp_path / "none.db"), "watch",
                              "--url", "http://127.0.0.1:9"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=60, check=False)
    assert missing.returncode == 2 and "no ledger at" in missing.stderr


def test_watch_marks_costs_that_leave_out_unpriced_calls(tmp_path, env):
    logs = partly_priced_log(tmp_path / "logs")
    ingest(tmp_path / "ledger.db", logs.root)
    config = write_config(tmp_path, logs.root)
    ran = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(config), "watch", "--url",
                          "http://127.0.0.1:9"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert "today ≥$0.5000*  in all ≥$0.5000*" in lines[0]
    rows = {line.split()[0]: line.split()[1:] for line in lines
            if line.startswith(("agent:main:", "session-cost", "fleet-day"))}
    # $0.50 in the last ten minutes is $3.00 an hour, and more by what the unpriced call cost.
    assert rows["agent:main:s1"][:2] == ["≥$0.5000*", "≥$3.00/h*"]
    assert rows["agent:main:s2"][:2] == ["—*", "—*"]
    # One priced call gives no pace: with a call of no price beside it, the pace is unknown rather than none.
    assert rows["session-cost"][1:] == ["≥$0.5000*/$5.00", "$4.50", "—*", "—"]
    assert rows["fleet-day"][-4:] == ["≥$0.5000*/$50.00", "$49.50", "—*", "—"]
    assert sum(line.startswith("* leaves out model calls of unknown cost") for line in lines) == 1


def test_watch_shows_the_time_on_the_clock_of_the_zone_it_names(tmp_path, env):
    # The header and the failures were drawn at UTC's time beside the configured zone's name.
    zone = ZoneInfo("America/New_York")  # never UTC's offset, in summer or winter
    logs = LogDir(tmp_path / "logs")
    failed_ms = time.time_ns() // 1_000_000 - 3_600_000
    logs.append(event(1, "tool.end", {"toolCallId": "call-1", "toolName": "exec", "isError": True}, ts=failed_ms))
    ingest(tmp_path / "ledger.db", logs.root)
    config = write_config(tmp_path, logs.root)
    config.write_text('timezone = "America/New_York"\n' + config.read_text())
    before = dt.datetime.now(zone).replace(microsecond=0)
    ran = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(config), "watch", "--once", "--url",
                          "http://127.0.0.1:9"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    after = dt.datetime.now(zone)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    seconds = range(int((after - before).total_seconds()) + 1)
    shown = {f"agentledger watch  {before + dt.timedelta(seconds=s):%H:%M:%S} America/New_York" for s in seconds}
    assert any(lines[0].startswith(s) for s in shown), lines[0]
    failed_at = dt.datetime.fromtimestamp(failed_ms / 1000, zone)
    assert f"{failed_at:%H:%M:%S} tool exec error agent:main:s1" in lines, lines


_BUSY_GATES = """
[[gates]]
name = "daily-tokens"
scope = "global-day"
metric = "tokens"
limit = 500000000
action = "warn"

[[gates]]
name = "agent-day-cost"
scope = "agent-day"
metric = "cost_usd"
limit = 2000.0
action = "block"
"""


def test_a_terminal_of_any_width_shows_each_figure_whole_or_names_its_column(tmp_path, env):
    # Below 80 columns watch printed "150,000,000/500,000,…" and "350,000,0…", its header "in all $1…":
    # a number's column was cut with an ellipsis like text.
    logs = LogDir(tmp_path / "logs")
    now = time.time_ns() // 1_000_000
    # The last 5 minutes, inside the 10 the rates are over, and today's (UTC) all: just after midnight, fewer.
    span = min(300_000, now % 86_400_000)
    for i in range(150):  # 1M tokens and $9.50 each
        logs.append(event(i + 1, "llm.call", {"callIndex": i, "provider": "anthropic", "model": "claude-opus-4-1",
                                              "delta": {"input": 20_000, "output": 5_000, "cacheRead": 900_000,
                                                        "cacheWrite": 75_000, "total": 1_000_000}, "costUsd": 9.5},
                          session="telegram:direct:ops", ts=now - span + i * span // 150))
    ingest(tmp_path / "ledger.db", logs.root)
    config = write_config(tmp_path, logs.root, extra=_BUSY_GATES)
    args = ["--config", str(config), "watch", "--once", "--url", "http://127.0.0.1:9"]
    widths = (24, 40, 60, 70, 80, 120)
    with ThreadPoolExecutor(3) as pool:
        shown = dict(zip(widths, pool.map(lambda w: on_a_terminal(args, env, w), widths)))
    figures = {"used": "150,000,000/500,000,000", "left": "350,000,000", "next gate": "agent-day-cost 71%"}
    for width, screen in shown.items():
        header, _, rest = screen.partition("\nfrom ")
        assert header.count("$1,425.00") == 2, (width, screen)
        below = rest.partition("\n")[2]  # not the ledger's path, which may be cut anywhere
        assert not re.search(r"[\d$,.%/]…", header + below), (width, screen)
        assert max(map(len, screen.splitlines())) <= width, (width, screen)
        narrow = " ".join(re.findall(r"\(too narrow for ([^:]*):", " ".join(screen.split())))
        for column, figure in figures.items():
            assert figure in screen or column in narrow, (width, column, screen)
    assert "too narrow" not in shown[120] and "$575.00" in shown[120]


_FEED = """
import sys
from agentledger.cli.live_view import Feed
from agentledger.config import Config
feed = Feed("http://127.0.0.1:9", Config(db=sys.argv[1]), 8)
print(feed.snapshot()[0]["total_usd"], flush=True)
sys.stdin.readline()
print(feed.snapshot()[0]["total_usd"], flush=True)
"""


def test_watch_on_a_ledger_it_cannot_write_beside_sees_what_is_written_after_it_started(tmp_path, env,
                                                                                         unprivileged):
    # Read as it lay (no -wal beside it, a directory watch cannot write), the ledger stayed as watch first saw
    # it: its connection was kept, and later writes, through a -wal made since, never showed.
    logs = LogDir(tmp_path / "logs")
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                      "delta": {"input": 1, "output": 1, "total": 2}, "costUsd": 1.0}))
    db = tmp_path / "ledger" / "ledger.db"
    db.parent.mkdir()
    ingest(db, logs.root)
    db.parent.chmod(0o555)
    try:
        proc = subprocess.Popen([*unprivileged, sys.executable, "-c", _FEED, str(db)], env=env, cwd=REPO, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = proc.stdout.readline()
        db.parent.chmod(0o755)
        logs.append(event(2, "llm.call", {"callIndex": 2, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                          "delta": {"input": 1, "output": 1, "total": 2}, "costUsd": 2.0}))
        ingest(db, logs.root)
        out, err = proc.communicate("\n", timeout=60)
    finally:
        db.parent.chmod(0o755)
    assert (first.strip(), out.strip()) == ("1.0", "3.0"), err


def test_watch_keeps_each_session_and_failure_on_one_line_whatever_its_text_holds(tmp_path, env):
    # The query tables folded a line break in a session key or a tool's name; watch broke its row there.
    logs = LogDir(tmp_path / "logs")
    now = time.time_ns() // 1_000_000
    session = "a\nb\tc"
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                      "delta": {"input": 9, "output": 1, "total": 10}, "costUsd": 0.5},
                      session=session, ts=now - 3000))
    for n, end in ((2, {}), (3, {"isError": True, "durationMs": 5, "error": "boom"})):
        logs.append(event(n, "tool.end" if end else "tool.start", {"toolName": "read\nfile", "toolCallId": "tc1",
                                                                   **end}, session=session, ts=now - 3000 + n))
    ingest(tmp_path / "ledger.db", logs.root)
    ran = subprocess.run([sys.executable, "-m", "agentledger", "watch", "--once", "--url", "http://127.0.0.1:9"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    rows = [line.split()[:4] for line in lines if line.startswith("agent:main:")]
    assert rows == [["agent:main:a", "b", "c", "$0.5000"]]
    assert [line.split(" ", 1)[1] for line in lines if " tool " in line] == ["tool read file error agent:main:a b c"]
