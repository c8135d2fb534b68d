"""Pricing calls that carry no cost: cache-token semantics, overrides, unpriced calls, repricing."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import apsw
import orjson
import pytest
from conftest import as_of_version, cli_env, cli_json, ingest, metric_counters
from hypothesis import given, settings
from hypothesis import strategies as st
from ledgerdump import rows, scalar, verify
from test_transcript_sources import (
    SESSION,
    _project,
    cc_assistant,
    cc_prompt,
)

from agentledger.facts import LlmCall, Tokens
from agentledger.ledger.db import open_writer
from agentledger.ledger.verify import rebuild_rollups
from agentledger.pricing import Pricer, exclusive, load_overrides

OCT_2026 = 1_790_812_800_000
SONNET = "claude-sonnet-4-5-20250929"


def test_bundled_prices_match_the_published_rates():
    pricer = Pricer()
    tokens = Tokens(input=100_000)  # below the 200k prompts that Anthropic prices higher
    assert pricer.price("anthropic", SONNET, tokens, OCT_2026) == 3 * 10**11
    assert pricer.price(None, "gpt-5", tokens, OCT_2026) == 125_000_000_000
    # An hour-long cache write costs twice the input; five minutes, 1.25 times.
    writes = Tokens(cache_write=200_000, cache_write_1h=100_000)
    assert pricer.price("anthropic", SONNET, writes, OCT_2026) == (6 + 3.75) * 10**11


@settings(max_examples=60, deadline=None)
@given(fresh=st.integers(0, 150_000), cached=st.integers(0, 150_000), output=st.integers(0, 20_000))
def test_openai_style_usage_costs_what_the_same_traffic_does_in_the_ledgers_split(fresh, cached, output):
    inclusive = Tokens(input=fresh + cached, output=output, cache_read=cached)
    split = exclusive(inclusive)
    assert (split.input, split.cache_read, split.total) == (fresh, cached, fresh + cached + output)
    pricer = Pricer()
    assert pricer.price("openai", "gpt-5", split, OCT_2026) == pricer.price(
        "openai", "gpt-5", Tokens(input=fresh, output=output, cache_read=cached), OCT_2026)


def _overrides(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(body)
    return path


def test_an_override_wins_over_the_table_and_an_unknown_model_stays_unpriced(tmp_path):
    path = _overrides(tmp_path, '[prices."claude-sonnet-4-5-20250929"]\ninput = 1\noutput = 2\ncache_read = 0.5\n'
                                '[prices."house-model"]\ninput = 0.1\noutput = 0.2\n')
    pricer = Pricer.from_file(path)
    t = Tokens(input=10**6, output=10**6, cache_read=10**6, cache_write=10**6)
    assert pricer.price("anthropic", SONNET, t, OCT_2026) == (1 + 2 + 0.5 + 1) * 10**12  # cache_write defaults to input
    assert pricer.price(None, "house-model", Tokens(output=10**6), OCT_2026) == 200_000_000_000
    assert pricer.price(None, "no-such-model-anywhere", t, OCT_2026) is None
    call = LlmCall(event_id=1, ts_ms=OCT_2026, kind="llm.call", source="x", model="no-such-model-anywhere",
                   tokens=t)
    pricer.apply(call)
    assert (call.cost_pico, call.cost_source) == (None, "log")
    # A cost the log carried is never replaced, even by an override.
    carried = LlmCall(event_id=2, ts_ms=OCT_2026, kind="llm.call", source="x", model=SONNET, tokens=t, cost_pico=7)
    pricer.apply(carried)
    assert carried.cost_pico == 7


@pytest.mark.parametrize("body, words", [
    ("[prices", "not valid TOML"),
    ('[prices."m"]\ninput = 1\n', "needs at least input and output"),
    ('[prices."m"]\ninput = -1\noutput = 1\n', "non-negative number"),
    ('[prices."m"]\ninput = 1\noutput = 1\ncached = 2\n', "unknown key 'cached'"),
    ('[price."m"]\ninput = 1\noutput = 1\n', "unknown key 'price'"),
    ('input = 1\n[prices."m"]\ninput = 1\noutput = 1\n', "unknown key 'input'"),
    # Keys match without regard to case: the last of two spellings used to win, silently.
    ('[prices."Claude-Sonnet-4-5"]\ninput = 1\noutput = 1\n[prices."claude-sonnet-4-5"]\ninput = 3\noutput = 15\n',
     r'\[prices."Claude-Sonnet-4-5"\] and \[prices."claude-sonnet-4-5"\] are one model \(keys match without '
     r'regard to case\): keep one of them'),
])
def test_a_bad_price_file_is_one_clear_error(tmp_path, body, words):
    with pytest.raises(ValueError, match=words):
        load_overrides(_overrides(tmp_path, body))


@pytest.mark.parametrize("given", ["--prices", "default"])
def test_a_price_file_s_unknown_table_is_refused_not_read_as_no_override(tmp_path, db, given):
    """A typo for [prices."m"] used to leave every call at its bundled price, exit 0, without a word."""
    ingest(db, tmp_path)
    env = cli_env(db)
    prices = tmp_path / "xdg-config" / "agentledger" / "prices.toml"  # the default, under $XDG_CONFIG_HOME
    prices.parent.mkdir(parents=True)
    prices.write_text('[price."claude-sonnet-4-5"]\ninput = 3\noutput = 15\n')
    flags = ["--prices", str(prices)] if given == "--prices" else []
    for command in (["reprice", *flags], ["ingest", *flags, str(tmp_path)]):
        out = subprocess.run([sys.executable, "-m", "agentledger", *command], env=env, capture_output=True,
                             text=True)
        assert out.returncode == 2 and out.stdout == "", command
        # Named with where it was named, when it was: the file beside the config is named by none.
        assert out.stderr.splitlines() == [
            f"agentledger: price file {prices}: unknown key 'price': remove it; overrides go in "
            f'[prices."<model>"] tables{" (from --prices)" if flags else ""}'], command


def test_unpriced_calls_are_flagged_then_repriced_with_an_override(tmp_path, db):
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0)
        + cc_assistant("a1", "msg_1", {"type": "text", "text": "x"}, output=1000, second=1, model="in-house-llm")
        + cc_assistant("a2", "msg_2", {"type": "text", "text": "y"}, output=10, second=2))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    env = cli_env(db)

    def usage() -> dict:
        out = subprocess.run([sys.executable, "-m", "agentledger", "usage", "--json"], env=env, capture_output=True,
                             check=True)
        return orjson.loads(out.stdout)

    before = usage()
    assert (before["llm_calls"], before["unpriced_calls"]) == (2, 1)
    assert rows(db, "SELECT model, cost_pico, cost_source FROM llm_calls WHERE cost_pico IS NULL") == [
        ("in-house-llm", None, None)]
    prices = _overrides(tmp_path, '[prices."in-house-llm"]\ninput = 1\noutput = 1000\n')
    out = subprocess.run([sys.executable, "-m", "agentledger", "reprice", "--json", "--prices", str(prices)],
                         env=env, capture_output=True, check=True)
    assert orjson.loads(out.stdout) == {"calls_checked": 2, "calls_changed": 1, "unpriced_calls": 0,
                                        "snapshots_changed": 0, "calls_given_provider": 0,
                                        "runs_given_provider": 0, "prices": str(prices), "unmatched_overrides": []}
    after = usage()
    assert after["unpriced_calls"] == 0
    # 10 input + 1000 output at 1 and 1000 USD per million; cache tokens at the override's defaults.
    added = (10 * 1 + 1000 * 1000 + 1000 * 0 + 100 * 1 + 200 * 2) / 10**6
    assert after["cost_usd"] == pytest.approx(before["cost_usd"] + added, abs=1e-9)
    assert verify(db) == []
    again = subprocess.run([sys.executable, "-m", "agentledger", "reprice", "--json", "--prices", str(prices)],
                           env=env, capture_output=True, check=True)
    assert orjson.loads(again.stdout)["calls_changed"] == 0
    assert scalar(db, "SELECT count(*) FROM llm_calls WHERE cost_source = 'priced'") == 2


def test_a_cost_that_leaves_out_unpriced_calls_is_marked_in_every_table(tmp_path, db):
    project = _project(tmp_path)

    def unknown(uuid: str) -> bytes:
        return cc_assistant(uuid, f"msg_{uuid}", {"type": "text", "text": "x"}, output=1000, second=1,
                            model="in-house-llm")

    # One session with a priced and an unpriced call, one with an unpriced call only.
    (project / f"{SESSION}.jsonl").write_bytes(cc_prompt("u1", "hi", 0) + unknown("a1") + cc_assistant(
        "a2", "msg_2", {"type": "text", "text": "y"}, output=10, second=2))
    alone = SESSION[:-1] + "2"
    (project / f"{alone}.jsonl").write_bytes((cc_prompt("v1", "hi", 0) + unknown("b1")).replace(
        SESSION.encode(), alone.encode()))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    env = cli_env(db)

    def text(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "agentledger", *args], env=env, capture_output=True, text=True,
                             check=True)
        return out.stdout

    def cost_of(out: str, name: str) -> str:
        (line,) = [line for line in out.splitlines() if line.startswith(name)]
        return line.split()[-1]

    by_model = text("costs", "--group-by", "model")
    assert cost_of(by_model, "in-house-llm") == "—*"
    assert cost_of(by_model, SONNET)[0].isdigit() and cost_of(by_model, "TOTAL").startswith("≥")
    sessions = text("sessions")
    assert cost_of(sessions, f"agent:claude-code:{alone}") == "—*"
    assert cost_of(sessions, f"agent:claude-code:{SESSION}").startswith("≥")
    assert cost_of(text("runs"), next(r for r in orjson.loads(text("runs", "--json"))
                                      if r["session_id"] == alone)["run_id"]) == "—*"
    assert cost_of(text("session", alone), "cost $") == "—*"
    assert cost_of(text("usage"), "cost usd").startswith("≥")
    for out in (by_model, sessions, text("runs"), text("session", alone), text("usage")):
        assert out.count("unpriced_calls in --json") == 1, out
    # Scripts read the number and the count, as before.
    (row,) = [r for r in orjson.loads(text("costs", "--json"))["rows"] if r["model"] == "in-house-llm"]
    assert (row["cost_usd"], row["unpriced_calls"]) == (0.0, 2)

    prices = _overrides(tmp_path, '[prices."in-house-llm"]\ninput = 1\noutput = 1000\n')
    text("reprice", "--prices", str(prices))
    by_model = text("costs", "--group-by", "model")
    assert "*" not in by_model and cost_of(by_model, "in-house-llm")[0].isdigit()


def _token_priced_models() -> list[tuple]:
    """Every (provider, model, price) of the bundled snapshot that is made only of token rates."""
    from genai_prices import data_snapshot, types

    from agentledger.pricing import _token_plan

    found = []
    for provider in data_snapshot.get_snapshot().providers:
        for model in provider.models:
            prices = [model.prices] if isinstance(model.prices, types.ModelPrice) else [c.prices for c in model.prices]
            found += [(provider, model, price) for price in prices if _token_plan(price) is not None]
    return found


TOKEN_PRICED = _token_priced_models()
TIERED = [m for m in TOKEN_PRICED if any(hasattr(v, "tiers") for v in vars(m[2]).values())]


def test_most_of_the_snapshot_is_priced_from_its_token_rates():
    assert len(TOKEN_PRICED) > 1000 and TIERED  # the fast path covers tiered prices too


@settings(max_examples=400, deadline=None)
@given(priced=st.sampled_from(TOKEN_PRICED) | st.sampled_from(TIERED),
       fresh=st.integers(0, 400_000), read=st.integers(0, 400_000), write=st.integers(0, 300_000),
       hour_share=st.floats(0, 1), output=st.integers(0, 100_000))
def test_token_rates_price_exactly_as_genai_prices_does(priced, fresh, read, write, hour_share, output):
    import genai_prices

    from agentledger.pricing import _token_plan, _usd

    provider, model, price = priced
    t = Tokens(input=fresh, output=output, cache_read=read, cache_write=write,
               cache_write_1h=int(write * hour_share))
    fields = {"input_tokens": fresh + read + write, "output_tokens": output, "cache_read_tokens": read,
              "cache_write_tokens": write}
    if t.cache_write_1h:
        fields |= {"cache_write_1h_tokens": t.cache_write_1h, "cache_write_5m_tokens": write - t.cache_write_1h}
    reference = price.calc_price(genai_prices.Usage(**fields))["total_price"]
    assert round(_usd(_token_plan(price), t) * 10**12) == round(reference * 10**12), (provider.id, model.id)


def test_priced_calls_cost_the_same_through_the_fast_path_and_genai_prices():
    import datetime as dt

    import genai_prices

    pricer = Pricer()
    t = Tokens(input=250_000, output=1_234, cache_read=10_000, cache_write=5_000, cache_write_1h=2_000)
    when = dt.datetime.fromtimestamp(OCT_2026 / 1000, tz=dt.UTC)
    for provider, model in (("anthropic", SONNET), (None, "gpt-5"), ("openai", "gpt-5-mini"),
                            ("anthropic", "claude-opus-4-1-20250805")):
        usage = genai_prices.Usage(input_tokens=265_000, output_tokens=1_234, cache_read_tokens=10_000,
                                   cache_write_tokens=5_000, cache_write_1h_tokens=2_000, cache_write_5m_tokens=3_000)
        reference = genai_prices.calc_price(usage, model, provider_id=provider, genai_request_timestamp=when)
        assert pricer.price(provider, model, t, OCT_2026) == round(reference.total_price * 10**12), model


@pytest.mark.parametrize("past", [-1, 0, 1])
def test_a_tiered_rate_starts_where_genai_prices_starts_it(past):
    import genai_prices

    from agentledger.pricing import _token_plan, _usd

    for provider, model, price in TIERED:
        start = min(t.start for v in vars(price).values() if hasattr(v, "tiers") for t in v.tiers)
        t = Tokens(input=start + past - 1000, output=500, cache_read=1000)
        usage = genai_prices.Usage(input_tokens=start + past, output_tokens=500, cache_read_tokens=1000)
        reference = price.calc_price(usage)["total_price"]
        assert round(_usd(_token_plan(price), t) * 10**12) == round(reference * 10**12), (provider.id, model.id)


def test_a_dated_override_prices_each_call_at_its_date(tmp_path):
    path = _overrides(tmp_path, f'[[prices."{SONNET}"]]\nfrom = 2026-10-01\ninput = 1\noutput = 1\n'
                                f'[[prices."{SONNET}"]]\nfrom = 2026-11-01T12:00:00Z\ninput = 2\noutput = 2\n')
    pricer = Pricer.from_file(path)
    t = Tokens(input=100_000)
    nov_1_noon = OCT_2026 + 31 * 86_400_000 + 12 * 3_600_000
    assert pricer.price("anthropic", SONNET, t, OCT_2026) == 1 * 10**11  # the first entry's first moment
    assert pricer.price("anthropic", SONNET, t, nov_1_noon - 1) == 1 * 10**11
    assert pricer.price("anthropic", SONNET, t, nov_1_noon) == 2 * 10**11
    # Before the first entry the bundled history applies: $3 per million in September 2026.
    assert pricer.price("anthropic", SONNET, t, OCT_2026 - 1) == 3 * 10**11


def test_an_override_for_the_undated_id_prices_its_dated_ids(tmp_path):
    """Claude Code records the dated id; a price written for the model's name must reach it, as
    the bundled table's does, without pricing another model whose id merely starts the same."""
    pricer = Pricer.from_file(_overrides(tmp_path, '[prices."Claude-Sonnet-4-5"]\ninput = 1\noutput = 1\n'
                                                   '[prices."gpt-4o"]\ninput = 1\noutput = 1\n'
                                                   '[prices."claude-sonnet-4"]\ninput = 7\noutput = 7\n'))
    t = Tokens(input=100_000)
    for model in (SONNET, "claude-sonnet-4-5", "claude-sonnet-4-5@20250929", "gpt-4o-2024-08-06"):
        assert pricer.price(None, model, t, OCT_2026) == 1 * 10**11, model
    # Not a dated claude-sonnet-4, nor a dated gpt-4o: the bundled prices stay.
    assert pricer.price(None, "claude-sonnet-4-5-thinking", t, OCT_2026) == 3 * 10**11
    assert pricer.price(None, "gpt-4o-mini-2024-07-18", t, OCT_2026) == Pricer().price(
        None, "gpt-4o-mini-2024-07-18", t, OCT_2026)


