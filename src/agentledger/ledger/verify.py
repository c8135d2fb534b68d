"""Proof that the materialized rollups equal a recomputation from the base rows.

The recomputing SQL here is the definition of each rollup; the triggers in
schema/0002_rollups.sql are only a fast way of keeping it up to date.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import apsw
import orjson

from agentledger.ledger.rollups import DURATION_BOUNDS_MS, NEW_SERIES_EPOCH, RUN_SESSION, advance_position
from agentledger.regular import open_regular
from agentledger.tail.identity import fingerprint, holds_checkpoint
from agentledger.units import PRICED

# What llm_calls and runs rows contribute to every rollup that counts them, summed over a
# group of rows. Queries use the same sums for the partial slots at a window's edges.
# A call with no known cost: neither the log's nor a price table's (a failed call costs nothing).
UNPRICED = "cost_pico IS NULL AND error IS NULL"
LLM_ROW_SUMS = f"""count(*) AS llm_calls, coalesce(sum(error IS NOT NULL), 0) AS llm_errors,
    coalesce(sum(input_tokens), 0) AS input_tokens, coalesce(sum(output_tokens), 0) AS output_tokens,
    coalesce(sum(cache_read_tokens), 0) AS cache_read_tokens,
    coalesce(sum(cache_write_tokens), 0) AS cache_write_tokens, coalesce(sum(total_tokens), 0) AS total_tokens,
    coalesce(sum(coalesce(cost_pico, 0)), 0) AS cost_pico,
    coalesce(sum({UNPRICED}), 0) AS unpriced_calls"""
RUN_ROW_SUMS = """count(*) AS runs, coalesce(sum(status = 'running'), 0) AS runs_running,
    coalesce(sum(status = 'ok'), 0) AS runs_ok, coalesce(sum(status = 'error'), 0) AS runs_error,
    coalesce(sum(status = 'interrupted'), 0) AS runs_interrupted"""
LLM_COLUMNS = ("llm_calls", "llm_errors", "input_tokens", "output_tokens", "cache_read_tokens",
               "cache_write_tokens", "total_tokens", "cost_pico", "unpriced_calls")
RUN_COLUMNS = ("runs", "runs_running", "runs_ok", "runs_error", "runs_interrupted")
_COUNT_COLUMNS = ("sessions", "subagent_sessions", "compactions", "subagents")
SUBAGENT_KEY = "(coalesce(session_key, '') LIKE 'agent:%:subagent:%')"
# The session a tool call (tc) counts in: its own (a side branch's, once named), else its run's: the runs
# row's (r), else the one the run's events name (a), as for a run no run.start or run.end told.
TOOL_SESSION = f"coalesce(tc.session_id, {RUN_SESSION})"
TOOL_RUNS = "LEFT JOIN runs AS r ON r.run_id = tc.run_id LEFT JOIN run_activity AS a ON a.run_id = tc.run_id"


# Runs that produced no per-call cost fall back to the run-total cost of their usage snapshot. A
# snapshot ``u`` names no run. It is of the run of its session begun last at or before it (of two begun
# at once, the greater id), when no more than a minute after that run's end: the producer writes it about
# at the end. But the gateway may write a run's snapshot a moment after the session's next run began; the
# run.end of the run a snapshot is of says the same usage totals. So a snapshot whose totals the end of
# the run begun just before says, and the end of the run begun last does not (it has not ended, or said
# others), is of the run before. Without that evidence the run begun last keeps it. Each snapshot is of
# one run at most (SNAPSHOT_OWNER), so its cost never counts twice. A run read without its start (the log
# began mid-run) began its reported duration before its end.
def _began(run: str) -> str:
    return f"coalesce({run}.started_ms, {run}.ended_ms - {run}.duration_ms, {run}.ended_ms)"


def _last(run: str) -> str:
    """The latest time a snapshot of the run may have."""
    return f"coalesce({run}.ended_ms, {run}.started_ms) + 60000"


def _said_by(run: str) -> str:
    """Whether the run's end said the snapshot's usage totals."""
    return f"(u.total_tokens > 0 AND {run}.total_tokens = u.total_tokens)"


def _begun_last(k: int) -> str:
    """The ``k`` runs of the snapshot's session begun last at or before it, latest first: a probe of
    runs_by_session_start, and of its NULLs for the (few) runs without a start."""
    return f"""
    SELECT * FROM (
        SELECT n.run_id, n.started_ms AS began, {_last("n")} AS last_ms, n.total_tokens, n.end_rank FROM runs AS n
        WHERE n.session_id = u.session_id AND n.started_ms <= u.ts_ms ORDER BY n.started_ms DESC, n.run_id DESC
        LIMIT {k})
    UNION ALL
    SELECT n.run_id, {_began("n")}, {_last("n")}, n.total_tokens, n.end_rank FROM runs AS n
    WHERE n.session_id = u.session_id AND n.started_ms IS NULL AND {_began("n")} <= u.ts_ms
    ORDER BY began DESC, run_id DESC LIMIT {k}"""


# The run snapshot ``u`` is of, or NULL: of the two begun last, the later one whose end says its totals,
# else the one begun last.
SNAPSHOT_OWNER = f"""coalesce(
    (SELECT o.run_id FROM ({_begun_last(2)}) AS o WHERE u.ts_ms <= o.last_ms AND {_said_by("o")}
     ORDER BY o.began DESC, o.run_id DESC LIMIT 1),
    (SELECT o.run_id FROM ({_begun_last(1)}) AS o WHERE u.ts_ms <= o.last_ms))"""
# Whether SNAPSHOT_OWNER of ``u`` is settled: every run it is chosen from has ended. Until then an end still to
# be read may change it (an end widens its run's span, and may say the snapshot's totals), as may the end of a
# run whose start the log lost, when no run of the session had begun at the snapshot.
SNAPSHOT_OWNER_SETTLED = f"(SELECT min(o.end_rank > 0) FROM ({_begun_last(2)}) AS o)"
# Whether snapshot ``u`` is of run ``r``. What the snapshots' index finds from the run first (the
# snapshots in its span), then what rules most of them out at the cost of a probe: a run begun after r
# and before the snapshot leaves r only a snapshot whose totals r's end says.
SNAPSHOT_OF_RUN = (
    f"u.session_id = r.session_id AND u.ts_ms BETWEEN {_began('r')} AND {_last('r')} "
    f"AND ({_said_by('r')} OR NOT EXISTS (SELECT 1 FROM runs AS n WHERE n.session_id = r.session_id "
    f"AND n.started_ms > {_began('r')} AND n.started_ms <= u.ts_ms)) "
    f"AND r.run_id = {SNAPSHOT_OWNER}"
)


# The runs without model calls of the session instances listed in parameter 1 (a JSON list), each session's
# found through its runs: never a walk of every run without calls, which a ledger of old telemetry is full of.
SESSION_RUNS_WITHOUT_CALLS = ("json_each(?1) AS j CROSS JOIN runs AS r ON r.session_id = j.value "
                              "CROSS JOIN runs_without_calls AS w ON w.run_id = r.run_id")


# What a run without model calls falls back to, named as llm_calls names the same sums (LLM_COLUMNS): its
# usage snapshot's tokens by kind, its cost, and whether that cost is unknown (one unpriced call).
FALLBACK_COLUMNS = LLM_COLUMNS[2:9]
FALLBACK_SUMS = ", ".join(f"coalesce(sum({c}), 0)" for c in FALLBACK_COLUMNS)
# Of a session's fallbacks, the cost priced here (the rest is the log's): what /metrics tells apart.
PRICED_SUM = "coalesce(sum(priced_pico), 0)"


# The usage snapshot a run without model calls falls back to: the one of the highest cost of those of the
# run (a snapshot is cumulative), then the most tokens, then the latest, so that ties, and snapshots that
# carry no cost, pick the same one whatever order they were read in.
RUN_SNAPSHOT = (f"(SELECT u.id FROM usage_snapshots AS u WHERE {SNAPSHOT_OF_RUN} "
                "ORDER BY u.cost_pico DESC, u.total_tokens DESC, u.ts_ms DESC, u.event_id DESC LIMIT 1)")


def snapshot_unpriced(snapshot: str) -> str:
    """1 when the run falling back to ``snapshot`` counts tokens at no known cost, else 0: it counts as one
    unpriced call, so that its tokens never show as $0 silently."""
    return f"iif({snapshot}.cost_pico IS NULL AND {snapshot}.total_tokens > 0, 1, 0)"


def snapshot_fallback(runs: str) -> str:
    """The tokens and cost each run of ``runs`` (a FROM clause naming runs ``r`` that have no model calls)
    falls back to, from its usage snapshot (RUN_SNAPSHOT): a row per run that has one. The model and
    provider are the run's, else the snapshot's; a snapshot read before its kinds were kept has its total
    alone. ``cost_source`` says where the cost came from (the log's, or priced here from the tokens), and
    ``priced_pico`` is the cost priced here."""
    return f"""
SELECT r.run_id, r.session_id, r.agent_id, coalesce(r.model, u.model) AS model,
       coalesce(r.provider, u.provider) AS provider, coalesce(r.started_ms, r.ended_ms) AS ts_ms,
       u.cost_pico AS cost_pico, coalesce(u.input_tokens, 0) AS input_tokens,
       coalesce(u.output_tokens, 0) AS output_tokens, coalesce(u.cache_read_tokens, 0) AS cache_read_tokens,
       coalesce(u.cache_write_tokens, 0) AS cache_write_tokens, u.total_tokens AS total_tokens,
       {snapshot_unpriced("u")} AS unpriced_calls, u.cost_source AS cost_source,
       iif(u.cost_source = '{PRICED}', u.cost_pico, 0) AS priced_pico
FROM {runs}
CROSS JOIN usage_snapshots AS u ON u.id = {RUN_SNAPSHOT}
"""


def _z(alias: str, columns: tuple[str, ...]) -> str:
    return ", ".join(f"coalesce({alias}.{c}, 0)" for c in columns)


@dataclass(frozen=True, slots=True)
class Rollup:
    table: str
    keys: tuple[str, ...]
    values: tuple[str, ...]
    recompute: str  # SELECT keys..., values... from the base rows


def _daily(rollup: Rollup) -> Rollup:
    """The same rollup per UTC day: its recomputation summed by day (key ``slot_ms`` = day start)."""
    names = ", ".join(rollup.keys + rollup.values)
    rest = ", ".join(rollup.keys[1:])
    sums = ", ".join(f"sum({v})" for v in rollup.values)
    groups = ", ".join(str(i + 1) for i in range(len(rollup.keys)))
    return Rollup(
        rollup.table.replace("_slots", "_days"), rollup.keys, rollup.values,
        f"WITH s({names}) AS ({rollup.recompute}) "
        f"SELECT slot_ms - slot_ms % 86400000, {rest}, {sums} FROM s GROUP BY {groups}",
    )


def _bucket_of(column: str) -> str:
    """SQL for rollups.duration_bucket: the index of the first bound ``column`` is within."""
    whens = " ".join(f"WHEN {column} <= {b} THEN {i}" for i, b in enumerate(DURATION_BOUNDS_MS))
    return f"CASE {whens} ELSE {len(DURATION_BOUNDS_MS)} END"


_BASE_ROLLUPS = (
    Rollup(
        "duration_buckets", ("kind", "name_a", "name_b", "bucket"), ("calls", "duration_ms"),
        f"""
        SELECT 'llm', coalesce(provider, ''), coalesce(model, ''), {_bucket_of("duration_ms")}, count(*),
               sum(duration_ms)
        FROM llm_calls WHERE duration_ms IS NOT NULL GROUP BY 1, 2, 3, 4
        UNION ALL
        SELECT 'tool', coalesce(tool_name, ''), '', {_bucket_of("duration_ms")}, count(*), sum(duration_ms)
        FROM tool_calls WHERE duration_ms IS NOT NULL GROUP BY 1, 2, 3, 4
        """,
    ),
    Rollup(
        "session_totals", ("session_id",), LLM_COLUMNS + ("runs", "tool_calls", "tool_errors"),
        f"""
        WITH l AS (SELECT session_id, {LLM_ROW_SUMS} FROM llm_calls WHERE session_id IS NOT NULL GROUP BY session_id),
        r AS (SELECT session_id, count(*) AS runs FROM runs WHERE session_id IS NOT NULL GROUP BY session_id),
        t AS (SELECT {TOOL_SESSION} AS session_id, count(*) AS tool_calls, sum(tc.status = 'error') AS tool_errors
              FROM tool_calls AS tc {TOOL_RUNS}
              WHERE {TOOL_SESSION} IS NOT NULL GROUP BY 1),
        k AS (SELECT session_id FROM l UNION SELECT session_id FROM r UNION SELECT session_id FROM t)
        SELECT k.session_id, {_z("l", LLM_COLUMNS)}, {_z("r", ("runs",))}, {_z("t", ("tool_calls", "tool_errors"))}
        FROM k LEFT JOIN l USING (session_id) LEFT JOIN r USING (session_id) LEFT JOIN t USING (session_id)
        """,
    ),
    Rollup(
        "run_tool_totals", ("run_id",), ("tool_calls", "tool_errors"),
        "SELECT run_id, count(*), sum(status = 'error') FROM tool_calls GROUP BY run_id",
    ),
    Rollup(
        "run_llm_totals", ("run_id",), LLM_COLUMNS,
        f"SELECT run_id, {LLM_ROW_SUMS} FROM llm_calls WHERE run_id IS NOT NULL GROUP BY run_id",
    ),
    Rollup(
        "session_model_totals", ("session_id", "provider", "model"), LLM_COLUMNS,
        f"""SELECT session_id, coalesce(provider, ''), coalesce(model, ''), {LLM_ROW_SUMS} FROM llm_calls
            WHERE session_id IS NOT NULL GROUP BY 1, 2, 3""",
    ),
    Rollup(
        "usage_slots", ("slot_ms", "agent_id", "provider", "model"), LLM_COLUMNS + RUN_COLUMNS + _COUNT_COLUMNS,
        f"""
        WITH l AS (SELECT ts_ms - ts_ms % 900000 AS slot_ms, coalesce(agent_id, '') AS agent_id,
                          coalesce(provider, '') AS provider, coalesce(model, '') AS model, {LLM_ROW_SUMS}
                   FROM llm_calls GROUP BY 1, 2, 3, 4),
        r AS (SELECT s - s % 900000 AS slot_ms, coalesce(agent_id, '') AS agent_id,
                     coalesce(provider, '') AS provider, coalesce(model, '') AS model, {RUN_ROW_SUMS}
              FROM (SELECT *, coalesce(started_ms, ended_ms) AS s FROM runs) WHERE s IS NOT NULL
              GROUP BY 1, 2, 3, 4),
        s AS (SELECT s - s % 900000 AS slot_ms, coalesce(agent_id, '') AS agent_id, '' AS provider, '' AS model,
                     sum(NOT {SUBAGENT_KEY}) AS sessions, sum({SUBAGENT_KEY}) AS subagent_sessions
              FROM (SELECT *, coalesce(started_ms, first_ms) AS s FROM sessions) GROUP BY 1, 2),
        c AS (SELECT ts_ms - ts_ms % 900000 AS slot_ms, coalesce(agent_id, '') AS agent_id, '' AS provider,
                     '' AS model, count(*) AS compactions
              FROM compactions WHERE phase = 'start' GROUP BY 1, 2),
        a AS (SELECT t - t % 900000 AS slot_ms, coalesce(child_agent_id, '') AS agent_id, '' AS provider,
                     '' AS model, count(*) AS subagents
              FROM (SELECT *, coalesce(spawned_ms, ended_ms) AS t FROM subagents) WHERE t IS NOT NULL GROUP BY 1, 2),
        k AS (SELECT slot_ms, agent_id, provider, model FROM l
              UNION SELECT slot_ms, agent_id, provider, model FROM r
              UNION SELECT slot_ms, agent_id, provider, model FROM s
              UNION SELECT slot_ms, agent_id, provider, model FROM c
              UNION SELECT slot_ms, agent_id, provider, model FROM a)
        SELECT k.slot_ms, k.agent_id, k.provider, k.model, {_z("l", LLM_COLUMNS)}, {_z("r", RUN_COLUMNS)},
               {_z("s", ("sessions", "subagent_sessions"))}, {_z("c", ("compactions",))}, {_z("a", ("subagents",))}
        FROM k LEFT JOIN l USING (slot_ms, agent_id, provider, model)
               LEFT JOIN r USING (slot_ms, agent_id, provider, model)
               LEFT JOIN s USING (slot_ms, agent_id, provider, model)
               LEFT JOIN c USING (slot_ms, agent_id, provider, model)
               LEFT JOIN a USING (slot_ms, agent_id, provider, model)
        """,
    ),
    Rollup(
        "runs_without_calls", ("run_id",), ("present",),
        "SELECT run_id, 1 FROM runs WHERE run_id NOT IN (SELECT run_id FROM llm_calls WHERE run_id IS NOT NULL)",
    ),
    Rollup(
        "tool_slots", ("slot_ms", "agent_id", "tool_name"), ("calls", "errors", "duration_ms", "timed_calls"),
        """
        SELECT s - s % 900000, coalesce(agent_id, ''), coalesce(tool_name, ''), count(*), sum(status = 'error'),
               sum(coalesce(duration_ms, 0)), count(duration_ms)
        FROM (SELECT *, coalesce(started_ms, ended_ms) AS s FROM tool_calls) WHERE s IS NOT NULL
        GROUP BY 1, 2, 3
        """,
    ),
)


# Spend by where its cost came from, what /metrics serves by cost_source (a call's cost_source: the log's,
# a transcript's, or priced here). A run without model calls costs what its usage snapshot says, in every
# total: a cost the log wrote down, so the log's, or, where it wrote none, the snapshot's tokens priced here.
# Kept per session instance too, with the snapshots' tokens (session_fallback_costs): a batch recomputes the
# fallbacks of the sessions it
# changed, and moves the totals by the difference. Runs without calls are those no llm_calls row names
# (runs_without_calls).
_FALLBACK_RUNS = snapshot_fallback(
    "(SELECT * FROM runs WHERE run_id NOT IN (SELECT run_id FROM llm_calls WHERE run_id IS NOT NULL)) AS r")
_COST_ROLLUPS = (
    Rollup(
        "session_fallback_costs", ("session_id", "provider", "model"), FALLBACK_COLUMNS + ("priced_pico",),
        f"""SELECT session_id, coalesce(provider, ''), coalesce(model, ''), {FALLBACK_SUMS}, {PRICED_SUM}
            FROM ({_FALLBACK_RUNS}) GROUP BY 1, 2, 3""",
    ),
    Rollup(
        "cost_source_totals", ("provider", "model", "cost_source"), ("cost_pico",),
        f"""SELECT provider, model, cost_source, sum(cost_pico) FROM (
                SELECT coalesce(provider, '') AS provider, coalesce(model, '') AS model, cost_source, cost_pico
                FROM llm_calls WHERE cost_pico IS NOT NULL
                UNION ALL
                SELECT coalesce(provider, ''), coalesce(model, ''), cost_source, cost_pico FROM ({_FALLBACK_RUNS})
                WHERE cost_pico IS NOT NULL)
            GROUP BY 1, 2, 3""",
    ),
)


def _session_ids(where: str) -> str:
    """sessionKey ↔ sessionId: an instance holds its key from its start until the next instance starts."""
    return f"""
    SELECT session_id, session_key, coalesce(started_ms, first_ms) AS valid_from_ms,
           lead(coalesce(started_ms, first_ms)) OVER (PARTITION BY session_key
                                                      ORDER BY coalesce(started_ms, first_ms), session_id)
    FROM sessions WHERE session_key IS NOT NULL AND {where}
    """


def attributed_session(key: str, ts: str) -> str:
    """The instance of session key ``key`` at time ``ts`` (SQL expressions): the latest started by
    then, else the key's first."""
    return f"""coalesce(
        (SELECT m.session_id FROM session_ids AS m WHERE m.session_key = {key} AND m.valid_from_ms <= {ts}
         ORDER BY m.valid_from_ms DESC, m.session_id DESC LIMIT 1),
        (SELECT m.session_id FROM session_ids AS m WHERE m.session_key = {key}
         ORDER BY m.valid_from_ms, m.session_id LIMIT 1))"""


# A compaction's size after it, when its end event does not say: the context at the session's next
# model call, looked for within the hour (a compaction happens just before a model call).
NEXT_CONTEXT_MS = 3_600_000
_NEXT_CONTEXT = f"""(SELECT l.context_tokens FROM llm_calls AS l
    WHERE l.ts_ms BETWEEN p.ended_ms AND p.ended_ms + {NEXT_CONTEXT_MS} AND l.session_key = p.session_key
      AND l.context_tokens IS NOT NULL ORDER BY l.ts_ms LIMIT 1)"""


def _compaction_pairs(where: str) -> str:
    """Compaction events paired per session key in time order: a start with the end right after it."""
    return f"""
    WITH e AS (
        SELECT session_key, agent_id, ts_ms, phase, message_count, compacting_count, token_count, compacted_count,
               lag(phase) OVER w AS prev_phase, lead(phase) OVER w AS next_phase, lead(ts_ms) OVER w AS next_ts,
               lead(agent_id) OVER w AS next_agent, lead(message_count) OVER w AS next_messages,
               lead(compacted_count) OVER w AS next_compacted, lead(token_count) OVER w AS next_tokens
        FROM compactions WHERE session_key IS NOT NULL AND {where}
        WINDOW w AS (PARTITION BY session_key ORDER BY ts_ms, phase DESC, event_id)
    ),
    p AS (
        SELECT session_key, ts_ms AS started_ms, iif(next_phase = 'end', next_ts, NULL) AS ended_ms,
               coalesce(agent_id, iif(next_phase = 'end', next_agent, NULL)) AS agent_id,
               message_count AS messages_before, iif(next_phase = 'end', next_messages, NULL) AS messages_after,
               compacting_count, iif(next_phase = 'end', next_compacted, NULL) AS compacted_count,
               token_count AS tokens_before, iif(next_phase = 'end', next_tokens, NULL) AS end_tokens
        FROM e WHERE phase = 'start'
        UNION ALL
        SELECT session_key, NULL, ts_ms, agent_id, NULL, message_count, NULL, compacted_count, NULL, token_count
        FROM e WHERE phase = 'end' AND prev_phase IS NOT 'start'
    )
    SELECT p.session_key, p.started_ms, p.ended_ms,
           {attributed_session("p.session_key", "coalesce(p.started_ms, p.ended_ms)")}, p.agent_id,
           p.messages_before, p.messages_after, p.compacting_count, p.compacted_count, p.tokens_before,
           coalesce(p.end_tokens, {_NEXT_CONTEXT})
    FROM p
    """


# Tables derived per session key, rebuilt key by key as the rows they come from change.
_BY_SESSION_KEY = {"session_ids": _session_ids, "compaction_pairs": _compaction_pairs}
_SESSION_ROLLUPS = (
    Rollup("session_ids", ("session_id",), ("session_key", "valid_from_ms", "valid_until_ms"), _session_ids("1")),
    Rollup("compaction_pairs", ("session_key", "started_ms", "ended_ms"),
           ("session_id", "agent_id", "messages_before", "messages_after", "compacting_count", "compacted_count",
            "tokens_before", "tokens_after"), _compaction_pairs("1")),
)
ROLLUPS = (_BASE_ROLLUPS + tuple(_daily(r) for r in _BASE_ROLLUPS if r.table.endswith("_slots"))
           + _COST_ROLLUPS + _SESSION_ROLLUPS)


# Per table: where the rows that a change at some time can affect begin, and which column says so.
# An instance's interval ends where the next starts, so the suffix starts at the previous instance
# (none: the changed one is the key's first, and every earlier time falls back to it). A pairing is
# settled before the last start at or before the change.
_SUFFIX = {
    "session_ids": ("SELECT max(valid_from_ms) FROM session_ids WHERE session_key = ?1 AND valid_from_ms < ?2",
                    "coalesce(started_ms, first_ms)", "valid_from_ms"),
    "compaction_pairs": (("SELECT coalesce(max(ts_ms), ?2) FROM compactions WHERE session_key = ?1 "
                          "AND phase = 'start' AND ts_ms <= ?2"), "ts_ms", "coalesce(started_ms, ended_ms)"),
}


def rebuild_keys(conn: apsw.Connection, table: str, since: dict[str, int | None]) -> set[str]:
    """Recompute a table derived per session key (session_ids, compaction_pairs) for these keys, from
    the given time on (None: all of it). Returns the keys that were recomputed whole."""
    rollup = next(r for r in ROLLUPS if r.table == table)
    columns = ", ".join(rollup.keys + rollup.values)
    start_sql, source_time, stored_time = _SUFFIX[table]
    whole = {key for key, ts in since.items() if ts is None}
    for key, ts in sorted(since.items()):
        if ts is not None:
            ts = conn.execute(start_sql, (key, ts)).fetchall()[0][0]
            if ts is None:
                whole.add(key)
            else:
                conn.execute(f"DELETE FROM {table} WHERE session_key = ?1 AND {stored_time} >= ?2", (key, ts))
                conn.execute(f"INSERT INTO {table} ({columns}) "
                             f"{_BY_SESSION_KEY[table](f'session_key = ?1 AND {source_time} >= ?2')}", (key, ts))
    if whole:  # new keys are most of a catch-up's: all of them in one statement each
        keys = orjson.dumps(sorted(whole)).decode()
        in_keys = "session_key IN (SELECT value FROM json_each(?1))"
        conn.execute(f"DELETE FROM {table} WHERE {in_keys}", (keys,))
        conn.execute(f"INSERT INTO {table} ({columns}) {_BY_SESSION_KEY[table](in_keys)}", (keys,))
    return whole


@dataclass(frozen=True, slots=True)
class Difference:
    table: str
    key: tuple
    stored: tuple | None
    recomputed: tuple | None

    def describe(self) -> str:
        key = ", ".join(str(k) for k in self.key)
        return f"{self.table} [{key}]: stored {self.stored}, recomputed {self.recomputed}"


def _rows(conn: apsw.Connection, sql: str, nkeys: int) -> dict[tuple, tuple]:
    out = {}
    for row in conn.execute(sql):
        values = tuple(row[nkeys:])
        if any(values):  # a slot emptied by later changes is the same as no slot
            out[tuple(row[:nkeys])] = values
    return out


def check_rollups(conn: apsw.Connection) -> list[Difference]:
    diffs = []
    for r in ROLLUPS:
        stored = _rows(conn, f"SELECT {', '.join(r.keys + r.values)} FROM {r.table}", len(r.keys))
        fresh = _rows(conn, r.recompute, len(r.keys))
        for key in sorted(stored.keys() | fresh.keys(), key=repr):
            if stored.get(key) != fresh.get(key):
                diffs.append(Difference(r.table, key, stored.get(key), fresh.get(key)))
    return diffs


def check_file(conn: apsw.Connection) -> str | None:
    """What SQLite finds malformed in the ledger's file, in a few words; None when nothing: damage where no
    rollup's recomputation reads (an index, a table's other pages) is told too. Its integrity check without
    the costly comparison of every index with its table (quick_check), a fraction of the rollups' time."""
    found = [line for (text,) in conn.execute("PRAGMA quick_check") for line in text.splitlines()
             if not line.startswith("***")]  # "*** in database main ***" heads a database's findings
    if found == ["ok"]:
        return None
    return f"{found[0]}" + (f", and {len(found) - 1} more findings" if len(found) > 1 else "")


def check_checkpoints(conn: apsw.Connection) -> tuple[list[str], list[str]]:
    """Every file still on disk as it was read is read up to a line boundary. Returns the problems, and
    the files changed since their checkpoint as the tailer finds them changed: truncated, replaced, or
    written again from the same first line (logrotate's copytruncate leaves any of them). The next
    catch-up reads such a file anew, so it is no problem of the ledger's, only told."""
    problems, changed = [], []
    for path, dev, ino, fp, offset, tail_len, tail_hash in conn.execute(
        "SELECT path, dev, ino, fingerprint, offset, tail_len, tail_hash FROM files "
        "WHERE status IN ('live', 'rotated') AND offset > 0 ORDER BY path"
    ):
        try:
            fd = open_regular(path)
        except OSError:
            continue
        if fd is None:  # no longer the file read: the next scan tells what became of it
            continue
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (dev, ino):
                continue  # renamed away: the next scan finds it by its first line
            if fingerprint(fd) != fp:
                changed.append(f"{path}: holds another first line than the one read to {offset} (truncated or "
                               "replaced since): the next catch-up reads it as a new file")
            elif st.st_size < offset:
                changed.append(f"{path}: truncated since its checkpoint {offset} (now {st.st_size} bytes): the "
                               "next catch-up reads it again from its start")
            elif os.pread(fd, 1, offset - 1) != b"\n":
                problems.append(f"{path}: checkpoint {offset} is not on a line boundary")
            elif not holds_checkpoint(fd, offset, tail_len, tail_hash):
                changed.append(f"{path}: rewritten since its checkpoint {offset} (the line read last is no longer "
                               "before it): the next catch-up reads it again from its start")
        finally:
            os.close(fd)
    return problems, changed


def rebuild_rollups(conn: apsw.Connection, tables: tuple[str, ...] | None = None) -> None:
    """Recompute every rollup from the base rows (for a ledger that predates them, or repair).

    Rollups whose table a later migration creates are left to that migration."""
    existing = {name for (name,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    for r in ROLLUPS:
        if r.table not in existing or (tables is not None and r.table not in tables):
            continue
        conn.execute(f"DELETE FROM {r.table}")
        conn.execute(f"INSERT INTO {r.table} ({', '.join(r.keys + r.values)}) {r.recompute}")


# Every session marked changed at the repair's position, just taken: the hot views kept of any of them are rebuilt.
_ALL_SESSIONS_CHANGED = """
INSERT INTO session_changes (session_id, seq, mark)
SELECT s.session_id, p.seq, p.mark FROM sessions AS s, ledger_position AS p WHERE true
ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, mark = excluded.mark
"""


def rebuild_rollups_as_a_change(conn: apsw.Connection, tables: tuple[str, ...] | None = None) -> None:
    """Recompute rollups (``rebuild_rollups``) as a change of the ledger like any batch: it takes the next
    position, and every session is marked changed at it, so that hot session views kept from before
    (``serve``'s state dir) are rebuilt rather than trusted at its next start."""
    rebuild_rollups(conn, tables)
    advance_position(conn, set())
    conn.execute(_ALL_SESSIONS_CHANGED)
    # A new epoch for the metric series, as a reprice takes: the highest values `serve` kept of the former
    # sums (metric-floors.json) would otherwise hide the new ones until the ledger passed them.
    conn.execute(NEW_SERIES_EPOCH)


def repair_rollups(conn: apsw.Connection) -> list[Difference]:
    """Rebuild every rollup from the base rows if any differs from its recomputation, in one
    transaction, as a change of the ledger (``rebuild_rollups_as_a_change``). Returns the differences
    found; with none, nothing is written."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        diffs = check_rollups(conn)
        if diffs:
            rebuild_rollups_as_a_change(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return diffs
