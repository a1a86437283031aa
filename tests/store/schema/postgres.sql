-- columns: table, column, type, nullable, default
due_actions | id | bigint | NO | None
due_actions | at | timestamp with time zone | NO | None
due_actions | action | text | NO | None
due_actions | actor | text | NO | None
due_actions | job_id | bigint | YES | None
due_actions | schedule | text | YES | None
due_actions | queue | text | YES | None
due_job_stats | span | text | NO | None
due_job_stats | minute | timestamp with time zone | NO | None
due_job_stats | task | text | NO | None
due_job_stats | queue | text | NO | None
due_job_stats | outcome | text | NO | None
due_job_stats | bucket | integer | NO | None
due_job_stats | writer | integer | NO | None
due_job_stats | count | bigint | NO | None
due_job_stats | duration_sum | double precision | NO | None
due_jobs | id | bigint | NO | None
due_jobs | task | text | NO | None
due_jobs | queue | text | NO | None
due_jobs | priority | integer | NO | 0
due_jobs | state | text | NO | 'queued'::text
due_jobs | payload | jsonb | NO | None
due_jobs | run_at | timestamp with time zone | NO | None
due_jobs | attempt | integer | NO | 0
due_jobs | max_attempts | integer | NO | None
due_jobs | lease_token | bigint | NO | 0
due_jobs | lease_expires_at | timestamp with time zone | YES | None
due_jobs | worker | text | YES | None
due_jobs | lost_leases | integer | NO | 0
due_jobs | key | text | YES | None
due_jobs | dedupe_key | text | YES | None
due_jobs | unique_for | double precision | YES | None
due_jobs | created_at | timestamp with time zone | NO | None
due_jobs | started_at | timestamp with time zone | YES | None
due_jobs | finished_at | timestamp with time zone | YES | None
due_jobs | last_error | text | YES | None
due_jobs | errors | jsonb | NO | '[]'::jsonb
due_jobs | result | jsonb | YES | None
due_jobs | schedule | text | YES | None
due_jobs | scheduled_for | timestamp with time zone | YES | None
due_jobs | cancel_requested | boolean | NO | false
due_jobs | checkpoint | jsonb | YES | None
due_jobs | progress | jsonb | YES | None
due_jobs | progress_at | timestamp with time zone | YES | None
due_jobs | stuck_after | double precision | YES | None
due_jobs | parent_id | bigint | YES | None
due_jobs | piece_key | text | YES | None
due_jobs | pieces_total | integer | NO | 0
due_jobs | pieces_done | integer | NO | 0
due_jobs | pieces_failed | integer | NO | 0
due_jobs | on_complete | text | YES | None
due_jobs | on_piece_failure | text | NO | 'continue'::text
due_jobs | completes | bigint | YES | None
due_jobs | held | boolean | NO | false
due_jobs | warning | text | YES | None
due_jobs | timer | boolean | NO | false
due_jobs | attempt_status | text | NO | 'started'::text
due_jobs | limits | jsonb | YES | None
due_jobs | limit_wait | text | YES | None
due_jobs | limit_wait_key | text | YES | None
due_jobs | workflow_id | bigint | YES | None
due_jobs | step_name | text | YES | None
due_jobs | upstream_pending | integer | NO | 0
due_jobs | upstream_failed | integer | NO | 0
due_jobs | on_upstream_failure | text | YES | None
due_leases | name | text | NO | None
due_leases | holder | text | NO | None
due_leases | token | bigint | NO | None
due_leases | expires_at | timestamp with time zone | NO | None
due_limit_keys | name | text | NO | None
due_limit_keys | key | text | NO | None
due_limit_keys | starts | jsonb | NO | '[]'::jsonb
due_limit_keys | started_total | bigint | NO | 0
due_limit_keys | waiting | boolean | NO | false
due_limit_keys | block_version | bigint | NO | 0
due_limit_keys | opens_at | timestamp with time zone | YES | None
due_limits | name | text | NO | None
due_limits | concurrency | integer | YES | None
due_limits | rate | integer | YES | None
due_limits | period | double precision | YES | None
due_limits | set_concurrency | integer | YES | None
due_limits | set_rate | integer | YES | None
due_limits | set_period | double precision | YES | None
due_limits | overridden | boolean | NO | false
due_limits | updated_at | timestamp with time zone | NO | None
due_queues | name | text | NO | None
due_queues | paused | boolean | NO | false
due_queues | updated_at | timestamp with time zone | NO | None
due_schedule_runs | schedule | text | NO | None
due_schedule_runs | scheduled_for | timestamp with time zone | NO | None
due_schedule_runs | outcome | text | NO | None
due_schedule_runs | reason | text | YES | None
due_schedule_runs | job_id | bigint | YES | None
due_schedule_runs | recorded_at | timestamp with time zone | NO | None
due_schedules | name | text | NO | None
due_schedules | task | text | NO | None
due_schedules | cron | text | YES | None
due_schedules | every | double precision | YES | None
due_schedules | tz | text | NO | None
due_schedules | payload | jsonb | NO | None
due_schedules | queue | text | NO | None
due_schedules | priority | integer | NO | None
due_schedules | max_attempts | integer | NO | None
due_schedules | misfire | text | NO | None
due_schedules | overlap | text | NO | None
due_schedules | catch_up_limit | integer | NO | None
due_schedules | misfire_grace | double precision | NO | None
due_schedules | source | text | NO | None
due_schedules | enabled | boolean | NO | None
due_schedules | paused | boolean | NO | false
due_schedules | fingerprint | text | NO | None
due_schedules | next_fire_at | timestamp with time zone | NO | None
due_schedules | created_at | timestamp with time zone | NO | None
due_schedules | updated_at | timestamp with time zone | NO | None
due_schedules | last_success_at | timestamp with time zone | YES | None
due_schedules | alert_after | double precision | NO | 300
due_schedules | missed_total | bigint | NO | 0
due_schedules | problem | text | YES | None
due_schedules | limits | text | YES | None
due_schema_migrations | version | integer | NO | None
due_schema_migrations | name | text | NO | None
due_schema_migrations | applied_at | timestamp with time zone | NO | now()
due_worker_recycles | reason | text | NO | None
due_worker_recycles | total | bigint | NO | None
due_workers | id | text | NO | None
due_workers | host | text | NO | None
due_workers | pid | integer | NO | None
due_workers | queues | jsonb | NO | None
due_workers | started_at | timestamp with time zone | NO | None
due_workers | last_seen_at | timestamp with time zone | NO | None
due_workers | state | text | NO | 'running'::text
due_workers | stopped_at | timestamp with time zone | YES | None
due_workers | tasks | jsonb | NO | '[]'::jsonb
due_workflow_edges | upstream_id | bigint | NO | None
due_workflow_edges | step_id | bigint | NO | None
due_workflows | id | bigint | NO | nextval('due_workflows_id_seq'::regclass)
due_workflows | name | text | NO | None
due_workflows | state | text | NO | 'running'::text
due_workflows | steps_total | integer | NO | 0
due_workflows | steps_ended | integer | NO | 0
due_workflows | steps_failed | integer | NO | 0
due_workflows | steps_cancelled | integer | NO | 0
due_workflows | created_at | timestamp with time zone | NO | None
due_workflows | finished_at | timestamp with time zone | YES | None

