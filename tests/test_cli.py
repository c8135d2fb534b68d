"""The command line as a user meets it: help everywhere, one-line errors with exit code 2."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from unittest import mock

import apsw
import click
import pytest
from conftest import CORPUS, REPO, cli_env, ingest
from hypothesis import given, settings
from hypothesis import strategies as st
from logwriter import LogDir, event, llm_call
from terminal import Terminal, needs_tmux

from agentledger.cli import cli
from agentledger.ledger.db import migrations, open_writer


def run(*args: str, db: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentledger"]
    if db is not None:
        cmd += ["--db", str(db)]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=env, timeout=60)


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, prefix + (name,)
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))


def test_every_command_has_help():
    commands = list(_commands(cli))
    assert {"ingest", "serve", "sessions", "usage", "rejects", "inputs", "verify"} <= {p[0] for p, _ in commands}
    for path, cmd in commands:
        assert cmd.help and len(cmd.help.strip()) > 10, path
        out = run(*path, "--help")
        assert out.returncode == 0 and "Usage:" in out.stdout, path
        for param in cmd.params:
            if isinstance(param, click.Option) and param.name not in ("help",):
                assert param.help, (path, param.name)


def test_help_and_readme_name_the_default_files_as_they_are_read():
    """The prices file is beside the config file, under $XDG_CONFIG_HOME by default; $AGENTLEDGER_DB beats the
    config's db, as every environment variable beats the file."""
    prices = "$XDG_CONFIG_HOME/agentledger/prices.toml"
    for command in ("ingest", "serve", "reprice"):
        text = " ".join(run(command, "--help").stdout.split())
        assert prices in text and "~/.config/agentledger" not in text, command
    assert "(default: $AGENTLEDGER_DB, else config `db`, else" in " ".join(run("--help").stdout.split())
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"the config's `prices` key (`$AGENTLEDGER_PRICES`), else `prices.toml` beside the config file, when " \
           f"it exists: `{prices}`" in readme
    assert "`--db PATH` (default: `$AGENTLEDGER_DB`, else the config file's `db`, else" in readme


