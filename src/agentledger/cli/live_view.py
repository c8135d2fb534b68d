"""What ``agentledger watch`` draws: a live terminal view of where the money is going.

Asks the running daemon (``GET /v1/overview``) when one answers, else reads the ledger
read-only with the config's gates; both give the same snapshot. Redraws every second,
fitted to the terminal as the query tables are (``fitting``); ``q`` or Ctrl-C quits with exit code 0.
Imported only by the command, so other commands start without rich.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import select
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from zoneinfo import ZoneInfo

import orjson
from rich.cells import cell_len
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from agentledger import display
from agentledger.cli.fitting import TEXT_FLOOR, Fit, fit, too_narrow
from agentledger.config import Config
from agentledger.ledger.db import LedgerError, open_reader
from agentledger.overview import overview
from agentledger.shown import one_line


class Feed:
    """Where snapshots come from: the daemon while it answers, else the ledger itself."""

    def __init__(self, url: str, config: Config, sessions: int):
        self.url = url.rstrip("/")
        self.config = config
        self.sessions = sessions

    def _from_daemon(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}/v1/overview?limit={self.sessions}", timeout=2) as response:
                doc = orjson.loads(response.read())
        except (urllib.error.URLError, OSError, orjson.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) and "sessions" in doc else None

    def snapshot(self) -> tuple[dict, str]:
        """The overview now, and where it came from."""
        doc = self._from_daemon()
        if doc is not None:
            return doc, f"the daemon at {self.url}"
        # Opened afresh each time: how a ledger can be read (see open_reader) may change while watch runs.
        conn = open_reader(self.config.db)
        try:
            doc = overview(conn, self.config.gates, self.config.zone, time.time_ns() // 1_000_000,
                           sessions=self.sessions)
        finally:
            conn.close()
        return doc, f"the ledger, read-only: {self.config.db}"


# -- drawing --------------------------------------------------------------------------------------

def _clock(iso: str | None, zone: ZoneInfo) -> str:
    """A UTC time on the clock of ``zone``, the zone the header names beside it."""
    if not iso:
        return "?"
    at = dt.datetime.fromisoformat(iso).astimezone(zone)
    return at.strftime("%H:%M:%S") if dt.datetime.now(dt.UTC) - at < dt.timedelta(hours=20) else at.strftime("%m-%d %H:%M")


def _when(g: dict) -> str:
    if g["tripped"]:
        return "tripped"
    return "resets first" if g["resets_first"] else display.duration(g["trips_in_s"])


def _pace(g: dict) -> str:
    return display.cost(g["rate_per_hour"], g["recent_unpriced_calls"], lambda r: display.per_hour(g["metric"], r))


def _used(g: dict) -> str:
    return f"{display.gate_value(g)}/{display.amount(g['metric'], g['limit'])}"


def _urgency(g: dict) -> tuple:
    """Tripped first, then the soonest projected trip, then the most used."""
    return not g["tripped"], g["trips_in_s"] is None, g["trips_in_s"] or 0, -g["used"]


def _nearest(gates: list[dict]) -> dict | None:
    return min(gates, key=_urgency, default=None)


def _subject(g: dict, s: dict) -> str:
    return {"session": s["session_key"], "session-family": f"{s['session_key']} +subagents",
            "agent-day": f"agent {s['agent_id']} today", "global-day": "all agents today"}[g["scope"]]


# A column is (header, whole): a whole one (a number, or text holding one) keeps its width or is left out,
# named under its table; the others are cut short with an ellipsis.
Column = tuple[str, bool]
Row = tuple[list[str], str | None]  # cells as shown (``_row``) and style


def _row(cells: list[str], style: str | None = None) -> Row:
    """A row of cells as the query tables show them: a session key or a tool's name comes from the logs."""
    return [one_line(cell) for cell in cells], style


def _fit(columns: list[Column], rows: list[Row], width: int) -> Fit:
    natural = [max([cell_len(header)] + [cell_len(cells[i]) for cells, _ in rows])
               for i, (header, _) in enumerate(columns)]
    return fit(natural, [whole for _, whole in columns], width, boxable=False, first_floor=TEXT_FLOOR)


