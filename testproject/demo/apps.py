"""The demo app: a thumbnail + report pipeline run by qless workers."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Demo app config."""

    name = "demo"
    default_auto_field = "django.db.models.BigAutoField"
