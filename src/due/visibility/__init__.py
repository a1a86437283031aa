"""What is going on, read from the database, so every process on every host
tells the same truth.

- `snapshot.py`: one consistent read of the figures: queues (depth, due, the
  age of the oldest due job), tasks (outcomes and durations per window, from
  the rollups), schedules, workers, recent failures.
- `alerts.py`: the rules (thresholds per queue and schedule, with defaults)
  and the alerts a snapshot raises; what `due check` prints.
- `metrics.py`: the same figures for Prometheus (`due metrics`, the dashboard).
- `schedule_health.py`: a schedule's expected times against what became of
  each.
- `limits.py`: what a job waiting for a limit waits for, in words.
"""
