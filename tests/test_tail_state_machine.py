"""Random sequences of append, tear, rotate, copytruncate, truncate, delete, restart and crash.

After every catch-up: every complete line on disk is indexed exactly once, nothing
is indexed that was never written, bad lines are recorded once each, checkpoints
sit on line boundaries, and a second catch-up changes nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import apsw
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule
from ledgerdump import dump
from logwriter import LogDir, llm_call

from agentledger.ingest import Pipeline, specs_from
from agentledger.ledger.db import open_writer
from agentledger.ledger.verify import check_rollups
from agentledger.ledger.writer import LedgerWriter, OpenBatches


class Crash(Exception):
    """Stands in for SIGKILL: whatever the transaction had not committed is gone."""


class CrashingBatches(OpenBatches):
    def __init__(self, writer: CrashingWriter):
        super().__init__(writer)
        writer.left -= 1
        self.crash = writer.left < 0
        self.after_commit = writer.after_commit

    def commit(self):
        if self.crash and not self.after_commit:
            raise Crash
        result = super().commit()
        if self.crash:
            raise Crash
        return result


class CrashingWriter(LedgerWriter):
    def __init__(self, conn, at: int, after_commit: bool):
        super().__init__(conn)
        self.left = at
        self.after_commit = after_commit

    def begin(self):
        return CrashingBatches(self)


def _event_id(line: bytes) -> int | None:
    if line.startswith(b'{"id":"evt_'):
        return int.from_bytes(bytes.fromhex(line[11:27].decode()), "big", signed=True)
    return None


class TailMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="agentledger-sm-"))
        self.logs = LogDir(self.tmp / "state")
        self.db = self.tmp / "ledger.db"
        self.n = 0
        self.pending = b""  # the rest of a torn line
        self.written: set[int] = set()
        self.bad_seen: set[bytes] = set()

    def teardown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the writer ------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        self.logs.append(self.pending + data)
        self.pending = b""

    @rule(k=st.integers(1, 6), batch=st.integers(1, 3))
    def append(self, k, batch):
        data = b""
        for _ in range(k):
            self.n += 1
            data += llm_call(self.n, pad=self.n % 7 * 50)
            self.written.add(self.n)
        self._write(data)

    @rule()
    def append_bad(self):
        self.n += 1
        self._write(b'{"bad": %d, \n' % self.n)

    @rule(cut=st.integers(1, 60))
    def append_torn(self, cut):
        self.n += 1
        line = llm_call(self.n)
        self.written.add(self.n)
        self._write(line[:cut])
        self.pending = line[cut:]

    @precondition(lambda self: self.logs.live.exists())
    @rule()
    def rotate(self):
        self.pending = b""  # a torn line stays torn in the rotated file
        self.logs.rotate()

    @precondition(lambda self: self.logs.live.exists())
    @rule()
    def copytruncate(self):
        self.pending = b""
        self.logs.copytruncate()

    @precondition(lambda self: self.logs.live.exists())
    @rule()
    def truncate(self):
        self.pending = b""
        self.logs.truncate()

    @rule()
    def delete_oldest_rotated(self):
        rotated = sorted(p for p in self.logs.dir.iterdir() if p.name != "events.jsonl")
        if rotated:
            os.unlink(rotated[0])

    # -- the daemon --------------------------------------------------------------
    def _on_disk(self) -> tuple[set[int], set[bytes]]:
        ids, bad = set(), set()
        for path in self.logs.dir.iterdir():
            data = path.read_bytes()
            for line in data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]:
                eid = _event_id(line)
                if eid is not None:
                    ids.add(eid)
                else:
                    bad.add(line)
        return ids, bad

    def _catch_up(self, writer_factory=LedgerWriter):
        conn = open_writer(self.db)
        try:
            Pipeline(writer_factory(conn), specs_from("oc-telemetry", [self.logs.root])).catch_up()
        finally:
            conn.close()

    @rule(at=st.integers(0, 3), after_commit=st.booleans())
    def crash(self, at, after_commit):
        try:
            self._catch_up(lambda conn: CrashingWriter(conn, at, after_commit))
        except Crash:
            pass

    @rule()
    def restart_and_catch_up(self):
        ids_on_disk, bad_on_disk = self._on_disk()
        self._catch_up()
        self.bad_seen |= bad_on_disk
        conn = apsw.Connection(str(self.db))
        try:
            indexed = [r[0] for r in conn.execute("SELECT id FROM events")]
            llm_rows = conn.execute("SELECT count(*), coalesce(sum(cost_pico), 0) FROM llm_calls").fetchall()[0]
            heads = [bytes(r[0]) for r in conn.execute("SELECT head FROM rejects")]
            files = conn.execute("SELECT path, ino, offset FROM files WHERE status IN ('live', 'rotated')").fetchall()
        finally:
            conn.close()
        indexed_set = set(indexed)
        assert ids_on_disk <= indexed_set, "a complete line on disk was not indexed"
        assert indexed_set <= self.written, "something was indexed that was never written"
        assert llm_rows == (len(indexed_set), len(indexed_set) * 1_000_000), "a call was counted twice"
        assert len(heads) == len(set(heads)), "a bad line was recorded twice"
        assert bad_on_disk <= set(heads), "a bad line on disk was not recorded"
        for path, ino, offset in files:
            try:
                if os.stat(path).st_ino != ino or offset == 0:
                    continue
                with open(path, "rb") as f:
                    f.seek(offset - 1)
                    assert f.read(1) == b"\n", f"checkpoint of {path} is not on a line boundary"
            except FileNotFoundError:
                pass
        conn = apsw.Connection(str(self.db))
        try:
            assert check_rollups(conn) == [], "a rollup differs from its recomputation"
        finally:
            conn.close()
        before = dump(self.db)
        self._catch_up()
        assert dump(self.db) == before, "a second catch-up changed the ledger"


TestTailMachine = TailMachine.TestCase
TestTailMachine.settings = settings(
    max_examples=int(os.environ.get("AGENTLEDGER_SM_EXAMPLES", "200")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
