"""Configuration: file < environment < flags, and one clear line for anything invalid."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.config import Config, ConfigError, load, to_toml

FILE = """
db = "/srv/ledger.db"
timezone = "Europe/Berlin"

[http]
listen = "127.0.0.1:9000"

[reconcile]
grace_s = 120

[store]
max_entries = 64
ttl_s = 30

[[sources]]
format = "oc-telemetry"
root = "/srv/openclaw"

[[gates]]
name = "session-cost"
scope = "session"
metric = "cost_usd"
limit = 5.0
"""


@pytest.fixture
def config_file(tmp_path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(FILE)
    return path


def test_defaults_without_any_file(tmp_path):
    cfg = load(None, env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert cfg.http.listen == "127.0.0.1:9464" and cfg.gates == () and cfg.store.max_entries == 128


def test_file_then_environment_then_flags(config_file):
    cfg = load(config_file, env={})
    assert (cfg.db, cfg.http.listen, cfg.reconcile.grace_s, cfg.store.max_entries, cfg.store.ttl_s) == (
        Path("/srv/ledger.db"), "127.0.0.1:9000", 120, 64, 30)
    assert cfg.gates[0].name == "session-cost" and cfg.sources[0].root == Path("/srv/openclaw")
    env = {"AGENTLEDGER_HTTP_LISTEN": "127.0.0.1:9100", "AGENTLEDGER_STORE_MAX_ENTRIES": "16",
           "AGENTLEDGER_GATES": '[{"name": "x", "scope": "global-day", "metric": "tokens", "limit": 1e6}]'}
    cfg = load(config_file, env=env)
    assert (cfg.http.listen, cfg.store.max_entries, cfg.store.ttl_s) == ("127.0.0.1:9100", 16, 30)
    assert [g.name for g in cfg.gates] == ["x"]
    cfg = load(config_file, {"http.listen": "127.0.0.1:9200", "store.max_entries": None}, env=env)
    assert (cfg.http.listen, cfg.store.max_entries) == ("127.0.0.1:9200", 16)


def _show(path: Path | str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentledger", "--config", str(path), "config", "show"],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, **(env or {})})


def test_the_keys_the_contract_names_are_the_settings(tmp_path):
    # [store] max_entries, [reconcile] grace_s and [http] listen were unknown keys: exit 2.
    path = tmp_path / "c.toml"
    path.write_text('[http]\nlisten = "127.0.0.1:9500"\n[store]\nstate_dir = "/srv/state"\nmax_entries = 256\n'
                    "flush_interval_s = 2\n[reconcile]\ngrace_s = 300\n")
    shown = _show(path)
    assert shown.returncode == 0, shown.stderr
    tables = re.findall(r"^\[(\w+)\]$", shown.stdout, flags=re.M)
    assert tables[:3] == ["http", "store", "reconcile"]
    for line in ('[http]\nlisten = "127.0.0.1:9500"\n', '[store]\nstate_dir = "/srv/state"\nmax_entries = 256\n'
                 "flush_interval_s = 2.0\n", "[reconcile]\ngrace_s = 300.0\nidle_s = 1800.0\n"):
        assert line in shown.stdout
    top_level = shown.stdout.split("\n[", 1)[0]
    assert not re.search(r"^(listen|state_dir|grace_s|idle_s) =", top_level, flags=re.M) and "[hot]" not in shown.stdout
    env = {"AGENTLEDGER_HTTP_LISTEN": "127.0.0.1:9600", "AGENTLEDGER_STORE_MAX_ENTRIES": "512",
           "AGENTLEDGER_STORE_STATE_DIR": "/srv/other", "AGENTLEDGER_RECONCILE_GRACE_S": "60",
           "AGENTLEDGER_RECONCILE_IDLE_S": "90"}
    cfg = load(path, env=env)
    assert (cfg.http.listen, cfg.store.max_entries, cfg.store.state_dir, cfg.reconcile.grace_s,
            cfg.reconcile.idle_s) == ("127.0.0.1:9600", 512, Path("/srv/other"), 60, 90)


FORMER_FILE = """
listen = "127.0.0.1:9000"
state_dir = "/srv/state"
grace_s = 120
idle_s = 90

