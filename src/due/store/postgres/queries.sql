-- Every statement the PostgreSQL store runs, by name (same names as SQLite's).
-- Parameters are psycopg named parameters; arrays are sent in binary (%(x)b),
-- ten times cheaper to encode than text arrays. `%(now)s` is the injected clock's
-- instant, or NULL to use the database's clock: coalesce(%(now)s, now()).
-- Wake-ups: every statement that makes a job claimable notifies channel
-- `due_jobs` with the payload '<queue> <run_at as epoch seconds>'.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS due_schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: lock_migrations
SELECT pg_advisory_xact_lock(hashtext('due_schema_migrations'))

-- name: migrations_table_exists
SELECT to_regclass('due_schema_migrations') IS NOT NULL AS present

-- name: schema_version
SELECT max(version) AS version FROM due_schema_migrations

-- name: record_migration
INSERT INTO due_schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: current_time
SELECT coalesce(%(now)s::timestamptz, now()) AS now

-- name: insert_job
INSERT INTO due_jobs (task, queue, priority, payload, run_at, max_attempts,
                      key, dedupe_key, unique_for, created_at)
VALUES (%(task)s, %(queue)s, %(priority)s, %(payload)s::jsonb,
        coalesce(%(run_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(delay)s)),
        %(max_attempts)s, %(key)s, %(key)s, %(unique_for)s,
        coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, run_at, created_at,
          pg_notify('due_jobs', queue || ' ' || extract(epoch FROM run_at)::text)::text AS notified

-- name: reserve_ids
-- Ids for a batch, and the database's now (constant for the transaction), so
-- the batch's due times are computed on the database's clock.
SELECT coalesce(%(now)s::timestamptz, now()) AS now,
       array(SELECT nextval('due_jobs_id_seq')
             FROM generate_series(1, %(count)s)) AS ids

-- name: insert_jobs
INSERT INTO due_jobs (id, task, queue, priority, payload, run_at, max_attempts,
                      key, dedupe_key, unique_for, created_at)
SELECT j.id, j.task, j.queue, j.priority, j.payload::jsonb, j.run_at,
       j.max_attempts, j.key, j.key, j.unique_for, %(now)s::timestamptz
FROM unnest(%(ids)b::bigint[], %(tasks)b::text[], %(queues)b::text[], %(priorities)b::int[],
            %(payloads)b::text[], %(run_ats)b::timestamptz[], %(max_attempts)b::int[],
            %(keys)b::text[], %(unique_fors)b::float8[])
     AS j(id, task, queue, priority, payload, run_at, max_attempts, key, unique_for)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: copy_jobs
-- The bulk fast path for a batch without keys (nothing to deduplicate):
-- rows are streamed in binary, ids reserved by reserve_ids.
COPY due_jobs (id, task, queue, priority, payload, run_at, max_attempts, key, dedupe_key,
               unique_for, created_at)
FROM STDIN (FORMAT BINARY)

-- name: notify_queues
SELECT pg_notify('due_jobs', q.queue || ' ' || extract(epoch FROM q.run_at)::text)::text
FROM unnest(%(queues)b::text[], %(run_ats)b::timestamptz[]) AS q(queue, run_at)

-- name: lock_job_by_key
-- The job that holds a key, and whether it still deduplicates: it does while
-- active, and for `unique_for` seconds after succeeding.
SELECT *,
       (state IN ('queued', 'running', 'waiting')
        OR (state = 'succeeded'
            AND finished_at + make_interval(secs => coalesce(unique_for, 0))
                > coalesce(%(now)s::timestamptz, now()))) AS holds_key
FROM due_jobs
WHERE dedupe_key = %(key)s
FOR UPDATE

-- name: release_key
UPDATE due_jobs SET dedupe_key = NULL WHERE id = %(id)s

-- name: claim_jobs
-- SKIP LOCKED lets concurrent claimers take disjoint rows without waiting.
-- The lease length is per task (`leases`, a JSON object) or the default.
-- `id = ANY(ARRAY(...))` keeps the update on the primary key whatever the
-- statistics say (an IN or a join may turn into a scan of the whole table).
UPDATE due_jobs AS j
SET state = 'running',
    attempt = j.attempt + 1,
    lease_token = j.lease_token + 1,
    lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(
        secs => coalesce((%(leases)s::jsonb ->> j.task)::float8, %(lease)s)),
    started_at = coalesce(%(now)s::timestamptz, now()),
    worker = %(worker)s
WHERE j.id = ANY(ARRAY(
    SELECT id
    FROM due_jobs
    WHERE state = 'queued'
      AND queue = %(queue)s
      AND run_at <= coalesce(%(now)s::timestamptz, now())
      AND (%(tasks)b::text[] IS NULL OR task = ANY(%(tasks)b::text[]))
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.task, j.queue, j.priority, j.payload, j.attempt, j.max_attempts,
          j.lease_token, j.lease_expires_at, j.run_at, j.created_at

-- name: heartbeat
-- Fencing: a job's lease_token changes whenever an attempt starts (claim) or
-- ends (complete, rescue, release), so a token matches exactly one running
-- attempt; no state test is needed (and none misleads the planner when the
-- statistics say few jobs run).
-- Batch statements (heartbeat, complete, rescue, release) first lock their
-- rows in id order, whatever plan the join below gets: two batches about the
-- same jobs (a heartbeat and an acknowledgement) can then never deadlock.
WITH locked AS MATERIALIZED (  -- row locks taken in id order: batches never deadlock
    SELECT id FROM due_jobs WHERE id = ANY(%(ids)b::bigint[]) ORDER BY id FOR NO KEY UPDATE
)
UPDATE due_jobs AS j
SET lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => h.lease)
FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(leases)b::float8[]) AS h(id, token, lease)
WHERE j.id IN (SELECT id FROM locked)
  AND j.id = h.id AND j.lease_token = h.token
RETURNING j.id

-- name: complete_jobs
-- One statement for a batch of attempt endings; each row is fenced by its
-- token, so a stale worker's write matches nothing.
WITH locked AS MATERIALIZED (  -- row locks taken in id order: batches never deadlock
    SELECT id FROM due_jobs WHERE id = ANY(%(ids)b::bigint[]) ORDER BY id FOR NO KEY UPDATE
)
UPDATE due_jobs AS j
SET state = c.state,
    lease_token = j.lease_token + 1,  -- the attempt is over: its token is stale now
    result = CASE WHEN c.state = 'succeeded' THEN c.result::jsonb ELSE j.result END,
    run_at = CASE WHEN c.state = 'queued'
                  THEN coalesce(%(now)s::timestamptz, now()) + make_interval(secs => c.retry_in)
                  ELSE j.run_at END,
    finished_at = CASE WHEN c.state IN ('succeeded', 'failed', 'cancelled')
                       THEN coalesce(%(now)s::timestamptz, now()) END,
    lease_expires_at = NULL,
    lost_leases = 0,
    last_error = coalesce(c.error::jsonb ->> 'error', j.last_error),
    errors = CASE WHEN c.error IS NULL THEN j.errors
                  ELSE j.errors || jsonb_build_array(c.error::jsonb) END,
    dedupe_key = CASE WHEN c.state IN ('failed', 'cancelled')
                        OR (c.state = 'succeeded' AND coalesce(j.unique_for, 0) <= 0)
                      THEN NULL ELSE j.dedupe_key END
FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(states)b::text[], %(results)b::text[],
            %(errors)b::text[], %(retry_ins)b::float8[])
     AS c(id, token, state, result, error, retry_in)
WHERE j.id IN (SELECT id FROM locked)
  AND j.id = c.id AND j.lease_token = c.token
RETURNING j.id, j.state,
          CASE WHEN j.state = 'queued' THEN  -- wake workers for the job due again
              pg_notify('due_jobs', j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
          END AS notified

-- name: select_expired
-- Running jobs whose worker stopped renewing the lease. The task is never
-- consulted, so a process that does not know the task rescues it too.
SELECT id, attempt, max_attempts, lost_leases, worker
FROM due_jobs
WHERE state = 'running' AND lease_expires_at < coalesce(%(now)s::timestamptz, now())
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: rescue_jobs
-- Back to the queue, due now; or failed for good when the verdict gives up.
WITH locked AS MATERIALIZED (  -- row locks taken in id order: batches never deadlock
    SELECT id FROM due_jobs WHERE id = ANY(%(ids)b::bigint[]) ORDER BY id FOR NO KEY UPDATE
)
UPDATE due_jobs AS j
SET state = CASE WHEN r.gives_up THEN 'failed' ELSE 'queued' END,
    lease_token = j.lease_token + 1,
    run_at = CASE WHEN r.gives_up THEN j.run_at ELSE coalesce(%(now)s::timestamptz, now()) END,
    finished_at = CASE WHEN r.gives_up THEN coalesce(%(now)s::timestamptz, now()) END,
    lease_expires_at = NULL,
    lost_leases = j.lost_leases + 1,
    last_error = r.error::jsonb ->> 'error',
    errors = j.errors || jsonb_build_array(r.error::jsonb),
    dedupe_key = CASE WHEN r.gives_up THEN NULL ELSE j.dedupe_key END
FROM unnest(%(ids)b::bigint[], %(gives_up)b::boolean[], %(errors)b::text[])
     AS r(id, gives_up, error)
WHERE j.id IN (SELECT id FROM locked) AND j.id = r.id AND j.state = 'running'
RETURNING j.id, j.state,
          CASE WHEN j.state = 'queued' THEN  -- wake workers for the job due again
              pg_notify('due_jobs', j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
          END AS notified

-- name: get_job
SELECT * FROM due_jobs WHERE id = %(id)s

-- name: list_jobs
SELECT *
FROM due_jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: cancel_job
UPDATE due_jobs
SET state = 'cancelled',
    finished_at = coalesce(%(now)s::timestamptz, now()),
    dedupe_key = NULL
WHERE id = %(id)s AND state = 'queued'
RETURNING *

-- name: retry_job
UPDATE due_jobs
SET state = 'queued',
    run_at = coalesce(%(now)s::timestamptz, now()),
    attempt = 0,
    lost_leases = 0,
    finished_at = NULL,
    lease_expires_at = NULL
WHERE id = %(id)s AND state IN ('failed', 'cancelled')
RETURNING *, pg_notify('due_jobs', queue || ' ' || extract(epoch FROM run_at)::text)::text
    AS notified

-- name: due_queues
SELECT DISTINCT queue
FROM due_jobs
WHERE state = 'queued' AND run_at <= coalesce(%(now)s::timestamptz, now())
ORDER BY queue

-- name: release_jobs
-- A stopping worker hands back jobs it will not finish: due again at once,
-- and the interrupted attempt is not counted against the job.
WITH locked AS MATERIALIZED (  -- row locks taken in id order: batches never deadlock
    SELECT id FROM due_jobs WHERE id = ANY(%(ids)b::bigint[]) ORDER BY id FOR NO KEY UPDATE
)
UPDATE due_jobs AS j
SET state = 'queued',
    lease_token = j.lease_token + 1,
    run_at = coalesce(%(now)s::timestamptz, now()),
    attempt = j.attempt - 1,
    lease_expires_at = NULL,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'kind', 'released', 'error', %(reason)s::text, 'traceback', NULL,
        'at', coalesce(%(now)s::timestamptz, now())))
FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[]) AS r(id, token)
WHERE j.id IN (SELECT id FROM locked)
  AND j.id = r.id AND j.lease_token = r.token
