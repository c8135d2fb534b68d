"""Pricing LLM calls that carry no cost of their own.

A cost the producer wrote down is kept as it is (``cost_source`` "log" or "transcript").
Otherwise the call is priced from its tokens at the date it was made: first from the
user's override file, then from the offline price history that ships with the
``genai-prices`` package (no network: its bundled snapshot only). A model found in
neither stays unpriced: counted in ``unpriced_calls``, its cost NULL, never a silent $0.

Anthropic's fast mode (usage ``speed: "fast"``) costs more than the standard speed: a fast call is
priced at fast rates, from the override's ``fast`` table, else the bundled table's fast-mode price,
else, for a model whose fast mode the table does not list but Anthropic documents, that multiple of
its standard price. A fast call on any other model stays unpriced, as does a speed nobody prices.
Web searches the provider ran for a call are charged per search on top of its tokens, at the
override's ``web_search`` price, else the bundled table's; a call with searches of unknown price
stays unpriced. A call whose inference Anthropic confined to the US (usage ``inference_geo: "us"``)
costs 1.1 times the price of its tokens; a confinement whose price is not known leaves it unpriced.
A call priced above ``MAX_CALL_COST_USD``, a cost no real call has, stays unpriced too, as a cost a log
carried above it is not kept (the ledger's 64-bit sums would overflow at some 9,200 calls at it: see units).

Token semantics: the ledger stores Anthropic's split, where ``input`` excludes cache
reads and writes. OpenAI-style usage counts cached tokens inside the prompt; decoders
bring such usage to the ledger's split with ``exclusive`` before anything is stored.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from agentledger.defaults import PRICES_FILE
from agentledger.facts import LlmCall, Tokens, UsageSnapshot
from agentledger.tomlfile import read_toml
from agentledger.units import MAX_CALL_COST_USD, PICO_PER_USD, PRICED

log = logging.getLogger(__name__)

FAST = "fast"
STANDARD = "standard"
_RATE_KEYS = ("input", "output", "cache_read", "cache_write", "cache_write_1h")
_PER_MTOK = "USD per million tokens"
_PER_K_SEARCHES = "USD per thousand searches"
# A release date after a model's name: Anthropic's -20250929, Vertex's @20250929, OpenAI's -2024-08-06.
_RELEASE_DATE = re.compile(r"[-@](?:19|20)\d\d-?[01]\d-?[0-3]\d(?!\d)")
# Fast mode where the bundled table lists no price for it: its price as a multiple of the model's
# standard one at the call's date, on every token rate (cache rates follow). Opus 4.6: "6x standard
# Opus rates", $30/$150 against $5/$25 (Anthropic's fast-mode page, platform.claude.com); Opus 4.7,
# whose fast mode ran until 2026-07-24: $30/$150 too, as sold at Anthropic's price (OpenRouter's
# claude-opus-4.7-fast, "premium 6x pricing").
_FAST_MULTIPLES = {"claude-opus-4-6": Decimal(6), "claude-opus-4-7": Decimal(6)}
# Inference confined to a geography, as a multiple of the price of the tokens (cache rates and fast
# mode included, web searches not). US-only inference ("us"), which the Claude API takes from Opus 4.6
# on (older models refuse it, and report "not_available"): 1.1x on every token price, as the Claude
# Platform on AWS's data residency page and LangChain's ChatAnthropic inference_geo reference state it.
_GEO_MULTIPLES = {"us": Decimal("1.1")}
_MTOK = Decimal(10**6)
_THOUSAND = Decimal(1000)
# The dearest price an override may give, per million tokens or per thousand searches: over ten times
# the dearest any provider lists (OpenAI's o1-pro, $600 per million output tokens; searches cost $10 to
# $50 per thousand). Anything above is a slip (a price per token or per thousand written per million,
# a digit too many), which priced one call beyond what the ledger's 64-bit pico-USD can hold.
MAX_PRICE = 10_000


def exclusive(tokens: Tokens) -> Tokens:
    """OpenAI-style usage (cached tokens counted inside input) → the ledger's split."""
    cached = tokens.cache_read + tokens.cache_write
    return Tokens(input=max(tokens.input - cached, 0), output=tokens.output, cache_read=tokens.cache_read,
                  cache_write=tokens.cache_write, cache_write_1h=tokens.cache_write_1h,
                  total=max(tokens.input, cached) + tokens.output)


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens. ``cache_write_1h`` None: hour-long writes cost twice the input.
    ``fast``: the rates of a call at Anthropic's fast speed, where the override gives them.
    ``web_search``: USD per thousand web searches, where the override gives it."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal
    cache_write_1h: Decimal | None = None
    fast: Rates | None = None
    web_search: Decimal | None = None

    def usd(self, t: Tokens) -> Decimal:
        hour = self.cache_write_1h if self.cache_write_1h is not None else 2 * self.input
        weighted = (self.input * t.input + self.output * t.output + self.cache_read * t.cache_read
                 + self.cache_write * (t.cache_write - t.cache_write_1h) + hour * t.cache_write_1h)
        return weighted / _MTOK


