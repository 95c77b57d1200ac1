"""The test settings plus ``tests.strayapp`` (a ``@job`` in tasks.py, no jobs.py)."""

from tests.app.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.strayapp"]  # noqa: F405
