"""App configuration for plants."""

from django.apps import AppConfig


class PlantsConfig(AppConfig):
    name = "plants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.apps import apps
        from django.conf import settings

        from plants import schema  # noqa: F401 - the OpenAPI bearer scheme
        from plants.throttling import rate_policy

        if apps.is_installed("axes"):  # where this process serves the admin (settings.SERVE_ADMIN)
            from plants import login_lockout  # noqa: F401 - the login receiver

        rate_policy(settings.PLANTS_THROTTLE_RATE)  # a bad rate stops the start, naming the variable
