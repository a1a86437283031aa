-- Every statement the SQLite store runs, by name (same names as PostgreSQL's).
-- Parameters are named (:name). Times are REAL seconds since the Unix epoch;
-- :now is always given (the injected clock, or this host's clock).
-- Every writing transaction is BEGIN IMMEDIATE, so SQLite's single writer
-- serialises claims: no row is claimed twice.
-- SQLite reads a partial index only for a query whose WHERE repeats the
-- index's own terms: hence `state IN (...)` beside `state = ...` wherever an
-- index of waiting and failed jobs serves. The equality comes
-- first: of two terms that seem as good, SQLite searches the index by the
-- first, and searched by the IN it read every queued job of a queue to count
-- its running ones (a million queued: 0.2 s for each such count).

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

-- name: empty_tables
-- Every row due keeps, the migrations' record aside: the database as `migrate`
-- left it (due.testing.empty, for tests). A new table goes here too
-- (tests/store/test_empty.py reads them all). Several statements: the backend
-- runs them one by one, in one transaction.
DELETE FROM due_jobs;
DELETE FROM due_workers;
DELETE FROM due_schedules;
DELETE FROM due_schedule_runs;
DELETE FROM due_leases;
DELETE FROM due_queues;
DELETE FROM due_job_stats;
DELETE FROM due_actions;
DELETE FROM due_limits;
DELETE FROM due_limit_keys;
DELETE FROM due_workflows;
DELETE FROM due_workflow_edges;
DELETE FROM due_worker_recycles;

-- name: insert_job
-- A job due later waits among the timers (`timer`), out of the claim index.
INSERT INTO due_jobs (task, queue, priority, payload, run_at, timer, max_attempts,
                      key, dedupe_key, unique_for, stuck_after, created_at, limits)
VALUES (:task, :queue, :priority, :payload, coalesce(:run_at, :now + :delay),
        coalesce(:run_at, :now + :delay) > :now, :max_attempts, :key, :key, :unique_for, :stuck_after, :now,
        :limits)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id, run_at, created_at

-- name: reserve_ids
-- Ids for a batch, and now. Under BEGIN IMMEDIATE no other writer runs, so
-- the ids after the highest are free (the pruner never deletes the newest job:
-- ids are never reused).
WITH RECURSIVE
    first(id) AS (SELECT coalesce(max(id), 0) + 1 FROM due_jobs),
    ids(id) AS (SELECT id FROM first
                UNION ALL
                SELECT ids.id + 1 FROM ids, first WHERE ids.id < first.id + :count - 1)
SELECT :now AS now, json_group_array(id) AS ids FROM ids

-- name: insert_jobs
-- A bulk enqueue, run with executemany (run_many): the row's columns as
-- steps.INSERT_COLUMNS orders them (?1-?11), then now (?12); ids reserved by reserve_ids. A
-- row whose key is held is not inserted, and is settled one by one (steps.py).
INSERT INTO due_jobs (id, task, queue, priority, payload, run_at, timer, max_attempts,
                      key, dedupe_key, unique_for, stuck_after, limits, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6 > ?12, ?7, ?8, ?8, ?9, ?10, ?11, ?12)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING

-- name: jobs_present
-- Which of these ids are jobs (after a bulk insert: which rows went in).
SELECT id FROM due_jobs WHERE id IN (SELECT value FROM json_each(:ids))

-- name: notify_queues
-- Nothing to send: SQLite's workers see any commit (PRAGMA data_version).
SELECT NULL WHERE 0

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

-- name: promote_timers
-- Timers of the queue that are due join the claim index, in run_at order, at
-- most :promote per claim: run in the claim's transaction, before claim_jobs,
-- so the claim that follows sees them (a delayed job starts at its run_at).
UPDATE due_jobs SET timer = 0
WHERE id IN (
    SELECT id
    FROM due_jobs INDEXED BY due_jobs_timers
    WHERE state = 'queued' AND timer AND queue = :queue AND run_at <= :now
    ORDER BY run_at, id
    LIMIT :promote
)

-- name: claim_jobs
-- The lease length is per task (:leases, a JSON object) or the default; with no
-- task's own ('{}', the common case) the lookup is skipped: it read the JSON
-- once per job claimed (6 % of the statement's time).
-- INDEXED BY: walk the claim index in claim order and stop at :limit; without
-- statistics the planner may prefer another plan that sorts the backlog.
UPDATE due_jobs
SET state = 'running',
    attempt = attempt + 1,
    lease_token = lease_token + 1,
    lease_expires_at = :now + CASE WHEN :leases = '{}' THEN :lease ELSE coalesce(
        (SELECT value FROM json_each(:leases) WHERE key = due_jobs.task), :lease) END,
    started_at = :now,
    progress_at = NULL,
    worker = :worker,
    attempt_status = 'claimed'  -- an attempt once its worker says the handler began
WHERE id IN (
    SELECT id
    FROM due_jobs INDEXED BY due_jobs_claim
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL
      AND queue = :queue
      AND run_at <= :now
      AND (:tasks IS NULL OR task IN (SELECT value FROM json_each(:tasks)))
      AND NOT EXISTS (SELECT 1 FROM due_queues WHERE name = :queue AND paused)
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
)
-- Columns in core.records.CLAIM_COLUMNS' order; JSON as text, decoded once there.
RETURNING id, task, queue, priority, payload, attempt, max_attempts,
          lease_token, lease_expires_at, run_at, created_at, scheduled_for, checkpoint, parent_id,
          completes, pieces_total, workflow_id, schedule,
          -- the headers its earliest attempt kept (due/instrumentation.py): a retry's link
          CASE WHEN attempt > 1 THEN (
              SELECT json_extract(value, '$.headers') FROM json_each(iif(json_valid(errors), errors, '[]'))
              WHERE json_type(value, '$.headers') = 'object' ORDER BY key LIMIT 1)
          END AS first_attempt

-- name: heartbeat
-- Progress rides along (NULL: unchanged), and the news that the handler began
-- (:started: the attempt counts from now on); the reply carries cancel requests.
UPDATE due_jobs
SET lease_expires_at = :now + :lease,
    progress = coalesce(:progress, progress),
    progress_at = CASE WHEN :progress IS NOT NULL AND :progress IS NOT progress
                       THEN :now ELSE progress_at END,
    attempt_status = CASE WHEN :started THEN 'started' ELSE attempt_status END
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING id, 1 AS renewed, cancel_requested

-- name: complete_jobs
-- One statement for a batch of attempt endings (:rows, a JSON array of
-- [id, token, state, result, error, retry_in, progress, warning] arrays: the
-- backend's BATCH_ROWS; result, error and progress are JSON texts, kept as
-- strings), found through the primary key: a row per job run once took 3 to 5
-- times as long per job as this, most of it the statement's round trip
-- through Python. Fenced by the token: a stale worker's write matches nothing.
-- A job asked to stop ends cancelled whatever its attempt did (PostgreSQL's
-- statement says more); an entry in its errors says what the attempt did.
UPDATE due_jobs
SET state = CASE WHEN cancel_requested AND e.end_state <> 'waiting' THEN 'cancelled'
                 ELSE e.end_state END,
    lease_token = lease_token + 1,  -- the attempt is over: its token is stale now
    result = CASE WHEN e.end_state = 'succeeded' THEN e.end_result ELSE due_jobs.result END,
    warning = CASE WHEN e.end_state = 'succeeded' THEN e.end_warning ELSE due_jobs.warning END,
    run_at = CASE WHEN e.end_state = 'queued' AND NOT cancel_requested
                  THEN :now + e.end_retry_in ELSE run_at END,
    -- a retry after a backoff waits as a timer
    timer = e.end_state = 'queued' AND e.end_retry_in > 0 AND NOT cancel_requested,
    finished_at = CASE WHEN e.end_state <> 'waiting'
                            AND (e.end_state <> 'queued' OR cancel_requested)
                       THEN :now END,
    lease_expires_at = NULL,
    lost_leases = 0,
    progress = coalesce(e.end_progress, due_jobs.progress),
    last_error = CASE WHEN cancel_requested AND e.end_state <> 'waiting' THEN 'cancelled on request'
                      ELSE coalesce(json_extract(e.end_error, '$.error'), last_error) END,
    errors = CASE WHEN cancel_requested AND e.end_state NOT IN ('waiting', 'cancelled')
                  THEN json_insert(
                      CASE WHEN e.end_error IS NULL THEN errors
                           ELSE json_insert(iif(json_valid(errors), errors, json_array(errors)), '$[#]', json(e.end_error)) END,
                      '$[#]', json_object('attempt', attempt,
                          'kind', 'cancelled', 'error', 'cancelled on request; its attempt had '
                          || CASE e.end_state WHEN 'succeeded' THEN 'succeeded (result kept)'
                             ELSE 'failed' END,
                          'traceback', NULL,
                          'at', strftime('%Y-%m-%dT%H:%M:%f+00:00', :now, 'unixepoch')))
                  WHEN e.end_error IS NULL THEN errors
                  ELSE json_insert(iif(json_valid(errors), errors, json_array(errors)), '$[#]', json(e.end_error)) END,
    dedupe_key = CASE WHEN e.end_state IN ('failed', 'cancelled') OR cancel_requested
                        OR (e.end_state = 'succeeded' AND coalesce(unique_for, 0) <= 0)
                      THEN NULL ELSE dedupe_key END
FROM (SELECT json_extract(value, '$[0]') AS end_id, json_extract(value, '$[1]') AS end_token,
             json_extract(value, '$[2]') AS end_state, json_extract(value, '$[3]') AS end_result,
             json_extract(value, '$[4]') AS end_error, json_extract(value, '$[5]') AS end_retry_in,
             json_extract(value, '$[6]') AS end_progress, json_extract(value, '$[7]') AS end_warning
      FROM json_each(:rows)) AS e
WHERE due_jobs.id = e.end_id AND due_jobs.lease_token = e.end_token AND due_jobs.state = 'running'
-- PostgreSQL's columns: what the counts and the settling of parents read, and
-- whether it counted against a limit (its slots free: store/limit_claims.py).
RETURNING id, task, schedule, state, queue, parent_id, completes, workflow_id, pieces_total, cancel_requested,
          limits IS NOT NULL AS limited

-- name: completions_recorded
-- Of the attempt endings given, those the jobs already show (PostgreSQL's
-- statement says why; here one ending at a time).
SELECT id
FROM due_jobs
WHERE id = :id AND lease_token = :token + 1 AND lost_leases = 0
  AND (state = :state OR (state = 'cancelled' AND cancel_requested AND :state <> 'waiting'))
  AND (:error IS NULL
       OR EXISTS (SELECT 1 FROM json_each(errors) WHERE value = json(:error)))

-- name: select_expired
-- Running jobs whose worker stopped renewing the lease. The task is never
-- consulted, so a process that does not know the task rescues it too.
SELECT id, lease_token, attempt, max_attempts, lost_leases, worker, parent_id, completes, workflow_id,
       attempt_status
FROM due_jobs
WHERE state = 'running' AND lease_expires_at < :now
ORDER BY lease_expires_at
LIMIT :limit

-- name: rescue_jobs
-- Back to the queue, keeping its run_at (its place in line: it has been due
-- since then); or failed for good when the verdict gives up; or cancelled,
-- when it was asked to stop (it will not run again).
-- Only a start that ran is an attempt (PostgreSQL's statement says more).
-- A history that is not JSON (changed outside due) is kept, as a string, in a
-- new one, here and wherever an entry is added: one such row must not stop
-- every rescue (jsonb on PostgreSQL cannot hold one).
UPDATE due_jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN :gives_up THEN 'failed' ELSE 'queued' END,
    lease_token = lease_token + 1,
    attempt = CASE WHEN attempt_status = 'started' THEN attempt ELSE attempt - 1 END,
    finished_at = CASE WHEN :gives_up OR cancel_requested THEN :now END,
    lease_expires_at = NULL,
    lost_leases = CASE WHEN attempt_status = 'handed_back' THEN lost_leases
                       ELSE lost_leases + 1 END,
    last_error = json_extract(:error, '$.error'),
    errors = json_insert(iif(json_valid(errors), errors, json_array(errors)), '$[#]', json(:error)),
    dedupe_key = CASE WHEN :gives_up OR cancel_requested THEN NULL ELSE dedupe_key END
WHERE id = :id AND lease_token = :token AND attempt_status = :status
  AND state = 'running' AND lease_expires_at < :now
RETURNING id, task, state, queue, run_at, parent_id, completes, workflow_id, pieces_total

-- name: get_job
-- `stuck`: running, and its progress has not moved for its task's stuck_after.
SELECT *,
       (state = 'running' AND stuck_after IS NOT NULL
        AND coalesce(progress_at, started_at) < :now - stuck_after) AS stuck
FROM due_jobs
WHERE id = :id

-- name: list_jobs
-- Newest first, from `before` back: `id < coalesce(:before, <largest id>)` is a
-- bound the read starts from, where `:before IS NULL OR id < :before` had it
-- walk back from the newest job (731 ms for a page with 7,000,000 newer jobs).
-- :args_contains (a JSON object) matches a job whose keyword arguments, or one
-- of whose positional arguments that is an object, hold each of its keys with
-- an equal value (a number equal as a number; an object or a list as a whole,
-- keys in the same order): PostgreSQL's containment (`@>`) one level deep.
-- A positional argument shown hidden is never searched (a search by a key in
-- it would confirm a guessed secret): its position is in the payload's
-- "redact" list, or in :hidden_positions ({"task": [1, 2]}, the positions the
-- showing app's tasks hide).
SELECT *
FROM (SELECT *,
             (state = 'running' AND stuck_after IS NOT NULL
              AND coalesce(progress_at, started_at) < :now - stuck_after) AS stuck
      FROM due_jobs
      WHERE (:queue IS NULL OR queue = :queue)
        AND (:state IS NULL OR state = :state)
        AND (:task IS NULL OR task = :task)
        AND (:parent IS NULL OR parent_id = :parent)
        AND (:key IS NULL OR key = :key)
        AND (:since IS NULL OR coalesce(finished_at, created_at) >= :since)
        AND (:until IS NULL OR coalesce(finished_at, created_at) < :until)
        AND (:error_contains IS NULL OR instr(last_error, :error_contains) > 0)
        AND (:key_prefix IS NULL OR substr(key, 1, length(:key_prefix)) = :key_prefix)
        AND (:workflow IS NULL OR workflow_id = :workflow)
        AND (:args_contains IS NULL
             OR NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                            WHERE NOT EXISTS (SELECT 1 FROM json_each(payload, '$.kwargs') AS have
                                              WHERE have.key = want.key AND have.value IS want.value
                                                AND (have.type = want.type
                                                     OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))
             OR EXISTS (SELECT 1 FROM json_each(payload, '$.args') AS arg
                        WHERE arg.type = 'object'
                          AND arg.key NOT IN (SELECT value FROM json_each(payload, '$.redact') WHERE type = 'integer')
                          AND arg.key NOT IN (SELECT hidden.value FROM json_each(:hidden_positions) AS by_task,
                                                                       json_each(by_task.value) AS hidden
                                              WHERE by_task.key = task)
                          AND NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                                          WHERE NOT EXISTS (SELECT 1 FROM json_each(arg.value) AS have
                                                            WHERE have.key = want.key AND have.value IS want.value
                                                              AND (have.type = want.type
                                                                   OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))))
        AND id < coalesce(:before, 9223372036854775807))
WHERE NOT :stuck_only OR stuck
ORDER BY id DESC
LIMIT :limit

-- name: list_running_jobs
-- list_jobs for the running jobs (as many as the workers' slots): read newest
-- first through their index, not back through the whole table past every
-- newer job.
SELECT *
FROM (SELECT *,
             (stuck_after IS NOT NULL
              AND coalesce(progress_at, started_at) < :now - stuck_after) AS stuck
      FROM due_jobs INDEXED BY due_jobs_running
      WHERE state = 'running'
        AND (:queue IS NULL OR queue = :queue)
        AND (:task IS NULL OR task = :task)
        AND (:parent IS NULL OR parent_id = :parent)
        AND (:key IS NULL OR key = :key)
        AND (:since IS NULL OR coalesce(finished_at, created_at) >= :since)
        AND (:until IS NULL OR coalesce(finished_at, created_at) < :until)
        AND (:error_contains IS NULL OR instr(last_error, :error_contains) > 0)
        AND (:key_prefix IS NULL OR substr(key, 1, length(:key_prefix)) = :key_prefix)
        AND (:workflow IS NULL OR workflow_id = :workflow)
        AND (:args_contains IS NULL
             OR NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                            WHERE NOT EXISTS (SELECT 1 FROM json_each(payload, '$.kwargs') AS have
                                              WHERE have.key = want.key AND have.value IS want.value
                                                AND (have.type = want.type
                                                     OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))
             OR EXISTS (SELECT 1 FROM json_each(payload, '$.args') AS arg
                        WHERE arg.type = 'object'
                          AND arg.key NOT IN (SELECT value FROM json_each(payload, '$.redact') WHERE type = 'integer')
                          AND arg.key NOT IN (SELECT hidden.value FROM json_each(:hidden_positions) AS by_task,
                                                                       json_each(by_task.value) AS hidden
                                              WHERE by_task.key = task)
                          AND NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                                          WHERE NOT EXISTS (SELECT 1 FROM json_each(arg.value) AS have
                                                            WHERE have.key = want.key AND have.value IS want.value
                                                              AND (have.type = want.type
                                                                   OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))))
        AND id < coalesce(:before, 9223372036854775807))
WHERE NOT :stuck_only OR stuck
ORDER BY id DESC
LIMIT :limit

-- name: list_stopped_jobs
-- list_jobs for the waiting or the failed jobs (:state), few beside the rest:
-- read newest first through their index, not back through the whole table
-- past every newer job. Neither is ever stuck (only a running job is).
SELECT *, 0 AS stuck
FROM due_jobs INDEXED BY due_jobs_stopped
WHERE state = :state AND state IN ('waiting', 'failed')
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:parent IS NULL OR parent_id = :parent)
  AND (:key IS NULL OR key = :key)
  AND (:since IS NULL OR coalesce(finished_at, created_at) >= :since)
  AND (:until IS NULL OR coalesce(finished_at, created_at) < :until)
  AND (:error_contains IS NULL OR instr(last_error, :error_contains) > 0)
  AND (:key_prefix IS NULL OR substr(key, 1, length(:key_prefix)) = :key_prefix)
  AND (:workflow IS NULL OR workflow_id = :workflow)
  AND (:args_contains IS NULL
       OR NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                      WHERE NOT EXISTS (SELECT 1 FROM json_each(payload, '$.kwargs') AS have
                                        WHERE have.key = want.key AND have.value IS want.value
                                          AND (have.type = want.type
                                               OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))
       OR EXISTS (SELECT 1 FROM json_each(payload, '$.args') AS arg
                  WHERE arg.type = 'object'
                    AND arg.key NOT IN (SELECT value FROM json_each(payload, '$.redact') WHERE type = 'integer')
                    AND arg.key NOT IN (SELECT hidden.value FROM json_each(:hidden_positions) AS by_task,
                                                                 json_each(by_task.value) AS hidden
                                        WHERE by_task.key = task)
                    AND NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                                    WHERE NOT EXISTS (SELECT 1 FROM json_each(arg.value) AS have
                                                      WHERE have.key = want.key AND have.value IS want.value
                                                        AND (have.type = want.type
                                                             OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))))
  AND id < coalesce(:before, 9223372036854775807)
  AND NOT :stuck_only
ORDER BY id DESC
LIMIT :limit

-- name: count_retryable_jobs
-- bulk.count for retry_many: how many jobs the retry would queue again, read
-- in the database and counted no further than :cap (one statement, no rows
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
    FROM (  -- the failed jobs through their index (the cancelled have none), read
            -- as they come: the filter below is applied to each arm
          SELECT * FROM due_jobs INDEXED BY due_jobs_stopped
          WHERE state = 'failed' AND state IN ('waiting', 'failed')
            AND (:state IS NULL OR :state = 'failed')
          UNION ALL
          SELECT * FROM due_jobs
          WHERE state = 'cancelled' AND (:state IS NULL OR :state = 'cancelled')) AS j
    WHERE (:queue IS NULL OR queue = :queue)
      AND (:task IS NULL OR task = :task)
      AND (:parent IS NULL OR parent_id = :parent)
      AND (:key IS NULL OR key = :key)
      AND (:since IS NULL OR coalesce(finished_at, created_at) >= :since)
      AND (:until IS NULL OR coalesce(finished_at, created_at) < :until)
      AND (:error_contains IS NULL OR instr(last_error, :error_contains) > 0)
      AND (:key_prefix IS NULL OR substr(key, 1, length(:key_prefix)) = :key_prefix)
      AND (:workflow IS NULL OR workflow_id = :workflow)
      AND (:args_contains IS NULL
           OR NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                          WHERE NOT EXISTS (SELECT 1 FROM json_each(payload, '$.kwargs') AS have
                                            WHERE have.key = want.key AND have.value IS want.value
                                              AND (have.type = want.type
                                                   OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))
           OR EXISTS (SELECT 1 FROM json_each(payload, '$.args') AS arg
                      WHERE arg.type = 'object'
                        AND arg.key NOT IN (SELECT value FROM json_each(payload, '$.redact') WHERE type = 'integer')
                        AND arg.key NOT IN (SELECT hidden.value FROM json_each(:hidden_positions) AS by_task,
                                                                     json_each(by_task.value) AS hidden
                                            WHERE by_task.key = task)
                        AND NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                                        WHERE NOT EXISTS (SELECT 1 FROM json_each(arg.value) AS have
                                                          WHERE have.key = want.key AND have.value IS want.value
                                                            AND (have.type = want.type
                                                                 OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))))
      AND id < coalesce(:before, 9223372036854775807)
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
                 OR (h.state = 'succeeded' AND h.finished_at + coalesce(h.unique_for, 0) > :now))))
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
      LIMIT :cap) AS counted

-- name: count_cancellable_jobs
-- bulk.count for cancel_many: how many jobs the cancel would end or ask to
-- stop, read in the database and counted no further than :cap. The queued,
-- running and waiting jobs list_jobs lists with the same filter that are not
-- asked to stop already (bulk.cancel_many passes those over), less those the
-- cancel ends on the way before it comes to them, uncounted: a waiting job
-- is cancelled first and takes with it its unfinished pieces and completion
-- job, all the way down (pieces.cancel_pieces), and a waiting step whose
-- unfinished upstream steps are all waiting jobs cancelled before it is
-- cancelled by its policy (workflows.release) unless the policy is to run.
WITH RECURSIVE matched AS NOT MATERIALIZED (
    SELECT id, state, workflow_id, on_upstream_failure
    FROM (  -- the waiting and the running jobs through their indexes, read as
            -- they come: the filter below is applied to each arm
          SELECT * FROM due_jobs INDEXED BY due_jobs_stopped
          WHERE state = 'waiting' AND state IN ('waiting', 'failed')
            AND (:state IS NULL OR :state = 'waiting')
          UNION ALL
          SELECT * FROM due_jobs INDEXED BY due_jobs_running
          WHERE state = 'running' AND (:state IS NULL OR :state = 'running')
          UNION ALL
          SELECT * FROM due_jobs
          WHERE state = 'queued' AND (:state IS NULL OR :state = 'queued')) AS j
    WHERE NOT cancel_requested
      AND (:queue IS NULL OR queue = :queue)
      AND (:task IS NULL OR task = :task)
      AND (:parent IS NULL OR parent_id = :parent)
      AND (:key IS NULL OR key = :key)
      AND (:since IS NULL OR coalesce(finished_at, created_at) >= :since)
      AND (:until IS NULL OR coalesce(finished_at, created_at) < :until)
      AND (:error_contains IS NULL OR instr(last_error, :error_contains) > 0)
      AND (:key_prefix IS NULL OR substr(key, 1, length(:key_prefix)) = :key_prefix)
      AND (:workflow IS NULL OR workflow_id = :workflow)
      AND (:args_contains IS NULL
           OR NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                          WHERE NOT EXISTS (SELECT 1 FROM json_each(payload, '$.kwargs') AS have
                                            WHERE have.key = want.key AND have.value IS want.value
                                              AND (have.type = want.type
                                                   OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))
           OR EXISTS (SELECT 1 FROM json_each(payload, '$.args') AS arg
                      WHERE arg.type = 'object'
                        AND arg.key NOT IN (SELECT value FROM json_each(payload, '$.redact') WHERE type = 'integer')
                        AND arg.key NOT IN (SELECT hidden.value FROM json_each(:hidden_positions) AS by_task,
                                                                     json_each(by_task.value) AS hidden
                                            WHERE by_task.key = task)
                        AND NOT EXISTS (SELECT 1 FROM json_each(:args_contains) AS want
                                        WHERE NOT EXISTS (SELECT 1 FROM json_each(arg.value) AS have
                                                          WHERE have.key = want.key AND have.value IS want.value
                                                            AND (have.type = want.type
                                                                 OR have.type IN ('integer', 'real') AND want.type IN ('integer', 'real'))))))
      AND id < coalesce(:before, 9223372036854775807)
),
waiting AS MATERIALIZED (
    -- Through the index of waiting jobs (few), not back through every job.
    SELECT w.id FROM due_jobs AS w INDEXED BY due_jobs_stopped
    WHERE w.state = 'waiting' AND w.state IN ('waiting', 'failed')
      AND EXISTS (SELECT 1 FROM matched AS m WHERE m.id = w.id)
),
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
      LIMIT :cap) AS counted

-- name: cancel_job
UPDATE due_jobs
SET state = 'cancelled', finished_at = :now, dedupe_key = NULL,
    limit_wait = NULL, limit_wait_key = NULL
WHERE id = :id AND state = 'queued'
RETURNING *

-- name: cancel_queued_jobs
-- cancel_job for a batch of jobs (bulk.cancel_many, run_each: one job a row).
UPDATE due_jobs
SET state = 'cancelled', finished_at = :now, dedupe_key = NULL,
    limit_wait = NULL, limit_wait_key = NULL
WHERE id = :id AND state = 'queued'
RETURNING *

-- name: retry_plain_jobs
-- retry_job for a batch of jobs (bulk.retry_many, run_each: one job a row), for
-- those with no key, parent or workflow to look after (the others go one by
-- one, through steps.retry_steps).
UPDATE due_jobs
SET state = 'queued',
    limit_wait = NULL,
    limit_wait_key = NULL,
    dedupe_key = key,
    run_at = CASE WHEN :run_now OR run_at < :now THEN :now ELSE run_at END,
    timer = NOT :run_now AND run_at > :now,
    attempt = 0,
    lost_leases = 0,
    cancel_requested = 0,
    finished_at = NULL,
    lease_expires_at = NULL
WHERE id = :id AND state IN ('failed', 'cancelled') AND pieces_total = 0
  AND key IS NULL AND parent_id IS NULL AND completes IS NULL AND workflow_id IS NULL
RETURNING id

-- name: uncount_piece
-- A piece retried by hand no longer counts as ended on its parent.
UPDATE due_jobs
SET pieces_failed = pieces_failed - 1,
    progress = json_object('done', pieces_done + pieces_failed - 1, 'total', pieces_total)
WHERE id = :parent AND pieces_failed > 0
RETURNING id

-- name: job_key
SELECT id, key FROM due_jobs WHERE id = :id

-- name: retry_job
-- Due now; a job cancelled while delayed keeps its time if it is still to come.
-- It takes its key back (steps.retry_steps made sure no other job holds it).
UPDATE due_jobs
SET state = 'queued',
    limit_wait = NULL,  -- a wait ended with the job: its next claim looks again
    limit_wait_key = NULL,
    dedupe_key = key,
    run_at = CASE WHEN :run_now OR run_at < :now THEN :now ELSE run_at END,
    timer = NOT :run_now AND run_at > :now,
    attempt = 0,
    lost_leases = 0,
    cancel_requested = 0,
    finished_at = NULL,
    lease_expires_at = NULL
WHERE id = :id AND state IN ('failed', 'cancelled') AND pieces_total = 0
  AND (parent_id IS NULL OR EXISTS (
      -- A piece, while its parent still counts its pieces (not settled).
      SELECT 1 FROM due_jobs p
      WHERE p.id = due_jobs.parent_id
        AND (p.state = 'running'
             OR (p.state = 'waiting' AND p.pieces_done + p.pieces_failed < p.pieces_total))))
  AND (completes IS NULL OR EXISTS (
      -- A completion job, only while its parent waits for it.
      SELECT 1 FROM due_jobs p WHERE p.id = due_jobs.completes AND p.state = 'waiting'))
RETURNING *

-- name: due_queues
-- The queues with a job a worker may take now: those of the claim index (a
-- job enters it once due), found by one probe each, and those of a timer that
-- came due.
WITH RECURSIVE claimable(queue) AS (
    SELECT (SELECT queue FROM due_jobs INDEXED BY due_jobs_claim
            WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL
            ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM due_jobs AS j INDEXED BY due_jobs_claim
            WHERE j.state = 'queued' AND NOT j.held AND NOT j.timer AND j.limits IS NULL AND j.queue > c.queue
            ORDER BY j.queue LIMIT 1)
    FROM claimable AS c
    WHERE c.queue IS NOT NULL
),
timed(queue) AS (
    SELECT (SELECT queue FROM due_jobs INDEXED BY due_jobs_timers
            WHERE state = 'queued' AND timer
            ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM due_jobs AS j INDEXED BY due_jobs_timers
            WHERE j.state = 'queued' AND j.timer AND j.queue > t.queue
            ORDER BY j.queue LIMIT 1)
    FROM timed AS t
    WHERE t.queue IS NOT NULL
),
limited(queue) AS (  -- limited jobs that wait for no limit: claimable, if they have room
    SELECT (SELECT queue FROM due_jobs INDEXED BY due_jobs_limited
            WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
              AND limit_wait IS NULL
            ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM due_jobs AS j INDEXED BY due_jobs_limited
            WHERE j.state = 'queued' AND NOT j.held AND NOT j.timer AND j.limits IS NOT NULL
              AND j.limit_wait IS NULL AND j.queue > l.queue
            ORDER BY j.queue LIMIT 1)
    FROM limited AS l
    WHERE l.queue IS NOT NULL
)
SELECT queue FROM claimable WHERE queue IS NOT NULL
UNION
SELECT queue FROM limited WHERE queue IS NOT NULL
UNION
SELECT t.queue FROM timed AS t
WHERE t.queue IS NOT NULL
  AND EXISTS (SELECT 1 FROM due_jobs INDEXED BY due_jobs_timers
              WHERE state = 'queued' AND timer AND queue = t.queue AND run_at <= :now
                AND NOT held)
ORDER BY queue

-- name: set_job_limits
-- Running jobs stored as counting against no limit, whose task counts against
-- some in the code of the worker that claimed them (a schedule's run stored
-- before its task had limits): their limits, as an enqueue writes them, before
-- they are handed back (release_jobs, in the same transaction); fenced.
UPDATE due_jobs SET limits = :limits
WHERE id = :id AND lease_token = :token AND state = 'running' AND limits IS NULL

-- name: release_jobs
-- A stopping worker hands back a job it will not finish: due again at once (its
-- run_at kept: its place in line), and the interrupted attempt is not counted.
-- A job asked to stop is not handed back: it ends cancelled. A job whose
-- handler thread still runs (:later: it cannot be interrupted) is handed back
-- as it stands: still running under its lease, its token moved on (the thread
-- can write nothing more), due again only when the lease it held expires (at
-- most :handback seconds on: the worker exits before then) and a rescue puts it
-- back, attempt not counted (attempt_status 'handed_back').
UPDATE due_jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN :later THEN 'running' ELSE 'queued' END,
    lease_token = lease_token + 1,
    attempt = CASE WHEN :later AND NOT cancel_requested THEN attempt ELSE attempt - 1 END,
    attempt_status = CASE WHEN :later THEN 'handed_back' ELSE attempt_status END,
    lease_expires_at = CASE WHEN :later AND NOT cancel_requested
                            THEN min(lease_expires_at, :now + :handback) END,
    finished_at = CASE WHEN cancel_requested THEN :now END,
    dedupe_key = CASE WHEN cancel_requested THEN NULL ELSE dedupe_key END,
    errors = json_insert(iif(json_valid(errors), errors, json_array(errors)), '$[#]', json_object(
        'attempt', attempt, 'kind', 'released',
        'error', :reason || CASE WHEN :later AND NOT cancel_requested
                                 THEN '; its handler thread still ran: due again once its lease expires'
                                 ELSE '' END,
        'traceback', NULL, 'at', strftime('%Y-%m-%dT%H:%M:%f+00:00', :now, 'unixepoch')))
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING id, state, task, queue, run_at, parent_id, completes, workflow_id, pieces_total

-- name: next_due
-- When the next job of these tasks in this queue is due (the worker sleeps
-- until then): the earliest of the claim index and of the timers. The claim
-- index is read by a skip scan: for each priority level present, the earliest
-- run_at; O(levels x log n), with no index of its own. The timers are in
-- run_at order already. A paused queue has no next due time (its workers
-- poll until it resumes).
WITH RECURSIVE levels(priority) AS (
    SELECT max(priority) FROM due_jobs INDEXED BY due_jobs_claim
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = :queue
    UNION ALL
    SELECT (SELECT max(priority) FROM due_jobs INDEXED BY due_jobs_claim
            WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = :queue
              AND priority < levels.priority)
    FROM levels
    WHERE levels.priority IS NOT NULL
),
due_times(run_at) AS (
    SELECT (SELECT min(run_at) FROM due_jobs INDEXED BY due_jobs_claim
            WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = :queue
              AND priority = levels.priority
              AND task IN (SELECT value FROM json_each(:tasks)))
    FROM levels
    WHERE priority IS NOT NULL
    UNION ALL
    SELECT (SELECT run_at FROM due_jobs INDEXED BY due_jobs_timers
            WHERE state = 'queued' AND timer AND queue = :queue AND NOT held
              AND task IN (SELECT value FROM json_each(:tasks))
            ORDER BY run_at LIMIT 1)
)
SELECT min(run_at) AS run_at
FROM due_times
WHERE NOT EXISTS (SELECT 1 FROM due_queues WHERE name = :queue AND paused)

-- name: unknown_task_candidates
-- One queue's look for jobs of tasks nobody knows, read in a read transaction
-- (no writer waits for it): the next :scan entries of its claim index after
-- where the last look stopped, in the claim's order (priority, run_at, id: a
-- range of the index however many jobs share a run_at). Those due for longer
-- than the grace, of a task the caller does not know, are the candidates. A
-- backlog of a million old jobs costs each sweep what :scan of them do, and
-- the next sweeps read on. Held pieces are not in the claim index (they cannot
-- be failed), nor are timers (a claim in the queue moves the due ones in). One
-- row per candidate (`id`; none: one row with a NULL id), each with how many
-- entries were read and the last of them (where the next look starts).
WITH examined AS MATERIALIZED (
    SELECT id, priority, run_at, task
    FROM (SELECT * FROM (
              SELECT id, priority, run_at, task FROM due_jobs INDEXED BY due_jobs_claim
              WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = :queue
                AND priority = :after_priority AND (run_at, id) > (:after_run_at, :after_id)
              ORDER BY priority DESC, run_at, id
              LIMIT :scan)
          UNION ALL
          SELECT * FROM (
              SELECT id, priority, run_at, task FROM due_jobs INDEXED BY due_jobs_claim
              WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = :queue
                AND priority < coalesce(:after_priority, 2147483647)
              ORDER BY priority DESC, run_at, id
              LIMIT :scan))
    ORDER BY priority DESC, run_at, id
    LIMIT :scan
),
last AS (SELECT priority, run_at, id FROM examined ORDER BY priority, run_at DESC, id DESC LIMIT 1)
SELECT s.examined, s.after_priority, s.after_run_at, s.after_id, u.id
FROM (SELECT (SELECT count(*) FROM examined) AS examined,
             (SELECT priority FROM last) AS after_priority,
             (SELECT run_at FROM last) AS after_run_at,
             (SELECT id FROM last) AS after_id) AS s
