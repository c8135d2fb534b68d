"""The effective configuration: built-in defaults < TOML file < ``AGENTLEDGER_*`` environment < flags.

The file is ``--config``, else ``$AGENTLEDGER_CONFIG``, else
``$XDG_CONFIG_HOME/agentledger/config.toml`` when it exists; the price file, unless ``prices`` names
one, is ``prices.toml`` beside it, when that exists. Every scalar key has an
environment variable named after its path (``store.max_entries`` → ``AGENTLEDGER_STORE_MAX_ENTRIES``);
the lists (``sources``, ``gates``) take JSON there. Another ``AGENTLEDGER_*`` name is refused, as an
unknown key in the file is. A setting's former name (``FORMER``) is read as its name, in the file and
the environment. Anything invalid is one ``ConfigError``
naming the key, the problem and where the value came from.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from agentledger.address import is_host
from agentledger.defaults import (DEFAULT_GRACE_S, DEFAULT_IDLE_S, DEFAULT_MAX_LINE, DEFAULT_RAW_DAYS, FORMATS,
                                 MAX_MAX_LINE, MAX_RAW_DAYS, MAX_TOP_N, MAX_WAIT_S, PRICES_FILE)
from agentledger.shown import printable
from agentledger.tomlfile import read_toml

ENV_PREFIX = "AGENTLEDGER_"
# The AGENTLEDGER_* names that are no setting: the config file's path, the daemon `watch` and
# `gate` ask, the test suite's fault points, and the knobs its long runs and benchmarks read.
OTHER_ENV = frozenset({"AGENTLEDGER_CONFIG", "AGENTLEDGER_URL", "AGENTLEDGER_FAULT", "AGENTLEDGER_STRESS_CYCLES",
                       "AGENTLEDGER_STRESS_CYCLES_LONG", "AGENTLEDGER_ADVERSARIAL_EXAMPLES",
                       "AGENTLEDGER_SM_EXAMPLES", "AGENTLEDGER_HOT_KILLS", "AGENTLEDGER_CRASH_KILLS",
                       "AGENTLEDGER_CRASH_KILLS_SLOW"})
DEFAULT_LISTEN = "127.0.0.1:9464"
COMMAND_LINE = "the command line"  # where a flag's setting was given, as an error names it


class ConfigError(ValueError):
    """An unusable configuration value; the message names the key and how to fix it."""


def _xdg_home(env: Mapping[str, str], name: str, default: Path) -> Path:
    # The XDG base directory spec says a relative value is invalid and to be ignored: honouring it
    # would make which ledger a command opens depend on the directory it was started in.
    value = env.get(name)
    return Path(value) if value and os.path.isabs(value) else default


def state_home() -> Path:
    return _xdg_home(os.environ, "XDG_STATE_HOME", Path.home() / ".local" / "state") / "agentledger"


def config_home(env: Mapping[str, str] = os.environ) -> Path:
    return _xdg_home(env, "XDG_CONFIG_HOME", Path.home() / ".config") / "agentledger"


def demo_dir() -> Path:
    """The demo's own: the logs its writer invents, and the ledger and state dir they go to, apart from a
    real run's."""
    return state_home() / "demo"


def demo_ledger() -> Path:
    return demo_dir() / "ledger.db"


def out_of_reach(path: Path) -> str | None:
    """The system's reason ``path`` cannot even be looked at (a directory above it cannot be searched, as in
    another user's HOME); None when it can, whether or not it is there. Path.is_dir() raised there."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _may_be_dir(path: Path) -> bool:
    """A directory, or one out of reach: reading it tells what is wrong, where passing it by would not."""
    return os.path.isdir(path) or out_of_reach(path) is not None


def root_problem(root: Path, *, must_exist: bool) -> str | None:
    """Why ``root`` cannot be a source's root, and the fix: it is no directory (a file, once listed, held
    no logs without a word), or (``must_exist``: a one-shot read, which has nothing to wait for) it does
    not exist. None for one out of reach: its read reports it unreadable, with the reason."""
    try:
        mode = os.stat(root).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "does not exist: correct the path, or run serve, which waits for it to appear" if must_exist else None
    except OSError:
        return None
    return None if stat.S_ISDIR(mode) else "is not a directory: give the directory to read"


def expand(path: Path | str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` made that home; a ValueError naming it when there is none."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~someone who is no user here, or no HOME at all
        raise ValueError(f"{str(path).split(os.sep, 1)[0]!r} names no home directory here: give the path "
                         "without it, or with a user that exists") from None


def openclaw_state_dirs() -> list[Path]:
    """OpenClaw's state dir: $OPENCLAW_STATE_DIR, else ~/.openclaw, else its legacy names."""
    env = os.environ.get("OPENCLAW_STATE_DIR")
    if env:
        return [_expanded(env, "$OPENCLAW_STATE_DIR")]
    home = Path.home()
    for name in (".openclaw", ".clawdbot", ".moltbot", ".moldbot"):
        if _may_be_dir(home / name):
            return [home / name]
    return []


