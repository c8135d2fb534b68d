"""``serve`` as a real subprocess: catch-up, live following through inotify, clean SIGTERM, the demo."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import orjson
import pytest
from conftest import REPO, cli_env, cli_json
from logwriter import LogDir, event, llm_call
from serving import http_get
from test_tail_scenarios import indexed_state, shown_inputs, unreadable_index
from test_transcript_sources import (SESSION, _child, _project, _sessions_dir, _spawn_call, _spawn_result,
                                     cc_assistant, cc_prompt, oc_assistant, oc_header, oc_user)

from agentledger.ledger.db import open_writer


def _count(db: Path, sql: str) -> int:
    if not db.exists():
        return 0
    conn = apsw.Connection(f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.setbusytimeout(5000)
    try:
        return conn.execute(sql).fetchall()[0][0]
    except (apsw.SQLError, apsw.BusyError):
        return 0  # being created or not migrated yet
    finally:
        conn.close()


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _serve(db: Path, *args: str, env: dict | None = None, prefix: list[str] = (), **popen) -> subprocess.Popen:
    return subprocess.Popen([*prefix, sys.executable, "-m", "agentledger", "--db", str(db), "serve", "--listen",
                             "127.0.0.1:0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=env, **popen)


def _serve_without_db(*args: str, env: dict, **popen) -> subprocess.Popen:
    """``serve`` with no --db: on the ledger it chooses itself (the demo's own, or the default)."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True} | popen
    return subprocess.Popen([sys.executable, "-m", "agentledger", "serve", "--listen", "127.0.0.1:0", *args],
                            cwd=REPO, env=env, **popen)


def _serve_on_a_terminal(db: Path, *args: str, env: dict | None = None,
                         hangup=signal.SIG_DFL) -> tuple[subprocess.Popen, int]:
    """``serve`` with a terminal of its own as its controlling terminal, as in a terminal window; and
    the terminal's other end, whose closing hangs the terminal up as closing the window does.
    ``hangup``: SIGHUP's disposition it starts with (nohup starts it ignored)."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()

    def in_the_child() -> None:  # a session of its own (start_new_session), whose terminal this becomes
        signal.signal(signal.SIGHUP, hangup)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        daemon = _serve(db, *args, env=env, stdin=slave, start_new_session=True, preexec_fn=in_the_child)
    finally:
        os.close(slave)
    return daemon, master


def test_serve_catches_up_follows_live_and_stops_on_sigterm(tmp_path, oc_corpus):
    root = tmp_path / "state"
    shutil.copytree(oc_corpus, root)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    db = tmp_path / "ledger.db"
    # A long rescan interval: only inotify can make the live lines show up quickly.
    daemon = _serve(db, "--rescan", "60", str(root))
    try:
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 2184)
        logs = LogDir(root, agent="main")
        logs.append(b"".join(llm_call(n) for n in range(1, 51)))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 2234, timeout=10)
        logs.rotate()
        logs.append(b"".join(llm_call(n) for n in range(51, 61)))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 2244, timeout=10)
    finally:
        err = _terminated(daemon)
    assert daemon.returncode == 0, err
    assert "caught up" in err and "stopped" in err
    assert _count(db, "SELECT count(*) FROM llm_calls") == 397 + 60


def test_an_unreadable_log_is_told_once_while_serving_and_read_once_it_can_be(tmp_path, unprivileged):
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(llm_call(n) for n in range(1, 4)))
    logs.live.chmod(0)
    db = tmp_path / "ledger.db"
    # A pass every 0.05 s looks at the file again and again: it is told of once.
    daemon = _serve(db, "--rescan", "0.05", str(logs.root), prefix=unprivileged)
    try:
        _wait_for(lambda: _count(db, "SELECT count(*) FROM unreadable_inputs") == 1)
        time.sleep(1)
        logs.live.chmod(0o644)
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 3, timeout=10)
        _wait_for(lambda: _count(db, "SELECT count(*) FROM unreadable_inputs") == 0, timeout=10)
    finally:
        err = _terminated(daemon)
    assert daemon.returncode == 0, err
    assert err.count(f"cannot read file {logs.live}: Permission denied") == 1, err
    assert "holds no" not in err


def test_a_fifo_named_like_a_transcript_is_passed_over_while_serving(tmp_path):
    # Opening it waited for a writer: no transcript after it was indexed, /readyz still said ready, and
    # SIGTERM went unheeded.
    sdir = _sessions_dir(tmp_path, "agent:main:main", "s1")
    (sdir / "s1.jsonl").write_bytes(oc_header("s1") + oc_user("u1", 1) + oc_assistant("a1", 2))
    db = tmp_path / "ledger.db"
    daemon = _serve(db, "--no-demo", "--rescan", "0.2", "--format", "oc-transcript", str(tmp_path / "state"))
    try:
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 1)
        os.mkfifo(sdir / "s0.jsonl.reset.2026-10-02T00-00-00.000Z")
        (sdir / "s2.jsonl").write_bytes(oc_header("s2") + oc_user("u1", 1) + oc_assistant("a1", 2))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 2, timeout=15)
    finally:
        err = _terminated(daemon)
    _stopped_cleanly(daemon, err)


@pytest.mark.parametrize("copy", ["transcript", "store"])
def test_an_unreadable_sessions_json_is_told_once_and_keys_its_sessions_once_it_can_be_read(tmp_path, unprivileged,
                                                                                            copy):
    # Its failed read was remembered as an answer under a stamp its mode is no part of: its sessions kept the
    # keys guessed without it until a restart, and nothing said why; `inputs` did not list it either.
    state, index = unreadable_index(tmp_path, copy)
    hour_ago = time.time() - 3600
    for path in state.rglob("*"):  # written a while ago: a look at them is taken for all there is
        os.utime(path, (hour_ago, hour_ago))
    db = tmp_path / "ledger.db"
    daemon = _serve(db, "--no-demo", "--rescan", "0.05", "--format", "oc-transcript", str(state), prefix=unprivileged)
    keyed = "SELECT count(*) FROM sessions WHERE session_id = 's1' AND session_key = '{}'"
    try:
        _wait_for(lambda: _count(db, keyed.format("agent:main:s1")) == 1)
        time.sleep(1)  # a pass every 0.05 s looks at it again and again: it is told of once
        assert [(row["status"], row["reason"]) for row in cli_json(db, "inputs") if row["path"] == str(index)] == [
            ("unreadable", "Permission denied")]
        assert shown_inputs(db, index) == [["unreadable", "-", "-", "-", "-", "Permission", "denied"]]
        index.chmod(0o644)
        _wait_for(lambda: _count(db, keyed.format("agent:main:main")) == 1, timeout=10)
        _wait_for(lambda: _count(db, "SELECT count(*) FROM unreadable_inputs") == 0, timeout=10)
        assert str(index) not in {row["path"] for row in cli_json(db, "inputs")}
        assert shown_inputs(db, index) == []
    finally:
        err = _terminated(daemon)
    assert daemon.returncode == 0, err
    assert err.count(f"cannot read file {index}: Permission denied") == 1, err
    assert err.count(f"{index} can be read again") == 1, err


def test_a_broken_sessions_json_removed_with_its_folder_is_no_longer_listed(tmp_path):
    # Only a look at its folder forgot it, and a folder gone is looked at no more: listed for as long as serve ran.
    state, index = indexed_state(tmp_path, "transcript")
    index.write_bytes(b"[]")
    db = tmp_path / "ledger.db"
    daemon = _serve(db, "--no-demo", "--rescan", "0.05", "--format", "oc-transcript", str(state))
    try:
        _wait_for(lambda: _count(db, "SELECT count(*) FROM unreadable_inputs") == 1)
        shutil.rmtree(index.parent)
        _wait_for(lambda: _count(db, "SELECT count(*) FROM unreadable_inputs") == 0, timeout=10)
        assert shown_inputs(db, index) == []
    finally:
        err = _terminated(daemon)
    assert daemon.returncode == 0, err


def test_an_archived_subagent_unreadable_at_first_takes_its_spawns_key_once_it_can_be_read(tmp_path, unprivileged):
    # Its first lines' failed read, met while another archive beside it was keyed, was remembered under a
    # stamp its mode is no part of: once readable, it matched no spawn and kept a key of its own.
    state = tmp_path / "state"
    parent_dir, child_dir = state / "agents" / "work" / "sessions", state / "agents" / "main" / "sessions"
    parent_dir.mkdir(parents=True)
    child_dir.mkdir(parents=True)
    parent, child, stranger = ("c0ffee00-0000-4000-8000-00000000000" + n for n in "123")
    (parent_dir / "sessions.json").write_bytes(orjson.dumps({"agent:work:main": {"sessionId": parent}}))
    task = "Review src/auth for missing checks; report, do not edit."
    (parent_dir / f"{parent}.jsonl").write_bytes(oc_header(parent) + _spawn_call("p1", "call_a", task, 10)
                                                 + _spawn_result("p2", "call_a", "agent:main:subagent:aaaa", 10))
    (child_dir / f"{stranger}.jsonl.reset.2026-10-01T10-00-00.000Z").write_bytes(
        b"".join(_child(stranger, "what is on my calendar?", 10)))
    archived = child_dir / f"{child}.jsonl.deleted.2026-10-01T10-00-00.000Z"
    archived.write_bytes(b"".join(_child(child, task, 10)))
    archived.chmod(0)
    db = tmp_path / "ledger.db"
    daemon = _serve(db, "--no-demo", "--rescan", "0.05", "--format", "oc-transcript", str(state), prefix=unprivileged)
    keyed = "SELECT count(*) FROM sessions WHERE session_id = '{}' AND session_key = '{}'"
    try:
        _wait_for(lambda: _count(db, keyed.format(stranger, f"agent:main:{stranger}")) == 1)
        archived.chmod(0o644)
        _wait_for(lambda: _count(db, keyed.format(child, "agent:main:subagent:aaaa")) == 1, timeout=10)
    finally:
        err = _terminated(daemon)
    assert daemon.returncode == 0, err


def test_a_root_with_nothing_in_its_format_is_told_once_caught_up(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    daemon = _serve(tmp_path / "ledger.db", "--rescan", "0.05", "--format", "claude-code", str(logs.root))
    said: list[str] = []
    _read_until(daemon, "caught up", said)
    time.sleep(0.5)
    err = _stop(daemon, said)
    assert err.count(f"{logs.root} holds no claude-code files yet: they are read once they appear; it holds "
                     "oc-telemetry files: read it as oc-telemetry") == 1, err


def test_a_closed_terminal_stops_serve_as_cleanly_as_sigterm(tmp_path):
    # SIGHUP killed it at once: no "stopped", no last flush of the hot views.
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    hot = tmp_path / "st" / "hot"
    # A view asked for is written at the latest on the way out: the flush interval is far off.
    env = os.environ | {"AGENTLEDGER_STORE_STATE_DIR": str(tmp_path / "st"), "AGENTLEDGER_STORE_FLUSH_INTERVAL_S": "3600"}
    daemon, terminal = _serve_on_a_terminal(tmp_path / "ledger.db", "--no-demo", str(logs.root), env=env)
    said: list[str] = []
    _read_until(daemon, "caught up", said)
    url = re.search(r"listening on (http://[^\s\"]+)", "".join(said)).group(1)
    assert http_get(url, "/v1/sessions/agent:main:s1/hot")[1]["llm_calls"] == 1
    assert not any(hot.rglob("*.json"))
    os.close(terminal)  # the window closes: the kernel hangs the terminal up
    rest = _rest_of_log(daemon)
    assert daemon.returncode == 0, "".join(said) + rest
    assert "stopped" in rest and "SIGHUP" not in rest
    assert any(hot.rglob("*.json"))


def test_a_closed_terminal_leaves_serve_run_under_nohup(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    db = tmp_path / "ledger.db"
    daemon, terminal = _serve_on_a_terminal(db, "--no-demo", "--rescan", "0.05", str(logs.root),
                                            hangup=signal.SIG_IGN)
    said: list[str] = []
    _read_until(daemon, "caught up", said)
    os.close(terminal)
    time.sleep(0.5)
    assert daemon.poll() is None
    logs.append(llm_call(2))
    _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 2, timeout=10)
    _stop(daemon, said)


def _serving_without_a_terminal(tmp_path: Path) -> tuple[LogDir, Path, subprocess.Popen, list[str]]:
    """A caught-up serve of one line, in a session of its own (as under systemd), passing every 0.05 s."""
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    db = tmp_path / "ledger.db"
    daemon = _serve(db, "--no-demo", "--rescan", "0.05", str(logs.root), start_new_session=True)
    said: list[str] = []
    _read_until(daemon, "caught up", said)
    return logs, db, daemon, said


def test_sighup_without_a_terminal_is_told_and_serve_keeps_running(tmp_path):
    # Under systemd there is no terminal to close: a SIGHUP is an operator's (`systemctl kill -s HUP`,
    # `kill -HUP`), most likely expecting a reload. It stopped the service for good: exit 0 is not a
    # failure, so Restart=on-failure left it down.
    logs, db, daemon, said = _serving_without_a_terminal(tmp_path)
    daemon.send_signal(signal.SIGHUP)
    _read_until(daemon, "SIGHUP", said)
    daemon.send_signal(signal.SIGHUP)
    _read_until(daemon, "SIGHUP", said)
    assert daemon.poll() is None
    logs.append(llm_call(2))
    _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 2, timeout=10)
    err = _stop(daemon, said)
    told = [line for line in err.splitlines() if "SIGHUP" in line]
    assert len(told) == 2, err
    assert '"level":"warning"' in told[0]
    assert "keeps running" in told[0] and "restart" in told[0] and "systemctl restart agentledger" in told[0]
    assert "stopped" in err


def test_a_storm_of_signals_never_hangs_the_daemon(tmp_path):
    """A handler that set the loop's Event ran in the main thread, perhaps while that thread held the
    Event's lock (in its wait or its clear): it waited for itself, for ever, and SIGTERM went unheard."""
    logs, db, daemon, said = _serving_without_a_terminal(tmp_path)
    drained = threading.Thread(target=lambda: said.extend(daemon.stderr), daemon=True)  # each SIGHUP is told
    drained.start()
    try:
        ended = time.monotonic() + 4
        while time.monotonic() < ended:
            daemon.send_signal(signal.SIGHUP)
            time.sleep(0.0002)
        logs.append(llm_call(2))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 2, timeout=15)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        daemon.kill()
    drained.join(timeout=10)
    assert "stopped" in said[-1], said[-3:]


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for ``signum`` (rather than the default, which kills)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signum - 1) & 1)


