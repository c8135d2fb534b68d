"""Named fault points, armed only by tests through ``AGENTLEDGER_FAULT``.

``AGENTLEDGER_FAULT=before_commit:17`` ends the process (``os._exit``, no cleanup, like a
power cut for everything outside the kernel's page cache) the 17th time the code passes
``fault("before_commit")``. Several points may be armed at once, comma-separated. The
points sit where a crash would hurt most (``POINTS``); a test lets the daemon die at one,
restarts it and proves that nothing was lost or counted twice.

``max_page_count=PATH`` caps the ledger at the page count written in PATH (no file: no cap),
read again before every pass: a disk that fills up and frees again, without root.

Unarmed, which is always the case outside tests, ``fault`` and ``limit_ledger`` do nothing.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

EXIT_CODE = 86
POINTS = (
    "before_commit",  # the batch's transaction is written but not committed
    "after_commit",  # committed, the hot views not yet refreshed
    "mid_state_write",  # half of a hot-store state file written to its temp file
    "after_rotate",  # a rotation detected and recorded, the new live file not yet read
)
_PAGE_LIMIT = "max_page_count"
_NO_LIMIT = 0xFFFFFFFE  # SQLite's largest page count


def _parse(spec: str) -> tuple[dict[str, int], Path | None]:
    points: dict[str, int] = {}
    pages = None
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, value = item.partition("=")
        if sep and name == _PAGE_LIMIT and value:
            pages = Path(value)
            continue
        name, sep, value = item.partition(":")
        if name not in POINTS or not sep or not value.isdigit() or int(value) < 1:
            raise ValueError(f"AGENTLEDGER_FAULT: {item!r} is not POINT:N (N >= 1, POINT one of "
                             f"{', '.join(POINTS)}) or {_PAGE_LIMIT}=PATH")
        points[name] = int(value)
    return points, pages


class _Armed:
    def __init__(self, points: dict[str, int]):
        self.left = dict(points)
        self.lock = threading.Lock()  # hot-store writes also happen on request threads

    def __call__(self, name: str) -> None:
        with self.lock:
            left = self.left.get(name)
            if left is None:
                return
            self.left[name] = left - 1
        if left == 1:
            os.write(2, f"agentledger: fault {name} fired\n".encode())
            os._exit(EXIT_CODE)


def _unarmed(name: str) -> None:
    return None


def _page_limit(path: Path):
    def limit_ledger(conn) -> None:
        try:
            pages = int(path.read_text())
        except (FileNotFoundError, ValueError):
            pages = _NO_LIMIT
        conn.execute(f"PRAGMA max_page_count = {pages:d}")

    return limit_ledger


def _no_limit(conn) -> None:
    return None


_points, _pages = _parse(os.environ.get("AGENTLEDGER_FAULT", ""))
fault = _Armed(_points) if _points else _unarmed
limit_ledger = _page_limit(_pages) if _pages else _no_limit