[hot]
max_entries = 64
ttl_s = 30
end_grace_s = 10
"""


def test_the_former_names_of_settings_still_load_as_their_names(tmp_path):
    """Configs and units written before the settings found their tables keep working."""
    former, now = tmp_path / "former.toml", tmp_path / "now.toml"
    former.write_text(FORMER_FILE)
    now.write_text('[http]\nlisten = "127.0.0.1:9000"\n[store]\nstate_dir = "/srv/state"\nmax_entries = 64\n'
                   "ttl_s = 30\nend_grace_s = 10\n[reconcile]\ngrace_s = 120\nidle_s = 90\n")
    assert load(former, env={}) == load(now, env={}) != Config()
    shown = _show(former)
    assert shown.returncode == 0 and shown.stdout.split("\n", 1)[1] == _show(now).stdout.split("\n", 1)[1]
    env = {"AGENTLEDGER_LISTEN": "127.0.0.1:9000", "AGENTLEDGER_STATE_DIR": "/srv/state", "AGENTLEDGER_GRACE_S": "120",
           "AGENTLEDGER_IDLE_S": "90", "AGENTLEDGER_HOT_MAX_ENTRIES": "64", "AGENTLEDGER_HOT_TTL_S": "30",
           "AGENTLEDGER_HOT_END_GRACE_S": "10"}
    assert load(None, env={"AGENTLEDGER_CONFIG": "/dev/null", **env}) == load(now, env={})
    # [hot] and [store] in one file are one table; the environment beats the file, whichever names each uses.
    mixed = tmp_path / "mixed.toml"
    mixed.write_text("[hot]\nmax_entries = 64\n[store]\nttl_s = 30\n")
    cfg = load(mixed, env={"AGENTLEDGER_STORE_MAX_ENTRIES": "8", "AGENTLEDGER_HOT_TTL_S": "7"})
    assert (cfg.store.max_entries, cfg.store.ttl_s) == (8, 7)


@pytest.mark.parametrize("text, env, message", [
    ('listen = "127.0.0.1:1"\n[http]\nlisten = "127.0.0.1:2"\n', {},
     "listen and [http] listen are one setting, both given in {file}: keep [http] listen, its name (listen is its "
     "former one)"),
    ("[hot]\nmax_entries = 5\n[store]\nmax_entries = 6\n", {},
     "[hot] max_entries and [store] max_entries are one setting, both given in {file}: keep [store] max_entries, "
     "its name ([hot] max_entries is its former one)"),
    ("", {"AGENTLEDGER_GRACE_S": "1", "AGENTLEDGER_RECONCILE_GRACE_S": "2"},
     "$AGENTLEDGER_RECONCILE_GRACE_S and $AGENTLEDGER_GRACE_S are one setting, both set: unset "
     "$AGENTLEDGER_GRACE_S, its former name"),
    # Two former names of one setting: the fix names neither as the one to keep, but the setting's name.
    ('state_dir = "/tmp/a"\n[hot]\nstate_dir = "/tmp/b"\n', {},
     "state_dir and [hot] state_dir are one setting, both given in {file}: give it once, as [store] state_dir, "
     "its name (both are former ones)"),
    ("", {"AGENTLEDGER_STATE_DIR": "/tmp/a", "AGENTLEDGER_HOT_STATE_DIR": "/tmp/b"},
     "$AGENTLEDGER_STATE_DIR and $AGENTLEDGER_HOT_STATE_DIR are one setting, both set: set "
     "$AGENTLEDGER_STORE_STATE_DIR, its name, alone (both are former ones)"),
])
def test_a_setting_given_under_its_name_and_its_former_one_is_refused(tmp_path, text, env, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    ran = _show(path, env)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr == f"agentledger: invalid config: {message.format(file=path)}\n"


def test_the_config_file_comes_from_the_environment_when_not_given(config_file, tmp_path):
    assert load(None, env={"AGENTLEDGER_CONFIG": str(config_file)}).reconcile.grace_s == 120
    (tmp_path / "agentledger").mkdir()
    (tmp_path / "agentledger" / "config.toml").write_text('[http]\nlisten = "127.0.0.1:9300"\n')
    assert load(None, env={"XDG_CONFIG_HOME": str(tmp_path)}).http.listen == "127.0.0.1:9300"


@pytest.mark.parametrize(("text", "env", "message"), [
    ("[store]\nmax_entries = 0\n", {}, "store.max_entries: must be greater than or equal to 1 (from {file})"),
    ('[[gates]]\nname = "a"\nscope = "week"\nmetric = "cost_usd"\nlimit = 1\n', {},
     "gates[0].scope: must be one of 'session', 'session-family', 'agent-day' or 'global-day' (from {file})"),
    ('[[gates]]\nname = "a"\nscope = "session"\nmetric = "cost_usd"\nlimit = -1\n', {},
     "gates[0].limit: must be greater than 0 (from {file})"),
    ("colour = 1\n", {}, "colour: unknown key: remove it (`agentledger --config /dev/null config show` lists the keys there are) "
                       "(from {file})"),
    # A key under a table it is not in: the place it is kept is named.
    ("[store]\ngrace_s = 60\n", {}, "store.grace_s: unknown key: grace_s is a key of [reconcile]: move it there"),
    ("[storage]\nmax_entries = 5\nflush_interval_s = 1\n", {},
     "storage: unknown key: max_entries is a key of [store]; flush_interval_s is a key of [store]: move them there"),
    ("max_line = 4096\nrescan_s = 1\ntimezone = \"UTC\"\nidle = 5\n[store]\nlisten = \"127.0.0.1:1\"\n", {},
     "store.listen: unknown key: listen is a key of [http]: move it there"),
    ("[retention]\ntimezone = \"UTC\"\n", {}, "retention.timezone: unknown key: timezone is a top-level key"),
    # Under a former name, the key is named as it was written.
    ("[hot]\nlisten = \"127.0.0.1:1\"\n", {}, "hot.listen: unknown key: listen is a key of [http]: move it there"),
    ("", {"AGENTLEDGER_METRICS_GRACE_S": "60"}, "rename it to $AGENTLEDGER_RECONCILE_GRACE_S"),
    ("", {"AGENTLEDGER_HTTP_STATE_DIR": "/tmp"}, "rename it to $AGENTLEDGER_STORE_STATE_DIR"),
    ("", {"AGENTLEDGER_HOT_MAX_ENTRIE": "5"}, "rename it to $AGENTLEDGER_STORE_MAX_ENTRIES"),
    ("", {"AGENTLEDGER_RECONCILE_GRACE_S": "soon"}, "reconcile.grace_s: must be a valid number, unable to parse "
                                                    "string as a number (from $AGENTLEDGER_RECONCILE_GRACE_S)"),
    ("", {"AGENTLEDGER_TIMEZONE": "Mars/Olympus"}, "timezone: not a time zone name (e.g. UTC, Europe/Berlin) "
                                                   "(from $AGENTLEDGER_TIMEZONE)"),
    ("listen = [\n", {}, "is not valid TOML"),
    # A slip of the keyboard is named with the key it is one for, as an environment variable's is.
    ("[retention]\nraw_day = 5\n", {}, "retention.raw_day: unknown key: rename it to raw_days (`agentledger "
                                      "--config /dev/null config show` lists the keys there are) (from {file})"),
    ("dbb = \"x.db\"\n", {}, "dbb: unknown key: rename it to db"),
    # The unknown key is why the gate misses its limit: it was "gates[0].limit: is missing", limt unnamed.
    ('[[gates]]\nname = "a"\nscope = "session"\nmetric = "cost_usd"\nlimt = 5.0\n', {},
     "gates[0].limt: unknown key: rename it to limit"),
    # Both ends of the range: one alone left a user to find the other by trying.
    ("[reconcile]\ngrace_s = 1e20\n", {}, "reconcile.grace_s: must be from 0 to 316224000 (from {file})"),
    # Accepted, it overflowed SQLite's integers: every /metrics scrape failed with a 500.
    ("[metrics]\ntop_n = 9223372036854775808\n", {}, "metrics.top_n: must be from 1 to 10000 (from {file})"),
    ("", {"AGENTLEDGER_MAX_LINE": "9223372036854775808"},
     "max_line: must be from 1024 to 1073741824 (from $AGENTLEDGER_MAX_LINE)"),
])
def test_invalid_values_name_their_key_and_origin(tmp_path, text, env, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path, env=env)
    assert message.format(file=path) in str(info.value)


def test_two_gates_with_one_name_are_refused(tmp_path):
    path = tmp_path / "c.toml"
    gate = '[[gates]]\nname = "a"\nscope = "session"\nmetric = "cost_usd"\nlimit = 1\n'
    path.write_text(gate + gate)
    with pytest.raises(ConfigError, match="gate name 'a' is used twice"):
        load(path, env={})


@pytest.mark.parametrize(("key", "value", "fix"), [
    ("tools", '"exec"', '["exec"]'), ("agents", '"main"', '["main"]'), ("tools", "5", '["*"]'),
])
def test_globs_given_other_than_as_a_list_say_to_give_a_list(tmp_path, key, value, fix):
    # Was "gates[0].tools: must be a valid tuple": the type in Python's words, and no fix.
    path = tmp_path / "c.toml"
    gate = '[[gates]]\nname = "a"\nscope = "session"\nmetric = "cost_usd"\nlimit = 1\n'
    path.write_text(f"{gate}{key} = {value}\n")
    ran = _show(path)
    assert ran.returncode == 2
    assert ran.stderr == (f"agentledger: invalid config: gates[0].{key}: must be a list of globs, "
                          f"e.g. {key} = {fix} (from {path})\n")
    path.write_text(f"{gate}{key} = {fix}\n")  # the fix it names loads
    assert getattr(load(path, env={}).gates[0], key) == tuple(re.findall(r'"(.*?)"', fix))


@pytest.mark.parametrize(("given", "message", "fix"), [
    # Was pydantic's "String should have at least 1 character", with no fix.
    ('name = ""\nlimit = 2', 'gates[0].name: is empty: give the gate a name, e.g. name = "session-cost"',
     'name = "session-cost"\nlimit = 2'),
    ('name = " "\nlimit = 2', 'gates[0].name: is empty: give the gate a name, e.g. name = "session-cost"',
     'name = "session-cost"\nlimit = 2'),
    # Accepted, each made a gate that never applied, without a word.
    ('name = "a"\nlimit = 2\ntools = []', "gates[0].tools: is empty, so the gate applies to no tool: leave the key "
                                          "out to apply it to every one", 'name = "a"\nlimit = 2'),
    ('name = "a"\nlimit = 2\nagents = []', "gates[0].agents: is empty, so the gate applies to no agent: leave the "
                                           "key out to apply it to every one", 'name = "a"\nlimit = 2'),
    # Accepted, 2.5 tool calls let 2 through and were told as "of its 2 limit".
    ('name = "a"\nlimit = 2.5', "gates[0].limit: must be a whole number, as tool_calls is a count: e.g. limit = 2 "
                                "or limit = 3", 'name = "a"\nlimit = 3'),
    ('name = "a"\nlimit = 0.5', "gates[0].limit: must be a whole number, as tool_calls is a count: e.g. limit = 1",
     'name = "a"\nlimit = 1'),
])
def test_a_gate_that_names_nothing_or_counts_in_fractions_is_refused_with_the_fix(tmp_path, given, message, fix):
    path = tmp_path / "c.toml"
    gate = '[[gates]]\nscope = "session"\nmetric = "tool_calls"\n'
    path.write_text(f"{gate}{given}\n")
    ran = _show(path)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr == f"agentledger: invalid config: {message} (from {path})\n"
    path.write_text(f"{gate}{fix}\n")  # the fix it names loads
    assert load(path, env={}).gates[0].tools == ("*",)


def test_show_prints_a_file_that_loads_back_the_same(config_file, tmp_path):
    shown = _show(config_file)
    assert shown.returncode == 0, shown.stderr
    again = tmp_path / "again.toml"
    again.write_text(shown.stdout)
    assert load(again, env={}) == load(config_file)  # what `show` printed: file and environment
    assert to_toml(Config()).count("[store]") == 1


def test_a_bad_config_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[store]\nttl_s = -5\n")
    ran = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(path), "sessions"],
                         capture_output=True, text=True, cwd=REPO)
    assert ran.returncode == 2
    assert ran.stderr == f"agentledger: invalid config: store.ttl_s: must be from 0 to 316224000 (from {path})\n"
    missing = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(tmp_path / "nope.toml"),
                              "config", "show"], capture_output=True, text=True, cwd=REPO)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def _keys(model, prefix=""):
    """(key, field) for every key of the configuration; ``gates[].limit`` for a key of a list's tables."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        nested = getattr(annotation, "model_fields", None)
        args = getattr(annotation, "__args__", ())
        item = args[0] if args and getattr(args[0], "model_fields", None) else None
        if nested:
            yield from _keys(annotation, f"{prefix}{name}.")
        elif item is not None:
            yield from _keys(item, f"{prefix}{name}[].")
        else:
            yield prefix + name, field


