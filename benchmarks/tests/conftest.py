"""Fixtures for the harness's own tests: one private redis-server for the session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(BENCH), str(BENCH / "adapters"), str(BENCH.parent)]

from testservers.redis_server import RedisServer  # noqa: E402


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """Start a private redis-server on a unix socket; yield its URL."""
    with RedisServer() as server:
        yield server.url
