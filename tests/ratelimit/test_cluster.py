"""A rate limit on a cluster: the limit lives in its queue's shard, and workers started with
`--cluster` drain the queue at the limited rate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis.cluster import RedisCluster

from django_qless import ratelimits
from django_qless.core.cluster.sharded import ShardedClient
from tests.helpers import WorkerProcess
from tests.ratelimit.admissions import AdmissionLog
from tests.worker.jobs import ledger
from testservers.cluster import LocalCluster

__all__: list[str] = []

pytestmark = pytest.mark.timeout(240)


def test_a_limited_queue_on_a_shard_drains_at_the_limited_rate(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
) -> None:
    shard = sharded.for_queue("qa")
    q = shard.queues["qa"]
    q.set_rate_limit("2/2s")
    for i in range(6):
        q.put("tests.worker.jobs.ok", {"i": i})
    log_key = shard.keyspace.key("rl:queue:qa-log")
    with AdmissionLog(rc, log_key) as log:
        worker = start("-n", "2", "--max-jobs", "6", "qa")
        assert worker.wait(120) == 0
    assert len(ledger(rc, "started")) == 6
    times = log.times()
    assert len(times) == 6
    for i in range(len(times) - 2):  # never 3 admissions within 2 s of the server's clock
        assert times[i + 2] - times[i] >= 2000, times
    # the budget is a key of the queue's shard (its hash tag: the same slot as the queue)
    node = cluster.primary_for_key(shard.keyspace.key(""))
    assert node.conn().exists(log_key) == 1
    status = q.rate_limit()
    assert status is not None and status.limit == 2 and status.period == 2.0


@pytest.mark.django_db(transaction=True)
def test_a_kind_limit_has_a_home_shard_and_refuses_jobs_of_another(on_cluster: Any) -> None:
    from django_qless.clients import get_client
    from django_qless.core.scheduling.ratelimit import RateLimitError
    from tests.ratelimit import jobs

    ratelimits._defined.clear()
    first = jobs.charge.using(queue="alpha", on_commit=False).enqueue("a")
    sharded = get_client()
    alpha = sharded.for_queue("alpha")
    status = alpha.rate_limits.get("kind", "tests.ratelimit.jobs.charge")
    assert first.jid and status is not None and status.rate == "2/m"
    with pytest.raises(RateLimitError, match=f"has its rate limit in shard {alpha.shard}, but "
                                             f"queue 'gamma' is in shard"):
        jobs.charge.using(queue="gamma", on_commit=False).enqueue("a")
    gamma = sharded.for_queue("gamma")
    assert gamma.rate_limits.get("kind", "tests.ratelimit.jobs.charge") is None
    assert len(gamma.queues["gamma"]) == 0
