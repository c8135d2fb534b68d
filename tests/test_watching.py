"""What serve's inotify watches see: writes, files coming and going, and roots that go, come back or are
switched (symlinks) while it runs; real ``serve`` subprocesses with a rescan too long to stand in for inotify."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import REPO
from logwriter import LogDir, llm_call
from serving import http_get
from test_daemon import _count, _read_until, _serve, _stop, _wait_for, _without_logs
from watchdog.events import DirDeletedEvent

from agentledger.watching import Changes

# A rescan this long never comes during a test: what is read meanwhile, inotify (or a look at the roots) told.
NO_RESCAN = "600"
# Far below NO_RESCAN, and generous for a busy machine.
SOON_S = 15.0


@contextmanager
def _watched(root: Path) -> Iterator[tuple[Changes, threading.Event]]:
    """``root`` watched by inotify as serve watches it: what it reports, and the loop's wake-up."""
    wake = threading.Event()
    changes = Changes(wake, 60.0)
    changes.start()
    changes.watch(str(root))
    try:
        yield changes, wake
    finally:
        changes.close()


def test_inotify_tells_the_loop_of_writes_and_files_coming_and_going_not_of_reads(tmp_path):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    with _watched(logs.root) as (changes, wake):
        assert changes.take() is None  # the first pass scans in full
        wake.clear()
        with open(logs.live, "rb") as f:  # what every pass does to the files it reads
            f.read()
        assert not wake.wait(0.5)
        assert changes.take() == set()
        logs.append(llm_call(2))
        assert wake.wait(5)
        time.sleep(0.1)  # the close after the write comes as an event of its own
        assert changes.take() == {str(logs.live.resolve())}
        logs.rotate()
        logs.append(llm_call(3))
        _wait_for(lambda: changes.full)
        assert changes.take() is None  # a rename: which files there are may have changed


_NO_INOTIFY = """
import importlib.abc, sys, threading, time
from pathlib import Path

class NoInotify(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith(("agentledger.inotify", "watchdog.observers.inotify")):
            raise ImportError(f"{name}: no inotify on this system")

sys.meta_path.insert(0, NoInotify())
sys.platform = "darwin"
from agentledger.watching import Changes

root, live = sys.argv[1], Path(sys.argv[2])
wake = threading.Event()
changes = Changes(wake, 60.0)
changes.start()
changes.watch(root)
changes.take()
wake.clear()
with live.open("ab") as f:
    f.write(b"{}\\n")
print(wake.wait(15))
changes.close()
"""


