-- Who did what by hand (the dashboard's actions, and any App call given `by=`),
-- kept as long as the failed jobs are: a job's, a schedule's or a queue's history.
CREATE TABLE due_actions (
    id       INTEGER PRIMARY KEY,
    at       REAL NOT NULL,
    action   TEXT NOT NULL,
    actor    TEXT NOT NULL,
    job_id   INTEGER,
    schedule TEXT,
    queue    TEXT
);
CREATE INDEX due_actions_job ON due_actions (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX due_actions_schedule ON due_actions (schedule) WHERE schedule IS NOT NULL;
CREATE INDEX due_actions_queue ON due_actions (queue) WHERE queue IS NOT NULL;

-- The dashboard's search by key, on any number of jobs.
CREATE INDEX due_jobs_key ON due_jobs (key) WHERE key IS NOT NULL;
