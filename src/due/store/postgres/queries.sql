-- Every statement the PostgreSQL store runs, by name (same names as SQLite's).
-- Parameters are psycopg named parameters; arrays are sent in binary (%(x)b),
-- ten times cheaper to encode than text arrays. `%(now)s` is the injected clock's
-- instant, or NULL to use the database's clock: coalesce(%(now)s, now()).
-- Wake-ups: every statement that makes a job claimable notifies channel
-- `due_jobs` with the payload '<queue> <run_at as epoch seconds>'; every
-- statement that ends a job (succeeded, failed, cancelled) notifies `due_ended`
-- with an empty payload (one notification per transaction, however many end),
-- which wakes `app.wait()`. Channels are per database, so a channel is written
-- `{channel:due_jobs}` here and read with the schema's name in it (the store
-- expands it: backend.channel_sql): deployments in two schemas of one
-- database do not wake each other.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS due_schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: lock_migrations
-- Advisory locks are per database: the exclusive key names the schema the
-- migration writes to, so deployments in two schemas do not wait for each
-- other. Earlier versions take the bare name, exclusive; outside public this
-- one also holds the bare name shared, so during a rolling upgrade a process of
-- either version still migrates alone. In public the two keys are one (taking
-- it shared, then exclusive, would deadlock two sessions).
SELECT CASE WHEN current_schema() <> 'public'  -- NULL (no schema exists): as public
            THEN pg_advisory_xact_lock_shared(hashtext('due_schema_migrations')) END,
       pg_advisory_xact_lock(hashtext('due_schema_migrations'
                                      || coalesce(':' || nullif(current_schema(), 'public'), '')))

-- name: migrations_table_exists
SELECT to_regclass('due_schema_migrations') IS NOT NULL AS present

-- name: schema_version
SELECT max(version) AS version FROM due_schema_migrations

-- name: record_migration
INSERT INTO due_schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: empty_tables
-- Every row due keeps, the migrations' record aside: the database as `migrate`
-- left it (due.testing.empty, for tests). A new table goes here too
-- (tests/store/test_empty.py reads them all). Ids go on from where they were,
-- as after Django's flush. DELETE, not TRUNCATE: a test's tables hold few
-- rows, which DELETE removes in milliseconds where TRUNCATE made every table
-- and index anew (a third of a second, after each test), and TRUNCATE's lock
-- waited for any transaction that had read a table (due's lock_timeout: 30 s,
-- every other session queued behind it). One statement: one round trip, and
-- preparable.
WITH jobs AS (DELETE FROM due_jobs),
     workers AS (DELETE FROM due_workers),
     schedules AS (DELETE FROM due_schedules),
     schedule_runs AS (DELETE FROM due_schedule_runs),
     leases AS (DELETE FROM due_leases),
     queues AS (DELETE FROM due_queues),
     job_stats AS (DELETE FROM due_job_stats),
     actions AS (DELETE FROM due_actions),
     limits AS (DELETE FROM due_limits),
     limit_keys AS (DELETE FROM due_limit_keys),
     workflows AS (DELETE FROM due_workflows),
     workflow_edges AS (DELETE FROM due_workflow_edges)
DELETE FROM due_worker_recycles

-- name: current_time
SELECT coalesce(%(now)s::timestamptz, now()) AS now

-- name: server_identity
-- Which database of which server a connection is on, and the schema of the
-- due_jobs its search_path finds (NULL: none); a caller's connection is
-- checked against the App's own (sqlalchemy_connections.check_database).
SELECT current_database() AS database, pg_postmaster_start_time() AS started,
       (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = to_regclass('due_jobs')) AS tables

-- name: insert_job
-- A job due later waits among the timers (`timer`), out of the claim index.
INSERT INTO due_jobs (task, queue, priority, payload, run_at, timer, max_attempts,
                      key, dedupe_key, unique_for, stuck_after, created_at, limits)
VALUES (%(task)s, %(queue)s, %(priority)s, %(payload)s::jsonb,
        coalesce(%(run_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(delay)s)),
        coalesce(%(run_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(delay)s))
            > coalesce(%(now)s::timestamptz, now()),
        %(max_attempts)s, %(key)s, %(key)s, %(unique_for)s, %(stuck_after)s,
        coalesce(%(now)s::timestamptz, now()), %(limits)s::jsonb)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, run_at, created_at,
          pg_notify({channel:due_jobs}, queue || ' ' || extract(epoch FROM run_at)::text)::text AS notified

-- name: insert_job_unwoken
-- insert_job for a single enqueue in a transaction of its own (PostgresTransaction,
-- `wake_apart`): the same row, no notification; wake_inserted_job follows in a
-- transaction of its own, so that this commit takes no lock on notifications.
INSERT INTO due_jobs (task, queue, priority, payload, run_at, timer, max_attempts,
                      key, dedupe_key, unique_for, stuck_after, created_at, limits)
VALUES (%(task)s, %(queue)s, %(priority)s, %(payload)s::jsonb,
        coalesce(%(run_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(delay)s)),
        coalesce(%(run_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(delay)s))
            > coalesce(%(now)s::timestamptz, now()),
        %(max_attempts)s, %(key)s, %(key)s, %(unique_for)s, %(stuck_after)s,
        coalesce(%(now)s::timestamptz, now()), %(limits)s::jsonb)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, run_at, created_at

-- name: wake_inserted_job
-- The wake-up of the job insert_job_unwoken just committed on this session (the
-- sequence's last value here; no row, no wake-up), sent in a transaction that
-- does not wait for its commit to be flushed: PostgreSQL holds one lock for
-- all of the server's notifications from a notifying transaction's commit until
-- its flush, so notifying in the job's own transaction made enqueues of
-- several processes commit one at a time, never several in one flush. The job
-- is durable before this runs; a crash that loses the wake-up loses nothing
-- (every listener's connection is lost with it, and workers poll).
SELECT set_config('synchronous_commit', 'off', true),
       pg_notify({channel:due_jobs}, queue || ' ' || extract(epoch FROM run_at)::text)::text
           AS notified
FROM due_jobs
WHERE id = (SELECT currval('due_jobs_id_seq'))  -- once, so the primary key is used

-- name: insert_grouped_jobs
-- One-job enqueues made side by side on one event loop, as one statement (one
-- commit for all: enqueue_groups.py). Each row as insert_job would make it,
-- without a key; `ord` says which request a row answers.
WITH given AS MATERIALIZED (
    SELECT nextval('due_jobs_id_seq') AS id, g.*,
           coalesce(g.run_at, coalesce(%(now)s::timestamptz, now())
                              + make_interval(secs => g.delay)) AS due_at
    FROM unnest(%(task)b::text[], %(queue)b::text[], %(priority)b::int[], %(payload)b::text[],
                %(run_at)b::timestamptz[], %(delay)b::float8[], %(max_attempts)b::int[],
                %(unique_for)b::float8[], %(stuck_after)b::float8[], %(limits)b::text[])
         WITH ORDINALITY
         AS g(task, queue, priority, payload, run_at, delay, max_attempts, unique_for,
              stuck_after, limits, ord)
),
inserted AS (
    INSERT INTO due_jobs (id, task, queue, priority, payload, run_at, timer, max_attempts,
                          unique_for, stuck_after, created_at, limits)
    SELECT id, task, queue, priority, payload::jsonb, due_at,
           due_at > coalesce(%(now)s::timestamptz, now()), max_attempts, unique_for,
           stuck_after, coalesce(%(now)s::timestamptz, now()), limits::jsonb
    FROM given
    RETURNING id, run_at, created_at,
              pg_notify({channel:due_jobs}, queue || ' ' || extract(epoch FROM run_at)::text)::text
                  AS notified
)
SELECT g.ord, i.id, i.run_at, i.created_at
FROM inserted i JOIN given g ON g.id = i.id
ORDER BY g.ord

-- name: reserve_ids
-- Ids for a batch, and the database's now (constant for the transaction), so
-- the batch's due times are computed on the database's clock.
SELECT coalesce(%(now)s::timestamptz, now()) AS now,
       array(SELECT nextval('due_jobs_id_seq')
             FROM generate_series(1, %(count)s)) AS ids

-- name: insert_jobs
-- A batch of a bulk enqueue (run_many: one statement per batch, pipelined),
-- ids reserved by reserve_ids. A row whose key is held is not inserted, and is
-- settled one by one (steps.py).
INSERT INTO due_jobs (id, task, queue, priority, payload, run_at, timer, max_attempts,
                      key, dedupe_key, unique_for, stuck_after, created_at, limits)
SELECT j.id, j.task, j.queue, j.priority, j.payload::jsonb, j.run_at,
       j.run_at > %(now)s::timestamptz, j.max_attempts, j.key, j.key, j.unique_for, j.stuck_after,
       %(now)s::timestamptz, j.limits::jsonb
FROM unnest(%(id)b::bigint[], %(task)b::text[], %(queue)b::text[], %(priority)b::int[],
            %(payload)b::text[], %(run_at)b::timestamptz[], %(max_attempts)b::int[],
            %(key)b::text[], %(unique_for)b::float8[], %(stuck_after)b::float8[],
            %(limits)b::text[])
     AS j(id, task, queue, priority, payload, run_at, max_attempts, key, unique_for, stuck_after,
          limits)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING

-- name: jobs_present
-- Which of these ids are jobs (after a bulk insert: which rows went in).
SELECT id FROM due_jobs WHERE id = ANY(%(ids)b::bigint[])

-- name: notify_queues
SELECT pg_notify({channel:due_jobs}, q.queue || ' ' || extract(epoch FROM q.run_at)::text)::text
FROM unnest(%(queue)b::text[], %(run_at)b::timestamptz[]) AS q(queue, run_at)

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
-- The candidates are the first `limit` rows of the claim index and the first
-- `promote` due timers of the queue (run_at order); the best `limit` of them
-- by priority are claimed, and the due timers not claimed move into the claim
-- index (`promoted`). One statement: a delayed job starts at its run_at, and
-- competes by priority from then on.
-- `id = ANY(ARRAY(...))` keeps the update on the primary key whatever the
-- statistics say (an IN or a join may turn into a scan of the whole table).
-- Columns in core.records.CLAIM_COLUMNS' order; JSON as text, decoded once there.
WITH open AS (
    SELECT NOT EXISTS (SELECT 1 FROM due_queues WHERE name = %(queue)s AND paused) AS yes
),
timers AS MATERIALIZED (
    SELECT id, priority, run_at, held, task, limits IS NOT NULL AS limited
    FROM due_jobs
    WHERE state = 'queued' AND timer AND queue = %(queue)s
      AND run_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY run_at, id
    LIMIT %(promote)s
    FOR UPDATE SKIP LOCKED
),
ready AS MATERIALIZED (
    SELECT id, priority, run_at
    FROM due_jobs
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL
      AND queue = %(queue)s
      AND run_at <= coalesce(%(now)s::timestamptz, now())
      AND (%(tasks)b::text[] IS NULL OR task = ANY(%(tasks)b::text[]))
      AND (SELECT yes FROM open)
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
chosen AS MATERIALIZED (
    SELECT id
    FROM (SELECT id, priority, run_at FROM ready
          UNION ALL
          SELECT id, priority, run_at FROM timers
          WHERE NOT held AND NOT limited AND (%(tasks)b::text[] IS NULL OR task = ANY(%(tasks)b::text[]))
            AND (SELECT yes FROM open)) AS candidates
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
),
promoted AS (
    UPDATE due_jobs SET timer = false
    WHERE id = ANY(ARRAY(SELECT id FROM timers EXCEPT ALL SELECT id FROM chosen))
)
UPDATE due_jobs AS j
SET state = 'running',
    timer = false,
    attempt = j.attempt + 1,
    lease_token = j.lease_token + 1,
    lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(
        secs => coalesce((%(leases)s::jsonb ->> j.task)::float8, %(lease)s)),
    started_at = coalesce(%(now)s::timestamptz, now()),
    progress_at = NULL,
    worker = %(worker)s,
    attempt_status = 'claimed'  -- an attempt once its worker says the handler began
WHERE j.id = ANY(ARRAY(SELECT id FROM chosen))
RETURNING j.id, j.task, j.queue, j.priority, j.payload::text AS payload, j.attempt,
          j.max_attempts, j.lease_token, j.lease_expires_at, j.run_at, j.created_at,
          j.scheduled_for, j.checkpoint::text AS checkpoint, j.parent_id, j.completes,
          j.pieces_total, j.workflow_id, j.schedule,
          -- the headers its earliest attempt kept (due/instrumentation.py): a retry's link
          CASE WHEN j.attempt > 1 AND jsonb_typeof(j.errors) = 'array' THEN (
              SELECT entry.value -> 'headers' FROM jsonb_array_elements(j.errors)
                  WITH ORDINALITY AS entry (value, n)
              WHERE jsonb_typeof(entry.value -> 'headers') = 'object' ORDER BY entry.n LIMIT 1)::text
          END AS first_attempt

-- name: heartbeat
-- Fencing: a job's lease_token changes whenever an attempt starts (claim) or
-- ends (complete, rescue, release), so a token matches exactly one running
-- attempt; no state test is needed (and none misleads the planner when the
-- statistics say few jobs run).
-- Batch statements (heartbeat, rescue, release) first lock their rows in id
-- order, whatever plan the join below gets: two batches about the same jobs
-- can then never deadlock (complete_jobs says why it needs no such step).
-- They find the locked rows with `id = ANY(ARRAY(SELECT id FROM locked))`: a
-- list computed once and looked up by primary key. With `id IN (SELECT ...)`
-- the planner, expecting one row from unnest, rescanned the locked rows once
-- per job (an acknowledgement of 100 jobs: 4.2 ms; with the list, 2.6 ms).
-- The heartbeat skips rows locked by someone else (a handler's own open
-- transaction holding its job's row): those are neither renewed nor lost this
-- time, and every other lease of the worker is renewed without waiting.
WITH locked AS MATERIALIZED (  -- row locks taken in id order: batches never deadlock
    SELECT id FROM due_jobs WHERE id = ANY(%(id)b::bigint[])
    ORDER BY id FOR NO KEY UPDATE SKIP LOCKED
),
renewed AS (
    -- Progress rides along (NULL: unchanged), and the news that the handler
    -- began (`started`: the attempt counts from now on); the reply carries
    -- cancel requests.
    UPDATE due_jobs AS j
    SET lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => h.lease),
        progress = coalesce(h.progress::jsonb, j.progress),
        progress_at = CASE WHEN h.progress IS NOT NULL
                                AND h.progress::jsonb IS DISTINCT FROM j.progress
                           THEN coalesce(%(now)s::timestamptz, now()) ELSE j.progress_at END,
        attempt_status = CASE WHEN h.started THEN 'started' ELSE j.attempt_status END
    FROM unnest(%(id)b::bigint[], %(token)b::bigint[], %(lease)b::float8[],
                %(progress)b::text[], %(started)b::boolean[])
         AS h(id, token, lease, progress, started)
    WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
      AND j.id = h.id AND j.lease_token = h.token
    RETURNING j.id, j.cancel_requested
)
SELECT l.id, r.id IS NOT NULL AS renewed, coalesce(r.cancel_requested, false) AS cancel_requested
FROM locked l LEFT JOIN renewed r ON r.id = l.id

-- name: bound_lock_wait
-- For the rows the heartbeat skipped: wait for them, but briefly.
SET LOCAL lock_timeout = '500ms'

-- name: heartbeat_waiting
-- The heartbeat again for the rows another transaction held: most are held for
-- milliseconds (a piece settling on its parent). A row missing altogether is lost.
WITH locked AS MATERIALIZED (  -- row locks taken in id order: batches never deadlock
    SELECT id FROM due_jobs WHERE id = ANY(%(id)b::bigint[])
    ORDER BY id FOR NO KEY UPDATE
),
renewed AS (
    -- Progress rides along (NULL: unchanged), and the news that the handler
    -- began (`started`: the attempt counts from now on); the reply carries
    -- cancel requests.
    UPDATE due_jobs AS j
    SET lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => h.lease),
        progress = coalesce(h.progress::jsonb, j.progress),
        progress_at = CASE WHEN h.progress IS NOT NULL
                                AND h.progress::jsonb IS DISTINCT FROM j.progress
                           THEN coalesce(%(now)s::timestamptz, now()) ELSE j.progress_at END,
        attempt_status = CASE WHEN h.started THEN 'started' ELSE j.attempt_status END
    FROM unnest(%(id)b::bigint[], %(token)b::bigint[], %(lease)b::float8[],
                %(progress)b::text[], %(started)b::boolean[])
         AS h(id, token, lease, progress, started)
    WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
      AND j.id = h.id AND j.lease_token = h.token
    RETURNING j.id, j.cancel_requested
)
SELECT l.id, r.id IS NOT NULL AS renewed, coalesce(r.cancel_requested, false) AS cancel_requested
FROM locked l LEFT JOIN renewed r ON r.id = l.id

-- name: complete_jobs
-- One statement for a batch of attempt endings, with their counts: each row is
-- fenced by its token, so a stale worker's write matches nothing (and counts
-- nothing); the ends written are counted in due_job_stats (outcome and
-- duration bucket as the caller computed them, NULL outcome: no end, as for
-- record_endings) and a schedule's success is noted, in the same statement, so
-- an acknowledgement that settles no parent is one round trip, not four.
-- Its rows are locked as they are updated, with no step of their own that
-- locks them first (that step wrote a lock record per row: 7 % of the
-- server's CPU in a drain). The batch comes sorted by id and is found through
-- the primary key, so the rows are updated in id order; and of the other
-- batches that wait for a job's row, a heartbeat waits at most 500 ms (its
-- first pass skips held rows), a rescue skips them, and a release or a
-- parent's settling locks in id order too. Should a plan ever take them in
-- another order, the server's deadlock check ends one of two statements, and
-- it is written again (retried on conflict).
-- A job asked to stop ends cancelled whatever its attempt did (a stop asked
-- for is a stop): not retried after a failure, and after a success its result
-- is kept. The request is read from the locked row (`j.cancel_requested` in
-- SET is evaluated on the row as it is when locked), so a cancel committed
-- while this statement waited for the row is seen; an entry in its errors says
-- what the attempt did.
WITH done AS (
    UPDATE due_jobs AS j
    SET state = CASE WHEN j.cancel_requested AND c.state <> 'waiting' THEN 'cancelled'
                     ELSE c.state END,
        lease_token = j.lease_token + 1,  -- the attempt is over: its token is stale now
        result = CASE WHEN c.state = 'succeeded' THEN c.result::jsonb ELSE j.result END,
        warning = CASE WHEN c.state = 'succeeded' THEN c.warning ELSE j.warning END,
        run_at = CASE WHEN c.state = 'queued' AND NOT j.cancel_requested
                      THEN coalesce(%(now)s::timestamptz, now()) + make_interval(secs => c.retry_in)
                      ELSE j.run_at END,
        -- a retry after a backoff waits as a timer
        timer = c.state = 'queued' AND c.retry_in > 0 AND NOT j.cancel_requested,
        finished_at = CASE WHEN c.state <> 'waiting' AND (c.state <> 'queued' OR j.cancel_requested)
                           THEN coalesce(%(now)s::timestamptz, now()) END,
        lease_expires_at = NULL,
        lost_leases = 0,
        progress = coalesce(c.progress::jsonb, j.progress),
        last_error = CASE WHEN j.cancel_requested AND c.state <> 'waiting'
                          THEN 'cancelled on request'
                          ELSE coalesce(c.error::jsonb ->> 'error', j.last_error) END,
        errors = j.errors || CASE WHEN c.error IS NULL THEN '[]' ELSE jsonb_build_array(c.error::jsonb) END
                 || CASE WHEN j.cancel_requested AND c.state NOT IN ('waiting', 'cancelled')
                    THEN jsonb_build_array(jsonb_build_object('attempt', j.attempt,
                        'kind', 'cancelled', 'error', 'cancelled on request; its attempt had '
                        || CASE c.state WHEN 'succeeded' THEN 'succeeded (result kept)'
                           ELSE 'failed' END,
                        'traceback', NULL, 'at', coalesce(%(now)s::timestamptz, now())))
                    ELSE '[]' END,
        dedupe_key = CASE WHEN c.state IN ('failed', 'cancelled') OR j.cancel_requested
                            OR (c.state = 'succeeded' AND coalesce(j.unique_for, 0) <= 0)
                          THEN NULL ELSE j.dedupe_key END
    FROM unnest(%(id)b::bigint[], %(token)b::bigint[], %(state)b::text[], %(result)b::text[],
                %(error)b::text[], %(retry_in)b::float8[], %(progress)b::text[],
                %(warning)b::text[], %(outcome)b::text[], %(bucket)b::int[],
                %(seconds)b::float8[])
         AS c(id, token, state, result, error, retry_in, progress, warning, outcome, bucket,
              seconds)
    WHERE j.id = ANY(%(id)b::bigint[])
      AND j.id = c.id AND j.lease_token = c.token
    RETURNING j.id, j.task, j.queue, j.schedule, j.state, j.parent_id, j.completes, j.workflow_id,
              j.pieces_total, j.cancel_requested,
              j.limits IS NOT NULL AS limited,  -- its slots free: store/limit_claims.py
              CASE WHEN j.state = 'cancelled' AND c.state <> 'cancelled' THEN 'cancelled'
                   ELSE c.outcome END AS outcome,
              c.bucket, c.seconds,
              CASE WHEN j.state = 'queued' THEN  -- wake workers for the job due again
                  pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
              WHEN j.state IN ('succeeded', 'failed', 'cancelled') THEN  -- wake app.wait()
                  pg_notify({channel:due_ended}, '')::text
              END AS notified
),
counted AS (  -- as record_endings: this session's rows, so sessions never wait on each other
    INSERT INTO due_job_stats AS s (span, minute, task, queue, outcome, bucket, writer, count,
                                    duration_sum)
    SELECT 'minute', date_trunc('minute', coalesce(%(now)s::timestamptz, now())),
           task, queue, outcome, bucket, pg_backend_pid(), count(*), sum(seconds)
    FROM done
    WHERE outcome IS NOT NULL
    GROUP BY task, queue, outcome, bucket
    ON CONFLICT (span, minute, task, queue, outcome, bucket, writer) DO UPDATE
    SET count = s.count + excluded.count, duration_sum = s.duration_sum + excluded.duration_sum
),
succeeded_schedules AS MATERIALIZED (  -- locked in name order, as everywhere
    -- A list looked up by primary key: most batches have no schedule's run,
    -- and an IN (subquery) hashed and joined the batch for nothing.
    SELECT name FROM due_schedules
    WHERE name = ANY(ARRAY(SELECT schedule FROM done
                           WHERE state = 'succeeded' AND schedule IS NOT NULL))
    ORDER BY name FOR NO KEY UPDATE
),
noted AS (  -- as note_schedule_success
    UPDATE due_schedules
    SET last_success_at = coalesce(%(now)s::timestamptz, now())
    WHERE name = ANY(ARRAY(SELECT name FROM succeeded_schedules))
)
SELECT id, task, queue, schedule, state, parent_id, completes, workflow_id, pieces_total, cancel_requested,
       limited
FROM done

-- name: completions_recorded
-- Of the attempt endings given, those the jobs already show: a write tried
-- again after its first try's reply was lost (the connection broke after the
-- commit) finds its tokens stale, and is not a lost lease. An end moves the
-- token one past the attempt's, leaves its state, appends its error if it has
-- one, and sets lost_leases to 0. Of the other writers that move a running
-- job's token by one, a rescue counts a lost lease, a release appends an error
-- of its own (kind 'released': a completion without an error that names the
-- state the release left, queued or cancelled, is taken as recorded, and the
-- job is in that state either way), a parent finished by its last piece is no
-- longer waiting, and the handler's own transaction (complete_in_transaction)
-- ended the attempt succeeded, as the completion says. A job asked to stop
-- ended cancelled whatever the completion said (complete_jobs), its error kept
-- before the entry that says so.
SELECT j.id
FROM unnest(%(id)b::bigint[], %(token)b::bigint[], %(state)b::text[], %(error)b::text[])
     AS c(id, token, state, error)
