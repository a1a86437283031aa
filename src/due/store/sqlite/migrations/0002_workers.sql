-- Worker processes register themselves and report in with every heartbeat.
CREATE TABLE due_workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT NOT NULL,
    started_at   REAL NOT NULL,
    last_seen_at REAL NOT NULL,
    state        TEXT NOT NULL DEFAULT 'running'
        CHECK (state IN ('running', 'stopping', 'stopped', 'gone')),
    stopped_at   REAL
);