def _expanded(value: str, name: str) -> Path:
    try:
        return expand(value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def claude_config_dirs() -> list[Path]:
    """Claude Code's config dirs: $CLAUDE_CONFIG_DIR (a comma list), else ~/.config/claude and ~/.claude."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    if env:
        return [_expanded(p.strip(), "$CLAUDE_CONFIG_DIR") for p in env.split(",") if p.strip()]
    home = Path.home()
    return [d for d in (home / ".config" / "claude", home / ".claude") if _may_be_dir(d)]


def openclaw_format(state: Path) -> str | None:
    """The format an OpenClaw state dir is read in; None while no agent in it has telemetry or sessions,
    or while its agents cannot be listed."""
    try:
        agents = [state / "agents" / name for name in os.listdir(state / "agents")]
    except OSError:
        return None
    # Telemetry and transcripts record the same model calls: read one of them, the telemetry
    # extension's where it is installed (it also sees subagents and messages).
    if any(os.path.isdir(agent / "telemetry") for agent in agents):
        return "oc-telemetry"
    if any(os.path.isdir(agent / "sessions") for agent in agents):
        return "oc-transcript"
    return None


def missing_env_dirs() -> list[str]:
    """The producers' dirs an environment variable names that do not exist, each as ``$NAME (path)``: set on
    purpose, so a one-shot read that would pass them by says so instead."""
    named = [("OPENCLAW_STATE_DIR", d) for d in openclaw_state_dirs() if os.environ.get("OPENCLAW_STATE_DIR")]
    named += [("CLAUDE_CONFIG_DIR", d) for d in claude_config_dirs() if os.environ.get("CLAUDE_CONFIG_DIR")]
    return [f"${name} ({path})" for name, path in named if not _may_be_dir(path)]


def default_sources(awaiting: bool = False) -> list[tuple[str | None, Path]]:
    """(format, root) for every producer found in its usual place; empty when there is none. One out of
    reach is found too: its read reports it unreadable, with the reason.

    ``awaiting``: an OpenClaw state dir that cannot tell its format yet (it does not exist, holds
    neither telemetry nor sessions, or cannot be listed) is one of them too, with the format None, for
    a daemon that starts before the gateway has written there and chooses once it has; and so is a
    Claude Code config dir $CLAUDE_CONFIG_DIR names that does not exist yet, which it waits for."""
    pairs: list[tuple[str | None, Path]] = []
    for state in openclaw_state_dirs():
        fmt = openclaw_format(state)
        if fmt is None and awaiting:
            pairs.append((None, state))
        elif _may_be_dir(state):
            # Transcripts are what every OpenClaw install writes.
            pairs.append((fmt or "oc-transcript", state))
    pairs += [("claude-code", d) for d in claude_config_dirs() if awaiting or _may_be_dir(d)]
    return pairs


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host.split("%", 1)[0])  # a zone (%eth0) is the socket's, not the address's
    except ValueError:
        return False
    return True


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as a socket address; port 0 picks a free one."""
    raw, sep, port = value.rpartition(":")
    bracketed = raw.startswith("[") and raw.endswith("]")
    host = (raw[1:-1] if bracketed else raw) or "127.0.0.1"
    # The clients' URL is built from the host: one it cannot carry crashed them. An IPv6 literal is bracketed,
    # and only it: "[::1" or "::1:9464" leave where the port begins a guess.
    if not sep or not is_host(host) or not port.isdigit() or not 0 <= int(port) < 65536 \
            or (":" in host) != bracketed or (bracketed and not _is_ipv6(host)):
        raise ValueError(f"cannot listen on {value!r}: give HOST:PORT, e.g. {DEFAULT_LISTEN}, or [::1]:9464 for an "
                         "IPv6 address")
    return host, int(port)


# A listener on every address is reached, from this host, at its loopback one.
_REACHED_AT = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def listen_url(value: str) -> str:
    """The URL a client on this host asks a daemon listening on ``value`` (as ``parse_listen`` takes it) at."""
    host, port = parse_listen(value)
    host = _REACHED_AT.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _EnvText(str):
    """A value as an environment variable gives it: text, which a number setting reads as a number."""


def _real_number(v: Any) -> Any:
    # TOML and JSON have numbers of their own: there, true or "30" is a mistake, which pydantic
    # would otherwise read as 1 and 30. Only the environment spells numbers as text.
    if isinstance(v, bool):
        raise ValueError(f"must be a number, not {str(v).lower()}")
    if isinstance(v, str) and not isinstance(v, _EnvText):
        raise ValueError(f"must be a number, not the string {v!r}: write it without quotes")
    return v


def path_problem(v: object) -> str | None:
    """Why a path as given can name no file (None: it can)."""
    if isinstance(v, str) and not v.strip():  # Path("") would be the working directory
        return "is empty"
    # The file and the JSON of an environment variable can spell one (\u0000); every use of the path
    # then failed with a bare "embedded null byte".
    if isinstance(v, (str, Path)) and "\0" in str(v):
        return f"{str(v)!r} holds a NUL character, which no path can"
    return None


def _given(fix: str) -> BeforeValidator:
    """A path setting's check that it is not empty and can name a file, whose message ends with ``fix``."""
    def check(v: Any) -> Any:
        problem = path_problem(v)
        if problem:
            raise ValueError(f"{problem}: {fix}")
        # As str: pydantic refused a subclass of it (an environment variable's) holding a byte that is not
        # UTF-8, "not a valid path", where the same name from a flag was taken.
        return str(v) if isinstance(v, _EnvText) else v
    return BeforeValidator(check)


_Number = Annotated[float, BeforeValidator(_real_number)]
_Count = Annotated[int, BeforeValidator(_real_number)]  # whole numbers only: 1.5 is refused


class _Strict(BaseModel):
    # NaN and the infinities are no setting's value: refused as such, not by a bound whose message
    # ("must be less than or equal to ...") names the wrong problem.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SourceConfig(_Strict):
    format: Literal[FORMATS]  # type: ignore[valid-type]
    root: Annotated[Path, _given("give the directory to read")]

    @field_validator("root")
    @classmethod
    def _expand(cls, v: Path, info: ValidationInfo) -> Path:
        v = expand(v)
        problem = root_problem(v, must_exist=bool(info.context and info.context["roots_exist"]))
        if problem:
            raise ValueError(f"{str(v)!r} {problem}")
        return v


class HttpConfig(_Strict):
    listen: str = DEFAULT_LISTEN
    max_connections: _Count = Field(default=128, ge=2, le=10_000)  # served at once (see connections.py)

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_listen(v)
        return v


class StoreConfig(_Strict):
    """The daemon's own state: the hot session views, in memory and under ``state_dir``."""

    # The hot store lives under it.
    state_dir: Annotated[Path, _given("give a directory, or leave it unset for the default")] = Field(
        default_factory=state_home)
    max_entries: _Count = Field(default=128, ge=1)
    flush_interval_s: _Number = Field(default=5.0, ge=0, le=MAX_WAIT_S)
    ttl_s: _Number = Field(default=3600.0, ge=0, le=MAX_WAIT_S)  # idle sessions leave memory, their files deleted
    end_grace_s: _Number = Field(default=300.0, ge=0, le=MAX_WAIT_S)  # an ended session is dropped this long after its end

    @field_validator("state_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return expand(v)


class ReconcileConfig(_Strict):
    grace_s: _Number = Field(default=DEFAULT_GRACE_S, ge=0, le=MAX_WAIT_S)
    idle_s: _Number = Field(default=DEFAULT_IDLE_S, ge=1, le=MAX_WAIT_S)  # a log silent this long: its gateway restarted


class RetentionConfig(_Strict):
    # Whole days, as `prune --older-than` takes them; 0: keep raw rows for ever.
    raw_days: _Count = Field(default=DEFAULT_RAW_DAYS, ge=0, le=MAX_RAW_DAYS)


class MetricsConfig(_Strict):
    top_n: _Count = Field(default=20, ge=1, le=MAX_TOP_N)


SCOPES = ("session", "session-family", "agent-day", "global-day")
METRICS = ("cost_usd", "tokens", "tool_calls", "llm_calls", "tool_errors")


class GateConfig(_Strict):
    name: str
    scope: Literal[SCOPES]  # type: ignore[valid-type]
    metric: Literal[METRICS]  # type: ignore[valid-type]
    limit: _Number = Field(gt=0)
    action: Literal["block", "warn"] = "block"
    tools: tuple[str, ...] = ("*",)  # shell-style globs of tool names
    agents: tuple[str, ...] = ("*",)  # globs of the asking session's agent id ("" when unknown)

    @field_validator("name")
    @classmethod
    def _named(cls, v: str) -> str:
        # Every decision and metric names its gate: a blank name would name none.
        if not v.strip():
            raise ValueError('is empty: give the gate a name, e.g. name = "session-cost"')
        return v

    @field_validator("limit")
    @classmethod
    def _whole(cls, v: float, info: ValidationInfo) -> float:
        # A count trips at the next whole number: 2.5 tool calls let 2 through, and was shown as a limit of 2.
        metric = info.data.get("metric")
        if metric is not None and metric != "cost_usd" and v != int(v):
            whole = " or ".join(f"limit = {n}" for n in sorted({max(math.floor(v), 1), math.ceil(v)}))
            raise ValueError(f"must be a whole number, as {metric} is a count: e.g. {whole}")
        return v

    @field_validator("tools", "agents", mode="before")
    @classmethod
    def _globs(cls, v: Any, info: ValidationInfo) -> Any:
        # Else pydantic's "must be a valid tuple", which tells a TOML user neither the type nor the fix.
        if not isinstance(v, (list, tuple)):
            example = [v] if isinstance(v, str) else ["*"]
            raise ValueError(f"must be a list of globs, e.g. {info.field_name} = {_toml_value(example)}")
        if not v:  # a gate that could never apply, configured without a word
            raise ValueError(f"is empty, so the gate applies to no {info.field_name[:-1]}: leave the key out to apply "
                             f"it to every one")
        return v


class Config(_Strict):
    db: Annotated[Path, _given("give the ledger's file path, or leave it unset for the default")] = Field(
        default_factory=lambda: state_home() / "ledger.db")
    # Price overrides (see pricing.load_overrides); unset in the file, environment and flags: prices.toml
    # beside the config file when there is one (``load`` sets it), else none, the bundled table alone.
    prices: Annotated[Path | None, _given("give the price file's path, or leave it unset for prices.toml beside "
                                          "the config file")] = None
    timezone: str = "UTC"  # where day-scoped gates start their day
    rescan_s: _Number = Field(default=2.0, ge=0.05, le=MAX_WAIT_S)
    max_line: _Count = Field(default=DEFAULT_MAX_LINE, ge=1024, le=MAX_MAX_LINE)
    sources: tuple[SourceConfig, ...] = ()
    http: HttpConfig = HttpConfig()
    # A factory: its state_dir's default is read from the environment when a config is made.
    store: StoreConfig = Field(default_factory=StoreConfig)
    reconcile: ReconcileConfig = ReconcileConfig()
    metrics: MetricsConfig = MetricsConfig()
    retention: RetentionConfig = RetentionConfig()
    gates: tuple[GateConfig, ...] = ()

    @field_validator("db", "prices")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return None if v is None else expand(v)

    @field_validator("db")
    @classmethod
    def _db_file(cls, v: Path) -> Path:
        try:
            mode = os.stat(v).st_mode
        except OSError:
            return v  # none yet, which ingest and serve make; or out of reach, which opening it tells
        if stat.S_ISDIR(mode):
            raise ValueError(f"{str(v)!r} is a directory: give a file path, e.g. {str(v / 'ledger.db')!r}")
        if not stat.S_ISREG(mode):
            # SQLite failed on a device with an I/O error, and opening a FIFO waited for a writer for ever.
            raise ValueError(f"{str(v)!r} is not a regular file: give the path of the ledger's file, or of one "
                             "to make")
        return v

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("not a time zone name (e.g. UTC, Europe/Berlin)") from None
        return v

    @model_validator(mode="after")
    def _unique_gates(self) -> Config:
        names = [g.name for g in self.gates]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"gate name {name!r} is used twice; names must be unique")
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def _scalar_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key an environment variable can set: scalars by path, lists whole."""
    out = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.extend(_scalar_paths(annotation, prefix + (name,)))
        else:
            out.append(prefix + (name,))
    return out


def env_name(path: tuple[str, ...]) -> str:
    return ENV_PREFIX + "_".join(path).upper()


# The names settings had before each found its table (a top-level listen, [hot] for [store]): top-level
# keys of the file, each read as the path it names, and so is the environment's name for each.
FORMER = {"listen": ("http", "listen"), "state_dir": ("store", "state_dir"), "grace_s": ("reconcile", "grace_s"),
          "idle_s": ("reconcile", "idle_s"), "hot": ("store",)}


def _formers(path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The former names of the setting at ``path``."""
    return [(old,) + path[len(new):] for old, new in FORMER.items() if path[:len(new)] == new]


def env_names() -> frozenset[str]:
    """Every AGENTLEDGER_* name agentledger (or its test suite) reads."""
    paths = _scalar_paths(Config)
    return OTHER_ENV | {env_name(p) for p in paths} | {env_name(f) for p in paths for f in _formers(p)}


def _key(path: tuple[str, ...]) -> str:
    """A key as a file writes it: ``grace_s``, ``[reconcile] grace_s``."""
    return f"[{'.'.join(path[:-1])}] {path[-1]}" if len(path) > 1 else path[0]


def _elsewhere(keys: Iterable[str]) -> str | None:
    """Where keys given in the wrong place are kept (``[store] grace_s`` is ``[reconcile] grace_s``):
    a hint naming each key that is one setting's, None when none is."""
    paths = _scalar_paths(Config)
    found = []
    for key in keys:
        same = [p for p in paths if p[-1] == key]
        if len(same) == 1:
            found.append(f"{key} is a key of [{'.'.join(same[0][:-1])}]" if len(same[0]) > 1 else
                         f"{key} is a top-level key")
    return "; ".join(found) or None


def _closest(name: str, names: Iterable[str]) -> list[str]:
    """The one of ``names`` that ``name`` is a slip of the keyboard for (RAWDAYS, raw_day), if any: a list of
    one, or empty."""
    return difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.8)


