"""Gates end to end: a real ``serve`` subprocess, real HTTP, the ``gate`` command as Claude Code runs it."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO, cli_env
from logwriter import LogDir, event
from served import Served, assert_hot_views_equal_ledger, serve
from serving import wait_for, write_config

from agentledger.hot.store import TMP_PREFIX

PRE_TOOL_USE = {"session_id": "0b5c3f7e-cc11-4d7e-9c5e-0d2b7f0f9a11", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
                "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                "tool_input": {"command": "ls"}, "tool_use_id": "toolu_01"}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def llm(n: int, cost: float, session: str = "s1") -> bytes:
    return event(n, "llm.call", {"callIndex": n, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                 "delta": {"input": 5, "output": 5, "cacheRead": 0, "cacheWrite": 0, "total": 10},
                                 "costUsd": cost}, session=session, ts=_now_ms())


GATES = """
[[gates]]
name = "session-cost"
scope = "session"
metric = "cost_usd"
limit = 2.0

[[gates]]
name = "fleet-day"
scope = "global-day"
metric = "cost_usd"
limit = 10.0
tools = ["Bash"]
"""


def _gate_cmd(*args: str, stdin: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentledger", "gate", *args], input=stdin, capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=30)


class Daemon:
    """A served log directory with gates; ``start`` again after ``stop`` is a restart."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path / "logs"
        self.logs = LogDir(self.root)
        self.logs.append(llm(1, 0.5))
        self.config = write_config(tmp_path, self.root, extra=GATES, flush_interval_s=0)
        self.tmp_path = tmp_path
        self.start()

    def start(self) -> None:
        self.served = serve(self.config)
        self.url, self.proc = self.served.url, self.served.proc

    def get(self, path: str) -> tuple[int, object]:
        return self.served.get(path)

    def post(self, path: str, body: dict) -> tuple[int, object]:
        return self.served.post(path, body)

    def gate(self, key: str = "agent:main:s1", tool: str = "exec") -> dict:
        return self.get(f"/v1/gate?session_key={key}&tool={tool}")[1]

    @staticmethod
    def _wait(predicate) -> None:
        wait_for(predicate)

    def stop(self, sig=signal.SIGTERM) -> int:
        return self.served.stop(sig)


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    if d.proc.poll() is None:
        d.stop()


def test_gates_answer_live_over_http_and_from_the_command(daemon):
    assert daemon.gate()["decision"] == "allow"
    daemon.logs.append(llm(2, 1.0))
    daemon._wait(lambda: daemon.get("/v1/sessions/agent:main:s1/hot")[1].get("cost_usd") == 1.5)
    assert daemon.gate()["decision"] == "allow"
    daemon.logs.append(llm(3, 0.75))
    daemon._wait(lambda: daemon.gate()["decision"] == "block")
    decision = daemon.gate()
    assert decision["reason"] == "session agent:main:s1 spent $2.25 of its $2.00 budget (gate session-cost)"
    assert decision["block"] is True and decision["blockReason"] == decision["reason"]
    # A misspelt or missing parameter is an error, not an allow; a tool whose name is not known is measured.
    for query in ("", "?session_key=agent:main:s1", "?session_key=agent:main:s1&tool_name=exec", "?tool=exec"):
        status, body = daemon.get(f"/v1/gate{query}")
        assert status == 400 and "session_key and tool" in body["error"], query
    assert daemon.get("/v1/gate?session_key=agent:main:s1&tool=")[1]["decision"] == "block"

    hot = daemon.get("/v1/sessions/agent:main:s1/hot")[1]
    assert (hot["llm_calls"], hot["total_tokens"], hot["cost_usd"]) == (3, 30, 2.25)
    assert daemon.get("/v1/sessions/agent:main:nobody/hot")[0] == 404

    env = cli_env(daemon.tmp_path / "ledger.db")
    ran = _gate_cmd("--session", "agent:main:s1", "--tool", "exec", "--url", daemon.url, env=env)
    assert ran.returncode == 1
    assert json.loads(ran.stdout)["gate"] == "session-cost"

    live = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(daemon.config), "sessions", "--live",
                           "--json", "--url", daemon.url], capture_output=True, text=True, cwd=REPO, env=env)
    assert live.returncode == 0, live.stderr
    assert [(s["session_key"], s["cost_usd"]) for s in json.loads(live.stdout)] == [("agent:main:s1", 2.25)]
    # As CSV, an answer with no session has the header of one with a session.
    headers = []
    for agent in ("main", "nobody"):
        out = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(daemon.config), "sessions", "--live",
                              "--csv", "--agent", agent, "--url", daemon.url], capture_output=True, text=True, cwd=REPO,
                             env=env)
        assert out.returncode == 0, out.stderr
        headers.append(out.stdout.splitlines())
    assert len(headers[0]) == 2 and headers[1] == headers[0][:1] and "family_cost_usd" in headers[0][0]


