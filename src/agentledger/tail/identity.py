"""File identity that survives rename, copy and inode reuse.

A file is known by the hash of its first complete line (capped), not by its
path: a rotated file keeps its identity under its new name, a copy is recognised
as the same content, and a reused inode with new content is a new file.
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
