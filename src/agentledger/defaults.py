"""Built-in defaults of the configuration, and the input formats a source may name.

The machinery that uses them (tailer, lifecycle, reconcile, retention, decoders) reads them
from here, and so does the configuration, without importing any of that machinery: a query
command validates its configuration and never loads the writer.
"""

from __future__ import annotations

FORMATS = ("oc-telemetry", "oc-transcript", "claude-code")
PRICES_FILE = "prices.toml"  # the price file a config file's directory holds

DEFAULT_MAX_LINE = 32 * 1024 * 1024  # bytes; a longer line is rejected without being held in memory
# The first bytes of a line a reject record keeps, and all a decoder sees of an over-long one to tell
# whether it would have skipped it.
HEAD_BYTES = 200
# A line up to max_line is held in memory whole, and the bound is a 64-bit integer to SQLite.
MAX_MAX_LINE = 1 << 30
# Series per label dimension on /metrics; SQLite's LIMIT takes it as a 64-bit integer, which a larger
# number overflowed on every scrape.
MAX_TOP_N = 10_000
DEFAULT_IDLE_S = 1800  # a log silent this long: its gateway restarted
DEFAULT_GRACE_S = 600  # open longer than this past the last sign of life: interrupted
DEFAULT_RAW_DAYS = 30  # raw rows older than this are pruned
# Longer ages reach before 1970, where the ledger holds nothing; a bound keeps the horizon a date.
MAX_RAW_DAYS = 36_500
# Ten years: no grace, idle time or pause is longer. The ledger counts time in 64-bit
# milliseconds, which a wait of 10**20 seconds overflowed.
MAX_WAIT_S = 10 * 366 * 86_400
