"""Source decoders: pure functions from one log line to facts or a reject.

Each format is opened per file: ``opener(path, lookup)`` returns the decoder of that
file's lines, ``decode(line, offset) -> Fact | Reject | list[Fact]``. Transcript formats
learn who a file belongs to from its path (and side files), and ask ``lookup`` which run
a session is in when a read resumes mid-file; telemetry learns from its path only the agent
whose folder it is in (see Fact.agent_folder). Decoding itself never writes anything. A
decoder that learns its file's session key from files beside it says so as ``session_id``
and ``session_key``: the ledger keeps that session under that key, unless ``yields_to`` the
key it holds (see Pipeline._keys_due).
"""

from __future__ import annotations

from collections.abc import Callable

from agentledger.defaults import FORMATS
from agentledger.facts import Fact, Reject
from agentledger.sources import claude_code, oc_telemetry, oc_transcript
from agentledger.sources.common import RunLookup

Decoder = Callable[[bytes, int], "Fact | Reject | list[Fact]"]
Opener = Callable[[str, RunLookup], Decoder]


OPENERS: dict[str, Opener] = {
    "oc-telemetry": oc_telemetry.opener,
    "oc-transcript": oc_transcript.FileDecoder,
    "claude-code": claude_code.FileDecoder,
}
# The formats whose decoders never ask the ledger.
_ASKING_NOTHING = frozenset({"oc-telemetry"})


# What a format's decoder of a path learns its session's key from (see oc_transcript.key_inputs); the
# other formats' decoders claim no keys.
KEY_INPUTS: dict[str, Callable[[str], object]] = {"oc-transcript": oc_transcript.key_inputs}

# What a format's decoders read beside the files they decode, and could not read at their last look (path →
# the system's reason): the keys they give sessions may be wrong until it can be.
UNREAD_BESIDE: dict[str, Callable[[], dict[str, str]]] = {"oc-transcript": oc_transcript.unread_indexes}


# What a format's decoders skip unread, known by a line's first bytes (HEAD_BYTES of them, as a line too
# long to read whole is known by, see tail/reader.py): such a line is skipped however long, not rejected.
SKIPPED_HEADS: dict[str, Callable[[bytes], bool]] = {"claude-code": claude_code.skipped_head}


def asks_ledger(fmt: str) -> bool:
    """Whether the format's decoders may ask the ledger while decoding, so a file's facts must be
    written before the next file is decoded."""
    return fmt not in _ASKING_NOTHING


def opener_for(fmt: str) -> Opener:
    try:
        return OPENERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}") from None
