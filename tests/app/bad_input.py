"""The database every bad-input test starts from: one of each kind of thing."""

from __future__ import annotations

from typing import Any

from django_qless.core.client import Client

__all__ = ["populate"]

ADD = "tests.app.jobs.add"
BOOM = "tests.app.jobs.boom"
ARGS: dict[str, Any] = {"args": [1], "kwargs": {}}


def populate(client: Client) -> None:
    """Put a waiting job, a dependency pair, a recurring job, a failed job and a throttle."""
    queue = client.queues["default"]
    queue.put(ADD, ARGS, jid="exists")
    queue.put(ADD, ARGS, jid="parent")
    queue.put(ADD, ARGS, jid="child", depends=["parent"])
    queue.recur(ADD, ARGS, 3600, jid="nightly", offset=3600)
    client.throttles["api"].set(2)
    client.config["grace-period"] = 15
    client.queues["failing"].put(BOOM, {"args": [], "kwargs": {}}, jid="bad")
    popped = client.queues["failing"].pop()
    assert popped is not None and popped.jid == "bad"
    popped.fail("grp", "boom")
