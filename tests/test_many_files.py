"""More files than the descriptor limit: a catch-up still reads every one, and a scan that runs out of
descriptors (the rest of the process holding them) closes what it opened and fails with one clear line,
instead of settling files it could not open as lost: ``ingest`` stops, ``serve`` pauses and keeps answering."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO
from ledgerdump import scalar
from logwriter import llm_call
from served import Served, count
from serving import wait_for

FILES = 300
LIMIT = 128  # the open-file limit, soft and hard, of the processes the tests below start
TAKEN = LIMIT - 48  # descriptors already open in a process, leaving fewer than a scan holds
SCRIPT = """
import os, resource
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range({taken})]
from agentledger.cli import main
main(["--db", {db!r}, "ingest", {root!r}, "--json"])
"""


def _files(root) -> None:
    for i in range(FILES):
        directory = root / "agents" / f"a{i:03d}" / "telemetry"
        directory.mkdir(parents=True)
        (directory / "events.jsonl").write_bytes(llm_call(i + 1, session=f"s{i}"))


def _ingest(tmp_path, soft: int, hard: int, taken: int = 0) -> subprocess.CompletedProcess:
    """``ingest`` under the limits, with ``taken`` descriptors already open, as the rest of a process may hold them."""
    code = SCRIPT.format(soft=soft, hard=hard, taken=taken, db=str(tmp_path / "ledger.db"), root=str(tmp_path / "logs"))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)


def _read(ran: subprocess.CompletedProcess) -> tuple[int, int]:
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    return summary["events"], summary["lost_files"]


def test_a_low_soft_descriptor_limit_is_raised_and_every_file_read(tmp_path):
    _files(tmp_path / "logs")
    assert _read(_ingest(tmp_path, LIMIT, 4096)) == (FILES, 0)


def test_more_files_than_the_hard_descriptor_limit_are_all_read(tmp_path):
    _files(tmp_path / "logs")
    assert _read(_ingest(tmp_path, LIMIT, LIMIT)) == (FILES, 0)


def test_running_out_of_descriptors_stops_with_one_line_instead_of_losing_files(tmp_path):
    _files(tmp_path / "logs")
    ran = _ingest(tmp_path, LIMIT, LIMIT, taken=TAKEN)
    assert ran.returncode == 2
    assert ran.stdout == ""
    [line] = ran.stderr.splitlines()
    assert line.startswith("agentledger: ingest stopped, out of file descriptors: ")
    assert f"too many open files, {LIMIT} being this process's limit: raise it (ulimit -n" in line
    # What was read is kept, and nothing was settled as lost: a retry with room reads the rest.
    assert _read(_ingest(tmp_path, 4096, 4096))[1] == 0
    assert scalar(tmp_path / "ledger.db", "SELECT count(*) FROM events") == FILES


def _serve(tmp_path, taken: int) -> Served:
    """``serve`` on the files under LIMIT, with ``taken`` descriptors already open in it, as the rest of a
    process may hold them (connections, other libraries)."""
    served = Served.on(tmp_path, tmp_path / "logs")
    served.start_limited(LIMIT, taken)
    return served


def test_serve_with_more_files_than_its_descriptor_limit_reads_them_all_and_answers(tmp_path):
    _files(tmp_path / "logs")
    served = _serve(tmp_path, 0)
    try:
        served.wait_ready()
        assert count(served.db, "SELECT count(*) FROM events") == FILES
        assert served.get("/healthz")[0] == 200
        assert served.descriptors() < LIMIT // 2
    finally:
        served.stop()


def test_serve_out_of_descriptors_closes_what_the_scan_opened_and_answers(tmp_path):
    _files(tmp_path / "logs")
    served = _serve(tmp_path, TAKEN)
    try:
        wait_for(lambda: "ingest paused" in served.log(), what="ingest paused")
        # The failed scan let go of every file it opened: there are descriptors to answer with.
        wait_for(lambda: served.descriptors() < LIMIT - 16, what="the scan's descriptors closed")
        assert served.get("/healthz")[0] == 200
        code, body = served.get("/readyz")
        assert code == 503 and body["reason"].startswith("ingest paused, out of file descriptors: "), body
        assert "raise it (ulimit -n" in body["reason"]
        assert count(served.db, "SELECT count(*) FROM files WHERE status = 'lost'") == 0
        assert served.proc.poll() is None
    finally:
        served.stop()