def test_a_system_without_inotify_is_watched_by_watchdog_s_own_observer(tmp_path):
    # Watching loaded Linux's inotify calls whatever the system: on any other (macOS, a BSD) serve stopped
    # on the import before reading a line.
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    out = subprocess.run([sys.executable, "-c", _NO_INOTIFY, str(logs.root), str(logs.live)], capture_output=True,
                         text=True, timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    # (On Linux told it is macOS, watchdog warns that it falls back to polling.)
    assert (out.returncode, out.stdout) == (0, "True\n"), out.stderr


class _RemovingObserver:
    """An observer whose watch's first event, delivered before schedule returns, is its root's removal."""

    def schedule(self, handler, path, **options):
        os.rmdir(path)
        handler.on_any_event(DirDeletedEvent(path))
        return object()

    def unschedule(self, watch) -> None:
        pass


def test_a_root_removed_while_it_is_being_watched_is_awaited_again(tmp_path):
    root = tmp_path / "state"
    root.mkdir()
    changes = Changes(threading.Event(), 60.0)
    changes._observer = _RemovingObserver()
    changes.watch(str(root))
    changes.follow()
    assert changes.awaited == [str(root)]
    root.mkdir()
    assert changes.follow() == ([str(root)], [])


def _settled(changes: Changes, quiet_s: float = 0.5) -> None:
    """Until no full scan was called for in ``quiet_s``: the last events of a removed root's watch may come
    after the root was made again, each calling for one (and a look, the same directory's watch ended)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        changes.follow()
        if changes.take() is not None:
            return
    raise AssertionError("inotify never went quiet")


def test_a_root_removed_and_made_again_is_watched_again(tmp_path):
    # Removed, its watch ends with it: awaited again, as a root that did not exist at the start is.
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    with _watched(logs.root) as (changes, wake):
        assert changes.take() is None
        shutil.rmtree(logs.root)
        _wait_for(lambda: changes.follow() and changes.awaited == [str(logs.root)], timeout=5)
        logs = LogDir(logs.root)
        logs.append(llm_call(2))
        assert changes.follow() == ([str(logs.root)], [])
        assert changes.take() is None  # what it holds again, inotify did not see: a full scan
        _settled(changes)
        wake.clear()
        logs.append(llm_call(3))
        assert wake.wait(5)
        time.sleep(0.1)  # the close after the write comes as an event of its own
        assert changes.take() == {str(logs.live.resolve())}


def _calls(db: Path) -> int:
    return _count(db, "SELECT count(*) FROM llm_calls")


def _soon(db: Path, calls: int) -> None:
    _wait_for(lambda: _calls(db) == calls, timeout=SOON_S)


@dataclass
class _Told:
    said: list[str] = field(default_factory=list)  # what serve has said so far
    err: str = ""  # all it said, once stopped


@contextmanager
def _following(db: Path, root: Path, rescan: str = NO_RESCAN, prefix: list[str] = ()) -> Iterator[_Told]:
    """``serve`` following ``root`` into ``db`` (by default with no rescan to come), caught up; stopped after
    the block. ``prefix``: a command to run it under."""
    told = _Told()
    daemon = _serve(db, "--rescan", rescan, str(root), env=_without_logs(db.parent), prefix=prefix)
    try:
        _read_until(daemon, "caught up", told.said)
        yield told
    finally:
        told.err = _stop(daemon, told.said)


def test_a_root_renamed_away_and_made_again_is_watched_again(tmp_path):
    # Only a deletion ended its watch: renamed away (mv ~/.openclaw ~/.openclaw.bak), the watch went with it,
    # and the lines of the one made in its place waited for the rescan.
    logs = LogDir(tmp_path / "openclaw")
    logs.append(llm_call(1))
    db = tmp_path / "ledger.db"
    with _following(db, logs.root):
        logs.root.rename(tmp_path / "openclaw.bak")
        logs = LogDir(logs.root)
        logs.append(llm_call(2))
        _soon(db, 2)
        logs.append(llm_call(3))
        _soon(db, 3)


def test_a_root_that_appears_as_a_symlink_is_watched_where_it_leads(tmp_path):
    # The tailer had resolved it once, at the start, where there was no symlink yet: inotify reported the
    # lines by the path the symlink leads to, which it did not list, and they waited for the rescan.
    logs = LogDir(tmp_path / "data" / "openclaw")
    logs.append(llm_call(1))
    root = tmp_path / "openclaw"
    db = tmp_path / "ledger.db"
    with _following(db, root) as told:
        root.symlink_to(logs.root)
        _soon(db, 1)
        logs.append(llm_call(2))
        _soon(db, 2)
    assert f"{root} appeared: reading it" in told.err


def test_a_root_symlink_switched_to_another_directory_is_read_and_watched_there(tmp_path):
    # Resolved once, at the start: a deploy's `current -> releases/1` switched to releases/2 was never read,
    # however long it ran; only a restart read it.
    first, second = LogDir(tmp_path / "releases" / "1"), LogDir(tmp_path / "releases" / "2")
    first.append(llm_call(1) + llm_call(2))
    second.append(llm_call(101, session="s2") + llm_call(102, session="s2"))
    current = tmp_path / "current"
    current.symlink_to("releases/1")
    db = tmp_path / "ledger.db"
    with _following(db, current) as told:
        assert _calls(db) == 2
        switched = tmp_path / "current.new"
        switched.symlink_to("releases/2")
        switched.rename(current)  # as `ln -sfn` does it, in one step
        _soon(db, 4)  # what the new target holds: those of the old one stay as they were read
        second.append(llm_call(103, session="s2"))
        _soon(db, 5)
        first.append(llm_call(3))  # no longer a root's
        time.sleep(1)
    assert _calls(db) == 5
    assert f"{current} is another directory now ({second.root}): reading it" in told.err
    assert "lost" not in told.err


def test_a_directory_below_a_root_reached_through_a_symlink_is_watched_where_it_leads(tmp_path):
    # watchdog watches none reached through a symlink (agents/main linked from elsewhere): its lines waited for
    # the rescan, and so did those of the directory it was switched to.
    first, second = LogDir(tmp_path / "v1"), LogDir(tmp_path / "v2")  # each agent's directory: agents/main
    first.append(llm_call(1))
    second.append(llm_call(101, session="s2") + llm_call(102, session="s2"))
    root = tmp_path / "openclaw"
    (root / "agents").mkdir(parents=True)
    (root / "agents" / "main").symlink_to(first.root / "agents" / "main")
    db = tmp_path / "ledger.db"
    with _following(db, root):
        assert _calls(db) == 1
        first.append(llm_call(2))
        _soon(db, 2)
        switched = root / "agents" / "main.new"
        switched.symlink_to(second.root / "agents" / "main")
        switched.rename(root / "agents" / "main")
        _soon(db, 4)
        second.append(llm_call(103, session="s2"))
        _soon(db, 5)


def test_an_agent_s_directory_linked_below_a_root_after_the_start_is_watched_where_it_leads(tmp_path):
    # Not only the directories of the first full scan: those a later one lists are looked at too, the new ones alone.
    logs, other = LogDir(tmp_path / "openclaw"), LogDir(tmp_path / "elsewhere", agent="other")
    logs.append(llm_call(1))
    other.append(llm_call(101, session="s2"))
    db = tmp_path / "ledger.db"
    with _following(db, logs.root):
        (logs.root / "agents" / "other").symlink_to(other.root / "agents" / "other")
        _soon(db, 2)
        other.append(llm_call(102, session="s2"))
        _soon(db, 3)


def test_an_agent_s_directory_made_a_symlink_in_its_own_place_is_watched_where_it_leads(tmp_path):
    # Its files keep their names, so nothing new is listed: the directory moved away is what tells that its way
    # may hold a symlink now.
    logs, moved = LogDir(tmp_path / "openclaw"), LogDir(tmp_path / "elsewhere")
    logs.append(llm_call(1))
    moved.append(llm_call(101, session="s2"))
    db = tmp_path / "ledger.db"
    with _following(db, logs.root):
        main, link = logs.root / "agents" / "main", logs.root / "agents" / "main.new"
        link.symlink_to(moved.root / "agents" / "main")
        main.rename(tmp_path / "main.old")  # out of the root, and the symlink in its place at once
        link.rename(main)
        _soon(db, 2)
        # watchdog tells of a directory moved away once it gave up waiting to see where it went: this line comes
        # after that, and only the symlink's watch can tell of it.
        time.sleep(2)
        moved.append(llm_call(102, session="s2"))
        _soon(db, 3)


# serve, with every inotify watch refused as the system's limit refuses it once reached (fs.inotify.max_user_watches),
# or no inotify instance to be had (max_user_instances).
_WITHOUT_INOTIFY = """
import errno, runpy, sys
from watchdog.observers import inotify_c
if sys.argv[1] == "watch":
    def refused(self, path, mask):
        raise OSError(errno.ENOSPC, "inotify watch limit reached")
    inotify_c.InotifyFD._get_or_create_watch = refused
else:
    def refused(cls):
        raise OSError(errno.EMFILE, "inotify instance limit reached")
    inotify_c.InotifyFD._create_inotify_fd = classmethod(refused)
sys.argv = ["agentledger", *sys.argv[2:]]
runpy.run_module("agentledger", run_name="__main__")
"""

_SETTINGS = {"watch": "fs.inotify.max_user_watches", "instance": "fs.inotify.max_user_instances"}


def _wait_ready(said: list[str]) -> None:
    """Until /readyz says ready, as it does a moment after serve logs that it caught up."""
    url = re.search(r"listening on (http://[^\s\"]+)", "".join(said)).group(1)
    _wait_for(lambda: http_get(url, "/readyz")[0] == 200, timeout=10)


@pytest.mark.parametrize("limit", ["watch", "instance"])
def test_serve_reaching_an_inotify_limit_reads_on_by_rescans_and_says_so_once(tmp_path, limit):
    # observer.start() raised: a traceback, exit 1 and nothing indexed; a root that appeared later killed a
    # running daemon the same way.
    logs, later = LogDir(tmp_path / "openclaw"), tmp_path / "later"
    logs.append(llm_call(1))
    db = tmp_path / "ledger.db"
    daemon = subprocess.Popen([sys.executable, "-c", _WITHOUT_INOTIFY, limit, "--db", str(db), "serve", "--listen",
                               "127.0.0.1:0", "--rescan", "0.2", str(logs.root), str(later)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                              env=_without_logs(tmp_path))
    said: list[str] = []
    try:
        _read_until(daemon, "caught up", said)
        _wait_ready(said)
        logs.append(llm_call(2))
        LogDir(later).append(llm_call(3, session="s2"))
        _wait_for(lambda: _calls(db) == 3, timeout=SOON_S)
        _read_until(daemon, f"{later} appeared: reading it", said)
        _wait_ready(said)
    finally:
        err = _stop(daemon, said)
    told = [line for line in err.splitlines() if f"inotify {limit} limit reached" in line]
    assert len(told) == 1 and _SETTINGS[limit] in told[0] and "rescan every 0.2s" in told[0], err
    assert "Traceback" not in err


def _inotify_watches(limit: int) -> list[str]:
    """A command prefix that runs what follows with at most ``limit`` inotify watches, in a user namespace of its
    own (the kernel's per-namespace limit); skips where none can be made."""
    prefix = ["unshare", "-Ur", "sh", "-c", f'echo {limit} > /proc/sys/user/max_inotify_watches && exec "$@"', "-"]
    try:
        made = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except FileNotFoundError:
        made = False
    if not made:
        pytest.skip("no user namespace with a limit of its own on inotify watches here")
    return prefix


@pytest.mark.parametrize("limit, unwatched", [(0, "{root} is not watched"),
                                              (2, "(and maybe more directories) is not watched")],
                         ids=["none", "below-the-root"])
def test_serve_under_a_low_inotify_watch_limit_reads_on_by_rescans_and_says_so_once(tmp_path, limit, unwatched):
    # With none to be had, serve stopped on a traceback; with the root watched and none left for the directories
    # below it, their lines waited for the rescan without a word.
    main, other = LogDir(tmp_path / "openclaw", agent="main"), LogDir(tmp_path / "openclaw", agent="other")
    main.append(llm_call(1))
    db = tmp_path / "ledger.db"
    with _following(db, main.root, rescan="0.2", prefix=_inotify_watches(limit)) as run:
        _wait_ready(run.said)
        main.append(llm_call(2))
        other.append(llm_call(3, session="s2"))
        _wait_for(lambda: _calls(db) == 3, timeout=SOON_S)
    told = [line for line in run.err.splitlines() if "inotify watch limit reached" in line]
    assert len(told) == 1 and unwatched.format(root=main.root) in told[0], run.err
    assert "fs.inotify.max_user_watches" in told[0]
