"""Cron schedule fixtures: a core client on a settable clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from django_qless.core.client import Client
from tests.worker.conftest import start_worker, work_dir  # noqa: F401 - worker fixtures


class Clock:
    """A settable test clock (epoch seconds) for `Client(_clock=...)`."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at

    def set(self, zone: str, *parts: int, fold: int = 0) -> float:
        """Move to a wall time in `zone` (year, month, day, hour, minute); return it."""
        when = datetime(*parts, tzinfo=ZoneInfo(zone), fold=fold)  # type: ignore[misc]
        self.at = when.timestamp()
        return self.at


@pytest.fixture
def clock() -> Clock:
    return Clock(1_800_000_000.0)


@pytest.fixture
def client(redis_url: str, clock: Clock) -> Iterator[Client]:
    c = Client(redis_url, worker_name="w1", _clock=clock)
    yield c
    c.close()


def drain(client: Client, queue: str = "q") -> list[tuple[str, float]]:
    """Pop and complete every job `queue` offers now; return (jid, put time) pairs."""
    out = []
    while (job := client.queues[queue].pop()) is not None:
        out.append((job.jid, job.history[0]["when"] if job.history else 0.0))
        job.complete()
    return out