@pytest.mark.parametrize("args, needle", [
    (["--bogus"], "No such option"),
    (["sessions", "--since", "yesterday"], "cannot read time"),
    (["sessions", "--limit", "0"], "--limit"),
    (["sessions", "--limit", "9223372036854775808"], "--limit"),  # past SQLite's integers
    (["prune", "--older-than", "99999999999999999999"], "--older-than"),
    (["prune", "--older-than", "99999999999", "--dry-run"], "--older-than"),
    (["ingest", "--grace", "99999999999999999999", "."], "--grace"),  # past 64-bit milliseconds
    (["serve", "--idle", "1e20", "."], "--idle"),
    (["ingest", "/does/not/exist"], "does not exist"),
    (["ingest", "--source", "oc-telemetry=/does/not/exist"], "does not exist: correct the path, or run serve"),
    (["serve", "--source", "oc-telemetry=/dev/null"], "is not a directory"),
    (["ingest", "--format", "nope", "."], "--format"),
    (["usage"], "no ledger at"),
    (["top"], "Choose from: runs, tools, models, sessions"),
    (["costs", "--tz", "Mars/Olympus"], "--tz"),
    (["costs", "--tz", "Mars/Olympus", "--group-by", "day"], "--tz"),
    (["sessions", "--live", "--url", "notaurl"], "--url"),
    (["watch", "--once", "--url", "notaurl"], "--url"),
    # A typo in the port crashed both with a traceback; one past 65535 was taken for a daemon not running.
    (["sessions", "--live", "--url", "http://127.0.0.1:94640x"],
     "--url 'http://127.0.0.1:94640x' names no port from 1 to 65535: give one such as http://127.0.0.1:9464"),
    (["watch", "--once", "--url", "http://127.0.0.1:94640x"], "--url 'http://127.0.0.1:94640x' names no port"),
    (["watch", "--once", "--url", "http://127.0.0.1:99999"], "--url 'http://127.0.0.1:99999' names no port"),
    (["sessions", "--live", "--url", "http://127.0.0.1:9464/a b"], "holds a space"),
    (["watch", "--interval", "nan"], "--interval"),  # would redraw without a pause
    (["watch", "--interval", "inf"], "--interval"),
    (["watch", "--interval", "1e300", "--once"], "--interval"),
    (["usage", "--json", "--csv"], "print one format, --json or --csv"),  # where the last one given won
    (["sessions", "--csv", "--json"], "print one format, --json or --csv"),
    (["usage", "--since", "2026-10-05", "--until", "2026-10-01"], "--since: since is after until: give a since at"),
    # A script's empty $AGENT: neither every agent's spend nor a believable zero, as the API answers it.
    (["usage", "--agent", "", "--json"], "'--agent': is blank: give an agent id, or leave --agent out"),
    (["sessions", "--agent", "", "--live"], "'--agent': is blank: give an agent id, or leave --agent out"),
    # Each other filter likewise: blank, --path listed every file and --name and --kind matched nothing.
    (["tools", "--name", ""], "'--name': is blank: give a tool name, or leave --name out"),
    (["events", "--kind", "tool.start", "--kind", ""], "'--kind': is blank: give an event kind, or leave --kind"),
    (["files", "--path", "", "--json"], "'--path': is blank: give a path or glob, or leave --path out"),
    (["files", "--path", "a" * 50_001], "is longer than 50,000 bytes, the longest pattern SQLite matches"),
    # An empty ROOT was the working directory, read or followed without a word.
    (["ingest", ""], "is empty: give the directory to read"),
    (["serve", "--no-demo", ""], "is empty: give the directory to read"),
    # No such user: expanduser raised RuntimeError, a traceback.
    (["--config", "~nosuchuser-al/c.toml", "usage"], "--config: '~nosuchuser-al' names no home directory here"),
    (["ingest", "--source", "oc-telemetry=~nosuchuser-al/x"], "'~nosuchuser-al' names no home directory here"),
    (["ingest", "~nosuchuser-al/x"], "'~nosuchuser-al' names no home directory here"),
    (["serve", "--no-demo", "~nosuchuser-al/x"], "'~nosuchuser-al' names no home directory here"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    out = run(*args, db=tmp_path / "missing.db")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0]
    assert lines[0].startswith("agentledger: ")


def test_a_query_of_a_ledger_still_being_created_says_it_has_none_yet(tmp_path):
    # What a query sees while a first ingest holds its first transaction: the file, without tables.
    db = tmp_path / "new.db"
    apsw.Connection(str(db)).close()
    out = run("usage", db=db)
    assert out.returncode == 2
    assert out.stderr.startswith(f"agentledger: no ledger at {db} yet: an empty database")


@pytest.mark.parametrize("args, command", [
    (["usage", "--since"], "usage"), (["sessions", "--limit"], "sessions"), (["costs", "--group-by"], "costs"),
    (["--log-level", "info", "top", "runs", "--limit"], "top"), (["--db"], ""),
])
def test_an_option_without_its_value_points_at_its_command_s_help(tmp_path, args, command):
    # Click gives this error no context: it pointed at `agentledger --help` whatever the command.
    line = _one_line(run(*args, db=tmp_path / "l.db"), 2, "requires an argument")
    assert line.endswith(f"(see `{' '.join(['agentledger', command]).strip()} --help`)"), line


@pytest.mark.parametrize("args, command", [([], "sessions"), (["config"], "show")])
def test_a_group_without_its_command_prints_its_help_as_help(args, command):
    # Flattened as an error, it was one line of 2,600 characters.
    out = run(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"Usage: agentledger {' '.join(args)}".rstrip() + " [OPTIONS] COMMAND [ARGS]...\n")
    assert f"\n  {command} " in out.stderr.partition("\nCommands:")[2]
    assert run(*args, "--help").stdout == out.stderr


@pytest.mark.parametrize("name", ["OPENCLAW_STATE_DIR", "CLAUDE_CONFIG_DIR"])
def test_ingest_names_a_producer_dir_its_environment_sets_that_does_not_exist(tmp_path, name):
    """Set on purpose and mistyped, it was passed by with "no sources found", or another producer's logs were
    read alone."""
    (tmp_path / "home" / ".claude" / "projects").mkdir(parents=True)
    env = {**os.environ, "HOME": str(tmp_path / "home"), name: str(tmp_path / "nowhere")}
    env.pop({"OPENCLAW_STATE_DIR": "CLAUDE_CONFIG_DIR", "CLAUDE_CONFIG_DIR": "OPENCLAW_STATE_DIR"}[name], None)
    out = run("ingest", db=tmp_path / "l.db", env=env)
    assert out.returncode == 2 and not (tmp_path / "l.db").exists()
    assert out.stderr.count("\n") == 1 and f"${name} ({tmp_path / 'nowhere'}) does not exist" in out.stderr


def test_ingest_prints_counts_and_json(tmp_path, oc_corpus):
    db = tmp_path / "l.db"
    out = run("ingest", "--json", str(oc_corpus), db=db)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["lines"] == 2188 and summary["events"] == 2184 and summary["rejected_lines"] == 4
    again = run("ingest", str(oc_corpus), db=db)
    assert again.returncode == 0
    table = dict(line.rsplit(None, 1) for line in again.stdout.splitlines())
    assert table["lines"] == "0" and table["events"] == "0" and table["files"] == "9"


def test_queries_on_an_empty_window_say_so(tmp_path, oc_corpus):
    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    out = run("sessions", "--since", "2030-01-01", db=db)
    assert out.returncode == 0 and out.stdout.strip() == "no sessions match"
    out = run("sessions", "--json", "--since", "2030-01-01", db=db)
    assert json.loads(out.stdout) == []


def test_since_until_and_agent_filters(tmp_path, oc_corpus, oc_expected):
    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    day = oc_expected["per_day"]["2026-10-02"]
    out = run("usage", "--json", "--since", "2026-10-02", "--until", "2026-10-02T23:59:59.999Z", db=db)
    u = json.loads(out.stdout)
    assert u["llm_calls"] == day["llm_calls"]
    assert round(u["cost_usd"] * 10**12) == day["cost_pico_usd"]
    assert u["runs"] == day["runs_started"]
    main = json.loads(run("usage", "--json", "--agent", "main", db=db).stdout)
    work = json.loads(run("usage", "--json", "--agent", "work", db=db).stdout)
    total = json.loads(run("usage", "--json", db=db).stdout)
    assert main["llm_calls"] + work["llm_calls"] == total["llm_calls"]
    assert main["runs"] + work["runs"] == total["runs"]
    sessions = json.loads(run("sessions", "--json", "--agent", "work", "--limit", "500", db=db).stdout)
    assert sessions and all(s["agent_id"] == "work" for s in sessions)


def test_rejects_lists_file_offset_reason(tmp_path, oc_corpus):
    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    rows = json.loads(run("rejects", "--json", db=db).stdout)
    assert len(rows) == 4
    assert {"path", "offset", "length", "reason", "head"} <= set(rows[0])
    text = run("rejects", db=db).stdout
    assert "blank line" in text and "events.2026-10-01.jsonl" in text


def test_rejects_name_the_file_a_bad_line_is_in_once_it_was_rotated(tmp_path):
    from logwriter import LogDir

    logs = LogDir(tmp_path / "state")
    good = b'{"id":"evt_%016x","ts":1790000000000,"kind":"llm.input","sessionKey":"agent:main:main"}\n'
    logs.append(good % 1 + b'{"broken\n' + good % 2)
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    rotated = logs.rotate()
    logs.append(good % 3 * 4)  # the live name's new file is as long as the bad line's offset, and longer
    ingest(db, logs.root)
    (row,) = json.loads(run("rejects", "--json", db=db).stdout)
    assert (row["path"], row["offset"]) == (str(rotated), len(good % 1))
    assert rotated.read_bytes()[row["offset"]:].startswith(b'{"broken')


def test_rejects_cut_a_bad_lines_head_between_escapes(tmp_path):
    # The head was cut after escaping: an ESC at the edge showed as "\\x1", which names another character.
    from logwriter import LogDir

    logs = LogDir(tmp_path / "state")
    logs.append(b"{" + b"x" * 116 + b"\x1b[2J not json\n")
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    (row,) = json.loads(run("rejects", "--json", db=db).stdout)
    assert row["head"] == "{" + "x" * 116


def test_inputs_as_csv_are_its_json_rows(tmp_path):
    # It took --json alone, where the README says every query command takes --csv too.
    import csv

    logs = LogDir(tmp_path / "state")
    logs.append(llm_call(1))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    out = run("inputs", "--csv", db=db)
    assert out.returncode == 0, out.stderr
    (row,) = csv.DictReader(out.stdout.splitlines())
    (want,) = json.loads(run("inputs", "--json", db=db).stdout)
    assert row == {k: "" if v is None else str(v) for k, v in want.items()}
    assert row["path"] == str(logs.live) and row["offset"] == str(len(llm_call(1)))
    _one_line(run("inputs", "--csv", "--json", db=db), 2, "print one format, --json or --csv")


def test_db_from_environment(tmp_path, oc_corpus):
    db = tmp_path / "env.db"
    ingest(db, oc_corpus)
    out = subprocess.run([sys.executable, "-m", "agentledger", "usage", "--json"], capture_output=True, text=True,
                         env=cli_env(db))
    assert json.loads(out.stdout)["sessions"] == 40


def _one_line(out: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert out.returncode == code, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentledger: "), out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("args", [["usage"], ["sessions"], ["verify"], ["verify", "--repair"], ["prune"],
                                  ["prune", "--dry-run"], ["ingest", "."]])
def test_a_file_that_is_not_a_ledger_is_one_line(tmp_path, args):
    db = tmp_path / "notdb.db"
    db.write_text("garbage\n")
    _one_line(run(*args, db=db), 2, "not a ledger", "--db")
    assert db.read_text() == "garbage\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(db.name)] == [db.name]


def _foreign_database(path: Path, version: int = 0) -> None:
    """Another program's SQLite database: tables, and the schema version it gave them (Firefox's and many
    Android apps' set one)."""
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute(f"PRAGMA user_version = {version:d}")
    conn.commit()
    conn.close()


# Versions a ledger has too: 7 was taken for an old ledger to migrate (ingest crashed on its missing tables,
# after switching the file to WAL), the latest for a ledger to read (every query crashed), and 99 was refused
# as a newer ledger only after the switch to WAL.
@pytest.mark.parametrize("version", [0, 7, len(migrations()), 99])
@pytest.mark.parametrize("args", [["ingest", "."], ["serve", "--no-demo", "--listen", "127.0.0.1:0", "."],
                                  ["reprice"], ["prune", "--older-than", "1"], ["prune", "--dry-run"], ["usage"],
                                  ["verify"], ["verify", "--repair"]])
def test_another_programs_database_is_refused_untouched(tmp_path, args, version):
    db = tmp_path / "app.db"
    _foreign_database(db, version)
    before = db.read_bytes()
    # Not "run ingest to migrate": migrating writes the ledger's tables into the other program's file.
    line = _one_line(run(*args, db=db), 2, f"{db} is not a ledger", "other tables", "--db")
    assert "migrate" not in line
    assert db.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(db.name)] == [db.name]  # no -wal, no .lock


@pytest.mark.parametrize("version", [7, 99])
@pytest.mark.parametrize("args", [["ingest", "."], ["usage"]])
def test_another_programs_database_with_its_write_ahead_log_is_refused_untouched(tmp_path, args, version):
    # Closed as refused, the connection folded the other program's log into its database and removed the log.
    db = tmp_path / "app.db"
    writer = apsw.Connection(str(db))
    for sql in ("PRAGMA journal_mode = WAL", f"PRAGMA user_version = {version:d}", "CREATE TABLE t (x)"):
        writer.execute(sql).fetchall()
    writer.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)  # its last rows stay in the log, as a crash leaves them
    writer.execute("INSERT INTO t VALUES (1)")
    writer.close()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert f"{db.name}-wal" in before
    _one_line(run(*args, db=db), 2, f"{db} is not a ledger", "--db")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != f"{db.name}-shm"} == \
        {name: data for name, data in before.items() if name != f"{db.name}-shm"}