LEFT JOIN (SELECT id FROM examined
           WHERE run_at < :now - :grace
             AND task NOT IN (SELECT value FROM json_each(:tasks))) AS u ON true

-- name: fail_unknown_tasks
-- The candidates of a look (`ids`) that are still jobs nobody knows, due for
-- the whole grace period (a deploy that never finished, a typo): failed with
-- the reason, kept, and retryable once a worker knows the task. "Live":
-- registered as running or stopping and seen within `alive` seconds; the
-- caller, which does not know the task (it knows `tasks`), is one of them.
UPDATE due_jobs
SET state = 'failed',
    finished_at = :now,
    dedupe_key = NULL,
    last_error = 'unknown task ' || task || ': no live worker of queue ' || queue
        || ' knew it within ' || :grace_text || ' of its due time',
    errors = json_insert(iif(json_valid(errors), errors, json_array(errors)), '$[#]', json_object(
        'attempt', attempt, 'kind', 'unknown_task',
        'error', 'unknown task ' || task || ': no live worker of queue ' || queue
            || ' knew it within ' || :grace_text || ' of its due time',
        'traceback', NULL, 'at', strftime('%Y-%m-%dT%H:%M:%f+00:00', :now, 'unixepoch')))
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state = 'queued' AND NOT held
  AND task NOT IN (SELECT value FROM json_each(:tasks))
  AND run_at < :now - :grace
  AND NOT EXISTS (
      SELECT 1 FROM due_workers w, json_each(w.queues) AS q, json_each(w.tasks) AS t
      WHERE w.state IN ('running', 'stopping') AND w.last_seen_at > :now - :alive
        AND q.key = due_jobs.queue AND t.value = due_jobs.task)
