"""Field coercions shared by decoders: producers are sloppy, the ledger is not."""

from __future__ import annotations

import hashlib

MISSING = "unknown"
HEAD_BYTES = 200


def text(value: object) -> str | None:
    """A non-empty string, with the producers' "unknown" placeholder read as missing."""
    # Exact type checks: this runs several times per event, and str subclasses never come from JSON.
    if value.__class__ is str and value and value != MISSING:
        return value
    return None


def integer(value: object) -> int | None:
    # bool is an int subclass; a flag is never a count.
    if value.__class__ is int:
        return value if -(2**63) <= value < 2**63 else None
    if isinstance(value, float) and value == value and abs(value) < 2**63:
        return int(value)
    return None


# No single call uses a trillion tokens; anything larger is garbage, and summing it
# would overflow the ledger's 64-bit integers.
MAX_TOKENS = 10**12


def count(value: object) -> int:
    n = value if value.__class__ is int else integer(value)
    return n if n is not None and 0 < n <= MAX_TOKENS else 0


def flag(value: object) -> bool:
    return value is True


def line_id(line: bytes) -> int:
    """A stable signed 64-bit id for a line that carries no usable id of its own."""
    return int.from_bytes(hashlib.blake2b(line, digest_size=8).digest(), "big", signed=True)


def agent_from_key(session_key: str | None) -> str | None:
    """Session keys look like ``agent:<agentId>:<rest>``."""
    if session_key and session_key.startswith("agent:"):
        agent, sep, _ = session_key[6:].partition(":")
        if sep and agent:
            return agent
    return None
