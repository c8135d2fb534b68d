"""A real terminal for tests: tmux on its own server, 80 columns by 24 lines; or a bare one of any width."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import REPO
from serving import wait_for

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Terminal:
    """One ``agentledger`` command in its own tmux server, on an 80-column screen."""

    def __init__(self, tmp_path: Path, args: list[str], env: dict, lines: int = 24, hold: bool = False):
        """``hold`` keeps the screen after the command ends, to read what it printed."""
        self.socket = f"agentledger-test-{os.getpid()}-{time.monotonic_ns()}"
        self.rc = tmp_path / "exit-code"
        command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "agentledger", *args])
        self._tmux("new-session", "-d", "-s", "t", "-x", "80", "-y", str(lines), "-c", str(REPO),
                   f"{command}; echo $? > {shlex.quote(str(self.rc))}" + ("; sleep 600" if hold else ""), env=env)

    def _tmux(self, *args: str, env: dict | None = None) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], capture_output=True, text=True,
                              check=True, env=env, timeout=30).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "t")

    def shows(self, *texts: str, timeout: float = 20.0) -> str:
        def showing() -> str | None:
            screen = self.screen()
            return screen if all(t in screen for t in texts) else None

        return wait_for(showing, timeout, what=f"screen showing {texts}")

    def press(self, key: str) -> None:
        self._tmux("send-keys", "-t", "t", key)

    def exit_code(self) -> int:
        return int(wait_for(lambda: self.rc.exists() and self.rc.read_text().strip(), what="watch exiting"))

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


def on_a_terminal(args: list[str], env: dict, columns: int, lines: int = 200) -> str:
    """What ``agentledger args`` writes to a terminal ``columns`` wide, colours left out: the bytes as
    written, so a line wider than the terminal shows as one line rather than wrapped by a screen."""
    out = bytes_to_a_terminal(args, env, columns, lines)
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.decode().replace("\r\n", "\n"))


def bytes_to_a_terminal(args: list[str], env: dict, columns: int, lines: int = 200) -> bytes:
    """The bytes ``agentledger args`` writes to a terminal ``columns`` wide, escape sequences and all."""
    ours, theirs = pty.openpty()
    fcntl.ioctl(theirs, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}  # the terminal's size, not these
    child = subprocess.Popen([sys.executable, "-m", "agentledger", *args], stdin=theirs, stdout=theirs,
                             stderr=theirs, env=env, cwd=REPO)
    os.close(theirs)
    out = bytearray()
    try:
        while chunk := os.read(ours, 65536):
            out += chunk
    except OSError:  # EIO: the command is gone and with it the terminal's other end
        pass
    finally:
        os.close(ours)
    assert child.wait(timeout=60) == 0, out.decode(errors="replace")
    return bytes(out)
