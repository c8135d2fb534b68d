"""What happens to real files between and during reads: every complete line indexed exactly once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import cli_env, cli_json, ingest, metric_counters
from ledgerdump import rows, scalar
from logwriter import LogDir, llm_call
from test_transcript_sources import _sessions_dir, oc_assistant, oc_header, oc_user
from test_transcript_store import Producer, _assistant, _header, _index, _user

from agentledger.faults import EXIT_CODE
from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger import queries, retention
from agentledger.ledger.db import open_reader, open_writer
from agentledger.ledger.writer import LedgerWriter, now_ms
from agentledger.tail.tailer import Tailer


def ids(db: Path) -> set[int]:
    return {row[0] for row in rows(db, "SELECT id FROM events")}


def want(*ranges: range) -> set[int]:
    return {n for r in ranges for n in r}


def lines(r: range, **kw) -> bytes:
    return b"".join(llm_call(n, **kw) for n in r)


def cost(db: Path) -> int:
    return scalar(db, "SELECT coalesce(sum(cost_pico), 0) FROM llm_calls")


def file_events(db: Path) -> list[tuple]:
    return rows(db, "SELECT event, bytes FROM file_events ORDER BY id")


@contextmanager
def following(db: Path, root: Path, **options) -> Iterator[Pipeline]:
    """A pipeline of the ledger at ``db`` over the oc-telemetry ``root``, run pass by pass as serve's loop runs it."""
    conn = open_writer(db)
    try:
        yield Pipeline(LedgerWriter(conn), specs_from("oc-telemetry", [root]), **options)
    finally:
        conn.close()


def test_torn_line_waits_for_its_newline(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    third = llm_call(3)
    logs.append(lines(range(1, 3)) + third[:25])
    stats = ingest(db, logs.root)
    assert stats.events == 2 and stats.rejects == 0
    logs.append(third[25:])
    stats = ingest(db, logs.root)
    assert stats.events == 1 and stats.rejects == 0
    assert ids(db) == want(range(1, 4))
    assert cost(db) == 3 * 1_000_000


def test_rotation_while_stopped(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 11)))
    ingest(db, logs.root)
    logs.append(lines(range(11, 21)))
    logs.rotate()
    logs.append(lines(range(21, 31)))
    stats = ingest(db, logs.root)
    assert stats.events == 20 and stats.rotated == 1 and stats.lost_files == 0
    assert ids(db) == want(range(1, 31))
    assert cost(db) == 30 * 1_000_000


def test_two_rotations_while_stopped(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 6)))
    ingest(db, logs.root)
    logs.append(lines(range(6, 11)))
    logs.rotate()
    logs.append(lines(range(11, 16)))
    logs.rotate()
    logs.append(lines(range(16, 21)))
    stats = ingest(db, logs.root)
    assert stats.events == 15 and stats.lost_files == 0
    assert ids(db) == want(range(1, 21))


def test_truncation_while_stopped(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 21)))
    ingest(db, logs.root)
    logs.truncate()
    logs.append(lines(range(100, 103)))  # shorter than what was read before
    stats = ingest(db, logs.root)
    assert stats.events == 3 and stats.truncated == 1
    assert ids(db) == want(range(1, 21), range(100, 103))
    assert ("truncate", None) in file_events(db)


def test_truncation_then_longer_rewrite_while_stopped(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 4)))
    ingest(db, logs.root)
    logs.truncate()
    logs.append(lines(range(200, 220)))  # longer than the old offset: only the first line tells
    stats = ingest(db, logs.root)
    assert stats.events == 20
    assert ids(db) == want(range(1, 4), range(200, 220))


def test_copytruncate(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 11)))
    ingest(db, logs.root)
    logs.append(lines(range(11, 16)))  # not read yet when the copy is taken
    copy = logs.copytruncate()
    logs.append(lines(range(16, 21)))
    stats = ingest(db, logs.root)
    assert stats.events == 10 and stats.duplicates == 0 and stats.lost_files == 0
    assert ids(db) == want(range(1, 21))
    assert cost(db) == 20 * 1_000_000
    paths = dict(rows(db, "SELECT path, offset FROM files"))
    assert paths[str(copy)] == copy.stat().st_size


def test_inode_reuse_is_a_new_file(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 11)))
    ingest(db, logs.root)
    old_ino = logs.live.stat().st_ino
    os.unlink(logs.live)
    logs.append(lines(range(50, 53)))  # often lands on the inode just freed
    stats = ingest(db, logs.root)
    assert stats.events == 3
    assert ids(db) == want(range(1, 11), range(50, 53))
    if logs.live.stat().st_ino == old_ino:
        assert scalar(db, "SELECT count(*) FROM files WHERE ino = ?", (old_ino,)) == 2


def _read_first_batch_only(db: Path, root: Path) -> None:
    """Read one batch and stop, as a daemon killed mid catch-up would."""
    stop = threading.Event()
    with following(db, root, stop=stop, batch_lines=2000, on_progress=lambda n: stop.set()) as pipeline:
        pipeline.run_once()


