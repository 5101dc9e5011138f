"""App configuration for plants."""

from django.apps import AppConfig


class PlantsConfig(AppConfig):
    name = "plants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.models.signals import pre_migrate

        from plants import login_lockout, schema  # noqa: F401 - the login receiver, the OpenAPI bearer scheme
        from plants.lock_timeout import ensure_database_lock_timeout
        from plants.throttling import rate_policy

        # Each migrate (the deploy step) bounds the database's lock waits before any migration applies
        # (plants/lock_timeout.py); pre_migrate, which flush does not send, as post_migrate it does.
        pre_migrate.connect(ensure_database_lock_timeout, sender=self)

        # A bad rate stops the start, naming the variable.
        rate_policy(settings.PLANTS_THROTTLE_RATE)
        rate_policy(settings.PLANTS_ANONYMOUS_THROTTLE_RATE, "PLANTS_ANONYMOUS_THROTTLE_RATE")
