"""Terminal charts: bars that add up, the table when piped, and the real thing in a terminal."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner
from conftest import REPO, cli_env, ingest
from hypothesis import given
from hypothesis import strategies as st
from logwriter import LogDir, event
from rich.cells import cell_len
from terminal import Terminal, needs_tmux, on_a_terminal

from agentledger import display
from agentledger.cli import cli
from agentledger.cli.charts import bars

values = st.floats(0, 1e6, allow_nan=False)


@given(rows=st.lists(st.lists(st.tuples(st.sampled_from("abcd"), values), min_size=2, max_size=4), min_size=1,
                     max_size=12), width=st.integers(30, 200))
def test_stacked_bars_are_as_long_as_their_totals(rows, width):
    chart = bars([(f"row{i}", parts) for i, parts in enumerate(rows)], lambda v: f"{v:.0f}", title="t", width=width)
    lines = [t.plain for t in chart.renderables[1:len(rows) + 1]]
    totals = [sum(v for _, v in parts) for parts in rows]
    drawn = [line.count("█") for line in lines]
    top = max(totals)
    longest = max(drawn)
    assert all(len(line) <= width for line in lines)
    for total, cells in zip(totals, drawn):
        if top:
            assert abs(cells - longest * total / top) <= 1  # proportional, to the cell
        else:
            assert cells == 0


@given(rows=st.lists(st.tuples(st.text("ab-:0", max_size=30), values), min_size=1, max_size=8),
       width=st.integers(1, 120))
def test_a_chart_shows_each_total_whole_and_tells_its_rows_apart_or_is_not_drawn(rows, width):
    chart = bars([(label, [("cost", value)]) for label, value in rows], lambda v: f"${v:,.2f}", title="t",
                 width=width)
    if chart is None:
        return
    lines = [t.plain for t in chart.renderables[1:len(rows) + 1]]
    assert all(len(line) < width for line in lines), lines
    for (label, value), line in zip(rows, lines):
        assert line.endswith(f" ${value:,.2f}"), (line, value)
    assert len({line.split(" ")[0] for line in lines}) == len({label for label, _ in rows}), lines


def test_a_chart_shows_labels_and_series_from_the_logs_on_one_line_their_controls_escaped():
    chart = bars([("k\x1b[2J\nz", [("m\x1b]52;c;eA==\x07", 1.0), ("n\u202e", 2.0)])], lambda v: f"{v:.0f}",
                 title="t", width=80)
    title, row, legend = (t.plain for t in chart.renderables)
    assert row.startswith(r"k\x1b[2J z ") and row.endswith(" 3")
    assert legend.split("   ") == [r"■ n\u202e 2", r"■ m\x1b]52;c;eA==\x07 1", ""]


# Two cells a character: a tool's name in Chinese, a family of three emoji (one grapheme of two cells).
_WIDE = ("\u8bfb\u53d6\u6587\u4ef6", "\U0001f468\u200d\U0001f469\u200d\U0001f467 family", "ls", "mixed\u5de5\u5177x")


@pytest.mark.parametrize("width", [80, 40])
def test_a_chart_s_bars_and_totals_line_up_after_wide_labels(width):
    # Padded by characters, a CJK label pushed its bar and its total further right than the others'.
    chart = bars([(label, [("calls", n + 1.0)]) for n, label in enumerate(_WIDE)], lambda v: f"{v:.0f}", title="t",
                 width=width)
    lines = [t.plain for t in chart.renderables[1:len(_WIDE) + 1]]
    assert len({cell_len(line[:line.index("█")]) for line in lines}) == 1, lines
    assert len({cell_len(line) for line in lines}) == 1 and cell_len(lines[0]) < width, lines
    assert [line.rstrip()[-1] for line in lines] == ["1", "2", "3", "4"]


def test_a_wide_label_cut_to_fit_gives_way_whole_characters_and_still_tells_rows_apart():
    labels = ["\u8bfb" * 19 + end for end in ("\u7532", "\u4e59")]  # 40 cells each, told apart by the last
    chart = bars([(label, [("calls", 1.0)]) for label in labels], lambda v: f"{v:.0f}", title="t", width=30)
    lines = [t.plain for t in chart.renderables[1:3]]
    shown = [line[:line.index("█")].rstrip() for line in lines]
    # Cut at an odd cell, half of a character is a space rather than a character a cell too wide.
    assert [label[:2] for label in shown] == ["… ", "… "] and [label[-1] for label in shown] == ["\u7532", "\u4e59"]
    assert len({cell_len(line[:line.index("█")]) for line in lines}) == 1, lines
    assert all(cell_len(line) < 30 for line in lines), lines


@pytest.fixture(scope="module")
def corpus_db(oc_corpus, tmp_path_factory):
    db = tmp_path_factory.mktemp("charts") / "ledger.db"
    ingest(db, oc_corpus)
    return db


def _run(db, *args):
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


@pytest.mark.parametrize("args", [["costs", "--group-by", "day"], ["costs", "--group-by", "tool"]])
def test_a_chart_is_the_table_when_stdout_is_not_a_terminal(corpus_db, args):
    table = _run(corpus_db, *args)
    charted = _run(corpus_db, *args, "--chart")
    assert charted.exit_code == 0
    assert charted.output == table.output


def test_usage_s_chart_piped_is_its_tokens_per_day_as_a_table(corpus_db, oc_expected):
    """The totals, then what the chart would draw: each day's tokens by kind."""
    totals = _run(corpus_db, "usage").output
    charted = _run(corpus_db, "usage", "--chart").output
    assert charted.startswith(totals)
    header, *rows = charted[len(totals):].strip().splitlines()
    assert header.split() == ["day", "input", "output", "cache", "read", "cache", "write"]
    by_day = {row.split()[0]: [int(v.replace(",", "")) for v in row.split()[1:]] for row in rows}
    assert {day: sum(tokens) for day, tokens in by_day.items()} == \
        {day: want["total"] for day, want in oc_expected["per_day"].items()}


