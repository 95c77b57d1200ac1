"""Shared fixtures: one private redis-server per test session, a flushed database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from django_qless.core.client import Client
from tests.cluster_fixtures import redis_cluster, valkey_cluster  # noqa: F401 - shared clusters
from testservers.redis_server import RedisServer, find_redis_server, redis_version


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """Start our own redis-server on a unix socket in a temp dir; never touch another."""
    server = RedisServer(find_redis_server()).start()
    conn = redis.Redis(unix_socket_path=server.socket_path)
    # Guard: this server is brand new, so a non-empty database means something is wrong.
    if conn.dbsize() != 0:
        server.stop()
        pytest.exit("refusing to run: the test Redis is not empty", returncode=3)
    conn.close()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_version_info(redis_server: RedisServer) -> tuple[int, ...]:
    """Return the test server's version as a tuple, e.g. (7, 0, 15)."""
    return tuple(int(p) for p in redis_version(redis_server.binary).split(".")[:3])


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """Yield the URL of a freshly flushed test database."""
    conn = redis.Redis(unix_socket_path=redis_server.socket_path)
    conn.flushall()
    conn.script_flush()
    conn.close()
    yield redis_server.url


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    """A raw redis-py connection (decoded strings) to the flushed test database."""
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    yield conn
    conn.close()


@pytest.fixture
def qless_url(redis_url: str) -> str:
    """The Redis `qless_client` talks to (the fault tests point it at their TCP server)."""
    return redis_url


@pytest.fixture
def qless_client(qless_url: str) -> Iterator[Client]:
    """A core client named test-client on the real clock (not tests/core's fake-clock one)."""
    c = Client(qless_url, worker_name="test-client")
    yield c
    c.close()


@pytest.fixture
def short_leases(qless_client: Client) -> Client:
    """Heartbeat 2 s, grace 1 s: a lost job is offered again about 3 s after its last beat."""
    qless_client.config["heartbeat"] = 2
    qless_client.config["grace-period"] = 1
    return qless_client
