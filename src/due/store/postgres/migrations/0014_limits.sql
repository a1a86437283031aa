-- Limits: named caps on how many jobs run at once (concurrency) and how many
-- start in any window of a period (rate), across every worker and host.
-- A limit's numbers come from code (`app.limit`, written when a worker
-- starts) unless an operator set them (`due limit set`): `overridden`.
CREATE TABLE due_limits (
    name            text PRIMARY KEY,
    concurrency     integer CHECK (concurrency > 0),
    rate            integer CHECK (rate > 0),
    period          float8  CHECK (period > 0),
    set_concurrency integer CHECK (set_concurrency > 0),
    set_rate        integer CHECK (set_rate > 0),
    set_period      float8  CHECK (set_period > 0),
    overridden      boolean NOT NULL DEFAULT false,
    updated_at      timestamptz NOT NULL
);
-- One row per limit and key ('' for the whole limit): the lock claimers take
-- in name, key order before they count, and the rate's log. `starts` holds the
-- starts of the last period, a [seconds since the epoch, how many] pair per
-- claim that started some. `waiting` says jobs may wait for it (set by the
-- claim that made one wait, cleared when none is left; `block_version` tells
-- a clear that raced a new wait to stand back); `opens_at` is when its rate
-- next lets a start through, for the workers' wake-up.
CREATE TABLE due_limit_keys (
    name          text    NOT NULL,
    key           text    NOT NULL,
    starts        jsonb   NOT NULL DEFAULT '[]',
    started_total bigint  NOT NULL DEFAULT 0,
    waiting       boolean NOT NULL DEFAULT false,
    block_version bigint  NOT NULL DEFAULT 0,
    opens_at      timestamptz,
    PRIMARY KEY (name, key)
);
CREATE INDEX due_limit_keys_waiting ON due_limit_keys (opens_at) WHERE waiting;
-- A job's limits, as [name, key] pairs (NULL: none), computed at enqueue. A
-- job over a limit waits out of every claim index: `limit_wait` and
-- `limit_wait_key` name what it waits for until a slot or the rate frees.
ALTER TABLE due_jobs ADD COLUMN limits jsonb;
ALTER TABLE due_jobs ADD COLUMN limit_wait text;
ALTER TABLE due_jobs ADD COLUMN limit_wait_key text;
-- Limited jobs have a claim index of their own: a claim of other jobs never
-- reads them, however many wait.
DROP INDEX due_jobs_claim;
CREATE INDEX due_jobs_claim ON due_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL;
CREATE INDEX due_jobs_limited ON due_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
      AND limit_wait IS NULL;
CREATE INDEX due_jobs_limit_wait ON due_jobs (limit_wait, limit_wait_key, priority DESC, run_at, id)
    WHERE state = 'queued' AND limit_wait IS NOT NULL;
-- What counts against a limit: its running jobs (as many as the slots).
CREATE INDEX due_jobs_limited_running ON due_jobs (id)
    WHERE state = 'running' AND limits IS NOT NULL;
-- The queue's limited jobs, waiting or not: for its counts and its oldest due
-- job (a job that waits for a limit is still due, and its age still alerts).
CREATE INDEX due_jobs_limited_queue ON due_jobs (queue, run_at)
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL;
-- A schedule's runs count against its task's limits (its arguments are fixed:
-- so are their keys).
ALTER TABLE due_schedules ADD COLUMN limits text;
