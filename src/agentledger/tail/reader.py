"""Reading complete lines from a file descriptor at an offset.

Only newline-terminated lines are returned: a torn last line waits for the rest.
A line longer than ``max_line`` is reported by offset and length but never held
in memory whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from agentledger.defaults import HEAD_BYTES

BLOCK = 1 << 20


@dataclass(slots=True)
class ReadResult:
    lines: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, line without newline)
    too_long: list[tuple[int, int, bytes]] = field(default_factory=list)  # (offset, length, first bytes)
    end: int = 0  # offset after the last complete line consumed
    pending_long: tuple[int, int] | None = None  # (line offset, scanned up to) of an unfinished long line


def _find_newline(fd: int, start: int, limit: int | None) -> tuple[int | None, int]:
    """Scan from ``start`` for a newline without keeping the bytes; returns (newline offset, scanned to)."""
    pos = start
    while limit is None or pos < limit:
        n = BLOCK if limit is None else min(BLOCK, limit - pos)
        data = os.pread(fd, n, pos)
        if not data:
            return None, pos
        i = data.find(b"\n")
        if i >= 0:
            return pos + i, pos + i + 1
        pos += len(data)
    return None, pos


def _resume(fd: int, pos: int, scanned_to: int) -> tuple[int | None, int] | None:
    """Resume scanning the long line at ``pos``, noted without a newline up to ``scanned_to``: (newline
    offset, scanned to) as ``_find_newline`` gives them. None when the file no longer holds it as noted
    (cut back since, maybe written on), for the caller to read afresh from ``pos``. Before the line is
    rejected, what was scanned of it is scanned again: a rewrite leaves no other sign, and a note
    trusted blindly would reject the lines written over it as one."""
    if os.fstat(fd).st_size < scanned_to:
        return None
    nl, scanned = _find_newline(fd, scanned_to, None)
    if nl is not None and _find_newline(fd, pos, scanned_to) != (None, scanned_to):
        return None
    return nl, scanned


def read_lines(
    fd: int,
    offset: int,
    *,
    max_lines: int,
    max_bytes: int,
    max_line: int,
    resume_long: tuple[int, int] | None = None,
) -> ReadResult:
    """Complete lines from ``offset`` until ``max_lines`` or about ``max_bytes`` are gathered."""
    res = ReadResult(end=offset)
    pos = offset
    consumed = 0
    while len(res.lines) < max_lines and consumed < max_bytes:
        if resume_long is not None and resume_long[0] == pos:
            resumed, resume_long = _resume(fd, *resume_long), None
            if resumed is not None:
                after = _reject_long(fd, res, pos, *resumed)
                if after is None:
                    break
                consumed += after - pos
                pos = after
                continue
        data = os.pread(fd, max(BLOCK, min(max_bytes - consumed, 8 * BLOCK)), pos)
        if not data:
            break
        last = data.rfind(b"\n")
        if last >= 0:
            room = max_lines - len(res.lines)
            parts = data[:last].split(b"\n", room)
            if len(parts) > room:
                parts.pop()  # the unsplit rest of the block, read again next call
            line_off = pos
            for line in parts:
                if len(line) > max_line:
                    res.too_long.append((line_off, len(line), line[:HEAD_BYTES]))
                else:
                    res.lines.append((line_off, line))
                line_off += len(line) + 1
            consumed += line_off - pos
            pos = line_off
            continue
        # The line at pos is longer than one block: gather it up to max_line, else skip it.
        nl, scanned = _find_newline(fd, pos + len(data), pos + max_line + 1)
        if nl is not None:
            line = os.pread(fd, nl - pos, pos)
            if len(line) == nl - pos:
                res.lines.append((pos, line))
                consumed += nl + 1 - pos
                pos = nl + 1
                continue
            break  # the file shrank under us: the next scan sees the truncation
        if scanned <= pos + max_line:
            break  # end of file inside an ordinary-sized line: wait for the rest
        after = _reject_long(fd, res, pos, *_find_newline(fd, scanned, None))
        if after is None:
            break
        consumed += after - pos
        pos = after
    res.end = pos
    return res


def _reject_long(fd: int, res: ReadResult, pos: int, nl: int | None, scanned: int) -> int | None:
    """The line at ``pos``, longer than max_line, ends at ``nl``: rejected with its head, and the offset after
    it returned. None when its newline is not written yet: noted pending, scanned up to ``scanned``."""
    if nl is None:
        res.pending_long = (pos, scanned)
        return None
    res.too_long.append((pos, nl - pos, os.pread(fd, min(HEAD_BYTES, nl - pos), pos)))
    return nl + 1
