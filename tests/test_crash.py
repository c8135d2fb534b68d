"""SIGKILL the real daemon at random moments while a real writer appends and rotates.

After a final catch-up the ledger must equal a clean one-shot build of the same
files: nothing lost, nothing counted twice.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, ingest
from ledgerdump import dump, scalar

from agentledger.ledger.db import open_writer
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.writer import LedgerWriter

WRITER = Path(__file__).with_name("logwriter.py")


def _serve(db: Path, root: Path, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "agentledger", "--db", str(db), "serve", "--listen", "127.0.0.1:0", "--rescan", "0.05",
         str(root)],
        stdout=subprocess.DEVNULL, stderr=stderr, text=True, cwd=REPO,
    )


def _campaign(tmp_path: Path, kills: int, seed: int) -> None:
    root = tmp_path / "state"
    root.mkdir()
    db = tmp_path / "ledger.db"
    rng = random.Random(seed)
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), str(root), "--seconds", "3600", "--rate", "3000",
         "--rotate-every", "400", "--seed", str(seed)],
        stdout=subprocess.PIPE,
    )
    try:
        time.sleep(0.3)
        for _ in range(kills):
            daemon = _serve(db, root)
            time.sleep(rng.uniform(0.15, 0.9))
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
    finally:
        writer.send_signal(signal.SIGTERM)
        written = int(writer.communicate(timeout=30)[0])
    assert written > 1000
    # Restart once more and let it catch up, then stop it the polite way. (Waiting for its word,
    # not a fixed time: on a busy machine starting up alone can take longer than a second.)
    daemon = _serve(db, root, stderr=subprocess.PIPE)
    for line in daemon.stderr:
        if "caught up" in line:
            break
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=60) == 0
    ingest(db, root)  # whatever the last daemon had not reached yet
    clean = tmp_path / "clean.db"
    ingest(clean, root)
    # The daemon marks what never ended as interrupted; do the same to the clean build.
    now = int(time.time() * 1000)
    for path in (db, clean):
        conn = open_writer(path)
        reconcile(LedgerWriter(conn), now)
        conn.close()
    assert dump(db) == dump(clean)
    verify = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "verify"], capture_output=True,
                            text=True, cwd=REPO)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert scalar(db, "SELECT count(*) FROM events") + scalar(db, "SELECT count(*) FROM rejects") == written


def test_sigkill_at_random_moments_loses_and_doubles_nothing(tmp_path):
    kills = int(os.environ.get("AGENTLEDGER_CRASH_KILLS", "50"))
    _campaign(tmp_path, kills, seed=7)


@pytest.mark.slow
def test_sigkill_campaign_long(tmp_path):
    _campaign(tmp_path, int(os.environ.get("AGENTLEDGER_CRASH_KILLS_SLOW", "300")), seed=11)
