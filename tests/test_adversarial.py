"""Hostile input, generated: deep nesting, 10,000-digit integers, huge strings, wrong types in every
field, NUL bytes, invalid UTF-8 (also torn mid-character between two reads), ids repeated with
other payloads; for every format.

Whatever comes, ingest finishes; a line that is not a JSON object is one reject at its own offset
with its own length; no decoder ever raises (the pipeline would record "decoder error"); the good
lines among the hostile ones are all indexed; and the rollups verify.

CI runs a few hundred examples; ``pytest -m slow`` drives about 100,000 hostile lines through
the pipeline: AGENTLEDGER_ADVERSARIAL_EXAMPLES (4,300) streams per format, of 15 lines on
average, half of them hostile.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from conftest import ingest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from served import assert_consistent

from agentledger.facts import Fact, Reject
from agentledger.ledger.db import open_reader
from agentledger.sources import SKIPPED_HEADS, opener_for
from agentledger.defaults import HEAD_BYTES
from agentledger.tail.reader import BLOCK

SID = "55ce2f8e-7bd3-476b-8d50-d9696fdbeb2c"


def _telemetry(n: int) -> dict:
    return {"id": f"evt_{n:016x}", "ts": 1_790_000_000_000 + n, "seq": n, "agentId": "main",
            "sessionKey": "agent:main:good", "sessionId": "sid-good", "runId": "run-good", "kind": "llm.call",
            "data": {"callIndex": n, "provider": "anthropic", "model": "claude-sonnet-4-5",
                     "delta": {"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4, "total": 10},
                     "costUsd": 0.001}, "source": "diagnostic_event"}


def _claude(n: int) -> dict:
    return {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/tmp/x", "sessionId": SID,
            "version": "2.1.30", "type": "assistant", "uuid": f"00000000-0000-4000-8000-{n:012d}",
            "timestamp": "2026-10-04T23:16:46.229Z", "requestId": f"req_{n}",
            "message": {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                                  "output_tokens": 10}}}


def _transcript(n: int) -> dict:
    return {"type": "message", "id": f"{n:08x}", "parentId": None, "timestamp": "2026-10-03T18:28:03.444Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "x"}], "api": "anthropic-messages",
                        "provider": "anthropic", "model": "claude-opus-4-1",
                        "usage": {"input": 11, "output": 180, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 191,
                                  "cost": {"input": 0.0001, "output": 0.01, "cacheRead": 0, "cacheWrite": 0,
                                           "total": 0.0101}},
                        "stopReason": "stop", "timestamp": 1791052080800}}


@dataclass(frozen=True)
class Format:
    name: str
    path: str  # where its file lives under the root
    good: object  # n -> a line (as a dict) that yields at least one fact
    header: bytes = b""


FORMATS = {f.name: f for f in (
    Format("oc-telemetry", "agents/main/telemetry/events.jsonl", _telemetry),
    Format("claude-code", f"projects/-tmp-x/{SID}.jsonl", _claude),
    Format("oc-transcript", f"agents/main/sessions/{SID}.jsonl", _transcript,
           header=b'{"type":"session","version":3,"id":"%s","timestamp":"2026-10-03T18:27:55.090Z","cwd":"/tmp"}\n'
           % SID.encode()),
)}


class Raw(bytes):
    """Bytes spliced into a line as they are, where json.dumps cannot go (too deep, too many digits)."""


_huge_int = st.integers(1000, 10_000).map(lambda d: Raw(b"9" * d))
_deep = st.integers(100, 5000).flatmap(lambda d: st.sampled_from([Raw(b"[" * d + b"]" * d),
                                                                  Raw(b'{"a":' * d + b"1" + b"}" * d)]))
_huge_str = st.integers(10_000, 100_000).map(lambda n: "x" * n)
_nul_str = st.text(max_size=20).map(lambda s: s + "\x00" + s)
_scalar = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | _nul_str
           | st.sampled_from(["unknown", "", "-1", "1e400", "2026-13-45T99:99:99Z"]))
_wrong = st.recursive(_scalar, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids,
                                                                                          max_size=3), max_leaves=6)
_hostile_value = st.one_of(_wrong, _wrong, _huge_int, _deep, _huge_str)


def _paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a document, containers included: each can take a value of the wrong type."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append(prefix + (k,))
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append(prefix + (i,))
            out.extend(_paths(v, prefix + (i,)))
    return out


def _set(doc: object, path: tuple, value: object) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _dumps(doc: dict) -> bytes:
    raws: list[Raw] = []

    def hold(value):
        if isinstance(value, Raw):
            raws.append(value)
            return f"\ue000{len(raws) - 1}\ue000"
        raise TypeError(type(value))

    text = json.dumps(doc, default=hold, ensure_ascii=False).encode("utf-8", "surrogatepass")
    for i, raw in enumerate(raws):
        text = text.replace(f'"\ue000{i}\ue000"'.encode(), bytes(raw))
    return text


@st.composite
def _mutated(draw, fmt: Format) -> bytes:
    """A good line with wrong values put in some of its fields (sometimes in every one)."""
    doc = fmt.good(draw(st.integers(10**6, 10**7)))
    paths = _paths(doc)
    chosen = paths if draw(st.booleans()) else draw(st.lists(st.sampled_from(paths), min_size=1, max_size=4))
    for path in sorted(set(chosen), key=len, reverse=True):  # leaves first: a parent replaced later wins
        _set(doc, path, draw(_hostile_value))
    return _dumps(doc)


_invalid_utf8 = st.sampled_from([b"\xff", b"\xc3", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xe2\x82"])


@st.composite
def _corrupted(draw, fmt: Format) -> bytes:
    """A good line with raw NUL bytes or invalid UTF-8 put in, or cut short."""
    line = orjson.dumps(fmt.good(draw(st.integers(10**6, 10**7))))
    at = draw(st.integers(0, len(line)))
    how = draw(st.sampled_from(["nul", "utf8", "cut"]))
    if how == "cut":
        return line[:at]
    insert = b"\x00" * draw(st.integers(1, 5)) if how == "nul" else draw(_invalid_utf8)
    return line[:at] + insert + line[at:]


_whole = st.one_of(
    st.binary(max_size=300), _huge_int, _deep, st.just(b""), st.just(b"null"), st.just(b'"a string"'),
    st.just(b"[1, 2]"), st.integers(1, 5000).map(lambda n: b"\x00" * n),
)


def _hostile(fmt: Format):
    return st.one_of(_mutated(fmt), _corrupted(fmt), _whole).map(lambda b: bytes(b).replace(b"\n", b" "))


@st.composite
def _stream(draw, fmt: Format, max_lines: int = 30) -> tuple[list[tuple[str, bytes]], int | None]:
    """Lines labelled good, dup (an earlier good line's id with another payload) or bad; a split point."""
    lines: list[tuple[str, bytes]] = []
    goods: list[dict] = []
    for _ in range(draw(st.integers(1, max_lines))):
        kind = draw(st.sampled_from(["good", "bad", "bad", "dup"]))
        if kind == "good" or (kind == "dup" and not goods):
            doc = fmt.good(len(goods) + 1)
            goods.append(doc)
            lines.append(("good", orjson.dumps(doc)))
        elif kind == "dup":
            doc = json.loads(json.dumps(draw(st.sampled_from(goods))))
            paths = [p for p in _paths(doc) if p[0] not in ("id", "uuid", "ts", "sessionId")]
            _set(doc, draw(st.sampled_from(paths)), draw(_wrong))
            lines.append(("dup", _dumps(doc)))
        else:
            lines.append(("bad", draw(_hostile(fmt))))
    split = draw(st.none() | st.integers(0, sum(len(b) + 1 for _, b in lines)))
    return lines, split


def _not_an_object(fmt: Format, line: bytes) -> bool:
    skipped = SKIPPED_HEADS.get(fmt.name)
    if skipped is not None and skipped(line[:HEAD_BYTES]):
        return False  # skipped unparsed by design: Claude Code's snapshots can be hundreds of MB
    try:
        return not isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return True


def _check_ingest(tmp_path: Path, fmt: Format, lines: list[tuple[str, bytes]], split: int | None) -> None:
    root = tmp_path / "root"
    path = root / fmt.path
    path.parent.mkdir(parents=True, exist_ok=True)
    body = fmt.header + b"".join(line + b"\n" for _, line in lines)
    db = tmp_path / "ledger.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if split is not None:  # the writer's bytes arrive in two reads, perhaps mid-character
        path.write_bytes(body[: len(fmt.header) + split])
        ingest(db, root, fmt=fmt.name)
    path.write_bytes(body)
    stats = ingest(db, root, fmt=fmt.name)

    offsets, at = [], len(fmt.header)
    for _, line in lines:
        offsets.append(at)
        at += len(line) + 1
    conn = open_reader(db)
    try:
        rejects = {off: (length, reason) for off, length, reason in conn.execute(
            "SELECT offset, length, reason FROM rejects")}
        indexed = {off for (off,) in conn.execute("SELECT DISTINCT offset FROM events")}
        assert conn.execute("SELECT sum(lines) FROM files").fetchall()[0][0] == len(lines) + bool(fmt.header)
    finally:
        conn.close()
    assert stats.rejects <= len(rejects)
    by_offset = dict(zip(offsets, lines))
    for off, (length, reason) in rejects.items():
        assert off in by_offset, f"a reject at {off}, where no line starts"
        assert length == len(by_offset[off][1])
        assert not reason.startswith("decoder error"), reason
    for off, (label, line) in by_offset.items():
        if label == "good":
            assert off in indexed, f"good line at {off} not indexed"
        elif _not_an_object(fmt, line):
            assert off in rejects and off not in indexed, f"line at {off} is no JSON object but was not rejected"
        if label == "dup" and fmt.name == "oc-telemetry":
            assert off not in indexed, "a second line with a known id was indexed again"
    assert_consistent(db)


_EXAMPLES = int(os.environ.get("AGENTLEDGER_ADVERSARIAL_EXAMPLES", "4300"))
_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large,
                                                         HealthCheck.function_scoped_fixture,
                                                         HealthCheck.large_base_example]}