def test_the_gate_histogram_is_served_without_a_family_of_its_own_for_its_start(daemon):
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    daemon.gate()
    with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as r:
        families = {f.name: f.type for f in text_string_to_metric_families(r.read().decode())}
    assert families["agentledger_gate_check_duration_seconds"] == "histogram"
    assert [name for name in families if name.endswith("_created")] == []


def test_unpriced_calls_show_in_hot_views_and_gate_answers(daemon):
    daemon.logs.append(event(2, "llm.call", {"callIndex": 2, "provider": "acme", "model": "acme-unknown-9",
                                             "delta": {"input": 5, "output": 5, "cacheRead": 0, "cacheWrite": 0,
                                                       "total": 10}}, ts=_now_ms()))
    daemon._wait(lambda: daemon.get("/v1/sessions/agent:main:s1/hot")[1].get("unpriced_calls") == 1)
    hot = daemon.get("/v1/sessions/agent:main:s1/hot")[1]
    assert (hot["cost_usd"], hot["llm_calls"], hot["family"]["unpriced_calls"]) == (0.5, 2, 1)
    assert [(v["session_key"], v["unpriced_calls"]) for v in daemon.get("/v1/hot")[1]] == [("agent:main:s1", 1)]
    assert daemon.gate()["reason"] == ("within every gate, not counting 1 unpriced call of session agent:main:s1 "
                                       "(gate session-cost)")


def test_claude_code_hooks_over_http_and_through_the_command(daemon):
    env = cli_env(daemon.tmp_path / "ledger.db")
    assert daemon.post("/v1/hooks/claude-code", PRE_TOOL_USE) == (200, {})
    assert daemon.post("/v1/hooks/claude-code", {**PRE_TOOL_USE, "hook_event_name": "SessionStart"}) == (200, {})
    ran = _gate_cmd("--hook", "claude-code", "--url", daemon.url, stdin=json.dumps(PRE_TOOL_USE), env=env)
    assert (ran.returncode, ran.stdout) == (0, "")

    daemon.logs.append(llm(2, 9.75, session="other"))  # the fleet's spend today passes $10
    deny = {"hookSpecificOutput": {
        "hookEventName": "PreToolUse", "permissionDecision": "deny",
        "permissionDecisionReason": "all agents together spent $10.25 of its $10.00 daily budget today (UTC) "
                                    "(gate fleet-day)"}}
    # Each a new call: one sent again is answered as it was.
    calls = (f"toolu_{n:02d}" for n in range(2, 1000))
    daemon._wait(lambda: daemon.post("/v1/hooks/claude-code", {**PRE_TOOL_USE, "tool_use_id": next(calls)})[1] == deny)
    ran = _gate_cmd("--hook", "claude-code", "--url", daemon.url,
                    stdin=json.dumps({**PRE_TOOL_USE, "tool_use_id": next(calls)}), env=env)
    assert ran.returncode == 0
    assert json.loads(ran.stdout) == deny
    assert daemon.post("/v1/hooks/claude-code", PRE_TOOL_USE) == (200, {})  # the first call, sent again
    # Read-only tools are not in the gate's list.
    assert daemon.post("/v1/hooks/claude-code", {**PRE_TOOL_USE, "tool_name": "Read",
                                                 "tool_use_id": next(calls)}) == (200, {})
    assert daemon.stop() == 0

    # The decisions were kept.
    import apsw

    conn = apsw.Connection(str(daemon.tmp_path / "ledger.db"))
    rows = conn.execute("SELECT DISTINCT gate, decision, asked_via FROM gate_decisions").fetchall()
    assert rows == [("fleet-day", "block", "claude-code")]
    conn.close()


