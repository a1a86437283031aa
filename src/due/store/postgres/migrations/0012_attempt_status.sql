-- Only a start that ran is an attempt. A claim counts an attempt before its
-- worker has the job in hand: when the claim's reply is lost (the connection
-- broke after the commit), or the worker dies before the handler begins, the
-- attempt was spent on nothing, and a job with one attempt left was failed as
-- if it had run. The claim now marks its attempt 'claimed'; the worker's
-- heartbeat reports it 'started' once the handler has begun; a worker that
-- stops while a handler thread it cannot interrupt still runs hands the job
-- back 'handed_back' (due once its lease has expired, not before). The rescue
-- of an expired lease counts the attempt only when it was 'started'.
-- A constant default: no rewrite of the table; jobs running during the
-- upgrade count as started, as before.
ALTER TABLE due_jobs ADD COLUMN attempt_status text NOT NULL DEFAULT 'started'
    CHECK (attempt_status IN ('claimed', 'started', 'handed_back'));
