"""deploy/agentledger.service: systemd accepts it, and the hardening it promises is there."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from agentledger.config import HttpConfig, load

UNIT = REPO / "deploy" / "agentledger.service"
README = REPO / "deploy" / "README.md"
EXAMPLE = REPO / "deploy" / "agentledger.toml"
EXEC_START = "/opt/agentledger/.venv/bin/agentledger"


def _parse(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value assigned, in order (systemd's unit file syntax, simplified)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):  # continuation
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"assignment outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    return _parse(UNIT.read_text())["Service"]


def _one(service: dict[str, list[str]], key: str) -> str:
    """The value in force: for single-valued settings the last assignment wins."""
    assert key in service, f"{key}= missing from {UNIT.name}"
    return service[key][-1]


def _environment(service: dict[str, list[str]]) -> dict[str, str]:
    env = {}
    for value in service.get("Environment", []):
        for item in shlex.split(value):
            name, _, val = item.partition("=")
            env[name] = val
    return env


def _seconds(value: str) -> float:
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "ms": 0.001}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(number) * units[unit]
    return total


def test_unit_is_a_notify_service_with_a_watchdog(service):
    assert _one(service, "Type") == "notify"
    assert _one(service, "NotifyAccess") == "main"
    assert _seconds(_one(service, "WatchdogSec")) > 0
    assert _one(service, "Restart") == "on-failure"
    assert _seconds(_one(service, "RestartSec")) == 5
    assert _one(service, "KillSignal") == "SIGTERM"
    assert _seconds(_one(service, "TimeoutStopSec")) == 30


def test_a_second_stop_is_no_failure_of_the_unit(service):
    # serve exits 128 + the signal's number on a second SIGTERM or SIGINT (see test_daemon): systemd took
    # 143 for a failure, and Restart=on-failure started again what `systemctl kill` twice had stopped.
    assert {str(128 + signal.SIGTERM), str(128 + signal.SIGINT)} <= set(_one(service, "SuccessExitStatus").split())


def test_unit_runs_serve_on_the_state_directory_ledger(service):
    argv = shlex.split(_one(service, "ExecStart"))
    assert argv[:2] == [EXEC_START, "serve"]
    assert "--no-demo" in argv  # a production unit never starts the demo writer
    state_dirs = _one(service, "StateDirectory").split()
    assert state_dirs == ["agentledger"]
    env = _environment(service)
    assert env["AGENTLEDGER_DB"] == "/var/lib/agentledger/ledger.db"
    assert Path(env["AGENTLEDGER_DB"]).parent == Path("/var/lib") / state_dirs[0]
    # The two lines an operator edits start out naming the same state dir.
    assert env["OPENCLAW_STATE_DIR"]
    assert [p.lstrip("-") for p in _one(service, "ReadOnlyPaths").split()] == [env["OPENCLAW_STATE_DIR"]]


def test_unit_runs_as_a_dedicated_unprivileged_user(service):
    assert service.get("DynamicUser", ["no"])[-1] == "yes" or _one(service, "User") not in ("", "root", "0")
    assert _one(service, "SupplementaryGroups")  # read access to the gateway's logs comes from a group
    assert _one(service, "CapabilityBoundingSet") == ""
    assert _one(service, "AmbientCapabilities") == ""
    assert _one(service, "NoNewPrivileges") == "yes"


@pytest.mark.parametrize("key, value", [
    ("ProtectSystem", "strict"),
    ("ProtectHome", "read-only"),
    ("PrivateTmp", "yes"),
    ("PrivateDevices", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("RestrictNamespaces", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("LockPersonality", "yes"),
    ("MemoryDenyWriteExecute", "yes"),
    ("SystemCallArchitectures", "native"),
    ("SystemCallErrorNumber", "EPERM"),  # numpy's OpenBLAS calls mbind() (in @resources) on import
    ("UMask", "0027"),
])
def test_unit_hardening(service, key, value):
    assert _one(service, key) == value


def test_unit_restricts_sockets_and_system_calls(service):
    assert set(_one(service, "RestrictAddressFamilies").split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    filters = service["SystemCallFilter"]
    assert "@system-service" in filters
    denied = {word.lstrip("~") for f in filters if f.startswith("~") for word in f.split()}
    assert {"@privileged", "@resources"} <= denied


def test_unit_sets_the_descriptor_limit_it_needs(service):
    # Left to systemd, it varied with the version and the host; a quarter of it must hold the connections the
    # HTTP listener serves by default, while half of it holds the files a catch-up reads.
    assert int(_one(service, "LimitNOFILE")) // 4 >= HttpConfig().max_connections


def test_unit_writes_only_its_state_directory(service):
    for value in service.get("ReadWritePaths", []):
        for path in value.split():
            assert path.lstrip("-+").startswith("/var/lib/agentledger"), path


def _existing_executable() -> str:
    """An executable for ExecStart= in the copy: verify insists the binary exists."""
    sibling = Path(sys.executable).parent / "agentledger"
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return str(sibling)
    return shutil.which("true") or "/bin/true"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not on PATH (no systemd here)")
def test_systemd_analyze_verify(tmp_path: Path):
    text = UNIT.read_text()
    assert text.count(f"ExecStart={EXEC_START} ") == 1
    copy = tmp_path / UNIT.name  # same name: verify derives the unit name from the file name
    copy.write_text(text.replace(f"ExecStart={EXEC_START} ", f"ExecStart={_existing_executable()} "))
    proc = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    print(output)
    # In a container without systemd running, verify may warn about the host (cgroups,
    # /etc/systemd/system, other units); only lines that name this unit are about it.
    ours = [line for line in output.splitlines() if UNIT.name in line or str(copy) in line]
    assert proc.returncode == 0, output
    assert not ours, "\n".join(ours)


def _readme_commands() -> list[list[str]]:
    """The commands of deploy/README.md's shell blocks, as argv, without their sudo."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            commands.append(argv[1:] if argv[:1] == ["sudo"] else argv)
    return [argv for argv in commands if argv]


def _installed_by_readme() -> dict[Path, str]:
    """Where deploy/README.md's install and cp commands put a file, and the file they copy there."""
    installed = {}
    for argv in _readme_commands():
        if argv[0] not in ("install", "cp"):
            continue
        paths = [arg for arg, before in zip(argv[1:], argv) if not arg.startswith("-") and before != "-m"]
        *copied, destination = paths
        for path in copied:
            installed[Path(destination) / Path(path).name if destination.endswith("/") else Path(destination)] = path
    return installed


def test_the_readme_installs_every_file_the_unit_needs(service):
    installed = _installed_by_readme()
    assert installed.get(Path("/etc/systemd/system") / UNIT.name) == "deploy/agentledger.service"
    config = Path(_environment(service)["AGENTLEDGER_CONFIG"])  # named, so it must exist
    assert config in installed, f"deploy/README.md never installs {config}, which the unit names"
    assert REPO / installed[config] == EXAMPLE
    venv_bin = Path(shlex.split(_one(service, "ExecStart"))[0]).parent
    assert [str(venv_bin / "pip"), "install"] in [argv[:2] for argv in _readme_commands()]


def test_the_example_config_as_it_is_changes_nothing(tmp_path, service):
    # What the unit runs with, but for the file it names: that is the example's copy here.
    unit = {k: v for k, v in _environment(service).items() if k != "AGENTLEDGER_CONFIG"}
    for env in ({}, unit):
        without_file = {**env, "XDG_CONFIG_HOME": str(tmp_path)}  # no config file there
        assert load(EXAMPLE, env=without_file) == load(None, env=without_file)
