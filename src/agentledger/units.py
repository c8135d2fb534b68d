"""The units the ledger counts in, apart from the facts that carry them: reads need the unit,
not the decoders' vocabulary."""

from __future__ import annotations

PICO_PER_USD = 10**12  # costs are integer pico-USD, so sums are exact however many calls add up

# A cost above this for one call is garbage: the dearest real calls cost tens of dollars. The
# ledger sums costs in 64-bit pico-USD, which 9,223 calls at this cap would take to overflow
# (ten at the million dollars this once was). It bounds a cost the log carries and one priced here.
MAX_CALL_COST_USD = 10**3

# The cost_source of a cost priced here from its tokens, the log having carried none.
PRICED = "priced"
