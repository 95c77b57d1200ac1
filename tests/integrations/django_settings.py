"""The test project's settings, plus Sentry/OpenTelemetry set up as a project's settings.py
would (from TEST_SENTRY_OUT / TEST_OTEL_OUT)."""

from tests.app.settings import *  # noqa: F403
from tests.integrations.support import setup_from_environment

setup_from_environment()

# The worker registers the django.tasks tasks of installed apps' tasks.py modules.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.integrations"]  # noqa: F405
