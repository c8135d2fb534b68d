"""Following append-only JSONL files: discovery, identity, complete-line reading."""
