"""A file truncated, rewritten or replaced between the scan that identified it and the read of its lines."""

from __future__ import annotations

import os

from conftest import unless_it_waits_on
from logwriter import LogDir, llm_call

from agentledger.ledger.db import open_writer
from agentledger.ledger.writer import LedgerWriter
from agentledger.tail.tailer import Tailer


def test_lines_written_after_a_truncation_are_not_read_as_the_old_file(tmp_path):
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1) + llm_call(2))
    conn = open_writer(tmp_path / "ledger.db")
    try:
        tailer = Tailer(LedgerWriter(conn), "oc-telemetry", [logs.root])
        pairs, opened, _ = tailer.scan()
        [(row, physical)] = pairs
        logs.truncate()  # the first generation goes, another one takes the same inode
        logs.append(llm_call(3) + llm_call(4) + llm_call(5))
        assert list(tailer.read(row, physical)) == []
        tailer.close(opened)
        # The next scan knows the new content for what it is and reads it as a file of its own.
        pairs, opened, _ = tailer.scan()
        chunks = [chunk for row, p in pairs for chunk in tailer.read(row, p)]
        tailer.close(opened)
        assert [line for chunk in chunks for _, line in chunk.result.lines] == [
            llm_call(n).rstrip(b"\n") for n in (3, 4, 5)]
    finally:
        conn.close()


def test_a_file_replaced_by_a_fifo_after_the_scan_is_not_waited_on_when_opened_again(tmp_path):
    # A file past what a scan holds open is opened again by its path to be read: a FIFO put there in between
    # waited for a writer, and the pass with it.
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    conn = open_writer(tmp_path / "ledger.db")
    try:
        tailer = Tailer(LedgerWriter(conn), "oc-telemetry", [logs.root])
        tailer._hold = 0  # as if the scan had reached half the descriptor limit before this file
        [(row, physical)], opened, _ = tailer.scan()
        logs.live.unlink()
        os.mkfifo(logs.live)
        assert unless_it_waits_on(logs.live, lambda: list(tailer.read(row, physical))) == []
        tailer.close(opened)
        pairs, opened, _ = tailer.scan()
        tailer.close(opened)
        assert pairs == []  # the FIFO is no file of the source's
    finally:
        conn.close()