def _terminated(daemon: subprocess.Popen) -> str:
    """What serve wrote to stderr once stopped by SIGTERM; killed if it does not stop within 30 s, for no
    test to leave a daemon running behind it."""
    daemon.send_signal(signal.SIGTERM)
    try:
        return daemon.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        daemon.kill()
        return daemon.communicate()[1]


def _stopped_cleanly(daemon: subprocess.Popen, err: str) -> None:
    assert daemon.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.rstrip().endswith('"msg":"stopped"}'), err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
@pytest.mark.parametrize("when", ["first-caught", "first-line"])
def test_a_stop_from_the_start_of_serve_exits_0(tmp_path, signum, when):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    daemon = _serve(tmp_path / "ledger.db", "--no-demo", str(logs.root))
    if when == "first-caught":  # the first instant it can tell a stop from a kill
        _wait_for(lambda: daemon.poll() is not None or _catches(daemon.pid, signal.SIGTERM), timeout=10)
    else:
        _read_until(daemon, "", [])
    daemon.send_signal(signum)
    _stopped_cleanly(daemon, _rest_of_log(daemon))


def _link(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except FileNotFoundError:  # a descriptor closed meanwhile
        return None


class _StartingServe:
    """``serve`` blocked reading its configuration from a pipe until ``give_config``: its command line
    is loaded, its daemon not started. ``terminal``: the other end of its terminal, if given one."""

    def __init__(self, tmp_path: Path, on_a_terminal: bool = False):
        logs = LogDir(tmp_path / "state")
        logs.append(llm_call(1))
        self.db = tmp_path / "ledger.db"
        config = tmp_path / "config.toml"
        os.mkfifo(config)
        # Open for writing before serve opens it: a FIFO no program writes to is refused, not waited on.
        # For reading too, which opens it at once, where for writing alone waits for a reader.
        self._config: int | None = os.open(config, os.O_RDWR)
        env = os.environ | {"AGENTLEDGER_CONFIG": str(config)}
        args = (self.db, "--no-demo", "--rescan", "0.05", str(logs.root))
        self.daemon, self.terminal = _serve_on_a_terminal(*args, env=env) if on_a_terminal else \
            (_serve(*args, env=env, start_new_session=True), None)

        def opened() -> bool:  # one of its descriptors is the FIFO's
            assert self.daemon.poll() is None, self.daemon.stderr.read()
            fds = Path(f"/proc/{self.daemon.pid}/fd")
            return any(_link(fd) == str(config) for fd in fds.iterdir())

        _wait_for(opened)

    def give_config(self) -> None:
        """A configuration of the defaults, read on: the daemon starts."""
        if self._config is not None:
            os.write(self._config, b"# the defaults\n")
            os.close(self._config)
            self._config = None

    def close(self) -> None:
        self.give_config()
        if self.terminal is not None:
            os.close(self.terminal)
            self.terminal = None
        self.daemon.kill()


@pytest.mark.parametrize("signum, on_a_terminal", [(signal.SIGTERM, False), (signal.SIGINT, False),
                                                   (signal.SIGINT, True), (signal.SIGHUP, True)],
                         ids=["sigterm", "sigint", "ctrl-c", "terminal-closed"])
def test_a_stop_while_serve_starts_is_held_and_exits_0(tmp_path, signum, on_a_terminal):
    # Its handlers came only once its imports and configuration were done, a good part of a second: a
    # SIGTERM (or a closed terminal) then killed it, no "stopped", and Ctrl-C ended in a KeyboardInterrupt
    # traceback from whichever module was loading.
    serve = _StartingServe(tmp_path, on_a_terminal)
    try:
        if signum == signal.SIGINT and on_a_terminal:
            os.write(serve.terminal, b"\x03")  # Ctrl-C typed on its terminal
        elif signum == signal.SIGHUP:
            os.close(serve.terminal)  # the window closes: the kernel hangs the terminal up
            serve.terminal = None
        else:
            serve.daemon.send_signal(signum)
        time.sleep(0.2)  # taken in while it waits, not after it reads on
        serve.give_config()
        err = _rest_of_log(serve.daemon)
    finally:
        serve.close()
    _stopped_cleanly(serve.daemon, err)
    assert "listening on" not in err, err  # nothing started only to be stopped
    assert not serve.db.exists()


def test_a_second_stop_while_serve_starts_exits_at_once(tmp_path):
    serve = _StartingServe(tmp_path)
    try:
        serve.daemon.send_signal(signal.SIGTERM)
        serve.daemon.send_signal(signal.SIGINT)
        # Its configuration never comes (a hung mount, say): the second stop is not held.
        serve.daemon.wait(timeout=10)
    finally:
        serve.close()
    err = serve.daemon.stderr.read()
    assert serve.daemon.returncode in (128 + signal.SIGTERM, 128 + signal.SIGINT), err
    assert "Traceback" not in err and "stopped" not in err, err


def test_sighup_while_serve_starts_without_a_terminal_is_told_and_serve_runs_on(tmp_path):
    # Under systemd (`systemctl kill -s HUP` just after a start) it killed the service, for good: death
    # by SIGHUP is a clean exit to Restart=on-failure.
    serve = _StartingServe(tmp_path)
    said: list[str] = []
    try:
        serve.daemon.send_signal(signal.SIGHUP)
        time.sleep(0.2)
        serve.give_config()
        _read_until(serve.daemon, "caught up", said)
        err = _stop(serve.daemon, said)
    finally:
        serve.close()
    told = [line for line in err.splitlines() if "SIGHUP" in line]
    assert len(told) == 1 and "keeps running" in told[0], err
    assert _count(serve.db, "SELECT count(*) FROM events") == 1


def test_sigterm_during_catch_up_exits_0_and_loses_nothing(tmp_path):
    logs = LogDir(tmp_path / "state")
    with open(logs.live, "wb") as f:
        for n in range(1, 200_001):
            f.write(llm_call(n))
    db = tmp_path / "ledger.db"
    daemon = _serve(db, str(logs.root))
    _wait_for(lambda: _count(db, "SELECT count(*) FROM events") > 0)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0
    first = _count(db, "SELECT count(*) FROM events")
    daemon = _serve(db, str(logs.root))
    _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 200_000, timeout=120)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0
    assert first <= 200_000
    assert _count(db, "SELECT count(*) FROM llm_calls") == 200_000