@pytest.mark.parametrize("rotate_before_first_read", [True, False])
def test_file_deleted_before_it_was_read_counts_as_lost(tmp_path, db, rotate_before_first_read):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 10_001)))
    if rotate_before_first_read:
        rotated = logs.rotate()
        logs.append(lines(range(30_000, 30_002)))
    _read_first_batch_only(db, logs.root)
    read = len(ids(db))
    assert 0 < read < 10_000
    size = len(lines(range(1, 10_001)))
    offset = scalar(db, "SELECT offset FROM files ORDER BY id LIMIT 1")
    if not rotate_before_first_read:
        rotated = logs.rotate()
    os.unlink(rotated)  # retention removes it before it was read to the end
    logs.append(lines(range(20_000, 20_005)))
    stats = ingest(db, logs.root)
    assert stats.lost_files == 1
    assert stats.lost_bytes == size - offset
    assert scalar(db, "SELECT lost_bytes FROM files ORDER BY id LIMIT 1") == size - offset
    extra = range(30_000, 30_002) if rotate_before_first_read else range(0)
    assert ids(db) == want(range(1, read + 1), range(20_000, 20_005), extra)


def test_a_file_truncated_in_place_before_it_was_read_to_its_end_counts_what_it_lost(tmp_path, db):
    # Cut back to its first lines, which were read: what was cut away unread is lost, told as a deletion is.
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 10_001)))
    kept = len(lines(range(1, 6)))
    total = 0
    for appended in (range(10_001, 20_001), range(20_001, 30_001)):
        _read_first_batch_only(db, logs.root)
        offset = scalar(db, "SELECT offset FROM files")
        unread = logs.live.stat().st_size - offset
        assert offset > kept and unread > 0
        os.truncate(logs.live, kept)
        stats = ingest(db, logs.root)
        assert (stats.truncated, stats.lost_files, stats.lost_bytes) == (1, 1, unread)
        total += unread
        logs.append(lines(appended))
    row = inputs(db)[str(logs.live)]
    assert (row["status"], row["lost_bytes"]) == ("live", total)  # the second truncation adds to the first
    assert [event for event, _ in file_events(db)] == ["truncate", "truncate"]
    # Rotated, read to its end and removed by retention: nothing more is lost, and what was stays told.
    rotated = logs.rotate()
    ingest(db, logs.root)
    os.unlink(rotated)
    stats = ingest(db, logs.root)
    assert (stats.lost_files, stats.lost_bytes) == (0, 0)
    assert (inputs(db)[str(rotated)]["status"], inputs(db)[str(rotated)]["lost_bytes"]) == ("gone", total)


def test_live_file_vanishing_while_stopped_is_reported_lost(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 11)))
    ingest(db, logs.root)
    logs.append(lines(range(11, 21)))  # written while stopped, then rotated and pruned
    os.unlink(logs.rotate())
    logs.append(lines(range(30, 32)))
    stats = ingest(db, logs.root)
    # Nobody can know what was appended while stopped; the new live file may even sit on the
    # freed inode. Either way the vanished content is reported with unknown unread bytes.
    assert stats.lost_files + stats.truncated == 1
    assert {("lost", None), ("truncate", None)} & set(file_events(db))
    assert ids(db) == want(range(1, 11), range(30, 32))


def test_fully_read_rotated_file_deleted_is_not_a_loss(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 11)))
    rotated = logs.rotate()
    logs.append(lines(range(11, 13)))
    ingest(db, logs.root)
    os.unlink(rotated)
    stats = ingest(db, logs.root)
    assert stats.lost_files == 0
    assert scalar(db, "SELECT status FROM files WHERE path = ?", (str(rotated),)) == "gone"


def test_bad_lines_are_rejects_and_neighbours_are_indexed(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1) + b'{"id": "evt_00", "ts": \n' + llm_call(2) + b"\xff\xfe\x00garbage\n" +
                b"\n" + b"   \t\n" + llm_call(3) + b"[1, 2]\n" + llm_call(4))
    stats = ingest(db, logs.root)
    assert stats.events == 4 and stats.rejects == 5
    assert ids(db) == want(range(1, 5))
    reasons = [r[0].split(":")[0] for r in rows(db, "SELECT reason FROM rejects ORDER BY offset")]
    assert reasons == ["invalid JSON", "invalid UTF-8", "blank line", "blank line", "not a JSON object (list)"]


