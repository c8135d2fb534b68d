from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentledger.ingest import IngestStats, Pipeline, specs_from
from agentledger.ledger.db import open_writer
from agentledger.ledger.reconcile import reconcile
from agentledger.ledger.writer import LedgerWriter, now_ms

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _private_homes(tmp_path: Path, monkeypatch) -> None:
    """Every test (and every daemon it starts) gets its own state and config homes, so none reads the
    user's config or shares a hot store; raw-row retention is off, since the fixtures' events are
    older than its default horizon and tests compare ledgers row by row."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("AGENTLEDGER_RETENTION_RAW_DAYS", "0")
    for name in ("AGENTLEDGER_CONFIG", "AGENTLEDGER_STORE_STATE_DIR", "AGENTLEDGER_STATE_DIR", "AGENTLEDGER_DB"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture(scope="session")
def oc_corpus() -> Path:
    path = CORPUS / "oc-telemetry"
    if not path.is_dir():
        pytest.skip(f"shared corpus not found at {path}")
    return path


@pytest.fixture(scope="session")
def oc_expected(oc_corpus: Path) -> dict:
    return json.loads((oc_corpus / "expected.json").read_text())


def _corpus(name: str) -> Path:
    path = CORPUS / name
    if not path.is_dir():
        pytest.skip(f"shared corpus not found at {path}")
    return path


@pytest.fixture(scope="session")
def transcript_corpus() -> Path:
    return _corpus("oc-transcript")


@pytest.fixture(scope="session")
def claude_corpus() -> Path:
    return _corpus("claude-code")


def settle(db: Path) -> None:
    """What ``agentledger ingest`` does last: logs long finished, so what is still open was cut off."""
    conn = open_writer(db)
    try:
        reconcile(LedgerWriter(conn), now_ms())
    finally:
        conn.close()


def ingest(db: Path, *roots: Path, fmt: str = "oc-telemetry", **kwargs) -> IngestStats:
    conn = open_writer(db)
    try:
        return Pipeline(LedgerWriter(conn), specs_from(fmt, list(roots)), **kwargs).catch_up()
    finally:
        conn.close()


@contextlib.contextmanager
def followed_then_afresh(tmp_path: Path, root: Path, fmt: str = "oc-transcript"):
    """A pipeline following ``root`` on a ledger of its own (``.pipeline``, ``.followed``) while the block
    runs, then the same files as they are read afresh into another (``.afresh``): the two must agree."""
    ledgers = SimpleNamespace(followed=tmp_path / "followed.db", afresh=tmp_path / "afresh.db")
    conn = open_writer(ledgers.followed)
    try:
        ledgers.pipeline = Pipeline(LedgerWriter(conn), specs_from(fmt, [root]))
        yield ledgers
    finally:
        conn.close()
    ingest(ledgers.afresh, root, fmt=fmt)


def metric_counters(db: Path, top_n: int = 20, floors=None) -> dict:
    """Every counter sample ``/metrics`` would show now, parsed as Prometheus parses it; ``floors``: the
    highest values a ``serve`` kept (metrics.CounterFloors), which it never serves below."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from agentledger.metrics import registry_for

    text = generate_latest(registry_for(db, top_n, floors=floors)).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            if f.type in ("counter", "histogram") for s in f.samples
            if s.name.endswith(("_total", "_bucket", "_count", "_sum"))}


@pytest.fixture(scope="session")
def unprivileged(tmp_path_factory) -> list[str]:
    """A command prefix under which a file's mode stops reads, as it does for any user: none when not
    root; for root, setpriv without the capabilities that override modes. Skips where there is none."""
    if os.geteuid() != 0:
        return []
    probe = tmp_path_factory.mktemp("modes") / "probe"
    probe.write_text("x")
    probe.chmod(0)
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    try:
        if subprocess.run(prefix + ["cat", str(probe)], capture_output=True, timeout=30).returncode != 0:
            return prefix
    except FileNotFoundError:
        pass
    pytest.skip("root reads whatever the modes say, and setpriv cannot take that away here")