def _every_number_key() -> tuple[str, list[str]]:
    """A file that sets every key, and the keys that are numbers (``gates[].limit`` for a gate's)."""
    every_key = to_toml(Config(gates=[{"name": "g", "scope": "session", "metric": "tokens", "limit": 1}]))
    return every_key, [key for key, field in _keys(Config) if field.annotation in (float, int)]


def test_the_example_config_shows_every_key_and_its_commented_out_ones_load(tmp_path):
    # Commented-out keys and tables are "# " and the line as it would be; prose never reads "# key = ".
    text = re.sub(r"^# (\[\[?[a-z_]+\]\]?|[a-z_]+ = .*)$", r"\1", (REPO / "deploy" / "agentledger.toml").read_text(),
                  flags=re.M)
    uncommented = tmp_path / "uncommented.toml"
    uncommented.write_text(text)
    cfg = load(uncommented, env={})
    assert cfg.gates and cfg.sources and cfg.db == Path("/var/lib/agentledger/ledger.db")
    for key, _ in _keys(Config):
        assert f"\n{key.rsplit('.', 1)[-1]} = " in text, key


def _setting(every_key: str, key: str, value: str) -> str:
    """The config of every key with ``key`` given ``value``."""
    name = key.rsplit(".", 1)[-1]
    return re.sub(rf"^{name} = .*$", f"{name} = {value}", every_key, count=1, flags=re.M)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_no_number_setting_takes_nan_or_an_infinity(tmp_path, value):
    every_key, numbers = _every_number_key()
    assert "reconcile.grace_s" in numbers and "gates[].limit" in numbers
    path = tmp_path / "c.toml"
    for key in numbers:
        path.write_text(_setting(every_key, key, value))
        with pytest.raises(ConfigError) as info:
            load(path, env={})
        assert f"{key.replace('[]', '[0]')}: must be a finite number (from {path})" in str(info.value)