@pytest.mark.parametrize("args", [["ingest", "."], ["usage"]])
def test_an_empty_database_another_program_gave_a_version_is_refused_untouched(tmp_path, args):
    # Taken for a ledger to migrate: ingest crashed on the tables the migrations after that version alter.
    db = tmp_path / "app.db"
    apsw.Connection(str(db)).execute("PRAGMA user_version = 7")
    before = db.read_bytes()
    _one_line(run(*args, db=db), 2, f"{db} is not a ledger", "--db")
    assert db.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(db.name)] == [db.name]


def test_a_lock_file_that_was_there_before_a_refusal_stays(tmp_path):
    db = tmp_path / "app.db"
    _foreign_database(db)
    Path(f"{db}.lock").write_text("")  # another agentledger's, say, from before the file was replaced
    _one_line(run("ingest", ".", db=db), 2, f"{db} is not a ledger")
    assert Path(f"{db}.lock").exists()


def test_an_empty_file_becomes_a_ledger(tmp_path, oc_corpus):
    db = tmp_path / "empty.db"
    db.touch()
    assert run("ingest", str(oc_corpus), db=db).returncode == 0
    out = run("usage", "--json", db=db)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sessions"] == 40


def test_reprice_of_a_missing_ledger_is_one_line_and_creates_nothing(tmp_path):
    typo = tmp_path / "typo" / "ledgr.db"
    _one_line(run("reprice", db=typo), 2, "no ledger at", str(typo))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["device", "fifo"])
@pytest.mark.parametrize("command", [["ingest", "{logs}"], ["usage"], ["serve", "--no-demo", "--listen", "127.0.0.1:0",
                                                                       "{logs}"]], ids=["ingest", "usage", "serve"])
def test_a_db_that_is_no_regular_file_is_one_line_and_exit_2(tmp_path, kind, command):
    # A device was an apsw.IOError traceback; opening a FIFO waited for a writer for ever.
    db = Path("/dev/null") if kind == "device" else tmp_path / "fifo"
    if kind == "fifo":
        os.mkfifo(db)
    (tmp_path / "logs").mkdir()
    out = run(*(arg.format(logs=tmp_path / "logs") for arg in command), db=db)
    _one_line(out, 2, f"db: '{db}' is not a regular file: give the path of the ledger's file", "(from the command line)")
    assert set(tmp_path.iterdir()) == {tmp_path / "logs", *([db] if kind == "fifo" else [])}  # no lock beside it


@pytest.mark.parametrize("command", [["usage"], ["reprice"]])
def test_a_db_that_is_a_symlink_loop_is_told_so(tmp_path, command):
    # It was told to run as a member of the ledger's group, which no one can do for links that go round.
    db = tmp_path / "l.db"
    db.symlink_to(tmp_path / "back")
    (tmp_path / "back").symlink_to(db)
    assert _one_line(run(*command, db=db), 2) == (f"agentledger: cannot read {db}: it is a loop of symbolic links: "
                                                  "point the link at the ledger's file, or pass another --db")


def test_a_db_under_a_file_is_one_line(tmp_path):
    (tmp_path / "notdb.db").write_text("garbage\n")
    _one_line(run("ingest", str(tmp_path), db=tmp_path / "notdb.db" / "x.db"), 2, "is a file", "--db")


