"""What a supervisor does with its children's `w:<child>` events: kill on a lost job.

An event (`lock_lost`, `canceled`, `put`) naming the job a child runs means the job is no
longer the child's: the supervisor kills the child (its result would be refused anyway).
After a pub/sub gap (a broken connection, or the connections closed while the worker was
idle) the supervisor asks Redis instead, for every running child's attempt (in the shard of
the child's job), once Redis has confirmed the channels again.
"""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING

from django_qless.core.accessors import REQUESTS
from django_qless.core.exceptions import QlessError
from django_qless.core.workers.listener import ABORT_EVENTS, attempts_still_owned
from django_qless.core.workers.runner import child_extra

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.workers.shards import Deployment
    from django_qless.core.workers.supervision import ChildChannels, ChildProc

__all__ = ["ChildWatch"]

log = logging.getLogger("django_qless.worker")


class ChildWatch:
    """The event side of ForkingWorker (a mixin: the supervisor owns the attributes)."""

    client: Deployment | None
    channels: ChildChannels | None
    children: dict[int, ChildProc]

    if TYPE_CHECKING:
        def obey(self, action: str) -> None: ...
        def _read_all_status(self) -> None: ...
        def _kill(self, child: ChildProc, reason: str, signum: int) -> None: ...

    # -- pubsub events -------------------------------------------------------------------------
    def _handle_events(self) -> None:
        assert self.channels is not None
        events = self.channels.poll()  # (reads the confirmations take_missed waits for)
        missed = self.channels.take_missed()
        if missed or events:
            # Status lines are read in batches: catch up so child.jid is the current job.
            self._read_all_status()
        if missed:
            self._recheck_running_jobs()
        by_name = {c.name: c for c in self.children.values()}
        for worker, payload in events:
            child = by_name.get(worker)
            event, jid = payload.get("event"), payload.get("jid")
            if child is not None and event in REQUESTS:
                self.obey(str(event))  # (a child's name stands for its whole worker)
                continue
            if child is None or event not in ABORT_EVENTS or not isinstance(jid, str):
                continue
            if jid == child.jid:
                log.warning("child %s: %s for job %s; killing it", child.name, event, jid,
                            extra=child_extra(child))
                self._kill(child, "lock_lost", signal.SIGKILL)
            else:
                # Popped but not reported yet, or held ahead: when its start is reported,
                # Redis is asked whether this attempt still holds it (_on_status).
                child.aborted.note(jid)
        if any(c.unsure for c in self.children.values()) and not self.channels.confirming():
            self._recheck_running_jobs(only_unsure=True)

    def _recheck_running_jobs(self, *, only_unsure: bool = False) -> None:
        """After a pubsub gap, kill children whose job is no longer theirs (events missed);
        `only_unsure`: only those whose job started while its events might be missed."""
        assert self.client is not None and self.channels is not None
        if self.channels.resting:
            return  # (re-checked once a job wakes the channels and Redis confirms them)
        shards: dict[int, tuple[Client, list[tuple[ChildProc, str, str]]]] = {}
        lost: list[tuple[ChildProc, str]] = []
        checked = [c for c in self.children.values() if c.unsure or not only_unsure]
        for c in checked:
            c.unsure = False
        try:
            for c in checked:
                if c.jid is not None and c.kill_reason is None:
                    shard = self.client.for_queue(c.queue or "")
                    shards.setdefault(id(shard), (shard, []))[1].append((c, c.jid, c.token or ""))
            for shard, running in shards.values():
                owned = attempts_still_owned(shard, [(j, c.name, t) for c, j, t in running])
                lost += [(c, jid) for (c, jid, _), mine in zip(running, owned, strict=True)
                         if not mine]
        except QlessError as exc:
            log.warning("could not re-check the running jobs: %s", exc)
            return
        if lost:
            self._read_all_status()  # a child that moved on since is not running that job
        for child, jid in lost:
            if child.jid == jid and child.kill_reason is None and child.pid in self.children:
                log.warning("child %s: job %s is no longer its own in Redis (taken away "
                            "unheard, or before its start was reported); killing it",
                            child.name, jid, extra=child_extra(child))
                self._kill(child, "lock_lost", signal.SIGKILL)
