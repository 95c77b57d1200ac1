"""Worker info (engine `worker.hello` / `worker.info`): what the dashboard shows per worker."""

from __future__ import annotations

import pytest
import redis

from django_qless.core import Client, InvalidArgument
from tests.core.conftest import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(4_000_000.0)


def test_hello_then_counts_from_the_hot_path(client: Client, clock: FakeClock,
                                             r: redis.Redis) -> None:
    client.workers.hello("w1", "host-a", 4242, ["high", "low"])
    client.queues["high"].put("K", {}, jid="a")
    client.queues["high"].put("K", {}, jid="b")
    client.queues["high"].put("K", {}, jid="c")
    jobs, _ = client.reserve(["high"], count=1)
    clock.advance(5)
    _, jobs, _ = client.complete_and_reserve(jobs[0], ["high"], count=1)
    jobs[0].fail("boom", "it broke")
    [row] = client.workers.info()
    assert row == {"name": "w1", "last_seen": 4_000_005.0,
                   "host": "host-a", "pid": 4242, "queues": ["high", "low"],
                   "started": 4_000_000.0, "done": 1, "failed": 1}
    # A restart under the same name starts the counts again.
    client.workers.hello("w1", "host-a", 4243, ["high"])
    assert client.workers.info("w1")[0]["done"] == 0
    # Forgetting the worker drops its info as well.
    client.workers.deregister("w1")
    assert client.workers.info() == []
    assert not r.exists("ql:w:w1:info")


def test_stock_worker_has_no_host(client: Client) -> None:
    client.queues["q"].put("K", {}, jid="a")
    client.reserve(["q"])
    [row] = client.workers.info()
    assert row["name"] == "w1" and row["host"] is None and row["pid"] is None
    assert row["done"] == 0 and row["queues"] == []


@pytest.mark.parametrize("args", [("w1", "bad host", 1, ["q"]), ("w1", "h", -1, ["q"])])
def test_hello_refuses_bad_input(client: Client, args: tuple) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidArgument):
        client.workers.hello(*args)
