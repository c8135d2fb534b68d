"""Keeping the rollup tables equal to their definition (see verify.py), batch by batch.

For every run, tool call, session and subagent a batch touches, the writer reads the row
before and after its upserts; the rollups move by what the new row contributes minus what the old one
did. LLM calls add as they are inserted; a call that a better line of it replaces moves
the rollups by the new row minus the old one. Deltas are summed per rollup
key in Python and written with one upsert per key, which is what keeps this cheap.
"""

from __future__ import annotations

import bisect
import functools
from collections import defaultdict

import apsw
import orjson

from agentledger.units import PRICED

# The session of a run (the runs row r, its events' run_activity row a): the runs row's, else the one its
# events name (see rows.RUN_ACTIVITY). Its tool calls that name none count there (verify.TOOL_SESSION).
RUN_SESSION = "coalesce(r.session_id, a.session_id)"
SLOT_MS = 900_000  # 15 minutes: every UTC offset in use since 1980 is a multiple of it
DAY_MS = 86_400_000
_SESSION_COLUMNS = ("llm_calls", "llm_errors", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "total_tokens", "cost_pico", "unpriced_calls", "runs", "tool_calls",
                    "tool_errors")
_USAGE_COLUMNS = _SESSION_COLUMNS[:10] + ("runs_running", "runs_ok", "runs_error", "runs_interrupted", "sessions",
                                          "subagent_sessions", "compactions", "subagents")
_RUN_STATUSES = ("running", "ok", "error", "interrupted")

# A run brings its session the tool calls that name no session of their own, and its span (see
# verify.TOOL_SESSION): a run is a runs row, or only its events' (run_activity), which may say whose it is.
_READ_RUNS = f"""
SELECT j.value, r.session_id, r.agent_id, r.provider, r.model, coalesce(r.started_ms, r.ended_ms), r.status,
       coalesce(t.tool_calls, 0), coalesce(t.tool_errors, 0), a.first_ms, a.last_ms, {RUN_SESSION}
FROM json_each(?1) AS j LEFT JOIN runs AS r ON r.run_id = j.value
LEFT JOIN run_activity AS a ON a.run_id = j.value
LEFT JOIN (SELECT run_id, count(*) AS tool_calls, sum(status = 'error') AS tool_errors FROM tool_calls
           WHERE run_id IN (SELECT value FROM json_each(?1)) AND session_id IS NULL GROUP BY run_id) AS t
       ON t.run_id = j.value
WHERE r.run_id IS NOT NULL OR a.run_id IS NOT NULL
"""
_READ_SESSIONS = """
SELECT s.session_id, coalesce(s.started_ms, s.first_ms), s.agent_id, s.session_key
FROM json_each(?) AS j JOIN sessions AS s ON s.session_id = j.value
"""
_READ_SUBAGENTS = """
SELECT a.child_session_key, coalesce(a.spawned_ms, a.ended_ms), a.child_agent_id, a.parent_session_key
FROM json_each(?) AS j JOIN subagents AS a ON a.child_session_key = j.value
"""
_READ_TOOLS = """
SELECT tc.run_id, tc.tool_call_id, tc.agent_id, tc.tool_name, coalesce(tc.started_ms, tc.ended_ms), tc.status,
       tc.duration_ms, tc.session_id, tc.branch
FROM json_each(?) AS j JOIN tool_calls AS tc ON tc.run_id = j.value ->> 0 AND tc.tool_call_id = j.value ->> 1
"""


def _upsert_add(table: str, keys: tuple[str, ...], values: tuple[str, ...]) -> str:
    cols = keys + values
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
        + ", ".join(f"{v} = {v} + excluded.{v}" for v in values)
    )


_ADD_SESSION = _upsert_add("session_totals", ("session_id",), _SESSION_COLUMNS)
_ADD_USAGE = _upsert_add("usage_slots", ("slot_ms", "agent_id", "provider", "model"), _USAGE_COLUMNS)
_ADD_TOOL_SLOT = _upsert_add("tool_slots", ("slot_ms", "agent_id", "tool_name"),
                             ("calls", "errors", "duration_ms", "timed_calls"))