def _decimal(value: object, where: str, unit: str = _PER_MTOK) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"{where}: expected a non-negative number of {unit}, got {value!r}")
    if value > MAX_PRICE:
        raise ValueError(f"{where}: {value!r} {unit} is no plausible price (at most {MAX_PRICE:,}): "
                         f"give the price in {unit}")
    return Decimal(str(value))


@dataclass(frozen=True, slots=True)
class Override:
    """A user's price for a model, from ``since_ms`` on (None: for every date)."""

    since_ms: int | None
    rates: Rates


def load_overrides(path: Path) -> dict[str, list[Override]]:
    """``[prices."model-name"]`` tables with per-million ``input``, ``output``, ``cache_read``,
    ``cache_write`` (and optionally ``cache_write_1h``, a ``fast`` table of the same keys for
    calls at Anthropic's fast speed, and ``web_search`` in USD per thousand web searches); or, for a
    model whose price changed,
    ``[[prices."model-name"]]`` entries each with the ``from`` date it applies from. A call
    dated before a model's first ``from`` is priced from the bundled history. A model's name
    also prices its dated ids (see ``_matches``). A bad file, a price above ``MAX_PRICE`` among
    others, is one clear error."""
    doc = read_toml(path, "price file", PRICES_FILE, "--prices, config `prices`, $AGENTLEDGER_PRICES")
    # Anything else would be read as no override at all: a mistyped [price."m"] priced nothing, silently.
    stray = sorted(set(doc) - {"prices"})
    if stray:
        raise ValueError(f'price file {path}: unknown key {stray[0]!r}: remove it; overrides go in '
                         f'[prices."<model>"] tables')
    table = doc.get("prices", {})
    if not isinstance(table, dict):
        raise ValueError(f"price file {path}: [prices] must be a table of models")
    out = {}
    named: dict[str, str] = {}  # lower-cased key → the key as the file spells it
    for model, spec in table.items():
        where = f'price file {path}: [prices."{model}"]'
        # Keys match calls without regard to case: two spellings of one would be two prices for one
        # model, of which the last silently won.
        first = named.setdefault(model.lower(), model)
        if first != model:
            raise ValueError(f'price file {path}: [prices."{first}"] and [prices."{model}"] are one model (keys '
                             f"match without regard to case): keep one of them")
        if isinstance(spec, dict):
            entries = [_override(spec, where, dated=False)]
        elif isinstance(spec, list) and spec and all(isinstance(e, dict) for e in spec):
            entries = sorted((_override(e, f"{where} entry {i + 1}", dated=True) for i, e in enumerate(spec)),
                             key=lambda o: o.since_ms)
            starts = [o.since_ms for o in entries]
            if len(set(starts)) != len(starts):
                raise ValueError(f"{where}: two entries start on the same date")
        else:
            raise ValueError(f"{where} must be a table, or [[prices.\"{model}\"]] entries each with a `from` date")
        out[model.lower()] = entries
    return out


def _override(spec: dict, where: str, *, dated: bool) -> Override:
    since = None
    if dated:
        since = _since_ms(spec.get("from"), where)
    fast = spec.get("fast")
    if fast is not None and not isinstance(fast, dict):
        raise ValueError(f"{where}.fast must be a table of rates (input, output, ...)")
    rates = _rates(spec, where, ("fast", "web_search") + (("from",) if dated else ()))
    if fast is not None:
        rates = dataclasses.replace(rates, fast=_rates(fast, f"{where}.fast", ()))
    if "web_search" in spec:
        rates = dataclasses.replace(rates, web_search=_decimal(spec["web_search"], f"{where}.web_search",
                                                                _PER_K_SEARCHES))
    return Override(since, rates)


