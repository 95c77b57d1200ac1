"""A worker stops listening in a shard its queue moved away from (ShardFollower,
core/cluster/follow.py), once no job of its own runs there: real `--cluster` workers,
serial and forking, and a real QueueMove."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

import pytest
from redis.cluster import RedisCluster

from django_qless.core.client import Client
from django_qless.core.cluster.queue_move import QueueMove
from django_qless.core.cluster.sharded import ShardedClient
from tests.cluster.test_channels_per_node import primary_port, until
from tests.helpers import WorkerProcess, alive
from tests.worker.jobs import ledger
from testservers.cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


def heard_in(cluster: LocalCluster, client: Client, worker: str) -> list[str]:
    """Return the worker's `w:` channels subscribed in `client`'s shard, on its primary."""
    node = cluster.primary_for_key(client.keyspace.prefix).conn()
    return list(node.execute_command("PUBSUB", "SHARDCHANNELS",
                                     client.keyspace.pattern(f"w:{worker}*")))


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_a_shard_left_by_the_queue_is_heard_until_the_job_there_ends_then_dropped(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess], processes: str,
) -> None:
    sharded.placement.record("mq", 0)
    source = sharded.for_queue("mq")
    # The target on the same primary: both shards' channels share the worker's connection
    # to it, so dropping the source is an SSUBSCRIBE released on a connection kept open.
    target = next(c for c in sharded.clients() if c.shard != source.shard
                  and primary_port(cluster, c) == primary_port(cluster, source))
    worker = start("-n", processes, "--name", "dropper", "mq")
    log = worker.stderr
    until(lambda: heard_in(cluster, source, "dropper"), 30, "the worker heard in the source")
    # A job taken in the source before the move, still running when the queue moves away.
    jid = source.queues["mq"].put("tests.worker.jobs.sleepy", {"seconds": 60})
    started = until(lambda: ledger(rc, "started", jid), 30, "the job to start")[0]
    moved: list[BaseException | None] = []

    def move() -> None:
        try:
            QueueMove(sharded, "mq", target.shard or "", settle=0.5, drain_timeout=60).run()
            moved.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            moved.append(exc)

    mover = threading.Thread(target=move)
    mover.start()
    try:
        # Once it sees that mq lives in the target only, the worker keeps the source
        # (its job runs there) and listens in the target too.
        until(lambda: f"no served queue in shard {source.shard} any more; listening there "
                      f"until our jobs there end" in log(), 30, log)
        until(lambda: heard_in(cluster, target, "dropper"), 30, "the worker heard in the target")
        assert heard_in(cluster, source, "dropper")
        assert "no longer listening there" not in log()
        # So a cancel there is heard at once (60 s job and lease: no heartbeat tells it).
        source.jobs[jid].cancel()
        until(lambda: f"canceled for job {jid}" in log()  # (the supervisor, or ...)
              or f"job {jid}: canceled event, aborting it" in log(), 15, log)  # (serial)
        if processes != "0":
            until(lambda: not alive(int(str(started["pid"]))), 15, "the child to be killed")
        mover.join(60)
        assert moved == [None]
        # Nothing of the worker's left there: the source is dropped, its channels released
        # (the connection to that primary stays, for the target).
        until(lambda: f"no served queue in shard {source.shard} any more: no longer "
                      f"listening there" in log(), 30, log)
        until(lambda: not heard_in(cluster, source, "dropper"), 15,
              "the source's channels to be released")
        assert heard_in(cluster, target, "dropper")
    finally:
        mover.join(60)
    assert not ledger(rc, "done", jid)
    # It serves mq in the target as before.
    jid = target.queues["mq"].put("tests.worker.jobs.ok", {})
    until(lambda: ledger(rc, "done", jid), 30, "a job of the target to run")
    worker.signal(signal.SIGQUIT)
    assert worker.wait(60) == 0