def test_fifty_megabyte_line_is_rejected_and_the_rest_indexed(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    with open(logs.live, "ab") as f:
        f.write(llm_call(1))
        f.write(b'{"id": "evt_big", "data": "')
        chunk = b"y" * (1 << 20)
        for _ in range(50):
            f.write(chunk)
        f.write(b'"}\n')
        f.write(llm_call(2))
    stats = ingest(db, logs.root)
    assert stats.events == 2 and stats.rejects == 1
    ((length, reason),) = rows(db, "SELECT length, reason FROM rejects")
    assert length > 50 * (1 << 20)
    assert "exceeds max_line" in reason


@pytest.mark.parametrize("looked_between, appended", [(True, range(3, 40)), (False, range(3, 40)),
                                                      (False, range(3, 5))])
def test_an_over_long_torn_line_cut_back_by_its_writer_swallows_none_of_the_lines_after_it(tmp_path, db,
                                                                                           looked_between, appended):
    # The writer dies mid over-long line, then cuts its torn tail back to its last newline and writes on:
    # what the long line was scanned to before no longer holds it.
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 2)))
    kept = logs.live.stat().st_size
    with following(db, logs.root, max_line=1000) as pipeline:
        pipeline.run_once()
        logs.append(llm_call(2, pad=3000)[:2500])
        assert pipeline.run_once().events == 0
        os.truncate(logs.live, kept)
        if looked_between:
            assert pipeline.run_once().events == 0
        logs.append(lines(appended))
        pipeline.run_once()
    assert ids(db) == want(range(1, 2), appended)
    assert scalar(db, "SELECT count(*) FROM rejects") == 0


def test_two_megabyte_tool_result_is_indexed(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1, pad=2 * 1024 * 1024) + llm_call(2))
    stats = ingest(db, logs.root)
    assert stats.events == 2 and stats.rejects == 0


def test_end_before_start_gives_one_complete_row(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    import orjson

    def ev(n, kind, data, **env):
        base = {"id": f"evt_{n:016x}", "ts": 1_790_000_000_000 + n, "seq": n, "agentId": "main",
                "sessionKey": "agent:main:main", "sessionId": "unknown", "kind": kind, "data": data,
                "source": "hook"}
        base.update(env)
        return orjson.dumps(base) + b"\n"

    logs.append(
        ev(1, "session.end", {"sessionId": "S", "messageCount": 4, "durationMs": 9}, sessionKey="unknown",
           sessionId="S")
        + ev(2, "tool.end", {"toolName": "exec", "toolCallId": "t1", "isError": True, "durationMs": 7,
                             "error": "exit 1"}, runId="R")
        + ev(3, "run.end", {"model": "m", "provider": "p", "durationMs": 50,
                            "usage": {"input": 5, "output": 6, "cacheRead": 0, "cacheWrite": 0, "total": 11}},
             runId="R", sessionId="S")
        + ev(4, "tool.start", {"toolName": "exec", "toolCallId": "t1"}, runId="R")
        + ev(5, "run.start", {"model": "m", "provider": "p"}, runId="R", sessionId="S")
        + ev(6, "session.start", {"sessionId": "S"}, sessionKey="unknown", sessionId="S")
    )
    ingest(db, logs.root)
    runs = rows(db, "SELECT status, started_ms, ended_ms, total_tokens, session_key FROM runs")
    tools = rows(db, "SELECT status, started_ms, ended_ms, duration_ms, error FROM tool_calls")
    sess = rows(db, "SELECT session_key, status, started_ms, ended_ms, message_count FROM sessions")
    t = 1_790_000_000_000
    assert runs == [("ok", t + 5, t + 3, 11, "agent:main:main")]
    assert tools == [("error", t + 4, t + 2, 7, "exit 1")]
    # session.* carry no sessionKey: the key is learnt from run.end, which came after session.end.
    assert sess == [("agent:main:main", "ended", t + 6, t + 1, 4)]


@pytest.mark.parametrize("max_line", [4096])
def test_max_line_is_configurable(tmp_path, db, max_line):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1) + llm_call(2, pad=10_000) + llm_call(3))
    stats = ingest(db, logs.root, max_line=max_line)
    assert stats.events == 2 and stats.rejects == 1


def test_a_copytruncate_seen_between_its_copy_and_its_truncate_leaves_no_stale_checkpoint(tmp_path, db):
    # logrotate's copy of a big file takes a while: a pass that saw the copy beside the still-full original
    # followed the copy as a file of its own, and once the original was truncated its row stayed live at
    # the old offset for good (`verify`: "checkpoint … is past the end of the file"; files counted twice).
    from agentledger.ledger.verify import check_checkpoints

    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 11)))
    with following(db, logs.root) as pipeline:
        pipeline.run_once()
        copy = logs.rotated_name()
        shutil.copyfile(logs.live, copy)
        pipeline.run_once()  # the copy, beside an original that still holds the same lines
        logs.truncate()
        pipeline.run_once()
        logs.append(lines(range(11, 16)))
        pipeline.run_once()
        assert check_checkpoints(pipeline.writer.conn) == ([], [])
    assert ids(db) == want(range(1, 16))
    # The original was truncated in place after its copy was taken: told as such, once, with nothing unread.
    assert file_events(db) == [("truncate", None)]
    status = {path: row["status"] for path, row in inputs(db).items()}
    assert list(status.values()).count("live") == 1 and status[str(copy)] == "rotated"


def test_copytruncate_does_not_record_a_bad_line_twice(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1) + b'{"bad": \n' + llm_call(2))
    assert ingest(db, logs.root).rejects == 1
    logs.copytruncate()
    logs.append(llm_call(3))
    stats = ingest(db, logs.root)
    assert (stats.events, stats.rejects) == (1, 0)
    assert scalar(db, "SELECT count(*) FROM rejects") == 1