def _table(title: str, columns: list[Column], rows: list[Row], shape: Fit) -> list:
    """The table under its title, which wraps at the screen's width rather than the table's, and under
    it the line naming the columns ``shape`` left out."""
    table = Table(box=None, pad_edge=False, padding=(0, shape.gap - 1, 0, 1), header_style="dim",
                  show_edge=False)
    for i, width in zip(shape.kept, shape.widths):
        table.add_column(columns[i][0], justify="right" if columns[i][1] else "left", no_wrap=True,
                         overflow="ellipsis", width=width)
    for cells, style in rows:
        # Text, not a str, which rich reads as markup: a "[/]" in a session key stopped watch.
        table.add_row(*(Text(cells[i]) for i in shape.kept), style=style)
    note = _left_out_note(columns, shape)
    return [Text(title, style="bold"), table] + ([Text(note, style="dim")] if note else [])


def _left_out_note(columns: list[Column], shape: Fit) -> str | None:
    left_out = shape.left_out([header for header, _ in columns])
    return too_narrow(left_out, "a wider terminal") if left_out else None


def _lines(text: str, width: int) -> int:
    """The lines ``text`` takes, wrapped at ``width`` (at most one more where words wrap early)."""
    return -(-cell_len(text) // max(width, 1)) if text else 0


def frame(snap: dict, where: str, height: int, width: int) -> Group:
    """One screen: header, sessions, gates, failures, ingest, cut to ``height`` lines of ``width``."""
    sessions, problems, sources = snap["sessions"], snap["problems"], snap["ingest"]
    zone = ZoneInfo(snap["timezone"])
    worst: dict[str, tuple[dict, dict]] = {}
    for s in sessions:
        for g in s["gates"]:
            if g["gate"] not in worst or _urgency(g) < _urgency(worst[g["gate"]][0]):
                worst[g["gate"]] = (g, s)

    # Figures are words: the header wraps between them rather than cut one.
    header = Text.assemble(("agentledger watch", "bold"), f"  {_clock(snap['at'], zone)} {snap['timezone']}  ",
                           ("today ", "dim"), display.cost(snap["today_usd"], snap["today_unpriced_calls"]),
                           ("  in all ", "dim"), display.cost(snap["total_usd"], snap["total_unpriced_calls"]),
                           ("  q quits", "dim"))
    source = Text(f"from {where}", style="dim", no_wrap=True, overflow="ellipsis")

    session_columns: list[Column] = [("session", False), ("cost", True), ("burn", True), ("tok/min", True)]
    if worst:
        session_columns.append(("next gate", True))
    session_rows: list[Row] = []
    for s in sessions:
        g = _nearest(s["gates"])
        pace = display.tokens(s["tokens_per_minute"]) if s["tokens_per_minute"] else display.DASH
        cells = [s["session_key"] or s["session_id"], display.cost(s["cost_usd"], s["unpriced_calls"]),
                 display.burn(s), pace]
        if worst:
            soon = g and (g["tripped"] or g["trips_in_s"] is not None)
            cells.append(f"{g['gate']} {g['used']:.0%}" + (f" {_when(g)}" if soon else "") if g else display.DASH)
        session_rows.append(_row(cells, "bold red" if g and g["tripped"] else None))
    if not sessions:
        session_rows.append(_row(["no sessions yet"] + [""] * (len(session_columns) - 1)))

    gate_columns: list[Column] = [("gate", False), ("measures", False), ("used", True), ("left", True), ("pace", True),
                                  ("trips in", True)]
    gate_rows: list[Row] = [
        _row([g["gate"], _subject(g, s), _used(g), display.amount(g["metric"], g["headroom"]), _pace(g), _when(g)],
             "bold red" if g["tripped"] else "yellow" if g["used"] >= 0.8 else None)
        for g, s in sorted(worst.values(), key=lambda gs: _urgency(gs[0]))]

    ingest_columns: list[Column] = [("source", False), ("files", True), ("lag", True), ("unread", True),
                                    ("rejected", True)]
    ingest_rows: list[Row] = [
        _row([src["source"], str(src["files_tailed"]), display.duration(src["lag_s"]), f"{src['unread_bytes']:,} B",
              f"{src['lines_rejected']:,}"]) for src in sources]

    # Fitted to every row, not only those shown, so the columns hold still as rows come and go.
    shapes = [_fit(session_columns, session_rows, width), _fit(gate_columns, gate_rows, width),
              _fit(ingest_columns, ingest_rows, width)]
    notes = sum(_lines(_left_out_note(c, f) or "", width)
                for c, f in zip((session_columns, gate_columns, ingest_columns), shapes))

    # Lines left for rows once the header, titles, column headers and notes are drawn.
    # Any cost marked for unpriced calls leaves some of them out of the total too.
    note = snap["total_unpriced_calls"] > 0
    room = (height - _lines(header.plain, width) - 1 - 2 - (2 if worst else 0) - (1 if problems else 0)
            - (2 if sources else 0) - (2 if note else 0) - notes)
    n_gates = min(len(worst), max(room // 4, 1))
    n_sources = min(len(sources), 3)
    n_problems = min(len(problems), max((room - n_gates - n_sources) // 4, 0), 5)
    n_sessions = max(min(len(sessions), room - n_gates - n_sources - n_problems), 1)

    minutes = snap["window_s"] // 60
    parts = [header, source,
             *_table(f"sessions, latest first (rates over {minutes} min)", session_columns,
                     session_rows[:n_sessions], shapes[0])]
    if worst:
        parts += _table("gates: headroom and projected time to trip", gate_columns, gate_rows[:n_gates], shapes[1])
    if problems:
        parts.append(Text("latest failed or interrupted", style="bold"))
        for p in problems[:n_problems]:
            parts.append(Text.assemble(f"{_clock(p['at'], zone)} {p['kind']} {one_line(p['name'] or '?')} ",
                                       (p["status"], "red" if p["status"] == "error" else "yellow"),
                                       f" {one_line(p['session_key'] or '?')}", no_wrap=True, overflow="ellipsis"))
    if sources:
        parts += _table("ingest", ingest_columns, ingest_rows[:n_sources], shapes[2])
    if note:
        parts.append(Text(display.UNPRICED_NOTE, style="dim"))
    return Group(*parts)


# -- the loop -------------------------------------------------------------------------------------

@contextlib.contextmanager
def _keys() -> Iterator[bool]:
    """Single key presses from the terminal, without echo; yields whether there is one to read."""
    if not sys.stdin.isatty():
        yield False
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)  # keys arrive one by one; Ctrl-C still interrupts
    try:
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _wait_for_quit(seconds: float, keys: bool) -> bool:
    """Sleep up to ``seconds``; True when q was pressed."""
    if not keys:
        time.sleep(seconds)
        return False
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sys.stdin], [], [], left)
        if ready:
            key = os.read(sys.stdin.fileno(), 32)
            if key[:1] in (b"q", b"Q"):
                return True
    return False


def run(config: Config, url: str, interval: float, sessions: int, once: bool) -> None:
    """Redraw until q or Ctrl-C; one snapshot when told to or when stdout is not a terminal."""
    feed = Feed(url, config, sessions)
    console = Console()
    try:
        snap, where = feed.snapshot()  # an unreadable ledger stops here, before the screen is taken
        if once or not console.is_terminal:
            console.print(frame(snap, where, 10_000, console.width))
            return
        with _keys() as keys, Live(console=console, screen=True, auto_refresh=False) as live:
            while True:
                live.update(frame(snap, where, console.size.height, console.size.width), refresh=True)
                if _wait_for_quit(interval, keys):
                    return
                try:
                    snap, where = feed.snapshot()
                except LedgerError as exc:
                    where = f"nothing to read: {exc}"
    except KeyboardInterrupt:
        return
