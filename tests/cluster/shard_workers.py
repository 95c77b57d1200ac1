"""Fixtures for tests that run real `qless-worker --cluster` processes over SHARDS shards:
`sharded` (a ShardedClient over the cluster) and `start` (starts workers, all killed at
teardown). Registered in tests/cluster/conftest.py; a module may define its own `sharded`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from django_qless.core.cluster.sharded import ShardedClient
from tests.helpers import WorkerProcess
from testservers.cluster import LocalCluster

__all__ = ["SHARDS", "sharded", "start"]

SHARDS = 6  # two per primary of the 3-primary test clusters


@pytest.fixture
def sharded(cluster: LocalCluster, rc: RedisCluster) -> Iterator[ShardedClient]:
    """A ShardedClient of SHARDS shards over the cluster."""
    client = ShardedClient(rc, shards=SHARDS)
    yield client
    client.close()


@pytest.fixture
def start(cluster: LocalCluster) -> Iterator[Callable[..., WorkerProcess]]:
    """Start `qless-worker --cluster ... --shards SHARDS` processes; all killed at teardown."""
    started: list[WorkerProcess] = []
    work_dir = Path(tempfile.mkdtemp(prefix="qless-shard-worker-"))

    def run(*args: str) -> WorkerProcess:
        urls = ",".join(f"redis://{n.address}" for n in cluster.primaries())
        worker = WorkerProcess(f"redis://{cluster.primaries()[0].address}",
                               ["--cluster", urls, "--shards", str(SHARDS), *args], work_dir)
        started.append(worker)
        return worker

    yield run
    for worker in started:
        worker.kill_all()
    shutil.rmtree(work_dir, ignore_errors=True)