JOIN due_jobs AS j ON j.id = c.id
WHERE j.lease_token = c.token + 1 AND j.lost_leases = 0
  AND (j.state = c.state OR (j.state = 'cancelled' AND j.cancel_requested AND c.state <> 'waiting'))
  AND (c.error IS NULL OR j.errors @> jsonb_build_array(c.error::jsonb))

-- name: select_expired
-- Running jobs whose worker stopped renewing the lease. The task is never
-- consulted, so a process that does not know the task rescues it too.
-- Read without locking: the parents of pieces are locked next (parents first),
-- then rescue_jobs locks these rows and checks each is still the same attempt,
-- still expired (another rescuer, or a late renewal, makes it a no-op).
SELECT id, lease_token, attempt, max_attempts, lost_leases, worker, parent_id, completes, workflow_id,
       attempt_status
FROM due_jobs
WHERE state = 'running' AND lease_expires_at < coalesce(%(now)s::timestamptz, now())
ORDER BY id
LIMIT %(limit)s

-- name: rescue_jobs
-- Back to the queue, keeping its run_at (its place in line: it has been due
-- since then); or failed for good when the verdict gives up; or cancelled,
-- when it was asked to stop (it will not run again). A row another transaction
-- holds (a handler's open transaction on its own job) is skipped, not waited
-- for: one held row must not stall the rescue of every other dead worker's job.
WITH locked AS MATERIALIZED (  -- row locks taken in id order: batches never deadlock
    SELECT id FROM due_jobs WHERE id = ANY(%(id)b::bigint[]) ORDER BY id
    FOR NO KEY UPDATE SKIP LOCKED
)
-- Only a start that ran is an attempt: one its worker never said it started
-- ('claimed') is not counted, and one handed back at shutdown ('handed_back')
-- is not counted as a lost lease either (as the verdict, read unlocked, said:
-- a row whose status moved since is left for the next round).
UPDATE due_jobs AS j
SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                 WHEN r.gives_up THEN 'failed' ELSE 'queued' END,
    lease_token = j.lease_token + 1,
    attempt = CASE WHEN j.attempt_status = 'started' THEN j.attempt ELSE j.attempt - 1 END,
    finished_at = CASE WHEN r.gives_up OR j.cancel_requested
                       THEN coalesce(%(now)s::timestamptz, now()) END,
    lease_expires_at = NULL,
    lost_leases = CASE WHEN j.attempt_status = 'handed_back' THEN j.lost_leases
                       ELSE j.lost_leases + 1 END,
    last_error = r.error::jsonb ->> 'error',
    errors = j.errors || jsonb_build_array(r.error::jsonb),
    dedupe_key = CASE WHEN r.gives_up OR j.cancel_requested THEN NULL ELSE j.dedupe_key END
FROM unnest(%(id)b::bigint[], %(token)b::bigint[], %(gives_up)b::boolean[],
            %(error)b::text[], %(status)b::text[]) AS r(id, token, gives_up, error, status)
WHERE j.id = ANY(ARRAY(SELECT id FROM locked)) AND j.id = r.id AND j.lease_token = r.token
  AND j.attempt_status = r.status
  AND j.state = 'running' AND j.lease_expires_at < coalesce(%(now)s::timestamptz, now())
RETURNING j.id, j.task, j.queue, j.state, j.parent_id, j.completes, j.workflow_id, j.pieces_total,
          CASE WHEN j.state = 'queued' THEN  -- wake workers for the job due again
              pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
          WHEN j.state IN ('succeeded', 'failed', 'cancelled') THEN  -- wake app.wait()
              pg_notify({channel:due_ended}, '')::text
          END AS notified

-- name: get_job
-- `stuck`: running, and its progress has not moved for its task's stuck_after.
SELECT *,
       (state = 'running' AND stuck_after IS NOT NULL
        AND coalesce(progress_at, started_at)
            < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => stuck_after)) AS stuck
FROM due_jobs
WHERE id = %(id)s

-- name: list_jobs
-- Newest first, from `before` back: `id < coalesce(before, <largest id>)` is a
-- bound the index scan starts from, also in a generic plan (a statement
-- prepared by psycopg), where `before IS NULL OR id < before` is not.
-- args_contains: JSON containment in the keyword arguments or in one
-- positional argument. A positional argument shown hidden is never searched
-- (a search by a key in it would confirm a guessed secret): its position is
-- in the payload's "redact" list, or in hidden_positions ({"task": [1, 2]},
-- the positions the showing app's tasks hide). The containment of the whole
-- list is checked too, cheaply: a job that holds no match is not taken apart.
SELECT *
FROM (SELECT *,
             (state = 'running' AND stuck_after IS NOT NULL
              AND coalesce(progress_at, started_at)
                  < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => stuck_after))
                 AS stuck
      FROM due_jobs
      WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
        AND (%(state)s::text IS NULL OR state = %(state)s)
        AND (%(task)s::text IS NULL OR task = %(task)s)
        AND (%(parent)s::bigint IS NULL OR parent_id = %(parent)s)
        AND (%(key)s::text IS NULL OR key = %(key)s)
        AND (%(since)s::timestamptz IS NULL OR coalesce(finished_at, created_at) >= %(since)s)
        AND (%(until)s::timestamptz IS NULL OR coalesce(finished_at, created_at) < %(until)s)
        AND (%(error_contains)s::text IS NULL OR strpos(last_error, %(error_contains)s) > 0)
        AND (%(key_prefix)s::text IS NULL OR starts_with(key, %(key_prefix)s))
        AND (%(workflow)s::bigint IS NULL OR workflow_id = %(workflow)s)
        AND (%(args_contains)s::jsonb IS NULL
             OR payload -> 'kwargs' @> %(args_contains)s::jsonb
             OR payload -> 'args' @> jsonb_build_array(%(args_contains)s::jsonb)
                AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(payload -> 'args')
                                                                WHEN 'array' THEN payload -> 'args' END)
                                               WITH ORDINALITY AS arg (value, n)
                            WHERE arg.value @> %(args_contains)s::jsonb
                              AND NOT coalesce(payload -> 'redact', '[]') @> to_jsonb(n - 1)
                              AND NOT coalesce(%(hidden_positions)s::jsonb -> task, '[]') @> to_jsonb(n - 1)))
        AND id < coalesce(%(before)s::bigint, 9223372036854775807)) AS j
WHERE NOT %(stuck_only)s OR stuck
ORDER BY id DESC
LIMIT %(limit)s

-- name: list_running_jobs
-- list_jobs for the running jobs (as many as the workers' slots): read newest
-- first through their index, not back through the primary key past every
-- newer job.
SELECT *
FROM (SELECT *,
             (stuck_after IS NOT NULL
              AND coalesce(progress_at, started_at)
                  < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => stuck_after))
                 AS stuck
      FROM due_jobs
      WHERE state = 'running'
        AND (%(queue)s::text IS NULL OR queue = %(queue)s)
        AND (%(task)s::text IS NULL OR task = %(task)s)
        AND (%(parent)s::bigint IS NULL OR parent_id = %(parent)s)
        AND (%(key)s::text IS NULL OR key = %(key)s)
        AND (%(since)s::timestamptz IS NULL OR coalesce(finished_at, created_at) >= %(since)s)
        AND (%(until)s::timestamptz IS NULL OR coalesce(finished_at, created_at) < %(until)s)
        AND (%(error_contains)s::text IS NULL OR strpos(last_error, %(error_contains)s) > 0)
        AND (%(key_prefix)s::text IS NULL OR starts_with(key, %(key_prefix)s))
        AND (%(workflow)s::bigint IS NULL OR workflow_id = %(workflow)s)
        AND (%(args_contains)s::jsonb IS NULL
             OR payload -> 'kwargs' @> %(args_contains)s::jsonb
             OR payload -> 'args' @> jsonb_build_array(%(args_contains)s::jsonb)
                AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(payload -> 'args')
                                                                WHEN 'array' THEN payload -> 'args' END)
                                               WITH ORDINALITY AS arg (value, n)
                            WHERE arg.value @> %(args_contains)s::jsonb
                              AND NOT coalesce(payload -> 'redact', '[]') @> to_jsonb(n - 1)
                              AND NOT coalesce(%(hidden_positions)s::jsonb -> task, '[]') @> to_jsonb(n - 1)))
        AND id < coalesce(%(before)s::bigint, 9223372036854775807)) AS j
WHERE NOT %(stuck_only)s OR stuck
ORDER BY id DESC
LIMIT %(limit)s

