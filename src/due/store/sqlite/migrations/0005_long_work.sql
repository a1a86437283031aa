-- Long-running work: checkpoints, progress, pieces under a parent, pauses.
ALTER TABLE due_jobs ADD COLUMN checkpoint TEXT;
ALTER TABLE due_jobs ADD COLUMN progress TEXT;
-- When the progress last moved (a running job whose progress is older than
-- stuck_after is stuck).
ALTER TABLE due_jobs ADD COLUMN progress_at REAL;
ALTER TABLE due_jobs ADD COLUMN stuck_after REAL;
-- Pieces: a child knows its parent, and its key among the pieces (its task and
-- arguments), so a retried parent that spawns it again adds nothing.
ALTER TABLE due_jobs ADD COLUMN parent_id INTEGER;
ALTER TABLE due_jobs ADD COLUMN piece_key TEXT;
-- A parent counts its pieces and says what comes after them.
ALTER TABLE due_jobs ADD COLUMN pieces_total INTEGER NOT NULL DEFAULT 0;
ALTER TABLE due_jobs ADD COLUMN pieces_done INTEGER NOT NULL DEFAULT 0;
ALTER TABLE due_jobs ADD COLUMN pieces_failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE due_jobs ADD COLUMN on_complete TEXT;
ALTER TABLE due_jobs ADD COLUMN on_piece_failure TEXT NOT NULL DEFAULT 'continue'
    CHECK (on_piece_failure IN ('continue', 'fail'));
-- A completion job names the parent it completes.
ALTER TABLE due_jobs ADD COLUMN completes INTEGER;
-- Held: a piece of a paused group; not claimable until resumed.
ALTER TABLE due_jobs ADD COLUMN held INTEGER NOT NULL DEFAULT 0;

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
    name       TEXT PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at REAL    NOT NULL
);
