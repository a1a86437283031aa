-- Long-running work: checkpoints, progress, pieces under a parent, pauses.
ALTER TABLE due_jobs
    ADD COLUMN checkpoint     jsonb,
    ADD COLUMN progress       jsonb,
    -- When the progress last moved (a running job whose progress is older than
    -- stuck_after is stuck).
    ADD COLUMN progress_at    timestamptz,
    ADD COLUMN stuck_after    double precision,
    -- Pieces: a child knows its parent, and its key among the pieces (its task
    -- and arguments), so a retried parent that spawns it again adds nothing.
    ADD COLUMN parent_id      bigint,
    ADD COLUMN piece_key      text,
    -- A parent counts its pieces and says what comes after them.
    ADD COLUMN pieces_total   integer NOT NULL DEFAULT 0,
    ADD COLUMN pieces_done    integer NOT NULL DEFAULT 0,
    ADD COLUMN pieces_failed  integer NOT NULL DEFAULT 0,
    ADD COLUMN on_complete    text,
    ADD COLUMN on_piece_failure text NOT NULL DEFAULT 'continue'
        CHECK (on_piece_failure IN ('continue', 'fail')),
    -- A completion job names the parent it completes.
    ADD COLUMN completes      bigint,
    -- Held: a piece of a paused group; not claimable until resumed.
    ADD COLUMN held           boolean NOT NULL DEFAULT false;

CREATE UNIQUE INDEX due_jobs_piece ON due_jobs (parent_id, piece_key) WHERE parent_id IS NOT NULL;
CREATE INDEX due_jobs_completes ON due_jobs (completes) WHERE completes IS NOT NULL;
CREATE INDEX due_jobs_children ON due_jobs (parent_id)
    WHERE parent_id IS NOT NULL AND state IN ('queued', 'running', 'waiting');

-- Claims skip held pieces without looking at them.
DROP INDEX due_jobs_claim;
CREATE INDEX due_jobs_claim ON due_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued' AND NOT held;

-- Queues with a state of their own (paused, for now).
CREATE TABLE due_queues (
    name       text PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL
);
