"""A real terminal for tests: tmux on its own server, 80 columns by 24 lines."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
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
