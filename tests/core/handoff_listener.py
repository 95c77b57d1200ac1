"""A worker's hand-off channel subscription for engine tests, and the fixture making them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tests.core.keyspace_mode import subscribe

__all__ = ["Listener", "listen"]


class Listener:
    """A worker's hand-off channel subscription (what makes it count as listening)."""

    def __init__(self, r: redis.Redis, worker: str) -> None:
        self.pubsub = r.pubsub()
        subscribe(self.pubsub, r, f"ql:hand:{worker}")
        assert self.pubsub.get_message(timeout=1.0)["type"] in ("subscribe", "ssubscribe")

    def jobs(self) -> list[dict[str, Any]]:
        """Return the jobs handed over since the last call."""
        got = []
        while (msg := self.pubsub.get_message(timeout=0.05)) is not None:
            if msg["type"] in ("message", "smessage"):
                got.append(json.loads(msg["data"]))
        return got


@pytest.fixture
def listen(r: redis.Redis) -> Iterator[Callable[[str], Listener]]:
    """Subscribe a worker's hand-off channel: `listen(worker)`; closed after the test."""
    made: list[Listener] = []

    def make(worker: str) -> Listener:
        made.append(Listener(r, worker))
        return made[-1]

    yield make
    for listener in made:
        listener.pubsub.close()