def test_the_longest_override_in_force_wins(tmp_path):
    pricer = Pricer.from_file(_overrides(tmp_path, f'[prices."claude-sonnet-4-5"]\ninput = 1\noutput = 1\n'
                                                   f'[[prices."{SONNET}"]]\nfrom = 2026-11-01\ninput = 2\n'
                                                   f'output = 2\n'))
    t = Tokens(input=100_000)
    nov_2026 = OCT_2026 + 31 * 86_400_000
    assert pricer.price("anthropic", SONNET, t, nov_2026) == 2 * 10**11  # the exact id over its alias
    # Before the exact id's first price the alias applies, not the bundled history.
    assert pricer.price("anthropic", SONNET, t, nov_2026 - 1) == 1 * 10**11
    assert pricer.price("anthropic", "claude-sonnet-4-5-20991231", t, nov_2026) == 1 * 10**11


def test_an_undated_override_prices_dated_calls_at_ingest_and_at_reprice_and_a_stray_one_is_reported(tmp_path, db):
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0) + cc_assistant("a1", "msg_1", {"type": "text", "text": "x"}, output=10**6, second=1))
    prices = _overrides(tmp_path, '[prices."claude-sonnet-4-5"]\ninput = 30\noutput = 150\n')
    overridden = 10 * 30 + 10**6 * 150 + 1000 * 0 + 100 * 30 + 200 * 60  # pico-USD: USD per million × tokens
    ingest(db, tmp_path / "claude", fmt="claude-code", pricer=Pricer.from_file(prices))
    assert scalar(db, "SELECT cost_pico FROM llm_calls") == overridden * 10**6

    fresh = tmp_path / "fresh.db"
    ingest(fresh, tmp_path / "claude", fmt="claude-code", pricer=Pricer())
    assert scalar(fresh, "SELECT cost_pico FROM llm_calls") != overridden * 10**6
    both = _overrides(tmp_path, '[prices."claude-sonnet-4-5"]\ninput = 30\noutput = 150\n'
                                '[prices."claude-sonet-4-5"]\ninput = 1\noutput = 1\n')
    out = subprocess.run([sys.executable, "-m", "agentledger", "reprice", "--json", "--prices", str(both)],
                         env=cli_env(fresh), capture_output=True, check=True)
    assert orjson.loads(out.stdout) == {"calls_checked": 1, "calls_changed": 1, "unpriced_calls": 0,
                                        "snapshots_changed": 0, "calls_given_provider": 0,
                                        "runs_given_provider": 0, "prices": str(both), "unmatched_overrides": ["claude-sonet-4-5"]}
    assert scalar(fresh, "SELECT cost_pico FROM llm_calls") == overridden * 10**6
    text = subprocess.run([sys.executable, "-m", "agentledger", "reprice", "--prices", str(both)],
                          env=cli_env(fresh), capture_output=True, check=True, text=True)
    assert [line for line in text.stderr.splitlines() if "claude-sonet-4-5" in line] == [
        'agentledger: price override "claude-sonet-4-5" matched no call to price']
    assert "claude-sonnet-4-5\"" not in text.stderr