def test_a_hook_event_holding_half_a_surrogate_pair_is_recorded_and_its_call_let_through(daemon):
    # JS writes half a pair it cut from a string as an escape of its own (json.dumps writes it so too): the
    # daemon answered 400, the event was lost, and the command, failing closed, denied the call.
    env = cli_env(daemon.tmp_path / "ledger.db")
    cut = {**PRE_TOOL_USE, "tool_input": {"command": "echo \ud83c"}, "tool_use_id": "toolu_cut"}
    assert daemon.post("/v1/hooks/claude-code", cut) == (200, {})
    in_key = {**PRE_TOOL_USE, "tool_name": "Bash\udf89", "tool_input": {"\ud83c": 1}, "tool_use_id": "toolu_key"}
    ran = _gate_cmd("--hook", "claude-code", "--url", daemon.url, "--fail", "closed", stdin=json.dumps(in_key),
                    env=env)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")

    def tools() -> dict:
        out = subprocess.run([sys.executable, "-m", "agentledger", "tools", "--json"], capture_output=True,
                             env=env, timeout=30)
        return {t["tool"]: t["calls"] for t in json.loads(out.stdout)}

    daemon._wait(lambda: tools() == {"Bash": 1, "Bash\ufffd": 1})
    # Beside a real fault, the half changes nothing: the body is refused for the fault.
    faulty = json.dumps(cut).encode()[:-1] + b",}"
    request = urllib.request.Request(daemon.url + "/v1/hooks/claude-code", data=faulty, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["error"].startswith("the body is not JSON: trailing comma")


def _served_with(tmp_path: Path, gates: str) -> Served:
    root = tmp_path / "logs"
    LogDir(root).append(llm(1, 0.5))
    return serve(write_config(tmp_path, root, extra=gates, flush_interval_s=0))


def _tool_gate(name: str, scope: str, limit: int) -> str:
    return f'[[gates]]\nname = "{name}"\nscope = "{scope}"\nmetric = "tool_calls"\nlimit = {limit}\n'


def _pre_tool_uses(served: Served, calls: list[tuple[str, str]]) -> list[bool]:
    """(session id, tool_use_id) asked all at once, as Claude Code asks about a turn's parallel tool calls;
    whether each was allowed."""
    barrier = threading.Barrier(len(calls))

    def ask(call: tuple[str, str]) -> bool:
        barrier.wait()
        answer = served.post("/v1/hooks/claude-code", {**PRE_TOOL_USE, "session_id": call[0], "tool_use_id": call[1]})
        return answer == (200, {})

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(ask, calls))


def test_a_tool_call_gate_counts_parallel_claude_code_calls_before_the_ledger_has_them(tmp_path):
    served = _served_with(tmp_path, _tool_gate("session-tools", "session", 4))
    try:
        sid = PRE_TOOL_USE["session_id"]
        assert _pre_tool_uses(served, [(sid, "toolu_first")]) == [True]
        wait_for(lambda: served.get(f"/v1/sessions/{sid}/hot")[1].get("tool_calls") == 1)
        for round in range(3):  # the answers must not depend on when the writer commits
            allowed = _pre_tool_uses(served, [(sid, f"toolu_{round}_{i}") for i in range(8)])
            assert allowed.count(True) == (3 if round == 0 else 0), round
        # Every call was recorded, the denied ones as failed: the ledger agrees with what was counted.
        wait_for(lambda: served.get(f"/v1/sessions/{sid}/hot")[1].get("tool_calls") == 25)
        assert served.get(f"/v1/sessions/{sid}/hot")[1]["tool_errors"] == 21
    finally:
        served.stop()


