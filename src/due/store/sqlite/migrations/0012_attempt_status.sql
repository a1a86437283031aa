-- Only a start that ran is an attempt: the claim marks its attempt 'claimed',
-- the worker's heartbeat reports it 'started', a worker stopping while a
-- handler thread still runs hands it back 'handed_back'; the rescue counts the
-- attempt only when it was 'started' (PostgreSQL's migration says more). Jobs
-- running during the upgrade count as started, as before.
ALTER TABLE due_jobs ADD COLUMN attempt_status TEXT NOT NULL DEFAULT 'started'
    CHECK (attempt_status IN ('claimed', 'started', 'handed_back'));