@pytest.mark.parametrize("body, words", [
    ('[[prices."m"]]\ninput = 1\noutput = 1\n', "needs `from`"),
    ('[[prices."m"]]\nfrom = "yesterday"\ninput = 1\noutput = 1\n', "needs `from`"),
    ('[[prices."m"]]\nfrom = 2026-10-01\ninput = 1\noutput = 1\n[[prices."m"]]\nfrom = 2026-10-01\ninput = 2\n'
     'output = 2\n', "same date"),
    ('[prices."m"]\nfrom = 2026-10-01\ninput = 1\noutput = 1\n', "unknown key 'from'"),
    ('[prices]\nm = 3\n', "must be a table, or"),
])
def test_a_bad_dated_override_is_one_clear_error(tmp_path, body, words):
    with pytest.raises(ValueError, match=words):
        load_overrides(_overrides(tmp_path, body))


def test_metrics_after_a_reprice_count_each_call_once(tmp_path):
    """A call priced by `reprice` moves from the unpriced series to the priced one: a counter held
    at its highest across the restart (as metric floors kept on disk once did) counted it in both."""
    import urllib.request

    from logwriter import LogDir, event
    from prometheus_client.parser import text_string_to_metric_families
    from served import serve
    from serving import write_config

    logs = LogDir(tmp_path / "logs")
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "acme", "model": "acme-unknown-9",
                                      "delta": {"input": 1000, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                                                "total": 1000}}))
    config = write_config(tmp_path, logs.root, extra="")

    def calls() -> dict:
        with urllib.request.urlopen(served.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return {s.labels["priced"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "agentledger_llm_calls_total" and s.labels["model"] == "acme-unknown-9"
                and s.labels["outcome"] == "ok"}

    served = serve(config)
    try:
        assert calls() == {"true": 0, "false": 1}
    finally:
        served.stop()
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."acme-unknown-9"]\ninput = 1.0\noutput = 1.0\n')
    subprocess.run([sys.executable, "-m", "agentledger", "--config", str(config), "reprice", "--prices", str(prices)],
                   env=cli_env(tmp_path / "ledger.db"), check=True, capture_output=True)
    served = serve(config)
    try:
        assert calls() == {"true": 1, "false": 0}
    finally:
        served.stop()


def test_a_reprice_cut_short_still_ends_the_metric_floors_epoch(tmp_path, db):
    # The repricing count was bumped in the last transaction, the one that finds nothing left: a reprice
    # stopped after its first committed batch had moved calls between series under the same epoch.
    from agentledger.ledger.db import open_writer
    from agentledger.ledger.reprice import reprice
    from agentledger.ledger.writer import LedgerWriter

    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(cc_prompt("u1", "hi", 0) + b"".join(
        cc_assistant(f"a{n}", f"msg_{n}", {"type": "text", "text": "x"}, output=10, second=n, model="in-house-llm")
        for n in range(1, 4)))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    priced = Pricer(load_overrides(_overrides(tmp_path, '[prices."in-house-llm"]\ninput = 1\noutput = 1\n')))
    calls = []

    class Stops:
        def price(self, *args):
            calls.append(args)
            if len(calls) > 1:
                raise KeyboardInterrupt
            return priced.price(*args)

    conn = open_writer(db)
    try:
        with pytest.raises(KeyboardInterrupt):
            reprice(LedgerWriter(conn), Stops(), batch=1)
    finally:
        conn.close()
    assert scalar(db, "SELECT count(*) FROM llm_calls WHERE cost_pico IS NOT NULL") == 1
    assert scalar(db, "SELECT repricings FROM ledger_position") == 1


MARCH_1_2026 = 1_772_323_200_000  # 2026-03-01: Opus 4.6 still priced higher past 200k prompt tokens


# Sonnet, 10 input and 100k output tokens and no cache unless told: a call's cost is its rates' plain sum.
_claude_call = partial(cc_assistant, block={"type": "text", "text": "x"}, model=SONNET, output=100_000, usage={})


def test_fast_mode_is_priced_at_fast_rates_and_a_fast_call_of_unknown_price_stays_unpriced(tmp_path, db):
    """Claude Code writes usage.speed "fast" for a call in fast mode, which Anthropic bills at a multiple of
    the standard price: 6x for Opus 4.6 ($30/$150 per million), $10/$50 for Opus 5 (the bundled table's
    fast-mode price). Priced at the standard rate such a call cost a sixth of its bill, and a cost gate
    let it through; a fast call on a model whose fast price nobody knows is unpriced, not standard."""
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0)
        + _claude_call("a1", "msg_1", model="claude-opus-4-6", second=1, usage={"speed": "fast"})
        + _claude_call("a2", "msg_2", model="claude-opus-5", second=2, usage={"speed": "fast"})
        + _claude_call("a3", "msg_3", model="claude-opus-4-6", second=3, usage={"speed": "standard"})
        + _claude_call("a4", "msg_4", second=4, usage={"speed": "fast"}))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    opus_46_fast = (10 * 30 + 100_000 * 150) / 10**6
    opus_5_fast = (10 * 10 + 100_000 * 50) / 10**6
    opus_46 = (10 * 5 + 100_000 * 25) / 10**6
    usage = cli_json(db, "usage")
    assert (usage["llm_calls"], usage["unpriced_calls"]) == (4, 1)
    assert usage["cost_usd"] == pytest.approx(opus_46_fast + opus_5_fast + opus_46, abs=1e-9)
    by_model = {r["model"]: r for r in cli_json(db, "costs", "--group-by", "model")["rows"]}
    assert by_model["claude-opus-4-6"]["cost_usd"] == pytest.approx(opus_46_fast + opus_46, abs=1e-9)
    assert by_model["claude-opus-5"]["cost_usd"] == pytest.approx(opus_5_fast, abs=1e-9)
    assert (by_model[SONNET]["cost_usd"], by_model[SONNET]["unpriced_calls"]) == (0.0, 1)

    # The ledger keeps each call's speed: a reprice prices the fast calls as fast ones again, and an
    # override's fast rates price the one nobody knew.
    assert cli_json(db, "reprice")["calls_changed"] == 0
    assert cli_json(db, "usage")["cost_usd"] == usage["cost_usd"]
    prices = _overrides(tmp_path, '[prices."claude-sonnet-4-5"]\ninput = 3\noutput = 15\n'
                                  '[prices."claude-sonnet-4-5".fast]\ninput = 18\noutput = 90\n')
    assert cli_json(db, "reprice", "--prices", str(prices))["unpriced_calls"] == 0
    after = cli_json(db, "usage")
    assert after["unpriced_calls"] == 0
    assert after["cost_usd"] == pytest.approx(usage["cost_usd"] + (10 * 18 + 100_000 * 90) / 10**6, abs=1e-9)
    assert verify(db) == []