def _check_env_names(env: Mapping[str, str]) -> None:
    """Refuse an AGENTLEDGER_* name that is no setting, as an unknown key in the file is: a mistyped one
    (RAWDAYS for RAW_DAYS) would otherwise leave its setting at the default without a word."""
    known, paths = env_names(), _scalar_paths(Config)
    # A former name that is close is named as the setting is named now.
    now = {env_name(f).removeprefix(ENV_PREFIX): env_name(p).removeprefix(ENV_PREFIX)
           for p in paths for f in _formers(p)}
    for name in sorted(env):
        if name.startswith(ENV_PREFIX) and name not in known:
            # Compared without the prefix they share, which made any two names look alike.
            close = [now.get(c, c) for c in _closest(name.removeprefix(ENV_PREFIX),
                                                     (k.removeprefix(ENV_PREFIX) for k in known))]
            # A key under a table it is not in (STORE_ before GRACE_S): the one setting whose key it ends
            # with, the longest such key (END_GRACE_S, not GRACE_S).
            ends = [p for p in paths if name.endswith("_" + p[-1].upper())]
            placed = [p for p in ends if len(p[-1]) == max(len(q[-1]) for q in ends)]
            if not close and len(placed) == 1:
                close = [env_name(placed[0]).removeprefix(ENV_PREFIX)]
            fix = f"rename it to ${ENV_PREFIX}{close[0]}" if close else \
                "unset it (a setting's is named after its key, e.g. $AGENTLEDGER_RETENTION_RAW_DAYS)"
            # The listing is run without the name: with it, `config show` stops on it too.
            raise ConfigError(f"invalid config: ${name} is not a setting agentledger knows: {fix}; "
                              f"`env -u {name} agentledger --config /dev/null config show` lists the keys there are")


