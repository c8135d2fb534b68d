-- Durations of model calls and tool calls in histogram buckets, kept by the writer like every
-- rollup, so /metrics serves the OpenTelemetry GenAI duration histograms without scanning calls.
-- (The migration fills it from the rows.)
CREATE TABLE duration_buckets (
    kind        TEXT NOT NULL,     -- 'llm' | 'tool'
    name_a      TEXT NOT NULL,     -- llm: provider; tool: tool name
    name_b      TEXT NOT NULL,     -- llm: model; tool: ''
    bucket      INTEGER NOT NULL,  -- index of the first bound the duration is within (rollups.DURATION_BOUNDS_MS)
    calls       INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, name_a, name_b, bucket)
) WITHOUT ROWID;