def test_fast_rates_come_from_the_table_else_from_anthropic_s_documented_multiple():
    pricer = Pricer()
    out = Tokens(output=10**6)
    # Opus 4.6 and 4.7: six times the standard price, the table listing no fast price for them.
    for model in ("claude-opus-4-6", "claude-opus-4-7"):
        assert pricer.price("anthropic", model, out, OCT_2026, "fast") == 150 * 10**12, model
        assert pricer.price("anthropic", model, out, OCT_2026, "standard") == 25 * 10**12, model
    # Early on Opus 4.6 charged more past 200k prompt tokens, and fast mode six times that: $60/$225.
    long = Tokens(input=250_000, output=100_000)
    assert pricer.price("anthropic", "claude-opus-4-6", long, MARCH_1_2026, "fast") == (15 + 22.5) * 10**12
    # The table's own fast-mode prices: Opus 4.8 and Opus 5 at $10/$50, Opus 5.5 at $8/$40.
    for model, rate in (("claude-opus-4-8", 50), ("claude-opus-5", 50), ("claude-opus-5-5", 40)):
        assert pricer.price("anthropic", model, out, OCT_2026, "fast") == rate * 10**12, model
    # No fast price known, or a speed nobody prices: unpriced, never the standard price.
    assert pricer.price("anthropic", SONNET, out, OCT_2026, "fast") is None
    assert pricer.price("anthropic", "claude-opus-4-6", out, OCT_2026, "turbo") is None


