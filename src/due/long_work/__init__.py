"""Long work: jobs that run for hours, resume where they stopped, and split
into pieces tracked by a parent.

- `context.py`: `due.Context`, what a handler holds of its own attempt:
  checkpoints (a durable cursor, fenced by the lease), progress (carried by
  heartbeats), cancellation's safe points, `spawn` (pieces under this job),
  and `transaction()` (the job's own transaction, which records its success).
- `pieces.py`: pieces as requests: validated, and known by their task and
  arguments, so spawning an item twice adds it once.

The database side is the store's (`store/long_work.py`: checkpoints, spawn,
batches, the job's transaction; `store/pieces.py`: how a parent settles when
its pieces end), written once for both backends.
"""