def _rates(spec: dict, where: str, also: tuple[str, ...]) -> Rates:
    unknown = set(spec) - set(_RATE_KEYS) - set(also)
    if unknown:
        keys = ", ".join(_RATE_KEYS + also)
        raise ValueError(f"{where}: unknown key {min(unknown)!r} (use {keys})")
    if "input" not in spec or "output" not in spec:
        raise ValueError(f"{where}: needs at least input and output")
    rates = {k: _decimal(spec[k], f"{where}.{k}") for k in _RATE_KEYS if k in spec}
    rates.setdefault("cache_read", Decimal(0))
    rates.setdefault("cache_write", rates["input"])
    return Rates(**rates)


def _since_ms(value: object, where: str) -> int:
    """A TOML date (midnight UTC) or date-time (UTC unless it says otherwise) → epoch ms."""
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    elif isinstance(value, dt.date):
        moment = dt.datetime.combine(value, dt.time(), dt.UTC)
    else:
        raise ValueError(f"{where}: needs `from`, the date the price applies from (e.g. from = 2026-10-01)")
    return int(moment.timestamp() * 1000)


class Pricer:
    """Prices calls: the override file wins, then the bundled price history, else unpriced.

    Of the overrides that match a model, the longest with a price in force at the call's date
    wins: the exact id over the model's name, and the name still over the bundled history
    before the exact id's first ``from``."""

    def __init__(self, overrides: dict[str, list[Override]] | None = None):
        self.overrides = overrides or {}
        self._bundled = _Bundled()
        self._keys: dict[str, tuple[str, ...]] = {}  # model id → the override keys that match it, longest first
        self._over_cap: set[str] = set()  # models a call of which was priced above a call's cap (warned once)
        # How each kind of fact that may come without a cost is priced here.
        self.by_fact: dict[type, Callable[[LlmCall | UsageSnapshot], None]] = {
            LlmCall: self.apply, UsageSnapshot: self.apply_snapshot}

    @classmethod
    def from_file(cls, path: Path | None) -> Pricer:
        return cls(load_overrides(path) if path is not None else None)

    def price(self, provider: str | None, model: str | None, tokens: Tokens, ts_ms: int,
              speed: str | None = None, web_searches: int = 0, inference_geo: str | None = None) -> int | None:
        """pico-USD for one call, or None when no price is known for the model at the call's speed
        (None or "standard": the standard speed), where it made web searches for its searches, or
        for the geography its inference was confined to (None: global routing); None too for a price
        above ``MAX_CALL_COST_USD``, which no real call costs."""
        if not model or speed not in (None, STANDARD, FAST):
            return None  # a speed nobody prices: its cost cannot be known
        geo = Decimal(1) if inference_geo is None else _GEO_MULTIPLES.get(inference_geo)
        if geo is None:
            return None  # a confinement whose price is not known
        rates = self._override(model, ts_ms)
        usd = self._tokens_usd(provider, model, tokens, ts_ms, speed == FAST, rates)
        if usd is not None:
            usd *= geo
        if usd is not None and web_searches:
            per_k = rates.web_search if rates is not None and rates.web_search is not None else \
                self._bundled.search_price(provider, model, ts_ms)
            usd = None if per_k is None else usd + per_k * web_searches / _THOUSAND
        if usd is None:
            return None
        if usd > MAX_CALL_COST_USD:
            # Garbage token counts, or a price meant per something else: no real call costs that much,
            # and a cost a log carried above it is refused too. Stored, it would take a few such calls
            # to overflow the ledger's 64-bit sums.
            if model not in self._over_cap:
                self._over_cap.add(model)
                log.warning("a call of %s priced at $%s, more than the $%s a call can cost: left unpriced",
                            model, f"{usd:,.2f}", f"{MAX_CALL_COST_USD:,}")
            return None
        return round(usd * PICO_PER_USD)

    def _tokens_usd(self, provider: str | None, model: str, t: Tokens, ts_ms: int, fast: bool,
                    rates: Rates | None) -> Decimal | None:
        """``rates``: the override in force for the call (``_override``), None for the bundled table's."""
        if rates is not None and (not fast or rates.fast is not None):
            return rates.fast.usd(t) if fast else rates.usd(t)
        # None: a model the history does not know (remembered there), or usage its price cannot split.
        if not fast:
            return self._bundled.usd(provider, model, t, ts_ms)
        usd = self._bundled.usd(provider, model, t, ts_ms, fast=True)
        if usd is not None:
            return usd
        multiple = next((_FAST_MULTIPLES[k] for k in _matches(model.lower(), _FAST_MULTIPLES)), None)
        if multiple is None:
            return None  # a fast call whose price nobody documents: never priced as a standard one
        standard = rates.usd(t) if rates is not None else self._bundled.usd(provider, model, t, ts_ms)
        return None if standard is None else multiple * standard

    def _override(self, model: str, ts_ms: int) -> Rates | None:
        """The override in force for the model at ``ts_ms``, the longest key's first."""
        for key in self._override_keys(model):
            rates = _in_force(self.overrides[key], ts_ms)
            if rates is not None:
                return rates
        return None

    def unmatched(self) -> list[str]:
        """The override keys no model priced so far matched: most likely a typo, which would
        otherwise leave the bundled price in place without a word."""
        return sorted(set(self.overrides).difference(*self._keys.values()))

    def _override_keys(self, model: str) -> tuple[str, ...]:
        keys = self._keys.get(model)
        if keys is None:
            keys = self._keys[model] = _matches(model.lower(), self.overrides)
        return keys

    def apply(self, fact: LlmCall) -> None:
        """Price a call that came without a cost; failed calls cost nothing and are not priced."""
        if fact.cost_pico is not None or fact.error is not None:
            return
        cost = self.price(fact.provider, fact.model, fact.tokens, fact.ts_ms, fact.speed, fact.web_searches,
                          fact.inference_geo)
        if cost is not None:
            fact.cost_pico = cost
            fact.cost_source = PRICED

    def apply_snapshot(self, fact: UsageSnapshot) -> None:
        """Price a usage snapshot that came without a cost from its tokens, under the model it names: the
        run it stands for, having no model calls, costs that (an unknown model leaves it unpriced)."""
        if fact.cost_pico is None:
            fact.cost_pico, fact.cost_source = self.snapshot_cost(fact.provider, fact.model, fact.tokens, fact.ts_ms)

    def snapshot_cost(self, provider: str | None, model: str | None, tokens: Tokens, ts_ms: int
                      ) -> tuple[int | None, str]:
        """(cost, cost_source) of a snapshot the log gave no cost: priced here from its tokens, or none known
        (the source stays the log's), at read and at reprice alike."""
        cost = self.price(provider, model, tokens, ts_ms)
        return cost, PRICED if cost is not None else "log"


