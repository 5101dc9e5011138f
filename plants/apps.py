"""App configuration for plants."""

from django.apps import AppConfig
from django.core.cache.backends.base import BaseCache
from django.utils.module_loading import import_string


def caches_close_nothing(caches: dict) -> bool:
    """Whether no configured cache backend does anything on close() (LocMemCache, the default, and
    the database, file, dummy and Redis backends; memcached's close its client)."""
    return all(import_string(cache["BACKEND"]).close is BaseCache.close for cache in caches.values())


class PlantsConfig(AppConfig):
    name = "plants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.core.cache import close_caches
        from django.core.signals import request_finished

        from plants import checks, schema  # noqa: F401 - register the system checks, the OpenAPI bearer scheme
        from plants.throttling import rate_policy

        rate_policy(settings.PLANTS_THROTTLE_RATE)  # a bad rate stops the start, naming the variable
        if caches_close_nothing(settings.CACHES):
            # Django closes every cache the thread has opened after each request; when no backend's
            # close() does anything, that is only a walk over thread-local handles (measured in
            # BENCHMARKS.md). The database's own request_finished receiver stays.
            request_finished.disconnect(close_caches)
