"""Point QLESS at the session's private Redis for every test in tests/app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_qless.clients import clients


@pytest.fixture(autouse=True)
def qless_settings(redis_url: str) -> Iterator[str]:
    """Use the flushed test database as the default alias (and forget cached clients)."""
    with override_settings(QLESS={"default": {"URL": redis_url},
                                  "JOB_MODULES": ["tests.app.legacy_jobs"]}):
        yield redis_url
    clients.close_all()
