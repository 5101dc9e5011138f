"""Test settings: the production settings, plus what a test run cannot get from its environment."""

import os

# Tests run with debug off, as production does, so they need a key; never used outside tests.
os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-not-for-any-deployment-0123456789")
# And a database: SQLite's test database is in memory, whatever file the URL names.
os.environ.setdefault("DATABASE_URL", "sqlite:///" + os.path.join(os.path.dirname(__file__), "..", "db.sqlite3"))

from plantstore_site.settings import *  # noqa: E402, F403

# Tests create many plants quickly with one token, and refuse many from one address; the throttle
# tests set their own rates.
PLANTS_THROTTLE_RATE = ""
PLANTS_ANONYMOUS_THROTTLE_RATE = ""
# Admin logins in tests need not pay for a slow password hash; users that a live server
# (with production settings) must log in get the production hasher, the second here.
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
# Tests read the static files from the apps, without running collectstatic first.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
# Serve static files straight from the apps' folders, as runserver does.
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True
