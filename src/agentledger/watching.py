"""What inotify (through watchdog) saw for serve's loop: the files written to since the last pass, or
that a full scan is due.

A root is watched at the directory it leads to now, as the tailers read it (see Tailer._resolve): the
loop looks at every root again on each of its turns, one stat each, and a root that is made again after
it was removed or renamed away, or a symlink switched to another directory, has its watch moved there
and the next pass scan in full, inotify having seen nothing of what is there.

Below a root, watchdog watches real directories only, never one reached through a symlink, which the
tailers read as any other (an agent's directory linked from elsewhere): each such directory they found
files in is watched too, where it leads, and what inotify reports there is told by the path they list.

inotify only hastens what the rescan reads anyway: where the system's limits leave it no instance or
watch to spare (fs.inotify.max_user_instances, max_user_watches), serve goes on without, says so once
with the fix, and asks again at each rescan for the watch of a root (or linked directory) refused.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import sys
import threading
import time
import warnings
from collections.abc import Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

if TYPE_CHECKING:
    from agentledger.inotify import Inotify

log = logging.getLogger("agentledger.watching")

# What inotify reports and a pass cares about. Left out: opening and closing a file unwritten (as
# every pass does to read), which says nothing new and would wake the loop for another pass; and
# a directory "modified", which watchdog adds for a file's every close after writing and which
# otherwise only repeats a file created, moved or deleted, each reported on its own.
_WATCHED = [FileModifiedEvent, FileClosedEvent, FileCreatedEvent, FileMovedEvent, FileDeletedEvent,
            DirCreatedEvent, DirMovedEvent, DirDeletedEvent]
# Of those, the ones that only say a file's content changed; any other (a file created, moved or
# deleted, a directory changed) may change which files there are, and the next pass scans in full.
_CONTENT_EVENTS = frozenset({"modified", "closed"})


# The limit each error says is reached: the setting that raises it, and a value enough for thousands of
# directories that leaves others theirs (each watch costs the kernel about 1 KiB).
_LIMITS = {errno.ENOSPC: ("watch", "max_user_watches", 524288), errno.EMFILE: ("instance", "max_user_instances", 1024)}


def _directory(path: str) -> tuple[int, int] | None:
    """(device, inode) of the directory ``path`` leads to now; None where it leads to none, or to one out of
    reach (which its tailer tells)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


@dataclass(slots=True)
class _Place:
    """A root as given, or a symlink below one as the tailers name it; and the directory it led to at the last
    look."""

    seen: tuple[int, int] | None = None  # its device and inode
    real: str | None = None  # its path, watched


@dataclass(slots=True)
class _Watch:
    watch: ObservedWatch | None  # None: refused (see Changes._schedule), and asked again at retry_at
    retry_at: float = 0.0
    users: int = 0  # the places that lead here: two roots may name one directory
    ended: bool = False  # the directory was deleted, and its watch with it


