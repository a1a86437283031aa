-- Queue figures and job lists that stay cheap however many jobs are
-- scheduled ahead (ten million timers) or waiting in a backlog.

-- Waiting and failed jobs, newest first within each state: listing the
-- failed jobs reads these entries only, where the primary key walked back
-- past every newer job (2.5 s with ten million queued). Running jobs keep
-- due_jobs_running: one index for the three states cost SQLite's claims and
-- acknowledgements a fifth more (its state IN list of three, evaluated on
-- every change of state); this one is evaluated as cheaply as before.
CREATE INDEX due_jobs_stopped ON due_jobs (state, id)
    WHERE state IN ('waiting', 'failed');

-- Jobs queued again after a failed or lost attempt: counted per queue
-- without reading every queued job (most have attempt 0).
CREATE INDEX due_jobs_retrying ON due_jobs (queue)
    WHERE state = 'queued' AND attempt > 0;