def cli_env(db: Path) -> dict:
    env = dict(os.environ)
    env["AGENTLEDGER_DB"] = str(db)
    env.pop("OPENCLAW_STATE_DIR", None)
    return env


def cli_json(db: Path, *args: str):
    """A query command's ``--json`` answer, run in this process: a corpus test asks for many."""
    from click.testing import CliRunner

    from agentledger.cli import cli

    out = CliRunner().invoke(cli, ["--db", str(db), *args, "--json"], catch_exceptions=False)
    assert out.exit_code == 0, (args, out.output)
    return json.loads(out.stdout)


def listed_as_counted(conn) -> list[tuple]:
    """Sessions whose ``session`` and ``timeline`` do not list exactly the model and tool calls ``sessions``
    counts in them, each with what was listed and what was counted (empty when all do)."""
    from agentledger.ledger import queries

    totals = dict(conn.execute("SELECT session_id, cost_pico FROM session_totals").fetchall())
    wrong = []
    for row in queries.sessions(conn, queries.Window()):
        sid = row["session_id"]
        tools = queries.session_detail(conn, sid)["tool_calls"]
        items = queries.timeline(conn, sid, ["llm", "tool"])
        llm = [i for i in items if i["kind"] == "llm"]
        cost = round(sum(i["cost_usd"] or 0 for i in llm) * 10**12, -3)  # float sums: to the nano-dollar
        listed = (len(llm), cost, len(tools), sum(t["status"] == "error" for t in tools),
                  sum(i["kind"] == "tool" for i in items))
        counted = (row["llm_calls"] + row["llm_errors"], round(totals.get(sid, 0), -3), row["tool_calls"],
                   row["tool_errors"], row["tool_calls"])
        if listed != counted:
            wrong.append((sid, listed, counted))
    return wrong


def forbid_call_scans(monkeypatch) -> None:
    """Make ``session`` and ``timeline`` fail if they fall back to scanning every call: the indexes must
    find a session's calls unless one names the session under another session's run."""
    from agentledger.ledger import queries

    for name in ("_EVERY_LLM_CALL_OF", "_EVERY_TOOL_CALL_OF"):
        monkeypatch.setattr(queries, name, "SELECT * FROM a_scan_of_every_call_was_not_expected")


def as_of_version(conn, version: int) -> None:
    """Takes a ledger back to schema ``version`` as far as later migrations only added to it: the indexes
    and tables they created and the columns they added are dropped (indexes first: they may name those
    columns), so that the next writer runs them again, as on a ledger that old."""
    later = "\n".join(path.read_text() for path in sorted((REPO / "schema").glob("*.sql"))
                      if int(path.name[:4]) > version)

    def exists(name: str) -> bool:
        return bool(conn.execute("SELECT 1 FROM sqlite_schema WHERE name = ?", (name,)).fetchall())

    for name in re.findall(r"CREATE (?:UNIQUE )?INDEX (?:IF NOT EXISTS )?(\w+)", later):
        if exists(name):
            conn.execute(f"DROP INDEX {name}")
    for table, column in re.findall(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", later):
        if exists(table) and any(row[1] == column for row in conn.execute(f"PRAGMA table_info({table})")):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    for name in re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", later):
        if exists(name):
            conn.execute(f"DROP TABLE {name}")
    conn.execute(f"PRAGMA user_version = {version:d}")


def unless_it_waits_on(fifo: Path, call, timeout: float = 10.0):
    """What ``call()`` returns; the test fails if it is still running after ``timeout`` seconds, waiting
    on ``fifo`` for a writer: one then opens it and goes, so that the call, and the suite, go on."""
    done = threading.Event()
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:
            out["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    if not done.wait(timeout):
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # nothing reads it (ENXIO): the call hangs on something else
            pytest.fail(f"still running after {timeout} s, and not waiting on the FIFO {fifo}")
        done.wait(timeout)
        pytest.fail(f"waited on the FIFO {fifo} for a writer")
    if "error" in out:
        raise out["error"]
    return out["value"]
