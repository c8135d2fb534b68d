-- How sure a run's recorded end is, so that a weaker account never replaces a stronger one
-- whatever order they arrive in: 0 no end (or one reconcile settled on), 1 implied by the
-- session's next prompt, 2 reported by the producer, 3 the user stopped the run.
ALTER TABLE runs ADD COLUMN end_rank INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET end_rank = 2 WHERE ended_ms IS NOT NULL;
