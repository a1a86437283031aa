-- An enqueue wrote three B-trees: the row, its entry in the claim index (or
-- the timers') and its entry in the index of active jobs, which the queue
-- figures read. Queued jobs are all in the claim, timers or held index
-- already (each queued row in exactly one of them), so the figures count
-- them there, and the index of active jobs goes: an enqueue, a claim and an
-- acknowledgement each write one index entry fewer. Bulk enqueue 1.14x, a
-- no-op drain 1.22x (bench/README.md, "Fewer index entries on SQLite").

DROP INDEX due_jobs_active;

-- The held pieces of a paused group that are not timers: with the claim index
-- (neither held nor timers) and the timers index (held or not), every queued
-- job is in exactly one of the three.
CREATE INDEX due_jobs_held ON due_jobs (queue, run_at)
    WHERE state = 'queued' AND held AND NOT timer;

-- Waiting and failed jobs counted per queue (due_jobs_stopped lists them
-- newest first across queues). Running jobs are counted through
-- due_jobs_running: as many as the workers' slots.
CREATE INDEX due_jobs_parked ON due_jobs (queue, state)
    WHERE state IN ('waiting', 'failed');
