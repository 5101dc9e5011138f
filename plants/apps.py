"""App configuration for plants."""

from django.apps import AppConfig


class PlantsConfig(AppConfig):
    name = "plants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from plants import checks, schema  # noqa: F401 - register the system checks, the OpenAPI bearer scheme
        from plants.throttling import rate_policy

        rate_policy(settings.PLANTS_THROTTLE_RATE)  # a bad rate stops the start, naming the variable
