"""The Django peers' settings: what `startproject` writes, plus DATABASE_URL, for the peer PEER names
(`drf` or `ninja`: bench/peers/drf.py, ninja.py). Idiomatic on purpose: the default apps and middleware,
persistent connections as cookiecutter-django sets them (CONN_MAX_AGE 60), no request log; statements
prepared as the service's (DJANGO_DB_PREPARED_STATEMENTS, which bench/run.py sets); with PEER_EQUAL_WORK=1,
the request log to stderr (bench/peers/equal_work.py)."""

import os

import dj_database_url

environment = os.environ
SECRET_KEY = environment["DJANGO_SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = environment.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1").split(",")
PEER_EQUAL_WORK = environment.get("PEER_EQUAL_WORK", "") == "1"
PEER = environment["PEER"]
ROOT_URLCONF = "bench.peers.urls"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "bench.peers.tables",
    *(["rest_framework"] if PEER == "drf" else []),
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

REST_FRAMEWORK = {  # authentication and permission on the view (bench/peers/drf.py), which defines them
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
}

if PEER_EQUAL_WORK:
    MIDDLEWARE = ["bench.peers.equal_work.RequestLogMiddleware", *MIDDLEWARE]  # first: it times the rest
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "bench.peers.shared.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {"bench.peers.requests": {"handlers": ["console"], "level": "INFO", "propagate": False}},
    }
