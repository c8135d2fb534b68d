"""watchdog's inotify, Linux's, made to tell the directory its watch limit refused first (see watching)."""

from __future__ import annotations

import errno
import os

from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify import InotifyEmitter
from watchdog.observers.inotify_c import InotifyFD


class Inotify(InotifyFD):
    """An inotify instance that keeps the first directory its watch limit refused: watchdog passes over a
    directory below a watched one it could not watch without a word."""

    refused: str | None = None

    def add_callback(self, path, mask, callback, id_):
        try:
            return super().add_callback(path, mask, callback, id_)
        except OSError as exc:
            if exc.errno == errno.ENOSPC and self.refused is None:
                self.refused = os.fsdecode(path)
            raise


class InotifyObserver(BaseObserver):
    """watchdog's own inotify observer, on an instance of Inotify."""

    def __init__(self, inotify: Inotify):
        super().__init__(InotifyEmitter, inotify_fd=inotify)
        self.inotify = inotify

    def on_thread_stop(self) -> None:
        super().on_thread_stop()
        self.inotify.stop()
        self.inotify.join()
