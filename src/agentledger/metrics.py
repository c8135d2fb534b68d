"""Prometheus metrics, read from the ledger at scrape time.

Every counter is a sum over ledger rows (through the rollups), so counters survive
restarts and never reset while the ledger lives: ``increase()`` sees no false resets (a
correction that lowers a sum is held, see ``CounterFloors``; a ``reprice`` or another ``top_n``
starts them again from the ledger's sums, which may be lower: the shipped spend rules use ``delta()``).
Spend is what every report counts, a run without model calls at its usage snapshot's cost. A run
or tool call counts under an outcome once it has one; while it runs, or after a restart cut
it off (a late end may still come), it is in a gauge.
No session, run or tool-call id is ever a label; tool, model and provider labels are capped to
``top_n`` values each, the rest summed under ``_other``. The values kept are the first the ledger
stored, not the busiest: a value summed under ``_other`` must stay there, or ``_other`` would
drop when it left and Prometheus would read the drop as a counter reset.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from agentledger import __version__
from agentledger.ledger import queries
from agentledger.ledger.db import open_reader
from agentledger.ledger.rollups import DURATION_BOUNDS_MS
from agentledger.units import PICO_PER_USD

log = logging.getLogger("agentledger.metrics")
FLOORS_FILE = "metric-floors.json"  # in the state dir, see CounterFloors

OTHER = "_other"
_TOKEN_TYPES = ("input", "output", "cache_read", "cache_write")


class _Capped:
    """A label dimension's value → the label it is reported under ("" for none)."""

    def __init__(self, conn, dimension: str, top_n: int):
        self.kept = queries.first_seen_values(conn, dimension, top_n)

    def __getitem__(self, value: str | None) -> str:
        value = value or ""
        return value if value in self.kept else OTHER


class _Served(NamedTuple):
    """One series' hold: what it was served at, the ledger's value then, and how much of the
    ledger's drops in it no rise has matched yet."""

    served: float
    seen: float
    credit: float


class CounterFloors:
    """What each counter and histogram sample was served at, so that none is ever served lower.

    The ledger corrects itself now and then: a side branch's replay is found out after it was
    counted, a call's line gives way to a better one. A sum over the ledger then goes down, which
    Prometheus reads as a reset: ``increase()`` counts the whole value again, a false spike in
    spend. So a sample is served at its highest until the ledger passes it again.

    An outcome is revised too: a Claude Code turn that answered goes on and fails, or fails and is
    answered on retry. The run leaves one ``outcome`` series for another of the same family and
    labels; held as a correction, the series it left would hide the next run that really arrives
    there. So within such a group a drop is ``credit`` until a rise matches it: first one of its own
    series (the run is back where it was, a correction is refilled), which the credit absorbs; else
    one of another series, in the same scrape or a later one, which is a move: the rise counts and
    the drop holds nothing back. A run whose outcome changed counts under each outcome it reached,
    whether a scrape saw it between the two, running again, or not: the counts a scrape serves do not
    depend on whether scrapes came while runs ran again. They may on scrapes that come while another
    run ends meanwhile: sums cannot tell whose end a rise is.

    Kept in ``path`` (when given): a restart's catch-up finds such corrections too. The floors stand
    for one epoch (see ``hold``): another ledger starts afresh, as its counters really do, and so
    does a ``reprice`` or another ``top_n``, which move counts from one series to another: floors
    held past them would count those calls in both."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._epoch: list | None = None
        self._series: dict[tuple, _Served] = {}
        self._lock = threading.Lock()  # scrapes are answered on threads of their own
        if path is None:
            return
        try:
            saved = orjson.loads(path.read_bytes())
            self._epoch = saved["epoch"]
            for name, labels, served, *rest in saved["samples"]:
                # A file from before moves were told apart holds only what was served: the ledger's
                # value then is unknown, so whatever it lies below is taken as taken back.
                seen, credit = rest if rest else (served, 0.0)
                self._series[(name, tuple(map(tuple, labels)))] = _Served(served, seen, credit)
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("metric floors in %s not read (%s): counters start from the ledger's sums", path, exc)
            self._epoch, self._series = None, {}

    def hold(self, epoch: list, families: list[Metric]) -> None:
        """``epoch``: what the families' values stand on (the ledger, its repricings, the label cap)."""
        with self._lock:
            if epoch != self._epoch:
                self._epoch, self._series = epoch, {}
            changed = False
            for family in families:
                if family.type not in ("counter", "histogram"):
                    continue
                groups: dict[tuple, list[tuple[int, tuple]]] = {}
                for i, sample in enumerate(family.samples):
                    labels = sorted(sample.labels.items())
                    group = (sample.name, tuple(kv for kv in labels if kv[0] != "outcome"))
                    groups.setdefault(group, []).append((i, (sample.name, tuple(labels))))
                for members in groups.values():
                    changed |= self._hold_group(family.samples, members)
            if changed and self.path is not None:
                self._save()

    def _hold_group(self, samples: list, members: list[tuple[int, tuple]]) -> bool:
        before = {key: self._series.get(key) for _, key in members}
        now = {key: samples[i].value for i, key in members}
        if len(members) == 1:
            (key, value), = now.items()
            was = before[key]
            served = value if was is None or value > was.served else was.served
            self._series[key] = _Served(served, value, served - value)
        else:
            # Counts of ended runs and calls: whole numbers, so the sums below are exact. A series' own
            # credit is matched first: its run came back to where it was, nothing moved.
            held, rising = {}, 0.0
            for key, value in now.items():
                was = before[key] or _Served(0.0, 0.0, 0.0)
                served, credit, d = was.served, was.credit, value - was.seen
                if d < 0:
                    credit -= d
                else:
                    absorbed = min(d, credit)
                    credit -= absorbed
                    served += d - absorbed
                    rising += d - absorbed
                held[key] = [served, value, credit]
            # What is left of a rise is the run that left another outcome landing here, when one did. A
            # series with some of its rise left has no credit left: the credit is all of the others'.
            for key, (served, value, credit) in held.items():
                moved = min(credit, rising)
                rising -= moved
                self._series[key] = _Served(served, value, credit - moved)
        for i, key in members:
            samples[i] = samples[i]._replace(value=self._series[key].served)
        return any(self._series[key] != before[key] for _, key in members)

    def _save(self) -> None:
        data = orjson.dumps({"epoch": self._epoch,
                             "samples": [[name, labels, *held] for (name, labels), held in self._series.items()]})
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:  # the scrape is still answered; only a restart's hold is lost
            log.warning("metric floors not kept in %s: %s", self.path, exc.strerror)