-- name: list_stopped_jobs
-- list_jobs for the waiting or the failed jobs (state), few beside the rest:
-- read newest first through their index (due_jobs_stopped), not back through
-- the primary key past every newer job. Neither is ever stuck (only a
-- running job is). One branch per state, its state written out: so the
-- partial index serves also a generic plan (a statement psycopg prepared),
-- and the planner counts the rows of one state (with `state = %(state)s`
-- beside `state IN (...)` it expected 367 of 20,000 failed jobs, read them
-- all through another index and sorted them: 52 ms against 0.3).
  (SELECT *, false AS stuck
   FROM due_jobs
   WHERE state = 'waiting' AND %(state)s::text = 'waiting'
     AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     AND (%(task)s::text IS NULL OR task = %(task)s)
     AND (%(parent)s::bigint IS NULL OR parent_id = %(parent)s)
     AND (%(key)s::text IS NULL OR key = %(key)s)
     AND (%(since)s::timestamptz IS NULL OR coalesce(finished_at, created_at) >= %(since)s)
     AND (%(until)s::timestamptz IS NULL OR coalesce(finished_at, created_at) < %(until)s)
     AND (%(error_contains)s::text IS NULL OR strpos(last_error, %(error_contains)s) > 0)
     AND (%(key_prefix)s::text IS NULL OR starts_with(key, %(key_prefix)s))
     AND (%(workflow)s::bigint IS NULL OR workflow_id = %(workflow)s)
     AND (%(args_contains)s::jsonb IS NULL
          OR payload -> 'kwargs' @> %(args_contains)s::jsonb
          OR payload -> 'args' @> jsonb_build_array(%(args_contains)s::jsonb)
             AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(payload -> 'args')
                                                             WHEN 'array' THEN payload -> 'args' END)
                                            WITH ORDINALITY AS arg (value, n)
                         WHERE arg.value @> %(args_contains)s::jsonb
                           AND NOT coalesce(payload -> 'redact', '[]') @> to_jsonb(n - 1)
                           AND NOT coalesce(%(hidden_positions)s::jsonb -> task, '[]') @> to_jsonb(n - 1)))
     AND id < coalesce(%(before)s::bigint, 9223372036854775807)
     AND NOT %(stuck_only)s
   ORDER BY id DESC
   LIMIT %(limit)s)
UNION ALL
  (SELECT *, false AS stuck
   FROM due_jobs
   WHERE state = 'failed' AND %(state)s::text = 'failed'
     AND (%(queue)s::text IS NULL OR queue = %(queue)s)
     AND (%(task)s::text IS NULL OR task = %(task)s)
     AND (%(parent)s::bigint IS NULL OR parent_id = %(parent)s)
     AND (%(key)s::text IS NULL OR key = %(key)s)
     AND (%(since)s::timestamptz IS NULL OR coalesce(finished_at, created_at) >= %(since)s)
     AND (%(until)s::timestamptz IS NULL OR coalesce(finished_at, created_at) < %(until)s)
     AND (%(error_contains)s::text IS NULL OR strpos(last_error, %(error_contains)s) > 0)
     AND (%(key_prefix)s::text IS NULL OR starts_with(key, %(key_prefix)s))
     AND (%(workflow)s::bigint IS NULL OR workflow_id = %(workflow)s)
     AND (%(args_contains)s::jsonb IS NULL
          OR payload -> 'kwargs' @> %(args_contains)s::jsonb
          OR payload -> 'args' @> jsonb_build_array(%(args_contains)s::jsonb)
             AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(payload -> 'args')
                                                             WHEN 'array' THEN payload -> 'args' END)
                                            WITH ORDINALITY AS arg (value, n)
                         WHERE arg.value @> %(args_contains)s::jsonb
                           AND NOT coalesce(payload -> 'redact', '[]') @> to_jsonb(n - 1)
                           AND NOT coalesce(%(hidden_positions)s::jsonb -> task, '[]') @> to_jsonb(n - 1)))
     AND id < coalesce(%(before)s::bigint, 9223372036854775807)
     AND NOT %(stuck_only)s
   ORDER BY id DESC
   LIMIT %(limit)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: count_retryable_jobs
-- bulk.count for retry_many: how many jobs the retry would queue again, read
-- in the database and counted no further than `cap` (one statement, no rows
-- sent back). The failed or cancelled jobs list_jobs lists with the same
-- filter, as bulk._retry_batch takes them: a job outside any workflow if
-- retry_job would take it (no pieces of its own; a piece while its parent
-- still counts its pieces; a completion job while its parent waits for it)
-- and no other job holds its key (lock_job_by_key's holds_key), one job per
-- key (the first one retried takes the key and the others are refused); a
-- step of a workflow brings in every failed or cancelled step of its
-- workflow (retry_workflow_steps), each workflow once.
WITH matched AS NOT MATERIALIZED (
    SELECT id, key, parent_id, completes, pieces_total, workflow_id
    FROM (  -- each state apart, so that even a generic plan reads its index
          SELECT * FROM due_jobs
          WHERE state = 'failed' AND (%(state)s::text IS NULL OR %(state)s = 'failed')
          UNION ALL
          SELECT * FROM due_jobs
          WHERE state = 'cancelled' AND (%(state)s::text IS NULL OR %(state)s = 'cancelled')
         ) AS j
    WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(parent)s::bigint IS NULL OR parent_id = %(parent)s)
      AND (%(key)s::text IS NULL OR key = %(key)s)
      AND (%(since)s::timestamptz IS NULL OR coalesce(finished_at, created_at) >= %(since)s)
      AND (%(until)s::timestamptz IS NULL OR coalesce(finished_at, created_at) < %(until)s)
      AND (%(error_contains)s::text IS NULL OR strpos(last_error, %(error_contains)s) > 0)
      AND (%(key_prefix)s::text IS NULL OR starts_with(key, %(key_prefix)s))
      AND (%(workflow)s::bigint IS NULL OR workflow_id = %(workflow)s)
      AND (%(args_contains)s::jsonb IS NULL
           OR payload -> 'kwargs' @> %(args_contains)s::jsonb
           OR payload -> 'args' @> jsonb_build_array(%(args_contains)s::jsonb)
              AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(payload -> 'args')
                                                              WHEN 'array' THEN payload -> 'args' END)
                                             WITH ORDINALITY AS arg (value, n)
                          WHERE arg.value @> %(args_contains)s::jsonb
                            AND NOT coalesce(payload -> 'redact', '[]') @> to_jsonb(n - 1)
                            AND NOT coalesce(%(hidden_positions)s::jsonb -> task, '[]') @> to_jsonb(n - 1)))
      AND id < coalesce(%(before)s::bigint, 9223372036854775807)
),
single AS NOT MATERIALIZED (
    SELECT m.id, m.key
    FROM matched AS m
    WHERE m.workflow_id IS NULL AND m.pieces_total = 0
      AND (m.parent_id IS NULL OR EXISTS (
          SELECT 1 FROM due_jobs AS p
          WHERE p.id = m.parent_id
            AND (p.state = 'running'
                 OR (p.state = 'waiting' AND p.pieces_done + p.pieces_failed < p.pieces_total))))
      AND (m.completes IS NULL OR EXISTS (
          SELECT 1 FROM due_jobs AS p WHERE p.id = m.completes AND p.state = 'waiting'))
      AND (m.key IS NULL OR NOT EXISTS (
          SELECT 1 FROM due_jobs AS h
          WHERE h.dedupe_key = m.key AND h.id <> m.id
            AND (h.state IN ('queued', 'running', 'waiting')
                 OR (h.state = 'succeeded' AND h.finished_at + make_interval(secs => coalesce(h.unique_for, 0))
                     > coalesce(%(now)s::timestamptz, now())))))
)
SELECT count(*) AS n
FROM (SELECT 1 FROM single WHERE key IS NULL
      UNION ALL
      SELECT 1 FROM (SELECT DISTINCT key FROM single WHERE key IS NOT NULL) AS k
      UNION ALL
      SELECT 1 FROM due_jobs AS s
      WHERE s.workflow_id IN (SELECT workflow_id FROM matched WHERE workflow_id IS NOT NULL)
        AND s.state IN ('failed', 'cancelled') AND s.pieces_total = 0
        AND EXISTS (SELECT 1 FROM due_workflows AS w WHERE w.id = s.workflow_id)
      LIMIT %(cap)s) AS counted

-- name: count_cancellable_jobs
-- bulk.count for cancel_many: how many jobs the cancel would end or ask to
-- stop, read in the database and counted no further than `cap`. The queued,
-- running and waiting jobs list_jobs lists with the same filter that are not
-- asked to stop already (bulk.cancel_many passes those over), less those the
-- cancel ends on the way before it comes to them, uncounted: a waiting job
-- is cancelled first and takes with it its unfinished pieces and completion
-- job, all the way down (pieces.cancel_pieces), and a waiting step whose
-- unfinished upstream steps are all waiting jobs cancelled before it is
-- cancelled by its policy (workflows.release) unless the policy is to run.
WITH RECURSIVE matched AS NOT MATERIALIZED (
    SELECT id, state, workflow_id, on_upstream_failure
    FROM (  -- each state apart, so that even a generic plan reads its index
          SELECT * FROM due_jobs
          WHERE state = 'waiting' AND (%(state)s::text IS NULL OR %(state)s = 'waiting')
          UNION ALL
          SELECT * FROM due_jobs
          WHERE state = 'running' AND (%(state)s::text IS NULL OR %(state)s = 'running')
          UNION ALL
          SELECT * FROM due_jobs
          WHERE state = 'queued' AND (%(state)s::text IS NULL OR %(state)s = 'queued')
         ) AS j
    WHERE NOT cancel_requested
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
      AND (%(parent)s::bigint IS NULL OR parent_id = %(parent)s)
      AND (%(key)s::text IS NULL OR key = %(key)s)
      AND (%(since)s::timestamptz IS NULL OR coalesce(finished_at, created_at) >= %(since)s)
      AND (%(until)s::timestamptz IS NULL OR coalesce(finished_at, created_at) < %(until)s)
      AND (%(error_contains)s::text IS NULL OR strpos(last_error, %(error_contains)s) > 0)
      AND (%(key_prefix)s::text IS NULL OR starts_with(key, %(key_prefix)s))
      AND (%(workflow)s::bigint IS NULL OR workflow_id = %(workflow)s)
      AND (%(args_contains)s::jsonb IS NULL
           OR payload -> 'kwargs' @> %(args_contains)s::jsonb
           OR payload -> 'args' @> jsonb_build_array(%(args_contains)s::jsonb)
              AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(payload -> 'args')
                                                              WHEN 'array' THEN payload -> 'args' END)
                                             WITH ORDINALITY AS arg (value, n)
                          WHERE arg.value @> %(args_contains)s::jsonb
                            AND NOT coalesce(payload -> 'redact', '[]') @> to_jsonb(n - 1)
                            AND NOT coalesce(%(hidden_positions)s::jsonb -> task, '[]') @> to_jsonb(n - 1)))
      AND id < coalesce(%(before)s::bigint, 9223372036854775807)
),
waiting AS MATERIALIZED (SELECT id FROM matched WHERE state = 'waiting'),
taken(id, deeper) AS (
    SELECT c.id, c.state = 'waiting' OR (c.state = 'queued' AND c.pieces_total > 0)
    FROM waiting AS w JOIN due_jobs AS c ON c.parent_id = w.id OR c.completes = w.id
    WHERE c.state IN ('queued', 'running', 'waiting')
    UNION ALL
    SELECT c.id, c.state = 'waiting' OR (c.state = 'queued' AND c.pieces_total > 0)
    FROM taken AS t JOIN due_jobs AS c ON c.parent_id = t.id OR c.completes = t.id
    WHERE t.deeper AND c.state IN ('queued', 'running', 'waiting')
)
SELECT count(*) AS n
FROM (SELECT 1 FROM matched AS m
      WHERE m.id NOT IN (SELECT id FROM taken)
        AND NOT (m.state = 'waiting' AND m.workflow_id IS NOT NULL
                 AND coalesce(m.on_upstream_failure, 'cancel') <> 'run'
                 AND EXISTS (SELECT 1 FROM due_workflow_edges AS e JOIN due_jobs AS u ON u.id = e.upstream_id
                             WHERE e.step_id = m.id AND u.state IN ('queued', 'running', 'waiting'))
                 AND NOT EXISTS (SELECT 1 FROM due_workflow_edges AS e JOIN due_jobs AS u ON u.id = e.upstream_id
                                 WHERE e.step_id = m.id AND u.state IN ('queued', 'running', 'waiting')
                                   AND u.id NOT IN (SELECT id FROM waiting)))
      LIMIT %(cap)s) AS counted

-- name: cancel_job
UPDATE due_jobs
SET state = 'cancelled',
    limit_wait = NULL,
    limit_wait_key = NULL,
    finished_at = coalesce(%(now)s::timestamptz, now()),
    dedupe_key = NULL
WHERE id = %(id)s AND state = 'queued'
RETURNING *, pg_notify({channel:due_ended}, '')::text AS ended

-- name: cancel_queued_jobs
-- cancel_job for a batch of jobs (bulk.cancel_many, run_each): the queued ones
-- end, their rows locked in id order (the lock order of every batch of writes);
-- the rest are left to cancel_job's siblings, one by one.
WITH chosen AS MATERIALIZED (
    SELECT id FROM due_jobs
    WHERE id = ANY(%(id)b::bigint[]) AND state = 'queued'
    ORDER BY id FOR NO KEY UPDATE
)
UPDATE due_jobs AS j
SET state = 'cancelled',
    limit_wait = NULL,
    limit_wait_key = NULL,
    finished_at = coalesce(%(now)s::timestamptz, now()),
    dedupe_key = NULL
FROM chosen
WHERE j.id = chosen.id AND j.state = 'queued'
RETURNING j.*, pg_notify({channel:due_ended}, '')::text AS ended

-- name: retry_plain_jobs
-- retry_job for a batch of jobs (bulk.retry_many, run_each), for those with no
-- key, parent or workflow to look after (the others go one by one, through
-- steps.retry_steps): their rows locked in id order.
WITH chosen AS MATERIALIZED (
    SELECT id FROM due_jobs
    WHERE id = ANY(%(id)b::bigint[]) AND state IN ('failed', 'cancelled') AND pieces_total = 0
      AND key IS NULL AND parent_id IS NULL AND completes IS NULL AND workflow_id IS NULL
    ORDER BY id FOR NO KEY UPDATE
)
UPDATE due_jobs AS j
SET state = 'queued',
    limit_wait = NULL,
    limit_wait_key = NULL,
    dedupe_key = j.key,
    run_at = CASE WHEN %(run_now)s OR j.run_at < coalesce(%(now)s::timestamptz, now())
                  THEN coalesce(%(now)s::timestamptz, now()) ELSE j.run_at END,
    timer = NOT %(run_now)s AND j.run_at > coalesce(%(now)s::timestamptz, now()),
    attempt = 0,
    lost_leases = 0,
    cancel_requested = false,
    finished_at = NULL,
    lease_expires_at = NULL
FROM chosen
WHERE j.id = chosen.id AND j.state IN ('failed', 'cancelled')
RETURNING j.id,
    pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
    AS notified

-- name: lock_parents
-- The parents of these jobs, locked before the jobs themselves by every
-- transaction that settles: one lock order (parent, then pieces), so a
-- piece's end and its parent's failure or cancellation never deadlock.
SELECT id FROM due_jobs
WHERE id IN (SELECT coalesce(parent_id, completes) FROM due_jobs
             WHERE id = ANY(%(ids)b::bigint[]))
ORDER BY id
FOR NO KEY UPDATE

-- name: lock_parents_skip_locked
-- lock_parents for the rescue, which never waits: a parent another transaction
-- holds is skipped, and so are its pieces, until a later round.
SELECT id FROM due_jobs
WHERE id IN (SELECT coalesce(parent_id, completes) FROM due_jobs
             WHERE id = ANY(%(ids)b::bigint[]))
ORDER BY id
FOR NO KEY UPDATE SKIP LOCKED