RETURNING id, task, queue, state, parent_id, completes, workflow_id, pieces_total

-- name: limited_sweep_candidates
-- One queue's look at its jobs that count against a limit (waiting for one
-- or not: they are in no claim index), read in a read transaction: the next
-- :scan of them in run_at order after where the last look stopped. The
-- candidates: due for longer than the grace, of a task the caller does not
-- know (`unknown`); or due, of a task the caller knows, counting against a
-- limit the caller's code no longer gives that task (`task_limits`: each
-- known task's limits), and enqueued before the caller started or due for
-- longer than the grace. One row per candidate (`id`; none: one row with a
-- NULL id), each with how many were read and the last of them.
WITH examined AS MATERIALIZED (
    SELECT id, run_at, created_at, task, limits FROM due_jobs INDEXED BY due_jobs_limited_queue
    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
      AND queue = :queue
      AND (:after_id IS NULL
           OR (run_at >= :after_run_at AND (run_at, id) > (:after_run_at, :after_id)))
    ORDER BY run_at, id
    LIMIT :scan
),
known AS (SELECT key AS task, value AS limits FROM json_each(:task_limits)),
last AS (SELECT run_at, id FROM examined ORDER BY run_at DESC, id DESC LIMIT 1)
SELECT s.examined, s.after_run_at, s.after_id, c.id, c.unknown
FROM (SELECT (SELECT count(*) FROM examined) AS examined,
             (SELECT run_at FROM last) AS after_run_at,
             (SELECT id FROM last) AS after_id) AS s
