"""LocalCluster is a real cluster, and each fault operation does what tests rely on.

Everything is checked through redis-py's own `RedisCluster` client (redirects, retries,
topology refresh) and through direct connections to single nodes.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.exceptions import AskError, MovedError, TryAgainError
from redis.retry import Retry

from django_qless.core.cluster.view import read_view
from tests.helpers import wait_until
from testservers.cluster import SLOTS, LocalCluster
from testservers.redis_server import redis_version

# A tiny function library (not the engine): one writing and one read-only function.
LIBRARY = """#!lua name=qltest
redis.register_function('qltest_incr', function(keys, args)
  return redis.call('INCRBY', keys[1], args[1])
end)
redis.register_function{function_name='qltest_get', flags={'no-writes'},
  callback=function(keys) return redis.call('GET', keys[1]) end}
"""


def major(cluster: LocalCluster) -> int:
    """Return the server's major version (Valkey 8 counts as 8)."""
    return int(redis_version(cluster.binary).split(".")[0])


def needs_functions(cluster: LocalCluster) -> None:
    """Skip on servers without FUNCTION (Redis before 7)."""
    if major(cluster) < 7:
        pytest.skip("FUNCTION LOAD needs Redis 7+ or Valkey")


def write_acked(cluster: LocalCluster, keys: list[str], replicas: int = 1) -> None:
    """SET each key to its own name on its primary, then WAIT until `replicas` have it.

    Replication is asynchronous: a write acknowledged to the client but not yet sent to a
    replica is lost when its primary dies and that replica takes over. WAIT makes the test's
    writes durable across one failover; a job queue's writes without it are not.
    """
    by_primary: dict[int, list[str]] = {}
    for key in keys:
        by_primary.setdefault(cluster.primary_for_key(key).port, []).append(key)
    for port, group in by_primary.items():
        node = cluster.node(port)
        for key in group:
            node.call("SET", key, key)
        assert int(node.call("WAIT", replicas, 5000)) >= replicas


def test_cluster_is_real(cluster: LocalCluster) -> None:
    nodes = cluster.nodes()
    assert len(nodes) == 6 and all(n.running for n in nodes)
    assert len(cluster.primaries()) == 3
    for primary in cluster.primaries():
        assert len(cluster.replicas(of=primary)) == 1
    for node in nodes:
        info = node.call("CLUSTER", "INFO")
        assert "cluster_state:ok" in info and "cluster_size:3" in info
        assert "cluster_known_nodes:6" in info
        server = node.conn().info("server")
        assert server["tcp_port"] == node.port
        assert ("valkey_version" in server) == (cluster.kind == "valkey")
        assert node.call("CONFIG", "GET", "bind")["bind"] == "127.0.0.1"
    assert sum(last - first + 1 for first, last, _ in cluster.view().ranges) == SLOTS
    assert cluster.startup_seconds < 15


def test_same_hash_tag_one_slot_one_primary(cluster: LocalCluster, rc: RedisCluster) -> None:
    keys = ["ql:{s3}:q:emails-work", "ql:{s3}:j:abc", "ql:{s3}:config", "ql:{s3}:w:worker-1"]
    slots = {cluster.slot_for_key(k) for k in keys}
    assert len(slots) == 1 and slots == {rc.keyslot("{s3}")}
    for key in keys:
        rc.set(key, "v")
    owner = cluster.primary_for_key(keys[0])
    assert owner.call("EXISTS", *keys) == len(keys)
    for other in cluster.primaries():
        if other is not owner:
            assert other.call("DBSIZE") == 0
    # A multi-key script over one tag runs on one node; keys of two tags are refused.
    script = "return redis.call('MGET', KEYS[1], KEYS[2])"
    assert rc.eval(script, 2, keys[0], keys[1]) == ["v", "v"]
    other_tag = next(f"ql:{{s{i}}}:x" for i in range(100)
                     if cluster.primary_for_key(f"ql:{{s{i}}}:x") is not owner)
    with pytest.raises(redis.ResponseError, match="same slot"):
        owner.call("EVAL", script, 2, keys[0], other_tag)