-- name: bound_rescue_locks
-- Should settling a rescued piece reach further rows (a parent's other pieces),
-- it waits for them only briefly: a held row delays one rescue round, not all.
SET LOCAL lock_timeout = '2s'

-- name: uncount_piece
-- A piece retried by hand no longer counts as ended on its parent.
UPDATE due_jobs
SET pieces_failed = pieces_failed - 1,
    progress = jsonb_build_object('done', pieces_done + pieces_failed - 1, 'total', pieces_total)
WHERE id = %(parent)s AND pieces_failed > 0
RETURNING id

-- name: job_key
SELECT id, key FROM due_jobs WHERE id = %(id)s
FOR UPDATE

-- name: retry_job
-- Due now; a job cancelled while delayed keeps its time if it is still to come.
-- It takes its key back (steps.retry_steps made sure no other job holds it).
UPDATE due_jobs
SET state = 'queued',
    limit_wait = NULL,  -- a wait ended with the job: its next claim looks again
    limit_wait_key = NULL,
    dedupe_key = key,
    run_at = CASE WHEN %(run_now)s OR run_at < coalesce(%(now)s::timestamptz, now())
                  THEN coalesce(%(now)s::timestamptz, now()) ELSE run_at END,
    timer = NOT %(run_now)s AND run_at > coalesce(%(now)s::timestamptz, now()),
    attempt = 0,
    lost_leases = 0,
    cancel_requested = false,
    finished_at = NULL,
    lease_expires_at = NULL
WHERE id = %(id)s AND state IN ('failed', 'cancelled') AND pieces_total = 0
  AND (parent_id IS NULL OR EXISTS (
      -- A piece, while its parent still counts its pieces (not settled).
      SELECT 1 FROM due_jobs p
      WHERE p.id = due_jobs.parent_id
        AND (p.state = 'running'
             OR (p.state = 'waiting' AND p.pieces_done + p.pieces_failed < p.pieces_total))))
  AND (completes IS NULL OR EXISTS (
      -- A completion job, only while its parent waits for it.
      SELECT 1 FROM due_jobs p WHERE p.id = due_jobs.completes AND p.state = 'waiting'))
RETURNING *, pg_notify({channel:due_jobs}, queue || ' ' || extract(epoch FROM run_at)::text)::text
    AS notified

-- name: due_queues
SELECT DISTINCT queue
FROM due_jobs
WHERE state = 'queued' AND NOT held AND run_at <= coalesce(%(now)s::timestamptz, now())
ORDER BY queue

-- name: set_job_limits
-- Running jobs stored as counting against no limit, whose task counts against
-- some in the code of the worker that claimed them (a schedule's run stored
-- before its task had limits): their limits, as an enqueue writes them, before
-- they are handed back (release_jobs, in the same transaction); fenced.
UPDATE due_jobs AS j SET limits = s.limits::jsonb
FROM unnest(%(id)b::bigint[], %(token)b::bigint[], %(limits)b::text[]) AS s(id, token, limits)
WHERE j.id = s.id AND j.lease_token = s.token AND j.state = 'running' AND j.limits IS NULL

-- name: release_jobs
-- A stopping worker hands back jobs it will not finish: due again at once (its
-- run_at kept: its place in line), and the interrupted attempt is not counted.
WITH locked AS MATERIALIZED (  -- row locks taken in id order: batches never deadlock
    SELECT id FROM due_jobs WHERE id = ANY(%(id)b::bigint[]) ORDER BY id FOR NO KEY UPDATE
)
-- A job asked to stop is not handed back: it ends cancelled. A job whose
-- handler thread still runs (`later`: it cannot be interrupted) is handed back
-- as it stands: still running under its lease, its token moved on (the thread
-- can write nothing more), due again only when the lease it held expires (at
-- most `handback` seconds on: the worker exits before then) and a rescue puts
-- it back, attempt not counted (attempt_status 'handed_back').
UPDATE due_jobs AS j
SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                 WHEN r.later THEN 'running' ELSE 'queued' END,
    lease_token = j.lease_token + 1,
    attempt = CASE WHEN r.later AND NOT j.cancel_requested THEN j.attempt ELSE j.attempt - 1 END,
    attempt_status = CASE WHEN r.later THEN 'handed_back' ELSE j.attempt_status END,
    lease_expires_at = CASE WHEN r.later AND NOT j.cancel_requested
                            THEN least(j.lease_expires_at, coalesce(%(now)s::timestamptz, now())
                                                           + make_interval(secs => %(handback)s))
                       END,
    finished_at = CASE WHEN j.cancel_requested THEN coalesce(%(now)s::timestamptz, now()) END,
    dedupe_key = CASE WHEN j.cancel_requested THEN NULL ELSE j.dedupe_key END,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'kind', 'released',
        'error', %(reason)s::text || CASE WHEN r.later AND NOT j.cancel_requested
            THEN '; its handler thread still ran: due again once its lease expires' ELSE '' END,
        'traceback', NULL, 'at', coalesce(%(now)s::timestamptz, now())))
FROM unnest(%(id)b::bigint[], %(token)b::bigint[], %(later)b::boolean[]) AS r(id, token, later)
WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
  AND j.id = r.id AND j.lease_token = r.token
RETURNING j.id, j.state, j.task, j.queue, j.parent_id, j.completes, j.workflow_id, j.pieces_total,
          CASE WHEN j.state = 'queued' THEN  -- wake workers for the job due again
              pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
          WHEN j.state IN ('succeeded', 'failed', 'cancelled') THEN  -- wake app.wait()
              pg_notify({channel:due_ended}, '')::text
          END AS notified

-- name: next_due
-- When the next job of these tasks in this queue is due (the worker sleeps
-- until then): the earliest of the claim index and of the timers. The claim
-- index is read by a skip scan: for each priority level present, the earliest
-- run_at; O(levels x log n), with no index of its own. The timers are in
-- run_at order already. A paused queue has no next due time (a resume
-- notifies its workers).
WITH RECURSIVE levels(priority) AS (
    SELECT max(priority) FROM due_jobs
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = %(queue)s
    UNION ALL
    SELECT (SELECT max(priority) FROM due_jobs
            WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = %(queue)s
              AND priority < levels.priority)
    FROM levels
    WHERE levels.priority IS NOT NULL
),
due_times(run_at) AS (
    SELECT (SELECT min(run_at) FROM due_jobs
            WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = %(queue)s
              AND priority = levels.priority AND task = ANY(%(tasks)b::text[]))
    FROM levels
    WHERE priority IS NOT NULL
    UNION ALL
    SELECT (SELECT run_at FROM due_jobs
            WHERE state = 'queued' AND timer AND queue = %(queue)s AND NOT held
              AND task = ANY(%(tasks)b::text[])
            ORDER BY run_at LIMIT 1)
)
SELECT min(run_at) AS run_at
FROM due_times
WHERE NOT EXISTS (SELECT 1 FROM due_queues WHERE name = %(queue)s AND paused)

-- name: unknown_task_candidates
-- One queue's look for jobs of tasks nobody knows, read without a lock: the
-- next %(scan)s entries of its claim index after where the last look stopped,
-- in the claim's order (priority, run_at, id: a range of the index however
-- many jobs share a run_at). Those due for longer than the grace, of a task
-- the caller does not know, are the candidates. A backlog of a million old
-- jobs costs each sweep what %(scan)s of them do, and the next sweeps read
-- on. Held pieces are not in the claim index (they cannot be failed), nor
-- are timers (a claim in the queue moves the due ones in). One row per
-- candidate (`id`; none: one row with a NULL id), each with how many entries
-- were read and the last of them (where the next look starts).
WITH examined AS MATERIALIZED (
    SELECT id, priority, run_at, task
    FROM ((SELECT id, priority, run_at, task FROM due_jobs
           WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = %(queue)s
             AND priority = %(after_priority)s::int
             AND (run_at, id) > (%(after_run_at)s::timestamptz, %(after_id)s::bigint)
           ORDER BY priority DESC, run_at, id
           LIMIT %(scan)s)
          UNION ALL
          (SELECT id, priority, run_at, task FROM due_jobs
           WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = %(queue)s
             AND priority < coalesce(%(after_priority)s::int, 2147483647)
           ORDER BY priority DESC, run_at, id
           LIMIT %(scan)s)) AS next
    ORDER BY priority DESC, run_at, id
    LIMIT %(scan)s
),
last AS (SELECT priority, run_at, id FROM examined ORDER BY priority, run_at DESC, id DESC LIMIT 1)
SELECT s.examined, s.after_priority, s.after_run_at, s.after_id, u.id
FROM (SELECT (SELECT count(*) FROM examined) AS examined,
             (SELECT priority FROM last) AS after_priority,
             (SELECT run_at FROM last) AS after_run_at,
             (SELECT id FROM last) AS after_id) AS s
LEFT JOIN (SELECT id FROM examined
           WHERE run_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(grace)s)
             AND NOT (task = ANY(%(tasks)b::text[]))) AS u ON true

-- name: fail_unknown_tasks
-- The candidates of a look (`ids`) that are still jobs nobody knows, due for
-- the whole grace period (a deploy that never finished, a typo): failed with
-- the reason, kept, and retryable once a worker knows the task. "Live":
-- registered as running or stopping and seen within `alive` seconds; the
-- caller, which does not know the task (it knows `tasks`), is one of them.
UPDATE due_jobs
SET state = 'failed',
    finished_at = coalesce(%(now)s::timestamptz, now()),
    dedupe_key = NULL,
    last_error = 'unknown task ' || task || ': no live worker of queue ' || queue
        || ' knew it within ' || %(grace_text)s::text || ' of its due time',
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'kind', 'unknown_task',
        'error', 'unknown task ' || task || ': no live worker of queue ' || queue
            || ' knew it within ' || %(grace_text)s::text || ' of its due time',
        'traceback', NULL, 'at', coalesce(%(now)s::timestamptz, now())))
WHERE id = ANY(%(ids)b::bigint[])
  AND state = 'queued' AND NOT held
  AND NOT (task = ANY(%(tasks)b::text[]))
  AND run_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(grace)s)
  AND NOT EXISTS (
      SELECT 1 FROM due_workers w
      WHERE w.state IN ('running', 'stopping')
        AND w.last_seen_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(alive)s)
        AND w.queues ? due_jobs.queue
        AND w.tasks ? due_jobs.task)
RETURNING id, task, queue, state, parent_id, completes, workflow_id, pieces_total,
          pg_notify({channel:due_ended}, '')::text AS ended

-- name: limited_sweep_candidates
-- One queue's look at its jobs that count against a limit (waiting for one
-- or not: they are in no claim index), read without a lock: the next
-- %(scan)s of them in run_at order after where the last look stopped. The
-- candidates: due for longer than the grace, of a task the caller does not
-- know (`unknown`); or due, of a task the caller knows, counting against a
-- limit the caller's code no longer gives that task (`task_limits`: each
-- known task's limits), and enqueued before the caller started or due for
-- longer than the grace (a job enqueued since by older code, during a deploy,
-- keeps it that long). One row per candidate (`id`; none: one row with a NULL
-- id), each with how many were read and the last of them.
WITH examined AS MATERIALIZED (
    SELECT id, run_at, created_at, task, limits FROM due_jobs
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
      AND queue = %(queue)s
      AND (%(after_id)s::bigint IS NULL
           OR (run_at >= %(after_run_at)s::timestamptz
               AND (run_at, id) > (%(after_run_at)s::timestamptz, %(after_id)s::bigint)))
    ORDER BY run_at, id
    LIMIT %(scan)s
),
last AS (SELECT run_at, id FROM examined ORDER BY run_at DESC, id DESC LIMIT 1)
SELECT s.examined, s.after_run_at, s.after_id, c.id, c.unknown
FROM (SELECT (SELECT count(*) FROM examined) AS examined,
             (SELECT run_at FROM last) AS after_run_at,
             (SELECT id FROM last) AS after_id) AS s
LEFT JOIN (
    SELECT id, NOT (%(task_limits)s::jsonb ? task) AS unknown FROM examined
    WHERE CASE WHEN NOT (%(task_limits)s::jsonb ? task)
               THEN run_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(grace)s)
               ELSE %(worker)s::text IS NOT NULL
                    AND run_at <= coalesce(%(now)s::timestamptz, now())
                    AND (run_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(grace)s)
                         OR created_at < (SELECT started_at FROM due_workers WHERE id = %(worker)s))
                    AND EXISTS (SELECT 1 FROM jsonb_array_elements(limits) AS p(pair)
                                WHERE NOT ((%(task_limits)s::jsonb -> task) ? (p.pair ->> 0)))
          END
) AS c ON true

-- name: drop_undeclared_limits
-- The candidates of a look (`ids`) that still count against a limit the
-- caller's code no longer gives their task (a limit taken out of the code):
-- it is dropped from them, the others kept, the reason in their history. A
-- job never waits for a limit that the code running it does not declare; a
-- job no longer counting against what it waited for waits no more, and its
-- queue's workers hear of it.
WITH chosen AS MATERIALIZED (
    SELECT j.id, kept.pairs, dropped.names
    FROM due_jobs j
    CROSS JOIN LATERAL (
        SELECT jsonb_agg(p.pair ORDER BY p.n) AS pairs
        FROM jsonb_array_elements(j.limits) WITH ORDINALITY AS p(pair, n)
        WHERE (%(task_limits)s::jsonb -> j.task) ? (p.pair ->> 0)) AS kept
    CROSS JOIN LATERAL (
        SELECT string_agg(DISTINCT p.pair ->> 0, ', ') AS names
        FROM jsonb_array_elements(j.limits) AS p(pair)
        WHERE NOT ((%(task_limits)s::jsonb -> j.task) ? (p.pair ->> 0))) AS dropped
    WHERE j.id = ANY(%(ids)b::bigint[])
      AND j.state = 'queued' AND NOT j.held AND j.limits IS NOT NULL
      AND %(task_limits)s::jsonb ? j.task
      AND j.run_at <= coalesce(%(now)s::timestamptz, now())
      AND (j.run_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(grace)s)
           OR j.created_at < (SELECT started_at FROM due_workers WHERE id = %(worker)s))
      AND dropped.names IS NOT NULL
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE due_jobs AS j
SET limits = c.pairs,  -- NULL when none is left: an ordinary job
    limit_wait = CASE WHEN c.pairs @> jsonb_build_array(jsonb_build_array(j.limit_wait, j.limit_wait_key))
                      THEN j.limit_wait END,
    limit_wait_key = CASE WHEN c.pairs @> jsonb_build_array(jsonb_build_array(j.limit_wait, j.limit_wait_key))
                          THEN j.limit_wait_key END,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'kind', 'limits_dropped',
        'error', 'no longer counts against limit ' || c.names || ': the code of worker '
            || %(worker)s::text || ' gives its task ' || j.task || ' no such limit',
        'traceback', NULL, 'at', coalesce(%(now)s::timestamptz, now())))
FROM chosen c
WHERE j.id = c.id
RETURNING j.id,
          pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
              AS notified

-- name: register_worker
INSERT INTO due_workers (id, host, pid, queues, tasks, started_at, last_seen_at, state)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(tasks)s::jsonb,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()), 'running')

-- name: touch_worker
-- A worker marked gone that reports in again (it was paused) is running again;
-- one whose row was pruned meanwhile finds none, and registers again.
UPDATE due_workers
SET last_seen_at = coalesce(%(now)s::timestamptz, now()),
    state = CASE WHEN state = 'gone' THEN 'running' ELSE state END
WHERE id = %(id)s
RETURNING id

-- name: set_worker_state
UPDATE due_workers
SET state = %(state)s,
    last_seen_at = coalesce(%(now)s::timestamptz, now()),
    stopped_at = CASE WHEN %(state)s = 'stopped' THEN coalesce(%(now)s::timestamptz, now()) END
WHERE id = %(id)s

-- name: count_worker_recycle
-- A worker process that recycled itself, counted as it records its stop.
INSERT INTO due_worker_recycles (reason, total) VALUES (%(reason)s, 1)
ON CONFLICT (reason) DO UPDATE SET total = due_worker_recycles.total + 1

-- name: worker_recycles
SELECT reason, total FROM due_worker_recycles ORDER BY reason

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

-- ---------------------------------------------------------------- schedules

-- name: list_schedule_rows
SELECT * FROM due_schedules ORDER BY name

-- name: lock_schedule_sync
-- Every worker syncs the code's schedules as it starts; a fleet starts many at
-- once. One at a time, each reads what the previous one wrote (else two would
-- both insert a new schedule, and one would fail on the primary key). Keyed
-- by schema, and compatible with earlier versions, as lock_migrations is.
SELECT CASE WHEN current_schema() <> 'public'  -- NULL (no schema exists): as public
            THEN pg_advisory_xact_lock_shared(hashtext('due_schedule_sync')) END,
       pg_advisory_xact_lock(hashtext('due_schedule_sync'
                                      || coalesce(':' || nullif(current_schema(), 'public'), '')))

-- name: insert_schedule
INSERT INTO due_schedules (name, task, cron, every, tz, payload, queue, priority, max_attempts,
                           misfire, overlap, catch_up_limit, misfire_grace, source, enabled,
                           paused, fingerprint, next_fire_at, created_at, updated_at,
                           alert_after, limits)
VALUES (%(name)s, %(task)s, %(cron)s, %(every)s, %(tz)s, %(payload)s::jsonb, %(queue)s,
        %(priority)s, %(max_attempts)s, %(misfire)s, %(overlap)s, %(catch_up_limit)s,
        %(misfire_grace)s, %(source)s, %(enabled)s, false, %(fingerprint)s, %(next_fire_at)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()),
        %(alert_after)s, %(limits)s)