def test_an_agent_day_gate_applies_to_sessions_the_ledger_does_not_know_yet(tmp_path):
    served = _served_with(tmp_path, _tool_gate("claude-day", "agent-day", 3))
    try:
        allowed = _pre_tool_uses(served, [(f"0b5c3f7e-cc11-4d7e-9c5e-0d2b7f0f9a{i:02d}", f"toolu_{i}")
                                          for i in range(6)])
        assert allowed.count(True) == 3
        status, answer = served.post("/v1/hooks/claude-code", {**PRE_TOOL_USE, "session_id": "new-session",
                                                               "tool_use_id": "toolu_late"})
        assert "agent claude-code used 6 tool calls of its 3 limit today" in \
            answer["hookSpecificOutput"]["permissionDecisionReason"]
        # An OpenClaw session asked about before the ledger holds it is its key's agent's.
        assert served.get("/v1/gate?session_key=agent:claude-code:fresh&tool=exec")[1]["decision"] == "block"
        assert served.get("/v1/gate?session_key=agent:main:fresh&tool=exec")[1]["decision"] == "allow"
    finally:
        served.stop()


def test_a_sessions_gate_value_never_goes_back_with_more_busy_sessions_than_memory_holds(tmp_path):
    """With one view in memory for three sessions spending at once, a question could put a view read before
    a commit in memory as the commit's own: the value a gate measured went back a call now and then."""
    root = tmp_path / "logs"
    logs = LogDir(root)
    gates = '[[gates]]\nname = "tok"\nscope = "session"\nmetric = "tokens"\nlimit = 1\naction = "warn"\n'
    served = serve(write_config(tmp_path, root, extra=gates, rescan_s=0.05, max_entries=1))
    spent = dict.fromkeys("abc", 0)
    done = threading.Event()

    def spend() -> None:
        n = 0
        while not done.is_set():
            n += 1
            session = "abc"[n % 3]
            logs.append(llm(n, 0.001, session=session))
            spent[session] += 10
            time.sleep(0.002)

    def watch(session: str) -> list[int]:
        seen = []
        while not done.is_set():
            seen.append(served.get(f"/v1/gate?session_key=agent:main:{session}&tool=exec")[1]["value"] or 0)
        return seen

    try:
        with ThreadPoolExecutor(5) as pool:
            writer = pool.submit(spend)
            watched = [pool.submit(watch, s) for s in "abcab"]
            time.sleep(3)
            done.set()
            writer.result()
            back = [(before, after) for w in watched for before, after in itertools.pairwise(w.result())
                    if after < before]
        assert back == []
        for session, tokens in spent.items():
            wait_for(lambda: served.get(f"/v1/gate?session_key=agent:main:{session}&tool=exec")[1]["value"] == tokens)
    finally:
        served.stop()