def rejected(db: Path) -> tuple[int, int, float]:
    """Rejected lines as `usage`, `rejects` and /metrics count them."""
    conn = open_reader(db)
    try:
        counts = (queries.usage(conn, queries.Window())["rejected_lines"], len(queries.rejects(conn, queries.Window())))
    finally:
        conn.close()
    labels = (("result", "rejected"), ("source", "oc-telemetry"))
    return (*counts, metric_counters(db)[("agentledger_ingest_lines_total", labels)])


@pytest.mark.parametrize("heads_pruned", [False, True])
@pytest.mark.parametrize("unread_bad_line", [False, True])
def test_a_copy_of_a_file_rejects_its_bad_lines_once_as_a_fresh_read_of_it_does(tmp_path, db, unread_bad_line,
                                                                                heads_pruned):
    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1) + b'{"bad": \n' + llm_call(2))
    ingest(db, logs.root)
    if heads_pruned:  # by retention, before the copy is read
        conn = open_writer(db)
        try:
            retention.prune(conn, now_ms() + 1)
        finally:
            conn.close()
    if unread_bad_line:  # the copy and the original both hold it, both read on in the next pass
        logs.append(b'{"worse": \n' + llm_call(3))
    shutil.copyfile(logs.live, logs.rotated_name())
    ingest(db, logs.root)
    logs.truncate()
    ingest(db, logs.root)
    afresh = tmp_path / "afresh.db"
    ingest(afresh, logs.root)
    bad = 2 if unread_bad_line else 1
    assert rejected(db) == rejected(afresh) == (bad, bad, bad)


def test_files_that_begin_with_the_same_bad_line_are_no_copies_of_each_other(tmp_path, db):
    # A bad line names no event: two files may well begin with the same one, then differ.
    logs = LogDir(tmp_path / "state")
    logs.append(b'{"bad": \n' + llm_call(1) + b'{"bad": \n')
    logs.rotate()
    logs.append(b'{"bad": \n' + llm_call(2) + b'{"bad": \n')  # as long as the other's
    ingest(db, logs.root)
    assert rejected(db) == (4, 4, 4)


@pytest.mark.parametrize(("copied", "written_after_copy"), [(True, 0), (True, 3), (False, 3)])
def test_a_file_truncated_after_a_crash_is_lost_only_where_no_copy_of_it_holds_its_lines(tmp_path, db, copied,
                                                                                        written_after_copy):
    # Killed once both files were recorded and before any line was read: the copy, read after the original is
    # found truncated, holds every line of it but those written after it was taken.
    logs = LogDir(tmp_path / "state")
    before, after = lines(range(1, 6)), lines(range(6, 6 + written_after_copy))
    logs.append(before)
    if copied:
        shutil.copyfile(logs.live, logs.rotated_name())
    logs.append(after)
    assert _cli_ingest(db, logs.root, fault="before_commit:1").returncode == EXIT_CODE
    logs.truncate()
    out = _cli_ingest(db, logs.root)
    assert out.returncode == 0, out.stderr
    lost = len(after) if copied else len(before + after)
    summary = json.loads(out.stdout)
    assert (summary["lost_files"], summary["lost_bytes"]) == (1 if lost else 0, lost)
    assert inputs(db)[str(logs.live)]["lost_bytes"] == (lost or None)
    assert ids(db) == (want(range(1, 6)) if copied else set())


@pytest.mark.parametrize("copy_removed", [False, True])
def test_a_copy_read_before_its_original_is_found_truncated_leaves_nothing_lost(tmp_path, db, monkeypatch,
                                                                               copy_removed):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 6)))
    with following(db, logs.root) as pipeline:
        pipeline.run_once()
        logs.append(lines(range(6, 11)))
        copy = logs.rotated_name()
        shutil.copyfile(logs.live, copy)
        read = Tailer.read

        def truncated_once_the_copy_is_read(tailer, row, p):
            # copytruncate's truncate, landing between the pass's read of the copy (rotated: first) and the original
            yield from read(tailer, row, p)
            if not p.live:
                logs.truncate()

        monkeypatch.setattr(Tailer, "read", truncated_once_the_copy_is_read)
        pipeline.run_once()
        monkeypatch.undo()
        if copy_removed:  # by retention, read to its end
            os.unlink(copy)
        stats = pipeline.run_once()
    assert (stats.truncated, stats.lost_files, stats.lost_bytes) == (1, 0, 0)
    assert inputs(db)[str(logs.live)]["lost_bytes"] is None
    assert ids(db) == want(range(1, 11))


def test_hard_link_is_one_file(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 6)))
    os.link(logs.live, logs.dir / "events.2026-10-01.jsonl")
    stats = ingest(db, logs.root)
    assert (stats.lines, stats.events) == (5, 5)
    assert scalar(db, "SELECT count(*) FROM files") == 1


