"""JSON text as producers write it: orjson's parse, and lone surrogate escapes read as U+FFFD.

A producer in JavaScript holds text as UTF-16: cutting a preview inside an emoji (``String.slice``)
leaves half a surrogate pair, which ``JSON.stringify`` writes as an escape of its own (``"\\ud83c"``).
orjson refuses such a line whole, so an event would be lost for one half character of its preview.
Half a character is no character: it stands as U+FFFD, and the ledger's text stays valid UTF-8.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

# A token at a time, left to right, so that an escape is told from the text after an escaped
# backslash (``\\ud83c`` holds no escape): an escaped backslash, a whole surrogate pair, or a
# surrogate escape alone. Exactly \u and hex digits, in either case: ``\U`` is no JSON escape, and
# must stay as refused as it was.
_TOKEN = re.compile(
    rb"\\\\"
    rb"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    rb"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)

_LONE_LENGTH = len(b"\\ud83c")
# An escape as long as the one it replaces: the columns orjson names in an error stay those of the line.
_REPLACEMENT = b"\\ufffd"


def _mend(found: re.Match[bytes]) -> bytes:
    token = found.group()
    return _REPLACEMENT if len(token) == _LONE_LENGTH else token


def loads(data: bytes | str) -> Any:
    """``orjson.loads``, except that a lone surrogate escape is read as U+FFFD; anything else orjson
    refuses raises its ``JSONDecodeError`` as it would."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # Only once orjson refused: the lines that parse, nearly all of them, pay nothing for this.
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        mended = _TOKEN.sub(_mend, raw)
        if mended == raw:
            raise
    return orjson.loads(mended)
