"""agentledger: an exactly-once ledger of AI-agent gateway telemetry."""

__version__ = "0.1.0"