_ADD_USAGE_DAY = _ADD_USAGE.replace("usage_slots", "usage_days")
_ADD_TOOL_DAY = _ADD_TOOL_SLOT.replace("tool_slots", "tool_days")
_ADD_RUN_TOOLS = _upsert_add("run_tool_totals", ("run_id",), ("tool_calls", "tool_errors"))
_ADD_RUN_LLM = _upsert_add("run_llm_totals", ("run_id",), _SESSION_COLUMNS[:9])
_ADD_DURATION = _upsert_add("duration_buckets", ("kind", "name_a", "name_b", "bucket"), ("calls", "duration_ms"))
_ADD_SESSION_MODEL = _upsert_add("session_model_totals", ("session_id", "provider", "model"), _SESSION_COLUMNS[:9])
_ADD_COST_SOURCE = _upsert_add("cost_source_totals", ("provider", "model", "cost_source"), ("cost_pico",))
_DROP_FALLBACKS = ("DELETE FROM session_fallback_costs WHERE session_id IN (SELECT value FROM json_each(?)) "
                   "RETURNING provider, model, cost_pico, priced_pico")
_PUT_FALLBACK = ("INSERT INTO session_fallback_costs (session_id, provider, model, input_tokens, output_tokens, "
                 "cache_read_tokens, cache_write_tokens, total_tokens, cost_pico, unpriced_calls, priced_pico) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_RUNS_WITHOUT_CALLS = (
    "INSERT OR IGNORE INTO runs_without_calls (run_id) SELECT value FROM json_each(?) "
    "WHERE value NOT IN (SELECT run_id FROM run_llm_totals WHERE llm_calls > 0)"
)
_RUNS_WITH_CALLS = "DELETE FROM runs_without_calls WHERE run_id IN (SELECT value FROM json_each(?))"
# Of these runs that lost calls, the runs rows left with none (a call moved to another run).
_RUNS_EMPTIED = (
    "INSERT OR IGNORE INTO runs_without_calls (run_id) SELECT r.run_id FROM json_each(?) AS j "
    "JOIN runs AS r ON r.run_id = j.value JOIN run_llm_totals AS t ON t.run_id = j.value WHERE t.llm_calls = 0"
)
# Each commit's mark tells it from the commit a restored copy of the ledger numbers the same (0030).
_NEXT_POSITION = ("UPDATE ledger_position SET seq = seq + 1, mark = lower(hex(randomblob(8))) WHERE id = 1 "
                  "RETURNING seq, mark")
# The metric series start again from the ledger's sums (queries.series_epoch): a reprice or a repair moved them.
NEW_SERIES_EPOCH = "UPDATE ledger_position SET repricings = repricings + 1 WHERE id = 1"
_SESSION_CHANGED = (
    "INSERT INTO session_changes (session_id, seq, mark) VALUES (?, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, mark = excluded.mark"
)
_SESSION_SPAN = (
    "UPDATE sessions SET first_ms = min(first_ms, ?), last_ms = max(last_ms, ?) WHERE session_id = ?"
)


def advance_position(conn: apsw.Connection, session_ids: set[str]) -> int:
    """Number this transaction's changes and mark the session instances they touched (whose snapshot
    fallbacks follow, see ``refresh_fallbacks``)."""
    seq, mark = conn.execute(_NEXT_POSITION).fetchall()[0]
    if session_ids:
        conn.executemany(_SESSION_CHANGED, [(sid, seq, mark) for sid in session_ids])
        refresh_fallbacks(conn, session_ids)
    return seq


