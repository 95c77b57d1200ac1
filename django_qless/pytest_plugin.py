"""A pytest plugin: the ``qless_keyspace`` fixture, a clean qless keyspace for each test.

Installed with django-qless and loaded by pytest through the ``pytest11`` entry point (or
list it yourself: ``pytest_plugins = ["django_qless.pytest_plugin"]``). Nothing here runs
unless a test asks for the fixture; to give every test one, add to your ``conftest.py``::

    @pytest.fixture(autouse=True)
    def _clean_qless(qless_keyspace): ...

Importing this module imports neither Django nor Redis: pytest loads it before Django is
set up.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

__all__ = ["qless_keyspace"]


def _flush_all() -> None:
    """Empty the keyspace of every configured alias that is not eager."""
    from django_qless.conf import get_settings
    from django_qless.testing import flush_keyspace

    conf = get_settings()
    for alias in conf.aliases:
        if not conf.is_eager(alias):  # an eager alias never reaches its server
            flush_keyspace(alias)


@pytest.fixture
def qless_keyspace() -> Iterator[None]:
    """Empty every alias's qless keyspace before and after the test.

    A retry or a scheduled job left by one test then never runs in the next. Refuses a
    server that does not look like a test server (see ``testing.flush_keyspace``).
    """
    _flush_all()
    yield
    _flush_all()