def test_an_override_without_fast_rates_leaves_fast_calls_to_the_known_fast_price(tmp_path):
    pricer = Pricer.from_file(_overrides(tmp_path, '[prices."claude-opus-4-6"]\ninput = 4\noutput = 20\n'
                                                   '[prices."claude-opus-5"]\ninput = 4\noutput = 20\n'
                                                   '[prices."claude-opus-4-8"]\ninput = 4\noutput = 20\n'
                                                   '[prices."claude-opus-4-8".fast]\ninput = 7\noutput = 30\n'))
    out = Tokens(output=10**6)
    assert pricer.price("anthropic", "claude-opus-4-6", out, OCT_2026, "fast") == 6 * 20 * 10**12  # 6x the override
    assert pricer.price("anthropic", "claude-opus-5", out, OCT_2026, "fast") == 50 * 10**12  # the table's fast price
    assert pricer.price("anthropic", "claude-opus-4-8", out, OCT_2026, "fast") == 30 * 10**12  # the override's own
    assert pricer.price("anthropic", "claude-opus-4-8", out, OCT_2026) == 20 * 10**12
    with pytest.raises(ValueError, match=r"\.fast: unknown key 'cached'"):
        load_overrides(_overrides(tmp_path, '[prices."m"]\ninput = 1\noutput = 1\n[prices."m".fast]\ncached = 1\n'))


def test_web_searches_are_charged_per_search_once_per_call_and_fetches_only_by_their_tokens(tmp_path, db):
    """Anthropic charges $10 per thousand web searches on top of the tokens, and nothing for a web fetch
    beyond its tokens. Claude Code's usage counts both (server_tool_use); the searches went unbilled.
    A response streamed over several lines repeats its count on each: it is charged once."""
    project = _project(tmp_path)
    tools = {"server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 2}}
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0)
        + _claude_call("a1", "msg_1", second=1, output=50, usage=tools)  # streamed: the same call, twice
        + _claude_call("a2", "msg_1", second=2, usage=tools)
        + _claude_call("a3", "msg_2", second=3, usage={"server_tool_use": {"web_search_requests": 0,
                                                                           "web_fetch_requests": 4}})
        + _claude_call("a4", "msg_3", model="claude-3-haiku-20240307", second=4,
                       usage={"server_tool_use": {"web_search_requests": 1}}))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    sonnet = (10 * 3 + 100_000 * 15) / 10**6
    usage = cli_json(db, "usage")
    # The Haiku 3 call searched, and the table has no search price for that model: unpriced, not free.
    assert (usage["llm_calls"], usage["unpriced_calls"]) == (3, 1)
    assert usage["cost_usd"] == pytest.approx(sonnet + 3 * 10 / 1000 + sonnet, abs=1e-9)
    assert cli_json(db, "costs", "--group-by", "session")["total"]["cost_usd"] == usage["cost_usd"]
    assert rows(db, "SELECT web_searches FROM llm_calls ORDER BY ts_ms") == [(3,), (0,), (1,)]

    # A reprice charges the stored searches again, and an override's search price wins.
    assert cli_json(db, "reprice")["calls_changed"] == 0
    prices = _overrides(tmp_path, '[prices."claude-3-haiku"]\ninput = 0.25\noutput = 1.25\nweb_search = 25\n'
                                  '[prices."claude-sonnet-4-5"]\ninput = 3\noutput = 15\nweb_search = 5\n')
    assert cli_json(db, "reprice", "--prices", str(prices))["unpriced_calls"] == 0
    haiku = (10 * 0.25 + 100_000 * 1.25) / 10**6 + 25 / 1000
    assert cli_json(db, "usage")["cost_usd"] == pytest.approx(2 * sonnet + 3 * 5 / 1000 + haiku, abs=1e-9)
    assert verify(db) == []


def test_web_searches_are_priced_from_the_table_of_the_call_s_date(tmp_path):
    pricer = Pricer()
    none = Tokens()
    assert pricer.price("anthropic", SONNET, none, OCT_2026, web_searches=50) == 50 * 10**12 // 100  # $0.50
    assert pricer.price("anthropic", "claude-opus-4-6", none, OCT_2026, "fast", 2) == 2 * 10**10  # not 6x
    assert pricer.price("anthropic", "claude-3-haiku-20240307", none, OCT_2026, web_searches=1) is None
    assert pricer.price("anthropic", "claude-3-haiku-20240307", none, OCT_2026) == 0
    with pytest.raises(ValueError, match="USD per thousand searches"):
        load_overrides(_overrides(tmp_path, '[prices."m"]\ninput = 1\noutput = 1\nweb_search = -1\n'))


def test_an_old_transcript_s_cost_is_kept_once_per_call_and_never_repriced(tmp_path, db):
    """Claude Code transcripts written before costUSD went (2025) carry the producer's cost of each response.
    It is the log's word: kept (cost_source "log"), not priced from the tokens nor repriced, and counted once
    for a response streamed over several lines. A cost that is no plausible one is priced instead."""
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0)
        + _claude_call("a1", "msg_1", second=1, output=40, costUSD=0.05)  # one response, two lines
        + _claude_call("a2", "msg_1", second=2, costUSD=0.05)
        + _claude_call("a3", "msg_2", second=3, costUSD=5000)  # past any call's cost: garbage
        + _claude_call("a4", "msg_3", second=4, costUSD=0))  # a model the producer could not price
    ingest(db, tmp_path / "claude", fmt="claude-code")
    sonnet = (10 * 3 + 100_000 * 15) / 10**6
    usage = cli_json(db, "usage")
    assert (usage["llm_calls"], usage["unpriced_calls"]) == (3, 0)
    assert usage["cost_usd"] == pytest.approx(0.05 + 2 * sonnet, abs=1e-9)
    assert rows(db, "SELECT cost_pico, cost_source FROM llm_calls ORDER BY ts_ms")[0] == (5 * 10**10, "log")

    prices = _overrides(tmp_path, '[prices."claude-sonnet-4-5"]\ninput = 1\noutput = 1\n')
    assert cli_json(db, "reprice", "--prices", str(prices))["calls_checked"] == 2
    assert cli_json(db, "usage")["cost_usd"] == pytest.approx(0.05 + 2 * (10 + 100_000) / 10**6, abs=1e-9)


