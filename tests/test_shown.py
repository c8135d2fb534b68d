"""How text from the logs is shown on a terminal: printable text as it is, anything else told by an escape."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentledger.shown import one_line


@given(st.text())
def test_no_control_character_nor_line_break_is_shown(text):
    # isprintable: no control, format or private character, no separator but the ASCII space.
    assert one_line(text).isprintable()


@given(st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")).filter(str.isprintable)))
def test_printable_text_is_shown_as_it_is(text):
    assert one_line(text) == text


def test_a_line_break_is_one_space_and_a_control_its_escape():
    assert one_line("a\n  b\t\x85c\u2028d") == "a b c d"
    assert one_line("  x  y ") == "  x  y "  # a tree's indent, and the text's own spacing
    assert one_line("\x1b[2J\x9b\x00\u202e\U000e0001\udc80") == r"\x1b[2J\x9b\x00\u202e\U000e0001\udc80"