def test_a_stop_during_catch_up_neither_claims_it_caught_up_nor_interrupts_what_it_did_not_read(tmp_path):
    # It logged "caught up: ...; following live" and ran the orphan pass on logs read only in part: a
    # run whose end was not read yet became interrupted, and stayed so in usage and /metrics until
    # the next start read its end.
    logs = LogDir(tmp_path / "state")
    with open(logs.live, "wb") as f:
        f.write(event(1, "run.start", {"model": "m", "provider": "p"}, run="ends-late"))
        f.write(event(2, "run.start", {"model": "m", "provider": "p"}, run="never-ends"))
        for n in range(3, 120_003):
            f.write(llm_call(n))
        f.write(event(120_003, "run.end", {"model": "m", "provider": "p"}, run="ends-late"))
    db = tmp_path / "ledger.db"
    status = "SELECT group_concat(run_id || '=' || status, ' ') FROM (SELECT * FROM runs ORDER BY run_id) " \
             "WHERE run_id IN ('ends-late', 'never-ends')"
    daemon = _serve(db, "--no-demo", str(logs.root))
    _wait_for(lambda: _count(db, "SELECT count(*) FROM events") > 0)
    err = _terminated(daemon)
    assert daemon.returncode == 0, err
    read = _count(db, "SELECT count(*) FROM events")
    assert read < 120_003  # stopped part-way, or the test proves nothing
    assert "caught up" not in err and "following live" not in err and "interrupted after" not in err, err
    told = re.search(r"stopped during catch-up after (\d+) lines", err)
    assert told and int(told.group(1)) == read, err
    assert err.rstrip().endswith('"msg":"stopped"}'), err
    assert _count(db, status) == "ends-late=running never-ends=running"
    assert _count(db, "SELECT count(*) FROM runs WHERE status = 'interrupted'") == 0
    # The next start reads the rest, and then, caught up, interrupts what never ended. (Its log is read
    # whole at the end: communicate() reads past what iterating over stderr had buffered.)
    daemon = _serve(db, "--no-demo", str(logs.root))
    _wait_for(lambda: _count(db, status) == "ends-late=ok never-ends=interrupted", timeout=30)
    err = _terminated(daemon)
    assert daemon.returncode == 0, err
    assert "caught up: " in err and "interrupted after 600s without an end: 1 runs" in err, err


