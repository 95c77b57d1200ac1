"""Real local clusters: the session's Redis and Valkey clusters (3 primaries + 3 replicas,
`redis_cluster` and `valkey_cluster` in tests/cluster_fixtures.py), made whole again and
flushed before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from tests.cluster.shard_workers import sharded, start  # noqa: F401 (worker fixtures)
from testservers.cluster import LocalCluster


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
