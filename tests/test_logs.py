"""Log lines as an operator meets them: text on a terminal, JSON lines in a pipe or the journal."""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import apsw
import pytest
from conftest import cli_env, ingest
from logwriter import LogDir, event
from served import serve
from serving import wait_for, write_config

from agentledger import logs


@pytest.fixture(scope="module")
def old_ledger_template(oc_corpus: Path, tmp_path_factory) -> Path:
    """A ledger without incremental auto-vacuum: opening it for writing logs one warning."""
    db = tmp_path_factory.mktemp("old") / "ledger.db"
    ingest(db, oc_corpus)
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.close()
    return db


@pytest.fixture
def old_ledger(old_ledger_template: Path, tmp_path: Path) -> Path:
    db = tmp_path / "ledger.db"
    shutil.copy(old_ledger_template, db)
    return db


def _ingest(db: Path, root: Path, *global_args: str, stderr=subprocess.PIPE, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *global_args, "ingest", "--json",
                           str(root)], stdout=subprocess.PIPE, stderr=stderr, env=env or cli_env(db), timeout=120)


def test_json_lines_when_stderr_is_a_pipe(old_ledger: Path, oc_corpus: Path):
    out = _ingest(old_ledger, oc_corpus)
    assert out.returncode == 0
    (line,) = out.stderr.decode().splitlines()
    record = json.loads(line)
    assert record["level"] == "warning" and record["logger"] == "agentledger.retention"
    assert "rewriting" in record["msg"] and record["ts"].endswith("Z")


def test_text_on_a_terminal(old_ledger: Path, oc_corpus: Path):
    leader, follower = pty.openpty()
    try:
        out = _ingest(old_ledger, oc_corpus, stderr=follower)
        os.close(follower)
        follower = None
        text = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closes with its last writer
                break
            if not chunk:
                break
            text += chunk
    finally:
        if follower is not None:
            os.close(follower)
        os.close(leader)
    assert out.returncode == 0
    line = text.decode().strip()
    assert " WARNING agentledger.retention: rewriting " in line and not line.startswith("{")