RETURNING j.id, j.state,
          CASE WHEN j.state = 'queued' THEN  -- wake workers for the job due again
              pg_notify('due_jobs', j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
          END AS notified

-- name: next_due
-- When the next job of these tasks in this queue is due (the worker sleeps
-- until then). A skip scan of the claim index: for each priority level
-- present, the earliest run_at; O(levels x log n), with no index of its own.
WITH RECURSIVE levels(priority) AS (
    SELECT max(priority) FROM due_jobs WHERE state = 'queued' AND queue = %(queue)s
    UNION ALL
    SELECT (SELECT max(priority) FROM due_jobs
            WHERE state = 'queued' AND queue = %(queue)s AND priority < levels.priority)
    FROM levels
    WHERE levels.priority IS NOT NULL
)
SELECT min((SELECT min(run_at) FROM due_jobs
            WHERE state = 'queued' AND queue = %(queue)s AND priority = levels.priority
              AND task = ANY(%(tasks)b::text[]))) AS run_at
FROM levels
WHERE priority IS NOT NULL

-- name: fail_unknown_tasks
-- Jobs that no worker of their queue has known for the whole grace period
-- (a deploy that never finished, a typo): failed with the reason, kept, and
-- retryable once a worker knows the task.
UPDATE due_jobs
SET state = 'failed',
    finished_at = coalesce(%(now)s::timestamptz, now()),
    dedupe_key = NULL,
    last_error = 'unknown task ' || task || ': no worker of queue ' || queue
        || ' knew it within ' || %(grace_text)s::text || ' of its due time',
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'kind', 'unknown_task',
        'error', 'unknown task ' || task || ': no worker of queue ' || queue
            || ' knew it within ' || %(grace_text)s::text || ' of its due time',
        'traceback', NULL, 'at', coalesce(%(now)s::timestamptz, now())))
