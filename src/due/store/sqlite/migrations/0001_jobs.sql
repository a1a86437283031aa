-- The job table and the indexes its hot paths use.
-- Times are REAL seconds since the Unix epoch (UTC).
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
);

-- Claims: only queued rows, in claim order. Finished rows never enter it.
CREATE INDEX due_jobs_claim ON due_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued';
-- The next due time of a queue, for workers sleeping until then.
CREATE INDEX due_jobs_next_due ON due_jobs (queue, run_at) WHERE state = 'queued';
-- Rescue of expired leases: only running rows.
CREATE INDEX due_jobs_lease ON due_jobs (lease_expires_at) WHERE state = 'running';
-- Idempotency keys, across every process.
CREATE UNIQUE INDEX due_jobs_dedupe_key ON due_jobs (dedupe_key) WHERE dedupe_key IS NOT NULL;
