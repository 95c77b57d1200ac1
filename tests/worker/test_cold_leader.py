"""A child that let its connections go (`--idle-disconnect`) and then becomes the idle leader
reserves before it subscribes: a job waiting for it starts after one reconnect, and a job put
while it reconnects is still taken, none lost."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.engine.pubsub import Hub, Subscription
from tests.worker.conftest import WorkerProcess, wait_until
from tests.worker.jobs import ledger
from tests.worker.test_idle_disconnect import SUPERVISOR, client_ids
from tests.worker.test_idle_leader import registered

pytestmark = pytest.mark.timeout(120)


@contextmanager
def monitored(redis_url: str) -> Iterator[list[str]]:
    """Collect the commands the server runs (MONITOR) while the block runs."""
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    seen: list[str] = []
    ready = threading.Event()

    def read() -> None:
        try:
            with conn.monitor() as monitor:
                ready.set()
                for command in monitor.listen():
                    seen.append(str(command["command"]))
        except (redis.RedisError, OSError, ValueError, AttributeError):
            pass  # closed below

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    ready.wait(5)
    time.sleep(0.1)  # (MONITOR confirmed before the block's first command)
    try:
        yield seen
    finally:
        time.sleep(0.1)
        conn.connection_pool.disconnect()
        thread.join(5)


def cold_worker(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess], n: int
) -> WorkerProcess:
    """Start `n` children that close their connections after 0.5 s without a lead change;
    return once only the leader is connected."""
    qless_client.queues["other"].put("tests.worker.jobs.ok", {})  # (opens the test's conns)
    before = client_ids(r)
    worker = start_worker("q", "-n", str(n), "--name", "cold", "--idle-disconnect", "0.5",
                          "--term-grace", "0")
    worker.wait_children(n)
    wait_until(lambda: registered(qless_client), timeout=15)
    time.sleep(1.0)  # (each waiting child listens until the lead is 0.5 s old)
    wait_until(lambda: len(client_ids(r) - before) <= 2 + SUPERVISOR, timeout=10)
    return worker


def engine_calls_of(commands: list[str], name: str) -> list[str]:
    """Return, in order, the engine commands (`reserve`, `reserve.wait`...) and subscribes
    that name the worker `name`."""
    out = []
    for line in commands:
        words = line.split()
        if words and words[0].upper() in ("FCALL", "EVALSHA") and name in words:
            if words[3] == "worker.beat":
                continue  # (the supervisor's beat, naming its children)
            out.append(words[3])  # FCALL fn 0 <command> ... / EVALSHA sha 0 <command> ...
        elif words and "SUBSCRIBE" in words[0].upper() and any(
                w.endswith(f"hand:{name}") for w in words):
            out.append("subscribe")
    return out


def test_a_reconnecting_leader_reserves_before_it_subscribes(
    qless_client: Client, r: redis.Redis, redis_url: str,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    worker = cold_worker(qless_client, r, start_worker, 2)
    queue = qless_client.queues["q"]
    with monitored(redis_url) as commands:
        # The leader is handed the first; the second waits in the queue, and its wake-up
        # ends the leader's hold: the token goes to the child that closed its connections.
        first = queue.put("tests.worker.jobs.sleepy", {"seconds": 3})
        second = queue.put("tests.worker.jobs.sleepy", {"seconds": 3})
        wait_until(lambda: ledger(r, "started", first) and ledger(r, "started", second),
                   timeout=15)
    (a,) = ledger(r, "started", first)
    (b,) = ledger(r, "started", second)
    assert a["pid"] != b["pid"]
    # Its first words to Redis: a plain reserve (no registration: nothing listens for a
    # hand-off yet), which takes the waiting job; no subscribe came first.
    calls = engine_calls_of(commands, b["worker"])
    assert calls[:1] == ["reserve"], calls
    worker.quit()


def test_jobs_put_while_the_token_comes_to_a_reconnecting_child_all_start(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
) -> None:
    # Each round: the leader takes a job longer than its hold, the token goes to a child
    # whose connections are closed, and a second job is put a few ms later, while that
    # child reconnects, reserves, subscribes and registers. The slow jobs outlast the test
    # (their children cannot take the job when they complete theirs), and the re-check
    # is a minute away (--interval 60): a wake-up missed there leaves the job waiting.
    delays = (0.0, 0.0005, 0.001, 0.002, 0.003, 0.005)
    worker = cold_worker(qless_client, r, start_worker, len(delays) + 2)
    queue = qless_client.queues["q"]
    late = []
    for delay in delays:
        wait_until(lambda: len(registered(qless_client)) == 1, timeout=10)
        time.sleep(0.8)  # (the waiting children let their connections go again)
        slow = queue.put("tests.worker.jobs.sleepy", {"seconds": 60})
        wait_until(lambda s=slow: ledger(r, "started", s), timeout=10)
        time.sleep(delay)
        jid = queue.put("tests.worker.jobs.ok", {})
        late.append(jid)
        wait_until(lambda j=jid: ledger(r, "done", j), timeout=15)
    assert all(qless_client.jobs[j].state == "complete" for j in late)
    worker.signal(signal.SIGTERM)  # (the slow jobs are aborted)
    worker.wait(30)


def test_pub_sub_connections_send_only_their_subscribe(
    qless_client: Client, r: redis.Redis
) -> None:
    # No CLIENT SETINFO (an error reply on Redis 7.0, a command on 7.2+ and Valkey), and
    # no INFO when the keyspace's channel kind is known (the default keyspace: plain).
    sub = Subscription(qless_client)
    assert sub.sharded is False

    def counts() -> tuple[int, int]:
        stats = r.info("stats")
        return int(stats["total_commands_processed"]), int(stats.get("total_error_replies", 0))

    commands, errors = counts()
    assert sub.subscribe(["ql:wake:q"]) == 1
    wait_until(lambda: (m := sub.get(timeout=0.1)) is not None and Subscription.confirms(m),
               timeout=5)
    after, errors_after = counts()
    sub.close()
    # The INFO that reads the counts is one; SUBSCRIBE the other.
    assert (after - commands, errors_after - errors) == (2, 0)


def test_a_shard_view_on_a_connection_opened_without_info_learns_the_version(
    qless_client: Client, redis_version_info: tuple[int, ...]
) -> None:
    # The default keyspace's view opens the connection without asking the version; a
    # shard's view that joins it asks (its channels are sharded on Redis 7+ only).
    hub = Hub()
    Subscription(qless_client, hub).connect()
    shard = Subscription(Client(qless_client.redis, keyspace="s1"), hub)  # (one pool)
    assert shard.sharded is None
    shard.connect()
    assert len(hub.nodes()) == 1
    assert shard.sharded is (redis_version_info[0] >= 7)
    hub.close()
