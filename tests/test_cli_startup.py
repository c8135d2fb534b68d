"""A query command loads the read side only: operators and scripts run them next to the daemon,
and every module they import for nothing is CPU taken from it."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ingest
from logwriter import LogDir, llm_call

from agentledger.cli import COMMANDS, cli
from agentledger.defaults import FORMATS
from agentledger.entry import GROUP_VALUED
from agentledger.sources import OPENERS
from agentledger.tail.layouts import LAYOUTS

# The machinery a query has no use for: the pipeline, the writer, the daemon and what they pull in.
WRITE_SIDE = ("agentledger.ingest", "agentledger.ledger.writer", "agentledger.ledger.lifecycle",
              "agentledger.tail.tailer", "agentledger.sources", "agentledger.pricing", "agentledger.daemon",
              "agentledger.http", "watchdog", "rich")

# Runs the command as the console script does, in a fresh interpreter, then reports what it loaded.
PROBE = """
import json, sys
from agentledger.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": [m for m in %r if m in sys.modules]}), file=sys.stderr)
""" % (WRITE_SIDE,)


@pytest.fixture
def small_ledger(tmp_path: Path) -> Path:
    logs = LogDir(tmp_path / "logs")
    for n in range(1, 4):
        logs.append(llm_call(n, session="s1" if n < 3 else "s2"))
    db = tmp_path / "ledger.db"
    ingest(db, logs.root)
    return db


def _probe(*args: str) -> tuple[dict, object]:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    report = json.loads(out.stderr.strip().splitlines()[-1])
    return report, json.loads(out.stdout) if out.stdout.strip() else None


@pytest.mark.parametrize("args, check", [
    (["usage", "--json"], lambda doc: doc["llm_calls"] == 3 and doc["sessions"] == 2),
    (["sessions", "--json"], lambda doc: len(doc) == 2),
    (["costs", "--json", "--group-by", "session"], lambda doc: sum(r["llm_calls"] for r in doc["rows"]) == 3),
    (["session", "agent:main:s1", "--json"], lambda doc: doc["session_key"] == "agent:main:s1"),
    (["tools", "--json"], lambda doc: doc == []),
])
def test_a_query_answers_without_loading_the_write_side(small_ledger, args, check):
    report, doc = _probe("--db", str(small_ledger), *args)
    assert report["code"] == 0
    assert check(doc), doc
    assert report["loaded"] == []


def test_a_bad_query_flag_still_fails_fast_and_light(small_ledger):
    report, _ = _probe("--db", str(small_ledger), "usage", "--since", "yesterday")
    assert report["code"] == 2
    assert report["loaded"] == []


def test_ingest_still_loads_what_it_runs(tmp_path, small_ledger):
    report, summary = _probe("--db", str(tmp_path / "other.db"), "ingest", "--json",
                             str(small_ledger.parent / "logs"))
    assert report["code"] == 0 and summary["events"] == 3
    assert {"agentledger.ingest", "agentledger.ledger.writer"} <= set(report["loaded"])


def test_config_accepts_exactly_the_formats_the_machinery_reads():
    assert tuple(OPENERS) == FORMATS
    assert set(LAYOUTS) == set(FORMATS)


def test_every_command_a_module_defines_is_listed_where_the_group_finds_it():
    """A command missing from the table would be invisible until its module happened to load."""
    for module in set(COMMANDS.values()):
        importlib.import_module(f"agentledger.cli.{module}")
    assert set(cli.commands) == set(COMMANDS) | {"gate"}


def test_the_executable_knows_which_group_options_take_a_value():
    """It tells `serve` from the words before it to catch its signals first: one missing would take
    `agentledger --db serve usage` for `serve`, and miss `agentledger --log-level info serve`."""
    valued = {opt for param in cli.params if not getattr(param, "is_flag", True) for opt in param.opts}
    assert valued == set(GROUP_VALUED)