@pytest.mark.parametrize("state_dir, stray, why", [
    ("{tmp}/a-file", "a-file", "{tmp}/a-file is a file, not a directory"),
    ("{tmp}/a-file/below", "a-file", "{tmp}/a-file is a file, not a directory"),
    # The message named the hot store's directory, which is one, and the stray file was made 0700.
    ("{tmp}/state", "state/hot/sessions", "{tmp}/state/hot/sessions is a file, not a directory"),
    ("/proc/1/agentledger", "a-file", "No such file or directory"),
], ids=["state-dir", "below-a-file", "sessions", "proc"])
def test_a_state_dir_that_cannot_hold_the_hot_store_is_one_line_and_exit_2(tmp_path, state_dir, stray, why):
    (tmp_path / "logs").mkdir()
    (tmp_path / stray).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / stray).write_text("")
    (tmp_path / stray).chmod(0o640)
    state_dir = Path(state_dir.format(tmp=tmp_path))
    env = cli_env(tmp_path / "ledger.db") | {"AGENTLEDGER_STORE_STATE_DIR": str(state_dir)}
    daemon = _serve(tmp_path / "ledger.db", "--format", "oc-telemetry", str(tmp_path / "logs"), env=env)
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 2
    assert err.count("\n") == 1, err
    assert f"store.state_dir: cannot keep the hot store in {state_dir / 'hot'}: {why.format(tmp=tmp_path)};" in err
    assert "AGENTLEDGER_STORE_STATE_DIR" in err and "ReadWritePaths=" in err
    assert stat.S_IMODE((tmp_path / stray).stat().st_mode) == 0o640


