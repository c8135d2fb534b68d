"""A file truncated and rewritten between the scan that identified it and the read of its lines."""

from __future__ import annotations

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
