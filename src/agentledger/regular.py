"""Opening a file found on disk only when it is a regular file.

Anything may lie under the name a producer's file would have. Opening a FIFO for reading waits
until something opens it for writing, which may be never: the pass, and the daemon with it, would
stall there. A look at the name before opening it does not close that gap (a FIFO can be put
in its place in between), so the file is opened without waiting and then looked at. A file a
user names (the config file, the price file) is opened so too, and may be a pipe that is written.
"""

from __future__ import annotations

import os
import stat


def open_unwaiting(path: str | os.PathLike, flags: int = 0) -> tuple[int, int]:
    """A read-only descriptor of whatever is at ``path`` (``flags`` added to the open), and its mode. Reads
    of it block as any other's do, but the open did not wait: a FIFO no program has open for writing reads
    as empty at once, one a program writes (a pipe, ``<(…)``) to its end. Raises what opening it raises."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | flags)
    try:
        mode = os.fstat(fd).st_mode
        # Reads of a file then behave as any other's, whatever its file system makes of the flag.
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, mode


def open_regular(path: str | os.PathLike, flags: int = 0) -> int | None:
    """A read-only descriptor of the regular file at ``path`` (``flags`` added to the open), None when
    something else is there (a FIFO, a device, a directory). Raises what opening it raises."""
    fd, mode = open_unwaiting(path, flags)
    if not stat.S_ISREG(mode):
        os.close(fd)
        return None
    return fd


def read_regular(path: str | os.PathLike, limit: int = -1, flags: int = 0) -> bytes | None:
    """Up to ``limit`` bytes of the regular file at ``path`` (all of it if negative; ``flags`` added to the
    open); None when something else is there. Raises what opening it raises."""
    fd = open_regular(path, flags)
    if fd is None:
        return None
    with open(fd, "rb") as f:
        return f.read(limit)


def nothing_but_regular(path: str | os.PathLike) -> bool:
    """Whether what lies at ``path`` is a regular file or nothing, as far as can be told: for a file a
    library opens by its name itself, and cannot be asked to open without waiting. The gap between this
    look and that open remains; one that cannot look (its directory's mode) leaves the open to say why."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True
