-- Outcome counts and durations that survive pruning, and what visibility reads.

-- One row per span (minute, hour, or all time before), task, queue, outcome,
-- duration bucket and writer: every end of an attempt adds to it in the
-- transaction that records the end. `writer` is the writing session's backend
-- pid, so concurrent sessions never wait on one another's rows; the leader
-- folds minute rows into hours, and hours into `all`, before it prunes jobs.
CREATE TABLE due_job_stats (
    span         text             NOT NULL CHECK (span IN ('minute', 'hour', 'all')),
    minute       timestamptz      NOT NULL,
    task         text             NOT NULL,
    queue        text             NOT NULL,
    outcome      text             NOT NULL,
    bucket       integer          NOT NULL,
    writer       integer          NOT NULL,
    count        bigint           NOT NULL,
    duration_sum double precision NOT NULL,
    PRIMARY KEY (span, minute, task, queue, outcome, bucket, writer)
);

-- A job that succeeded but whose result failed its task's check= keeps why.
ALTER TABLE due_jobs ADD COLUMN warning text;

-- Queue figures read this index only (counts per queue and state, the oldest
-- due time), never the finished rows.
CREATE INDEX due_jobs_active ON due_jobs (queue, state, run_at)
    INCLUDE (attempt, held)
    WHERE state IN ('queued', 'running', 'waiting', 'failed');
-- Recently failed jobs (the alert on failures in the last window).
CREATE INDEX due_jobs_failed ON due_jobs (finished_at) WHERE state = 'failed';

-- A schedule's last success outlives the pruning of its jobs (the alert on a
-- nightly job that stopped succeeding weeks ago needs it).
ALTER TABLE due_schedules ADD COLUMN last_success_at timestamptz;
UPDATE due_schedules s SET last_success_at = (
    SELECT max(j.finished_at) FROM due_jobs j WHERE j.schedule = s.name AND j.state = 'succeeded');

-- The schedule's dead-man's switch: a run must start within `alert_after`
-- seconds of its time, and succeed within its period plus that. The count of
-- its missed times outlives the pruning of its history.
ALTER TABLE due_schedules ADD COLUMN alert_after double precision NOT NULL DEFAULT 300;
ALTER TABLE due_schedules ADD COLUMN missed_total bigint NOT NULL DEFAULT 0;