LEFT JOIN (
    SELECT e.id, k.task IS NULL AS unknown
    FROM examined AS e LEFT JOIN known AS k ON k.task = e.task
    WHERE CASE WHEN k.task IS NULL THEN e.run_at < :now - :grace
               ELSE :worker IS NOT NULL
                    AND e.run_at <= :now
                    AND (e.run_at < :now - :grace
                         OR e.created_at < (SELECT started_at FROM due_workers WHERE id = :worker))
                    AND EXISTS (SELECT 1 FROM json_each(e.limits) AS p
                                WHERE p.value ->> 0 NOT IN (SELECT value FROM json_each(k.limits)))
          END
) AS c ON true

-- name: drop_undeclared_limits
-- The candidates of a look (`ids`) that still count against a limit the
-- caller's code no longer gives their task (a limit taken out of the code):
-- it is dropped from them, the others kept, the reason in their history. A
-- job never waits for a limit that the code running it does not declare; a
-- job no longer counting against what it waited for waits no more.
WITH known AS (SELECT key AS task, value AS limits FROM json_each(:task_limits)),
pairs AS (
    SELECT j.id, p.key AS n, p.value AS pair,
           p.value ->> 0 IN (SELECT value FROM json_each(k.limits)) AS declared
    FROM due_jobs AS j JOIN known AS k ON k.task = j.task, json_each(j.limits) AS p
    WHERE j.id IN (SELECT value FROM json_each(:ids))
      AND j.state = 'queued' AND NOT j.held AND j.limits IS NOT NULL AND j.run_at <= :now
      AND (j.run_at < :now - :grace
           OR j.created_at < (SELECT started_at FROM due_workers WHERE id = :worker))
),
chosen AS (
    SELECT d.id,
           (SELECT json_group_array(json(k.pair)) FROM (SELECT pair FROM pairs AS k
                WHERE k.id = d.id AND k.declared ORDER BY k.n) AS k) AS kept,
           (SELECT group_concat(name, ', ') FROM (SELECT DISTINCT o.pair ->> 0 AS name FROM pairs AS o
                WHERE o.id = d.id AND NOT o.declared ORDER BY 1)) AS names
    FROM (SELECT DISTINCT id FROM pairs WHERE NOT declared) AS d
)
UPDATE due_jobs
SET limits = CASE WHEN c.kept = '[]' THEN NULL ELSE c.kept END,  -- none left: an ordinary job
    limit_wait = CASE WHEN EXISTS (SELECT 1 FROM json_each(c.kept) AS e
                                   WHERE e.value ->> 0 = due_jobs.limit_wait
                                     AND e.value ->> 1 = due_jobs.limit_wait_key)
                      THEN limit_wait END,
    limit_wait_key = CASE WHEN EXISTS (SELECT 1 FROM json_each(c.kept) AS e
                                       WHERE e.value ->> 0 = due_jobs.limit_wait
                                         AND e.value ->> 1 = due_jobs.limit_wait_key)
                          THEN limit_wait_key END,
    errors = json_insert(iif(json_valid(errors), errors, json_array(errors)), '$[#]', json_object(
        'attempt', attempt, 'kind', 'limits_dropped',
        'error', 'no longer counts against limit ' || c.names || ': the code of worker '
            || :worker || ' gives its task ' || task || ' no such limit',
        'traceback', NULL, 'at', strftime('%Y-%m-%dT%H:%M:%f+00:00', :now, 'unixepoch')))
FROM chosen AS c
WHERE due_jobs.id = c.id
RETURNING id

-- name: register_worker
INSERT INTO due_workers (id, host, pid, queues, tasks, started_at, last_seen_at, state)
VALUES (:id, :host, :pid, :queues, :tasks, :now, :now, 'running')

-- name: touch_worker
-- A worker marked gone that reports in again (it was paused) is running again;
-- one whose row was pruned meanwhile finds none, and registers again.
UPDATE due_workers
SET last_seen_at = :now,
    state = CASE WHEN state = 'gone' THEN 'running' ELSE state END
WHERE id = :id
RETURNING id

-- name: set_worker_state
UPDATE due_workers
SET state = :state,
    last_seen_at = :now,
    stopped_at = CASE WHEN :state = 'stopped' THEN :now END
WHERE id = :id

-- name: count_worker_recycle
-- A worker process that recycled itself, counted as it records its stop.
INSERT INTO due_worker_recycles (reason, total) VALUES (:reason, 1)
ON CONFLICT (reason) DO UPDATE SET total = due_worker_recycles.total + 1

-- name: worker_recycles
SELECT reason, total FROM due_worker_recycles ORDER BY reason

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

-- ---------------------------------------------------------------- schedules

-- name: list_schedule_rows
SELECT * FROM due_schedules ORDER BY name

-- name: insert_schedule
INSERT INTO due_schedules (name, task, cron, every, tz, payload, queue, priority, max_attempts,
                           misfire, overlap, catch_up_limit, misfire_grace, source, enabled,
                           paused, fingerprint, next_fire_at, created_at, updated_at,
                           alert_after, limits)
VALUES (:name, :task, :cron, :every, :tz, :payload, :queue, :priority, :max_attempts, :misfire,
        :overlap, :catch_up_limit, :misfire_grace, :source, :enabled, 0, :fingerprint, :next_fire_at,
        :now, :now, :alert_after, :limits)

-- name: update_schedule
-- A changed definition starts afresh from its next time; its history stays.
UPDATE due_schedules
SET task = :task, cron = :cron, every = :every, tz = :tz, payload = :payload, queue = :queue,
    priority = :priority, max_attempts = :max_attempts, misfire = :misfire,
    overlap = :overlap, catch_up_limit = :catch_up_limit, misfire_grace = :misfire_grace,
    source = :source, enabled = :enabled, fingerprint = :fingerprint, next_fire_at = :next_fire_at,
    updated_at = :now, alert_after = :alert_after, limits = :limits, problem = NULL
WHERE name = :name

-- name: set_schedule_problem
-- It cannot fire: not listed as due (nor its time as the next) until its
-- definition is written again.
UPDATE due_schedules SET problem = :problem WHERE name = :name

-- name: disable_schedule
UPDATE due_schedules SET enabled = 0, updated_at = :now WHERE name = :name

-- name: delete_schedule
DELETE FROM due_schedules WHERE name = :name RETURNING name

-- name: pause_schedule
UPDATE due_schedules SET paused = :paused, updated_at = :now WHERE name = :name RETURNING name

-- name: due_schedule_names
SELECT name FROM due_schedules
WHERE enabled AND next_fire_at <= :now AND problem IS NULL
ORDER BY next_fire_at

-- name: next_schedule_fire
SELECT min(next_fire_at) AS next_fire_at FROM due_schedules WHERE enabled AND problem IS NULL

-- name: lock_schedule
-- (BEGIN IMMEDIATE already holds the write lock.)
SELECT * FROM due_schedules WHERE name = :name

-- name: schedule_activity
-- Is a run of this schedule still going, and does one wait for it?
SELECT EXISTS (SELECT 1 FROM due_jobs
               WHERE schedule = :name AND state IN ('queued', 'running', 'waiting')) AS active,
       EXISTS (SELECT 1 FROM due_schedule_runs
               WHERE schedule = :name AND outcome = 'pending') AS pending

-- name: insert_schedule_run
INSERT INTO due_schedule_runs (schedule, scheduled_for, outcome, reason, recorded_at)
VALUES (:name, :scheduled_for, :outcome, :reason, :now)
ON CONFLICT (schedule, scheduled_for) DO NOTHING
RETURNING scheduled_for

-- name: count_missed
UPDATE due_schedules SET missed_total = missed_total + :missed WHERE name = :name

-- name: insert_scheduled_job
INSERT INTO due_jobs (task, queue, priority, payload, run_at, timer, max_attempts, schedule,
                      scheduled_for, created_at, limits)
VALUES (:task, :queue, :priority, :payload, :run_at, :run_at > :now, :max_attempts, :name,
        :scheduled_for, :now, :limits)
ON CONFLICT (schedule, scheduled_for) WHERE schedule IS NOT NULL DO NOTHING
RETURNING id

-- name: link_schedule_run
UPDATE due_schedule_runs
SET job_id = :job_id, outcome = 'enqueued', reason = :reason
WHERE schedule = :name AND scheduled_for = :scheduled_for

-- name: set_next_fire
UPDATE due_schedules SET next_fire_at = :next_fire_at WHERE name = :name

-- name: supersede_pending
UPDATE due_schedule_runs
SET outcome = 'skipped', reason = 'replaced by a newer run'
WHERE schedule = :name AND outcome = 'pending'

-- name: cancel_schedule_runs
-- `replace`: queued runs are cancelled outright, running ones asked to stop.
UPDATE due_jobs
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'queued' THEN :now ELSE finished_at END,
    cancel_requested = 1,
    dedupe_key = CASE WHEN state = 'queued' THEN NULL ELSE dedupe_key END
WHERE schedule = :name AND state IN ('queued', 'running', 'waiting')
RETURNING id, task, queue, state, parent_id, completes, workflow_id, pieces_total, cancel_requested

-- name: skip_pending_runs
-- Runs waiting for their previous one, of a schedule paused, disabled or removed
-- meanwhile: they will not start.
UPDATE due_schedule_runs SET outcome = 'skipped', reason = :reason
WHERE schedule = :name AND outcome = 'pending'

-- name: schedules_with_pending
SELECT DISTINCT schedule AS name FROM due_schedule_runs WHERE outcome = 'pending'

