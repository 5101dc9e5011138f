"""Start-up configuration: a misconfigured deployment refuses to start and says what to set."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from tests.live import request

ROOT = Path(__file__).resolve().parent.parent
# A key check --deploy accepts: 50 characters or more, of more than 5 kinds, without Django's insecure prefix.
SECRET_KEY = "settings-test-secret-key-" + "0123456789" * 4


# Where the commands below keep their database unless a test names another (`check` opens none).
DATABASE_URL = "sqlite:////var/lib/plantstore/db.sqlite3"


def with_settings(command: list[str], **env) -> subprocess.CompletedProcess:
    """`command` run from the checkout with the production settings and `env` alone of the service's
    own (a SQLite DATABASE_URL unless `env` names one; None: unset)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_") and k != "DATABASE_URL"}
    env = {"DJANGO_SETTINGS_MODULE": "plantstore_site.settings", "DATABASE_URL": DATABASE_URL, **env}
    return subprocess.run(
        command,
        cwd=ROOT,
        env={**clean, **{name: value for name, value in env.items() if value is not None}},
        capture_output=True,
        text=True,
        timeout=60,
    )


def manage_check(*args, **env) -> subprocess.CompletedProcess:
    return with_settings([sys.executable, "manage.py", "check", *args], **env)


def test_start_without_secret_key_and_debug_off_fails_naming_the_variable():
    result = manage_check()

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off" in result.stderr


def test_start_without_database_url_and_debug_off_fails_naming_the_variable():
    result = manage_check(DJANGO_SECRET_KEY=SECRET_KEY, DATABASE_URL=None)

    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "django.core.exceptions.ImproperlyConfigured: DATABASE_URL must be set when DJANGO_DEBUG is off: "
        "postgres://user:password@host:5432/plantstore, or sqlite:////var/lib/plantstore/db.sqlite3 for SQLite"
    )


def test_start_in_debug_without_database_url_uses_the_sqlite_file_beside_manage_py():
    result = with_settings(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django.conf import settings; print(settings.DATABASES['default']['NAME'])",
        ],
        DJANGO_DEBUG="1",
        DATABASE_URL=None,
    )

    assert (result.returncode, result.stdout.strip().splitlines()[-1]) == (0, str(ROOT / "db.sqlite3"))


def test_start_in_debug_without_secret_key_uses_development_key():
    result = manage_check(DJANGO_DEBUG="1")

    assert result.returncode == 0, result.stderr


def test_start_with_env_example_unedited_fails_naming_the_secret_key_placeholder():
    result = manage_check(DJANGO_ENV_FILE=str(ROOT / ".env.example"))

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is still .env.example's placeholder; generate one with:" in result.stderr


def test_start_with_env_example_s_metrics_token_fails_naming_the_variable():
    result = manage_check(DJANGO_ENV_FILE=str(ROOT / ".env.example"), DJANGO_SECRET_KEY=SECRET_KEY)

    assert result.returncode != 0
    assert "PLANTS_METRICS_TOKEN is still .env.example's placeholder; generate one with:" in result.stderr


def test_start_in_debug_accepts_env_example_s_placeholders():
    result = manage_check(DJANGO_ENV_FILE=str(ROOT / ".env.example"), DJANGO_DEBUG="1")

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "key",
    ["k" * 50, "abcd" * 20, "a-random-but-short-key-0123456789", "django-insecure-" + "0123456789" * 5],
    ids=["one-character", "four-characters", "short", "django-insecure-prefix"],
)
def test_start_with_a_secret_key_check_deploy_calls_insecure_fails_naming_the_variable(key):
    result = manage_check(DJANGO_SECRET_KEY=key)

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is insecure (check --deploy's security.W009: fewer than 50 characters" in result.stderr


@pytest.mark.parametrize(
    "key",
    [SECRET_KEY, "k" * 50, "abcde" * 10, "abcd" * 20, "x" * 49 + "yzuvw", "django-insecure-" + "0123456789" * 5, ""],
)
def test_secret_key_refused_at_start_exactly_when_django_s_deploy_check_warns(settings, key):
    # Pins our start-up rule to Django's own check (security.W009), whatever a Django upgrade changes.
    from django.core import checks

    from plantstore_site.settings import insecure_secret_key

    settings.SECRET_KEY = key
    warnings = checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.security])

    assert insecure_secret_key(key) == any(warning.id == "security.W009" for warning in warnings)


