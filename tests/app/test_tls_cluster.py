"""A rediss:// cluster alias against a real cluster whose every node (clients, bus) is TLS."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from django_qless.clients import clients, get_client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import QlessConnectionError
from tests.app.test_tls import make_certs
from testservers.cluster_node import ClusterNode, kill_node, pick_port, server_args, until
from testservers.redis_server import find_cli, find_redis_server

QUEUE = "tls-q"


def make_node_cert(path: Path) -> None:
    """A certificate for the nodes from make_certs' CA, valid as server and as client: the
    cluster bus requires the connecting node to present one, whatever tls-auth-clients says."""
    (path / "node.ext").write_text(
        (path / "san.ext").read_text().replace("serverAuth", "serverAuth,clientAuth"))
    subprocess.run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem",
                    "-CAkey", "ca.key", "-CAcreateserial", "-days", "1", "-extfile", "node.ext",
                    "-out", "node.pem"], cwd=path, check=True, capture_output=True)


def tls_args(node: ClusterNode, certs: Path) -> list[str]:
    """TLS-only options for `node`: its port becomes the TLS port, the plain one is off."""
    return ["--port", "0", "--tls-port", str(node.port),  # later options win
            "--tls-cluster", "yes", "--tls-replication", "yes",
            "--tls-cert-file", str(certs / "node.pem"),
            "--tls-key-file", str(certs / "server.key"),
            "--tls-ca-cert-file", str(certs / "ca.pem"), "--tls-auth-clients", "no"]


def tls_conn(node: ClusterNode, ca: Path) -> redis.Redis:
    """A verified TLS connection to `node` alone."""
    return redis.Redis(host="127.0.0.1", port=node.port, ssl=True, ssl_ca_certs=str(ca),
                       decode_responses=True, socket_connect_timeout=1, socket_timeout=5)


def answers(node: ClusterNode, ca: Path) -> bool | None:
    """True once `node` answers PING over TLS; skip if it died (no TLS in this build)."""
    assert node.process is not None
    if node.process.poll() is not None:
        pytest.skip(f"this redis-server cannot serve TLS: {node.log_tail(3)!r}")
    try:
        with tls_conn(node, ca) as conn:
            return bool(conn.ping()) or None
    except redis.ConnectionError:
        return None


def cluster_ok(nodes: list[ClusterNode], ca: Path) -> bool | None:
    """True once every node says cluster_state:ok."""
    for node in nodes:
        with tls_conn(node, ca) as conn:
            if conn.cluster("INFO").get("cluster_state") != "ok":
                return None
    return True


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], Path]]:
    """Three TLS primaries (no replicas) joined by the CLI over TLS: (node URLs, CA file)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    binary = find_redis_server()
    cli = find_cli(binary)
    if "--tls" not in subprocess.run([cli, "--help"], capture_output=True, text=True).stdout:
        pytest.skip(f"{cli} has no TLS support")
    base = tmp_path_factory.mktemp("tls-cluster")
    make_certs(base)
    make_node_cert(base)
    ca = base / "ca.pem"
    nodes: list[ClusterNode] = []
    try:
        taken: set[int] = set()
        for index in range(3):
            directory = base / f"node-{index}"
            directory.mkdir()
            node = ClusterNode(pick_port(taken), str(directory))
            taken.add(node.port)
            nodes.append(node)
            node.process = subprocess.Popen(
                server_args(binary, node, 2000, tls_args(node, base)),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        for node in nodes:
            until(deadline, partial(answers, node, ca), f"{node.address} to answer over TLS")
        done = subprocess.run(
            [cli, "--tls", "--cacert", str(ca), "--cluster", "create",
             *(n.address for n in nodes), "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=20, check=False)
        assert done.returncode == 0, f"cluster create failed: {done.stdout[-1000:]} {done.stderr}"
        until(time.monotonic() + 10, lambda: cluster_ok(nodes, ca), "the TLS cluster to be ok")
        yield [f"rediss://{n.address}" for n in nodes], ca
    finally:
        for node in nodes:
            kill_node(node)


def test_a_job_goes_round_trip_on_a_tls_cluster(tls_cluster):
    urls, ca = tls_cluster
    clients.close_all()
    with override_settings(QLESS={"default": {"CLUSTER": urls, "SHARDS": 4,
                                              "SSL_CA_CERTS": str(ca)}}):
        sharded = get_client()
        assert isinstance(sharded, ShardedClient)
        shard = sharded.for_queue(QUEUE)
        jid = shard.queues[QUEUE].put("tests.app.jobs.Add", {"a": 1})
        found = sharded.find_job(jid)
        assert found is not None and found.queue_name == QUEUE and found.state == "waiting"
        job = shard.queues[QUEUE].pop()
        assert job is not None and job.jid == jid
        assert job.complete() == "complete"
        done = sharded.find_job(jid)
        assert done is not None and done.state == "complete"
        clients.close_all()


def test_an_unverified_tls_cluster_is_refused(tls_cluster):
    urls, _ = tls_cluster
    clients.close_all()
    # No CA given: the default SSL_CERT_REQS "required" refuses the self-signed chain.
    with override_settings(QLESS={"default": {"CLUSTER": urls, "SHARDS": 4}}):
        with pytest.raises(QlessConnectionError, match="(?i)certificate verify failed") as info:
            get_client()
        assert "cannot read the slot map of QLESS['default']" in str(info.value)
    clients.close_all()