@pytest.mark.parametrize("text, env, key, fix, origin", [
    ('[hot]\nstate_dir = "/proc/1/agentledger"\n', {}, "hot.state_dir", "point it at", "from {file}"),
    ('state_dir = "/proc/1/agentledger"\n', {}, "state_dir", "point it at", "from {file}"),
    ("", {"AGENTLEDGER_STATE_DIR": "/proc/1/agentledger"}, "state_dir", "point it at", "from $AGENTLEDGER_STATE_DIR"),
    ("", {"XDG_STATE_HOME": "/proc/1"}, "store.state_dir",
     "set it ([store] state_dir, or $AGENTLEDGER_STORE_STATE_DIR) to", "the default"),
])
def test_a_state_dir_that_cannot_hold_the_hot_store_is_named_as_it_was_given(tmp_path, text, env, key, fix, origin):
    # Named [store] state_dir whatever name gave it: a config following that fix beside its [hot] state_dir
    # was refused for giving one setting twice.
    config = tmp_path / "c.toml"
    config.write_text(text)
    (tmp_path / "logs").mkdir()
    env = cli_env(tmp_path / "ledger.db") | {"AGENTLEDGER_CONFIG": str(config)} | env
    daemon = _serve(tmp_path / "ledger.db", "--format", "oc-telemetry", str(tmp_path / "logs"), env=env)
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 2
    assert err.count("\n") == 1, err
    assert (f'"{key}: cannot keep the hot store in /proc/1/agentledger/hot: No such file or directory; {fix} a '
            f'directory agentledger can create and write (under systemd: one in ReadWritePaths=) '
            f'({origin.format(file=config)})"') in err


def _without_logs(tmp_path: Path) -> dict:
    """The environment of a user with no agent logs, all under tmp_path: serve runs the demo there."""
    env = cli_env(tmp_path / "unused.db")
    env["HOME"] = str(tmp_path / "home")
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    del env["AGENTLEDGER_DB"]
    return env


@pytest.mark.parametrize("demo", [["--demo"], []], ids=["asked", "no-logs"])
@pytest.mark.parametrize("file", ["", "hot"], ids=["its-directory", "its-hot-store"])
def test_a_demo_directory_that_cannot_be_made_is_one_line_and_exit_2(tmp_path, demo, file):
    # mkdir raised FileExistsError: a traceback and exit 1, which systemd restarts. The demo's hot store was
    # told to move by a setting the demo does not read.
    env = _without_logs(tmp_path)
    home = tmp_path / "state" / "agentledger" / "demo"
    (home / file).parent.mkdir(parents=True)
    (home / file).write_text("")
    err = _refused(_serve_without_db(*demo, env=env))
    hot = f"cannot keep the hot store in {home / file}: " if file else ""
    assert f"cannot run the demo in {home}: {hot}{home / file} is a file, not a directory" in err
    assert "$XDG_STATE_HOME" in err and "--source FORMAT=ROOT" in err
    assert not _demo_writers(tmp_path)


def _refused(daemon: subprocess.Popen) -> str:
    """What a serve refused in one line, exit 2, said."""
    try:
        _, err = daemon.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        err = _stop(daemon, [])  # it ran on
    assert daemon.returncode == 2, err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("given", [["{root}"], ["--source", "oc-telemetry={root}"]], ids=["root", "source"])
def test_demo_beside_roots_is_refused_in_one_line_and_exit_2(tmp_path, given):
    # The demo ran alone, its log saying no agent logs were found: the roots named were never read.
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    env = _without_logs(tmp_path)
    err = _refused(_serve(tmp_path / "ledger.db", "--demo", *(arg.format(root=logs.root) for arg in given), env=env))
    assert "--demo runs on the demo directory alone, not on ROOT or --source: drop them to run the demo, or drop " \
           "--demo to read them" in err
    assert not (tmp_path / "state" / "agentledger" / "demo").exists()
    assert not _demo_writers(tmp_path)


def test_demo_asked_for_beside_configured_sources_does_not_say_none_were_found(tmp_path):
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    config = tmp_path / "c.toml"
    config.write_text(f'[[sources]]\nformat = "oc-telemetry"\nroot = "{logs.root}"\n')
    daemon = _serve(tmp_path / "ledger.db", "--demo", env=_without_logs(tmp_path) | {"AGENTLEDGER_CONFIG": str(config)})
    said: list[str] = []
    _read_until(daemon, "caught up", said)
    err = _stop(daemon, said)
    assert f"--demo: running the demo in {tmp_path / 'state' / 'agentledger' / 'demo'}" in err
    assert "no agent logs found" not in err