@functools.cache
def _session_fallbacks() -> str:
    """The snapshot fallbacks (tokens, cost, unpriced: verify.FALLBACK_COLUMNS, then the cost priced here) of
    these session instances' runs without calls (verify.snapshot_fallback), by provider and model: from each
    session's runs, so a batch walks only the runs of the sessions it changed."""
    # not at the top: verify reads this module's constants
    from agentledger.ledger.verify import FALLBACK_SUMS, PRICED_SUM, SESSION_RUNS_WITHOUT_CALLS, snapshot_fallback

    return (f"SELECT session_id, coalesce(provider, ''), coalesce(model, ''), {FALLBACK_SUMS}, {PRICED_SUM} "
            f"FROM ({snapshot_fallback(SESSION_RUNS_WITHOUT_CALLS)}) GROUP BY 1, 2, 3")


def _move_fallback(moved: dict[tuple, list[int]], provider: str, model: str, cost: int, priced: int,
                   sign: int) -> None:
    """Move cost_source_totals by a fallback's cost: what was priced here as 'priced', the rest as the log's."""
    moved[(provider, model, "log")][0] += sign * (cost - priced)
    moved[(provider, model, PRICED)][0] += sign * priced


def refresh_fallbacks(conn: apsw.Connection, session_ids: set[str]) -> None:
    """Recompute the snapshot fallbacks of these session instances and move cost_source_totals by the
    difference in their cost. A fallback depends only on its session's runs, snapshots and runs without
    calls, and every change to those marks the session changed (the hot views depend on the same)."""
    ids = orjson.dumps(sorted(session_ids)).decode()
    moved: dict[tuple, list[int]] = defaultdict(lambda: [0])
    for provider, model, cost, priced in conn.execute(_DROP_FALLBACKS, (ids,)).fetchall():
        _move_fallback(moved, provider, model, cost, priced, -1)
    rows = [row for row in conn.execute(_session_fallbacks(), (ids,)) if any(row[3:])]
    if rows:
        conn.executemany(_PUT_FALLBACK, rows)
    for _, provider, model, *_tokens, cost, _unpriced, priced in rows:
        _move_fallback(moved, provider, model, cost, priced, 1)
    _write(conn, _ADD_COST_SOURCE, moved)


# OpenTelemetry's advised boundaries for GenAI operation durations, in ms; past the last: +Inf.
DURATION_BOUNDS_MS = (10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240, 20480, 40960, 81920)


def duration_bucket(ms: int) -> int:
    return bisect.bisect_left(DURATION_BOUNDS_MS, ms)


def _slot(ts: int) -> int:
    return ts - ts % SLOT_MS


def is_subagent_key(session_key: str | None) -> bool:
    """Subagent sessions are keyed ``agent:<id>:subagent:<uuid>``."""
    return bool(session_key) and session_key.startswith("agent:") and ":subagent:" in session_key


