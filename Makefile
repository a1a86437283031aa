# Every habit is one command. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SOAK_MINUTES ?= 30
SOAK_BACKEND ?= postgres

.DEFAULT_GOAL := help
.PHONY: help demo test test-newest-python test-django-previous test-bench test-sqlite chaos check docs bench soak postgres clean

help: ## list the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# Development and CI install the exact versions in constraints.txt; the package
# itself asks only for compatible ranges (pyproject.toml).
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[postgres-binary,redis,uvloop,web,otel]' --group dev
	@touch $(STAMP)

postgres: ## start PostgreSQL (and Redis, for the optional Redis lease) if down; faketime, promtool, chromium, pgbouncer
	@scripts/ensure-postgres
	@scripts/ensure-redis
	@scripts/ensure-faketime
	@scripts/ensure-promtool
	@scripts/ensure-chromium
	@scripts/ensure-pgbouncer

demo: $(STAMP) ## the example app, its worker and dashboard on SQLite (DEMO_ARGS=--once: stop at the end)
	cd examples && ../$(PY) demo.py $(DEMO_ARGS)

# Every stage runs even when one before it failed; the end says which failed.
test: $(STAMP) postgres ## run the whole test suite on SQLite and PostgreSQL (Django's on the newest Python)
	@scripts/run-stages \
	  "the tests, on two processes" '$(PY) -m pytest -n 2 -m "not serial and not bench and not fresh_install" --durations=10' \
	  "the how-to pages in new virtual environments" '$(PY) -m pytest -n 2 -m fresh_install' \
	  "the serial tests (the short chaos run)" '$(PY) -m pytest -m serial' \
	  "the Django tests, on the newest Python" 'scripts/test-django -m "not bench"'

# The Django integration's tests again on the previous Django release series.
DJANGO_PREVIOUS ?= 6.0.10
test-django-previous: postgres ## the Django tests on the previous Django series, 6.0 (make test runs them on 6.1)
	DJANGO=$(DJANGO_PREVIOUS) scripts/test-django -m "not bench"

test-bench: $(STAMP) postgres ## the benchmark harnesses, run small (make bench, make soak): do they still work?
	$(PY) -m pytest -n 2 -m bench
	scripts/test-django -m bench

test-newest-python: postgres ## the CLI and process tests on the newest CPython pyenv has
	scripts/test-newest-python

test-sqlite: $(STAMP) ## run the suite on SQLite only (no PostgreSQL needed)
	$(PY) -m pytest -k 'not postgres' -m 'not bench'

CHAOS_SECONDS ?= 300
CHAOS_RATE ?= 0.5
chaos: $(STAMP) postgres ## attack a real deployment on both stores (CHAOS_SECONDS, CHAOS_RATE)
	$(PY) -m tests.chaos.run --backend both --seconds $(CHAOS_SECONDS) --rate $(CHAOS_RATE)

check: $(STAMP) ## lint, type-check, forbid wall-clock reads outside clock.py and imports across layers
	$(PY) -m ruff check src tests bench examples docs/conf.py
	$(PY) -m ruff format --check src tests bench examples docs/conf.py
	$(PY) -m mypy
	$(PY) -m mypy --strict tests/typing
	@scripts/check-clock
	@$(PY) scripts/check-boundaries

# Strict: a warning, an unresolved cross-reference (-n) or a broken link fails the
# build; -E reads every page afresh, so a warning is never hidden by a cached page.
DOCS_BUILD ?= docs/_build
docs: $(STAMP) ## build the documentation site into docs/_build/html (any warning fails it)
	$(PY) -m sphinx -b html -W --keep-going -n -E -q docs $(DOCS_BUILD)/html
	@echo "built: $(DOCS_BUILD)/html/index.html"

bench: $(STAMP) postgres ## run the benchmark (due and its peers, side by side)
	$(PY) bench/run.py
	$(PY) bench/schedule_bench.py
	$(PY) bench/visibility_bench.py
	$(PY) bench/pooler_bench.py
	$(PY) bench/timers_bench.py
	$(PY) bench/backlog_bench.py
	$(PY) bench/thread_enqueue.py
	$(PY) bench/web_enqueue.py
	$(PY) bench/notify_cost.py
	$(PY) bench/costs.py
	$(PY) bench/sqlalchemy_bench.py
	$(PY) bench/tracing_bench.py
	$$(scripts/newest-venv)/bin/python bench/django_bench.py

soak: $(STAMP) postgres ## a steady 1,000 jobs/s for SOAK_MINUTES (30) on SOAK_BACKEND (postgres): does anything decay?
	$(PY) bench/soak.py --minutes $(SOAK_MINUTES) --backend $(SOAK_BACKEND)

clean: ## remove the environment and scratch files
	rm -rf $(VENV) .venv-newest docs/_build chaos-results bench/.venv* bench/results bench/work .pytest_cache .ruff_cache .mypy_cache
