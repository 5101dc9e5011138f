"""App configuration for plants."""

from django.apps import AppConfig


class PlantsConfig(AppConfig):
    name = "plants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from plants import schema  # noqa: F401 - registers the OpenAPI bearer scheme