class Deltas:
    """Sums of contributions per rollup key; ``sign`` is +1 for a new row, -1 for an old one."""

    def __init__(self) -> None:
        self.session: dict[str, list[int]] = defaultdict(lambda: [0] * len(_SESSION_COLUMNS))
        self.usage: dict[tuple, list[int]] = defaultdict(lambda: [0] * len(_USAGE_COLUMNS))
        self.tool_slot: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        self.run_tools: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.run_llm: dict[str, list[int]] = defaultdict(lambda: [0] * 9)
        self.session_model: dict[tuple, list[int]] = defaultdict(lambda: [0] * 9)
        self.durations: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])  # (kind, a, b, bucket) → n, ms
        self.cost_sources: dict[tuple, list[int]] = defaultdict(lambda: [0])  # (provider, model, source) → cost

    def llm_call(self, row: tuple, sign: int = 1) -> None:
        """``row`` is the writer's llm_calls parameter tuple (see rows.LLM_CALL_COLUMNS)."""
        (_, ts, _, agent, _, session_id, run_id, provider, model, _, i, o, cr, cw, t, cost, cost_source, duration,
         error) = row[:19]
        err = error is not None
        values = (sign, sign * err, sign * i, sign * o, sign * cr, sign * cw, sign * t, sign * (cost or 0),
                  sign * (cost is None and not err))
        targets = [self.usage[(_slot(ts), agent or "", provider or "", model or "")]]
        if session_id is not None:
            targets.append(self.session[session_id])
            targets.append(self.session_model[(session_id, provider or "", model or "")])
        if run_id is not None:
            targets.append(self.run_llm[run_id])
        for acc in targets:
            for k, v in enumerate(values):
                acc[k] += v
        if cost is not None:
            self.cost_sources[(provider or "", model or "", cost_source)][0] += sign * cost
        if duration is not None:
            acc = self.durations[("llm", provider or "", model or "", duration_bucket(duration))]
            acc[0] += sign
            acc[1] += sign * duration

    def tool(self, row: tuple, sign: int) -> None:
        """A call counts in its run and in its own session; one that names none reaches a session
        through its run (``run``)."""
        run_id, _, agent, name, ts, status, duration, session_id, _ = row
        err = status == "error"
        acc = self.run_tools[run_id]
        acc[0] += sign
        acc[1] += sign * err
        if session_id is not None:
            acc = self.session[session_id]
            acc[10] += sign
            acc[11] += sign * err
        if ts is not None:
            acc = self.tool_slot[(_slot(ts), agent or "", name or "")]
            acc[0] += sign
            acc[1] += sign * err
            if duration is not None:  # a call that did not report its duration took an unknown time
                acc[2] += sign * duration
                acc[3] += sign
        if duration is not None:
            acc = self.durations[("tool", name or "", "", duration_bucket(duration))]
            acc[0] += sign
            acc[1] += sign * duration

    def run(self, row: tuple, sign: int) -> None:
        """A runs row counts in its session (``session_id``); its tool calls that name no session count in
        the run's (``run_session``), which a run without a runs row may have too."""
        _, session_id, agent, provider, model, ts, status, tools, tool_errors, _, _, run_session = row
        if run_session is not None and (session_id is not None or tools):
            acc = self.session[run_session]
            acc[9] += sign * (session_id is not None)
            acc[10] += sign * tools
            acc[11] += sign * tool_errors
        if ts is not None:
            acc = self.usage[(_slot(ts), agent or "", provider or "", model or "")]
            acc[9] += sign
            for k, name in enumerate(_RUN_STATUSES):
                acc[10 + k] += sign * (status == name)


    def session_row(self, row: tuple, sign: int) -> None:
        _, ts, agent, key = row
        acc = self.usage[(_slot(ts), agent or "", "", "")]
        acc[15 if is_subagent_key(key) else 14] += sign

    def subagent(self, row: tuple, sign: int) -> None:
        _, ts, agent, _ = row
        if ts is not None:
            self.usage[(_slot(ts), agent or "", "", "")][17] += sign

    def compaction(self, row: tuple) -> None:
        """``row`` is the writer's compactions parameter tuple; a compaction counts once, at its start."""
        _, ts, phase, _, agent = row[:5]
        if phase == "start":
            self.usage[(_slot(ts), agent or "", "", "")][16] += 1


def _read(conn: apsw.Connection, sql: str, keys: list, key_width: int = 1) -> dict:
    """Rows for ``keys`` by key; a row's key is its first ``key_width`` columns."""
    if not keys:
        return {}
    rows = conn.execute(sql, (orjson.dumps(keys).decode(),))
    if key_width == 1:
        return {row[0]: row for row in rows}
    return {row[:key_width]: row for row in rows}


def _by_day(deltas: dict) -> dict:
    """Slot-keyed deltas summed per UTC day (the slot start is the first key part)."""
    days: dict = {}
    for (slot, *rest), values in deltas.items():
        key = (slot - slot % DAY_MS, *rest)
        acc = days.get(key)
        days[key] = list(values) if acc is None else [a + b for a, b in zip(acc, values)]
    return days