def _get(doc: dict, path: tuple[str, ...]) -> Any:
    """The value ``doc`` gives at ``path``; None where it gives none (TOML has no null)."""
    for part in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)
    return doc


def _rename(doc: dict, origin: str) -> dict[tuple, tuple]:
    """Moves what ``doc`` (from ``origin``) gives under a former name to the setting's name. Returns the
    path each moved value was written at, by its path now, for an error to name the key as written."""
    written: dict[tuple, tuple] = {}
    for old, new in FORMER.items():
        if old in doc:
            _move(doc, (old,), new, doc.pop(old), written, origin)
    return written


def _move(doc: dict, old: tuple, new: tuple, value: Any, written: dict[tuple, tuple], origin: str) -> None:
    there = _get(doc, new)
    if isinstance(value, dict) and isinstance(there, dict):  # [hot] beside [store]: one table's keys
        for key, item in value.items():
            _move(doc, old + (key,), new + (key,), item, written, origin)
    elif there is not None:
        if new in written:  # moved there from another former name: both keys given are former ones
            raise ConfigError(f"invalid config: {_key(written[new])} and {_key(old)} are one setting, both given in "
                              f"{origin}: give it once, as {_key(new)}, its name (both are former ones)")
        raise ConfigError(f"invalid config: {_key(old)} and {_key(new)} are one setting, both given in {origin}: "
                          f"keep {_key(new)}, its name ({_key(old)} is its former one)")
    else:
        _set(doc, new, value)
        written[new] = old