def _demo_writers(under: Path) -> list[int]:
    """The pids of running demo writers whose directory is under ``under``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or one that just ended
            continue
        if b"agentledger.demo" in argv and any(arg.startswith(bytes(under)) for arg in argv):
            pids.append(int(proc.name))
    return pids


def test_serve_without_sources_runs_the_demo(tmp_path):
    env = _without_logs(tmp_path)
    db = tmp_path / "state" / "agentledger" / "demo" / "ledger.db"
    demo = tmp_path / "state" / "agentledger" / "demo" / "logs" / "agents" / "main" / "telemetry"
    daemon = _serve_without_db("--rescan", "0.2", env=env)
    try:
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") > 0)
        history = _count(db, "SELECT count(*) FROM events")
        # The demo writer keeps appending: the ledger keeps growing.
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") > history, timeout=20)
        # Its history starts two days back: just after midnight UTC, the first day it rotates away is
        # nearly a whole day of events in.
        _wait_for(lambda: any(p.name != "events.jsonl" for p in demo.iterdir()), timeout=30)
    finally:
        err = _terminated(daemon)
    assert daemon.returncode == 0, err
    assert "demo" in err
    assert (demo / "events.jsonl").exists()
    time.sleep(0.5)
    size = (demo / "events.jsonl").stat().st_size
    time.sleep(1.0)
    assert (demo / "events.jsonl").stat().st_size == size, "the demo writer stops with the daemon"
    assert os.path.exists(db)


def test_a_daemon_killed_outright_leaves_no_demo_writer_running(tmp_path):
    env = _without_logs(tmp_path)
    db = tmp_path / "state" / "agentledger" / "demo" / "ledger.db"
    daemon = _serve_without_db(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") > 0)
        assert _demo_writers(tmp_path)
    finally:
        daemon.kill()
        daemon.wait(timeout=30)
    try:
        _wait_for(lambda: not _demo_writers(tmp_path), timeout=10)
    finally:
        for pid in _demo_writers(tmp_path):
            os.kill(pid, signal.SIGTERM)


def _demo_query(log: str) -> list[str]:
    """The command serve's log gives to query the demo's ledger, as this interpreter runs it."""
    given = re.search(r"query it with `agentledger ([^`]*)`", log)
    assert given, log
    return [sys.executable, "-m", "agentledger", *shlex.split(given.group(1))]


def _usage(command: list[str], env: dict) -> dict:
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert done.returncode in (0, 2), done.stderr  # 2: no ledger there yet
    return json.loads(done.stdout) if done.returncode == 0 else {"llm_calls": 0}


def test_the_demo_fills_a_ledger_of_its_own_which_a_later_real_serve_never_counts(tmp_path):
    # The demo's invented spend went into the default ledger, which a real serve went on filling: the
    # user's usage, costs, /metrics and day budgets summed days of it with their own.
    env = _without_logs(tmp_path)
    default = tmp_path / "state" / "agentledger" / "ledger.db"
    demo = _serve_without_db(env=env)
    said: list[str] = []
    try:
        _read_until(demo, "caught up", said)
        query = _demo_query("".join(said))
        # Run as printed where the user's environment names the default ledger: the command's --db wins.
        _wait_for(lambda: _usage(query, env | {"AGENTLEDGER_DB": str(default)})["llm_calls"] > 0, timeout=60)
    finally:
        _stop(demo, said)
    assert not default.exists()
    # The query a user runs without --db: not only "run serve", which is what they just did.
    done = subprocess.run([sys.executable, "-m", "agentledger", "usage"], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=60)
    assert done.returncode == 2
    assert f"the demo's invented events are in a ledger of their own: `agentledger {shlex.join(query[3:])}`" \
        in done.stderr

    logs = LogDir(tmp_path / "home" / ".openclaw")
    logs.append(b"".join(llm_call(n) for n in range(1, 6)))
    real = _serve_without_db(env=env)
    said = []
    try:
        _read_until(real, "caught up", said)
    finally:
        err = _stop(real, said)
    assert "running the demo" not in err
    usage = _usage([sys.executable, "-m", "agentledger", "usage"], env)
    assert (usage["llm_calls"], usage["cost_usd"]) == (5, pytest.approx(5e-6)), usage


@pytest.mark.parametrize("named", ["--db", "$AGENTLEDGER_DB"])
def test_the_demo_asked_for_fills_the_ledger_db_names_and_never_the_environments(tmp_path, named):
    env = _without_logs(tmp_path)
    given, own = tmp_path / "named.db", tmp_path / "state" / "agentledger" / "demo" / "ledger.db"
    if named == "--db":
        filled, untouched = given, own
        daemon = _serve(given, "--demo", env=env)
    else:  # the ledger real logs fill, named for every command
        filled, untouched = own, given
        daemon = _serve_without_db("--demo", env=env | {"AGENTLEDGER_DB": str(given)})
    said: list[str] = []
    try:
        _read_until(daemon, "caught up", said)
        _wait_for(lambda: _count(filled, "SELECT count(*) FROM llm_calls") > 0, timeout=60)
    finally:
        err = _stop(daemon, said)
    assert _demo_query(err)[-3:] == ["--db", str(filled), "usage"]
    assert not untouched.exists()


def test_a_demo_not_asked_for_is_refused_the_ledger_db_names_in_one_line_and_exit_2(tmp_path):
    db = tmp_path / "ledger.db"
    err = _refused(_serve(db, env=_without_logs(tmp_path)))
    assert (f"no agent logs found, and the demo writes its invented events into {db} only when asked: pass --demo "
            "to run it there, drop --db to run it on a ledger of its own, or pass ROOT or --source FORMAT=ROOT to "
            "read agent logs") in err
    assert not db.exists() and not (tmp_path / "state" / "agentledger" / "demo").exists()
    assert not _demo_writers(tmp_path)


def _read_until(daemon: subprocess.Popen, text: str, said: list[str]) -> None:
    """Reads serve's log into ``said`` up to the first line holding ``text``."""
    for line in daemon.stderr:
        said.append(line)
        if text in line:
            return
    raise AssertionError("".join(said))


def _serve_awaiting(tmp_path: Path, state: Path) -> tuple[Path, subprocess.Popen]:
    db = tmp_path / "ledger.db"
    env = _without_logs(tmp_path) | {"OPENCLAW_STATE_DIR": str(state)}
    # A long rescan interval: once the directory appears, only inotify can make lines show up quickly.
    return db, _serve(db, "--no-demo", "--rescan", "60", env=env)


def _rest_of_log(daemon: subprocess.Popen) -> str:
    """What serve writes to stderr from here until it exits, read through the file object ``_read_until``
    iterates: communicate() reads the pipe itself, past the lines that iteration had buffered."""
    read: dict[str, str] = {}
    readers = [threading.Thread(target=lambda name=name: read.__setitem__(name, getattr(daemon, name).read()),
                                daemon=True) for name in ("stdout", "stderr")]
    for reader in readers:
        reader.start()
    daemon.wait(timeout=30)
    for reader in readers:
        reader.join(timeout=30)
    return read.get("stderr", "")


def _stop(daemon: subprocess.Popen, said: list[str]) -> str:
    daemon.send_signal(signal.SIGTERM)
    rest = _rest_of_log(daemon)
    assert daemon.returncode == 0, "".join(said) + rest
    return "".join(said) + rest


