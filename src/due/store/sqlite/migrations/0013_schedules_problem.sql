-- Why a schedule cannot fire (its cron expression has no time, its interval
-- outgrows the horizon, its row cannot be read), as the scheduler that found
-- it wrote it; NULL when it can. A schedule with a problem is not fired, and
-- `due check` reports it, until its definition is written again.
ALTER TABLE due_schedules ADD COLUMN problem TEXT;