def _write(conn: apsw.Connection, sql: str, deltas: dict) -> None:
    rows = []
    for key, values in deltas.items():
        if any(values):
            rows.append((*key, *values) if type(key) is tuple else (key, *values))
    if rows:
        conn.executemany(sql, rows)


def _family_moves(old: dict, new: dict) -> set[str]:
    """The session keys whose families a batch's subagent rows changed: a spawn's child, and its parent
    before and after, when the parent or the instant of the spawn (which family it joins) moved."""
    keys = set()
    for child, row in new.items():
        before = old.get(child, (None,) * len(row))
        if (before[1], before[3]) != (row[1], row[3]):
            keys |= {child, row[3], before[3]}
    return keys - {None}


def move_llm_calls(conn: apsw.Connection, old_rows: list[tuple], new_rows: list[tuple]) -> set[str]:
    """Rollups follow llm_calls rows changed in place (old → new); returns the sessions touched."""
    d = Deltas()
    for row in old_rows:
        d.llm_call(row, -1)
    for row in new_rows:
        d.llm_call(row)
    _write(conn, _ADD_SESSION, d.session)
    _write(conn, _ADD_USAGE, d.usage)
    _write(conn, _ADD_USAGE_DAY, _by_day(d.usage))
    _write(conn, _ADD_RUN_LLM, d.run_llm)
    _write(conn, _ADD_SESSION_MODEL, d.session_model)
    _write(conn, _ADD_COST_SOURCE, d.cost_sources)
    _write(conn, _ADD_DURATION, d.durations)  # keyed by provider and model, which a change may name anew
    return set(d.session)


def tool_rows(conn: apsw.Connection, keys: list[list[str]]) -> dict:
    """The tool_calls rows of these keys ([run id, call id] each, sorted), as the rollups read them."""
    return _read(conn, _READ_TOOLS, keys, 2)


def move_tool_calls(conn: apsw.Connection, old_rows: list[tuple], new_rows: list[tuple]) -> None:
    """Rollups follow tool_calls rows changed in place (old → new, rows ``tool_rows`` read)."""
    d = Deltas()
    for row in old_rows:
        d.tool(row, -1)
    for row in new_rows:
        d.tool(row, +1)
    _write(conn, _ADD_TOOL_SLOT, d.tool_slot)
    _write(conn, _ADD_TOOL_DAY, _by_day(d.tool_slot))
    _write(conn, _ADD_RUN_TOOLS, d.run_tools)
    _write(conn, _ADD_SESSION, d.session)
    _write(conn, _ADD_DURATION, d.durations)