def test_the_gate_command_gives_a_daemon_that_answers_a_byte_at_a_time_only_its_timeout(tmp_path):
    # Each read waited up to --timeout: a trickling answer held the agent ~40 s, past Claude Code's own hook
    # timeout, which lets the call through whatever --fail says.
    server = socket.create_server(("127.0.0.1", 0))
    answer = b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}'

    def trickle() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            for byte in answer:
                try:
                    conn.send(bytes([byte]))
                except OSError:
                    return  # the client gave up
                time.sleep(0.5)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    started = time.monotonic()
    closed = _gate_cmd("--hook", "claude-code", "--url", url, "--fail", "closed", "--timeout", "1.5",
                       stdin=json.dumps(PRE_TOOL_USE))
    took = time.monotonic() - started
    server.close()
    assert closed.returncode == 0
    assert json.loads(closed.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "gave no whole answer within 1.5 s" in closed.stderr
    assert took < 1.5 * len(answer) * 0.5 / 4, took  # far from the answer's ~22 s


@pytest.mark.parametrize("name", ["PostToolUse", "Stop", "SessionStart"])
def test_a_gate_failing_closed_denies_no_event_but_a_tool_call_about_to_run(name):
    # Every event got a PreToolUse's deny, where the daemon answers any other with nothing.
    payload = PRE_TOOL_USE | {"hook_event_name": name}
    closed = _gate_cmd("--hook", "claude-code", "--url", "http://127.0.0.1:9", "--fail", "closed",
                       stdin=json.dumps(payload))
    assert (closed.returncode, closed.stdout) == (0, "")
    assert "unreachable" in closed.stderr


def test_the_gate_command_fails_open_or_closed_when_no_daemon_answers(tmp_path):
    url = "http://127.0.0.1:9"  # discard port: nothing listens
    env = dict(os.environ)
    opened = _gate_cmd("--hook", "claude-code", "--url", url, stdin=json.dumps(PRE_TOOL_USE), env=env)
    assert (opened.returncode, opened.stdout) == (0, "")
    assert "unreachable" in opened.stderr
    closed = _gate_cmd("--hook", "claude-code", "--url", url, "--fail", "closed", stdin=json.dumps(PRE_TOOL_USE),
                       env=env)
    assert closed.returncode == 0
    answer = json.loads(closed.stdout)["hookSpecificOutput"]
    assert (answer["hookEventName"], answer["permissionDecision"]) == ("PreToolUse", "deny")
    assert "unreachable" in answer["permissionDecisionReason"]
    bad = _gate_cmd("--fail", "sideways", env=env)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "--fail open or --fail closed" in bad.stderr
    # As a hook, a mistake on its command line must not deny every tool call (Claude Code's exit 2) unless
    # it fails closed: exit 1 is an error Claude Code shows and lets the call through.
    for args, code in [(("--hook", "claude-code", "--fail", "sideways"), 1), (("--hook=codex",), 1),
                       (("--hook", "claude-code", "--timeout", "soon"), 1), (("--hook", "claude-code", "--urll", url), 1),
                       (("--hook", "claude-code", "--fail=closed", "--timeout", "soon"), 2),
                       # A typo in the port was taken for a daemon not running: every gate let every call through.
                       (("--hook", "claude-code", "--url", "http://127.0.0.1:94640x"), 1),
                       (("--hook", "claude-code", "--url", "http://127.0.0.1:94640x", "--fail", "closed"), 2),
                       (("--session", "s", "--url", "http://127.0.0.1:99999"), 2),
                       # the last --fail given is the one read, for the exit code too
                       (("--hook", "claude-code", "--fail", "closed", "--fail", "open", "--timeout", "0"), 1)]:
        bad = _gate_cmd(*args, stdin=json.dumps(PRE_TOOL_USE), env=env)
        assert (bad.returncode, bad.stdout) == (code, ""), args
        assert bad.stderr.count("\n") == 1 and "see `agentledger gate --help`" in bad.stderr, args
    typo = _gate_cmd("--hook", "claude-code", "--fail", "closed", stdin=json.dumps(PRE_TOOL_USE),
                     env=env | {"AGENTLEDGER_URL": "http://127.0.0.1:94640x"})
    assert (typo.returncode, typo.stdout) == (2, "")
    assert typo.stderr.startswith("agentledger gate: $AGENTLEDGER_URL 'http://127.0.0.1:94640x' names no port from 1 "
                                  "to 65535: give one such as http://127.0.0.1:9464")
    # A timeout no socket can wait for failed open with a made-up reason, or (inf) crashed with exit 1,
    # which Claude Code takes as "go ahead" even with --fail closed.
    for timeout in ("-1", "0", "nan", "inf", "1e999"):
        bad = _gate_cmd("--hook", "claude-code", "--url", url, "--fail", "closed", "--timeout", timeout,
                        stdin=json.dumps(PRE_TOOL_USE), env=env)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--timeout" in bad.stderr, timeout


def test_hot_views_survive_kill_9_and_stay_private(daemon):
    daemon.logs.append(llm(2, 1.0))
    daemon._wait(lambda: daemon.get("/v1/sessions/agent:main:s1/hot")[1].get("cost_usd") == 1.5)
    sessions = daemon.tmp_path / "state" / "hot" / "sessions"

    def written(temporary: bool) -> list[Path]:
        return [p for p in sessions.iterdir() if p.name.startswith(TMP_PREFIX) == temporary]

    # Flushed (at once: flush_interval_s = 0) just after the view changed in memory. The kill may
    # land in a later flush, leaving its temporary file beside the one renamed into place.
    daemon._wait(lambda: written(temporary=False))
    assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    files = written(temporary=False)
    assert len(files) == 1
    assert stat.S_IMODE(sessions.stat().st_mode) == 0o700
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    daemon.logs.append(llm(3, 0.25))  # written while the daemon is down
    daemon.start()
    daemon._wait(lambda: daemon.get("/v1/sessions/agent:main:s1/hot")[1].get("cost_usd") == 1.75)
    assert daemon.gate()["decision"] == "allow"
    assert daemon.stop() == 0
    assert written(temporary=True) == []  # what a killed flush left was cleared, not kept


def test_removing_the_hot_store_while_serving_stops_nothing(daemon):
    daemon.logs.append(llm(2, 1.0))
    daemon._wait(lambda: daemon.get("/v1/sessions/agent:main:s1/hot")[1].get("cost_usd") == 1.5)
    hot = daemon.tmp_path / "state" / "hot"
    shutil.rmtree(hot)  # a cache cleaner, or someone clearing what looks like a cache
    for n in range(3, 6):
        daemon.logs.append(llm(n, 0.25))
    daemon._wait(lambda: daemon.get("/v1/sessions/agent:main:s1/hot")[1].get("cost_usd") == 2.25)
    assert daemon.get("/readyz") == (200, {"ready": True})
    assert daemon.gate()["decision"] == "block"
    daemon._wait(lambda: list((hot / "sessions").glob("*.json")))  # the view is kept on disk again
    assert stat.S_IMODE((hot / "sessions").stat().st_mode) == 0o700
    assert daemon.stop() == 0


PLUGIN = REPO / "integrations" / "openclaw" / "agentledger-gate" / "index.js"


def _plugin(url: str, session_key: str, tool: str, **options) -> object:
    script = (f"import {{ createGate }} from {json.dumps(str(PLUGIN))};\n"
              f"const gate = createGate({json.dumps({'url': url, **options})});\n"
              f"const out = await gate({{ toolName: {json.dumps(tool)} }}, {{ sessionKey: {json.dumps(session_key)} }});\n"
              "console.log(JSON.stringify(out ?? null));")
    ran = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: the OpenClaw plugin is JavaScript")
def test_the_openclaw_plugin_blocks_with_the_daemons_reason(daemon):
    assert _plugin(daemon.url, "agent:main:s1", "exec") is None
    daemon.logs.append(llm(2, 2.0))
    daemon._wait(lambda: daemon.gate()["decision"] == "block")
    assert _plugin(daemon.url, "agent:main:s1", "exec") == {
        "block": True, "blockReason": "session agent:main:s1 spent $2.50 of its $2.00 budget (gate session-cost)"}
    assert _plugin("http://127.0.0.1:9", "agent:main:s1", "exec") is None
    closed = _plugin("http://127.0.0.1:9", "agent:main:s1", "exec", failClosed=True)
    assert closed["block"] is True and "unreachable" in closed["blockReason"]


SESS_COST_1 = """
[[gates]]
name = "sess-cost"
scope = "session"
metric = "cost_usd"
limit = 1.0
"""


def _edit_view(state_dir: Path, key: str, edit) -> None:
    path = state_dir / "hot" / "sessions" / (hashlib.sha256(key.encode()).hexdigest() + ".json")
    doc = json.loads(path.read_bytes())
    edit(doc["state"])
    path.write_text(json.dumps(doc))


def _zero_cost_and_text_start(view: dict) -> None:
    view["started_ms"] = str(view["started_ms"])
    view["own"]["cost_pico"] = 0


def _zero_cost(view: dict) -> None:
    view["own"]["cost_pico"] = 0


@pytest.mark.parametrize("edit, set_aside", [(_zero_cost_and_text_start, True), (_zero_cost, False)],
                         ids=["wrong-type", "right-type"])
def test_a_hot_view_edited_on_disk_with_its_marks_kept_is_not_trusted(tmp_path, edit, set_aside):
    # The marks of the ledger and commit it was read at were all that was checked: a start of another type
    # answered 500 for every hot view until the session changed, and a cost of 0 let the gate allow.
    root = tmp_path / "logs"
    LogDir(root).append(llm(1, 1.5, session="a"))
    served = serve(write_config(tmp_path, root, extra=SESS_COST_1, flush_interval_s=0))
    hot, ask = "/v1/sessions/agent:main:a/hot", "/v1/gate?session_key=agent:main:a&tool=x"
    try:
        assert served.get(ask)[1]["decision"] == "block"
        assert served.stop() == 0
        _edit_view(served.state_dir, "agent:main:a", edit)
        served.start()
        served.wait_ready()
        assert served.get(ask)[1]["decision"] == "block"
        status, view = served.get(hot)
        assert (status, view.get("cost_usd")) == (200, 1.5), view
        status, views = served.get("/v1/hot")
        assert (status, [v["cost_usd"] for v in views]) == (200, [1.5]), views
        live = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(served.config), "sessions",
                               "--live", "--json", "--url", served.url], capture_output=True, text=True, cwd=REPO,
                              env=cli_env(served.db))
        assert live.returncode == 0, live.stderr
        assert served.stop() == 0
    finally:
        served.kill()
    told = "hot store: 1 unreadable session files set aside; those sessions are rebuilt from the ledger"
    assert served.log().count(told) == int(set_aside), served.log()
    assert len(list((served.state_dir / "hot" / "sessions").glob("*.corrupt-*"))) == int(set_aside)
    assert_hot_views_equal_ledger(served.db, served.state_dir, {"agent:main:a"})


