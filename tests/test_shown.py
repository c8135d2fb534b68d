"""How text from the logs is shown on a terminal: printable text as it is, anything else told by an escape."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st
from rich.cells import get_character_cell_size

from agentledger.shown import TAG_FLAGS, one_line, printable

# What text may need to be drawn though str.isprintable refuses it: the joiners of emoji sequences and of
# Persian words, and private-use characters (icon fonts).
_JOINERS = "\u200c\u200d"
_DRAWN = st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Cn", "Zl", "Zp")).filter(
    lambda c: c.isprintable() or unicodedata.category(c) == "Co") | st.sampled_from(_JOINERS)


@given(st.text(st.characters() | st.characters(categories=["Cs"])))
def test_no_control_character_nor_line_break_is_shown(text):
    # No control, no format character but the two joiners (no bidi mark, no tag), no separator but the
    # ASCII space, no lone surrogate, nothing unassigned but the emoji and ideographs newer than Python's tables
    # (the three flags spelled in tags apart).
    shown = TAG_FLAGS.sub("", one_line(text))
    assert not [c for c in shown if unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")
                or unicodedata.category(c) == "Cn" and get_character_cell_size(c) != 2
                or unicodedata.category(c) == "Cf" and c not in _JOINERS or c.isspace() and c != " "], shown


@given(st.text(_DRAWN))
def test_printable_text_is_shown_as_it_is(text):
    assert one_line(text) == text


def test_a_line_break_is_one_space_and_a_control_its_escape():
    assert one_line("a\n  b\t\x85c\u2028d") == "a b c d"
    assert one_line("  x  y ") == "  x  y "  # a tree's indent, and the text's own spacing
    assert one_line("\x1b[2J\x9b\x00\u202e\U000e0001\udc80") == r"\x1b[2J\x9b\x00\u202e\U000e0001\udc80"


def test_emoji_sequences_persian_and_icons_are_drawn_and_what_would_mislead_the_reader_is_escaped():
    family, icons = "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\ue0a0\U000f0001"
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    assert one_line(f"{family} {persian} \u2764\ufe0f {icons}") == f"{family} {persian} \u2764\ufe0f {icons}"
    # Bidi marks, isolates and overrides reorder what is read; a byte-order mark, a soft hyphen, a zero-width
    # space and tag characters hide that two names differ; an unassigned code point may be any of those later.
    hidden = "\u202a\u202d\u2066\u2069\u200e\u200f\u061c\ufeff\u00ad\u200b\U000e0041\U000e007f\U0010fffe\U000e0080"
    assert one_line(f"{family}{hidden}") == family + hidden.encode("unicode_escape").decode()


def test_emoji_and_ideographs_newer_than_pythons_tables_are_drawn():
    # Unassigned to Python 3.11 (Unicode 14): a shaking face and a harp (Unicode 15, 16), an ideograph of
    # CJK extension H. A code point still unassigned and not reserved as wide stays an escape.
    newer = "\U0001fae8\U0001fa89\U00031350"
    assert one_line(f"ok {newer}") == f"ok {newer}"
    assert one_line("\U0001faff\U0001fbff") == r"\U0001faff\U0001fbff"


def test_the_flags_spelled_in_tags_are_drawn_and_other_tags_stay_escapes():
    def tags(code: str) -> str:
        return "".join(chr(0xE0000 + ord(c)) for c in code) + "\U000e007f"

    wales, scotland = "\U0001f3f4" + tags("gbwls"), "\U0001f3f4" + tags("gbsct")
    assert one_line(f"team {wales} {scotland}!") == f"team {wales} {scotland}!"
    # Tags that spell no recommended flag could hide text after a flag: two such names would look alike.
    secret = "\U0001f3f4" + tags("secret")
    assert one_line(secret) == "\U0001f3f4" + tags("secret").encode("unicode_escape").decode()
    assert one_line(f"a{tags('gbeng')}") == "a" + tags("gbeng").encode("unicode_escape").decode()


def test_a_rejected_lines_head_is_cut_between_escapes_never_inside_one():
    # Cut inside, the ESC of a clear-screen sequence at the edge read as "\\x1": another character.
    head = b"x" * 117 + b"\x1b[2J"
    assert printable(head, 120) == "x" * 117
    assert printable(b"ab\xff\xc3\xa9\x1b", 120) == r"ab\xffé\x1b"


# What is shown of bytes holding no backslash, one unit at a time: an escape, or a character drawn as it is.
_UNITS = re.compile(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|\\[nrt]|.", re.S)


@given(st.binary(max_size=60).filter(lambda data: b"\\" not in data), st.integers(min_value=0, max_value=80))
def test_a_head_cut_short_is_whole_units_of_the_whole_head_as_shown(data, limit):
    whole, cut = printable(data, 10**6), printable(data, limit)
    units = _UNITS.findall(whole)
    assert "".join(units) == whole
    kept = 0
    while kept < len(units) and len("".join(units[:kept + 1])) <= limit:
        kept += 1
    assert cut == "".join(units[:kept])  # as many whole units as fit, never part of one
