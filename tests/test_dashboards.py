"""deploy/grafana and deploy/prometheus ask only for metrics that /metrics serves, by labels it has."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, ingest
from logwriter import LogDir, llm_call
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentledger.metrics import registry_for

DASHBOARD = REPO / "deploy" / "grafana" / "agentledger.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = REPO / "tests" / "prometheus" / "alerts_test.yml"
# Served elsewhere than metrics.py: Prometheus's own target health, and the gates' decisions.
OTHER_METRICS = {"up": set(), "agentledger_gate_decisions_total": {"gate", "decision"}}
TARGET_LABELS = {"instance", "job"}  # added by Prometheus to every scraped series
ID_LABEL = re.compile(r"(^|_)(id|session|run|call|session_key)$")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SELECTOR = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*(\{[^}]*\})?(\s*\()?")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def parse_promql(expr: str) -> tuple[list[tuple[str, set[str]]], set[str]]:
    """(metric name, labels its matchers use) for every selector, and every label grouped by."""
    grouped = {label.strip() for labels in _GROUPING.findall(expr) for label in labels.split(",") if label.strip()}
    rest = _RANGE.sub(" ", _GROUPING.sub(" ", expr))
    selectors = []
    for name, matchers, call in _SELECTOR.findall(_STRING.sub('""', rest)):
        if call or (not name and not matchers) or name in _KEYWORDS:
            continue  # a function, nothing, or an operator word
        selectors.append((name, set(_MATCHER.findall(matchers))))
    return selectors, grouped


@pytest.fixture(scope="module")
def served(oc_corpus: Path, tmp_path_factory) -> dict[str, set[str]]:
    """Every sample name /metrics serves, with its labels, from a ledger where every family has samples."""
    tmp = tmp_path_factory.mktemp("served")
    db = tmp / "ledger.db"
    ingest(db, oc_corpus)
    logs = LogDir(tmp / "root")
    logs.live.write_bytes(llm_call(1) + llm_call(2))
    ingest(db, logs.root)
    with open(logs.live, "r+b") as fh:  # truncated in place: a file event
        fh.truncate(len(llm_call(1)))
    ingest(db, logs.root)
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(registry_for(db)).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    assert "agentledger_file_events_total" in out
    return out | OTHER_METRICS


def _check(expr: str, served: dict[str, set[str]]) -> set[str]:
    selectors, grouped = parse_promql(expr)
    assert selectors, expr
    names = set()
    for name, labels in selectors:
        assert name in served, f"{name} is not served by /metrics: {expr}"
        assert labels <= served[name] | TARGET_LABELS, f"{name} has no label {labels - served[name]}: {expr}"
        names.add(name)
    known = set().union(*(served[n] for n in names)) | TARGET_LABELS
    assert grouped <= known, f"grouped by {grouped - known}, which no metric here has: {expr}"
    for label in grouped | {label for _, labels in selectors for label in labels}:
        assert not ID_LABEL.search(label), f"{label} would make a series per id: {expr}"
    return names


def test_the_promql_reader_sees_names_labels_and_groupings():
    selectors, grouped = parse_promql(
        'sum by (tool) (rate(x_total{instance=~"$i", outcome="error"}[$__rate_interval])) / '
        'sum without (a, b) (y offset 1h) or absent(up{job="j"}) > bool 0')
    assert selectors == [("x_total", {"instance", "outcome"}), ("y", set()), ("up", {"job"})]
    assert grouped == {"tool", "a", "b"}


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def test_dashboard_queries_only_served_metrics(served):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] == "agentledger"
    panels = _panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    queried = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            queried |= _check(target["expr"], served)
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            metric, label = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", var["query"]["query"]).groups()
            assert metric in served and label in TARGET_LABELS | served[metric]
    # What the dashboard is for: spend, tokens, tool errors, lag, gate blocks.
    assert {"agentledger_cost_usd_total", "agentledger_tokens_total", "agentledger_tool_calls_total",
            "agentledger_ingest_lag_seconds", "agentledger_gate_decisions_total"} <= queried


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def test_alert_rules_query_only_served_metrics(served):
    rules = _rules()
    assert {r["alert"] for r in rules} == {"AgentledgerDown", "AgentledgerMissing", "AgentledgerIngestLag",
                                          "AgentledgerLostFiles", "AgentledgerRejectRate", "AgentledgerDailySpend"}
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"\d+[smhd]", rule.get("for", "0s"))
        _check(rule["expr"], served)


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (apt-get install prometheus): rules checked structurally only")
    return tool


def test_promtool_accepts_the_rules():
    out = subprocess.run([_promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_alerts_fire_when_they_should():
    """tests/prometheus/alerts_test.yml: each alert on a made-up series, before and after its threshold."""
    out = subprocess.run([_promtool(), "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    tested = set(re.findall(r"alertname: (\w+)", ALERT_TESTS.read_text()))
    assert tested == {r["alert"] for r in _rules()}
