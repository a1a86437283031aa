-- What each worker knows: the unknown-task reaper fails a job only when no live
-- worker serving its queue knows its task (not merely the worker that looks).
ALTER TABLE due_workers ADD COLUMN tasks TEXT NOT NULL DEFAULT '[]';
