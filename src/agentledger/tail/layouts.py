"""Where each producer keeps its files, and which of them is still being written."""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path

_ROTATED_DAY = re.compile(r"^events\.(\d{4})-(\d{2})-(\d{2})\.jsonl$")
_ROTATED_WEEK = re.compile(r"^events\.(\d{4})-W(\d{2})\.jsonl$")
LIVE_NAME = "events.jsonl"


@dataclass(frozen=True, slots=True)
class Candidate:
    path: str
    live: bool
    order: tuple  # sorts oldest first


def _rotated_order(name: str) -> tuple | None:
    m = _ROTATED_DAY.match(name)
    if m:
        try:
            return (dt.date(int(m[1]), int(m[2]), int(m[3])).toordinal(), name)
        except ValueError:
            return None
    m = _ROTATED_WEEK.match(name)
    if m:
        try:
            return (dt.date.fromisocalendar(int(m[1]), int(m[2]), 1).toordinal(), name)
        except ValueError:
            return None
    return None


def _telemetry_dirs(root: Path) -> list[Path]:
    """A state dir (``<root>/agents/*/telemetry``) or a telemetry dir itself."""
    dirs = []
    if (root / LIVE_NAME).exists() or root.name == "telemetry" or any(
        _rotated_order(p) is not None for p in _names(root)
    ):
        dirs.append(root)
    agents = root / "agents"
    for agent in sorted(_names(agents)):
        tdir = agents / agent / "telemetry"
        if tdir.is_dir():
            dirs.append(tdir)
    return dirs


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def oc_telemetry_files(root: Path) -> list[Candidate]:
    found = []
    for tdir in _telemetry_dirs(root):
        for name in _names(tdir):
            if name == LIVE_NAME:
                # The live file always sorts after every rotated one of its directory.
                found.append(Candidate(str(tdir / name), True, (str(tdir), 1, 0, name)))
            else:
                order = _rotated_order(name)
                if order is not None:
                    found.append(Candidate(str(tdir / name), False, (str(tdir), 0) + order))
    found.sort(key=lambda c: c.order)
    return found


LAYOUTS = {
    "oc-telemetry": oc_telemetry_files,
}
