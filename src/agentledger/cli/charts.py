"""Bar charts in the terminal: one row per label, bars stacked by series, scaled to the width."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from rich.cells import cell_len, set_cell_size
from rich.console import Console, Group
from rich.text import Text

from agentledger import display
from agentledger.shown import one_line, starting

COLORS = ("blue", "dark_orange", "green", "red", "cyan", "yellow", "magenta", "bright_black")
_EIGHTHS = " ▏▎▍▌▋▊▉"


def _partial(cells: float) -> str:
    """A bar ``cells`` long, finished with an eighth-block so short bars still differ."""
    whole, rest = int(cells), round((cells - int(cells)) * 8)
    if rest == 8:
        whole, rest = whole + 1, 0
    return "█" * whole + (_EIGHTHS[rest] if rest else "")


Part = tuple[str, float] | tuple[str, float, int]


def _unpriced(part: Part) -> int:
    return part[2] if len(part) > 2 else 0


# The shortest bar worth drawing: below it the bars no longer compare, and the table says more.
_BAR_FLOOR = 4
# The shortest a label is cut to: a day keeps its month and day ("…10-01").
_LABEL_FLOOR = 6


def _tail(label: str, width: int) -> str:
    """``label`` in ``width`` cells of the terminal, its start given way: the labels charted (days, session
    keys, model names) run from what rows share to what tells them apart. A wide character that would be
    cut in two is left out, a space in its place."""
    if cell_len(label) <= width:
        return label
    rest = starting(label[::-1], width - 1)[::-1]
    return "…" + " " * (width - 1 - cell_len(rest)) + rest


def _label_floor(labels: list[str]) -> int:
    """The narrowest the labels can be cut to and still tell every row apart."""
    longest = max(map(cell_len, labels), default=0)
    distinct = len(set(labels))
    return next((width for width in range(min(_LABEL_FLOOR, longest), longest)
                 if len({_tail(label, width) for label in labels}) == distinct), longest)


def bars(rows: list[tuple[str, list[Part]]], fmt: Callable[[float], str], *, title: str,
         width: int) -> Group | None:
    """``rows`` are (label, [(series, value), ...]); series keep one color across rows, listed in a
    legend when there is more than one. A part may add, third, the unpriced calls its value leaves out:
    its row's total and its series' in the legend are marked by them (``display.cost``).

    A total is shown whole: the bars shorten first, then the labels lose their start; None when even
    then a row would not fit ``width``."""
    series: dict[str, list] = {}
    for _, parts in rows:
        for part in parts:
            acc = series.setdefault(part[0], [0.0, 0])
            acc[0] += part[1]
            acc[1] += _unpriced(part)
    ranked = sorted(series, key=lambda s: -series[s][0])
    color = {s: COLORS[min(i, len(COLORS) - 1)] for i, s in enumerate(ranked)}
    totals = [sum(part[1] for part in parts) for _, parts in rows]
    texts = [display.cost(total, sum(map(_unpriced, parts)), fmt) for (_, parts), total in zip(rows, totals)]
    value_w = max((len(t) for t in texts), default=0)
    # A label or a series is a session key, a model's or a tool's name: text from the logs.
    labels = [one_line(label) for label, _ in rows]
    both = width - value_w - 3  # what the label and the bar share, a space either side of the bar
    label_w = max(min(max(map(cell_len, labels), default=0), max(width // 3, both - _BAR_FLOOR)),
                  _label_floor(labels))
    room = both - label_w
    if room < _BAR_FLOOR:
        return None
    top = max(totals, default=0) or 1.0
    lines = [Text(title, style="bold")]
    for label, (_, parts), total, text in zip(labels, rows, totals, texts):
        line = Text(set_cell_size(_tail(label, label_w), label_w) + " ", no_wrap=True)
        if len(parts) == 1:
            line.append(_partial(room * parts[0][1] / top), style=color[parts[0][0]])
            drawn = len(_partial(room * parts[0][1] / top))
        else:
            # Segment ends are rounded on the running sum, so the bar's length is the total's.
            drawn, running = 0, 0.0
            for name, value, *_ in parts:
                running += value
                end = round(room * running / top)
                line.append("█" * (end - drawn), style=color[name])
                drawn = end
        line.append(" " * (room - drawn + 1) + text.rjust(value_w))
        lines.append(line)
    if len(ranked) > 1:
        legend = Text(no_wrap=False)
        for name in ranked:
            legend.append("■ ", style=color[name])
            legend.append(f"{one_line(name)} {display.cost(*series[name], fmt)}   ")
        lines.append(legend)
    return Group(*lines)


def filled_days(rows: list[dict], key: str = "day") -> list[str]:
    """Every day from the first to the last in ``rows``: a day without spend is a gap, not skipped."""
    if not rows:
        return []
    first, last = (dt.date.fromisoformat(rows[i][key]) for i in (0, -1))
    return [(first + dt.timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def print_bars(rows: list[tuple[str, list[Part]]], fmt: Callable[[float], str], title: str) -> bool:
    """Draw ``bars`` across the terminal's width; False, drawing nothing, when it is too narrow for them."""
    console = Console()
    chart = bars(rows, fmt, title=title, width=console.width)
    if chart is not None:
        console.print(chart)
    return chart is not None
