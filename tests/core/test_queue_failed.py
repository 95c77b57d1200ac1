"""A queue's failed jobs, found through the failure groups."""

from __future__ import annotations

from django_qless.core import Client, Queue
from django_qless.core.console.queue_failed import failed_of_queues


def test_failed_jobs_are_sorted_by_queue_and_capped(client: Client, q: Queue) -> None:
    other = client.queues["other"]
    for i in range(3):
        q.put("K", {}, jid=f"q{i}")
        q.pop().fail("g1" if i else "g2", "x")  # type: ignore[union-attr]
    other.put("K", {}, jid="o")
    other.pop().fail("g1", "x")  # type: ignore[union-attr]
    found = failed_of_queues(client)
    assert found.count("q") == 3 and found.count("other") == 1 and not found.capped
    assert sorted(found.jids["q"]) == ["q0", "q1", "q2"]
    only = failed_of_queues(client, ["other"])
    assert list(only.jids) == ["other"]
    capped = failed_of_queues(client, scan=2)
    assert capped.capped and sum(len(v) for v in capped.jids.values()) == 2
