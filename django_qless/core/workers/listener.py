"""What the events on `w:<worker>` mean for a running job, and how to check one in Redis.

The engine publishes `lock_lost` (the lease expired and the job was offered elsewhere, or it
was timed out, or re-put by someone else), `canceled` and `put` there: each is a reason to
stop the job at once, its result would be refused anyway. (It also publishes an operator's
`quiet` and `stop` there.) The channels are heard by one implementation, `ChildChannels`
(supervision.py): polled by the supervisor, and by the serial worker's listener thread.
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
# How long, and for how many jobs, an abort event naming a job not running yet is kept: a
# job starts within a round trip of its pop, or after the job before it (one held ahead is
# handed back once that one passes 0.1 s); a supervisor reads status lines in batches.
_ABORT_MEMORY = 30.0
_ABORTS_KEPT = 64


def attempts_still_owned(client: Client, attempts: Sequence[tuple[str, str, str]]) -> list[bool]:
    """Tell, for each (jid, worker, token), whether that pop still holds the job or ended it.

    A worker's own view of its job lags behind Redis (a child reports the end of a job after
    it sent the completion), so "not running for this worker" alone cannot tell a job taken
    away from one the worker has just completed, failed or retried itself. The engine records
    the attempt token with the outcome it accepted, which settles the question in one read.
    `client` is the jobs' keyspace (their shard's client).
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
    """Abort events heard for jobs not running yet: popped (the reply on its way, or the
    start not reported yet) or held ahead. Such a job may start yet; when it does, Redis is
    asked whether the attempt still holds it (`attempts_still_owned`, by attempt token, so a
    job popped again after the event is not taken for the one it named)."""

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