-- name: oldest_pending_run
SELECT scheduled_for FROM due_schedule_runs
WHERE schedule = :name AND outcome = 'pending'
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
WHERE r.schedule = :name
ORDER BY r.scheduled_for DESC
LIMIT :limit

-- name: schedule_runs_since
-- The runs of a window (scheduled at or after `since`), oldest first.
SELECT r.schedule, r.scheduled_for, r.outcome, r.reason, r.job_id, j.state AS job_state,
       r.recorded_at, j.started_at, j.finished_at
FROM due_schedule_runs r LEFT JOIN due_jobs j ON j.id = r.job_id
WHERE r.schedule = :name AND r.scheduled_for >= :since
ORDER BY r.scheduled_for

-- ------------------------------------------------------------------- leases

-- name: acquire_lease
-- Taken when free or expired (a new term: the token grows), renewed when ours.
INSERT INTO due_leases (name, holder, token, expires_at)
VALUES (:name, :holder, 1, :now + :ttl)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    token = CASE WHEN due_leases.holder = excluded.holder AND due_leases.expires_at >= :now
                 THEN due_leases.token ELSE due_leases.token + 1 END,
    expires_at = excluded.expires_at
WHERE due_leases.holder = excluded.holder OR due_leases.expires_at < :now
RETURNING token

-- name: renew_lease
UPDATE due_leases
SET expires_at = :now + :ttl
WHERE name = :name AND holder = :holder AND token = :token AND expires_at >= :now
RETURNING token

-- name: release_lease
UPDATE due_leases
SET expires_at = :now - 0.000001
WHERE name = :name AND holder = :holder AND token = :token

-- name: lease_is_held
-- Inside a leader's transaction: its writes count only while it holds the lease.
SELECT 1 AS held FROM due_leases
WHERE name = :name AND holder = :holder AND token = :token AND expires_at >= :now

-- ------------------------------------------------------------------ pruning

-- name: prune_jobs
-- Finished jobs older than the retention, oldest ids first. The newest job is
-- never deleted: new ids are max(id) + 1, so ids are never reused. A job whose
-- key still deduplicates (its unique_for window is open) is kept until it ends.
DELETE FROM due_jobs
WHERE id IN (
    SELECT id FROM due_jobs
    WHERE ((state = 'succeeded' AND finished_at < :now - :retention_succeeded)
           OR (state IN ('failed', 'cancelled') AND finished_at < :now - :retention_failed))
      AND (dedupe_key IS NULL OR finished_at + coalesce(unique_for, 0) <= :now)
      AND id < (SELECT max(id) FROM due_jobs)
      -- A workflow is kept or pruned whole (prune_workflows): a retry finds
      -- every result it reads, and every step it counts.
      AND workflow_id IS NULL
    ORDER BY id
    LIMIT :limit
)
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
      AND w.finished_at < :now - CASE WHEN w.state = 'succeeded' THEN :retention_succeeded
                                      ELSE :retention_failed END
      AND NOT EXISTS (
          SELECT 1 FROM due_jobs AS s
          WHERE s.workflow_id = w.id
            AND (s.id >= (SELECT max(id) FROM due_jobs)
                 OR (s.dedupe_key IS NOT NULL
                     AND s.finished_at + coalesce(s.unique_for, 0) > :now)))
) AS old
WHERE before < :limit
ORDER BY id

-- name: lock_pruned_steps
-- (SQLite's single writer holds the whole database: nothing to lock.)
SELECT 1 WHERE 0

-- name: prune_workflows
-- The workflows still ended, and still old enough.
DELETE FROM due_workflows
WHERE id IN (SELECT value FROM json_each(:ids)) AND state <> 'running'
  AND finished_at < :now - CASE WHEN state = 'succeeded' THEN :retention_succeeded
                                ELSE :retention_failed END
RETURNING id

-- name: prune_workflow_steps
DELETE FROM due_jobs WHERE workflow_id IN (SELECT value FROM json_each(:ids))
RETURNING id

-- name: prune_workflow_edges
DELETE FROM due_workflow_edges
WHERE step_id IN (SELECT value FROM json_each(:ids))
   OR upstream_id IN (SELECT value FROM json_each(:ids))

-- name: prune_schedule_runs
DELETE FROM due_schedule_runs
WHERE rowid IN (
    SELECT rowid FROM due_schedule_runs
    WHERE outcome <> 'pending' AND recorded_at < :now - :retention
    LIMIT :limit
)
RETURNING schedule

-- ------------------------------------------------------------- long work

-- name: save_checkpoint
-- Fenced: only the attempt holding the token may move the cursor. A handler
-- that saves one has begun: its attempt counts from now on.
UPDATE due_jobs SET checkpoint = :value, attempt_status = 'started'
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING cancel_requested

-- name: request_cancel
-- A running job sees it at its next heartbeat.
UPDATE due_jobs SET cancel_requested = 1
WHERE id = :id AND state = 'running'
RETURNING *

-- name: complete_in_transaction
-- ctx.transaction(): the job succeeds in the handler's own transaction, fenced.
UPDATE due_jobs
SET state = 'succeeded', lease_token = lease_token + 1, result = 'null', finished_at = :now,
    lease_expires_at = NULL, lost_leases = 0, progress = coalesce(:progress, progress),
    dedupe_key = CASE WHEN coalesce(unique_for, 0) <= 0 THEN NULL ELSE dedupe_key END
WHERE id = :id AND lease_token = :token AND state = 'running' AND pieces_total = 0
RETURNING id, task, queue, schedule, state, parent_id, completes, workflow_id, cancel_requested,
          finished_at - started_at AS seconds

-- name: add_pieces
-- A running parent announces pieces (fenced by its token). A later call keeps
-- what an earlier one said unless it says otherwise.
UPDATE due_jobs
SET on_complete = coalesce(:on_complete, on_complete),
    on_piece_failure = coalesce(:on_piece_failure, on_piece_failure)
WHERE id = :parent AND lease_token = :token AND state = 'running'
RETURNING held, cancel_requested

-- name: count_new_pieces
UPDATE due_jobs SET pieces_total = pieces_total + :added WHERE id = :parent

-- name: insert_batch_parent
-- app.batch(): a parent that never runs itself: it waits for its pieces.
INSERT INTO due_jobs (task, queue, priority, state, payload, run_at, max_attempts,
                      pieces_total, on_complete, on_piece_failure, progress, created_at)
VALUES (:task, :queue, 0, 'waiting', '{"args":[],"kwargs":{}}', :now, 1, :total, :on_complete,
        :on_piece_failure, json_object('done', 0, 'total', :total), :now)
RETURNING id

-- name: insert_pieces
-- Run for each piece; one already spawned (same key) is not added again.
INSERT INTO due_jobs (task, queue, priority, payload, run_at, max_attempts, stuck_after,
                      parent_id, piece_key, held, created_at, limits)
VALUES (:task, :queue, :priority, :payload, :now, :max_attempts, :stuck_after, :parent,
        :piece_key, :held, :now, :limits)
ON CONFLICT (parent_id, piece_key) WHERE parent_id IS NOT NULL DO NOTHING
RETURNING id

-- name: count_piece_endings
-- Pieces that ended, counted on their parent (writers are serialised anyway).
UPDATE due_jobs
SET pieces_done = pieces_done + :succeeded,
    pieces_failed = pieces_failed + :failed,
    progress = json_object('done', pieces_done + :succeeded + pieces_failed + :failed,
                           'total', pieces_total),
    progress_at = :now
WHERE id = :parent
RETURNING id, state, pieces_total, pieces_done, pieces_failed, on_complete, on_piece_failure,
          queue, priority, completes, upstream_pending

-- name: parent_counts
SELECT id, state, pieces_total, pieces_done, pieces_failed, on_complete, on_piece_failure, queue,
       priority, completes, upstream_pending
FROM due_jobs WHERE id = :parent

-- name: finish_parent
UPDATE due_jobs
SET state = :state, lease_token = lease_token + 1, finished_at = :now, lease_expires_at = NULL,
    result = :result, last_error = coalesce(:error, last_error), dedupe_key = NULL
WHERE id = :id AND state = 'waiting'
RETURNING id, task, queue, schedule, state, parent_id, completes, workflow_id

-- name: insert_completion_job
-- Once per parent, whatever races: the key is the parent's.
INSERT INTO due_jobs (task, queue, priority, payload, run_at, max_attempts, stuck_after,
                      completes, key, dedupe_key, created_at)
VALUES (:task, :queue, :priority, :payload, :now, :max_attempts, :stuck_after, :parent, :key,
        :key, :now)
ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: waiting_children
-- Pieces that are parents themselves, waiting (or queued for another attempt):
-- cancelled with their own pieces.
SELECT id FROM due_jobs
WHERE (parent_id = :parent OR completes = :parent)
  AND (state = 'waiting' OR (state = 'queued' AND pieces_total > 0))
ORDER BY id

-- name: cancel_children
-- A parent that ends early takes its unfinished pieces (and its completion
-- job) with it: queued and waiting ones end now, running ones are asked.
UPDATE due_jobs
SET state = CASE WHEN state IN ('queued', 'waiting') THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state IN ('queued', 'waiting') THEN :now ELSE finished_at END,
    cancel_requested = 1,
    dedupe_key = CASE WHEN state IN ('queued', 'waiting') THEN NULL ELSE dedupe_key END
WHERE (parent_id = :parent OR completes = :parent)
  AND state IN ('queued', 'running', 'waiting')
RETURNING id, task, queue, state

-- name: hold_group
-- Pause (held) or resume a group: the parent and all its pieces (so a piece
-- retried while the group is paused stays held).
UPDATE due_jobs SET held = :held
WHERE id = :parent OR parent_id = :parent
RETURNING id, queue

-- name: set_queue_paused
INSERT INTO due_queues (name, paused, updated_at) VALUES (:name, :paused, :now)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
RETURNING name

-- name: queue_states
SELECT name, paused, updated_at FROM due_queues ORDER BY name

-- name: queue_overview
-- Per queue: due now, scheduled (due later), running, waiting, retrying
-- (queued again after a failed or lost attempt), failed (kept until pruned),
-- and when its oldest due job became due. Each count reads at most :limit
-- entries of an index (a count that reaches it means "at least"), so a queue
-- with ten million jobs scheduled for next month costs what one with :limit
-- does. A queued job is in one of three indexes: the claim index (due: a
-- writer puts a job there only once its run_at has come by its own clock; a
-- reader whose clock is behind counts it due, though not yet as the oldest),
-- the timers (due or later by run_at) or the held pieces of a paused group
-- (the same); the
-- queues are found by one probe each into those and the index of waiting and
-- failed jobs, never by reading their rows, and among the running jobs. The
-- oldest due job is found as next_due finds the next: the earliest of each
-- priority level of the claim index and the first due timer, so the held
-- pieces, however many, are never read. Jobs that count against a limit have
-- an index of their own (waiting for a limit or not, they are due): they are
-- counted there, and their oldest (with the limit it waits for, if any) is
-- given apart, as limited_oldest_due: the caller takes the older of the two.
WITH RECURSIVE listed(queue) AS (
    SELECT ''
    UNION ALL
    SELECT (SELECT min(later.queue) FROM (
                SELECT (SELECT queue FROM due_jobs INDEXED BY due_jobs_claim
                        WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue > listed.queue
                        ORDER BY queue LIMIT 1) AS queue
                UNION ALL
                SELECT (SELECT queue FROM due_jobs INDEXED BY due_jobs_limited_queue
                        WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
                          AND queue > listed.queue
                        ORDER BY queue LIMIT 1)
                UNION ALL
                SELECT (SELECT queue FROM due_jobs INDEXED BY due_jobs_timers
                        WHERE state = 'queued' AND timer AND queue > listed.queue
                        ORDER BY queue LIMIT 1)
                UNION ALL
                SELECT (SELECT queue FROM due_jobs INDEXED BY due_jobs_held
                        WHERE state = 'queued' AND held AND NOT timer AND queue > listed.queue
                        ORDER BY queue LIMIT 1)
                UNION ALL
                SELECT (SELECT queue FROM due_jobs INDEXED BY due_jobs_parked
                        WHERE state IN ('waiting', 'failed') AND queue > listed.queue
                        ORDER BY queue LIMIT 1)) AS later)
    FROM listed
    WHERE listed.queue IS NOT NULL
),
queues(queue) AS (
    SELECT queue FROM listed WHERE queue <> ''
    UNION
    SELECT queue FROM due_jobs INDEXED BY due_jobs_running WHERE state = 'running'
)
SELECT q.queue,
       min(:limit,
           (SELECT count(*) FROM (
                SELECT 1 FROM due_jobs INDEXED BY due_jobs_claim
                WHERE queue = q.queue AND state = 'queued' AND NOT held AND NOT timer AND limits IS NULL
                LIMIT :limit))
           + (SELECT count(*) FROM (
                SELECT 1 FROM due_jobs INDEXED BY due_jobs_limited_queue
                WHERE queue = q.queue AND state = 'queued' AND NOT held AND NOT timer
                  AND limits IS NOT NULL
                LIMIT :limit))
           + (SELECT count(*) FROM (
                SELECT 1 FROM due_jobs INDEXED BY due_jobs_timers
                WHERE queue = q.queue AND state = 'queued' AND timer AND run_at <= :now
                LIMIT :limit))
           + (SELECT count(*) FROM (
                SELECT 1 FROM due_jobs INDEXED BY due_jobs_held
                WHERE queue = q.queue AND state = 'queued' AND held AND NOT timer
                  AND run_at <= :now
                LIMIT :limit))) AS due,
       min(:limit,
           (SELECT count(*) FROM (
                SELECT 1 FROM due_jobs INDEXED BY due_jobs_timers
                WHERE queue = q.queue AND state = 'queued' AND timer AND run_at > :now
                LIMIT :limit))
           + (SELECT count(*) FROM (
                SELECT 1 FROM due_jobs INDEXED BY due_jobs_held
                WHERE queue = q.queue AND state = 'queued' AND held AND NOT timer
                  AND run_at > :now
                LIMIT :limit))) AS scheduled,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs INDEXED BY due_jobs_running
            WHERE state = 'running' AND queue = q.queue
            LIMIT :limit)) AS running,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs INDEXED BY due_jobs_parked
            WHERE queue = q.queue AND state = 'waiting' AND state IN ('waiting', 'failed')
            LIMIT :limit)) AS waiting,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs INDEXED BY due_jobs_retrying
            WHERE queue = q.queue AND state = 'queued' AND attempt > 0
            LIMIT :limit)) AS retrying,
       (SELECT count(*) FROM (
            SELECT 1 FROM due_jobs INDEXED BY due_jobs_parked
            WHERE queue = q.queue AND state = 'failed' AND state IN ('waiting', 'failed')
            LIMIT :limit)) AS failed,
       (SELECT min(due_times.run_at) FROM (
            WITH RECURSIVE levels(priority) AS (
                SELECT max(priority) FROM due_jobs INDEXED BY due_jobs_claim
                WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = q.queue
                UNION ALL
                SELECT (SELECT max(priority) FROM due_jobs INDEXED BY due_jobs_claim
                        WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = q.queue
                          AND priority < levels.priority)
                FROM levels
                WHERE levels.priority IS NOT NULL
            )
            SELECT (SELECT min(run_at) FROM due_jobs INDEXED BY due_jobs_claim
                    WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NULL AND queue = q.queue
                      AND priority = levels.priority AND run_at <= :now) AS run_at
            FROM levels
            WHERE priority IS NOT NULL
            UNION ALL
            SELECT (SELECT run_at FROM due_jobs INDEXED BY due_jobs_timers
                    WHERE state = 'queued' AND timer AND queue = q.queue AND NOT held
                      AND run_at <= :now
                    ORDER BY run_at LIMIT 1)) AS due_times) AS oldest_due,
       (SELECT run_at FROM due_jobs INDEXED BY due_jobs_limited_queue
        WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
          AND queue = q.queue AND run_at <= :now
        ORDER BY run_at, id LIMIT 1) AS limited_oldest_due,
       (SELECT limit_wait FROM due_jobs INDEXED BY due_jobs_limited_queue
        WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
          AND queue = q.queue AND run_at <= :now
        ORDER BY run_at, id LIMIT 1) AS limited_oldest_wait,
       (SELECT limit_wait_key FROM due_jobs INDEXED BY due_jobs_limited_queue
        WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
          AND queue = q.queue AND run_at <= :now
        ORDER BY run_at, id LIMIT 1) AS limited_oldest_wait_key