def test_a_pass_over_the_files_written_to_reads_only_them_and_scans_in_full_on_anything_else(tmp_path, db):
    """What the daemon does between full scans, when inotify names the files written to."""
    root = tmp_path / "state"
    a, b = LogDir(root, agent="a"), LogDir(root, agent="b")
    a.append(lines(range(1, 3)))
    b.append(lines(range(100, 102), session="b"))
    with following(db, root) as pipeline:
        assert pipeline.run_once(set()).lines == 4  # the first pass always lists the files
        a.append(lines(range(3, 5)))
        b.append(lines(range(102, 104), session="b"))
        assert pipeline.run_once({str(a.live.resolve())}).lines == 2
        assert ids(db) == want(range(1, 5), range(100, 102))
        # A write to a file no layout follows changes nothing.
        (a.dir / "notes.txt").write_text("x")
        assert pipeline.run_once({str((a.dir / "notes.txt").resolve())}).lines == 0
        # The file at a's path is a new one (rotated): this pass scans in full, b's lines included.
        a.rotate()
        a.append(lines(range(5, 7)))
        stats = pipeline.run_once({str(a.live.resolve())})
        assert (stats.lines, stats.rotated) == (4, 1)
        # Truncated in place: so does this one, and what was left unread is counted.
        b.append(lines(range(104, 106), session="b"))
        b.truncate()
        b.append(lines(range(200, 201), session="b"))
        stats = pipeline.run_once({str(b.live.resolve())})
        assert (stats.lines, stats.truncated) == (1, 1)
    assert ids(db) == want(range(1, 7), range(100, 104), range(200, 201))


def _cli_ingest(db: Path, root: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    env = cli_env(db) | ({"AGENTLEDGER_FAULT": fault} if fault else {})
    return subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "--log-format", "text", "ingest",
                           str(root), "--json"], capture_output=True, env=env, timeout=60)


def test_a_symlink_loop_among_the_agents_is_skipped_with_one_warning(tmp_path, db, caplog):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 4)))
    (logs.root / "agents" / "loop").symlink_to("loop")
    out = _cli_ingest(db, logs.root)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["events"] == 3
    assert out.stderr.count(b"Too many levels of symbolic links") == 1
    assert ids(db) == want(range(1, 4))
    # The daemon lists the agents on every pass: the loop is told about once, not every time.
    caplog.set_level("WARNING", logger="agentledger.tail")
    with following(db, logs.root) as pipeline:
        logs.append(lines(range(4, 6)))
        assert pipeline.run_once().events == 2
        logs.append(lines(range(6, 7)))
        assert pipeline.run_once().events == 1
    assert len([r for r in caplog.records if r.name == "agentledger.tail"]) == 1


def inputs(db: Path) -> dict[str, dict]:
    """What ``agentledger inputs`` reports, by path."""
    conn = open_reader(db)
    try:
        return {row["path"]: row for row in queries.file_status(conn)}
    finally:
        conn.close()


def shown_inputs(db: Path, path: Path) -> list[list[str]]:
    """The words of the lines ``agentledger inputs`` prints of ``path``, from its status on."""
    shown = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "inputs"], capture_output=True,
                           text=True, env=cli_env(db), timeout=60).stdout.splitlines()
    return [line.split()[2:] for line in shown if str(path) in line]


def _ingest_as(prefix: list[str], db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(prefix + [sys.executable, "-m", "agentledger", "--db", str(db), "--log-format", "text",
                                    "ingest", "--json", *args], capture_output=True, text=True, env=cli_env(db),
                          timeout=60)


def test_an_unreadable_file_is_told_counted_listed_and_read_once_it_can_be(tmp_path, db, unprivileged):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 4)))
    ingest(db, logs.root)
    logs.append(lines(range(4, 6)))
    rotated = logs.rotate()  # followed, with two lines unread
    logs.append(lines(range(6, 8)))  # new
    for path in (rotated, logs.live):
        path.chmod(0)
    out = _ingest_as(unprivileged, db, str(logs.root))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    # Its bytes are still there: not lost, and read from its checkpoint once they can be.
    assert (summary["unreadable_files"], summary["lost_files"], summary["events"]) == (2, 0, 0)
    for path in (rotated, logs.live):
        assert out.stderr.count(f"cannot read file {path}: Permission denied") == 1, out.stderr
        assert (inputs(db)[str(path)]["status"], inputs(db)[str(path)]["reason"]) == ("unreadable", "Permission denied")
    assert shown_inputs(db, rotated) == [["unreadable", "-", "-", "-", "-", "Permission", "denied"]]
    for path in (rotated, logs.live):
        path.chmod(0o644)
    stats = ingest(db, logs.root)
    assert (stats.events, stats.lost_files, stats.unreadable_files) == (4, 0, 0)
    assert ids(db) == want(range(1, 8))
    assert {row["status"] for row in inputs(db).values()} == {"live", "rotated"}


def indexed_state(tmp_path: Path, copy: str) -> tuple[Path, Path]:
    """An OpenClaw state dir holding session s1 in its ``copy`` (its JSONL transcript, or the transcript store),
    whose sessions.json names it agent:main:main: (the state dir, the sessions.json)."""
    state = tmp_path / "state"
    if copy == "transcript":
        sdir = _sessions_dir(tmp_path, "agent:main:main", "s1")
        (sdir / "s1.jsonl").write_bytes(oc_header("s1") + oc_user("u1", 1) + oc_assistant("a1", 2))
    else:
        Producer(state).add(_header(), _user("u1", 1), _assistant("a1", 2), session="s1")
        _index(state, session="s1")
    return state, state / "agents" / "main" / "sessions" / "sessions.json"