-- name: update_schedule
-- A changed definition starts afresh from its next time; its history stays.
UPDATE due_schedules
SET task = %(task)s, cron = %(cron)s, every = %(every)s, tz = %(tz)s,
    payload = %(payload)s::jsonb, queue = %(queue)s, priority = %(priority)s,
    max_attempts = %(max_attempts)s, misfire = %(misfire)s, overlap = %(overlap)s,
    catch_up_limit = %(catch_up_limit)s, misfire_grace = %(misfire_grace)s,
    source = %(source)s, enabled = %(enabled)s, fingerprint = %(fingerprint)s,
    next_fire_at = %(next_fire_at)s, updated_at = coalesce(%(now)s::timestamptz, now()),
    alert_after = %(alert_after)s, limits = %(limits)s, problem = NULL
WHERE name = %(name)s

-- name: set_schedule_problem
-- It cannot fire: not listed as due (nor its time as the next) until its
-- definition is written again.
UPDATE due_schedules SET problem = %(problem)s WHERE name = %(name)s

-- name: disable_schedule
UPDATE due_schedules
SET enabled = false, updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s

-- name: delete_schedule
DELETE FROM due_schedules WHERE name = %(name)s RETURNING name

-- name: pause_schedule
UPDATE due_schedules
SET paused = %(paused)s, updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s
RETURNING name

-- name: due_schedule_names
SELECT name
FROM due_schedules
WHERE enabled AND next_fire_at <= coalesce(%(now)s::timestamptz, now()) AND problem IS NULL
ORDER BY next_fire_at

-- name: next_schedule_fire
SELECT min(next_fire_at) AS next_fire_at FROM due_schedules WHERE enabled AND problem IS NULL

-- name: lock_schedule
SELECT * FROM due_schedules WHERE name = %(name)s FOR UPDATE

-- name: schedule_activity
-- Is a run of this schedule still going, and does one wait for it?
SELECT EXISTS (SELECT 1 FROM due_jobs
               WHERE schedule = %(name)s AND state IN ('queued', 'running', 'waiting')) AS active,
       EXISTS (SELECT 1 FROM due_schedule_runs
               WHERE schedule = %(name)s AND outcome = 'pending') AS pending

-- name: insert_schedule_run
INSERT INTO due_schedule_runs (schedule, scheduled_for, outcome, reason, recorded_at)
VALUES (%(name)s, %(scheduled_for)s, %(outcome)s, %(reason)s,
        coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (schedule, scheduled_for) DO NOTHING
RETURNING scheduled_for

-- name: count_missed
UPDATE due_schedules SET missed_total = missed_total + %(missed)s WHERE name = %(name)s

-- name: insert_scheduled_job
INSERT INTO due_jobs (task, queue, priority, payload, run_at, timer, max_attempts, schedule,
                      scheduled_for, created_at, limits)
VALUES (%(task)s, %(queue)s, %(priority)s, %(payload)s::jsonb, %(run_at)s,
        %(run_at)s::timestamptz > coalesce(%(now)s::timestamptz, now()), %(max_attempts)s,
        %(name)s, %(scheduled_for)s, coalesce(%(now)s::timestamptz, now()), %(limits)s::jsonb)
ON CONFLICT (schedule, scheduled_for) WHERE schedule IS NOT NULL DO NOTHING
RETURNING id, pg_notify({channel:due_jobs}, queue || ' ' || extract(epoch FROM run_at)::text)::text
    AS notified

-- name: link_schedule_run
UPDATE due_schedule_runs
SET job_id = %(job_id)s, outcome = 'enqueued', reason = %(reason)s
WHERE schedule = %(name)s AND scheduled_for = %(scheduled_for)s

-- name: set_next_fire
UPDATE due_schedules SET next_fire_at = %(next_fire_at)s WHERE name = %(name)s

-- name: supersede_pending
UPDATE due_schedule_runs
SET outcome = 'skipped', reason = 'replaced by a newer run'
WHERE schedule = %(name)s AND outcome = 'pending'

-- name: cancel_schedule_runs
-- `replace`: queued runs are cancelled outright, running ones asked to stop.
UPDATE due_jobs
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'queued'
                       THEN coalesce(%(now)s::timestamptz, now()) ELSE finished_at END,
    cancel_requested = true,
    dedupe_key = CASE WHEN state = 'queued' THEN NULL ELSE dedupe_key END
WHERE schedule = %(name)s AND state IN ('queued', 'running', 'waiting')
RETURNING id, task, queue, state, parent_id, completes, workflow_id, pieces_total, cancel_requested,
          CASE WHEN state = 'cancelled' THEN pg_notify({channel:due_ended}, '')::text END AS ended

-- name: skip_pending_runs
-- Runs waiting for their previous one, of a schedule paused, disabled or removed
-- meanwhile: they will not start.
UPDATE due_schedule_runs SET outcome = 'skipped', reason = %(reason)s
WHERE schedule = %(name)s AND outcome = 'pending'

-- name: schedules_with_pending
SELECT DISTINCT schedule AS name FROM due_schedule_runs WHERE outcome = 'pending'

-- name: oldest_pending_run
SELECT scheduled_for FROM due_schedule_runs
WHERE schedule = %(name)s AND outcome = 'pending'
ORDER BY scheduled_for
LIMIT 1

-- name: schedule_overview
SELECT s.*,
       (SELECT r.scheduled_for FROM due_schedule_runs r
        WHERE r.schedule = s.name AND r.outcome = 'enqueued'
        ORDER BY r.scheduled_for DESC LIMIT 1) AS last_run_at,
       (SELECT j.state FROM due_schedule_runs r JOIN due_jobs j ON j.id = r.job_id
        WHERE r.schedule = s.name AND r.outcome = 'enqueued'
        ORDER BY r.scheduled_for DESC LIMIT 1) AS last_run_state,
       (SELECT count(*) FROM due_schedule_runs r
        WHERE r.schedule = s.name AND r.outcome = 'skipped') AS skipped,
       (SELECT count(*) FROM due_schedule_runs r
        WHERE r.schedule = s.name AND r.outcome = 'missed') AS missed
FROM due_schedules s
ORDER BY s.name

-- name: schedule_runs
SELECT r.schedule, r.scheduled_for, r.outcome, r.reason, r.job_id, j.state AS job_state,
       r.recorded_at, j.started_at, j.finished_at
FROM due_schedule_runs r LEFT JOIN due_jobs j ON j.id = r.job_id
WHERE r.schedule = %(name)s
ORDER BY r.scheduled_for DESC
LIMIT %(limit)s

-- name: schedule_runs_since
-- The runs of a window (scheduled at or after `since`), oldest first.
SELECT r.schedule, r.scheduled_for, r.outcome, r.reason, r.job_id, j.state AS job_state,
       r.recorded_at, j.started_at, j.finished_at
FROM due_schedule_runs r LEFT JOIN due_jobs j ON j.id = r.job_id
WHERE r.schedule = %(name)s AND r.scheduled_for >= %(since)s
ORDER BY r.scheduled_for

-- ------------------------------------------------------------------- leases

-- name: acquire_lease
-- Taken when free or expired (a new term: the token grows), renewed when ours.
INSERT INTO due_leases (name, holder, token, expires_at)
VALUES (%(name)s, %(holder)s, 1,
        coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    token = CASE WHEN due_leases.holder = excluded.holder
                  AND due_leases.expires_at >= coalesce(%(now)s::timestamptz, now())
                 THEN due_leases.token ELSE due_leases.token + 1 END,
    expires_at = excluded.expires_at
WHERE due_leases.holder = excluded.holder
   OR due_leases.expires_at < coalesce(%(now)s::timestamptz, now())
RETURNING token

-- name: renew_lease
UPDATE due_leases
SET expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(ttl)s)
WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s
  AND expires_at >= coalesce(%(now)s::timestamptz, now())
RETURNING token

-- name: release_lease
UPDATE due_leases
SET expires_at = coalesce(%(now)s::timestamptz, now()) - interval '1 microsecond'
WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s

-- name: bound_transaction
-- Through a transaction-mode pooler, where a session setting would leak to other
-- clients: the bounds of _configure_pooled_connection, for this transaction only.
SELECT set_config('statement_timeout', %(statement)s, true),
       set_config('lock_timeout', %(lock)s, true),
       set_config('idle_in_transaction_session_timeout', %(idle)s, true)

-- name: unbounded_transaction
-- A transaction that builds large parameters between its statements (many
-- pieces, a bulk enqueue) or rewrites a big table (a migration) is busy, not
-- stalled: no idle, statement or lock limit for it.
SET LOCAL idle_in_transaction_session_timeout = 0;
SET LOCAL statement_timeout = 0;
SET LOCAL lock_timeout = 0

-- name: bound_leader_transaction
-- A leader's transaction holds the lease row (FOR SHARE, below) until it ends:
-- if the leader is paused inside it, the server ends it within 2 s, so the
-- lease can still be taken over once it expires.
SET LOCAL idle_in_transaction_session_timeout = '2s'

-- name: lease_is_held
-- Inside a leader's transaction: its writes count only while it holds the lease.
SELECT 1 AS held FROM due_leases
WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s
  AND expires_at >= coalesce(%(now)s::timestamptz, now())
FOR SHARE

-- ------------------------------------------------------------------ pruning

-- name: prune_jobs
-- Finished jobs older than the retention, oldest ids first (the primary key
-- finds them at its start). The newest job is never deleted, so SQLite's
-- ids are never reused; the same rule here keeps both stores alike.
DELETE FROM due_jobs
WHERE id = ANY(ARRAY(
    SELECT id FROM due_jobs
    WHERE ((state = 'succeeded'
            AND finished_at < coalesce(%(now)s::timestamptz, now())
                              - make_interval(secs => %(retention_succeeded)s))
           OR (state IN ('failed', 'cancelled')
               AND finished_at < coalesce(%(now)s::timestamptz, now())
                                 - make_interval(secs => %(retention_failed)s)))
      -- A job whose key still deduplicates (its unique_for window is open) stays.
      AND (dedupe_key IS NULL
           OR finished_at + make_interval(secs => coalesce(unique_for, 0))
              <= coalesce(%(now)s::timestamptz, now()))
      AND id < (SELECT max(id) FROM due_jobs)
      -- A workflow is kept or pruned whole (prune_workflows): a retry finds
      -- every result it reads, and every step it counts.
      AND workflow_id IS NULL
    ORDER BY id
    LIMIT %(limit)s
))
RETURNING id

-- name: prunable_workflows
-- Ended workflows older than their outcome's retention (a failed or cancelled
-- one is kept as long as a failed job, every step of it), oldest first, as
-- many as hold `limit` steps (one at least). None holds the newest job, nor a
-- step whose key still deduplicates.
SELECT id FROM (
    SELECT w.id, sum(w.steps_total) OVER (ORDER BY w.id) - w.steps_total AS before
    FROM due_workflows AS w
    WHERE w.state <> 'running'
      AND w.finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(
          secs => CASE WHEN w.state = 'succeeded' THEN %(retention_succeeded)s
                       ELSE %(retention_failed)s END)
      AND NOT EXISTS (
          SELECT 1 FROM due_jobs AS s
          WHERE s.workflow_id = w.id
            AND (s.id >= (SELECT max(id) FROM due_jobs)
                 OR (s.dedupe_key IS NOT NULL
                     AND s.finished_at + make_interval(secs => coalesce(s.unique_for, 0))
                         > coalesce(%(now)s::timestamptz, now()))))
) AS old
WHERE before < %(limit)s
ORDER BY id

-- name: lock_pruned_steps
-- Their steps, locked in id order before their rows (the one lock order): a
-- retry under way is waited for, and seen by prune_workflows.
SELECT id FROM due_jobs WHERE workflow_id = ANY(%(ids)b::bigint[]) ORDER BY id FOR UPDATE

-- name: prune_workflows
-- The workflows still ended (not retried meanwhile), and still old enough.
DELETE FROM due_workflows AS w
WHERE w.id = ANY(%(ids)b::bigint[]) AND w.state <> 'running'
  AND w.finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(
      secs => CASE WHEN w.state = 'succeeded' THEN %(retention_succeeded)s
                   ELSE %(retention_failed)s END)
RETURNING w.id

-- name: prune_workflow_steps
DELETE FROM due_jobs WHERE workflow_id = ANY(%(ids)b::bigint[])
RETURNING id

-- name: prune_workflow_edges
DELETE FROM due_workflow_edges
WHERE step_id = ANY(%(ids)b::bigint[]) OR upstream_id = ANY(%(ids)b::bigint[])

-- name: prune_schedule_runs
DELETE FROM due_schedule_runs
WHERE (schedule, scheduled_for) IN (
    SELECT schedule, scheduled_for FROM due_schedule_runs
    WHERE outcome <> 'pending'
      AND recorded_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(retention)s)
    LIMIT %(limit)s
)
RETURNING schedule

-- ------------------------------------------------------------- long work

-- name: save_checkpoint
-- Fenced: only the attempt holding the token may move the cursor. A handler
-- that saves one has begun: its attempt counts from now on.
UPDATE due_jobs SET checkpoint = %(value)s::jsonb, attempt_status = 'started'
WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'
RETURNING cancel_requested

-- name: request_cancel
-- A running job sees it at its next heartbeat; on PostgreSQL at once.
UPDATE due_jobs SET cancel_requested = true
WHERE id = %(id)s AND state = 'running'
RETURNING *, pg_notify({channel:due_jobs}, '!cancel ' || id)::text AS notified

-- name: complete_in_transaction
-- ctx.transaction(): the job succeeds in the handler's own transaction, fenced.
UPDATE due_jobs
SET state = 'succeeded', lease_token = lease_token + 1, result = 'null'::jsonb,
    finished_at = coalesce(%(now)s::timestamptz, now()), lease_expires_at = NULL,
    lost_leases = 0,
    progress = coalesce(%(progress)s::jsonb, progress),
    dedupe_key = CASE WHEN coalesce(unique_for, 0) <= 0 THEN NULL ELSE dedupe_key END
WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running' AND pieces_total = 0
RETURNING id, task, queue, schedule, state, parent_id, completes, workflow_id, cancel_requested,
          extract(epoch FROM finished_at - started_at)::float8 AS seconds,
          pg_notify({channel:due_ended}, '')::text AS ended

-- name: add_pieces
-- A running parent announces pieces (fenced by its token). A later call keeps
-- what an earlier one said unless it says otherwise.
UPDATE due_jobs
SET on_complete = coalesce(%(on_complete)s, on_complete),
    on_piece_failure = coalesce(%(on_piece_failure)s, on_piece_failure)
WHERE id = %(parent)s AND lease_token = %(token)s AND state = 'running'
RETURNING held, cancel_requested

-- name: count_new_pieces
UPDATE due_jobs SET pieces_total = pieces_total + %(added)s WHERE id = %(parent)s

-- name: insert_batch_parent
-- app.batch(): a parent that never runs itself: it waits for its pieces.
INSERT INTO due_jobs (task, queue, priority, state, payload, run_at, max_attempts,
                      pieces_total, on_complete, on_piece_failure, progress, created_at)
VALUES (%(task)s, %(queue)s, 0, 'waiting', '{"args": [], "kwargs": {}}'::jsonb,
        coalesce(%(now)s::timestamptz, now()), 1, %(total)s, %(on_complete)s,
        %(on_piece_failure)s, jsonb_build_object('done', 0, 'total', %(total)s),
        coalesce(%(now)s::timestamptz, now()))
RETURNING id

-- name: insert_pieces
-- A piece already spawned (same key) is not added again.
INSERT INTO due_jobs (task, queue, priority, payload, run_at, max_attempts, stuck_after,
                      parent_id, piece_key, held, created_at, limits)
SELECT p.task, p.queue, p.priority, p.payload::jsonb, coalesce(%(now)s::timestamptz, now()),
       p.max_attempts, p.stuck_after, %(parent)s, p.piece_key, %(held)s,
       coalesce(%(now)s::timestamptz, now()), p.limits::jsonb
FROM unnest(%(task)b::text[], %(queue)b::text[], %(priority)b::int[], %(payload)b::text[],
            %(max_attempts)b::int[], %(stuck_after)b::float8[], %(piece_key)b::text[],
            %(limits)b::text[])
     AS p(task, queue, priority, payload, max_attempts, stuck_after, piece_key, limits)
ON CONFLICT (parent_id, piece_key) WHERE parent_id IS NOT NULL DO NOTHING
RETURNING id, queue, pg_notify({channel:due_jobs}, queue || ' 0')::text AS notified

-- name: count_piece_endings
-- Pieces that ended, counted on their parent (whose row lock serialises the
-- pieces finishing at the same instant on different workers).
UPDATE due_jobs
SET pieces_done = pieces_done + %(succeeded)s,
    pieces_failed = pieces_failed + %(failed)s,
    progress = jsonb_build_object(
        'done', pieces_done + %(succeeded)s + pieces_failed + %(failed)s,
        'total', pieces_total),
    progress_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(parent)s
