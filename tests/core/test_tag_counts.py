"""Counts of the top tags."""

from __future__ import annotations

from django_qless.core import Client, Queue
from django_qless.core.console.tag_counts import tag_counts


def test_tag_counts_follow_the_jobs(client: Client, q: Queue) -> None:
    for i in range(3):
        q.put("K", {}, jid=f"j{i}", tags=["a", "b"] if i else ["a"])
    assert tag_counts(client, ["a", "b", "unused"]) == {"a": 3, "b": 2, "unused": 0}
    client.jobs["j1"].cancel()
    assert tag_counts(client, ["a", "b"]) == {"a": 2, "b": 1}
    assert tag_counts(client, []) == {}
