"""The ledger: the single SQLite writer, its schema and its read queries."""
