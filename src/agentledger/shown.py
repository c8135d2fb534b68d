"""Text from the logs as a terminal shows it: the logs are written by whatever the agents ran, so their text
may hold escape sequences that clear the screen, plant links or write the clipboard, or line breaks that
forge rows. Shown, each such character is an escape to read; what is printable is left as it is."""

from __future__ import annotations

import re

_WHITESPACE = re.compile(r"\s+")


def escaped(text: str) -> str:
    """``text`` with every character that is not printable (controls, format characters such as a
    right-to-left override, lone surrogates) written as its Python escape: ``\\n``, ``\\x1b``, ``\\u202e``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def printable(data: bytes) -> str:
    """Bytes shown safely: undecodable bytes and control characters as escapes."""
    return escaped(data.decode("utf-8", "backslashreplace"))


def _fold(match: re.Match) -> str:
    run = match.group()
    return " " if run.strip(" ") else run


def one_line(text: str) -> str:
    """A text as a cell of a table shows it: on one line, a run of whitespace that breaks it (a line
    break, a tab, another space than the ASCII one) as one space, and what is left unprintable escaped.
    Spaces stay as they are: they indent a tree's levels."""
    return escaped(_WHITESPACE.sub(_fold, text))