def test_function_loaded_on_every_primary_and_fcall_routed_by_key(
    cluster: LocalCluster, rc: RedisCluster
) -> None:
    needs_functions(cluster)
    key = "ql:{s1}:counter"
    with pytest.raises(redis.ResponseError, match="(?i)function not found"):
        rc.fcall("qltest_incr", 1, key, 1)
    for primary in cluster.primaries():
        assert primary.call("FUNCTION", "LOAD", LIBRARY) == "qltest"
    tags = [f"{{s{i}}}" for i in range(30)]
    assert len({cluster.primary_for_key(t).port for t in tags}) == 3  # every primary used
    for i, tag in enumerate(tags):
        assert rc.fcall("qltest_incr", 1, f"ql:{tag}:counter", i + 1) == i + 1
        assert rc.fcall_ro("qltest_get", 1, f"ql:{tag}:counter") == str(i + 1)
        # The call ran on the key's primary: the value is there and nowhere else.
        assert cluster.primary_for_key(tag).call("GET", f"ql:{tag}:counter") == str(i + 1)
    # FUNCTION LOAD replicates: every replica has the library too (a promoted one keeps it).
    for replica in cluster.replicas():
        wait_until(lambda r=replica: r.call("FUNCTION", "LIST", "LIBRARYNAME", "qltest"), 5)


def test_kill_primary_promotes_its_replica(cluster: LocalCluster, rc: RedisCluster) -> None:
    keys = [f"ql:{{k}}:j:{i}" for i in range(50)] + [f"ql:{{other{i}}}:x" for i in range(20)]
    write_acked(cluster, keys)
    victim = cluster.primary_for_key(keys[0])
    heir = cluster.replicas(of=victim)[0]
    started = time.monotonic()
    promoted = cluster.kill_primary(victim)
    took = time.monotonic() - started
    assert promoted is heir and not victim.running
    assert cluster.primary_for_key(keys[0]) is heir
    assert heir.call("ROLE")[0] == "master"
    assert took < 15, f"failover took {took:.1f}s"
    # The client made before the kill finds the new primary and every acknowledged write.
    assert rc.mget(keys[:50]) == keys[:50]
    assert [rc.get(k) for k in keys[50:]] == keys[50:]
    rc.set(keys[0], "after")
    assert heir.call("GET", keys[0]) == "after"
    # restart: the old primary comes back as a replica of the one that took over.
    cluster.restart(victim)
    assert cluster.view().primary_of[victim.port] == heir.port
    assert victim.call("ROLE")[3] == "connected"


def test_failover_swaps_roles_and_keeps_data(cluster: LocalCluster, rc: RedisCluster) -> None:
    needs_functions(cluster)
    keys = [f"ql:{{f}}:j:{i}" for i in range(50)]
    write_acked(cluster, keys)
    rc.function_load(LIBRARY)  # on every primary, and replicated
    old = cluster.primary_for_key(keys[0])
    replica = cluster.replicas(of=old)[0]
    cluster.failover(replica)
    view = cluster.view()
    assert view.primary_of[replica.port] is None
    assert view.primary_of[old.port] == replica.port
    assert rc.mget(keys) == keys
    # The promoted replica already has the library: FCALL works with no reload.
    assert rc.fcall("qltest_incr", 1, "ql:{f}:n", 2) == 2
    assert replica.call("GET", "ql:{f}:n") == "2"


