-- Fewer, better-aimed indexes: each one costs every enqueue and every claim.
--
-- The rescue index covers rows holding a lease, by the lease column itself
-- (it is NULL whenever a job is not running). Partial on `state = 'running'`,
-- the planner preferred it to the primary key for heartbeats and completions
-- ("id = ANY(...) AND state = 'running'"), scanning every running row.
DROP INDEX due_jobs_lease;
CREATE INDEX due_jobs_lease ON due_jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

-- The next due time of a queue is now a skip scan of the claim index.
DROP INDEX due_jobs_next_due;