RETURNING id, state, pieces_total, pieces_done, pieces_failed, on_complete, on_piece_failure,
          queue, priority, completes, upstream_pending

-- name: parent_counts
SELECT id, state, pieces_total, pieces_done, pieces_failed, on_complete, on_piece_failure, queue,
       priority, completes, upstream_pending
FROM due_jobs WHERE id = %(parent)s FOR UPDATE

-- name: finish_parent
UPDATE due_jobs
SET state = %(state)s, lease_token = lease_token + 1,
    finished_at = coalesce(%(now)s::timestamptz, now()), lease_expires_at = NULL,
    result = %(result)s::jsonb,
    last_error = coalesce(%(error)s, last_error),
    dedupe_key = NULL
WHERE id = %(id)s AND state = 'waiting'
RETURNING id, task, queue, schedule, state, parent_id, completes, workflow_id,
          pg_notify({channel:due_ended}, '')::text AS ended

-- name: insert_completion_job
-- Once per parent, whatever races: the key is the parent's.
INSERT INTO due_jobs (task, queue, priority, payload, run_at, max_attempts, stuck_after,
                      completes, key, dedupe_key, created_at)
VALUES (%(task)s, %(queue)s, %(priority)s, %(payload)s::jsonb,
        coalesce(%(now)s::timestamptz, now()), %(max_attempts)s, %(stuck_after)s::float8,
        %(parent)s, %(key)s, %(key)s, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, pg_notify({channel:due_jobs}, queue || ' 0')::text AS notified

-- name: waiting_children
-- Pieces that are parents themselves, waiting (or queued for another attempt):
-- cancelled with their own pieces.
SELECT id FROM due_jobs
WHERE (parent_id = %(parent)s OR completes = %(parent)s)
  AND (state = 'waiting' OR (state = 'queued' AND pieces_total > 0))
ORDER BY id

-- name: cancel_children
-- A parent that ends early takes its unfinished pieces (and its completion
-- job) with it: queued and waiting ones end now, running ones are asked.
UPDATE due_jobs
SET state = CASE WHEN state IN ('queued', 'waiting') THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state IN ('queued', 'waiting')
                       THEN coalesce(%(now)s::timestamptz, now()) ELSE finished_at END,
    cancel_requested = true,
    dedupe_key = CASE WHEN state IN ('queued', 'waiting') THEN NULL ELSE dedupe_key END
WHERE (parent_id = %(parent)s OR completes = %(parent)s)
  AND state IN ('queued', 'running', 'waiting')
RETURNING id, task, queue, state, pg_notify({channel:due_jobs}, '!cancel ' || id)::text AS notified,
          CASE WHEN state = 'cancelled' THEN pg_notify({channel:due_ended}, '')::text END AS ended

-- name: hold_group
-- Pause (held) or resume a group: the parent and all its pieces (so a piece
-- retried while the group is paused stays held).
WITH locked AS MATERIALIZED (  -- the parent first, then its pieces in id order
    SELECT id FROM due_jobs WHERE id = %(parent)s OR parent_id = %(parent)s
    ORDER BY id <> %(parent)s, id
    FOR NO KEY UPDATE
)
UPDATE due_jobs SET held = %(held)s
WHERE id IN (SELECT id FROM locked)
RETURNING id, queue, pg_notify({channel:due_jobs}, queue || ' 0')::text AS notified

-- name: set_queue_paused
INSERT INTO due_queues (name, paused, updated_at)
VALUES (%(name)s, %(paused)s, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
RETURNING name, pg_notify({channel:due_jobs}, name || ' 0')::text AS notified

-- name: queue_states
SELECT name, paused, updated_at FROM due_queues ORDER BY name

-- name: queue_overview
-- Per queue: due now, scheduled (due later), running, waiting, retrying
-- (queued again after a failed or lost attempt), failed (kept until pruned),
-- and when its oldest due job became due. Each count reads at most %(limit)s
-- entries of an index (a count that reaches it means "at least"), so a queue
-- with ten million jobs scheduled for next month costs what one with
-- %(limit)s does; the queues are found by one probe each into the index of
-- the backlog (queued, waiting and failed jobs), never by reading its rows,
-- and among the running jobs (as many as the workers' slots).
-- The oldest due job is found as next_due finds the next: the earliest of each
-- priority level of the claim index and the first due timer, so the held
-- pieces of a paused backfill, however many, are never read (through the
-- index of active jobs, a million of them took 0.25 s). Jobs that count
-- against a limit have an index of their own (waiting for a limit or not,
-- they are due, and counted so): their oldest, with the limit it waits for if
-- any, is given apart (limited_oldest_due); the caller takes the older.
WITH RECURSIVE backlog(queue) AS (
    (SELECT queue FROM due_jobs
     WHERE state IN ('queued', 'waiting', 'failed')
     ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM due_jobs j
            WHERE j.state IN ('queued', 'waiting', 'failed') AND j.queue > b.queue
            ORDER BY j.queue LIMIT 1)
    FROM backlog b
    WHERE b.queue IS NOT NULL
),
queues(queue) AS (
    SELECT queue FROM backlog WHERE queue IS NOT NULL
    UNION
    SELECT queue FROM due_jobs WHERE state = 'running'
)
SELECT q.queue,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs WHERE queue = q.queue AND state = 'queued'
              AND run_at <= coalesce(%(now)s::timestamptz, now())
            LIMIT %(limit)s) AS c) AS due,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs WHERE queue = q.queue AND state = 'queued'
              AND run_at > coalesce(%(now)s::timestamptz, now())
            LIMIT %(limit)s) AS c) AS scheduled,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs WHERE queue = q.queue AND state = 'running'
            LIMIT %(limit)s) AS c) AS running,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs WHERE queue = q.queue AND state = 'waiting'
            LIMIT %(limit)s) AS c) AS waiting,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs WHERE queue = q.queue AND state = 'queued' AND attempt > 0
            LIMIT %(limit)s) AS c) AS retrying,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs WHERE queue = q.queue AND state = 'failed'
            LIMIT %(limit)s) AS c) AS failed,
       (SELECT min(due_times.run_at) FROM (
            WITH RECURSIVE levels(priority) AS (
                SELECT max(priority) FROM due_jobs
                WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = q.queue
                UNION ALL
                SELECT (SELECT max(priority) FROM due_jobs
                        WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = q.queue
                          AND priority < levels.priority)
                FROM levels
                WHERE levels.priority IS NOT NULL
            )
            SELECT (SELECT min(run_at) FROM due_jobs
                    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = q.queue
                      AND priority = levels.priority
                      AND run_at <= coalesce(%(now)s::timestamptz, now())) AS run_at
            FROM levels
            WHERE priority IS NOT NULL
            UNION ALL
            SELECT (SELECT run_at FROM due_jobs
                    WHERE state = 'queued' AND timer AND queue = q.queue AND NOT held
                      AND run_at <= coalesce(%(now)s::timestamptz, now())
                    ORDER BY run_at LIMIT 1)) AS due_times) AS oldest_due,
       limited.run_at AS limited_oldest_due,
       limited.limit_wait AS limited_oldest_wait,
       limited.limit_wait_key AS limited_oldest_wait_key
FROM queues q
LEFT JOIN LATERAL (
    SELECT run_at, limit_wait, limit_wait_key FROM due_jobs
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
      AND queue = q.queue AND run_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY run_at, id LIMIT 1) AS limited ON true
ORDER BY q.queue

-- name: oldest_due_job
-- A queue's oldest due job (due at `run_at`, from the queue's figures), its
-- task, and whether a live worker of its queue knows that task (what `due
-- check` names when it does not: the job waits for a worker that may never
-- come). Read by the time, where the claim index holds the queue's jobs.
SELECT j.id, j.task,
       EXISTS (SELECT 1 FROM due_workers w
               WHERE w.state IN ('running', 'stopping')
                 AND w.last_seen_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(alive)s)
                 AND w.queues ? j.queue AND w.tasks ? j.task) AS known
FROM due_jobs j
WHERE j.queue = %(queue)s AND j.state = 'queued' AND NOT j.held
  AND j.run_at = %(run_at)s::timestamptz
ORDER BY j.id
LIMIT 1

-- name: queue_stuck
-- Running jobs whose progress has not moved for their task's stuck_after.
SELECT queue, count(*) AS stuck
FROM due_jobs
WHERE state = 'running' AND lease_expires_at IS NOT NULL AND stuck_after IS NOT NULL
  AND coalesce(progress_at, started_at)
      < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => stuck_after)
GROUP BY queue

-- name: known_queue_names
-- Queues known without a job in them: paused or resumed ones, those workers
-- serve (or served), those schedules start jobs in.
SELECT name FROM due_queues
UNION SELECT jsonb_object_keys(queues) FROM due_workers
UNION SELECT queue FROM due_schedules

-- name: queue_in_use
-- Whether due knows a queue: a job was put in it (and not pruned since), or
-- it is known by name (see known_queue_names).
SELECT EXISTS (SELECT 1 FROM due_jobs WHERE queue = %(queue)s)
       OR EXISTS (SELECT 1 FROM due_queues WHERE name = %(queue)s)
       OR EXISTS (SELECT 1 FROM due_schedules WHERE queue = %(queue)s)
       OR EXISTS (SELECT 1 FROM due_workers WHERE queues ? %(queue)s) AS found

-- name: task_in_use
-- Whether due knows a task by name without the app: a schedule starts it, a
-- worker serves (or served) it, or a job of it is stored (not pruned). The
-- jobs are read last, and only when the small tables do not name it: no index
-- serves a task's name.
SELECT EXISTS (SELECT 1 FROM due_schedules WHERE task = %(task)s)
       OR EXISTS (SELECT 1 FROM due_workers WHERE tasks ? %(task)s)
       OR EXISTS (SELECT 1 FROM due_jobs WHERE task = %(task)s) AS found

-- name: known_task_names
-- Every task name due knows without the app (see task_in_use), for the
-- closest to a name it does not know: read only on that error's way.
SELECT task AS name FROM due_schedules
UNION SELECT jsonb_array_elements_text(tasks) FROM due_workers
UNION SELECT task FROM due_jobs

-- name: ended_jobs
-- The jobs among these that have ended (what app.wait() waits for).
SELECT * FROM due_jobs
WHERE id = ANY(%(ids)b::bigint[]) AND state IN ('succeeded', 'failed', 'cancelled')

-- ------------------------------------------------------------------ figures

-- name: record_endings
-- Ends of attempts, counted in the transaction that records them (run for a
-- batch of tallies, sorted so every transaction takes row locks in one order).
-- The writer is this session: concurrent sessions never wait on each other.
INSERT INTO due_job_stats AS s (span, minute, task, queue, outcome, bucket, writer, count,
                                duration_sum)
SELECT 'minute', date_trunc('minute', coalesce(%(now)s::timestamptz, now())),
       t.task, t.queue, t.outcome, t.bucket, pg_backend_pid(), t.count, t.duration_sum
FROM unnest(%(task)b::text[], %(queue)b::text[], %(outcome)b::text[], %(bucket)b::int[],
            %(count)b::bigint[], %(duration_sum)b::float8[])
     AS t(task, queue, outcome, bucket, count, duration_sum)
ON CONFLICT (span, minute, task, queue, outcome, bucket, writer) DO UPDATE
SET count = s.count + excluded.count, duration_sum = s.duration_sum + excluded.duration_sum

-- name: fold_stats
-- Rows of one span older than `before` become rows of the next span (minutes
-- into hours, hours into `all`), one writer. Moved in one statement: the rows
-- deleted are exactly the rows summed, so a late increment committed meanwhile
-- is never deleted unfolded (under READ COMMITTED an INSERT ... SELECT and a
-- DELETE after it would each take their own snapshot).
WITH moved AS (
    DELETE FROM due_job_stats
    WHERE span = %(span)s AND minute < %(before)s
    RETURNING minute, task, queue, outcome, bucket, count, duration_sum
)
INSERT INTO due_job_stats AS s (span, minute, task, queue, outcome, bucket, writer, count,
                                duration_sum)
SELECT %(into)s,
       CASE WHEN %(into)s = 'hour' THEN date_trunc('hour', minute)
            ELSE 'epoch'::timestamptz END,
       task, queue, outcome, bucket, 0, sum(count), sum(duration_sum)
FROM moved
GROUP BY 2, task, queue, outcome, bucket
ORDER BY 2, task, queue, outcome, bucket
ON CONFLICT (span, minute, task, queue, outcome, bucket, writer) DO UPDATE
SET count = s.count + excluded.count, duration_sum = s.duration_sum + excluded.duration_sum

-- name: job_stats
-- Counts and duration sums per task, queue, outcome and duration bucket, in
-- each recent window (rows whose minute starts at or after `since_<window>`)
-- and in total, summed over writers and spans: a few hundred rows, however
-- busy the minutes and hours kept before folding were.
SELECT task, queue, outcome, bucket,
       sum(CASE WHEN minute >= %(since_5m)s THEN count ELSE 0 END)::bigint AS count_5m,
       sum(CASE WHEN minute >= %(since_5m)s THEN duration_sum ELSE 0 END) AS seconds_5m,
       sum(CASE WHEN minute >= %(since_1h)s THEN count ELSE 0 END)::bigint AS count_1h,
       sum(CASE WHEN minute >= %(since_1h)s THEN duration_sum ELSE 0 END) AS seconds_1h,
       sum(CASE WHEN minute >= %(since_24h)s THEN count ELSE 0 END)::bigint AS count_24h,
       sum(CASE WHEN minute >= %(since_24h)s THEN duration_sum ELSE 0 END) AS seconds_24h,
       sum(count)::bigint AS count_total, sum(duration_sum) AS seconds_total
FROM due_job_stats
GROUP BY task, queue, outcome, bucket

-- name: note_schedule_success
UPDATE due_schedules
SET last_success_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s

-- name: recent_failures
-- Jobs that failed for good since `since`, per queue and task.
SELECT queue, task, count(*) AS failed, max(finished_at) AS last_failed_at
FROM due_jobs
WHERE state = 'failed' AND finished_at >= %(since)s
GROUP BY queue, task
ORDER BY queue, task

-- name: live_workers
-- Live workers (running or stopping, seen within `alive` seconds) per queue.
SELECT q.queue, count(*) AS workers
FROM due_workers w, jsonb_object_keys(w.queues) AS q(queue)
WHERE w.state IN ('running', 'stopping')
  AND w.last_seen_at > coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(alive)s)
GROUP BY q.queue

-- name: running_per_worker
SELECT worker, count(*) AS running
FROM due_jobs
WHERE state = 'running' AND lease_expires_at IS NOT NULL
GROUP BY worker

-- ------------------------------------------------------------- actions by hand

-- name: record_action
INSERT INTO due_actions (at, action, actor, job_id, schedule, queue)
VALUES (coalesce(%(now)s::timestamptz, now()), %(action)s, %(actor)s, %(job_id)s, %(schedule)s,
        %(queue)s)

-- name: list_actions
-- The newest first (the caller shows them oldest first).
SELECT at, action, actor, job_id, schedule, queue
FROM due_actions
WHERE (%(job_id)s::bigint IS NULL OR job_id = %(job_id)s)
  AND (%(schedule)s::text IS NULL OR schedule = %(schedule)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: prune_actions
DELETE FROM due_actions
WHERE at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(retention)s)

-- name: prune_workers
-- Worker processes stopped or gone, and not seen for longer than the
-- retention. Without this, every process that ever started would stay
-- listed, and each deploy adds some. (One that comes back registers again.)
DELETE FROM due_workers
WHERE state IN ('stopped', 'gone')
  AND last_seen_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(retention)s)

-- name: queue_throughput
-- Jobs that ended per queue and minute since `since` (from the rollups).
SELECT queue, minute, sum(count)::bigint AS ended
FROM due_job_stats
WHERE span = 'minute' AND minute >= %(since)s
  AND outcome IN ('succeeded', 'warned', 'failed', 'cancelled')
GROUP BY queue, minute

-- name: job_table_health
-- Row versions left by updates and deletes, as the server's statistics count
-- them (updated within a second of each commit; at once by a vacuum).
SELECT n_live_tup AS live, n_dead_tup AS dead
FROM pg_stat_user_tables
WHERE relid = 'due_jobs'::regclass

