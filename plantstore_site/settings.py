"""Settings for the Plant Store service, read from the environment (docs/configuration.md lists them all).

Read with django-environ, as Django projects do; DJANGO_ENV_FILE may name a file of NAME=value lines
read first, below the process environment (a variable set in both keeps the environment's value).
"""

from datetime import timedelta
from pathlib import Path

import dj_database_url
import environ
from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured
from whitenoise.compress import Compressor

from plants import timeouts
from plants.tokens import metrics_tokens
from plantstore_site.env_file import problem as settings_file_problem

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if env_file := env.str("DJANGO_ENV_FILE", default=""):
    if unreadable := settings_file_problem(env_file):
        raise ImproperlyConfigured(f"DJANGO_ENV_FILE: {unreadable}")
    environ.Env.read_env(env_file)

# django-environ reads every word it does not know as false: a typo in a security setting must stop
# the start, not turn the setting off.
BOOLEAN_WORDS = {*environ.Env.BOOLEAN_TRUE_STRINGS, "0", "false", "off", "no", "n", ""}


def env_bool(name: str, default: bool = False) -> bool:
    """env.bool(), with a word that is neither true nor false refused; unset or empty: the default."""
    value = env.str(name, default="").strip()
    if value.lower() not in BOOLEAN_WORDS:
        raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {value!r}.")
    return env.bool(name) if value else default


DEBUG = env_bool("DJANGO_DEBUG")

# .env.example's values start so: a copy left unedited must not start a production service.
PLACEHOLDER_PREFIX = "change-me"


def insecure_secret_key(key: str) -> bool:
    """The keys `check --deploy` warns of (security.W009), by Django's own bounds: fewer than 50
    characters, fewer than 5 distinct ones, or Django's insecure prefix (startproject's key)."""
    return (
        len(key) < SECRET_KEY_MIN_LENGTH
        or len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS
        or key.startswith(SECRET_KEY_INSECURE_PREFIX)
    )


SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
GENERATE_SECRET_KEY = 'generate one with: python -c "import secrets; print(secrets.token_urlsafe(50))"'
if not DEBUG:
    # A refusal at start, not check --deploy's warning: nothing runs that check on every deployment.
    if not SECRET_KEY:
        raise ImproperlyConfigured(f"DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off; {GENERATE_SECRET_KEY}")
    if SECRET_KEY.startswith(PLACEHOLDER_PREFIX):
        raise ImproperlyConfigured(f"DJANGO_SECRET_KEY is still .env.example's placeholder; {GENERATE_SECRET_KEY}")
    if insecure_secret_key(SECRET_KEY):
        raise ImproperlyConfigured(
            f"DJANGO_SECRET_KEY is insecure (check --deploy's security.W009: fewer than {SECRET_KEY_MIN_LENGTH} "
            f"characters, fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS} distinct ones, or the prefix "
            f"{SECRET_KEY_INSECURE_PREFIX!r}); {GENERATE_SECRET_KEY}"
        )
elif not SECRET_KEY:
    SECRET_KEY = "insecure-development-only-key"  # only ever used with DJANGO_DEBUG=1

ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", cast=str.strip, default=["localhost", "127.0.0.1", "[::1]"])
# A client sends an international host name in its IDNA form (xn--...): written otherwise, it would match
# no request, and the unit's probes could not send it.
if unicode_host := next((name for name in ALLOWED_HOSTS if not name.isascii()), None):
    raise ImproperlyConfigured(
        f"DJANGO_ALLOWED_HOSTS: {unicode_host!r} is not ASCII; write it as clients send it, in its IDNA form "
        "(each label not in ASCII as xn--…, e.g. bücher.example as xn--bcher-kva.example)"
    )
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", cast=str.strip, default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "plants",
]

# Every request runs all of it, in Django's recommended order. The API's views are csrf_exempt (DRF's),
# read no cookie or session and set none. The admin's parts cost an API request about 95 us of CPU in
# process, but serving the admin from an app server of its own saved nothing measurable under Granian
# (docs/decisions/app-server.md).
MIDDLEWARE = [
    "plants.metrics.RequestMetricsMiddleware",  # first, so it times and counts every answer
    "plants.middleware.RequestLogMiddleware",
    "plants.middleware.QueueDeadlineMiddleware",  # before any view: a request that waited too long is refused
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # the admin's and /docs' static files
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",  # Content-Length on every answer
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires
]