# /proc/1 takes no new entries, whoever asks: the cases that run as root too, where modes do not stop writes.
@pytest.mark.parametrize("db, failed", [
    ("/proc/1/agentledger/ledger.db", "/proc/1/agentledger: No such file or directory"),  # the ledger's directory
    ("/proc/1/agentledger.db", "/proc/1/agentledger.db.lock: No such file or directory"),  # its lock file
    pytest.param("{read_only}/ledger.db", "{read_only}/ledger.db.lock: Permission denied",
                 marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the modes say")),
])
@pytest.mark.parametrize("command", [["ingest"], ["serve", "--no-demo", "--listen", "127.0.0.1:0"]],
                         ids=["ingest", "serve"])
def test_a_ledger_where_nothing_can_be_written_is_one_line_naming_it_and_the_fix(tmp_path, command, db, failed):
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    db, failed = Path(db.format(read_only=read_only)), failed.format(read_only=read_only)
    _one_line(run(*command, str(tmp_path), db=db), 2, f"cannot write a ledger at {db}: {failed}", "--db",
              "ReadWritePaths=")


def test_a_ledger_in_a_directory_its_reader_cannot_write_is_read_and_one_with_a_log_there_says_why_not(
        tmp_path, oc_corpus, unprivileged):
    # A read-only mount or snapshot: SQLite could not make the shared-memory file it reads through, and the
    # ledger's own owner was told to run as its owner.
    ledgers = {name: tmp_path / name / "ledger.db" for name in ("stopped", "written", "unreadable")}
    for db in ledgers.values():
        db.parent.mkdir()
        assert run("ingest", str(oc_corpus), db=db).returncode == 0
    expected = json.loads(run("usage", "--json", db=ledgers["written"]).stdout)
    writer = open_writer(ledgers["written"])  # a write-ahead log left beside it, as by a daemon killed
    writer.wal_autocheckpoint(0)
    writer.execute("UPDATE retention SET events_ms = events_ms")
    shutil.copy(f"{ledgers['written']}-wal", tmp_path / "wal")
    writer.close()
    shutil.copy(tmp_path / "wal", f"{ledgers['written']}-wal")
    ledgers["unreadable"].chmod(0)  # no -wal beside it: that is not what stops the read
    for db in ledgers.values():
        db.parent.chmod(0o555)
    try:
        asked = {name: subprocess.run([*unprivileged, sys.executable, "-m", "agentledger", "--db", str(db), "usage",
                                       "--json"], capture_output=True, text=True, timeout=60)
                 for name, db in ledgers.items()}
    finally:
        for db in ledgers.values():
            db.parent.chmod(0o755)
    assert asked["stopped"].returncode == 0, asked["stopped"].stderr
    assert json.loads(asked["stopped"].stdout) == expected
    _one_line(asked["written"], 2, "its directory cannot be written, and SQLite makes the ledger's ledger.db-shm",
              "copy the ledger with its -wal somewhere writable")
    _one_line(asked["unreadable"], 2, "run as a member of the ledger's group while the daemon is running")
    assert sorted(p.name for p in ledgers["stopped"].parent.iterdir()) == ["ledger.db", "ledger.db.lock"]


def test_a_query_leaves_nothing_beside_the_ledger_and_never_takes_a_writers_log(tmp_path, oc_corpus):
    # Every query left an empty -wal and -shm (a read-only connection cannot remove them), which a copy of the
    # directory then took to a read-only backup, where a -wal is a daemon's and the ledger was refused.
    db = tmp_path / "ledger.db"
    assert run("ingest", str(oc_corpus), db=db).returncode == 0
    expected = run("usage", "--json", db=db)
    assert expected.returncode == 0, expected.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.db", "ledger.db.lock"]
    writer = open_writer(db)  # a daemon's: its log holds a commit not yet in the ledger's file
    try:
        writer.wal_autocheckpoint(0)
        writer.execute("UPDATE retention SET events_ms = 1")
        log = Path(f"{db}-wal").read_bytes()
        assert run("usage", "--json", db=db).stdout == expected.stdout
        assert Path(f"{db}-wal").read_bytes() == log
        writer.execute("UPDATE retention SET events_ms = 2")  # and it goes on writing
        log = Path(f"{db}-wal").read_bytes()
    finally:
        writer.close()
    Path(f"{db}-wal").write_bytes(log)  # as a daemon killed left it: the next query folds it in
    assert run("usage", "--json", db=db).stdout == expected.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.db", "ledger.db.lock"]
    assert apsw.Connection(str(db)).execute("SELECT events_ms FROM retention").fetchall() == [(2,)]


@pytest.mark.parametrize("args", [["ingest", "{logs}"], ["usage"], ["verify", "--repair"],
                                  ["--log-level", "error", "serve", "--no-demo", "--listen", "127.0.0.1:0", "{logs}"]])
def test_a_ledger_path_that_is_no_utf8_is_one_line_and_makes_nothing(tmp_path, oc_corpus, args):
    # A legal Linux name, which SQLite cannot be given: ingest said only "'utf-8' codec can't encode character",
    # and left a lock file beside it.
    made = tmp_path / "made" / "ledger.db"
    ingest(made, oc_corpus)
    db = tmp_path / os.fsdecode(b"ledger\xff.db")
    shutil.copy(made, db)
    out = run(*(arg.format(logs=oc_corpus) for arg in args), db=db)
    _one_line(out, 2, f"cannot open a ledger at {tmp_path}/ledger\\xff.db: its path is not UTF-8", "rename it",
              "pass --db with another path")
    assert sorted(os.listdir(tmp_path)) == sorted(["made", db.name])


@pytest.mark.parametrize("name", ["run#2.db", "what?.db", "100%25.db"])
def test_a_ledger_path_with_uri_characters_reads_back(tmp_path, oc_corpus, name):
    db = tmp_path / name
    assert run("ingest", str(oc_corpus), db=db).returncode == 0
    out = run("usage", "--json", db=db)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sessions"] == 40


def test_a_newer_ledger_says_to_upgrade_and_is_left_as_it_was(tmp_path):
    db = tmp_path / "new.db"
    open_writer(db).close()
    apsw.Connection(str(db)).execute("PRAGMA user_version = 99")
    before = db.read_bytes()
    line = _one_line(run("usage", db=db), 2, "newer", "upgrade agentledger to read it")
    assert "ingest" not in line
    _one_line(run("ingest", str(tmp_path), db=db), 2, "newer", "upgrade agentledger to write it")
    assert db.read_bytes() == before


def _overwrite_pages(db: Path, names: str) -> None:
    """The first page of each table and index the SQL ``names`` (a query of sqlite_schema) lists overwritten with
    bytes no page holds: a disk error, a copy gone wrong."""
    conn = apsw.Connection(str(db))
    size = conn.execute("PRAGMA page_size").fetchall()[0][0]
    pages = [page for (page,) in conn.execute(f"SELECT rootpage FROM sqlite_schema WHERE {names}")]
    conn.close()
    assert pages
    with open(db, "r+b") as f:
        for page in pages:
            f.seek((page - 1) * size)
            f.write(b"\xa5" * size)


def _damage(db: Path, how: str) -> None:
    if how == "cut-short":  # found opening it: a copy stopped at 100 KiB
        with open(db, "r+b") as f:
            f.truncate(100 * 1024)
    else:  # found by the command's first read of a table: the schema on the first page reads as it was
        _overwrite_pages(db, "rootpage > 1")


@pytest.mark.parametrize("how", ["cut-short", "pages-overwritten"])
@pytest.mark.parametrize("args, code", [
    (["sessions"], 2), (["usage"], 2), (["ingest", "{logs}"], 2), (["reprice"], 2),
    (["prune", "--dry-run", "--older-than", "1"], 2),
    (["--log-level", "error", "serve", "--no-demo", "--listen", "127.0.0.1:0", "{logs}"], 2),
    # What verify is there to find: a failed verification.
    (["verify"], 1), (["verify", "--repair"], 1)])
def test_a_damaged_ledger_is_one_line_naming_the_way_back(tmp_path, oc_corpus, args, code, how):
    # A traceback ending in apsw.CorruptError, exit 1, from every command.
    db = tmp_path / "ledger.db"
    ingest(db, oc_corpus)
    _damage(db, how)
    out = run(*(arg.format(logs=oc_corpus) for arg in args), db=db)
    _one_line(out, code, "is damaged (", "restore it from a backup", "`agentledger ingest`")


def test_verify_finds_damage_where_no_rollup_is_read(tmp_path, oc_corpus):
    # An index the recomputations never read: verify said "ok".
    db = tmp_path / "ledger.db"
    ingest(db, oc_corpus)
    _overwrite_pages(db, "name = 'files_by_fingerprint'")
    _one_line(run("verify", db=db), 1, f"the ledger {db} is damaged (", "restore it from a backup")


class _HotViews:
    """A stand-in daemon on ``address`` answering every GET with ``views`` (the paths asked in ``paths``), while
    in a with block."""

    def __init__(self, views: list[dict] | dict, address: tuple[str, int] = ("127.0.0.1", 0), status: int = 200):
        import http.server
        import socket

        paths = self.paths = []

        class Hot(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                paths.append(self.path)
                body = json.dumps(views).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = type("Server", (http.server.ThreadingHTTPServer,),
                      {"address_family": socket.AF_INET6 if ":" in address[0] else socket.AF_INET})
        self.server = server(address, Hot)
        self.port = self.server.server_address[1]

    def __enter__(self) -> _HotViews:
        import threading

        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_gate_command_asks_under_the_urls_path_as_the_query_commands_do(tmp_path):
    # Behind a proxy that serves the daemon under a path, the gate asked at the root: a 404, so an allow.
    decision = {"decision": "block", "gate": "session-cost", "reason": "spent $5.12 of its $5.00 budget"}
    with _HotViews(decision) as daemon:
        out = run("gate", "--session", "agent:main:main", "--tool", "Bash", "--url",
                  f"http://127.0.0.1:{daemon.port}/agentledger/", db=tmp_path / "l.db")
    assert (out.returncode, json.loads(out.stdout)) == (1, decision), out.stderr
    assert daemon.paths == ["/agentledger/v1/gate?session_key=agent%3Amain%3Amain&tool=Bash"]


def test_the_gate_command_asks_for_a_session_named_in_bytes_that_are_no_utf8(tmp_path):
    # A name from a shell variable holding a stray byte: quoting it for the URL raised UnicodeEncodeError.
    decision = {"decision": "allow"}
    with _HotViews(decision) as daemon:
        out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(tmp_path / "l.db"), "gate",
                              "--session", os.fsdecode(b"agent:main:\xff"), "--tool", "Bash", "--url",
                              f"http://127.0.0.1:{daemon.port}"], capture_output=True, text=True, timeout=60)
    assert (out.returncode, json.loads(out.stdout)) == (0, decision), out.stderr
    assert daemon.paths == ["/v1/gate?session_key=agent%3Amain%3A%FF&tool=Bash"]


def test_live_sessions_as_csv_flatten_nested_totals(tmp_path):
    import csv

    view = {"session_key": "agent:main:main", "cost_usd": 1.5, "tags": ["a", "b"],
            "family": {"cost_usd": 2.5, "tool_calls": 3}}
    with _HotViews([view]) as daemon:
        out = run("sessions", "--live", "--csv", "--url", f"http://127.0.0.1:{daemon.port}", db=tmp_path / "l.db")
    assert out.returncode == 0, out.stderr
    (row,) = csv.DictReader(out.stdout.splitlines())
    assert row == {"session_key": "agent:main:main", "cost_usd": "1.5", "tags": '["a","b"]',
                   "family_cost_usd": "2.5", "family_tool_calls": "3"}


@pytest.mark.parametrize("status, body, told", [
    (500, {"error": "internal error: the daemon's log has the traceback"},
     "answered HTTP 500: internal error: the daemon's log has the traceback"),
    (503, {"error": "hot session views are\nserved by `agentledger serve` only"},
     "answered HTTP 503: hot session views are served by `agentledger serve` only"),
    (502, ["not", "the daemon's"], "answered HTTP 502: Bad Gateway"),
], ids=["500", "503", "not-json-error"])
def test_live_sessions_tell_a_daemon_s_error_answer_as_its_answer(tmp_path, status, body, told):
    # An answer with an error status was told as no daemon answering, with `agentledger serve` to start as the fix.
    with _HotViews(body, status=status) as daemon:
        url = f"http://127.0.0.1:{daemon.port}"
        line = _one_line(run("sessions", "--live", "--url", url, db=tmp_path / "l.db"), 1, f"the daemon at {url} {told}")
    assert "no daemon answers" not in line and "agentledger serve`, or" not in line


@pytest.mark.parametrize("listen, daemon_host", [(":{port}", "127.0.0.1"), ("0.0.0.0:{port}", "127.0.0.1"),
                                                 ("[::]:{port}", "::1"), ("[::1]:{port}", "::1")])
