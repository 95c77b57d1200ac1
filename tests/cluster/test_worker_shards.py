"""A worker serving queues in several shards of a real cluster: real subprocess workers
started with `--cluster`, jobs from tests/worker/jobs.py, state read from the shards."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.registry import Registry
from django_qless.core.workers import SerialWorker, WorkerConfig
from tests.cluster.shard_workers import SHARDS
from tests.helpers import WorkerProcess, alive, cmdline, wait_until
from tests.worker.jobs import ledger
from testservers.cluster import ClusterNode, LocalCluster

pytestmark = pytest.mark.timeout(240)


def place_on_three_primaries(sharded: ShardedClient, cluster: LocalCluster,
                             names: tuple[str, ...] = ("qa", "qb", "qc")) -> dict[str, int]:
    """Record `names` on shards of different primaries; return queue -> primary port."""
    ports: dict[str, int] = {}
    names_left = list(names)
    for index in range(sharded.shards):
        port = cluster.primary_for_key(f"ql:{{{sharded.tags[index]}}}:").port
        if port not in ports.values() and names_left:
            name = names_left.pop(0)
            sharded.placement.record(name, index)
            ports[name] = port
    assert len(set(ports.values())) == len(names)
    return ports


def primary_of(cluster: LocalCluster, sharded: ShardedClient, queue: str) -> ClusterNode:
    return cluster.primary_for_key(f"ql:{{{sharded.shard_of(queue)}}}:")


def shard_subscribers(cluster: LocalCluster, sharded: ShardedClient, queue: str,
                      name: str) -> int:
    """Return the subscribers of channel `name` of `queue`'s shard on its primary now."""
    client = sharded.for_queue(queue)
    channel = client.keyspace.channel(name)
    reply = primary_of(cluster, sharded, queue).conn().execute_command(
        "PUBSUB", "SHARDNUMSUB", channel)
    return int(reply[1])


def test_a_forking_worker_runs_every_job_of_queues_on_three_primaries(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
) -> None:
    ports = place_on_three_primaries(sharded, cluster)
    jids = {q: [sharded.for_queue(q).queues[q].put("tests.worker.jobs.ok", {"i": i})
                for i in range(6)] for q in ports}
    worker = start("-n", "2", "--max-jobs", "18", ",".join(ports))
    assert worker.wait(120) == 0
    for queue, queue_jids in jids.items():
        shard = sharded.for_queue(queue)
        node = primary_of(cluster, sharded, queue).conn()
        for jid in queue_jids:
            assert shard.jobs[jid].state == "complete"
            # The job's data lives on its shard's primary only.
            assert node.hget(shard.keyspace.key(f"j:{jid}"), "state") == "complete"
    done = ledger(rc, "done")
    assert sorted(r["jid"] for r in done) == sorted(j for js in jids.values() for j in js)
    assert len({r["pid"] for r in done}) >= 1


def test_the_ordered_strategy_takes_queues_in_order_across_shards(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
) -> None:
    ports = place_on_three_primaries(sharded, cluster)
    queues = list(ports)  # qa, qb, qc: each on another primary
    by_jid = {}
    for queue in reversed(queues):  # put the last queue's jobs first
        for i in range(4):
            by_jid[sharded.for_queue(queue).queues[queue].put("tests.worker.jobs.ok",
                                                              {"i": i})] = queue
    worker = start("-n", "0", "--reserver", "ordered", "--max-jobs", "12", ",".join(queues))
    assert worker.wait(120) == 0
    ran = [by_jid[r["jid"]] for r in ledger(rc, "started")]
    assert ran == ["qa"] * 4 + ["qb"] * 4 + ["qc"] * 4


def test_a_wake_up_on_a_shard_starts_a_job_before_the_idle_interval(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
) -> None:
    ports = place_on_three_primaries(sharded, cluster, ("qa", "qb"))
    # Serial (no child's 1 s idle cap), no reaper, a 60 s safety interval: only the
    # wake-up can start the job within the bound below.
    worker = start("-n", "0", "--interval", "60", "--reap-interval", "0", "--name", "wk",
                   "qa,qb")
    for queue in ports:
        wait_until(lambda q=queue: shard_subscribers(cluster, sharded, q, f"wake:{q}") == 1,
                   30)
    # Several shards: no hand-off registration anywhere.
    for queue in ports:
        assert shard_subscribers(cluster, sharded, queue, "hand:wk") == 0
    # Idle: it reserved, found nothing, and waits (the title says so only then).
    wait_until(lambda: "idle waiting" in cmdline(worker.pid), 30)
    jid = sharded.for_queue("qb").queues["qb"].put("tests.worker.jobs.ok", {})
    wait_until(lambda: ledger(rc, "done", jid), 20)
    assert alive(worker.pid)


