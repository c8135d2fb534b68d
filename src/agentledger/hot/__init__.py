"""Per-session runtime state kept hot in memory and durable on disk between restarts."""