-- name: vacuum_jobs
-- Autocommitted (VACUUM refuses a transaction block); a vacuum already at work
-- on the table (autovacuum's) is not waited for.
VACUUM (ANALYZE, SKIP_LOCKED) due_jobs

-- name: channel_names
-- What the listeners LISTEN on, named by the store's session (its search_path),
-- whichever connection listens.
SELECT {channel:due_jobs} AS jobs, {channel:due_ended} AS ended

-- Limits (store/limit_claims.py). A claim locks the keys of its candidates,
-- SKIP LOCKED: a key another transaction holds is skipped, never waited for,
-- so no claim waits for another and a frozen one stalls nobody but the jobs
-- of the keys it holds. It counts in a statement of its own, after the
-- locks: under READ COMMITTED that statement sees every claim that held a key
-- before it. A claim never writes a key row another transaction may write
-- (a new key is inserted apart, autocommitted). Only claims and looks lock
-- keys; the end of a job never does (its slot frees because it no longer
-- runs), so no acknowledgement waits on a limit.

-- name: limited_candidates
-- The best due jobs of the queue that count against a limit and do not wait
-- for one, as claim_jobs finds the others (their index holds only these);
-- `skip`: [name, key] pairs whose jobs to pass over (keys another claim holds:
-- a claim looks on past them), or NULL.
SELECT id, limits::text AS limits
FROM due_jobs
WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
  AND limit_wait IS NULL
  AND queue = %(queue)s
  AND run_at <= coalesce(%(now)s::timestamptz, now())
  AND (%(tasks)b::text[] IS NULL OR task = ANY(%(tasks)b::text[]))
  AND NOT EXISTS (SELECT 1 FROM due_queues WHERE name = %(queue)s AND paused)
  AND (%(skip)s::jsonb IS NULL
       OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(skip)s::jsonb) AS s(pair)
                      WHERE limits @> jsonb_build_array(s.pair)))
ORDER BY priority DESC, run_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: ensure_limit_keys
-- New keys, autocommitted on their own (never in a claim's transaction: two
-- claims that each inserted a key the other then locked waited for each other).
INSERT INTO due_limit_keys (name, key)
SELECT * FROM unnest(%(name)b::text[], %(key)b::text[])
ORDER BY 1, 2
ON CONFLICT (name, key) DO NOTHING

-- name: lock_limit_keys
-- The stored keys of a claim's candidates, each locked unless another
-- transaction holds it (`locked` false: skipped, not waited for). A key not
-- stored yet is not returned.
WITH locked AS MATERIALIZED (
    SELECT k.name, k.key FROM due_limit_keys k
    WHERE (k.name, k.key) IN (SELECT * FROM unnest(%(name)b::text[], %(key)b::text[]))
    FOR UPDATE SKIP LOCKED
)
SELECT k.name, k.key, EXISTS (SELECT 1 FROM locked l WHERE l.name = k.name AND l.key = k.key)
           AS locked
FROM due_limit_keys k
WHERE (k.name, k.key) IN (SELECT * FROM unnest(%(name)b::text[], %(key)b::text[]))

-- name: limit_key_states
-- Each key's numbers (the operator's when set), its log of starts, and how
-- many of its jobs run now: a limit's slots are its running jobs, whatever
-- claimed them, so a rescue or a release frees one by ending the run. The
-- running jobs are read once for all the keys (each key's own count read them
-- all again: 200 keys a look cost 190 ms beside 1,000 running jobs).
WITH wanted AS (SELECT * FROM unnest(%(name)b::text[], %(key)b::text[]) AS w(name, key)),
running AS (
    SELECT p.pair ->> 0 AS name, p.pair ->> 1 AS key, count(*) AS running
    FROM due_jobs j CROSS JOIN jsonb_array_elements(j.limits) AS p(pair)
    WHERE j.state = 'running' AND j.limits IS NOT NULL
      AND (p.pair ->> 0, p.pair ->> 1) IN (SELECT name, key FROM wanted)
    GROUP BY 1, 2
)
SELECT k.name, k.key, k.starts::text AS starts, k.block_version,
       extract(epoch FROM k.opens_at)::float8 AS opens_s,
       -- The time after the keys' locks, not the transaction's start: a claim that
       -- began earlier but locked later must not log its starts before those of
       -- the claim that held the key (its window would drop starts still in it).
       extract(epoch FROM coalesce(%(now)s::timestamptz, clock_timestamp()))::float8 AS now_s,
       CASE WHEN d.overridden THEN d.set_concurrency ELSE d.concurrency END AS concurrency,
       CASE WHEN d.overridden THEN d.set_rate ELSE d.rate END AS rate,
       CASE WHEN d.overridden THEN d.set_period ELSE d.period END AS period,
       coalesce(r.running, 0) AS running
FROM due_limit_keys k
LEFT JOIN due_limits d ON d.name = k.name
LEFT JOIN running r ON r.name = k.name AND r.key = k.key
WHERE (k.name, k.key) IN (SELECT name, key FROM wanted)

-- name: limit_keys_due
-- Keys with jobs waiting whose look is due (a rate's window opened, a claim
-- set a job waiting for a slot, the numbers changed), on from the last look,
-- each locked unless another transaction holds it (skipped: looked at later).
SELECT k.name, k.key
FROM due_limit_keys k
WHERE k.waiting AND k.opens_at <= coalesce(%(now)s::timestamptz, now())
  AND (k.name, k.key) > (%(after_name)s, %(after_key)s)
ORDER BY k.name, k.key
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: limit_keys_waiting
-- Every key with jobs waiting (but those whose rate's window is still full),
-- on from the last look, locked as limit_keys_due locks them: the sweep.
SELECT k.name, k.key
FROM due_limit_keys k
WHERE k.waiting AND (k.opens_at IS NULL OR k.opens_at <= coalesce(%(now)s::timestamptz, now()))
  AND (k.name, k.key) > (%(after_name)s, %(after_key)s)
ORDER BY k.name, k.key
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: block_jobs
-- Jobs over a limit wait out of the claim indexes for what they wait for.
UPDATE due_jobs AS j SET limit_wait = b.name, limit_wait_key = b.key
FROM unnest(%(id)b::bigint[], %(name)b::text[], %(key)b::text[]) AS b(id, name, key)
WHERE j.id = b.id AND j.state = 'queued'

-- name: unblock_jobs
-- The best `count` jobs waiting for a key go back among the claimable ones;
-- their queues' workers hear of them.
WITH chosen AS MATERIALIZED (
    SELECT id FROM due_jobs
    WHERE state = 'queued' AND limit_wait = %(name)s AND limit_wait_key = %(key)s
    ORDER BY priority DESC, run_at, id
    LIMIT %(count)s
    FOR UPDATE SKIP LOCKED
)
UPDATE due_jobs AS j SET limit_wait = NULL, limit_wait_key = NULL
WHERE j.id = ANY(ARRAY(SELECT id FROM chosen)) AND j.state = 'queued'
RETURNING j.id,
          pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
              AS notified

-- name: limit_pairs_ended
-- The keys the jobs just ended (`ids`) counted against, with how many slots
-- each end freed (a job running again, claimed anew since, frees none).
SELECT p.pair ->> 0 AS name, p.pair ->> 1 AS key, count(*) AS slots
FROM due_jobs j CROSS JOIN jsonb_array_elements(j.limits) AS p(pair)
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.limits IS NOT NULL AND j.state <> 'running'
GROUP BY 1, 2

-- name: unblock_freed
-- For each key a slot of which ended jobs freed, as many of its waiting jobs
-- (the best first) go back among the claimable ones; their workers hear of
-- them. No key is locked: the claim counts again.
WITH freed AS (
    SELECT * FROM unnest(%(name)b::text[], %(key)b::text[], %(count)b::bigint[])
        AS f(name, key, slots)
),
chosen AS MATERIALIZED (
    SELECT w.id FROM freed f CROSS JOIN LATERAL (
        SELECT id FROM due_jobs
        WHERE state = 'queued' AND limit_wait = f.name AND limit_wait_key = f.key
        ORDER BY priority DESC, run_at, id
        LIMIT f.slots
        FOR UPDATE SKIP LOCKED) AS w
)
UPDATE due_jobs AS j SET limit_wait = NULL, limit_wait_key = NULL
WHERE j.id = ANY(ARRAY(SELECT id FROM chosen)) AND j.state = 'queued'
RETURNING j.id,
          pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
              AS notified

-- name: update_limit_keys
-- `opens_at`: when its waiting jobs are to be looked at again (NULL: leave it).
UPDATE due_limit_keys AS k
SET starts = u.starts::jsonb,
    started_total = k.started_total + u.started,
    waiting = k.waiting OR u.blocked,
    block_version = k.block_version + u.blocked::int,
    opens_at = coalesce(to_timestamp(u.opens_at), k.opens_at)
FROM unnest(%(name)b::text[], %(key)b::text[], %(starts)b::text[], %(started)b::bigint[],
            %(blocked)b::boolean[], %(opens_at)b::float8[])
     AS u(name, key, starts, started, blocked, opens_at)
WHERE k.name = u.name AND k.key = u.key

-- name: limit_keys_reopened
-- After a look at keys (and the jobs let go of those with room): each still
-- waiting (and when to look again: its rate's opening, or NULL: when a job of
-- it ends), or none left (`settled`, and no job still waits for it).
UPDATE due_limit_keys AS k
SET waiting = CASE WHEN u.settled AND k.block_version = u.block_version
                        -- a job whose row another transaction held (SKIP LOCKED)
                        -- was not let go: it still waits
                        AND NOT EXISTS (SELECT 1 FROM due_jobs
                                        WHERE state = 'queued' AND limit_wait = u.name
                                          AND limit_wait_key = u.key)
                   THEN false ELSE k.waiting END,
    opens_at = CASE WHEN u.settled AND k.block_version = u.block_version
                         AND NOT EXISTS (SELECT 1 FROM due_jobs
                                         WHERE state = 'queued' AND limit_wait = u.name
                                           AND limit_wait_key = u.key)
                    THEN NULL ELSE to_timestamp(u.opens_at) END
FROM unnest(%(name)b::text[], %(key)b::text[], %(settled)b::boolean[],
            %(block_version)b::bigint[], %(opens_at)b::float8[])
     AS u(name, key, settled, block_version, opens_at)
WHERE k.name = u.name AND k.key = u.key

-- name: claim_given
-- The limited jobs a claim let start (their rows locked by limited_candidates),
-- leased as claim_jobs leases the others.
UPDATE due_jobs AS j
SET state = 'running',
    timer = false,
    attempt = j.attempt + 1,
    lease_token = j.lease_token + 1,
    lease_expires_at = coalesce(%(now)s::timestamptz, now()) + make_interval(
        secs => coalesce((%(leases)s::jsonb ->> j.task)::float8, %(lease)s)),
    started_at = coalesce(to_timestamp(%(started_s)s::float8), %(now)s::timestamptz, now()),
    progress_at = NULL,
    worker = %(worker)s,
    attempt_status = 'claimed'
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.state = 'queued'
RETURNING j.id, j.task, j.queue, j.priority, j.payload::text AS payload, j.attempt,
          j.max_attempts, j.lease_token, j.lease_expires_at, j.run_at, j.created_at,
          j.scheduled_for, j.checkpoint::text AS checkpoint, j.parent_id, j.completes,
          j.pieces_total, j.workflow_id, j.schedule,
          -- the headers its earliest attempt kept (due/instrumentation.py): a retry's link
          CASE WHEN j.attempt > 1 AND jsonb_typeof(j.errors) = 'array' THEN (
              SELECT entry.value -> 'headers' FROM jsonb_array_elements(j.errors)
                  WITH ORDINALITY AS entry (value, n)
              WHERE jsonb_typeof(entry.value -> 'headers') = 'object' ORDER BY entry.n LIMIT 1)::text
          END AS first_attempt

-- name: limited_next_due
-- When the queue's next limited job that waits for no limit comes due (off
-- the timers a job is due already: any one of them says "now"), and when the
-- next rate window of a key that jobs wait for opens.
SELECT min(at) AS run_at FROM (
    SELECT (SELECT run_at FROM due_jobs
            WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
              AND limit_wait IS NULL AND queue = %(queue)s
            LIMIT 1) AS at
    UNION ALL
    SELECT (SELECT min(opens_at) FROM due_limit_keys WHERE waiting AND opens_at IS NOT NULL)
) AS due_times
WHERE NOT EXISTS (SELECT 1 FROM due_queues WHERE name = %(queue)s AND paused)

-- name: upsert_limit
-- The numbers in code; an operator's (set_*, while overridden) stay in force.
INSERT INTO due_limits (name, concurrency, rate, period, updated_at)
VALUES (%(name)s, %(concurrency)s, %(rate)s, %(period)s, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, period = excluded.period,
    updated_at = CASE WHEN (due_limits.concurrency, due_limits.rate, due_limits.period)
                           IS DISTINCT FROM (excluded.concurrency, excluded.rate, excluded.period)
                      THEN excluded.updated_at ELSE due_limits.updated_at END

-- name: set_limit
UPDATE due_limits
SET set_concurrency = %(concurrency)s, set_rate = %(rate)s, set_period = %(period)s,
    overridden = true, updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s
RETURNING name

-- name: reset_limit
UPDATE due_limits
SET set_concurrency = NULL, set_rate = NULL, set_period = NULL, overridden = false,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE name = %(name)s
RETURNING name

-- name: limit_overview
-- Every limit with its numbers in force, the jobs running against it, and
-- the jobs waiting for it (each count read to at most %(limit)s).
SELECT d.name, d.concurrency AS code_concurrency, d.rate AS code_rate,
       d.period AS code_period, d.overridden, d.updated_at,
       CASE WHEN d.overridden THEN d.set_concurrency ELSE d.concurrency END AS concurrency,
       CASE WHEN d.overridden THEN d.set_rate ELSE d.rate END AS rate,
       CASE WHEN d.overridden THEN d.set_period ELSE d.period END AS period,
       (SELECT count(*) FROM due_jobs j
        WHERE j.state = 'running' AND j.limits IS NOT NULL
          AND EXISTS (SELECT 1 FROM jsonb_array_elements(j.limits) e WHERE e ->> 0 = d.name))
           AS running,
       (SELECT count(*) FROM (SELECT 1 FROM due_jobs
                              WHERE state = 'queued' AND limit_wait = d.name
                              LIMIT %(limit)s) AS c) AS waiting,
       (SELECT coalesce(sum(started_total), 0) FROM due_limit_keys k WHERE k.name = d.name)
           AS started_total,
       (SELECT count(*) FROM due_limit_keys k WHERE k.name = d.name) AS keys,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()))::float8 AS now_s
FROM due_limits d
ORDER BY d.name

-- name: limit_keys_of
-- The keys of one limit, busiest first: running, then waiting, at most %(limit)s.
-- The running jobs are read once for all the keys (each key's own count read
-- them all again: beside 10,000 keys, past the statement timeout).
WITH running AS (
    SELECT p.pair ->> 1 AS key, count(*) AS running
    FROM due_jobs j CROSS JOIN jsonb_array_elements(j.limits) AS p(pair)
    WHERE j.state = 'running' AND j.limits IS NOT NULL AND p.pair ->> 0 = %(name)s
    GROUP BY 1
)
SELECT * FROM (
    SELECT k.name, k.key, k.starts::text AS starts, k.started_total,
           extract(epoch FROM k.opens_at)::float8 AS opens_s,
           extract(epoch FROM coalesce(%(now)s::timestamptz, now()))::float8 AS now_s,
           coalesce(r.running, 0) AS running,
           (SELECT count(*) FROM (SELECT 1 FROM due_jobs
                                  WHERE state = 'queued' AND limit_wait = k.name
                                    AND limit_wait_key = k.key
                                  LIMIT %(count_limit)s) AS c) AS waiting
    FROM due_limit_keys k LEFT JOIN running r ON r.key = k.key
    WHERE k.name = %(name)s) AS keys
ORDER BY running DESC, waiting DESC, key
LIMIT %(limit)s

-- name: limit_key_figures
-- One key of a limit (what a job waits for): the numbers in force, its
-- running jobs, its log of starts and its waiting jobs (read to
-- %(count_limit)s).
SELECT k.name, k.key, k.starts::text AS starts, k.started_total,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()))::float8 AS now_s,
       CASE WHEN d.overridden THEN d.set_concurrency ELSE d.concurrency END AS concurrency,
       CASE WHEN d.overridden THEN d.set_rate ELSE d.rate END AS rate,
       CASE WHEN d.overridden THEN d.set_period ELSE d.period END AS period,
       (SELECT count(*) FROM due_jobs j
        WHERE j.state = 'running' AND j.limits IS NOT NULL
          AND j.limits @> jsonb_build_array(jsonb_build_array(k.name, k.key))
          -- (containment alone ignores order: [a, b] would match [b, a])
          AND EXISTS (SELECT 1 FROM jsonb_array_elements(j.limits) AS p(pair)
                      WHERE p.pair = jsonb_build_array(k.name, k.key))) AS running,
       (SELECT count(*) FROM (SELECT 1 FROM due_jobs
                              WHERE state = 'queued' AND limit_wait = k.name
                                AND limit_wait_key = k.key
                              LIMIT %(count_limit)s) AS c) AS waiting
