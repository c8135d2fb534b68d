"""The units the ledger counts in, apart from the facts that carry them: reads need the unit,
not the decoders' vocabulary."""

from __future__ import annotations

PICO_PER_USD = 10**12  # costs are integer pico-USD, so sums are exact however many calls add up