def test_a_worker_whose_queues_share_one_shard_takes_hand_offs(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
) -> None:
    sharded.placement.record("qa", 1)
    sharded.placement.record("qb", 1)
    worker = start("-n", "0", "--interval", "60", "--reap-interval", "0", "--name", "wk",
                   "qa,qb")
    wait_until(lambda: shard_subscribers(cluster, sharded, "qa", "hand:wk") == 1, 30)
    shard = sharded.for_queue("qa")
    idle = shard.keyspace.key("idle")
    # Registered idle in that shard: the engine pops the next job for it.
    wait_until(lambda: rc.hget(idle, "wk") is not None, 30)
    jid = sharded.for_queue("qb").queues["qb"].put("tests.worker.jobs.ok", {})
    wait_until(lambda: ledger(rc, "done", jid), 20)
    assert shard.jobs[jid].history[1]["worker"] == "wk"
    assert alive(worker.pid)


def test_a_job_canceled_in_its_shard_gets_its_child_killed(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
) -> None:
    place_on_three_primaries(sharded, cluster, ("qa", "qb"))
    worker = start("-n", "1", "--name", "wk", "qa,qb")
    first = worker.wait_children(1, 30)[0]
    jid = sharded.for_queue("qb").queues["qb"].put("tests.worker.jobs.sleep_long",
                                                   {"seconds": 120})
    wait_until(lambda: ledger(rc, "started", jid), 30)
    # The supervisor listens on the child's channel in qb's shard (sharded pub/sub): the
    # child took no job before Redis confirmed it (see the next test).
    assert shard_subscribers(cluster, sharded, "qb", "w:wk-0") == 1
    job = sharded.for_queue("qb").jobs[jid]
    assert job is not None
    job.cancel()
    # Killed on the canceled notice: well before a heartbeat (a third of 60 s) could tell.
    try:
        wait_until(lambda: not alive(first), 15)
    except AssertionError:
        raise AssertionError(worker.stderr()[-4000:]) from None
    assert f"child wk-0: canceled for job {jid}; killing it" in worker.stderr()
    replacement = worker.wait_children(1, 30)[0]
    assert replacement != first
    assert not ledger(rc, "done", jid)


def test_a_job_canceled_in_its_shard_before_its_start_report_gets_its_child_killed(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
) -> None:
    """tests/worker/late_start.py cancels the job between its pop and its start report: the
    supervisor hears the cancel in qb's shard first, then asks that shard at the start."""
    place_on_three_primaries(sharded, cluster, ("qa", "qb"))
    worker = start("-n", "1", "--name", "wk", "--import", "tests.worker.late_start", "qa,qb")
    first = worker.wait_children(1, 30)[0]
    wait_until(lambda: shard_subscribers(cluster, sharded, "qb", "w:wk-0") == 1, 30)
    jid = sharded.for_queue("qb").queues["qb"].put("tests.worker.jobs.sleep_long",
                                                   {"seconds": 120, "late": True})
    wait_until(lambda: ledger(rc, "popped", jid), 30)
    try:
        wait_until(lambda: not alive(first), 15)  # (its heartbeat: 20 s on)
    except AssertionError:
        raise AssertionError(worker.stderr()[-4000:]) from None
    assert f"child wk-0: job {jid} is no longer its own in Redis" in worker.stderr()
    assert not ledger(rc, "done", jid)


def test_a_child_takes_no_job_before_its_supervisor_listens_on_its_channel(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster, tmp_path: Path,
) -> None:
    """The supervisor stalls 2 s after forking (tests/cluster/slow_fork_jobs.py), before
    it subscribes to the child's channel. The child waits for it: the job waiting in qb
    starts only once that channel is heard, so a cancel sent as soon as it starts kills
    the child at once (else it would be heard only at the job's heartbeat, 20 s on)."""
    place_on_three_primaries(sharded, cluster, ("qa", "qb"))
    jid = sharded.for_queue("qb").queues["qb"].put("tests.worker.jobs.sleep_long",
                                                   {"seconds": 120})
    urls = ",".join(f"redis://{n.address}" for n in cluster.primaries())
    worker = WorkerProcess(f"redis://{cluster.primaries()[0].address}",
                           ["--cluster", urls, "--shards", str(SHARDS), "-n", "1", "--name",
                            "wk", "qa,qb"], tmp_path, jobs_module="tests.cluster.slow_fork_jobs")
    try:
        started = wait_until(lambda: ledger(rc, "started", jid), 30)[0]
        job = sharded.for_queue("qb").jobs[jid]
        assert job is not None
        job.cancel()
        try:
            wait_until(lambda: not alive(int(started["pid"])), 15)
        except AssertionError:
            raise AssertionError(worker.stderr()[-4000:]) from None
        assert f"child wk-0: canceled for job {jid}; killing it" in worker.stderr()
    finally:
        worker.kill_all()


