"""Rendering results: rich tables on a terminal, plain text when piped, JSON for scripts."""

from __future__ import annotations

import csv
import io
import itertools
import pickle
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator

import click
import orjson

from agentledger import display
from agentledger.shown import one_line


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


# How a text cell starts that a spreadsheet opening the file reads as a formula: a log's
# "=HYPERLINK(...)" would be one.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: object) -> object:
    """A formula's start is kept text by a quote before it. Counted after the quotes a text already starts
    with, so that taking one quote off a cell of quotes then such a start gives back the logs' text exactly.
    Text only: a number, -1.5 as much as 3, is written as the number it is. A boolean is written as JSON
    writes it, not as Python's False."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "'" + value if isinstance(value, str) and value.lstrip("'").startswith(_FORMULA_STARTS) else value


# What an answer's text may take in memory before it goes to a temporary file.
_SPOOL_BYTES = 16 << 20


def _spool(mode: str):
    if "b" in mode:
        return tempfile.SpooledTemporaryFile(_SPOOL_BYTES, mode=mode)
    return tempfile.SpooledTemporaryFile(_SPOOL_BYTES, mode=mode, encoding="utf-8", newline="")


def emit_csv(rows: Iterable[dict], fields: Iterable[str]) -> None:
    """``fields``: the columns a row of this answer has (as ``flat`` names them), the header when there is no
    row: a script reads the same header from an empty answer as from any other. The text is the logs' as it
    is, escape sequences and all: CSV is for programs (only a formula's start is kept from spreadsheets).

    The header names every column any row has, and comes first: the rows are spooled as they come (as
    emit_json_rows spools its text, for the same reasons) and written once the last one is read."""
    header: dict[str, None] = {}
    with _spool("wb+") as spool:
        for row in rows:
            cells = flat(row)
            header.update(dict.fromkeys(cells))
            pickle.dump(cells, spool)  # our own file, read back below: every value exactly as it was
        spool.seek(0)
        line = io.StringIO()
        # The csv module quotes a field holding a character of its line end, no other: under "\n" alone, a
        # lone "\r" in a log's text went out bare, and a reader ended the row there. Each row is written with
        # "\r\n", then ended "\n".
        writer = csv.writer(line, lineterminator="\r\n")
        names = list(header) if header else list(fields)
        for values in itertools.chain([names], ([_csv_cell(row.get(k)) for k in names] for row in _unpickled(spool))):
            writer.writerow(values)
            # Not through click.echo: written anywhere but a terminal, it took what looked like escape
            # sequences out of the text.
            sys.stdout.write(line.getvalue()[:-2] + "\n")
            line.seek(0)
            line.truncate()


def _unpickled(spool) -> Iterator[dict]:
    while True:
        try:
            yield pickle.load(spool)
        except EOFError:
            return


def emit_json(value: object) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def emit_json_rows(rows: Iterable[dict]) -> None:
    """``emit_json``'s text of a list of rows, made as they come: an export of a million events held them
    all, and then their text whole, in memory (1.6 GB). The text is spooled (to a temporary file past
    _SPOOL_BYTES) and written out once the rows are read: the answer's read snapshot ends at its first
    output, and a pager left open on rows written as they came would hold it, and the daemon's WAL would
    grow meanwhile."""
    with _spool("w+") as spool:
        opening = "["
        for row in rows:
            # Each row as orjson indents it alone, one level deeper: the text emit_json gives the whole list.
            spool.write(opening + "\n  " + orjson.dumps(row, option=orjson.OPT_INDENT_2).decode().replace("\n", "\n  "))
            opening = ","
        spool.write("[]\n" if opening == "[" else "\n]\n")
        spool.seek(0)
        shutil.copyfileobj(spool, sys.stdout)


def emit_nested_json(value: object) -> None:
    """``emit_json``'s text of a value nested deeper than orjson goes (255 levels: a tree of subagents 127
    deep), or than Python recurses: the objects and arrays are walked with a stack of our own, and only
    what is in them, keys and scalars, is left to orjson."""
    out: list[str] = []
    # Each open object or array: its closing bracket and its (prefix, value) members still to write.
    stack: list[tuple[str, Iterator[tuple[str, object]]]] = []
    member: tuple[str, object] | None = ("", value)
    while True:
        if member is not None:
            prefix, item = member
            out.append(prefix)
            if isinstance(item, dict) and item:
                out.append("{")
                stack.append(("}", ((orjson.dumps(k).decode() + ": ", v) for k, v in item.items())))
            elif isinstance(item, list) and item:
                out.append("[")
                stack.append(("]", (("", v) for v in item)))
            else:
                out.append(orjson.dumps(item).decode())
        if not stack:
            break
        close, members = stack[-1]
        member = next(members, None)
        if member is None:
            stack.pop()
            out.append("\n" + "  " * len(stack) + close)
        else:
            # A comma after the member before, none after the bracket that opened this one.
            out.append(("\n" if out[-1] in ("{", "[") else ",\n") + "  " * len(stack))
    click.echo("".join(out))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 100 else f"{value:,.2f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    # One line a row: an error text may be a whole pretty-printed JSON object.
    return one_line(str(value))


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


def emit_table(rows: list[dict], columns: list[tuple[str, str]], *, note: bool = True) -> None:
    """``columns`` is a list of (key, header); a row's ``cost_usd`` is marked by its ``unpriced_calls``,
    with the footnote under the table unless ``note`` is false (the caller gives it once for several)."""
    cells = [_row_cells(row, columns) for row in rows]
    if sys.stdout.isatty():
        _print_fitted(cells, columns, [_is_number(rows, key) for key, _ in columns])
    else:
        # Measured in a terminal's cells, as the table drawn on one is: a CJK name takes two a character.
        from rich.cells import cell_len, set_cell_size

        cells = [[h for _, h in columns]] + cells
        widths = [max(cell_len(r[i]) for r in cells) for i in range(len(columns))]
        for r in cells:
            click.echo("  ".join(set_cell_size(c, w) for c, w in zip(r, widths)).rstrip())
    if note and any(k == "cost_usd" for k, _ in columns):
        note_unpriced(sum(row.get("unpriced_calls") or 0 for row in rows))


def _is_number(rows: list[dict], key: str) -> bool:
    # A cost column is one even where every cost is unknown; elsewhere a dash stands for a missing number.
    return _is_cost(key) or any(isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool)
                                    for row in rows)


def _print_fitted(cells: list[list[str]], columns: list[tuple[str, str]], numbers: list[bool]) -> None:
    """A table that fits the terminal (``fitting.fit``), its first column wrapping rather than cut, and
    a line under it naming the columns left out: a number is shown whole or not at all."""
    from rich import box
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from agentledger.cli.fitting import WRAP_FLOOR, fit, too_narrow

    console = Console()
    # A header may fold at its spaces: a number's column needs its longest word, or its widest number.
    natural = [max([cell_len(w) for w in (header.split() if numbers[i] else [header])] +
                   [cell_len(r[i]) for r in cells]) for i, (_, header) in enumerate(columns)]
    shape = fit(natural, numbers, console.width, boxable=True, first_floor=WRAP_FLOOR)
    # Left with too little even for the first column (a few characters, or a number of its own), rich
    # would cut it: the lines run past the terminal's edge instead.
    console.width += shape.over
    # A space each side of a cell, but one only on its left once the gap is closed up.
    table = Table(box=box.HEAVY_HEAD if shape.boxed else None, pad_edge=shape.boxed,
                  padding=(0, shape.gap - 1, 0, 1))
    for i, width in zip(shape.kept, shape.widths):
        table.add_column(columns[i][1], justify="right" if numbers[i] else "left",
                         overflow="fold" if numbers[i] or i == 0 else "ellipsis", width=width)
    for r in cells:
        # Text, not a str, which rich reads as markup: "[/root/.ssh]" in an error stopped the command.
        table.add_row(*(Text(r[i]) for i in shape.kept))
    console.print(table)
    left_out = shape.left_out([header for _, header in columns])
    if left_out:
        click.echo(too_narrow(left_out, "a wider terminal or --json"))


def note_unpriced(unpriced: int) -> None:
    """The footnote to costs marked by ``cost_cell``."""
    if unpriced:
        click.echo(display.UNPRICED_NOTE)


def emit_pairs(pairs: list[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        click.echo(f"{key.ljust(width)}  {_cell(value)}")
