"""Pricing the ledger's calls and usage snapshots again (``agentledger reprice``) after the price table
changed: what a read of their lines would price them at now, their rollups moved with them, a page of rows per
transaction so that the daemon's writes are never held back long."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import apsw

from agentledger.facts import Tokens
from agentledger.ledger import queries, rollups
from agentledger.ledger.rows import LLM_CALL_COLUMNS
from agentledger.ledger.writer import LedgerWriter
from agentledger.pricing import Pricer
from agentledger.sources.claude_code import SOURCE as CLAUDE_CODE
from agentledger.sources.claude_code import provider_of_model
from agentledger.units import PRICED


@dataclass(slots=True)
class RepriceResult:
    checked: int = 0
    changed: int = 0
    unpriced: int = 0  # what usage counts unpriced once repriced: calls, and runs without calls on a snapshot
    snapshots_changed: int = 0  # usage snapshots, whose costs runs without model calls count
    # Claude Code calls, and their runs, of no provider given the one the price table names for their model
    calls_given_provider: int = 0
    runs_given_provider: int = 0

    def moved(self) -> bool:
        """Whether the reprice has moved the ledger's sums yet (the metric series start a new epoch once)."""
        return bool(self.changed or self.snapshots_changed or self.calls_given_provider or self.runs_given_provider)


# Claude Code calls and runs whose model named no provider: a gateway's other models, before the price table
# named theirs (claude_code.provider_of_model), and any model the table has learnt since it was read.
_PROVIDERLESS_CALLS = (
    f"SELECT id, {LLM_CALL_COLUMNS} FROM llm_calls WHERE source = '{CLAUDE_CODE}' AND provider IS NULL "
    "AND model IS NOT NULL AND id > ? ORDER BY id LIMIT ?"
)
_SET_CALL_PROVIDER = "UPDATE llm_calls SET provider = ? WHERE id = ?"
_PROVIDERLESS_RUNS = (
    f"SELECT run_id, model FROM runs WHERE source = '{CLAUDE_CODE}' AND provider IS NULL AND model IS NOT NULL "
    "AND run_id > ? ORDER BY run_id LIMIT ?"
)
_SET_RUN_PROVIDER = "UPDATE runs SET provider = ? WHERE run_id = ?"
# Calls priced here or left unpriced (the llm_calls_priced index), failed ones aside: they cost nothing.
_REPRICEABLE = (
    f"SELECT id, {LLM_CALL_COLUMNS} FROM llm_calls WHERE (cost_source = 'priced' OR cost_pico IS NULL) "
    "AND id > ? ORDER BY id LIMIT ?"
)
_SET_COST = "UPDATE llm_calls SET cost_pico = ?, cost_source = ? WHERE id = ?"
# Usage snapshots priced here or left unpriced, as calls are (a run without calls costs its snapshot's).
_REPRICEABLE_SNAPSHOTS = (
    "SELECT id, session_id, provider, model, ts_ms, input_tokens, output_tokens, cache_read_tokens, "
    "cache_write_tokens, total_tokens, cost_pico FROM usage_snapshots "
    "WHERE (cost_source = 'priced' OR cost_pico IS NULL) AND input_tokens IS NOT NULL AND id > ? ORDER BY id LIMIT ?"
)
_SET_SNAPSHOT_COST = "UPDATE usage_snapshots SET cost_pico = ?, cost_source = ? WHERE id = ?"


def reprice(writer: LedgerWriter, pricer: Pricer, batch: int = 5000) -> RepriceResult:
    """Give the calls and runs of no provider the one the price table names, then price again every call,
    then every usage snapshot, whose cost was priced here or unknown; one transaction per batch."""
    result = RepriceResult()
    _paged(writer, _PROVIDERLESS_CALLS, 0, batch, lambda conn, rows: _give_calls_providers(conn, rows, result))
    _paged(writer, _PROVIDERLESS_RUNS, "", batch, lambda conn, rows: _give_runs_providers(conn, rows, result))
    _paged(writer, _REPRICEABLE, 0, batch, lambda conn, rows: _reprice_calls(conn, rows, pricer, result))
    _paged(writer, _REPRICEABLE_SNAPSHOTS, 0, batch, lambda conn, rows: _reprice_snapshots(conn, rows, pricer, result))
    result.unpriced = queries.usage(writer.conn, queries.Window())["unpriced_calls"]
    return result