def unreadable_index(tmp_path: Path, copy: str) -> tuple[Path, Path]:
    """``indexed_state``, its sessions.json made unreadable."""
    state, index = indexed_state(tmp_path, copy)
    index.chmod(0)
    return state, index


@pytest.mark.parametrize("copy", ["transcript", "store"])
def test_an_unreadable_sessions_json_is_counted_and_listed_until_it_can_be_read(tmp_path, db, unprivileged, copy):
    # Its sessions take guessed keys while it cannot be read, and only a warning said why: `inputs`, which
    # lists every other input that cannot be read, did not list it.
    state, index = unreadable_index(tmp_path, copy)
    out = _ingest_as(unprivileged, db, "--format", "oc-transcript", str(state))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unreadable_files"] == 1
    listed = {row["path"]: row for row in cli_json(db, "inputs")}
    assert {k: listed[str(index)][k] for k in ("source", "status", "reason")} == {
        "source": "oc-transcript", "status": "unreadable", "reason": "Permission denied"}
    assert shown_inputs(db, index) == [["unreadable", "-", "-", "-", "-", "Permission", "denied"]]
    index.chmod(0o644)
    out = _ingest_as(unprivileged, db, "--format", "oc-transcript", str(state))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unreadable_files"] == 0
    assert str(index) not in {row["path"] for row in cli_json(db, "inputs")}
    assert shown_inputs(db, index) == []
    assert rows(db, "SELECT session_key FROM sessions WHERE session_id = 's1'") == [("agent:main:main",)]


@pytest.mark.parametrize("copy", ["transcript", "store"])
@pytest.mark.parametrize(("held", "reason"), [
    ("directory", "not a regular file"),
    (b'{"agent:main:main": {"sessionId": "s1"', "not a JSON object: unexpected end of data"),
    (b'[{"sessionId": "s1"}]', "not a JSON object"),
], ids=["directory", "truncated", "array"])
def test_a_sessions_json_that_lists_nothing_readable_is_counted_and_listed_until_it_does(tmp_path, db, copy, held,
                                                                                         reason):
    # It was taken as listing no session: its sessions took guessed keys, with no warning and no `inputs` row.
    state, index = indexed_state(tmp_path, copy)
    listing = index.read_bytes()
    index.unlink()
    if held == "directory":
        index.mkdir()
    else:
        index.write_bytes(held)
    out = _ingest_as([], db, "--format", "oc-transcript", str(state))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unreadable_files"] == 1
    assert out.stderr.count(f"cannot read file {index}: {reason};") == 1, out.stderr
    listed = {row["path"]: row for row in cli_json(db, "inputs")}
    assert {k: listed[str(index)][k] for k in ("source", "status", "reason")} == {
        "source": "oc-transcript", "status": "unreadable", "reason": reason}
    assert shown_inputs(db, index) == [["unreadable", "-", "-", "-", "-", *reason.split()]]
    if held == "directory":
        index.rmdir()
    index.write_bytes(listing)
    out = _ingest_as([], db, "--format", "oc-transcript", str(state))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unreadable_files"] == 0
    assert str(index) not in {row["path"] for row in cli_json(db, "inputs")}
    assert rows(db, "SELECT session_key FROM sessions WHERE session_id = 's1'") == [("agent:main:main",)]


def test_a_broken_sessions_json_in_an_agent_folder_linked_from_elsewhere_is_listed_under_its_root(tmp_path, db):
    # Its path was resolved again, out of the root the folder is read through: nothing listed, nothing counted.
    state, index = indexed_state(tmp_path, "transcript")
    agent = state / "agents" / "main"
    agent.rename(tmp_path / "elsewhere")
    agent.symlink_to(tmp_path / "elsewhere")
    index.write_bytes(b"[]")
    out = _ingest_as([], db, "--format", "oc-transcript", str(state))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unreadable_files"] == 1
    assert shown_inputs(db, index) == [["unreadable", "-", "-", "-", "-", "not", "a", "JSON", "object"]]


def test_lines_written_to_a_file_while_it_cannot_be_read_are_lost_if_it_goes_before_it_can_be(tmp_path, db,
                                                                                               unprivileged):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 4)))
    ingest(db, logs.root)
    logs.live.chmod(0o200)
    unread = lines(range(4, 7))
    logs.append(unread)
    out = _ingest_as(unprivileged, db, str(logs.root))
    assert out.returncode == 0, out.stderr
    row = inputs(db)[str(logs.live)]
    assert (row["status"], row["size"], row["lost_bytes"]) == ("unreadable", logs.live.stat().st_size, None)
    os.unlink(logs.live)
    stats = ingest(db, logs.root)
    assert (stats.lost_files, stats.lost_bytes) == (1, len(unread))
    row = inputs(db)[str(logs.live)]
    assert (row["status"], row["lost_bytes"]) == ("lost", len(unread))