WHERE state = 'queued'
  AND queue = ANY(%(queues)b::text[])
  AND NOT (task = ANY(%(tasks)b::text[]))
  AND run_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(grace)s)
RETURNING id, task, queue

-- name: register_worker
INSERT INTO due_workers (id, host, pid, queues, started_at, last_seen_at, state)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, coalesce(%(now)s::timestamptz, now()),
        coalesce(%(now)s::timestamptz, now()), 'running')

-- name: touch_worker
-- A worker marked gone that reports in again (it was paused) is running again.
UPDATE due_workers
SET last_seen_at = coalesce(%(now)s::timestamptz, now()),
    state = CASE WHEN state = 'gone' THEN 'running' ELSE state END
WHERE id = %(id)s

-- name: set_worker_state
UPDATE due_workers
SET state = %(state)s,
    last_seen_at = coalesce(%(now)s::timestamptz, now()),
    stopped_at = CASE WHEN %(state)s = 'stopped' THEN coalesce(%(now)s::timestamptz, now()) END
WHERE id = %(id)s

-- name: mark_gone_workers
UPDATE due_workers
SET state = 'gone'
WHERE state IN ('running', 'stopping')
  AND last_seen_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(after)s)
RETURNING id

-- name: list_workers
SELECT * FROM due_workers ORDER BY started_at DESC LIMIT %(limit)s

-- name: any_expired
-- A read-only look before taking row locks for a rescue.
SELECT 1 AS found
FROM due_jobs
WHERE state = 'running' AND lease_expires_at < coalesce(%(now)s::timestamptz, now())
LIMIT 1