def test_chart_with_json_is_a_bad_flag(corpus_db):
    ran = subprocess.run([sys.executable, "-m", "agentledger", "costs", "--group-by", "day", "--chart", "--json"],
                         cwd=REPO, env=cli_env(corpus_db), capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 2
    assert len(ran.stderr.strip().splitlines()) == 1 and "--chart" in ran.stderr


@needs_tmux
def test_charts_in_a_real_terminal(corpus_db, oc_expected, tmp_path):
    env = cli_env(corpus_db)
    term = Terminal(tmp_path, ["costs", "--group-by", "day", "--chart"], env, lines=20, hold=True)
    try:
        screen = term.shows("2026-10-01", "2026-10-05", "claude-sonnet-4-5")
        assert term.exit_code() == 0
        assert f"total {display.usd(oc_expected['totals']['cost_usd'])}" in screen
        rows = {line.split()[0]: line for line in screen.splitlines() if line.startswith("2026-10-0")}
        for day, want in oc_expected["per_day"].items():
            assert rows[day].rstrip().endswith(display.usd(want["cost_usd"]))
        # The busiest day has the longest bar, which fills the 80 columns.
        busiest = max(oc_expected["per_day"], key=lambda d: oc_expected["per_day"][d]["cost_usd"])
        assert rows[busiest].count("█") == max(line.count("█") for line in rows.values())
        assert max(len(line) for line in screen.splitlines()) <= 80
    finally:
        term.close()
    (tmp_path / "usage").mkdir()
    term = Terminal(tmp_path / "usage", ["usage", "--chart"], env, lines=40, hold=True)
    try:
        screen = term.shows("tokens per day", "cache read")
        assert f"{oc_expected['totals']['tokens']['total']:,}" in screen
    finally:
        term.close()


@needs_tmux
def test_a_cost_chart_marks_what_leaves_out_unpriced_calls(tmp_path):
    logs = LogDir(tmp_path / "logs")
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                      "delta": {"input": 900, "output": 100, "cacheRead": 0, "cacheWrite": 0,
                                                "total": 1000}, "costUsd": 0.5}))
    logs.append(event(2, "llm.call", {"callIndex": 2, "provider": "acme", "model": "acme-unknown-9",
                                      "delta": {"input": 10, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                                                "total": 10}}))
    db = tmp_path / "ledger.db"
    ingest(db, logs.root)
    note = "* leaves out model calls of unknown cost"
    (tmp_path / "day").mkdir()
    term = Terminal(tmp_path / "day", ["costs", "--group-by", "day", "--chart"], cli_env(db), hold=True)
    try:
        screen = term.shows("total ≥$0.5000*", note)
        (day,) = [line for line in screen.splitlines() if line.startswith("2026-")]
        assert day.rstrip().endswith("≥$0.5000*")
        assert "acme-unknown-9 —*" in screen and "claude-sonnet-4-5 $0.5000" in screen  # the legend
    finally:
        term.close()
    (tmp_path / "model").mkdir()
    term = Terminal(tmp_path / "model", ["costs", "--group-by", "model", "--chart"], cli_env(db), hold=True)
    try:
        screen = term.shows("total ≥$0.5000*", note)
        rows = {line.split()[0]: line.split()[-1] for line in screen.splitlines()
                if line.startswith(("acme", "claude"))}
        assert rows == {"acme-unknown-9": "—*", "claude-sonnet-4-5": "$0.5000"}
    finally:
        term.close()


_WIDTHS = (12, 16, 20, 24, 30, 80)


def test_a_terminal_of_any_width_charts_each_day_s_cost_whole_or_shows_the_table(corpus_db, oc_expected):
    # At 20 columns $4.88 printed as "$4.8" and $0.5455 as "$0.545", at 16 "$0" and nothing: rich cropped
    # a line made wider than the terminal; every day was "2026-10-", one like another.
    want = {day: display.usd(v["cost_usd"]) for day, v in oc_expected["per_day"].items()}
    table = _run(corpus_db, "costs", "--group-by", "day").output
    args = ["costs", "--group-by", "day", "--chart"]
    with ThreadPoolExecutor(3) as pool:
        shown = dict(zip(_WIDTHS, pool.map(lambda w: on_a_terminal(args, cli_env(corpus_db), w), _WIDTHS)))
    for width, screen in shown.items():
        if "spend per day" not in screen:  # too narrow for bars: the table, which names what it leaves out
            assert "too narrow for" in screen or screen.split() == table.split(), (width, screen)
            continue
        rows = [line for line in screen.splitlines() if line.startswith(("2026-", "…"))]
        assert len(rows) == len(want) and all(len(row) <= width for row in rows), (width, screen)
        for day, cost in want.items():
            (row,) = [row for row in rows if day.endswith(row.split()[0].lstrip("…"))]
            assert row.split()[-1] == cost, (width, day, screen)
    assert "spend per day" in shown[20] and "spend per day" not in shown[12]
