"""The engine on a real cluster: one complete qless keyspace per hash tag, each on its node."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from redis.cluster import RedisCluster

from django_qless.core.engine.lua import function_name, library_text, script_sha, script_text
from testservers.cluster import LocalCluster
from testservers.redis_server import redis_version

__all__: list[str] = []

TAGS = [f"s{i}" for i in range(6)]


def major(cluster: LocalCluster) -> int:
    """Return the server's major version."""
    return int(redis_version(cluster.binary).split(".")[0])


def cycle(call: Any, prefix: str, jid: str) -> None:
    """put, pop and complete one job in the keyspace of `prefix` through `call`."""
    now = time.time()
    assert call(prefix, "put", now, "", "q", jid, "K", '{"n": 1}', 0) == jid
    [job] = json.loads(call(prefix, "pop", now, "q", "w1", 1))
    assert job["jid"] == jid and job["worker"] == "w1"
    assert call(prefix, "complete", now, jid, "w1", "q", "{}") == "complete"
    assert json.loads(call(prefix, "get", now, jid))["state"] == "complete"


def check_placement(cluster: LocalCluster, prefix: str, jid: str) -> None:
    """Every key of the keyspace is on the primary owning its slot, and only there."""
    owner = cluster.primary_for_key(prefix)
    slot = cluster.slot_for_key(prefix)
    pattern = prefix.replace("{", "\\{").replace("}", "\\}") + "*"
    mine = sorted(owner.conn().scan_iter(match=pattern, count=1000))
    assert f"{prefix}j:{jid}" in mine and f"{prefix}completed" in mine
    assert all(cluster.slot_for_key(k) == slot for k in mine)
    assert int(owner.conn().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)) == len(mine)
    for other in cluster.primaries():
        if other.port != owner.port:  # (a key read there would be MOVED: SCAN is local)
            assert not list(other.conn().scan_iter(match=pattern, count=1000))


def test_shards_spread_over_the_primaries(cluster: LocalCluster, rc: RedisCluster) -> None:
    """s0..s5 land on every primary (so the tests below exercise all three)."""
    owners = {cluster.primary_for_key(f"ql:{{{t}}}:").port for t in TAGS}
    assert len(owners) == len(cluster.primaries()) == 3


def test_fcall_put_pop_complete_per_shard(cluster: LocalCluster, rc: RedisCluster) -> None:
    """FCALL with KEYS[1] = the prefix is routed to the shard's node and stays there."""
    if major(cluster) < 7:
        pytest.skip("FUNCTION needs Redis 7+ or Valkey")
    for node in cluster.primaries():
        node.conn().function_load(library_text(), replace=True)
    name = function_name()

    def call(prefix: str, *argv: Any) -> Any:
        return rc.fcall(name, 1, prefix, *argv)

    for tag in TAGS:
        prefix = f"ql:{{{tag}}}:"
        cycle(call, prefix, f"f-{tag}")
        check_placement(cluster, prefix, f"f-{tag}")


def test_evalsha_put_pop_complete_per_shard(cluster: LocalCluster, rc: RedisCluster) -> None:
    """EVALSHA with the prefix as its one key works the same way."""
    for node in cluster.primaries():
        assert node.conn().script_load(script_text()) == script_sha()

    def call(prefix: str, *argv: Any) -> Any:
        return rc.evalsha(script_sha(), 1, prefix, *argv)

    for tag in TAGS:
        prefix = f"ql:{{{tag}}}:"
        cycle(call, prefix, f"e-{tag}")
        check_placement(cluster, prefix, f"e-{tag}")


def test_shard_events_are_sharded_channels(cluster: LocalCluster, rc: RedisCluster) -> None:
    """On Redis 7+ a shard's events go out with SPUBLISH on its own slot's channels."""
    if major(cluster) < 7:
        pytest.skip("sharded pub/sub needs Redis 7+ or Valkey")
    for node in cluster.primaries():
        node.conn().script_load(script_text())
    prefix = "ql:{s4}:"
    pubsub = cluster.primary_for_key(prefix).conn().pubsub()
    pubsub.ssubscribe(f"{prefix}log")
    assert pubsub.get_message(timeout=2.0)["type"] == "ssubscribe"
    rc.evalsha(script_sha(), 1, prefix, "put", time.time(), "", "q", "ev", "K", "{}", 0)
    msg = pubsub.get_message(timeout=2.0)
    pubsub.close()
    assert msg is not None and msg["type"] == "smessage" and msg["channel"] == f"{prefix}log"
    assert json.loads(msg["data"]) == {"jid": "ev", "event": "put", "queue": "q"}
