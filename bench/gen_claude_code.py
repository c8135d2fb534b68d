"""Generate a synthetic Claude Code config dir (transcripts) for benchmarks.

    python bench/gen_claude_code.py OUTDIR --mb 500 [--seed 1] [--projects 8] [--start 2026-01-01]

Writes ``OUTDIR/projects/<encoded-cwd>/<sessionId>.jsonl`` transcripts until about ``--mb``
megabytes are written, with what makes real ones costly to read: one line per content block of
a streamed response (each repeating ``message.id`` and ``requestId`` with a growing usage
snapshot), tool_use / tool_result pairs with tool output of every size, Task subagents in
``<sessionId>/subagents/agent-<id>.jsonl``, compactions, ``<synthetic>`` API-error lines,
``file-history-snapshot`` lines (a few of them megabytes long) and turn durations. Same
arguments, same bytes.

``OUTDIR/bench-manifest.json`` holds what a correct reader must find: sessions, prompts, model
calls (each response once, with its final usage), failed calls, tool calls and errors, tokens by
kind, lines and bytes.

Other bench scripts import ``generate``:

    sys.path.insert(0, str(Path(__file__).parent)); from gen_claude_code import generate
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen import MANIFEST, read_manifest  # noqa: E402  (one manifest format for every corpus)

__all__ = ["generate", "read_manifest"]
DEFAULT_START = "2026-01-01"
VERSION = "2.1.30"
# (model, share of sessions): most work on the default model, some on the small and the large one.
MODELS = (("claude-sonnet-4-5-20250929", 0.7), ("claude-haiku-4-5-20251001", 0.2), ("claude-opus-4-1-20250805", 0.1))
TOOLS = ("Read", "Bash", "Edit", "Grep", "Glob", "Write", "WebFetch", "TodoWrite")
WORDS = ("the", "tests", "function", "returns", "config", "module", "error", "value", "file", "change", "build",
         "request", "handler", "cache", "index", "query", "update", "check", "path", "commit", "branch", "parser")
FLUSH_BYTES = 8 << 20


class _Words:
    """Cheap deterministic filler text: slices of one long random string."""

    def __init__(self, rng: random.Random):
        self.text = " ".join(rng.choice(WORDS) for _ in range(200_000))
        self.rng = rng

    def __call__(self, nbytes: int) -> str:
        nbytes = max(1, min(nbytes, len(self.text) - 1))
        start = self.rng.randrange(0, len(self.text) - nbytes)
        return self.text[start:start + nbytes]


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class _Totals:
    def __init__(self) -> None:
        self.sessions = self.subagent_files = self.runs = self.llm_calls = self.llm_errors = 0
        self.tool_calls = self.tool_errors = self.compactions = 0
        self.input = self.output = self.cache_read = self.cache_write = self.cache_write_1h = 0
        self.lines = self.bytes = self.files = 0
        self.snapshot_bytes = 0

    def as_dict(self) -> dict:
        return dict(vars(self))


class _File:
    """One transcript being written: lines buffered, flushed in big writes."""

    def __init__(self, path: Path, totals: _Totals):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(path, "wb", buffering=0)
        self.buf: list[bytes] = []
        self.size = 0
        self.totals = totals
        totals.files += 1

    def write(self, obj: dict | bytes) -> None:
        line = obj if isinstance(obj, bytes) else orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
        self.buf.append(line)
        self.size += len(line)
        self.totals.lines += 1
        self.totals.bytes += len(line)
        if self.size >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        self.fh.write(b"".join(self.buf))
        self.buf, self.size = [], 0

    def close(self) -> None:
        self.flush()
        self.fh.close()


class _Session:
    """One session's transcript: turns of prompt → streamed responses → tool results."""

    def __init__(self, gen: _Generator, project: str, cwd: str, start_ms: int):
        self.gen, self.rng = gen, gen.rng
        self.id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.cwd = cwd
        self.ms = start_ms
        self.parent: str | None = None
        self.model = self.rng.choices([m for m, _ in MODELS], [w for _, w in MODELS])[0]
        self.context = self.rng.randrange(8_000, 30_000)  # tokens already in the conversation
        self.dir = gen.root / "projects" / project
        self.out = _File(self.dir / f"{self.id}.jsonl", gen.totals)
        gen.totals.sessions += 1

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _tick(self, lo: int, hi: int) -> int:
        self.ms += self.rng.randrange(lo, hi)
        return self.ms

    def _envelope(self, kind: str, sidechain: bool = False, agent: str | None = None) -> dict:
        line_id = self._uuid()
        env = {"parentUuid": self.parent, "isSidechain": sidechain, "userType": "external", "cwd": self.cwd,
               "sessionId": self.id, "version": VERSION, "gitBranch": "main", "type": kind, "uuid": line_id,
               "timestamp": _iso(self._tick(50, 900))}
        if agent:
            env["agentId"] = agent
        self.parent = line_id
        return env

    def snapshot(self, nbytes: int) -> None:
        backups = {f"src/file{i}.py": {"backupFileName": f"{self.rng.getrandbits(64):016x}@v1", "version": 1,
                                       "backupTime": _iso(self.ms), "content": self.gen.words(nbytes // 4)}
                   for i in range(4)}
        msg = self._uuid()
        line = orjson.dumps({"type": "file-history-snapshot", "messageId": msg,
                             "snapshot": {"messageId": msg, "trackedFileBackups": backups, "timestamp": _iso(self.ms)},
                             "isSnapshotUpdate": False}, option=orjson.OPT_APPEND_NEWLINE)
        self.gen.totals.snapshot_bytes += len(line)
        self.out.write(line)

    def prompt(self) -> None:
        env = self._envelope("user")
        env["message"] = {"role": "user", "content": self.gen.words(self.rng.randrange(40, 600))}
        env["permissionMode"] = "default"
        self.out.write(env)
        self.gen.totals.runs += 1

    def _usage(self, output: int) -> dict:
        read = self.context
        fresh = self.rng.randrange(200, 4_000)
        one_hour = fresh if self.rng.random() < 0.5 else 0
        return {"input_tokens": self.rng.randrange(1, 12), "cache_creation_input_tokens": fresh,
                "cache_read_input_tokens": read,
                "cache_creation": {"ephemeral_5m_input_tokens": fresh - one_hour,
                                   "ephemeral_1h_input_tokens": one_hour},
                "output_tokens": output, "service_tier": "standard"}

    def response(self, out: _File, tools: int, sidechain: bool = False, agent: str | None = None,
                 task: bool = False) -> list[tuple[str, str]]:
        """One streamed model response: a line per content block, the last with the final usage."""
        message_id = f"msg_01{self.rng.getrandbits(96):024x}"
        request_id = f"req_011{self.rng.getrandbits(96):024x}"
        blocks: list[dict] = []
        if self.rng.random() < 0.4:
            blocks.append({"type": "thinking", "thinking": self.gen.words(self.rng.randrange(200, 2_000)),
                           "signature": f"{self.rng.getrandbits(256):064x}"})
        blocks.append({"type": "text", "text": self.gen.words(self.rng.randrange(40, 1_500))})
        calls = []
        for k in range(tools):
            name = "Task" if task and k == 0 else self.rng.choice(TOOLS)
            tool_id = f"toolu_01{self.rng.getrandbits(96):024x}"
            tool_input = ({"description": "look into it", "prompt": self.gen.words(300),
                           "subagent_type": "general-purpose"} if name == "Task"
                          else {"file_path": f"{self.cwd}/src/{self.rng.choice(WORDS)}.py"} if name != "Bash"
                          else {"command": f"pytest -q tests/test_{self.rng.choice(WORDS)}.py"})
            blocks.append({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})
            calls.append((tool_id, name))
        final_output = self.rng.randrange(30, 2_500)
        usage = self._usage(final_output)
        for k, block in enumerate(blocks):
            last = k == len(blocks) - 1
            env = self._envelope("assistant", sidechain, agent)
            env["message"] = {"id": message_id, "type": "message", "role": "assistant", "model": self.model,
                              "content": [block], "stop_reason": ("tool_use" if tools else "end_turn") if last else None,
                              "stop_sequence": None,
                              "usage": usage if last else usage | {"output_tokens": self.rng.randrange(1, 12)}}
            env["requestId"] = request_id
            out.write(env)
        t = self.gen.totals
        t.llm_calls += 1
        t.input += usage["input_tokens"]
        t.output += final_output
        t.cache_read += usage["cache_read_input_tokens"]
        t.cache_write += usage["cache_creation_input_tokens"]
        t.cache_write_1h += usage["cache_creation"]["ephemeral_1h_input_tokens"]
        self.context += usage["cache_creation_input_tokens"] + final_output
        return calls

    def results(self, out: _File, calls: list[tuple[str, str]], sidechain: bool = False,
                agent: str | None = None) -> None:
        for tool_id, name in calls:
            failed = self.rng.random() < 0.05
            size = int(self.rng.paretovariate(1.2) * 300) if name != "Task" else 400
            body = self.gen.words(min(size, 60_000))
            env = self._envelope("user", sidechain, agent)
            env["message"] = {"role": "user", "content": [{"tool_use_id": tool_id, "type": "tool_result",
                                                           "content": body, "is_error": failed}]}
            if name == "Task":
                sub = f"a{self.rng.getrandbits(28):07x}"
                self.subagent(sub)
                env["toolUseResult"] = {"status": "completed", "agentId": sub, "totalDurationMs": 42_000,
                                        "content": [{"type": "text", "text": body}]}
            else:
                env["toolUseResult"] = {"stdout": body[:200], "stderr": "", "interrupted": False}
            out.write(env)
            self.gen.totals.tool_calls += 1
            self.gen.totals.tool_errors += failed
            self.context += len(body) // 4

    def subagent(self, agent: str) -> None:
        """A Task's own transcript: a prompt and one or two responses, all on the side branch."""
        out = _File(self.dir / self.id / "subagents" / f"agent-{agent}.jsonl", self.gen.totals)
        self.gen.totals.subagent_files += 1
        saved = self.parent
        self.parent = None
        env = self._envelope("user", True, agent)
        env["message"] = {"role": "user", "content": self.gen.words(300)}
        out.write(env)
        calls = self.response(out, 1, True, agent)
        self.results(out, calls, True, agent)
        self.response(out, 0, True, agent)
        out.close()
        self.parent = saved

    def api_error(self) -> None:
        env = self._envelope("assistant")
        env["message"] = {"id": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)), "type": "message",
                          "role": "assistant", "model": "<synthetic>",
                          "content": [{"type": "text", "text": "API Error: 529 overloaded"}], "stop_reason": "stop_sequence",
                          "usage": {"input_tokens": 0, "output_tokens": 0}}
        env["isApiErrorMessage"] = True
        self.out.write(env)
        self.gen.totals.llm_errors += 1

    def compact(self) -> None:
        env = self._envelope("system")
        env |= {"subtype": "compact_boundary", "content": "Conversation compacted", "level": "info",
                "compactMetadata": {"trigger": "auto", "preTokens": self.context}}
        self.out.write(env)
        self.gen.totals.compactions += 1
        self.context = self.rng.randrange(8_000, 20_000)

    def turn(self) -> None:
        started = self.ms
        self.prompt()
        if self.rng.random() < 0.01:
            self.api_error()
        for step in range(self.rng.randrange(1, 7)):
            tools = 0 if step and self.rng.random() < 0.25 else self.rng.choice((1, 1, 1, 2, 3))
            calls = self.response(self.out, tools, task=tools > 0 and self.rng.random() < 0.03)
            if not calls:
                break
            self.results(self.out, calls)
        else:
            self.response(self.out, 0)
        env = self._envelope("system")
        env |= {"subtype": "turn_duration", "durationMs": self.ms - started, "isMeta": False}
        self.out.write(env)
        if self.context > 160_000:
            self.compact()
        self.ms += self.rng.randrange(20_000, 900_000)  # the user reads, thinks, types


