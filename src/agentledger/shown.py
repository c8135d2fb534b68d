"""Text from the logs as a terminal shows it: the logs are written by whatever the agents ran, so their text
may hold escape sequences that clear the screen, plant links or write the clipboard, or line breaks that
forge rows. Shown, each such character is an escape to read; the rest of the text is left as it is."""

from __future__ import annotations

import re
import unicodedata

_WHITESPACE = re.compile(r"\s+")

# str.isprintable refuses three kinds of character that real names and messages need and that no terminal
# obeys: the zero-width joiner that makes one family of three emoji, the non-joiner Persian words are
# spelled with, and private-use characters (an icon font's glyphs in a name). Every other character it
# refuses stays an escape: a control, a bidi mark or override that reorders what the reader sees, a line
# separator, a lone surrogate, a code point not yet assigned; and the invisible ones no word needs in order
# to be drawn, which would only hide that two names differ: a byte-order mark, a soft hyphen (drawn by some
# terminals and not by others, so it shifts columns too), a zero-width space, the tag characters that
# carry text no one sees. Unassigned is as Python 3.11 knows it (Unicode 14): an emoji or ideograph assigned
# since (🫨) is one rich's width table, which is newer, measures two cells wide, and is drawn.
_JOINERS = frozenset("\u200c\u200d")


def _shown(c: str) -> bool:
    if c.isprintable() or c in _JOINERS:
        return True
    category = unicodedata.category(c)
    return category == "Co" or category == "Cn" and _wide(c)


def _wide(c: str) -> bool:
    from rich.cells import get_character_cell_size  # here: the gate hook shows nothing and starts without rich

    return get_character_cell_size(c) == 2


# The flags spelled with tag characters that Unicode recommends drawing (England, Scotland, Wales): a black
# flag, a region code in tags, a cancel tag. Any other tags stay escapes, for they could spell hidden text.
TAG_FLAGS = re.compile("\U0001f3f4(?:" + "|".join(
    "".join(chr(0xE0000 + ord(c)) for c in code) for code in ("gbeng", "gbsct", "gbwls")) + ")\U000e007f")


def _escaped_chars(text: str) -> str:
    return "".join(c if _shown(c) else c.encode("unicode_escape").decode("ascii") for c in text)


def escaped(text: str) -> str:
    """``text`` with every character a terminal could obey or that hides in it written as its Python
    escape: ``\\n``, ``\\x1b``, ``\\u202e``."""
    if text.isprintable():
        return text
    out, at = [], 0
    for flag in TAG_FLAGS.finditer(text):
        out += (_escaped_chars(text[at:flag.start()]), flag.group())
        at = flag.end()
    out.append(_escaped_chars(text[at:]))
    return "".join(out)


def printable(data: bytes, limit: int) -> str:
    """Bytes shown safely, in at most ``limit`` characters: undecodable bytes and control characters as
    escapes, cut between two of them, for a cut inside an escape (``\\x1`` of ``\\x1b``) would name another."""
    out, room = [], limit
    for c in data.decode("utf-8", "surrogateescape"):
        # An undecodable byte is a lone surrogate here (surrogateescape): shown as backslashreplace shows it.
        unit = f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else escaped(c)
        room -= len(unit)
        if room < 0:
            break
        out.append(unit)
    return "".join(out)


def _fold(match: re.Match) -> str:
    run = match.group()
    return " " if run.strip(" ") else run


def one_line(text: str) -> str:
    """A text as a cell of a table shows it: on one line, a run of whitespace that breaks it (a line
    break, a tab, another space than the ASCII one) as one space, and what is left unprintable escaped.
    Spaces stay as they are: they indent a tree's levels."""
    return escaped(_WHITESPACE.sub(_fold, text))


def starting(text: str, cells: int) -> str:
    """The longest start of ``text`` a terminal draws in at most ``cells`` cells: a wide character that would be
    cut in two is left out. Given a text reversed, the longest end (reversed)."""
    from rich.cells import get_character_cell_size

    used = 0
    for i, c in enumerate(text):
        used += get_character_cell_size(c)
        if used > cells:
            return text[:i]
    return text