def test_a_telemetry_call_logged_at_zero_beside_tokens_is_priced_or_counted_unpriced(tmp_path, db):
    """OpenClaw's telemetry writes costUsd 0 for a model it cannot price, as its transcripts do: such a call
    was shown as $0 and counted priced. It is priced from its tokens, or, with no price, counted unpriced."""
    from logwriter import LogDir, event

    logs = LogDir(tmp_path / "logs")
    delta = {"input": 100_000, "output": 2000, "total": 102_000}
    for n, (provider, model) in enumerate((("anthropic", "claude-sonnet-4-5"), ("local", "llama-local-xyz")), 1):
        logs.append(event(n, "llm.call", {"callIndex": n, "provider": provider, "model": model, "delta": delta,
                                          "costUsd": 0}))
    ingest(db, logs.root)
    rows = {r["model"]: r for r in cli_json(db, "costs", "--group-by", "model")["rows"]}
    assert rows["claude-sonnet-4-5"]["cost_usd"] == pytest.approx((100_000 * 3 + 2000 * 15) / 10**6, abs=1e-9)
    assert rows["claude-sonnet-4-5"]["unpriced_calls"] == 0
    assert (rows["llama-local-xyz"]["cost_usd"], rows["llama-local-xyz"]["unpriced_calls"]) == (0, 1)
    assert cli_json(db, "usage")["unpriced_calls"] == 1
    assert verify(db) == []


def _as_an_older_version_stored(db: Path, version: int, *edits: str) -> None:
    """The ledger as an older agentledger left it: taken back to schema ``version``, its rows edited to what
    that version stored (``edits``), its rollups refilled from them; then opened by this version, which
    migrates it."""
    conn = apsw.Connection(str(db))
    try:
        as_of_version(conn, version)
        for edit in edits:
            conn.execute(edit)
        rebuild_rollups(conn)
    finally:
        conn.close()
    open_writer(db).close()


def _reads_as_afresh(db: Path, fresh: Path) -> None:
    """``db`` answers as a fresh read of the same logs (``fresh``) does, and verifies clean."""
    for query in (("usage",), ("costs", "--group-by", "provider"), ("costs", "--group-by", "model"), ("sessions",),
                  ("runs",)):
        assert cli_json(db, *query) == cli_json(fresh, *query), query
    # A refill keeps a sum of $0 (a call that used nothing) as a series at 0 that a read adding row by row never
    # started: the same spend.
    assert {k: v for k, v in metric_counters(db).items() if v} == {k: v for k, v in metric_counters(fresh).items() if v}
    assert verify(db) == []


def test_a_telemetry_zero_beside_tokens_an_older_version_kept_as_0_is_unpriced_then_repriced(tmp_path, db):
    """Before a costUsd of 0 beside tokens was read as no cost, calls and usage snapshots so logged were kept as
    the log's $0, which reprice never touches. The upgrade makes them unpriced, as a read of them now leaves a
    model the table lacks, and reprice prices the ones it knows: the ledger then reads as a fresh one."""
    from logwriter import LogDir, event

    logs = LogDir(tmp_path / "logs")
    delta = {"input": 100_000, "output": 2000, "total": 102_000}
    models = (("anthropic", "claude-sonnet-4-5"), ("local", "llama-local-xyz"))
    for n, (provider, model) in enumerate(models, 1):
        logs.append(event(n, "llm.call", {"callIndex": n, "provider": provider, "model": model, "delta": delta,
                                          "costUsd": 0}))
    failed = orjson.loads(event(3, "llm.call", {"callIndex": 3, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                                "delta": delta, "costUsd": 0}))
    logs.append(orjson.dumps(failed | {"error": {"message": "overloaded"}}) + b"\n")
    logs.append(event(4, "llm.call", {"callIndex": 4, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                      "delta": {}, "costUsd": 0}))  # used nothing: $0 it is
    for n, (provider, model) in zip((10, 20), models):  # runs without calls, of a snapshot's cost
        run = {"model": model, "provider": provider}
        logs.append(event(n, "run.start", run, session="s2", run=f"R{n}") + event(n + 1, "run.end", run, session="s2",
                                                                                    run=f"R{n}")
                    + event(n + 2, "usage.snapshot", run | {"usage": delta, "costUsd": 0}, session="s2"))
    ingest(db, logs.root)
    old = tmp_path / "old.db"
    ingest(old, logs.root)
    _as_an_older_version_stored(
        old, 33, "UPDATE llm_calls SET cost_pico = 0, cost_source = 'log' WHERE cost_pico IS NULL OR cost_source = 'priced'",
        "UPDATE usage_snapshots SET cost_pico = 0, cost_source = 'log' WHERE cost_pico IS NULL OR cost_source = 'priced'")
    # Unpriced, not $0: the two calls and two runs with tokens; the failed call costs nothing, as ever.
    assert (cli_json(old, "usage")["cost_usd"], cli_json(old, "usage")["unpriced_calls"]) == (0, 4)
    assert verify(old) == []
    assert cli_json(old, "reprice")["unpriced_calls"] == 2  # the model the table does not know: a call, a run
    _reads_as_afresh(old, db)


