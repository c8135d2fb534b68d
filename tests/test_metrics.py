"""Spend on /metrics, over real HTTP from a real ``serve``: the same totals every report gives, by source."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import apsw
import orjson
import pytest
from conftest import REPO, as_of_version, cli_env, cli_json
from ledgerdump import verify
from logwriter import LogDir, event
from prometheus_client.parser import text_string_to_metric_families
from served import serve
from serving import copy_logs, wait_for, write_config

from agentledger.ledger import queries
from agentledger.ledger.db import open_reader

PICO = 10**12


def _costs(url: str) -> dict[tuple[str, str, str], float]:
    """agentledger_cost_usd_total by (provider, model, cost_source), parsed as Prometheus parses it."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.labels["provider"], s.labels["model"], s.labels["cost_source"]): s.value
            for family in text_string_to_metric_families(text) if family.name == "agentledger_cost_usd"
            for s in family.samples if s.name == "agentledger_cost_usd_total"}


def _summed(costs: dict, at: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in costs.items():
        out[key[at]] = out.get(key[at], 0.0) + value
    return out


def _agrees_with_the_reports(costs: dict, db: Path) -> None:
    """The served spend is `usage`'s, and `costs`'s per model and per provider."""
    assert sum(costs.values()) == pytest.approx(cli_json(db, "usage")["cost_usd"], abs=1e-9)
    for at, group_by in ((1, "model"), (0, "provider")):
        rows = cli_json(db, "costs", "--group-by", group_by)["rows"]
        want = {r[group_by] or "": r["cost_usd"] for r in rows if r["cost_usd"]}
        assert {k: v for k, v in _summed(costs, at).items() if v} == pytest.approx(want, abs=1e-9), group_by


def _without_model_calls(corpus: Path, root: Path) -> Path:
    """A gateway whose telemetry has no llm.call lines: every run costs what its usage snapshot says."""
    copy_logs(corpus, root)
    for path in root.rglob("*.jsonl"):
        path.write_bytes(b"".join(line for line in path.read_bytes().splitlines(keepends=True)
                                  if b'"kind":"llm.call"' not in line))
    return root


def _newest_ts(root: Path) -> int:
    return max(orjson.loads(line)["ts"] for path in root.rglob("events.jsonl")
               for line in path.read_bytes().splitlines() if line.startswith(b"{") and line.endswith(b"}"))


def test_runs_without_model_calls_are_spent_at_their_snapshot_cost(tmp_path, oc_corpus):
    """Every report charges a run without llm.call lines its usage snapshot's cost: so does /metrics,
    under the run's model and as the log's cost, from the catch-up on and as new runs come."""
    root = _without_model_calls(oc_corpus, tmp_path / "logs")
    db = tmp_path / "ledger.db"
    served = serve(write_config(tmp_path, root, extra=""))
    try:
        costs = _costs(served.url)
        assert sum(costs.values()) > 10  # the corpus's runs cost ~$14.7 by their snapshots
        assert {source for _, _, source in costs} == {"log"}
        _agrees_with_the_reports(costs, db)
        # A run of a model no call named yet: its value gets a label of its own, not _other's.
        t = _newest_ts(root) + 1_000
        run = {"model": "acme-live-1", "provider": "acme"}
        usage = {"input": 1000, "output": 200, "cacheRead": 0, "cacheWrite": 0, "total": 1200}
        with open(root / "agents" / "main" / "telemetry" / "events.jsonl", "ab") as f:
            f.write(event(10**9, "run.start", run, session="metrics-live", run="run-live", ts=t)
                    + event(10**9 + 1, "usage.snapshot", {**run, "usage": usage, "costUsd": 2.5},
                            session="metrics-live", ts=t + 5_000)
                    + event(10**9 + 2, "run.end", {**run, "usage": usage, "durationMs": 5_100},
                            session="metrics-live", run="run-live", ts=t + 5_100))
        wait_for(lambda: ("acme", "acme-live-1", "log") in _costs(served.url), what="the new run's cost served")
        costs = _costs(served.url)
        assert costs[("acme", "acme-live-1", "log")] == pytest.approx(2.5)
        _agrees_with_the_reports(costs, db)
    finally:
        assert served.stop() == 0
    assert verify(db) == []


def _ledger_by_source(db: Path) -> dict[str, float]:
    """Spend per cost_source straight from the calls, with the snapshot fallbacks as the log's."""
    conn = open_reader(db)
    try:
        out = dict(conn.execute(
            "SELECT cost_source, sum(cost_pico) FROM llm_calls WHERE cost_pico IS NOT NULL GROUP BY 1").fetchall())
        out["log"] = out.get("log", 0) + queries._fallback_total(conn, queries.Window())[-1]
    finally:
        conn.close()
    return {source: pico / PICO for source, pico in out.items()}


def _all_sources_config(tmp_path: Path, oc_root: Path, transcript_corpus: Path, claude_corpus: Path) -> Path:
    return write_config(tmp_path, oc_root, extra=f"""
[[sources]]
format = "oc-transcript"
root = "{transcript_corpus}"

[[sources]]
format = "claude-code"
root = "{claude_corpus}"
""")


def test_cost_source_says_where_each_cost_came_from(tmp_path, oc_corpus, transcript_corpus, claude_corpus):
    """The log's costs, a transcript's and those priced here (all of Claude Code's) are apart, each what the
    ledger holds, before and after a `reprice` that lowers a price."""
    db = tmp_path / "ledger.db"
    oc_root = copy_logs(oc_corpus, tmp_path / "oc")
    # Half the telemetry's runs without their calls: their snapshots' costs are the log's too.
    for path in oc_root.rglob("*.jsonl"):
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(line for i, line in enumerate(lines)
                                  if not (b'"kind":"llm.call"' in line and b'"agentId":"work"' in line)))
    config = _all_sources_config(tmp_path, oc_root, transcript_corpus, claude_corpus)
    served = serve(config)
    try:
        before = _costs(served.url)
    finally:
        assert served.stop() == 0
    by_source = _summed(before, 2)
    assert set(by_source) == {"log", "transcript", "priced"}
    assert by_source == pytest.approx(_ledger_by_source(db), abs=1e-9)
    assert all(source == "priced" for (_, model, source) in before if model.startswith("claude-") and "-202" in model)
    _agrees_with_the_reports(before, db)

    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."claude-sonnet-4-5"]\ninput = 0.1\noutput = 0.1\ncache_read = 0.01\n'
                      'cache_write = 0.1\n')
    out = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(config), "reprice", "--prices",
                          str(prices)], env=cli_env(db), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    served = serve(config)
    try:
        after = _costs(served.url)
    finally:
        assert served.stop() == 0
    key = ("anthropic", "claude-sonnet-4-5-20250929", "priced")
    assert after[key] < before[key]
    assert {k: v for k, v in after.items() if k != key} == pytest.approx({k: v for k, v in before.items()
                                                                          if k != key}, abs=1e-9)
    assert _summed(after, 2) == pytest.approx(_ledger_by_source(db), abs=1e-9)
    _agrees_with_the_reports(after, db)
    assert verify(db) == []