@pytest.mark.parametrize("value, message", [
    ("true", "must be a number, not true"),
    ("false", "must be a number, not false"),
    ('"30"', "must be a number, not the string '30': write it without quotes"),
])
def test_a_number_setting_in_the_file_takes_a_number_not_a_boolean_or_a_string(tmp_path, value, message):
    # pydantic read true as 1 (raw_days = true pruned after a day, a gate's limit = true was $1) and "30" as 30.
    every_key, numbers = _every_number_key()
    assert {"retention.raw_days", "store.max_entries", "reconcile.grace_s", "gates[].limit"} <= set(numbers)
    path = tmp_path / "c.toml"
    env = {k: v for k, v in os.environ.items() if k != "AGENTLEDGER_RETENTION_RAW_DAYS"}  # the file's, not the tests'
    for key in numbers:
        path.write_text(_setting(every_key, key, value))
        ran = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(path), "config", "show"],
                             capture_output=True, text=True, env=env)
        assert ran.returncode == 2, key
        assert ran.stderr == f"agentledger: invalid config: {key.replace('[]', '[0]')}: {message} (from {path})\n"


def test_whole_number_settings_refuse_a_fraction(tmp_path):
    every_key, _ = _every_number_key()
    counts = [key for key, field in _keys(Config) if field.annotation is int]
    # raw_days is `prune --older-than`'s whole days; the others count lines' bytes, connections, views and labels.
    assert set(counts) == {"max_line", "http.max_connections", "store.max_entries", "retention.raw_days",
                           "metrics.top_n"}
    path = tmp_path / "c.toml"
    for key in counts:
        path.write_text(_setting(every_key, key, "1024.5"))
        with pytest.raises(ConfigError) as info:
            load(path, env={})
        assert str(info.value) == (f"invalid config: {key}: must be a valid integer, got a number with a "
                                   f"fractional part (from {path})")
    path.write_text("max_line = 4096.0\n[retention]\nraw_days = 7.0\n")
    assert (load(path, env={}).max_line, load(path, env={}).retention.raw_days) == (4096, 7)


def test_the_environment_gives_numbers_as_text(tmp_path):
    env = {"AGENTLEDGER_RETENTION_RAW_DAYS": "7", "AGENTLEDGER_RECONCILE_GRACE_S": "7.5",
           "AGENTLEDGER_STORE_MAX_ENTRIES": "16"}
    cfg = load(None, env={"XDG_CONFIG_HOME": str(tmp_path), **env})
    assert (cfg.retention.raw_days, cfg.reconcile.grace_s, cfg.store.max_entries) == (7, 7.5, 16)
    with pytest.raises(ConfigError, match=r"retention.raw_days: must be a valid integer, unable to parse string as an "
                                          r"integer \(from \$AGENTLEDGER_RETENTION_RAW_DAYS\)"):
        load(None, env={"XDG_CONFIG_HOME": str(tmp_path), "AGENTLEDGER_RETENTION_RAW_DAYS": "1.5"})
    gates = '[{"name": "g", "scope": "session", "metric": "cost_usd", "limit": "5"}]'  # JSON has numbers
    with pytest.raises(ConfigError, match=r"gates\[0\].limit: must be a number, not the string '5'.*\$AGENTLEDGER_GATES"):
        load(None, env={"XDG_CONFIG_HOME": str(tmp_path), "AGENTLEDGER_GATES": gates})
    # Nested deeper than the parser goes: a RecursionError and a traceback.
    with pytest.raises(ConfigError, match="AGENTLEDGER_GATES: not JSON; give a JSON list of tables"):
        load(None, env={"XDG_CONFIG_HOME": str(tmp_path), "AGENTLEDGER_GATES": "[" * 5000 + "]" * 5000})
    # A path's ~user that is no user here: expanduser's RuntimeError.
    with pytest.raises(ConfigError, match="db: '~nosuchuser-al' names no home directory here"):
        load(None, env={"XDG_CONFIG_HOME": str(tmp_path), "AGENTLEDGER_DB": "~nosuchuser-al/l.db"})


