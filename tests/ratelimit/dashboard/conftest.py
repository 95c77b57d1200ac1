"""The dashboard's test clients and users (tests/ui), for the rate limit pages."""

from __future__ import annotations

from tests.ui.conftest import (  # noqa: F401 (fixtures)
    as_user,
    manager,
    mc,
    qc,
    qless_settings,
    viewer,
)
