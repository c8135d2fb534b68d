"""Source decoders: pure functions from one log line to a fact or a reject.

Each format module exposes ``decode(line, offset) -> Fact | Reject``. Decoding
never touches the database, so it can be tested and benchmarked on its own.
"""

from __future__ import annotations

from collections.abc import Callable

from agentledger.facts import Fact, Reject
from agentledger.sources import oc_telemetry

Decoder = Callable[[bytes, int], "Fact | Reject"]

DECODERS: dict[str, Decoder] = {
    "oc-telemetry": oc_telemetry.decode,
}

FORMATS = tuple(DECODERS)


def decoder_for(fmt: str) -> Decoder:
    try:
        return DECODERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}") from None
