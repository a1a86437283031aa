-- Every statement the SQLite store runs, by name (same names as PostgreSQL's).
-- Parameters are named (:name). Times are REAL seconds since the Unix epoch;
-- :now is always given (the injected clock, or this host's clock).
-- Every writing transaction is BEGIN IMMEDIATE, so SQLite's single writer
-- serialises claims: no row is claimed twice.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS due_schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
)

-- name: migrations_table_exists
SELECT count(*) > 0 AS present
FROM sqlite_master
WHERE type = 'table' AND name = 'due_schema_migrations'

-- name: schema_version
SELECT max(version) AS version FROM due_schema_migrations

-- name: record_migration
INSERT INTO due_schema_migrations (version, name, applied_at) VALUES (:version, :name, :now)

-- name: insert_job
INSERT INTO due_jobs (task, queue, priority, payload, run_at, max_attempts,
                      key, dedupe_key, unique_for, created_at)
VALUES (:task, :queue, :priority, :payload, coalesce(:run_at, :now + :delay),
        :max_attempts, :key, :key, :unique_for, :now)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, run_at, created_at

-- name: insert_jobs
-- The bulk path for a batch without keys, run with executemany. Under BEGIN
-- IMMEDIATE no other writer interleaves, so the batch's ids are consecutive
-- and end at last_insert_rowid() (checked by count_id_range).
INSERT INTO due_jobs (task, queue, priority, payload, run_at, max_attempts, unique_for,
                      created_at)
VALUES (:task, :queue, :priority, :payload, :run_at, :max_attempts, :unique_for, :now)

-- name: count_id_range
SELECT count(*) AS n FROM due_jobs WHERE id BETWEEN :first AND :last

-- name: lock_job_by_key
-- The job that holds a key, and whether it still deduplicates: it does while
-- active, and for `unique_for` seconds after succeeding. (BEGIN IMMEDIATE
-- already holds the write lock.)
SELECT *,
       (state IN ('queued', 'running', 'waiting')
        OR (state = 'succeeded' AND finished_at + coalesce(unique_for, 0) > :now)) AS holds_key
FROM due_jobs
WHERE dedupe_key = :key

-- name: release_key
UPDATE due_jobs SET dedupe_key = NULL WHERE id = :id

-- name: claim_jobs
-- The lease length is per task (:leases, a JSON object) or the default.
-- INDEXED BY: walk the claim index in claim order and stop at :limit; without
-- statistics the planner may prefer another plan that sorts the backlog.
UPDATE due_jobs
SET state = 'running',
    attempt = attempt + 1,
    lease_token = lease_token + 1,
    lease_expires_at = :now + coalesce(
        (SELECT value FROM json_each(:leases) WHERE key = due_jobs.task), :lease),
    started_at = :now,
    worker = :worker
WHERE id IN (
    SELECT id
    FROM due_jobs INDEXED BY due_jobs_claim
    WHERE state = 'queued'
      AND queue = :queue
      AND run_at <= :now
      AND (:tasks IS NULL OR task IN (SELECT value FROM json_each(:tasks)))
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
)
RETURNING id, task, queue, priority, payload, attempt, max_attempts,
          lease_token, lease_expires_at, run_at, created_at

-- name: heartbeat
UPDATE due_jobs
SET lease_expires_at = :now + :lease
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING id

-- name: complete_jobs
-- Fenced by the token: a stale worker's write matches nothing.
UPDATE due_jobs
SET state = :state,
    lease_token = lease_token + 1,  -- the attempt is over: its token is stale now
    result = CASE WHEN :state = 'succeeded' THEN :result ELSE result END,
    run_at = CASE WHEN :state = 'queued' THEN :now + :retry_in ELSE run_at END,
    finished_at = CASE WHEN :state IN ('succeeded', 'failed', 'cancelled') THEN :now END,
    lease_expires_at = NULL,
    lost_leases = 0,
    last_error = coalesce(json_extract(:error, '$.error'), last_error),
    errors = CASE WHEN :error IS NULL THEN errors
                  ELSE json_insert(errors, '$[#]', json(:error)) END,
    dedupe_key = CASE WHEN :state IN ('failed', 'cancelled')
                        OR (:state = 'succeeded' AND coalesce(unique_for, 0) <= 0)
                      THEN NULL ELSE dedupe_key END
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING id, state, queue, run_at

-- name: select_expired
-- Running jobs whose worker stopped renewing the lease. The task is never
-- consulted, so a process that does not know the task rescues it too.
SELECT id, attempt, max_attempts, lost_leases, worker
FROM due_jobs
WHERE state = 'running' AND lease_expires_at < :now
ORDER BY lease_expires_at
LIMIT :limit

-- name: rescue_jobs
-- Back to the queue, due now; or failed for good when the verdict gives up.
UPDATE due_jobs
SET state = CASE WHEN :gives_up THEN 'failed' ELSE 'queued' END,
    lease_token = lease_token + 1,
    run_at = CASE WHEN :gives_up THEN run_at ELSE :now END,
    finished_at = CASE WHEN :gives_up THEN :now END,
    lease_expires_at = NULL,
    lost_leases = lost_leases + 1,
    last_error = json_extract(:error, '$.error'),
    errors = json_insert(errors, '$[#]', json(:error)),
    dedupe_key = CASE WHEN :gives_up THEN NULL ELSE dedupe_key END
WHERE id = :id AND state = 'running'
RETURNING id, state, queue, run_at

-- name: get_job
SELECT * FROM due_jobs WHERE id = :id

-- name: list_jobs
SELECT *
FROM due_jobs
WHERE (:queue IS NULL OR queue = :queue)
  AND (:state IS NULL OR state = :state)
  AND (:task IS NULL OR task = :task)
ORDER BY id DESC
LIMIT :limit

-- name: cancel_job
UPDATE due_jobs
SET state = 'cancelled', finished_at = :now, dedupe_key = NULL
WHERE id = :id AND state = 'queued'
RETURNING *

-- name: retry_job
UPDATE due_jobs
SET state = 'queued',
    run_at = :now,
    attempt = 0,
    lost_leases = 0,
    finished_at = NULL,
    lease_expires_at = NULL
WHERE id = :id AND state IN ('failed', 'cancelled')
RETURNING *

-- name: due_queues
SELECT DISTINCT queue
FROM due_jobs
WHERE state = 'queued' AND run_at <= :now
ORDER BY queue

-- name: release_jobs
-- A stopping worker hands back a job it will not finish: due again at once,
-- and the interrupted attempt is not counted against the job.
UPDATE due_jobs
SET state = 'queued',
    lease_token = lease_token + 1,
    run_at = :now,
    attempt = attempt - 1,
    lease_expires_at = NULL,
    errors = json_insert(errors, '$[#]', json_object(
        'attempt', attempt, 'kind', 'released', 'error', :reason, 'traceback', NULL,
        'at', :now_iso))
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING id, state, queue, run_at

-- name: next_due
-- When the next job of these tasks in this queue is due (the worker sleeps
-- until then). A skip scan of the claim index: for each priority level
-- present, the earliest run_at; O(levels x log n), with no index of its own.
WITH RECURSIVE levels(priority) AS (
    SELECT max(priority) FROM due_jobs INDEXED BY due_jobs_claim
    WHERE state = 'queued' AND queue = :queue
    UNION ALL
    SELECT (SELECT max(priority) FROM due_jobs INDEXED BY due_jobs_claim
            WHERE state = 'queued' AND queue = :queue AND priority < levels.priority)
    FROM levels
    WHERE levels.priority IS NOT NULL
)
SELECT min((SELECT min(run_at) FROM due_jobs INDEXED BY due_jobs_claim
            WHERE state = 'queued' AND queue = :queue AND priority = levels.priority
              AND task IN (SELECT value FROM json_each(:tasks)))) AS run_at
FROM levels
WHERE priority IS NOT NULL

-- name: fail_unknown_tasks
-- Jobs that no worker of their queue has known for the whole grace period
-- (a deploy that never finished, a typo): failed with the reason, kept, and
-- retryable once a worker knows the task.
UPDATE due_jobs
SET state = 'failed',
    finished_at = :now,
    dedupe_key = NULL,
    last_error = 'unknown task ' || task || ': no worker of queue ' || queue
        || ' knew it within ' || :grace_text || ' of its due time',
    errors = json_insert(errors, '$[#]', json_object(
        'attempt', attempt, 'kind', 'unknown_task',
        'error', 'unknown task ' || task || ': no worker of queue ' || queue
            || ' knew it within ' || :grace_text || ' of its due time',
        'traceback', NULL, 'at', :now_iso))
WHERE state = 'queued'
  AND queue IN (SELECT value FROM json_each(:queues))
  AND task NOT IN (SELECT value FROM json_each(:tasks))
  AND run_at < :now - :grace
RETURNING id, task, queue

-- name: register_worker
INSERT INTO due_workers (id, host, pid, queues, started_at, last_seen_at, state)
VALUES (:id, :host, :pid, :queues, :now, :now, 'running')

-- name: touch_worker
-- A worker marked gone that reports in again (it was paused) is running again.
UPDATE due_workers
SET last_seen_at = :now,
    state = CASE WHEN state = 'gone' THEN 'running' ELSE state END
WHERE id = :id

-- name: set_worker_state
UPDATE due_workers
SET state = :state,
    last_seen_at = :now,
    stopped_at = CASE WHEN :state = 'stopped' THEN :now END
WHERE id = :id

-- name: mark_gone_workers
UPDATE due_workers
SET state = 'gone'
WHERE state IN ('running', 'stopping') AND last_seen_at < :now - :after
RETURNING id

-- name: list_workers
SELECT * FROM due_workers ORDER BY started_at DESC LIMIT :limit

-- name: any_expired
-- A read-only look before taking the write lock for a rescue.
SELECT 1 AS found FROM due_jobs WHERE state = 'running' AND lease_expires_at < :now LIMIT 1
