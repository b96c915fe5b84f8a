# agentplatform — every target creates the virtual environment on first use.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: help demo test serve dev chat worker beat bench lint clean

# `make chat USER=acme-approver1`: USER given on the command line wins over the login name in the
# environment (USER_NAME=... works too); the default is the demo requester.
CHAT_USER := $(if $(filter command line,$(origin USER)),$(USER),$(or $(USER_NAME),acme-requester))

help:  ## this list of targets
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-z][a-z-]*:.*## / {printf "  make %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): requirements.txt
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) (set PY=python3 to use another)"; exit 1; }
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	touch $(STAMP)

# Tests and benchmarks add requirements-dev.txt (pytest, schemathesis, Playwright, httpx, ...).
$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $(DEV_STAMP)

demo: $(STAMP)  ## install, migrate, seed and play the governed story on SQLite + offline model (ARGS=--reset undoes admin changes)
	$(BIN)/python manage.py demo $(ARGS)

test: $(DEV_STAMP)  ## the whole suite (PostgreSQL/Redis/worker/browser tests skip with a reason when absent)
	$(BIN)/python -m pytest -q -rs

serve: $(STAMP)  ## production server: gunicorn + uvicorn workers on http://127.0.0.1:8000 (PORT=8765 for another; links in emails follow it; gunicorn.conf.py)
	$(BIN)/gunicorn agentplatform.asgi:application --config gunicorn.conf.py $(if $(PORT),--bind 127.0.0.1:$(PORT))

dev: $(STAMP)  ## Django's development server with autoreload on http://127.0.0.1:8000 (PORT=8765 for another; links in emails follow it)
	PLATFORM_BASE_URL="$${PLATFORM_BASE_URL:-http://127.0.0.1:$(or $(PORT),8000)}" $(BIN)/python manage.py runserver 127.0.0.1:$(or $(PORT),8000)

chat: $(STAMP)  ## talk to the agent in the terminal: make chat USER=acme-requester
	$(BIN)/python manage.py chat --user $(CHAT_USER)

worker: $(STAMP)  ## a Celery worker (needs CELERY_BROKER_URL=redis://...; see docs/operations.md)
	@test -n "$$CELERY_BROKER_URL" || { echo "set CELERY_BROKER_URL, e.g. redis://127.0.0.1:6379/0 (without it tasks run eagerly in the web process)"; exit 1; }
	$(BIN)/celery -A agentplatform worker -l info --pool prefork --concurrency $(or $(CONCURRENCY),4)

beat: $(STAMP)  ## the Celery beat scheduler: expiry, recovery, pruning (schedule: CELERY_BEAT_SCHEDULE in settings)
	@test -n "$$CELERY_BROKER_URL" || { echo "set CELERY_BROKER_URL, e.g. redis://127.0.0.1:6379/0"; exit 1; }
	$(BIN)/celery -A agentplatform beat -l info --schedule $(VENV)/celerybeat-schedule

bench: $(DEV_STAMP)  ## benchmarks on PostgreSQL (needs DATABASE_URL=postgres://...)
	$(BIN)/python bench/run_all.py

lint: $(DEV_STAMP)  ## ruff (ruff.toml) and the import layers and no-circle contracts (.importlinter)
	$(BIN)/ruff check .
	PYTHONPATH=. $(BIN)/lint-imports

clean:  ## remove the virtual environment, the SQLite database and test artifacts
	rm -rf $(VENV) db.sqlite3 test-artifacts