FROM queues AS q
WHERE q.queue IS NOT NULL
ORDER BY q.queue

-- name: oldest_due_job
-- A queue's oldest due job (due at `run_at`, from the queue's figures: read
-- back from seconds, so within a microsecond), its task, and whether a live
-- worker of its queue knows that task.
SELECT j.id, j.task,
       EXISTS (SELECT 1 FROM due_workers AS w, json_each(w.queues) AS q, json_each(w.tasks) AS t
               WHERE w.state IN ('running', 'stopping') AND w.last_seen_at > :now - :alive
                 AND q.key = j.queue AND t.value = j.task) AS known
FROM due_jobs AS j
WHERE j.queue = :queue AND j.state = 'queued' AND NOT j.held
  AND j.run_at BETWEEN :run_at - 0.000002 AND :run_at + 0.000002
ORDER BY j.id
LIMIT 1

-- name: queue_stuck
-- Running jobs whose progress has not moved for their task's stuck_after.
SELECT queue, count(*) AS stuck
FROM due_jobs
WHERE state = 'running' AND lease_expires_at IS NOT NULL AND stuck_after IS NOT NULL
  AND coalesce(progress_at, started_at) < :now - stuck_after
GROUP BY queue

-- name: known_queue_names
-- Queues known without a job in them: paused or resumed ones, those workers
-- serve (or served), those schedules start jobs in.
SELECT name FROM due_queues
UNION SELECT q.key FROM due_workers, json_each(due_workers.queues) AS q
UNION SELECT queue FROM due_schedules

-- name: queue_in_use
-- Whether due knows a queue: a job was put in it (and not pruned since), or
-- it is known by name (see known_queue_names).
SELECT EXISTS (SELECT 1 FROM due_jobs WHERE queue = :queue)
       OR EXISTS (SELECT 1 FROM due_queues WHERE name = :queue)
       OR EXISTS (SELECT 1 FROM due_schedules WHERE queue = :queue)
       OR EXISTS (SELECT 1 FROM due_workers, json_each(due_workers.queues) AS q
                  WHERE q.key = :queue) AS found

-- name: task_in_use
-- Whether due knows a task by name without the app: a schedule starts it, a
-- worker serves (or served) it, or a job of it is stored (not pruned). The
-- jobs are read last, and only when the small tables do not name it: no index
-- serves a task's name.
SELECT EXISTS (SELECT 1 FROM due_schedules WHERE task = :task)
       OR EXISTS (SELECT 1 FROM due_workers, json_each(due_workers.tasks) AS t
                  WHERE t.value = :task)
       OR EXISTS (SELECT 1 FROM due_jobs WHERE task = :task) AS found

-- name: known_task_names
-- Every task name due knows without the app (see task_in_use), for the
-- closest to a name it does not know: read only on that error's way.
SELECT task AS name FROM due_schedules
UNION SELECT t.value FROM due_workers, json_each(due_workers.tasks) AS t
UNION SELECT task FROM due_jobs

-- name: ended_jobs
-- The jobs among these that have ended (what app.wait() waits for).
SELECT * FROM due_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('succeeded', 'failed', 'cancelled')

-- ------------------------------------------------------------------ figures

-- name: record_endings
-- Ends of attempts, counted in the transaction that records them (run for each
-- tally). One writer at a time: `writer` is always 0.
INSERT INTO due_job_stats (span, minute, task, queue, outcome, bucket, writer, count,
                           duration_sum)
VALUES ('minute', CAST(:now AS INTEGER) / 60 * 60, :task, :queue, :outcome, :bucket, 0, :count,
        :duration_sum)
ON CONFLICT (span, minute, task, queue, outcome, bucket, writer) DO UPDATE
SET count = count + excluded.count, duration_sum = duration_sum + excluded.duration_sum

-- name: fold_stats
-- Rows of one span older than `before` become rows of the next span (minutes
-- into hours, hours into `all`); drop_stats then deletes them.
INSERT INTO due_job_stats (span, minute, task, queue, outcome, bucket, writer, count,
                           duration_sum)
SELECT :into, CASE WHEN :into = 'hour' THEN CAST(minute AS INTEGER) / 3600 * 3600 ELSE 0 END,
       task, queue, outcome, bucket, 0, sum(count), sum(duration_sum)
FROM due_job_stats
WHERE span = :span AND minute < :before
GROUP BY 2, task, queue, outcome, bucket
ON CONFLICT (span, minute, task, queue, outcome, bucket, writer) DO UPDATE
SET count = count + excluded.count, duration_sum = duration_sum + excluded.duration_sum

-- name: drop_stats
DELETE FROM due_job_stats WHERE span = :span AND minute < :before

-- name: job_stats
-- Counts and duration sums per task, queue, outcome and duration bucket, in
-- each recent window (rows whose minute starts at or after `since_<window>`)
-- and in total, summed over writers and spans: a few hundred rows, however
-- busy the minutes and hours kept before folding were.
SELECT task, queue, outcome, bucket,
       sum(CASE WHEN minute >= :since_5m THEN count ELSE 0 END) AS count_5m,
       sum(CASE WHEN minute >= :since_5m THEN duration_sum ELSE 0 END) AS seconds_5m,
       sum(CASE WHEN minute >= :since_1h THEN count ELSE 0 END) AS count_1h,
       sum(CASE WHEN minute >= :since_1h THEN duration_sum ELSE 0 END) AS seconds_1h,
       sum(CASE WHEN minute >= :since_24h THEN count ELSE 0 END) AS count_24h,
       sum(CASE WHEN minute >= :since_24h THEN duration_sum ELSE 0 END) AS seconds_24h,
       sum(count) AS count_total, sum(duration_sum) AS seconds_total
FROM due_job_stats
GROUP BY task, queue, outcome, bucket

-- name: note_schedule_success
UPDATE due_schedules SET last_success_at = :now WHERE name = :name

-- name: recent_failures
-- Jobs that failed for good since `since`, per queue and task.
SELECT queue, task, count(*) AS failed, max(finished_at) AS last_failed_at
FROM due_jobs INDEXED BY due_jobs_failed
WHERE state = 'failed' AND finished_at >= :since
GROUP BY queue, task
ORDER BY queue, task

-- name: live_workers
-- Live workers (running or stopping, seen within `alive` seconds) per queue.
SELECT q.key AS queue, count(*) AS workers
FROM due_workers w, json_each(w.queues) AS q
WHERE w.state IN ('running', 'stopping') AND w.last_seen_at > :now - :alive
GROUP BY q.key

-- name: running_per_worker
SELECT worker, count(*) AS running
FROM due_jobs
WHERE state = 'running' AND lease_expires_at IS NOT NULL
GROUP BY worker

-- ------------------------------------------------------------- actions by hand

-- name: record_action
INSERT INTO due_actions (at, action, actor, job_id, schedule, queue)
VALUES (:now, :action, :actor, :job_id, :schedule, :queue)

-- name: list_actions
-- The newest first (the caller shows them oldest first).
SELECT at, action, actor, job_id, schedule, queue
FROM due_actions
WHERE (:job_id IS NULL OR job_id = :job_id)
  AND (:schedule IS NULL OR schedule = :schedule)
  AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit

-- name: prune_actions
DELETE FROM due_actions WHERE at < :now - :retention

-- name: prune_workers
-- Worker processes stopped or gone, and not seen for longer than the
-- retention. Without this, every process that ever started would stay
-- listed, and each deploy adds some. (One that comes back registers again.)
DELETE FROM due_workers
WHERE state IN ('stopped', 'gone') AND last_seen_at < :now - :retention

-- name: queue_throughput
-- Jobs that ended per queue and minute since `since` (from the rollups).
SELECT queue, minute, sum(count) AS ended
FROM due_job_stats
WHERE span = 'minute' AND minute >= :since
  AND outcome IN ('succeeded', 'warned', 'failed', 'cancelled')
GROUP BY queue, minute

