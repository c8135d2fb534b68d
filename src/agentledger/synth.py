"""A synthetic OpenClaw gateway: realistic oc-telemetry events for the demo, benchmarks and tests.

The stream has what real logs have: interleaved ids, sessions with several runs,
per-call token deltas and costs, tool calls (some failing), usage snapshots,
subagents, compactions and inbound/outbound messages.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

# (provider, model, $/M input, output, cache read, cache write)
MODELS = [
    ("anthropic", "claude-sonnet-4-5", 3.0, 15.0, 0.30, 3.75),
    ("anthropic", "claude-haiku-4-5", 1.0, 5.0, 0.10, 1.25),
    ("anthropic", "claude-opus-4-1", 15.0, 75.0, 1.50, 18.75),
    ("openai", "gpt-5", 1.25, 10.0, 0.125, 0.0),
    ("openai", "gpt-5-mini", 0.25, 2.0, 0.025, 0.0),
]
MODEL_WEIGHTS = [60, 18, 2, 8, 12]
TOOLS = ["read", "exec", "edit", "write", "grep", "glob", "web_search", "web_fetch", "memory_search", "browser"]
CHANNELS = ["telegram", "discord", "whatsapp", "signal"]
PROMPTS = [
    "summarise today's failed CI runs", "clean up old docker images on the build box",
    "draft a reply to the vendor about the invoice", "check disk usage on the NAS",
    "find the flaky test in the payments service", "what's on my calendar tomorrow?",
]


class Gateway:
    """Generates events in time order. ``clock`` is the time of the next event, in ms."""

    def __init__(self, seed: int = 1, agents: tuple[str, ...] = ("main", "work"), start_ms: int = 0):
        self.rng = random.Random(seed)
        self.agents = agents
        self.clock = start_ms
        self.seq = 0

    def _id(self) -> str:
        return "evt_%016x" % self.rng.getrandbits(64)

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _event(self, kind: str, data: dict, *, agent="unknown", key="unknown", sid="unknown", run=None,
               source="hook", step=(5, 400)) -> dict:
        self.clock += self.rng.randint(*step)
        ev = {"id": self._id(), "ts": self.clock, "seq": self.seq, "agentId": agent, "sessionKey": key,
              "sessionId": sid}
        if run is not None:
            ev["runId"] = run
        ev.update(kind=kind, data=data, source=source)
        self.seq += 1
        return ev

    def _tokens(self, model: tuple) -> tuple[dict, float]:
        r = self.rng
        inp, out = r.randint(3, 4000), r.randint(40, 1500)
        anthropic = model[0] == "anthropic"
        cr = r.randint(0, 60000)
        cw = r.randint(0, 15000) if anthropic else 0
        cost = (inp * model[2] + out * model[3] + cr * model[4] + cw * model[5]) / 1e6
        usage = {"input": inp, "output": out, "cacheRead": cr, "cacheWrite": cw, "total": inp + out + cr + cw}
        return usage, round(cost, 8)

    def session(self) -> Iterator[dict]:
        """One whole session: start, 1–4 runs, end."""
        r = self.rng
        agent = r.choice(self.agents)
        kind = r.choices(["main", "direct", "cron"], [4, 4, 1])[0]
        if kind == "main":
            key = f"agent:{agent}:main"
        elif kind == "cron":
            key = f"agent:{agent}:cron:{self._uuid()}"
        else:
            key = f"agent:{agent}:{r.choice(CHANNELS)}:direct:{r.randint(10**9, 10**10 - 1)}"
        sid = self._uuid()
        started = self.clock
        yield self._event("session.start", {"sessionId": sid}, agent=agent, sid=sid, step=(1000, 60000))
        for _ in range(r.randint(1, 4)):
            yield from self.run(agent, key, sid)
        yield self._event("session.end", {"sessionId": sid, "messageCount": r.randint(2, 40),
                                          "durationMs": self.clock - started}, agent=agent, sid=sid)

    def run(self, agent: str, key: str, sid: str, *, depth: int = 0) -> Iterator[dict]:
        r = self.rng
        model = r.choices(MODELS, MODEL_WEIGHTS)[0]
        run = self._uuid()
        prompt = r.choice(PROMPTS)
        channel = r.choice(CHANNELS)
        if depth == 0:
            yield self._event("message.inbound", {"from": f"{channel}:{r.randint(10**9, 10**10 - 1)}",
                                                  "contentPreview": prompt, "channel": channel},
                              key=f"{channel}:conversation", step=(2000, 120000))
        started = self.clock
        yield self._event("run.start", {"model": model[1], "provider": model[0], "isHeartbeat": False,
                                        "isFollowup": False, "messageCount": 1, "compactionCount": 0,
                                        "originChannel": channel, "inputMessage": prompt},
                          agent=agent, key=key, sid=sid, run=run)
        yield self._event("llm.input", {"provider": model[0], "model": model[1], "prompt": prompt,
                                        "imagesCount": 0}, agent=agent, key=key, sid=sid, run=run)
        totals = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
        cost_total = 0.0
        tools_used = []
        calls = r.randint(1, 6)
        for i in range(calls):
            usage, cost = self._tokens(model)
            for k in totals:
                totals[k] += usage[k]
            cost_total += cost
            yield self._event("llm.call", {"callIndex": i, "provider": model[0], "model": model[1],
                                           "delta": usage, "cumulative": dict(totals),
                                           "context": {"limit": 200000, "used": usage["total"]},
                                           "costUsd": cost, "durationMs": r.randint(300, 20000)},
                              key=key, sid=sid, run=run, source="diagnostic_event", step=(300, 20000))
            if i < calls - 1:
                for _ in range(r.randint(0, 3)):
                    tool = r.choice(TOOLS)
                    call_id = "toolu_%024x" % r.getrandbits(96)
                    params = {"path": f"/home/dev/src/app/{r.choice(['api', 'web', 'db'])}/{r.randint(1, 99)}.py"}
                    yield self._event("tool.start", {"toolName": tool, "toolCallId": call_id, "params": params},
                                      agent=agent, key=key, run=run)
                    failed = r.random() < 0.06
                    data = {"toolName": tool, "toolCallId": call_id, "isError": failed,
                            "durationMs": r.randint(5, 5000), "params": params,
                            "result": "ok" if not failed else None}
                    if failed:
                        data["error"] = "command exited with status 1"
                    if tool in ("read", "edit", "write"):
                        data["filePath"] = params["path"]
                    yield self._event("tool.end", data, agent=agent, key=key, run=run)
                    tools_used.append(tool)
            if depth == 0 and r.random() < 0.03:
                yield from self.subagent(agent, key, run)
        if r.random() < 0.02:
            yield self._event("compaction.start", {"messageCount": 40, "compactingCount": 30,
                                                   "tokenCount": r.randint(50000, 180000)}, agent=agent, key=key)
            yield self._event("compaction.end", {"messageCount": 11, "compactedCount": 30}, agent=agent, key=key)
        yield self._event("usage.snapshot", {"provider": model[0], "model": model[1], "usage": dict(totals),
                                             "costUsd": round(cost_total, 8)}, key=key, sid=sid,
                          source="diagnostic_event")
        yield self._event("llm.output", {"provider": model[0], "model": model[1], "usage": dict(totals),
                                         "durationMs": self.clock - started, "stopReason": "end_turn"},
                          agent=agent, key=key, sid=sid, run=run)
        yield self._event("run.end", {"model": model[1], "provider": model[0], "durationMs": self.clock - started,
                                      "usage": totals, "toolCallCount": len(tools_used), "toolNames": tools_used,
                                      "stopReason": "end_turn", "compactionCount": 0},
                          agent=agent, key=key, sid=sid, run=run)
        if depth == 0:
            yield self._event("message.outbound", {"to": f"{channel}:conversation", "contentPreview": "done",
                                                   "success": True, "channel": channel})

    def subagent(self, agent: str, parent_key: str, parent_run: str) -> Iterator[dict]:
        child = f"agent:{agent}:subagent:{self._uuid()}"
        yield self._event("subagent.spawn", {"childSessionKey": child, "agentId": agent, "label": "research",
                                             "mode": "run"}, key=parent_key, run=parent_run)
        started = self.clock
        yield from self.run(agent, child, self._uuid(), depth=1)
        yield self._event("subagent.end", {"targetSessionKey": child, "outcome": "ok", "reason": "completed",
                                           "endedAt": self.clock, "durationMs": self.clock - started},
                          key=child, run=parent_run)

    def events(self) -> Iterator[dict]:
        while True:
            yield from self.session()