def test_an_unreadable_directory_is_told_and_its_followed_files_are_not_lost(tmp_path, db, unprivileged):
    main, work = LogDir(tmp_path / "state"), LogDir(tmp_path / "state", agent="work")
    main.append(lines(range(1, 3)))
    work.append(lines(range(100, 103), session="w"))
    ingest(db, main.root)
    work.append(lines(range(103, 105), session="w"))
    work.dir.chmod(0)
    try:
        out = _ingest_as(unprivileged, db, str(main.root))
    finally:
        work.dir.chmod(0o755)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["unreadable_dirs"], summary["files"], summary["lost_files"]) == (1, 1, 0)
    assert out.stderr.count(f"cannot list directory {work.dir}: Permission denied") == 1, out.stderr
    assert inputs(db)[str(work.dir)]["status"] == "unreadable"
    assert inputs(db)[str(work.live)]["status"] == "live"
    assert ingest(db, main.root).events == 2
    assert ids(db) == want(range(1, 3), range(100, 105))
    assert str(work.dir) not in inputs(db)


def test_a_followed_directory_turned_into_a_symlink_loop_is_not_lost(tmp_path, db):
    # A symlink loop cannot be listed by root either: what the directory held is not taken for gone.
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 3)))
    ingest(db, logs.root)
    logs.append(lines(range(3, 5)))
    aside = logs.dir.with_name("aside")
    logs.dir.rename(aside)
    logs.dir.symlink_to(logs.dir.name)
    stats = ingest(db, logs.root)
    assert (stats.unreadable_dirs, stats.lost_files, stats.events) == (1, 0, 0)
    assert inputs(db)[str(logs.dir)]["reason"] == "Too many levels of symbolic links"
    logs.dir.unlink()
    aside.rename(logs.dir)
    stats = ingest(db, logs.root)
    assert (stats.unreadable_dirs, stats.lost_files, stats.events) == (0, 0, 2)
    assert ids(db) == want(range(1, 5))
    assert str(logs.dir) not in inputs(db)


