"""What `pip install` puts on a machine must run: the migrations ship inside the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from conftest import REPO


def test_wheel_carries_every_migration(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("agentledger-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for migration in sorted((REPO / "schema").glob("*.sql")):
        assert f"agentledger/schema/{migration.name}" in names
