"""A full disk, a long reader and another process's write lock: ingest pauses or waits, never loses or doubles.

While ingest is paused /readyz answers 503 with the reason and no checkpoint moves; when the
space (or the lock) comes back it resumes on its own, and the ledger ends equal to a clean
one-shot build of the same files. A full state dir pauses nothing: only the hot views' files wait.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time

import apsw
import pytest
from logwriter import LogDir, llm_call
from served import (
    Served,
    assert_consistent,
    assert_equals_clean_build,
    assert_hot_views_equal_ledger,
    count,
    wait_for,
)

EVENTS = "SELECT count(*) FROM events"
OFFSETS = "SELECT coalesce(sum(offset), 0) FROM files"


def _lines(first: int, n: int, session: str = "s1") -> bytes:
    return b"".join(llm_call(i, session=session) for i in range(first, first + n))


def _paused_because(daemon: Served, words: str) -> bool:
    status, body = daemon.get("/readyz")
    return status == 503 and words in body.get("reason", "")


def _stays(db, sql: str, seconds: float = 1.5) -> int:
    """The value of ``sql``, checked not to move for ``seconds``."""
    before = count(db, sql)
    time.sleep(seconds)
    assert count(db, sql) == before
    return before


def _served(tmp_path, logs: LogDir, fault: str | None = None, **kwargs) -> Served:
    daemon = Served.on(tmp_path, logs.root, **kwargs)
    daemon.start(fault=fault)
    wait_for(lambda: daemon.get("/readyz")[0] == 200, what="ready")
    return daemon


def test_a_full_ledger_disk_pauses_ingest_until_space_returns(tmp_path):
    logs = LogDir(tmp_path / "logs")
    logs.append(_lines(1, 10))
    pages = tmp_path / "max-pages"
    daemon = _served(tmp_path, logs, fault=f"max_page_count={pages}")
    try:
        wait_for(lambda: count(daemon.db, EVENTS) == 10)
        pages.write_text(str(count(daemon.db, "SELECT page_count FROM pragma_page_count")))
        logs.append(_lines(11, 3000))
        wait_for(lambda: _paused_because(daemon, "disk full"), what="a paused ingest")
        assert _stays(daemon.db, EVENTS) < 3010
        _stays(daemon.db, OFFSETS)
        pages.unlink()  # space returns
        wait_for(lambda: count(daemon.db, EVENTS) == 3010, what="all events")
        wait_for(lambda: daemon.get("/readyz") == (200, {"ready": True}), what="ready again")
        assert daemon.stop() == 0, daemon.log()
    finally:
        daemon.kill()
    assert "ingest paused, disk full" in daemon.log() and "ingest resumed" in daemon.log()
    assert_consistent(daemon.db)
    assert_equals_clean_build(daemon.db, logs.root, tmp_path)


def _fill(directory) -> os.PathLike:
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


@pytest.fixture
def small_fs(tmp_path):
    """A 512 KiB tmpfs: a disk that really fills up. Mounting needs root (or CAP_SYS_ADMIN)."""
    mount = tmp_path / "small-fs"
    mount.mkdir()
    ran = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], capture_output=True)
    if ran.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_state_dir_neither_pauses_ingest_nor_loses_the_hot_views(tmp_path, small_fs):
    logs = LogDir(tmp_path / "logs")
    logs.append(_lines(1, 10))
    daemon = _served(tmp_path, logs, state_dir=small_fs / "state")
    try:
        wait_for(lambda: count(daemon.db, EVENTS) == 10)
        filler = _fill(small_fs)
        logs.append(_lines(11, 5, session="s2"))
        wait_for(lambda: "cannot write session views" in daemon.log(), what="the failed write told")
        logs.append(_lines(16, 5, session="s3"))
        wait_for(lambda: count(daemon.db, EVENTS) == 20, what="all events while the state dir is full")
        assert daemon.get("/readyz") == (200, {"ready": True})
        filler.unlink()
        wait_for(lambda: "session views are written again" in daemon.log(), what="the views written")
        assert daemon.stop() == 0, daemon.log()
    finally:
        daemon.kill()
    assert daemon.log().count("cannot write session views (No space left on device)") == 1, daemon.log()
    assert_consistent(daemon.db)
    assert_equals_clean_build(daemon.db, logs.root, tmp_path)
    assert_hot_views_equal_ledger(daemon.db, daemon.state_dir, {"agent:main:s2", "agent:main:s3"})


def test_a_full_state_dir_at_exit_is_told_as_the_hot_views_alone(tmp_path, small_fs):
    # The one line said gate decisions, hook events or hot views could not be saved, and that hook events were
    # lost: only the views' files were, and the ledger held the rest.
    logs = LogDir(tmp_path / "logs")
    logs.append(_lines(1, 10))
    daemon = _served(tmp_path, logs, state_dir=small_fs / "state", flush_interval_s=3600.0)
    try:
        wait_for(lambda: count(daemon.db, EVENTS) == 10)
        filler = _fill(small_fs)
        logs.append(_lines(11, 5, session="s2"))
        wait_for(lambda: count(daemon.db, EVENTS) == 15, what="all events while the state dir is full")
        assert daemon.stop() == 0, daemon.log()
    finally:
        daemon.kill()
    filler.unlink()
    [told] = [line for line in daemon.log().splitlines() if "at exit" in line]
    assert "could not save hot views at exit (" in told and "No space left on device" in told, told
    assert "they are rebuilt from the ledger at the next start" in told
    assert "gate decisions" not in told and "hook events" not in told and "lost" not in told, told
    assert daemon.log().rstrip().endswith('"msg":"stopped"}'), daemon.log()
    assert_equals_clean_build(daemon.db, logs.root, tmp_path)


def test_a_long_reader_transaction_neither_blocks_nor_loses_anything(tmp_path):
    logs = LogDir(tmp_path / "logs")
    logs.append(_lines(1, 10))
    daemon = _served(tmp_path, logs)
    try:
        wait_for(lambda: count(daemon.db, EVENTS) == 10)
        reader = apsw.Connection(str(daemon.db), flags=apsw.SQLITE_OPEN_READONLY)
        reader.execute("BEGIN")
        assert reader.execute(EVENTS).fetchall()[0][0] == 10
        for first in range(11, 2011, 200):
            logs.append(_lines(first, 200))
            time.sleep(0.05)
        wait_for(lambda: count(daemon.db, EVENTS) == 2010, what="all events while a reader holds its snapshot")
        assert reader.execute(EVENTS).fetchall()[0][0] == 10  # its snapshot did not move under it
        reader.execute("COMMIT")
        reader.close()
        assert daemon.stop() == 0, daemon.log()
    finally:
        daemon.kill()
    assert_consistent(daemon.db)
    assert_equals_clean_build(daemon.db, logs.root, tmp_path)


def test_another_process_holding_the_write_lock_pauses_ingest_until_it_lets_go(tmp_path):
    logs = LogDir(tmp_path / "logs")
    logs.append(_lines(1, 10))
    daemon = _served(tmp_path, logs)
    try:
        wait_for(lambda: count(daemon.db, EVENTS) == 10)
        intruder = apsw.Connection(str(daemon.db))
        intruder.execute("BEGIN IMMEDIATE")
        logs.append(_lines(11, 500))
        # The writer waits out its busy timeout (10 s), then pauses and says why.
        wait_for(lambda: _paused_because(daemon, "locked"), timeout=40, what="a paused ingest")
        assert _stays(daemon.db, EVENTS, 0.5) == 10
        intruder.execute("ROLLBACK")
        intruder.close()
        wait_for(lambda: count(daemon.db, EVENTS) == 510, what="all events")
        wait_for(lambda: daemon.get("/readyz")[0] == 200, what="ready again")
        assert daemon.stop() == 0, daemon.log()
    finally:
        daemon.kill()
    assert_consistent(daemon.db)
    assert_equals_clean_build(daemon.db, logs.root, tmp_path)