def test_hot_views_kept_past_a_restored_backup_that_reached_their_position_are_not_trusted(tmp_path):
    root = tmp_path / "logs"
    LogDir(root).append(llm(1, 0.5, session="a"))
    served = serve(write_config(tmp_path, root, extra=SESS_COST_1, flush_interval_s=0))
    hot, ask = "/v1/sessions/agent:main:a/hot", "/v1/gate?session_key=agent:main:a&tool=x"
    try:
        wait_for(lambda: served.get(hot)[1].get("cost_usd") == 0.5)
        assert served.stop() == 0
        backup = tmp_path / "backup.db"
        shutil.copy(served.db, backup)

        served.start()
        LogDir(root, "second").append(llm(2, 0.6, session="a"))
        wait_for(lambda: served.get(hot)[1].get("cost_usd") == 1.1)
        assert served.get(ask)[1]["decision"] == "block"
        assert served.stop() == 0

        # The backup is restored, and a line of another session takes it to the position the views were kept at.
        shutil.rmtree(root / "agents" / "second")
        for path in tmp_path.glob("ledger.db*"):
            path.unlink()
        shutil.copy(backup, served.db)
        LogDir(root).append(llm(3, 0.1, session="z"))
        served.start()
        served.wait_ready()
        decision = served.get(ask)[1]
        assert decision["decision"] == "allow", decision["reason"]
        assert served.get(hot)[1]["cost_usd"] == 0.5
        live = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(served.config), "sessions",
                               "--live", "--json", "--url", served.url], capture_output=True, text=True, cwd=REPO,
                              env=cli_env(served.db))
        assert live.returncode == 0, live.stderr
        assert {s["session_key"]: s["cost_usd"] for s in json.loads(live.stdout)}["agent:main:a"] == 0.5
    finally:
        served.kill()