def test_live_sessions_find_the_daemon_at_the_address_it_listens_on(tmp_path, listen, daemon_host):
    # The listen value was pasted into the URL as it was: ":19497" asked http://:19497, where nobody answers.
    view = {"session_key": "agent:main:main", "cost_usd": 1.5}
    with _HotViews([view], (daemon_host, 0)) as daemon:
        env = cli_env(tmp_path / "l.db") | {"AGENTLEDGER_HTTP_LISTEN": listen.format(port=daemon.port)}
        env.pop("AGENTLEDGER_URL", None)
        out = run("sessions", "--live", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [view]


@pytest.mark.parametrize("config_text, url_env, needle", [
    ("", "http://127.0.0.1:94640x", "$AGENTLEDGER_URL 'http://127.0.0.1:94640x' names no port"),
    # With a daemon that picks its port as it starts, the message offered http://127.0.0.1:0 as the URL to give.
    ('[http]\nlisten = "127.0.0.1:0"\n', "http://127.0.0.1:x", "give one such as http://127.0.0.1:9464"),
    # The URL built from a host no URL can carry crashed the HTTP client with a traceback.
    ('[http]\nlisten = "local host:9464"\n', None, "http.listen: cannot listen on 'local host:9464': give HOST:PORT"),
    # An IPv6 literal left open, or unbracketed: passed the configuration, then failed naming neither key nor fix.
    ('[http]\nlisten = "[::1"\n', None, "http.listen: cannot listen on '[::1': give HOST:PORT"),
    ('[http]\nlisten = "::1:9464"\n', None, "or [::1]:9464 for an IPv6 address"),
])
def test_the_daemon_s_address_from_the_environment_or_the_config_file_is_checked_as_url_is(
        tmp_path, config_text, url_env, needle):
    env = cli_env(tmp_path / "l.db")
    env.pop("AGENTLEDGER_URL", None)
    if url_env:
        env["AGENTLEDGER_URL"] = url_env
    config = tmp_path / "c.toml"
    config.write_text(config_text)
    for command in (["watch", "--once"], ["sessions", "--live"]):
        _one_line(run("--config", str(config), *command, env=env), 2, needle)


@pytest.mark.parametrize("command", ["usage", "costs"])
@pytest.mark.parametrize("fmt", ["--json", "--csv"])
def test_a_chart_with_json_or_csv_is_refused_before_printing(tmp_path, oc_corpus, command, fmt):
    db = tmp_path / "l.db"
    ingest(db, oc_corpus)
    out = run(command, "--chart", fmt, db=db)
    assert out.stdout == ""
    _one_line(out, 2, "--chart")


def test_a_table_keeps_each_row_on_one_line_whatever_its_text_holds(capsys):
    # A tool error may be a whole pretty-printed JSON object: it broke the `errors` table over several lines.
    from agentledger.cli.output import emit_table

    emit_table([{"tool": "exec", "error": '{\n  "status": "error",\n  "code": 1\n}'}],
               [("tool", "TOOL"), ("error", "ERROR")])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].endswith('{ "status": "error", "code": 1 }')


class _TerminalOut(io.StringIO):
    def isatty(self) -> bool:
        return True


# No digit in a text cell, so that every number printed is a number cell's.
_TEXT = st.text(alphabet="abcdefgh:-_/ ", max_size=60)


@settings(max_examples=150, deadline=None)
@given(width=st.integers(20, 120), numeric=st.lists(st.booleans(), min_size=1, max_size=9), data=st.data())
def test_a_table_at_any_width_prints_each_number_whole_or_names_its_column(width, numeric, data):
    # Where the text could not keep 10 characters, rich shared the width out among all the columns and
    # folded the numbers: "1,040" over ",960".
    from agentledger.cli.output import emit_table

    columns = [(f"c{i}", f"{'n' if number else 't'}{i}") for i, number in enumerate(numeric)]
    cell = {key: st.none() | st.integers(0, 10**13) if number else _TEXT
            for (key, _), number in zip(columns, numeric)}
    rows = data.draw(st.lists(st.fixed_dictionaries(cell), min_size=1, max_size=6))
    out = _TerminalOut()
    with contextlib.redirect_stdout(out), mock.patch.dict(os.environ, {"COLUMNS": str(width)}):
        emit_table(rows, columns)
    printed = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())
    table, _, left_out = printed.partition("(too narrow for ")
    left_out = left_out.split(":")[0].split(", ") if left_out else []
    assert all(len(line) <= width for line in table.splitlines()), printed
    shown = Counter(re.findall(r"(?<![\w,])\d[\d,]*(?![\w,])", table))
    wanted = Counter(f"{row[key]:,}" for row in rows for (key, header), number in zip(columns, numeric)
                     if number and header not in left_out and row[key] is not None)
    assert shown == wanted, printed
    assert "t0" not in left_out and "n0" not in left_out, printed  # the first column is the row's name