@pytest.mark.parametrize("args, env, key, origin", [
    (["config", "show"], {"AGENTLEDGER_RECONCILE_GRACE_S": "nan"}, "reconcile.grace_s",
     "$AGENTLEDGER_RECONCILE_GRACE_S"),
    (["config", "show"], {"AGENTLEDGER_STORE_TTL_S": "nan"}, "store.ttl_s", "$AGENTLEDGER_STORE_TTL_S"),
    (["serve", "--grace", "nan"], {}, "reconcile.grace_s", "the command line"),
    (["ingest", "--idle", "nan", "."], {}, "reconcile.idle_s", "the command line"),
])
def test_a_number_setting_given_nan_says_it_must_be_finite(args, env, key, origin):
    ran = subprocess.run([sys.executable, "-m", "agentledger", *args], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, **env})
    assert ran.returncode == 2
    assert ran.stderr == f"agentledger: invalid config: {key}: must be a finite number (from {origin})\n"


@pytest.mark.parametrize("command", [["usage"], ["ingest", "."], ["prune"]])
@pytest.mark.parametrize("value, needle", [("", "db: is empty"), ("{tmp}", "is a directory")])
def test_a_db_that_is_empty_or_a_directory_is_one_line(tmp_path, command, value, needle):
    env = {**os.environ, "AGENTLEDGER_DB": value.format(tmp=tmp_path)}
    ran = subprocess.run([sys.executable, "-m", "agentledger", *command], capture_output=True, text=True,
                         cwd=tmp_path, env=env)
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1 and needle in ran.stderr and "(from $AGENTLEDGER_DB)" in ran.stderr


@pytest.mark.parametrize("args, env, told", [
    (["--db", "{tmp}"], {}, "invalid config: db: '{tmp}' is a directory: give a file path, e.g. '{tmp}/ledger.db' "
                            "(from the command line)"),
    (["--config", "{tmp}"], {}, "config file {tmp} is a directory: give the file's path, e.g. {tmp}/config.toml"),
    ([], {"AGENTLEDGER_CONFIG": "{tmp}"}, "config file {tmp} is a directory: give the file's path, e.g. "
                                         "{tmp}/config.toml"),
    (["--config", ""], {}, "--config is empty: give the config file's path, or leave --config out for "
                           "$AGENTLEDGER_CONFIG, else $XDG_CONFIG_HOME/agentledger/config.toml"),  # it read "."
])
def test_a_db_or_config_file_that_is_a_directory_says_the_fix_from_a_flag_as_from_the_environment(tmp_path, args,
                                                                                                  env, told):
    # The flags got click's "File '...' is a directory." without the fix; the config file's read, by flag or
    # environment, told the system's error alone.
    env = {**os.environ, **{k: v.format(tmp=tmp_path) for k, v in env.items()}}
    ran = subprocess.run([sys.executable, "-m", "agentledger", *[a.format(tmp=tmp_path) for a in args], "usage"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert (ran.returncode, ran.stderr) == (2, f"agentledger: {told.format(tmp=tmp_path)}\n")


@pytest.mark.parametrize("command, text, env, key, origin", [
    (["serve", "--no-demo"], '[store]\nstate_dir = ""\n', {}, "store.state_dir", "{file}"),
    (["serve", "--no-demo"], "", {"AGENTLEDGER_STORE_STATE_DIR": ""}, "store.state_dir", "$AGENTLEDGER_STORE_STATE_DIR"),
    (["ingest"], '[[sources]]\nformat = "oc-telemetry"\nroot = ""\n', {}, "sources[0].root", "{file}"),
    (["ingest"], "", {"AGENTLEDGER_SOURCES": '[{"format": "claude-code", "root": " "}]'}, "sources[0].root",
     "$AGENTLEDGER_SOURCES"),
    (["--db", "", "ingest", "{tmp}"], "", {}, "db", "the command line"),
])
def test_an_empty_path_is_refused_not_taken_for_the_working_directory(tmp_path, command, text, env, key, origin):
    # Path("") is "."; an empty state_dir put the hot views in the working directory, / under systemd.
    path = tmp_path / "c.toml"
    path.write_text(text)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    args = [arg.format(tmp=tmp_path) for arg in command]
    # PYTHONPATH: this tree's code, whatever the working directory.
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "AGENTLEDGER_DB": str(tmp_path / "l.db"), **env}
    ran = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(path), *args], capture_output=True,
                         text=True, cwd=cwd, env=env, timeout=60)
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1
    assert ran.stderr.startswith(f"agentledger: invalid config: {key}: is empty: give ")
    assert ran.stderr.endswith(f" (from {origin.format(file=path)})\n")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("command, text, env, key, origin", [
    (["usage"], 'db = "{tmp}/t\\u0000.db"\n', {}, "db", "{file}"),
    (["serve", "--no-demo"], '[store]\nstate_dir = "{tmp}/x\\u0000y"\n', {}, "store.state_dir", "{file}"),
    (["serve", "--no-demo"], '[hot]\nstate_dir = "{tmp}/x\\u0000y"\n', {}, "hot.state_dir", "{file}"),
    (["ingest"], '[[sources]]\nformat = "oc-telemetry"\nroot = "{tmp}/x\\u0000y"\n', {}, "sources[0].root",
     "{file}"),
    (["ingest"], "", {"AGENTLEDGER_SOURCES": '[{{"format": "claude-code", "root": "{tmp}/x\\u0000y"}}]'},
     "sources[0].root", "$AGENTLEDGER_SOURCES"),
    (["reprice"], 'prices = "{tmp}/p\\u0000.toml"\n', {}, "prices", "{file}"),
])
def test_a_path_holding_a_nul_is_refused_naming_the_key_its_origin_and_the_fix(tmp_path, command, text, env, key,
                                                                             origin):
    # TOML and JSON spell one as \u0000; each use of the path failed on it with a bare "embedded null byte".
    path = tmp_path / "c.toml"
    path.write_text(text.format(tmp=tmp_path))
    env = {**os.environ, **{k: v.format(tmp=tmp_path) for k, v in env.items()}}
    ran = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(path), *command], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=60)
    assert ran.returncode == 2
    assert ran.stderr.count("\n") == 1
    assert ran.stderr.startswith(f"agentledger: invalid config: {key}: ")
    assert "holds a NUL character, which no path can: give " in ran.stderr
    assert ran.stderr.endswith(f" (from {origin.format(file=path)})\n")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text())
