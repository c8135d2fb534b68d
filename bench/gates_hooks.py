"""Gate latency while Claude Code hook events stream in: does a question wait for the hook writer?

    python bench/gates_hooks.py [--events 20000] [--sessions 4] [--burst 5,20] [--turn-ms 250]
                                [--rate 200] [--seconds 20] [--no-pre] [--tmp DIR]

A real `serve` over a generated corpus, with tool-call gates (session and agent-day, limits never
reached, so every question counts the calls waiting to be recorded) and a cost gate. --sessions
simulated Claude Code sessions each run turns: a burst of parallel PreToolUse POSTs (between the two
--burst figures, at random), then a PostToolUse per call, then a pause of about --turn-ms. Meanwhile a
client asks GET /v1/gate about those sessions at --rate per second. The daemon records each pass's
hook events in a transaction of its own, so questions arrive while hook events are being written.
--no-pre sends the PostToolUse events only: the gate questions then queue behind no PreToolUse
question, and what they wait on is the hook writer alone.

Reported: p50/p99/max inside the handler (the Server-Timing header) and end to end, for the
PreToolUse answers and for the GET /v1/gate answers, and the hook events sent per second. Figures
are printed, never asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gates import Client, _pct, _serve, ask_gates  # noqa: E402
from gen import generate  # noqa: E402

GATES = """
[[gates]]
name = "session-tools"
scope = "session"
metric = "tool_calls"
limit = 1000000000

[[gates]]
name = "claude-day-tools"
scope = "agent-day"
metric = "tool_calls"
limit = 1000000000

[[gates]]
name = "session-cost"
scope = "session"
metric = "cost_usd"
limit = 1000000
"""


def _session(n: int) -> str:
    return f"0b5c3f7e-cc11-4d7e-9c5e-{n:012d}"


def stream_hooks(client: Client, sessions: int, burst: tuple[int, int], turn_ms: float, deadline: float,
                 pre: list[tuple[float, float]], sent: list[int], with_pre: bool) -> None:
    """Each session: turns of a parallel burst of PreToolUse, then a PostToolUse per call, then a pause."""
    rng = random.Random(7)
    pool = ThreadPoolExecutor(burst[1] * sessions)
    lock = threading.Lock()

    def post(payload: dict) -> tuple[float, float] | None:
        return client.request("POST", "/v1/hooks/claude-code", orjson.dumps(payload))

    def session(n: int) -> None:
        sid, turn = _session(n), 0
        while time.monotonic() < deadline:
            calls = [f"toolu_{n}_{turn}_{i}" for i in range(rng.randint(*burst))]
            base = {"session_id": sid, "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp", "tool_name": "Bash",
                    "tool_input": {"command": "ls -la"}, "permission_mode": "default"}
            if with_pre:
                asked = list(pool.map(post, [{**base, "hook_event_name": "PreToolUse", "tool_use_id": c}
                                             for c in calls]))
                pre.extend(a for a in asked if a is not None)
            list(pool.map(post, [{**base, "hook_event_name": "PostToolUse", "tool_use_id": c,
                                  "tool_response": {"stdout": "ok"}} for c in calls]))
            with lock:
                sent[0] += (2 if with_pre else 1) * len(calls)
            turn += 1
            time.sleep(rng.uniform(0.5, 1.5) * turn_ms / 1000)

    threads = [threading.Thread(target=session, args=(n,)) for n in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.shutdown()


def _line(name: str, values: list[tuple[float, float]]) -> str:
    handler, e2e = [v[0] for v in values], [v[1] for v in values]
    return (f"  {name:<22} n={len(values):>6}  in handler p50 {_pct(handler, .5):.3f}  p99 {_pct(handler, .99):.3f}"
            f"  max {max(handler, default=float('nan')):.3f} ms;  end to end p50 {_pct(e2e, .5):.3f}"
            f"  p99 {_pct(e2e, .99):.3f} ms")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--burst", default="5,20")
    parser.add_argument("--turn-ms", type=float, default=250.0)
    parser.add_argument("--rate", type=int, default=200, help="GET /v1/gate questions per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tmp", type=Path, default=None)
    parser.add_argument("--no-pre", action="store_true",
                        help="send PostToolUse only: no PreToolUse questions queue beside GET /v1/gate's, so these "
                             "wait on nothing but the hook writer")
    args = parser.parse_args()
    burst = tuple(int(x) for x in args.burst.split(","))
    pre: list[tuple[float, float]] = []
    gates: list[tuple[float, float]] = []
    sent = [0]
    with tempfile.TemporaryDirectory(prefix="agentledger-gates-hooks-", dir=args.tmp) as scratch:
        tmp = Path(scratch)
        corpus = tmp / "corpus"
        generate(corpus, args.events, days=2, start=(dt.date.today() - dt.timedelta(days=3)).isoformat())
        proc, url = _serve(tmp, corpus, GATES)
        try:
            hooks, asker = Client(url, timeout=30), Client(url, timeout=30)
            deadline = time.monotonic() + args.seconds
            streamer = threading.Thread(target=stream_hooks, args=(hooks, args.sessions, burst, args.turn_ms,
                                                                   deadline, pre, sent, not args.no_pre))
            streamer.start()
            ask_gates(asker, lambda n: f"/v1/gate?session_key={_session(n % args.sessions)}&tool=Bash", args.rate,
                      deadline, gates)
            streamer.join()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    what = "PostToolUse only" if args.no_pre else "parallel PreToolUse then their PostToolUse"
    print(f"{args.sessions} Claude Code sessions, bursts of {burst[0]}-{burst[1]} calls ({what}), a turn every "
          f"~{args.turn_ms:.0f} ms: {sent[0] / args.seconds:.0f} hook events/s; "
          f"GET /v1/gate at {args.rate}/s; {args.seconds:.0f} s; errors: "
          f"{dict(hooks.errors + asker.errors) or 'none'}")
    print(_line("PreToolUse answers", pre))
    print(_line("GET /v1/gate answers", gates))
    print(orjson.dumps({"pre_tool_use": {"n": len(pre), "handler_p50_ms": _pct([v[0] for v in pre], .5),
                                         "handler_p99_ms": _pct([v[0] for v in pre], .99)},
                        "gate": {"n": len(gates), "handler_p50_ms": _pct([v[0] for v in gates], .5),
                                 "handler_p99_ms": _pct([v[0] for v in gates], .99)},
                        "hook_events_per_s": sent[0] / args.seconds,
                        "errors": dict(hooks.errors + asker.errors)}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