@pytest.mark.parametrize("name", FORMATS)
def test_hostile_lines_through_the_pipeline(tmp_path, name):
    fmt = FORMATS[name]

    @settings(max_examples=40, **_SETTINGS)
    @given(stream=_stream(fmt))
    def run(stream):
        _check_ingest(tmp_path, fmt, *stream)

    run()


@pytest.mark.slow
@pytest.mark.parametrize("name", FORMATS)
def test_hostile_lines_through_the_pipeline_long(tmp_path, name):
    fmt = FORMATS[name]

    @settings(max_examples=_EXAMPLES, **_SETTINGS)
    @given(stream=_stream(fmt))
    def run(stream):
        _check_ingest(tmp_path, fmt, *stream)

    run()


@pytest.mark.parametrize("name", FORMATS)
def test_decoders_never_raise_on_hostile_lines(name):
    fmt = FORMATS[name]
    decode = opener_for(name)(str(Path("/logs") / fmt.path), lambda session, ts: None)

    @settings(max_examples=300, **_SETTINGS)
    @given(line=_hostile(fmt), offset=st.integers(0, 2**40))
    def run(line, offset):
        out = decode(line, offset)
        for item in out if isinstance(out, list) else [out]:
            assert isinstance(item, (Fact, Reject))
            if isinstance(item, Reject):
                assert (item.offset, item.length) == (offset, len(line))

    run()


