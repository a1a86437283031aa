-- Worker processes register themselves and report in with every heartbeat.
CREATE TABLE due_workers (
    id           text PRIMARY KEY,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    queues       jsonb       NOT NULL,
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    state        text        NOT NULL DEFAULT 'running'
        CHECK (state IN ('running', 'stopping', 'stopped', 'gone')),
    stopped_at   timestamptz
);
