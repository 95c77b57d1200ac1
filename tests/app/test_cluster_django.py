"""A Django project whose QLESS alias is sharded over a real local Redis Cluster (3 primaries
+ 3 replicas, the session's `redis_cluster`): checks, the client, enqueue, handles and the
operator command."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

from django_qless.checks import check_deploy, check_settings
from django_qless.clients import clients
from django_qless.core.cluster_server import LocalCluster

SHARDS = 4


def cluster_qless(local: LocalCluster, **extra: Any) -> dict[str, Any]:
    """The QLESS setting of a project using `local` (two of its nodes as the seed list)."""
    nodes = [f"redis://127.0.0.1:{n.port}" for n in local.running()[:2]]
    return {"default": {"CLUSTER": nodes, "SHARDS": SHARDS, **extra},
            "JOB_MODULES": ["tests.app.legacy_jobs"]}


@pytest.fixture
def local(redis_cluster: LocalCluster) -> LocalCluster:
    """The session's Redis cluster, whole again and flushed."""
    redis_cluster.heal()
    redis_cluster.flush()
    return redis_cluster


@pytest.fixture
def on_cluster(local: LocalCluster) -> Iterator[LocalCluster]:
    """QLESS's default alias points at the cluster (clients forgotten afterwards)."""
    clients.close_all()
    with override_settings(QLESS=cluster_qless(local)):
        yield local
    clients.close_all()


def test_checks_pass_on_a_good_cluster_config(on_cluster):
    assert check_settings() == []
    messages = checks.run_checks(tags=["django_qless"])
    assert [m for m in messages if m.id.startswith("django_qless")] == []


def test_deploy_check_probes_every_primary(local):
    with override_settings(QLESS=cluster_qless(local)):
        assert check_deploy() == []
    primary = local.primaries()[1]
    conn = local.client()
    node = conn.get_node(host="127.0.0.1", port=primary.port)
    try:
        conn.get_redis_connection(node).config_set("maxmemory-policy", "allkeys-lru")
        with override_settings(QLESS=cluster_qless(local)):
            found = check_deploy()
    finally:
        conn.get_redis_connection(node).config_set("maxmemory-policy", "noeviction")
        conn.close()
    assert [m.id for m in found] == ["django_qless.E082"]
    assert f"node 127.0.0.1:{primary.port}" in found[0].msg


def test_deploy_check_reports_an_unreachable_cluster():
    with override_settings(QLESS={"default": {"CLUSTER": ["redis://127.0.0.1:1"]}}):
        found = check_deploy()
    assert [m.id for m in found] == ["django_qless.E081"]


def test_deploy_flags_remote_cluster_without_password_or_tls():
    from django_qless.checks import _connection_warnings
    from django_qless.settings import get_settings

    cases = {
        ("redis://10.0.0.1:7000", "redis://10.0.0.2:7000"): {"django_qless.W083",
                                                             "django_qless.W084"},
        ("rediss://u:pw@10.0.0.1:7000",): set(),
        ("redis://127.0.0.1:7000",): set(),
    }
    for nodes, expected in cases.items():
        with override_settings(QLESS={"default": {"CLUSTER": list(nodes)}}):
            alias = get_settings().aliases["default"]
            found = _connection_warnings("default", "QLESS['default']", alias)
        assert {m.id for m in found} == expected, nodes