class LedgerCollector(Collector):
    def __init__(self, db: Path, top_n: int = 20, floors: CounterFloors | None = None):
        self.db = db
        self.top_n = top_n
        self.floors = floors

    def collect(self) -> Iterator[Metric]:
        conn = open_reader(self.db)
        try:
            conn.execute("BEGIN")  # one snapshot for the whole scrape
            # One cap per dimension for the whole scrape: the counters and the histograms share it.
            models, tools = _Capped(conn, "model", self.top_n), _Capped(conn, "tool", self.top_n)
            providers = _Capped(conn, "provider", self.top_n)
            families = [*self._llm(conn, providers, models), *self._runs_and_sessions(conn), *self._tools(conn, tools),
                        *self._ingest(conn), *self._gates(conn), *self._durations(conn, providers, models, tools)]
            epoch = [*queries.series_epoch(conn), self.top_n]
            conn.execute("COMMIT")
        finally:
            conn.close()
        if self.floors is not None:
            self.floors.hold(epoch, families)
        yield from families
        size = GaugeMetricFamily("agentledger_db_size_bytes", "Size of the ledger database and its WAL.")
        size.add_metric([], sum(os.path.getsize(p) for p in (str(self.db), f"{self.db}-wal") if os.path.exists(p)))
        yield size
        info = GaugeMetricFamily("agentledger_build_info", "Always 1; the version is a label.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info

    def _llm(self, conn, providers: _Capped, models: _Capped) -> Iterator[Metric]:
        rows = conn.execute(
            "SELECT model, provider, sum(llm_calls), sum(llm_errors), sum(input_tokens), sum(output_tokens), "
            "sum(cache_read_tokens), sum(cache_write_tokens), sum(unpriced_calls) "
            "FROM usage_days WHERE llm_calls > 0 GROUP BY 1, 2").fetchall()
        # Spend as every report counts it (runs without model calls at their usage snapshot's cost, the
        # log's word), from the rollup that keeps it by source: no run or call is walked.
        spent = conn.execute("SELECT provider, model, cost_source, cost_pico FROM cost_source_totals").fetchall()
        tokens = CounterMetricFamily("agentledger_tokens", "Tokens by provider, model and kind (OpenTelemetry "
                                     "gen_ai.token.type naming).", labels=["provider", "model", "token_type"])
        cost = CounterMetricFamily("agentledger_cost_usd", "Spend in USD, by where the cost came from (log: the "
                                   "log's, usage snapshots of runs without model calls included; transcript; "
                                   "priced: from the tokens here).", labels=["provider", "model", "cost_source"])
        calls = CounterMetricFamily("agentledger_llm_calls", "Model calls; priced=false have no known cost.",
                                    labels=["provider", "model", "outcome", "priced"])
        acc: dict[tuple, list[float]] = {}
        for model, provider, n, errors, i, o, cr, cw, unpriced in rows:
            key = (providers[provider], models[model])
            a = acc.setdefault(key, [0.0] * 7)
            for k, v in enumerate((n - errors - unpriced, unpriced, errors, i, o, cr, cw)):
                a[k] += v
        # The tokens of runs without model calls, at their usage snapshot's, as every report counts them.
        for (provider, model), (i, o, cr, cw, _total, _cost, _unpriced) in queries.fallbacks_by_model(conn).items():
            a = acc.setdefault((providers[provider], models[model]), [0.0] * 7)
            for k, v in enumerate((i, o, cr, cw), start=3):
                a[k] += v
        for (provider, model), (priced, unpriced, errors, i, o, cr, cw) in sorted(acc.items()):
            for token_type, value in zip(_TOKEN_TYPES, (i, o, cr, cw)):
                tokens.add_metric([provider, model, token_type], value)
            calls.add_metric([provider, model, "ok", "true"], priced)
            calls.add_metric([provider, model, "ok", "false"], unpriced)
            calls.add_metric([provider, model, "error", "true"], errors)
        pico: dict[tuple, int] = {}
        for provider, model, source, value in spent:
            key = (providers[provider], models[model], source)
            pico[key] = pico.get(key, 0) + value
        for (provider, model, source), value in sorted(pico.items()):
            cost.add_metric([provider, model, source], value / PICO_PER_USD)
        yield tokens
        yield cost
        yield calls

    def _runs_and_sessions(self, conn) -> Iterator[Metric]:
        ok, error, interrupted, running, sessions, compactions = conn.execute(
            "SELECT coalesce(sum(runs_ok), 0), coalesce(sum(runs_error), 0), coalesce(sum(runs_interrupted), 0), "
            "coalesce(sum(runs_running), 0), coalesce(sum(sessions), 0), coalesce(sum(compactions), 0) "
            "FROM usage_days").fetchall()[0]
        # Runs still going, or cut off and perhaps still to end late, leave those counts: gauges,
        # so that the counter of outcomes only grows.
        runs = CounterMetricFamily("agentledger_runs", "Agent runs that ended, by outcome.", labels=["outcome"])
        for outcome, value in (("ok", ok), ("error", error)):
            runs.add_metric([outcome], value)
        yield runs
        open_runs = GaugeMetricFamily("agentledger_runs_running", "Agent runs started and not ended yet.")
        open_runs.add_metric([], running)
        yield open_runs
        cut_off = GaugeMetricFamily("agentledger_runs_interrupted",
                                    "Agent runs that never ended within the grace period (a late end still counts).")
        cut_off.add_metric([], interrupted)
        yield cut_off
        started = CounterMetricFamily("agentledger_sessions", "Top-level sessions started.")
        started.add_metric([], sessions)
        yield started
        active = GaugeMetricFamily("agentledger_sessions_active", "Sessions neither ended nor idle for an hour.")
        cutoff = int(time.time() * 1000) - 3_600_000
        active.add_metric([], conn.execute(
            "SELECT count(*) FROM sessions WHERE status = 'active' AND last_ms >= ?", (cutoff,)).fetchall()[0][0])
        yield active
        comp = CounterMetricFamily("agentledger_compactions", "Context compactions.")
        comp.add_metric([], compactions)
        yield comp

    def _tools(self, conn, label: _Capped) -> Iterator[Metric]:
        rows = conn.execute("SELECT tool_name, sum(calls), sum(errors) FROM tool_days GROUP BY 1").fetchall()
        unsettled = dict(conn.execute("SELECT tool_name, count(*) FROM tool_calls INDEXED BY tool_calls_unsettled "
                                      "WHERE status IN ('running', 'interrupted') GROUP BY 1").fetchall())
        acc: dict[str, list[int]] = {}
        for tool, calls, errors in rows:
            a = acc.setdefault(label[tool], [0, 0])
            a[0] += calls - errors - unsettled.get(tool, 0)
            a[1] += errors
        family = CounterMetricFamily("agentledger_tool_calls", "Tool calls that ended, by tool and outcome.",
                                     labels=["tool", "outcome"])
        for tool, (ok, errors) in sorted(acc.items()):
            family.add_metric([tool, "ok"], ok)
            family.add_metric([tool, "error"], errors)
        yield family

    def _ingest(self, conn) -> Iterator[Metric]:
        lines = CounterMetricFamily("agentledger_ingest_lines", "Log lines read, by source and result (indexed: "
                                    "accepted, repeats of events indexed before included).", labels=["source", "result"])
        tailed = GaugeMetricFamily("agentledger_files_tailed", "Log files being followed.", labels=["source"])
        lag = GaugeMetricFamily("agentledger_ingest_lag_seconds",
                                "Seconds since the newest event indexed from each source.", labels=["source"])
        for source in queries.ingest_health(conn, time.time_ns() // 1_000_000):
            lines.add_metric([source["source"], "indexed"], source["lines_indexed"])
            lines.add_metric([source["source"], "rejected"], source["lines_rejected"])
            tailed.add_metric([source["source"]], source["files_tailed"])
            if source["lag_s"] is not None:
                lag.add_metric([source["source"]], source["lag_s"])
        events = CounterMetricFamily("agentledger_file_events", "Rotations, truncations and lost files seen.",
                                     labels=["event"])
        for event, count in conn.execute("SELECT event, count(*) FROM file_events GROUP BY 1"):
            events.add_metric([event], count)
        yield lines
        yield tailed
        yield lag
        yield events


    def _durations(self, conn, providers: _Capped, models: _Capped, tools: _Capped) -> Iterator[Metric]:
        """The OpenTelemetry GenAI duration histograms, from the bucket rollup (no call is scanned)."""
        rows = conn.execute("SELECT kind, name_a, name_b, bucket, calls, duration_ms FROM duration_buckets "
                            "WHERE calls > 0").fetchall()
        bounds = [f"{ms / 1000:g}" for ms in DURATION_BOUNDS_MS] + ["+Inf"]
        families = {
            "llm": HistogramMetricFamily(
                "gen_ai_client_operation_duration_seconds", "Model call durations, as the logs report them.",
                labels=["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]),
            "tool": HistogramMetricFamily(
                "gen_ai_execute_tool_duration_seconds", "Tool call durations, as the logs report them.",
                labels=["gen_ai_tool_name"]),
        }
        for kind, family in families.items():
            mine = [r for r in rows if r[0] == kind]
            series: dict[tuple, list] = {}
            for _, a, b, bucket, calls, ms in mine:
                key = ("chat", providers[a], models[b]) if kind == "llm" else (tools[a],)
                acc = series.setdefault(key, [[0] * len(bounds), 0])
                acc[0][bucket] += calls
                acc[1] += ms
            for key, (counts, ms) in sorted(series.items()):
                cumulative = list(itertools.accumulate(counts))
                family.add_metric(list(key), buckets=list(zip(bounds, cumulative)), sum_value=ms / 1000)
            yield family

    def _gates(self, conn) -> Iterator[Metric]:
        decisions = CounterMetricFamily("agentledger_gate_decisions", "Gate questions answered, by gate and "
                                        "decision (gate \"\" when no gate tripped).", labels=["gate", "decision"])
        for gate, decision, count in conn.execute("SELECT gate, decision, count FROM gate_decision_counts"):
            decisions.add_metric([gate, decision], count)
        yield decisions


def registry_for(db: Path, top_n: int = 20, extra: list[Collector] = (),
                 floors: CounterFloors | None = None) -> CollectorRegistry:
    """The ledger's metrics plus the daemon's own (``extra``: e.g. gate check timings); with
    ``floors``, no counter is served lower than it was before."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(db, top_n, floors))
    for collector in extra:
        registry.register(collector)
    return registry