def _from_env(env: Mapping[str, str], path: tuple[str, ...]) -> tuple[str, ...] | None:
    """The path, ``path`` or a former name of it, whose environment variable sets it; None when none does."""
    given = [p for p in [path, *_formers(path)] if env_name(p) in env]
    if len(given) > 1:
        both = f"invalid config: ${env_name(given[0])} and ${env_name(given[1])} are one setting, both set"
        if given[0] != path:
            raise ConfigError(f"{both}: set ${env_name(path)}, its name, alone (both are former ones)")
        raise ConfigError(f"{both}: unset ${env_name(given[1])}, its former name")
    return given[0] if given else None


def _set(doc: dict, path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        doc = doc.setdefault(part, {})
        if not isinstance(doc, dict):
            raise ConfigError(f"{'.'.join(path)}: the file gives {part} a value, not a table")
    doc[path[-1]] = value


def _env_value(path: tuple[str, ...], raw: str) -> Any:
    if path[-1] in ("sources", "gates"):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # nested deeper than the parser goes: no list of tables either
            raise ConfigError(f"{env_name(path)}: not JSON; give a JSON list of tables") from None
    return _EnvText(raw)  # pydantic converts numbers and checks them


def prices_beside(explicit: str | Path | None, env: Mapping[str, str]) -> Path:
    """Where the configuration in effect finds its price file when it names none: beside the config file
    (the systemd unit's /etc/agentledger), whichever command reads that config."""
    return config_file(explicit, env)[0].parent / PRICES_FILE


def config_file(explicit: str | Path | None, env: Mapping[str, str]) -> tuple[Path, bool]:
    """The file to read and whether it must exist (named by flag or environment). ``explicit``: as --config
    gave it; an empty one names no file (Path("") would be the current directory)."""
    if explicit is not None:
        problem = path_problem(str(explicit))
        if problem:
            raise ConfigError(f"--config {problem}: give the config file's path, or leave --config out for "
                              "$AGENTLEDGER_CONFIG, else $XDG_CONFIG_HOME/agentledger/config.toml")
        return _expanded(str(explicit), "--config"), True
    if env.get(ENV_PREFIX + "CONFIG"):
        return _expanded(env[ENV_PREFIX + "CONFIG"], f"${ENV_PREFIX}CONFIG"), True
    default = config_home(env) / "config.toml"
    return default, False


def _dotted(path: tuple) -> str:
    """A key's path as an error names it: ``store.ttl_s``, ``gates[0].limit``."""
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path).replace(".[", "[")


