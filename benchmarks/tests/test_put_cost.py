"""put_cost.py: the hand-off cycle its `--handoff` callgrind run counts."""

from __future__ import annotations

import redis
from put_cost import handoff_cycle

from django_qless.core import Client


def test_handoff_cycle_hands_every_put_to_an_idle_worker_and_leaves_them_idle(
    redis_url: str,
) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.flushall()
    client = Client(redis_url)
    try:
        assert handoff_cycle(redis_url, client, 5, 2) == 5
        # Each job was handed off and completed; both workers are idle again, and nothing
        # is left waiting or locked.
        assert r.zcard("ql:completed") == 5
        assert sorted(r.zrange("ql:idle:bench", 0, -1)) == ["hand-0", "hand-1"]
        assert r.zcard("ql:q:bench-work") == r.zcard("ql:q:bench-locks") == 0
        # Without idle workers nothing is handed off.
        assert handoff_cycle(redis_url, client, 2, 0) == 0
    finally:
        client.close()