@pytest.mark.parametrize("url", ["mysqlx://nowhere/db", "not a url"])
def test_start_with_bad_database_url_fails_naming_the_variable(url):
    result = manage_check(DJANGO_SECRET_KEY=SECRET_KEY, DATABASE_URL=url)

    assert result.returncode != 0
    assert "DATABASE_URL is not a database URL Django can use" in result.stderr


def test_start_with_bad_throttle_rate_fails_naming_the_variable():
    result = manage_check(DJANGO_SECRET_KEY=SECRET_KEY, PLANTS_THROTTLE_RATE="lots")

    assert result.returncode != 0
    assert "PLANTS_THROTTLE_RATE must look like 600/minute" in result.stderr


def test_start_with_bad_anonymous_throttle_rate_fails_naming_the_variable():
    result = manage_check(DJANGO_SECRET_KEY=SECRET_KEY, PLANTS_ANONYMOUS_THROTTLE_RATE="0/minute")

    assert result.returncode != 0
    assert "PLANTS_ANONYMOUS_THROTTLE_RATE must look like 600/minute" in result.stderr


@pytest.mark.parametrize(("per_user", "per_client"), [("0", "20"), ("6", "5")])
def test_start_with_admin_login_limits_out_of_order_fails_naming_the_variables(per_user, per_client):
    result = manage_check(
        DJANGO_DEBUG="1", PLANTS_ADMIN_LOGIN_FAILURES=per_user, PLANTS_ADMIN_CLIENT_LOGIN_FAILURES=per_client
    )

    assert result.returncode != 0
    assert (
        "PLANTS_ADMIN_LOGIN_FAILURES must be at least 1, and PLANTS_ADMIN_CLIENT_LOGIN_FAILURES at least as "
        f"large (not {per_user} and {per_client})."
    ) in result.stderr


