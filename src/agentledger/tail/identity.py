"""File identity that survives rename, copy and inode reuse.

A file is known by the hash of its first complete line (capped), not by its
path: a rotated file keeps its identity under its new name, a copy is recognised
as the same content, and a reused inode with new content is a new file. Where a
file was read to is known by what it held there: the last line read.
"""

from __future__ import annotations

import hashlib
import os

FINGERPRINT_BYTES = 4096


def fingerprint(fd: int) -> bytes | None:
    """Hash of the first line (up to FINGERPRINT_BYTES), or None while that line is incomplete."""
    head = os.pread(fd, FINGERPRINT_BYTES, 0)
    nl = head.find(b"\n")
    if nl >= 0:
        head = head[: nl + 1]
    elif len(head) < FINGERPRINT_BYTES:
        return None
    return hashlib.blake2b(head, digest_size=16).digest()


def hash_tail(data: bytes) -> bytes:
    """Hash of the last bytes read, which a checkpoint keeps."""
    return hashlib.blake2b(data, digest_size=8).digest()


def holds_checkpoint(fd: int, offset: int, tail_len: int, tail_hash: bytes | None) -> bool:
    """Whether the file still holds, just before ``offset``, the last line read to it: the ``tail_len``
    bytes that ``tail_hash`` is the hash of. A file only appended to since, or a faithful copy of it,
    does; one truncated and written again seldom does. A checkpoint that kept no tail (0: taken before
    tails were kept) goes by a line end there."""
    if tail_len:
        return hash_tail(os.pread(fd, tail_len, offset - tail_len)) == tail_hash
    return os.pread(fd, 1, offset - 1) == b"\n"
