"""Rendering results: rich tables on a terminal, plain text when piped, JSON for scripts."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterable

import click
import orjson

from agentledger import display


def flat(row: dict, prefix: str = "") -> dict:
    """One cell holds one value: a nested object becomes columns named by its path (``family_cost_usd``),
    a list its JSON text."""
    out: dict = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}_"))
        elif isinstance(value, (list, tuple)):
            out[prefix + key] = orjson.dumps(value).decode()
        else:
            out[prefix + key] = value
    return out


def emit_csv(rows: list[dict], fields: Iterable[str]) -> None:
    """``fields``: the columns a row of this answer has (as ``flat`` names them), the header when there is no
    row: a script reads the same header from an empty answer as from any other."""
    out = io.StringIO()
    flat_rows = [flat(row) for row in rows]
    header = dict.fromkeys(k for row in flat_rows for k in row) if flat_rows else fields
    writer = csv.DictWriter(out, fieldnames=list(header), lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat_rows)
    click.echo(out.getvalue(), nl=False)


def emit_json(value: object) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 100 else f"{value:,.2f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    # One line a row: an error text may be a whole pretty-printed JSON object. Leading spaces stay: they
    # indent a tree's levels.
    text = str(value)
    return text[:len(text) - len(text.lstrip(" "))] + " ".join(text.split())


def cost_cell(cost: float | None, unpriced: int | None) -> str:
    """A cost as a table shows it: marked when it leaves out unpriced calls, a dash when nothing of it is known."""
    return display.cost(cost, unpriced, _cell)


def _is_cost(key: str) -> bool:
    return key == "cost_usd" or key.endswith("_cost_usd")


def _row_cells(row: dict, columns: list[tuple[str, str]]) -> list[str]:
    # Each cost is marked by the unpriced calls of its own scope: cost_usd by unpriced_calls,
    # own_cost_usd by own_unpriced_calls…
    return [cost_cell(row.get(k), row.get(k.removesuffix("cost_usd") + "unpriced_calls")) if _is_cost(k)
            else _cell(row.get(k)) for k, _ in columns]


def emit_table(rows: list[dict], columns: list[tuple[str, str]], *, title: str | None = None,
               note: bool = True) -> None:
    """``columns`` is a list of (key, header); a row's ``cost_usd`` is marked by its ``unpriced_calls``,
    with the footnote under the table unless ``note`` is false (the caller gives it once for several)."""
    cells = [_row_cells(row, columns) for row in rows]
    if sys.stdout.isatty():
        _print_fitted(cells, columns, [_is_number(rows, key) for key, _ in columns], title)
    else:
        cells = [[h for _, h in columns]] + cells
        widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
        for r in cells:
            click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if note and any(k == "cost_usd" for k, _ in columns):
        note_unpriced(sum(row.get("unpriced_calls") or 0 for row in rows))


def _is_number(rows: list[dict], key: str) -> bool:
    # A cost column is one even where every cost is unknown; elsewhere a dash stands for a missing number.
    return _is_cost(key) or any(isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool)
                                    for row in rows)


# The narrowest a text column is squeezed to (with an ellipsis) before columns are left out whole.
_TEXT_FLOOR = 10
# The narrowest the first column, which wraps, gives way to before a number's column is left out: at 5
# a session key is still legible as a few lines.
_WRAP_FLOOR = 5


def _print_fitted(cells: list[list[str]], columns: list[tuple[str, str]], numbers: list[bool],
                  title: str | None) -> None:
    """A table that fits the terminal: numbers keep their width, text gives way first. Text squeezed
    too narrow, the borders go (the piped layout); still too wide, text columns other than the first
    are left out from the right; then the first narrows further, the columns close up to a space apart,
    and numbers' columns are left out from the right, each said to be: a number is shown whole or not
    at all."""
    from rich import box
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    console = Console()
    # A header may fold at its spaces: a number's column needs its longest word, or its widest number.
    natural = [max([cell_len(w) for w in (header.split() if numbers[i] else [header])] +
                   [cell_len(r[i]) for r in cells]) for i, (_, header) in enumerate(columns)]
    kept = list(range(len(columns)))
    gap = 2  # between columns without borders

    def room(boxed: bool) -> int:
        """What the kept text columns have between the borders and the numbers."""
        borders = 3 * len(kept) + 1 if boxed else gap * (len(kept) - 1)
        return console.width - borders - sum(natural[i] for i in kept if numbers[i])

    def fits(boxed: bool, first_floor: int = _TEXT_FLOOR) -> bool:
        floors = (min(natural[i], first_floor if i == 0 else _TEXT_FLOOR) for i in kept if not numbers[i])
        return sum(floors) <= room(boxed)

    def leave_out(numeric: bool, first_floor: int) -> None:
        droppable = [i for i in kept[1:] if numbers[i] == numeric]
        while not fits(False, first_floor) and droppable:
            kept.remove(droppable.pop())

    boxed = fits(True)
    if not boxed:
        leave_out(False, _TEXT_FLOOR)
        if not fits(False, _WRAP_FLOOR):
            gap = 1  # numbers are right-aligned under their headers: a space still tells them apart
        leave_out(True, _WRAP_FLOOR)
    widths = _share([natural[i] for i in kept if not numbers[i]], room(boxed))
    # Left with too little even for the first column (a few characters, or a number of its own), rich
    # would cut it: the lines run past the terminal's edge instead.
    console.width += max(0, sum(widths) - room(boxed))
    # A space each side of a cell, but one only on its left once the gap is closed up.
    table = Table(title=title, box=box.HEAVY_HEAD if boxed else None, pad_edge=boxed, padding=(0, gap - 1, 0, 1))
    for i in kept:
        table.add_column(columns[i][1], justify="right" if numbers[i] else "left",
                         overflow="fold" if numbers[i] or i == 0 else "ellipsis",
                         width=natural[i] if numbers[i] else widths.pop(0))
    for r in cells:
        table.add_row(*(r[i] for i in kept))
    console.print(table)
    left_out = [header for i, (_, header) in enumerate(columns) if i not in kept]
    if left_out:
        click.echo(f"(too narrow for {', '.join(left_out)}: a wider terminal or --json shows them)")


def _share(wanted: list[int], room: int) -> list[int]:
    """Widths for columns that want ``wanted`` within ``room``: the widest are cut to one level, as
    high as fits, so a short column keeps all of its text; what is left over goes to the first."""
    level = max(wanted, default=0)
    while level > 1 and sum(min(w, level) for w in wanted) > room:
        level -= 1
    widths = [min(w, level) for w in wanted]
    if widths and widths[0] < wanted[0]:
        widths[0] += max(0, room - sum(widths))
    return widths


def note_unpriced(unpriced: int) -> None:
    """The footnote to costs marked by ``cost_cell``."""
    if unpriced:
        click.echo(display.UNPRICED_NOTE)


def emit_pairs(pairs: list[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        click.echo(f"{key.ljust(width)}  {_cell(value)}")
