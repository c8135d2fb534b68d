"""More files than the default descriptor limit: a catch-up still reads every one, and a scan
that runs out of descriptors fails loudly instead of settling files it could not open as lost."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from ledgerdump import scalar
from logwriter import llm_call

FILES = 300
SCRIPT = """
import resource, sys
sys.path.insert(0, {tests!r})
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
from conftest import ingest
from pathlib import Path
stats = ingest(Path({db!r}), Path({root!r}))
print(stats.events, stats.lost_files)
"""


def _files(root) -> None:
    for i in range(FILES):
        directory = root / "agents" / f"a{i:03d}" / "telemetry"
        directory.mkdir(parents=True)
        (directory / "events.jsonl").write_bytes(llm_call(i + 1, session=f"s{i}"))


def _ingest(tmp_path, soft: int, hard: int) -> subprocess.CompletedProcess:
    code = SCRIPT.format(tests=str(REPO / "tests"), soft=soft, hard=hard, db=str(tmp_path / "ledger.db"),
                         root=str(tmp_path / "logs"))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)


def test_a_low_soft_descriptor_limit_is_raised_and_every_file_read(tmp_path):
    _files(tmp_path / "logs")
    ran = _ingest(tmp_path, 128, 4096)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == [str(FILES), "0"]


def test_running_out_of_descriptors_fails_instead_of_losing_files(tmp_path):
    _files(tmp_path / "logs")
    ran = _ingest(tmp_path, 128, 128)
    assert ran.returncode != 0
    assert "Too many open files" in ran.stderr
    # What was read is kept, and nothing was settled as lost: a retry with room reads the rest.
    again = _ingest(tmp_path, 4096, 4096)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[1] == "0"
    assert scalar(tmp_path / "ledger.db", "SELECT count(*) FROM events") == FILES
