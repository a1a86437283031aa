-- Recurring schedules, every scheduled time's fate, and named leases.

-- A schedule: defined in code (synced when a process starts) or at run time.
CREATE TABLE due_schedules (
    name           text PRIMARY KEY,
    task           text             NOT NULL,
    cron           text,
    every          double precision,
    tz             text             NOT NULL,
    payload        jsonb            NOT NULL,
    queue          text             NOT NULL,
    priority       integer          NOT NULL,
    max_attempts   integer          NOT NULL,
    misfire        text             NOT NULL CHECK (misfire IN ('skip', 'catch_up', 'latest')),
    overlap        text             NOT NULL
        CHECK (overlap IN ('allow', 'forbid', 'queue', 'replace')),
    catch_up_limit integer          NOT NULL,
    misfire_grace  double precision NOT NULL,
    source         text             NOT NULL CHECK (source IN ('code', 'runtime')),
    -- false: no longer defined in code; kept, with its history, and not fired.
    enabled        boolean          NOT NULL,
    paused         boolean          NOT NULL DEFAULT false,
    fingerprint    text             NOT NULL,
    next_fire_at   timestamptz      NOT NULL,
    created_at     timestamptz      NOT NULL,
    updated_at     timestamptz      NOT NULL,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
CREATE INDEX due_schedules_next ON due_schedules (next_fire_at) WHERE enabled;

-- One row per scheduled time, whatever became of it. The primary key is the
-- guarantee that any number of schedulers create each run once.
CREATE TABLE due_schedule_runs (
    schedule      text        NOT NULL,
    scheduled_for timestamptz NOT NULL,
    outcome       text        NOT NULL
        CHECK (outcome IN ('enqueued', 'pending', 'skipped', 'missed')),
    reason        text,
    job_id        bigint,
    recorded_at   timestamptz NOT NULL,
    PRIMARY KEY (schedule, scheduled_for)
);
CREATE INDEX due_schedule_runs_pending ON due_schedule_runs (schedule) WHERE outcome = 'pending';

ALTER TABLE due_jobs
    ADD COLUMN schedule         text,
    ADD COLUMN scheduled_for    timestamptz,
    ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX due_jobs_schedule_run ON due_jobs (schedule, scheduled_for)
    WHERE schedule IS NOT NULL;
CREATE INDEX due_jobs_schedule_active ON due_jobs (schedule)
    WHERE schedule IS NOT NULL AND state IN ('queued', 'running', 'waiting');

-- Named leases (the scheduler's leadership): holder, fencing token, expiry.
CREATE TABLE due_leases (
    name       text PRIMARY KEY,
    holder     text        NOT NULL,
    token      bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);