class Tracker:
    """Brackets a batch's entity upserts: ``before()``, the upserts, then ``after()``."""

    def __init__(self, conn: apsw.Connection, run_ids: set[str], tool_keys: set[tuple[str, str]],
                 session_ids: set[str], subagent_keys: set[str]):
        """``run_ids``: every run the batch has a fact of (its span may widen its session's)."""
        self.conn = conn
        self.subagent_keys = sorted(subagent_keys)
        # In key order, the lookups walk the table's index once instead of jumping about in it.
        self.tool_keys = [list(k) for k in sorted(tool_keys)]
        self.run_ids = sorted(run_ids | {k[0] for k in tool_keys})
        self.session_ids = set(session_ids)
        self.deltas = Deltas()
        self.touched: set[str] = set()  # session instances whose rows or totals this batch changed
        self.new_runs: dict[str, tuple] = {}  # the runs' rows after the batch, read by ``after``: the lifecycle's too
        self.new_sessions: dict[str, tuple] = {}  # the sessions' rows after the batch, read by ``after``

    def before(self) -> None:
        self.old_tools = _read(self.conn, _READ_TOOLS, self.tool_keys, 2)
        self.old_runs = _read(self.conn, _READ_RUNS, self.run_ids)
        # The sessions of these runs may widen their span (and so move slot) below.
        self.session_ids |= {row[11] for row in self.old_runs.values() if row[11] is not None}
        self.session_ids = sorted(self.session_ids)
        self.old_sessions = _read(self.conn, _READ_SESSIONS, self.session_ids)
        self.old_subagents = _read(self.conn, _READ_SUBAGENTS, self.subagent_keys)

    def after(self, llm_rows: list[tuple], compaction_rows: list[tuple], replaced_llm_rows: list[tuple] = ()) -> None:
        """``replaced_llm_rows``: llm_calls rows the batch took out (a call's better line replaced them)."""
        d = self.deltas
        for row in self.old_tools.values():
            d.tool(row, -1)
        for row in _read(self.conn, _READ_TOOLS, self.tool_keys, 2).values():
            d.tool(row, +1)
        _write(self.conn, _ADD_RUN_TOOLS, d.run_tools)
        for row in self.old_runs.values():
            d.run(row, -1)
        spans = []
        new_runs = []
        self.new_runs = _read(self.conn, _READ_RUNS, self.run_ids)  # the lifecycle reads their sessions here
        for run_id, row in self.new_runs.items():
            d.run(row, +1)
            old = self.old_runs.get(run_id)
            if row[6] is not None and (old is None or old[6] is None):  # a runs row (its status) new to the batch
                new_runs.append(run_id)
            if row[11] is not None and row[9] is not None:
                spans.append((row[9], row[10], row[11]))
        if spans:
            self.conn.executemany(_SESSION_SPAN, spans)
        for row in self.old_sessions.values():
            d.session_row(row, -1)
        self.new_sessions = _read(self.conn, _READ_SESSIONS, self.session_ids)
        for row in self.new_sessions.values():
            d.session_row(row, +1)
        for row in self.old_subagents.values():
            d.subagent(row, -1)
        subagents = _read(self.conn, _READ_SUBAGENTS, self.subagent_keys)
        for row in subagents.values():
            d.subagent(row, +1)
        for row in replaced_llm_rows:
            d.llm_call(row, -1)
        for row in llm_rows:
            d.llm_call(row)
        for row in compaction_rows:
            d.compaction(row)
        _write(self.conn, _ADD_SESSION, d.session)
        _write(self.conn, _ADD_USAGE, d.usage)
        _write(self.conn, _ADD_USAGE_DAY, _by_day(d.usage))
        _write(self.conn, _ADD_TOOL_SLOT, d.tool_slot)
        _write(self.conn, _ADD_TOOL_DAY, _by_day(d.tool_slot))
        _write(self.conn, _ADD_RUN_LLM, d.run_llm)
        _write(self.conn, _ADD_SESSION_MODEL, d.session_model)
        _write(self.conn, _ADD_DURATION, d.durations)
        _write(self.conn, _ADD_COST_SOURCE, d.cost_sources)
        if new_runs:
            self.conn.execute(_RUNS_WITHOUT_CALLS, (orjson.dumps(new_runs).decode(),))
        # Only a run that gained calls can have stopped being one without, and only one that lost some
        # can have become one: every batch adds calls, few take any away.
        gained = [run_id for run_id, acc in d.run_llm.items() if acc[0] > 0]
        if gained:
            self.conn.execute(_RUNS_WITH_CALLS, (orjson.dumps(gained).decode(),))
        lost = [run_id for run_id, acc in d.run_llm.items() if acc[0] < 0]
        if lost:
            self.conn.execute(_RUNS_EMPTIED, (orjson.dumps(lost).decode(),))
        # A spawn moves its parent's family totals though no session row or total changed: the parent's
        # current instance counts as touched, so its hot view (and the ancestors' above) follows.
        moved = _family_moves(self.old_subagents, subagents)
        if moved:
            from agentledger.ledger import queries  # not at the top: queries reads this module's constants

            kin = queries.current_instances(self.conn, sorted(moved))
        else:
            kin = {}
        self.touched = set(self.session_ids) | set(d.session) | set(kin.values())
