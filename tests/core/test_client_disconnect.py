"""`Client.disconnect()` closes every connection the client keeps, and the client stays
usable: the next call opens one again."""

from __future__ import annotations

import redis

from django_qless.core.client import Client
from tests.helpers import wait_until


def client_ids(r: redis.Redis) -> set[str]:
    return {str(c["id"]) for c in r.client_list()}


def test_disconnect_closes_the_kept_connections_and_the_next_call_reconnects(
        redis_url: str, r: redis.Redis) -> None:
    before = client_ids(r)
    client = Client(redis_url)
    try:
        queue = client.queues["q"]
        queue.put("tests.Job", {})
        # a deferred call runs on a side connection, kept after it
        pending = client.channel.defer(("config.get", repr(client.now()), "heartbeat"))
        pending.reply()
        opened = client_ids(r) - before
        assert len(opened) == 2, opened  # the engine calls' and the side connection
        client.disconnect()
        # (Redis drops a closed connection at its next event loop turn)
        wait_until(lambda: not client_ids(r) & opened, timeout=5)
        job = queue.pop()
        assert job is not None and job.complete() == "complete"
        assert len(client_ids(r) - before) == 1
    finally:
        client.close()