def test_format_and_level_flags(old_ledger: Path, old_ledger_template: Path, oc_corpus: Path, tmp_path: Path):
    text = _ingest(old_ledger, oc_corpus, "--log-format", "text")
    assert "WARNING agentledger.retention: rewriting" in text.stderr.decode()
    again = tmp_path / "again.db"
    shutil.copy(old_ledger_template, again)
    quiet = _ingest(again, oc_corpus, "--log-level", "error")
    assert quiet.returncode == 0 and quiet.stderr == b""
    bad = _ingest(again, oc_corpus, "--log-level", "loud")
    assert bad.returncode == 2 and b"--log-level" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_journal_lines_carry_their_priority(old_ledger: Path, oc_corpus: Path, tmp_path: Path):
    journal = tmp_path / "journal"
    with open(journal, "wb") as fh:
        st = os.fstat(fh.fileno())
        env = cli_env(old_ledger) | {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert _ingest(old_ledger, oc_corpus, stderr=fh, env=env).returncode == 0
    (line,) = journal.read_text().splitlines()
    assert line.startswith("<4>{") and json.loads(line[3:])["level"] == "warning"


def test_journal_text_lines_carry_their_priority_too(old_ledger: Path, oc_corpus: Path, tmp_path: Path):
    # --log-format text in a unit had lost it: every warning was filed as info.
    journal = tmp_path / "journal"
    with open(journal, "wb") as fh:
        st = os.fstat(fh.fileno())
        env = cli_env(old_ledger) | {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert _ingest(old_ledger, oc_corpus, "--log-format", "text", stderr=fh, env=env).returncode == 0
    (line,) = journal.read_text().splitlines()
    assert line.startswith("<4>") and " WARNING agentledger.retention: rewriting " in line


@pytest.mark.parametrize("args, env, needle", [
    (["serve", "--no-demo", "ROOT"], {"AGENTLEDGER_RECONCILE_GRACE_S": "x"}, "invalid config: reconcile.grace_s: "),
    (["--config", "MISSING", "serve", "--no-demo"], {}, "does not exist: create it, or name another (--config"),
    (["serve", "--no-demo", "JOURNAL"], {}, "Invalid value for '[ROOTS]...'"),  # a file, not a directory
])
def test_a_fatal_error_in_the_journal_carries_the_error_priority(tmp_path: Path, args, env, needle):
    # Printed outside logging, it had no priority: journald filed it as info, and `journalctl -p warning`
    # left out why the unit failed.
    journal = tmp_path / "journal"
    args = [arg.replace("ROOT", str(tmp_path)).replace("MISSING", str(tmp_path / "missing"))
            .replace("JOURNAL", str(journal)) for arg in args]
    command = [sys.executable, "-m", "agentledger", *args]
    with open(journal, "wb") as fh:
        st = os.fstat(fh.fileno())
        env = cli_env(tmp_path / "ledger.db") | env | {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert subprocess.run(command, stdout=subprocess.PIPE, stderr=fh, env=env, timeout=60).returncode == 2
    (line,) = journal.read_text().splitlines()
    assert line.startswith("<3>agentledger: ") and needle in line, line
    # Any other stderr (here a pipe, while $JOURNAL_STREAM names the journal's file) gets the line as it was.
    plain = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert plain.returncode == 2 and plain.stderr == line.removeprefix("<3>") + "\n"


_FLEET_GATE = """
[[gates]]
name = "fleet-day"
scope = "global-day"
metric = "cost_usd"
limit = 0.001
"""
_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


def test_serve_s_text_log_holds_one_line_a_record_whatever_a_gate_was_asked_about(tmp_path):
    # The session key and tool name a gate is asked about are the asker's: a newline in them forged a record
    # of its own in the text log, and escape sequences reached the terminal or the journal.
    logs = LogDir(tmp_path / "logs")
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                      "delta": {"input": 5, "output": 5, "total": 10}, "costUsd": 0.5},
                      ts=time.time_ns() // 1_000_000))
    served = serve(write_config(tmp_path, logs.root, extra=_FLEET_GATE, flush_interval_s=0), "--log-format", "text")
    try:
        key = "agent:main:a\rb\nc\x1b]52;c;cHduZWQ=\x07d"
        tool = "x\n2026-01-01 00:00:00,000 ERROR agentledger.daemon: FORGED \x1b[2J\x9b\u2028\x00"
        status, decision = served.get("/v1/gate?" + urllib.parse.urlencode({"session_key": key, "tool": tool}))
        assert (status, decision["decision"]) == (200, "block")
        wait_for(lambda: "gate fleet-day" in served.log(), what="the gate's log line")
        assert served.stop() == 0, served.log()
    finally:
        served.kill()
    log = served.log()
    assert all(_RECORD.match(line) for line in log.splitlines()), log
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", log), log
    (gate,) = [line for line in log.splitlines() if "gate fleet-day" in line]
    assert (r" WARNING agentledger.daemon: gate fleet-day: block agent:main:a\rb\nc\x1b]52;c;cHduZWQ=\x07d for tool "
            r"x\n2026-01-01 00:00:00,000 ERROR agentledger.daemon: FORGED \x1b[2J\x9b\u2028\x00: ") in gate, gate


@pytest.fixture
def restore_logging():
    root, ours = logging.getLogger(), logging.getLogger("agentledger")
    handlers, level, our_level = list(root.handlers), root.level, ours.level
    yield
    root.handlers, root.level, ours.level = handlers, level, our_level


def test_setup_again_replaces_the_handler(tmp_path: Path, restore_logging):
    first, second = tmp_path / "first", tmp_path / "second"
    log = logging.getLogger("agentledger.test")
    with open(first, "w") as a, open(second, "w") as b:
        logs.setup("info", stream=a)
        logs.setup("debug", json=False, stream=b)
        log.debug("only here, as text")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed")
    assert first.read_text() == ""
    lines = second.read_text().splitlines()
    assert "DEBUG agentledger.test: only here, as text" in lines[0] and "RuntimeError: boom" in second.read_text()
    with open(first, "w") as a:
        logs.setup("warning", json=True, stream=a)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed")
    record = json.loads(first.read_text())
    assert record["msg"] == "failed" and "RuntimeError: boom" in record["exc"]


def test_a_librarys_warnings_come_out_in_the_same_format(tmp_path: Path, restore_logging):
    out = tmp_path / "log"
    with open(out, "w") as stream:
        logs.setup("debug", json=True, stream=stream)
        logging.getLogger("watchdog.observers.inotify").error("queue_events() called when the thread is inactive")
        logging.getLogger("watchdog.observers.inotify").info("chatter nobody asked for")
        logging.getLogger("agentledger.test").debug("ours, at the level asked for")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["logger"], r["msg"]) for r in records] == [
        ("watchdog.observers.inotify", "queue_events() called when the thread is inactive"),
        ("agentledger.test", "ours, at the level asked for")]


def test_unknown_level_names_the_choices():
    with pytest.raises(ValueError, match="debug, info, warning, error"):
        logs.level_number("verbose")