def test_a_default_config_place_the_user_cannot_look_into_is_no_config(tmp_path, unprivileged):
    # HOME left pointing at another user's home: looking for the config there raised PermissionError.
    closed = tmp_path / "closed"
    (closed / "agentledger").mkdir(parents=True)
    closed.chmod(0)
    env = cli_env(tmp_path / "ledger.db") | {"XDG_CONFIG_HOME": str(closed)}
    try:
        out = subprocess.run([*unprivileged, sys.executable, "-m", "agentledger", "config", "show", "--json"],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    finally:
        closed.chmod(0o755)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr


def test_ingest_reads_a_root_given_with_a_tilde_as_serve_and_source_do(tmp_path, oc_corpus):
    # Quoted, or from a unit's ExecStart, ~ reaches the command unexpanded: ingest called it missing.
    env = cli_env(tmp_path / "l.db") | {"HOME": str(oc_corpus.parent)}
    read = run("ingest", "--json", f"~/{oc_corpus.name}", env=env)
    assert read.returncode == 0, read.stderr
    again = run("ingest", "--json", "--source", f"oc-telemetry=~/{oc_corpus.name}", db=tmp_path / "other.db", env=env)
    assert json.loads(read.stdout)["events"] == json.loads(again.stdout)["events"] > 0


@pytest.mark.parametrize("text, env, origin", [
    ('[[sources]]\nformat = "oc-telemetry"\nroot = "ROOT"\n', {}, "{file}"),
    ("", {"AGENTLEDGER_SOURCES": '[{"format": "claude-code", "root": "ROOT"}]'}, "$AGENTLEDGER_SOURCES"),
])
def test_ingest_refuses_a_configured_root_that_does_not_exist_as_it_does_one_given_as_root(tmp_path, text, env,
                                                                                          origin, oc_corpus):
    # It warned that the root "holds no oc-telemetry files" and exited 0, where `ingest ROOT` exits 2.
    missing, db, config = tmp_path / "gone" / "state", tmp_path / "l.db", tmp_path / "c.toml"
    config.write_text(text.replace("ROOT", str(missing)))
    env = cli_env(db) | {k: v.replace("ROOT", str(missing)) for k, v in env.items()}
    out = run("--config", str(config), "ingest", env=env)
    assert out.returncode == 2
    assert out.stderr == (f"agentledger: invalid config: sources[0].root: '{missing}' does not exist: correct the "
                          f"path, or run serve, which waits for it to appear (from {origin.format(file=config)})\n")
    assert not db.exists()
    _one_line(run("--config", str(config), "ingest", str(missing), env=env), 2, "does not exist")
    # ROOT arguments replace the configured sources, so the missing one is not asked for.
    read = run("--config", str(config), "ingest", "--json", str(oc_corpus), env=env)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["events"] > 0


@pytest.mark.parametrize("text, env, origin", [
    ('[[sources]]\nformat = "oc-telemetry"\nroot = "ROOT"\n', {}, "{file}"),
    ("", {"AGENTLEDGER_SOURCES": '[{"format": "oc-telemetry", "root": "ROOT"}]'}, "$AGENTLEDGER_SOURCES"),
])
@pytest.mark.parametrize("command", [["ingest"], ["serve", "--no-demo", "--listen", "127.0.0.1:0"]],
                         ids=["ingest", "serve"])
def test_a_configured_root_that_is_a_file_is_refused_as_the_source_flag_refuses_it(tmp_path, text, env, origin, command):
    # The configured one was listed, held "no oc-telemetry files" and exited 0; --source's exits 2.
    file, db, config = tmp_path / "events.jsonl", tmp_path / "l.db", tmp_path / "c.toml"
    file.write_bytes(llm_call(1))
    config.write_text(text.replace("ROOT", str(file)))
    env = cli_env(db) | {k: v.replace("ROOT", str(file)) for k, v in env.items()}
    out = run("--config", str(config), *command, env=env)
    assert out.returncode == 2
    assert out.stderr == (f"agentledger: invalid config: sources[0].root: '{file}' is not a directory: give the "
                          f"directory to read (from {origin.format(file=config)})\n")
    assert not db.exists()
    for roots in (["--source", f"oc-telemetry={file}"], [str(file)]):  # serve's ROOT was click's words, no fix
        _one_line(run("--config", str(config), *command, *roots, env=env), 2,
                  f"'{file}' is not a directory: give the directory to read")


@pytest.mark.parametrize("given", ["config", "argument"])
def test_ingest_reads_a_root_it_cannot_look_into_as_unreadable(tmp_path, unprivileged, given):
    # Given as an argument, it was refused as one that "does not exist".
    closed = tmp_path / "closed"
    state = closed / "state"
    (state / "agents").mkdir(parents=True)
    config = tmp_path / "c.toml"
    config.write_text(f'[[sources]]\nformat = "oc-telemetry"\nroot = "{state}"\n' if given == "config" else "")
    closed.chmod(0)
    try:
        out = subprocess.run([*unprivileged, sys.executable, "-m", "agentledger", "--config", str(config), "ingest",
                              "--json", *([str(state)] if given == "argument" else [])], capture_output=True,
                             text=True, env=cli_env(tmp_path / "l.db"), cwd=REPO, timeout=60)
    finally:
        closed.chmod(0o755)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unreadable_dirs"] > 0
    assert f"cannot list directory {state}: Permission denied" in out.stderr


def test_ingest_tells_a_root_that_is_a_symlink_loop_unreadable(tmp_path):
    # Path.resolve() raised on it: a traceback, nothing read of the other roots.
    loop, logs = tmp_path / "loop", LogDir(tmp_path / "logs")
    loop.symlink_to(tmp_path / "back")
    (tmp_path / "back").symlink_to(loop)
    logs.append(llm_call(1))
    out = run("ingest", "--json", str(loop), str(logs.root), db=tmp_path / "l.db")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["events"] == 1
    assert f"cannot list directory {loop}: Too many levels of symbolic links" in out.stderr


@pytest.mark.parametrize("where", ["OPENCLAW_STATE_DIR", "HOME"])
def test_ingest_reads_a_producer_dir_it_finds_out_of_reach_as_unreadable(tmp_path, unprivileged, where):
    # Path.is_dir() raises where a directory above cannot be searched: ingest stopped on a traceback.
    closed = tmp_path / "closed"
    state = closed / ".openclaw"
    LogDir(state).append(llm_call(1))
    env = cli_env(tmp_path / "l.db") | {"HOME": str(tmp_path / "home")}
    for name in ("CLAUDE_CONFIG_DIR", "XDG_CONFIG_HOME"):  # each found under HOME alone
        env.pop(name, None)
    env |= {"OPENCLAW_STATE_DIR": str(state)} if where == "OPENCLAW_STATE_DIR" else {"HOME": str(closed)}
    closed.chmod(0)
    try:
        out = subprocess.run([*unprivileged, sys.executable, "-m", "agentledger", "ingest", "--json"],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
        show = subprocess.run([*unprivileged, sys.executable, "-m", "agentledger", "config", "show"],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    finally:
        closed.chmod(0o755)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unreadable_dirs"] > 0
    assert f"cannot list directory {state}: Permission denied" in out.stderr
    assert show.returncode == 0 and "Traceback" not in show.stderr, show.stderr
    # Once it can be read, its logs are.
    again = run("ingest", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["events"] == 1


@pytest.mark.parametrize("command", [["usage"], ["reprice"], ["prune"], ["verify"], ["verify", "--repair"]])
def test_a_ledger_the_user_cannot_look_for_is_one_line_saying_why(tmp_path, unprivileged, command):
    # Path.exists() raised PermissionError where a directory above the ledger cannot be searched.
    closed = tmp_path / "closed"
    closed.mkdir()
    db = closed / "ledger.db"
    closed.chmod(0)
    try:
        out = subprocess.run([*unprivileged, sys.executable, "-m", "agentledger", "--db", str(db), *command],
                             capture_output=True, text=True, env=cli_env(db), cwd=REPO, timeout=60)
    finally:
        closed.chmod(0o755)
    _one_line(out, 2, f"cannot read {db} (Permission denied)")


_WIDE_KEY = "whatsapp:direct:20654912641234"  # a session key as long as a real one


def _wide_ledger(tmp_path: Path) -> Path:
    """A session of one run whose tokens and cost are as wide as a busy session's."""
    logs = LogDir(tmp_path / "logs")
    logs.append(event(1, "run.start", {"model": "claude-sonnet-4-5", "provider": "anthropic"}, session=_WIDE_KEY))
    logs.append(event(2, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                      "delta": {"input": 12_345_678, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                                                "total": 12_345_678}, "costUsd": 12.3456}, session=_WIDE_KEY))
    logs.append(event(3, "run.end", {"model": "claude-sonnet-4-5", "provider": "anthropic"}, session=_WIDE_KEY))
    db = tmp_path / "ledger.db"
    ingest(db, logs.root)
    return db


@needs_tmux
@pytest.mark.parametrize("args, texts", [
    (["sessions"], {"12,345,678": 1, "12.3456": 1, "active": 1}),
    (["runs"], {"12,345,678": 1, "12.3456": 1}),
    (["top", "runs"], {"12,345,678": 1, "12.3456": 1}),
    (["session", f"agent:main:{_WIDE_KEY}"], {"12,345,678": 2, "12.3456": 5}),  # twice in the summary
    (["inputs"], {"lost": 1, "bytes": 1, "{size}": 2}),  # read to its end: offset and size
])
def test_an_80_column_terminal_cuts_text_never_numbers(tmp_path, args, texts):
    # Every column after the first was cut to fit: costs went missing, tokens showed as "12,34…".
    db = _wide_ledger(tmp_path)
    term = Terminal(tmp_path, args, cli_env(db), lines=50, hold=True)
    try:
        assert term.exit_code() == 0
        screen = term.screen()
    finally:
        term.close()
    (log,) = (tmp_path / "logs").rglob("*.jsonl")
    shown = {text: screen.count(text.format(size=f"{log.stat().st_size:,}")) for text in texts}
    assert shown == texts, screen


# Text the logs may hold: rich markup, escape sequences that clear the screen, plant a link or write the
# clipboard, a C1 control, a right-to-left override, a line break. SHOWN is how a table must show it.
_HOSTILE = ("[bold red]R[/bold red][link=http://evil.example]L[/link] x[/]y \x1b[2J"
            "\x1b]8;;http://evil.example/\x1b\\a\x1b]8;;\x1b\\ \x1b]52;c;cHduZWQ=\x07 \x9b2J \u202edcba\nz")
_SHOWN = (r"[bold red]R[/bold red][link=http://evil.example]L[/link] x[/]y \x1b[2J"
          r"\x1b]8;;http://evil.example/\x1b\a\x1b]8;;\x1b\ \x1b]52;c;cHduZWQ=\x07 \x9b2J \u202edcba z")
_HOSTILE_DIR = "logs\x1b]52;c;eA==\x07\u202e"
_SHOWN_DIR = r"logs\x1b]52;c;eA==\x07\u202e"
_SLUG = "/src/app/[slug]/page.tsx"
# What no answer may pass on from the logs to a terminal or a pipe.
_CONTROLS = (b"\x1b", b"\x07", b"\x00", "\x9b".encode(), "\u202e".encode())


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory) -> Path:
    """A session whose key, model, tool, error, label and subagent hold ``_HOSTILE`` (the tool's name a NUL
    too), in a directory named with escapes, beside a line that could not be read."""
    tmp = tmp_path_factory.mktemp("hostile")
    logs = LogDir(tmp / _HOSTILE_DIR)
    key, child, model, tool = "k" + _HOSTILE, "subagent:c" + _HOSTILE, "m" + _HOSTILE, "t\x00" + _HOSTILE
    now = time.time_ns() // 1_000_000 - 60_000
    delta = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "total": 15}
    for n, kind, data, session in [
        (1, "run.start", {"model": model, "provider": "anthropic"}, key),
        (2, "llm.call", {"callIndex": 0, "provider": "anthropic", "model": model, "delta": delta, "costUsd": 0.01},
         key),
        (3, "tool.start", {"toolName": tool, "toolCallId": "tc1", "params": {"path": _SLUG}}, key),
        (4, "tool.end", {"toolName": tool, "toolCallId": "tc1", "isError": True, "durationMs": 5,
                         "error": "e" + _HOSTILE}, key),
        (5, "subagent.spawn", {"childSessionKey": f"agent:main:{child}", "label": "l" + _HOSTILE}, key),
        (6, "llm.call", {"callIndex": 0, "provider": "anthropic", "model": "n" + _HOSTILE, "delta": delta,
                         "costUsd": 0.02}, child),
        (7, "run.end", {"model": model, "provider": "anthropic"}, key),
    ]:
        logs.append(event(n, kind, data, session=session, ts=now + n))
    logs.append(b"not json \x1b[2J\n")
    db = tmp / "ledger.db"
    ingest(db, logs.root)
    return db


_KEY = "agent:main:k" + _HOSTILE


_ANSWERS = [
    (["sessions"], _SHOWN), (["session", _KEY], _SHOWN), (["runs"], _SHOWN), (["run", "run-k" + _HOSTILE], _SHOWN),
    (["tools"], r"t\x00" + _SHOWN), (["errors"], "e" + _SHOWN), (["costs", "--group-by", "model"], "m" + _SHOWN),
    (["costs", "--group-by", "tool"], r"t\x00" + _SHOWN), (["costs", "--group-by", "session"], _SHOWN),
    (["costs", "--group-by", "session", "--chart"], _SHOWN), (["costs", "--group-by", "day", "--chart"], _SHOWN),
    (["top", "runs"], _SHOWN), (["top", "tools"], _SHOWN), (["top", "models"], "n" + _SHOWN),
    (["top", "sessions"], _SHOWN), (["tree", _KEY], "l" + _SHOWN), (["timeline", _KEY], _SHOWN),
    (["events"], _SHOWN), (["files"], _SLUG), (["subagents"], "l" + _SHOWN), (["inputs"], _SHOWN_DIR),
    (["rejects"], _SHOWN_DIR), (["watch", "--once", "--url", "http://127.0.0.1:9"], _SHOWN),
]


@pytest.mark.parametrize("args, shown", _ANSWERS,
                         ids=[" ".join(a for a in args if a.isprintable()) for args, _ in _ANSWERS])
def test_text_from_the_logs_is_shown_as_it_is_never_read_as_markup_or_sent_as_controls(hostile_db, args, shown):
    # Rich read log text as markup: "[/]" stopped the command with a traceback, "[slug]" went missing from a
    # path, "[link=...]" made a link; and escape sequences from the logs reached the terminal, or a pipe.
    from terminal import bytes_to_a_terminal

    # As wide as every cell wants (watch, piped, fits $COLUMNS): the text is seen whole, on one line.
    env = {**cli_env(hostile_db), "TERM": "xterm-256color", "COLUMNS": "1000"}
    piped = subprocess.run([sys.executable, "-m", "agentledger", *args], capture_output=True, env=env, timeout=60)
    assert piped.returncode == 0, piped.stderr.decode(errors="replace")
    # Piped, a chart is its table, which has no legend.
    for out, shows in ((bytes_to_a_terminal(args, env, 1000), True), (piped.stdout, "--chart" not in args)):
        # Once the styles rich draws are left out, any control is one the logs sent.
        out = re.sub(rb"\x1b\[[0-9;]*m", b"", out)
        assert not [c for c in _CONTROLS if c in out], out
        assert shown in out.decode() or not shows, out.decode()


def test_csv_is_the_logs_text_exactly_with_a_formula_kept_text(tmp_path):
    # Written to a file, CSV lost what looked like escape sequences (click.echo strips them off a terminal),
    # so its key was not --json's and found no session; a lone CR ended its row; "=HYPERLINK(...)" went out
    # for a spreadsheet to run.
    import csv

    key = "k\x1b[2J\x1b[31mRED\x1b[0m a\rb\x00\u202e"
    tools = ['=HYPERLINK("http://evil","x")', "-1.5", "@SUM(A1)", "'=x", "'quoted'", "plain"]
    logs = LogDir(tmp_path / "logs")
    for n, tool in enumerate(tools):
        logs.append(event(2 * n + 1, "tool.start", {"toolName": tool, "toolCallId": f"tc{n}"}, session=key))
        logs.append(event(2 * n + 2, "tool.end", {"toolName": tool, "toolCallId": f"tc{n}", "isError": False,
                                                  "durationMs": 5}, session=key))
    db = tmp_path / "l.db"
    ingest(db, logs.root)

    def answer(*args: str) -> tuple[list[dict], list[dict]]:
        out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args, "--csv"],
                             capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return (list(csv.DictReader(io.StringIO(out.stdout.decode(), newline=""))),
                json.loads(run(*args, "--json", db=db).stdout))

    rows, want = answer("sessions")
    assert [r["session_key"] for r in rows] == [r["session_key"] for r in want] == [f"agent:main:{key}"]
    rows, want = answer("tools")
    shown = {r["tool"]: r["calls"] for r in rows}
    assert shown == {'\'=HYPERLINK("http://evil","x")': "1", "'-1.5": "1", "'@SUM(A1)": "1", "''=x": "1",
                     "'quoted'": "1", "plain": "1"}
    # One quote taken off a cell of quotes then a formula's start gives the text back.
    assert sorted(re.sub(r"^'(?='*[=+\-@\t\r])", "", tool) for tool in shown) == sorted(r["tool"] for r in want)