def test_show_loads_back_any_text(tmp_path, text):
    name = text if text.strip() else "g"  # a blank one is refused: it names no gate
    cfg = Config(db=Path("/nonexistent") / f"l{text.replace(chr(0), '')}.db",  # no path holds a NUL
                 gates=[{"name": name, "scope": "session", "metric": "tokens", "limit": 1}])
    path = tmp_path / "shown.toml"
    path.write_text(to_toml(cfg), encoding="utf-8")
    assert load(path, env={}) == cfg


def test_show_of_a_path_beyond_the_bmp_loads_back(tmp_path):
    env = {**os.environ, "AGENTLEDGER_DB": str(tmp_path / "🦀 ledger.db")}
    shown = subprocess.run([sys.executable, "-m", "agentledger", "config", "show"], capture_output=True,
                           env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    (tmp_path / "again.toml").write_bytes(shown.stdout)
    assert load(tmp_path / "again.toml", env={}).db == tmp_path / "🦀 ledger.db"


def test_the_fix_an_unknown_key_names_works(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("colour = 1\n")
    env = {**os.environ, "AGENTLEDGER_CONFIG": str(path)}
    failed = subprocess.run([sys.executable, "-m", "agentledger", "config", "show"], capture_output=True,
                            text=True, env=env)
    assert failed.returncode == 2
    fix = failed.stderr.split("`")[1].split()
    assert fix[0] == "agentledger"
    shown = subprocess.run([sys.executable, "-m", "agentledger", *fix[1:]], capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "\n[store]\n" in shown.stdout


def test_the_price_file_is_prices_toml_beside_the_config_file_unless_named(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    config = etc / "config.toml"
    config.write_text("")
    # None beside it: no price file, and nothing fails for it.
    assert load(config, env={}).prices is None
    assert load(None, env={"AGENTLEDGER_CONFIG": str(config)}).prices is None
    (etc / "prices.toml").write_text("")
    assert load(config, env={}).prices == etc / "prices.toml"
    assert load(None, env={"AGENTLEDGER_CONFIG": str(config)}).prices == etc / "prices.toml"
    # The default config file's directory holds the default price file.
    home = tmp_path / "xdg"
    (home / "agentledger").mkdir(parents=True)
    (home / "agentledger" / "prices.toml").write_text("")
    assert load(None, env={"XDG_CONFIG_HOME": str(home)}).prices == home / "agentledger" / "prices.toml"
    # Named in the file, the environment or by a flag, it wins, existing or not (the pricer says so).
    config.write_text('prices = "~/elsewhere.toml"\n')
    assert load(config, env={}).prices == Path("~/elsewhere.toml").expanduser()
    assert load(config, env={"AGENTLEDGER_PRICES": "/srv/p.toml"}).prices == Path("/srv/p.toml")
    assert load(config, {"prices": "/x.toml"}, env={"AGENTLEDGER_PRICES": "/srv/p.toml"}).prices == Path("/x.toml")
    with pytest.raises(ConfigError, match=r"prices: is empty: give the price file's path, or leave it unset "
                                          r"for prices.toml beside the config file \(from \$AGENTLEDGER_PRICES\)"):
        load(config, env={"AGENTLEDGER_PRICES": ""})


def test_show_says_which_price_file_is_in_effect_and_loads_back(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("AGENTLEDGER_PRICES", None)

    def show() -> str:
        ran = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(config), "config", "show"],
                             capture_output=True, text=True, env=env)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout

    assert "\n# prices: not set (no prices.toml beside the config file: calls are priced from the bundled table " \
           "alone)\n" in show()
    (tmp_path / "prices.toml").write_text("")
    shown = show()
    assert f'\nprices = "{tmp_path / "prices.toml"}"\n' in shown
    again = tmp_path / "elsewhere" / "again.toml"
    again.parent.mkdir()
    again.write_text(shown)
    assert load(again, env={}) == load(config)  # what `show` printed: file and environment


def test_an_environment_name_that_is_no_setting_is_refused_as_an_unknown_key_is(tmp_path):
    """AGENTLEDGER_RETENTION_RAWDAYS=7 left raw_days at 30 without a word, where `rawdays = 7` in the file
    stopped the command."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "XDG_CONFIG_HOME": str(tmp_path),
           "AGENTLEDGER_RETENTION_RAWDAYS": "7"}
    ran = subprocess.run([sys.executable, "-m", "agentledger", "config", "show"], capture_output=True, text=True,
                         env=env)
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr == ("agentledger: invalid config: $AGENTLEDGER_RETENTION_RAWDAYS is not a setting agentledger "
                          "knows: rename it to $AGENTLEDGER_RETENTION_RAW_DAYS; `env -u AGENTLEDGER_RETENTION_RAWDAYS "
                          "agentledger --config /dev/null config show` lists the keys there are\n")
    listed = subprocess.run(["env", "-u", "AGENTLEDGER_RETENTION_RAWDAYS", sys.executable, "-m", "agentledger",
                             "--config", "/dev/null", "config", "show"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and "raw_days" in listed.stdout, listed.stderr
    with pytest.raises(ConfigError, match=r"\$AGENTLEDGER_COLOUR is not a setting agentledger knows: unset it \(a "
                                          r"setting's is named after its key, e\.g\. \$AGENTLEDGER_RETENTION_RAW_DAYS\)"):
        load(None, env={"XDG_CONFIG_HOME": str(tmp_path), "AGENTLEDGER_COLOUR": "blue"})


def test_every_agentledger_name_the_repository_uses_is_one_agentledger_knows():
    """None of the names the program, its deployment, docs, tests and benchmarks set is refused."""
    from agentledger.config import env_names

    used = set()
    for base in ("src", "tests", "bench", "deploy", "integrations"):
        for path in (REPO / base).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".md", ".toml", ".service", ".ts", ".js", ".json", ".sh") \
                    and path.name != "test_config.py":
                used |= set(re.findall(r"\bAGENTLEDGER_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    used |= set(re.findall(r"\bAGENTLEDGER_[A-Z0-9_]*[A-Z0-9]\b", (REPO / "README.md").read_text()))
    assert {"AGENTLEDGER_DB", "AGENTLEDGER_STORE_STATE_DIR", "AGENTLEDGER_PRICES", "AGENTLEDGER_STRESS_CYCLES"} <= used
    assert used - env_names() == set()



def test_the_names_that_are_no_setting_load_whatever_their_value(tmp_path):
    from agentledger.config import OTHER_ENV

    env = dict.fromkeys(OTHER_ENV - {"AGENTLEDGER_CONFIG"}, "7") | {"AGENTLEDGER_CONFIG": "/dev/null"}
    assert load(None, env=env) == Config()


@pytest.mark.parametrize(("text", "env", "message"), [
    ("store = 5\n", {}, "store: must be a table: [store] and its keys, not 5 (from {file})"),
    ("hot = 5\n", {}, "hot: must be a table: [hot] and its keys, not 5 (from {file})"),  # [store]'s former name
    ('retention = "x"\n', {}, 'retention: must be a table: [retention] and its keys, not "x" (from {file})'),
    ("sources = [5]\n", {}, "sources[0]: must be a table, as each [[sources]] is (in the environment, a JSON "
                            "object), not 5 (from {file})"),
    ("", {"AGENTLEDGER_GATES": '["a"]'}, 'gates[0]: must be a table, as each [[gates]] is (in the environment, a '
                                         'JSON object), not "a" (from $AGENTLEDGER_GATES)'),
    ("gates = 3\n", {}, "gates: must be a list of tables: [[gates]] entries (in the environment, a JSON list of "
                        "objects), not 3 (from {file})"),
    ("db = 5\n", {}, "db: must be a path, in quotes, not 5 (from {file})"),
    ("[http]\nlisten = 9464\n", {}, "http.listen: must be text, in quotes, not 9464 (from {file})"),
    ('[[sources]]\nroot = "/"\n', {}, "sources[0].format: is missing: give it (it has no default) (from {file})"),
])
def test_a_value_of_the_wrong_kind_is_told_in_the_file_s_words_not_python_s(tmp_path, text, env, message):
    """Was "hot: must be a valid dictionary or instance of HotConfig", "must be a valid tuple", "Input is not
    a valid path for <class 'pathlib.Path'>": names of Python classes, which a config file never shows."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path, env=env)
    assert str(info.value) == "invalid config: " + message.format(file=path)


def test_a_relative_xdg_home_is_ignored_as_the_spec_says(tmp_path):
    # A relative $XDG_STATE_HOME made the ledger a command opens depend on the directory it started in.
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTLEDGER_DB", "AGENTLEDGER_CONFIG")}
    shown = subprocess.run([sys.executable, "-m", "agentledger", "config", "show"], capture_output=True, text=True,
                           cwd=tmp_path, env={**env, "HOME": str(home), "XDG_STATE_HOME": "rel",
                                              "XDG_CONFIG_HOME": "relcfg"})
    assert shown.returncode == 0, shown.stderr
    assert f'db = "{home}/.local/state/agentledger/ledger.db"' in shown.stdout


def _agentledger(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # A timeout: a command that waits for ever fails the test rather than hang the suite.
    return subprocess.run([sys.executable, "-m", "agentledger", *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, env, what, origin", [
    (["--config", "{fifo}"], {}, "config file", ""),
    ([], {"AGENTLEDGER_CONFIG": "{fifo}"}, "config file", ""),
    (["--config", "{priced}"], {}, "price file", " (from {priced})"),
    (["--config", "/dev/null"], {"AGENTLEDGER_PRICES": "{fifo}"}, "price file", " (from $AGENTLEDGER_PRICES)"),
    (["--config", "/dev/null", "--prices", "{fifo}"], {}, "price file", " (from --prices)"),
], ids=["--config", "$AGENTLEDGER_CONFIG", "config prices", "$AGENTLEDGER_PRICES", "--prices"])
def test_a_fifo_no_program_writes_to_is_refused_not_waited_on(tmp_path, args, env, what, origin):
    # Opening each waited for a writer for ever; a --db FIFO was refused.
    fifo, priced, logs = tmp_path / "fifo", tmp_path / "priced.toml", tmp_path / "logs"
    os.mkfifo(fifo)
    priced.write_text(f'prices = "{fifo}"\n')
    logs.mkdir()
    names = {"fifo": fifo, "priced": priced}
    global_args, flags = [a.format(**names) for a in args[:2]], [a.format(**names) for a in args[2:]]
    ran = _agentledger(*global_args, "--db", str(tmp_path / "l.db"), "ingest", *flags, str(logs),
                       env={k: v.format(**names) for k, v in env.items()})
    assert (ran.returncode, ran.stderr) == (2, f"agentledger: {what} {fifo} is a FIFO that gave nothing (no program "
                                               "writes to it): give the file's path, or start what writes to it "
                                               f"first{origin.format(**names)}\n")


def test_a_config_and_a_price_file_given_as_pipes_are_read_to_their_end(tmp_path):
    """``--config <(…)``: a pipe a program writes, read as a file is, however late its text comes."""
    def through_a_shell(line: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", f'exec "$0" -m agentledger {line}', sys.executable], capture_output=True,
                              text=True, timeout=30)

    shown = through_a_shell("--config <(sleep 0.5; printf 'timezone = \"Europe/Berlin\"\\n') config show")
    assert shown.returncode == 0, shown.stderr
    assert '\ntimezone = "Europe/Berlin"\n' in shown.stdout
    (tmp_path / "logs").mkdir()
    ingest = f"--config /dev/null --db {tmp_path / 'l.db'} ingest {tmp_path / 'logs'} --prices"
    read = through_a_shell(ingest + " <(printf '[price.\"m\"]\\n')")
    assert read.returncode == 2 and "unknown key 'price'" in read.stderr, read.stderr
    assert through_a_shell(ingest + " <(printf '[prices.\"m\"]\\ninput = 1\\noutput = 2\\n')").returncode == 0


_CONFIG_NAMED, _PRICES_NAMED = "(--config, $AGENTLEDGER_CONFIG)", "(--prices, config `prices`, $AGENTLEDGER_PRICES)"


@pytest.mark.parametrize("case, told", [
    ("missing", "config file {bad} does not exist: create it, or name another " + _CONFIG_NAMED),
    ("a directory", "config file {bad} is a directory: give the file's path, e.g. {bad}/config.toml"),
    ("a symlink loop", "config file {bad} cannot be read (a loop of symbolic links): point the link at a file, or "
                       "name another " + _CONFIG_NAMED),
    ("latin-1", "config file {bad} is not UTF-8 text (byte 0xe9 at offset 10): save it as UTF-8, as TOML requires"),
], ids=["missing", "a directory", "a symlink loop", "latin-1"])
def test_the_config_file_and_the_price_file_are_refused_alike_naming_the_fix(tmp_path, case, told):
    # The config file's were the system's words alone ("'utf-8' codec can't decode byte 0xe9 in position 10",
    # "[Errno 40] Too many levels of symbolic links"); --prices got click's "File '…' does not exist.", and the
    # price file's named no fix for a directory, nor where it was named.
    bad = tmp_path / "bad.toml"
    if case == "a directory":
        bad.mkdir()
    elif case == "a symlink loop":
        bad.symlink_to(tmp_path / "loop")
        (tmp_path / "loop").symlink_to(bad)
    elif case == "latin-1":
        bad.write_bytes('# written é\n'.encode("latin-1"))
    config = _agentledger("--config", str(bad), "config", "show")
    assert (config.returncode, config.stderr) == (2, f"agentledger: {told.format(bad=bad)}\n")
    priced = tmp_path / "priced.toml"
    priced.write_text(f'prices = "{bad}"\n')
    (tmp_path / "logs").mkdir()
    as_priced = told.replace("config file", "price file").replace("config.toml", "prices.toml").replace(
        _CONFIG_NAMED, _PRICES_NAMED).format(bad=bad)
    for args, origin in ((["--config", "/dev/null"], "--prices"), (["--config", str(priced)], str(priced))):
        flags = ["--prices", str(bad)] if origin == "--prices" else []
        prices = _agentledger(*args, "--db", str(tmp_path / "l.db"), "ingest", *flags, str(tmp_path / "logs"))
        assert (prices.returncode, prices.stderr) == (2, f"agentledger: {as_priced} (from {origin})\n")


def test_a_config_file_and_a_price_file_that_start_with_a_byte_order_mark_are_read(tmp_path):
    # Notepad's UTF-8 starts so: "Invalid statement (at line 1, column 1)".
    from agentledger.pricing import load_overrides

    config, prices = tmp_path / "c.toml", tmp_path / "prices.toml"
    config.write_bytes(b'\xef\xbb\xbftimezone = "Europe/Berlin"\n')
    prices.write_bytes(b'\xef\xbb\xbf[prices."m"]\ninput = 1\noutput = 2\n')
    assert load(config, env={}).timezone == "Europe/Berlin"
    assert list(load_overrides(prices)) == ["m"]


def test_show_of_a_path_that_is_not_utf8_says_so_and_what_it_prints_loads_back(tmp_path):
    # --json was a TypeError traceback; the TOML held the byte as it is, and read back was "not UTF-8".
    name = os.fsdecode(os.fsencode(tmp_path) + b"/l\xff.db")
    shown = _agentledger("--db", name, "config", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["db"] == f"{tmp_path}/l\\xff.db"
    assert shown.stderr == (f"agentledger: db: {tmp_path}/l\\xff.db is not UTF-8, which JSON cannot hold: written "
                            "with \\xNN for each byte that is not\n")
    shown = subprocess.run([sys.executable, "-m", "agentledger", "config", "show"], capture_output=True, timeout=30,
                           env={**os.environ, "AGENTLEDGER_DB": name})
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.decode() == (f"agentledger: db: {tmp_path}/l\\xff.db is not UTF-8, which TOML cannot hold: "
                                     "written as a comment, so that this output read as a config file leaves it "
                                     "unset; set it by $AGENTLEDGER_DB\n")
    again = tmp_path / "again.toml"
    again.write_bytes(shown.stdout)
    assert f"\n# db: {tmp_path}/l\\xff.db (not UTF-8".encode() in shown.stdout
    assert load(again, env={}).db != Path(name)  # left unset: the default
    # The fix named: the environment holds any name.
    assert load(again, env={"AGENTLEDGER_DB": name}).db == Path(name)
