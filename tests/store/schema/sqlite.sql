-- index due_actions_job
CREATE INDEX due_actions_job ON due_actions (job_id) WHERE job_id IS NOT NULL;

-- index due_actions_queue
CREATE INDEX due_actions_queue ON due_actions (queue) WHERE queue IS NOT NULL;

-- index due_actions_schedule
CREATE INDEX due_actions_schedule ON due_actions (schedule) WHERE schedule IS NOT NULL;

-- index due_jobs_children
CREATE INDEX due_jobs_children ON due_jobs (parent_id)
    WHERE parent_id IS NOT NULL AND state IN ('queued', 'running', 'waiting');

-- index due_jobs_claim
CREATE INDEX due_jobs_claim ON due_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL;

-- index due_jobs_completes
CREATE INDEX due_jobs_completes ON due_jobs (completes) WHERE completes IS NOT NULL;

-- index due_jobs_dedupe_key
CREATE UNIQUE INDEX due_jobs_dedupe_key ON due_jobs (dedupe_key) WHERE dedupe_key IS NOT NULL;

-- index due_jobs_failed
CREATE INDEX due_jobs_failed ON due_jobs (finished_at) WHERE state = 'failed';

-- index due_jobs_held
CREATE INDEX due_jobs_held ON due_jobs (queue, run_at)
    WHERE state = 'queued' AND held AND NOT timer;

-- index due_jobs_key
CREATE INDEX due_jobs_key ON due_jobs (key) WHERE key IS NOT NULL;

-- index due_jobs_limit_wait
CREATE INDEX due_jobs_limit_wait ON due_jobs (limit_wait, limit_wait_key, priority DESC, run_at, id)
    WHERE state = 'queued' AND limit_wait IS NOT NULL;

-- index due_jobs_limited
CREATE INDEX due_jobs_limited ON due_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
      AND limit_wait IS NULL;

-- index due_jobs_limited_queue
CREATE INDEX due_jobs_limited_queue ON due_jobs (queue, run_at)
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL;

-- index due_jobs_limited_running
CREATE INDEX due_jobs_limited_running ON due_jobs (id)
    WHERE state = 'running' AND limits IS NOT NULL;

-- index due_jobs_parked
CREATE INDEX due_jobs_parked ON due_jobs (queue, state)
    WHERE state IN ('waiting', 'failed');

-- index due_jobs_piece
CREATE UNIQUE INDEX due_jobs_piece ON due_jobs (parent_id, piece_key) WHERE parent_id IS NOT NULL;

-- index due_jobs_retrying
CREATE INDEX due_jobs_retrying ON due_jobs (queue)
    WHERE state = 'queued' AND attempt > 0;

-- index due_jobs_running
CREATE INDEX due_jobs_running ON due_jobs (id) WHERE state = 'running';

-- index due_jobs_schedule_active
CREATE INDEX due_jobs_schedule_active ON due_jobs (schedule)
    WHERE schedule IS NOT NULL AND state IN ('queued', 'running', 'waiting');

-- index due_jobs_schedule_run
CREATE UNIQUE INDEX due_jobs_schedule_run ON due_jobs (schedule, scheduled_for)
    WHERE schedule IS NOT NULL;

-- index due_jobs_step
CREATE UNIQUE INDEX due_jobs_step ON due_jobs (workflow_id, step_name)
    WHERE workflow_id IS NOT NULL;

-- index due_jobs_stopped
CREATE INDEX due_jobs_stopped ON due_jobs (state, id)
    WHERE state IN ('waiting', 'failed');

-- index due_jobs_timers
CREATE INDEX due_jobs_timers ON due_jobs (queue, run_at, id)
    WHERE state = 'queued' AND timer;

-- index due_limit_keys_waiting
CREATE INDEX due_limit_keys_waiting ON due_limit_keys (opens_at) WHERE waiting;

-- index due_schedule_runs_pending
CREATE INDEX due_schedule_runs_pending ON due_schedule_runs (schedule) WHERE outcome = 'pending';

-- index due_schedules_next
CREATE INDEX due_schedules_next ON due_schedules (next_fire_at) WHERE enabled;

-- index due_workflow_edges_step
CREATE INDEX due_workflow_edges_step ON due_workflow_edges (step_id);

-- table due_actions
CREATE TABLE due_actions (
    id       INTEGER PRIMARY KEY,
    at       REAL NOT NULL,
    action   TEXT NOT NULL,
    actor    TEXT NOT NULL,
    job_id   INTEGER,
    schedule TEXT,
    queue    TEXT
);

-- table due_job_stats
CREATE TABLE due_job_stats (
    span         TEXT    NOT NULL CHECK (span IN ('minute', 'hour', 'all')),
    minute       REAL    NOT NULL,
    task         TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    outcome      TEXT    NOT NULL,
    bucket       INTEGER NOT NULL,
    writer       INTEGER NOT NULL,
    count        INTEGER NOT NULL,
    duration_sum REAL    NOT NULL,
    PRIMARY KEY (span, minute, task, queue, outcome, bucket, writer)
) WITHOUT ROWID;