def _matches(model: str, keys: Iterable[str]) -> tuple[str, ...]:
    """The keys that price ``model``, longest (the most specific) first: the id itself, and the
    model's name without the release date the producer wrote after it. The bundled table prices
    dated ids as their model too (its Anthropic names match any id they start), but a bare prefix
    would let ``claude-sonnet-4`` price ``claude-sonnet-4-5``: only a date may follow the key."""
    found = [key for key in keys
             if key == model or (model.startswith(key) and _RELEASE_DATE.match(model, len(key)))]
    return tuple(sorted(found, key=len, reverse=True))


def _in_force(entries: list[Override], ts_ms: int) -> Rates | None:
    """The override that applies at ``ts_ms``: the latest to start by then."""
    found = None
    for entry in entries:
        if entry.since_ms is not None and entry.since_ms > ts_ms:
            break
        found = entry.rates
    return found


# Prices a token-only plan can hold: per million tokens of each kind, and per thousand searches, which
# are charged apart from the tokens: web searches by the Pricer from the call's count (search_price),
# storage searches never (no log counts them).
_TOKEN_PRICES = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_1h_mtok")
_APART = frozenset({"web_searches_kcount", "storage_searches_kcount"})
# The request context genai-prices selects a model's fast-mode price variant by.
_FAST_CONTEXT = {"speed": FAST}


