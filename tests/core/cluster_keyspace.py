"""pytest plugin: `-p tests.core.cluster_keyspace` runs tests/core in the shard keyspace s7 of
a real Redis Cluster.

Each test session (each xdist worker) starts a cluster of the session's redis-server: 3
cluster-enabled primaries, no replicas (the smallest shape `--cluster create` accepts), joined
by the server's CLI. `redis_url` is the primary owning the slot of `ql:{s7}:`, so the raw
connection `r`, `snapshot` and the MONITOR of `events` see every key and message of the
keyspace on that node; every `Client` a test builds on that URL (or on a plain connection to
that node) is `Client(RedisCluster(...), keyspace="s7")`: the ShardChannel over the
ClusterTransport, never the plain node channel. Loaded before the conftests, so
tests/core/keyspace_mode.py sees the variables; tests/core/conftest.py takes the fixtures
below over the plain ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

os.environ.setdefault("QLESS_TEST_KEYSPACE", "s7")
os.environ["QLESS_TEST_CLUSTER"] = "1"

from django_qless.core.client import Client  # noqa: E402
from tests.core.keyspace_mode import KEYSPACE, PREFIX  # noqa: E402
from testservers.cluster import LocalCluster  # noqa: E402
from testservers.redis_server import find_redis_server  # noqa: E402

__all__ = ["_clients_in_keyspace", "keyspace_cluster", "redis_url"]

_OTHER_SLOTS = ("sends engine calls whose keys hash to other slots: the cluster node refuses "
                "them (MOVED) before the engine's own check runs")
_PLAIN_WRAP = ("checks how a Client wraps a caller's plain redis.Redis (its pool, decoding, "
               "identity); a cluster client is given a RedisCluster")
_NODE_CHANNEL = ("drives the plain node channel (NodeChannel.load_script, EVALSHA counts); "
                 "ShardChannel has no load_script")
# Tests that cannot hold on a cluster, by node id prefix, with the reason.
SKIPS: dict[str, str] = {
    "tests/core/test_core_is_django_free.py::test_a_client_of_one_server_loads_no_cluster_module":
        "puts through a plain URL, which a cluster node refuses (ClusterNodeError)",
    "tests/core/test_core_is_django_free.py::"
    "test_a_serial_worker_of_one_server_loads_no_cluster_module":
        "puts through a plain URL, which a cluster node refuses (ClusterNodeError)",
    "tests/core/test_bad_input.py::test_bad_keyspace_is_refused": _OTHER_SLOTS,
    "tests/core/test_bad_input.py::test_more_than_one_key_is_refused": _OTHER_SLOTS,
    "tests/core/test_lua_smoke.py::test_keys_other_than_a_keyspace_are_refused": _OTHER_SLOTS,
    "tests/core/test_keyspace.py::": (
        "builds clients of keyspaces a, b and the default one on one server; a cluster "
        "client needs a shard tag, and those keyspaces' slots live on other nodes"),
    "tests/core/test_client_queue.py::test_client_context_manager_closes_its_pool": (
        "counts the connections one Client opens and closes on its server; the test's "
        "RedisCluster is the caller's, so the Client leaves it open"),
    "tests/core/test_client_transport.py::test_pool_decodes_and_never_retries": _PLAIN_WRAP,
    "tests/core/test_client_transport.py::test_wraps_a_caller_redis_without_decoding":
        _PLAIN_WRAP,
    "tests/core/test_glue_reads.py::test_close_shared_pool": _PLAIN_WRAP,
    "tests/core/test_client_transport.py::test_script_mode_when_fcall_is_denied": (
        "creates its ACL user through `r` (the cluster node) but connects to the plain "
        "session server's unix socket"),
    "tests/core/test_client_transport.py::test_mutating_call_is_not_resent_after_a_read_timeout":
        _NODE_CHANNEL,
    "tests/core/test_client_transport.py::test_timeout_under_client_pause_fails_fast":
        _NODE_CHANNEL,
    "tests/core/test_client_validation.py::test_refused_before_any_round_trip": _NODE_CHANNEL,
}


@pytest.fixture(scope="session")
def keyspace_cluster() -> Iterator[LocalCluster]:
    """A real cluster of 3 primaries, no replicas, of the session's redis-server."""
    try:
        cluster = LocalCluster(find_redis_server(), primaries=3, replicas=0)
    except FileNotFoundError as exc:  # no redis-cli to create the cluster
        pytest.skip(str(exc))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _flush(cluster: LocalCluster) -> None:
    """Empty every primary as the plain fixture empties its server (functions stay)."""
    for node in cluster.primaries():
        node.call("FLUSHALL")
        node.call("SCRIPT", "FLUSH")


@pytest.fixture
def redis_url(keyspace_cluster: LocalCluster) -> str:
    """The URL of the flushed primary owning the test keyspace's slot."""
    _flush(keyspace_cluster)
    return f"redis://{keyspace_cluster.primary_for_key(PREFIX).address}/0"


def _on_node(target: Any, port: int) -> bool:
    """Whether `target` (a URL or a plain connection) is the keyspace's node."""
    if isinstance(target, str):
        return target.startswith("redis://") and target.split("/")[2].endswith(f":{port}")
    if isinstance(target, redis.Redis):
        return target.connection_pool.connection_kwargs.get("port") == port
    return False


@pytest.fixture(autouse=True)
def _clients_in_keyspace(
    monkeypatch: pytest.MonkeyPatch, keyspace_cluster: LocalCluster
) -> Iterator[None]:
    """Every Client the tests make on the keyspace's node is a cluster client of the keyspace."""
    init = Client.__init__
    port = keyspace_cluster.primary_for_key(PREFIX).port
    built: list[RedisCluster] = []

    def cluster_init(self: Client, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("keyspace", KEYSPACE)
        target = args[0] if args else kwargs.pop("url_or_redis", "redis://localhost:6379/0")
        if _on_node(target, port):
            timeout = kwargs.pop("socket_timeout", None)  # the RedisCluster's, then
            target = keyspace_cluster.client(**({} if timeout is None else
                                                {"socket_timeout": timeout}))
            built.append(target)
        init(self, target, *args[1:], **kwargs)

    monkeypatch.setattr(Client, "__init__", cluster_init)
    yield
    for rc in built:
        rc.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the tests that cannot hold on a cluster, with the reason."""
    for item in items:
        for prefix, reason in SKIPS.items():
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=f"cluster keyspace: {reason}"))
