"""`client.throttles.list()`: every throttle the engine knows, with its counts."""

from __future__ import annotations

import pytest

from django_qless.core import Client, Queue
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.throttle import ThrottleStatus, queue_throttle_id


def test_lists_defined_held_and_waited_throttles(client: Client, q: Queue) -> None:
    assert client.throttles.list() == []
    client.throttles["named"].set(1, ttl=100)
    client.throttles["idle"].set(4)
    q.set_throttle(3)
    q.put("K", {}, jid="a", throttles=["named", "undefined"], priority=10)
    q.put("K", {}, jid="b", throttles=["named"])
    assert {j.jid for j in q.pop(2)} == {"a"}  # b waits for "named"
    listed = {t.id: t for t in client.throttles.list()}
    assert sorted(listed) == ["idle", "named", queue_throttle_id("q"), "undefined"]
    named = listed["named"]
    assert (named.maximum, named.running, named.pending) == (1, 1, 1)
    assert 0 < named.ttl <= 100 and named.defined
    assert listed["idle"] == ThrottleStatus("idle", 4, -1, 0, 0)
    assert listed[queue_throttle_id("q")] == ThrottleStatus(queue_throttle_id("q"), 3, -1, 1, 0)
    # Held without a definition (unlimited): listed, and marked as not defined.
    assert listed["undefined"] == ThrottleStatus("undefined", 0, -2, 1, 0)
    assert not listed["undefined"].defined


def test_an_id_ending_like_a_holders_key_is_its_own_throttle(client: Client) -> None:
    client.throttles["x-locks"].set(2)
    assert [t.id for t in client.throttles.list()] == ["x-locks"]


def test_list_is_capped(client: Client) -> None:
    for i in range(5):
        client.throttles[f"t{i}"].set(1)
    assert len(client.throttles.list(limit=3)) == 3
    with pytest.raises(InvalidArgument):
        client.throttles.list(limit=0)