def test_after_a_failover_the_worker_resubscribes_and_keeps_running_jobs_there(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
) -> None:
    place_on_three_primaries(sharded, cluster, ("qa", "qb"))
    worker = start("-n", "1", "--name", "wk", "qa,qb")
    worker.wait_children(1, 30)
    queue = sharded.for_queue("qb").queues["qb"]
    jid = queue.put("tests.worker.jobs.ok", {})
    wait_until(lambda: ledger(rc, "done", jid), 30)
    wait_until(lambda: shard_subscribers(cluster, sharded, "qb", "wake:qb") == 1, 30)
    old = primary_of(cluster, sharded, "qb")
    cluster.failover(cluster.replicas(old)[0])
    new = primary_of(cluster, sharded, "qb")
    assert new.port != old.port
    # The child's wake-up and the supervisor's child channel follow the shard to its new
    # primary.
    try:
        wait_until(lambda: shard_subscribers(cluster, sharded, "qb", "wake:qb") == 1, 30)
        wait_until(lambda: shard_subscribers(cluster, sharded, "qb", "w:wk-0") >= 1, 30)
    except AssertionError:
        raise AssertionError(worker.stderr()[-4000:]) from None
    jids = [queue.put("tests.worker.jobs.ok", {"i": i}) for i in range(5)]
    for one in jids:
        wait_until(lambda j=one: ledger(rc, "done", j), 30)
    assert alive(worker.pid)


def test_a_serial_worker_given_a_sharded_client_expands_patterns_in_every_shard(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
) -> None:
    ports = place_on_three_primaries(sharded, cluster, ("img.big", "img.small", "mail"))
    jids = {q: sharded.for_queue(q).queues[q].put("k", {}) for q in ports}
    ran: list[str] = []
    registry = Registry()
    registry.register("k", lambda job: ran.append(job.queue_name))
    urls = [f"redis://{n.address}" for n in cluster.primaries()]
    config = WorkerConfig(queues=("img.*",), processes=0, registry=registry, name="pw",
                          max_jobs=2, connect=lambda: ShardedClient(urls, shards=SHARDS))
    worker = SerialWorker(config, install_signals=False)
    assert isinstance(worker.client, ShardedClient)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    assert ran == ["img.big", "img.small"]  # patterns expand alphabetically
    for queue in ("img.big", "img.small"):
        assert sharded.for_queue(queue).jobs[jids[queue]].state == "complete"
    assert sharded.for_queue("mail").jobs[jids["mail"]].state == "waiting"


def test_manage_py_qless_worker_serves_a_cluster_alias_in_several_shards(
    cluster: LocalCluster, rc: RedisCluster,
) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLESS_")}
    env.update(DJANGO_SETTINGS_MODULE="tests.app.cluster_settings", PYTHONPATH=str(root),
               QLESS_CLUSTER=",".join(f"redis://{n.address}" for n in cluster.primaries()))
    # The settings pin alpha to shard 0 and gamma to shard 3 (of 4).
    sharded = ShardedClient(rc, shards=4, placement={"alpha": 0, "gamma": 3})
    try:
        assert sharded.shard_of("alpha") != sharded.shard_of("gamma")
        jids = {q: sharded.for_queue(q).queues[q].put("tests.app.jobs.echo",
                                                      {"args": [1], "kwargs": {}})
                for q in ("alpha", "gamma")}
        done = subprocess.run(
            [sys.executable, "-m", "django", "qless_worker", "alpha", "gamma",
             "--processes", "0", "--max-jobs", "2"],
            cwd=root, env=env, text=True, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        for queue, jid in jids.items():
            assert sharded.for_queue(queue).jobs[jid].state == "complete", done.stderr[-3000:]
    finally:
        sharded.close()
