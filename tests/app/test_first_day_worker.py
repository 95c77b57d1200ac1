"""``qless_worker`` on the first day: a plain URL on a cluster node, an unreachable Redis."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.core import checks
from django.test import override_settings

from tests.app.helpers import manage
from testservers.cluster_node import pick_port
from testservers.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster_node_url() -> Iterator[str]:
    """A redis-server in cluster mode (no slots needed: the probe reads INFO cluster)."""
    # A port of its own: the cluster bus listens on port + 10000 (port 0 would take 10000).
    server = RedisServer(port=pick_port(set()), extra_args=[
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]).start()
    try:
        yield server.url
    finally:
        server.stop()


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_check_deploy_says_use_cluster_for_a_plain_url_on_a_cluster_node(cluster_node_url):
    from django_qless.checks import check_deploy

    with override_settings(QLESS={"default": {"URL": cluster_node_url}}):
        found = check_deploy()
    errors = [m for m in found if m.id == "django_qless.E086"]
    assert len(errors) == 1 and isinstance(errors[0], checks.Error)
    assert "node of a Redis Cluster" in errors[0].msg and "use CLUSTER" in errors[0].msg
    assert "CLUSTER" in errors[0].hint


def test_check_deploy_passes_a_plain_server(redis_url):
    from django_qless.checks import check_deploy

    assert [m.id for m in check_deploy() if m.level >= checks.ERROR] == []


def test_the_worker_exits_2_with_one_line_on_a_cluster_node(cluster_node_url):
    result = manage(cluster_node_url, "qless_worker", "-p", "0", "--skip-checks",
                    "--max-jobs", "1")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert "use CLUSTER" in lines[-1] and "QLESS['default']" in lines[-1]


def test_unreachable_redis_names_the_alias_and_masks_the_password():
    url = f"redis://qless:s3cret-pw@127.0.0.1:{unused_port()}/0"
    result = manage(url, "qless_worker", "-p", "0", "--start-timeout", "0.3")
    assert result.returncode == 1
    output = result.stderr + result.stdout
    assert "custom connection" not in output
    assert "s3cret-pw" not in output
    assert "(QLESS alias 'default')" in output and "qless:***@127.0.0.1" in output
