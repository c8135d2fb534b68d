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
    # One line a row: an error text may be a whole pretty-printed JSON object.
    return " ".join(str(value).split())


def cost_cell(cost: float | None, unpriced: int | None) -> str:
    """A cost as a table shows it: marked when it leaves out unpriced calls, a dash when nothing of it is known."""
    return display.cost(cost, unpriced, _cell)


def _row_cells(row: dict, columns: list[tuple[str, str]]) -> list[str]:
    return [cost_cell(row.get(k), row.get("unpriced_calls")) if k == "cost_usd" else _cell(row.get(k))
            for k, _ in columns]


def emit_table(rows: list[dict], columns: list[tuple[str, str]], *, title: str | None = None,
               note: bool = True) -> None:
    """``columns`` is a list of (key, header); a row's ``cost_usd`` is marked by its ``unpriced_calls``,
    with the footnote under the table unless ``note`` is false (the caller gives it once for several)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for i, (key, header) in enumerate(columns):
            numeric = bool(rows) and isinstance(rows[0].get(key), (int, float))
            # The first column names the row: wrap it rather than cut it short.
            table.add_column(header, justify="right" if numeric else "left",
                             overflow="fold" if i == 0 else "ellipsis", min_width=12 if i == 0 else None)
        for row in rows:
            table.add_row(*_row_cells(row, columns))
        Console().print(table)
    else:
        cells = [[h for _, h in columns]] + [_row_cells(row, columns) for row in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
        for r in cells:
            click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if note and any(k == "cost_usd" for k, _ in columns):
        note_unpriced(sum(row.get("unpriced_calls") or 0 for row in rows))


def note_unpriced(unpriced: int) -> None:
    """The footnote to costs marked by ``cost_cell``."""
    if unpriced:
        click.echo(display.UNPRICED_NOTE)


def emit_pairs(pairs: list[tuple[str, object]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        click.echo(f"{key.ljust(width)}  {_cell(value)}")