class _Bundled:
    """genai-prices' offline price history, with its per-call overhead paid once per price.

    genai-prices takes ~0.1 ms to price one call (it resolves and validates the price's units
    every time), which was most of a Claude Code catch-up. A price made only of token rates is
    priced here from those rates with genai-prices' rules: a cached token without a price of its
    own costs what its parent kind does (an hour-long cache write → a cache write → input), and
    a tiered rate applies as a whole once the prompt (input with its cache) passes the tier's
    start. Any other price goes through genai-prices' own calculation.

    A fast call takes the model's fast-mode price variant, as genai-prices resolves it; a model
    with none has no fast price here."""

    def __init__(self) -> None:
        self._models: dict[tuple[str | None, str], tuple | None] = {}
        self._plans: dict[int, tuple[object, tuple | None]] = {}  # id(ModelPrice) → (it, its rates)
        # (id(standard ModelPrice), ids of the fast variants in force) → (the standard price, the fast one)
        self._fast: dict[tuple, tuple[object, object]] = {}

    def search_price(self, provider: str | None, model: str, ts_ms: int) -> Decimal | None:
        """USD per thousand web searches with the model at ``ts_ms``, None where the table has no price."""
        found = self._model(provider, model)
        if found is None:
            return None
        price = getattr(found[1].get_prices(dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC)),
                        "web_searches_kcount", None)
        return price if isinstance(price, Decimal) else None

    def _model(self, provider: str | None, model: str) -> tuple | None:
        found = self._models.get((provider, model), ())
        if found == ():
            found = self._models[(provider, model)] = _find(provider, model)
        return found

    def usd(self, provider: str | None, model: str, t: Tokens, ts_ms: int, fast: bool = False) -> Decimal | None:
        found = self._model(provider, model)
        if found is None:
            return None
        provider_info, model_info = found
        when = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC)
        price = model_info.get_prices(when)
        if fast:
            price = self._fast_price(provider_info, model_info, price, when)
            if price is None:
                return None
        known = self._plans.get(id(price))
        if known is None or known[0] is not price:
            known = self._plans[id(price)] = (price, _token_plan(price))
        plan = known[1]
        if plan is None:
            return _calc(price, t)
        return _usd(plan, t)

    def _fast_price(self, provider_info, model_info, standard, when: dt.datetime):
        """The model's price at fast speed, or None when the table lists none in force at ``when``.
        As genai-prices does, a model priced through another provider's entry takes no variant."""
        if not any(model_info is m for m in provider_info.models):
            return None
        variants = tuple(id(v) for v in model_info.price_variants or ()
                         if (v.constraint is None or v.constraint.active(when))
                         and all(_FAST_CONTEXT.get(k) == value for k, value in v.when.items()))
        if not variants:
            return None
        key = (id(standard), variants)
        known = self._fast.get(key)
        if known is None or known[0] is not standard:
            known = self._fast[key] = (standard, model_info.get_prices(when, _FAST_CONTEXT))
        return known[1]


# Decoders ask for every call; the names are few, but a hostile log may hold any number.
@functools.lru_cache(maxsize=4096)
def provider_of(model: str) -> str | None:
    """The provider the bundled price table lists ``model`` under ("openai"), None for a model it does not know."""
    found = _find(None, model)
    return found[0].id if found is not None else None


def _find(provider: str | None, model: str) -> tuple | None:
    # Imported on first use: the snapshot is large, and most commands never price anything.
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    for hint in ((provider, None) if provider else (None,)):
        try:
            return snapshot.find_provider_model(model, None, hint, None)
        except LookupError:
            continue  # an unknown provider name: let the model name find its provider
    return None


def _token_plan(price) -> tuple | None:
    """The price's five token rates (each a Decimal or tiers), or None when it charges anything else."""
    fields = {name for name, value in vars(price).items() if value is not None}
    if "input_mtok" not in fields or not fields <= set(_TOKEN_PRICES) | _APART:
        return None
    return tuple(getattr(price, name) for name in _TOKEN_PRICES)


def _rate(value, prompt: int) -> Decimal | None:
    if value is None or isinstance(value, Decimal):
        return value
    for tier in reversed(value.tiers):  # the highest tier the prompt is past
        if prompt > tier.start:
            return tier.price
    return value.base


def _usd(plan: tuple, t: Tokens) -> Decimal:
    prompt = t.input + t.cache_read + t.cache_write
    inp, out, read, write, write_1h = (_rate(v, prompt) for v in plan)
    read = inp if read is None else read
    write = inp if write is None else write
    write_1h = write if write_1h is None else write_1h
    return (inp * t.input + (out or 0) * t.output + read * t.cache_read
            + write * (t.cache_write - t.cache_write_1h) + write_1h * t.cache_write_1h) / _MTOK


def _calc(price, t: Tokens) -> Decimal | None:
    """genai-prices' own calculation with the price in force (the call's date and speed)."""
    import genai_prices

    # genai-prices counts cache reads and writes inside input_tokens (the OpenAI way).
    fields = {"input_tokens": t.input + t.cache_read + t.cache_write, "output_tokens": t.output,
              "cache_read_tokens": t.cache_read, "cache_write_tokens": t.cache_write}
    if t.cache_write_1h:
        fields["cache_write_1h_tokens"] = t.cache_write_1h
        fields["cache_write_5m_tokens"] = t.cache_write - t.cache_write_1h
    try:
        return price.calc_price(genai_prices.Usage(**fields))["total_price"]
    except ValueError:
        return None  # usage the price model cannot split (e.g. more cache than input)