-- Limits (store/limit_claims.py). Under BEGIN IMMEDIATE no other writer
-- runs: the counts a claim reads stay true until it commits, and no key is
-- ever held by another (PostgreSQL's statements skip the held ones).

-- name: limited_candidates
-- The best due jobs of the queue that count against a limit and do not wait
-- for one, as claim_jobs finds the others (their index holds only these);
-- `skip`: [name, key] pairs whose jobs to pass over, or NULL.
SELECT id, limits
FROM due_jobs INDEXED BY due_jobs_limited
WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
  AND limit_wait IS NULL
  AND queue = :queue
  AND run_at <= :now
  AND (:tasks IS NULL OR task IN (SELECT value FROM json_each(:tasks)))
  AND NOT EXISTS (SELECT 1 FROM due_queues WHERE name = :queue AND paused)
  AND (:skip IS NULL
       OR NOT EXISTS (SELECT 1 FROM json_each(:skip) AS s, json_each(due_jobs.limits) AS e
                      WHERE e.value ->> 0 = s.value ->> 0 AND e.value ->> 1 = s.value ->> 1))
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: ensure_limit_keys
INSERT INTO due_limit_keys (name, key)
SELECT value ->> 0, value ->> 1 FROM json_each(:keys) WHERE true
ON CONFLICT (name, key) DO NOTHING

-- name: lock_limit_keys
-- Nothing to lock: the write lock is held already. A key not stored yet is
-- not returned.
SELECT name, key, 1 AS locked FROM due_limit_keys
WHERE (name, key) IN (SELECT value ->> 0, value ->> 1 FROM json_each(:keys))

-- name: limit_key_states
-- Each key's numbers (the operator's when set), its log of starts, and how
-- many of its jobs run now: a limit's slots are its running jobs, whatever
-- claimed them, so a rescue or a release frees one by ending the run. The
-- running jobs are read once for all the keys, and summed with the keys' rows
-- by a GROUP BY (a join of the keys to their counts scanned the counts once
-- per key: 288 ms for 1,000 keys beside 1,000 running jobs, 12 ms so).
WITH wanted AS (SELECT value ->> 0 AS name, value ->> 1 AS key FROM json_each(:keys))
SELECT u.name, u.key, max(u.starts) AS starts, max(u.block_version) AS block_version,
       max(u.opens_s) AS opens_s, :now AS now_s,
       max(u.concurrency) AS concurrency, max(u.rate) AS rate, max(u.period) AS period,
       sum(u.running) AS running
FROM (
    SELECT k.name, k.key, k.starts, k.block_version, k.opens_at AS opens_s,
           CASE WHEN d.overridden THEN d.set_concurrency ELSE d.concurrency END AS concurrency,
           CASE WHEN d.overridden THEN d.set_rate ELSE d.rate END AS rate,
           CASE WHEN d.overridden THEN d.set_period ELSE d.period END AS period,
           0 AS running, 1 AS stored
    FROM due_limit_keys AS k LEFT JOIN due_limits AS d ON d.name = k.name
    WHERE (k.name, k.key) IN (SELECT name, key FROM wanted)
    UNION ALL
    SELECT e.value ->> 0, e.value ->> 1, NULL, NULL, NULL, NULL, NULL, NULL, 1, 0
    FROM due_jobs AS j INDEXED BY due_jobs_limited_running, json_each(j.limits) AS e
    WHERE j.state = 'running' AND j.limits IS NOT NULL
      AND (e.value ->> 0, e.value ->> 1) IN (SELECT name, key FROM wanted)
) AS u
GROUP BY u.name, u.key
HAVING max(u.stored) = 1

-- name: limit_keys_due
-- Keys with jobs waiting whose look is due (a rate's window opened, a claim
-- set a job waiting for a slot, the numbers changed), on from the last look.
SELECT k.name, k.key
FROM due_limit_keys AS k INDEXED BY due_limit_keys_waiting
WHERE k.waiting AND k.opens_at <= :now
  AND (k.name, k.key) > (:after_name, :after_key)
ORDER BY k.name, k.key
LIMIT :limit

