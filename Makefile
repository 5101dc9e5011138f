# Plant Store task runner. `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PORT ?= 8000
PYTEST_ARGS ?=
# The browser tests drive Debian's Chromium; Playwright never downloads a browser of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

.DEFAULT_GOAL := help
.PHONY: help run serve bench test lint format test-sqlite test-postgres test-contract system-packages clean schema

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(VENV)/.runtime: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.dev: requirements.txt requirements-dev.txt | $(VENV)/.runtime
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

run: $(VENV)/.runtime ## set up .venv, migrate, and serve on 127.0.0.1:$PORT (default 8000) with SQLite
	DJANGO_DEBUG=1 $(PYTHON) manage.py migrate --no-input
	@echo
	@echo "  Issue an API token:   DJANGO_DEBUG=1 $(PYTHON) manage.py token issue my-client"
	@echo "  Create an admin user: DJANGO_DEBUG=1 $(PYTHON) manage.py createsuperuser"
	@echo "  Then: curl -H 'Authorization: Bearer <token>' -H 'Content-Type: application/json' \\"
	@echo "          -d '{\"id\": 1, \"name\": \"Monstera\"}' http://127.0.0.1:$(PORT)/plants"
	@echo
	DJANGO_DEBUG=1 $(PYTHON) manage.py runserver 127.0.0.1:$(PORT)

serve: $(VENV)/.runtime ## production path: migrate, collectstatic, gunicorn (needs DJANGO_SECRET_KEY; DATABASE_URL)
	$(PYTHON) manage.py migrate --no-input
	$(PYTHON) manage.py collectstatic --no-input -v 0
	$(VENV)/bin/gunicorn -c gunicorn.conf.py plantstore_site.wsgi

test: lint test-contract test-sqlite test-postgres ## lint, fuzz the contract, then the suite on SQLite and PostgreSQL

system-packages: ## install the Debian packages the tests need, if missing (PostgreSQL, Redis, Chromium)
	scripts/debian-packages postgresql redis-server chromium

lint: $(VENV)/.dev ## ruff lint and format check, and no model change without a migration
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DJANGO_DEBUG=1 $(PYTHON) manage.py makemigrations --check --dry-run

format: $(VENV)/.dev ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test-sqlite: $(VENV)/.dev system-packages ## the test suite on SQLite (the embedded default)
	env -u DATABASE_URL $(VENV)/bin/pytest $(PYTEST_ARGS)

test-postgres: $(VENV)/.dev system-packages ## the test suite on a throwaway PostgreSQL server (scripts/with-postgres)
	scripts/with-postgres $(VENV)/bin/pytest $(PYTEST_ARGS)

test-contract: $(VENV)/.dev system-packages ## schemathesis against a live gunicorn on a throwaway PostgreSQL, using /openapi.json
	scripts/with-postgres scripts/contract-test

bench: $(VENV)/.dev ## benchmark POST /plants against a bare Django view (wrk, PostgreSQL) and the rate-limit stores; writes BENCHMARKS.md
	scripts/debian-packages postgresql wrk redis-server
	PG_TCP_PORT=$${PG_TCP_PORT:-55432} PG_EXTRA_CONF="shared_preload_libraries = 'pg_stat_statements'" \
		scripts/with-postgres $(PYTHON) -m bench.run

clean: ## remove the venv, caches, test artefacts and the local SQLite database
	rm -rf $(VENV) .pytest_cache .ruff_cache test-artifacts staticfiles db.sqlite3
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

schema: $(VENV)/.dev ## regenerate openapi.yaml from the views and serializers (review the diff)
	DJANGO_DEBUG=1 $(PYTHON) manage.py spectacular --validate --fail-on-warn --file openapi.yaml