FROM due_limit_keys k JOIN due_limits d ON d.name = k.name
WHERE k.name = %(name)s AND k.key = %(key)s

-- name: insert_workflow
INSERT INTO due_workflows (name, steps_total, created_at)
VALUES (%(name)s, %(total)s, coalesce(%(now)s::timestamptz, now()))
RETURNING id

-- name: make_steps
-- Jobs just inserted become a workflow's steps; those with upstream steps wait.
UPDATE due_jobs AS j
SET workflow_id = %(workflow)s,
    step_name = s.name,
    upstream_pending = s.pending,
    upstream_failed = s.failed,
    on_upstream_failure = s.policy,
    state = CASE WHEN s.pending > 0 OR (s.failed > 0 AND s.policy = 'cancel') THEN 'waiting'
                 ELSE j.state END
FROM unnest(%(id)b::bigint[], %(name)b::text[], %(pending)b::int[], %(failed)b::int[],
            %(policy)b::text[])
     AS s(id, name, pending, failed, policy)
WHERE j.id = s.id

-- name: insert_edges
INSERT INTO due_workflow_edges (upstream_id, step_id)
SELECT * FROM unnest(%(upstream)b::bigint[], %(step)b::bigint[])

-- name: lock_dependents
-- The waiting steps these ended jobs come before, locked in id order (the one
-- lock order for every transaction that releases steps).
SELECT id FROM due_jobs
WHERE id IN (SELECT step_id FROM due_workflow_edges WHERE upstream_id = ANY(%(ids)b::bigint[]))
  AND state = 'waiting'
ORDER BY id
FOR NO KEY UPDATE

-- name: count_upstream_endings
-- Each ended upstream step counted once on each of its waiting dependents.
WITH ended AS (
    SELECT * FROM unnest(%(id)b::bigint[], %(bad)b::int[]) AS e(id, bad)
), hits AS (
    SELECT edge.step_id, count(*)::int AS n, sum(ended.bad)::int AS bad
    FROM due_workflow_edges AS edge JOIN ended ON edge.upstream_id = ended.id
    GROUP BY edge.step_id
)
UPDATE due_jobs AS j
SET upstream_pending = j.upstream_pending - hits.n,
    upstream_failed = j.upstream_failed + hits.bad
FROM hits
WHERE j.id = hits.step_id AND j.state = 'waiting' AND j.upstream_pending > 0
RETURNING j.id, j.upstream_pending, j.upstream_failed, j.on_upstream_failure

-- name: release_steps
-- Steps whose upstream steps have all ended, due now; their queues' workers hear of them.
UPDATE due_jobs AS j
SET state = 'queued', run_at = coalesce(%(now)s::timestamptz, now())
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.state = 'waiting' AND j.upstream_pending = 0
RETURNING j.id,
          pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
              AS notified

-- name: cancel_steps
-- Steps an upstream step's failure cancels (on_upstream_failure = 'cancel').
UPDATE due_jobs AS j
SET state = 'cancelled',
    finished_at = coalesce(%(now)s::timestamptz, now()),
    dedupe_key = NULL,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'kind', 'cancelled', 'error', %(reason)s::text,
        'traceback', NULL, 'at', coalesce(%(now)s::timestamptz, now())))
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.state = 'waiting'
RETURNING j.id, j.task, j.queue, j.schedule, j.state, j.parent_id, j.completes, j.pieces_total,
          j.cancel_requested, j.workflow_id

-- name: count_workflow_endings
-- Ended steps counted on their workflows; a workflow whose steps have all
-- ended ends: failed if one failed, else cancelled if one was, else succeeded.
-- The workflows' rows are the last a transaction locks (after every job row it
-- touches), in id order: the one lock order (store/workflows.py).
WITH ended AS (
    SELECT workflow, count(*)::int AS n,
           count(*) FILTER (WHERE state = 'failed')::int AS failed,
           count(*) FILTER (WHERE state = 'cancelled')::int AS cancelled
    FROM unnest(%(workflow)b::bigint[], %(state)b::text[]) AS e(workflow, state)
    GROUP BY workflow
), locked AS MATERIALIZED (
    SELECT id FROM due_workflows WHERE id = ANY(ARRAY(SELECT workflow FROM ended))
    ORDER BY id FOR NO KEY UPDATE
)
UPDATE due_workflows AS w
SET steps_ended = w.steps_ended + ended.n,
    steps_failed = w.steps_failed + ended.failed,
    steps_cancelled = w.steps_cancelled + ended.cancelled,
    state = CASE
        WHEN w.steps_ended + ended.n < w.steps_total THEN w.state
        WHEN w.steps_failed + ended.failed > 0 THEN 'failed'
        WHEN w.steps_cancelled + ended.cancelled > 0 THEN 'cancelled'
        ELSE 'succeeded' END,
    finished_at = CASE WHEN w.steps_ended + ended.n >= w.steps_total
                       THEN coalesce(%(now)s::timestamptz, now()) END
FROM ended
WHERE w.id = ended.workflow AND w.id = ANY(ARRAY(SELECT id FROM locked))

-- name: workflow
SELECT id, name, state, steps_total, steps_ended, steps_failed, steps_cancelled,
       created_at, finished_at
FROM due_workflows WHERE id = %(id)s

-- name: workflow_steps
SELECT j.id, j.step_name, j.state, j.task, j.started_at, j.finished_at,
       coalesce((SELECT array_agg(u.step_name ORDER BY u.step_name)
                 FROM due_workflow_edges AS e JOIN due_jobs AS u ON u.id = e.upstream_id
                 WHERE e.step_id = j.id), '{}') AS after
FROM due_jobs AS j
WHERE j.workflow_id = %(id)s
ORDER BY j.id

-- name: recent_workflows
-- due workflows, the dashboard: the newest workflows first.
SELECT id, name, state, steps_total, steps_ended, steps_failed, steps_cancelled,
       created_at, finished_at
FROM due_workflows
ORDER BY id DESC
LIMIT %(limit)s

-- name: stuck_workflows
-- Running workflows that cannot advance: no step queued or running, and a
-- step waiting whose upstream steps have all ended (and that waits for no
-- pieces of its own), or every step ended (its counts disagree with its
-- steps). Each with the first such waiting step's name (NULL: every step ended).
SELECT id, name, step FROM (
SELECT w.id, w.name,
       (SELECT min(s.step_name) FROM due_jobs AS s
        WHERE s.workflow_id = w.id AND s.state = 'waiting'
          AND (s.pieces_total = 0 OR s.upstream_pending > 0)
          AND NOT EXISTS (SELECT 1 FROM due_workflow_edges AS e
                          JOIN due_jobs AS u ON u.id = e.upstream_id
                          WHERE e.step_id = s.id AND u.state NOT IN ('succeeded', 'failed', 'cancelled'))) AS step,
       NOT EXISTS (SELECT 1 FROM due_jobs AS o
                   WHERE o.workflow_id = w.id
                     AND o.state NOT IN ('succeeded', 'failed', 'cancelled')) AS ended
FROM due_workflows AS w
WHERE w.state = 'running'
  AND NOT EXISTS (SELECT 1 FROM due_jobs AS q
                  WHERE q.workflow_id = w.id AND q.state IN ('queued', 'running'))
) AS running
WHERE step IS NOT NULL OR ended
ORDER BY id
LIMIT %(limit)s

-- name: upstream_of
-- What a step's handler reads: each upstream step's name, state and result.
SELECT u.step_name, u.state, u.result
FROM due_workflow_edges AS e JOIN due_jobs AS u ON u.id = e.upstream_id
WHERE e.step_id = %(id)s
ORDER BY u.step_name

-- name: lock_workflow_steps
-- A workflow's unfinished steps, locked in id order (as releases lock them),
-- before its row (the one lock order: steps, then the workflow).
SELECT id FROM due_jobs
WHERE workflow_id = %(id)s AND state IN ('queued', 'waiting', 'running')
ORDER BY id
FOR NO KEY UPDATE

-- name: end_settled_workflow
-- A cancelled workflow with no step left to end ends now, its counts read from
-- its steps (they agree, unless broken by hand: a cancel mends them).
UPDATE due_workflows AS w
SET steps_ended = c.ended, steps_failed = c.failed, steps_cancelled = c.cancelled,
    state = CASE WHEN c.failed > 0 THEN 'failed'
                 WHEN c.cancelled > 0 THEN 'cancelled'
                 ELSE 'succeeded' END,
    finished_at = coalesce(%(now)s::timestamptz, now())
FROM (SELECT count(*) FILTER (WHERE state IN ('succeeded', 'failed', 'cancelled'))::int AS ended,
             count(*) FILTER (WHERE state = 'failed')::int AS failed,
             count(*) FILTER (WHERE state = 'cancelled')::int AS cancelled,
             count(*) FILTER (WHERE state NOT IN ('succeeded', 'failed', 'cancelled'))::int AS open
      FROM due_jobs WHERE workflow_id = %(id)s) AS c
WHERE w.id = %(id)s AND w.state = 'running' AND c.open = 0

-- name: lock_retried_steps
-- app.retry_workflow: every step that did not succeed (those to run again, and
-- the unfinished ones, whose ends must not be under way while the steps after
-- them are counted), locked in id order.
SELECT id, state, pieces_total FROM due_jobs
WHERE workflow_id = %(id)s AND state <> 'succeeded'
ORDER BY id
FOR NO KEY UPDATE

-- name: workflow_steps_present
-- A workflow's steps as counted, and those its table holds (fewer: pruned).
SELECT w.steps_total, (SELECT count(*) FROM due_jobs WHERE workflow_id = w.id)::int AS present
FROM due_workflows AS w
WHERE w.id = %(id)s

-- name: cancel_workflow_steps
-- app.cancel_workflow: its queued and waiting steps end now.
UPDATE due_jobs AS j
SET state = 'cancelled',
    finished_at = coalesce(%(now)s::timestamptz, now()),
    dedupe_key = NULL,
    limit_wait = NULL,
    limit_wait_key = NULL,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'kind', 'cancelled', 'error', %(reason)s::text,
        'traceback', NULL, 'at', coalesce(%(now)s::timestamptz, now())))
WHERE j.workflow_id = %(id)s AND j.state IN ('queued', 'waiting')
RETURNING j.id, j.task, j.queue, j.schedule, j.state, j.parent_id, j.completes, j.pieces_total,
          j.cancel_requested, j.workflow_id,
          pg_notify({channel:due_ended}, '')::text AS ended

-- name: request_cancel_workflow_steps
-- ... and its running steps are asked to stop (at their next safe point).
UPDATE due_jobs SET cancel_requested = true
WHERE workflow_id = %(id)s AND state = 'running'
RETURNING id, pg_notify({channel:due_jobs}, '!cancel ' || id)::text AS notified

-- name: retry_workflow_steps
-- app.retry_workflow: these failed or cancelled steps run again, with a fresh
-- set of attempts, once the steps they come after that are being retried too
-- (or have not ended) have ended. Every step that did not succeed is retried
-- at once, so no upstream step of theirs stays failed: none starts cancelled.
WITH pending AS (
    SELECT r.id,
           (SELECT count(*) FROM due_workflow_edges AS e JOIN due_jobs AS u ON u.id = e.upstream_id
            WHERE e.step_id = r.id AND u.state <> 'succeeded')::int AS n
    FROM unnest(%(ids)b::bigint[]) AS r(id)
)
UPDATE due_jobs AS j
SET state = CASE WHEN p.n > 0 THEN 'waiting' ELSE 'queued' END,
    upstream_pending = p.n,
    upstream_failed = 0,
    run_at = coalesce(%(now)s::timestamptz, now()),
    timer = false,
    attempt = 0,
    lost_leases = 0,
    cancel_requested = false,
    limit_wait = NULL,  -- a wait ended with the job: its next claim looks again
    limit_wait_key = NULL,
    finished_at = NULL,
    lease_expires_at = NULL
FROM pending AS p
WHERE j.id = p.id AND j.state IN ('failed', 'cancelled')
RETURNING j.id, j.state,
          CASE WHEN p.n = 0 THEN pg_notify({channel:due_jobs},
              j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text END AS notified

-- name: uncount_retried_steps
-- The steps still waiting for steps just retried no longer count those ends:
-- each retried step will be counted once more when it ends again (invariant
-- 18). A waiting step counted each of its upstream steps' ends, failed or
-- cancelled, once; the retried ones are taken back.
WITH retried AS (
    SELECT id FROM unnest(%(ids)b::bigint[]) AS r(id)
), hits AS (
    SELECT e.step_id, count(*)::int AS n
    FROM due_workflow_edges AS e JOIN retried ON e.upstream_id = retried.id
    WHERE e.step_id <> ALL(%(ids)b::bigint[])
    GROUP BY e.step_id
)
UPDATE due_jobs AS j
SET upstream_pending = j.upstream_pending + hits.n,
    upstream_failed = greatest(0, j.upstream_failed - hits.n)
FROM hits
WHERE j.id = hits.step_id AND j.state = 'waiting' AND j.upstream_pending > 0

-- name: retry_pieces
-- A retried step's pieces that did not succeed run again with it (pieces of
-- pieces too, a level at a time), with a fresh set of attempts.
UPDATE due_jobs AS j
SET state = 'queued',
    run_at = coalesce(%(now)s::timestamptz, now()),
    timer = false,
    attempt = 0,
    lost_leases = 0,
    cancel_requested = false,
    limit_wait = NULL,
    limit_wait_key = NULL,
    finished_at = NULL,
    lease_expires_at = NULL
WHERE j.parent_id = ANY(%(ids)b::bigint[]) AND j.state IN ('failed', 'cancelled')
RETURNING j.id, j.pieces_total,
          pg_notify({channel:due_jobs}, j.queue || ' ' || extract(epoch FROM j.run_at)::text)::text
              AS notified

-- name: recount_retried_parents
-- ... and their parents count as ended only the pieces that succeeded (or were
-- pruned, after they ended); those running still count themselves as they end.
UPDATE due_jobs AS p
SET pieces_failed = 0,
    pieces_done = p.pieces_total - c.open,
    progress = jsonb_build_object('done', p.pieces_total - c.open, 'total', p.pieces_total)
FROM (SELECT parent.id,
             (SELECT count(*) FROM due_jobs AS k
              WHERE k.parent_id = parent.id AND k.state <> 'succeeded')::int AS open
      FROM unnest(%(ids)b::bigint[]) AS parent(id)) AS c
WHERE p.id = c.id

-- name: uncount_workflow
-- A retried workflow's counts without the ends of the steps retried; it runs.
UPDATE due_workflows
SET steps_ended = steps_ended - %(ended)s,
    steps_failed = steps_failed - %(failed)s,
    steps_cancelled = steps_cancelled - %(cancelled)s,
    state = 'running',
    finished_at = NULL
WHERE id = %(id)s

-- name: limit_keys_look_again
-- A limit's numbers changed (in this transaction): its waiting keys are looked
-- at again at the next claim, not when the old numbers would have let a start
-- through. A key a claim holds is skipped (its claim set what it set; the
-- sweep looks at it again).
UPDATE due_limit_keys SET opens_at = coalesce(%(now)s::timestamptz, now())
WHERE (name, key) IN (
    SELECT k.name, k.key FROM due_limit_keys k
    WHERE k.name = %(name)s AND k.waiting
      AND EXISTS (SELECT 1 FROM due_limits d WHERE d.name = %(name)s
                  AND d.updated_at = coalesce(%(now)s::timestamptz, now()))
    FOR UPDATE SKIP LOCKED)

-- name: step_adder
-- A step adding steps to its workflow: which workflow (read, not locked: its
-- row is locked with the named steps, in id order).
SELECT workflow_id FROM due_jobs WHERE id = %(id)s AND workflow_id IS NOT NULL

-- name: lock_named_steps
-- The step that adds and the steps named (those new ones come after, and the
-- new ones' names), locked in id order: none ends between this look at its
-- state and the new edges' commit, and the adder's lease and cancel request
-- are read as they stand (a cancel committed meanwhile is seen).
SELECT id, step_name, state, lease_token, cancel_requested FROM due_jobs
WHERE (workflow_id = %(workflow)s AND step_name = ANY(%(names)b::text[])) OR id = %(adder)s
ORDER BY id
FOR NO KEY UPDATE

-- name: add_workflow_steps
UPDATE due_workflows SET steps_total = steps_total + %(added)s,
    state = 'running', finished_at = NULL
WHERE id = %(id)s
