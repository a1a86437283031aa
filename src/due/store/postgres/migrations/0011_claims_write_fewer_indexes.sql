-- A claim moves a job from queued to running, and every index whose predicate
-- the new row meets gets an entry. Running jobs are as many as the workers'
-- slots, and due_jobs_running finds them already; kept out of the index of the
-- backlog (the jobs that pile up: queued, waiting, failed), a claim writes two
-- index entries instead of three. A no-op drain's server time per job fell
-- from 58 to 53 us (bench/README.md). SQLite keeps its index of active jobs:
-- there the same change measured nothing.
-- On a table that already holds many active jobs, the new index is built
-- while the migration runs, and writes wait for it.
DROP INDEX due_jobs_active;
CREATE INDEX due_jobs_backlog ON due_jobs (queue, state, run_at) INCLUDE (attempt, held)
    WHERE state IN ('queued', 'waiting', 'failed');