class _Generator:
    def __init__(self, root: Path, seed: int, projects: int, start_ms: int):
        self.root = root
        self.rng = random.Random(seed)
        self.words = _Words(self.rng)
        self.totals = _Totals()
        self.projects = [(f"-home-dev-src-{w}-{i}", f"/home/dev/src/{w}-{i}")
                         for i, w in enumerate(self.rng.sample(WORDS, min(projects, len(WORDS))))]
        self.start_ms = start_ms

    def run(self, target_bytes: int) -> None:
        ms = self.start_ms
        while self.totals.bytes < target_bytes:
            project, cwd = self.rng.choice(self.projects)
            session = _Session(self, project, cwd, ms)
            # Most snapshots are small; a few carry whole files and run to megabytes.
            session.snapshot(2_000_000 if self.rng.random() < 0.005 else self.rng.randrange(200, 4_000))
            for _ in range(self.rng.randrange(1, 25)):
                session.turn()
            session.out.close()
            ms += self.rng.randrange(60_000, 3_600_000)


def generate(outdir: str | os.PathLike, megabytes: float, seed: int = 1, *, projects: int = 8,
             start: str = DEFAULT_START) -> dict:
    """Write a corpus of about ``megabytes`` MB under ``outdir``; returns its manifest."""
    outdir = Path(outdir)
    if megabytes <= 0:
        raise ValueError("--mb must be positive")
    if any(outdir.glob("projects/*/*.jsonl")):
        raise FileExistsError(f"{outdir} already holds transcripts: use an empty directory")
    day = dt.date.fromisoformat(start)
    start_ms = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)
    t0 = time.perf_counter()
    gen = _Generator(outdir, seed, projects, start_ms)
    gen.run(int(megabytes * 1e6))
    t = gen.totals
    result = {"format": "claude-code", "seed": seed, "megabytes": megabytes, **t.as_dict(),
              "total_tokens": t.input + t.output + t.cache_read + t.cache_write,
              "seconds": round(time.perf_counter() - t0, 3)}
    (outdir / MANIFEST).write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path, help="config dir to create (projects/<project>/<session>.jsonl)")
    ap.add_argument("--mb", type=float, required=True, help="about this many megabytes of transcripts")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--projects", type=int, default=8)
    ap.add_argument("--start", default=DEFAULT_START, help="UTC date of the first session (YYYY-MM-DD)")
    args = ap.parse_args(argv)
    try:
        res = generate(args.outdir, args.mb, args.seed, projects=args.projects, start=args.start)
    except (ValueError, FileExistsError) as exc:
        print(f"gen_claude_code.py: {exc}", file=sys.stderr)
        return 2
    print(f"{res['bytes'] / 1e6:,.1f} MB, {res['lines']:,} lines, {res['files']} files ({res['sessions']} sessions, "
          f"{res['llm_calls']:,} model calls, {res['tool_calls']:,} tool calls) in {res['seconds']:.1f} s "
          f"-> {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
