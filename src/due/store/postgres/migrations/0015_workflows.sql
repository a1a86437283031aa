-- Workflows: jobs that wait for other jobs. A workflow is a set of steps, each
-- an ordinary job with edges to the steps it comes after (its upstream steps).
-- A step whose upstream steps have not all ended is `waiting` with
-- `upstream_pending` > 0: out of every claim index. The transaction that
-- records the end of its last upstream step releases it (queued) or, by its
-- policy, cancels it: exactly once, as the step's row lock serialises the
-- ends that count on it.
CREATE TABLE due_workflows (
    id              bigserial PRIMARY KEY,
    name            text    NOT NULL,
    state           text    NOT NULL DEFAULT 'running'
                    CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    steps_total     integer NOT NULL DEFAULT 0,
    steps_ended     integer NOT NULL DEFAULT 0,
    steps_failed    integer NOT NULL DEFAULT 0,
    steps_cancelled integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz
);
ALTER TABLE due_jobs ADD COLUMN workflow_id bigint;
ALTER TABLE due_jobs ADD COLUMN step_name text;
-- Upstream steps not ended yet, and those that ended other than succeeded.
ALTER TABLE due_jobs ADD COLUMN upstream_pending integer NOT NULL DEFAULT 0;
ALTER TABLE due_jobs ADD COLUMN upstream_failed integer NOT NULL DEFAULT 0;
-- 'cancel' (a failed or cancelled upstream step cancels this one) or 'run'.
ALTER TABLE due_jobs ADD COLUMN on_upstream_failure text
    CHECK (on_upstream_failure IN ('cancel', 'run'));
CREATE UNIQUE INDEX due_jobs_step ON due_jobs (workflow_id, step_name)
    WHERE workflow_id IS NOT NULL;
-- Each edge: `step_id` comes after `upstream_id`. Read by upstream (whom an
-- end releases) and by step (what a step's handler reads as ctx.upstream).
CREATE TABLE due_workflow_edges (
    upstream_id bigint NOT NULL,
    step_id     bigint NOT NULL,
    PRIMARY KEY (upstream_id, step_id)
);
CREATE INDEX due_workflow_edges_step ON due_workflow_edges (step_id);
