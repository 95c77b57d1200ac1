"""The events on `w:<worker>` that stop a running job, and how to check one in Redis.

`lock_lost`, `canceled` and `put` each mean the job's result would be refused anyway (the
channel also carries an operator's `quiet` and `stop`); `ChildChannels` (supervision.py)
hears them for the supervisor and the serial worker.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

    from django_qless.core.client import Client

__all__ = ["ABORT_EVENTS", "HeardAborts", "attempts_still_owned"]

ABORT_EVENTS = frozenset({"lock_lost", "canceled", "put"})
# How long, and for how many jobs, an abort event naming a job not started yet is kept.
_ABORT_MEMORY = 30.0
_ABORTS_KEPT = 64


def attempts_still_owned(client: Client, attempts: Sequence[tuple[str, str, str]]) -> list[bool]:
    """Tell, for each (jid, worker, token), whether that pop still holds the job or ended it.

    "Not running for this worker" cannot tell a job taken away from one it just ended
    itself; the engine records the attempt token with the outcome it accepted.
    """
    keyspace = client.keyspace

    def read(conn: redis.Redis) -> list[Any]:
        pipe = conn.pipeline(transaction=False)
        for jid, _, _ in attempts:
            pipe.hmget(keyspace.key(f"j:{jid}"), ["state", "worker", "done"])
        return list(pipe.execute())

    rows = client.read(read) if attempts else []
    owned = []
    for (_, worker, token), (state, holder, done) in zip(attempts, rows, strict=True):
        settled = bool(token) and str(done or "").startswith(f"{token} ")
        owned.append((state == "running" and holder == worker) or settled)
    return owned


class HeardAborts:
    """Abort events heard for jobs popped or held but not started yet (checked by
    `attempts_still_owned` when they start)."""

    def __init__(self) -> None:
        self._heard: dict[str, float] = {}  # jid -> when (dict operations are atomic)

    def note(self, jid: str) -> None:
        """Remember an abort event naming `jid`."""
        now = time.monotonic()
        heard = self._heard
        if len(heard) >= _ABORTS_KEPT:
            heard = {j: t for j, t in heard.items() if now - t < _ABORT_MEMORY}
            while len(heard) >= _ABORTS_KEPT:
                del heard[next(iter(heard))]  # (the oldest)
            self._heard = heard
        heard[jid] = now

    def heard(self, jid: str) -> bool:
        """Tell (once) whether an abort event named `jid` lately."""
        when = self._heard.pop(jid, None)
        return when is not None and time.monotonic() - when < _ABORT_MEMORY

    def __len__(self) -> int:
        return len(self._heard)
