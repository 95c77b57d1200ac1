"""A plain URL pointing at a node of a cluster: said plainly, not a raw engine error."""

from __future__ import annotations

import pytest

from django_qless.core import Client
from django_qless.core.exceptions import ClusterNodeError
from django_qless.core.health import probe
from testservers.cluster import LocalCluster


def test_a_put_through_a_plain_url_on_a_cluster_node_says_use_the_cluster(
    cluster: LocalCluster,
) -> None:
    """Every node refuses the default keyspace's put with ClusterNodeError naming CLUSTER."""
    for node in cluster.primaries():
        client = Client(f"redis://{node.address}/0")
        try:
            with pytest.raises(ClusterNodeError, match="Configure the cluster"):
                # a few puts: the keys of some may hash to this node's own slots
                for n in range(20):
                    client.queues[f"q{n}"].put("shop.Job", {})
        finally:
            client.close()


def test_the_deploy_probe_sees_a_cluster_node(cluster: LocalCluster, redis_url: str) -> None:
    """`probe` reports cluster mode for a cluster node, not for a plain server."""
    node = cluster.primaries()[0]
    assert probe(node.conn()).cluster_node is True
    plain = Client(redis_url)
    try:
        assert probe(plain).cluster_node is False
    finally:
        plain.close()