# Admin logins: django-axes counts failures per (user name, client address) and per client address,
# in the database so every worker and server shares them, and refuses that pair, or that client,
# for a while: never a user name for everyone (anyone could lock the operators out). A client's
# limit is higher than a pair's: it catches one client guessing across many names, while an
# office behind one NAT address that mistypes a few passwords is not locked out whole.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
PLANTS_ADMIN_LOGIN_FAILURES = env.int("PLANTS_ADMIN_LOGIN_FAILURES", default=5)
PLANTS_ADMIN_CLIENT_LOGIN_FAILURES = env.int("PLANTS_ADMIN_CLIENT_LOGIN_FAILURES", default=20)
if not 1 <= PLANTS_ADMIN_LOGIN_FAILURES <= PLANTS_ADMIN_CLIENT_LOGIN_FAILURES:
    raise ImproperlyConfigured(
        "PLANTS_ADMIN_LOGIN_FAILURES must be at least 1, and PLANTS_ADMIN_CLIENT_LOGIN_FAILURES at least as "
        f"large (not {PLANTS_ADMIN_LOGIN_FAILURES} and {PLANTS_ADMIN_CLIENT_LOGIN_FAILURES})."
    )
AXES_FAILURE_LIMIT = "plants.login_lockout.failure_limit"  # the pair's limit or the client's: see there
AXES_COOLOFF_TIME = timedelta(minutes=env.int("PLANTS_ADMIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_RESET_ON_SUCCESS = False  # plants.login_lockout clears the pair's failures alone
AXES_CLIENT_IP_CALLABLE = "plants.clients.client_ip"
AXES_LOCKOUT_CALLABLE = "plants.views.login_locked_out"

ROOT_URLCONF = "plantstore_site.urls"
CSRF_FAILURE_VIEW = "plants.views.csrf_failure"
WSGI_APPLICATION = "plantstore_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Production names its database: a postgres:// URL, or a sqlite:// one to use SQLite. Only in debug
# (make run) is the default a SQLite file beside manage.py: with debug off, a missing DATABASE_URL
# would serve a file in the checkout, which the systemd unit cannot write and nobody backs up.
DEFAULT_DATABASE_URL = f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
DATABASE_URL = env.str("DATABASE_URL", default="")
if not DATABASE_URL and not DEBUG:
    raise ImproperlyConfigured(
        "DATABASE_URL must be set when DJANGO_DEBUG is off: postgres://user:password@host:5432/plantstore, "
        "or sqlite:////var/lib/plantstore/db.sqlite3 for SQLite"
    )
# The longest a request waits on the database at any one step, whatever the network does: then it
# is answered 503 (plants/timeouts.py sets each of libpq's and SQLite's waits from it).
PLANTS_DATABASE_TIMEOUT_S = timeouts.database_timeout(
    env.int("PLANTS_DATABASE_TIMEOUT_S", default=timeouts.DEFAULT_DATABASE_TIMEOUT_S)
)
try:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL or DEFAULT_DATABASE_URL,
            conn_max_age=env.int("DJANGO_CONN_MAX_AGE", default=60),
            conn_health_checks=True,
        )
    }
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        DATABASES["default"]["OPTIONS"] = timeouts.sqlite_options(
            DATABASES["default"].get("OPTIONS", {}), PLANTS_DATABASE_TIMEOUT_S
        )
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # The same backend, but its per-request connection health check costs no query.
        DATABASES["default"]["ENGINE"] = "plants.postgresql"
        DATABASES["default"]["OPTIONS"] = timeouts.postgresql_options(
            DATABASES["default"].get("OPTIONS", {}), DATABASES["default"]["HOST"], PLANTS_DATABASE_TIMEOUT_S
        )
        # Off by default: the docs offer PgBouncer in transaction mode in front, and one before
        # 1.21 (Debian 12 ships 1.18) hands a connection's prepared statements to other clients'
        # transactions, which then fail. An opt-in for a direct connection, or PgBouncer 1.21 or
        # later with max_prepared_statements set.
        if env_bool("DJANGO_DB_PREPARED_STATEMENTS", default=False):
            # Server-side parameters, and statements prepared from their 5th use on a connection:
            # the token lookup and the INSERT skip parsing and planning on every request.
            DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)
except ValueError as error:
    raise ImproperlyConfigured(
        f"DATABASE_URL is not a database URL Django can use ({error}); "
        "expected e.g. postgres://user:password@host:5432/plantstore or sqlite:////path/db.sqlite3"
    ) from None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("DJANGO_STATIC_ROOT", default="") or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# Source maps are fetched only by a browser's developer tools: served as they are, not compressed by
# every collectstatic (drf-spectacular's bundles' maps made about half of its CPU time).
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = [*Compressor.SKIP_COMPRESS_EXTENSIONS, "map"]

# HTTPS hardening: on by default with debug off, relaxed only by explicit settings.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", default=False)
# Health checks come from inside (a load balancer, a supervisor) over plain HTTP, and so do
# Prometheus' scrapes of each app server (its token still required): never redirected.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^livez$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
if proxy_header := env.str("DJANGO_SECURE_PROXY_SSL_HEADER", default=""):
    # e.g. HTTP_X_FORWARDED_PROTO when a TLS-terminating proxy sets X-Forwarded-Proto: https
    SECURE_PROXY_SSL_HEADER = (proxy_header, "https")