def _paged(writer: LedgerWriter, sql: str, first: object, batch: int,
           step: Callable[[apsw.Connection, list], None]) -> None:
    """``step`` on each page of ``sql``'s rows (after the key ``first``, ``batch`` at a time, ordered by their
    first column), in a transaction of its own."""
    last = first
    while True:
        with writer.transaction() as conn:
            rows = conn.execute(sql, (last, batch)).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            step(conn, rows)


def _moving(conn: apsw.Connection, result: RepriceResult) -> None:
    """Before a reprice's first change, in its own commit: the metric series start a new epoch once."""
    if not result.moved():
        conn.execute(rollups.NEW_SERIES_EPOCH)


def _give_calls_providers(conn: apsw.Connection, rows: list, result: RepriceResult) -> None:
    """The provider of each call that has none and whose model the price table now names one for, as a
    read of its line gives it; first, so that it is priced as such a read prices it."""
    old_rows, new_rows, updates = [], [], []
    for rid, *row in rows:
        provider = provider_of_model(row[8])
        if provider is None:
            continue
        old_rows.append(tuple(row))
        row[7] = provider
        new_rows.append(tuple(row))
        updates.append((provider, rid))
    if updates:
        _moving(conn, result)
        conn.executemany(_SET_CALL_PROVIDER, updates)
        rollups.advance_position(conn, rollups.move_llm_calls(conn, old_rows, new_rows))
        result.calls_given_provider += len(updates)


def _give_runs_providers(conn: apsw.Connection, rows: list, result: RepriceResult) -> None:
    """The runs of those calls, which took the provider of the call that ended them, as the calls do."""
    updates = [(provider, run_id) for run_id, model in rows if (provider := provider_of_model(model)) is not None]
    if updates:
        _moving(conn, result)
        tracker = rollups.Tracker(conn, {run_id for _, run_id in updates}, set(), set(), set())
        tracker.before()
        conn.executemany(_SET_RUN_PROVIDER, updates)
        tracker.after([], [])
        rollups.advance_position(conn, tracker.touched)
        result.runs_given_provider += len(updates)


def _reprice_calls(conn: apsw.Connection, rows: list, pricer: Pricer, result: RepriceResult) -> None:
    old_rows, new_rows, updates = [], [], []
    for rid, *row in rows:
        if row[18] is not None:
            continue  # a failed call
        result.checked += 1
        tokens = Tokens(input=row[10], output=row[11], cache_read=row[12], cache_write=row[13],
                        total=row[14], cache_write_1h=row[21])
        cost = pricer.price(row[7], row[8], tokens, row[1], row[24], row[25], row[26])
        if cost == row[15]:
            continue
        source = PRICED if cost is not None else None
        old_rows.append(tuple(row))
        row[15], row[16] = cost, source
        new_rows.append(tuple(row))
        updates.append((cost, source, rid))
    if updates:
        _moving(conn, result)  # a run cut short moved calls too
        conn.executemany(_SET_COST, updates)
        rollups.advance_position(conn, rollups.move_llm_calls(conn, old_rows, new_rows))
        result.changed += len(updates)


def _reprice_snapshots(conn: apsw.Connection, rows: list, pricer: Pricer, result: RepriceResult) -> None:
    """Price again every usage snapshot priced here or left unpriced; the fallbacks of their sessions
    follow (rollups.refresh_fallbacks). One read before its kinds were kept stays unpriced: its total
    alone cannot be priced."""
    updates, sessions = [], set()
    for sid, session_id, provider, model, ts, i, o, cr, cw, total, old in rows:
        cost, source = pricer.snapshot_cost(provider, model, Tokens(input=i, output=o, cache_read=cr,
                                                                    cache_write=cw, total=total), ts)
        if cost != old:
            updates.append((cost, source, sid))
            sessions.add(session_id)
    if updates:
        _moving(conn, result)
        conn.executemany(_SET_SNAPSHOT_COST, updates)
        rollups.advance_position(conn, sessions - {None})
        result.snapshots_changed += len(updates)