-- table due_jobs
CREATE TABLE due_jobs (
    -- A plain rowid: new ids are max(id) + 1. The pruner never deletes the
    -- newest job, so ids are never reused. (AUTOINCREMENT would also write
    -- sqlite_sequence on every insert: a third page per enqueue commit.)
    id               INTEGER PRIMARY KEY,
    task             TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'running', 'waiting', 'succeeded', 'failed', 'cancelled')),
    payload          TEXT    NOT NULL,
    run_at           REAL    NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    -- Fencing token: bumped by every claim, never reset.
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    worker           TEXT,
    -- Consecutive attempts that ended because the lease expired (crash loops).
    lost_leases      INTEGER NOT NULL DEFAULT 0,
    key              TEXT,
    -- The key while it still deduplicates; released (NULL) when the job ends.
    dedupe_key       TEXT,
    unique_for       REAL,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    last_error       TEXT,
    errors           TEXT    NOT NULL DEFAULT '[]',
    result           TEXT
, schedule TEXT, scheduled_for REAL, cancel_requested INTEGER NOT NULL DEFAULT 0, checkpoint TEXT, progress TEXT, progress_at REAL, stuck_after REAL, parent_id INTEGER, piece_key TEXT, pieces_total INTEGER NOT NULL DEFAULT 0, pieces_done INTEGER NOT NULL DEFAULT 0, pieces_failed INTEGER NOT NULL DEFAULT 0, on_complete TEXT, on_piece_failure TEXT NOT NULL DEFAULT 'continue'
    CHECK (on_piece_failure IN ('continue', 'fail')), completes INTEGER, held INTEGER NOT NULL DEFAULT 0, warning TEXT, timer INTEGER NOT NULL DEFAULT 0, attempt_status TEXT NOT NULL DEFAULT 'started'
    CHECK (attempt_status IN ('claimed', 'started', 'handed_back')), limits TEXT, limit_wait TEXT, limit_wait_key TEXT, workflow_id INTEGER, step_name TEXT, upstream_pending INTEGER NOT NULL DEFAULT 0, upstream_failed INTEGER NOT NULL DEFAULT 0, on_upstream_failure TEXT
    CHECK (on_upstream_failure IN ('cancel', 'run')));

-- table due_leases
CREATE TABLE due_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    expires_at REAL    NOT NULL
);

-- table due_limit_keys
CREATE TABLE due_limit_keys (
    name          TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    starts        TEXT    NOT NULL DEFAULT '[]',
    started_total INTEGER NOT NULL DEFAULT 0,
    waiting       INTEGER NOT NULL DEFAULT 0,
    block_version INTEGER NOT NULL DEFAULT 0,
    opens_at      REAL,
    PRIMARY KEY (name, key)
);

-- table due_limits
CREATE TABLE due_limits (
    name            TEXT PRIMARY KEY,
    concurrency     INTEGER CHECK (concurrency > 0),
    rate            INTEGER CHECK (rate > 0),
    period          REAL    CHECK (period > 0),
    set_concurrency INTEGER CHECK (set_concurrency > 0),
    set_rate        INTEGER CHECK (set_rate > 0),
    set_period      REAL    CHECK (set_period > 0),
    overridden      INTEGER NOT NULL DEFAULT 0,
    updated_at      REAL NOT NULL
);

-- table due_queues
CREATE TABLE due_queues (
    name       TEXT PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at REAL    NOT NULL
);

-- table due_schedule_runs
CREATE TABLE due_schedule_runs (
    schedule      TEXT NOT NULL,
    scheduled_for REAL NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN ('enqueued', 'pending', 'skipped', 'missed')),
    reason        TEXT,
    job_id        INTEGER,
    recorded_at   REAL NOT NULL,
    PRIMARY KEY (schedule, scheduled_for)
);

-- table due_schedules
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
    updated_at     REAL    NOT NULL, last_success_at REAL, alert_after REAL NOT NULL DEFAULT 300, missed_total INTEGER NOT NULL DEFAULT 0, problem TEXT, limits TEXT,
    CHECK ((cron IS NULL) <> (every IS NULL))
);

-- table due_schema_migrations
CREATE TABLE due_schema_migrations (
version    INTEGER PRIMARY KEY,
name       TEXT NOT NULL,
applied_at REAL NOT NULL
);

-- table due_worker_recycles
CREATE TABLE due_worker_recycles (
    reason TEXT PRIMARY KEY,
    total  INTEGER NOT NULL
);

-- table due_workers
CREATE TABLE due_workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT NOT NULL,
    started_at   REAL NOT NULL,
    last_seen_at REAL NOT NULL,
    state        TEXT NOT NULL DEFAULT 'running'
        CHECK (state IN ('running', 'stopping', 'stopped', 'gone')),
    stopped_at   REAL
, tasks TEXT NOT NULL DEFAULT '[]');

-- table due_workflow_edges
CREATE TABLE due_workflow_edges (
    upstream_id INTEGER NOT NULL,
    step_id     INTEGER NOT NULL,
    PRIMARY KEY (upstream_id, step_id)
);

-- table due_workflows
CREATE TABLE due_workflows (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a workflow id names one
    name            TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'running'
                    CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    steps_total     INTEGER NOT NULL DEFAULT 0,
    steps_ended     INTEGER NOT NULL DEFAULT 0,
    steps_failed    INTEGER NOT NULL DEFAULT 0,
    steps_cancelled INTEGER NOT NULL DEFAULT 0,
    created_at      REAL NOT NULL,
    finished_at     REAL
);