def database_options(**env) -> dict:
    """The OPTIONS the settings give a PostgreSQL DATABASE_URL under this environment (nothing connects)."""
    script = (
        "import json; from django.conf import settings; "
        "print(json.dumps(settings.DATABASES['default'].get('OPTIONS', {})))"
    )
    result = with_settings([sys.executable, "-c", script], DJANGO_SECRET_KEY=SECRET_KEY, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_postgresql_prepares_no_statements_by_default_so_any_pgbouncer_in_transaction_mode_works():
    options = database_options(DATABASE_URL="postgres://plantstore@db.example.com/plantstore")

    assert "server_side_binding" not in options and "prepare_threshold" not in options


def test_prepared_statements_are_an_explicit_opt_in():
    options = database_options(
        DATABASE_URL="postgres://plantstore@db.example.com/plantstore", DJANGO_DB_PREPARED_STATEMENTS="1"
    )

    assert (options["server_side_binding"], options["prepare_threshold"]) == (True, 5)


def test_start_with_bad_debug_flag_fails_naming_the_variable():
    result = manage_check(DJANGO_DEBUG="maybe")

    assert result.returncode != 0
    assert "DJANGO_DEBUG must be a boolean" in result.stderr


def test_deploy_check_passes_with_the_documented_production_settings():
    production = {
        "DJANGO_SECRET_KEY": "a-long-random-production-key-0123456789-abcdefghijklmnopqrstuvwxyz",
        "DJANGO_ALLOWED_HOSTS": "plants.example.com",
        "DJANGO_SECURE_SSL_REDIRECT": "1",
        "DJANGO_SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
        "DJANGO_SECURE_HSTS_PRELOAD": "1",
    }

    result = manage_check("--deploy", "--fail-level", "WARNING", **production)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."


def test_deploy_check_flags_a_missing_ssl_redirect():
    result = manage_check("--deploy", DJANGO_SECRET_KEY="a-long-random-production-key-0123456789-abcdefghijklmnop")

    assert "security.W008" in result.stderr + result.stdout


@pytest.mark.urls("tests.urls")
def test_middleware_setting_says_what_runs_a_plain_view_post_passes_once_csrf_is_removed(settings):
    # As Django's documentation says to turn CSRF protection off: take it out of MIDDLEWARE.
    settings.MIDDLEWARE = [name for name in settings.MIDDLEWARE if name != "django.middleware.csrf.CsrfViewMiddleware"]

    response = Client(enforce_csrf_checks=True).post("/test/plain", {"name": "Fern"})

    assert (response.status_code, response.json()) == (200, {"method": "POST"})


@pytest.mark.urls("tests.urls")
def test_plain_view_post_without_a_csrf_token_is_refused_while_csrf_middleware_runs():
    response = Client(enforce_csrf_checks=True).post("/test/plain", {"name": "Fern"})

    assert response.status_code == 403
    assert response.json()["error"] == 40300 and response.json()["message"].startswith("CSRF verification failed")


def test_database_connections_are_closed_after_each_request():
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    finished = [entry[1]() for entry in request_finished.receivers]  # (key, weak reference, is_async)
    started = [entry[1]() for entry in request_started.receivers]
    assert close_old_connections in finished and close_old_connections in started


# A worker's start: the app loaded as the app server loads it, then one request, which loads every view.
LOAD_AND_ANSWER = """
import sys
import plantstore_site.wsgi
from django.test import Client

status = Client().get("/livez", HTTP_HOST="plants.example.com", secure=True).status_code
print(status, "redis" in sys.modules)
"""


@pytest.mark.parametrize(("redis_url", "loaded"), [("", "False"), ("redis://127.0.0.1:1/0", "True")])
def test_redis_py_is_loaded_only_by_a_service_that_sets_redis_url(tmp_path, redis_url, loaded):
    result = with_settings(
        [sys.executable, "-c", LOAD_AND_ANSWER],
        DJANGO_SECRET_KEY=SECRET_KEY,
        DJANGO_ALLOWED_HOSTS="plants.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        REDIS_URL=redis_url,
    )

    assert result.stdout.split() == ["200", loaded], result.stderr


def test_settings_in_the_env_file_django_env_file_names_are_read_below_the_environment(tmp_path):
    env_file = tmp_path / "plantstore.env"
    env_file.write_text("DJANGO_SECRET_KEY=from-the-file-" + "x" * 40 + "\nDJANGO_DEBUG=maybe\n")

    from_the_file = manage_check(DJANGO_ENV_FILE=str(env_file))
    environment_wins = manage_check(DJANGO_ENV_FILE=str(env_file), DJANGO_DEBUG="0")

    # The file's secret key is read (no "must be set"), and so is its bad DJANGO_DEBUG, unless the
    # environment sets one.
    assert "DJANGO_DEBUG must be a boolean (1/0, true/false), not 'maybe'." in from_the_file.stderr
    assert environment_wins.returncode == 0, environment_wins.stderr


SECRET_IN_THE_FILE = "from-the-file-" + "s" * 40


@pytest.mark.parametrize(
    ("content", "refused_because"),
    [
        (None, " cannot be read (No such file or directory)"),
        (f"DJANGO_SECRET_KEY={SECRET_IN_THE_FILE}\n# r\xe9seau\n".encode("latin-1"), ", line 2, is not UTF-8"),
        (
            f"DJANGO_SECRET_KEY = {SECRET_IN_THE_FILE}\n".encode(),
            ", line 1 (DJANGO_SECRET_KEY), is not NAME=value: no space before the name or around =",
        ),
        (
            f"  PLANTS_ADMIN_CLIENTS=10.0.1.0/24\n{SECRET_IN_THE_FILE}\n".encode(),
            ", line 1 (PLANTS_ADMIN_CLIENTS), is not",
        ),
        (
            f"\n# a comment\nDJANGO_SECRET_KEY={SECRET_IN_THE_FILE}\n{SECRET_IN_THE_FILE}\n".encode(),
            ", line 4, is not NAME=value, a # comment or blank",
        ),
        (f"DJANGO_SECRET_KEY={SECRET_IN_THE_FILE}\n".encode("utf-8-sig"), " begins with a byte order mark"),
        # systemd would read `export PLANTS_ADMIN_CLIENTS` as the name, and join the next line to a backslash.
        (
            f"export PLANTS_ADMIN_CLIENTS={SECRET_IN_THE_FILE}\n".encode(),
            ", line 1 (PLANTS_ADMIN_CLIENTS), is not NAME=value: no export before the name",
        ),
        (
            f"DJANGO_SECRET_KEY={SECRET_IN_THE_FILE}\\\nPLANTS_ADMIN_CLIENTS=10.0.1.0/24\n".encode(),
            ", line 1 (DJANGO_SECRET_KEY), is not NAME=value: no backslash or space at the end of the value",
        ),
    ],
    ids=[
        "missing",
        "not-utf-8",
        "spaces-around-equals",
        "indented",
        "not-a-setting",
        "byte-order-mark",
        "exported",
        "continued",
    ],
)
def test_a_settings_file_read_otherwise_than_as_written_stops_the_start_naming_its_line_never_its_value(
    tmp_path, content, refused_because
):
    env_file = tmp_path / "plantstore.env"
    if content is not None:
        env_file.write_bytes(content)

    result = manage_check(DJANGO_ENV_FILE=str(env_file), DJANGO_SECRET_KEY=SECRET_KEY)

    assert result.returncode != 0
    assert f"ImproperlyConfigured: DJANGO_ENV_FILE: {env_file}{refused_because}" in result.stderr
    assert SECRET_IN_THE_FILE not in result.stderr + result.stdout


@pytest.mark.parametrize(
    "metrics_token",
    ["short-metrics-token", f"{'a' * 40},{'b' * 40},{'c' * 40}", f"{'a' * 40},short", " , "],
    ids=["short", "three", "one-of-two-short", "none-between-commas"],
)
def test_a_metrics_token_setting_other_than_one_or_two_long_tokens_stops_the_start(metrics_token):
    result = manage_check(DJANGO_SECRET_KEY=SECRET_KEY, PLANTS_METRICS_TOKEN=metrics_token)

    assert result.returncode != 0
    assert (
        "PLANTS_METRICS_TOKEN must be one token of at least 32 characters (two, comma-separated, while one is rotated)"
    ) in result.stderr


def test_an_allowed_host_that_is_not_ascii_stops_the_start_asking_for_its_idna_form():
    result = manage_check(DJANGO_SECRET_KEY=SECRET_KEY, DJANGO_ALLOWED_HOSTS="bücher.example")

    assert result.returncode != 0
    assert (
        "DJANGO_ALLOWED_HOSTS: 'bücher.example' is not ASCII; write it as clients send it, in its IDNA form "
        "(each label not in ASCII as xn--…, e.g. bücher.example as xn--bcher-kva.example)"
    ) in result.stderr


@pytest.mark.live
def test_no_setting_and_no_http_variable_of_the_unit_s_environment_reaches_request_meta(production_unit):
    metrics_token = "metrics-" + "m" * 40
    server = production_unit(
        DJANGO_SETTINGS_MODULE="tests.live_settings",  # production's, and tests/urls.py's /test/meta
        PLANTS_METRICS_TOKEN=metrics_token,
        HTTP_X_FROM_THE_ENVIRONMENT="1",  # would read as a header X-From-The-Environment
    )

    status, _, text = request(f"{server.url}/test/meta")
    metrics = request(f"{server.url}/metrics", token=metrics_token)

    names = set(json.loads(text)["names"])
    settings = {"DJANGO_SECRET_KEY", "DATABASE_URL", "PLANTS_METRICS_TOKEN", "DJANGO_ALLOWED_HOSTS", "APP_PROCESSES"}
    assert status == 200
    assert names & {*settings, "HTTP_X_FROM_THE_ENVIRONMENT"} == set()
    assert {"REQUEST_METHOD", "PATH_INFO", "HTTP_HOST", "HTTP_X_REAL_IP"} <= names  # the request's own are there
    assert metrics[0] == 200  # the settings reach the app all the same: its metrics token is known