def test_migrate_slot_moves_keys_and_clients_follow(
    cluster: LocalCluster, rc: RedisCluster
) -> None:
    keys = [f"ql:{{m}}:j:{i}" for i in range(250)]
    for key in keys:
        rc.set(key, key)
    slot = cluster.slot_for_key(keys[0])
    source = cluster.primary_for_slot(slot)
    target = next(p for p in cluster.primaries() if p is not source)
    assert cluster.migrate_slot(slot, target, batch=100) == 250
    assert cluster.primary_for_slot(slot) is target
    for node in cluster.running():  # every node agrees
        assert read_view(node.conn()).owner(slot) == target.port
    assert source.call("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    assert target.call("CLUSTER", "COUNTKEYSINSLOT", slot) == 250
    # The client still routes by the old map: MOVED sends it to the new owner.
    assert rc.mget(keys) == keys
    with pytest.raises(MovedError, match=f"^{slot} 127.0.0.1:{target.port}$"):
        source.call("GET", keys[0])


def test_migrate_slot_half_way_redirects_with_ask(
    cluster: LocalCluster, rc: RedisCluster
) -> None:
    keys = [f"ql:{{h}}:j:{i:03d}" for i in range(60)]
    for key in keys:
        rc.set(key, key)
    slot = cluster.slot_for_key(keys[0])
    source = cluster.primary_for_slot(slot)
    target = next(p for p in cluster.primaries() if p is not source)
    asking_before = target.conn().info("commandstats").get("cmdstat_asking", {}).get("calls", 0)
    seen: list[int] = []

    def half_way(moved: int) -> None:
        if seen:
            return
        seen.append(moved)
        on_source = set(source.call("CLUSTER", "GETKEYSINSLOT", slot, 100))
        gone = [k for k in keys if k not in on_source]
        still = [k for k in keys if k in on_source]
        with pytest.raises(AskError, match=f"^{slot} 127.0.0.1:{target.port}$"):
            source.call("GET", gone[0])  # asked directly, the source points to the target
        assert len(gone) == moved == 20 and len(still) == 40
        # Mid-move, CLUSTER NODES marks the slot [slot->-target] on the source and
        # [slot-<-source] on the target; both still name the source as owner.
        assert f"[{slot}->-{target.node_id}]" in source.call("CLUSTER", "NODES")
        assert read_view(source.conn()).owner(slot) == source.port
        assert read_view(target.conn()).owner(slot) == source.port
        # Reads and writes of moved or new keys are redirected with ASK, and succeed.
        assert rc.get(gone[0]) == gone[0]
        rc.set("ql:{h}:new", "n")
        assert "ql:{h}:new" in target.call("CLUSTER", "GETKEYSINSLOT", slot, 100)
        assert rc.get(still[0]) == still[0]
        # A multi-key command over keys on both sides is refused until the move ends
        # (what a multi-key engine call would see mid-migration): TRYAGAIN on Redis 7 and
        # Valkey, ASK on Redis 6.2.
        with pytest.raises(TryAgainError if major(cluster) >= 7 else AskError):
            source.call("MGET", gone[0], still[0])

    assert cluster.migrate_slot(slot, target, batch=20, on_batch=half_way) == 60
    assert seen == [20]
    asking = target.conn().info("commandstats")["cmdstat_asking"]["calls"]
    assert asking > asking_before
    assert rc.mget(keys) == keys and rc.get("ql:{h}:new") == "n"


def test_migrate_slot_while_writes_flow(cluster: LocalCluster, rc: RedisCluster) -> None:
    counters = [f"ql:{{w}}:c{i}" for i in range(40)]
    for key in counters:
        rc.set(key, 0)
    acked = [0] * len(counters)
    errors: list[BaseException] = []
    stop = threading.Event()
    writer_rc = cluster.client(retry=Retry(ExponentialBackoff(cap=0.2, base=0.01), 10))

    def writer() -> None:
        # Bounded: at most 50,000 INCRs and 30 s, whichever comes first.
        deadline = time.monotonic() + 30
        for n in range(50_000):
            if stop.is_set() or time.monotonic() > deadline:
                return
            i = n % len(counters)
            try:
                writer_rc.incr(counters[i])
            except redis.RedisError as exc:
                errors.append(exc)
                return
            acked[i] += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        wait_until(lambda: sum(acked) >= 300, 10)
        slot = cluster.slot_for_key(counters[0])
        source = cluster.primary_for_slot(slot)
        target = next(p for p in cluster.primaries() if p is not source)
        before = sum(acked)
        asking = target.conn().info("commandstats").get("cmdstat_asking", {}).get("calls", 0)
        mid: list[int] = []

        def pause(_moved: int) -> None:
            mid.append(sum(acked))
            time.sleep(0.02)  # let the writer meet keys on both sides

        # Small batches: several rounds, so the writer meets keys on both sides (ASK).
        cluster.migrate_slot(slot, target, batch=4, on_batch=pause)
        after = sum(acked)
        asked = target.conn().info("commandstats")["cmdstat_asking"]["calls"] - asking
        wait_until(lambda: sum(acked) >= after + 300 or not thread.is_alive(), 10)
    finally:
        stop.set()
        thread.join(timeout=30)
        writer_rc.close()
    assert not thread.is_alive()
    assert errors == []
    assert len(mid) == 10 and before >= 300 and sum(acked) >= after + 300
    assert mid[-1] > mid[0], "no write was acknowledged while the slot was half moved"
    assert asked > 0, "no write was redirected with ASK"
    assert cluster.primary_for_slot(slot) is target
    # Every acknowledged INCR is counted exactly once, nothing else is.
    assert [int(v) for v in rc.mget(counters)] == acked


def test_added_node_has_no_functions_until_loaded(
    cluster: LocalCluster, rc: RedisCluster
) -> None:
    """A new primary given a slot starts without the library (the engine must load it there);
    a new replica gets it with its first sync."""
    needs_functions(cluster)
    rc.function_load(LIBRARY)  # on every primary of the moment
    key = "ql:{n}:count"
    slot = cluster.slot_for_key(key)
    owner = cluster.primary_for_slot(slot)
    fresh = cluster.add_node()
    replica = None
    try:
        assert fresh in cluster.primaries() and cluster.view().slots_of(fresh.port) == []
        assert "cluster_known_nodes:7" in owner.call("CLUSTER", "INFO")
        assert fresh.call("FUNCTION", "LIST") == []
        cluster.migrate_slot(slot, fresh)
        with pytest.raises(redis.ResponseError, match="(?i)function not found"):
            rc.fcall("qltest_incr", 1, key, 1)
        fresh.call("FUNCTION", "LOAD", LIBRARY)
        assert rc.fcall("qltest_incr", 1, key, 1) == 1
        replica = cluster.add_node(replica_of=fresh)
        assert cluster.replicas(of=fresh) == [replica]
        assert replica.call("FUNCTION", "LIST", "LIBRARYNAME", "qltest")
        assert replica.call("ROLE")[3] == "connected"
    finally:
        if replica is not None:
            cluster.remove_node(replica)
        if cluster.primary_for_slot(slot) is fresh:
            cluster.migrate_slot(slot, owner)
        cluster.remove_node(fresh)
    assert rc.get(key) == "1"
    for node in cluster.running():
        assert "cluster_known_nodes:6" in node.call("CLUSTER", "INFO")
    assert len(cluster.nodes()) == 6


def test_freeze_primary_then_thaw_demotes_it(cluster: LocalCluster, rc: RedisCluster) -> None:
    """A hung primary (SIGSTOP) is replaced like a dead one; thawed, it comes back as a
    replica of its successor and takes its data."""
    keys = [f"ql:{{z}}:j:{i}" for i in range(20)]
    write_acked(cluster, keys)
    victim = cluster.primary_for_key(keys[0])
    heir = cluster.freeze(victim)
    assert victim.alive and victim.frozen and not victim.running
    assert heir in cluster.primaries() and cluster.primary_for_key(keys[0]) is heir
    assert rc.mget(keys) == keys  # the client times out on the frozen node and moves on
    rc.set(keys[0], "after")
    cluster.thaw(victim)
    assert cluster.view().primary_of[victim.port] == heir.port
    assert victim.call("ROLE")[3] == "connected"

    def read_on_replica() -> bool:
        # READONLY and GET on one connection: a replica serves reads only so.
        pipe = victim.conn().pipeline(transaction=False)
        return bool(pipe.execute_command("READONLY").get(keys[0]).execute()[1] == "after")

    wait_until(read_on_replica, 10)  # the thawed node caught up with its new primary
