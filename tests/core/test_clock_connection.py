"""The server clock reads TIME on the connection engine calls use: a long-lived client holds
one connection, not a second one opened by the clock's refresh once a minute."""

from __future__ import annotations

import redis

from django_qless.core.client import Client


def client_ids(r: redis.Redis) -> set[str]:
    return {str(c["id"]) for c in r.client_list()}


def test_a_clock_refresh_opens_no_second_connection(redis_url: str, r: redis.Redis) -> None:
    before = client_ids(r)
    client = Client(redis_url)
    try:
        client.queues["q"].put("tests.Job", {})  # the first call measures the clock too
        opened = client_ids(r) - before
        assert len(opened) == 1, opened
        for _ in range(3):
            client.server_clock.reset()  # as after a minute: the next call measures again
            client.queues["q"].put("tests.Job", {})
            assert client_ids(r) - before == opened
        assert client.server_clock.measurements == 4
    finally:
        client.close()
