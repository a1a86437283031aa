-- Recurring schedules, every scheduled time's fate, and named leases.

-- A schedule: defined in code (synced when a process starts) or at run time.
CREATE TABLE due_schedules (
    name           TEXT PRIMARY KEY,
    task           TEXT    NOT NULL,
    cron           TEXT,
    every          REAL,
    tz             TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    queue          TEXT    NOT NULL,
    priority       INTEGER NOT NULL,
    max_attempts   INTEGER NOT NULL,
    misfire        TEXT    NOT NULL CHECK (misfire IN ('skip', 'catch_up', 'latest')),
    overlap        TEXT    NOT NULL CHECK (overlap IN ('allow', 'forbid', 'queue', 'replace')),
    catch_up_limit INTEGER NOT NULL,
    misfire_grace  REAL    NOT NULL,
    source         TEXT    NOT NULL CHECK (source IN ('code', 'runtime')),
    -- 0: no longer defined in code; kept, with its history, and not fired.
    enabled        INTEGER NOT NULL,
    paused         INTEGER NOT NULL DEFAULT 0,
    fingerprint    TEXT    NOT NULL,
    next_fire_at   REAL    NOT NULL,
    created_at     REAL    NOT NULL,
    updated_at     REAL    NOT NULL,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
CREATE INDEX due_schedules_next ON due_schedules (next_fire_at) WHERE enabled;

-- One row per scheduled time, whatever became of it. The primary key is the
-- guarantee that any number of schedulers create each run once.
CREATE TABLE due_schedule_runs (
    schedule      TEXT NOT NULL,
    scheduled_for REAL NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN ('enqueued', 'pending', 'skipped', 'missed')),
    reason        TEXT,
    job_id        INTEGER,
    recorded_at   REAL NOT NULL,
    PRIMARY KEY (schedule, scheduled_for)
);
CREATE INDEX due_schedule_runs_pending ON due_schedule_runs (schedule) WHERE outcome = 'pending';

ALTER TABLE due_jobs ADD COLUMN schedule TEXT;
ALTER TABLE due_jobs ADD COLUMN scheduled_for REAL;
ALTER TABLE due_jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX due_jobs_schedule_run ON due_jobs (schedule, scheduled_for)
    WHERE schedule IS NOT NULL;
CREATE INDEX due_jobs_schedule_active ON due_jobs (schedule)
    WHERE schedule IS NOT NULL AND state IN ('queued', 'running', 'waiting');

-- Named leases (the scheduler's leadership): holder, fencing token, expiry.
CREATE TABLE due_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    expires_at REAL    NOT NULL
);