# The API's own limits.
PLANTS_MAX_BODY_BYTES = env.int("PLANTS_MAX_BODY_BYTES", default=4096)
# Requests per token per window, as DRF reads a rate (checked at start-up by plants.throttling).
PLANTS_THROTTLE_RATE = env.str("PLANTS_THROTTLE_RATE", default="600/minute")  # empty: no throttle
# Failed authentications (no token, a bad or refused one) per client address per window, after which
# the address's failures are 429, uncounted; a valid token is served whatever its address did
# (plants/authentication_limit.py). 60 a minute is a tenth of one token's quota: a client whose token
# was revoked or mistyped, retrying once a second, still gets its 401 that says why. Empty: no limit.
PLANTS_ANONYMOUS_THROTTLE_RATE = env.str("PLANTS_ANONYMOUS_THROTTLE_RATE", default="60/minute")
# The counters' store: Redis when set, through Django's cache framework; else the database itself
# counts (plants/rate_stores.py). Either is shared by every server that uses it.
REDIS_URL = env.str("REDIS_URL", default="")
# When Redis fails: "open" serves requests uncounted (and /healthz leaves Redis out), "closed"
# answers 503 (docs/decisions/rate-limit-store.md says why open is the default).
PLANTS_RATE_LIMIT_FAILURE_MODE = env.str("PLANTS_RATE_LIMIT_FAILURE_MODE", default="open").strip().lower()
if PLANTS_RATE_LIMIT_FAILURE_MODE not in ("open", "closed"):
    raise ImproperlyConfigured(
        f"PLANTS_RATE_LIMIT_FAILURE_MODE must be open or closed, not {PLANTS_RATE_LIMIT_FAILURE_MODE!r}."
    )
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
if REDIS_URL:
    CACHES["rate_limits"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "plants:rate",
        "OPTIONS": timeouts.redis_options(),
    }
# /metrics answers only requests bearing this token (Prometheus' `authorization` setting); unset, it is a
# 404. While it is rotated, two, comma-separated: the new one and the old (docs/operating.md).
PLANTS_METRICS_TOKEN = env.str("PLANTS_METRICS_TOKEN", default="")
GENERATE_METRICS_TOKEN = 'generate one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'
metrics_token_list = metrics_tokens(PLANTS_METRICS_TOKEN)
if PLANTS_METRICS_TOKEN.strip() and (
    not metrics_token_list or len(metrics_token_list) > 2 or any(len(token) < 32 for token in metrics_token_list)
):
    raise ImproperlyConfigured(
        "PLANTS_METRICS_TOKEN must be one token of at least 32 characters (two, comma-separated, while one is "
        f"rotated); {GENERATE_METRICS_TOKEN}"
    )
if any(token.startswith(PLACEHOLDER_PREFIX) for token in metrics_token_list) and not DEBUG:
    raise ImproperlyConfigured(f"PLANTS_METRICS_TOKEN is still .env.example's placeholder; {GENERATE_METRICS_TOKEN}")
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # admin forms; the API has its own, smaller cap

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["plants.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["plants.parsers.PlantJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "plants.negotiation.JSONOnlyNegotiation",
    "DEFAULT_THROTTLE_CLASSES": ["plants.throttling.TokenRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "plants.exception_handler.api_exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Plant Store",
    "VERSION": "1.0.0",
    "DESCRIPTION": (
        "A service that stores plants. Its one operation creates a plant from a client-chosen id, "
        "a name and an optional tag. Every answer other than 200 is an Error body."
    ),
    "LICENSE": {"name": "MIT", "url": "https://opensource.org/licenses/MIT"},
    # The schema and its docs are public: no authentication, whatever header is sent.
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "plants.schema.finalize_schema"],
}

# OpenTelemetry's traces, on when OTEL_TRACES_EXPORTER names an exporter (plants/tracing.py); every
# other OTEL_* variable is read by OpenTelemetry's SDK itself. OTEL_SDK_DISABLED turns it off, as
# the SDK's own switch.
PLANTS_TRACING = env.str("OTEL_TRACES_EXPORTER", default="").strip().lower() not in ("", "none") and not env_bool(
    "OTEL_SDK_DISABLED"
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "plants.log_format.OneLineFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        }
    },
    "filters": {"client_error": {"()": "plants.log_format.ClientErrorFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "client_errors": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["client_error"]},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "plants.requests": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "plants": {"handlers": ["console"], "level": env.str("PLANTS_LOG_LEVEL", default="INFO"), "propagate": False},
        # Our request log replaces Django's per-request warnings ("Not Found: /x").
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        # A disallowed Host or admin lookup is the client's mistake: one WARNING line, no traceback.
        "django.security": {"handlers": ["client_errors"], "level": "WARNING", "propagate": False},
    },
}
