"""A TOML file a user names, the config file or the price file: read, or refused in one message that names
the file and the fix, in the same words for both."""

from __future__ import annotations

import errno
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from agentledger.regular import open_unwaiting

# What makes a file that is there readable, where naming another is not the only fix.
_MENDS = {errno.EACCES: "let this user read it", errno.EPERM: "let this user read it",
          errno.ELOOP: "point the link at a file"}


def read_toml(path: Path, what: str, example: str, others: str) -> dict[str, Any]:
    """The document of the TOML file at ``path``; a ValueError that names it as ``what`` ("config file")
    otherwise. ``example``: the name of the file a directory given for it would hold; ``others``: where
    another file is named (``--config, $AGENTLEDGER_CONFIG``).

    A pipe (``--config <(…)``) is read to its end. A FIFO no program writes to is refused, not waited on:
    it gives nothing, and so does a pipe whose writer wrote nothing, which is no file either."""
    try:
        fd, mode = open_unwaiting(path)
        if stat.S_ISDIR(mode):
            os.close(fd)
            raise ValueError(f"{what} {path} is a directory: give the file's path, e.g. {path / example}")
        with open(fd, "rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError):
        raise ValueError(f"{what} {path} does not exist: create it, or name another ({others})") from None
    except OSError as exc:
        # ELOOP's words, "Too many levels of symbolic links", do not say that the links go round.
        why = "a loop of symbolic links" if exc.errno == errno.ELOOP else exc.strerror
        mend = _MENDS.get(exc.errno or 0)
        raise ValueError(f"{what} {path} cannot be read ({why}): {mend + ', or ' if mend else ''}name another "
                         f"({others})") from None
    if not data and stat.S_ISFIFO(mode):
        raise ValueError(f"{what} {path} is a FIFO that gave nothing (no program writes to it): give the file's "
                         f"path, or start what writes to it first")
    try:
        text = data.decode("utf-8")  # TOML is UTF-8, whatever the locale
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{exc.start}): save it as UTF-8, as TOML requires") from None
    try:
        # The byte order mark Windows editors start a UTF-8 file with: tomllib takes it for a key.
        return tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{what} {path} is not valid TOML: {exc}") from None
