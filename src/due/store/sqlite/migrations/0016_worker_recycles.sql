-- Worker processes that recycled themselves (--max-jobs-per-process,
-- --max-memory-per-process), counted by reason: a counter for Prometheus that
-- outlives the processes and their rows in due_workers (which are pruned).
CREATE TABLE due_worker_recycles (
    reason TEXT PRIMARY KEY,
    total  INTEGER NOT NULL
);