-- name: limit_keys_waiting
-- Every key with jobs waiting (but those whose rate's window is still full),
-- on from the last look: the sweep.
SELECT k.name, k.key
FROM due_limit_keys AS k
WHERE k.waiting AND (k.opens_at IS NULL OR k.opens_at <= :now)
  AND (k.name, k.key) > (:after_name, :after_key)
ORDER BY k.name, k.key
LIMIT :limit

-- name: block_jobs
-- Jobs over a limit wait out of the claim indexes for what they wait for.
UPDATE due_jobs SET limit_wait = :name, limit_wait_key = :key
WHERE id = :id AND state = 'queued'

-- name: unblock_jobs
-- The best `count` jobs waiting for a key go back among the claimable ones.
UPDATE due_jobs SET limit_wait = NULL, limit_wait_key = NULL
WHERE id IN (SELECT id FROM due_jobs INDEXED BY due_jobs_limit_wait
             WHERE state = 'queued' AND limit_wait = :name AND limit_wait_key = :key
             ORDER BY priority DESC, run_at, id
             LIMIT :count)
RETURNING id

-- name: limit_pairs_ended
-- The keys the jobs just ended (`ids`) counted against, with how many slots
-- each end freed (a job running again, claimed anew since, frees none).
SELECT e.value ->> 0 AS name, e.value ->> 1 AS key, count(*) AS slots
FROM due_jobs AS j, json_each(j.limits) AS e
WHERE j.id IN (SELECT value FROM json_each(:ids)) AND j.limits IS NOT NULL
  AND j.state <> 'running'
GROUP BY 1, 2

-- name: unblock_freed
-- For one key a slot of which ended jobs freed, as many of its waiting jobs
-- (the best first) go back among the claimable ones (one row at a time).
UPDATE due_jobs SET limit_wait = NULL, limit_wait_key = NULL
WHERE id IN (SELECT id FROM due_jobs INDEXED BY due_jobs_limit_wait
             WHERE state = 'queued' AND limit_wait = :name AND limit_wait_key = :key
             ORDER BY priority DESC, run_at, id
             LIMIT :count)
RETURNING id

-- name: update_limit_keys
-- `opens_at`: when its waiting jobs are to be looked at again (NULL: leave it).
UPDATE due_limit_keys
SET starts = :starts,
    started_total = started_total + :started,
    waiting = waiting OR :blocked,
    block_version = block_version + :blocked,
    opens_at = coalesce(:opens_at, opens_at)
WHERE name = :name AND key = :key

-- name: limit_keys_reopened
-- After a look at keys (and the jobs let go of those with room): each still
-- waiting (and when to look again: its rate's opening, or NULL: when a job of
-- it ends), or none left (one key at a time).
UPDATE due_limit_keys
SET waiting = CASE WHEN :settled AND block_version = :block_version THEN 0 ELSE waiting END,
    opens_at = CASE WHEN :settled AND block_version = :block_version THEN NULL ELSE :opens_at END
WHERE name = :name AND key = :key

-- name: claim_given
-- The limited jobs a claim let start, as claim_jobs leases the others.
UPDATE due_jobs
SET state = 'running',
    attempt = attempt + 1,
    lease_token = lease_token + 1,
    lease_expires_at = :now + CASE WHEN :leases = '{}' THEN :lease ELSE coalesce(
        (SELECT value FROM json_each(:leases) WHERE key = due_jobs.task), :lease) END,
    started_at = coalesce(:started_s, :now),
    progress_at = NULL,
    worker = :worker,
    attempt_status = 'claimed'
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued'
RETURNING id, task, queue, priority, payload, attempt, max_attempts,
          lease_token, lease_expires_at, run_at, created_at, scheduled_for, checkpoint, parent_id,
          completes, pieces_total, workflow_id, schedule,
          -- the headers its earliest attempt kept (due/instrumentation.py): a retry's link
          CASE WHEN attempt > 1 THEN (
              SELECT json_extract(value, '$.headers') FROM json_each(iif(json_valid(errors), errors, '[]'))
              WHERE json_type(value, '$.headers') = 'object' ORDER BY key LIMIT 1)
          END AS first_attempt

-- name: limited_next_due
-- When the queue's next limited job that waits for no limit comes due, and
-- when the next rate window of a key that jobs wait for opens.
SELECT min(at) AS run_at FROM (
    -- Off the timers, a job is due already: any one of them says "now".
    SELECT (SELECT run_at FROM due_jobs INDEXED BY due_jobs_limited
            WHERE state = 'queued' AND NOT held AND NOT timer AND limits IS NOT NULL
              AND limit_wait IS NULL AND queue = :queue
            LIMIT 1) AS at
    UNION ALL
    SELECT (SELECT min(opens_at) FROM due_limit_keys INDEXED BY due_limit_keys_waiting
            WHERE waiting AND opens_at IS NOT NULL))
WHERE NOT EXISTS (SELECT 1 FROM due_queues WHERE name = :queue AND paused)

-- name: upsert_limit
-- The numbers in code; an operator's (set_*, while overridden) stay in force.
INSERT INTO due_limits (name, concurrency, rate, period, updated_at)
VALUES (:name, :concurrency, :rate, :period, :now)
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate, period = excluded.period,
    updated_at = CASE WHEN (concurrency, rate, period)
                           IS NOT (excluded.concurrency, excluded.rate, excluded.period)
                      THEN excluded.updated_at ELSE updated_at END

-- name: set_limit
UPDATE due_limits
SET set_concurrency = :concurrency, set_rate = :rate, set_period = :period, overridden = 1,
    updated_at = :now
WHERE name = :name
RETURNING name

-- name: reset_limit
UPDATE due_limits
SET set_concurrency = NULL, set_rate = NULL, set_period = NULL, overridden = 0,
    updated_at = :now
WHERE name = :name
RETURNING name

-- name: limit_overview
-- Every limit with its numbers in force, the jobs running against it, and
-- the jobs waiting for it (each count read to at most :limit).
SELECT d.name, d.concurrency AS code_concurrency, d.rate AS code_rate,
       d.period AS code_period, d.overridden, d.updated_at,
       CASE WHEN d.overridden THEN d.set_concurrency ELSE d.concurrency END AS concurrency,
       CASE WHEN d.overridden THEN d.set_rate ELSE d.rate END AS rate,
       CASE WHEN d.overridden THEN d.set_period ELSE d.period END AS period,
       (SELECT count(*) FROM due_jobs AS j INDEXED BY due_jobs_limited_running
        WHERE j.state = 'running' AND j.limits IS NOT NULL
          AND EXISTS (SELECT 1 FROM json_each(j.limits) AS e WHERE e.value ->> 0 = d.name))
           AS running,
       (SELECT count(*) FROM (SELECT 1 FROM due_jobs INDEXED BY due_jobs_limit_wait
                              WHERE state = 'queued' AND limit_wait = d.name
                              LIMIT :limit)) AS waiting,
       (SELECT coalesce(sum(started_total), 0) FROM due_limit_keys AS k WHERE k.name = d.name)
           AS started_total,
       (SELECT count(*) FROM due_limit_keys AS k WHERE k.name = d.name) AS keys,
       :now AS now_s
FROM due_limits AS d
ORDER BY d.name

-- name: limit_keys_of
-- The keys of one limit, busiest first: running, then waiting, at most :limit.
-- The running jobs are read once for all the keys, summed with the keys' rows
-- by a GROUP BY (as limit_key_states).
SELECT u.name, u.key, max(u.starts) AS starts, max(u.started_total) AS started_total,
       max(u.opens_s) AS opens_s, :now AS now_s, sum(u.running) AS running,
       (SELECT count(*) FROM (SELECT 1 FROM due_jobs INDEXED BY due_jobs_limit_wait
                              WHERE state = 'queued' AND limit_wait = u.name
                                AND limit_wait_key = u.key
                              LIMIT :count_limit)) AS waiting
FROM (
    SELECT k.name, k.key, k.starts, k.started_total, k.opens_at AS opens_s,
           0 AS running, 1 AS stored
    FROM due_limit_keys AS k
    WHERE k.name = :name
    UNION ALL
    SELECT e.value ->> 0, e.value ->> 1, NULL, NULL, NULL, 1, 0
    FROM due_jobs AS j INDEXED BY due_jobs_limited_running, json_each(j.limits) AS e
    WHERE j.state = 'running' AND j.limits IS NOT NULL AND e.value ->> 0 = :name
) AS u
GROUP BY u.name, u.key
HAVING max(u.stored) = 1
ORDER BY running DESC, waiting DESC, u.key
LIMIT :limit

-- name: limit_key_figures
-- One key of a limit (what a job waits for): the numbers in force, its
-- running jobs, its log of starts and its waiting jobs (read to :count_limit).
SELECT k.name, k.key, k.starts, k.started_total, :now AS now_s,
       CASE WHEN d.overridden THEN d.set_concurrency ELSE d.concurrency END AS concurrency,
       CASE WHEN d.overridden THEN d.set_rate ELSE d.rate END AS rate,
       CASE WHEN d.overridden THEN d.set_period ELSE d.period END AS period,
       (SELECT count(*) FROM due_jobs AS j INDEXED BY due_jobs_limited_running
        WHERE j.state = 'running' AND j.limits IS NOT NULL
          AND EXISTS (SELECT 1 FROM json_each(j.limits) AS e
                      WHERE e.value ->> 0 = k.name AND e.value ->> 1 = k.key)) AS running,
       (SELECT count(*) FROM (SELECT 1 FROM due_jobs INDEXED BY due_jobs_limit_wait
                              WHERE state = 'queued' AND limit_wait = k.name
                                AND limit_wait_key = k.key
                              LIMIT :count_limit)) AS waiting
FROM due_limit_keys AS k JOIN due_limits AS d ON d.name = k.name
WHERE k.name = :name AND k.key = :key

-- name: insert_workflow
INSERT INTO due_workflows (name, steps_total, created_at)
VALUES (:name, :total, :now)
RETURNING id

-- name: make_steps
-- A job just inserted becomes a workflow's step; with upstream steps it waits.
UPDATE due_jobs
SET workflow_id = :workflow,
    step_name = :name,
    upstream_pending = :pending,
    upstream_failed = :failed,
    on_upstream_failure = :policy,
    state = CASE WHEN :pending > 0 OR (:failed > 0 AND :policy = 'cancel') THEN 'waiting'
                 ELSE state END
WHERE id = :id

-- name: insert_edges
INSERT INTO due_workflow_edges (upstream_id, step_id) VALUES (:upstream, :step)

-- name: lock_dependents
-- (SQLite's single writer holds the whole database: nothing to lock.)
SELECT 1 WHERE 0

-- name: count_upstream_endings
-- An ended upstream step counted once on each of its waiting dependents (a
-- row at a time: SQLite's single writer runs them one after the other).
UPDATE due_jobs
SET upstream_pending = upstream_pending - 1,
    upstream_failed = upstream_failed + :bad
WHERE id IN (SELECT step_id FROM due_workflow_edges WHERE upstream_id = :id)
  AND state = 'waiting' AND upstream_pending > 0
RETURNING id, upstream_pending, upstream_failed, on_upstream_failure

-- name: release_steps
-- Steps whose upstream steps have all ended, due now.
UPDATE due_jobs SET state = 'queued', run_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'waiting' AND upstream_pending = 0
RETURNING id

-- name: cancel_steps
-- Steps an upstream step's failure cancels (on_upstream_failure = 'cancel').
UPDATE due_jobs
SET state = 'cancelled',
    finished_at = :now,
    dedupe_key = NULL,
    errors = json_insert(iif(json_valid(errors), errors, json_array(errors)), '$[#]', json_object(
        'attempt', attempt, 'kind', 'cancelled', 'error', :reason,
        'traceback', NULL, 'at', strftime('%Y-%m-%dT%H:%M:%f+00:00', :now, 'unixepoch')))
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'waiting'
RETURNING id, task, queue, schedule, state, parent_id, completes, pieces_total,
          cancel_requested, workflow_id

-- name: count_workflow_endings
-- An ended step counted on its workflow, which ends with its last step: failed
-- if a step failed, else cancelled if a step was, else succeeded.
UPDATE due_workflows
SET steps_ended = steps_ended + 1,
    steps_failed = steps_failed + (:state = 'failed'),
    steps_cancelled = steps_cancelled + (:state = 'cancelled'),
    state = CASE
        WHEN steps_ended + 1 < steps_total THEN state
        WHEN steps_failed + (:state = 'failed') > 0 THEN 'failed'
        WHEN steps_cancelled + (:state = 'cancelled') > 0 THEN 'cancelled'
        ELSE 'succeeded' END,
    finished_at = CASE WHEN steps_ended + 1 >= steps_total THEN :now END
WHERE id = :workflow

-- name: workflow
SELECT id, name, state, steps_total, steps_ended, steps_failed, steps_cancelled,
       created_at, finished_at
FROM due_workflows WHERE id = :id

-- name: workflow_steps
SELECT j.id, j.step_name, j.state, j.task, j.started_at, j.finished_at,
       (SELECT json_group_array(step_name) FROM (
            SELECT u.step_name FROM due_workflow_edges AS e JOIN due_jobs AS u ON u.id = e.upstream_id
            WHERE e.step_id = j.id ORDER BY u.step_name)) AS after
FROM due_jobs AS j
WHERE j.workflow_id = :id
ORDER BY j.id

-- name: recent_workflows
-- due workflows, the dashboard: the newest workflows first.
SELECT id, name, state, steps_total, steps_ended, steps_failed, steps_cancelled,
       created_at, finished_at
FROM due_workflows
ORDER BY id DESC
LIMIT :limit

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
LIMIT :limit

-- name: upstream_of
-- What a step's handler reads: each upstream step's name, state and result.
SELECT u.step_name, u.state, u.result
FROM due_workflow_edges AS e JOIN due_jobs AS u ON u.id = e.upstream_id
WHERE e.step_id = :id
ORDER BY u.step_name

-- name: lock_workflow_steps
-- (SQLite's single writer holds the whole database: nothing to lock.)
SELECT 1 WHERE 0

-- name: end_settled_workflow
-- A cancelled workflow with no step left to end ends now, its counts read from
-- its steps (they agree, unless broken by hand: a cancel mends them).
UPDATE due_workflows
SET steps_ended = c.ended, steps_failed = c.failed, steps_cancelled = c.cancelled,
    state = CASE WHEN c.failed > 0 THEN 'failed'
                 WHEN c.cancelled > 0 THEN 'cancelled'
                 ELSE 'succeeded' END,
    finished_at = :now
FROM (SELECT coalesce(sum(state IN ('succeeded', 'failed', 'cancelled')), 0) AS ended,
             coalesce(sum(state = 'failed'), 0) AS failed,
             coalesce(sum(state = 'cancelled'), 0) AS cancelled,
             coalesce(sum(state NOT IN ('succeeded', 'failed', 'cancelled')), 0) AS open
      FROM due_jobs WHERE workflow_id = :id) AS c
WHERE due_workflows.id = :id AND due_workflows.state = 'running' AND c.open = 0

-- name: lock_retried_steps
-- app.retry_workflow: every step that did not succeed.
SELECT id, state, pieces_total FROM due_jobs
WHERE workflow_id = :id AND state <> 'succeeded'
ORDER BY id

-- name: workflow_steps_present
-- A workflow's steps as counted, and those its table holds (fewer: pruned).
SELECT w.steps_total, (SELECT count(*) FROM due_jobs WHERE workflow_id = w.id) AS present
FROM due_workflows AS w
WHERE w.id = :id

-- name: cancel_workflow_steps
-- app.cancel_workflow: its queued and waiting steps end now.
UPDATE due_jobs
SET state = 'cancelled',
    finished_at = :now,
    dedupe_key = NULL,
    limit_wait = NULL,
    limit_wait_key = NULL,
    errors = json_insert(iif(json_valid(errors), errors, json_array(errors)), '$[#]', json_object(
        'attempt', attempt, 'kind', 'cancelled', 'error', :reason,
        'traceback', NULL, 'at', strftime('%Y-%m-%dT%H:%M:%f+00:00', :now, 'unixepoch')))
WHERE workflow_id = :id AND state IN ('queued', 'waiting')
RETURNING id, task, queue, schedule, state, parent_id, completes, pieces_total,
          cancel_requested, workflow_id

-- name: request_cancel_workflow_steps
UPDATE due_jobs SET cancel_requested = 1
WHERE workflow_id = :id AND state = 'running'
RETURNING id

-- name: retry_workflow_steps
-- app.retry_workflow: these failed or cancelled steps run again, with a fresh
-- set of attempts, once the steps they come after that are being retried too
-- (or have not ended) have ended.
WITH pending AS (
    SELECT r.value AS id,
           (SELECT count(*) FROM due_workflow_edges AS e JOIN due_jobs AS u ON u.id = e.upstream_id
            WHERE e.step_id = r.value AND u.state <> 'succeeded') AS n
    FROM json_each(:ids) AS r
)
UPDATE due_jobs
SET state = CASE WHEN pending.n > 0 THEN 'waiting' ELSE 'queued' END,
    upstream_pending = pending.n,
    upstream_failed = 0,
    run_at = :now,
    timer = 0,
    attempt = 0,
    lost_leases = 0,
    cancel_requested = 0,
    limit_wait = NULL,
    limit_wait_key = NULL,
    finished_at = NULL,
    lease_expires_at = NULL
FROM pending
WHERE due_jobs.id = pending.id AND due_jobs.state IN ('failed', 'cancelled')
RETURNING id, state

-- name: uncount_retried_steps
-- The steps still waiting for steps just retried no longer count those ends.
UPDATE due_jobs
SET upstream_pending = upstream_pending + hits.n,
    upstream_failed = max(0, upstream_failed - hits.n)
FROM (SELECT e.step_id, count(*) AS n
      FROM due_workflow_edges AS e
      WHERE e.upstream_id IN (SELECT value FROM json_each(:ids))
        AND e.step_id NOT IN (SELECT value FROM json_each(:ids))
      GROUP BY e.step_id) AS hits
WHERE due_jobs.id = hits.step_id AND due_jobs.state = 'waiting' AND due_jobs.upstream_pending > 0

-- name: retry_pieces
-- A retried step's pieces that did not succeed run again with it.
UPDATE due_jobs
SET state = 'queued',
    run_at = :now,
    timer = 0,
    attempt = 0,
    lost_leases = 0,
    cancel_requested = 0,
    limit_wait = NULL,
    limit_wait_key = NULL,
    finished_at = NULL,
    lease_expires_at = NULL
WHERE parent_id IN (SELECT value FROM json_each(:ids)) AND state IN ('failed', 'cancelled')
RETURNING id, pieces_total

-- name: recount_retried_parents
-- ... and their parents count as ended only the pieces that succeeded (or were
-- pruned, after they ended); those running still count themselves as they end.
UPDATE due_jobs
SET pieces_failed = 0,
    pieces_done = pieces_total - c.open,
    progress = json_object('done', pieces_total - c.open, 'total', pieces_total)
FROM (SELECT parent.value AS id,
             (SELECT count(*) FROM due_jobs AS k
              WHERE k.parent_id = parent.value AND k.state <> 'succeeded') AS open
      FROM json_each(:ids) AS parent) AS c
WHERE due_jobs.id = c.id

-- name: uncount_workflow
-- A retried workflow's counts without the ends of the steps retried; it runs.
UPDATE due_workflows
SET steps_ended = steps_ended - :ended,
    steps_failed = steps_failed - :failed,
    steps_cancelled = steps_cancelled - :cancelled,
    state = 'running',
    finished_at = NULL
WHERE id = :id

-- name: limit_keys_look_again
-- A limit's numbers changed (in this transaction): its waiting keys are looked
-- at again at the next claim, not when the old numbers would have let a start
-- through.
UPDATE due_limit_keys SET opens_at = :now
WHERE name = :name AND waiting
  AND EXISTS (SELECT 1 FROM due_limits WHERE name = :name AND updated_at = :now)

-- name: step_adder
-- A step adding steps to its workflow: which workflow.
SELECT workflow_id FROM due_jobs WHERE id = :id AND workflow_id IS NOT NULL

-- name: lock_named_steps
-- The step that adds and the steps named, with the adder's lease and cancel request.
SELECT id, step_name, state, lease_token, cancel_requested FROM due_jobs
WHERE (workflow_id = :workflow AND step_name IN (SELECT value FROM json_each(:names)))
   OR id = :adder
ORDER BY id

-- name: add_workflow_steps
UPDATE due_workflows SET steps_total = steps_total + :added,
    state = 'running', finished_at = NULL
WHERE id = :id
