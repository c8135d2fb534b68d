"""Behaviour of ``fingerprint``: a file is known by its first line, whatever its name or inode."""

from __future__ import annotations

import os
import shutil

import pytest

from agentledger.tail.identity import FINGERPRINT_BYTES, fingerprint

FIRST = b'{"id":"evt_0011223344556677","ts":1760000000000,"kind":"session.start"}\n'


@pytest.fixture
def open_fd(tmp_path):
    fds = []

    def _open(path):
        fd = os.open(path, os.O_RDONLY)
        fds.append(fd)
        return fd

    yield _open
    for fd in fds:
        os.close(fd)


def append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_empty_file_has_no_identity(tmp_path, open_fd):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"")
    assert fingerprint(open_fd(path)) is None


@pytest.mark.parametrize("size", [1, 100, FINGERPRINT_BYTES - 1])
def test_none_while_short_first_line_is_incomplete(tmp_path, open_fd, size):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"x" * size)
    fd = open_fd(path)
    assert fingerprint(fd) is None
    append(path, b"\n")
    assert fingerprint(fd) is not None


def test_identity_appears_once_first_line_completes_and_stays_while_file_grows(tmp_path, open_fd):
    path = tmp_path / "events.jsonl"
    path.write_bytes(FIRST[:20])
    fd = open_fd(path)
    assert fingerprint(fd) is None
    append(path, FIRST[20:])
    fp = fingerprint(fd)
    assert fp is not None
    append(path, b'{"kind":"run.start"}\n{"kind":"run.e')
    assert fingerprint(fd) == fp
    append(path, b"x" * 3 * FINGERPRINT_BYTES + b"\n")
    assert fingerprint(fd) == fp


def test_different_first_lines_give_different_identities(tmp_path, open_fd):
    fps = set()
    for i in range(50):
        path = tmp_path / f"f{i}.jsonl"
        path.write_bytes(FIRST.replace(b"1760000000000", b"%d" % (1760000000000 + i)) + b"same second line\n")
        fps.add(fingerprint(open_fd(path)))
    assert None not in fps
    assert len(fps) == 50


def test_only_the_first_line_matters(tmp_path, open_fd):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(FIRST + b"one\n")
    b.write_bytes(FIRST + b"another, longer second line\nand a third\n")
    assert fingerprint(open_fd(a)) == fingerprint(open_fd(b))


def test_prefix_line_is_a_different_file(tmp_path, open_fd):
    # "abc\n..." and "abcd\n..." are different first lines, though one is a prefix of the other.
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b"abc\nd\n")
    b.write_bytes(b"abcd\n")
    assert fingerprint(open_fd(a)) != fingerprint(open_fd(b))


def test_copy_and_rename_keep_identity(tmp_path, open_fd):
    path = tmp_path / "events.jsonl"
    path.write_bytes(FIRST + b'{"kind":"run.start"}\n')
    fp = fingerprint(open_fd(path))
    copy = tmp_path / "copy.jsonl"
    shutil.copyfile(path, copy)
    assert os.stat(copy).st_ino != os.stat(path).st_ino
    assert fingerprint(open_fd(copy)) == fp
    rotated = tmp_path / "events.2026-01-01.jsonl"
    os.rename(path, rotated)
    assert fingerprint(open_fd(rotated)) == fp


def test_replaced_content_on_the_same_path_is_a_new_identity(tmp_path, open_fd):
    path = tmp_path / "events.jsonl"
    path.write_bytes(FIRST)
    fp = fingerprint(open_fd(path))
    with open(path, "r+b") as f:  # same inode, truncated and rewritten
        f.truncate(0)
        f.write(FIRST.replace(b"0011", b"ffff"))
    assert fingerprint(open_fd(path)) not in (None, fp)


def test_long_first_line_is_defined_before_its_newline(tmp_path, open_fd):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"y" * (FINGERPRINT_BYTES + 500))
    fd = open_fd(path)
    fp = fingerprint(fd)
    assert fp is not None
    append(path, b"y" * 10_000)
    assert fingerprint(fd) == fp
    append(path, b"\nnext\n")
    assert fingerprint(fd) == fp


def test_first_line_of_exactly_the_cap_is_defined_and_stable(tmp_path, open_fd):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"z" * FINGERPRINT_BYTES)
    fd = open_fd(path)
    fp = fingerprint(fd)
    assert fp is not None
    append(path, b"\n")
    assert fingerprint(fd) == fp


def test_long_first_lines_differing_early_are_different(tmp_path, open_fd):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b"a" + b"y" * (2 * FINGERPRINT_BYTES))
    b.write_bytes(b"b" + b"y" * (2 * FINGERPRINT_BYTES))
    assert fingerprint(open_fd(a)) != fingerprint(open_fd(b))
