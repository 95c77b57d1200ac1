"""Rate limit tests: the engine called raw (tests/core's harness) and through the client."""

from __future__ import annotations

from tests.app.test_cluster_django import local, on_cluster  # noqa: F401 (fixtures)
from tests.cluster.conftest import cluster, rc  # noqa: F401 (fixtures)
from tests.cluster.shard_workers import sharded, start  # noqa: F401 (fixtures)
from tests.core.conftest import client, clock, events, lua, q  # noqa: F401 (fixtures)
from tests.core.handoff_listener import listen  # noqa: F401 (fixture)
from tests.worker.conftest import start_worker, work_dir  # noqa: F401 (fixtures)