def test_a_root_with_nothing_in_its_format_says_so(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    logs.append(lines(range(1, 3)))
    out = _ingest_as([], db, "--format", "claude-code", str(logs.root))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files"] == 0
    warned = [line for line in out.stderr.splitlines() if "WARNING" in line]
    assert len(warned) == 1 and warned[0].endswith(
        f"{logs.root} holds no claude-code files; it holds oc-telemetry files: read it as oc-telemetry"), out.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _ingest_as([], db, str(empty))
    assert out.stderr.strip().endswith(f"{empty} holds no oc-telemetry files"), out.stderr


@pytest.mark.parametrize("where, held", [
    ("claude-code", "claude-code"),  # hooks.jsonl beside projects/, as history.jsonl lies in ~/.claude
    ("claude-code/projects/-home-dev-src-web-frontend", "claude-code"),
    ("oc-transcript/agents/work/sessions", "oc-transcript"),
])
def test_a_root_of_another_format_is_named_by_where_its_files_lie(claude_corpus, db, where, held):
    # A Claude Code dir was told to be read as oc-transcript, which took its one loose *.jsonl for a
    # transcript and indexed nothing.
    root = (claude_corpus.parent / where).resolve()  # as ingest names it
    out = _ingest_as([], db, str(root))
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().endswith(
        f"{root} holds no oc-telemetry files; it holds {held} files: read it as {held}"), out.stderr


def test_a_restore_in_place_is_read_again_and_reported_as_the_file_now_is(tmp_path, db):
    logs = LogDir(tmp_path / "state")
    backup = llm_call(1) + b'{"bad": \n' + llm_call(2)
    logs.append(backup)
    logs.append(lines(range(3, 6)))
    assert (ingest(db, logs.root).rejects, len(ids(db))) == (1, 5)
    logs.live.write_bytes(backup)  # the same inode, the same first line, three lines
    stats = ingest(db, logs.root)
    assert (stats.truncated, stats.lines, stats.events, stats.duplicates) == (1, 3, 0, 2)
    assert stats.rejects == 0  # that bad line was counted when first read
    assert scalar(db, "SELECT count(*) FROM rejects") == 1
    row = inputs(db)[str(logs.live)]
    assert (row["offset"], row["size"], row["lines"]) == (len(backup), len(backup), 3)
    # Rotated, read to its end and removed by retention: nothing of it was lost.
    rotated = logs.rotate()
    logs.append(lines(range(6, 7)))
    ingest(db, logs.root)
    os.unlink(rotated)
    stats = ingest(db, logs.root)
    assert (stats.lost_files, stats.lost_bytes) == (0, 0)
    assert inputs(db)[str(rotated)]["status"] == "gone"
    assert ids(db) == want(range(1, 7))


def _put_back(logs: LogDir, data: bytes, new_inode: bool) -> None:
    """Restore a backup of the live file: copied beside it and renamed over it, or written over it."""
    if new_inode:
        copy = logs.dir / "events.jsonl.restoring"
        copy.write_bytes(data)
        os.replace(copy, logs.live)
    else:
        logs.live.write_bytes(data)


@pytest.mark.parametrize("new_inode", [True, False])
@pytest.mark.parametrize("read_between", [True, False])
def test_an_older_copy_put_back_is_read_from_its_start(tmp_path, db, new_inode, read_between):
    logs = LogDir(tmp_path / "state")
    backup = lines(range(1, 4))
    logs.append(backup)
    logs.append(lines(range(4, 7)))
    assert ingest(db, logs.root).events == 6
    read_to = len(backup) + len(lines(range(4, 7)))
    _put_back(logs, backup, new_inode)  # the same first line, shorter than what was read
    if read_between:
        stats = ingest(db, logs.root)
        assert (stats.truncated, stats.events, stats.duplicates, stats.rejects) == (1, 0, 3, 0)
    logs.append(lines(range(100, 104), pad=7))
    data = logs.live.read_bytes()
    assert len(data) > read_to and data[read_to - 1:read_to] != b"\n"  # read on from there, lines were lost
    stats = ingest(db, logs.root)
    assert (stats.events, stats.rejects, stats.lost_files) == (4, 0, 0)
    assert stats.truncated == (0 if read_between else 1)
    assert ids(db) == want(range(1, 7), range(100, 104))
    assert scalar(db, "SELECT count(*) FROM rejects") == 0
    row = inputs(db)[str(logs.live)]
    assert (row["offset"], row["size"], row["lines"], row["status"]) == (len(data), len(data), 7, "live")


@pytest.mark.parametrize("new_inode", [True, False])
def test_an_older_copy_put_back_is_read_from_its_start_even_with_a_line_end_at_the_checkpoint(tmp_path, db,
                                                                                              new_inode):
    """Lines of one length: what is written after the copy ends lines exactly where the file was read to."""
    logs = LogDir(tmp_path / "state")
    backup = lines(range(1, 4))
    logs.append(backup + lines(range(4, 7)))
    assert ingest(db, logs.root).events == 6
    read_to = logs.live.stat().st_size
    _put_back(logs, backup, new_inode)
    logs.append(lines(range(7, 10)))
    data = logs.live.read_bytes()
    assert len(data) == read_to and data[read_to - 1:read_to] == b"\n"  # a line end where reading stopped
    stats = ingest(db, logs.root)
    assert (stats.truncated, stats.events, stats.duplicates, stats.rejects) == (1, 3, 3, 0)
    assert ids(db) == want(range(1, 10))


def test_a_pass_over_the_files_written_to_sees_an_older_copy_written_over_one(tmp_path, db):
    """Written over in place and appended to before the daemon's next pass: inotify reports a write."""
    logs = LogDir(tmp_path / "state")
    backup = lines(range(1, 4))
    logs.append(backup + lines(range(4, 7)))
    with following(db, logs.root) as pipeline:
        assert pipeline.run_once(set()).events == 6
        _put_back(logs, backup, new_inode=False)
        logs.append(lines(range(100, 104), pad=7))
        stats = pipeline.run_once({str(logs.live.resolve())})
        assert (stats.truncated, stats.events, stats.rejects) == (1, 4, 0)
    assert ids(db) == want(range(1, 7), range(100, 104))


def test_a_root_named_in_bytes_that_are_not_utf8_is_read_like_any_other(tmp_path, db):
    # The root itself went into the ledger as typed, which SQLite cannot store: ingest failed.
    logs = LogDir(tmp_path / os.fsdecode(b"st\xffate"))
    logs.append(lines(range(1, 4)))
    out = _cli_ingest(db, logs.root)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["events"] == 3
    assert scalar(db, "SELECT root FROM files") == str(tmp_path / "st\\xffate")
    logs.append(lines(range(4, 6)))
    stats = ingest(db, logs.root)  # known again under its root: read on, nothing twice
    assert (stats.events, stats.duplicates) == (2, 0)
    assert ids(db) == want(range(1, 6))


def test_a_directory_named_in_bytes_that_are_not_utf8_is_read_like_any_other(tmp_path, db):
    root = tmp_path / "state"
    good, odd = LogDir(root, agent="good"), LogDir(root, agent=os.fsdecode(b"zz\xff"))
    good.append(lines(range(1, 4)))
    odd.append(lines(range(10, 13), session="b") + b'{"bad": \n')
    out = _cli_ingest(db, root)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["events"], summary["rejected_lines"], summary["files"]) == (6, 1, 2)
    name = str(root / "agents" / "zz\\xff" / "telemetry" / "events.jsonl")  # as inputs and rejects show it
    assert (inputs(db)[name]["lines"], inputs(db)[name]["status"]) == (4, "live")
    assert scalar(db, "SELECT path FROM rejects") == name
    # Known again by its name after a restart: read on from its checkpoint, not moved nor read twice.
    odd.append(lines(range(13, 14), session="b"))
    odd.rotate()
    stats = ingest(db, root)
    assert (stats.events, stats.duplicates, stats.rejects, stats.rotated) == (1, 0, 0, 1)
    assert file_events(db) == [("rotate", None)]
    assert ids(db) == want(range(1, 4), range(10, 14))
