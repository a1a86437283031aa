-- Timers: a job not yet due waits in an index of its own, ordered by run_at,
-- so the claim index holds only what could be claimed now (in the claim
-- index, every claim walked past the jobs scheduled for later at a higher
-- priority). `timer` only says which index holds the row: a queued row is due
-- when run_at <= now, whichever index holds it. promote_timers moves the due
-- ones into the claim index in each claim's transaction.
ALTER TABLE due_jobs ADD COLUMN timer INTEGER NOT NULL DEFAULT 0;
UPDATE due_jobs SET timer = 1
WHERE state = 'queued' AND run_at > (julianday('now') - 2440587.5) * 86400.0;

DROP INDEX due_jobs_claim;
CREATE INDEX due_jobs_claim ON due_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued' AND NOT held AND NOT timer;
CREATE INDEX due_jobs_timers ON due_jobs (queue, run_at, id)
    WHERE state = 'queued' AND timer;

-- Expired leases are found among the running rows (as many as the workers'
-- slots), as on PostgreSQL, where an index on lease_expires_at would make
-- every heartbeat touch an index.
DROP INDEX due_jobs_lease;
CREATE INDEX due_jobs_running ON due_jobs (id) WHERE state = 'running';