@pytest.mark.parametrize("name", FORMATS)
def test_a_character_split_across_reads_and_blocks(tmp_path, name):
    """Multi-byte characters and invalid UTF-8 straddling the reader's 1 MiB block and a torn write."""
    fmt = FORMATS[name]
    first = _dumps(fmt.good(1))
    doc = fmt.good(2)
    _set(doc, _text_path(doc), "é€😀p" * (BLOCK // 9))  # some character is cut by the block boundary
    lines = [("good", first), ("good", _dumps(doc)), ("bad", b'{"x": "\xf0\x9f' + b"\xff" * 3 + b'"}'),
             ("good", _dumps(fmt.good(3)))]
    start = len(fmt.header) + len(first) + 1
    cut = start + _dumps(doc).index("😀".encode()) + 2  # inside the 4-byte character
    _check_ingest(tmp_path, fmt, lines, cut - len(fmt.header))


def _text_path(doc: dict) -> tuple:
    for path in _paths(doc):
        if path[-1] in ("model", "text"):
            return path
    raise AssertionError("no text field")


def test_a_line_that_only_mentions_a_snapshot_is_rejected(tmp_path):
    """Found by the hostile stream: the mark of a snapshot in a line that is no JSON object hid the line."""
    fmt = FORMATS["claude-code"]
    _check_ingest(tmp_path, fmt, [("good", _dumps(fmt.good(1))), ("bad", b'"type":"file-history-snapshot"')], None)