-- constraints
due_actions | due_actions_pkey | PRIMARY KEY (id)
due_job_stats | due_job_stats_pkey | PRIMARY KEY (span, minute, task, queue, outcome, bucket, writer)
due_job_stats | due_job_stats_span_check | CHECK ((span = ANY (ARRAY['minute'::text, 'hour'::text, 'all'::text])))
due_jobs | due_jobs_attempt_status_check | CHECK ((attempt_status = ANY (ARRAY['claimed'::text, 'started'::text, 'handed_back'::text])))
due_jobs | due_jobs_on_piece_failure_check | CHECK ((on_piece_failure = ANY (ARRAY['continue'::text, 'fail'::text])))
due_jobs | due_jobs_on_upstream_failure_check | CHECK ((on_upstream_failure = ANY (ARRAY['cancel'::text, 'run'::text])))
due_jobs | due_jobs_pkey | PRIMARY KEY (id)
due_jobs | due_jobs_state_check | CHECK ((state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))
due_leases | due_leases_pkey | PRIMARY KEY (name)
due_limit_keys | due_limit_keys_pkey | PRIMARY KEY (name, key)
due_limits | due_limits_concurrency_check | CHECK ((concurrency > 0))
due_limits | due_limits_period_check | CHECK ((period > (0)::double precision))
due_limits | due_limits_pkey | PRIMARY KEY (name)
due_limits | due_limits_rate_check | CHECK ((rate > 0))
due_limits | due_limits_set_concurrency_check | CHECK ((set_concurrency > 0))
due_limits | due_limits_set_period_check | CHECK ((set_period > (0)::double precision))
due_limits | due_limits_set_rate_check | CHECK ((set_rate > 0))
due_queues | due_queues_pkey | PRIMARY KEY (name)
due_schedule_runs | due_schedule_runs_outcome_check | CHECK ((outcome = ANY (ARRAY['enqueued'::text, 'pending'::text, 'skipped'::text, 'missed'::text])))
due_schedule_runs | due_schedule_runs_pkey | PRIMARY KEY (schedule, scheduled_for)
due_schedules | due_schedules_check | CHECK (((cron IS NULL) <> (every IS NULL)))
due_schedules | due_schedules_misfire_check | CHECK ((misfire = ANY (ARRAY['skip'::text, 'catch_up'::text, 'latest'::text])))
due_schedules | due_schedules_overlap_check | CHECK ((overlap = ANY (ARRAY['allow'::text, 'forbid'::text, 'queue'::text, 'replace'::text])))
due_schedules | due_schedules_pkey | PRIMARY KEY (name)
due_schedules | due_schedules_source_check | CHECK ((source = ANY (ARRAY['code'::text, 'runtime'::text])))
due_schema_migrations | due_schema_migrations_pkey | PRIMARY KEY (version)
due_worker_recycles | due_worker_recycles_pkey | PRIMARY KEY (reason)
due_workers | due_workers_pkey | PRIMARY KEY (id)
due_workers | due_workers_state_check | CHECK ((state = ANY (ARRAY['running'::text, 'stopping'::text, 'stopped'::text, 'gone'::text])))
due_workflow_edges | due_workflow_edges_pkey | PRIMARY KEY (upstream_id, step_id)
due_workflows | due_workflows_pkey | PRIMARY KEY (id)
due_workflows | due_workflows_state_check | CHECK ((state = ANY (ARRAY['running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))

-- indexes
due_actions | due_actions_job | CREATE INDEX due_actions_job ON due_actions USING btree (job_id) WHERE (job_id IS NOT NULL)
due_actions | due_actions_pkey | CREATE UNIQUE INDEX due_actions_pkey ON due_actions USING btree (id)
due_actions | due_actions_queue | CREATE INDEX due_actions_queue ON due_actions USING btree (queue) WHERE (queue IS NOT NULL)
due_actions | due_actions_schedule | CREATE INDEX due_actions_schedule ON due_actions USING btree (schedule) WHERE (schedule IS NOT NULL)
due_job_stats | due_job_stats_pkey | CREATE UNIQUE INDEX due_job_stats_pkey ON due_job_stats USING btree (span, minute, task, queue, outcome, bucket, writer)
due_jobs | due_jobs_backlog | CREATE INDEX due_jobs_backlog ON due_jobs USING btree (queue, state, run_at) INCLUDE (attempt, held) WHERE (state = ANY (ARRAY['queued'::text, 'waiting'::text, 'failed'::text]))
due_jobs | due_jobs_children | CREATE INDEX due_jobs_children ON due_jobs USING btree (parent_id) WHERE ((parent_id IS NOT NULL) AND (state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text])))
due_jobs | due_jobs_claim | CREATE INDEX due_jobs_claim ON due_jobs USING btree (queue, priority DESC, run_at, id) WHERE ((state = 'queued'::text) AND (NOT held) AND (NOT timer) AND (limits IS NULL))
due_jobs | due_jobs_completes | CREATE INDEX due_jobs_completes ON due_jobs USING btree (completes) WHERE (completes IS NOT NULL)
due_jobs | due_jobs_dedupe_key | CREATE UNIQUE INDEX due_jobs_dedupe_key ON due_jobs USING btree (dedupe_key) WHERE (dedupe_key IS NOT NULL)
due_jobs | due_jobs_failed | CREATE INDEX due_jobs_failed ON due_jobs USING btree (finished_at) WHERE (state = 'failed'::text)
due_jobs | due_jobs_key | CREATE INDEX due_jobs_key ON due_jobs USING btree (key) WHERE (key IS NOT NULL)
due_jobs | due_jobs_limit_wait | CREATE INDEX due_jobs_limit_wait ON due_jobs USING btree (limit_wait, limit_wait_key, priority DESC, run_at, id) WHERE ((state = 'queued'::text) AND (limit_wait IS NOT NULL))
due_jobs | due_jobs_limited | CREATE INDEX due_jobs_limited ON due_jobs USING btree (queue, priority DESC, run_at, id) WHERE ((state = 'queued'::text) AND (NOT held) AND (NOT timer) AND (limits IS NOT NULL) AND (limit_wait IS NULL))
due_jobs | due_jobs_limited_queue | CREATE INDEX due_jobs_limited_queue ON due_jobs USING btree (queue, run_at) WHERE ((state = 'queued'::text) AND (NOT held) AND (NOT timer) AND (limits IS NOT NULL))
due_jobs | due_jobs_limited_running | CREATE INDEX due_jobs_limited_running ON due_jobs USING btree (id) WHERE ((state = 'running'::text) AND (limits IS NOT NULL))
due_jobs | due_jobs_piece | CREATE UNIQUE INDEX due_jobs_piece ON due_jobs USING btree (parent_id, piece_key) WHERE (parent_id IS NOT NULL)
due_jobs | due_jobs_pkey | CREATE UNIQUE INDEX due_jobs_pkey ON due_jobs USING btree (id)
due_jobs | due_jobs_retrying | CREATE INDEX due_jobs_retrying ON due_jobs USING btree (queue) WHERE ((state = 'queued'::text) AND (attempt > 0))
due_jobs | due_jobs_running | CREATE INDEX due_jobs_running ON due_jobs USING btree (id) WHERE (state = 'running'::text)
due_jobs | due_jobs_schedule_active | CREATE INDEX due_jobs_schedule_active ON due_jobs USING btree (schedule) WHERE ((schedule IS NOT NULL) AND (state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text])))
due_jobs | due_jobs_schedule_run | CREATE UNIQUE INDEX due_jobs_schedule_run ON due_jobs USING btree (schedule, scheduled_for) WHERE (schedule IS NOT NULL)
due_jobs | due_jobs_step | CREATE UNIQUE INDEX due_jobs_step ON due_jobs USING btree (workflow_id, step_name) WHERE (workflow_id IS NOT NULL)
due_jobs | due_jobs_stopped | CREATE INDEX due_jobs_stopped ON due_jobs USING btree (state, id) WHERE (state = ANY (ARRAY['waiting'::text, 'failed'::text]))
due_jobs | due_jobs_timers | CREATE INDEX due_jobs_timers ON due_jobs USING btree (queue, run_at, id) WHERE ((state = 'queued'::text) AND timer)
due_leases | due_leases_pkey | CREATE UNIQUE INDEX due_leases_pkey ON due_leases USING btree (name)
due_limit_keys | due_limit_keys_pkey | CREATE UNIQUE INDEX due_limit_keys_pkey ON due_limit_keys USING btree (name, key)
due_limit_keys | due_limit_keys_waiting | CREATE INDEX due_limit_keys_waiting ON due_limit_keys USING btree (opens_at) WHERE waiting
due_limits | due_limits_pkey | CREATE UNIQUE INDEX due_limits_pkey ON due_limits USING btree (name)
due_queues | due_queues_pkey | CREATE UNIQUE INDEX due_queues_pkey ON due_queues USING btree (name)
due_schedule_runs | due_schedule_runs_pending | CREATE INDEX due_schedule_runs_pending ON due_schedule_runs USING btree (schedule) WHERE (outcome = 'pending'::text)
due_schedule_runs | due_schedule_runs_pkey | CREATE UNIQUE INDEX due_schedule_runs_pkey ON due_schedule_runs USING btree (schedule, scheduled_for)
due_schedules | due_schedules_next | CREATE INDEX due_schedules_next ON due_schedules USING btree (next_fire_at) WHERE enabled
due_schedules | due_schedules_pkey | CREATE UNIQUE INDEX due_schedules_pkey ON due_schedules USING btree (name)
due_schema_migrations | due_schema_migrations_pkey | CREATE UNIQUE INDEX due_schema_migrations_pkey ON due_schema_migrations USING btree (version)
due_worker_recycles | due_worker_recycles_pkey | CREATE UNIQUE INDEX due_worker_recycles_pkey ON due_worker_recycles USING btree (reason)
due_workers | due_workers_pkey | CREATE UNIQUE INDEX due_workers_pkey ON due_workers USING btree (id)
due_workflow_edges | due_workflow_edges_pkey | CREATE UNIQUE INDEX due_workflow_edges_pkey ON due_workflow_edges USING btree (upstream_id, step_id)
due_workflow_edges | due_workflow_edges_step | CREATE INDEX due_workflow_edges_step ON due_workflow_edges USING btree (step_id)
due_workflows | due_workflows_pkey | CREATE UNIQUE INDEX due_workflows_pkey ON due_workflows USING btree (id)