def test_a_demo_writer_whose_daemon_is_already_gone_stops(tmp_path):
    # A daemon that died before its writer read its own parent left it nothing to tell by.
    demo = subprocess.run([sys.executable, "-m", "agentledger.demo", "--parent", "1", str(tmp_path / "demo")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert demo.returncode == 0, demo.stderr
    assert (tmp_path / "demo" / "agents" / "main" / "telemetry" / "events.jsonl").stat().st_size > 0


# The demo writer, with its history cut short by a signal sent to itself after this many events.
_CUT_SHORT = """
import os, signal, sys
from agentledger import demo
write, written = demo.Writer.write, [0]
def cut_short(self, event):
    written[0] += 1
    if written[0] == 5000:
        os.kill(os.getpid(), int(sys.argv[1]))
    write(self, event)
demo.Writer.write = cut_short
demo.main(sys.argv[2:])
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 0), (signal.SIGKILL, -signal.SIGKILL)], ids=["term", "kill"])
def test_a_demo_history_cut_short_is_written_whole_by_the_next_start(tmp_path, sig, code):
    # The next start took the partial history for done: a day and a half of it never came, for good.
    cut = subprocess.run([sys.executable, "-c", _CUT_SHORT, str(int(sig)), "--parent", "1", str(tmp_path / "demo")],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert cut.returncode == code, cut.stderr  # SIGTERM killed it outright
    again = subprocess.run([sys.executable, "-m", "agentledger.demo", "--parent", "1", str(tmp_path / "demo")],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    now = time.time() * 1000
    events = [json.loads(line) for path in (tmp_path / "demo").rglob("*.jsonl")
              for line in path.read_bytes().splitlines()]
    ts = sorted(e["ts"] for e in events)
    assert now - ts[0] > 47 * 3_600_000 and now - ts[-1] < 600_000, "two days of history, up to a minute ago"
    assert max(b - a for a, b in zip(ts, ts[1:])) < 600_000, "a hole in the history"
    assert len({e["id"] for e in events}) == len(events), "a line written twice"


def test_serve_waits_for_an_openclaw_state_dir_that_does_not_exist_yet(tmp_path):
    state = tmp_path / "openclaw"
    db, daemon = _serve_awaiting(tmp_path, state)
    said: list[str] = []
    try:
        _read_until(daemon, "caught up", said)
        logs = LogDir(state)
        logs.append(b"".join(llm_call(n) for n in range(1, 6)))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 5, timeout=10)
        logs.append(b"".join(llm_call(n) for n in range(6, 9)))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 8, timeout=10)
    finally:
        err = _stop(daemon, said)
    assert f"{state} does not exist yet: waiting for it" in err
    assert f"{state} holds OpenClaw telemetry: reading it as oc-telemetry" in err


def test_serve_waits_for_an_openclaw_state_dir_out_of_reach_and_says_why(tmp_path, unprivileged):
    # A parent it cannot search made Path.is_dir() raise: serve exited 1, and systemd restarted it every 5 s.
    closed = tmp_path / "alice"
    state = closed / ".openclaw"
    logs = LogDir(state)
    logs.append(llm_call(1))
    db = tmp_path / "ledger.db"
    closed.chmod(0)
    env = _without_logs(tmp_path) | {"OPENCLAW_STATE_DIR": str(state)}
    daemon = _serve(db, "--no-demo", "--rescan", "0.2", env=env, prefix=unprivileged)
    said: list[str] = []
    try:
        _read_until(daemon, "caught up", said)
        closed.chmod(0o755)
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 1, timeout=10)
    finally:
        closed.chmod(0o755)
        err = _stop(daemon, said)
    assert f"{state} cannot be read (Permission denied): waiting for it, its logs are read once it can be" in err
    assert "does not exist" not in err


def test_serve_reads_a_root_argument_it_cannot_read_once_it_can(tmp_path, unprivileged):
    # Refused with click's "Directory ... is not readable." and exit 2, where the same root configured was read.
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    db = tmp_path / "ledger.db"
    logs.root.chmod(0)
    daemon = _serve(db, "--rescan", "0.2", str(logs.root), env=_without_logs(tmp_path), prefix=unprivileged)
    said: list[str] = []
    try:
        _read_until(daemon, f"cannot list directory {logs.root}: Permission denied", said)
        logs.root.chmod(0o755)
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 1, timeout=10)
    finally:
        logs.root.chmod(0o755)
        _stop(daemon, said)


@pytest.mark.parametrize("given", ["config", "argument", "source"])
def test_serve_waits_for_a_root_that_does_not_exist_yet(tmp_path, given):
    # `ingest` refuses such a root; a daemon started before the gateway has written must not, however named.
    state = tmp_path / "gateway" / "state"
    config = tmp_path / "c.toml"
    config.write_text(f'[[sources]]\nformat = "oc-telemetry"\nroot = "{state}"\n' if given == "config" else "")
    db = tmp_path / "ledger.db"
    env = _without_logs(tmp_path) | {"AGENTLEDGER_CONFIG": str(config)}
    roots = {"config": [], "argument": [str(state)], "source": ["--source", f"oc-telemetry={state}"]}[given]
    daemon = _serve(db, "--no-demo", "--rescan", "60", *roots, env=env)
    said: list[str] = []
    try:
        _read_until(daemon, "caught up", said)
        LogDir(state).append(b"".join(llm_call(n) for n in range(1, 4)))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 3, timeout=10)
    finally:
        err = _stop(daemon, said)
    assert f"{state} does not exist yet: waiting for it, its logs are read once it appears" in err


def test_serve_waits_for_a_claude_config_dir_that_does_not_exist_yet(tmp_path):
    # serve passed it by without a word, as if Claude Code's variable were unset, and never read it once
    # Claude Code made it; with no other logs it ran the demo instead.
    claude = tmp_path / "claude"
    db = tmp_path / "ledger.db"
    env = _without_logs(tmp_path) | {"CLAUDE_CONFIG_DIR": str(claude)}
    daemon = _serve(db, "--no-demo", "--rescan", "60", env=env)
    said: list[str] = []
    try:
        _read_until(daemon, "caught up", said)
        (_project(tmp_path) / f"{SESSION}.jsonl").write_bytes(
            cc_prompt("u1", "hello", 1) + cc_assistant("a1", "msg_1", {"type": "text", "text": "hi"}, output=5,
                                                       second=2, stop="end_turn"))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 1, timeout=10)
    finally:
        err = _stop(daemon, said)
    assert f"{claude} does not exist yet: waiting for it, its logs are read once it appears" in err


def test_a_state_dir_that_appears_with_transcripts_is_read_as_transcripts(tmp_path):
    # Every gateway writes transcripts; telemetry only with its extension installed.
    state = tmp_path / "gateway" / "state"
    db, daemon = _serve_awaiting(tmp_path, state)
    said: list[str] = []
    sid = "0b7bec4a-3902-43fd-bcbe-a4d347d8d807"
    try:
        _read_until(daemon, "caught up", said)
        live = _sessions_dir(tmp_path / "gateway", "agent:main:main", sid) / f"{sid}.jsonl"
        live.write_bytes(oc_header(sid) + oc_user("u1", 1) + oc_assistant("a1", 2))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 1, timeout=10)
        with live.open("ab") as f:
            f.write(oc_user("u2", 3) + oc_assistant("a2", 4))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 2, timeout=10)
    finally:
        err = _stop(daemon, said)
    assert _count(db, "SELECT sum(cost_pico) FROM llm_calls") == 2 * 10**10
    assert f"{state} holds OpenClaw transcripts: reading it as oc-transcript" in err
    assert "oc-telemetry" not in err and "appeared: reading it" not in err


@pytest.mark.parametrize("made", ["before serve", "after serve"])
def test_a_state_dir_without_telemetry_or_sessions_yet_is_read_once_telemetry_comes(tmp_path, made):
    state = tmp_path / "openclaw"
    agent = state / "agents" / "main" / "agent"  # made by the gateway before any session
    if made == "before serve":
        agent.mkdir(parents=True)
    db, daemon = _serve_awaiting(tmp_path, state)
    said: list[str] = []
    try:
        _read_until(daemon, "caught up", said)
        if made == "after serve":
            agent.mkdir(parents=True)
            _read_until(daemon, f"{state} appeared", said)
        logs = LogDir(state)
        logs.append(b"".join(llm_call(n) for n in range(1, 6)))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM llm_calls") == 5, timeout=10)
    finally:
        err = _stop(daemon, said)
    waiting = {"before serve": f"{state} holds no agent's telemetry or sessions yet: its logs are read once it does",
               "after serve": f"{state} appeared, holds no agent's telemetry or sessions yet"}
    assert waiting[made] in err
    assert f"{state} holds OpenClaw telemetry: reading it as oc-telemetry" in err
    assert "oc-transcript" not in err and "appeared: reading it" not in err


def _newer_ledger(db: Path) -> None:
    open_writer(db).close()
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA user_version = 9999")
    conn.close()


@pytest.mark.parametrize("make_ledger", [lambda db: db.write_text("not a database"), _newer_ledger],
                         ids=["not-a-ledger", "newer-schema"])
def test_a_start_that_fails_on_the_ledger_leaves_no_demo_writer_running(tmp_path, make_ledger):
    db = tmp_path / "ledger.db"
    make_ledger(db)
    daemon = _serve(db, "--demo", env=_without_logs(tmp_path))
    daemon.wait(timeout=60)
    leftover = _demo_writers(tmp_path)
    for pid in leftover:  # before reading stderr: a demo writer left running holds it open
        os.kill(pid, signal.SIGTERM)
    _, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 2, err
    assert not leftover, "the demo writer outlived the daemon"
    assert err.count("\n") == 1 and err.startswith("agentledger: "), err


def test_live_truncation_and_copytruncate_while_serving(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(b"".join(llm_call(n) for n in range(1, 21)))
    db = tmp_path / "ledger.db"
    daemon = _serve(db, "--rescan", "60", str(logs.root))
    try:
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 20)
        logs.truncate()
        logs.append(b"".join(llm_call(n) for n in range(100, 105)))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 25, timeout=10)
        logs.append(b"".join(llm_call(n) for n in range(105, 110)))
        logs.copytruncate()
        logs.append(b"".join(llm_call(n) for n in range(200, 203)))
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 33, timeout=10)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)
    assert daemon.returncode == 0
    # Every line indexed once: nothing lost, nothing counted twice.
    assert _count(db, "SELECT count(*) FROM llm_calls") == 33
    assert _count(db, "SELECT sum(cost_pico) FROM llm_calls") == 33 * 1_000_000
    # Each truncation of the live file is told once, on the file it cut. The first, in place, always. The
    # copytruncate is a rotation when the daemon looks after the truncate; a pass that lands between the
    # copy and the truncate (a loaded machine) follows the copy as a file of its own and then sees the
    # original truncated in place, a second truncation as real as the first.
    conn = apsw.Connection(f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        told = conn.execute("SELECT file_id, event, bytes FROM file_events ORDER BY id").fetchall()
    finally:
        conn.close()
    assert len(told) == 2 and told[0] == (told[0][0], "truncate", None), told
    assert told[1][1] in ("rotate", "truncate") and told[1][0] != told[0][0], told


def test_torn_line_then_sigkill_then_completed(tmp_path):
    logs = LogDir(tmp_path / "state")
    torn = llm_call(3)
    logs.append(llm_call(1) + llm_call(2) + torn[:40])
    db = tmp_path / "ledger.db"
    daemon = _serve(db, "--rescan", "0.1", str(logs.root))
    _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 2)
    daemon.kill()
    daemon.wait()
    logs.append(torn[40:])
    daemon = _serve(db, "--rescan", "0.1", str(logs.root))
    try:
        _wait_for(lambda: _count(db, "SELECT count(*) FROM events") == 3)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)
    assert _count(db, "SELECT count(*) FROM rejects") == 0
    assert _count(db, "SELECT count(*) FROM llm_calls") == 3


def test_serve_logs_its_moments_as_json_lines_when_not_on_a_terminal(tmp_path, oc_corpus):
    import json as _json

    db = tmp_path / "ledger.db"
    daemon = _serve(db, "--rescan", "60", str(oc_corpus))
    lines = []
    for line in daemon.stderr:
        lines.append(_json.loads(line))
        if "caught up" in lines[-1]["msg"]:
            break
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=30)
    rest = [_json.loads(line) for line in daemon.stderr.read().splitlines()]
    messages = [(r["level"], r["msg"].split(":")[0].split(" ")[0]) for r in lines + rest]
    assert ("info", "listening") in messages and ("info", "caught") in messages and ("info", "stopped") in messages
    assert all(set(r) >= {"ts", "level", "logger", "msg"} for r in lines + rest)