def _as_written(loc: tuple, origins: dict[tuple, str], written: dict[tuple, tuple]) -> tuple[str, str | None]:
    """The key at ``loc`` as it was written, under a former name too, and where it was given (None: nowhere,
    the default)."""
    n = next((n for n in range(len(loc), 0, -1) if loc[:n] in written), 0)
    shown = written[loc[:n]] + loc[n:] if n else loc
    return _dotted(shown), next((origins[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in origins), None)


class Origins:
    """Where each setting of a loaded configuration was given, to name one whose value fails only when it is
    used (the hot store's state_dir, which serve alone makes) as an invalid value is named."""

    def __init__(self, origins: dict[tuple, str] | None = None, written: dict[tuple, tuple] | None = None):
        self._origins, self._written = origins or {}, written or {}

    def of(self, path: tuple[str, ...]) -> tuple[str, str | None]:
        """The setting at ``path`` as it was written and where it was given; None where it is the default."""
        return _as_written(path, self._origins, self._written)

    def on_command_line(self, path: tuple[str, ...]) -> bool:
        """Whether a flag gave the setting at ``path``: named for this one command, not standing for every one."""
        return self._origins.get(path) == COMMAND_LINE


def _describe(error: dict, origins: dict[tuple, str], written: dict[tuple, tuple]) -> str:
    loc = tuple(error["loc"])
    key, origin = _as_written(loc, origins, written)
    message = error["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
    kind, given = error["type"], error.get("input")
    if kind == "extra_forbidden":
        # Not `config show` alone: it reads this same file and stops at this same key.
        hint = _elsewhere(given.keys() if isinstance(given, dict) and len(loc) == 1 else loc[-1:])
        model = _model_at(loc[:-1])
        close = _closest(str(loc[-1]), model.model_fields) if model else []
        fix = f"{hint}: move {'them' if '; ' in hint else 'it'} there" if hint else \
            f"rename it to {close[0]}" if close else "remove it"
        message = f"unknown key: {fix} (`agentledger --config /dev/null config show` lists the keys there are)"
    elif kind in ("greater_than_equal", "less_than_equal") and (bounds := _bounds(loc)):
        message = f"must be from {bounds[0]} to {bounds[1]}"
    elif kind == "literal_error":
        message = message.replace("must be", "must be one of", 1)
    # Else pydantic's words: "a valid dictionary or instance of HotConfig", "a valid tuple", "not a valid
    # path for <class 'pathlib.Path'>": Python's types, where the file has TOML's.
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        if loc[0] in _LISTS:
            message = f"must be a table, as each [[{loc[0]}]] is (in the environment, a JSON object){_not(given)}"
        else:
            message = f"must be a table: [{key}] and its keys{_not(given)}"
    elif kind in ("tuple_type", "list_type") and len(loc) == 1 and loc[0] in _LISTS:
        message = (f"must be a list of tables: [[{key}]] entries (in the environment, a JSON list of "
                   f"objects){_not(given)}")
    elif kind in ("path_type", "string_type"):
        message = f"must be {'a path' if kind == 'path_type' else 'text'}, in quotes{_not(given)}"
    elif kind == "missing":
        message = "is missing: give it (it has no default)"
    where = f" (from {origin})" if origin else ""
    return f"{key}: {message}{where}" if key else f"{message}{where}"


_LISTS = ("sources", "gates")


def _model_at(path: tuple) -> type[BaseModel] | None:
    """The table whose keys the setting at ``path`` holds (an entry of a list of tables: the table's); None
    where it holds no table."""
    model: Any = Config
    for part in path:
        if isinstance(part, int):
            continue  # an entry of a list of tables: its fields are the table's
        if part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = get_args(annotation)[0] if get_args(annotation) else annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    return model


def _bounds(loc: tuple) -> tuple[Any, Any] | None:
    """The least and greatest values the setting at ``loc`` takes, when it has both: a message naming one
    end alone left a user to find the other by trying."""
    model = _model_at(loc[:-1])
    field = model.model_fields.get(loc[-1]) if model else None
    low, high = (next((getattr(m, end) for m in (field.metadata if field else ()) if hasattr(m, end)), None)
                 for end in ("ge", "le"))
    return None if low is None or high is None else (low, high)


def _not(given: Any) -> str:
    """", not 5": what was given instead, where it is a value a file writes on one line."""
    return f", not {_toml_value(given)}" if isinstance(given, (bool, int, float, str)) else ""


def load(explicit: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
         env: Mapping[str, str] | None = None, *, roots_exist: bool = False) -> Config:
    """The effective configuration; ``overrides`` are flag values by key path (``"store.ttl_s"``).

    ``roots_exist``: refuse a source root that does not exist, for a one-shot read, which has nothing
    to wait for (a daemon waits for it to appear)."""
    return load_with_origins(explicit, overrides, env, roots_exist=roots_exist)[0]


def load_with_origins(explicit: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                      env: Mapping[str, str] | None = None, *, roots_exist: bool = False) -> tuple[Config, Origins]:
    """``load``'s configuration, and where each of its settings was given."""
    env = os.environ if env is None else env
    path, required = config_file(explicit, env)
    doc: dict = {}
    origins: dict[tuple, str] = {}
    written: dict[tuple, tuple] = {}
    # os.path.exists, not Path.exists: a default place the user may not even look into (HOME left
    # pointing at another user's) holds no config of theirs, where Path.exists raised.
    if path is not None and (required or os.path.exists(path)):
        try:
            doc = read_toml(path, "config file", "config.toml", f"--config, ${ENV_PREFIX}CONFIG")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        written = _rename(doc, str(path))
        origins = {(k,): str(path) for k in doc}
    _check_env_names(env)
    for key_path in _scalar_paths(Config):
        given = _from_env(env, key_path)
        if given is not None:
            _set(doc, key_path, _env_value(key_path, env[env_name(given)]))
            origins[key_path] = f"${env_name(given)}"
            written[key_path] = given
    for dotted, value in (overrides or {}).items():
        if value is not None:
            key_path = tuple(dotted.split("."))
            _set(doc, key_path, value)
            origins[key_path] = COMMAND_LINE
            written[key_path] = key_path
    if "prices" not in doc:
        # The one place a deployment keeps its prices: serve and reprice alike read it.
        beside = prices_beside(explicit, env)
        if os.path.isfile(beside):
            doc["prices"] = str(beside)
    try:
        return Config.model_validate(doc, context={"roots_exist": roots_exist}), Origins(origins, written)
    except ValidationError as exc:
        # An unknown key first: a misspelt one (limt) is why its setting is missing too.
        first = min(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
        raise ConfigError(f"invalid config: {_describe(first, origins, written)}") from None


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return _toml_string(str(value))


def _toml_string(text: str) -> str:
    """A TOML basic string. Not json.dumps: it writes a character beyond U+FFFF as a surrogate pair of
    escapes, which TOML forbids, and leaves DEL bare, which TOML wants escaped."""
    escaped = "".join("\\" + c if c in '"\\' else f"\\u{ord(c):04x}" if c < " " or c == "\x7f" else c
                      for c in text)
    return f'"{escaped}"'


# What a key that can be unset means when it is.
_UNSET = {"prices": f"no {PRICES_FILE} beside the config file: calls are priced from the bundled table alone"}


def to_toml(config: Config) -> str:
    """The configuration as a TOML file that ``load`` reads back to the same values, but for a value that is
    not UTF-8 (see ``not_utf8``), which no TOML file holds: its key is written as a comment, left unset."""
    data = config.model_dump(mode="json")
    lines: list[str] = []
    tables: list[tuple[str, dict]] = []
    arrays: list[tuple[str, list]] = []
    for key, value in data.items():
        if value is None:  # TOML has no null: unset is a key left out
            lines.append(f"# {key}: not set ({_UNSET[key]})")
        elif isinstance(value, dict):
            tables.append((key, value))
        elif key in _LISTS:
            arrays.append((key, value))
        else:
            lines.append(_assignment((key,), value))
    for name, table in tables:
        lines += ["", f"[{name}]"] + [_assignment((name, k), v) for k, v in table.items()]
    for name, items in arrays:
        for n, item in enumerate(items):
            lines += ["", f"[[{name}]]"] + [_assignment((name, n, k), v) for k, v in item.items()]
    return "\n".join(lines) + "\n"


def _assignment(path: tuple, value: Any) -> str:
    if not _is_utf8(value):
        return f"# {path[-1]}: {_shown_text(value)} (not UTF-8, which TOML cannot hold: set it by ${_env_of(path)})"
    return f"{path[-1]} = {_toml_value(value)}"


def _is_utf8(value: Any) -> bool:
    """Whether ``value``'s text is all UTF-8, as TOML's and JSON's is. A name Linux gives need not be (a home
    directory named in Latin-1): a byte of it that is not is a lone surrogate here (os.fsdecode's)."""
    if isinstance(value, (list, tuple)):
        return all(_is_utf8(v) for v in value)
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown_text(value: Any) -> Any:
    """``value`` with each byte of its text that is not UTF-8 written ``\\xNN`` (and any control character
    escaped), as ``inputs`` and ``rejects`` show such names."""
    if isinstance(value, dict):
        return {k: _shown_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shown_text(v) for v in value]
    if isinstance(value, str) and not _is_utf8(value):
        return printable(os.fsencode(value), sys.maxsize)  # whole
    return value


def _env_of(path: tuple) -> str:
    """The environment variable that sets the key at ``path``: a list's, for a key of one of its tables."""
    return env_name(path[:1] if path[0] in _LISTS else path)


def not_utf8(config: Config) -> list[tuple[str, str, str]]:
    """Each text of the configuration that is not UTF-8, which ``to_toml`` and ``to_json`` cannot write as it
    is: its key, the text as they show it, and the environment variable that sets it."""
    return [(_dotted(path), _shown_text(text), _env_of(path))
            for path, text in _texts(config.model_dump(mode="json")) if not _is_utf8(text)]


def _texts(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _texts(item, path + (key,))
    elif isinstance(value, (list, tuple)):
        for n, item in enumerate(value):
            yield from _texts(item, path + (n,))
    elif isinstance(value, str):
        yield path, value


def to_json(config: Config) -> dict:
    """The configuration as ``config show --json`` prints it: a text that is not UTF-8 as ``to_toml``'s comment
    shows it."""
    return _shown_text(config.model_dump(mode="json"))
