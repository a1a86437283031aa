-- Timers: a job not yet due waits in an index of its own, ordered by run_at,
-- so the claim index holds only what could be claimed now. Ten million jobs
-- scheduled for next week at a high priority then cost today's claims nothing
-- (in the claim index, every claim walked past them: priority orders first).
-- `timer` is set where a job is written with a run_at still to come; the claim
-- takes due timers itself and moves the rest of the due ones into the claim
-- index (claim_jobs). It only says which index holds the row: a queued row
-- is due when run_at <= now, whichever index holds it.
ALTER TABLE due_jobs ADD COLUMN timer boolean NOT NULL DEFAULT false;
UPDATE due_jobs SET timer = true WHERE state = 'queued' AND run_at > now();

DROP INDEX due_jobs_claim;
CREATE INDEX due_jobs_claim ON due_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued' AND NOT held AND NOT timer;
CREATE INDEX due_jobs_timers ON due_jobs (queue, run_at, id)
    WHERE state = 'queued' AND timer;

-- Heartbeats change lease_expires_at (and progress) only: with no index on
-- them, the new row version stays on its page and no index is touched (a HOT
-- update). Expired leases are found among the running rows instead, as many
-- as the workers' slots.
DROP INDEX due_jobs_lease;
CREATE INDEX due_jobs_running ON due_jobs (id) WHERE state = 'running';

-- A hot queue table: every job is inserted, updated twice and deleted. Room
-- on each page for HOT updates, and vacuum after 2 % of the rows changed (not
-- the default 20 %: on a million-row table that is 200,000 dead rows first).
ALTER TABLE due_jobs SET (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);