def test_a_ledger_from_before_costs_by_source_gets_them_filled(tmp_path, oc_corpus, claude_corpus):
    """The migration fills the spend by source from the rows: /metrics serves it at once, as `usage` counts it."""
    oc_root = _without_model_calls(oc_corpus, tmp_path / "oc")
    config = write_config(tmp_path, oc_root, extra=f'\n[[sources]]\nformat = "claude-code"\nroot = "{claude_corpus}"\n')
    db = tmp_path / "ledger.db"
    served = serve(config)
    assert served.stop() == 0
    conn = apsw.Connection(str(db))  # as a ledger was before: no spend kept by source
    as_of_version(conn, 26)
    conn.close()
    served = serve(config)
    try:
        costs = _costs(served.url)
    finally:
        assert served.stop() == 0
    assert set(_summed(costs, 2)) == {"log", "priced"}
    _agrees_with_the_reports(costs, db)
    assert verify(db) == []


def _provider_labels(url: str) -> dict[str, set[str]]:
    """The provider label's values in each family that has one, parsed as Prometheus parses them."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            for label in ("provider", "gen_ai_provider_name"):
                if label in s.labels:
                    out.setdefault(family.name, set()).add(s.labels[label])
    return out


def test_provider_labels_are_capped_as_model_and_tool_labels_are(tmp_path):
    """A gateway that names a provider per tenant made a series per provider in each family: 200 of them gave
    over 5,000 lines. The first 20 providers keep their label; later ones are summed under _other."""
    root = tmp_path / "logs"
    logs = LogDir(root)
    db = tmp_path / "ledger.db"

    def calls(providers: range) -> bytes:
        return b"".join(event(i + 1, "llm.call", {
            "callIndex": 0, "provider": f"prov-{i:03d}", "model": "m-1", "durationMs": 1200, "costUsd": 0.01,
            "delta": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "total": 15}},
            session=f"s{i}", run=f"r{i}") for i in providers)

    logs.append(calls(range(20)))
    served = serve(write_config(tmp_path, root, extra=""))
    try:
        first = {f"prov-{i:03d}" for i in range(20)}
        families = ("agentledger_tokens", "agentledger_cost_usd", "agentledger_llm_calls",
                    "gen_ai_client_operation_duration_seconds")
        assert _provider_labels(served.url) == dict.fromkeys(families, first)
        logs.append(calls(range(20, 200)))
        wait_for(lambda: cli_json(db, "usage")["llm_calls"] == 200, what="the other 180 providers' calls")
        assert _provider_labels(served.url) == dict.fromkeys(families, first | {"_other"})
        costs = _costs(served.url)
        assert costs[("_other", "m-1", "log")] == pytest.approx(1.8)
        assert sum(costs.values()) == pytest.approx(cli_json(db, "usage")["cost_usd"], abs=1e-9)
    finally:
        assert served.stop() == 0
