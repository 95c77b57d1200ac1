"""Queue placement: shard tags spread over the slots, recorded placements that stay put when
shards are added, explicit overrides, racing clients that agree, the move marker."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

from django_qless.core.cluster.placement import (
    MAX_SHARDS,
    Placement,
    keyspace,
    shard_tag,
    target_slot,
)
from django_qless.core.cluster.transport import ClusterTransport
from django_qless.core.exceptions import InvalidArgument
from testservers.cluster import LocalCluster


@pytest.fixture
def transport(cluster: LocalCluster) -> Iterator[ClusterTransport]:
    """A transport on `cluster` (placement sends plain hash commands and small EVALs)."""
    t = ClusterTransport(cluster.client())
    yield t
    t.close()


def test_tags_spread_evenly_over_the_slots() -> None:
    # The documented mapping: slot bands in bit-reversal order, a stable table.
    assert [target_slot(i) for i in range(8)] == [0, 8192, 4096, 12288, 2048, 10240, 6144,
                                                  14336]
    for i in range(MAX_SHARDS):
        slot = key_slot(shard_tag(i).encode())
        assert target_slot(i) <= slot < target_slot(i) + 16
        assert shard_tag(i) == f"s{i}" or shard_tag(i).startswith(f"s{i}-")
    assert len({shard_tag(i) for i in range(MAX_SHARDS)}) == MAX_SHARDS
    # The first 2^k shards: one in each 1/2^k of the slot space, whatever k.
    for k in range(11):
        n = 2**k
        assert sorted(key_slot(shard_tag(i).encode()) * n // 16384 for i in range(n)) == \
            list(range(n))
    # Other counts stay close: over 3 equal ranges (3 primaries), 16 and 48 shards split
    # 6/5/5 and 17/16/15.
    for n, spread in ((16, 1), (48, 2)):
        per_third = Counter(key_slot(shard_tag(i).encode()) * 3 // 16384 for i in range(n))
        assert len(per_third) == 3 and max(per_third.values()) - min(per_third.values()) \
            <= spread, n
    with pytest.raises(InvalidArgument):
        target_slot(MAX_SHARDS)
    assert keyspace("s3") == "ql:{s3}:"


def test_shards_land_on_every_primary(cluster: LocalCluster, transport: ClusterTransport
                                      ) -> None:
    placement = Placement(transport, shards=16)
    owners = Counter(transport.primary_for(keyspace(tag)) for tag in placement.tags)
    # 6/5/5 on the cluster as created; earlier tests may have moved a slot or two since.
    assert set(owners) == set(transport.nodes()) and min(owners.values()) >= 4, owners


def test_recorded_placement_is_stable_when_shards_grow(transport: ClusterTransport) -> None:
    four = Placement(transport, shards=4)
    queues = [f"q{i}" for i in range(200)]
    before = {q: four.shard_of(q) for q in queues}
    assert set(before.values()) == set(four.tags)
    eight = Placement(transport, shards=8)
    assert eight.tags[:4] == four.tags  # growing adds shards, renames none
    assert {q: eight.shard_of(q) for q in queues} == before
    fresh = {eight.shard_of(f"new{i}") for i in range(200)}
    assert fresh == set(eight.tags)  # new queues use the new shards too
    assert sum(len(v) for v in eight.queues_by_shard().values()) == 400


def test_unrecorded_lookup_and_explicit_overrides(transport: ClusterTransport) -> None:
    placement = Placement(transport, shards=4, explicit={"emails": 3, "reports": "s1"})
    assert placement.shard_of("emails") == shard_tag(3)
    assert placement.shard_of("reports") == shard_tag(1)
    assert placement.recorded() == {}  # explicit queues need no record
    assert placement.shard_of("images", record=False) == placement.default_tag("images")
    assert placement.recorded() == {}
    assert placement.shard_of("images") == placement.default_tag("images")
    assert placement.recorded() == {"images": placement.default_tag("images")}
    assert placement.keyspace_of("emails") == f"ql:{{{shard_tag(3)}}}:"
    by_shard = placement.queues_by_shard()
    assert by_shard[shard_tag(3)] == ["emails"] and "reports" in by_shard[shard_tag(1)]
    with pytest.raises(InvalidArgument):
        Placement(transport, shards=4, explicit={"x": 4})
    with pytest.raises(InvalidArgument):
        placement.shard_of("bad name")


def test_racing_clients_agree(cluster: LocalCluster) -> None:
    """Two clients with different shard counts place the same new queues at once: every
    queue ends on one shard, the one both see."""
    transports = [ClusterTransport(cluster.client()) for _ in range(2)]
    placements = [Placement(transports[0], shards=4), Placement(transports[1], shards=16)]
    queues = [f"race{i}" for i in range(100)]
    results: list[dict[str, str]] = [{}, {}]
    barrier = threading.Barrier(2)

    def place(n: int) -> None:
        barrier.wait(timeout=10)
        for queue in queues:
            results[n][queue] = placements[n].record(queue)

    threads = [threading.Thread(target=place, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    try:
        assert results[0] == results[1] == placements[0].recorded()
        # Their defaults differ for most queues, so agreeing means reading the first write.
        differ = [q for q in queues if placements[0].default_tag(q) !=
                  placements[1].default_tag(q)]
        assert len(differ) > 50
    finally:
        for t in transports:
            t.close()


def test_spread_of_a_thousand_queues(transport: ClusterTransport) -> None:
    placement = Placement(transport, shards=16)
    counts = Counter(placement.default_tag(f"queue-{i}") for i in range(1000))
    mean = 1000 / 16
    assert len(counts) == 16
    assert all(0.65 * mean <= c <= 1.35 * mean for c in counts.values()), counts


def test_move_marker_and_switch(transport: ClusterTransport) -> None:
    placement = Placement(transport, shards=4, cache_seconds=60)
    source = placement.record("emails", "s0")
    assert source == shard_tag(0)
    with pytest.raises(InvalidArgument, match="not placed"):
        placement.mark_moving("never", "s1")
    assert placement.mark_moving("emails", "s2") == source
    assert placement.mark_moving("emails", "s2") == source  # repeat-safe
    with pytest.raises(InvalidArgument, match="cannot mark"):
        placement.mark_moving("emails", "s3")  # another move is marked
    assert placement.moving()["emails"]["to"] == shard_tag(2)
    assert placement.shard_of("emails") == source  # still served by the source
    assert not placement.switch("emails", "s1", "s2")  # wrong expectation: refused
    assert placement.switch("emails", "s0", "s2")
    assert placement.switch("emails", "s0", "s2")  # repeat-safe
    assert placement.shard_of("emails") == shard_tag(2) and placement.moving() == {}
    placement.mark_moving("emails", "s3")
    placement.clear_moving("emails")
    assert placement.moving() == {} and placement.shard_of("emails") == shard_tag(2)
