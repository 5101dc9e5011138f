"""Settings shared by the Django peers of `make bench`: what `startproject` writes, plus DATABASE_URL.

Idiomatic on purpose: the default apps and middleware, persistent connections as
cookiecutter-django sets them (CONN_MAX_AGE 60), no request log (Django's default logging); prepared
statements when the service has them (DJANGO_DB_PREPARED_STATEMENTS, as bench/run.py passes it).

PEER_EQUAL_WORK=1 selects the equal-work variant, which does what the service does besides the token
lookup and the INSERT: it counts each request against a per-token limit (bench/peers/rate_limit.py,
through each framework's throttle hook) and writes one JSON log line per request, to stderr as the
service does (bench/peers/request_log.py).
"""

import os

import dj_database_url

environment = os.environ
SECRET_KEY = environment["DJANGO_SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = environment.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1").split(",")
PEER_EQUAL_WORK = environment.get("PEER_EQUAL_WORK", "") == "1"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "bench.peers.tables",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": dj_database_url.parse(environment["DATABASE_URL"], conn_max_age=60)}
if environment.get("DJANGO_DB_PREPARED_STATEMENTS") == "1":
    # The service's setting, the same way (plantstore_site/settings.py): server-side parameters, and
    # statements prepared from their 5th use on a connection, as asyncpg prepares the FastAPI peer's.
    DATABASES["default"]["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}
TIME_ZONE = "UTC"  # as startproject writes it, and the service has it: the log lines' times in UTC
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if PEER_EQUAL_WORK:
    MIDDLEWARE = ["bench.peers.request_log.RequestLogMiddleware", *MIDDLEWARE]  # first: it times the rest
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "bench.peers.json_log.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {"bench.peers.requests": {"handlers": ["console"], "level": "INFO", "propagate": False}},
    }