def test_csv_writes_true_and_false_as_json_does(tmp_path):
    # sessions --csv wrote is_subagent as Python's False, where --json has false.
    logs = LogDir(tmp_path / "logs")
    logs.append(llm_call(1))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    (row,) = csv.DictReader(run("sessions", "--csv", db=db).stdout.splitlines())
    (want,) = json.loads(run("sessions", "--json", db=db).stdout)
    flags = {key: json.dumps(value) for key, value in want.items() if isinstance(value, bool)}
    assert flags and flags == {key: row[key] for key in flags}


def test_csv_keeps_numbers_numbers_and_quotes_text_that_starts_a_formula(capsys):
    from agentledger.cli.output import emit_csv

    emit_csv([{"cost": -1.5, "delta": -3, "note": "-1.5", "name": "=1+1", "none": None}], ())
    assert capsys.readouterr().out == "cost,delta,note,name,none\n-1.5,-3,'-1.5,'=1+1,\n"


def test_verify_names_a_file_with_the_controls_of_its_path_escaped(tmp_path):
    # A checkpoint's file and a rollup's key went to the terminal as they were, escape sequences and all.
    logs = LogDir(tmp_path / _HOSTILE_DIR)
    logs.append(llm_call(1) + llm_call(2))
    db = tmp_path / "l.db"
    ingest(db, logs.root)
    logs.truncate()
    out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), "verify"], capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert not [c for c in _CONTROLS if c in out.stdout], out.stdout
    assert out.stdout.decode().startswith(f"{tmp_path}/{_SHOWN_DIR}/agents/main/telemetry/events.jsonl: holds ")


# Names as real logs hold them: a family of three emoji joined by U+200D, then a right-to-left override; a
# Persian word spelled with U+200C; a Nerd Font icon (private use); a heart with its emoji selector U+FE0F;
# a CJK name, two cells a character.
_FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
_NAMES = [_FAMILY + "\u202eexe.txt", "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\ue0a0 branch",
          "\u2764\ufe0f like", "\u8bfb\u53d6\u6587\u4ef6", "ls"]


@pytest.fixture(scope="module")
def named_db(tmp_path_factory) -> Path:
    """A tool call of each of ``_NAMES``, in a session named by the CJK one but for ``ls``'s own."""
    tmp = tmp_path_factory.mktemp("named")
    logs = LogDir(tmp / "logs")
    now = time.time_ns() // 1_000_000 - 60_000
    for n, name in enumerate(_NAMES):
        session = name if name == "ls" else _NAMES[4]
        logs.append(event(2 * n + 1, "tool.start", {"toolName": name, "toolCallId": f"tc{n}"}, session=session,
                          ts=now + 2 * n))
        logs.append(event(2 * n + 2, "tool.end", {"toolName": name, "toolCallId": f"tc{n}", "isError": False,
                                                  "durationMs": 5}, session=session, ts=now + 2 * n + 1))
    db = tmp / "ledger.db"
    ingest(db, logs.root)
    return db


