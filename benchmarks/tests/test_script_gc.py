"""script_gc.py: which engine calls are slow for their command, and how far apart."""

from __future__ import annotations

import script_gc

from testservers.redis_server import RedisServer


def test_slow_calls_are_judged_against_their_own_commands_median() -> None:
    calls = [("put", 100), ("complete", 300)] * 30
    calls[10] = ("put", 260)  # 2.6x a put's median
    calls[21] = ("complete", 700)  # 2.3x a complete's: not slow
    calls[40] = ("put", 300)
    calls[50] = ("put", 1000)
    slow, spacing = script_gc.slow_spacing(calls)
    assert slow == [10, 40, 50]
    assert spacing == 20.0  # (30 and 10 apart)
    assert script_gc.slow_spacing([("put", 1)] * 5) == ([], 0.0)


def test_the_cycle_records_every_engine_call() -> None:
    with RedisServer() as server:  # (its own: the cycle changes SLOWLOG's settings)
        calls = script_gc.engine_calls(server.url, 5, 0.0)
    assert [c for c, _ in calls] == ["put", "complete", "reserve.wait"] * 5
    assert all(us >= 0 for _, us in calls)