class Changes(FileSystemEventHandler):
    """Wakes the loop, and keeps what inotify reported since the last pass: the files written to,
    or that a full scan is due."""

    def __init__(self, wake: threading.Event, rescan_s: float):
        self.wake = wake
        self.rescan_s = rescan_s
        self.lock = threading.Lock()  # over what the observer's thread and the loop's share, below
        self.written: set[str] = set()
        self.full = True
        self._ended: set[str] = set()  # watched directories deleted since the last look
        self._reals: frozenset[str] = frozenset()  # the directories watched, for the observer's thread to know
        self._named: dict[str, tuple[str, ...]] = {}  # directory a symlink leads to -> the symlinks, as listed
        self._inotify: Inotify | None = None  # None: no instance to be had, or no inotify on this system
        self._observer: BaseObserver | None = None
        self._roots: dict[str, _Place] = {}
        self._links: dict[str, _Place] = {}  # a symlink below a root, as the tailers list it
        # The directories follow_links looked at last, under which roots, and the symlinks on the way to each.
        self._looked: frozenset[str] = frozenset()
        self._looked_under: tuple[str, ...] = ()
        self._ways: dict[str, list[str]] = {}  # only those with a symlink on the way
        self._unmade = False  # a directory was deleted or moved away since follow_links last looked
        self._watches: dict[str, _Watch] = {}  # directory -> its watch
        self._told: set[int] = set()  # the limits (by the error they raise) told reached

    def start(self) -> None:
        # A directory created after its parent's watch began gets a watch of its own, and watchdog warns
        # that it replaces one; replacing it is right, the warning is noise for operators.
        warnings.filterwarnings("ignore", message="Callback with id", category=RuntimeWarning)
        if not sys.platform.startswith("linux"):
            # FSEvents, kqueue or polling: watchdog's observer for the system, whose limits it keeps to itself
            self._observer = Observer()
            self._observer.start()
            return
        from agentledger.inotify import Inotify, InotifyObserver  # Linux's alone: it loads inotify's calls

        try:
            inotify = Inotify()
        except OSError as exc:
            if exc.errno in _LIMITS:
                self._limited(exc.errno, "no directory is watched")
            else:
                log.warning("inotify cannot be had (%s): %s", exc.strerror or exc,
                            self._meanwhile("no directory is watched"))
            return
        inotify.start()
        self._inotify, self._observer = inotify, InotifyObserver(inotify)
        # Before any watch is scheduled: an emitter that failed to start in observer.start() would raise there,
        # and leave the others not started; scheduled on a running observer, each starts, or fails, alone.
        self._observer.start()

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)

    def watch(self, root: str) -> None:
        """Follows ``root`` from now on: watched at the directory it leads to, once it leads to one."""
        if root not in self._roots:
            self._roots[root] = place = _Place()
            self._look(root, place)

    @property
    def awaited(self) -> list[str]:
        """The roots that lead to no directory: not made yet, or removed since."""
        return [root for root, place in self._roots.items() if place.seen is None]

    def follow(self) -> tuple[list[str], list[tuple[str, str]]]:
        """Looks again where each root leads, and moves its watch there when that changed. Returns the roots that
        lead to a directory again after none, and (root, the directory) for those that lead to another one."""
        with self.lock:
            ended, self._ended = self._ended, set()
        for real in ended:
            if real in self._watches:
                self._watches[real].ended = True
        appeared, moved = [], []
        for root, place in self._roots.items():
            was = place.seen
            if self._look(root, place, ended) and place.real is not None:
                if was is None:
                    appeared.append(root)
                else:
                    moved.append((root, place.real))
        if any([self._look(link, place, ended) for link, place in self._links.items()]):
            self._name_links()
        self._retry()
        if self._inotify is not None and self._inotify.refused is not None:
            self._limited(errno.ENOSPC, f"{self._inotify.refused} (and maybe more directories) is not watched")
        return appeared, moved

    def follow_links(self, directories: Set[str]) -> None:
        """Watches, where it leads, each symlink on the way from a root to one of ``directories`` (those the
        tailers' last full scans found files in, by their names), and no longer those on the way to none.

        Called after every full scan, it looks only at the directories not listed at the last call (an lstat of
        every step of the way costs a noticeable part of a pass where thousands are): a symlink on the way to
        one listed before, switched since, is seen by follow's look at each turn. All are looked at again where
        their way may have changed otherwise: a directory deleted or moved away (a symlink may stand in its
        place now), a symlink no longer one, a root that leads elsewhere."""
        roots = tuple(os.path.join(place.real, "") for place in self._roots.values() if place.real is not None)
        with self.lock:
            unmade, self._unmade = self._unmade, False
        if unmade or roots != self._looked_under or not all(map(os.path.islink, self._links)):
            self._ways.clear()
            self._looked_under = roots
            gone, new = self._looked, directories
        else:
            gone, new = self._looked - directories, directories - self._looked
        if not gone and not new:
            return
        for directory in gone:
            self._ways.pop(directory, None)
        is_link: dict[str, bool] = {}  # looked at once per call, however many directories lie below
        for directory in new:
            root = next((r for r in roots if directory.startswith(r)), None)
            if root is None:
                continue  # under where a root led before: no longer read
            path, way = os.path.dirname(root), []
            for part in directory[len(root):].split(os.sep):
                path = os.path.join(path, part)
                if path not in is_link:
                    is_link[path] = os.path.islink(path)
                if is_link[path]:
                    way.append(path)
            if way:
                self._ways[directory] = way
        self._looked = frozenset(directories)
        links = set().union(*self._ways.values())
        if links == self._links.keys():
            return
        for link in self._links.keys() - links:
            place = self._links.pop(link)
            if place.real is not None:
                self._release(place.real)
        for link in links - self._links.keys():
            self._links[link] = place = _Place()
            self._look(link, place)
        self._name_links()

    def _name_links(self) -> None:
        named: dict[str, tuple[str, ...]] = {}
        for link, place in self._links.items():
            if place.real is not None:
                named[place.real] = (*named.get(place.real, ()), link)
        with self.lock:
            self._named = named

    def _look(self, name: str, place: _Place, ended: set[str] = frozenset()) -> bool:
        """Whether ``place`` leads elsewhere than at the last look (or its directory was deleted, and made again on
        the same inode): its watch moved there, and the next pass scans in full."""
        seen = _directory(name)
        if seen == place.seen and place.real not in ended:
            return False
        # Watched where it leads, the path inotify names what it reports by: a root's as the tailers list it (see
        # Tailer._resolve), a symlink's told by its name (see _as_listed).
        real = os.path.realpath(name) if seen is not None else None
        if place.real is not None:
            self._release(place.real)
        if real is not None:
            self._hold(real)
        place.seen, place.real = seen, real
        with self.lock:
            self.full = True
        self.wake.set()
        return True

    def _retry(self) -> None:
        """Asks again, once per rescan, for the watches refused: out of reach or past a limit then, they may be
        had now."""
        now = time.monotonic()
        for real, entry in self._watches.items():
            if entry.watch is None and now >= entry.retry_at:
                entry.retry_at = now + self.rescan_s
                entry.watch = self._schedule(real)
                if entry.watch is not None:
                    with self.lock:
                        self.full = True  # what came before the watch, inotify did not see
                    self.wake.set()

    def _limited(self, error: int | None, unwatched: str) -> None:
        """Tells once that a limit of inotify's was reached, what goes unwatched, and how to raise it."""
        if error not in _LIMITS or error in self._told:
            return  # any other refusal: gone or out of reach, which the next look or its tailer tells
        self._told.add(error)
        what, setting, enough = _LIMITS[error]
        log.warning("inotify %s limit reached: %s; raise fs.inotify.%s (sysctl -w fs.inotify.%s=%d, and in "
                    "/etc/sysctl.d/ to keep it) and restart agentledger", what, self._meanwhile(unwatched), setting,
                    setting, enough)

    def _meanwhile(self, unwatched: str) -> str:
        return f"{unwatched}, so new lines are read by the rescan every {self.rescan_s:g}s rather than at once"

    def _hold(self, real: str) -> None:
        entry = self._watches.get(real)
        if entry is None:
            entry = self._watches[real] = _Watch(self._schedule(real), time.monotonic() + self.rescan_s)
        elif entry.ended:  # the observer keeps an ended watch, and would schedule no new one in its place
            self._unschedule(entry.watch)
            entry.watch, entry.ended = self._schedule(real), False
            entry.retry_at = time.monotonic() + self.rescan_s
        entry.users += 1
        self._reals = frozenset(self._watches)

    def _release(self, real: str) -> None:
        entry = self._watches[real]
        entry.users -= 1
        if not entry.users:
            del self._watches[real]
            self._unschedule(entry.watch)
            self._reals = frozenset(self._watches)

    def _schedule(self, real: str) -> ObservedWatch | None:
        """A watch on ``real`` and all below it; None if refused: gone since it was looked at (which the next
        look sees), out of reach (which its tailer tells), past a limit (told here)."""
        if self._observer is None:
            return None
        try:
            # Outside the lock: the observer calls on_any_event holding its own.
            return self._observer.schedule(self, real, recursive=True, event_filter=_WATCHED)
        except OSError as exc:
            self._limited(exc.errno, f"{real} is not watched")
            return None

    def _unschedule(self, watch: ObservedWatch | None) -> None:
        if watch is not None:
            self._observer.unschedule(watch)

    def on_any_event(self, event) -> None:
        path = os.fsdecode(event.src_path)
        with self.lock:
            if event.is_directory or event.event_type not in _CONTENT_EVENTS:
                self.full = True
                if event.is_directory and event.event_type in ("deleted", "moved"):
                    self._unmade = True
                if event.event_type == "deleted" and path in self._reals:
                    # Made again, it may be on the same inode, which the next look would take for the same directory.
                    self._ended.add(path)
            else:
                self.written.add(path)
                if self._named:
                    self.written.update(self._as_listed(path))
        self.wake.set()

    def _as_listed(self, path: str) -> list[str]:
        """``path`` by the names the tailers list it under, where it lies in a directory a symlink leads to:
        inotify names it by its real one. Called holding the lock."""
        names = []
        directory = os.path.dirname(path)
        while True:
            names.extend(link + path[len(directory):] for link in self._named.get(directory, ()))
            up = os.path.dirname(directory)
            if up == directory:
                return names
            directory = up

    def take(self) -> set[str] | None:
        """The files written to since the last call; None when a full scan is due."""
        with self.lock:
            written, full = self.written, self.full
            self.written, self.full = set(), False
        return None if full else written