def test_joined_emoji_persian_and_icons_are_shown_as_they_are_a_bidi_override_beside_them_escaped(named_db):
    # "👨‍👩‍👧" was shown as "👨\u200d👩\u200d👧", the Persian word with a "\u200c" in it, an icon as "\ue0a0".
    from terminal import bytes_to_a_terminal

    env = {**cli_env(named_db), "TERM": "xterm-256color", "COLUMNS": "200"}
    piped = subprocess.run([sys.executable, "-m", "agentledger", "tools"], capture_output=True, env=env, timeout=60)
    assert piped.returncode == 0, piped.stderr.decode(errors="replace")
    for out in (piped.stdout.decode(), bytes_to_a_terminal(["tools"], env, 200).decode()):
        assert _FAMILY + r"\u202eexe.txt" in out, out
        assert all(name in out for name in _NAMES[1:]), out
        assert "\u202e" not in out and r"\u200" not in out and r"\ue0a0" not in out, out


@pytest.mark.parametrize("args", [["tools"], ["costs", "--group-by", "tool"], ["sessions"], ["top", "tools"]])
def test_a_piped_table_lines_up_its_columns_after_wide_names(named_db, args):
    # Padded by characters, a column after a CJK name started further right than on the other rows.
    from rich.cells import cell_len

    out = run(*args, db=named_db).stdout
    lines = out.splitlines()
    assert len(lines) > 2 and (_NAMES[4] in out), out
    # A cell is text without two spaces in it; where each starts, counted in a terminal's cells.
    starts = {tuple(cell_len(line[:m.start()]) for m in re.finditer(r"\S+(?: \S+)*", line)) for line in lines}
    assert len(starts) == 1, out


_JSON_SCALARS = st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False) | st.text()
_JSON_VALUES = st.recursive(_JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=10)


@given(st.lists(st.dictionaries(st.text(max_size=8), _JSON_VALUES, max_size=4), max_size=4))
def test_rows_written_as_they_come_are_the_json_of_the_whole_list(rows):
    # `events --json` and the other row answers are written a row at a time: the text must be what the list's was.
    from agentledger.cli.output import emit_json, emit_json_rows

    whole, streamed = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(whole):
        emit_json(rows)
    with contextlib.redirect_stdout(streamed):
        emit_json_rows(iter(rows))
    assert streamed.getvalue() == whole.getvalue()


def test_csv_header_names_every_column_any_row_has_in_order_of_appearance(capsys):
    # A nested value some rows have and others lack is columns of its own, named in the header before any row.
    from agentledger.cli.output import emit_csv

    emit_csv(iter([{"a": 1, "n": None}, {"a": 2, "n": {"x": "y,z"}}, {"a": 3, "b": "x\ry"}]), ("a", "n"))
    out = capsys.readouterr().out
    assert list(csv.reader(io.StringIO(out, newline=""))) == [
        ["a", "n", "n_x", "b"], ["1", "", "", ""], ["2", "", "y,z", ""], ["3", "", "", "x\ry"]]


class _Discarded(io.TextIOBase):
    def write(self, text: str) -> int:
        return len(text)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_big_export_is_not_held_in_memory(fmt):
    # `events --csv --limit 1000000` held every row, then every row flattened: gigabytes for a big ledger.
    import tracemalloc

    from agentledger.cli.output import emit_csv, emit_json_rows

    rows = ({"at": f"2026-11-25T00:00:{i % 60:02d}Z", "event_id": f"{i:016x}", "kind": "tool.end",
             "agent_id": "main", "session_key": f"agent:main:s{i}", "file": "/logs/agents/main/events.jsonl",
             "offset": i * 300} for i in range(200_000))
    tracemalloc.start()
    try:
        with contextlib.redirect_stdout(_Discarded()):
            emit_csv(rows, ()) if fmt == "csv" else emit_json_rows(rows)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Held, these rows take about 150 MB; spooled, the answer keeps at most 16 MiB of its text in memory.
    assert peak < 40 << 20, peak


def _as_another_user() -> dict:
    """How to run a command as a user the modes apply to: this one, or nobody when this is root (whom no
    mode stops). Skips where nobody cannot run this checkout's Python."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody to run as")
    kwargs = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    try:
        probe = subprocess.run([sys.executable, "-c", "import agentledger"], cwd="/", capture_output=True,
                               env={**os.environ, "PYTHONPATH": str(REPO / "src")}, **kwargs)
        failed = probe.stderr[-200:] if probe.returncode else None
    except PermissionError as exc:
        failed = exc
    if failed is not None:
        pytest.skip(f"nobody cannot run this checkout's Python: {failed!r}")
    return kwargs


def test_a_ledger_read_through_a_link_is_read_with_the_log_beside_where_it_leads():
    # The -wal and -shm are beside the file the link leads to. Judged by the link's place, a link in a directory
    # the reader cannot write to a ledger a daemon writes was read as a file nobody writes, its log ignored:
    # "an empty database", or "damaged, restore it from a backup" while it was written.
    import tempfile

    as_other = _as_another_user()
    top = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        top.chmod(0o755)
        data, links = top / "data", top / "etc"
        data.mkdir(mode=0o777)
        links.mkdir(mode=0o755)
        data.chmod(0o777)
        db = data / "ledger.db"
        ingest(db)  # tables only, folded into the file
        held = apsw.Connection(str(db))  # a reader's snapshot keeps the log from being folded in at the close
        held.execute("BEGIN")
        held.execute("SELECT count(*) FROM sessions").fetchall()
        ingest(db, CORPUS / "oc-telemetry")
        for f in data.iterdir():
            f.chmod(0o666)
        (links / "ledger.db").symlink_to(db)
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        answers = [subprocess.run([sys.executable, "-m", "agentledger", "--db", str(where), "usage", "--json"],
                                  cwd="/", env=env, capture_output=True, text=True, timeout=60, **as_other)
                   for where in (db, links / "ledger.db")]
        held.execute("COMMIT")
        held.close()
        assert [a.returncode for a in answers] == [0, 0], [a.stderr for a in answers]
        direct, linked = (json.loads(a.stdout) for a in answers)
        assert direct["sessions"] > 0 and linked == direct
    finally:
        shutil.rmtree(top)


@pytest.mark.parametrize("wal_bytes", [0, 4096])
def test_a_wal_and_shm_another_user_left_are_named_with_the_way_out(wal_bytes):
    # A group member's query while no daemon ran left them, of the ledger's mode and theirs: the owner's next
    # ingest or query could not open the ledger, told only to pick another --db or to run as its owner.
    import tempfile

    as_owner = _as_another_user()
    top = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        top.chmod(0o777)
        db = top / "ledger.db"
        ingest(db)
        others = os.geteuid() + 1 if not as_owner else 1  # root's files are nobody's to write too
        for suffix in ("-wal", "-shm"):
            side = Path(f"{db}{suffix}")
            side.write_bytes(b"\0" * (wal_bytes if suffix == "-wal" else 32768))
            side.chmod(0o640)
            if as_owner:
                os.chown(side, others, others)
        if as_owner:
            for path in (top, db):
                os.chown(path, as_owner["user"], as_owner["group"])
        elif os.access(f"{db}-shm", os.W_OK):
            pytest.skip("cannot make a file this user may not write")
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        for args in (["ingest", str(top)], ["usage"]):
            out = subprocess.run([sys.executable, "-m", "agentledger", "--db", str(db), *args], cwd="/", env=env,
                                 capture_output=True, text=True, timeout=60, **as_owner)
            want = "hold commits not yet folded" if wal_bytes else "remove them while no agentledger runs"
            line = _one_line(out, 2, f"{db}-wal and {db}-shm belong to another user", want)
            assert "run as a member" not in line and "pass --db" not in line
        assert Path(f"{db}-wal").stat().st_size == wal_bytes
    finally:
        shutil.rmtree(top)
