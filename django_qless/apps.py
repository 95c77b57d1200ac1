"""The Django app configuration: registers checks and receivers, nothing else."""

from django.apps import AppConfig

__all__ = ["DjangoQlessConfig"]


class DjangoQlessConfig(AppConfig):
    """Import checks and signal receivers; no I/O and no threads here."""

    name = "django_qless"
    verbose_name = "Qless"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        """Register system checks and signal receivers."""
        from django_qless import checks, receivers  # noqa: F401
