"""The signals ``serve`` acts on, caught from the start of the process.

Its imports and the reading of its configuration take a good part of a second. Left to Python until
the daemon was ready, a SIGTERM in that time killed it (no "stopped" line) and a Ctrl-C ended in a
KeyboardInterrupt traceback from whichever module was loading. Caught from the start, a signal is
held until the daemon says what it means. Light on purpose: it loads before anything else the
command needs, and only for ``serve``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable


def has_terminal() -> bool:
    """Whether this process has a controlling terminal, whose closing sends it SIGHUP."""
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    except OSError:  # ENXIO: no controlling terminal
        return False
    return True


class Relay:
    """Signals acted on by a thread of their own. A Python handler runs in the main thread between two of
    its bytecodes, perhaps while that thread holds an Event's lock (the loop's wake.wait or wake.clear):
    setting the Event from the handler waited for its own thread, for ever, and SIGTERM went unheard.
    Here the C handler only writes the signal's number to a pipe (signal.set_wakeup_fd), and the
    thread reading it does what the signal asks. Until the daemon has said what that is (``act``), a
    signal is held; a second stop then exits at once, as it does later. Only from the main thread."""

    def __init__(self) -> None:
        self.terminal = has_terminal()
        self.stops = {signal.SIGTERM, signal.SIGINT}
        # Closing the terminal `make serve` runs in stops it as cleanly as Ctrl-C does, except under
        # nohup. Without a terminal none can close: a SIGHUP is an operator's, told of and run through.
        if self.terminal and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            self.stops.add(signal.SIGHUP)
        caught = self.stops if self.terminal else self.stops | {signal.SIGHUP}
        self._actions: dict[int, Callable[[int], None]] = {}
        self._held: list[int] = []
        self._lock = threading.Lock()
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        # Blocked while the handlers change: one in between would otherwise find Python's handler (a
        # KeyboardInterrupt) or ours before the pipe is there to carry it.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, caught)
        try:
            signal.set_wakeup_fd(write)
            for signum in caught:
                signal.signal(signum, _noted)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        threading.Thread(target=self._run, name="signals", daemon=True).start()

    def act(self, actions: dict[int, Callable[[int], None]]) -> None:
        """From now on a signal does what ``actions`` says; those held do it now, in the order they came."""
        with self._lock:
            self._actions = actions
            held, self._held = self._held, []
            for signum in held:
                self._do(signum)

    def _run(self) -> None:
        while True:
            for signum in os.read(self._read, 64):
                with self._lock:
                    self._do(signum)

    def _do(self, signum: int) -> None:
        if self._actions:
            action = self._actions.get(signum)
            if action is not None:
                action(signum)
        elif signum in self.stops and self.stops.intersection(self._held):
            os._exit(128 + signum)
        else:
            self._held.append(signum)


def _noted(signum, frame) -> None:
    """Python's part of a relayed signal: nothing (see Relay); installed so that it does not kill."""


_relay: Relay | None = None


def relay() -> Relay:
    """The process's one relay, made at the first call."""
    global _relay
    if _relay is None:
        _relay = Relay()
    return _relay
