-- Queue figures and job lists that stay cheap however many jobs are
-- scheduled ahead (ten million timers) or waiting in a backlog.

-- Jobs in the states few jobs are in, newest first within each: listing the
-- failed (or running, or waiting) jobs reads these entries only, where the
-- primary key walked back past every newer job (2.5 s with ten million
-- queued). It replaces due_jobs_running (dropped last: the drop locks the
-- table against readers until the migration commits, the builds only against
-- writers): the running rows, where expired leases are found, are its first
-- part.
CREATE INDEX due_jobs_rare ON due_jobs (state, id)
    WHERE state IN ('running', 'waiting', 'failed');

-- Jobs queued again after a failed or lost attempt: counted per queue
-- without reading every queued job (most have attempt 0).
CREATE INDEX due_jobs_retrying ON due_jobs (queue)
    WHERE state = 'queued' AND attempt > 0;

DROP INDEX due_jobs_running;