def test_reprice_gives_a_gateway_s_calls_an_older_version_left_without_a_provider_the_table_s(tmp_path, db):
    """Claude Code's calls of another provider's model through a gateway, and the runs they ended, had no
    provider before the price table named it: reprice names it, and every total by provider, /metrics'
    labels among them, reads as a fresh read of the same transcript. A model the table does not know keeps none."""
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0) + b"".join(
            cc_assistant(f"a{i}", f"msg_{i}", {"type": "text", "text": "Done."}, output=100, second=i, model=model,
                         stop="end_turn" if model == "gpt-5" else None)
            for i, model in enumerate((SONNET, "gpt-5-mini", "gpt-5"), 1))
        + cc_prompt("u2", "again", 10) + cc_assistant("a4", "msg_4", {"type": "text", "text": "Done."}, output=100,
                                                      second=11, model="our-own-model", stop="end_turn"))
    ingest(db, tmp_path / "claude", fmt="claude-code")
    old = tmp_path / "old.db"
    ingest(old, tmp_path / "claude", fmt="claude-code")
    _as_an_older_version_stored(old, 33, "UPDATE llm_calls SET provider = NULL WHERE model NOT LIKE 'claude%'",
                                "UPDATE runs SET provider = NULL WHERE model NOT LIKE 'claude%'")
    assert {r["provider"]: r["llm_calls"] for r in cli_json(old, "costs", "--group-by", "provider")["rows"]} == {
        None: 3, "anthropic": 1}
    out = cli_json(old, "reprice")
    assert (out["calls_given_provider"], out["runs_given_provider"]) == (2, 1)
    _reads_as_afresh(old, db)
    assert {r["provider"]: r["llm_calls"] for r in cli_json(old, "costs", "--group-by", "provider")["rows"]} == {
        None: 1, "anthropic": 1, "openai": 2}
    assert cli_json(old, "reprice")["calls_given_provider"] == 0


def test_us_only_inference_costs_a_tenth_more_on_its_tokens(tmp_path, db):
    """Anthropic bills a call it ran in the US only (usage.inference_geo "us", which the Claude API takes
    from Opus 4.6 on) at 1.1 times the price of its tokens, fast mode included and web searches not.
    "global" is the default routing and "not_available" a model without the setting: both standard."""
    project = _project(tmp_path)
    search = {"server_tool_use": {"web_search_requests": 2}}
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0)
        + _claude_call("a1", "msg_1", model="claude-opus-4-6", second=1, usage={"inference_geo": "us"} | search)
        + _claude_call("a2", "msg_2", model="claude-opus-4-6", second=2, usage={"inference_geo": "global"})
        + _claude_call("a3", "msg_3", second=3, usage={"inference_geo": "not_available"})
        + _claude_call("a4", "msg_4", model="claude-opus-4-6", second=4,
                       usage={"inference_geo": "us", "speed": "fast"})
        + _claude_call("a5", "msg_5", model="claude-opus-4-6", second=5,
                       usage={"inference_geo": "eu"}))  # a price no one knows
    ingest(db, tmp_path / "claude", fmt="claude-code")
    opus = (10 * 5 + 100_000 * 25) / 10**6
    sonnet = (10 * 3 + 100_000 * 15) / 10**6
    usage = cli_json(db, "usage")
    assert (usage["llm_calls"], usage["unpriced_calls"]) == (5, 1)
    assert usage["cost_usd"] == pytest.approx(1.1 * opus + 2 * 10 / 1000 + opus + sonnet + 1.1 * 6 * opus, abs=1e-9)
    assert rows(db, "SELECT inference_geo FROM llm_calls ORDER BY ts_ms") == [
        ("us",), (None,), (None,), ("us",), ("eu",)]
    assert cli_json(db, "reprice")["calls_changed"] == 0
    assert cli_json(db, "usage")["cost_usd"] == usage["cost_usd"]


@pytest.mark.parametrize("body, key, unit", [
    ('[prices."m"]\ninput = 100000000\noutput = 1\n', 'm"].input', "USD per million tokens"),
    ('[prices."m"]\ninput = 1\noutput = 1\n[prices."m".fast]\ninput = 1\noutput = 1e7\n', 'm"].fast.output',
     "USD per million tokens"),
    ('[[prices."m"]]\nfrom = 2026-01-01\ninput = 1\noutput = 1\ncache_write_1h = 20000\n',
     'entry 1.cache_write_1h', "USD per million tokens"),
    ('[prices."m"]\ninput = 1\noutput = 1\nweb_search = 1e9\n', 'm"].web_search', "USD per thousand searches"),
])
def test_an_implausible_price_is_refused_when_the_file_is_read(tmp_path, body, key, unit):
    with pytest.raises(ValueError, match=f"{re.escape(key)}: .* {unit} is no plausible price "
                                         rf"\(at most 10,000\): give the price in {unit}"):
        load_overrides(_overrides(tmp_path, body))
    # The dearest prices any provider lists are well within the bound.
    load_overrides(_overrides(tmp_path, '[prices."o1-pro"]\ninput = 150\noutput = 600\nweb_search = 50\n'
                                        '[prices."o1-pro".fast]\ninput = 1500\noutput = 6000\n'))


def test_a_price_too_high_to_store_stops_every_command_and_loses_no_call(tmp_path, db):
    """$100 million per million input tokens priced one call past what a 64-bit pico-USD cost holds:
    `reprice` died with an OverflowError traceback, `ingest` and `serve` turned the calls into rejects
    (their tokens lost for good, the checkpoint past them) and `verify` failed on integer overflow."""
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(cc_prompt("u1", "hi", 0) + _claude_call("a1", "msg_1", second=1))
    bad = _overrides(tmp_path, '[prices."claude-sonnet-4-5"]\ninput = 100000000\noutput = 15\n')
    env = cli_env(db)
    refusal = [f'agentledger: price file {bad}: [prices."claude-sonnet-4-5"].input: 100000000 USD per million '
               f"tokens is no plausible price (at most 10,000): give the price in USD per million tokens (from --prices)"]

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "agentledger", *args], env=env, capture_output=True,
                              text=True, timeout=timeout)

    source = f"claude-code={tmp_path / 'claude'}"
    for command in (["ingest", "--prices", str(bad), "--source", source],
                    ["serve", "--no-demo", "--listen", "127.0.0.1:0", "--prices", str(bad), "--source", source]):
        out = run(*command)
        assert (out.returncode, out.stdout, out.stderr.splitlines()) == (2, "", refusal), command
        assert not db.exists() or scalar(db, "SELECT count(*) FROM files") == 0, command
    assert run("ingest", "--source", source).returncode == 0
    before = cli_json(db, "usage")
    assert (before["llm_calls"], before["unpriced_calls"], before["rejected_lines"]) == (1, 0, 0)
    out = run("reprice", "--prices", str(bad))
    assert (out.returncode, out.stdout, out.stderr.splitlines()) == (2, "", refusal)
    assert cli_json(db, "usage") == before
    assert run("verify").returncode == 0


def test_a_call_priced_above_a_call_s_cap_stays_unpriced_never_past_what_the_ledger_can_sum():
    from decimal import Decimal

    from agentledger.pricing import Override, Rates

    dear = Pricer.from_file(None)
    # Bundled: a billion output tokens (the decoders' cap) of Sonnet would cost $15,000.
    assert dear.price("anthropic", SONNET, Tokens(output=10**9), OCT_2026) is None
    assert dear.price("anthropic", SONNET, Tokens(output=10**6), OCT_2026) == 15 * 10**12
    # Whatever the rates: no cost past a call's cap, so none past a 64-bit integer either.
    huge = Rates(input=Decimal(10**15), output=Decimal(10**15), cache_read=Decimal(0), cache_write=Decimal(0))
    pricer = Pricer({"m": [Override(None, huge)]})
    assert pricer.price(None, "m", Tokens(input=10**9, output=10**9), OCT_2026) is None
    assert pricer.price(None, "m", Tokens(), OCT_2026) == 0


