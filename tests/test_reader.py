"""Behaviour of ``read_lines``: complete lines only, exact offsets, bounded work and bounded memory."""

from __future__ import annotations

import os
import tracemalloc
from dataclasses import dataclass, field
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.tail import reader
from agentledger.tail.reader import BLOCK, read_lines
from agentledger.tail.tailer import DEFAULT_MAX_LINE

MiB = 1 << 20
HEAD = 200
# The limits the tailer uses by default.
DEFAULTS = {"max_lines": 4000, "max_bytes": 4 * MiB, "max_line": DEFAULT_MAX_LINE}


@pytest.fixture
def logfile(tmp_path):
    """(append, fd): append bytes to a fresh file and read it through one O_RDONLY descriptor."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)

    def append(data: bytes) -> None:
        with open(path, "ab") as f:
            f.write(data)

    yield append, fd, path
    os.close(fd)


@dataclass
class Drained:
    lines: list[tuple[int, bytes]] = field(default_factory=list)
    too_long: list[tuple[int, int, bytes]] = field(default_factory=list)
    offset: int = 0
    pending: tuple[int, int] | None = None
    calls: int = 0


def drain(fd: int, state: Drained, **limits) -> Drained:
    """Call read_lines from the last end, as the tailer does, until it makes no more progress."""
    while True:
        res = read_lines(fd, state.offset, resume_long=state.pending, **limits)
        state.calls += 1
        state.lines += res.lines
        state.too_long += res.too_long
        state.pending = res.pending_long
        if res.end == state.offset:
            return state
        state.offset = res.end


def expected(content: bytes, max_line: int):
    """Complete lines of ``content`` (offset, bytes) split by the max_line rule, and where they end."""
    lines, too_long = [], []
    off = 0
    while True:
        nl = content.find(b"\n", off)
        if nl < 0:
            return lines, too_long, off
        line = content[off:nl]
        if len(line) > max_line:
            too_long.append((off, len(line), line[:HEAD]))
        else:
            lines.append((off, line))
        off = nl + 1


# -- complete lines only ----------------------------------------------------------------------


def test_only_newline_terminated_lines_are_returned(logfile):
    append, fd, _ = logfile
    append(b'{"a":1}\n{"b":2}\n{"c":')
    res = read_lines(fd, 0, **DEFAULTS)
    assert res.lines == [(0, b'{"a":1}'), (8, b'{"b":2}')]
    assert res.end == 16
    assert res.too_long == []
    assert res.pending_long is None


def test_torn_last_line_is_returned_only_after_its_newline(logfile):
    append, fd, _ = logfile
    append(b"one\ntw")
    first = read_lines(fd, 0, **DEFAULTS)
    assert first.lines == [(0, b"one")]
    assert first.end == 4
    again = read_lines(fd, first.end, **DEFAULTS)
    assert again.lines == [] and again.end == 4  # still torn: nothing, and no progress
    append(b"o")
    assert read_lines(fd, 4, **DEFAULTS).lines == []
    append(b"\nthree")
    done = read_lines(fd, 4, **DEFAULTS)
    assert done.lines == [(4, b"two")]
    assert done.end == 8


def test_empty_file_and_read_at_end(logfile):
    append, fd, _ = logfile
    res = read_lines(fd, 0, **DEFAULTS)
    assert (res.lines, res.too_long, res.end, res.pending_long) == ([], [], 0, None)
    append(b"x\n")
    res = read_lines(fd, 2, **DEFAULTS)
    assert (res.lines, res.end) == ([], 2)


def test_offsets_are_exact(logfile):
    append, fd, path = logfile
    lines = [b"a" * n for n in (0, 1, 7, 300, 0, 4095, 4096, 12, 0)] + ["é ü 中".encode(), b"\r", b"\x00\x01"]
    append(b"".join(line + b"\n" for line in lines))
    content = path.read_bytes()
    res = read_lines(fd, 0, **DEFAULTS)
    assert [line for _, line in res.lines] == lines
    for off, line in res.lines:
        assert content[off:off + len(line)] == line
        assert content[off + len(line):off + len(line) + 1] == b"\n"
    assert res.end == len(content)


def test_reading_from_a_mid_file_offset(logfile):
    append, fd, _ = logfile
    append(b"aaa\nbbb\nccc\n")
    res = read_lines(fd, 4, **DEFAULTS)
    assert res.lines == [(4, b"bbb"), (8, b"ccc")]
    assert res.end == 12


def test_blank_lines_are_returned_as_empty_bytes(logfile):
    append, fd, _ = logfile
    append(b"\n\na\n\n")
    res = read_lines(fd, 0, **DEFAULTS)
    assert res.lines == [(0, b""), (1, b""), (2, b"a"), (4, b"")]
    assert res.end == 5


# -- limits ------------------------------------------------------------------------------------


def test_max_bytes_splits_the_work_and_every_line_comes_once(logfile):
    append, fd, path = logfile
    lines = [b"%07d" % i + b"x" * (i % 200) for i in range(30_000)]  # ~3.4 MiB
    append(b"".join(line + b"\n" for line in lines))
    size = path.stat().st_size
    state, ends = Drained(), []
    while True:
        res = read_lines(fd, state.offset, max_lines=10**9, max_bytes=1, max_line=DEFAULT_MAX_LINE)
        if res.end == state.offset:
            break
        # "about max_bytes": never more than one block past the limit.
        assert 0 < res.end - state.offset <= 1 + BLOCK
        state.lines += res.lines
        state.offset = res.end
        ends.append(res.end)
    assert len(ends) >= 3  # the work was split
    assert ends[-1] == size
    assert [line for _, line in state.lines] == lines
    assert [off for off, _ in state.lines] == sorted({off for off, _ in state.lines})


def test_max_bytes_is_approximately_honoured(logfile):
    append, fd, path = logfile
    append(b"".join(b"%09d\n" % i for i in range(500_000)))  # ~4.8 MiB
    state = Drained()
    while True:
        res = read_lines(fd, state.offset, max_lines=10**9, max_bytes=MiB, max_line=DEFAULT_MAX_LINE)
        if res.end == state.offset:
            break
        assert res.end - state.offset <= MiB + BLOCK
        state.lines += res.lines
        state.offset = res.end
        state.calls += 1
    assert state.calls >= 3
    assert [line for _, line in state.lines] == [b"%09d" % i for i in range(500_000)]
    assert state.offset == path.stat().st_size


def test_max_lines_splits_the_work_for_large_lines(logfile):
    append, fd, _ = logfile
    lines = [bytes([65 + i]) * (700 * 1024) for i in range(5)]
    append(b"".join(line + b"\n" for line in lines))
    state = Drained()
    while True:
        res = read_lines(fd, state.offset, max_lines=1, max_bytes=64 * MiB, max_line=DEFAULT_MAX_LINE)
        if res.end == state.offset:
            break
        assert len(res.lines) == 1
        state.lines += res.lines
        state.offset = res.end
        state.calls += 1
    assert state.calls == 5
    assert [line for _, line in state.lines] == lines


def test_max_lines_caps_the_lines_of_one_call(logfile):
    append, fd, _ = logfile
    append(b"".join(b"%d\n" % i for i in range(10)))
    res = read_lines(fd, 0, max_lines=3, max_bytes=4 * MiB, max_line=DEFAULT_MAX_LINE)
    assert res.lines == [(0, b"0"), (2, b"1"), (4, b"2")]
    assert res.end == 6  # the rest is left for the next call
    rest = drain(fd, Drained(offset=res.end), max_lines=3, max_bytes=4 * MiB, max_line=DEFAULT_MAX_LINE)
    assert [line for _, line in rest.lines] == [b"%d" % i for i in range(3, 10)]
    assert rest.calls == 4  # 3 + 3 + 1 lines, then a call that finds nothing


def test_successive_small_limit_calls_return_every_line_once(logfile):
    append, fd, _ = logfile
    content = b"".join(b"line-%d" % i * (i % 5) + b"\n" for i in range(2000))
    append(content)
    want, _, end = expected(content, DEFAULT_MAX_LINE)
    got = drain(fd, Drained(), max_lines=1, max_bytes=1, max_line=DEFAULT_MAX_LINE)
    assert got.lines == want
    assert got.offset == end


# -- over-long lines ---------------------------------------------------------------------------


def test_line_longer_than_max_line_is_reported_not_returned(logfile):
    append, fd, _ = logfile
    long = b"x" * 50 + b"y" * 300
    append(b"short\n" + long + b"\nafter\n")
    res = read_lines(fd, 0, max_lines=100, max_bytes=MiB, max_line=10)
    assert res.lines == [(0, b"short"), (357, b"after")]
    assert res.too_long == [(6, 350, long[:HEAD])]
    assert res.end == 363


def test_line_of_exactly_max_line_is_returned(logfile):
    append, fd, _ = logfile
    append(b"a" * 10 + b"\n" + b"b" * 11 + b"\n")
    res = read_lines(fd, 0, max_lines=100, max_bytes=MiB, max_line=10)
    assert res.lines == [(0, b"a" * 10)]
    assert res.too_long == [(11, 11, b"b" * 11)]


def test_over_long_line_spanning_blocks_is_reported_with_neighbours(logfile):
    append, fd, _ = logfile
    long = bytes(range(256)).replace(b"\n", b"!") * (3 * MiB // 256)
    append(b"before\n" + long + b"\nafter\n")
    got = drain(fd, Drained(), max_lines=100, max_bytes=MiB, max_line=MiB)
    assert got.lines == [(0, b"before"), (7 + len(long) + 1, b"after")]
    assert got.too_long == [(7, len(long), long[:HEAD])]


def test_two_mib_line_below_the_cap_is_returned_whole(logfile):
    append, fd, _ = logfile
    line = (b"0123456789abcdef" * (2 * MiB // 16))[:-3] + b"end"
    assert len(line) == 2 * MiB
    append(b"a\n" + line + b"\nb\n")
    got = drain(fd, Drained(), **DEFAULTS)
    assert got.lines == [(0, b"a"), (2, line), (2 + 2 * MiB + 1, b"b")]
    assert got.too_long == []


def _fifty_mb_line_file(path, size=50_000_000):
    # A sparse file: "before\n", 50 MB of NUL bytes (no newline), "\nafter\n". Cheap to create.
    with open(path, "wb") as f:
        f.write(b"before\n")
        f.truncate(7 + size)
        f.seek(7 + size)
        f.write(b"\nafter\n")


@pytest.mark.parametrize("max_bytes", [DEFAULTS["max_bytes"], 1])
def test_fifty_mb_line_is_rejected_without_holding_it(tmp_path, max_bytes):
    path = tmp_path / "big.jsonl"
    size = 50_000_000
    _fifty_mb_line_file(path, size)
    fd = os.open(path, os.O_RDONLY)
    try:
        tracemalloc.start()
        try:
            got = drain(fd, Drained(), max_lines=4000, max_bytes=max_bytes, max_line=DEFAULT_MAX_LINE)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        os.close(fd)
    assert got.lines == [(0, b"before"), (7 + size + 1, b"after")]
    assert got.too_long == [(7, size, b"\x00" * HEAD)]
    assert got.pending is None
    # Bounded by the read blocks (a few MiB), never by the line: nothing close to 50 MB.
    assert peak < 12 * MiB, peak


def test_over_long_line_still_being_written_is_not_reread_until_it_ends_then_once(logfile, monkeypatch):
    append, fd, _ = logfile
    max_line = MiB
    append(b"a\n" + b"z" * (3 * MiB))
    first = read_lines(fd, 0, max_lines=100, max_bytes=MiB, max_line=max_line)
    assert first.lines == [(0, b"a")]
    assert first.too_long == []
    assert first.end == 2  # the long line is not consumed yet
    assert first.pending_long == (2, 2 + 3 * MiB)  # scanned to the end of the file
    reads: list[tuple[int, int]] = []
    real_pread = os.pread

    def spy(fd_, n, pos):
        reads.append((n, pos))
        return real_pread(fd_, n, pos)

    def reread(scanned_to: int) -> int:
        return sum(min(pos + n, scanned_to) - pos for n, pos in reads if pos < scanned_to)

    # Until it ends, asking again changes nothing but how far it was scanned, and reads none of it again.
    append(b"z" * 100)
    monkeypatch.setattr(reader.os, "pread", spy)
    second = read_lines(fd, first.end, max_lines=100, max_bytes=MiB, max_line=max_line,
                        resume_long=first.pending_long)
    monkeypatch.undo()
    assert (second.lines, second.too_long, second.end) == ([], [], 2)
    assert second.pending_long == (2, 2 + 3 * MiB + 100)
    assert reread(first.pending_long[1]) == 0

    append(b"zz\nb\n")
    reads.clear()
    monkeypatch.setattr(reader.os, "pread", spy)
    done = read_lines(fd, second.end, max_lines=100, max_bytes=MiB, max_line=max_line,
                      resume_long=second.pending_long)
    monkeypatch.undo()
    length = 3 * MiB + 102
    assert done.too_long == [(2, length, b"z" * HEAD)]
    assert done.pending_long is None
    assert done.end == 2 + length + 1  # past the long line (its bytes count against max_bytes)
    # Ended, what was scanned of it is scanned exactly once more (a writer may have cut it back and written
    # lines over it since), and its head read; past where it was noted, the scan goes on once.
    scanned_to = second.pending_long[1]
    assert reread(scanned_to) == scanned_to - 2 + HEAD
    after = read_lines(fd, done.end, max_lines=100, max_bytes=MiB, max_line=max_line)
    assert after.lines == [(2 + length + 1, b"b")]


def test_over_long_line_without_resume_is_still_reported_once(logfile):
    append, fd, _ = logfile
    append(b"x" * 50)
    first = read_lines(fd, 0, max_lines=100, max_bytes=MiB, max_line=10)
    assert first.pending_long == (0, 50)
    assert first.end == 0
    append(b"x\nok\n")
    done = read_lines(fd, 0, max_lines=100, max_bytes=MiB, max_line=10)  # no resume_long: rescans
    assert done.too_long == [(0, 51, b"x" * 51)]
    assert done.lines == [(52, b"ok")]


def assert_too_long(got, want):
    """Offsets and lengths exactly; the head starts with the line's first bytes.

    (Whether the head may run past a line shorter than HEAD is test_head_never_runs_past_the_line.)
    """
    assert [(off, length) for off, length, _ in got] == [(off, length) for off, length, _ in want]
    for (_, length, head), (_, _, want_head) in zip(got, want):
        assert head[:min(length, HEAD)] == want_head


def test_head_never_runs_past_the_line(logfile):
    append, fd, _ = logfile
    append(b"x" * 50)
    first = read_lines(fd, 0, max_lines=100, max_bytes=MiB, max_line=10)
    assert first.pending_long == (0, 50)
    append(b"\nok\n")
    done = read_lines(fd, 0, max_lines=100, max_bytes=MiB, max_line=10, resume_long=first.pending_long)
    assert done.too_long == [(0, 50, b"x" * 50)]  # actual head: b"x" * 50 + b"\nok\n"


# -- property ----------------------------------------------------------------------------------

_lines = st.lists(st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")), max_size=25)


@given(
    lines=_lines,
    torn_tail=st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
    max_lines=st.integers(min_value=1, max_value=5),
    max_bytes=st.integers(min_value=1, max_value=100),
    max_line=st.integers(min_value=0, max_value=40),
    block=st.sampled_from([None, 1, 3, 16, 64]),
)
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_chunked_writes_read_back_exactly_once(tmp_path_factory, lines, torn_tail, cuts, max_lines, max_bytes,
                                               max_line, block):
    content = b"".join(line + b"\n" for line in lines) + torn_tail
    points = sorted({0, len(content), *(c for c in cuts if c < len(content))})
    path = tmp_path_factory.mktemp("prop") / "events.jsonl"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    limits = {"max_lines": max_lines, "max_bytes": max_bytes, "max_line": max_line}
    # block=None: the real block size; otherwise a tiny one, so lines straddle many blocks.
    patch = mock.patch.object(reader, "BLOCK", block or BLOCK)
    try:
        with patch:
            state = Drained()
            for a, b in zip(points, points[1:]):
                with open(path, "ab") as f:
                    f.write(content[a:b])
                drain(fd, state, **limits)
                written = content[:b]
                want, want_long, end = expected(written, max_line)
                # After each write: exactly the complete lines so far, in order, nothing twice, nothing lost.
                assert state.lines == want
                assert_too_long(state.too_long, want_long)
                assert state.offset == end
                if state.pending is not None:
                    assert state.pending[0] == end
                    assert len(written) - end > max_line
    finally:
        os.close(fd)
    want, want_long, end = expected(content, max_line)
    assert state.lines == want
    assert_too_long(state.too_long, want_long)
    assert state.offset == len(content) - len(torn_tail)