def test_a_call_priced_above_a_call_s_cap_is_kept_unpriced_at_ingest_and_at_reprice(tmp_path, db):
    """A priced cost above the $1,000 a logged cost may be is no cost: kept with its tokens, unpriced."""
    project = _project(tmp_path)
    (project / f"{SESSION}.jsonl").write_bytes(
        cc_prompt("u1", "hi", 0) + _claude_call("a1", "msg_1", second=1, output=200_000)
        + _claude_call("a2", "msg_2", second=2, output=50_000))
    dear = _overrides(tmp_path, '[prices."claude-sonnet-4-5"]\ninput = 1\noutput = 9000\n')
    env = cli_env(db)
    out = subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--prices", str(dear),
                          "--source", f"claude-code={tmp_path / 'claude'}"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "claude-sonnet-4-5-20250929 priced at $1,800.00, more than the $1,000 a call can cost" in out.stderr
    usage = cli_json(db, "usage")
    assert (usage["llm_calls"], usage["unpriced_calls"], usage["rejected_lines"]) == (2, 1, 0)
    assert usage["output_tokens"] == 250_000
    assert usage["cost_usd"] == pytest.approx((10 * 1 + 50_000 * 9000) / 10**6, abs=1e-9)
    # Priced from the bundled table first, then repriced at the dear override: it leaves the priced calls.
    other = tmp_path / "other.db"
    ingest(other, tmp_path / "claude", fmt="claude-code")
    assert cli_json(other, "usage")["unpriced_calls"] == 0
    assert cli_json(other, "reprice", "--prices", str(dear)) == {"calls_checked": 2, "calls_changed": 2,
                                                             "unpriced_calls": 1, "snapshots_changed": 0,
                                                             "calls_given_provider": 0, "runs_given_provider": 0,
                                                             "prices": str(dear),
                                                             "unmatched_overrides": []}
    again = cli_json(other, "usage")
    keys = ("llm_calls", "unpriced_calls", "output_tokens", "cost_usd")
    assert [again[k] for k in keys] == [usage[k] for k in keys]
    assert verify(other) == []


def test_a_price_file_that_is_not_utf8_is_one_line_naming_it(tmp_path, db):
    prices = tmp_path / "prices.toml"
    prices.write_bytes('# Preise für Hausmodelle\n[prices."m"]\ninput = 1\noutput = 1\n'.encode("latin-1"))
    out = subprocess.run([sys.executable, "-m", "agentledger", "ingest", "--prices", str(prices), str(tmp_path)],
                         env=cli_env(db), capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr.splitlines()) == (2, "", [
        f"agentledger: price file {prices} is not UTF-8 text (byte 0xfc at offset 10): save it as UTF-8, "
        "as TOML requires (from --prices)"])


def test_serve_and_reprice_read_the_price_file_beside_their_config(tmp_path):
    """A deployment's config is /etc/agentledger/config.toml, where its prices.toml goes too. The service
    read $HOME/.config/agentledger/prices.toml instead (/var/lib/agentledger/.config under the unit), so a
    `reprice --prices X` priced the old calls from X while the restarted service priced new ones from the
    bundled table."""
    from served import Served, count, wait_for

    project = _project(tmp_path)
    transcript = project / f"{SESSION}.jsonl"
    transcript.write_bytes(cc_prompt("u1", "hi", 0) + _claude_call("a1", "msg_1", model="in-house-llm", second=1))
    etc = tmp_path / "etc"
    etc.mkdir()
    daemon = Served.on(etc, tmp_path / "claude", fmt="claude-code")  # its config: etc/config.toml
    env = cli_env(daemon.db)

    def calls() -> list[tuple]:
        return rows(daemon.db, "SELECT model, cost_pico, cost_source FROM llm_calls ORDER BY ts_ms")

    def reprice(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "agentledger", "--config", str(daemon.config), "reprice",
                               "--json", *flags], env=env, capture_output=True, text=True)

    # No price file beside the config: the service starts all the same, with the bundled table alone.
    daemon.start()
    wait_for(lambda: count(daemon.db, "SELECT count(*) FROM llm_calls") == 1)
    assert daemon.stop() == 0
    assert calls() == [("in-house-llm", None, None)]
    shown = subprocess.run([sys.executable, "-m", "agentledger", "--config", str(daemon.config), "config", "show"],
                           env=env, capture_output=True, text=True, check=True).stdout
    assert "\n# prices: not set (" in shown

    prices = _overrides(etc, '[prices."in-house-llm"]\ninput = 1\noutput = 2\n')
    out = reprice()
    assert out.returncode == 0 and out.stderr == ""
    assert orjson.loads(out.stdout) == {"calls_checked": 1, "calls_changed": 1, "unpriced_calls": 0,
                                        "snapshots_changed": 0, "calls_given_provider": 0,
                                        "runs_given_provider": 0, "prices": str(prices), "unmatched_overrides": []}
    each = (10 * 1 + 100_000 * 2) * 10**6
    transcript.write_bytes(transcript.read_bytes() + _claude_call("a2", "msg_2", model="in-house-llm", second=2))
    daemon.start()
    wait_for(lambda: count(daemon.db, "SELECT count(*) FROM llm_calls") == 2)
    assert daemon.stop() == 0
    assert calls() == [("in-house-llm", each, "priced")] * 2

    # A price file other than the configuration's is the operator's slip: said, and what to do.
    other = _overrides(tmp_path, '[prices."in-house-llm"]\ninput = 1\noutput = 2\n')
    out = reprice("--prices", str(other))
    assert out.returncode == 0 and orjson.loads(out.stdout)["calls_changed"] == 0
    assert out.stderr.splitlines() == [
        f"agentledger: --prices {other} is not the configuration's price file ({prices}), which serve and ingest "
        f"price new calls from: copy it to {prices}, or set `prices` in the config to it"]
    assert reprice("--prices", str(prices)).stderr == ""
    # Without a price file in the configuration, it names where the configuration would find one.
    prices.unlink()
    assert reprice("--prices", str(other)).stderr.splitlines() == [
        f"agentledger: --prices {other} is not the configuration's price file (none: the bundled table alone), "
        f"which serve and ingest price new calls from: copy it to {prices}, or set `prices` in the config to it"]
